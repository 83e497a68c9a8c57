// SPDX-License-Identifier: GPL-2.0-only
/*
 * Locked memory: whose it is and how much. Every pinned page that is
 * ordinary memory counts once in its owner's locked_vm, against the owner's
 * RLIMIT_MEMLOCK unless the owner had CAP_IPC_LOCK at map time; reserved
 * and PFNMAP pages do not count, and neither do pages an emulated device
 * pinned first (their vpfn carries the charge, vpfn.c).
 *
 * fm_acct() is the one place locked_vm changes. Its callers: the pin
 * pipeline, once per batch (fm_batch_charge(), below); unmap, once per
 * released mapping or run (unmap.c); pin_pages, once per page (pin_pages.c);
 * MAP_DMA with a new vaddr, which moves the whole charge to the calling
 * process (fm_change_owner(), map_dma.c).
 */
#include <linux/capability.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>

#include "pin.h"

struct fm_owner fm_owner_current(void)
{
	return (struct fm_owner){
		/* One task for all accounting: its rlimit, even after it exits. */
		.task = current->group_leader,
		.mm = current->mm,
		.lock_cap = capable(CAP_IPC_LOCK),
	};
}

/*
 * Make @who the owner of @dma, holding a reference on its task (for the
 * rlimit) and on its mm (for locked_vm): either may outlive the process.
 * A new dma has no owner yet; a change of owner drops the old references.
 */
void fm_dma_set_owner(struct fm_dma *dma, const struct fm_owner *who)
{
	if (dma->task != who->task) {
		if (dma->task)
			put_task_struct(dma->task);
		dma->task = get_task_struct(who->task);
	}
	if (dma->mm != who->mm) {
		if (dma->mm)
			mmdrop(dma->mm);
		dma->mm = who->mm;
		mmgrab(dma->mm);
	}
	dma->lock_cap = who->lock_cap;
}

/*
 * Charge (npage > 0) or release (npage < 0) @npage pages of @who's locked
 * memory. A charge may fail: over the rlimit (-ENOMEM), or on a fatal
 * signal while waiting for mmap_lock; a release always happens. @get_mm:
 * the caller holds no reference on the mm, which may be gone (-ESRCH:
 * nothing left to release).
 */
static __always_inline int fm_acct_owner(const struct fm_owner *who, long npage, bool get_mm)
{
	int ret = 0;

	if (!npage)
		return 0;
	if (get_mm && !mmget_not_zero(who->mm))
		return -ESRCH;

	if (npage > 0)
		ret = mmap_write_lock_killable(who->mm);
	else
		mmap_write_lock(who->mm);
	if (!ret) {
		ret = __account_locked_vm(who->mm, abs(npage), npage > 0, who->task,
					  who->lock_cap);
		mmap_write_unlock(who->mm);
	}

	if (get_mm)
		mmput(who->mm);
	return ret;
}

int fm_acct(const struct fm_owner *who, long npage, bool get_mm)
{
	return fm_acct_owner(who, npage, get_mm);
}

/*
 * fm_acct() for @dma's owner, keeping dma->locked_vm. @async: the caller
 * may run outside that mm and holds no reference (its own mm, as when a
 * process unmaps its mapping, needs none).
 */
int fm_lock_acct(struct fm_dma *dma, long npage, bool async)
{
	struct fm_owner who = fm_dma_owner(dma);
	int ret;

	if (async && fm_dma_mm_held(dma))
		async = false;

	/* Inline: every unmap comes here. */
	ret = fm_acct_owner(&who, npage, async);
	if (!ret)
		dma->locked_vm += npage;
	return ret;
}

/*
 * Pages to charge among @n ordinary pages at @iova: those not already
 * charged as external pins.
 */
static long fm_stretch_charge(struct fm_dma *dma, dma_addr_t iova, unsigned long n)
{
	if (!n)
		return 0;
	return n - fm_vpfn_count(dma, iova, n);
}

/* Charge the whole batch at once, before any of it reaches the IOMMU. */
int fm_batch_charge(struct fm_pinner *p)
{
	struct fm_batch *b = p->batch;
	struct fm_dma *dma = p->dma;
	dma_addr_t iova = fm_pinner_next_iova(p);
	dma_addr_t stretch = iova;	/* first uncounted ordinary page */
	long charge = 0;
	unsigned long r;
	int ret;

	if (b->pfnmap) {
		/* fm_fill_pfnmap() accepted reserved/invalid pfns only. */
		dma->has_rsvd = true;
		dma->has_pfnmap = true;
		return 0;
	}

	for (r = 0; r < b->nr_runs; r++) {
		unsigned long pfn = b->runs[r].pfn, left = b->runs[r].npage;

		while (left) {
			unsigned long len = fm_folio_segment(pfn, left);

			p->probe.segs++;	/* parstart.c: folio size */
			/*
			 * Reserved pages are not charged (GUP still pins them,
			 * see fm_release_run()). A driver that reserves a
			 * compound page reserves every subpage: one test per
			 * folio segment answers for all of it.
			 */
			if (PageReserved(pfn_to_page(pfn))) {
				charge += fm_stretch_charge(dma, stretch,
							    (iova - stretch) >> PAGE_SHIFT);
				stretch = iova + (len << PAGE_SHIFT);
				dma->has_rsvd = true;
			}
			pfn += len;
			left -= len;
			iova += len << PAGE_SHIFT;
		}
	}
	charge += fm_stretch_charge(dma, stretch, (iova - stretch) >> PAGE_SHIFT);

	/* Charged ahead (parallel.c): no mmap_write_lock per batch. */
	if (p->par && fm_par_prepaid(p, charge))
		return 0;
	ret = fm_lock_acct(dma, charge, false);
	if (ret == -ENOMEM)
		pr_warn_ratelimited("foliomap: %s (%d): RLIMIT_MEMLOCK (%lu) exceeded\n",
				    dma->task->comm, task_pid_nr(dma->task),
				    task_rlimit(dma->task, RLIMIT_MEMLOCK));
	return ret;
}
