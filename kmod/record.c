// SPDX-License-Identifier: GPL-2.0-only
/*
 * The run record of a mapping (struct fm_dma, rec*): the physically
 * contiguous runs its pins were mapped with, in IOVA order, appended by
 * run.c only once every domain took the run. Unmap (unmap.c) and the
 * replay into a new domain (replay.c) read it instead of asking the IOMMU
 * page by page. Appending is inline (pin.h); this file holds what is not
 * on the per-run path: growing and dropping it (freeing is inline,
 * foliomap.h).
 */
#include <linux/slab.h>

#include "pin.h"

/* Forget the record for good (until the next pin of the whole dma). */
static void fm_rec_drop(struct fm_dma *dma)
{
	/* fm_rec_grow() fails the run instead (fm_dma.folio_pins). */
	WARN_ON_ONCE(dma->folio_pins);
	fm_rec_free(dma);
	dma->rec_dropped = true;
}

/*
 * The record is full and the next run does not join its last entry: grow
 * it by doubling, up to its bound of one entry per FM_REC_PAGES_PER_ENTRY
 * pages of the dma. Past the bound, or without memory, the dma goes on
 * without a record, unless its pins are per folio: then the run cannot be
 * taken (-ENOMEM).
 */
int fm_rec_grow(struct fm_dma *dma)
{
	unsigned long pages = dma->size >> PAGE_SHIFT, bound, want;
	struct fm_run *rec;

	bound = dma->folio_pins ? pages :
		max_t(unsigned long, FM_REC_MIN_ENTRIES, pages / FM_REC_PAGES_PER_ENTRY);
	want = min(max_t(unsigned long, 2UL * dma->rec_max, FM_REC_MIN_ENTRIES), bound);
	if (want > dma->rec_max && want <= UINT_MAX) {
		rec = kvmalloc_array(want, sizeof(*rec), GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
		if (rec) {
			memcpy(rec, dma->rec, dma->rec_nr * sizeof(*rec));
			if (dma->rec != &dma->rec_one)
				kvfree(dma->rec);
			dma->rec = rec;
			dma->rec_max = want;
			return 0;
		}
	}
	if (dma->folio_pins)
		return -ENOMEM;
	fm_rec_drop(dma);
	return 0;
}
