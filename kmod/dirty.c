// SPDX-License-Identifier: GPL-2.0-only
/*
 * Dirty page tracking: one bitmap per mapping, one bit per smallest IOMMU
 * page. Bits are set for pages pinned by emulated devices and pages written
 * by dma_rw. When some group can DMA anywhere unseen (it never used
 * pin_pages), every page of a mapped dma counts as dirty.
 *
 * A report copies each mapping's bits into the user's bitmap at the bit
 * offset of the mapping from the start of the requested range, then clears
 * them, keeping only what is still pinned (pinned pages stay dirty).
 */
#include <linux/bitmap.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "foliomap.h"

/* User bitmaps are arrays of u64. */
#define FM_BITMAP_BYTES(nbits)	(DIV_ROUND_UP(nbits, BITS_PER_TYPE(u64)) * sizeof(u64))
/* bitmap_set() and friends take an int number of bits. */
#define FM_BITMAP_BITS_MAX	((u64)INT_MAX)

int fm_dirty_bitmap_alloc(struct fm_dma *dma, size_t pgsize)
{
	u64 nbits = dma->size >> __ffs(pgsize);

	if (nbits > FM_BITMAP_BITS_MAX)
		return -EINVAL;

	/* One spare word: a report shifts the bits up by as many as 63. */
	dma->bitmap = kvzalloc(FM_BITMAP_BYTES(nbits) + sizeof(u64), GFP_KERNEL_ACCOUNT);
	return dma->bitmap ? 0 : -ENOMEM;
}

void fm_dirty_bitmap_free(struct fm_dma *dma)
{
	kvfree(dma->bitmap);
	dma->bitmap = NULL;
}

/* Pages pinned by emulated devices are dirty until they are unpinned. */
static void fm_dirty_populate(struct fm_dma *dma, unsigned long pgshift)
{
	struct rb_node *n;

	for (n = rb_first(&dma->pfn_list); n; n = rb_next(n)) {
		struct fm_vpfn *vpfn = rb_entry(n, struct fm_vpfn, node);

		__set_bit((vpfn->iova - dma->iova) >> pgshift, dma->bitmap);
	}
}

int fm_dirty_start(struct fm_iommu *iommu, size_t pgsize)
{
	struct rb_node *n, *p;
	int ret = 0;

	mutex_lock(&iommu->lock);
	if (iommu->dirty_page_tracking)
		goto out;

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n)) {
		struct fm_dma *dma = rb_entry(n, struct fm_dma, node);

		ret = fm_dirty_bitmap_alloc(dma, pgsize);
		if (ret) {
			for (p = rb_first(&iommu->dma_tree); p != n; p = rb_next(p))
				fm_dirty_bitmap_free(rb_entry(p, struct fm_dma, node));
			goto out;
		}
		fm_dirty_populate(dma, __ffs(pgsize));
	}
	iommu->dirty_page_tracking = true;
out:
	mutex_unlock(&iommu->lock);
	return ret;
}

void fm_dirty_stop(struct fm_iommu *iommu)
{
	struct rb_node *n;

	mutex_lock(&iommu->lock);
	if (iommu->dirty_page_tracking) {
		iommu->dirty_page_tracking = false;
		for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n))
			fm_dirty_bitmap_free(rb_entry(n, struct fm_dma, node));
	}
	mutex_unlock(&iommu->lock);
}

bool fm_dirty_scope_all_pinned(struct fm_iommu *iommu)
{
	return !iommu->num_non_pinned_groups;
}

/* Mark [iova, iova + npage pages) of @dma dirty, if tracking. */
void fm_dirty_mark_pinned(struct fm_iommu *iommu, struct fm_dma *dma,
			  dma_addr_t iova, int npage)
{
	unsigned long pgshift = __ffs(iommu->pgsize_bitmap);
	unsigned long first, last;

	if (!iommu->dirty_page_tracking || npage <= 0)
		return;

	first = (iova - dma->iova) >> pgshift;
	last = (iova - dma->iova + ((size_t)npage << PAGE_SHIFT) - 1) >> pgshift;
	bitmap_set(dma->bitmap, first, last - first + 1);
}

void fm_dirty_mark_all(struct fm_iommu *iommu)
{
	unsigned long pgshift = __ffs(iommu->pgsize_bitmap);
	struct rb_node *n;

	if (!iommu->dirty_page_tracking)
		return;

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n)) {
		struct fm_dma *dma = rb_entry(n, struct fm_dma, node);

		bitmap_set(dma->bitmap, 0, dma->size >> pgshift);
	}
}

/*
 * Copy @dma's bits to the user bitmap whose bit 0 is @base. A mapping may
 * start in the middle of a u64 word: the bits are shifted into place and the
 * word's lower bits, written for the previous mapping, are kept.
 */
static int fm_dirty_copy(struct fm_iommu *iommu, struct fm_dma *dma, dma_addr_t base,
			 unsigned long pgshift, u64 __user *ubitmap)
{
	unsigned long nbits = dma->size >> pgshift;
	unsigned long bit = (dma->iova - base) >> pgshift;
	unsigned long shift = bit % BITS_PER_TYPE(u64);
	u64 __user *dst = ubitmap + bit / BITS_PER_TYPE(u64);

	/* Devices that can write anywhere: all of a mapped dma may be dirty. */
	if (!fm_dirty_scope_all_pinned(iommu) && dma->iommu_mapped)
		bitmap_set(dma->bitmap, 0, nbits);

	if (shift) {
		u64 below;

		if (get_user(below, dst))
			return -EFAULT;
		bitmap_shift_left(dma->bitmap, dma->bitmap, shift, nbits + shift);
		dma->bitmap[0] |= below & GENMASK_ULL(shift - 1, 0);
	}

	if (copy_to_user(dst, dma->bitmap, FM_BITMAP_BYTES(nbits + shift)))
		return -EFAULT;
	return 0;
}

/*
 * Report the mappings that start in [iova, iova + size) relative to @iova,
 * then reset their bits to what is still pinned. Unmap calls this with
 * iommu->lock held, after every emulated device dropped its pins there.
 */
int fm_dirty_report_range(struct fm_iommu *iommu, dma_addr_t iova, size_t size,
			  size_t pgsize, u64 __user *bitmap)
{
	unsigned long pgshift = __ffs(pgsize);
	dma_addr_t last = iova + size - 1;
	struct rb_node *n;
	int ret;

	for (n = fm_dma_find_first_node(iommu, iova, size); n; n = rb_next(n)) {
		struct fm_dma *dma = rb_entry(n, struct fm_dma, node);

		if (dma->iova > last)
			break;
		if (dma->iova < iova)
			continue;

		ret = fm_dirty_copy(iommu, dma, iova, pgshift, bitmap);
		if (ret)
			return ret;
		bitmap_clear(dma->bitmap, 0, dma->size >> pgshift);
		fm_dirty_populate(dma, pgshift);
	}
	return 0;
}

int fm_dirty_get_bitmap(struct fm_iommu *iommu, dma_addr_t iova, size_t size,
			size_t pgsize, u64 __user *bitmap)
{
	int ret = -EINVAL;

	mutex_lock(&iommu->lock);
	/* Like a v2 unmap, the range may span mappings but not split one. */
	if (!iommu->dirty_page_tracking || fm_dma_range_splits(iommu, iova, iova + size - 1))
		goto out;

	ret = fm_dirty_report_range(iommu, iova, size, pgsize, bitmap);
out:
	mutex_unlock(&iommu->lock);
	return ret;
}
