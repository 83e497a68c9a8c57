// SPDX-License-Identifier: GPL-2.0-only
/*
 * The unmap pipeline: take a mapping out of every IOMMU domain, flush the
 * IOTLB, and only then release the pages, whole runs at a time.
 *
 * The IOMMU is the record of which pfns back a mapping. Domains other than
 * the first are emptied with iommu_unmap(), which flushes before it
 * returns. The first domain is walked leaf by leaf: iommu_iova_to_phys()
 * gives the leaf's address, iommu_unmap_fast() of one page removes the
 * whole leaf (4K, 2M or 1G) and returns its size. This costs O(leaves)
 * instead of O(4K pages).
 *
 * That is correct because a leaf never extends past the iommu_map() call
 * that created it, and each call covered one physically contiguous run
 * inside one dma. So the walk always stands at the first page of a leaf,
 * the leaf lies inside the dma, and its pages are physically contiguous
 * from the address iommu_iova_to_phys() returned.
 *
 * A leaf larger than PAGE_SIZE is naturally aligned in both IOVA and
 * physical space. Where iova or phys lacks that alignment the leaf is
 * known to be 4K without asking the IOMMU, so such leaves are only
 * recorded and left mapped in a pending range, which is removed with one
 * iommu_unmap_fast() call before the next flush: 4K memory costs one
 * page-table lookup per page and one unmap per flush, not one per page.
 */
#include <linux/ktime.h>
#include <linux/sched.h>
#include <linux/sizes.h>
#include <linux/slab.h>

#include "foliomap.h"
#include "trace.h"

/* Runs collected between two IOTLB flushes. */
#define FM_UNMAP_RUNS		512
#define FM_UNMAP_RUNS_STACK	16

struct fm_unmap_run {
	dma_addr_t	iova;
	unsigned long	pfn;
	unsigned long	npage;
};

struct fm_unmapper {
	struct fm_dma			*dma;
	struct iommu_domain		*domain;
	struct iommu_iotlb_gather	gather;
	struct fm_unmap_run		*runs;
	unsigned int			nr;
	unsigned int			max;
	long				uncharge;	/* pages whose charge goes */
	/* 4K leaves recorded in runs[] but still mapped: [pend_start, pend_end) */
	dma_addr_t			pend_start;
	dma_addr_t			pend_end;
	bool				lost;		/* the IOMMU kept a pending page */
	unsigned long			nr_runs;	/* runs recorded in all */
};

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
 * Unpin one physically contiguous run. Adds to @uncharge the pages whose
 * charge is released: those unpinned, less the externally pinned ones,
 * which stay charged for as long as their external pin lives (@vpfns:
 * the range may hold some). Returns the number of charged pages unpinned.
 */
static long fm_release_run(struct fm_dma *dma, dma_addr_t iova, unsigned long pfn,
			   unsigned long npage, long *uncharge, bool vpfns)
{
	bool dirty = dma->prot & IOMMU_WRITE;
	long unpinned = 0, external = 0;
	unsigned long i;

	/* The common case: one call, one refcount drop per folio. */
	if (!dma->has_rsvd && !dma->folio_pins) {
		fm_unpin_range_dirty(pfn_to_page(pfn), npage, dirty);
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
	long uncharge = 0;

	fm_release_run(dma, iova, pfn, 1, &uncharge, false);
	if (do_accounting)
		fm_lock_acct(dma, -uncharge, true);
}

/* Remove the pending 4K leaves from the domain, in one call. */
static void fm_unmapper_unmap_pending(struct fm_unmapper *u)
{
	size_t len = u->pend_end - u->pend_start;

	if (!len)
		return;
	/*
	 * Every page in the range was seen mapped by a 4K leaf, so the IOMMU
	 * removes all of it. Should it not, the pages it kept must stay
	 * pinned: a page is never released while a device can reach it.
	 */
	if (iommu_unmap_fast(u->domain, u->pend_start, len, &u->gather) != len) {
		pr_warn_once("foliomap: IOMMU kept part of an unmapped range, leaking its pins\n");
		u->lost = true;
	}
	u->pend_start = u->pend_end;
}

/* Flush the IOTLB, then release every run collected since the last flush. */
static void fm_unmapper_flush(struct fm_unmapper *u)
{
	unsigned int i;

	fm_unmapper_unmap_pending(u);
	iommu_iotlb_sync(u->domain, &u->gather);
	for (i = 0; i < u->nr && !u->lost; i++)
		fm_release_run(u->dma, u->runs[i].iova, u->runs[i].pfn,
			       u->runs[i].npage, &u->uncharge, true);
	u->nr = 0;
	cond_resched();
}

/*
 * Whether the leaf at @iova, backed by @phys, may be larger than PAGE_SIZE:
 * some page size of the domain above PAGE_SIZE, at most @left, to which
 * both addresses are aligned.
 */
static bool fm_leaf_may_be_large(struct iommu_domain *domain, dma_addr_t iova,
				 phys_addr_t phys, size_t left)
{
	unsigned long sizes = domain->pgsize_bitmap & ~(2 * PAGE_SIZE - 1);
	u64 addr = iova | phys;

	if (addr)
		sizes &= GENMASK_ULL(__ffs64(addr), 0);
	sizes &= GENMASK_ULL(fls64(left) - 1, 0);
	return sizes;
}

/* Record a removed leaf, merging it into the last run if it continues it. */
static void fm_unmapper_add(struct fm_unmapper *u, dma_addr_t iova, phys_addr_t phys,
			    size_t len)
{
	struct fm_unmap_run *run = u->nr ? &u->runs[u->nr - 1] : NULL;
	unsigned long npage = len >> PAGE_SHIFT;

	if (run && run->iova + (run->npage << PAGE_SHIFT) == iova &&
	    run->pfn + run->npage == PHYS_PFN(phys)) {
		run->npage += npage;
		return;
	}
	if (u->nr == u->max)
		fm_unmapper_flush(u);
	u->nr_runs++;
	u->runs[u->nr++] = (struct fm_unmap_run){
		.iova = iova, .pfn = PHYS_PFN(phys), .npage = npage,
	};
}

/* Record runs released per IOTLB flush, and pages at most. */
#define FM_REC_FLUSH_RUNS	512
#define FM_REC_FLUSH_PAGES	(SZ_256M >> PAGE_SHIFT)

/*
 * Unmap and release @dma by its run record, which covers exactly the
 * range: per stretch of up to FM_REC_FLUSH_RUNS runs, one
 * iommu_unmap_fast() of the stretch's IOVA range (run edges are edges of
 * iommu_map() calls, so of leaves), one flush, then the runs' release.
 * Only runs wholly inside what the IOMMU reports as removed are released.
 */
static unsigned long fm_unmap_unpin_rec(struct fm_dma *dma, struct iommu_domain *domain,
					bool do_accounting)
{
	struct iommu_iotlb_gather gather;
	dma_addr_t iova = dma->iova;
	long uncharge = 0;
	unsigned int i = 0;

	while (i < dma->rec_nr) {
		unsigned int first = i;
		unsigned long npage = 0;
		size_t len, done;

		while (i < dma->rec_nr && i - first < FM_REC_FLUSH_RUNS &&
		       (npage < FM_REC_FLUSH_PAGES || i == first))
			npage += dma->rec[i++].npage;
		len = npage << PAGE_SHIFT;

		iommu_iotlb_gather_init(&gather);
		done = iommu_unmap_fast(domain, iova, len, &gather);
		iommu_iotlb_sync(domain, &gather);
		if (done != len)
			pr_warn_once("foliomap: IOMMU kept part of an unmapped range, leaking its pins\n");

		for (; first < i; first++) {
			size_t rlen = dma->rec[first].npage << PAGE_SHIFT;

			/* A page is never released while a device can reach it. */
			if (rlen <= done) {
				fm_release_run(dma, iova, dma->rec[first].pfn,
					       dma->rec[first].npage, &uncharge, true);
				done -= rlen;
			} else {
				done = 0;
			}
			iova += rlen;
		}
		cond_resched();
	}
	if (do_accounting)
		fm_lock_acct(dma, -uncharge, true);
	return dma->rec_nr;
}

unsigned long fm_unmap_unpin_domain(struct fm_dma *dma, struct iommu_domain *domain,
				    size_t size, bool do_accounting)
{
	struct fm_unmap_run stack_runs[FM_UNMAP_RUNS_STACK];
	struct fm_unmapper u = { .dma = dma, .domain = domain };
	dma_addr_t iova = dma->iova;
	size_t left = size;

	if (fm_rec_covers(dma, size)) {
		unsigned long runs = fm_unmap_unpin_rec(dma, domain, do_accounting);

		fm_rec_free(dma);
		return runs;
	}
	/* The pins the record described are being released. */
	fm_rec_free(dma);

	/*
	 * At most one allocation per call, none per run: small mappings and
	 * a failed allocation use the stack array.
	 */
	u.runs = stack_runs;
	u.max = FM_UNMAP_RUNS_STACK;
	if (size >> PAGE_SHIFT > FM_UNMAP_RUNS_STACK) {
		u.max = min_t(unsigned long, FM_UNMAP_RUNS, size >> PAGE_SHIFT);
		u.runs = kmalloc_array(u.max, sizeof(*u.runs), GFP_KERNEL | __GFP_NOWARN);
		if (!u.runs) {
			u.runs = stack_runs;
			u.max = FM_UNMAP_RUNS_STACK;
		}
	}
	iommu_iotlb_gather_init(&u.gather);
	u.pend_start = iova;
	u.pend_end = iova;
	/*
	 * A mapping with folio pins always has its record (fm_dma.folio_pins).
	 * Were it walked here, its runs would release one pin per page of
	 * pins held per folio: unmap it, but leave its pins.
	 */
	u.lost = WARN_ON_ONCE(dma->folio_pins);

	while (left) {
		phys_addr_t phys = iommu_iova_to_phys(domain, iova);
		size_t len = PAGE_SIZE;

		if (phys && !fm_leaf_may_be_large(domain, iova, phys, left)) {
			/* A 4K leaf: record it, unmap it with its neighbours. */
			fm_unmapper_add(&u, iova, phys, PAGE_SIZE);
			u.pend_end = iova + PAGE_SIZE;
		} else {
			/* The pending range must stay contiguous in IOVA. */
			fm_unmapper_unmap_pending(&u);
			/*
			 * A page that is not mapped (a failed map's hole) or
			 * that the IOMMU refuses to unmap holds nothing we
			 * may release.
			 */
			if (phys) {
				len = iommu_unmap_fast(domain, iova, PAGE_SIZE, &u.gather);
				if (len)
					fm_unmapper_add(&u, iova, phys, len);
				else
					len = PAGE_SIZE;
			}
			len = min(len, left);
			u.pend_start = iova + len;
			u.pend_end = iova + len;
		}
		iova += len;
		left -= len;
	}
	fm_unmapper_flush(&u);

	if (u.runs != stack_runs)
		kfree(u.runs);
	if (do_accounting)
		fm_lock_acct(dma, -u.uncharge, true);
	return u.nr_runs;
}

/*
 * Empty [iova, iova + size) of a domain other than the first, flushed when
 * this returns. iommu_unmap() stops at the first IOVA that is not mapped
 * (AMD, ARM); a hole must not leave the rest of the range reachable while
 * the first domain's walk releases its pages, so step over it and go on.
 * Without holes (every domain holds what the first does) this is one call.
 */
static void fm_unmap_other(struct iommu_domain *domain, dma_addr_t iova, size_t size)
{
	size_t pgsize = (size_t)1 << __ffs(domain->pgsize_bitmap);

	while (size) {
		size_t done = iommu_unmap(domain, iova, size);

		done = min(done ? done : pgsize, size);
		iova += done;
		size -= done;
	}
}

/*
 * Take @dma out of every domain and release its pins. Without
 * @do_accounting the caller settles locked memory itself.
 */
static void fm_unmap_unpin(struct fm_iommu *iommu, struct fm_dma *dma, bool do_accounting)
{
	u64 start = trace_foliomap_unmap_enabled() ? ktime_get_ns() : 0;
	struct fm_domain *first, *d;
	unsigned long runs;

	if (!dma->iommu_mapped || !dma->size || list_empty(&iommu->domain_list))
		return;

	/* Every other domain is emptied and flushed before anything is unpinned. */
	first = list_first_entry(&iommu->domain_list, struct fm_domain, next);
	d = first;
	list_for_each_entry_continue(d, &iommu->domain_list, next) {
		fm_unmap_other(d->domain, dma->iova, dma->size);
		cond_resched();
	}
	runs = fm_unmap_unpin_domain(dma, first->domain, dma->size, do_accounting);
	dma->iommu_mapped = false;
	iommu->stats.runs_unmapped += runs;
	trace_foliomap_unmap(dma->iova, dma->size, runs, start ? ktime_get_ns() - start : 0);
}

void fm_dma_remove(struct fm_iommu *iommu, struct fm_dma *dma)
{
	/* Emulated devices drop their pins (fm_notify_dma_unmap) first. */
	WARN_ON_ONCE(!RB_EMPTY_ROOT(&dma->pfn_list));

	fm_unmap_unpin(iommu, dma, true);
	fm_dma_unlink(iommu, dma);
	put_task_struct(dma->task);
	mmdrop(dma->mm);
	fm_dirty_bitmap_free(dma);
	fm_rec_free(dma);
	if (dma->vaddr_invalid)
		iommu->vaddr_invalid_count--;
	kfree(dma);
	iommu->dma_avail++;
}

void fm_unmap_unpin_all(struct fm_iommu *iommu)
{
	struct rb_node *n;

	while ((n = rb_first(&iommu->dma_tree)))
		fm_dma_remove(iommu, rb_entry(n, struct fm_dma, node));
}

/*
 * The last IOMMU domain is gone but emulated groups remain: the mappings
 * stay, unpinned, for pin_pages to pin on demand. Only the pages that
 * emulated devices still pin stay charged.
 */
void fm_unmap_unpin_reaccount(struct fm_iommu *iommu)
{
	struct rb_node *n;

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n))
		fm_unmap_unpin(iommu, rb_entry(n, struct fm_dma, node), true);
}

/* The first mapping an unmap request acts on. */
static struct rb_node *fm_unmap_first(struct fm_iommu *iommu, dma_addr_t iova,
				      u64 size, bool all)
{
	struct rb_node *n = fm_dma_find_first_node(iommu, iova, all ? 0 : size);

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
 * VFIO_DMA_UNMAP_FLAG_VADDR: the mappings stay in the IOMMU, but nothing may
 * be pinned through their vaddr until MAP_DMA gives a new one. All or
 * nothing: meeting an already invalid mapping undoes this call's work.
 */
static int fm_invalidate_vaddr(struct fm_iommu *iommu, struct rb_node *first,
			       dma_addr_t last, size_t *done)
{
	struct fm_dma *dma, *undo;
	struct rb_node *n;

	for (n = first; (dma = fm_unmap_next(n, last)); n = rb_next(n)) {
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
	if (iommu->v2 && !all && fm_dma_range_splits(iommu, iova, last))
		goto out;

	ret = 0;
	first = fm_unmap_first(iommu, iova, size, all);
	if (invalidate) {
		ret = fm_invalidate_vaddr(iommu, first, last, &unmapped);
		goto out;
	}

	/*
	 * Emulated devices drop their pins on request; the callback runs
	 * without iommu->lock, so everything is looked up again afterwards.
	 */
	for (n = first; (dma = fm_unmap_next(n, last)); n = rb_next(n)) {
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
		n = rb_next(n);
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
