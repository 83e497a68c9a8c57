/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Our declaration of the IOMMU-driver interface that the VFIO core keeps in
 * its private drivers/vfio/vfio.h (not shipped in linux-headers). The layout
 * must match the running kernel's exactly: compat.h says which members the
 * target kernel has.
 */
#ifndef _FOLIOMAP_VFIO_PRIVATE_H
#define _FOLIOMAP_VFIO_PRIVATE_H

#include <linux/iommu.h>
#include <linux/module.h>
#include <linux/vfio.h>

#include "compat.h"

enum vfio_group_type {
	VFIO_IOMMU,		/* physical device behind an IOMMU */
	VFIO_EMULATED_IOMMU,	/* mediated device: pins through pin_pages */
	VFIO_NO_IOMMU,		/* unsafe no-IOMMU mode */
};

#ifdef FM_HAVE_DRIVER_OPS_NOTIFY
enum vfio_iommu_notify_type {
	VFIO_IOMMU_CONTAINER_CLOSE = 0,
};
#endif

struct vfio_iommu_driver_ops {
	char		*name;
	struct module	*owner;
	void		*(*open)(unsigned long arg);
	void		(*release)(void *iommu_data);
	long		(*ioctl)(void *iommu_data, unsigned int cmd,
				 unsigned long arg);
	int		(*attach_group)(void *iommu_data,
					struct iommu_group *group,
					enum vfio_group_type type);
	void		(*detach_group)(void *iommu_data,
					struct iommu_group *group);
	int		(*pin_pages)(void *iommu_data,
				     struct iommu_group *group,
				     dma_addr_t user_iova, int npage, int prot,
				     struct page **pages);
	void		(*unpin_pages)(void *iommu_data,
				       dma_addr_t user_iova, int npage);
	void		(*register_device)(void *iommu_data,
					   struct vfio_device *vdev);
	void		(*unregister_device)(void *iommu_data,
					     struct vfio_device *vdev);
	int		(*dma_rw)(void *iommu_data, dma_addr_t user_iova,
				  void *data, size_t count, bool write);
	struct iommu_domain *(*group_iommu_domain)(void *iommu_data,
						   struct iommu_group *group);
#ifdef FM_HAVE_DRIVER_OPS_NOTIFY
	void		(*notify)(void *iommu_data,
				  enum vfio_iommu_notify_type event);
#endif
};

int vfio_register_iommu_driver(const struct vfio_iommu_driver_ops *ops);
void vfio_unregister_iommu_driver(const struct vfio_iommu_driver_ops *ops);

#endif /* _FOLIOMAP_VFIO_PRIVATE_H */
