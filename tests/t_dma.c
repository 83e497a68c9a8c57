// SPDX-License-Identifier: GPL-2.0-only
/*
 * Real device DMA through the IOMMU (QEMU edu): bytes land exactly where the
 * IOVA says, for every memory kind, at folio and run boundaries, across two
 * separately mapped halves and through a second mapping of the same memory
 * whose IOVA is not 2M-aligned with it (4K leaves).  After UNMAP a DMA to
 * the IOVA faults (the IOMMU's fault record in the kernel log: DMAR,
 * AMD-Vi or SMMUv3, edu.h) and memory stays as it was; a read-only mapping
 * stops device writes, a write-only one device reads.  Where the IOMMU
 * reports no faults (QEMU's AMD-Vi) everything else is checked and the test
 * SKIPs, saying so.
 */
#include "edu.h"

#define MEM_SIZE	(4 * SZ_2M)
#define IOVA_AL		0x1000000ULL	/* 16M: 2M-aligned with the memory */
#define IOVA_MIS	0x3001000ULL	/* 48M + 4K: 4K leaves only */
#define IOVA_SCRATCH	0x6000000ULL	/* 96M */

/* A byte that depends on the position: a misplaced page shows. */
static inline uint8_t pat(uint64_t i, uint32_t seed)
{
	uint32_t x = (uint32_t)i * 0x9e3779b1u ^ (uint32_t)(i >> 12) * 0x85ebca6bu ^ seed;

	x ^= x >> 15;
	x *= 0xc2b2ae35u;
	x ^= x >> 13;
	return (uint8_t)(x >> 24);
}

static void fill(volatile uint8_t *p, size_t len, uint32_t seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = pat(i, seed);
}

/* First offset where a and b differ, or len. */
static size_t first_diff(const uint8_t *a, const uint8_t *b, size_t len)
{
	size_t i;

	if (!memcmp(a, b, len))
		return len;
	for (i = 0; i < len; i++)
		if (a[i] != b[i])
			break;
	return i;
}

/* The whole buffer equals the reference, or the test fails with where. */
#define ASSERT_SAME(p, ref, len) do {						\
	size_t _d = first_diff((const uint8_t *)(p), (const uint8_t *)(ref), len);	\
	if (_d != (len))							\
		th_diag("first difference at offset 0x%zx: 0x%02x, expected 0x%02x", \
			_d, ((const uint8_t *)(p))[_d], ((const uint8_t *)(ref))[_d]);	\
	ASSERT_EQ(_d, len);							\
} while (0)

static uint8_t *copy_of(struct th *t, const void *p, size_t len)
{
	uint8_t *c = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (c == MAP_FAILED)
		FAIL("mmap %zu: %s", len, strerror(errno));
	memcpy(c, p, len);
	return th_own_mem(t, c, len);
}

/*
 * Boundary transfers in 4M of memory mapped twice: at IOVA_AL (2M-aligned
 * with the memory: large leaves where the kind has them) and at IOVA_MIS
 * (4K leaves).  Reads and writes go through both, at IOVAs ending right at
 * the 2M boundary, starting right at it, and straddling it, and the whole
 * memory is compared with what the IOVAs predict.
 */
static void dma_boundaries(struct th *t, enum vu_mem_kind kind)
{
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	uint8_t *m = th_mem(t, kind, MEM_SIZE);
	uint8_t *ref;
	const uint64_t B = SZ_2M, B2 = 3 * SZ_2M;	/* boundaries (offsets) */
	uint64_t d1, d2;

	edu_open(t, gfd, &e);
	fill(m, MEM_SIZE, kind + 1);
	ref = copy_of(t, m, MEM_SIZE);
	MAP_OK(c, IOVA_AL, m, MEM_SIZE);
	MAP_OK(c, IOVA_MIS, m, MEM_SIZE);
	EXPECT_PINS_VMLCK(2 * th_kind_pins(kind, MEM_SIZE), 2 * MEM_SIZE / 1024);

	/* [B - 0x7f0, B) ends at the boundary, [B, B + 0x800) starts at it */
	EDU_FROM_RAM(&e, IOVA_AL + B - 0x7f0, 0, 0x7f0);
	EDU_FROM_RAM(&e, IOVA_MIS + B, 0x7f0, 0x800);
	/* written back straddling the other boundary, at an odd offset */
	d1 = B2 - 0x5f9;
	EDU_TO_RAM(&e, 0, IOVA_MIS + d1, 0xff0);
	memcpy(ref + d1, ref + B - 0x7f0, 0xff0);
	ASSERT_SAME(m, ref, MEM_SIZE);

	/* one transfer straddling B2 (just written) each way */
	EDU_FROM_RAM(&e, IOVA_AL + B2 - 0x801, 0, 0xff0);
	d2 = B - 0x400;
	EDU_TO_RAM(&e, 0, IOVA_AL + d2, 0xff0);
	memmove(ref + d2, ref + B2 - 0x801, 0xff0);
	ASSERT_SAME(m, ref, MEM_SIZE);

	/* the first and the last page of the mapping */
	EDU_FROM_RAM(&e, IOVA_MIS + MEM_SIZE - SZ_4K, 0, 0x800);
	EDU_TO_RAM(&e, 0, IOVA_AL + 0x10, 0x800);
	memmove(ref + 0x10, ref + MEM_SIZE - SZ_4K, 0x800);
	ASSERT_SAME(m, ref, MEM_SIZE);

	UNMAP_OK(c, IOVA_AL, MEM_SIZE);
	UNMAP_OK(c, IOVA_MIS, MEM_SIZE);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST(dma_boundaries_thp)
{
	dma_boundaries(t, VU_MEM_THP);
}

TEST(dma_boundaries_shmem_4k)
{
	dma_boundaries(t, VU_MEM_POPULATE);
}

TEST(dma_boundaries_hugetlb2m)
{
	dma_boundaries(t, VU_MEM_HUGETLB2M);
}

TEST(dma_boundaries_memfd)
{
	dma_boundaries(t, VU_MEM_MEMFD);
}

/*
 * One IOVA range made of two MAP_DMA calls that split a THP in its middle
 * (3M of 4M): a transfer across the seam reads and writes both; after the
 * upper half is unmapped a write across the seam lands in the lower half
 * only, the upper half's memory stays, and the IOMMU reports the fault.
 */
TEST_V12(dma_two_halves_thp)
{
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	uint8_t *m = th_mem(t, VU_MEM_THP, MEM_SIZE);
	const uint64_t H = 3 * 0x100000ULL, X = IOVA_AL;
	uint8_t *ref;
	long long n0;
	int kfd;

	edu_open(t, gfd, &e);
	fill(m, MEM_SIZE, 7);
	ref = copy_of(t, m, MEM_SIZE);
	MAP_OK(c, X, m, H);
	MAP_OK(c, X + H, m + H, MEM_SIZE - H);
	EXPECT_PINS_VMLCK(MEM_SIZE / SZ_4K, MEM_SIZE / 1024);

	EDU_FROM_RAM(&e, X + H - 0x333, 0, 0xff0);
	EDU_TO_RAM(&e, 0, X + SZ_2M - 0x7f8, 0xff0);
	memmove(ref + SZ_2M - 0x7f8, ref + H - 0x333, 0xff0);
	ASSERT_SAME(m, ref, MEM_SIZE);
	EDU_FROM_RAM(&e, X + 0x1000, 0, 0xff0);
	EDU_TO_RAM(&e, 0, X + H - 0x800, 0xff0);
	memmove(ref + H - 0x800, ref + 0x1000, 0xff0);
	ASSERT_SAME(m, ref, MEM_SIZE);

	UNMAP_OK(c, X + H, MEM_SIZE - H);
	EXPECT_PINS_VMLCK(H / SZ_4K, H / 1024);
	/*
	 * New data across the seam: only the lower, mapped half takes it.  8
	 * bytes, so that the refused half is one access and one fault.
	 */
	EDU_FROM_RAM(&e, X + 0x5000, 0, 0xff0);
	kfd = kmsg_open(t);
	fault_pace_wait();
	n0 = fault_irqs();
	EDU_TO_RAM(&e, 0, X + H - 4, 8);
	EDU_EXPECT_FAULT(kfd, n0, X + H, true);
	fault_pace_after(fault_pace_probe());
	memmove(ref + H - 4, ref + 0x5000, 4);
	ASSERT_SAME(m, ref, MEM_SIZE);
	UNMAP_OK(c, X, H);
	EDU_FAULTS_DONE();
}

/*
 * Two hugetlb 2M pages mapped in reverse order at adjacent IOVAs: one
 * IOVA-contiguous range, physically reversed at the seam.
 */
TEST(dma_reversed_hugetlb)
{
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	uint8_t *m = th_mem(t, VU_MEM_HUGETLB2M, 2 * SZ_2M);
	const uint64_t X = IOVA_AL;
	uint8_t *ref;

	edu_open(t, gfd, &e);
	fill(m, 2 * SZ_2M, 9);
	ref = copy_of(t, m, 2 * SZ_2M);
	MAP_OK(c, X, m + SZ_2M, SZ_2M);
	MAP_OK(c, X + SZ_2M, m, SZ_2M);
	/* IOVA X + 2M - 0x800 is m + 4M - 0x800; X + 2M is m */
	EDU_FROM_RAM(&e, X + SZ_2M - 0x800, 0, 0xff0);
	EDU_TO_RAM(&e, 0, X + 0x100000, 0xff0);	/* m + 3M */
	memcpy(ref + SZ_2M + 0x100000, ref + 2 * SZ_2M - 0x800, 0x800);
	memcpy(ref + SZ_2M + 0x100000 + 0x800, ref, 0x7f0);
	ASSERT_SAME(m, ref, 2 * SZ_2M);
	/* and back across the seam */
	EDU_TO_RAM(&e, 0, X + SZ_2M - 0x400, 0xff0);
	memmove(ref + 2 * SZ_2M - 0x400, ref + SZ_2M + 0x100000, 0x400);
	memmove(ref, ref + SZ_2M + 0x100000 + 0x400, 0xbf0);
	ASSERT_SAME(m, ref, 2 * SZ_2M);
	UNMAP_OK(c, X, 2 * SZ_2M);
	EXPECT_EQ(th_pins(t), 0);
}

/*
 * After UNMAP the device cannot reach the memory any more, whatever leaf
 * sizes held it: a 2M THP leaf, 4K pages, a THP mapped with 4K leaves.  Each
 * IOVA is used first (so the emulated IOMMU caches the translation), then
 * unmapped: the writes fault and change nothing, the read faults and does
 * not bring the memory's data into the device.
 */
TEST_V12(dma_after_unmap_faults)
{
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	uint8_t *thp = th_mem(t, VU_MEM_THP, SZ_2M);
	uint8_t *small = th_anon(t, 4 * SZ_4K);
	uint8_t *mis = th_mem(t, VU_MEM_THP, SZ_2M);
	uint8_t *scr = th_anon(t, SZ_4K);
	uint8_t *rthp, *rsmall, *rmis, *rscr;
	const uint64_t A = IOVA_AL, S = 0x2000000, M = IOVA_MIS;
	int kfd;

	edu_open(t, gfd, &e);
	fill(thp, SZ_2M, 1);
	fill(small, 4 * SZ_4K, 2);
	fill(mis, SZ_2M, 3);
	MAP_OK(c, A, thp, SZ_2M);
	MAP_OK(c, S, small, 4 * SZ_4K);
	MAP_OK(c, M, mis, SZ_2M);
	MAP_OK(c, IOVA_SCRATCH, scr, SZ_4K);
	/* every IOVA works and is in the emulated IOTLB now */
	EDU_FROM_RAM(&e, A + 0x1ff000, 0, 0x400);
	EDU_FROM_RAM(&e, S + 0x2000, 0x400, 0x400);
	EDU_FROM_RAM(&e, M + 0x5000, 0x800, 0x400);
	EDU_TO_RAM(&e, 0, IOVA_SCRATCH, 0xc00);
	ASSERT_EQ(memcmp(scr, thp + 0x1ff000, 0x400), 0);
	ASSERT_EQ(memcmp(scr + 0x400, small + 0x2000, 0x400), 0);
	ASSERT_EQ(memcmp(scr + 0x800, mis + 0x5000, 0x400), 0);

	/* the buffer gets new content the memory does not have */
	fill(scr, SZ_4K, 99);
	EDU_FROM_RAM(&e, IOVA_SCRATCH, 0, 0xff0);
	rthp = copy_of(t, thp, SZ_2M);
	rsmall = copy_of(t, small, 4 * SZ_4K);
	rmis = copy_of(t, mis, SZ_2M);
	if (t->v2) {
		UNMAP_OK(c, A, SZ_2M);
		UNMAP_OK(c, S, 4 * SZ_4K);
		UNMAP_OK(c, M, SZ_2M);
	} else {
		/* v1: one range over the three */
		UNMAP_RANGE(c, A, M + SZ_2M - A, 2 * SZ_2M + 4 * SZ_4K);
	}
	EXPECT_PINS_VMLCK(1, 4);

	kfd = kmsg_open(t);
	EDU_FAULT_PROBE(&e, kfd, A + 0x1ff000, true);
	EDU_FAULT_PROBE(&e, kfd, S + 0x2000, true);
	EDU_FAULT_PROBE(&e, kfd, M + 0x5000, true);
	ASSERT_SAME(thp, rthp, SZ_2M);
	ASSERT_SAME(small, rsmall, 4 * SZ_4K);
	ASSERT_SAME(mis, rmis, SZ_2M);

	/* a read of an unmapped IOVA does not fetch the memory's data */
	EDU_FAULT_PROBE(&e, kfd, S + 0x1000, false);

	/*
	 * Whole transfers (0xff0 bytes) into and out of every unmapped range:
	 * nothing written, nothing read.  Their faults are not counted (one
	 * per refused access, rate limited); the next test that expects a
	 * fault waits for a fresh rate-limit window.
	 */
	EDU_FAULTING_DMA(&e, EDU_BUF, A + 0x1000, 0xff0, EDU_CMD_TO_RAM);
	EDU_FAULTING_DMA(&e, EDU_BUF, S + 0x3000, 0xff0, EDU_CMD_TO_RAM);
	EDU_FAULTING_DMA(&e, EDU_BUF, M + 0x1ff000 - 0x800, 0xff0, EDU_CMD_TO_RAM);
	ASSERT_SAME(thp, rthp, SZ_2M);
	ASSERT_SAME(small, rsmall, 4 * SZ_4K);
	ASSERT_SAME(mis, rmis, SZ_2M);
	EDU_FAULTING_DMA(&e, S + 0x1000, EDU_BUF, 0xff0, 0);
	memset(scr, 0x5a, SZ_4K);
	rscr = copy_of(t, scr, SZ_4K);
	EDU_TO_RAM(&e, 0, IOVA_SCRATCH, 0xff0);
	EXPECT_NE(memcmp(scr, small + 0x1000, 0xff0), 0);
	/* what edu got instead: QEMU reads an unreachable address as zeros */
	memset(rscr, 0, 0xff0);
	EXPECT_EQ(memcmp(scr, rscr, SZ_4K), 0);
	UNMAP_OK(c, IOVA_SCRATCH, SZ_4K);
	EDU_FAULTS_DONE();
}

/*
 * VFIO_DMA_MAP_FLAG_READ only: the device reads, its writes fault and leave
 * the memory as it was (THP and 4K pages).  WRITE only: the device writes.
 * The refused access comes first, on IOVAs the device never used (a
 * translation cached by a read would refuse the write without a record).
 */
TEST(dma_read_only_write_only)
{
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	uint8_t *ro = th_mem(t, VU_MEM_THP, SZ_2M);
	uint8_t *ro4k = th_anon(t, 2 * SZ_4K);
	uint8_t *wo = th_anon(t, 2 * SZ_4K);
	uint8_t *scr = th_anon(t, SZ_4K);
	uint8_t *rro, *rro4k, *rwo;
	const uint64_t R = IOVA_AL, R4 = 0x2000000, W = 0x2100000;
	int kfd;

	edu_open(t, gfd, &e);
	fill(ro, SZ_2M, 11);
	fill(ro4k, 2 * SZ_4K, 12);
	fill(wo, 2 * SZ_4K, 13);
	fill(scr, SZ_4K, 14);
	rro = copy_of(t, ro, SZ_2M);
	rro4k = copy_of(t, ro4k, 2 * SZ_4K);
	ASSERT_EQ(vu_map(c, R, ro, SZ_2M, VFIO_DMA_MAP_FLAG_READ), 0);
	ASSERT_EQ(vu_map(c, R4, ro4k, 2 * SZ_4K, VFIO_DMA_MAP_FLAG_READ), 0);
	ASSERT_EQ(vu_map(c, W, wo, 2 * SZ_4K, VFIO_DMA_MAP_FLAG_WRITE), 0);
	MAP_OK(c, IOVA_SCRATCH, scr, SZ_4K);
	EXPECT_PINS_VMLCK(512 + 2 + 2 + 1, 2048 + 8 + 8 + 4);

	EDU_FROM_RAM(&e, IOVA_SCRATCH, 0, 0xff0);
	kfd = kmsg_open(t);
	EDU_FAULT_PROBE(&e, kfd, R + 0x3000, true);
	EDU_FAULT_PROBE(&e, kfd, R4 + 0x1000, true);
	ASSERT_SAME(ro, rro, SZ_2M);
	ASSERT_SAME(ro4k, rro4k, 2 * SZ_4K);
	/* whole transfers: nothing written (faults not counted, see above) */
	EDU_FAULTING_DMA(&e, EDU_BUF, R + SZ_2M - 0x1000, 0xff0, EDU_CMD_TO_RAM);
	EDU_FAULTING_DMA(&e, EDU_BUF, R4, 0xff0, EDU_CMD_TO_RAM);
	ASSERT_SAME(ro, rro, SZ_2M);
	ASSERT_SAME(ro4k, rro4k, 2 * SZ_4K);

	/*
	 * Not checked: a device read through the write-only mapping.  The
	 * PTE has W without R, yet QEMU 7.2's emulated VT-d lets the read
	 * through (no fault) on both backends.
	 */
	rwo = copy_of(t, wo, 2 * SZ_4K);
	/* what is allowed works: read the RO memory, write the WO memory */
	EDU_FROM_RAM(&e, R + 0x3000, 0, 0x7f0);
	EDU_FROM_RAM(&e, R4 + 0x1000, 0x7f0, 0x800);
	EDU_TO_RAM(&e, 0, W + 0x800, 0xff0);
	memcpy(rwo + 0x800, rro + 0x3000, 0x7f0);
	memcpy(rwo + 0x800 + 0x7f0, rro4k + 0x1000, 0x800);
	ASSERT_SAME(wo, rwo, 2 * SZ_4K);
	ASSERT_SAME(ro, rro, SZ_2M);

	UNMAP_RANGE(c, 0, EDU_IOVA_MAX, SZ_2M + 5 * SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
	EDU_FAULTS_DONE();
}

TEST_HARNESS_MAIN
