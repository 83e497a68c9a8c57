// SPDX-License-Identifier: GPL-2.0-only
/*
 * The fault-injection sweep, in the style of iommufd's iommufd_fail_nth:
 * every uAPI operation that allocates or can fail inside is run with the
 * n-th failure point of the calling task failing (/proc/thread-self/
 * fail-nth: slab and page allocations, user copies and, in foliomap's test
 * build, its own points: GUP failing or returning short, iommu_map()
 * failing; kmod/inject.h), for n = 1, 2, ... until the call succeeds
 * without reaching the n-th point.
 *
 * Each n runs in a process of its own: the operation's setup (a container,
 * memory, mappings, pins) without injection, a snapshot, the one ioctl
 * with fail-nth armed, a second snapshot. A call that fails must give
 * -ENOMEM or -EFAULT and leave everything as it was: the pins
 * (nr_foll_pin_*), VmLck, the container's mapping count (DMA_AVAIL), the
 * fm_emu device's pin records, and the IOMMU's own page table for a device
 * of the container (intel-iommu's debugfs: every leaf, with its physical
 * address and permissions). A call that succeeds although a point failed
 * (a fallback absorbed it) must have done exactly what the same call does
 * without injection (n = 0, checked against the expected figures): the
 * same counter changes and the same IOVA leaves, sizes and permissions.
 * The process then closes everything, and nothing may stay pinned or
 * charged.
 *
 * foliomap's helper threads never see the caller's fail-nth: one more
 * sweep fails the k-th helper batch instead (debugfs fail_foliomap_helper:
 * probability 100, times 1, space k), for k = 1, 2, ... until a map needs
 * no k-th batch.
 *
 * Needs a kernel with fault injection (the debug kernel, make check-debug);
 * elsewhere the program plans no tests (1..0).
 */
#define TH_TIMEOUT	900	/* per operation; the debug kernel multiplies it */

#include <sys/ioctl.h>

#include "edu.h"
#include "emu_dev.h"
#include "fmstats.h"

#define FAIL_NTH	"/proc/thread-self/fail-nth"
#define MAX_POINTS	4000	/* a sweep longer than this is a bug of the sweep */
#define M1		0x100000ULL	/* 1 MiB */
#define M4		(4 * M1)
#define PAR_SIZE	(48 * M1)	/* helpers join after the first 16 MiB */
#define IOMMU_R		1
#define IOMMU_W		2
#define EMU_PAGES	8

/* ------------------------------------------------------------------ */
/* the fault-injection knobs */

static int fi_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, val, strlen(val));
	close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -EIO;
}

/*
 * fail-nth counts every failure point of the task, but the attributes
 * still filter: slab and page allocations that may sleep are ignored by
 * default, and so are page allocations below order 1. Let them all fail,
 * except the pages of user memory (__GFP_HIGHMEM: a fault that cannot get
 * one fails the same way as GUP's own point) and quietly.
 */
static void fi_setup(struct th *t)
{
	static const char *const knobs[][2] = {
		{ "failslab/ignore-gfp-wait", "N" },
		{ "failslab/verbose", "0" },
		{ "fail_page_alloc/ignore-gfp-wait", "N" },
		{ "fail_page_alloc/ignore-gfp-highmem", "Y" },
		{ "fail_page_alloc/min-order", "0" },
		{ "fail_page_alloc/verbose", "0" },
		{ "fail_usercopy/verbose", "0" },
	};
	char path[256];
	size_t i;
	int ret;

	th_mount(t, "debugfs", DEBUGFS);
	for (i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
		snprintf(path, sizeof(path), DEBUGFS "/%s", knobs[i][0]);
		ret = fi_write(path, knobs[i][1]);
		if (ret)
			FAIL("%s: %s", path, strerror(-ret));
	}
	if (is_foliomap()) {
		if (access(DEBUGFS "/fail_foliomap", F_OK))
			FAIL("foliomap has no fail points: not the test build (FOLIOMAP_TEST=1)");
		ASSERT_EQ(fi_write(DEBUGFS "/fail_foliomap/verbose", "0"), 0);
		ASSERT_EQ(fi_write(DEBUGFS "/fail_foliomap_helper/verbose", "0"), 0);
		ASSERT_EQ(fi_write(DEBUGFS "/fail_foliomap_helper/probability", "0"), 0);
	}
}

static int fi_fd = -1;

/* The next @n-th failure point of this thread fails. */
static void fi_arm(struct th *t, unsigned int n)
{
	char buf[16];
	int len = snprintf(buf, sizeof(buf), "%u", n);

	ASSERT_EQ(pwrite(fi_fd, buf, len, 0), len);
}

/*
 * Disarm; was the armed point reached? Reading fail-nth is a user copy,
 * itself a point: with one left it fails (-EFAULT), which means the call
 * did not reach its point either.
 */
static bool fi_disarm(void)
{
	char buf[16] = "";
	ssize_t n = pread(fi_fd, buf, sizeof(buf) - 1, 0);

	if (pwrite(fi_fd, "0", 1, 0) != 1 && errno != EFAULT)
		th_diag("fail-nth: cannot disarm: %s", strerror(errno));
	return n > 0 && atoi(buf) == 0;
}

/* A helper's k-th batch fails (fail_foliomap_helper). */
static void fi_helper_arm(struct th *t, unsigned int k)
{
	char buf[16];

	snprintf(buf, sizeof(buf), "%u", k);
	ASSERT_EQ(fi_write(DEBUGFS "/fail_foliomap_helper/times", "1"), 0);
	ASSERT_EQ(fi_write(DEBUGFS "/fail_foliomap_helper/space", buf), 0);
	ASSERT_EQ(fi_write(DEBUGFS "/fail_foliomap_helper/probability", "100"), 0);
}

static bool fi_helper_disarm(void)
{
	long long times;

	fi_write(DEBUGFS "/fail_foliomap_helper/probability", "0");
	times = vu_read_number(DEBUGFS "/fail_foliomap_helper/times");
	fi_write(DEBUGFS "/fail_foliomap_helper/space", "0");
	return times == 0;
}

/* ------------------------------------------------------------------ */
/* what must not change: counters and the IOMMU's page table */

struct snap {
	long long pins, vmlck_kb, avail, emu_pinned, emu_records;
	char *view;		/* the page-table dump, or NULL (no device) */
};

/* Read the whole of a debugfs file; NULL with errno on failure. */
static char *slurp(const char *path)
{
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0 || !buf) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while ((n = read(fd, buf + len, cap - len - 1)) > 0) {
		len += n;
		if (cap - len < 4096) {
			char *nb = realloc(buf, cap * 2);

			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
	}
	close(fd);
	buf[len] = 0;
	return buf;
}

/* intel-iommu's page table of @bdf's domain: one line per leaf. */
static char *iommu_view(struct th *t, const char *bdf)
{
	char path[256];
	char *v;

	snprintf(path, sizeof(path), DEBUGFS "/iommu/intel/%s/domain_translation_struct", bdf);
	v = slurp(path);
	if (!v)
		FAIL("%s: %s (CONFIG_INTEL_IOMMU_DEBUGFS)", path, strerror(errno));
	return v;
}

/*
 * The view without physical addresses: per leaf its IOVA pfn, level and
 * permission bits, hashed (FNV-1a). A leaf line is "0x<iova_pfn> |" and
 * the entries of the walk down to the leaf, PML5E, PML4E and PDPE always,
 * PDE and PTE only when the walk got there: the last one is the leaf.
 */
static uint64_t view_shape(const char *v, long long *leaves)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	const char *line;

	*leaves = 0;
	for (line = v; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		unsigned long long pfn, e[5];
		char key[64];
		int m, i;

		m = sscanf(line, "0x%llx |%llx %llx %llx %llx %llx", &pfn,
			   &e[0], &e[1], &e[2], &e[3], &e[4]);
		if (m < 4)
			continue;
		/* 3 entries: a 1 GiB leaf (level 3), 4: 2 MiB, 5: 4 KiB */
		snprintf(key, sizeof(key), "%llx:%d:%llx;", pfn, 7 - m, e[m - 2] & 3);
		for (i = 0; key[i]; i++)
			h = (h ^ (unsigned char)key[i]) * 0x100000001b3ULL;
		(*leaves)++;
	}
	return h;
}

struct op;

/* The first and last leaves of a view that should not have changed. */
static void view_diag(const struct op *op, unsigned int n, const char *v)
{
	const char *first = NULL, *last = NULL, *line;

	for (line = v; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		if (strncmp(line, "0x", 2))
			continue;
		if (!first)
			first = line;
		last = line;
	}
	if (first)
		th_diag("n %u: leaves from %.15s to %.15s", n, first, last);
}

/* ------------------------------------------------------------------ */
/* the operations */

struct fx {
	int c;			/* container */
	int nic_gfd;		/* the e1000e group's fd, -1 when not used */
	int nic_group;
	bool emu;		/* x->e is an fm_emu device in the container */
	struct emu e;
	const char *view_bdf;	/* a PCI device whose domain is watched */
	char *p;		/* the operation's memory */
	size_t size;
	char *buf;		/* dma_rw's buffer */
};

struct op {
	const char *name;
	void (*setup)(struct th *t, struct fx *x);
	long (*call)(struct fx *x);
	/* What a successful call changes: pins, VmLck pages, mappings, emu pins. */
	long long pins, vmlck_pages, maps, emu_pins;
	/* Extra check of a successful call (data), or NULL. */
	void (*check)(struct th *t, struct fx *x);
	bool helpers;		/* foliomap only: the helper-batch sweep */
	/*
	 * The call copies its result out last (UNMAP_DMA writes the size
	 * unmapped back): that copy failing gives -EFAULT after the work is
	 * done, which no backend can undo; the state must then be exactly a
	 * successful call's.
	 */
	bool copyout;
	/* hugetlbfs: foliomap pins once per 2M folio (th_kind_pins()). */
	bool folio_pins;
};

/* A container (v2 unless @type) with the first e1000e group, watched. */
static void fx_nic(struct th *t, struct fx *x, int type)
{
	int gfd;

	th_e1000e_groups(t, &x->nic_group, 1);
	x->c = th_container_of(t, type ? type : VFIO_TYPE1v2_IOMMU, &x->nic_group, 1, &gfd);
	x->nic_gfd = gfd;
	x->view_bdf = th_bdf(t, 0);
}

/* A v2 container with fm_emu's group, and with @nic the e1000e group first. */
static void fx_emu(struct th *t, struct fx *x, bool nic)
{
	emu_setup(t, &x->e, VFIO_TYPE1v2_IOMMU, nic);
	x->emu = true;
	x->c = x->e.c;
	x->nic_gfd = x->e.ngfd;
	x->view_bdf = nic ? th_bdf(t, 0) : NULL;
}

static char *anon4k(struct th *t, size_t size, bool touch)
{
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	size_t off;

	if (p == MAP_FAILED)
		FAIL("mmap %zu: %s", size, strerror(errno));
	th_own_mem(t, p, size);
	if (vu_madvise_thp(p, size, MADV_NOHUGEPAGE))
		FAIL("madvise: %s", strerror(errno));
	for (off = 0; touch && off < size; off += SZ_4K)
		p[off] = (char)(off >> 12);
	return p;
}

static long do_map(struct fx *x)
{
	return vu_map(x->c, IOVA_A, x->p, x->size, RW);
}

static void setup_map_kind(struct th *t, struct fx *x, enum vu_mem_kind kind)
{
	fx_nic(t, x, 0);
	x->size = M4;
	x->p = th_mem(t, kind, x->size);
}

static void setup_map_thp(struct th *t, struct fx *x)
{
	setup_map_kind(t, x, VU_MEM_THP);
}

static void setup_map_shmem4k(struct th *t, struct fx *x)
{
	setup_map_kind(t, x, VU_MEM_POPULATE);
}

static void setup_map_hugetlb2m(struct th *t, struct fx *x)
{
	setup_map_kind(t, x, VU_MEM_HUGETLB2M);
}

static void setup_map_memfd2m(struct th *t, struct fx *x)
{
	setup_map_kind(t, x, VU_MEM_MEMFD2M);
}

static void setup_map_anon4k(struct th *t, struct fx *x)
{
	fx_nic(t, x, 0);
	x->size = M1;
	x->p = anon4k(t, x->size, true);
}

static void setup_map_untouched(struct th *t, struct fx *x)
{
	fx_nic(t, x, 0);
	x->size = M1;
	x->p = anon4k(t, x->size, false);
}

/*
 * THP never touched: helpers join (foliomap), and the map has a few dozen
 * points, not one iommu_map() per 4K run as 48 MiB of 4K pages would.
 */
static void setup_map_parallel(struct th *t, struct fx *x)
{
	fx_nic(t, x, 0);
	x->size = PAR_SIZE;
	x->p = vu_thp_map(x->size);
	if (!x->p)
		FAIL("vu_thp_map: %s", strerror(errno));
	th_own_mem(t, x->p, x->size);
}

/* Device memory: 4 MiB of the ivshmem BAR, its group in the container. */
static void setup_map_bar(struct th *t, struct fx *x)
{
	const char *bdf = getenv("VFIO_IVSHMEM_BDF");
	size_t size = 0;
	int g, gfd, dev;

	if (!bdf || !*bdf)
		SKIP("no ivshmem device (vm/run --ivshmem SIZE sets VFIO_IVSHMEM_BDF)");
	fx_nic(t, x, 0);
	g = vu_group_of_bdf(bdf);
	ASSERT_GE(g, 0);
	gfd = th_own_fd(t, vu_group_attach(x->c, g));
	ASSERT_GE(gfd, 0);
	dev = th_device_fd(t, gfd, bdf);
	x->p = th_bar_mmap(t, dev, VFIO_PCI_BAR2_REGION_INDEX, NULL, &size);
	th_own_mem(t, x->p, size);
	ASSERT_GE(size, M4);
	x->size = M4;
}

/* Four mappings: three of 1 MiB of 4K pages at IOVA_A, 4 MiB of THP at IOVA_B. */
static void setup_mapped(struct th *t, struct fx *x, int type)
{
	char *q;
	int i;

	fx_nic(t, x, type);
	x->p = anon4k(t, 3 * M1, true);
	for (i = 0; i < 3; i++)
		MAP_OK(x->c, IOVA_A + i * M1, x->p + i * M1, M1);
	q = th_mem(t, VU_MEM_THP, M4);
	MAP_OK(x->c, IOVA_B, q, M4);
}

static void setup_mapped_v2(struct th *t, struct fx *x)
{
	setup_mapped(t, x, 0);
}

static void setup_mapped_v1(struct th *t, struct fx *x)
{
	setup_mapped(t, x, VFIO_TYPE1_IOMMU);
}

static long do_unmap(struct fx *x, uint64_t iova, uint64_t size, uint32_t flags)
{
	return vu_unmap(x->c, iova, size, flags, NULL);
}

static long do_unmap_one(struct fx *x)
{
	return do_unmap(x, IOVA_A + M1, M1, 0);
}

static long do_unmap_range(struct fx *x)
{
	return do_unmap(x, IOVA_A, 3 * M1, 0);
}

static long do_unmap_thp(struct fx *x)
{
	return do_unmap(x, IOVA_B, M4, 0);
}

static long do_unmap_all(struct fx *x)
{
	return do_unmap(x, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL);
}

/* v1: a range holding the first page of a mapping takes all of it. */
static long do_unmap_v1_first_page(struct fx *x)
{
	return do_unmap(x, IOVA_B, SZ_4K, 0);
}

/* fm_emu's group alone, mappings nothing pinned; the e1000e group opened. */
static void setup_replay(struct th *t, struct fx *x)
{
	char path[64];
	char *q;

	fx_emu(t, x, false);
	x->p = anon4k(t, M1, true);
	MAP_OK(x->c, IOVA_A, x->p, M1);
	q = th_mem(t, VU_MEM_THP, M4);
	MAP_OK(x->c, IOVA_B, q, M4);
	th_e1000e_groups(t, &x->nic_group, 1);
	snprintf(path, sizeof(path), "/dev/vfio/%d", x->nic_group);
	x->nic_gfd = th_own_fd(t, open(path, O_RDWR | O_CLOEXEC));
	ASSERT_GE(x->nic_gfd, 0);
	x->view_bdf = th_bdf(t, 0);
}

/* The group joins: a first domain, into which every mapping is replayed. */
static long do_attach(struct fx *x)
{
	return ioctl(x->nic_gfd, VFIO_GROUP_SET_CONTAINER, &x->c) ? -errno : 0;
}

/* fm_emu's group and the e1000e group; 1 MiB mapped, emu pins on 4 pages. */
static void setup_detach(struct th *t, struct fx *x)
{
	fx_emu(t, x, true);
	x->p = anon4k(t, M1, true);
	MAP_OK(x->c, IOVA_A, x->p, M1);
	ASSERT_EQ(emu_pin(t, &x->e, IOVA_A + 8 * SZ_4K, 4, IOMMU_R), 4);
}

/* The last IOMMU group leaves: its domain goes, the emu pins are recharged. */
static long do_detach(struct fx *x)
{
	return ioctl(x->nic_gfd, VFIO_GROUP_UNSET_CONTAINER) ? -errno : 0;
}

static void setup_vaddr(struct th *t, struct fx *x)
{
	setup_map_anon4k(t, x);
	MAP_OK(x->c, IOVA_A, x->p, x->size);
}

static void setup_vaddr_invalid(struct th *t, struct fx *x)
{
	setup_vaddr(t, x);
	ASSERT_EQ(vu_unmap(x->c, IOVA_A, x->size, VFIO_DMA_UNMAP_FLAG_VADDR, NULL), 0);
}

static long do_vaddr_invalidate(struct fx *x)
{
	return do_unmap(x, IOVA_A, x->size, VFIO_DMA_UNMAP_FLAG_VADDR);
}

static long do_vaddr_update(struct fx *x)
{
	return vu_map(x->c, IOVA_A, x->p, x->size, VFIO_DMA_MAP_FLAG_VADDR);
}

/* fm_emu's group (with @nic the e1000e group too) and 1 MiB mapped. */
static void setup_emu_mapped(struct th *t, struct fx *x, bool nic)
{
	size_t i;

	fx_emu(t, x, nic);
	x->p = anon4k(t, M1, true);
	for (i = 0; i < M1; i += SZ_4K)
		x->p[i] = (char)(0x40 + (i >> 12));
	MAP_OK(x->c, IOVA_A, x->p, M1);
	x->buf = th_own_mem(t, mmap(NULL, 2 * SZ_4K, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), 2 * SZ_4K);
	ASSERT_NE(x->buf, MAP_FAILED);
	memset(x->buf, 0x5a, 2 * SZ_4K);
}

static void setup_emu(struct th *t, struct fx *x)
{
	setup_emu_mapped(t, x, false);
}

static void setup_emu_nic(struct th *t, struct fx *x)
{
	setup_emu_mapped(t, x, true);
}

static void setup_emu_pinned(struct th *t, struct fx *x)
{
	setup_emu_mapped(t, x, false);
	ASSERT_EQ(emu_pin(t, &x->e, IOVA_A + SZ_4K, EMU_PAGES, IOMMU_R | IOMMU_W), EMU_PAGES);
}

/* FM_EMU_PIN: fm_emu's own allocations, then vfio_pin_pages()'s result. */
static long do_pin_pages(struct fx *x)
{
	struct fm_emu_pin p = { .iova = IOVA_A + SZ_4K, .npage = EMU_PAGES,
				.prot = IOMMU_R | IOMMU_W };

	if (ioctl(x->e.dev, FM_EMU_PIN, &p))
		return -errno;
	return p.ret == EMU_PAGES ? 0 : p.ret < 0 ? p.ret : -EIO;
}

static long do_unpin_pages(struct fx *x)
{
	struct fm_emu_unpin u = { .iova = IOVA_A + SZ_4K, .npage = EMU_PAGES };

	return ioctl(x->e.dev, FM_EMU_UNPIN, &u) ? -errno : 0;
}

/* 8 KiB across a page boundary of the mapping, by vfio_dma_rw(). */
static long do_rw(struct fx *x, unsigned int flags)
{
	struct fm_emu_rw r = { .iova = IOVA_A + 3 * SZ_4K - 100, .uaddr = (uintptr_t)x->buf,
			       .len = 2 * SZ_4K, .flags = flags };

	if (ioctl(x->e.dev, FM_EMU_RW, &r))
		return -errno;
	return r.ret;
}

static long do_rw_write(struct fx *x)
{
	return do_rw(x, FM_EMU_RW_WRITE);
}

static long do_rw_read(struct fx *x)
{
	return do_rw(x, 0);
}

static void check_rw_write(struct th *t, struct fx *x)
{
	EXPECT_EQ(memcmp(x->p + 3 * SZ_4K - 100, x->buf, 2 * SZ_4K), 0);
}

static void check_rw_read(struct th *t, struct fx *x)
{
	EXPECT_EQ(memcmp(x->buf, x->p + 3 * SZ_4K - 100, 2 * SZ_4K), 0);
}

static void setup_dirty(struct th *t, struct fx *x)
{
	setup_mapped_v2(t, x);
	x->buf = th_own_mem(t, mmap(NULL, SZ_4K, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), SZ_4K);
	ASSERT_NE(x->buf, MAP_FAILED);
}

static void setup_dirty_on(struct th *t, struct fx *x)
{
	setup_dirty(t, x);
	ASSERT_EQ(th_dirty(x->c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
}

static long do_dirty_start(struct fx *x)
{
	return th_dirty(x->c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START);
}

static long do_dirty_stop(struct fx *x)
{
	return th_dirty(x->c, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP);
}

/* The bitmap of the 4 MiB THP mapping (every page dirty: pinned). */
static long do_dirty_get(struct fx *x)
{
	memset(x->buf, 0, SZ_4K);
	return th_get_bitmap(x->c, IOVA_B, M4, SZ_4K, x->buf, M4 / SZ_4K / 8);
}

static void check_dirty_get(struct th *t, struct fx *x)
{
	size_t i;

	for (i = 0; i < M4 / SZ_4K / 8; i++)
		if ((unsigned char)x->buf[i] != 0xff)
			FAIL("bitmap byte %zu: 0x%02x, not all dirty", i, (unsigned char)x->buf[i]);
}

/* ------------------------------------------------------------------ */
/* one run of an operation, in a process of its own */

struct run {
	int failed;
	int skipped;
	int injected;		/* the armed point was reached */
	int changed;		/* rc < 0, and yet something changed */
	int leaves_only;	/* ... only IOMMU leaves: nothing pinned or charged */
	long rc;
	long long pins, vmlck_kb, maps, emu_pins;	/* changes */
	uint64_t shape;
	long long leaves;
};

static void snap_take(struct th *t, struct fx *x, struct snap *s)
{
	s->pins = th_pins(t);
	s->vmlck_kb = th_vmlck_kb(t);
	s->avail = th_dma_avail(x->c);
	s->emu_pinned = s->emu_records = 0;
	if (x->emu) {
		struct fm_emu_stats es = emu_stats(t, &x->e);

		s->emu_pinned = es.pinned_pages;
		s->emu_records = es.records;
	}
	s->view = x->view_bdf ? iommu_view(t, x->view_bdf) : NULL;
}

/*
 * @n > 0: the n-th point fails; @helper: the n-th helper batch instead;
 * n = 0: no injection (the reference run).
 */
static void run_body(struct th *t, const struct op *op, unsigned int n, bool helper,
		     struct run *r)
{
	struct fx x = { .c = -1, .nic_gfd = -1 };
	struct snap a, b;
	long rc;

	op->setup(t, &x);
	fi_fd = open(FAIL_NTH, O_RDWR | O_CLOEXEC);
	if (fi_fd < 0)
		FAIL(FAIL_NTH ": %s", strerror(errno));
	snap_take(t, &x, &a);

	if (n && helper)
		fi_helper_arm(t, n);
	else if (n)
		fi_arm(t, n);
	rc = op->call(&x);
	if (n)
		r->injected = helper ? fi_helper_disarm() : fi_disarm();
	close(fi_fd);
	r->rc = rc;

	snap_take(t, &x, &b);
	r->pins = b.pins - a.pins;
	r->vmlck_kb = b.vmlck_kb - a.vmlck_kb;
	r->maps = a.avail - b.avail;
	r->emu_pins = b.emu_pinned - a.emu_pinned;
	r->shape = b.view ? view_shape(b.view, &r->leaves) : 0;
	if (rc < 0) {
		bool counts_same = b.pins == a.pins && b.vmlck_kb == a.vmlck_kb &&
				   b.avail == a.avail && b.emu_pinned == a.emu_pinned &&
				   b.emu_records == a.emu_records;

		if (rc != -ENOMEM && rc != -EFAULT)
			th_diag("%s, n %u: %s (%ld)", op->name, n, th_errname(rc), rc);
		EXPECT_TRUE(rc == -ENOMEM || rc == -EFAULT);
		/*
		 * Nothing changed, up to the last bit of the page table; the
		 * parent judges a change (a failed copy-out, or a leak).
		 */
		r->changed = !counts_same || (a.view && strcmp(a.view, b.view));
		r->leaves_only = r->changed && counts_same;
		if (r->changed && b.view && !op->copyout)
			view_diag(op, n, b.view);
	} else if (op->check) {
		op->check(t, &x);
	}
	free(a.view);
	free(b.view);
}

/* The harness's own teardown, for the run's process. */
static void run_teardown(struct th *t)
{
	struct vu_counters end;
	int i;

	for (i = t->nfds - 1; i >= 0; i--)
		if (t->fds[i] >= 0)
			close(t->fds[i]);
	for (i = t->nmem - 1; i >= 0; i--)
		munmap(t->mem[i].p, t->mem[i].size);
	if (vu_counters_read(&end)) {
		th_diag("cannot read counters after the run");
		t->failed = true;
		return;
	}
	if (vu_pins_outstanding(&t->start, &end) || end.vmlck_kb != t->start.vmlck_kb) {
		th_diag("after the run's teardown: %lld pages pinned, VmLck %+lld kB",
			vu_pins_outstanding(&t->start, &end), end.vmlck_kb - t->start.vmlck_kb);
		t->failed = true;
	}
}

static struct run run_once(struct th *t, const struct op *op, unsigned int n, bool helper)
{
	struct th_child ch;
	struct run r = { 0 };

	if (th_fork(t, &ch)) {
		struct th rt = { .name = t->name, .type = t->type, .v2 = t->v2 };

		if (vu_counters_read(&rt.start))
			rt.failed = true;
		else if (!sigsetjmp(rt.jmp, 0))
			run_body(&rt, op, n, helper, &r);
		run_teardown(&rt);
		r.failed = rt.failed;
		r.skipped = rt.skipped && !rt.failed;
		th_child_reply(&ch, &r, sizeof(r));
	}
	th_child_collect(t, &ch, &r, sizeof(r));
	return r;
}

/* ------------------------------------------------------------------ */
/* the sweep */

static long long inject_count(int point, bool failed)
{
	static const char *const names[] = { "gup", "gup_short", "iommu_map", "helper" };
	char key[32], path[] = FM_DEBUGFS "/inject";
	long long reached, fails, ret = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (fscanf(f, "%31s %lld %lld", key, &reached, &fails) == 3)
		if (!strcmp(key, names[point]))
			ret = failed ? fails : reached;
	fclose(f);
	return ret;
}

static bool same_as_ref(struct th *t, const struct op *op, unsigned int n,
			const struct run *r, const struct run *ref)
{
	if (r->pins == ref->pins && r->vmlck_kb == ref->vmlck_kb && r->maps == ref->maps &&
	    r->emu_pins == ref->emu_pins && r->shape == ref->shape && r->leaves == ref->leaves)
		return true;
	th_diag("%s, n %u: succeeded, but pins %+lld VmLck %+lld kB mappings %+lld emu %+lld leaves %lld,",
		op->name, n, r->pins, r->vmlck_kb, r->maps, r->emu_pins, r->leaves);
	th_diag("    without injection pins %+lld VmLck %+lld kB mappings %+lld emu %+lld leaves %lld%s",
		ref->pins, ref->vmlck_kb, ref->maps, ref->emu_pins, ref->leaves,
		r->shape != ref->shape ? " (other IOVAs, sizes or permissions)" : "");
	return false;
}

/*
 * Tell the kernel log when this operation's injections start and end:
 * vm/run accepts, between the two, the reports that an injected failure
 * provokes in the kernel's own code (vm/README.md), and nothing else.
 */
static void kmsg_mark(const struct op *op, const char *state)
{
	char line[128];
	int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	snprintf(line, sizeof(line), "t_failnth: %s: fault injection %s\n", op->name, state);
	if (write(fd, line, strlen(line)) < 0)
		th_diag("cannot write to /dev/kmsg: %s", strerror(errno));
	close(fd);
}

static void sweep(struct th *t, const struct op *op)
{
	long long before[4], errors = 0, absorbed = 0, copyouts = 0, stale = 0;
	unsigned int n;
	struct run ref, r;
	int i;

	if (op->helpers && !is_foliomap())
		SKIP("stock type1 has no helper threads");
	if (op->helpers && !th_helpers_possible())
		SKIP("no helper threads on this kernel (compat.h: FM_HAVE_USER_WORKER)");
	fi_setup(t);

	ref = run_once(t, op, 0, false);
	if (ref.skipped) {
		/* The run's process gave the reason (th_res is shared). */
		t->skipped = true;
		th_abort(t);
	}
	ASSERT_FALSE(ref.failed);
	ASSERT_EQ(ref.rc, 0);
	EXPECT_EQ(ref.pins, op->folio_pins && is_foliomap() ? op->pins / 512 : op->pins);
	EXPECT_EQ(ref.vmlck_kb, op->vmlck_pages * 4);
	EXPECT_EQ(ref.maps, op->maps);
	EXPECT_EQ(ref.emu_pins, op->emu_pins);
	/* A new mapping shows in the page table (and the parser reads it). */
	if (op->maps > 0)
		EXPECT_GT(ref.leaves, 0);
	if (t->failed)
		return;

	for (i = 0; i < 4; i++)
		before[i] = inject_count(i, true);
	kmsg_mark(op, "on");
	for (n = 1; n <= MAX_POINTS; n++) {
		r = run_once(t, op, n, op->helpers);
		if (r.failed) {
			kmsg_mark(op, "off");
			th_diag("%s: the run with point %u failing went wrong (above)", op->name, n);
			t->failed = true;
			return;
		}
		if (!r.injected) {
			/* The call needs fewer than n points: done. */
			EXPECT_EQ(r.rc, 0);
			if (r.rc == 0)
				EXPECT_TRUE(same_as_ref(t, op, n, &r, &ref));
			break;
		}
		/* A helper's failure hands its chunk back: the caller pins it. */
		if (op->helpers)
			EXPECT_EQ(r.rc, 0);
		if (r.rc < 0 && r.changed) {
			/* Only a failed copy of a finished call's result. */
			th_diag("%s, n %u: %s, and the state changed:", op->name, n,
				th_errname(r.rc));
			if (op->copyout && r.rc == -EFAULT && same_as_ref(t, op, n, &r, &ref)) {
				th_diag("    as a successful call's: the result's copy-out failed");
				copyouts++;
			} else if (r.leaves_only && op->maps > 0 && !is_foliomap()) {
				/*
				 * Stock's own flaw, the kernel's (tests/README.md): intel-iommu
				 * keeps the PTEs a failed iommu_map() wrote, and stock type1
				 * unwinds a failed run only in the other domains, so leaves of
				 * pages it then unpins stay mapped. foliomap removes them.
				 */
				th_diag("    stock type1 left IOMMU leaves of a failed MAP_DMA, nothing pinned: the kernel's known flaw");
				stale++;
			} else {
				same_as_ref(t, op, n, &r, &ref);
				t->failed = true;
			}
		} else if (r.rc < 0)
			errors++;
		else if (same_as_ref(t, op, n, &r, &ref))
			absorbed++;
		else
			t->failed = true;
	}
	kmsg_mark(op, "off");
	if (n > MAX_POINTS)
		FAIL("%s: still failing at point %u", op->name, MAX_POINTS);
	/* The helper sweep means nothing if no helper ever ran a batch. */
	if (op->helpers)
		EXPECT_GT(n - 1, 0);
	th_diag("%s: %u %s points reached; %lld calls failed cleanly, %lld absorbed the failure, %lld finished but could not copy their result out",
		op->name, n - 1, op->helpers ? "helper-batch" : "fail-nth", errors, absorbed,
		copyouts);
	if (stale)
		th_diag("%s: %lld failed calls left stale IOMMU leaves (stock type1, the kernel's)",
			op->name, stale);
	if (is_foliomap())
		th_diag("%s: foliomap's own points failed: gup %lld, gup_short %lld, iommu_map %lld, helper %lld",
			op->name, inject_count(0, true) - before[0], inject_count(1, true) - before[1],
			inject_count(2, true) - before[2], inject_count(3, true) - before[3]);
}

/* ------------------------------------------------------------------ */

#define P(m)	((long long)((m) / SZ_4K))

#define SWEEP(name_, ...)						\
	TEST(name_)							\
	{								\
		static const struct op op = { .name = #name_, __VA_ARGS__ }; \
		sweep(t, &op);						\
	}

SWEEP(map_thp, .setup = setup_map_thp, .call = do_map,
      .pins = P(M4), .vmlck_pages = P(M4), .maps = 1)
SWEEP(map_anon4k, .setup = setup_map_anon4k, .call = do_map,
      .pins = P(M1), .vmlck_pages = P(M1), .maps = 1)
SWEEP(map_shmem4k, .setup = setup_map_shmem4k, .call = do_map,
      .pins = P(M4), .vmlck_pages = P(M4), .maps = 1)
SWEEP(map_hugetlb2m, .setup = setup_map_hugetlb2m, .call = do_map,
      .pins = P(M4), .vmlck_pages = P(M4), .maps = 1, .folio_pins = true)
SWEEP(map_memfd2m, .setup = setup_map_memfd2m, .call = do_map,
      .pins = P(M4), .vmlck_pages = P(M4), .maps = 1, .folio_pins = true)
SWEEP(map_bar, .setup = setup_map_bar, .call = do_map, .maps = 1)
SWEEP(map_untouched, .setup = setup_map_untouched, .call = do_map,
      .pins = P(M1), .vmlck_pages = P(M1), .maps = 1)
SWEEP(map_parallel, .setup = setup_map_parallel, .call = do_map,
      .pins = P(PAR_SIZE), .vmlck_pages = P(PAR_SIZE), .maps = 1)
SWEEP(map_parallel_helper_fails, .setup = setup_map_parallel, .call = do_map,
      .pins = P(PAR_SIZE), .vmlck_pages = P(PAR_SIZE), .maps = 1, .helpers = true)
SWEEP(unmap_one, .setup = setup_mapped_v2, .call = do_unmap_one,
      .pins = -P(M1), .vmlck_pages = -P(M1), .maps = -1, .copyout = true)
SWEEP(unmap_range, .setup = setup_mapped_v2, .call = do_unmap_range,
      .pins = -P(3 * M1), .vmlck_pages = -P(3 * M1), .maps = -3, .copyout = true)
SWEEP(unmap_thp, .setup = setup_mapped_v2, .call = do_unmap_thp,
      .pins = -P(M4), .vmlck_pages = -P(M4), .maps = -1, .copyout = true)
SWEEP(unmap_all, .setup = setup_mapped_v2, .call = do_unmap_all,
      .pins = -P(3 * M1 + M4), .vmlck_pages = -P(3 * M1 + M4), .maps = -4, .copyout = true)
SWEEP(unmap_v1_first_page, .setup = setup_mapped_v1, .call = do_unmap_v1_first_page,
      .pins = -P(M4), .vmlck_pages = -P(M4), .maps = -1, .copyout = true)
SWEEP(attach_replay, .setup = setup_replay, .call = do_attach,
      .pins = P(M1 + M4), .vmlck_pages = P(M1 + M4))
SWEEP(detach_recharge, .setup = setup_detach, .call = do_detach,
      .pins = -P(M1), .vmlck_pages = -(P(M1) - 4))
SWEEP(vaddr_invalidate, .setup = setup_vaddr, .call = do_vaddr_invalidate)
SWEEP(vaddr_update, .setup = setup_vaddr_invalid, .call = do_vaddr_update)
SWEEP(pin_pages, .setup = setup_emu, .call = do_pin_pages,
      .pins = EMU_PAGES, .vmlck_pages = EMU_PAGES, .emu_pins = EMU_PAGES)
SWEEP(pin_pages_with_domain, .setup = setup_emu_nic, .call = do_pin_pages,
      .pins = EMU_PAGES, .emu_pins = EMU_PAGES)
SWEEP(unpin_pages, .setup = setup_emu_pinned, .call = do_unpin_pages,
      .pins = -EMU_PAGES, .vmlck_pages = -EMU_PAGES, .emu_pins = -EMU_PAGES)
SWEEP(dma_rw_write, .setup = setup_emu, .call = do_rw_write, .check = check_rw_write)
SWEEP(dma_rw_read, .setup = setup_emu, .call = do_rw_read, .check = check_rw_read)
SWEEP(dirty_start, .setup = setup_dirty, .call = do_dirty_start)
SWEEP(dirty_get_bitmap, .setup = setup_dirty_on, .call = do_dirty_get, .check = check_dirty_get)
SWEEP(dirty_stop, .setup = setup_dirty_on, .call = do_dirty_stop)

int main(int argc, char **argv)
{
	int ret;

	if (access(FAIL_NTH, F_OK)) {
		printf("TAP version 13\n1..0\n# t_failnth: no %s, no fault injection in this"
		       " kernel (make check-debug)\n", FAIL_NTH);
		return 0;
	}
	if (emu_module_load())
		fprintf(stderr, "t_failnth: fm_emu not loaded; its operations will fail\n");
	ret = th_main(argc, argv);
	emu_module_unload();
	return ret;
}
