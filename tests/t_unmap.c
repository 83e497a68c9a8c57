// SPDX-License-Identifier: GPL-2.0-only
/* VFIO_IOMMU_UNMAP_DMA: v1 and v2 semantics, UNMAP_FLAG_ALL, argument checks. */
#include <stddef.h>
#include "common.h"

#define P	SZ_4K

/* Two 4-page mappings: M1 at A, M2 at A + 8 pages. */
static int two_mappings(struct th *t, uint64_t a)
{
	int c = th_container(t);
	char *p = th_anon(t, 8 * P);

	MAP_OK(c, a, p, 4 * P);
	MAP_OK(c, a + 8 * P, p + 4 * P, 4 * P);
	ASSERT_EQ(th_pins(t), 8);
	return c;
}

TEST_V12(unmap_exact_and_size_written_back)
{
	uint64_t a = IOVA_A;
	int c = two_mappings(t, a);
	struct vfio_iommu_type1_dma_unmap u = {
		.argsz = sizeof(u), .iova = a, .size = 4 * P,
	};

	ASSERT_EQ(th_unmap_raw(c, &u), 0);
	EXPECT_EQ(u.size, 4 * P);
	EXPECT_EQ(u.iova, a);
	EXPECT_EQ(u.flags, 0);
	EXPECT_PINS_VMLCK(4, 16);
	/* one range over what is left, holes included */
	UNMAP_RANGE(c, a, 12 * P, 4 * P);
}

TEST_V12(unmap_covering_several)
{
	uint64_t a = IOVA_A;
	int c = two_mappings(t, a);
	uint64_t done = ~0ULL;

	/* a range larger than both mappings, starting and ending in holes */
	ASSERT_EQ(vu_unmap(c, a - 4 * P, 20 * P, 0, &done), 0);
	EXPECT_EQ(done, 8 * P);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
}

TEST_V12(unmap_nothing)
{
	uint64_t a = IOVA_A;
	int c = two_mappings(t, a);
	uint64_t done = ~0ULL;

	ASSERT_EQ(vu_unmap(c, a + 4 * P, 4 * P, 0, &done), 0);
	EXPECT_EQ(done, 0);
	ASSERT_EQ(vu_unmap(c, IOVA_B, SZ_1G, 0, &done), 0);
	EXPECT_EQ(done, 0);
	EXPECT_EQ(th_pins(t), 8);
	UNMAP_RANGE(c, a, 12 * P, 8 * P);
}

/* v2: a range that would split a mapping fails and changes nothing. */
TEST(unmap_v2_refuses_split)
{
	uint64_t a = IOVA_A;
	int c, i;
	struct { uint64_t iova, size; } bad[] = {
		{ a, 2 * P },			/* head of M1 */
		{ a + P, 3 * P },		/* tail of M1 */
		{ a + P, P },			/* middle of M1 */
		{ a - P, 2 * P },		/* straddles M1's start */
		{ a + 3 * P, 2 * P },		/* straddles M1's end */
		{ a, 9 * P },			/* all of M1, head of M2 */
		{ a + P, 11 * P },		/* tail of M1, all of M2 */
	};

	t->type = VFIO_TYPE1v2_IOMMU;
	c = two_mappings(t, a);
	for (i = 0; i < (int)(sizeof(bad) / sizeof(bad[0])); i++) {
		struct vfio_iommu_type1_dma_unmap u = {
			.argsz = sizeof(u), .iova = bad[i].iova, .size = bad[i].size,
		};

		EXPECT_EQ(th_unmap_raw(c, &u), -EINVAL);
		/* nothing written back on failure */
		EXPECT_EQ(u.size, bad[i].size);
	}
	EXPECT_PINS_VMLCK(8, 32);
	UNMAP_OK(c, a, 4 * P);
	UNMAP_OK(c, a + 8 * P, 4 * P);
}

/*
 * v1: every mapping whose first IOVA is in the range goes, whole; a range
 * starting inside a mapping unmaps nothing at all (stock stops at the first
 * mapping it meets when that one starts before the range).
 */
TEST(unmap_v1_whole_mappings)
{
	uint64_t a = IOVA_A, done;
	int c;

	t->type = VFIO_TYPE1_IOMMU;
	c = two_mappings(t, a);

	/* head of M1: all of M1 */
	done = ~0ULL;
	ASSERT_EQ(vu_unmap(c, a, P, 0, &done), 0);
	EXPECT_EQ(done, 4 * P);
	EXPECT_EQ(th_pins(t), 4);
	EXPECT_EQ(vu_map(c, a, th_anon(t, 4 * P), 4 * P, RW), 0);
	EXPECT_EQ(th_pins(t), 8);

	/* starting inside M1: nothing, even though M2 starts in the range */
	done = ~0ULL;
	ASSERT_EQ(vu_unmap(c, a + P, 16 * P, 0, &done), 0);
	EXPECT_EQ(done, 0);
	EXPECT_EQ(th_pins(t), 8);

	/* from before M1 to M2's first page: both, whole */
	done = ~0ULL;
	ASSERT_EQ(vu_unmap(c, a - P, 10 * P, 0, &done), 0);
	EXPECT_EQ(done, 8 * P);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST_V12(unmap_all)
{
	uint64_t a = IOVA_A;
	int c = two_mappings(t, a);
	uint64_t done = ~0ULL;

	EXPECT_EQ(vu_unmap(c, a, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), -EINVAL);
	EXPECT_EQ(vu_unmap(c, 0, 4 * P, VFIO_DMA_UNMAP_FLAG_ALL, &done), -EINVAL);
	EXPECT_EQ(vu_unmap(c, a, 4 * P, VFIO_DMA_UNMAP_FLAG_ALL, &done), -EINVAL);
	EXPECT_EQ(th_pins(t), 8);
	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), 0);
	EXPECT_EQ(done, 8 * P);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	/* again: nothing left */
	done = ~0ULL;
	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), 0);
	EXPECT_EQ(done, 0);
}

TEST_V12(unmap_args)
{
	uint64_t a = IOVA_A;
	int c = two_mappings(t, a);
	struct vfio_iommu_type1_dma_unmap u = {
		.argsz = offsetof(struct vfio_iommu_type1_dma_unmap, size) + 7,
		.iova = a, .size = 4 * P,
	};
	uint64_t done;

	EXPECT_EQ(th_unmap_raw(c, &u), -EINVAL);
	u.argsz = sizeof(u);
	u.flags = 1 << 3;
	EXPECT_EQ(th_unmap_raw(c, &u), -EINVAL);
	u.flags = 1U << 31;
	EXPECT_EQ(th_unmap_raw(c, &u), -EINVAL);
	/* GET_DIRTY_BITMAP never combines with ALL or VADDR */
	u.flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP | VFIO_DMA_UNMAP_FLAG_ALL;
	EXPECT_EQ(th_unmap_raw(c, &u), -EINVAL);
	u.flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP | VFIO_DMA_UNMAP_FLAG_VADDR;
	EXPECT_EQ(th_unmap_raw(c, &u), -EINVAL);
	/* GET_DIRTY_BITMAP without dirty tracking */
	u.flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP;
	EXPECT_EQ(th_unmap_raw(c, &u), -EINVAL);

	EXPECT_EQ(vu_unmap(c, a, 0, 0, &done), -EINVAL);
	EXPECT_EQ(vu_unmap(c, a + 0x800, 4 * P, 0, &done), -EINVAL);
	EXPECT_EQ(vu_unmap(c, a, 4 * P + 0x800, 0, &done), -EINVAL);
	EXPECT_EQ(vu_unmap(c, a, 0x800, 0, &done), -EINVAL);
	EXPECT_EQ(vu_unmap(c, 0x800, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), -EINVAL);
	EXPECT_EQ(th_pins(t), 8);
	UNMAP_RANGE(c, a, 12 * P, 8 * P);
}

/* A deliberate difference: -EOVERFLOW on foliomap (see wrap_errno()). */
TEST_V12(unmap_wraparound)
{
	uint64_t a = IOVA_A, done;
	int c = two_mappings(t, a);

	EXPECT_EQ(vu_unmap(c, a, ~0ULL - a + 1 + P, 0, &done), wrap_errno());
	EXPECT_EQ(vu_unmap(c, 0xfffffffffffff000ULL, 2 * P, 0, &done), wrap_errno());
	EXPECT_EQ(th_pins(t), 8);
	UNMAP_RANGE(c, a, 12 * P, 8 * P);
}

/*
 * A range ending at the last IOVA of the address space (iova + size wraps to
 * exactly 0).  Stock 6.1 and 6.12 compare against iova + size and find
 * nothing: success, size 0, mappings left.  foliomap and stock 7.x
 * (upstream 6.18) unmap them.
 */
TEST_V12(unmap_to_end_of_address_space)
{
	uint64_t a = IOVA_A, done = ~0ULL;
	int c = two_mappings(t, a);

	ASSERT_EQ(vu_unmap(c, a, 0 - a, 0, &done), 0);
	if (is_foliomap() || th_stock_upstream_type1()) {
		EXPECT_EQ(done, 8 * P);
		EXPECT_EQ(th_pins(t), 0);
	} else {
		EXPECT_EQ(done, 0);
		EXPECT_EQ(th_pins(t), 8);
		UNMAP_RANGE(c, a, 12 * P, 8 * P);
	}
}

/* Unmapping a huge mapping in one call, with hugepage-backed memory. */
TEST_V12(unmap_thp_mapping)
{
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_THP, 8 * SZ_2M);

	MAP_OK(c, IOVA_B, p, 8 * SZ_2M);
	EXPECT_PINS_VMLCK(8 * 512, 8 * 2048);
	if (t->v2)
		EXPECT_EQ(vu_unmap(c, IOVA_B, SZ_2M, 0, NULL), -EINVAL);
	UNMAP_OK(c, IOVA_B, 8 * SZ_2M);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST_HARNESS_MAIN
