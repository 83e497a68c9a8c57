// SPDX-License-Identifier: GPL-2.0-only
/*
 * VFIO_IOMMU_UNMAP_DMA, after ioctl.c checked the argument's size and
 * flags: find the mappings of the range, have emulated devices drop their
 * pins in it (devices.c), report dirty bits (dirty.c), then remove the
 * mappings (unmap.c). With VFIO_DMA_UNMAP_FLAG_VADDR the mappings stay
 * and only their vaddr is invalidated.
 */
#include "foliomap.h"

/*
 * The first mapping an unmap request acts on, from @n, the lowest one the
 * range overlaps.
 */
static struct rb_node *fm_unmap_first(struct fm_iommu *iommu, struct rb_node *n,
				      dma_addr_t iova)
{
	/*
	 * v1 compatibility: a request that starts inside a mapping unmaps
	 * nothing and succeeds with size 0.
	 */
	if (n && !iommu->v2 && rb_entry(n, struct fm_dma, node)->iova < iova)
		return NULL;
	return n;
}

static struct fm_dma *fm_unmap_next(struct rb_node *n, dma_addr_t last)
{
	struct fm_dma *dma = n ? rb_entry(n, struct fm_dma, node) : NULL;

	return dma && dma->iova <= last ? dma : NULL;
}

/*
 * The node after @dma, or NULL when @dma reaches the range's end: most
 * requests unmap one mapping and need no step through the tree.
 */
static struct rb_node *fm_unmap_after(struct fm_dma *dma, dma_addr_t last)
{
	return fm_dma_last(dma) < last ? rb_next(&dma->node) : NULL;
}

/*
 * VFIO_DMA_UNMAP_FLAG_VADDR: the mappings stay in the IOMMU, but nothing may
 * be pinned through their vaddr until MAP_DMA gives a new one. All or
 * nothing: meeting an already invalid mapping undoes this call's work.
 */
static int fm_invalidate_vaddr(struct fm_iommu *iommu, struct rb_node *first,
			       dma_addr_t last, size_t *done)
{
	struct fm_dma *dma, *undo;
	struct rb_node *n;

	for (n = first; (dma = fm_unmap_next(n, last)); n = fm_unmap_after(dma, last)) {
		if (dma->vaddr_invalid)
			goto undo;
		dma->vaddr_invalid = true;
		iommu->vaddr_invalid_count++;
		*done += dma->size;
	}
	return 0;

undo:
	for (n = first; (undo = rb_entry(n, struct fm_dma, node)) != dma; n = rb_next(n)) {
		undo->vaddr_invalid = false;
		iommu->vaddr_invalid_count--;
	}
	*done = 0;
	return -EINVAL;
}

/* How often one mapping's external pins may survive a dma_unmap callback. */
#define FM_NOTIFY_RETRIES	10

int fm_do_unmap(struct fm_iommu *iommu, struct vfio_iommu_type1_dma_unmap *unmap,
		struct vfio_bitmap *bitmap)
{
	bool all = unmap->flags & VFIO_DMA_UNMAP_FLAG_ALL;
	bool invalidate = unmap->flags & VFIO_DMA_UNMAP_FLAG_VADDR;
	bool report = unmap->flags & VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP;
	struct fm_dma *dma, *notified = NULL;
	dma_addr_t iova = unmap->iova, last;
	u64 size = unmap->size;
	struct rb_node *n, *first;
	size_t unmapped = 0;
	unsigned int retries = 0;
	size_t pgsize;
	int ret = -EINVAL;

	mutex_lock(&iommu->lock);

	/*
	 * fm_notify_dma_unmap() drops iommu->lock: everything checked under
	 * it, dirty tracking and the page size included, is checked again.
	 */
again:
	ret = -EINVAL;

	/* Emulated devices would pin through the vaddr at any time. */
	if (invalidate && !list_empty(&iommu->emulated_groups)) {
		ret = -EBUSY;
		goto out;
	}

	pgsize = (size_t)1 << __ffs(iommu->pgsize_bitmap);
	if (iova & (pgsize - 1))
		goto out;
	if (all) {
		if (iova || size)
			goto out;
		last = (dma_addr_t)-1;
	} else {
		if (!size || size & (pgsize - 1))
			goto out;
		/* As upstream since 6.18: a wrapping range is an overflow. */
		ret = -EOVERFLOW;
		if (iova + size - 1 < iova)
			goto out;
		ret = -EINVAL;
		last = iova + size - 1;
	}
	/* Dirty bits are kept at the smallest page size only. */
	if (report && (!iommu->dirty_page_tracking || bitmap->pgsize != pgsize))
		goto out;

	/* v2 never splits a mapping: the range must start and end on edges. */
	first = fm_dma_find_first_node(iommu, iova, all ? 0 : size);
	if (iommu->v2 && !all && fm_dma_range_splits_at(iommu, first, iova, last))
		goto out;

	ret = 0;
	first = fm_unmap_first(iommu, first, iova);
	if (invalidate) {
		ret = fm_invalidate_vaddr(iommu, first, last, &unmapped);
		goto out;
	}

	/*
	 * Emulated devices drop their pins on request; the callback runs
	 * without iommu->lock, so everything is looked up again afterwards.
	 */
	for (n = first; (dma = fm_unmap_next(n, last)); n = fm_unmap_after(dma, last)) {
		if (RB_EMPTY_ROOT(&dma->pfn_list))
			continue;
		if (dma != notified) {
			notified = dma;
			retries = 0;
		} else if (++retries > FM_NOTIFY_RETRIES) {
			ret = -EBUSY;
			goto out;
		}
		fm_notify_dma_unmap(iommu, dma->iova, dma->size);
		goto again;
	}

	/*
	 * The range is settled and the lock held: report, then remove. The
	 * report changes nothing; should any of it fail to reach the user,
	 * every mapping stays, with its dirty bits, for a retry.
	 */
	if (report) {
		ret = fm_dirty_report_range(iommu, iova, last - iova + 1, pgsize,
					    bitmap->data);
		if (ret)
			goto out;
	}

	n = first;
	while ((dma = fm_unmap_next(n, last))) {
		n = fm_unmap_after(dma, last);
		unmapped += dma->size;
		fm_dma_remove(iommu, dma);
	}
	if (unmapped)
		iommu->stats.unmap_calls++;
out:
	mutex_unlock(&iommu->lock);
	unmap->size = unmapped;
	return ret;
}
