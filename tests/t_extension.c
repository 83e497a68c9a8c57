// SPDX-License-Identifier: GPL-2.0-only
/* VFIO_CHECK_EXTENSION before and after VFIO_SET_IOMMU, and SET_IOMMU itself. */
#include "common.h"

static int ext(int c, long arg)
{
	int ret = ioctl(c, VFIO_CHECK_EXTENSION, arg);

	return ret < 0 ? -errno : ret;
}

/*
 * Stock semantics of DMA_CC_IOMMU: every domain enforces cache coherency
 * (the IOMMU driver's enforce_cache_coherency()). Computed from the
 * hardware, not from either backend, per IOMMU:
 *  - Intel: granted when each unit has Snoop Control (ECAP.SC, bit 7, of
 *    each dmar unit's intel-iommu/ecap in /sys/class/iommu);
 *  - AMD-Vi: always granted: the v1 page table sets Force Coherent in
 *    every PTE;
 *  - SMMUv3: depends on the SMMU's coherent access (IDR0.COHACC) and the
 *    devices' DMA coherency, neither of which sysfs shows: -1, not checked.
 */
static int expected_cc(struct th *t)
{
	char path[128];
	unsigned long long ecap;
	int i, n = 0, sc = 1;

	if (th_iommu() == VU_IOMMU_AMD)
		return 1;
	if (th_iommu() == VU_IOMMU_SMMUV3)
		return -1;
	if (th_iommu() != VU_IOMMU_INTEL)
		FAIL("IOMMU '%s': no known DMA_CC_IOMMU answer", vu_iommu_name(th_iommu()));
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
	if (cc >= 0)
		EXPECT_EQ(ext(c, VFIO_DMA_CC_IOMMU), cc);
	else
		th_diag("DMA_CC_IOMMU %d, not checked", ext(c, VFIO_DMA_CC_IOMMU));
	/* not type1 extensions */
	EXPECT_EQ(ext(c, VFIO_SPAPR_TCE_IOMMU), 0);
	EXPECT_EQ(ext(c, VFIO_SPAPR_TCE_v2_IOMMU), 0);
	EXPECT_EQ(ext(c, VFIO_EEH), 0);
	EXPECT_EQ(ext(c, VFIO_NOIOMMU_IOMMU), 0);
	EXPECT_EQ(ext(c, 0), 0);
	EXPECT_EQ(ext(c, 9999), 0);
	if (cc < 0)
		SKIP("DMA_CC_IOMMU on SMMUv3: the SMMU's and the devices' coherency are not in sysfs");
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
