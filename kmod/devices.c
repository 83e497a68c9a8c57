// SPDX-License-Identifier: GPL-2.0-only
/*
 * The emulated-IOMMU devices of a container that must be told when a
 * range they may have pinned is unmapped (register_device and
 * unregister_device), and the telling itself (fm_notify_dma_unmap(),
 * called by UNMAP_DMA, unmap_dma.c).
 */
#include "foliomap.h"

/*
 * Lock order: device_list_lock, then iommu->lock; never the other way round.
 *
 * The dma_unmap callbacks run under device_list_lock (the list must not
 * change under the walk) and unpin through fm_unpin_pages(), which takes
 * iommu->lock: device_list_lock -> iommu->lock is forced on us. Stock
 * type1 takes iommu->lock first here, so a device opened while another
 * device's callback runs waits for device_list_lock holding iommu->lock,
 * which the callback waits for: both hang. So the list is changed with
 * both held, device_list_lock first, and fm_notify_dma_unmap() releases
 * iommu->lock before it takes device_list_lock. Holding both here keeps
 * list_empty(&device_list) valid under iommu->lock alone (fm_pin_pages,
 * fm_notify_dma_unmap), and the walk valid under device_list_lock alone.
 * Nothing else in foliomap takes device_list_lock.
 */
static void fm_device_list_change(struct fm_iommu *iommu, struct vfio_device *vdev,
				  bool add)
{
	/* A device that cannot be told to unpin is never told, nor may it pin. */
	if (!vdev->ops->dma_unmap)
		return;

	mutex_lock(&iommu->device_list_lock);
	mutex_lock(&iommu->lock);
	if (add)
		list_add(&vdev->iommu_entry, &iommu->device_list);
	else
		list_del(&vdev->iommu_entry);
	mutex_unlock(&iommu->lock);
	mutex_unlock(&iommu->device_list_lock);
}

void fm_register_device(void *iommu_data, struct vfio_device *vdev)
{
	fm_device_list_change(iommu_data, vdev, true);
}

void fm_unregister_device(void *iommu_data, struct vfio_device *vdev)
{
	fm_device_list_change(iommu_data, vdev, false);
}

/*
 * Ask every emulated device to drop its pins in [iova, iova + size); called
 * and returns with iommu->lock held. The devices unpin through
 * fm_unpin_pages(), which takes iommu->lock, and device_list_lock comes
 * before iommu->lock (above): iommu->lock is released first, so the caller
 * must look everything up again afterwards. The list may change in between;
 * the walk sees it as it is under device_list_lock.
 */
void fm_notify_dma_unmap(struct fm_iommu *iommu, dma_addr_t iova, size_t size)
{
	struct vfio_device *vdev;

	if (list_empty(&iommu->device_list))
		return;

	mutex_unlock(&iommu->lock);
	mutex_lock(&iommu->device_list_lock);

	list_for_each_entry(vdev, &iommu->device_list, iommu_entry)
		vdev->ops->dma_unmap(vdev, iova, size);

	mutex_unlock(&iommu->device_list_lock);
	mutex_lock(&iommu->lock);
}
