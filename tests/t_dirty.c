// SPDX-License-Identifier: GPL-2.0-only
/*
 * VFIO_IOMMU_DIRTY_PAGES (START/STOP/GET_BITMAP) and unmap with
 * GET_DIRTY_BITMAP.  vfio-pci devices do not limit their dirty scope to
 * pinned pages, so while tracking every mapped page reports dirty.
 */
#include <stddef.h>
#include "common.h"

#define P	SZ_4K

struct get_req {
	struct vfio_iommu_type1_dirty_bitmap d;
	struct vfio_iommu_type1_dirty_bitmap_get r;
};

struct unmap_req {
	struct vfio_iommu_type1_dma_unmap u;
	struct vfio_bitmap b;
};

static int unmap_bitmap(int c, uint64_t iova, uint64_t size, uint64_t pgsize,
			void *data, uint64_t bytes, uint64_t *done)
{
	struct unmap_req r = {
		.u = { .argsz = sizeof(r), .flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP,
		       .iova = iova, .size = size },
		.b = { .pgsize = pgsize, .size = bytes, .data = data },
	};
	int ret = ioctl(c, VFIO_IOMMU_UNMAP_DMA, &r) < 0 ? -errno : 0;

	if (done)
		*done = r.u.size;
	return ret;
}

/* M1: 4 pages at A, M2: 4 pages at A + 8 pages. */
static int setup(struct th *t)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *p = th_anon(t, 8 * P);

	MAP_OK(c, IOVA_A, p, 4 * P);
	MAP_OK(c, IOVA_A + 8 * P, p + 4 * P, 4 * P);
	return c;
}

TEST(dirty_v1_refused)
{
	int c = th_container_type(t, VFIO_TYPE1_IOMMU, 1);
	__u64 bm = 0;

	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), -EACCES);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP), -EACCES);
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, P, P, &bm, 8), -EACCES);
}

TEST(dirty_start_stop_flags)
{
	int c = setup(t);
	struct vfio_iommu_type1_dirty_bitmap d = {
		.argsz = offsetof(struct vfio_iommu_type1_dirty_bitmap, flags) + 3,
		.flags = VFIO_IOMMU_DIRTY_PAGES_FLAG_START,
	};

	EXPECT_EQ(ioctl(c, VFIO_IOMMU_DIRTY_PAGES, &d) < 0 ? -errno : 0, -EINVAL);
	EXPECT_EQ(th_dirty(c, 0), -EINVAL);
	EXPECT_EQ(th_dirty(c, 1 << 3), -EINVAL);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START |
			VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP), -EINVAL);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START |
			VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP), -EINVAL);
	/* STOP without START, START twice, STOP twice: all fine */
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP), 0);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP), 0);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP), 0);
	EXPECT_EQ(th_pins(t), 8);
}

TEST(dirty_get_bitmap_all_dirty)
{
	int c = setup(t);
	char *p = th_anon(t, 2 * P);
	__u64 bm[2];

	ASSERT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
	memset(bm, 0, sizeof(bm));
	ASSERT_EQ(th_get_bitmap(c, IOVA_A, 12 * P, P, bm, 8), 0);
	EXPECT_EQ(bm[0], 0xf0fULL);
	/*
	 * Reading does not clear: vfio-pci pages stay dirty.  Only the bits
	 * of the requested range are compared: stock leaves stale bits of a
	 * shifted per-mapping bitmap beyond the range on later reads.
	 */
	memset(bm, 0, sizeof(bm));
	ASSERT_EQ(th_get_bitmap(c, IOVA_A, 12 * P, P, bm, 8), 0);
	EXPECT_EQ(bm[0] & 0xfff, 0xf0fULL);
	/* a single mapping, a sub-range ending in a hole */
	memset(bm, 0, sizeof(bm));
	ASSERT_EQ(th_get_bitmap(c, IOVA_A + 8 * P, 4 * P, P, bm, 8), 0);
	EXPECT_EQ(bm[0] & 0xf, 0xfULL);
	memset(bm, 0, sizeof(bm));
	ASSERT_EQ(th_get_bitmap(c, IOVA_A, 6 * P, P, bm, 8), 0);
	EXPECT_EQ(bm[0] & 0x3f, 0xfULL);
	/* a mapping made while tracking is dirty too */
	MAP_OK(c, IOVA_A + 4 * P, p, 2 * P);
	memset(bm, 0, sizeof(bm));
	ASSERT_EQ(th_get_bitmap(c, IOVA_A, 12 * P, P, bm, 8), 0);
	EXPECT_EQ(bm[0] & 0xfff, 0xf3fULL);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP), 0);
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 12 * P, P, bm, 8), -EINVAL);
	UNMAP_RANGE(c, IOVA_A, 12 * P, 10 * P);
}

TEST(dirty_get_bitmap_args)
{
	int c = setup(t);
	__u64 bm[2] = { 0, 0 };
	struct get_req g = {
		.d = { .argsz = sizeof(g.d), .flags = VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP },
	};

	/* not tracking */
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 4 * P, P, bm, 8), -EINVAL);
	ASSERT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
	/* no room for the range */
	EXPECT_EQ(ioctl(c, VFIO_IOMMU_DIRTY_PAGES, &g) < 0 ? -errno : 0, -EINVAL);
	/* page size other than the smallest IOMMU page */
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 4 * P, SZ_2M, bm, 8), -EINVAL);
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 4 * P, 2 * P, bm, 8), -EINVAL);
	/* unaligned iova, zero or unaligned size */
	EXPECT_EQ(th_get_bitmap(c, IOVA_A + 0x800, 4 * P, P, bm, 8), -EINVAL);
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 0, P, bm, 8), -EINVAL);
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 4 * P + 0x800, P, bm, 8), -EINVAL);
	/* bitmap smaller than the range needs, or empty */
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 65 * P, P, bm, 8), -EINVAL);
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 4 * P, P, bm, 0), -EINVAL);
	/* ranges that bisect a mapping */
	EXPECT_EQ(th_get_bitmap(c, IOVA_A + P, 3 * P, P, bm, 8), -EINVAL);
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 2 * P, P, bm, 8), -EINVAL);
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 10 * P, P, bm, 8), -EINVAL);
	/* wrap-around */
	EXPECT_EQ(th_get_bitmap(c, 0xfffffffffffff000ULL, 2 * P, P, bm, 8), wrap_errno());
	/* unwritable bitmap */
	EXPECT_EQ(th_get_bitmap(c, IOVA_A, 4 * P, P, (void *)8, 8), -EFAULT);
	EXPECT_EQ(bm[0], 0);
	EXPECT_EQ(th_pins(t), 8);
}

TEST(dirty_unmap_get_bitmap)
{
	int c = setup(t);
	__u64 bm = 0;
	uint64_t done = ~0ULL;

	/* not tracking */
	EXPECT_EQ(unmap_bitmap(c, IOVA_A, 4 * P, P, &bm, 8, &done), -EINVAL);
	ASSERT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
	/* bad bitmap page size, too small, argsz without the bitmap */
	EXPECT_EQ(unmap_bitmap(c, IOVA_A, 4 * P, SZ_2M, &bm, 8, &done), -EINVAL);
	EXPECT_EQ(unmap_bitmap(c, IOVA_A, 4 * P, P, &bm, 0, &done), -EINVAL);
	{
		struct unmap_req r = {
			.u = { .argsz = sizeof(r.u),
			       .flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP,
			       .iova = IOVA_A, .size = 4 * P },
			.b = { .pgsize = P, .size = 8, .data = &bm },
		};

		EXPECT_EQ(ioctl(c, VFIO_IOMMU_UNMAP_DMA, &r) < 0 ? -errno : 0, -EINVAL);
	}
	EXPECT_EQ(th_pins(t), 8);

	ASSERT_EQ(unmap_bitmap(c, IOVA_A, 4 * P, P, &bm, 8, &done), 0);
	EXPECT_EQ(done, 4 * P);
	EXPECT_EQ(bm & 0xf, 0xfULL);
	EXPECT_EQ(th_pins(t), 4);
	/* the range's own offset: M2 sits 8 pages into it */
	bm = 0;
	ASSERT_EQ(unmap_bitmap(c, IOVA_A, 12 * P, P, &bm, 8, &done), 0);
	EXPECT_EQ(done, 4 * P);
	EXPECT_EQ(bm & 0xfff, 0xf00ULL);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP), 0);
}

/* 64M of THP: a bitmap of 16384 bits, all set, then unmap with bitmap. */
TEST(dirty_large_mapping)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	size_t size = 64ULL << 20, npages = size / P, i;
	char *p = th_mem(t, VU_MEM_THP, size);
	__u64 *bm = th_anon(t, npages / 8);
	uint64_t done;

	MAP_OK(c, IOVA_B, p, size);
	ASSERT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
	memset(bm, 0, npages / 8);
	ASSERT_EQ(th_get_bitmap(c, IOVA_B, size, P, bm, npages / 8), 0);
	for (i = 0; i < npages / 64; i++)
		if (bm[i] != ~0ULL)
			break;
	EXPECT_EQ(i, npages / 64);
	memset(bm, 0, npages / 8);
	ASSERT_EQ(unmap_bitmap(c, IOVA_B, size, P, bm, npages / 8, &done), 0);
	EXPECT_EQ(done, size);
	for (i = 0; i < npages / 64; i++)
		if (bm[i] != ~0ULL)
			break;
	EXPECT_EQ(i, npages / 64);
	EXPECT_EQ(th_pins(t), 0);
}

/*
 * Bits [from, to) of bm set, the rest of the first nbits clear? Returns
 * the number of bits that differ.
 */
static size_t bits_off(const __u64 *bm, size_t nbits, size_t from, size_t to)
{
	size_t i, bad = 0;

	for (i = 0; i < nbits; i++)
		bad += !!(bm[i / 64] & (1ULL << (i % 64))) != (i >= from && i < to);
	return bad;
}

/*
 * 136M of THP starting 5 pages into the range: 34816 bits shifted 5 bits
 * up, 545 u64 words of report (more than one page of them), all set.
 */
TEST(dirty_large_mapping_mid_word)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	size_t size = 136ULL << 20, off = 5, npages = size / P, nbits = off + npages;
	size_t bytes = 2 * P;
	char *p = th_mem(t, VU_MEM_THP, size);
	__u64 *bm = th_anon(t, bytes);
	uint64_t done;

	MAP_OK(c, IOVA_B + off * P, p, size);
	ASSERT_EQ(th_dirty(c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
	memset(bm, 0, bytes);
	ASSERT_EQ(th_get_bitmap(c, IOVA_B, nbits * P, P, bm, bytes), 0);
	EXPECT_EQ(bits_off(bm, nbits, off, nbits), 0);
	memset(bm, 0, bytes);
	ASSERT_EQ(unmap_bitmap(c, IOVA_B, nbits * P, P, bm, bytes, &done), 0);
	EXPECT_EQ(done, size);
	EXPECT_EQ(bits_off(bm, nbits, off, nbits), 0);
	EXPECT_EQ(th_pins(t), 0);
}

TEST_HARNESS_MAIN
