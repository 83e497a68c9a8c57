// SPDX-License-Identifier: GPL-2.0-only
/*
 * pin_pages and unpin_pages: emulated-IOMMU devices (mdev and the like)
 * pin single pages of a mapping by IOVA. A page is pinned from the
 * mapping's own mm (batch.c, fm_pin_one()), recorded as a vpfn (vpfn.c),
 * charged unless the IOMMU pin already is (charge.c), and released like
 * any run (release.c).
 */
#include <linux/sched/mm.h>
#include <linux/slab.h>

#include "foliomap.h"

/*
 * Pin the page behind @iova for an emulated device and record it at @slot
 * (fm_vpfn_lookup()). Memory without a struct page cannot be handed out as
 * a struct page: -EINVAL.
 */
static int fm_pin_external(struct fm_dma *dma, dma_addr_t iova,
			   const struct fm_vpfn_slot *slot, unsigned long *pfn)
{
	unsigned long vaddr = dma->vaddr + (iova - dma->iova);
	bool charge = !dma->iommu_mapped;
	bool own_mm = fm_dma_mm_held(dma);
	struct fm_vpfn *vpfn;
	bool rsvd;
	int ret;

	if (!own_mm && !mmget_not_zero(dma->mm))
		return -ENODEV;

	ret = fm_pin_one(dma, vaddr, pfn);
	if (ret)
		goto out;
	ret = -EINVAL;
	if (!pfn_valid(*pfn))
		goto out;

	/* Reserved pages are not charged. */
	rsvd = PageReserved(pfn_to_page(*pfn));
	if (rsvd)
		dma->has_rsvd = true;

	ret = -ENOMEM;
	vpfn = kmalloc(sizeof(*vpfn), GFP_KERNEL_ACCOUNT);
	if (!vpfn)
		goto unpin;

	if (charge && !rsvd) {
		ret = fm_lock_acct(dma, 1, false);
		if (ret) {
			kfree(vpfn);
			goto unpin;
		}
	}

	vpfn->iova = iova;
	vpfn->pfn = *pfn;
	vpfn->ref_count = 1;
	fm_vpfn_insert(dma, vpfn, slot);
	ret = 0;
	goto out;

unpin:
	fm_unpin_external_page(dma, iova, *pfn, false);
out:
	if (!own_mm)
		mmput(dma->mm);
	return ret;
}

/* Drop one reference; the last one unpins and uncharges if it was charged. */
static void fm_unpin_external(struct fm_dma *dma, dma_addr_t iova)
{
	struct fm_vpfn *vpfn = fm_vpfn_find(dma, iova);
	unsigned long pfn;

	if (!vpfn || --vpfn->ref_count)
		return;

	pfn = vpfn->pfn;
	rb_erase(&vpfn->node, &dma->pfn_list);
	kfree(vpfn);
	fm_unpin_external_page(dma, iova, pfn, !dma->iommu_mapped);
}

/* Undo the first @npage pins of a failed fm_pin_pages(). */
static void fm_unpin_range(struct fm_iommu *iommu, dma_addr_t user_iova, int npage)
{
	struct fm_dma *dma = NULL;
	int i;

	for (i = 0; i < npage; i++) {
		dma_addr_t iova = user_iova + ((dma_addr_t)i << PAGE_SHIFT);

		if (!dma || iova < dma->iova || iova > dma->iova + dma->size - 1)
			dma = fm_dma_find(iommu, iova, PAGE_SIZE);
		if (!dma)
			break;
		fm_unpin_external(dma, iova);
	}
}

int fm_pin_pages(void *iommu_data, struct iommu_group *iommu_group, dma_addr_t user_iova,
		 int npage, int prot, struct page **pages)
{
	struct fm_iommu *iommu = iommu_data;
	struct fm_dma *dma = NULL;
	struct fm_group *group;
	int i, ret;

	if (!iommu || !pages || fm_compat_external_npage_bad(npage))
		return -EINVAL;
	if (!iommu->v2)
		return -EACCES;
	if (fm_compat_external_range_wraps(user_iova, npage))
		return -EOVERFLOW;

	mutex_lock(&iommu->lock);

	/* No vaddr to pin through until the owner supplies a new one. */
	ret = -EBUSY;
	if (iommu->vaddr_invalid_count)
		goto out;
	/* Only devices that can be told to unpin may pin. */
	ret = -EINVAL;
	if (list_empty(&iommu->device_list))
		goto out;

	for (i = 0; i < npage; i++) {
		dma_addr_t iova = user_iova + ((dma_addr_t)i << PAGE_SHIFT);
		struct fm_vpfn_slot slot;
		struct fm_vpfn *vpfn;
		unsigned long pfn;

		if (!dma || iova < dma->iova || iova > dma->iova + dma->size - 1)
			dma = fm_dma_find(iommu, iova, PAGE_SIZE);
		if (!dma) {
			ret = -EINVAL;
			goto unwind;
		}
		if ((dma->prot & prot) != prot) {
			ret = -EPERM;
			goto unwind;
		}

		vpfn = fm_vpfn_lookup(dma, iova, &slot);
		if (vpfn) {
			vpfn->ref_count++;
			pages[i] = pfn_to_page(vpfn->pfn);
			continue;
		}

		ret = fm_pin_external(dma, iova, &slot, &pfn);
		if (ret)
			goto unwind;
		pages[i] = pfn_to_page(pfn);
		fm_dirty_mark_pinned(iommu, dma, iova, 1);
	}

	/* This group evidently uses pin_pages: its dirty scope is known now. */
	group = fm_find_group(iommu, iommu_group);
	if (group && !group->pinned_page_dirty_scope) {
		group->pinned_page_dirty_scope = true;
		iommu->num_non_pinned_groups--;
	}
	ret = npage;
	goto out;

unwind:
	fm_unpin_range(iommu, user_iova, i);
	memset(pages, 0, sizeof(*pages) * (i + 1));
out:
	mutex_unlock(&iommu->lock);
	return ret;
}

void fm_unpin_pages(void *iommu_data, dma_addr_t user_iova, int npage)
{
	struct fm_iommu *iommu = iommu_data;

	if (!iommu->v2)
		return;
	/* As the kernel's stock type1 (compat.h): a device driver's bug. */
	if (WARN_ON(fm_compat_external_npage_bad(npage) ||
		    fm_compat_external_range_wraps(user_iova, npage)))
		return;

	mutex_lock(&iommu->lock);
	fm_unpin_range(iommu, user_iova, npage);
	mutex_unlock(&iommu->lock);
}
