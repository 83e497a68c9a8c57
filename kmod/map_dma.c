// SPDX-License-Identifier: GPL-2.0-only
/*
 * VFIO_IOMMU_MAP_DMA, after ioctl.c checked the argument's size and flags:
 * a new mapping (checked, linked in the tree, then pinned, charged and
 * mapped by the pin pipeline, pin.c), or with VFIO_DMA_MAP_FLAG_VADDR a new
 * vaddr for an invalidated mapping, which may move its locked memory to
 * another process (change of owner, charge.c).
 */
#include <linux/ktime.h>
#include <linux/slab.h>

#include "pin.h"
#include "trace.h"

/*
 * Map a new dma into every domain. The caller is the mapping process, so
 * dma->mm is current->mm and alive. On failure the mapped prefix goes
 * through the ordinary removal: unmap, flush, unpin, uncharge.
 */
static int fm_map_new(struct fm_iommu *iommu, struct fm_dma *dma)
{
	struct fm_pinner p __uninitialized;
	struct fm_batch batch __uninitialized;
	u64 start = trace_foliomap_map_enabled() ? ktime_get_ns() : 0;
	int ret;

	fm_pinner_init(&p, iommu, dma, NULL, &batch);
	fm_batch_init(&batch, dma->size >> PAGE_SHIFT);
	ret = fm_pin_map_dma(&p);
	fm_batch_fini(&batch);
	dma->iommu_mapped = true;
	if (ret) {
		dma->size = p.run_iova - dma->iova;
		fm_dma_remove(iommu, dma);
		return ret;
	}
	trace_foliomap_map(dma->iova, dma->size, p.runs,
			   start ? ktime_get_ns() - start : 0);
	return 0;
}

/*
 * VFIO_DMA_MAP_FLAG_VADDR from another process: it takes the mapping over,
 * and the mapping's locked memory with it. The new owner is charged first,
 * so that its rlimit can refuse while the old owner still holds the charge;
 * an old owner that exited has nothing left to release.
 */
static int fm_change_owner(struct fm_dma *dma)
{
	struct fm_owner from = fm_dma_owner(dma), to;
	int ret;

	if (current->mm == dma->mm)
		return 0;

	to = fm_owner_current();
	ret = fm_acct(&to, dma->locked_vm, false);
	if (ret)
		return ret;
	fm_acct(&from, -dma->locked_vm, true);
	fm_dma_set_owner(dma, &to);
	return 0;
}

static int fm_set_vaddr(struct fm_iommu *iommu, struct fm_dma *dma, dma_addr_t iova,
			size_t size, unsigned long vaddr)
{
	int ret;

	if (!dma)
		return -ENOENT;
	if (!dma->vaddr_invalid || dma->iova != iova || dma->size != size)
		return -EINVAL;

	ret = fm_change_owner(dma);
	if (ret)
		return ret;
	dma->vaddr = vaddr;
	dma->vaddr_invalid = false;
	iommu->vaddr_invalid_count--;
	return 0;
}

int fm_do_map(struct fm_iommu *iommu, struct vfio_iommu_type1_dma_map *map)
{
	bool set_vaddr = map->flags & VFIO_DMA_MAP_FLAG_VADDR;
	dma_addr_t iova = map->iova;
	unsigned long vaddr = map->vaddr;
	size_t size = map->size;
	struct fm_dma_slot slot;
	struct fm_owner owner;
	struct fm_dma *dma;
	size_t pgsize;
	int prot = 0;
	int ret;

	/*
	 * In upstream's order (6.18+, stock 7.x): size, then wrap-around
	 * (the last byte may be the last address, but nothing may wrap),
	 * then access, then alignment.
	 */
	if (!size)
		return -EINVAL;
	if (iova + size - 1 < iova || vaddr + size - 1 < vaddr)
		return -EOVERFLOW;
	/* Access is from the device's point of view. */
	if (map->flags & VFIO_DMA_MAP_FLAG_READ)
		prot |= IOMMU_READ;
	if (map->flags & VFIO_DMA_MAP_FLAG_WRITE)
		prot |= IOMMU_WRITE;
	/* A new mapping needs access; a new vaddr keeps the old access. */
	if (!prot == !set_vaddr)
		return -EINVAL;

	mutex_lock(&iommu->lock);

	pgsize = (size_t)1 << __ffs(iommu->pgsize_bitmap);
	ret = -EINVAL;
	if ((iova | vaddr | size) & (pgsize - 1))
		goto out;

	if (set_vaddr) {
		ret = fm_set_vaddr(iommu, fm_dma_find(iommu, iova, size), iova, size, vaddr);
		goto out;
	}
	ret = -EEXIST;
	if (!fm_dma_find_slot(iommu, iova, size, &slot))
		goto out;
	ret = -ENOSPC;
	if (!iommu->dma_avail)
		goto out;
	ret = -EINVAL;
	if (!fm_iova_range_usable(iommu, iova, iova + size - 1))
		goto out;

	ret = -ENOMEM;
	dma = kzalloc(sizeof(*dma), GFP_KERNEL_ACCOUNT);
	if (!dma)
		goto out;

	iommu->dma_avail--;
	dma->iova = iova;
	dma->vaddr = vaddr;
	dma->size = size;
	dma->prot = prot;
	dma->pfn_list = RB_ROOT;
	/*
	 * Accounting may happen later from other contexts (pin_pages, unmap
	 * from another process): the owner outlives the task.
	 */
	owner = fm_owner_current();
	fm_dma_set_owner(dma, &owner);
	fm_dma_link(iommu, dma, &slot);

	if (iommu->dirty_page_tracking) {
		ret = fm_dirty_bitmap_alloc(dma, pgsize);
		if (ret) {
			fm_dma_remove(iommu, dma);
			goto out;
		}
	}

	/* With only emulated groups, pin_pages pins on demand. */
	ret = 0;
	if (!list_empty(&iommu->domain_list))
		ret = fm_map_new(iommu, dma);
	if (!ret)
		iommu->stats.map_calls++;
out:
	mutex_unlock(&iommu->lock);
	return ret;
}
