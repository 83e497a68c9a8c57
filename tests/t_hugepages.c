// SPDX-License-Identifier: GPL-2.0-only
/*
 * hugetlbfs pinned a huge page at a time: private 2M pages, 1G pages
 * (private, shared, never touched, aliased), and the bounds of each run
 * under the lock: the vma it lies in, the request, the huge page.
 *
 * foliomap pins one page of each huge page segment with GUP and takes the
 * rest of the segment from the folio (kmod/hugepin.c): one pin per folio
 * and segment, where stock pins every 4K page (th_kind_pins()). What the
 * device reads and writes through the IOMMU shows that the pages taken
 * from the folio are those the CPU sees at the same addresses.
 *
 * Faulting untouched huge pages in is done under mmap_lock; a writer of
 * the same process (another thread's mmap) gets in between them, as
 * under stock.
 *
 * Every page is reserved first (tests/check boots the guests with one 1G
 * page in the pool; the 2M pool grows on demand); a test SKIPs only when
 * the pool cannot give the pages.
 */
#include "common.h"
#include "edu.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT	26
#endif
#define MAP_HUGE_2MB	(21 << MAP_HUGE_SHIFT)
#define MAP_HUGE_1GB	(30 << MAP_HUGE_SHIFT)
#define KB_1G		1048576UL
#define SRC_IOVA	0x100000ULL	/* edu's source page, below its DMA mask */
#define HUGE_IOVA	0x0ULL		/* 1G-aligned, so 1G pages map as 1G */
#define CNT		0xf00

/* @size of address space aligned to @align, PROT_NONE, owned by the harness. */
static char *region(struct th *t, size_t size, size_t align)
{
	char *r = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (r == MAP_FAILED)
		FAIL("mmap %zu MiB PROT_NONE: %s", (size + align) >> 20, strerror(errno));
	th_own_mem(t, r, size + align);
	return (char *)(((uintptr_t)r + align - 1) & ~(uintptr_t)(align - 1));
}

/* n free pages of @page_kb beyond those reserved, or SKIP. */
static void reserve(struct th *t, unsigned long page_kb, unsigned long n)
{
	char path[128];
	long long resv;
	int err;

	snprintf(path, sizeof(path),
		 "/sys/kernel/mm/hugepages/hugepages-%lukB/resv_hugepages", page_kb);
	resv = vu_read_number(path);
	if (resv < 0)
		SKIP("no %lu kB hugepage pool (%s)", page_kb, path);
	err = vu_hugepages_reserve(page_kb, n + resv);
	if (err)
		SKIP("cannot reserve %lu pages of %lu kB: %s", n, page_kb, strerror(-err));
}

static void reserve_1g(struct th *t, unsigned long n)
{
	reserve(t, KB_1G, n);
}

/* Private hugetlbfs of @size at @at (NULL: anywhere), @page 2M or 1G. */
static char *huge_private(struct th *t, char *at, size_t size, size_t page)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB |
		    (page == SZ_1G ? MAP_HUGE_1GB : MAP_HUGE_2MB) | (at ? MAP_FIXED : 0);
	char *p;

	reserve(t, page >> 10, size / page);
	p = mmap(at, size, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (p == MAP_FAILED) {
		if (errno == ENOMEM)
			SKIP("no free %s hugetlb pages", page == SZ_1G ? "1G" : "2M");
		FAIL("mmap %zu MiB of hugetlbfs: %s", size >> 20, strerror(errno));
	}
	return th_own_mem(t, p, size);
}

/* edu copies @cnt bytes from IOVA @from to IOVA @to, through its buffer. */
static void dev_copy(struct th *t, struct edu *e, uint64_t from, uint64_t to, size_t cnt)
{
	EDU_FROM_RAM(e, from, 0, cnt);
	EDU_TO_RAM(e, 0, to, cnt);
}

/*
 * [2 private 2M hugetlb pages][16 anonymous 4K pages]. One mapping from 4K
 * into the first huge page to the end of the anonymous pages: each huge
 * page is one segment (the first partial), the anonymous vma its own
 * pages. The device copies from deep inside the second huge page (pages
 * foliomap took from the folio, not from GUP) onto the anonymous pages.
 */
TEST_V12(private_2m_into_anon)
{
	const size_t anon = 16 * SZ_4K, len = 2 * SZ_2M - SZ_4K + anon;
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *b = region(t, 4 * SZ_2M, SZ_2M);
	char *h, *a, *p;
	size_t off;

	h = huge_private(t, b, 2 * SZ_2M, SZ_2M);
	a = mmap(b + 2 * SZ_2M, anon, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	ASSERT_TRUE(a == b + 2 * SZ_2M);
	ASSERT_EQ(vu_madvise_thp(a, anon, MADV_NOHUGEPAGE), 0);
	th_fill(h, 2 * SZ_2M, 3);
	memset(a, 0, anon);
	p = h + SZ_4K;

	edu_open(t, gfd, &e);
	MAP_OK(c, HUGE_IOVA, p, len);
	EXPECT_PINS_VMLCK(is_foliomap() ? 2 + 16 : len / SZ_4K, len >> 10);
	/* 0x1a3f00 into the second huge page, to the anonymous pages */
	off = SZ_2M + 0x1a3f00;
	dev_copy(t, &e, HUGE_IOVA + off - SZ_4K, HUGE_IOVA + 2 * SZ_2M - SZ_4K + 0x80, CNT);
	EXPECT_EQ(memcmp(a + 0x80, h + off, CNT), 0);
	/* and back, onto the first huge page's last bytes */
	th_fill(a + 0x2000, CNT, 9);
	dev_copy(t, &e, HUGE_IOVA + 2 * SZ_2M - SZ_4K + 0x2000, HUGE_IOVA + SZ_2M - SZ_4K - CNT, CNT);
	EXPECT_EQ(th_check(h + SZ_2M - CNT, CNT, 9), CNT);
	UNMAP_OK(c, HUGE_IOVA, len);
	EXPECT_PINS_VMLCK(0, 0);
}

/*
 * The kernel keeps a huge page whole in its vma: munmap, mprotect and
 * mremap refuse to cut one, so a run taken from a folio never extends
 * into memory another vma maps. What they may do, at huge page
 * boundaries, is honoured: a read-only second page refuses a
 * device-writable map (-EFAULT, nothing pinned or left mapped) and takes a
 * read-only one; a hole after the first page fails the map the same way.
 */
TEST_V12(private_2m_vma_bounds)
{
	int c = th_container(t);
	char *b = region(t, 4 * SZ_2M, SZ_2M);
	char *h = huge_private(t, b, 2 * SZ_2M, SZ_2M);
	uint64_t done = ~0ULL;

	memset(h, 1, 2 * SZ_2M);
	EXPECT_EQ(munmap(h + SZ_2M / 2, SZ_4K), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(mprotect(h + SZ_2M / 2, SZ_2M, PROT_READ), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_TRUE(mremap(h + SZ_4K, SZ_4K, SZ_4K, MREMAP_MAYMOVE | MREMAP_FIXED,
			   b + 3 * SZ_2M) == MAP_FAILED);

	ASSERT_EQ(mprotect(h + SZ_2M, SZ_2M, PROT_READ), 0);
	EXPECT_EQ(vu_map(c, IOVA_B, h, 2 * SZ_2M, RW), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	ASSERT_EQ(vu_unmap(c, IOVA_B, 2 * SZ_2M, 0, &done), 0);
	EXPECT_EQ(done, 0);
	ASSERT_EQ(vu_map(c, IOVA_B, h, 2 * SZ_2M, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_PINS_VMLCK(th_kind_pins(VU_MEM_HUGETLB2M, 2 * SZ_2M), 4096);
	UNMAP_OK(c, IOVA_B, 2 * SZ_2M);
	EXPECT_PINS_VMLCK(0, 0);

	ASSERT_EQ(munmap(h + SZ_2M, SZ_2M), 0);
	EXPECT_EQ(vu_map(c, IOVA_B, h, 2 * SZ_2M, RW), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	ASSERT_EQ(vu_unmap(c, IOVA_B, 2 * SZ_2M, 0, &done), 0);
	EXPECT_EQ(done, 0);
}

/*
 * One private 1G page, mapped whole at a 1G-aligned IOVA: one pin on
 * foliomap, 262144 on stock, 1 GiB charged either way. The device copies
 * from 255 MiB into the page to 1 MiB into it. Then a page never touched:
 * MAP_DMA faults it in (zeroed) through GUP.
 */
TEST(private_1g)
{
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	const size_t from = (255ULL << 20) + 0x40, to = (1ULL << 20) + 0x800;
	char *h;

	th_need_iova(t, th_edu_group(t), HUGE_IOVA, SZ_1G);
	h = huge_private(t, NULL, SZ_1G, SZ_1G);
	ASSERT_EQ((uintptr_t)h & (SZ_1G - 1), 0);
	th_fill(h + from, CNT, 5);
	memset(h + to, 0, CNT);
	edu_open(t, gfd, &e);
	MAP_OK(c, HUGE_IOVA, h, SZ_1G);
	EXPECT_PINS_VMLCK(th_kind_pins(VU_MEM_HUGETLB1G, SZ_1G), SZ_1G >> 10);
	dev_copy(t, &e, HUGE_IOVA + from, HUGE_IOVA + to, CNT);
	EXPECT_EQ(th_check(h + to, CNT, 5), CNT);
	UNMAP_OK(c, HUGE_IOVA, SZ_1G);
	EXPECT_PINS_VMLCK(0, 0);
	ASSERT_EQ(munmap(h, SZ_1G), 0);

	h = huge_private(t, NULL, SZ_1G, SZ_1G);
	MAP_OK(c, HUGE_IOVA, h, SZ_1G);
	EXPECT_PINS_VMLCK(th_kind_pins(VU_MEM_HUGETLB1G, SZ_1G), SZ_1G >> 10);
	th_fill(h + from, CNT, 6);
	dev_copy(t, &e, HUGE_IOVA + from, HUGE_IOVA + to, CNT);
	EXPECT_EQ(th_check(h + to, CNT, 6), CNT);
	UNMAP_OK(c, HUGE_IOVA, SZ_1G);
	EXPECT_PINS_VMLCK(0, 0);
}

/*
 * One 1G memfd page (what QEMU's hugetlbsize=1G memfd backend maps) at two
 * adjacent addresses, both at file offset 0. One mapping over the last
 * 128 MiB of the first and the first 128 MiB of the second: two segments
 * of one folio, a pin each on foliomap, whether the page is in the page
 * cache already (memfd_pin_folios()) or faulted in by the map (GUP). The
 * device writes at file offset 1G - 128M + 0x3000 what it read at file
 * offset 0x2000, through the two vmas.
 */
static void memfd_1g_aliases(struct th *t, bool touched)
{
	const size_t half = 128ULL << 20;
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	char *b = region(t, 2 * SZ_1G, SZ_1G);
	char *p, *q;
	int fd;

	th_need_iova(t, th_edu_group(t), HUGE_IOVA, 2 * half);
	reserve_1g(t, 1);
	fd = vu_memfd_huge_create(SZ_1G, KB_1G);
	if (fd == -ENOMEM)
		SKIP("no free 1G page");
	ASSERT_GE(fd, 0);
	th_own_fd(t, fd);
	p = mmap(b, SZ_1G, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	ASSERT_TRUE(p == b);
	q = mmap(b + SZ_1G, SZ_1G, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	ASSERT_TRUE(q == b + SZ_1G);
	if (touched)
		p[0] = 1;

	edu_open(t, gfd, &e);
	MAP_OK(c, HUGE_IOVA, b + SZ_1G - half, 2 * half);
	EXPECT_PINS_VMLCK(is_foliomap() ? 2 : 2 * half / SZ_4K, 2 * half >> 10);
	th_fill(q + 0x2000, CNT, 7);
	dev_copy(t, &e, HUGE_IOVA + half + 0x2000, HUGE_IOVA + 0x3000, CNT);
	EXPECT_EQ(th_check(p + SZ_1G - half + 0x3000, CNT, 7), CNT);
	EXPECT_EQ(th_check(q + SZ_1G - half + 0x3000, CNT, 7), CNT);
	UNMAP_OK(c, HUGE_IOVA, 2 * half);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST(memfd_1g_aliases_present) { memfd_1g_aliases(t, true); }
TEST(memfd_1g_aliases_untouched) { memfd_1g_aliases(t, false); }

/*
 * A second thread of the process mmaps and munmaps (mmap_lock for write)
 * while the main thread maps 256 untouched private 2M pages, each faulted
 * in and zeroed under mmap_lock for read. Stock pins one huge page per
 * GUP call and drops the lock in between; foliomap's fill goes on to the
 * next page only while no writer waits (kmod/hugepin.c). Either way the
 * writer must get in during the map, not once per fill of up to 1 GiB:
 * at least 4 of its mmap/munmap pairs complete between the MAP_DMA's
 * start and end. This counts what got in, not how long it took.
 */
struct writer {
	atomic_int state;	/* 0 wait, 1 MAP_DMA running, 2 stop */
	atomic_long during;	/* mmap/munmap pairs while state was 1 */
	atomic_int started;
	int err;
};

static void *writer_fn(void *arg)
{
	struct writer *w = arg;

	atomic_store(&w->started, 1);
	while (atomic_load(&w->state) != 2) {
		int was = atomic_load(&w->state);
		void *p = mmap(NULL, SZ_4K, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED || munmap(p, SZ_4K)) {
			w->err = errno;
			break;
		}
		/* Started and finished while the map ran. */
		if (was == 1 && atomic_load(&w->state) == 1)
			atomic_fetch_add(&w->during, 1);
	}
	return NULL;
}

TEST(private_2m_first_touch_lets_writers_in)
{
	const size_t len = 256 * SZ_2M;
	struct writer w = { 0 };
	int c = th_container(t);
	char *h = huge_private(t, NULL, len, SZ_2M);
	pthread_t thr;
	int err;

	ASSERT_EQ(pthread_create(&thr, NULL, writer_fn, &w), 0);
	while (!atomic_load(&w.started))
		sched_yield();
	atomic_store(&w.state, 1);
	err = vu_map(c, IOVA_B, h, len, RW);
	atomic_store(&w.state, 2);
	pthread_join(thr, NULL);
	ASSERT_EQ(err, 0);
	EXPECT_EQ(w.err, 0);
	th_diag("writer's mmap/munmap pairs during the map of 256 untouched 2M pages: %ld",
		atomic_load(&w.during));
	EXPECT_GE(atomic_load(&w.during), 4);
	EXPECT_PINS_VMLCK(th_kind_pins(VU_MEM_HUGETLB2M, len), len >> 10);
	UNMAP_OK(c, IOVA_B, len);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST_HARNESS_MAIN
