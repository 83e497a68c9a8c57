// SPDX-License-Identifier: GPL-2.0-only
/*
 * Batches: the first step of the pin pipeline (pin.h). One mmap_read_lock
 * round trip fills a batch of up to FM_BATCH_PAGES pages at a vaddr and
 * cuts it into physically contiguous runs in the same pass:
 *
 *   GUP-fast   the present pages of the caller's own mm, confirmed against
 *              the vmas under the lock (fm_batch_pin_fast() and friends);
 *   filepin    shared hugetlbfs, one pin per folio (filepin.c);
 *   hugepin    the rest of hugetlbfs, one GUP and pin per huge page
 *              (hugepin.c);
 *   GUP        the locked pin_user_pages_remote() walk pins the rest, the
 *              way stock pins (fm_batch_fill_locked());
 *   PFNMAP     device memory, looked up one leaf entry at a time
 *              (fm_fill_pfnmap()), pinned by nobody.
 *
 * What the batch holds next is charge.c's, then run.c's.
 */
#include <linux/sched/signal.h>
#include <linux/sizes.h>
#include <linux/slab.h>

#include "pin.h"

/*
 * GUP-fast and its confirmation under mmap_lock cost more than the locked
 * walk for a page or two, less from about this many pages on.
 */
#define FM_FAST_MIN_PAGES	8
/*
 * GUP-fast keeps interrupts off from the first page it is asked for to the
 * last (gup_fast()). On PREEMPT_RT that also keeps the CPU from its
 * SCHED_FIFO tasks, so there a batch asks it for 64 pages at a time (a
 * whole 1024-page batch held interrupts off for about 0.8 ms of guest time
 * under TCG). Elsewhere a batch is one call: chunks made a 4K map about 25%
 * slower and split each THP's one leaf into several walks.
 */
#define FM_FAST_CHUNK		(IS_ENABLED(CONFIG_PREEMPT_RT) ? 64UL : ULONG_MAX)
/*
 * Memory GUP-fast cannot pin (never touched, or write-protected by a
 * fork) comes in long stretches: after a batch it could not pin, skip it
 * for 1, 2, 4 ... up to this many batches before trying again.
 */
#define FM_FAST_BACKOFF_MAX	8
/*
 * PFNMAP leaf lookups per batch under one mmap_lock: 1 GiB of ptes, or as
 * many GiB of huge leaves (a GPU's 64 GiB BAR of 1G leaves is one batch).
 */
#define FM_PFNMAP_LOOKUPS	(SZ_1G >> PAGE_SHIFT)
/* Pages per memfd_pin_folios() batch, charged at once. */
#define FM_FILEPIN_PAGES	(SZ_1G >> PAGE_SHIFT)

/*
 * A batch sized for a dma of @npage pages: no bigger than it needs. Sets
 * every field but the inline arrays, so that a batch on the stack may be
 * __uninitialized (see fm_pinner_init()).
 */
void fm_batch_init(struct fm_batch *b, unsigned long npage)
{
	unsigned long want = min_t(unsigned long, npage, FM_BATCH_PAGES);

	fm_batch_reset(b);
	b->pages = b->inline_pages;
	b->runs = b->inline_runs;
	b->capacity = FM_BATCH_INLINE;
	if (want <= FM_BATCH_INLINE)
		return;

	/* Charged to the caller's memcg, as every allocation made for it. */
	b->pages = kmalloc_array(want, sizeof(*b->pages), GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	b->runs = kmalloc_array(want, sizeof(*b->runs), GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (b->pages && b->runs) {
		b->capacity = want;
		return;
	}
	kfree(b->pages);
	kfree(b->runs);
	b->pages = b->inline_pages;
	b->runs = b->inline_runs;
}

void fm_batch_fini(struct fm_batch *b)
{
	if (b->pages != b->inline_pages) {
		kfree(b->pages);
		kfree(b->runs);
	}
}

/*
 * The one pass over GUP's output: consecutive page pointers whose pfns
 * follow each other become one run.
 */
static void fm_batch_pages_to_runs(struct fm_batch *b, unsigned long n)
{
	struct page **pages = b->pages, **end = pages + n;
	/* Where fewer than four pointers are left. */
	struct page **stop = n > 3 ? end - 3 : pages;

	while (pages < end) {
		struct page **p = pages + 1, *want = *pages + 1;

		/*
		 * Per 4K page of a large folio this is the map's hottest loop:
		 * four pointers a round, then one at a time.
		 */
		while (p < stop && p[0] == want && p[1] == want + 1 &&
		       p[2] == want + 2 && p[3] == want + 3) {
			p += 4;
			want += 4;
		}
		while (p < end && *p == want) {
			p++;
			want++;
		}
		fm_batch_add(b, page_to_pfn(*pages), p - pages);
		pages = p;
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
 * huge (PMD/PUD) entry of a BAR gives its whole block per lookup. Only
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

	unsigned long lookups = 0;

	b->pfnmap = true;
	while (b->size < npage && lookups++ < FM_PFNMAP_LOOKUPS) {
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
		/* As much of the leaf as has no struct page, without a new walk. */
		ok = 0;
		while (ok < n) {
			unsigned long m = fm_invalid_pfns(pfn + ok, n - ok);

			if (!m)
				break;
			ok += m;
		}
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

unsigned int fm_gup_flags(int prot)
{
	return FOLL_LONGTERM | ((prot & IOMMU_WRITE) ? FOLL_WRITE : 0);
}

/*
 * GUP pinned nothing at @vaddr (@gup: 0 or -errno), with mmap_read_lock
 * held: a VM_PFNMAP range gives its pfns to @b instead (fm_fill_pfnmap()).
 */
static long fm_batch_fill_not_gup(struct fm_batch *b, struct mm_struct *mm,
				  unsigned long vaddr, unsigned long npage, int prot, long gup)
{
	long found = fm_fill_pfnmap(b, mm, vaddr, npage, prot & IOMMU_WRITE);

	if (found)
		return found;
	b->pfnmap = false;
	return gup ? gup : -EFAULT;
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
	unsigned long nr = min(npage, b->capacity);
	bool pfnmap_first = b->pfnmap;
	long ret;

	fm_batch_reset(b);
	/*
	 * After device memory, most likely more of it (a BAR of 4K entries
	 * is a batch per GiB): look it up first rather than after GUP
	 * refused it. Anything else is GUP's, as always.
	 */
	if (pfnmap_first) {
		ret = fm_fill_pfnmap(b, mm, vaddr, npage, prot & IOMMU_WRITE);
		if (ret)
			return ret;
		b->pfnmap = false;
	}
	if (nr > 1 && fm_inject(FM_INJECT_GUP_SHORT))
		nr /= 2;

	if (fm_inject(FM_INJECT_GUP))
		ret = -ENOMEM;
	else
		ret = fm_compat_pin_user_pages_remote(mm, vaddr, nr, fm_gup_flags(prot),
						      b->pages);
	if (ret > 0) {
		fm_batch_pages_to_runs(b, ret);
		return ret;
	}
	return fm_batch_fill_not_gup(b, mm, vaddr, npage, prot, ret);
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
 * GUP-fast over @nr pages at @vaddr in chunks of FM_FAST_CHUNK, into
 * @pages; @locked: pin_user_pages_fast_only() (6.1, under mmap_lock), else
 * pin_user_pages_fast(). Stops at the first chunk not pinned whole. The
 * number of pages pinned, from @vaddr on, or 0.
 */
static long fm_pin_fast_chunks(unsigned long vaddr, unsigned long nr, unsigned int gup_flags,
			       struct page **pages, bool locked)
{
	unsigned long done = 0, n, at;
	long ret;

	while (done < nr) {
		n = min_t(unsigned long, nr - done, FM_FAST_CHUNK);
		at = vaddr + (done << PAGE_SHIFT);
		ret = locked ? fm_compat_pin_fast_only(at, n, gup_flags, pages + done) :
			       pin_user_pages_fast(at, n, gup_flags, pages + done);
		if (ret <= 0)
			break;
		done += ret;
		if (ret < n)
			break;
	}
	return done;
}

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
	if (mm != current->mm || !fm_compat_mm_speculate_begin(mm, seq))
		return 0;
	return fm_pin_fast_chunks(vaddr, min(npage, b->capacity),
				  fm_gup_flags(prot) | FOLL_NOFAULT, b->pages, false);
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

	if (mm != current->mm || !fm_compat_have_pin_fast_only())
		return 0;
	end = fm_vmas_pinnable(mm, vma, addr, addr + (min(npage, b->capacity) << PAGE_SHIFT),
			       prot & IOMMU_WRITE);
	if (end == addr)
		return 0;
	return fm_pin_fast_chunks(vaddr, (end - addr) >> PAGE_SHIFT, fm_gup_flags(prot),
				  b->pages, true);
}

/*
 * Should this batch try GUP-fast? A failed try costs a walk that stops at
 * the first page and, inside pin_user_pages_fast(), an mmap_lock round
 * trip of its own before the locked walk does the work.
 */
static bool fm_fast_wanted(struct fm_pinner *p, unsigned long npage)
{
	/* Nor after a batch of device memory, which GUP-fast refuses. */
	if (p->dma->folio_pins || npage < FM_FAST_MIN_PAGES || p->batch->pfnmap)
		return false;
	if (p->fast_skip) {
		p->fast_skip--;
		return false;
	}
	return true;
}

/* What the try gave: back off further after a miss, reset after a hit. */
static void fm_fast_result(struct fm_pinner *p, long n)
{
	if (n > 0) {
		p->fast_backoff = 1;
		return;
	}
	p->fast_skip = p->fast_backoff;
	p->fast_backoff = min_t(unsigned int, p->fast_backoff * 2, FM_FAST_BACKOFF_MAX);
}

/*
 * Under mmap_read_lock: is any of [@addr, @addr + @len) (untagged) in a
 * vma with any of @flags (VM_HUGETLB: hugetlbfs)? Holes are not: the fill
 * fails there, as it would anyway.
 */
bool fm_range_has_vm_flags(struct mm_struct *mm, unsigned long addr, unsigned long len,
			   vm_flags_t flags)
{
	unsigned long last = addr + len - 1;
	struct vm_area_struct *vma;

	for (vma = find_vma(mm, addr); vma && vma->vm_start <= last;
	     vma = find_vma(mm, vma->vm_end)) {
		if (vma->vm_flags & flags)
			return true;
		if (vma->vm_end - 1 >= last)
			break;
	}
	return false;
}

/*
 * Under mmap_read_lock: does the dma take folio pins (@vma: at its
 * start)? Those of hugetlbfs memory: filepin.c's or hugepin.c's.
 */
static void fm_pinner_set_mode(struct fm_pinner *p, struct vm_area_struct *vma)
{
	p->dma->folio_pins = vma && (fm_filepin_applies(vma, p->dma->prot & IOMMU_WRITE) ||
				     fm_hugepin_applies(vma));
	p->mode_known = true;
}

/*
 * Fill the pinner's batch from @vaddr, under one mmap_read_lock round trip.
 * GUP-fast pins first where it can (above); under the lock, the first fill
 * decides whether the dma has folio pins (filepin.c). A mapping with folio
 * pins takes what filepin.c can pin by folio, then what hugepin.c can pin
 * by huge page (private hugetlbfs, absent folios), and leaves the rest
 * (other vmas, or an error to report) to GUP, whose pins are then brought
 * to one per folio.
 * The locked walk pins what is left, the way stock pins. After a batch
 * GUP-fast could not pin, the next ones skip it for a while (above).
 */
long fm_pinner_fill(struct fm_pinner *p, unsigned long vaddr, unsigned long npage)
{
	bool fast = fm_fast_wanted(p, npage);
	bool write = p->dma->prot & IOMMU_WRITE;
	struct fm_batch *b = p->batch;
	struct fm_dma *dma = p->dma;
	struct vm_area_struct *vma = NULL;
	unsigned int seq;
	long n = 0;

	if (fast)
		n = fm_batch_pin_fast(b, p->mm, vaddr, npage, dma->prot, &seq);
	mmap_read_lock(p->mm);
	/*
	 * A helper thread (parallel.c) leaves hugetlbfs and device memory to
	 * the caller, which pins or looks it up as a serial map does (by folio
	 * where the dma takes folio pins, filepin.c): helpers only start for a
	 * range of neither, and this catches either mapped there meanwhile.
	 * Checked under the lock the fill holds, it covers every vma the fill
	 * can reach.
	 */
	if (p->ordinary_only &&
	    fm_range_has_vm_flags(p->mm, fm_compat_untagged_addr(p->mm, vaddr),
				  npage << PAGE_SHIFT, VM_HUGETLB | VM_PFNMAP | VM_IO)) {
		mmap_read_unlock(p->mm);
		if (n > 0)
			unpin_user_pages(b->pages, n);
		return -EXDEV;
	}
	if (!p->mode_known || fast)
		vma = vma_lookup(p->mm, fm_compat_untagged_addr(p->mm, vaddr));
	if (!p->mode_known)
		fm_pinner_set_mode(p, vma);
	if (n > 0) {
		if (dma->folio_pins || !fm_fast_pins_valid(p->mm, vma, vaddr, n, seq, write)) {
			/* Rare: start over under the lock. */
			unpin_user_pages(b->pages, n);
			n = 0;
		}
	} else if (fast && !dma->folio_pins) {
		n = fm_batch_pin_fast_locked(b, p->mm, vma, vaddr, npage, dma->prot);
	}
	if (fast)
		fm_fast_result(p, n);
	if (n > 0) {
		mmap_read_unlock(p->mm);
		fm_batch_reset(b);
		fm_batch_pages_to_runs(b, n);
		return n;
	}
	/*
	 * Not for a helper: it refuses hugetlbfs, whose folios these are, and
	 * fm_filepin() drops the lock its check was made under.
	 */
	if (dma->folio_pins && !p->ordinary_only) {
		unsigned long first, want = min_t(unsigned long, npage, FM_FILEPIN_PAGES);

		/* Drops mmap_lock: the inode lock must not nest inside it. */
		n = fm_filepin(p->mm, vaddr, want, write, b->folios, b->capacity, &first);
		if (n > 0) {
			fm_batch_reset(b);
			fm_batch_folios_to_runs(b, n, first, want);
			b->folio_pinned = true;
			p->probe.slow += b->size;
			return b->size;
		}
		mmap_read_lock(p->mm);
		/* Whatever filepin.c left in hugetlbfs: a pin per huge page. */
		n = fm_hugepin(b, p->mm, vaddr, npage, fm_gup_flags(dma->prot));
		if (n > 0) {
			mmap_read_unlock(p->mm);
			p->probe.slow += n;
			return n;
		}
	}
	n = fm_batch_fill_locked(b, p->mm, vaddr, npage, dma->prot);
	mmap_read_unlock(p->mm);
	if (n > 0 && dma->folio_pins && !b->pfnmap)
		fm_batch_one_pin_per_folio(b);
	/*
	 * Not GUP-fast's: for parallel.c's judgement of the work. Device
	 * memory is looked up in microseconds per GiB: not work for helpers.
	 */
	if (n > 0 && !b->pfnmap)
		p->probe.slow += n;
	return n;
}

/*
 * One page for pin_pages, pinned as the locked walk pins (or looked up in
 * a VM_PFNMAP range): GUP writes the one page pointer straight here, and
 * only what GUP refuses goes through a batch.
 */
int fm_pin_one(struct fm_dma *dma, unsigned long vaddr, unsigned long *pfn)
{
	struct fm_batch b __uninitialized;
	struct page *page;
	long ret;

	mmap_read_lock(dma->mm);
	if (fm_inject(FM_INJECT_GUP))
		ret = -ENOMEM;
	else
		ret = fm_compat_pin_user_pages_remote(dma->mm, vaddr, 1,
						      fm_gup_flags(dma->prot), &page);
	if (ret == 1) {
		mmap_read_unlock(dma->mm);
		*pfn = page_to_pfn(page);
		return 0;
	}
	fm_batch_init(&b, 1);
	ret = fm_batch_fill_not_gup(&b, dma->mm, vaddr, 1, dma->prot, ret);
	mmap_read_unlock(dma->mm);
	if (ret < 0)
		return ret;
	if (b.pfnmap)
		dma->has_pfnmap = true;
	*pfn = b.runs[0].pfn;
	return 0;
}
