// SPDX-License-Identifier: GPL-2.0-only
/* VFIO_DMA_UNMAP_FLAG_VADDR / VFIO_DMA_MAP_FLAG_VADDR (UPDATE_VADDR). */
#include "common.h"

#define P	SZ_4K
#define VADDR_MAP	VFIO_DMA_MAP_FLAG_VADDR
#define VADDR_UNMAP	VFIO_DMA_UNMAP_FLAG_VADDR

/* M1 at IOVA_A (4 pages), M2 at IOVA_A + 8 pages (4 pages). */
static int setup(struct th *t, char **mem)
{
	int c = th_container(t);
	char *p = th_anon(t, 8 * P);

	MAP_OK(c, IOVA_A, p, 4 * P);
	MAP_OK(c, IOVA_A + 8 * P, p + 4 * P, 4 * P);
	*mem = p;
	return c;
}

TEST_V12(vaddr_invalidate_and_reattach)
{
	char *p, *q = th_anon(t, 4 * P);
	int c = setup(t, &p);
	uint64_t done = ~0ULL;

	ASSERT_EQ(vu_unmap(c, IOVA_A, 4 * P, VADDR_UNMAP, &done), 0);
	EXPECT_EQ(done, 4 * P);
	/* still mapped and pinned, still charged */
	EXPECT_PINS_VMLCK(8, 32);
	EXPECT_EQ(vu_map(c, IOVA_A, q, 4 * P, RW), -EEXIST);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit") - 2);

	/* re-attach a new vaddr: same iova and size, VADDR flag alone */
	ASSERT_EQ(vu_map(c, IOVA_A, q, 4 * P, VADDR_MAP), 0);
	EXPECT_PINS_VMLCK(8, 32);
	/* valid again: a second re-attach is refused */
	EXPECT_EQ(vu_map(c, IOVA_A, q, 4 * P, VADDR_MAP), -EINVAL);
	UNMAP_RANGE(c, IOVA_A, 12 * P, 8 * P);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST_V12(vaddr_map_errors)
{
	char *p, *q = th_anon(t, 8 * P);
	int c = setup(t, &p);

	/* nothing at that IOVA */
	EXPECT_EQ(vu_map(c, IOVA_B, q, 4 * P, VADDR_MAP), -ENOENT);
	/* mapping exists but its vaddr is valid */
	EXPECT_EQ(vu_map(c, IOVA_A, q, 4 * P, VADDR_MAP), -EINVAL);

	ASSERT_EQ(vu_unmap(c, IOVA_A, 4 * P, VADDR_UNMAP, NULL), 0);
	/* wrong size, wrong start, larger range */
	EXPECT_EQ(vu_map(c, IOVA_A, q, 2 * P, VADDR_MAP), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A, q, 8 * P, VADDR_MAP), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A + P, q, 3 * P, VADDR_MAP), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A - P, q, 5 * P, VADDR_MAP), -EINVAL);
	/* unaligned, zero size */
	EXPECT_EQ(vu_map(c, IOVA_A, q + 0x800, 4 * P, VADDR_MAP), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A, q, 0, VADDR_MAP), -EINVAL);
	/* VADDR with READ/WRITE */
	EXPECT_EQ(vu_map(c, IOVA_A, q, 4 * P, VADDR_MAP | RW), -EINVAL);
	EXPECT_EQ(th_pins(t), 8);
	/* the right one works after all the failures */
	ASSERT_EQ(vu_map(c, IOVA_A, q, 4 * P, VADDR_MAP), 0);
	UNMAP_RANGE(c, IOVA_A, 12 * P, 8 * P);
}

/* Invalidating an already invalid vaddr fails and undoes the whole call. */
TEST_V12(vaddr_double_invalidate_rolls_back)
{
	char *p;
	int c = setup(t, &p);
	uint64_t done = ~0ULL;

	ASSERT_EQ(vu_unmap(c, IOVA_A + 8 * P, 4 * P, VADDR_UNMAP, &done), 0);
	EXPECT_EQ(done, 4 * P);
	/* M1 would be invalidated, then M2 is found invalid: -EINVAL */
	done = 12345;
	EXPECT_EQ(vu_unmap(c, IOVA_A, 12 * P, VADDR_UNMAP, &done), -EINVAL);
	/* M1 is valid again (rolled back), M2 still invalid */
	EXPECT_EQ(vu_map(c, IOVA_A, p, 4 * P, VADDR_MAP), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A + 8 * P, p + 4 * P, 4 * P, VADDR_MAP), 0);
	EXPECT_EQ(th_pins(t), 8);
	UNMAP_RANGE(c, IOVA_A, 12 * P, 8 * P);
}

/* A mapping with an invalid vaddr can still be unmapped normally. */
TEST_V12(vaddr_unmap_while_invalid)
{
	char *p;
	int c = setup(t, &p);

	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL | VADDR_UNMAP, NULL), 0);
	EXPECT_EQ(th_pins(t), 8);
	UNMAP_OK(c, IOVA_A, 4 * P);
	EXPECT_PINS_VMLCK(4, 16);
	UNMAP_RANGE(c, 0, 0 - SZ_4K, 4 * P);
	EXPECT_PINS_VMLCK(0, 0);
}

/* UNMAP_ALL | VADDR invalidates everything and reports the total. */
TEST_V12(vaddr_unmap_all_invalidates)
{
	char *p, *q = th_anon(t, 8 * P);
	int c = setup(t, &p);
	uint64_t done = ~0ULL;

	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL | VADDR_UNMAP, &done), 0);
	EXPECT_EQ(done, 8 * P);
	EXPECT_EQ(vu_map(c, IOVA_A, q, 4 * P, VADDR_MAP), 0);
	EXPECT_EQ(vu_map(c, IOVA_A + 8 * P, q + 4 * P, 4 * P, VADDR_MAP), 0);
	/* container close with everything valid again */
}

/* Closing the container while vaddrs are invalid releases everything. */
TEST_V12(vaddr_close_while_invalid)
{
	char *p;
	int c = setup(t, &p);

	ASSERT_EQ(vu_unmap(c, IOVA_A, 12 * P, VADDR_UNMAP, NULL), 0);
	EXPECT_EQ(th_pins(t), 8);
	/* the harness closes the container and checks the counters */
}

TEST_HARNESS_MAIN
