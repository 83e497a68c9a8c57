// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pin pipeline, used by MAP_DMA and by the replay into a new domain:
 *
 *   fill     one mmap_read_lock round trip fills a batch of up to
 *            FM_BATCH_PAGES page pointers: GUP-fast pins the present pages
 *            of the caller's own mm, checked against the vmas under the
 *            lock, and one pin_user_pages_remote() call pins the rest (or,
 *            for a VM_PFNMAP range, pfns are looked up one leaf entry at a
 *            time; for shared hugetlbfs, one memfd_pin_folios() call, see
 *            filepin.c);
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
#include <linux/sizes.h>
#include <linux/slab.h>

#include "foliomap.h"
#include "trace.h"

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
 * GUP-fast and its confirmation under mmap_lock cost more than the locked
 * walk for a page or two, less from about this many pages on.
 */
#define FM_FAST_MIN_PAGES	8
/* PFNMAP lookups per batch: at most this many pages under one mmap_lock. */
#define FM_PFNMAP_PAGES	(SZ_1G >> PAGE_SHIFT)
/* Pages per memfd_pin_folios() batch, charged at once. */
#define FM_FILEPIN_PAGES	(SZ_1G >> PAGE_SHIFT)

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
	/* Small maps, and any map when nothing larger was free. */
	struct page	*inline_pages[FM_BATCH_INLINE];
	struct fm_run	inline_runs[FM_BATCH_INLINE];
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
	bool			run_tail_pinned; /* its last page holds a pin */
	unsigned long		runs;		/* runs mapped so far */
	bool			single;		/* disable_hugepages: a run a page */
	bool			mode_known;	/* dma->folio_pins decided */
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
 * mm. @async: the caller may run outside that mm and holds no reference
 * (its own mm, as when a process unmaps its mapping, needs none).
 */
int fm_lock_acct(struct fm_dma *dma, long npage, bool async)
{
	int ret;

	if (!npage)
		return 0;
	/* A kthread using the mm (kthread_use_mm()) holds no user reference. */
	if (async && dma->mm == current->mm && !(current->flags & PF_KTHREAD))
		async = false;
	if (async && !mmget_not_zero(dma->mm))
		return -ESRCH;

	ret = fm_mm_acct(dma->task, dma->mm, dma->lock_cap, npage);
	if (!ret)
		dma->locked_vm += npage;

	if (async)
		mmput(dma->mm);
	return ret;
}

static void fm_batch_reset(struct fm_batch *b)
{
	b->pfnmap = false;
	b->size = 0;
	b->nr_runs = 0;
}

/* A batch sized for a dma of @npage pages: no bigger than it needs. */
static void fm_batch_init(struct fm_batch *b, unsigned long npage)
{
	unsigned long want = min_t(unsigned long, npage, FM_BATCH_PAGES);

	fm_batch_reset(b);
	b->pages = b->inline_pages;
	b->runs = b->inline_runs;
	b->capacity = FM_BATCH_INLINE;
	if (want <= FM_BATCH_INLINE)
		return;

	b->pages = kmalloc_array(want, sizeof(*b->pages), GFP_KERNEL | __GFP_NOWARN);
	b->runs = kmalloc_array(want, sizeof(*b->runs), GFP_KERNEL | __GFP_NOWARN);
	if (b->pages && b->runs) {
		b->capacity = want;
		return;
	}
	kfree(b->pages);
	kfree(b->runs);
	b->pages = b->inline_pages;
	b->runs = b->inline_runs;
}

static void fm_batch_fini(struct fm_batch *b)
{
	if (b->pages != b->inline_pages) {
		kfree(b->pages);
		kfree(b->runs);
	}
}

/* Append @npage pfns from @pfn, merging with the last run when contiguous. */
static void fm_batch_add(struct fm_batch *b, unsigned long pfn, unsigned long npage)
{
	struct fm_run *last = b->nr_runs ? &b->runs[b->nr_runs - 1] : NULL;

	if (last && last->pfn + last->npage == pfn)
		last->npage += npage;
	else
		b->runs[b->nr_runs++] = (struct fm_run){ .pfn = pfn, .npage = npage };
	b->size += npage;
}

/*
 * The one pass over GUP's output: consecutive page pointers whose pfns
 * follow each other become one run.
 */
static void fm_batch_pages_to_runs(struct fm_batch *b, unsigned long n)
{
	unsigned long i = 0;

	while (i < n) {
		unsigned long pfn = page_to_pfn(b->pages[i]), len = 1;

		while (i + len < n && b->pages[i + len] == b->pages[i] + len)
			len++;
		fm_batch_add(b, pfn, len);
		i += len;
	}
}

/*
 * memfd_pin_folios() output: @nr folios covering @npage pages from page
 * @first of the first folio. Each folio is pinned once, and a folio holds
 * one run segment, so the batch is already one pin per folio and run.
 */
static void fm_batch_folios_to_runs(struct fm_batch *b, long nr, unsigned long first,
				    unsigned long npage)
{
	long i;

	for (i = 0; i < nr && b->size < npage; i++) {
		struct folio *folio = b->folios[i];
		unsigned long skip = i ? 0 : first;

		fm_batch_add(b, folio_pfn(folio) + skip,
			     min(folio_nr_pages(folio) - skip, npage - b->size));
	}
	/* Only folios inside the range were asked for; never more. */
	for (; i < nr; i++)
		unpin_user_page(&b->folios[i]->page);
}

/*
 * For a mapping with folio pins: GUP pinned every page, keep one pin per
 * folio segment of each run (the dirty bit is set when the last goes).
 */
static void fm_batch_one_pin_per_folio(struct fm_batch *b)
{
	unsigned long r;

	for (r = 0; r < b->nr_runs; r++) {
		unsigned long pfn = b->runs[r].pfn, left = b->runs[r].npage;

		while (left) {
			unsigned long len = fm_folio_segment(pfn, left);

			if (len > 1)
				unpin_user_page_range_dirty_lock(pfn_to_page(pfn + 1), len - 1,
								 false);
			pfn += len;
			left -= len;
		}
	}
}

/*
 * The pfn behind @addr of a VM_PFNMAP vma, faulting the entry in if
 * needed, and in @npage how many pages from there one leaf entry maps
 * contiguously (1 for a pte, the rest of the PMD block for a huge entry).
 * -EAGAIN: the fault dropped mmap_lock, the vma must be looked up again.
 */
static int fm_follow_pfn(struct vm_area_struct *vma, unsigned long addr,
			 bool write, unsigned long *pfn, unsigned long *npage)
{
	bool writable;
	int ret;

	if (fm_compat_follow_pfnmap(vma, addr, pfn, &writable, npage)) {
		unsigned int flags = FAULT_FLAG_REMOTE | (write ? FAULT_FLAG_WRITE : 0);
		bool unlocked = false;

		ret = fixup_user_fault(vma->vm_mm, addr, flags, &unlocked);
		if (unlocked)
			return -EAGAIN;
		if (ret)
			return ret;
		ret = fm_compat_follow_pfnmap(vma, addr, pfn, &writable, npage);
		if (ret)
			return ret;
	}

	return write && !writable ? -EFAULT : 0;
}

/*
 * GUP refuses VM_PFNMAP memory (device BARs): look such pfns up instead,
 * under the caller's single mmap_read_lock, one leaf entry at a time: a
 * huge (PMD/PUD) entry of a BAR gives up to 512 pages per lookup. Only
 * memory that is not an ordinary page is accepted. The lock is dropped and
 * taken again when the CPU is wanted elsewhere. Returns the number of
 * pages found, 0 if @vaddr is not in a VM_PFNMAP vma (or on a fatal
 * signal before any), or -errno.
 */
static long fm_fill_pfnmap(struct fm_batch *b, struct mm_struct *mm,
			   unsigned long vaddr, unsigned long npage, bool write)
{
	unsigned long addr = fm_compat_untagged_addr(mm, vaddr);
	struct vm_area_struct *vma = NULL;
	int ret = 0;

	b->pfnmap = true;
	npage = min_t(unsigned long, npage, FM_PFNMAP_PAGES);
	while (b->size < npage) {
		unsigned long pfn, n, ok;

		/* A GiB of 4K entries is 262144 lookups: let others in between. */
		if (fatal_signal_pending(current))
			break;
		if (need_resched()) {
			mmap_read_unlock(mm);
			cond_resched();
			mmap_read_lock(mm);
			vma = NULL;
		}
		if (!vma || addr >= vma->vm_end) {
			if (b->nr_runs == b->capacity)
				break;
			vma = vma_lookup(mm, addr);
			if (!vma || !(vma->vm_flags & VM_PFNMAP))
				break;
		}
		ret = fm_follow_pfn(vma, addr, write, &pfn, &n);
		if (ret == -EAGAIN) {
			/* mmap_lock was dropped: look the vma up again. */
			ret = 0;
			vma = NULL;
			continue;
		}
		if (ret)
			break;
		/* The leaf lies inside the vma; stay inside the request too. */
		n = min3(n, npage - b->size, (vma->vm_end - addr) >> PAGE_SHIFT);
		ok = fm_invalid_pfns(pfn, n);
		if (!ok) {
			/* A struct page: accept it only if reserved, one at a time. */
			if (!PageReserved(pfn_to_page(pfn))) {
				ret = -EFAULT;
				break;
			}
			ok = 1;
		}
		if (b->nr_runs == b->capacity &&
		    b->runs[b->nr_runs - 1].pfn + b->runs[b->nr_runs - 1].npage != pfn)
			break;
		fm_batch_add(b, pfn, ok);
		addr += ok << PAGE_SHIFT;
	}
	return b->size ? b->size : ret;
}

static unsigned int fm_gup_flags(int prot)
{
	return FOLL_LONGTERM | ((prot & IOMMU_WRITE) ? FOLL_WRITE : 0);
}

/*
 * Fill @b from up to @npage pages at @vaddr of @mm, with mmap_read_lock of
 * @mm held (fm_fill_pfnmap() may drop and retake it). Pages are pinned the
 * way stock type1 pins them: FOLL_LONGTERM (migrated out of ZONE_MOVABLE
 * and CMA first), only from @mm, by the locked GUP walk, which checks
 * every vma under this lock (VM_IO and VM_PFNMAP refused, access rights,
 * secretmem, protection keys) and may not drop it, so that a userfaultfd
 * range nobody serves fails at once (SIGBUS, -EFAULT) instead of waiting.
 * Returns the number of pages (> 0) or -errno, with nothing pinned.
 */
static long fm_batch_fill_locked(struct fm_batch *b, struct mm_struct *mm,
				 unsigned long vaddr, unsigned long npage, int prot)
{
	long ret, found;

	fm_batch_reset(b);

	ret = fm_compat_pin_user_pages_remote(mm, vaddr, min(npage, b->capacity),
					      fm_gup_flags(prot), b->pages);
	if (ret > 0) {
		fm_batch_pages_to_runs(b, ret);
		return ret;
	}
	found = fm_fill_pfnmap(b, mm, vaddr, npage, prot & IOMMU_WRITE);
	if (found)
		return found;
	b->pfnmap = false;
	return ret ? ret : -EFAULT;
}

/*
 * The lockless walk (GUP-fast) pins present pages of the caller's own mm
 * about twice as fast as the locked walk for 4K pages. It never faults
 * (faults, userfaultfd included, are the locked walk's) and does not look
 * at the vma, whose flags GUP checks; two ways to make that check hold,
 * one per kernel (compat.h):
 *
 *  - 6.12: pin before taking mmap_lock (pin_user_pages_fast() with
 *    FOLL_NOFAULT; what GUP-fast misses it passes to the locked walk
 *    itself, which checks the vmas and does not fault), then under the
 *    lock keep the pins only if the vmas are fine and no
 *    mmap_write_lock() section began meanwhile (fm_fast_pins_valid()): the
 *    vmas seen are those the walk went through. munmap() zaps the page
 *    tables after downgrading to the read lock, but it has taken the vmas
 *    out before: the lookup here finds none, and the pins are dropped;
 *  - 6.1: check the vmas under mmap_lock, then pin under it, with
 *    pin_user_pages_fast_only(), which never takes the lock itself.
 */

/*
 * With mmap_read_lock held: the end of the part of [@addr, @end) that lies
 * in vmas the locked walk takes pins from for this access (GUP's
 * check_vma_flags(): not VM_IO or VM_PFNMAP, VM_WRITE for device writes,
 * VM_READ otherwise; GUP-fast enforces the rest per page), starting with
 * @vma (the one at @addr, or NULL).
 */
static unsigned long fm_vmas_pinnable(struct mm_struct *mm, struct vm_area_struct *vma,
				      unsigned long addr, unsigned long end, bool write)
{
	vm_flags_t need = write ? VM_WRITE : VM_READ;

	while (vma && !(vma->vm_flags & (VM_IO | VM_PFNMAP)) && (vma->vm_flags & need)) {
		if (vma->vm_end >= end)
			return end;
		addr = vma->vm_end;
		vma = vma_lookup(mm, addr);
	}
	return addr;
}

/* 6.12, before taking mmap_lock: the number of pages pinned, or 0. */
static long fm_batch_pin_fast(struct fm_batch *b, struct mm_struct *mm, unsigned long vaddr,
			      unsigned long npage, int prot, unsigned int *seq)
{
	long ret;

	if (mm != current->mm || !fm_compat_mm_speculate_begin(mm, seq))
		return 0;
	ret = pin_user_pages_fast(vaddr, min(npage, b->capacity),
				  fm_gup_flags(prot) | FOLL_NOFAULT, b->pages);
	return max(ret, 0L);
}

/* 6.12, under mmap_read_lock: do the @n pages pinned at @vaddr stand? */
static bool fm_fast_pins_valid(struct mm_struct *mm, struct vm_area_struct *vma,
			       unsigned long vaddr, long n, unsigned int seq, bool write)
{
	unsigned long addr = fm_compat_untagged_addr(mm, vaddr);
	unsigned long end = addr + (n << PAGE_SHIFT);

	return !fm_compat_mm_speculate_retry(mm, seq) &&
	       fm_vmas_pinnable(mm, vma, addr, end, write) == end;
}

/* 6.1, under mmap_read_lock: the number of pages pinned, or 0. */
static long fm_batch_pin_fast_locked(struct fm_batch *b, struct mm_struct *mm,
				     struct vm_area_struct *vma, unsigned long vaddr,
				     unsigned long npage, int prot)
{
	unsigned long addr = fm_compat_untagged_addr(mm, vaddr), end;
	long ret;

	if (mm != current->mm || !fm_compat_have_pin_fast_only())
		return 0;
	end = fm_vmas_pinnable(mm, vma, addr, addr + (min(npage, b->capacity) << PAGE_SHIFT),
			       prot & IOMMU_WRITE);
	if (end == addr)
		return 0;
	ret = fm_compat_pin_fast_only(vaddr, (end - addr) >> PAGE_SHIFT, fm_gup_flags(prot),
				      b->pages);
	return max(ret, 0L);
}

/*
 * Fill the pinner's batch from @vaddr, under one mmap_read_lock round trip.
 * GUP-fast pins first where it can (above); under the lock, the first fill
 * decides whether the dma has folio pins (filepin.c). A mapping with folio
 * pins takes what filepin.c can pin by folio and leaves the rest (absent
 * folios, other vmas) to GUP, whose pins are then brought to one per folio.
 * The locked walk pins what is left, the way stock pins.
 */
static long fm_pinner_fill(struct fm_pinner *p, unsigned long vaddr, unsigned long npage)
{
	bool fast = !p->dma->folio_pins && npage >= FM_FAST_MIN_PAGES;
	bool write = p->dma->prot & IOMMU_WRITE;
	struct fm_batch *b = &p->batch;
	struct fm_dma *dma = p->dma;
	struct vm_area_struct *vma = NULL;
	unsigned int seq;
	long n = 0;

	if (fast)
		n = fm_batch_pin_fast(b, p->mm, vaddr, npage, dma->prot, &seq);
	mmap_read_lock(p->mm);
	if (!p->mode_known || fast)
		vma = vma_lookup(p->mm, fm_compat_untagged_addr(p->mm, vaddr));
	if (!p->mode_known) {
		dma->folio_pins = vma && fm_filepin_applies(vma, write);
		p->mode_known = true;
	}
	if (n > 0) {
		if (dma->folio_pins || !fm_fast_pins_valid(p->mm, vma, vaddr, n, seq, write)) {
			/* Rare: start over under the lock. */
			unpin_user_pages(b->pages, n);
			n = 0;
		}
	} else if (fast && !dma->folio_pins) {
		n = fm_batch_pin_fast_locked(b, p->mm, vma, vaddr, npage, dma->prot);
	}
	if (n > 0) {
		mmap_read_unlock(p->mm);
		fm_batch_reset(b);
		fm_batch_pages_to_runs(b, n);
		return n;
	}
	if (dma->folio_pins) {
		unsigned long first, want = min_t(unsigned long, npage, FM_FILEPIN_PAGES);

		/* Drops mmap_lock: the inode lock must not nest inside it. */
		n = fm_filepin(p->mm, vaddr, want, write, b->folios, b->capacity, &first);
		if (n > 0) {
			fm_batch_reset(b);
			fm_batch_folios_to_runs(b, n, first, want);
			p->iommu->stats.folio_pinned_pages += b->size;
			return b->size;
		}
		mmap_read_lock(p->mm);
	}
	n = fm_batch_fill_locked(b, p->mm, vaddr, npage, dma->prot);
	mmap_read_unlock(p->mm);
	if (n > 0 && dma->folio_pins && !b->pfnmap)
		fm_batch_one_pin_per_folio(b);
	return n;
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
static int fm_batch_charge(struct fm_pinner *p)
{
	struct fm_batch *b = &p->batch;
	struct fm_dma *dma = p->dma;
	dma_addr_t iova = p->run_iova + (p->run_npage << PAGE_SHIFT);
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

	ret = fm_lock_acct(dma, charge, false);
	if (ret == -ENOMEM)
		pr_warn_ratelimited("foliomap: %s (%d): RLIMIT_MEMLOCK (%lu) exceeded\n",
				    dma->task->comm, task_pid_nr(dma->task),
				    task_rlimit(dma->task, RLIMIT_MEMLOCK));
	return ret;
}

/*
 * Unpin the unconsumed part of the batch, charged or not: run @r from its
 * page @off on, and every later run. It sits right after the open run.
 */
static void fm_batch_release(struct fm_pinner *p, unsigned long r, unsigned long off,
			     bool charged)
{
	struct fm_batch *b = &p->batch;
	dma_addr_t iova = p->run_iova + (p->run_npage << PAGE_SHIFT);

	for (; r < b->nr_runs; r++, off = 0) {
		unsigned long npage = b->runs[r].npage - off;

		fm_unpin_run(p->dma, iova, b->runs[r].pfn + off, npage, charged);
		iova += npage << PAGE_SHIFT;
	}
	b->nr_runs = 0;
	b->size = 0;
}

void fm_rec_free(struct fm_dma *dma)
{
	if (dma->rec && dma->rec != &dma->rec_one)
		kvfree(dma->rec);
	dma->rec = NULL;
	dma->rec_nr = 0;
	dma->rec_max = 0;
	dma->rec_pages = 0;
	dma->rec_dropped = false;
}

bool fm_rec_covers(struct fm_dma *dma, size_t size)
{
	return dma->rec && !dma->rec_dropped && size &&
	       (size_t)dma->rec_pages << PAGE_SHIFT == size;
}

/* Forget the record for good (until the next pin of the whole dma). */
static void fm_rec_drop(struct fm_dma *dma)
{
	/* fm_rec_reserve() fails the run instead (fm_dma.folio_pins). */
	WARN_ON_ONCE(dma->folio_pins);
	fm_rec_free(dma);
	dma->rec_dropped = true;
}

static bool fm_rec_joins(struct fm_dma *dma, unsigned long pfn)
{
	struct fm_run *last = dma->rec_nr ? &dma->rec[dma->rec_nr - 1] : NULL;

	return last && last->pfn + last->npage == pfn;
}

/*
 * Make room for a run starting at @pfn before it is mapped. The first run
 * goes into the dma itself (a small map allocates nothing for its record);
 * then the record grows by doubling up to its bound, one entry per
 * FM_REC_PAGES_PER_ENTRY pages of the dma; past it, or without memory, the
 * dma has no record, unless its pins are per folio: then the run cannot be
 * taken (-ENOMEM).
 */
static int fm_rec_reserve(struct fm_dma *dma, unsigned long pfn)
{
	unsigned long pages = dma->size >> PAGE_SHIFT, bound, want;
	struct fm_run *rec;

	if (dma->rec_dropped || dma->rec_nr < dma->rec_max || fm_rec_joins(dma, pfn))
		return 0;
	if (!dma->rec) {
		dma->rec = &dma->rec_one;
		dma->rec_max = 1;
		return 0;
	}

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

/*
 * Append a run just mapped in every domain (fm_rec_reserve() made room).
 * A run only joins the last when disable_hugepages maps page by page,
 * which folio pins never do: a joined entry never holds two pins on one
 * folio.
 */
static void fm_rec_add(struct fm_dma *dma, unsigned long pfn, unsigned long npage)
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

	ret = fm_rec_reserve(p->dma, p->run_pfn);
	if (ret)
		return ret;
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
	if (!p->dma->folio_pins || p->batch.pfnmap || !p->run_tail_pinned)
		return;
	if (page_folio(pfn_to_page(pfn)) == page_folio(pfn_to_page(pfn - 1)))
		unpin_user_page(pfn_to_page(pfn));
}

/*
 * Feed the charged batch into runs, mapping each run that cannot grow.
 * With disable_hugepages every page is a run of its own, as in stock.
 */
static int fm_batch_map(struct fm_pinner *p)
{
	bool single = p->single;
	struct fm_batch *b = &p->batch;
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
	fm_batch_init(&p->batch, left);

	while (left) {
		unsigned long offset = p->run_iova - dma->iova + (p->run_npage << PAGE_SHIFT);
		long n;

		/* A killed process must not wait for gigabytes to be pinned. */
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			break;
		}
		cond_resched();

		n = fm_pinner_fill(p, dma->vaddr + offset, left);
		if (n < 0) {
			ret = n;
			break;
		}
		p->iommu->stats.batches++;
		p->iommu->stats.batch_pages += n;
		ret = fm_batch_charge(p);
		if (ret) {
			fm_batch_release(p, 0, 0, false);
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
	struct fm_batch b;
	long ret;

	fm_batch_init(&b, 1);
	mmap_read_lock(dma->mm);
	ret = fm_batch_fill_locked(&b, dma->mm, vaddr, 1, dma->prot);
	mmap_read_unlock(dma->mm);
	if (ret < 0)
		return ret;
	if (b.pfnmap)
		dma->has_pfnmap = true;
	*pfn = b.runs[0].pfn;
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

	/*
	 * In upstream's order (6.18+, stock 7.x): size, then wrap-around
	 * (the last byte may be the last address, but nothing may wrap),
	 * then access, then alignment.
	 */
	if (!size)
		return -EINVAL;
	if (iova + size - 1 < iova || vaddr + size - 1 < vaddr)
		return -EOVERFLOW;
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
	if ((iova | vaddr | size) & (pgsize - 1))
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

	/* With a record: one iommu_map() per run, no page-table walk. */
	if (fm_rec_covers(dma, dma->size)) {
		unsigned int i;

		for (i = 0; i < dma->rec_nr; i++) {
			size_t len = dma->rec[i].npage << PAGE_SHIFT;
			int ret = fm_compat_iommu_map(dst->domain, dma->iova + off,
						      PFN_PHYS(dma->rec[i].pfn), len, prot,
						      GFP_KERNEL_ACCOUNT);

			if (ret)
				return ret;
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
