// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pin pipeline over one dma, used by MAP_DMA (map_dma.c) and by the
 * replay into a new domain (replay.c). A struct fm_pinner (pin.h) walks
 * the dma from its start, one batch at a time:
 *
 *   batch    batch.c: one mmap_read_lock round trip fills a batch of up to
 *            FM_BATCH_PAGES pages (GUP-fast, the locked GUP walk, VM_PFNMAP
 *            lookups, or folio pins for shared hugetlbfs, filepin.c) and
 *            cuts it into physically contiguous runs; for a large MAP_DMA,
 *            helper threads fill the batches ahead (parallel.c) and the
 *            caller takes them in IOVA order;
 *   charge   charge.c: one pass over the batch: one reserved test per folio
 *            segment, one vpfn count per stretch of ordinary pages, and a
 *            single fm_lock_acct() for the whole batch;
 *   run      run.c: the runs extend the open run (pinned and charged, not
 *            yet mapped), which keeps growing across batches;
 *   map      run.c: a run that cannot grow is mapped with one iommu_map()
 *            per domain and appended to the run record (record.c).
 *
 * What is left pinned and mapped on failure is the caller's (struct
 * fm_pinner in pin.h).
 */
#include <linux/sched.h>
#include <linux/sched/signal.h>

#include "pin.h"

/*
 * One batch from the open run's end on, at most @left pages: filled,
 * charged, fed into runs. Returns the pages it took, or -errno with the
 * batch released (the open run is the caller's).
 */
static long fm_pin_batch(struct fm_pinner *p, unsigned long left)
{
	struct fm_dma *dma = p->dma;
	long n;
	int ret;

	if (p->par)
		n = fm_par_next(p);
	else
		n = fm_pinner_fill(p, dma->vaddr + (fm_pinner_next_iova(p) - dma->iova), left);
	if (n < 0)
		return n;
	p->iommu->stats.batches++;
	p->iommu->stats.batch_pages += n;
	if (p->batch->folio_pinned)
		p->iommu->stats.folio_pinned_pages += n;
	ret = fm_batch_charge(p);
	if (ret) {
		fm_batch_release(p, 0, 0, false);
		return ret;
	}
	ret = fm_batch_map(p);
	return ret ? ret : n;
}

/*
 * Pin, charge and map @p->dma from its start, through @p->batch, which
 * the caller set up (fm_batch_init()) and may use again for another dma.
 * Returns 0 with all of it mapped, or -errno with [dma->iova, p->run_iova)
 * mapped and everything beyond released.
 */
int fm_pin_map_dma(struct fm_pinner *p)
{
	struct fm_dma *dma = p->dma;
	unsigned long left = dma->size >> PAGE_SHIFT;
	/* A large new mapping: helper threads may join (parallel.c). */
	bool par = !p->target && fm_par_may(p, dma->size);
	int ret = 0;

	p->run_iova = dma->iova;
	p->run_npage = 0;
	/* Nothing of the dma is pinned: a new record starts, a new pin mode. */
	WARN_ON_ONCE(dma->rec);
	fm_rec_free(dma);
	p->single = READ_ONCE(fm_disable_hugepages);
	/*
	 * Decided by the first fill, under its mmap_lock; a dma of a few
	 * pages gains nothing from folio pins and GUP pins it alone.
	 */
	dma->folio_pins = false;
	p->mode_known = p->single || left <= FM_BATCH_INLINE;

	while (left) {
		long n;

		/* A killed process must not wait for gigabytes to be pinned. */
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			break;
		}
		cond_resched();

		n = fm_pin_batch(p, left);
		if (n < 0) {
			ret = n;
			break;
		}
		left -= n;
		if (par && left)
			par = fm_par_consider(p, left);
	}

	if (!ret && p->run_npage)
		ret = fm_run_map(p);
	/* Helpers gone, what they pinned ahead released. */
	if (p->par)
		fm_par_stop(p, !ret);
	if (ret && p->run_npage) {
		fm_unpin_run(dma, p->run_iova, p->run_pfn, p->run_npage, true);
		p->run_npage = 0;
	}

	return ret;
}
