// SPDX-License-Identifier: GPL-2.0-only
/* VFIO_CHECK_EXTENSION before and after VFIO_SET_IOMMU, and SET_IOMMU itself. */
#include "common.h"

static int ext(int c, long arg)
{
	int ret = ioctl(c, VFIO_CHECK_EXTENSION, arg);

	return ret < 0 ? -errno : ret;
}

/*
 * Stock semantics of DMA_CC_IOMMU: every domain enforces cache coherency,
 * which the Intel driver grants when each unit has Snoop Control (ECAP.SC,
 * bit 7).  Computed from the emulated hardware, not from either backend.
 */
static int expected_cc(struct th *t)
{
	char path[128];
	unsigned long long ecap;
	int i, n = 0, sc = 1;

	for (i = 0; i < 16; i++) {
		FILE *f;

		snprintf(path, sizeof(path), "/sys/class/iommu/dmar%d/intel-iommu/ecap", i);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%llx", &ecap) != 1)
			FAIL("cannot parse %s", path);
		fclose(f);
		n++;
		if (!(ecap & (1ULL << 7)))
			sc = 0;
	}
	if (!n)
		FAIL("no /sys/class/iommu/dmar*/intel-iommu/ecap: no Intel IOMMU?");
	th_diag("IOMMU snoop control: %d (%d units)", sc, n);
	return sc;
}

TEST(extension_before_set_iommu)
{
	int c = th_own_fd(t, vu_container_open());

	ASSERT_GE(c, 0);
	EXPECT_EQ(ext(c, VFIO_TYPE1_IOMMU), 1);
	EXPECT_EQ(ext(c, VFIO_TYPE1v2_IOMMU), 1);
	EXPECT_EQ(ext(c, VFIO_UNMAP_ALL), 1);
	/* needs an iommu instance in stock */
	EXPECT_EQ(ext(c, VFIO_UPDATE_VADDR), 0);
	EXPECT_EQ(ext(c, VFIO_DMA_CC_IOMMU), 0);
	EXPECT_EQ(ext(c, 9999), 0);
}

TEST_V12(extension_after_set_iommu)
{
	int c = th_container(t);
	int cc = expected_cc(t);

	EXPECT_EQ(ext(c, VFIO_TYPE1_IOMMU), 1);
	EXPECT_EQ(ext(c, VFIO_TYPE1v2_IOMMU), 1);
	EXPECT_EQ(ext(c, VFIO_TYPE1_NESTING_IOMMU), th_nesting_extension());
	EXPECT_EQ(ext(c, VFIO_UNMAP_ALL), 1);
	EXPECT_EQ(ext(c, VFIO_UPDATE_VADDR), 1);
	EXPECT_EQ(ext(c, VFIO_DMA_CC_IOMMU), cc);
	/* not type1 extensions */
	EXPECT_EQ(ext(c, VFIO_SPAPR_TCE_IOMMU), 0);
	EXPECT_EQ(ext(c, VFIO_SPAPR_TCE_v2_IOMMU), 0);
	EXPECT_EQ(ext(c, VFIO_EEH), 0);
	EXPECT_EQ(ext(c, VFIO_NOIOMMU_IOMMU), 0);
	EXPECT_EQ(ext(c, 0), 0);
	EXPECT_EQ(ext(c, 9999), 0);
}

/* A second SET_IOMMU on a container that has one is refused. */
TEST_V12(set_iommu_twice)
{
	int c = th_container(t);

	EXPECT_EQ(vu_set_iommu(c, VFIO_TYPE1v2_IOMMU), -EINVAL);
	EXPECT_EQ(vu_set_iommu(c, VFIO_TYPE1_IOMMU), -EINVAL);
}

/* SET_IOMMU without any group is refused; map on an unset container too. */
TEST(set_iommu_without_group)
{
	int c = th_own_fd(t, vu_container_open());
	char *p = th_anon(t, SZ_4K);

	ASSERT_GE(c, 0);
	EXPECT_EQ(vu_set_iommu(c, VFIO_TYPE1v2_IOMMU), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A, p, SZ_4K, RW), -EINVAL);
}

TEST_HARNESS_MAIN
