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

/*
 * The usable IOVA ranges the container's group leaves: the aperture minus
 * every reserved region of the group but the relaxable direct-mapped ones
 * (which type1 ignores), as stock type1 computes them. Sorted, into r;
 * returns how many.
 */
static int expected_ranges(struct th *t, uint64_t aperture_end,
			   struct vfio_iova_range *r, int max)
{
	struct vu_resv resv[16];
	int group, i, j, n = 1, nresv;

	th_e1000e_groups(t, &group, 1);
	nresv = th_resv_regions(t, group, resv, 16);
	r[0].start = 0;
	r[0].end = aperture_end;
	for (i = 0; i < nresv; i++) {
		uint64_t s = resv[i].start, e = resv[i].end;

		th_diag("group %d reserved 0x%llx-0x%llx %s", group,
			(unsigned long long)s, (unsigned long long)e, resv[i].type);
		if (!strcmp(resv[i].type, "direct-relaxable"))
			continue;
		for (j = 0; j < n; j++) {
			struct vfio_iova_range cur = r[j];

			if (e < cur.start || s > cur.end)
				continue;
			if (s > cur.start && e < cur.end) {
				/* a hole inside: split */
				ASSERT_LT(n, max);
				memmove(&r[j + 2], &r[j + 1], (n - j - 1) * sizeof(*r));
				r[j].end = s - 1;
				r[j + 1].start = e + 1;
				r[j + 1].end = cur.end;
				n++;
				j++;
			} else if (s <= cur.start && e >= cur.end) {
				memmove(&r[j], &r[j + 1], (n - j - 1) * sizeof(*r));
				n--;
				j--;
			} else if (s <= cur.start) {
				r[j].start = e + 1;
			} else {
				r[j].end = s - 1;
			}
		}
	}
	return n;
}

/*
 * GET_INFO's IOVA ranges are exactly the aperture (th_aperture_end(): per
 * IOMMU) minus the group's reserved regions: on Intel [0, 2^aw-bits - 1]
 * around the MSI window; on AMD [0, 2^64 - 1] around the MSI window and
 * the HyperTransport range; on SMMUv3 [0, 2^48 - 1] around the software
 * MSI window.
 */
TEST_V12(info_iova_ranges)
{
	int c = th_container(t);
	struct vfio_iova_range got[16], want[16];
	uint64_t msi_start, msi_end, max_end = 0;
	int i, n, nwant;

	n = th_iova_ranges(t, c, got, 16);
	nwant = expected_ranges(t, th_aperture_end(t), want, 16);
	th_msi_window(t, &msi_start, &msi_end);
	ASSERT_GE(n, 2);
	for (i = 0; i < n; i++) {
		uint64_t s = got[i].start, e = got[i].end;

		th_diag("range %d: 0x%llx-0x%llx", i, (unsigned long long)s,
			(unsigned long long)e);
		EXPECT_LE_U(s, e);
		if (i)
			EXPECT_GT_U(s, got[i - 1].end + 1);
		/* no overlap with the MSI window */
		EXPECT_TRUE(e < msi_start || s > msi_end);
		if (e > max_end)
			max_end = e;
	}
	EXPECT_EQ(got[0].start, 0);
	EXPECT_EQ(max_end, th_aperture_end(t));
	/* the window is a hole between two usable ranges */
	for (i = 0; i + 1 < n; i++)
		if (got[i].end == msi_start - 1)
			break;
	ASSERT_LT(i + 1, n);
	EXPECT_EQ(got[i + 1].start, msi_end + 1);
	/* and nothing but the reserved regions is missing */
	ASSERT_EQ(n, nwant);
	for (i = 0; i < n; i++) {
		EXPECT_EQ(got[i].start, want[i].start);
		EXPECT_EQ(got[i].end, want[i].end);
	}
}

/*
 * The aperture is the one the IOMMU's driver must report. Intel: the width
 * the tests expect (APERTURE_BITS: vm/run --aw-bits, exported as
 * VFIO_IOMMU_AW_BITS) is the one the emulated IOMMU reports in its
 * capability register (MGAW), and GET_INFO's last usable IOVA is its end: a
 * guest booted with another width fails here. AMD-Vi: the v1 page table's
 * whole 64-bit space (VFIO_IOMMU_AW_BITS, an Intel setting, is not used).
 * SMMUv3: 48 bits (th_aperture_end()).
 */
TEST(info_aperture_is_configured_width)
{
	int c = th_container(t);
	struct vfio_iova_range r[16];
	const char *env = getenv("VFIO_IOMMU_AW_BITS");
	int n, mgaw;

	th_diag("IOMMU %s, VFIO_IOMMU_AW_BITS=%s", vu_iommu_name(th_iommu()),
		env ? env : "(unset)");
	if (th_iommu() == VU_IOMMU_INTEL) {
		mgaw = th_dmar_mgaw_bits();
		th_diag("aperture %d bits, DMAR MGAW %d bits", APERTURE_BITS, mgaw);
		ASSERT_GT(mgaw, 0);
		EXPECT_EQ(mgaw, APERTURE_BITS);
	}
	n = th_iova_ranges(t, c, r, 16);
	EXPECT_EQ(r[n - 1].end, th_aperture_end(t));
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
