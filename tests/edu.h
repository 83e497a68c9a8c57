/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Device helpers for the DMA, BAR and lifecycle tests (on top of common.h):
 *
 *  - the QEMU edu device (1234:11e8, docs/specs/edu.txt): its DMA engine
 *    moves up to 4K between its buffer (device address 0x40000) and any
 *    IOVA below its 28-bit DMA mask, so every transfer goes through the
 *    IOMMU.  QEMU 7.2 aborts on a transfer that touches the buffer's last
 *    byte: EDU_MAX_CNT stays below it.  Each DMA runs from a 100 ms
 *    virtual-time timer: completion is polled (bounded) through the command
 *    register's START bit and the interrupt status register.
 *  - the kernel log (/dev/kmsg): the IOMMU's fault record for edu (Intel
 *    DMAR, AMD-Vi IO_PAGE_FAULT, SMMUv3 event) that appears after a given
 *    point, with a bounded wait, and the IOMMU's fault interrupts.
 *  - a PCI BAR of any vfio-pci device, mmapped through the device fd
 *    (a VM_PFNMAP range).
 */
#ifndef FOLIOMAP_TESTS_EDU_H
#define FOLIOMAP_TESTS_EDU_H

#include "common.h"
#include <time.h>

#define EDU_REG_ID		0x00
#define EDU_REG_IRQ_STATUS	0x24
#define EDU_REG_IRQ_ACK		0x64
#define EDU_DMA_SRC		0x80
#define EDU_DMA_DST		0x88
#define EDU_DMA_CNT		0x90
#define EDU_DMA_CMD		0x98
#define EDU_CMD_START		1
#define EDU_CMD_TO_RAM		2
#define EDU_CMD_IRQ		4
#define EDU_IRQ_DMA		0x100
#define EDU_BUF			0x40000ULL	/* the device's 4K buffer */
#define EDU_IOVA_MAX		(1ULL << 28)	/* edu's default DMA mask */
#define EDU_MAX_CNT		0xff0		/* never the buffer's last byte */
/*
 * How the IOMMUs' fault records name edu: DMAR "[00:05.0]" up to 6.12,
 * "[0000:00:05.0]" (with the PCI segment) on 7.x; AMD-Vi "0000:00:05.0"
 * (the device's name, or device=); this matches all of them. SMMUv3 names
 * it by stream ID, EDU_SID: its requester ID (bus << 8 | devfn), which the
 * arm64 virt machine's iommu-map passes through unchanged.
 */
#define EDU_BDF_TAG		"00:05.0"
#define EDU_SID			((5 << 3) | 0)

struct edu {
	int dev;
	volatile uint8_t *bar;
	size_t bar_size;
};

/* VFIO_BDFS from vm/run, index i (the edu device is the last one). */
static inline const char *th_bdf(struct th *t, int i)
{
	static char bdfs[8][32];
	int n = vu_env_bdfs(bdfs, 8);

	if (i < 0)
		i += n;
	if (i < 0 || i >= n)
		FAIL("VFIO_BDFS='%s': no device %d",
		     getenv("VFIO_BDFS") ? getenv("VFIO_BDFS") : "", i);
	return bdfs[i];
}

/* Device fd of a group (registered with the harness). */
static inline int th_device_fd(struct th *t, int gfd, const char *bdf)
{
	int dev = ioctl(gfd, VFIO_GROUP_GET_DEVICE_FD, bdf);

	if (dev < 0)
		FAIL("VFIO_GROUP_GET_DEVICE_FD %s: %s", bdf, strerror(errno));
	return th_own_fd(t, dev);
}

/*
 * mmap a whole BAR of a device fd (MAP_SHARED, read/write); fails the test
 * unless the region is mmappable.  *size gets the region size.  With
 * fixed != NULL the BAR is placed there (MAP_FIXED).  Not registered with
 * the harness: callers own the mapping.
 */
static inline void *th_bar_mmap(struct th *t, int dev, int index, void *fixed, size_t *size)
{
	struct vfio_region_info r = { .argsz = sizeof(r), .index = index };
	void *p;

	if (ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &r) < 0)
		FAIL("VFIO_DEVICE_GET_REGION_INFO %d: %s", index, strerror(errno));
	if (!(r.flags & VFIO_REGION_INFO_FLAG_MMAP) || !r.size)
		FAIL("region %d: flags 0x%x size 0x%llx: not mmappable", index, r.flags,
		     (unsigned long long)r.size);
	p = mmap(fixed, r.size, PROT_READ | PROT_WRITE, MAP_SHARED | (fixed ? MAP_FIXED : 0),
		 dev, r.offset);
	if (p == MAP_FAILED)
		FAIL("mmap region %d: %s", index, strerror(errno));
	*size = r.size;
	return p;
}

/* Turn on bus mastering (and memory decoding) in the command register. */
static inline void th_bus_master(struct th *t, int dev)
{
	struct vfio_region_info cfg = { .argsz = sizeof(cfg),
					.index = VFIO_PCI_CONFIG_REGION_INDEX };
	uint16_t cmd;

	ASSERT_EQ(ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &cfg), 0);
	ASSERT_EQ(pread(dev, &cmd, 2, cfg.offset + 4), 2);
	cmd |= 6;
	ASSERT_EQ(pwrite(dev, &cmd, 2, cfg.offset + 4), 2);
}

static inline void edu_open(struct th *t, int gfd, struct edu *e)
{
	size_t size = 0;

	e->dev = th_device_fd(t, gfd, th_bdf(t, -1));
	/* two statements: th_own_mem's size must be read after the mmap */
	e->bar = th_bar_mmap(t, e->dev, VFIO_PCI_BAR0_REGION_INDEX, NULL, &size);
	th_own_mem(t, (void *)e->bar, size);
	e->bar_size = size;
	ASSERT_GE(e->bar_size, 0x100);
	th_bus_master(t, e->dev);
	/* identification register: 0x010000ed (major 1, minor 0) */
	ASSERT_EQ(*(volatile uint32_t *)(e->bar + EDU_REG_ID) & 0xff, 0xed);
}

static inline void edu_wr(struct edu *e, unsigned int off, uint32_t v)
{
	*(volatile uint32_t *)(e->bar + off) = v;
}

static inline uint32_t edu_rd(struct edu *e, unsigned int off)
{
	return *(volatile uint32_t *)(e->bar + off);
}

/*
 * One transfer; every address used is below 4G (32-bit register writes).
 * The transfer raises the DMA interrupt status bit, which is acknowledged.
 * Returns 0 when the device reports completion, -ETIMEDOUT after ~5 s.
 */
static inline int edu_dma(struct edu *e, uint64_t src, uint64_t dst, uint64_t cnt,
			  uint32_t cmd)
{
	int i;

	edu_wr(e, EDU_REG_IRQ_ACK, edu_rd(e, EDU_REG_IRQ_STATUS));
	edu_wr(e, EDU_DMA_SRC, (uint32_t)src);
	edu_wr(e, EDU_DMA_DST, (uint32_t)dst);
	edu_wr(e, EDU_DMA_CNT, (uint32_t)cnt);
	edu_wr(e, EDU_DMA_CMD, cmd | EDU_CMD_START | EDU_CMD_IRQ);
	for (i = 0; i < 5000; i++) {
		if (!(edu_rd(e, EDU_DMA_CMD) & EDU_CMD_START) &&
		    (edu_rd(e, EDU_REG_IRQ_STATUS) & EDU_IRQ_DMA)) {
			edu_wr(e, EDU_REG_IRQ_ACK, EDU_IRQ_DMA);
			return 0;
		}
		usleep(1000);
	}
	return -ETIMEDOUT;
}

/* RAM at iova -> edu buffer at offset off (cnt bytes). */
#define EDU_FROM_RAM(e, iova, off, cnt) do {					\
	ASSERT_LT((iova) + (cnt), EDU_IOVA_MAX);				\
	ASSERT_LE((off) + (cnt), EDU_MAX_CNT);					\
	ASSERT_EQ(edu_dma(e, iova, EDU_BUF + (off), cnt, 0), 0);		\
} while (0)

/* edu buffer at offset off -> RAM at iova (cnt bytes). */
#define EDU_TO_RAM(e, off, iova, cnt) do {					\
	ASSERT_LT((iova) + (cnt), EDU_IOVA_MAX);				\
	ASSERT_LE((off) + (cnt), EDU_MAX_CNT);					\
	ASSERT_EQ(edu_dma(e, EDU_BUF + (off), iova, cnt, EDU_CMD_TO_RAM), 0);	\
} while (0)

/* Container of the given type with the edu group alone. */
static inline int edu_container(struct th *t, int type, int *gfd)
{
	int g = th_edu_group(t);

	return th_container_of(t, type, &g, 1, gfd);
}

/* ------------------------------------------------------------------ */
/* the kernel log */

/* /dev/kmsg positioned after the last record: later records only. */
static inline int kmsg_open(struct th *t)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		FAIL("open /dev/kmsg: %s", strerror(errno));
	if (lseek(fd, 0, SEEK_END) < 0)
		FAIL("lseek /dev/kmsg: %s", strerror(errno));
	return th_own_fd(t, fd);
}

static inline double mono_now(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec + now.tv_nsec / 1e9;
}

/*
 * The next record of the kernel log into msg (its text, after the
 * header), waiting until @deadline (mono_now() time); false when none came
 * in time or the log cannot be read.
 */
static inline bool kmsg_next(int fd, char *msg, size_t size, double deadline)
{
	char rec[2048];

	for (;;) {
		ssize_t len = read(fd, rec, sizeof(rec) - 1);

		if (len > 0) {
			const char *m;

			rec[len] = '\0';
			m = strchr(rec, ';');
			m = m ? m + 1 : rec;
			snprintf(msg, size, "%s", m);
			return true;
		}
		if (len < 0 && errno == EPIPE)	/* overwritten records: go on */
			continue;
		if (len < 0 && errno != EAGAIN && errno != EINTR)
			return false;
		if (mono_now() > deadline)
			return false;
		usleep(5000);
	}
}

/*
 * Wait up to ms milliseconds for a record containing every non-NULL
 * needle; the records read are consumed.  Returns true when found.
 */
static inline bool kmsg_wait(int fd, int ms, const char *n1, const char *n2, const char *n3)
{
	double deadline = mono_now() + ms / 1000.0;
	char msg[2048];

	while (kmsg_next(fd, msg, sizeof(msg), deadline))
		if ((!n1 || strstr(msg, n1)) && (!n2 || strstr(msg, n2)) &&
		    (!n3 || strstr(msg, n3)))
			return true;
	return false;
}

/* The hex number after @key in @msg, or false. */
static inline bool kmsg_hex(const char *msg, const char *key, unsigned long long *v)
{
	const char *p = strstr(msg, key);

	return p && sscanf(p + strlen(key), "%llx", v) == 1;
}

/*
 * Intel: "DMAR: [DMA Write NO_PASID] Request device [00:05.0] fault addr
 * 0x... " ("[0000:00:05.0]" on 7.x), the page's address.
 */
static inline bool dmar_fault_seen(int kfd, uint64_t page, bool write, int ms)
{
	char addr[64];

	snprintf(addr, sizeof(addr), "fault addr 0x%llx ", (unsigned long long)page);
	return kmsg_wait(kfd, ms, write ? "DMA Write" : "DMA Read", EDU_BDF_TAG, addr);
}

/*
 * AMD-Vi: "vfio-pci 0000:00:05.0: AMD-Vi: Event logged [IO_PAGE_FAULT
 * domain=0x0002 address=0x1000000 flags=0x0020]" ("device=0000:00:05.0"
 * in the brackets when the driver has no data for the device): the
 * address of the access, flags bit 5 (RW) set for a write.
 */
#define AMDVI_EVENT_FLAG_RW	0x20
static inline bool amdvi_fault_seen(int kfd, uint64_t page, bool write, int ms)
{
	double deadline = mono_now() + ms / 1000.0;
	unsigned long long addr, flags;
	char msg[2048];

	while (kmsg_next(kfd, msg, sizeof(msg), deadline)) {
		if (!strstr(msg, "IO_PAGE_FAULT") || !strstr(msg, EDU_BDF_TAG) ||
		    !kmsg_hex(msg, "address=0x", &addr) || !kmsg_hex(msg, "flags=0x", &flags))
			continue;
		if ((addr & ~(SZ_4K - 1)) == page && !!(flags & AMDVI_EVENT_FLAG_RW) == write)
			return true;
	}
	return false;
}

/*
 * SMMUv3: "arm-smmu-v3 <smmu>: event 0x10 received:" and then the event's
 * four double words, one record each ("\t0x%016llx"; later kernels add a
 * decoded summary after them). A translation (0x10), address size (0x11),
 * access (0x12) or permission (0x13) fault: double word 0 holds the stream
 * ID in bits 63:32, double word 1 RnW in bit 35 (1: a read), double word
 * 2 the input address.
 */
/*
 * One double word of an SMMUv3 event dump: "\t0x%016llx", which /dev/kmsg
 * gives with the tab escaped ("\x09").
 */
static inline bool kmsg_dword(const char *msg, unsigned long long *v)
{
	const char *p = strstr(msg, "\\x090x");

	if (p)
		p += 4;
	else if ((p = strstr(msg, "\t0x")))
		p += 1;
	return p && sscanf(p, "0x%llx", v) == 1;
}

static inline bool smmuv3_fault_seen(int kfd, uint64_t page, bool write, int ms)
{
	double deadline = mono_now() + ms / 1000.0;
	unsigned long long dw[4], id;
	char msg[2048];
	int n = -1;

	while (kmsg_next(kfd, msg, sizeof(msg), deadline)) {
		if (kmsg_hex(msg, "event 0x", &id) && strstr(msg, " received")) {
			n = id >= 0x10 && id <= 0x13 ? 0 : -1;
			continue;
		}
		if (n < 0)
			continue;
		if (!kmsg_dword(msg, &dw[n])) {
			n = -1;		/* not the dump of this event */
			continue;
		}
		if (++n < 4)
			continue;
		n = -1;
		if ((dw[0] >> 32) == EDU_SID && (dw[2] & ~(SZ_4K - 1)) == page &&
		    !((dw[1] >> 35) & 1) == write)
			return true;
	}
	return false;
}

/*
 * The IOMMU's fault record for an edu access to the page of @iova, within
 * @ms: write, the device wrote memory (edu -> RAM).
 */
static inline bool iommu_fault_seen(int kfd, uint64_t iova, bool write, int ms)
{
	uint64_t page = iova & ~(SZ_4K - 1);

	switch (th_iommu()) {
	case VU_IOMMU_INTEL:
		return dmar_fault_seen(kfd, page, write, ms);
	case VU_IOMMU_AMD:
		return amdvi_fault_seen(kfd, page, write, ms);
	case VU_IOMMU_SMMUV3:
		return smmuv3_fault_seen(kfd, page, write, ms);
	default:
		return false;
	}
}

/*
 * Why the IOMMU's fault reports cannot be checked in this guest, or NULL
 * when they can (and must be found). QEMU's emulated AMD-Vi (its PCI
 * function has QEMU's subsystem vendor, 0x1af4) logs no IO_PAGE_FAULT
 * event: a device write to an unmapped IOVA or to a read-only mapping is
 * refused, but no event-log interrupt is raised (the AMD-Vi line of
 * /proc/interrupts stays 0) and nothing reaches the kernel log (QEMU 7.2;
 * tests/README.md). A real AMD-Vi reports them and is checked.
 */
static inline const char *iommu_faults_unreported(void)
{
	FILE *f;
	unsigned int vendor = 0;

	if (th_iommu() != VU_IOMMU_AMD)
		return NULL;
	f = fopen("/sys/class/iommu/ivhd0/device/subsystem_vendor", "r");
	if (f) {
		if (fscanf(f, "%x", &vendor) != 1)
			vendor = 0;
		fclose(f);
	}
	if (vendor != 0x1af4)
		return NULL;
	return "QEMU's emulated AMD-Vi reports no I/O page fault (no event-log interrupt, "
	       "no IO_PAGE_FAULT record): the refused accesses and the memory were checked, "
	       "the fault reports were not";
}

/*
 * The IOMMU's fault handler is rate limited. DMAR: 10 printk per 5 s
 * window, and each fault interrupt spends three (the status line, the
 * record, and the check that ends its loop), so only 3 fault records are
 * printed per window; AMD-Vi (one line per fault) and SMMUv3 (one event
 * dump per fault) allow 10 per 5 s.  Probes that must find their record
 * wait for their turn (fault_pace_wait), then push the next turn 1.75 s
 * away on DMAR, 1 s on the others (room for two records a probe);
 * transfers that fault an unknown number of times push it 5.1 s away
 * (past any window they touched).  The next turn is kept in a file, for
 * every test process.  Where no fault is reported there is nothing to pace.
 */
#define FAULT_PACE_FILE	"/tmp/.foliomap-fault-pace"

static inline double fault_pace_next(void)
{
	double next = 0;
	FILE *f = fopen(FAULT_PACE_FILE, "r");

	if (f) {
		if (fscanf(f, "%lf", &next) != 1)
			next = 0;
		fclose(f);
	}
	return next;
}

/* Seconds from one probe's turn to the next (see above). */
static inline double fault_pace_probe(void)
{
	return th_iommu() == VU_IOMMU_INTEL ? 1.75 : 1.0;
}

static inline void fault_pace_wait(void)
{
	double wait;

	if (iommu_faults_unreported())
		return;
	wait = fault_pace_next() - mono_now();

	if (wait > 0)
		usleep((useconds_t)(wait * 1e6));
}

static inline void fault_pace_after(double seconds)
{
	double next = mono_now() + seconds;
	FILE *f;

	if (iommu_faults_unreported() || fault_pace_next() > next)
		return;
	f = fopen(FAULT_PACE_FILE, "w");
	if (f) {
		fprintf(f, "%.3f\n", next);
		fclose(f);
	}
}

/*
 * The IOMMU's fault interrupts so far: the /proc/interrupts lines of its
 * fault (event queue) interrupt, "DMAR-MSI" (Intel), "AMD-Vi" (AMD),
 * "arm-smmu-v3-evtq" (SMMUv3).
 */
static inline long long fault_irqs(void)
{
	const char *name;
	char line[1024];
	long long sum = 0;
	FILE *f;

	switch (th_iommu()) {
	case VU_IOMMU_INTEL:
		name = "DMAR";
		break;
	case VU_IOMMU_AMD:
		name = "AMD-Vi";
		break;
	case VU_IOMMU_SMMUV3:
		name = "evtq";
		break;
	default:
		return -1;
	}
	f = fopen("/proc/interrupts", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':'), *end;

		if (!p || !strstr(line, name))
			continue;
		for (p++;; p = end) {
			long long v = strtoll(p, &end, 10);

			if (end == p)
				break;
			sum += v;
		}
	}
	fclose(f);
	return sum;
}

/* Wait up to ms for the fault interrupt count to pass n0. */
static inline long long fault_irqs_after(long long n0, int ms)
{
	long long n;
	int i;

	for (i = 0; i <= ms / 5; i++) {
		n = fault_irqs();
		if (n > n0)
			return n;
		usleep(5000);
	}
	return n;
}

/*
 * Set by a fault check that could not be made (iommu_faults_unreported());
 * EDU_FAULTS_DONE() at the end of the test then SKIPs with the reason,
 * after every other check ran (a failed one still fails the test). Each
 * test runs in a process of its own.
 */
static const char *edu_faults_unchecked __attribute__((unused));

/* The fault interrupt and the record of an access that was refused. */
#define EDU_EXPECT_FAULT(kfd, _n0, iova, write) do {				\
	const char *_why = iommu_faults_unreported();				\
	if (_why) {								\
		edu_faults_unchecked = _why;					\
		break;								\
	}									\
	EXPECT_GT(fault_irqs_after(_n0, 3000), _n0);				\
	EXPECT_TRUE(iommu_fault_seen(kfd, iova, write, 3000));			\
} while (0)

#define EDU_FAULTS_DONE() do {							\
	if (edu_faults_unchecked)						\
		SKIP("%s", edu_faults_unchecked);				\
} while (0)

/*
 * A 4-byte device write (edu buffer offset 0 -> iova) or read (iova -> edu
 * buffer offset 0) that the IOMMU must refuse: one translation, one fault
 * interrupt, and the fault record for edu, that page and that direction.
 * (A longer transfer into an unreachable page is refused one 4-8 byte
 * access at a time and raises an unknown number of fault interrupts.)
 */
#define EDU_FAULT_PROBE(e, kfd, iova, write) do {				\
	long long _n0;								\
	fault_pace_wait();							\
	_n0 = fault_irqs();							\
	if (write)								\
		EDU_TO_RAM(e, 0, iova, 4);					\
	else									\
		EDU_FROM_RAM(e, iova, 0, 4);					\
	EDU_EXPECT_FAULT(kfd, _n0, iova, write);				\
	fault_pace_after(fault_pace_probe());					\
} while (0)

/* A whole transfer the IOMMU must refuse: it raises fault interrupts. */
#define EDU_FAULTING_DMA(e, src, dst, cnt, cmd) do {				\
	long long _n0 = fault_irqs();						\
	ASSERT_EQ(edu_dma(e, src, dst, cnt, cmd), 0);				\
	if (iommu_faults_unreported())						\
		edu_faults_unchecked = iommu_faults_unreported();		\
	else									\
		EXPECT_GT(fault_irqs_after(_n0, 3000), _n0);			\
	fault_pace_after(5.1);							\
} while (0)

#endif
