// SPDX-License-Identifier: GPL-2.0-only
/*
 * The fast paths of foliomap's pin and unmap pipelines, checked on both
 * backends by real device DMA through the IOMMU (edu) and by the pin and
 * VmLck balance:
 *
 *  - run-length pin batches: mappings that start inside a THP, cross the
 *    1024-page batch edges (4 MiB) and end inside a folio;
 *  - one mapping over several VMAs of different kinds (hugetlbfs, a shared
 *    memfd, THP): runs never merge across what GUP returned separately;
 *  - the run record and its fallback: memory too fragmented for the record
 *    (pages interleaved from two buffers) is still unmapped exactly;
 *  - device memory (VM_PFNMAP): an ivshmem BAR (vm/run --ivshmem) mmapped
 *    2M-aligned, so vfio-pci maps it with PMD entries and foliomap takes a
 *    whole leaf per lookup; mappings that start and end inside a leaf and
 *    that straddle two leaves; edu DMA (peer to peer) must land on the
 *    right BAR offsets. Nothing is pinned or charged.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* mremap */
#endif
#include <sys/mman.h>

#include "edu.h"

#define IOVA_P		0x1000000ULL	/* 16M */
#define IOVA_Q		0x4000000ULL	/* 64M */
#define IOVA_R		0xc000000ULL	/* 192M: clear of arm64's MSI window at 128M */
#define BATCH		(1024 * SZ_4K)	/* foliomap's GUP batch */

/* A position-dependent byte: a misplaced page shows. */
static inline uint8_t pat(uint64_t i, uint32_t seed)
{
	uint32_t x = (uint32_t)i * 0x9e3779b1u ^ (uint32_t)(i >> 12) * 0x85ebca6bu ^ seed;

	x ^= x >> 15;
	x *= 0xc2b2ae35u;
	return (uint8_t)(x >> 24);
}

static void fill(volatile uint8_t *p, size_t len, uint32_t seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = pat(i, seed);
}

/*
 * Device reads @cnt bytes at mapping offset @from (through @iova) and
 * writes them back at offset @to: afterwards p[to..] must equal the old
 * p[from..] (the memory itself checks where each page was mapped).
 */
static void dma_copy(struct th *t, struct edu *e, volatile uint8_t *p, uint64_t iova,
		     uint64_t from, uint64_t to, uint64_t cnt)
{
	uint8_t want[EDU_MAX_CNT];
	uint64_t i;

	for (i = 0; i < cnt; i++)
		want[i] = p[from + i];
	EDU_FROM_RAM(e, iova + from, 0, cnt);
	EDU_TO_RAM(e, 0, iova + to, cnt);
	for (i = 0; i < cnt; i++)
		if (p[to + i] != want[i])
			FAIL("offset 0x%llx: 0x%02x, expected 0x%02x (copied from 0x%llx)",
			     (unsigned long long)(to + i), p[to + i], want[i],
			     (unsigned long long)(from + i));
}

/*
 * A mapping starting 4K into @kind memory, 3 batches + 3 pages long: the
 * first and last folios are partial, every batch edge falls inside a
 * folio. Data crossing two batch edges is moved by the device.
 */
static void batch_edges(struct th *t, enum vu_mem_kind kind)
{
	size_t len = 3 * BATCH + 3 * SZ_4K, total = 4 * BATCH;
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	uint8_t *m = th_mem(t, kind, total);
	uint8_t *p = m + SZ_4K;

	edu_open(t, gfd, &e);
	fill(m, total, kind + 7);
	MAP_OK(c, IOVA_P, p, len);
	EXPECT_PINS_VMLCK(th_kind_pins_at(kind, SZ_4K, len), len >> 10);
	/* straddling the first batch edge, onto the second one */
	dma_copy(t, &e, p, IOVA_P, BATCH - 0x800, 2 * BATCH - 0x400, 0xff0);
	/* the last bytes of the mapping onto its first page */
	dma_copy(t, &e, p, IOVA_P, len - 0xff0, 0x10, 0xff0);
	UNMAP_OK(c, IOVA_P, len);
	EXPECT_ACCT(0);
	/* the same range again, mapped at a misaligned IOVA (4K leaves) */
	MAP_OK(c, IOVA_Q + SZ_4K * 3, p, len);
	EXPECT_PINS_VMLCK(th_kind_pins_at(kind, SZ_4K, len), len >> 10);
	dma_copy(t, &e, p, IOVA_Q + SZ_4K * 3, 3 * BATCH - 0x7f8, 0x1000, 0xff0);
	UNMAP_OK(c, IOVA_Q + SZ_4K * 3, len);
	EXPECT_ACCT(0);
}

TEST(pp_batch_edges_thp) { batch_edges(t, VU_MEM_THP); }
TEST(pp_batch_edges_shmem_4k) { batch_edges(t, VU_MEM_POPULATE); }
TEST(pp_batch_edges_hugetlb2m) { batch_edges(t, VU_MEM_HUGETLB2M); }
TEST(pp_batch_edges_memfd) { batch_edges(t, VU_MEM_MEMFD); }

/*
 * [2 hugetlb 2M pages][2M of a shared memfd][2M THP], adjacent VMAs, one
 * MAP_DMA; the device copies across both VMA boundaries.
 */
TEST_V12(pp_three_vmas)
{
	size_t part = 2 * SZ_2M, len = 3 * part;
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *res, *p, *q;
	void *h, *m, *a;

	edu_open(t, gfd, &e);
	res = mmap(NULL, len + SZ_2M, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(res, MAP_FAILED);
	th_own_mem(t, res, len + SZ_2M);
	p = (char *)(((uintptr_t)res + SZ_2M - 1) & ~(SZ_2M - 1));

	/* Each kind allocated on its own, then moved into place. */
	h = vu_mem_alloc(VU_MEM_HUGETLB2M, part);
	if (!h)
		SKIP("no 2M hugetlb pages: %s", strerror(errno));
	m = vu_mem_alloc(VU_MEM_MEMFD, part);
	a = vu_mem_alloc(VU_MEM_THP, part);
	ASSERT_NE(m, NULL);
	ASSERT_NE(a, NULL);
	q = mremap(h, part, part, MREMAP_MAYMOVE | MREMAP_FIXED, p);
	ASSERT_EQ(q, p);
	q = mremap(m, part, part, MREMAP_MAYMOVE | MREMAP_FIXED, p + part);
	ASSERT_EQ(q, p + part);
	q = mremap(a, part, part, MREMAP_MAYMOVE | MREMAP_FIXED, p + 2 * part);
	ASSERT_EQ(q, p + 2 * part);
	fill((uint8_t *)p, len, 3);

	MAP_OK(c, IOVA_P, p, len);
	/* foliomap: from hugetlbfs on, a pin per folio (2 + 1024 + 2 THP, or 1024 4K) */
	EXPECT_PINS_VMLCK(is_foliomap() ? 2 + part / SZ_4K + (vu_have_thp() ? 2 : part / SZ_4K) :
			  len / SZ_4K, len >> 10);
	dma_copy(t, &e, (uint8_t *)p, IOVA_P, part - 0x7f8, 2 * part - 0x800, 0xff0);
	dma_copy(t, &e, (uint8_t *)p, IOVA_P, len - 0xff0, 0x1000, 0xff0);
	UNMAP_OK(c, IOVA_P, len);
	EXPECT_ACCT(0);
	/* only the middle VMA and a bit of each neighbour */
	MAP_OK(c, IOVA_Q, p + part - SZ_4K, part + 2 * SZ_4K);
	EXPECT_ACCT(part / SZ_4K + 2);
	UNMAP_OK(c, IOVA_Q, part + 2 * SZ_4K);
	EXPECT_ACCT(0);
}

/*
 * 512 pages taken alternately from two buffers: about one run per page,
 * far more than the run record holds for 2 MiB (16 entries). The mapping
 * falls back to the IOMMU walk and must still come out exact.
 */
TEST_V12(pp_fragmented_record_fallback)
{
	size_t n = 512, len = n * SZ_4K, i;
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *dst, *a, *b;

	edu_open(t, gfd, &e);
	dst = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(dst, MAP_FAILED);
	th_own_mem(t, dst, len);
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(a, MAP_FAILED);
	ASSERT_NE(b, MAP_FAILED);
	vu_madvise_thp(a, len, MADV_NOHUGEPAGE);
	vu_madvise_thp(b, len, MADV_NOHUGEPAGE);
	for (i = 0; i < len; i += SZ_4K) {
		a[i] = 1;
		b[i] = 2;
	}
	for (i = 0; i < n; i++) {
		char *src = (i & 1 ? b : a) + i * SZ_4K;

		ASSERT_EQ(mremap(src, SZ_4K, SZ_4K, MREMAP_MAYMOVE | MREMAP_FIXED,
				 dst + i * SZ_4K), dst + i * SZ_4K);
	}
	/* the other halves of a and b */
	for (i = 0; i < n; i++)
		munmap((i & 1 ? a : b) + i * SZ_4K, SZ_4K);
	fill((uint8_t *)dst, len, 11);

	MAP_OK(c, IOVA_P, dst, len);
	EXPECT_ACCT(n);
	dma_copy(t, &e, (uint8_t *)dst, IOVA_P, 0x3f8, len - 0x1800, 0xff0);
	UNMAP_OK(c, IOVA_P, len);
	EXPECT_ACCT(0);
	/* twice, then as two mappings of two halves */
	MAP_OK(c, IOVA_P, dst, len);
	UNMAP_OK(c, IOVA_P, len);
	MAP_OK(c, IOVA_P, dst, len / 2);
	MAP_OK(c, IOVA_P + len / 2, dst + len / 2, len / 2);
	EXPECT_ACCT(n);
	UNMAP_RANGE(c, IOVA_P, len, len);
	EXPECT_ACCT(0);
}

/* ------------------------------------------------------------------ */
/* device memory: the ivshmem BAR (vm/run --ivshmem) */

struct ivshmem {
	int dev;
	uint8_t *bar;
	size_t size;
};

/* Attach the ivshmem group to container @c and mmap BAR2 2M-aligned. */
static void ivshmem_open(struct th *t, int c, struct ivshmem *iv)
{
	const char *bdf = getenv("VFIO_IVSHMEM_BDF");
	struct vfio_region_info r = { .argsz = sizeof(r), .index = VFIO_PCI_BAR2_REGION_INDEX };
	int g, gfd;
	char *res, *p;
	size_t i;

	if (!bdf || !*bdf)
		SKIP("no ivshmem device (vm/run --ivshmem SIZE sets VFIO_IVSHMEM_BDF)");
	g = vu_group_of_bdf(bdf);
	ASSERT_GE(g, 0);
	gfd = vu_group_attach(c, g);
	if (gfd < 0)
		FAIL("attach ivshmem group %d: %s", g, strerror(-gfd));
	th_own_fd(t, gfd);
	iv->dev = th_device_fd(t, gfd, bdf);
	th_bus_master(t, iv->dev);
	ASSERT_EQ(ioctl(iv->dev, VFIO_DEVICE_GET_REGION_INFO, &r), 0);
	ASSERT_GE(r.size, 8 * SZ_2M);
	res = mmap(NULL, r.size + SZ_2M, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(res, MAP_FAILED);
	p = (char *)(((uintptr_t)res + SZ_2M - 1) & ~(SZ_2M - 1));
	if (p > res)
		munmap(res, p - res);
	munmap(p + r.size, res + SZ_2M - p);
	ASSERT_EQ(th_bar_mmap(t, iv->dev, VFIO_PCI_BAR2_REGION_INDEX, p, &iv->size), p);
	th_own_mem(t, p, iv->size);
	iv->bar = (uint8_t *)p;
	for (i = 0; i < 8 * SZ_2M; i++)
		iv->bar[i] = pat(i, 21);
}

/*
 * The BAR, 16M of it at a 2M-aligned IOVA (huge leaves on both sides), a
 * piece that starts and ends inside leaves at an IOVA whose alignment
 * differs, and two pages straddling a leaf edge. Edu copies between
 * them; the bytes must land at the BAR offsets the IOVAs stand for.
 */
TEST_V12(pp_bar_huge_pfnmap)
{
	struct edu e;
	struct ivshmem iv;
	int gfd, c = edu_container(t, t->type, &gfd);
	uint64_t big = 8 * SZ_2M, piece_off = SZ_2M + 5 * SZ_4K, piece = 2 * SZ_2M + 3 * SZ_4K;
	size_t whole;

	edu_open(t, gfd, &e);
	ivshmem_open(t, c, &iv);

	MAP_OK(c, IOVA_P, iv.bar, big);
	MAP_OK(c, IOVA_Q + SZ_4K, iv.bar + piece_off, piece);
	MAP_OK(c, IOVA_R, iv.bar + 3 * SZ_2M - SZ_4K, 2 * SZ_4K);
	EXPECT_ACCT(0);
	/* across the 2M leaf edge at 4M, to 6M + 0x10 */
	dma_copy(t, &e, iv.bar, IOVA_P, 2 * SZ_2M - 0x800, 3 * SZ_2M + 0x10, 0xff0);
	/* the piece: its last bytes onto its first (BAR offsets shifted) */
	dma_copy(t, &e, iv.bar + piece_off, IOVA_Q + SZ_4K, piece - 0xff0, 0x8, 0xff0);
	/* the two pages around the 6M edge */
	dma_copy(t, &e, iv.bar + 3 * SZ_2M - SZ_4K, IOVA_R, 0x800, 0x1008, 0xff0);
	EXPECT_ACCT(0);
	UNMAP_OK(c, IOVA_P, big);
	UNMAP_OK(c, IOVA_Q + SZ_4K, piece);
	UNMAP_OK(c, IOVA_R, 2 * SZ_4K);
	EXPECT_ACCT(0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	/* 64 MiB (the whole BAR of a small one) twice; all of a big one: t_bigbar */
	whole = iv.size < (64 << 20) ? iv.size : (64 << 20);
	MAP_OK(c, IOVA_P, iv.bar, whole);
	UNMAP_OK(c, IOVA_P, whole);
	MAP_OK(c, IOVA_P, iv.bar, whole);
	UNMAP_OK(c, IOVA_P, whole);
	EXPECT_ACCT(0);
}

/* A BAR piece and THP memory in one MAP_DMA: only the THP is pinned. */
TEST_V12(pp_bar_then_thp)
{
	struct edu e;
	struct ivshmem iv;
	int gfd, c = edu_container(t, t->type, &gfd);
	uint8_t *tail;

	edu_open(t, gfd, &e);
	ivshmem_open(t, c, &iv);
	/* replace the BAR's last 2M of the first 8M with a THP */
	tail = mmap(iv.bar + 6 * SZ_2M, SZ_2M, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	ASSERT_EQ(tail, iv.bar + 6 * SZ_2M);
	vu_madvise_thp(tail, SZ_2M, MADV_HUGEPAGE);
	fill(tail, SZ_2M, 5);

	MAP_OK(c, IOVA_P, iv.bar + 4 * SZ_2M, 3 * SZ_2M);
	EXPECT_ACCT(512);
	/* BAR -> THP and back across the edge between them */
	dma_copy(t, &e, iv.bar + 4 * SZ_2M, IOVA_P, SZ_2M + 0x100, 2 * SZ_2M + 0x3000, 0xff0);
	dma_copy(t, &e, iv.bar + 4 * SZ_2M, IOVA_P, 2 * SZ_2M - 0x7f8, 0x20, 0xff0);
	UNMAP_OK(c, IOVA_P, 3 * SZ_2M);
	EXPECT_ACCT(0);
}

/*
 * A MAP_DMA that starts in 2M of PROT_NONE and goes on into the BAR:
 * -EFAULT at its first page. Pinned in parallel (run-all), helpers have
 * looked the BAR's pfns up by then; they hold no pin, and releasing them
 * must not touch a page. Nothing is pinned, charged or mapped after.
 */
TEST_V12(pp_fault_before_bar)
{
	struct edu e;
	struct ivshmem iv;
	int gfd, c = edu_container(t, t->type, &gfd);
	size_t size;
	char *res, *p;

	edu_open(t, gfd, &e);
	ivshmem_open(t, c, &iv);
	res = mmap(NULL, iv.size + 2 * SZ_2M, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(res, MAP_FAILED);
	th_own_mem(t, res, iv.size + 2 * SZ_2M);
	p = (char *)(((uintptr_t)res + 2 * SZ_2M - 1) & ~(SZ_2M - 1));
	ASSERT_EQ(th_bar_mmap(t, iv.dev, VFIO_PCI_BAR2_REGION_INDEX, p, &size), p);

	EXPECT_EQ(vu_map(c, IOVA_P, p - SZ_2M, SZ_2M + 8 * SZ_2M, RW), -EFAULT);
	EXPECT_ACCT(0);
	/* the IOVA range is free: the BAR alone maps there */
	MAP_OK(c, IOVA_P, p, 8 * SZ_2M);
	EXPECT_ACCT(0);
	dma_copy(t, &e, iv.bar, IOVA_P, SZ_2M + 0x100, 3 * SZ_2M + 0x40, 0xff0);
	UNMAP_OK(c, IOVA_P, 8 * SZ_2M);
}

TEST_HARNESS_MAIN
