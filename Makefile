# SPDX-License-Identifier: GPL-2.0-only
#
# make              build the module (for KERNEL) and the userspace tools
# make check        install what is needed, build, boot guests, run the tests
#                   against stock type1 and foliomap in every combination of KERNELS
#                   (default 6.12 6.1 6.12-rt 6.12-deb13 7.x 6.12/amd 6.12-arm64; KERNEL=7.x
#                   alone): all of them on 6.12 with VT-d, a set elsewhere (tests/README.md),
#                   plus the host-side tests (DKMS install, .deb, style); ends "N passed, N failed"
# make check-all    the same with every test in every combination
# make check-scale  t_scale alone (also part of make check), both backends, every
#                   kernel of KERNELS; FOLIOMAP_SCALE_2M=262144 FOLIOMAP_SCALE_4G=256
#                   for the full scale (tests/README.md)
# make check-debug  the guest tests, both backends (BACKEND=stock|foliomap: one), on
#                   the debug kernel 6.12-debug: Debian's 6.12 with KASAN, lockdep,
#                   kmemleak, UBSAN, fault injection (ONLY="t_a t_b": those programs)
# make debug-kernel build that kernel (vm/debug-kernel; once, and again when
#                   linux-source-6.12, Debian's config or vm/debug-6.12.config change)
# make style        checkpatch.pl --strict over kmod/ and tests/emu (STRICT=0: default level)
# make install / uninstall          plain module install for KVER (default: running)
# make dkms-install / dkms-uninstall  DKMS install (rebuilt for each new kernel)
# make deb          the Debian source package (debian/, dpkg-buildpackage with debhelper
#                   and dh-dkms; build/deb/) and foliomap-dkms_<version>_all.deb here
# make fuzz [SEED=1] [STEPS=5000]  differential fuzzing: one stock guest runs the
#                   seeded ioctl sequence on stock type1, then on foliomap (tests/t_fuzz.c)
# make bench        the seed's table, stock and foliomap side by side in a guest
#                   (MODES default: thp populate hugetlb2m memfd2m bar hugetlb1g memfd1g
#                   bar-64g; KERNEL=6.12-rt, IOMMU=amd: that kernel, the AMD IOMMU), then the
#                   workload matrix (tools/matrix-bench; MATRIX=0 skips it,
#                   ROWS="small churn" picks rows); prints "REGRESSION: <row>
#                   <ratio>" for every ratio below 0.95 and then exits non-zero;
#                   writes build/bench/ only (git status stays clean)
# make bench-publish [RUN=build/bench/<run>.json]  a clean reference run of
#                   bench, bench-scale or bench-vmm becomes bench/results/*latest.*
# make bench-scale  map/unmap time against buffer size, both backends (bench/README.md)
# make bench-latency the longest stretch without a preemption point in a 4 GiB
#                   map, unmap and container close, stock and foliomap (KERNEL=6.12-rt:
#                   Debian's PREEMPT_RT kernel; bench/latency)
# make bench-vmm    a real VMM (QEMU + vfio-pci) start/stop time, both backends,
#                   RAM preallocated and (the -lazy backings) faulted in by MAP_DMA
#
KERNEL ?= 6.12
# make check: every combination here (a kernel, /amd: behind AMD-Vi; 6.12-arm64
# behind an SMMUv3), or just KERNEL when it is given.
KERNELS ?= $(if $(filter command line environment,$(origin KERNEL)),$(KERNEL),6.12 6.1 6.12-rt 6.12-deb13 7.x 6.12/amd 6.12-arm64)
# The kernels to install (6.12/amd is 6.12).
KERNEL_PKGS = $(sort $(foreach k,$(KERNELS),$(firstword $(subst /, ,$(k)))))

# Resolved lazily: the kernel may only be installed by vm/install-deps.
KVER = $(shell vm/kver $(KERNEL))

all: module tools

deps:
	vm/install-deps $(KERNEL)

# Objects in build/kmod-<kver>/ (one per kernel, side by side); the .ko is
# also copied to kmod/foliomap.ko, the one to insmod by hand and for bench.
module:
	@test -n "$(KVER)" || { echo "no Debian $(KERNEL) kernel installed: run make deps" >&2; exit 1; }
	cd kmod && ../vm/kmake $(KERNEL) KVER=$(KVER) OUT=$(CURDIR)/build/kmod-$(KVER)
	cp build/kmod-$(KVER)/foliomap.ko kmod/foliomap.ko

tools:
	$(MAKE) -C tools KERNEL=$(KERNEL)
	$(MAKE) -C tests KERNEL=$(KERNEL)

# tests/check builds the module and the tests for each kernel itself, and
# counts a failed build as a failed test.
# make check: each combination's set of programs (tests/README.md, "What
# make check covers"); make check-all: every program in every combination.
check:
	for k in $(KERNEL_PKGS); do vm/install-deps $$k || exit 1; done
	tests/check --host --sets $(foreach k,$(KERNELS),--kernel $(k))

check-all:
	for k in $(KERNEL_PKGS); do vm/install-deps $$k || exit 1; done
	tests/check --host $(foreach k,$(KERNELS),--kernel $(k))

check-scale:
	for k in $(KERNEL_PKGS); do vm/install-deps $$k || exit 1; done
	tests/check --only t_scale $(foreach k,$(KERNELS),--kernel $(k))

# The debug kernel (build/debug-6.12/, vm/README.md) and the guest tests on
# it; make check does not run them.
debug-kernel:
	vm/debug-kernel

BACKEND ?= both
check-debug: debug-kernel
	tests/check --kernel 6.12-debug --backend $(BACKEND) $(if $(ONLY),--only "$(ONLY)")

# Host installation (root), for the kernel KVER=... given on the command
# line, else the running one. Both kinds also install
# /etc/modprobe.d/foliomap.conf (foliomap follows vfio_iommu_type1) and
# /etc/modules-load.d/foliomap.conf (vfio_iommu_type1 loads at boot).
IKVER = $(if $(filter command line environment,$(origin KVER)),$(KVER),$(shell uname -r))
DKMS_VERSION = $(shell sed -n 's/^PACKAGE_VERSION="\(.*\)"$$/\1/p' kmod/dkms.conf)
DKMS_SRC = /usr/src/foliomap-$(DKMS_VERSION)
KMOD_SOURCES = $(filter-out %.mod.c,$(wildcard kmod/*.c)) $(wildcard kmod/*.h) \
	kmod/Kbuild kmod/Makefile kmod/dkms.conf
MODPROBE_CONF = /etc/modprobe.d/foliomap.conf
MODULES_LOAD_CONF = /etc/modules-load.d/foliomap.conf

install-conf:
	install -D -m 644 kmod/foliomap-modprobe.conf $(MODPROBE_CONF)
	install -D -m 644 kmod/foliomap-modules-load.conf $(MODULES_LOAD_CONF)

uninstall-conf:
	rm -f $(MODPROBE_CONF) $(MODULES_LOAD_CONF)

# Plain install: /lib/modules/<kver>/updates/foliomap.ko, then depmod.
install:
	$(MAKE) -C kmod KVER=$(IKVER) OUT=$(CURDIR)/build/kmod-$(IKVER)
	$(MAKE) -C /lib/modules/$(IKVER)/build M=$(CURDIR)/build/kmod-$(IKVER) \
		INSTALL_MOD_DIR=updates modules_install
	depmod -a $(IKVER)
	$(MAKE) install-conf

uninstall:
	rm -f /lib/modules/$(IKVER)/updates/foliomap.ko /lib/modules/$(IKVER)/updates/foliomap.ko.*
	depmod -a $(IKVER)
	$(MAKE) uninstall-conf

# DKMS: sources in /usr/src/foliomap-<version>, built and installed for KVER
# now (/lib/modules/<kver>/updates/dkms/) and for every kernel installed later.
dkms-install:
	@command -v dkms >/dev/null || { echo "dkms not found: apt-get install dkms" >&2; exit 1; }
	-dkms status -m foliomap -v $(DKMS_VERSION) | grep -q . && dkms remove -m foliomap -v $(DKMS_VERSION) --all
	rm -rf $(DKMS_SRC)
	install -d $(DKMS_SRC)
	install -m 644 $(KMOD_SOURCES) $(DKMS_SRC)/
	dkms add -m foliomap -v $(DKMS_VERSION)
	dkms install -m foliomap -v $(DKMS_VERSION) -k $(IKVER)
	$(MAKE) install-conf

# Debian package: the source package of debian/ in build/deb/ and
# foliomap-dkms_<version>_all.deb here (pkg/mkdeb); then
# "apt install ./foliomap-dkms_<version>_all.deb", "apt remove foliomap-dkms".
deb:
	pkg/mkdeb $(CURDIR)

dkms-uninstall:
	-dkms remove -m foliomap -v $(DKMS_VERSION) --all
	rm -rf $(DKMS_SRC)
	$(MAKE) uninstall-conf

# Style gate: the kernel's checkpatch.pl (from Debian's linux-source-6.12,
# installed with apt when missing) over the module and tests/emu, --strict.
# Ignored: LINUX_VERSION_CODE (the compat.h files exist to tell the
# supported kernels apart; out of tree there is no "version merged into")
# and CONSTANT_COMPARISON (its false positive on LINUX_VERSION_CODE <
# KERNEL_VERSION(...)). STRICT=0 checks the default level only.
STRICT ?= 1
CHECKPATCH = build/checkpatch/checkpatch.pl
CHECKPATCH_FLAGS = --no-tree --file --terse --quiet --max-line-length=100 \
	--ignore LINUX_VERSION_CODE,CONSTANT_COMPARISON $(if $(filter 1,$(STRICT)),--strict)
STYLE_FILES = $(filter-out %.mod.c,$(wildcard kmod/*.c tests/emu/*.c)) \
	$(wildcard kmod/*.h tests/emu/*.h)

$(CHECKPATCH):
	@src=/usr/src/linux-source-6.12.tar.xz; \
	if [ ! -f $$src ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
			--no-install-recommends linux-source-6.12 >/dev/null || \
		{ apt-get -o DPkg::Lock::Timeout=600 update -qq && \
		  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
			--no-install-recommends linux-source-6.12 >/dev/null; } || exit 1; \
	fi; \
	mkdir -p $(dir $@) && \
	tar -xJf $$src -C $(dir $@) --strip-components=2 \
		linux-source-6.12/scripts/checkpatch.pl linux-source-6.12/scripts/spelling.txt \
		linux-source-6.12/scripts/const_structs.checkpatch

style: $(CHECKPATCH)
	@out=$$(perl $(CHECKPATCH) $(CHECKPATCH_FLAGS) $(STYLE_FILES)); rc=$$?; \
	printf '%s\n' "$$out" | grep -v '^total: 0 errors, 0 warnings, 0 checks'; \
	[ $$rc -eq 0 ] && echo "style: checkpatch.pl clean ($(words $(STYLE_FILES)) files)"; \
	exit $$rc

SEED ?= 1
STEPS ?= 5000
fuzz: deps
	$(MAKE) all
	vm/run --kernel $(KERNEL) --backend stock --share $(CURDIR) -- \
		$(CURDIR)/tests/bin/t_fuzz --diff --seed $(SEED) --steps $(STEPS)

bench: deps
	$(MAKE) all
	bench/run --kernel $(KERNEL)

bench-scale: deps
	$(MAKE) all
	bench/scale --kernel $(KERNEL)

# Copies a reference run from build/bench/ into bench/results/ (RUN=...;
# default: the newest of make bench); make bench itself changes no file in git.
bench-publish:
	bench/publish $(RUN)

bench-latency: deps
	$(MAKE) all
	bench/latency --kernel $(KERNEL)

bench-vmm: deps
	$(MAKE) module
	$(MAKE) -C tools
	bench/vmm --kernel $(KERNEL)

clean:
	-$(MAKE) -C kmod clean KVER=$(KVER)
	rm -rf build/kmod-* build/emu-*
	$(MAKE) -C tools clean
	$(MAKE) -C tests clean

.PHONY: all deps module tools check check-all check-scale check-debug debug-kernel fuzz bench bench-publish bench-scale bench-latency bench-vmm clean \
	install uninstall install-conf uninstall-conf dkms-install dkms-uninstall style deb
