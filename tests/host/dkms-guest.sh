#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# dkms-guest.sh ROOT TESTS -- guest side of tests/host/t_dkms and t_deb
# (busybox sh), in a guest booted with vm/run --backend none and the system
# root of the kernel (the host's /, or the Debian 13 build root) shared at
# /host (--share-at).  ROOT and TESTS are paths in the guest.
#
# ROOT is a directory prepared by t_dkms: ROOT/lib/modules/<rel>/ holds
# the modules.* files that "make dkms-install" produced and the foliomap.ko
# it installed (updates/dkms/); ROOT/etc/ the modprobe.d and modules-load.d
# files it installed.  They are mounted where an installed system has them,
# and the boot is emulated like systemd-modules-load: each module listed in
# ROOT/etc/modules-load.d/*.conf is loaded with the real modprobe (kmod, run
# from the host's file system in a chroot: busybox modprobe ignores softdep
# and install commands).  TAP output.
root=$1 tests=$2
h=/host
mount -o rbind /dev $h/dev && mount -t proc proc $h/proc && mount -t sysfs sysfs $h/sys ||
	{ echo "1..0 # SKIP cannot prepare the chroot"; exit 1; }
# The installed system, as the guest's chroot sees it: this kernel's module
# tree with the installation's modules.* files and updates/ (a tmpfs over
# the host's directory, with the kernel's own modules bound back in) and the
# installation's modprobe.d.
k=$(uname -r)
mkdir -p /tmp/orig-modules
mount -o bind "$h/lib/modules/$k" /tmp/orig-modules &&
	mount -t tmpfs tmpfs "$h/lib/modules/$k" &&
	cp -a "$root/lib/modules/$k/." "$h/lib/modules/$k/" &&
	mkdir -p "$h/lib/modules/$k/kernel" &&
	mount -o bind /tmp/orig-modules/kernel "$h/lib/modules/$k/kernel" &&
	mount -o bind "$root/etc/modprobe.d" "$h/etc/modprobe.d" ||
	{ echo "1..0 # SKIP cannot prepare the installed module tree"; exit 1; }
mp() { chroot $h /sbin/modprobe "$@"; }
serve() { "$tests/bin/fm_serve" 2>&1; }
n=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
nok() { n=$((n + 1)); echo "not ok $n $*"; }
check() { # check DESCRIPTION COMMAND...
	d=$1; shift
	if "$@"; then ok "$d"; else nok "$d"; fi
}
loaded() { [ -d "/sys/module/$1" ]; }

echo "1..8"
check "before boot: no type1 driver loaded" sh -c '! [ -d /sys/module/vfio_iommu_type1 ] && ! [ -d /sys/module/foliomap ]'

# Boot: what systemd-modules-load does with modules-load.d.
for f in "$root"/etc/modules-load.d/*.conf; do
	sed 's/#.*//' "$f" | while read -r m; do
		[ -n "$m" ] || continue
		echo "# boot: modprobe $m"
		mp "$m" || echo "# modprobe $m failed"
	done
done
check "after boot: vfio_iommu_type1 and foliomap loaded" sh -c '[ -d /sys/module/vfio_iommu_type1 ] && [ -d /sys/module/foliomap ]'
want=$(chroot $h /sbin/modinfo -F srcversion foliomap 2>/dev/null)
got=$(cat /sys/module/foliomap/srcversion 2>/dev/null)
echo "# foliomap srcversion: installed '$want', loaded '$got'"
check "the loaded foliomap is the DKMS-installed one" [ -n "$want" -a "$want" = "$got" ]
s=$(serve); echo "# new container: $s"
check "after boot: foliomap serves new containers" [ "$s" = foliomap ]
dmesg | grep -q "foliomap: serving new VFIO type1 containers" && ok "dmesg says foliomap serves" || nok "dmesg says foliomap serves"

mp -r foliomap || echo "# modprobe -r foliomap failed"
check "modprobe -r foliomap: foliomap gone, vfio_iommu_type1 stays" sh -c '! [ -d /sys/module/foliomap ] && [ -d /sys/module/vfio_iommu_type1 ]'
s=$(serve); echo "# new container: $s"
check "after modprobe -r foliomap: stock serves new containers" [ "$s" = vfio_iommu_type1 ]

mp foliomap || echo "# modprobe foliomap failed"
s=$(serve); echo "# new container: $s"
check "modprobe foliomap again: foliomap serves" [ "$s" = foliomap ]
