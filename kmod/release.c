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
 * fm_release_run() (foliomap.h) when the run may hold reserved pfns or
 * holds one pin per folio.
 */
long fm_release_run_folios(struct fm_dma *dma, dma_addr_t iova, unsigned long pfn,
			   unsigned long npage, long *uncharge, bool vpfns)
{
	bool dirty = dma->prot & IOMMU_WRITE;
	long unpinned = 0, external = 0;
	unsigned long i;

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
	long uncharge = 0;

	fm_release_run(dma, iova, pfn, 1, &uncharge, false);
	if (do_accounting)
		fm_lock_acct(dma, -uncharge, true);
}
