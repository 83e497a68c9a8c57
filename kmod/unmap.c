// SPDX-License-Identifier: GPL-2.0-only
/*
 * Unmap: take a mapping out of every IOMMU domain, flush the IOTLB, and
 * only then release the pages, whole runs at a time (release.c). The
 * callers: UNMAP_DMA (unmap_dma.c), a failed MAP_DMA, the last group
 * leaving and the container's release (container.c), replay's undo.
 *
 * With a run record (record.c) covering the mapping, the first domain is
 * emptied one stretch of runs per iommu_unmap_fast() and flush, with no
 * page-table lookup (fm_unmap_unpin_rec()). Without one:
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
static __always_inline unsigned long fm_unmap_unpin_rec(struct fm_dma *dma,
							struct iommu_domain *domain,
							bool do_accounting)
{
	/* iommu_iotlb_gather_init() sets all of it: no zeroing on entry. */
	struct iommu_iotlb_gather gather __uninitialized;
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

/*
 * Unmap and release the first @size bytes of @dma leaf by leaf, as the
 * IOMMU reports them: the mapping has no record covering them (too
 * fragmented, no memory for it, or a failed map's prefix).
 */
static noinline unsigned long fm_unmap_unpin_walk(struct fm_dma *dma,
						  struct iommu_domain *domain,
						  size_t size, bool do_accounting)
{
	struct fm_unmap_run stack_runs[FM_UNMAP_RUNS_STACK];
	struct fm_unmapper u = { .dma = dma, .domain = domain };
	dma_addr_t iova = dma->iova;
	size_t left = size;

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

/* fm_unmap_unpin_domain(), inline for fm_unmap_unpin(): every unmap comes here. */
static __always_inline unsigned long fm_unmap_unpin_one(struct fm_dma *dma,
							struct iommu_domain *domain,
							size_t size, bool do_accounting)
{
	unsigned long runs;

	/*
	 * Two functions, not two branches: the walk's stack arrays, which
	 * the kernel zeroes on entry, are not paid for by every small unmap.
	 */
	if (fm_rec_covers(dma, size))
		runs = fm_unmap_unpin_rec(dma, domain, do_accounting);
	else
		runs = fm_unmap_unpin_walk(dma, domain, size, do_accounting);
	/* The pins the record described are released. */
	fm_rec_free(dma);
	return runs;
}

unsigned long fm_unmap_unpin_domain(struct fm_dma *dma, struct iommu_domain *domain,
				    size_t size, bool do_accounting)
{
	return fm_unmap_unpin_one(dma, domain, size, do_accounting);
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
 * @do_accounting the caller settles locked memory itself. Inline: the
 * unmap of every mapping comes here.
 */
static __always_inline void fm_unmap_unpin(struct fm_iommu *iommu, struct fm_dma *dma,
					   bool do_accounting)
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
	runs = fm_unmap_unpin_one(dma, first->domain, dma->size, do_accounting);
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
	fm_dma_put_owner(dma);
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
