// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pin pipeline, used by MAP_DMA and by the replay into a new domain:
 *
 *   fill     one pin_user_pages_remote() call fills a batch of up to
 *            FM_BATCH_MAX page pointers (or, for a VM_PFNMAP range, pfns
 *            looked up one by one under a single mmap_read_lock);
 *   charge   one pass over the batch: one reserved test per folio segment,
 *            one vpfn count per stretch of ordinary pages, and a single
 *            fm_lock_acct() for the whole batch;
 *   extend   the batch is cut into physically contiguous runs; the open run
 *            (pinned and charged, not yet mapped) keeps growing across
 *            batches, so a 1G hugetlb page becomes one run;
 *   map      when the run cannot grow, one iommu_map() per domain.
 *
 * At any moment the dma is in three parts: a prefix that is pinned,
 * charged and mapped; the open run; the unconsumed rest of the batch. Each
 * error path releases the last two here and leaves the prefix to the caller,
 * which unmaps it (flush first) and unpins it like any mapping.
 */
#include <linux/ktime.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "foliomap.h"
#include "trace.h"

/* One page of page pointers: one GUP call pins up to 2M of 4K pages. */
#define FM_BATCH_MAX	(PAGE_SIZE / sizeof(struct page *))

struct fm_batch {
	union {
		struct page	**pages;	/* pinned by GUP */
		unsigned long	*pfns;		/* VM_PFNMAP: looked up, not pinned */
	};
	bool		pfnmap;
	unsigned long	capacity;
	unsigned long	size;
	struct page	*fallback;		/* one entry if no page was free */
};

struct fm_pinner {
	struct fm_iommu		*iommu;
	struct fm_dma		*dma;
	struct fm_domain	*target;	/* replay: only this domain */
	struct mm_struct	*mm;
	struct fm_batch		batch;
	/* The open run; [dma->iova, run_iova) is already mapped. */
	dma_addr_t		run_iova;
	unsigned long		run_pfn;
	unsigned long		run_npage;
	unsigned long		runs;		/* runs mapped so far */
};

/*
 * Memory without a struct page (MMIO) or with PageReserved is not charged
 * (GUP still pins reserved pages, see fm_release_run()). Drivers that
 * reserve a compound page reserve all of its subpages, so testing any page
 * of a folio answers for the folio.
 */
bool fm_pfn_is_invalid_or_reserved(unsigned long pfn)
{
	if (!pfn_valid(pfn))
		return true;
	return PageReserved(pfn_to_page(pfn));
}

static int fm_mm_acct(struct task_struct *task, struct mm_struct *mm,
		      bool lock_cap, long npage)
{
	int ret = 0;

	/* A charge may give up on a fatal signal; a release must happen. */
	if (npage > 0)
		ret = mmap_write_lock_killable(mm);
	else
		mmap_write_lock(mm);
	if (ret)
		return ret;
	ret = __account_locked_vm(mm, abs(npage), npage > 0, task, lock_cap);
	mmap_write_unlock(mm);
	return ret;
}

/*
 * Charge (npage > 0) or release (npage < 0) locked memory of the mapping's
 * mm. @async: the caller may run outside that mm and holds no reference.
 */
int fm_lock_acct(struct fm_dma *dma, long npage, bool async)
{
	int ret;

	if (!npage)
		return 0;
	if (async && !mmget_not_zero(dma->mm))
		return -ESRCH;

	ret = fm_mm_acct(dma->task, dma->mm, dma->lock_cap, npage);
	if (!ret)
		dma->locked_vm += npage;

	if (async)
		mmput(dma->mm);
	return ret;
}

static void fm_batch_init(struct fm_batch *b)
{
	b->size = 0;
	b->pages = (struct page **)__get_free_page(GFP_KERNEL);
	if (b->pages) {
		b->capacity = FM_BATCH_MAX;
	} else {
		b->pages = &b->fallback;
		b->capacity = 1;
	}
}

static void fm_batch_fini(struct fm_batch *b)
{
	if (b->pages != &b->fallback)
		free_page((unsigned long)b->pages);
}

static unsigned long fm_batch_pfn(const struct fm_batch *b, unsigned long i)
{
	return b->pfnmap ? b->pfns[i] : page_to_pfn(b->pages[i]);
}

/*
 * The pfn behind @addr of a VM_PFNMAP vma, faulting the pte in if needed.
 * -EAGAIN: the fault dropped mmap_lock, the vma must be looked up again.
 */
static int fm_follow_pfn(struct vm_area_struct *vma, unsigned long addr,
			 bool write, unsigned long *pfn)
{
	bool writable;
	int ret;

	if (fm_compat_follow_pfnmap(vma, addr, pfn, &writable)) {
		unsigned int flags = FAULT_FLAG_REMOTE | (write ? FAULT_FLAG_WRITE : 0);
		bool unlocked = false;

		ret = fixup_user_fault(vma->vm_mm, addr, flags, &unlocked);
		if (unlocked)
			return -EAGAIN;
		if (ret)
			return ret;
		ret = fm_compat_follow_pfnmap(vma, addr, pfn, &writable);
		if (ret)
			return ret;
	}

	return write && !writable ? -EFAULT : 0;
}

/*
 * GUP refuses VM_PFNMAP memory (device BARs): look such pfns up instead,
 * one pte at a time but under the caller's single mmap_read_lock. Only
 * memory that is not an ordinary page is accepted. Returns the number of
 * pfns found, 0 if @vaddr is not in a VM_PFNMAP vma, or -errno.
 */
static long fm_fill_pfnmap(struct fm_batch *b, struct mm_struct *mm,
			   unsigned long vaddr, unsigned long npage, bool write)
{
	unsigned long addr = fm_compat_untagged_addr(mm, vaddr);
	struct vm_area_struct *vma = NULL;
	unsigned long n = 0;
	int ret = 0;

	b->pfnmap = true;
	while (n < npage) {
		unsigned long pfn;

		if (!vma || addr >= vma->vm_end) {
			vma = vma_lookup(mm, addr);
			if (!vma || !(vma->vm_flags & VM_PFNMAP))
				break;
		}
		ret = fm_follow_pfn(vma, addr, write, &pfn);
		if (ret == -EAGAIN) {
			vma = NULL;
			continue;
		}
		if (ret)
			break;
		if (!fm_pfn_is_invalid_or_reserved(pfn)) {
			ret = -EFAULT;
			break;
		}
		b->pfns[n++] = pfn;
		addr += PAGE_SIZE;
	}
	return n ? n : ret;
}

/*
 * Fill @b from up to @npage pages at @vaddr of @mm. Pages are pinned
 * FOLL_LONGTERM (migrated out of ZONE_MOVABLE/CMA first) and only from @mm.
 * Returns the number of entries (> 0) or -errno, with nothing pinned.
 */
static long fm_batch_fill(struct fm_batch *b, struct mm_struct *mm,
			  unsigned long vaddr, unsigned long npage, int prot)
{
	unsigned int gup = FOLL_LONGTERM | ((prot & IOMMU_WRITE) ? FOLL_WRITE : 0);
	long ret;

	npage = min(npage, b->capacity);
	b->pfnmap = false;

	mmap_read_lock(mm);
	ret = fm_compat_pin_user_pages_remote(mm, vaddr, npage, gup, b->pages);
	if (ret <= 0) {
		long found = fm_fill_pfnmap(b, mm, vaddr, npage, prot & IOMMU_WRITE);

		if (found)
			ret = found;
		else
			b->pfnmap = false;
	}
	mmap_read_unlock(mm);

	if (!ret)
		ret = -EFAULT;
	b->size = ret > 0 ? ret : 0;
	return ret;
}

/*
 * The length of the physically contiguous stretch of @pages (at most @n)
 * that stays inside the folio of its first page: one reserved test holds
 * for all of it.
 */
static unsigned long fm_folio_segment(struct page **pages, unsigned long n)
{
	struct folio *folio = page_folio(pages[0]);
	unsigned long pfn = page_to_pfn(pages[0]);
	unsigned long len;

	n = min_t(unsigned long, n, folio_nr_pages(folio) - folio_page_idx(folio, pages[0]));
	for (len = 1; len < n; len++)
		if (page_to_pfn(pages[len]) != pfn + len)
			break;
	return len;
}

/*
 * Pages to charge for entries [from, to) of the batch, which start at
 * @iova: the ordinary ones not already charged as external pins.
 */
static long fm_stretch_charge(struct fm_dma *dma, dma_addr_t iova,
			      unsigned long from, unsigned long to)
{
	unsigned long n = to - from;

	if (!n)
		return 0;
	return n - fm_vpfn_count(dma, iova + (from << PAGE_SHIFT), n);
}

/* Charge the whole batch at once, before any of it reaches the IOMMU. */
static int fm_batch_charge(struct fm_pinner *p)
{
	struct fm_batch *b = &p->batch;
	struct fm_dma *dma = p->dma;
	dma_addr_t iova = p->run_iova + (p->run_npage << PAGE_SHIFT);
	unsigned long i = 0, start = 0;
	long charge = 0;
	int ret;

	if (b->pfnmap) {
		/* fm_fill_pfnmap() accepted reserved/invalid pfns only. */
		dma->has_rsvd = true;
		dma->has_pfnmap = true;
		return 0;
	}

	while (i < b->size) {
		unsigned long len = fm_folio_segment(b->pages + i, b->size - i);

		if (PageReserved(b->pages[i])) {
			charge += fm_stretch_charge(dma, iova, start, i);
			start = i + len;
			dma->has_rsvd = true;
		}
		i += len;
	}
	charge += fm_stretch_charge(dma, iova, start, b->size);

	ret = fm_lock_acct(dma, charge, false);
	if (ret == -ENOMEM)
		pr_warn_ratelimited("foliomap: %s (%d): RLIMIT_MEMLOCK (%lu) exceeded\n",
				    dma->task->comm, task_pid_nr(dma->task),
				    task_rlimit(dma->task, RLIMIT_MEMLOCK));
	return ret;
}

/*
 * Unpin batch entries [from, size), charged or not, as contiguous runs.
 * Entry @from sits right after the open run: everything before it was
 * consumed into runs.
 */
static void fm_batch_release(struct fm_pinner *p, unsigned long from, bool charged)
{
	struct fm_batch *b = &p->batch;
	dma_addr_t iova = p->run_iova + (p->run_npage << PAGE_SHIFT);
	unsigned long i = from;

	while (i < b->size) {
		unsigned long pfn = fm_batch_pfn(b, i), len = 1;

		while (i + len < b->size && fm_batch_pfn(b, i + len) == pfn + len)
			len++;
		fm_unpin_run(p->dma, iova + ((i - from) << PAGE_SHIFT), pfn, len, charged);
		i += len;
	}
	b->size = 0;
}

/*
 * Map the open run into the target domain(s). On failure nothing of the
 * run is left in any domain (iommu_unmap() flushes) and the run stays open
 * for the caller to release.
 */
static int fm_run_map(struct fm_pinner *p)
{
	phys_addr_t phys = PFN_PHYS(p->run_pfn);
	size_t len = p->run_npage << PAGE_SHIFT;
	int prot = p->dma->prot | IOMMU_CACHE;
	struct fm_domain *d;
	int ret;

	if (p->target) {
		ret = fm_compat_iommu_map(p->target->domain, p->run_iova, phys, len,
					  prot, GFP_KERNEL_ACCOUNT);
	} else {
		list_for_each_entry(d, &p->iommu->domain_list, next) {
			ret = fm_compat_iommu_map(d->domain, p->run_iova, phys, len,
						  prot, GFP_KERNEL_ACCOUNT);
			if (ret)
				break;
		}
		if (ret)
			list_for_each_entry_continue_reverse(d, &p->iommu->domain_list, next)
				iommu_unmap(d->domain, p->run_iova, len);
	}
	if (ret)
		return ret;

	p->run_iova += len;
	p->run_npage = 0;
	p->runs++;
	p->iommu->stats.runs_mapped++;
	return 0;
}

/*
 * Feed the charged batch into runs, mapping each run that cannot grow.
 * With disable_hugepages every page is a run of its own, as in stock.
 */
static int fm_batch_map(struct fm_pinner *p)
{
	struct fm_batch *b = &p->batch;
	unsigned long i;
	int ret;

	for (i = 0; i < b->size; i++) {
		unsigned long pfn = fm_batch_pfn(b, i);

		if (p->run_npage && pfn == p->run_pfn + p->run_npage &&
		    !READ_ONCE(fm_disable_hugepages)) {
			p->run_npage++;
			continue;
		}
		if (p->run_npage) {
			ret = fm_run_map(p);
			if (ret) {
				fm_batch_release(p, i, true);
				return ret;
			}
		}
		p->run_pfn = pfn;
		p->run_npage = 1;
	}
	b->size = 0;
	return 0;
}

/*
 * Pin, charge and map @p->dma from its start. Returns 0 with all of it
 * mapped, or -errno with [dma->iova, p->run_iova) mapped and everything
 * beyond released.
 */
static int fm_pin_map_dma(struct fm_pinner *p)
{
	struct fm_dma *dma = p->dma;
	unsigned long left = dma->size >> PAGE_SHIFT;
	int ret = 0;

	p->run_iova = dma->iova;
	p->run_npage = 0;
	fm_batch_init(&p->batch);

	while (left) {
		unsigned long offset = p->run_iova - dma->iova + (p->run_npage << PAGE_SHIFT);
		long n;

		/* A killed process must not wait for gigabytes to be pinned. */
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			break;
		}
		cond_resched();

		n = fm_batch_fill(&p->batch, p->mm, dma->vaddr + offset, left, dma->prot);
		if (n < 0) {
			ret = n;
			break;
		}
		p->iommu->stats.batches++;
		p->iommu->stats.batch_pages += n;
		ret = fm_batch_charge(p);
		if (ret) {
			fm_batch_release(p, 0, false);
			break;
		}
		ret = fm_batch_map(p);
		if (ret)
			break;
		left -= n;
	}

	if (!ret && p->run_npage)
		ret = fm_run_map(p);
	if (ret && p->run_npage) {
		fm_unpin_run(dma, p->run_iova, p->run_pfn, p->run_npage, true);
		p->run_npage = 0;
	}

	fm_batch_fini(&p->batch);
	return ret;
}

int fm_pin_one(struct fm_dma *dma, unsigned long vaddr, unsigned long *pfn)
{
	struct fm_batch b = { .capacity = 1 };
	long ret;

	b.pages = &b.fallback;
	ret = fm_batch_fill(&b, dma->mm, vaddr, 1, dma->prot);
	if (ret < 0)
		return ret;
	if (b.pfnmap)
		dma->has_pfnmap = true;
	*pfn = fm_batch_pfn(&b, 0);
	return 0;
}

/*
 * Map a new dma into every domain. The caller is the mapping process, so
 * dma->mm is current->mm and alive. On failure the mapped prefix goes
 * through the ordinary removal: unmap, flush, unpin, uncharge.
 */
static int fm_map_new(struct fm_iommu *iommu, struct fm_dma *dma)
{
	struct fm_pinner p = { .iommu = iommu, .dma = dma, .mm = dma->mm };
	u64 start = trace_foliomap_map_enabled() ? ktime_get_ns() : 0;
	int ret;

	ret = fm_pin_map_dma(&p);
	dma->iommu_mapped = true;
	if (ret) {
		dma->size = p.run_iova - dma->iova;
		fm_dma_remove(iommu, dma);
		return ret;
	}
	trace_foliomap_map(dma->iova, dma->size, p.runs,
			   start ? ktime_get_ns() - start : 0);
	return 0;
}

/*
 * VFIO_DMA_MAP_FLAG_VADDR: a new process may take over an invalidated
 * mapping; its locked memory moves with it.
 */
static int fm_change_owner(struct fm_dma *dma)
{
	struct task_struct *task = current->group_leader;
	struct mm_struct *mm = current->mm;
	long npage = dma->locked_vm;
	bool lock_cap;
	int ret;

	if (mm == dma->mm)
		return 0;

	lock_cap = capable(CAP_IPC_LOCK);
	ret = fm_mm_acct(task, mm, lock_cap, npage);
	if (ret)
		return ret;
	if (mmget_not_zero(dma->mm)) {
		fm_mm_acct(dma->task, dma->mm, dma->lock_cap, -npage);
		mmput(dma->mm);
	}

	if (dma->task != task) {
		put_task_struct(dma->task);
		dma->task = get_task_struct(task);
	}
	mmdrop(dma->mm);
	dma->mm = mm;
	mmgrab(mm);
	dma->lock_cap = lock_cap;
	return 0;
}

static int fm_set_vaddr(struct fm_iommu *iommu, struct fm_dma *dma, dma_addr_t iova,
			size_t size, unsigned long vaddr)
{
	int ret;

	if (!dma)
		return -ENOENT;
	if (!dma->vaddr_invalid || dma->iova != iova || dma->size != size)
		return -EINVAL;

	ret = fm_change_owner(dma);
	if (ret)
		return ret;
	dma->vaddr = vaddr;
	dma->vaddr_invalid = false;
	iommu->vaddr_invalid_count--;
	return 0;
}

int fm_do_map(struct fm_iommu *iommu, struct vfio_iommu_type1_dma_map *map)
{
	bool set_vaddr = map->flags & VFIO_DMA_MAP_FLAG_VADDR;
	dma_addr_t iova = map->iova;
	unsigned long vaddr = map->vaddr;
	size_t size = map->size;
	struct fm_dma *dma;
	size_t pgsize;
	int prot = 0;
	int ret;

	/* Access is from the device's point of view. */
	if (map->flags & VFIO_DMA_MAP_FLAG_READ)
		prot |= IOMMU_READ;
	if (map->flags & VFIO_DMA_MAP_FLAG_WRITE)
		prot |= IOMMU_WRITE;
	/* A new mapping needs access; a new vaddr keeps the old access. */
	if (!prot == !set_vaddr)
		return -EINVAL;

	mutex_lock(&iommu->lock);

	pgsize = (size_t)1 << __ffs(iommu->pgsize_bitmap);
	ret = -EINVAL;
	if (!size || (iova | vaddr | size) & (pgsize - 1))
		goto out;
	/* The last byte may be the last address, but nothing may wrap. */
	ret = -EOVERFLOW;
	if (iova + size - 1 < iova || vaddr + size - 1 < vaddr)
		goto out;

	dma = fm_dma_find(iommu, iova, size);
	if (set_vaddr) {
		ret = fm_set_vaddr(iommu, dma, iova, size, vaddr);
		goto out;
	}
	ret = -EEXIST;
	if (dma)
		goto out;
	ret = -ENOSPC;
	if (!iommu->dma_avail)
		goto out;
	ret = -EINVAL;
	if (!fm_iova_range_usable(iommu, iova, iova + size - 1))
		goto out;

	ret = -ENOMEM;
	dma = kzalloc(sizeof(*dma), GFP_KERNEL_ACCOUNT);
	if (!dma)
		goto out;

	iommu->dma_avail--;
	dma->iova = iova;
	dma->vaddr = vaddr;
	dma->size = size;
	dma->prot = prot;
	dma->pfn_list = RB_ROOT;
	/*
	 * Accounting may happen later from other contexts (pin_pages, unmap
	 * from another process): keep the thread group leader for the rlimit
	 * and the mm for locked_vm, even if the task exits.
	 */
	dma->task = get_task_struct(current->group_leader);
	dma->mm = current->mm;
	mmgrab(dma->mm);
	dma->lock_cap = capable(CAP_IPC_LOCK);
	fm_dma_link(iommu, dma);

	if (iommu->dirty_page_tracking) {
		ret = fm_dirty_bitmap_alloc(dma, pgsize);
		if (ret) {
			fm_dma_remove(iommu, dma);
			goto out;
		}
	}

	/* With only emulated groups, pin_pages pins on demand. */
	ret = 0;
	if (!list_empty(&iommu->domain_list))
		ret = fm_map_new(iommu, dma);
	if (!ret)
		iommu->stats.map_calls++;
out:
	mutex_unlock(&iommu->lock);
	return ret;
}

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
		ret = fm_compat_iommu_map(dst->domain, dma->iova + off, phys, len,
					  prot, GFP_KERNEL_ACCOUNT);
		if (ret)
			return ret;
		off += len;
		*done = off;
		phys = next;
		cond_resched();
	}
	return 0;
}

/* Pin, charge and map a dma that only emulated groups knew so far. */
static int fm_replay_pin(struct fm_iommu *iommu, struct fm_domain *dst,
			 struct fm_dma *dma, size_t *done)
{
	struct fm_pinner p = { .iommu = iommu, .dma = dma, .target = dst, .mm = dma->mm };
	int ret;

	/* Pages come from the mapping's own address space, never current's. */
	if (!mmget_not_zero(dma->mm))
		return -ESRCH;
	ret = fm_pin_map_dma(&p);
	mmput(dma->mm);
	*done = p.run_iova - dma->iova;
	return ret;
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
	struct fm_domain *src = NULL, *d;
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

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n)) {
		dma = rb_entry(n, struct fm_dma, node);
		done = 0;
		if (dma->iommu_mapped)
			ret = fm_replay_copy(src, domain, dma, &done);
		else
			ret = fm_replay_pin(iommu, domain, dma, &done);
		if (ret)
			goto unwind;
	}

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n))
		rb_entry(n, struct fm_dma, node)->iommu_mapped = true;
	return 0;

unwind:
	fm_replay_undo(domain, dma, done);
	for (n = rb_prev(n); n; n = rb_prev(n)) {
		dma = rb_entry(n, struct fm_dma, node);
		fm_replay_undo(domain, dma, dma->size);
	}
	return ret;
}
