// SPDX-License-Identifier: GPL-2.0-only
/*
 * Runs: the charged batch is fed into the open run (pin.h, struct
 * fm_pinner), which keeps growing while the pfns follow each other, across
 * batches too, so that a 1G hugetlb page becomes one run. A run that cannot
 * grow is mapped with one iommu_map() per domain and appended to the run
 * record (record.c). With disable_hugepages every page is a run of its
 * own, as in stock.
 */
#include "pin.h"

/* iommu_map() of what foliomap pinned or found; a test build may fail it. */
int fm_iommu_map(struct iommu_domain *domain, unsigned long iova, phys_addr_t phys,
		 size_t len, int prot)
{
	if (fm_inject(FM_INJECT_IOMMU_MAP))
		return -ENOMEM;
	return fm_compat_iommu_map(domain, iova, phys, len, prot, GFP_KERNEL_ACCOUNT);
}

/*
 * Undo a failed fm_iommu_map() of [@iova, @iova + @len) in @domain.
 * iommu_map() unmaps what the driver says it mapped, but intel-iommu's
 * map_pages() says nothing of the PTEs it wrote before a page-table
 * allocation failed (a run across a 2 MiB boundary keeps its first part).
 * Those would hold no pin once the run is released: a device could reach
 * freed pages through them. Arm's io-pgtable, on the other hand, warns on
 * an unmap of what is not mapped, so only the pages still present are
 * unmapped, found one by one: this is an error path, and iommu_unmap()
 * flushes before it returns.
 */
void fm_iommu_map_undo(struct iommu_domain *domain, unsigned long iova, size_t len)
{
	size_t off = 0, start;

	while (off < len) {
		while (off < len && !iommu_iova_to_phys(domain, iova + off)) {
			off += PAGE_SIZE;
			cond_resched();
		}
		start = off;
		while (off < len && iommu_iova_to_phys(domain, iova + off)) {
			off += PAGE_SIZE;
			cond_resched();
		}
		if (off > start)
			iommu_unmap(domain, iova + start, off - start);
	}
}

/*
 * Map the open run into the target domain(s). On failure nothing of the
 * run is left in any domain (iommu_unmap() flushes) and the run stays open
 * for the caller to release. That includes the domain whose map failed
 * (fm_iommu_map_undo()).
 */
int fm_run_map(struct fm_pinner *p)
{
	phys_addr_t phys = PFN_PHYS(p->run_pfn);
	size_t len = p->run_npage << PAGE_SHIFT;
	int prot = p->dma->prot | IOMMU_CACHE;
	struct fm_domain *d;
	int ret;

	ret = fm_rec_reserve(p->dma, p->run_pfn);
	if (ret)
		return ret;
	if (p->target) {
		ret = fm_iommu_map(p->target->domain, p->run_iova, phys, len, prot);
		if (ret)
			fm_iommu_map_undo(p->target->domain, p->run_iova, len);
	} else {
		list_for_each_entry(d, &p->iommu->domain_list, next) {
			ret = fm_iommu_map(d->domain, p->run_iova, phys, len, prot);
			if (ret)
				break;
		}
		if (ret) {
			fm_iommu_map_undo(d->domain, p->run_iova, len);
			list_for_each_entry_continue_reverse(d, &p->iommu->domain_list, next)
				iommu_unmap(d->domain, p->run_iova, len);
		}
	}
	if (ret)
		return ret;

	fm_rec_add(p->dma, p->run_pfn, p->run_npage);
	p->run_iova += len;
	p->run_npage = 0;
	p->runs++;
	p->iommu->stats.runs_mapped++;
	return 0;
}

/*
 * With folio pins, the open run and a batch run that continues it each
 * hold a pin on the folio they may share (the batch ended inside it):
 * joined, they keep one.
 */
static void fm_run_join_pins(struct fm_pinner *p, unsigned long pfn)
{
	if (!p->dma->folio_pins || p->batch->pfnmap || !p->run_tail_pinned)
		return;
	if (page_folio(pfn_to_page(pfn)) == page_folio(pfn_to_page(pfn - 1)))
		unpin_user_page(pfn_to_page(pfn));
}

/* Feed the charged batch into runs, mapping each run that cannot grow. */
int fm_batch_map(struct fm_pinner *p)
{
	bool single = p->single;
	struct fm_batch *b = p->batch;
	unsigned long r;
	int ret;

	for (r = 0; r < b->nr_runs; r++) {
		unsigned long pfn = b->runs[r].pfn, npage = b->runs[r].npage, off = 0;

		while (off < npage) {
			unsigned long take = single ? 1 : npage - off;

			if (p->run_npage && !single && pfn + off == p->run_pfn + p->run_npage) {
				fm_run_join_pins(p, pfn + off);
				p->run_npage += take;
				p->run_tail_pinned = !b->pfnmap;
				off += take;
				continue;
			}
			if (p->run_npage) {
				ret = fm_run_map(p);
				if (ret) {
					fm_batch_release(p, r, off, true);
					return ret;
				}
			}
			p->run_pfn = pfn + off;
			p->run_npage = take;
			p->run_tail_pinned = !b->pfnmap;
			off += take;
		}
	}
	b->nr_runs = 0;
	b->size = 0;
	return 0;
}

/*
 * Unpin the unconsumed part of the batch, charged or not: run @r from its
 * page @off on, and every later run. It sits right after the open run.
 */
void fm_batch_release(struct fm_pinner *p, unsigned long r, unsigned long off,
		      bool charged)
{
	struct fm_batch *b = p->batch;
	dma_addr_t iova = fm_pinner_next_iova(p);

	for (; r < b->nr_runs; r++, off = 0) {
		unsigned long npage = b->runs[r].npage - off;

		fm_unpin_run(p->dma, iova, b->runs[r].pfn + off, npage, charged);
		iova += npage << PAGE_SHIFT;
	}
	b->nr_runs = 0;
	b->size = 0;
}
