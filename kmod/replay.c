// SPDX-License-Identifier: GPL-2.0-only
/*
 * Replay: a domain joining a container (container.c) gets every mapping
 * the container has. A mapping already in the other domains is copied, by
 * its run record (one iommu_map() per run) or, without one, by asking the
 * first domain run by run; a mapping that only emulated groups knew is
 * pinned, charged and mapped by the pin pipeline (pin.c), into the new
 * domain alone. On failure the new domain is emptied again.
 */
#include <linux/sched.h>
#include <linux/sched/mm.h>

#include "pin.h"

/*
 * Copy an already mapped dma into @dst, run by run as found in @src. The
 * pages are pinned and charged already. Returns the bytes mapped in @dst.
 */
static int fm_replay_copy(struct fm_domain *src, struct fm_domain *dst,
			  struct fm_dma *dma, size_t *done)
{
	int prot = dma->prot | IOMMU_CACHE;
	size_t off = 0;
	phys_addr_t phys;

	/* With a record: one iommu_map() per run, no page-table walk. */
	if (fm_rec_covers(dma, dma->size)) {
		unsigned int i;

		for (i = 0; i < dma->rec_nr; i++) {
			size_t len = dma->rec[i].npage << PAGE_SHIFT;
			int ret = fm_iommu_map(dst->domain, dma->iova + off,
					       PFN_PHYS(dma->rec[i].pfn), len, prot);

			if (ret) {
				fm_iommu_map_undo(dst->domain, dma->iova + off, len);
				return ret;
			}
			off += len;
			*done = off;
			cond_resched();
		}
		return 0;
	}

	phys = iommu_iova_to_phys(src->domain, dma->iova);
	while (off < dma->size) {
		phys_addr_t next = 0;
		size_t len = PAGE_SIZE;
		int ret;

		/* A hole would be a bug elsewhere; it simply stays a hole. */
		if (!phys) {
			off += PAGE_SIZE;
			if (off < dma->size)
				phys = iommu_iova_to_phys(src->domain, dma->iova + off);
			continue;
		}
		while (off + len < dma->size) {
			next = iommu_iova_to_phys(src->domain, dma->iova + off + len);
			if (next != phys + len)
				break;
			len += PAGE_SIZE;
		}
		ret = fm_iommu_map(dst->domain, dma->iova + off, phys, len, prot);
		if (ret) {
			fm_iommu_map_undo(dst->domain, dma->iova + off, len);
			return ret;
		}
		off += len;
		*done = off;
		phys = next;
		cond_resched();
	}
	return 0;
}

/*
 * Pin, charge and map a dma that only emulated groups knew so far, through
 * @p, whose batch serves every dma of the replay.
 */
static int fm_replay_pin(struct fm_iommu *iommu, struct fm_pinner *p, struct fm_domain *dst,
			 struct fm_dma *dma, size_t *done)
{
	bool own_mm = fm_dma_mm_held(dma);
	int ret;

	/* Pages come from the mapping's own address space, never current's. */
	if (!own_mm && !mmget_not_zero(dma->mm))
		return -ESRCH;
	fm_pinner_init(p, iommu, dma, dst, p->batch);
	ret = fm_pin_map_dma(p);
	if (!own_mm)
		mmput(dma->mm);
	*done = p->run_iova - dma->iova;
	return ret;
}

/*
 * The batch for the dmas a replay pins: sized for the largest of them,
 * allocated once instead of once per dma. 0 pages: none to pin.
 */
static unsigned long fm_replay_pin_pages(struct fm_iommu *iommu)
{
	unsigned long most = 0;
	struct rb_node *n;

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n)) {
		struct fm_dma *dma = rb_entry(n, struct fm_dma, node);

		if (!dma->iommu_mapped)
			most = max_t(unsigned long, most, dma->size >> PAGE_SHIFT);
	}
	return most;
}

/* Remove from @dst the first @size bytes of @dma that the replay added. */
static void fm_replay_undo(struct fm_domain *dst, struct fm_dma *dma, size_t size)
{
	if (!size)
		return;
	if (dma->iommu_mapped)
		iommu_unmap(dst->domain, dma->iova, size);
	else
		fm_unmap_unpin_domain(dma, dst->domain, size, true);
}

int fm_replay(struct fm_iommu *iommu, struct fm_domain *domain)
{
	struct fm_pinner p __uninitialized;
	struct fm_batch batch __uninitialized;
	struct fm_domain *src = NULL, *d;
	unsigned long pin_pages;
	struct rb_node *n;
	struct fm_dma *dma;
	size_t done = 0;
	int ret = 0;

	list_for_each_entry(d, &iommu->domain_list, next) {
		if (d != domain) {
			src = d;
			break;
		}
	}

	pin_pages = fm_replay_pin_pages(iommu);
	p.batch = &batch;
	if (pin_pages)
		fm_batch_init(&batch, pin_pages);

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n)) {
		dma = rb_entry(n, struct fm_dma, node);
		done = 0;
		if (dma->iommu_mapped)
			ret = fm_replay_copy(src, domain, dma, &done);
		else
			ret = fm_replay_pin(iommu, &p, domain, dma, &done);
		if (ret)
			goto unwind;
	}

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n))
		rb_entry(n, struct fm_dma, node)->iommu_mapped = true;
	goto out;

unwind:
	fm_replay_undo(domain, dma, done);
	for (n = rb_prev(n); n; n = rb_prev(n)) {
		dma = rb_entry(n, struct fm_dma, node);
		fm_replay_undo(domain, dma, dma->size);
	}
out:
	if (pin_pages)
		fm_batch_fini(&batch);
	return ret;
}
