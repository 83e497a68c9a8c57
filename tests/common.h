/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * VFIO helpers for the tests, on top of tools/vfio_util.h and the harness.
 * Anything the rig should provide and does not (groups, container) FAILS the
 * test: only a genuine capability absence (no hugepages) may SKIP.
 */
#ifndef FOLIOMAP_TESTS_COMMON_H
#define FOLIOMAP_TESTS_COMMON_H

#include "harness.h"	/* first: it defines _GNU_SOURCE */

#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <linux/capability.h>
#include <linux/userfaultfd.h>

#define SZ_4K		0x1000ULL
#define SZ_2M		0x200000ULL
#define SZ_1G		0x40000000ULL
/*
 * The Intel IOMMU's configured address width (th_aperture_bits()); the
 * aperture of the IOMMU the guest has is th_aperture_end(), its MSI window
 * th_msi_window().
 */
#define APERTURE_BITS	th_aperture_bits()

/*
 * IOVA bases used by the tests: clear of the MSI window of every IOMMU the
 * tests run behind (x86: 0xfee00000-0xfeefffff; arm64's SMMUv3: the
 * software window 0x8000000-0x80fffff), as are t_dma's IOVAs (below 128M).
 */
#define IOVA_A		0x10000000ULL	/* 256M */
#define IOVA_B		0x40000000ULL	/* 1G */

#define RW	(VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE)

static inline bool is_foliomap(void)
{
	const char *b = getenv("FOLIOMAP_BACKEND");

	if (b && *b)
		return !strcmp(b, "foliomap");
	return !strcmp(vu_backend_name(), "foliomap");
}

static inline int th_kernel_series(void);

/*
 * Stock type1 of the guest kernel has upstream 6.18's uAPI answers: the 7.x
 * kernels of Debian 13's trixie-backports (the supported kernels are 6.1,
 * 6.12 and 7.x, so nothing between). There, the deliberate differences that
 * foliomap took from upstream are no differences: both backends answer the
 * same, and the tests expect that of both.
 */
static inline bool th_stock_upstream_type1(void)
{
	return th_kernel_series() >= 700;
}

/*
 * A range that wraps around the address space is -EINVAL on stock 6.1 and
 * 6.12 and -EOVERFLOW on foliomap and on stock 7.x (upstream 6.18+), for
 * MAP_DMA, UNMAP_DMA and DIRTY_PAGES GET_BITMAP alike.
 */
static inline int wrap_errno(void)
{
	return is_foliomap() || th_stock_upstream_type1() ? -EOVERFLOW : -EINVAL;
}

/*
 * CHECK_EXTENSION(VFIO_TYPE1_NESTING_IOMMU): 1 on 6.1 and 6.12 (both
 * backends: foliomap answers as stock, then refuses it at open); 7.x keeps
 * the number only as __VFIO_RESERVED_TYPE1_NESTING_IOMMU, which its stock
 * type1 (and foliomap there) answers 0.
 */
static inline int th_nesting_extension(void)
{
	return th_stock_upstream_type1() ? 0 : 1;
}

/*
 * The guest kernel's series from uname -r, as major * 100 + minor: 601 for
 * Debian's 6.1.0-N, 612 for 6.12.N (Debian 12's and 13's), 703 for 7.3.N.
 * Expectations are stock 6.12's; where
 * stock 6.1 behaves differently, the expectation on 6.1 is stock 6.1's (for
 * both backends: foliomap follows the stock driver of the kernel it runs
 * on), and each such case is one helper below.
 */
static inline int th_kernel_series(void)
{
	static int series;
	struct utsname u;
	int major, minor;

	if (!series) {
		if (uname(&u) || sscanf(u.release, "%d.%d", &major, &minor) != 2)
			return 612;
		series = major * 100 + minor;
	}
	return series;
}

/*
 * Kernel difference (GUP, not VFIO): a read-only FOLL_LONGTERM pin of
 * private anonymous memory that was only ever read (or never touched) gets
 * a real page on 6.12: gup_must_unshare() unshares the shared zero page
 * first, so the page is pinned and charged like any other. On 6.1 GUP hands
 * out the zero page itself, takes no pin on it (not counted in
 * nr_foll_pin_acquired) and type1 does not charge it (reserved). The huge
 * zero page is replaced by a real THP on both.
 */
static inline bool th_ro_zero_page_unshared(void)
{
	return th_kernel_series() >= 612;
}

/*
 * Kernel difference (IOMMU core): from 6.12 type1 passes GFP_KERNEL_ACCOUNT
 * to iommu_map() and the IOMMU's page tables are charged to the mapping
 * process's memcg. 6.1's iommu_map() takes no gfp_t and allocates them with
 * plain GFP_KERNEL: a memcg at its limit cannot make iommu_map() fail.
 */
static inline bool th_iommu_pgtables_charged(void)
{
	return th_kernel_series() >= 612;
}

/*
 * foliomap difference: parallel pinning's helpers are threads of the
 * calling process (vhost_task_create()), which 6.1 cannot create for a
 * module: there foliomap pins in the calling thread alone, whatever
 * pin_threads says.
 */
static inline bool th_helpers_possible(void)
{
	return th_kernel_series() >= 612;
}

/*
 * The address width of the emulated IOMMU, in bits, as the guest was
 * configured: vm/run --aw-bits (39, QEMU's default, or 48) exports it as
 * VFIO_IOMMU_AW_BITS.  Outside vm/run (not set): 39.  t_info checks that the
 * IOMMU's capability register and GET_INFO's IOVA ranges agree with it, so a
 * guest booted with another width than the one announced fails there.
 */
static inline int th_aperture_bits(void)
{
	const char *s = getenv("VFIO_IOMMU_AW_BITS");
	int bits = s && *s ? atoi(s) : 39;

	return bits >= 32 && bits <= 57 ? bits : 39;
}

/* The IOMMU of the guest (vu_iommu_kind(): /sys/class/iommu). */
static inline enum vu_iommu th_iommu(void)
{
	static int kind = -1;

	if (kind < 0)
		kind = vu_iommu_kind();
	return kind;
}

/*
 * The last IOVA of the aperture that the stock IOMMU driver gives a VFIO
 * domain, per IOMMU (tests/README.md, "IOMMUs"):
 *  - Intel VT-d: 2^MGAW - 1, the width the guest was booted with
 *    (VFIO_IOMMU_AW_BITS; t_info checks it against the capability register);
 *  - AMD-Vi: 2^64 - 1: the v1 page table (the AMD driver's default) can
 *    translate the whole 64-bit space (6 levels), and the driver says so in
 *    the domain's geometry;
 *  - SMMUv3: 2^48 - 1: a stage-1 domain's input size is 48 bits on an SMMU
 *    without 52-bit VAs (QEMU's) and a kernel with 48-bit VAs (Debian's).
 * Any other IOMMU fails the test: nothing is known about it.
 */
static inline uint64_t th_aperture_end(struct th *t)
{
	switch (th_iommu()) {
	case VU_IOMMU_INTEL:
		return (1ULL << APERTURE_BITS) - 1;
	case VU_IOMMU_AMD:
		return UINT64_MAX;
	case VU_IOMMU_SMMUV3:
		return (1ULL << 48) - 1;
	default:
		FAIL("IOMMU '%s' (/sys/class/iommu): no known aperture",
		     vu_iommu_name(th_iommu()));
	}
	return 0;
}

/*
 * Stock type1 of 6.1 and 6.12 accepts a mapping that ends at the last
 * address (iova + size = 2^64) but never unmaps it: its unmap loop runs
 * while iova < iova + size, which wraps to 0, so the pages stay pinned for
 * the life of the guest. foliomap and stock 7.x unmap it. Only an aperture
 * that reaches 2^64 - 1 (AMD-Vi's) lets such a mapping be made.
 */
static inline bool th_end_mapping_leaks(void)
{
	return !is_foliomap() && !th_stock_upstream_type1();
}

/*
 * The reserved regions of @group (sysfs), which fail the test when they
 * cannot be read; the count.
 */
static inline int th_resv_regions(struct th *t, int group, struct vu_resv *r, int max)
{
	int n = vu_group_resv_regions(group, r, max);

	if (n < 0)
		FAIL("reserved regions of IOMMU group %d: %s", group, strerror(-n));
	return n;
}

/*
 * The MSI window of the first e1000e group: its one reserved region of
 * type "msi" (x86: the interrupt range 0xfee00000-0xfeefffff, IOMMU_RESV_MSI;
 * SMMUv3: the software MSI window at 0x8000000, IOMMU_RESV_SW_MSI). Fails
 * the test unless there is exactly one.
 */
static inline void th_msi_window(struct th *t, uint64_t *start, uint64_t *end);

/* The usable IOVA ranges of container @c (GET_INFO), failing the test if none. */
static inline int th_iova_ranges(struct th *t, int c, struct vfio_iova_range *r, int max)
{
	int n = vu_iova_ranges(c, r, max);

	if (n <= 0)
		FAIL("GET_INFO's IOVA ranges: %s", n ? strerror(-n) : "none");
	if (n > max)
		FAIL("GET_INFO reports %d IOVA ranges, more than %d", n, max);
	return n;
}

/*
 * MGAW (maximum guest address width) from the capability register of the
 * first DMAR unit (sysfs, hex), or -errno.
 */
static inline int th_dmar_mgaw_bits(void)
{
	char buf[64];
	unsigned long long cap;
	ssize_t n;
	int fd = open("/sys/class/iommu/dmar0/intel-iommu/cap", O_RDONLY);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	if (sscanf(buf, "%llx", &cap) != 1)
		return -EINVAL;
	return (int)((cap >> 16) & 0x3f) + 1;
}

/*
 * VFIO_GROUPS from vm/run: the e1000e groups first, the edu group last.
 * Fails the test when fewer than "need" e1000e groups are exported.
 */
static inline int th_e1000e_groups(struct th *t, int *groups, int need)
{
	int all[8];
	int n = vu_env_groups(all, 8);

	if (n < need + 1)
		FAIL("VFIO_GROUPS='%s': need %d e1000e groups and the edu group",
		     getenv("VFIO_GROUPS") ? getenv("VFIO_GROUPS") : "", need);
	memcpy(groups, all, need * sizeof(int));
	return n - 1;
}

static inline void th_msi_window(struct th *t, uint64_t *start, uint64_t *end)
{
	struct vu_resv r[16];
	int group, i, n, found = 0;

	th_e1000e_groups(t, &group, 1);
	n = th_resv_regions(t, group, r, 16);
	for (i = 0; i < n; i++) {
		if (strcmp(r[i].type, "msi"))
			continue;
		*start = r[i].start;
		*end = r[i].end;
		found++;
	}
	if (found != 1)
		FAIL("IOMMU group %d has %d reserved regions of type msi, not one", group, found);
}

static inline int th_edu_group(struct th *t)
{
	int all[8];
	int n = vu_env_groups(all, 8);

	if (n < 2)
		FAIL("VFIO_GROUPS='%s': no edu group",
		     getenv("VFIO_GROUPS") ? getenv("VFIO_GROUPS") : "");
	return all[n - 1];
}

/*
 * SKIP unless [@iova, @iova + @size) is clear of @group's reserved regions
 * (but relaxable direct-mapped ones): for a test whose IOVAs are the only
 * ones it can use, e.g. a 1G-aligned 1G that edu's 28-bit DMA mask reaches,
 * which is IOVA 0 and holds arm64's software MSI window (0x8000000).
 */
static inline void th_need_iova(struct th *t, int group, uint64_t iova, uint64_t size)
{
	struct vu_resv r[16];
	int i, n = th_resv_regions(t, group, r, 16);

	for (i = 0; i < n; i++) {
		if (!strcmp(r[i].type, "direct-relaxable") ||
		    r[i].end < iova || r[i].start > iova + size - 1)
			continue;
		SKIP("IOVA 0x%llx-0x%llx, the only range the test can use, holds the IOMMU's "
		     "reserved region 0x%llx-0x%llx (%s)", (unsigned long long)iova,
		     (unsigned long long)(iova + size - 1), (unsigned long long)r[i].start,
		     (unsigned long long)r[i].end, r[i].type);
	}
}

/* Module that must serve new containers for the backend under test. */
static inline const char *th_backend_module(void)
{
	return is_foliomap() ? "foliomap" : "vfio_iommu_type1";
}

/*
 * Container with the given groups and type.  Fails unless the backend under
 * test (not another registered driver) took it.  Group fds go to gfds.
 */
static inline int th_container_of(struct th *t, int type, const int *groups,
				  int ngroups, int *gfds)
{
	const char *mod = th_backend_module();
	long ref0 = vu_module_refcnt(mod), ref1;
	int c, i;

	if (ref0 < 0)
		FAIL("module %s is not loaded", mod);
	c = vu_container_setup(groups, ngroups, type, gfds);
	if (c < 0)
		FAIL("container setup (type %d, %d groups) failed: %s",
		     type, ngroups, strerror(-c));
	th_own_fd(t, c);
	for (i = 0; i < ngroups; i++)
		th_own_fd(t, gfds[i]);
	ref1 = vu_module_refcnt(mod);
	if (ref1 != ref0 + 1)
		FAIL("container not served by %s (refcnt %ld -> %ld)", mod, ref0, ref1);
	return c;
}

/* Container with the first ngroups e1000e groups and the given type. */
static inline int th_container_type(struct th *t, int type, int ngroups)
{
	int groups[4], gfds[4];

	th_e1000e_groups(t, groups, ngroups);
	return th_container_of(t, type, groups, ngroups, gfds);
}

/* Container of the test's type (v1/v2; v2 for plain TEST()). */
static inline int th_container(struct th *t)
{
	return th_container_type(t, t->type ? t->type : VFIO_TYPE1v2_IOMMU, 1);
}

/* Memory of a kind; hugetlb that cannot be reserved SKIPs. */
static inline void *th_mem(struct th *t, enum vu_mem_kind kind, size_t size)
{
	void *p = vu_mem_alloc(kind, size);

	if (!p) {
		/* memfd2m: only the pool (or its sysfs directory) missing */
		if (kind == VU_MEM_HUGETLB2M || kind == VU_MEM_HUGETLB1G ||
		    ((kind == VU_MEM_MEMFD2M || kind == VU_MEM_MEMFD1G) &&
		     (errno == ENOMEM || errno == ENOENT)))
			SKIP("cannot get %zu MiB of %s: %s", size >> 20,
			     vu_mem_name(kind), strerror(errno));
		FAIL("cannot allocate %zu MiB of %s: %s", size >> 20,
		     vu_mem_name(kind), strerror(errno));
	}
	return th_own_mem(t, p, size);
}

/* A byte pattern by offset and seed, for data the device copies. */
static inline char th_pat(size_t i, int seed)
{
	return (char)(i * 13 + seed);
}

static inline void th_fill(char *p, size_t len, int seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = th_pat(i, seed);
}

/* Index of the first byte that differs from the pattern, len if none. */
static inline size_t th_check(const char *p, size_t len, int seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != th_pat(i, seed))
			break;
	return i;
}

/* Anonymous private 4K-aligned memory, every page touched. */
static inline void *th_anon(struct th *t, size_t size)
{
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	size_t off;

	if (p == MAP_FAILED)
		FAIL("mmap %zu: %s", size, strerror(errno));
	for (off = 0; off < size; off += SZ_4K)
		p[off] = 1;
	return th_own_mem(t, p, size);
}

/* A dma_unmap with full control over argsz (used by argument checks). */
static inline int th_unmap_raw(int c, struct vfio_iommu_type1_dma_unmap *u)
{
	return ioctl(c, VFIO_IOMMU_UNMAP_DMA, u) < 0 ? -errno : 0;
}

static inline int th_map_raw(int c, struct vfio_iommu_type1_dma_map *m)
{
	return ioctl(c, VFIO_IOMMU_MAP_DMA, m) < 0 ? -errno : 0;
}

/* VFIO_IOMMU_GET_INFO into buf (argsz = size); -errno on failure. */
static inline int th_get_info(int c, void *buf, size_t size)
{
	struct vfio_iommu_type1_info *info = buf;

	memset(buf, 0, size);
	info->argsz = size;
	return ioctl(c, VFIO_IOMMU_GET_INFO, info) < 0 ? -errno : 0;
}

/* Capability of the given id in a GET_INFO reply, or NULL. */
static inline struct vfio_info_cap_header *
th_find_cap(void *buf, size_t size, uint16_t id)
{
	struct vfio_iommu_type1_info *info = buf;
	uint32_t off = info->cap_offset;
	int guard = 0;

	if (!(info->flags & VFIO_IOMMU_INFO_CAPS))
		return NULL;
	while (off && off + sizeof(struct vfio_info_cap_header) <= size &&
	       guard++ < 32) {
		struct vfio_info_cap_header *h = (void *)((char *)buf + off);

		if (h->id == id)
			return h;
		off = h->next;
	}
	return NULL;
}

/* DMA entries still available in the container, or -errno. */
static inline long long th_dma_avail(int c)
{
	char buf[4096];
	struct vfio_iommu_type1_info_dma_avail *cap;
	int ret = th_get_info(c, buf, sizeof(buf));

	if (ret)
		return ret;
	cap = (void *)th_find_cap(buf, sizeof(buf), VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL);
	return cap ? (long long)cap->avail : -ENOENT;
}

/* VFIO_IOMMU_DIRTY_PAGES with @flags alone (START, STOP): 0 or -errno. */
static inline int th_dirty(int c, uint32_t flags)
{
	struct vfio_iommu_type1_dirty_bitmap d = { .argsz = sizeof(d), .flags = flags };

	return ioctl(c, VFIO_IOMMU_DIRTY_PAGES, &d) < 0 ? -errno : 0;
}

/* GET_BITMAP of [@iova, @iova + @size) in @pgsize pages into @bytes at @data. */
static inline int th_get_bitmap(int c, uint64_t iova, uint64_t size, uint64_t pgsize,
				void *data, uint64_t bytes)
{
	struct {
		struct vfio_iommu_type1_dirty_bitmap d;
		struct vfio_iommu_type1_dirty_bitmap_get r;
	} g = {
		.d = { .argsz = sizeof(g), .flags = VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP },
		.r = { .iova = iova, .size = size,
		       .bitmap = { .pgsize = pgsize, .size = bytes, .data = data } },
	};

	return ioctl(c, VFIO_IOMMU_DIRTY_PAGES, &g) < 0 ? -errno : 0;
}

/* Module parameter of the active backend. */
static inline void th_param_path(char *path, size_t len, const char *param)
{
	snprintf(path, len, "/sys/module/%s/parameters/%s",
		 is_foliomap() ? "foliomap" : "vfio_iommu_type1", param);
}

static inline long long th_param_read(const char *param)
{
	char path[128];

	th_param_path(path, sizeof(path), param);
	return vu_read_number(path);
}

static inline int th_param_write(const char *param, long long v)
{
	char path[128];

	th_param_path(path, sizeof(path), param);
	return vu_write_number(path, v);
}

/* Drop CAP_IPC_LOCK from this (already forked) test process. */
static inline void th_drop_ipc_lock(struct th *t)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &hdr, data))
		FAIL("capget: %s", strerror(errno));
	data[0].effective &= ~(1U << CAP_IPC_LOCK);
	data[0].permitted &= ~(1U << CAP_IPC_LOCK);
	data[0].inheritable &= ~(1U << CAP_IPC_LOCK);
	if (syscall(SYS_capset, &hdr, data))
		FAIL("capset: %s", strerror(errno));
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) || (data[0].effective & (1U << CAP_IPC_LOCK)))
		FAIL("CAP_IPC_LOCK still effective");
}

static inline void th_set_memlock(struct th *t, unsigned long long bytes)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl))
		FAIL("getrlimit: %s", strerror(errno));
	rl.rlim_cur = bytes;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < bytes)
		rl.rlim_max = bytes;
	if (setrlimit(RLIMIT_MEMLOCK, &rl))
		FAIL("setrlimit(RLIMIT_MEMLOCK, %llu): %s", bytes, strerror(errno));
}

/* Map and expect success; the common case spelled out once. */
#define MAP_OK(c, iova, p, size)	ASSERT_EQ(vu_map(c, iova, p, size, RW), 0)
#define UNMAP_RANGE(c, iova, size, expect_done) do {			\
	uint64_t _done = ~0ULL;						\
	ASSERT_EQ(vu_unmap(c, iova, size, 0, &_done), 0);		\
	ASSERT_EQ(_done, expect_done);					\
} while (0)
#define UNMAP_OK(c, iova, size)	UNMAP_RANGE(c, iova, size, size)

/* Pins outstanding and VmLck (kB) since the test began: both checks, non-fatal. */
#define EXPECT_PINS_VMLCK(pins, kb) do {				\
	EXPECT_EQ(th_pins(t), pins);					\
	EXPECT_EQ(th_vmlck_kb(t), kb);					\
} while (0)
/* The same for @pages 4K pages, each pinned once and charged once. */
#define EXPECT_ACCT(pages) do {						\
	long long _pages = (pages);					\
	EXPECT_EQ(th_pins(t), _pages);					\
	EXPECT_EQ(th_vmlck_kb(t), _pages * 4);				\
} while (0)

/*
 * The pins of one mapping of @size bytes of @kind memory from @off bytes
 * into a folio-aligned buffer: one per 4K page, except foliomap's one per
 * folio for a mapping that starts in hugetlbfs and has more than 16 pages
 * (folio pins: t_hugetlbfs.c). VmLck is charged per 4K page either way.
 */
static inline long long th_kind_pins_at(enum vu_mem_kind kind, size_t off, size_t size)
{
	size_t folio = 0;

	if (kind == VU_MEM_HUGETLB2M || kind == VU_MEM_MEMFD2M)
		folio = SZ_2M;
	else if (kind == VU_MEM_HUGETLB1G || kind == VU_MEM_MEMFD1G)
		folio = SZ_1G;
	if (!is_foliomap() || !folio || size <= 16 * SZ_4K)
		return size / SZ_4K;
	return (off + size + folio - 1) / folio - off / folio;
}

static inline long long th_kind_pins(enum vu_mem_kind kind, size_t size)
{
	return th_kind_pins_at(kind, 0, size);
}


/*
 * @mod's reference count once it is back to @want, or after 5 s: a dead
 * process's foliomap helper threads hold the module until a kernel worker
 * reaps them, a moment after the process is gone (kmod/helper.c).
 */
static inline long th_module_refcnt_back(const char *mod, long want)
{
	long n;
	int i;

	for (i = 0; (n = vu_module_refcnt(mod)) != want && i < 500; i++)
		usleep(10000);
	return n;
}

/*
 * A forked child that reports back through a pipe: th_fork() returns
 * true in the child, which does its part and ends with th_child_reply()
 * (@len bytes to the parent, exit 0; exit 2 if the write fails); the
 * parent then calls th_child_collect(), which reads the @len bytes, reaps
 * the child and fails the test unless both worked and it exited 0.
 */
struct th_child {
	pid_t	pid;
	int	pipe[2];
};

static inline bool th_fork(struct th *t, struct th_child *ch)
{
	ASSERT_EQ(pipe(ch->pipe), 0);
	ch->pid = fork();
	ASSERT_GE(ch->pid, 0);
	return ch->pid == 0;
}

static inline void __attribute__((noreturn))
th_child_reply(struct th_child *ch, const void *buf, size_t len)
{
	if (write(ch->pipe[1], buf, len) != (ssize_t)len)
		_exit(2);
	_exit(0);
}

static inline void th_child_collect(struct th *t, struct th_child *ch, void *buf, size_t len)
{
	int status;

	close(ch->pipe[1]);
	ASSERT_EQ(read(ch->pipe[0], buf, len), len);
	close(ch->pipe[0]);
	ASSERT_EQ(waitpid(ch->pid, &status, 0), ch->pid);
	ASSERT_EQ(status, 0);
}

/* Reap child @pid (fails the test if waitpid does); returns its wait status. */
static inline int th_reap(struct th *t, pid_t pid)
{
	int status;

	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	return status;
}

/*
 * Reap child @pid if it exits within @ms (polled every 10 ms): true and
 * its wait status in *@status, or false with the child still running (a
 * process stuck in the kernel cannot be waited for).
 */
static inline bool th_reap_within(pid_t pid, int *status, int ms)
{
	double t0 = vu_now();

	while (waitpid(pid, status, WNOHANG) == 0) {
		if (vu_now() - t0 > ms / 1000.0)
			return false;
		usleep(10000);
	}
	return true;
}

/*
 * A mapper to SIGKILL in the middle of a large MAP_DMA. The child sets up a
 * v2 container on @group, takes @size bytes from @mem (so the memory is the
 * child's own), writes 'R' to a pipe, maps it all at @iova, then writes 'D'
 * (done) or 'E' (failed) and waits to be killed. Returns its pid after 'R'
 * was read; *@rfd is the pipe's read end, now non-blocking, for the
 * caller's watch loop to read 'D'/'E' from.
 */
static inline pid_t th_mapper_start(struct th *t, int group, void *(*mem)(size_t),
				    size_t size, uint64_t iova, int *rfd)
{
	char ready = 0;
	int pfd[2];
	pid_t pid;

	ASSERT_EQ(pipe(pfd), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		int gfd, c = vu_container_setup(&group, 1, VFIO_TYPE1v2_IOMMU, &gfd);
		void *p = mem(size);
		int ret;

		close(pfd[0]);
		if (c < 0 || !p)
			_exit(2);
		if (write(pfd[1], "R", 1) != 1)
			_exit(3);
		ret = vu_map(c, iova, p, size, RW);
		if (write(pfd[1], ret ? "E" : "D", 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	close(pfd[1]);
	ASSERT_EQ(read(pfd[0], &ready, 1), 1);
	ASSERT_EQ(ready, 'R');
	ASSERT_EQ(fcntl(pfd[0], F_SETFL, O_NONBLOCK), 0);
	*rfd = pfd[0];
	return pid;
}

/*
 * SIGKILL the mapper and reap it; closes @rfd. Returns what it reported
 * ('D', 'E', or 0 while still mapping) given @done, what the watch loop
 * read; *@status: its wait status.
 */
static inline char th_mapper_kill(struct th *t, pid_t pid, int rfd, char done, int *status)
{
	kill(pid, SIGKILL);
	ASSERT_EQ(waitpid(pid, status, 0), pid);
	if (!done && read(rfd, &done, 1) != 1)
		done = 0;
	close(rfd);
	return done;
}

/*
 * Watch the mapper (every 10 ms, 30 s at most) until @min_pins pages are
 * pinned or it reports, then th_mapper_kill() it and say how far it got.
 * *@at_kill: the pins seen last before the kill.
 */
static inline char th_mapper_kill_at(struct th *t, pid_t pid, int rfd, long long min_pins,
				     long long *at_kill, int *status)
{
	char done = 0;
	int i;

	for (i = 0; i < 3000; i++) {
		*at_kill = th_pins(t);
		if (*at_kill >= min_pins || read(rfd, &done, 1) == 1)
			break;
		usleep(10000);
	}
	done = th_mapper_kill(t, pid, rfd, done, status);
	th_diag("killed with %lld pages pinned (map %s)", *at_kill,
		done == 'D' ? "had finished" : done == 'E' ? "had failed" : "in progress");
	return done;
}

/*
 * A userfaultfd with [@p, @p + @len) registered in @mode (UFFDIO_REGISTER_
 * MODE_*), closed by the harness. Nobody reads it: a fault it raises is
 * never served, so a kernel that waits for it waits until the fd closes.
 */
static inline int th_uffd_register(struct th *t, void *p, size_t len, __u64 mode)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)p, .len = len },
		.mode = mode,
	};
	int uffd = syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	if (uffd < 0)
		FAIL("userfaultfd: %s", strerror(errno));
	th_own_fd(t, uffd);
	ASSERT_EQ(ioctl(uffd, UFFDIO_API, &api), 0);
	ASSERT_EQ(ioctl(uffd, UFFDIO_REGISTER, &reg), 0);
	return uffd;
}

/*
 * A call that must not block, run in a thread of its own so that a kernel
 * that does block fails the test instead of hanging it: th_call_start()
 * runs @fn(@arg), th_call_wait() waits up to @ms for it to return (false
 * if it did not); th_call_join() then waits for good (the caller first
 * undoes whatever blocks it, e.g. closes a userfaultfd) and returns its
 * result.
 */
struct th_call {
	pthread_t	thread;
	int		pipe[2];
	long		(*fn)(void *arg);
	void		*arg;
	long		ret;
};

static inline void *th_call_thread(void *data)
{
	struct th_call *c = data;

	c->ret = c->fn(c->arg);
	if (write(c->pipe[1], "x", 1) != 1)
		abort();
	return NULL;
}

static inline void th_call_start(struct th *t, struct th_call *c, long (*fn)(void *), void *arg)
{
	c->fn = fn;
	c->arg = arg;
	ASSERT_EQ(pipe(c->pipe), 0);
	ASSERT_EQ(pthread_create(&c->thread, NULL, th_call_thread, c), 0);
}

static inline bool th_call_wait(struct th_call *c, int ms)
{
	struct pollfd pfd = { .fd = c->pipe[0], .events = POLLIN };

	return poll(&pfd, 1, ms) == 1;
}

static inline long th_call_join(struct th_call *c)
{
	pthread_join(c->thread, NULL);
	close(c->pipe[0]);
	close(c->pipe[1]);
	return c->ret;
}

#endif
