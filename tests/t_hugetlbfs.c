// SPDX-License-Identifier: GPL-2.0-only
/*
 * Shared hugetlbfs memory (memfd_create(MFD_HUGETLB), 2M pages) through
 * VFIO: pins and VmLck per backend and kernel, device DMA into and out of
 * it, MAP_PRIVATE (COW) and read-only mappings of such a file, mappings past
 * its end, ranges that cross into other VMAs, dirty tracking, and a process
 * killed while mapping.
 *
 * Pins (nr_foll_pin_acquired - nr_foll_pin_released): stock holds one pin
 * per 4K page.  foliomap pins a mapping whose first page lies in a
 * hugetlbfs VMA (shared or private) by folio: present page-cache folios of
 * a MAP_SHARED VMA with memfd_pin_folios() (6.12 and later), everything
 * else with one GUP per huge page; one pin per folio the mapping covers
 * ("folio mode"), for the whole mapping, also in the VMAs it continues
 * into.  A mapping that starts anywhere else, or of at most 16 pages,
 * keeps one pin per 4K page everywhere.  VmLck is charged per 4K page
 * always.
 */
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "common.h"
#include "edu.h"

#define NR_2M		"/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
#define FREE_2M		"/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"
#define RESV_2M		"/sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages"
#define COPY_CNT	0xf00	/* edu bytes per transfer, as in t_edu */
#define EDU_SRC		0x100000ULL	/* IOVAs below edu's 28-bit DMA mask */
#define EDU_HUGE	0x1000000ULL

/* foliomap: one pin per folio for a range starting in hugetlbfs */
static bool folio_mode(void)
{
	return is_foliomap();
}

/* Pins a folio-mode mapping holds: nfolios in folio mode, npages otherwise. */
static long long exp_pins(long long nfolios, long long npages)
{
	return folio_mode() ? nfolios : npages;
}

/*
 * n free 2M hugepages that no existing mapping has reserved yet (free
 * counts reserved pages too); SKIP only when the pool cannot grow.
 */
static void huge_reserve(struct th *t, unsigned long n)
{
	long long resv = vu_read_number(RESV_2M);
	int err;

	if (resv < 0)
		SKIP("no 2M hugepage pool (%s)", RESV_2M);
	err = vu_hugepages_reserve(2048, n + resv);
	if (err == -ENOMEM || err == -ENOENT)
		SKIP("cannot reserve %lu 2M hugepages: %s", n, strerror(-err));
	if (err)
		FAIL("reserving %lu 2M hugepages: %s", n, strerror(-err));
}

/* A 2M-hugetlbfs memfd of size bytes, its pages reserved, nothing faulted. */
static int memfd2m(struct th *t, size_t size)
{
	int fd;

	huge_reserve(t, size / SZ_2M);
	fd = vu_memfd2m_create(size);
	if (fd < 0)
		FAIL("memfd_create(MFD_HUGETLB | MFD_HUGE_2MB) of %zu MiB: %s",
		     size >> 20, strerror(-fd));
	return th_own_fd(t, fd);
}

/* mmap of fd (owned by the harness); fixed != NULL places it (MAP_FIXED). */
static char *fmap(struct th *t, void *fixed, size_t size, int prot, int flags, int fd)
{
	char *p = mmap(fixed, size, prot, flags | (fixed ? MAP_FIXED : 0), fd, 0);

	if (p == MAP_FAILED)
		FAIL("mmap %zu bytes prot %d flags 0x%x: %s", size, prot, flags,
		     strerror(errno));
	return th_own_mem(t, p, size);
}

static void touch_2m(char *p, size_t size)
{
	size_t off;

	for (off = 0; off < size; off += SZ_2M)
		p[off] = 1;
}

/* ------------------------------------------------------------------ */
/* populated memory: map, counters, unmap */

static void map_populated(struct th *t, size_t size)
{
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_MEMFD2M, size);
	uint64_t done = ~0ULL;

	MAP_OK(c, IOVA_B, p, size);
	EXPECT_PINS_VMLCK(exp_pins(size / SZ_2M, size / SZ_4K), size >> 10);
	if (size > SZ_2M) {
		/* v2 refuses to split a mapping; v1 unmaps nothing from inside */
		EXPECT_EQ(vu_unmap(c, IOVA_B + SZ_2M, SZ_2M, 0, &done),
			  t->v2 ? -EINVAL : 0);
		if (!t->v2)
			EXPECT_EQ(done, 0);
		EXPECT_PINS_VMLCK(exp_pins(size / SZ_2M, size / SZ_4K), size >> 10);
	}
	UNMAP_OK(c, IOVA_B, size);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST(memfd2m_map_2M_v1)
{
	t->type = VFIO_TYPE1_IOMMU;
	map_populated(t, SZ_2M);
}

TEST(memfd2m_map_64M_v2)
{
	t->type = VFIO_TYPE1v2_IOMMU;
	t->v2 = true;
	map_populated(t, 64ULL << 20);
}

/* ------------------------------------------------------------------ */
/* mappings sharing folios */

/*
 * 4M (two folios): M1 starts 4K into the first folio and runs to the end,
 * M2 is that first 4K page.  Both hold a pin on the first folio.
 */
TEST_V12(memfd2m_two_mappings_share_a_folio)
{
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_MEMFD2M, 2 * SZ_2M);

	MAP_OK(c, IOVA_B + SZ_4K, p + SZ_4K, 2 * SZ_2M - SZ_4K);
	EXPECT_PINS_VMLCK(exp_pins(2, 1023), (2 * SZ_2M - SZ_4K) >> 10);
	MAP_OK(c, IOVA_B, p, SZ_4K);
	EXPECT_PINS_VMLCK(exp_pins(3, 1024), (2 * SZ_2M) >> 10);
	UNMAP_OK(c, IOVA_B + SZ_4K, 2 * SZ_2M - SZ_4K);
	EXPECT_PINS_VMLCK(1, 4);
	UNMAP_OK(c, IOVA_B, SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

/* The same 4M at two IOVAs: pinned and charged once per mapping. */
TEST_V12(memfd2m_same_range_two_iovas)
{
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_MEMFD2M, 2 * SZ_2M);

	MAP_OK(c, IOVA_A, p, 2 * SZ_2M);
	MAP_OK(c, IOVA_B, p, 2 * SZ_2M);
	EXPECT_PINS_VMLCK(exp_pins(4, 2048), (4 * SZ_2M) >> 10);
	UNMAP_OK(c, IOVA_A, 2 * SZ_2M);
	EXPECT_PINS_VMLCK(exp_pins(2, 1024), (2 * SZ_2M) >> 10);
	UNMAP_OK(c, IOVA_B, 2 * SZ_2M);
	EXPECT_PINS_VMLCK(0, 0);
}

/* Never touched: MAP_DMA faults the folios in, same pins as populated. */
TEST_V12(memfd2m_unpopulated)
{
	const size_t size = 4 * SZ_2M;
	int c = th_container(t);
	int fd = memfd2m(t, size);
	char *p = fmap(t, NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	long long free0 = vu_read_number(FREE_2M);

	MAP_OK(c, IOVA_B, p, size);
	EXPECT_PINS_VMLCK(exp_pins(4, 1024 * 2), size >> 10);
	/* the four folios were allocated by the map */
	EXPECT_EQ(vu_read_number(FREE_2M), free0 - 4);
	UNMAP_OK(c, IOVA_B, size);
	EXPECT_PINS_VMLCK(0, 0);
	/* the page cache keeps them, zeroed */
	EXPECT_EQ(p[0] | p[size - 1], 0);
	EXPECT_EQ(vu_read_number(FREE_2M), free0 - 4);
}

/* ------------------------------------------------------------------ */
/* device DMA */

/*
 * MAP_PRIVATE of a hugetlbfs memfd whose page cache holds pattern 1 (written
 * through a MAP_SHARED mapping): a READ|WRITE MAP_DMA pins the process's own
 * copy (COW), never the page cache page.  The device writes pattern 2: the
 * private mapping sees it, the file does not.  Not folio mode (a private
 * mapping): one pin per 4K page on every backend.
 */
TEST(memfd2m_private_mapping_cow_dma)
{
	const size_t off = SZ_2M + 0x3000, off2 = 0x10000;
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	char *src = th_anon(t, SZ_4K);
	int fd;
	char *shr, *prv;

	/* two page cache folios and two private copies */
	huge_reserve(t, 4);
	fd = memfd2m(t, 2 * SZ_2M);
	shr = fmap(t, NULL, 2 * SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	prv = fmap(t, NULL, 2 * SZ_2M, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd);
	th_fill(shr, 2 * SZ_2M, 1);
	/* the private mapping maps the page cache folios (read faults) */
	ASSERT_EQ(th_check(prv, 2 * SZ_2M, 1), 2 * SZ_2M);

	edu_open(t, gfd, &e);
	MAP_OK(c, EDU_SRC, src, SZ_4K);
	MAP_OK(c, EDU_HUGE, prv, 2 * SZ_2M);
	EXPECT_PINS_VMLCK(1 + exp_pins(2, 1024), 4 + 4096);
	/* the pins took private copies with the file's data */
	EXPECT_EQ(th_check(prv, 2 * SZ_2M, 1), 2 * SZ_2M);

	/* device -> private mapping */
	th_fill(src, SZ_4K, 2);
	EDU_FROM_RAM(&e, EDU_SRC, 0, COPY_CNT);
	EDU_TO_RAM(&e, 0, EDU_HUGE + off, COPY_CNT);
	EXPECT_EQ(th_check(prv + off, COPY_CNT, 2), COPY_CNT);
	EXPECT_EQ(th_check(prv, off, 1), off);
	/* the page cache (the file) is unchanged */
	EXPECT_EQ(th_check(shr, 2 * SZ_2M, 1), 2 * SZ_2M);

	/* CPU write to the private mapping -> device reads it */
	th_fill(prv + off2, COPY_CNT, 3);
	memset(src, 0, SZ_4K);
	EDU_FROM_RAM(&e, EDU_HUGE + off2, 0, COPY_CNT);
	EDU_TO_RAM(&e, 0, EDU_SRC, COPY_CNT);
	EXPECT_EQ(th_check(src, COPY_CNT, 3), COPY_CNT);
	EXPECT_EQ(th_check(shr, 2 * SZ_2M, 1), 2 * SZ_2M);

	UNMAP_OK(c, EDU_HUGE, 2 * SZ_2M);
	UNMAP_OK(c, EDU_SRC, SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
	/* the private copies stay the process's */
	EXPECT_EQ(th_check(prv + off, COPY_CNT, 2), COPY_CNT);
}

/*
 * A shared mapping: the device writes, a second MAP_SHARED mapping of the
 * same memfd reads it; the CPU writes through the second mapping, the
 * device reads it through the first.
 */
TEST_V12(memfd2m_shared_dma_both_ways)
{
	const size_t off = SZ_2M + 0x5000, off2 = 0x7000;
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *anon = th_anon(t, 2 * SZ_4K);
	int fd = memfd2m(t, 2 * SZ_2M);
	char *m1 = fmap(t, NULL, 2 * SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	char *m2 = fmap(t, NULL, 2 * SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, fd);

	touch_2m(m1, 2 * SZ_2M);
	edu_open(t, gfd, &e);
	MAP_OK(c, EDU_SRC, anon, 2 * SZ_4K);
	MAP_OK(c, EDU_HUGE, m1, 2 * SZ_2M);
	EXPECT_PINS_VMLCK(2 + exp_pins(2, 1024), 8 + 4096);

	th_fill(anon, SZ_4K, 4);
	EDU_FROM_RAM(&e, EDU_SRC, 0, COPY_CNT);
	EDU_TO_RAM(&e, 0, EDU_HUGE + off, COPY_CNT);
	EXPECT_EQ(th_check(m2 + off, COPY_CNT, 4), COPY_CNT);
	EXPECT_EQ(th_check(m1 + off, COPY_CNT, 4), COPY_CNT);
	EXPECT_EQ(m2[off + COPY_CNT], 0);

	th_fill(m2 + off2, COPY_CNT, 5);
	EDU_FROM_RAM(&e, EDU_HUGE + off2, 0, COPY_CNT);
	EDU_TO_RAM(&e, 0, EDU_SRC + SZ_4K, COPY_CNT);
	EXPECT_EQ(th_check(anon + SZ_4K, COPY_CNT, 5), COPY_CNT);

	UNMAP_OK(c, EDU_HUGE, 2 * SZ_2M);
	UNMAP_OK(c, EDU_SRC, 2 * SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

/*
 * A PROT_READ shared mapping: a device-writable MAP_DMA is refused with
 * nothing pinned or charged; a READ-only one works and the device reads
 * what was written through a writable mapping.
 */
TEST(memfd2m_read_only_mapping)
{
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	char *dst = th_anon(t, SZ_4K);
	int fd = memfd2m(t, 2 * SZ_2M);
	char *w = fmap(t, NULL, 2 * SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	char *r = fmap(t, NULL, 2 * SZ_2M, PROT_READ, MAP_SHARED, fd);

	th_fill(w, 2 * SZ_2M, 6);
	edu_open(t, gfd, &e);
	EXPECT_EQ(vu_map(c, EDU_HUGE, r, 2 * SZ_2M, RW), -EFAULT);
	EXPECT_EQ(vu_map(c, EDU_HUGE, r, 2 * SZ_2M, VFIO_DMA_MAP_FLAG_WRITE), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	ASSERT_EQ(vu_map(c, EDU_HUGE, r, 2 * SZ_2M, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_PINS_VMLCK(exp_pins(2, 1024), 4096);
	MAP_OK(c, EDU_SRC, dst, SZ_4K);
	EDU_FROM_RAM(&e, EDU_HUGE + SZ_2M + 0x2000, 0, COPY_CNT);
	EDU_TO_RAM(&e, 0, EDU_SRC, COPY_CNT);
	EXPECT_EQ(memcmp(dst, r + SZ_2M + 0x2000, COPY_CNT), 0);
	UNMAP_OK(c, EDU_SRC, SZ_4K);
	UNMAP_OK(c, EDU_HUGE, 2 * SZ_2M);
	EXPECT_PINS_VMLCK(0, 0);
}

/*
 * A mapping of the file from offset 2M (vm_pgoff != 0), the MAP_DMA
 * starting 4K before its second folio: the device sees and writes the
 * file's pages at those offsets, not the file's first folios.
 */
TEST_V12(memfd2m_file_offset)
{
	const size_t fsize = 4 * SZ_2M, msize = 2 * SZ_2M;
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *src = th_anon(t, SZ_4K);
	int fd = memfd2m(t, fsize);
	char *whole = fmap(t, NULL, fsize, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	char *m = mmap(NULL, msize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, SZ_2M);
	size_t f;

	if (m == MAP_FAILED)
		FAIL("mmap at file offset 2M: %s", strerror(errno));
	th_own_mem(t, m, msize);
	/* each folio its own pattern: folio f at offset x holds th_pat(x, 20 + f) */
	for (f = 0; f < fsize / SZ_2M; f++)
		th_fill(whole + f * SZ_2M, SZ_2M, 20 + f);
	edu_open(t, gfd, &e);
	MAP_OK(c, EDU_SRC, src, SZ_4K);
	/* file offsets [4M - 4K, 6M): the last page of folio 1 and folio 2 */
	MAP_OK(c, EDU_HUGE, m + SZ_2M - SZ_4K, SZ_2M + SZ_4K);
	EXPECT_PINS_VMLCK(1 + exp_pins(2, 513), 4 + ((SZ_2M + SZ_4K) >> 10));
	/* device reads the last page of folio 1 */
	EDU_FROM_RAM(&e, EDU_HUGE, 0, COPY_CNT);
	EDU_TO_RAM(&e, 0, EDU_SRC, COPY_CNT);
	EXPECT_EQ(memcmp(src, whole + 2 * SZ_2M - SZ_4K, COPY_CNT), 0);
	EXPECT_EQ((unsigned char)src[0], (unsigned char)th_pat(SZ_2M - SZ_4K, 21));
	/* device writes 0x3000 into folio 2 */
	th_fill(src, COPY_CNT, 30);
	EDU_FROM_RAM(&e, EDU_SRC, 0, COPY_CNT);
	EDU_TO_RAM(&e, 0, EDU_HUGE + SZ_4K + 0x3000, COPY_CNT);
	EXPECT_EQ(th_check(whole + 2 * SZ_2M + 0x3000, COPY_CNT, 30), COPY_CNT);
	/* folio 0 and 3 untouched */
	EXPECT_EQ(th_check(whole, SZ_2M, 20), SZ_2M);
	EXPECT_EQ(th_check(whole + 3 * SZ_2M, SZ_2M, 23), SZ_2M);
	UNMAP_OK(c, EDU_HUGE, SZ_2M + SZ_4K);
	UNMAP_OK(c, EDU_SRC, SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

/* SysV shared memory with SHM_HUGETLB is a shared hugetlbfs file too. */
TEST(shm_hugetlb_segment)
{
	const size_t size = 2 * SZ_2M;
	int c = th_container(t);
	int id;
	char *p;

	huge_reserve(t, size / SZ_2M);
	id = shmget(IPC_PRIVATE, size, IPC_CREAT | SHM_HUGETLB | 0600);
	if (id < 0)
		FAIL("shmget(SHM_HUGETLB) of %zu MiB: %s", size >> 20, strerror(errno));
	p = shmat(id, NULL, 0);
	shmctl(id, IPC_RMID, NULL);
	if (p == (void *)-1)
		FAIL("shmat: %s", strerror(errno));
	touch_2m(p, size);
	MAP_OK(c, IOVA_B, p, size);
	EXPECT_PINS_VMLCK(exp_pins(2, 1024), size >> 10);
	UNMAP_OK(c, IOVA_B, size);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(shmdt(p), 0);
}

/*
 * A range registered with userfaultfd: GUP would raise its faults, a pin
 * from the page cache would not, so such a VMA is never pinned from the
 * page cache; foliomap pins it with GUP, one huge page at a time (folio
 * mode all the same). The pages are present: no fault is raised.
 */
TEST(memfd2m_userfaultfd_armed)
{
	const size_t size = 2 * SZ_2M;
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_MEMFD2M, size);
	struct uffdio_range range = { .start = (uintptr_t)p, .len = size };
	int uffd = th_uffd_register(t, p, size, UFFDIO_REGISTER_MODE_MISSING);

	MAP_OK(c, IOVA_B, p, size);
	EXPECT_PINS_VMLCK(exp_pins(2, size / SZ_4K), size >> 10);
	UNMAP_OK(c, IOVA_B, size);
	EXPECT_PINS_VMLCK(0, 0);

	/* unregistered, the same range is pinned from the page cache */
	ASSERT_EQ(ioctl(uffd, UFFDIO_UNREGISTER, &range), 0);
	MAP_OK(c, IOVA_B, p, size);
	EXPECT_PINS_VMLCK(exp_pins(2, size / SZ_4K), size >> 10);
	UNMAP_OK(c, IOVA_B, size);
	EXPECT_PINS_VMLCK(0, 0);
}

/* ------------------------------------------------------------------ */
/* past the end of the file */

/*
 * 4M mapped of a 2M memfd.  A writable shared hugetlbfs mmap grows i_size
 * to the mapping's end, so the file is truncated back to 2M afterwards: the
 * second 2M is then past EOF (SIGBUS on access).  MAP_DMA of the 4M fails
 * as stock fails (-EFAULT), with nothing pinned or charged; the first 2M
 * maps.  A PROT_READ mapping past EOF (no growth) fails the same way.
 */
TEST_V12(memfd2m_map_past_eof)
{
	int c = th_container(t);
	int fd = memfd2m(t, SZ_2M);
	struct stat st;
	char *p, *r;

	huge_reserve(t, 2);
	p = fmap(t, NULL, 2 * SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	ASSERT_EQ(fstat(fd, &st), 0);
	th_diag("i_size after a writable 4M mmap of a 2M memfd: %lld MiB",
		(long long)st.st_size >> 20);
	ASSERT_EQ(ftruncate(fd, SZ_2M), 0);
	ASSERT_EQ(fstat(fd, &st), 0);
	ASSERT_EQ(st.st_size, SZ_2M);
	touch_2m(p, SZ_2M);

	EXPECT_EQ(vu_map(c, IOVA_B, p, 2 * SZ_2M, RW), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	/* a mapping starting past EOF */
	EXPECT_EQ(vu_map(c, IOVA_B, p + SZ_2M, SZ_2M, RW), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	/* the IOVA range is free: nothing was left mapped */
	MAP_OK(c, IOVA_B, p, SZ_2M);
	EXPECT_PINS_VMLCK(exp_pins(1, 512), 2048);
	UNMAP_OK(c, IOVA_B, SZ_2M);
	EXPECT_PINS_VMLCK(0, 0);

	r = fmap(t, NULL, 2 * SZ_2M, PROT_READ, MAP_SHARED, fd);
	ASSERT_EQ(fstat(fd, &st), 0);
	ASSERT_EQ(st.st_size, SZ_2M);
	EXPECT_EQ(vu_map(c, IOVA_A, r, 2 * SZ_2M, VFIO_DMA_MAP_FLAG_READ), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	UNMAP_RANGE(c, 0, 1ULL << APERTURE_BITS, 0);
}

/* ------------------------------------------------------------------ */
/* one mapping over a hugetlbfs VMA and an anonymous one */

/*
 * 8M of address space reserved, 2M-aligned base b: the memfd's 2M at b + 2M
 * (or b + 4M), 16 anonymous 4K pages (MADV_NOHUGEPAGE: 16 folios) right
 * after (or right before) it, MAP_FIXED.
 */
static char *span_region(struct th *t)
{
	char *r = mmap(NULL, 8 * SZ_2M, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t b;

	if (r == MAP_FAILED)
		FAIL("mmap 16M PROT_NONE: %s", strerror(errno));
	th_own_mem(t, r, 8 * SZ_2M);
	b = ((uintptr_t)r + SZ_2M - 1) & ~(uintptr_t)(SZ_2M - 1);
	return (char *)b;
}

static void anon_4k(struct th *t, char *at, size_t size)
{
	size_t off;

	fmap(t, at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
	ASSERT_EQ(vu_madvise_thp(at, size, MADV_NOHUGEPAGE), 0);
	for (off = 0; off < size; off += SZ_4K)
		at[off] = 1;
}

/*
 * edu writes 0xf00 bytes across the VMA boundary at "seam" (IOVA iova_seam)
 * and reads them back into the anonymous source page: both VMAs' pages are
 * the ones in the IOMMU.
 */
static void dma_across(struct th *t, struct edu *e, char *src, char *seam,
		       uint64_t iova_seam, int seed)
{
	th_fill(src, COPY_CNT, seed);
	EDU_FROM_RAM(e, EDU_SRC, 0, COPY_CNT);
	EDU_TO_RAM(e, 0, iova_seam - 0x800, COPY_CNT);
	EXPECT_EQ(th_check(seam - 0x800, COPY_CNT, seed), COPY_CNT);
	th_fill(seam - 0x800, COPY_CNT, seed + 1);
	memset(src, 0, SZ_4K);
	EDU_FROM_RAM(e, iova_seam - 0x800, 0, COPY_CNT);
	EDU_TO_RAM(e, 0, EDU_SRC, COPY_CNT);
	EXPECT_EQ(th_check(src, COPY_CNT, seed + 1), COPY_CNT);
}

/* [hugetlbfs 2M][anon 16 x 4K]: starts in shared hugetlbfs */
TEST_V12(memfd2m_span_into_anon)
{
	const size_t anon = 16 * SZ_4K;
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *src = th_anon(t, SZ_4K);
	char *b = span_region(t) + SZ_2M;
	int fd = memfd2m(t, SZ_2M);

	fmap(t, b, SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	touch_2m(b, SZ_2M);
	anon_4k(t, b + SZ_2M, anon);
	edu_open(t, gfd, &e);
	MAP_OK(c, EDU_SRC, src, SZ_4K);
	MAP_OK(c, EDU_HUGE, b, SZ_2M + anon);
	/* folio mode continues into the anonymous pages: one pin per folio */
	EXPECT_PINS_VMLCK(1 + exp_pins(1 + 16, 512 + 16), 4 + ((SZ_2M + anon) >> 10));
	dma_across(t, &e, src, b + SZ_2M, EDU_HUGE + SZ_2M, 7);
	UNMAP_OK(c, EDU_HUGE, SZ_2M + anon);
	EXPECT_PINS_VMLCK(1, 4);
	/* starting at the last hugetlbfs page: still folio mode */
	MAP_OK(c, EDU_HUGE, b + SZ_2M - SZ_4K, SZ_4K + anon);
	EXPECT_PINS_VMLCK(1 + exp_pins(1 + 16, 1 + 16), 4 + ((SZ_4K + anon) >> 10));
	dma_across(t, &e, src, b + SZ_2M, EDU_HUGE + SZ_4K, 9);
	UNMAP_OK(c, EDU_HUGE, SZ_4K + anon);
	UNMAP_OK(c, EDU_SRC, SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

/* [anon 16 x 4K][hugetlbfs 2M]: starts in anon, 4K pins on every backend */
TEST_V12(memfd2m_span_from_anon)
{
	const size_t anon = 16 * SZ_4K;
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *src = th_anon(t, SZ_4K);
	char *h = span_region(t) + 2 * SZ_2M;
	int fd = memfd2m(t, SZ_2M);

	anon_4k(t, h - anon, anon);
	fmap(t, h, SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
	touch_2m(h, SZ_2M);
	edu_open(t, gfd, &e);
	MAP_OK(c, EDU_SRC, src, SZ_4K);
	MAP_OK(c, EDU_HUGE, h - anon, anon + SZ_2M);
	EXPECT_PINS_VMLCK(1 + 16 + 512, 4 + ((anon + SZ_2M) >> 10));
	dma_across(t, &e, src, h, EDU_HUGE + anon, 11);
	UNMAP_OK(c, EDU_HUGE, anon + SZ_2M);
	UNMAP_OK(c, EDU_SRC, SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

/* ------------------------------------------------------------------ */
/* dirty tracking */

static int unmap_bitmap(int c, uint64_t iova, uint64_t size, void *data, uint64_t bytes,
			uint64_t *done)
{
	struct {
		struct vfio_iommu_type1_dma_unmap u;
		struct vfio_bitmap b;
	} r = {
		.u = { .argsz = sizeof(r), .flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP,
		       .iova = iova, .size = size },
		.b = { .pgsize = SZ_4K, .size = bytes, .data = data },
	};
	int ret = ioctl(c, VFIO_IOMMU_UNMAP_DMA, &r) < 0 ? -errno : 0;

	*done = r.u.size;
	return ret;
}

/* Number of set bits among the first nbits of bm. */
static size_t bits_set(const uint64_t *bm, size_t nbits)
{
	size_t i, n = 0;

	for (i = 0; i < nbits; i++)
		n += (bm[i / 64] >> (i % 64)) & 1;
	return n;
}

TEST(memfd2m_dirty_tracking)
{
	const size_t size = 8 * SZ_2M, npages = size / SZ_4K;
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *p = th_mem(t, VU_MEM_MEMFD2M, size);
	char *q = th_mem(t, VU_MEM_MEMFD2M, SZ_2M);
	uint64_t *bm = th_anon(t, npages / 8);
	uint64_t done = 0;

	MAP_OK(c, IOVA_B, p, size);
	ASSERT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
	/* a mapping made while tracking */
	MAP_OK(c, IOVA_A, q, SZ_2M);
	EXPECT_PINS_VMLCK(exp_pins(9, npages + 512), (size + SZ_2M) >> 10);
	memset(bm, 0, npages / 8);
	ASSERT_EQ(th_get_bitmap(c, IOVA_B, size, SZ_4K, bm, npages / 8), 0);
	EXPECT_EQ(bits_set(bm, npages), npages);
	memset(bm, 0, npages / 8);
	ASSERT_EQ(th_get_bitmap(c, IOVA_A, SZ_2M, SZ_4K, bm, 512 / 8), 0);
	EXPECT_EQ(bits_set(bm, 512), 512);

	memset(bm, 0, npages / 8);
	ASSERT_EQ(unmap_bitmap(c, IOVA_B, size, bm, npages / 8, &done), 0);
	EXPECT_EQ(done, size);
	EXPECT_EQ(bits_set(bm, npages), npages);
	EXPECT_PINS_VMLCK(exp_pins(1, 512), SZ_2M >> 10);
	memset(bm, 0, 512 / 8);
	ASSERT_EQ(unmap_bitmap(c, IOVA_A, SZ_2M, bm, 512 / 8, &done), 0);
	EXPECT_EQ(done, SZ_2M);
	EXPECT_EQ(bits_set(bm, 512), 512);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP), 0);
}

/* ------------------------------------------------------------------ */
/* a process killed while it maps 1 GiB of unpopulated memfd2m */

TEST(memfd2m_killed_during_large_map)
{
	const size_t size = SZ_1G;
	const long long nfolios = size / SZ_2M;
	long refcnt0 = vu_module_refcnt(th_backend_module());
	long long nr0 = vu_read_number(NR_2M), free0, at_kill = 0, faulted = 0, fr = -1;
	int groups[1], rfd, status, i;
	char done = 0;
	pid_t pid;

	th_e1000e_groups(t, groups, 1);
	huge_reserve(t, nfolios);
	free0 = vu_read_number(FREE_2M);
	pid = th_mapper_start(t, groups[0], vu_memfd2m_map, size, IOVA_B, &rfd);
	/* kill once 16 folios (32M) were faulted in by the map */
	for (i = 0; i < 3000; i++) {
		faulted = free0 - vu_read_number(FREE_2M);
		if (faulted >= 16 || read(rfd, &done, 1) == 1)
			break;
		usleep(2000);
	}
	at_kill = th_pins(t);
	done = th_mapper_kill(t, pid, rfd, done, &status);
	th_diag("killed with %lld of %lld folios faulted in, %lld pages pinned (map %s)",
		faulted, nfolios, at_kill,
		done == 'D' ? "had finished" : done == 'E' ? "had failed" : "in progress");
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* the kill landed in the middle of the map */
	EXPECT_EQ(done, 0);
	EXPECT_GE(faulted, 16);
	EXPECT_LT(faulted, nfolios);
	/* container and memfd went with the process: every folio is free again */
	EXPECT_EQ(th_pins(t), 0);
	EXPECT_EQ(th_module_refcnt_back(th_backend_module(), refcnt0), refcnt0);
	for (i = 0; i < 200; i++) {
		fr = vu_read_number(FREE_2M);
		if (fr == free0)
			break;
		usleep(10000);
	}
	EXPECT_EQ(fr, free0);
	/* give the pool back for the other programs */
	if (nr0 >= 0)
		vu_write_number(NR_2M, nr0);
	/* the group is free again and works */
	{
		int gfd, c = th_container_of(t, VFIO_TYPE1v2_IOMMU, groups, 1, &gfd);
		char *p = th_mem(t, VU_MEM_MEMFD2M, SZ_2M);

		MAP_OK(c, IOVA_B, p, SZ_2M);
		EXPECT_PINS_VMLCK(exp_pins(1, 512), 2048);
		UNMAP_OK(c, IOVA_B, SZ_2M);
	}
}

/*
 * A hardware-poisoned folio (MADV_HWPOISON from a child that maps the same
 * memfd; on 6.12 the injection kills it with SIGBUS) stays in the page cache, but
 * GUP refuses it: a MAP_DMA over it fails -EFAULT on every backend with
 * nothing pinned or charged, and the folio before it still maps. Last in
 * this program: the poisoned hugepage never returns to the pool.
 */
TEST(memfd2m_hwpoisoned_folio)
{
	const size_t size = 2 * SZ_2M;
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_MEMFD2M, size);
	int status;
	pid_t pid;

	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0)
		_exit(madvise(p + SZ_2M, SZ_4K, MADV_HWPOISON) ? errno : 0);
	status = th_reap(t, pid);
	if (WIFEXITED(status) && (WEXITSTATUS(status) == EINVAL || WEXITSTATUS(status) == EPERM))
		SKIP("MADV_HWPOISON: %s", strerror(WEXITSTATUS(status)));
	/* 6.12 kills the injecting process, 6.1 returns 0 to it */
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGBUS)
		ASSERT_EQ(status, 0);

	EXPECT_EQ(vu_map(c, IOVA_B, p, size, RW), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	MAP_OK(c, IOVA_B, p, SZ_2M);
	EXPECT_PINS_VMLCK(exp_pins(1, SZ_2M / SZ_4K), SZ_2M >> 10);
	UNMAP_OK(c, IOVA_B, SZ_2M);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST_HARNESS_MAIN
