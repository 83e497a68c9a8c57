/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Every difference between the kernels foliomap supports lives here, and
 * nothing else does. The rest of the module calls the fm_compat_*() helpers
 * and tests the FM_HAVE_* macros defined below.
 */
#ifndef _FOLIOMAP_COMPAT_H
#define _FOLIOMAP_COMPAT_H

#include <linux/version.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 12, 0) || \
	LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
#error "foliomap supports Linux 6.12 (Debian 12 backports); this kernel is not supported"
#endif

#include <linux/device.h>
#include <linux/iommu.h>

/*
 * An unmanaged paging domain for the IOMMU behind @dev, or an ERR_PTR.
 * 6.1 allocates per bus instead (iommu_domain_alloc(dev->bus), NULL on
 * failure), which is why this takes a device.
 */
static inline struct iommu_domain *fm_compat_domain_alloc(struct device *dev)
{
	return iommu_paging_domain_alloc(dev);
}

/*
 * True when no device of @group can forge MSIs to another's vectors
 * (interrupt remapping or an equivalent). 6.1 asks irq_domain_check_msi_remap()
 * and each device's IOMMU_CAP_INTR_REMAP instead.
 */
static inline bool fm_compat_group_msi_isolated(struct iommu_group *group)
{
	return iommu_group_has_isolated_msi(group);
}

#endif /* _FOLIOMAP_COMPAT_H */
