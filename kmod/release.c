// SPDX-License-Identifier: GPL-2.0-only
/*
 * Release: the last step of unmap (unmap.c), also taken by a failed map
 * (run.c, pin.c) and by external pins (pin_pages.c). Pages are unpinned one
 * physically contiguous run at a time, only after the IOTLB flush that
 * removed them from every domain; the run's charge is handed back to
 * charge.c once per call, less the pages an emulated device still pins.
 */
#include <linux/mm.h>

#include "foliomap.h"

/*
 * unpin_user_page_range_dirty_lock() takes an unsigned long count, but
 * gup_folio_range_next() (6.1 and 6.12) clamps each large folio's share to
 * an unsigned int of what is left: with 2^32 pages or more left at a large
 * folio (16 TiB of physically contiguous 1G pages is one run) that share
 * becomes 0 and the loop never ends. Release such runs in pieces.
 */
#define FM_UNPIN_RANGE_MAX	BIT(30)	/* pages */

static void fm_unpin_range_dirty(struct page *page, unsigned long npage, bool dirty)
{
	while (npage) {
		unsigned long n = min(npage, FM_UNPIN_RANGE_MAX);

		unpin_user_page_range_dirty_lock(page, n, dirty);
		page = fm_compat_nth_page(page, n);
		npage -= n;
	}
}

/*
 * The common case of a release: no reserved pfns and a pin per page, so
 * one call and one refcount drop per folio. False: take the long way.
 */
static __always_inline bool fm_release_plain(struct fm_dma *dma, unsigned long pfn,
					     unsigned long npage)
{
	if (dma->has_rsvd || dma->folio_pins)
		return false;
	fm_unpin_range_dirty(pfn_to_page(pfn), npage, dma->prot & IOMMU_WRITE);
	return true;
}

/*
 * Unpin one physically contiguous run. Adds to @uncharge the pages whose
 * charge is released: those unpinned, less the externally pinned ones,
 * which stay charged for as long as their external pin lives (@vpfns:
 * the range may hold some). Returns the number of charged pages unpinned.
 */
long fm_release_run(struct fm_dma *dma, dma_addr_t iova, unsigned long pfn,
		    unsigned long npage, long *uncharge, bool vpfns)
{
	bool dirty = dma->prot & IOMMU_WRITE;
	long unpinned = 0, external = 0;
	unsigned long i;

	if (fm_release_plain(dma, pfn, npage)) {
		*uncharge += npage - (vpfns ? fm_vpfn_count(dma, iova, npage) : 0);
		return npage;
	}

	/*
	 * Folio by folio. Pfns without a struct page (MMIO: only a VM_PFNMAP
	 * lookup gives them, and pins nothing) are skipped a validity block
	 * at a time. Reserved and PFNMAP pfns were not charged; the reserved
	 * test answers for the folio, as it did when the folio was charged.
	 */
	i = 0;
	while (i < npage) {
		unsigned long n = fm_invalid_pfns(pfn + i, npage - i);
		struct page *page;
		unsigned long pins;

		if (n) {
			i += n;
			continue;
		}
		page = pfn_to_page(pfn + i);
		n = fm_folio_segment(pfn + i, npage - i);
		/* The run holds one pin per page, or per folio (filepin.c). */
		pins = dma->folio_pins ? 1 : n;
		if (PageReserved(page)) {
			/*
			 * GUP pins a reserved page like any other (the zero
			 * page aside, whose unpin is a no-op), a VM_PFNMAP
			 * lookup does not, and the two cannot be told apart
			 * here: with PFNMAP pfns in the mapping a reserved page
			 * is left alone. It is not dirtied, nor was it charged.
			 */
			if (!dma->has_pfnmap)
				unpin_user_page_range_dirty_lock(page, pins, false);
		} else {
			unpin_user_page_range_dirty_lock(page, pins, dirty);
			unpinned += n;
			if (vpfns)
				external += fm_vpfn_count(dma, iova + (i << PAGE_SHIFT), n);
		}
		i += n;
	}
	*uncharge += unpinned - external;
	return unpinned;
}

long fm_unpin_run(struct fm_dma *dma, dma_addr_t iova, unsigned long pfn,
		  unsigned long npage, bool do_accounting)
{
	long uncharge = 0;
	long unpinned = fm_release_run(dma, iova, pfn, npage, &uncharge, true);

	if (do_accounting)
		fm_lock_acct(dma, -uncharge, true);
	return unpinned;
}

/*
 * The external pin of the page at @iova, already out of the vpfn tree (so
 * nothing there to count), released as one run.
 */
void fm_unpin_external_page(struct fm_dma *dma, dma_addr_t iova, unsigned long pfn,
			    bool do_accounting)
{
	long uncharge = 1;

	/* unpin_pages comes here once per page: no detour for the common case. */
	if (!fm_release_plain(dma, pfn, 1)) {
		uncharge = 0;
		fm_release_run(dma, iova, pfn, 1, &uncharge, false);
	}
	if (do_accounting)
		fm_lock_acct(dma, -uncharge, true);
}
