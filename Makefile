# SPDX-License-Identifier: GPL-2.0-only
#
# make              build the module (for KERNEL) and the userspace tools
# make check        install what is needed, build, boot guests, run every test
#                   against stock type1 and foliomap on every kernel of KERNELS
#                   (default 6.12 and 6.1; KERNEL=6.1 alone), plus the host-side
#                   tests; ends "N passed, N failed"
# make fuzz [SEED=1] [STEPS=5000]  differential fuzzing: one stock guest runs the
#                   seeded ioctl sequence on stock type1, then on foliomap (tests/t_fuzz.c)
# make bench        the seed's table, stock and foliomap side by side in a guest
# make bench-scale  map/unmap time against buffer size, both backends (bench/README.md)
# make bench-vmm    a real VMM (QEMU + vfio-pci) start/stop time, both backends
#
KERNEL ?= 6.12
# make check: every kernel here, or just KERNEL when it is given.
KERNELS ?= $(if $(filter command line environment,$(origin KERNEL)),$(KERNEL),6.12 6.1)

# Resolved lazily: the kernel may only be installed by vm/install-deps.
KVER = $(shell vm/kver $(KERNEL))

all: module tools

deps:
	vm/install-deps $(KERNEL)

# Objects in build/kmod-<kver>/ (one per kernel, side by side); the .ko is
# also copied to kmod/foliomap.ko, the one to insmod by hand and for bench.
module:
	@test -n "$(KVER)" || { echo "no Debian $(KERNEL) kernel installed: run make deps" >&2; exit 1; }
	$(MAKE) -C kmod KVER=$(KVER) OUT=$(CURDIR)/build/kmod-$(KVER)
	cp build/kmod-$(KVER)/foliomap.ko kmod/foliomap.ko

tools:
	$(MAKE) -C tools
	$(MAKE) -C tests KERNEL=$(KERNEL)

# tests/check builds the module and the tests for each kernel itself, and
# counts a failed build as a failed test.
check:
	for k in $(KERNELS); do vm/install-deps $$k || exit 1; done
	tests/check --host $(foreach k,$(KERNELS),--kernel $(k))

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

bench-vmm: deps
	$(MAKE) module
	$(MAKE) -C tools
	bench/vmm --kernel $(KERNEL)

clean:
	-$(MAKE) -C kmod clean KVER=$(KVER)
	rm -rf build/kmod-* build/emu-*
	$(MAKE) -C tools clean
	$(MAKE) -C tests clean

.PHONY: all deps module tools check fuzz bench bench-scale bench-vmm clean
