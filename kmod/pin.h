/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The pin pipeline's own interface, shared by its steps and nothing else:
 *
 *   map_dma.c  MAP_DMA: a new mapping, a new vaddr, a change of owner
 *   pin.c      one pinner over a dma: batch -> charge -> run, batch after batch
 *   batch.c    fill a batch (GUP-fast, the locked GUP walk, VM_PFNMAP lookups,
 *              filepin.c, hugepin.c) and cut it into physically contiguous runs
 *   charge.c   charge a batch to the owner's locked memory (and every other
 *              locked-memory change: unmap, pin_pages, change of owner)
 *   parallel.c a large MAP_DMA: batches filled ahead by helper threads
 *              (helper.c, parstart.c; their own state: parallel.h)
 *   run.c      grow the open run across batches, map it into the domains
 *   record.c   the run record: the runs a mapping was mapped with
 *   replay.c   fill a new domain from the mappings already there
 *
 * The per-run helpers of the record are inline below: run.c calls them once
 * per run, which a cross-file call would make dearer than the pipeline was
 * in one file.
 */
#ifndef _FOLIOMAP_PIN_H
#define _FOLIOMAP_PIN_H

#include "foliomap.h"
#include "inject.h"

/*
 * Page pointers per GUP call (4 MiB of 4K pages, one call per 4 MiB even
 * for huge pages): GUP output is only scanned once, into runs.
 */
#define FM_BATCH_PAGES	1024
/*
 * A batch this small lives on the stack: a MAP_DMA of a few pages (a
 * vIOMMU guest's DMA buffer, a DPDK mbuf pool chunk) allocates nothing
 * for it.
 */
#define FM_BATCH_INLINE	16

/*
 * The batch is run-length: after the single pass over GUP's page pointers
 * (or the PFNMAP lookups, which produce runs directly) every later step
 * (charge, map, release) costs O(runs) or O(folios), never O(4K pages).
 */
struct fm_batch {
	union {
		struct page	**pages;	/* GUP output, FM_BATCH_PAGES or 1 */
		struct folio	**folios;	/* memfd_pin_folios() output */
	};
	struct fm_run	*runs;		/* as many as pages */
	unsigned long	capacity;	/* entries of pages and of runs */
	unsigned long	nr_runs;
	unsigned long	size;		/* pages in runs[] */
	bool		pfnmap;		/* looked up, not pinned */
	bool		folio_pinned;	/* by memfd_pin_folios() */
	/* Small maps, and any map when nothing larger was free. */
	struct page	*inline_pages[FM_BATCH_INLINE];
	struct fm_run	inline_runs[FM_BATCH_INLINE];
};

/*
 * What parstart.c judges a new mapping by, since @done pages: the fill
 * counts the pages it did not pin with GUP-fast (@slow, batch.c), the
 * charge the folio segments it met (@segs, charge.c). Only parstart.c
 * reads them.
 */
struct fm_par_probe {
	unsigned long		done;
	unsigned long		segs;
	unsigned long		slow;
	unsigned long		window;		/* pages judged at a time */
};

/*
 * One pass of the pipeline over a dma, from dma->iova on. At any moment
 * the dma is in three parts: a prefix that is pinned, charged and mapped
 * ([dma->iova, run_iova)); the open run (pinned and charged, not yet
 * mapped); the unconsumed rest of the batch. Each error path releases the
 * last two and leaves the prefix to the caller, which unmaps it (flush
 * first) and unpins it like any mapping.
 */
struct fm_pinner {
	struct fm_iommu		*iommu;
	struct fm_dma		*dma;
	struct fm_domain	*target;	/* replay: only this domain */
	struct mm_struct	*mm;
	struct fm_batch		*batch;		/* being charged and mapped */
	struct fm_par		*par;		/* helpers fill batches, or NULL */
	/* The open run; [dma->iova, run_iova) is already mapped. */
	dma_addr_t		run_iova;
	unsigned long		run_pfn;
	unsigned long		run_npage;
	bool			run_tail_pinned; /* its last page holds a pin */
	unsigned long		runs;		/* runs mapped so far */
	bool			single;		/* disable_hugepages: a run a page */
	bool			mode_known;	/* dma->folio_pins decided */
	/* A helper's fills (parallel.c): ordinary memory only, else -EXDEV. */
	bool			ordinary_only;
	struct fm_par_probe	probe;
	/* GUP-fast back-off (batch.c): batches left to skip, next skip */
	unsigned int		fast_skip;
	unsigned int		fast_backoff;
};

/*
 * Start a pinner over @dma, for every domain or only @target (replay),
 * through @batch, which the caller sets up once (fm_batch_init()) for one
 * dma or, in a replay, for all of them. Both may be __uninitialized on the
 * caller's stack: the kernel's zeroed stack variables would otherwise
 * clear the batch's inline arrays, half a KiB, on every MAP_DMA, and a
 * small one only reads what it wrote there.
 */
static inline void fm_pinner_init(struct fm_pinner *p, struct fm_iommu *iommu,
				  struct fm_dma *dma, struct fm_domain *target,
				  struct fm_batch *batch)
{
	p->iommu = iommu;
	p->dma = dma;
	p->target = target;
	p->mm = dma->mm;
	p->batch = batch;
	p->par = NULL;
	p->run_iova = dma->iova;
	p->run_pfn = 0;
	p->run_npage = 0;
	p->run_tail_pinned = false;
	p->runs = 0;
	p->single = false;
	p->mode_known = false;
	p->ordinary_only = false;
	p->probe = (struct fm_par_probe){};
	p->fast_skip = 0;
	p->fast_backoff = 1;
}

/* The IOVA of the first page after the open run: where the batch goes. */
static inline dma_addr_t fm_pinner_next_iova(const struct fm_pinner *p)
{
	return p->run_iova + (p->run_npage << PAGE_SHIFT);
}

static inline void fm_batch_reset(struct fm_batch *b)
{
	b->pfnmap = false;
	b->folio_pinned = false;
	b->size = 0;
	b->nr_runs = 0;
}

/* Append @npage pfns from @pfn, merging with the last run when contiguous. */
static inline void fm_batch_add(struct fm_batch *b, unsigned long pfn, unsigned long npage)
{
	struct fm_run *last = b->nr_runs ? &b->runs[b->nr_runs - 1] : NULL;

	if (last && last->pfn + last->npage == pfn)
		last->npage += npage;
	else
		b->runs[b->nr_runs++] = (struct fm_run){ .pfn = pfn, .npage = npage };
	b->size += npage;
}

/* pin.c: the pipeline over the whole dma */
int fm_pin_map_dma(struct fm_pinner *p);

/* batch.c: fill and cut */
void fm_batch_init(struct fm_batch *b, unsigned long npage);
void fm_batch_fini(struct fm_batch *b);
long fm_pinner_fill(struct fm_pinner *p, unsigned long vaddr, unsigned long npage);
bool fm_range_has_vm_flags(struct mm_struct *mm, unsigned long addr, unsigned long len,
			   vm_flags_t flags);
unsigned int fm_gup_flags(int prot);

/*
 * hugepin.c: hugetlbfs by huge page, under mmap_read_lock.
 * fm_hugepin_applies: is @vma hugetlbfs that fm_hugepin() pins?
 * fm_hugepin: fills @b from up to @npage pages at @vaddr with one GUP pin
 * per huge page segment; returns the pages (> 0), or 0 / -errno from GUP
 * with nothing pinned (the locked walk then pins or reports).
 */
bool fm_hugepin_applies(struct vm_area_struct *vma);
long fm_hugepin(struct fm_batch *b, struct mm_struct *mm, unsigned long vaddr,
		unsigned long npage, unsigned int gup_flags);

/* parallel.c: helpers fill the batches of a large MAP_DMA ahead */
bool fm_par_may(struct fm_pinner *p, size_t size);
bool fm_par_consider(struct fm_pinner *p, unsigned long left);
long fm_par_next(struct fm_pinner *p);
bool fm_par_prepaid(struct fm_pinner *p, long charge);
void fm_par_stop(struct fm_pinner *p, bool mapped);

/* charge.c: the batch's charge (fm_lock_acct() and the owner: foliomap.h) */
int fm_batch_charge(struct fm_pinner *p);

/* run.c: runs into the domains */
int fm_batch_map(struct fm_pinner *p);
int fm_run_map(struct fm_pinner *p);
int fm_iommu_map(struct iommu_domain *domain, unsigned long iova, phys_addr_t phys,
		 size_t len, int prot);
void fm_iommu_map_undo(struct iommu_domain *domain, unsigned long iova, size_t len);
void fm_batch_release(struct fm_pinner *p, unsigned long r, unsigned long off,
		      bool charged);

/* record.c: the record's growth, out of the per-run path */
int fm_rec_grow(struct fm_dma *dma);

/* Does a run starting at @pfn continue the last entry of the record? */
static inline bool fm_rec_joins(struct fm_dma *dma, unsigned long pfn)
{
	struct fm_run *last = dma->rec_nr ? &dma->rec[dma->rec_nr - 1] : NULL;

	return last && last->pfn + last->npage == pfn;
}

/*
 * Make room for a run starting at @pfn before it is mapped. The first run
 * goes into the dma itself (a small map allocates nothing for its record);
 * later ones may need fm_rec_grow(). 0 or -ENOMEM (folio pins only: every
 * other dma goes on without a record).
 */
static inline int fm_rec_reserve(struct fm_dma *dma, unsigned long pfn)
{
	if (dma->rec_dropped || dma->rec_nr < dma->rec_max || fm_rec_joins(dma, pfn))
		return 0;
	if (!dma->rec) {
		dma->rec = &dma->rec_one;
		dma->rec_max = 1;
		return 0;
	}
	return fm_rec_grow(dma);
}

/*
 * Append a run just mapped in every domain (fm_rec_reserve() made room).
 * A run only joins the last when disable_hugepages maps page by page,
 * which folio pins never do: a joined entry never holds two pins on one
 * folio.
 */
static inline void fm_rec_add(struct fm_dma *dma, unsigned long pfn, unsigned long npage)
{
	if (dma->rec_dropped)
		return;
	if (fm_rec_joins(dma, pfn)) {
		/* Two pins on one folio in one entry: release would drop one. */
		WARN_ON_ONCE(dma->folio_pins);
		dma->rec[dma->rec_nr - 1].npage += npage;
	} else {
		dma->rec[dma->rec_nr++] = (struct fm_run){ .pfn = pfn, .npage = npage };
	}
	dma->rec_pages += npage;
}

#endif /* _FOLIOMAP_PIN_H */
