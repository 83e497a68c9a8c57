// SPDX-License-Identifier: GPL-2.0-only
/*
 * Pinning hugetlbfs memory one huge page at a time.
 *
 * GUP asked for the pages of a huge page pins each 4K page and writes a
 * pointer for each: 262144 of them for a 1G page, which the batch then
 * scans back into the one run they always are. A hugetlb vma maps each of
 * its huge pages with one leaf entry, whole and in order, and its bounds
 * are huge-page aligned (munmap, mprotect and mremap refuse to cut a huge
 * page). So one GUP of the first page of each huge page segment (the
 * locked walk, as stock pins: the fault, userfaultfd, NUMA policy,
 * reservations, FOLL_LONGTERM migration and every vma check are GUP's)
 * finds the folio, and the rest of the segment is that folio's following
 * pages, up to the end of the huge page, of the vma found under this
 * mmap_lock and of the request, whichever comes first.
 *
 * The pin GUP took is the segment's one folio pin (filepin.c explains
 * folio pins): the dma has them from its first fill on. A folio that is
 * not the hugetlb folio the walk should have found, or too short for the
 * segment, ends the batch there; the locked walk of the next fill then
 * pins page by page.
 *
 * Each segment's GUP may fault a huge page in, zeroing it under mmap_lock.
 * Stock holds the lock for at most one such fault per batch; a fill here
 * goes on to the next segment only while nobody waits for the lock and
 * the CPU is not wanted, so that a writer (mmap or munmap by another
 * thread of the VMM) waits no longer than it would under stock.
 */
#include <linux/hugetlb.h>
#include <linux/mmap_lock.h>
#include <linux/sched/signal.h>
#include <linux/sizes.h>

#include "pin.h"

/* Pages per fill, charged and mapped at once: 1 GiB, one 1G folio. */
#define FM_HUGEPIN_PAGES	(SZ_1G >> PAGE_SHIFT)

bool fm_hugepin_applies(struct vm_area_struct *vma)
{
	mmap_assert_locked(vma->vm_mm);
	return is_vm_hugetlb_page(vma) && !(vma->vm_flags & (VM_IO | VM_PFNMAP));
}

/*
 * Under mmap_read_lock: the pages of the huge page segment at @addr
 * (untagged) of @vma, up to @end, pinned once into @b. Returns the number
 * of pages (> 0), or what GUP returned (0 or -errno) with nothing pinned.
 */
static long fm_hugepin_segment(struct fm_batch *b, struct vm_area_struct *vma,
			       unsigned long addr, unsigned long end, unsigned int gup_flags)
{
	unsigned long hsize = huge_page_size(hstate_vma(vma));
	unsigned long seg_end = min3(round_down(addr, hsize) + hsize, vma->vm_end, end);
	unsigned long npage = (seg_end - addr) >> PAGE_SHIFT;
	struct folio *folio;
	struct page *page;
	long ret;

	if (fm_inject(FM_INJECT_GUP))
		ret = -ENOMEM;
	else
		ret = fm_compat_pin_user_pages_remote(vma->vm_mm, addr, 1, gup_flags, &page);
	if (ret != 1)
		return ret;
	folio = page_folio(page);
	if (WARN_ON_ONCE(!folio_test_hugetlb(folio) ||
			 folio_page_idx(folio, page) + npage > folio_nr_pages(folio))) {
		unpin_user_page(page);
		return 0;
	}
	fm_batch_add(b, page_to_pfn(page), npage);
	return npage;
}

long fm_hugepin(struct fm_batch *b, struct mm_struct *mm, unsigned long vaddr,
		unsigned long npage, unsigned int gup_flags)
{
	unsigned long addr = fm_compat_untagged_addr(mm, vaddr);
	unsigned long end = addr + (min_t(unsigned long, npage, FM_HUGEPIN_PAGES) << PAGE_SHIFT);
	struct vm_area_struct *vma = NULL;
	long ret = 0;

	mmap_assert_locked(mm);
	fm_batch_reset(b);
	/* A segment adds at most one run: stop while one more fits. */
	while (addr < end && b->nr_runs < b->capacity) {
		if (b->size && (fatal_signal_pending(current) || need_resched() ||
				mmap_lock_is_contended(mm)))
			break;
		if (!vma || addr >= vma->vm_end) {
			vma = vma_lookup(mm, addr);
			if (!vma || !fm_hugepin_applies(vma))
				break;
		}
		ret = fm_hugepin_segment(b, vma, addr, end, gup_flags);
		if (ret <= 0)
			break;
		addr += ret << PAGE_SHIFT;
	}
	return b->size ? b->size : ret;
}
