// SPDX-License-Identifier: GPL-2.0-only
/* VFIO_IOMMU_GET_INFO: flags, page sizes and the capability chain. */
#include <stddef.h>
#include "common.h"

#define DIRTY_BITMAP_SIZE_MAX	0x10000000ULL	/* bytes for INT_MAX pages */

TEST_V12(info_argsz_too_small)
{
	int c = th_container(t);
	struct vfio_iommu_type1_info info;

	memset(&info, 0, sizeof(info));
	info.argsz = offsetof(struct vfio_iommu_type1_info, iova_pgsizes) + 7;
	EXPECT_EQ(ioctl(c, VFIO_IOMMU_GET_INFO, &info) < 0 ? -errno : 0, -EINVAL);
	info.argsz = 0;
	EXPECT_EQ(ioctl(c, VFIO_IOMMU_GET_INFO, &info) < 0 ? -errno : 0, -EINVAL);
}

TEST_V12(info_flags_pgsizes)
{
	int c = th_container(t);
	char buf[4096];
	struct vfio_iommu_type1_info *info = (void *)buf;

	ASSERT_EQ(th_get_info(c, buf, sizeof(buf)), 0);
	EXPECT_EQ(info->flags, VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS);
	th_diag("iova_pgsizes 0x%llx", (unsigned long long)info->iova_pgsizes);
	/* 4K is the smallest IOMMU page */
	EXPECT_EQ(info->iova_pgsizes & (2 * SZ_4K - 1), SZ_4K);
	EXPECT_EQ(info->cap_offset, sizeof(*info));
	EXPECT_EQ(info->argsz, sizeof(buf));
}

/*
 * Exactly the fixed part (no room for caps): argsz is raised to the full
 * size, cap_offset stays 0, flags still say CAPS.  Then the full size works.
 */
TEST_V12(info_caps_argsz_short)
{
	int c = th_container(t);
	struct vfio_iommu_type1_info info;
	char buf[4096];
	struct vfio_iommu_type1_info *full = (void *)buf;
	uint32_t need;

	memset(&info, 0, sizeof(info));
	info.argsz = sizeof(info);
	ASSERT_EQ(ioctl(c, VFIO_IOMMU_GET_INFO, &info) < 0 ? -errno : 0, 0);
	EXPECT_EQ(info.flags, VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS);
	EXPECT_EQ(info.cap_offset, 0);
	ASSERT_GT(info.argsz, sizeof(info));
	need = info.argsz;
	th_diag("full GET_INFO size %u", need);

	/* one byte short is still too short */
	ASSERT_LT(need, sizeof(buf));
	ASSERT_EQ(th_get_info(c, buf, need - 1), 0);
	EXPECT_EQ(full->argsz, need);
	EXPECT_EQ(full->cap_offset, 0);

	ASSERT_EQ(th_get_info(c, buf, need), 0);
	EXPECT_EQ(full->argsz, need);
	EXPECT_EQ(full->cap_offset, sizeof(info));
	EXPECT_NE(th_find_cap(buf, need, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE), NULL);
	EXPECT_NE(th_find_cap(buf, need, VFIO_IOMMU_TYPE1_INFO_CAP_MIGRATION), NULL);
	EXPECT_NE(th_find_cap(buf, need, VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL), NULL);
}

/* The minimum size (up to iova_pgsizes) works and reports the page sizes. */
TEST_V12(info_minimal_argsz)
{
	int c = th_container(t);
	struct vfio_iommu_type1_info info;
	size_t minsz = offsetof(struct vfio_iommu_type1_info, iova_pgsizes) + 8;

	memset(&info, 0xa5, sizeof(info));
	info.argsz = minsz;
	ASSERT_EQ(ioctl(c, VFIO_IOMMU_GET_INFO, &info) < 0 ? -errno : 0, 0);
	EXPECT_EQ(info.flags & VFIO_IOMMU_INFO_PGSIZES, VFIO_IOMMU_INFO_PGSIZES);
	EXPECT_EQ(info.iova_pgsizes & (2 * SZ_4K - 1), SZ_4K);
	/* beyond minsz nothing is written */
	EXPECT_EQ(info.cap_offset, 0xa5a5a5a5);
}

TEST_V12(info_iova_ranges)
{
	int c = th_container(t);
	char buf[4096];
	struct vfio_iommu_type1_info_cap_iova_range *cap;
	uint64_t max_end = 0;
	uint32_t i;

	ASSERT_EQ(th_get_info(c, buf, sizeof(buf)), 0);
	cap = (void *)th_find_cap(buf, sizeof(buf), VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE);
	ASSERT_NE(cap, NULL);
	EXPECT_EQ(cap->header.version, 1);
	ASSERT_GE(cap->nr_iovas, 2);
	for (i = 0; i < cap->nr_iovas; i++) {
		uint64_t s = cap->iova_ranges[i].start, e = cap->iova_ranges[i].end;

		th_diag("range %u: 0x%llx-0x%llx", i, (unsigned long long)s,
			(unsigned long long)e);
		EXPECT_LE(s, e);
		if (i)
			EXPECT_GT(s, cap->iova_ranges[i - 1].end + 1);
		/* no overlap with the MSI window */
		EXPECT_TRUE(e < MSI_START || s > MSI_END);
		EXPECT_LE(e, APERTURE_END);
		if (e > max_end)
			max_end = e;
	}
	EXPECT_EQ(cap->iova_ranges[0].start, 0);
	EXPECT_EQ(max_end, APERTURE_END);
	/* the window is a hole between two usable ranges */
	for (i = 0; i + 1 < cap->nr_iovas; i++)
		if (cap->iova_ranges[i].end == MSI_START - 1)
			break;
	ASSERT_LT(i + 1, cap->nr_iovas);
	EXPECT_EQ(cap->iova_ranges[i + 1].start, MSI_END + 1);
}

/*
 * The aperture the tests expect (APERTURE_BITS: vm/run --aw-bits, exported as
 * VFIO_IOMMU_AW_BITS) is the one the emulated IOMMU reports in its
 * capability register (MGAW), and GET_INFO's last usable IOVA is its end
 * (info_iova_ranges): a guest booted with another width fails here.
 */
TEST(info_aperture_is_configured_width)
{
	int c = th_container(t);
	char buf[4096];
	struct vfio_iommu_type1_info_cap_iova_range *cap;
	int mgaw = th_dmar_mgaw_bits();
	const char *env = getenv("VFIO_IOMMU_AW_BITS");

	th_diag("VFIO_IOMMU_AW_BITS=%s, aperture %d bits, DMAR MGAW %d bits",
		env ? env : "(unset)", APERTURE_BITS, mgaw);
	ASSERT_GT(mgaw, 0);
	EXPECT_EQ(mgaw, APERTURE_BITS);
	ASSERT_EQ(th_get_info(c, buf, sizeof(buf)), 0);
	cap = (void *)th_find_cap(buf, sizeof(buf), VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE);
	ASSERT_NE(cap, NULL);
	ASSERT_GE(cap->nr_iovas, 1);
	EXPECT_EQ(cap->iova_ranges[cap->nr_iovas - 1].end, APERTURE_END);
}

TEST_V12(info_migration_cap)
{
	int c = th_container(t);
	char buf[4096];
	struct vfio_iommu_type1_info *info = (void *)buf;
	struct vfio_iommu_type1_info_cap_migration *cap;

	ASSERT_EQ(th_get_info(c, buf, sizeof(buf)), 0);
	cap = (void *)th_find_cap(buf, sizeof(buf), VFIO_IOMMU_TYPE1_INFO_CAP_MIGRATION);
	ASSERT_NE(cap, NULL);
	EXPECT_EQ(cap->header.version, 1);
	EXPECT_EQ(cap->flags, 0);
	/* the smallest IOMMU page size only */
	EXPECT_EQ(cap->pgsize_bitmap, info->iova_pgsizes & -info->iova_pgsizes);
	EXPECT_EQ(cap->pgsize_bitmap, SZ_4K);
	EXPECT_EQ(cap->max_dirty_bitmap_size, DIRTY_BITMAP_SIZE_MAX);
}

TEST_V12(info_dma_avail)
{
	int c = th_container(t);
	long long limit = th_param_read("dma_entry_limit");
	char *p = th_anon(t, 3 * SZ_4K);
	char buf[4096];
	struct vfio_iommu_type1_info_dma_avail *cap;

	ASSERT_GT(limit, 0);
	ASSERT_EQ(th_get_info(c, buf, sizeof(buf)), 0);
	cap = (void *)th_find_cap(buf, sizeof(buf), VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL);
	ASSERT_NE(cap, NULL);
	EXPECT_EQ(cap->header.version, 1);
	EXPECT_EQ(cap->avail, limit);

	MAP_OK(c, IOVA_A, p, SZ_4K);
	MAP_OK(c, IOVA_A + SZ_2M, p + SZ_4K, 2 * SZ_4K);
	EXPECT_EQ(th_dma_avail(c), limit - 2);
	/* a failed map does not consume an entry */
	EXPECT_EQ(vu_map(c, IOVA_A, p, SZ_4K, RW), -EEXIST);
	EXPECT_EQ(th_dma_avail(c), limit - 2);
	UNMAP_OK(c, IOVA_A, SZ_4K);
	EXPECT_EQ(th_dma_avail(c), limit - 1);
	UNMAP_OK(c, IOVA_A + SZ_2M, 2 * SZ_4K);
	EXPECT_EQ(th_dma_avail(c), limit);
}

/* GET_INFO of a container without an IOMMU set is refused. */
TEST(info_unset_container)
{
	int c = th_own_fd(t, vu_container_open());
	char buf[256];

	ASSERT_GE(c, 0);
	EXPECT_EQ(th_get_info(c, buf, sizeof(buf)), -EINVAL);
}

TEST_HARNESS_MAIN
