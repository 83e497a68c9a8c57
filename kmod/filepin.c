// SPDX-License-Identifier: GPL-2.0-only
/*
 * Pinning shared hugetlbfs memory by folio.
 *
 * GUP pins a 2M hugetlb folio 512 times, once per 4K page, and returns 512
 * page pointers that the batch then scans. In a MAP_SHARED hugetlbfs
 * mapping (memfd_create(MFD_HUGETLB), a hugetlbfs file, SHM_HUGETLB) the
 * pages the vma maps are the file's page-cache folios, so where the kernel
 * has memfd_pin_folios() they can be pinned from the file instead: one pin
 * and one pointer per folio, with the same long-term pin rules (movable
 * folios are migrated first).
 *
 * The pins of a mapping whose first page lies in such a vma are counted
 * per folio ("folio pins", fm_dma.folio_pins): each run of the record holds
 * exactly one pin on every folio it touches. GUP batches of such a mapping
 * (a folio not yet faulted in, another vma further on) are brought to the
 * same form by dropping the extra pins (batch.c). run.c keeps the rule
 * when runs join, release.c releases one pin per folio and run, and the
 * record, which gives the runs back, is never dropped for such a mapping.
 *
 * Only folios that are already in the page cache (and not poisoned) are
 * pinned here, under the inode lock that hole punching needs. An absent
 * folio is left to GUP, which faults it in through the vma as stock does
 * (NUMA policy, hugetlb reservation and subpool, cgroup, userfaultfd),
 * whereas memfd_pin_folios() would allocate it on the local node outside
 * all of these.
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/hugetlb.h>
#include <linux/mmu_context.h>
#include <linux/pagemap.h>
#include <linux/userfaultfd_k.h>

#include "foliomap.h"

/*
 * What GUP would allow for this access (check_vma_flags()), and a vma
 * whose pages are the file's own: shared hugetlbfs, no userfaultfd (whose
 * faults GUP would raise and a page-cache pin would not).
 */
static bool fm_filepin_vma_ok(struct vm_area_struct *vma, bool write, bool foreign)
{
	vm_flags_t flags = vma->vm_flags;

	/* Without memfd_pin_folios() (6.1), GUP pins everything. */
	if (!fm_compat_have_memfd_pin_folios())
		return false;
	if (!vma->vm_file || !is_file_hugepages(vma->vm_file))
		return false;
	if (!(flags & VM_SHARED) || (flags & (VM_IO | VM_PFNMAP)))
		return false;
	if (!(flags & (write ? VM_WRITE : VM_READ)))
		return false;
	if (userfaultfd_armed(vma))
		return false;
	return arch_vma_access_permitted(vma, write, false, foreign);
}

/* The vma at @vaddr if fm_filepin() may pin from it, else NULL; mmap_lock held. */
static struct vm_area_struct *fm_filepin_vma(struct mm_struct *mm, unsigned long vaddr,
					     bool write)
{
	struct vm_area_struct *vma = vma_lookup(mm, fm_compat_untagged_addr(mm, vaddr));

	return vma && fm_filepin_vma_ok(vma, write, mm != current->mm) ? vma : NULL;
}

bool fm_filepin_applies(struct vm_area_struct *vma, bool write)
{
	mmap_assert_locked(vma->vm_mm);
	return fm_filepin_vma_ok(vma, write, vma->vm_mm != current->mm);
}

/*
 * How many of the @npage pages from page index @index of @file are in the
 * page cache, without a gap, below i_size and not hardware-poisoned (GUP
 * refuses a poisoned folio: it is left to GUP to report). The caller holds
 * the inode lock, so no hole can appear before the pin.
 */
static unsigned long fm_filepin_present(struct file *file, pgoff_t index,
					unsigned long npage)
{
	struct address_space *mapping = file->f_mapping;
	pgoff_t eof = i_size_read(file_inode(file)) >> PAGE_SHIFT;
	pgoff_t last, next;
	struct folio_batch fbatch;
	bool stop = false;

	if (index >= eof)
		return 0;
	last = min_t(pgoff_t, index + npage, eof) - 1;
	/* Folios sit at their aligned index; a lookup inside one finds nothing. */
	next = round_down(index, pages_per_huge_page(hstate_file(file)));

	folio_batch_init(&fbatch);
	while (!stop && next <= last) {
		unsigned int i, nr = filemap_get_folios_contig(mapping, &next, last, &fbatch);

		for (i = 0; i < nr; i++) {
			if (folio_test_hwpoison(fbatch.folios[i])) {
				next = fbatch.folios[i]->index;
				stop = true;
				break;
			}
		}
		folio_batch_release(&fbatch);
		if (!nr)
			break;
	}
	return next > index ? min(next, last + 1) - index : 0;
}

long fm_filepin(struct mm_struct *mm, unsigned long vaddr, unsigned long npage,
		bool write, struct folio **folios, unsigned int max_folios,
		unsigned long *first)
{
	struct vm_area_struct *vma;
	unsigned long addr;
	struct file *file;
	pgoff_t index, offset;
	long ret;

	mmap_assert_locked(mm);
	vma = fm_filepin_vma(mm, vaddr, write);
	if (!vma) {
		mmap_read_unlock(mm);
		return 0;
	}
	addr = fm_compat_untagged_addr(mm, vaddr);
	file = get_file(vma->vm_file);
	index = vma->vm_pgoff + ((addr - vma->vm_start) >> PAGE_SHIFT);
	npage = min(npage, (vma->vm_end - addr) >> PAGE_SHIFT);
	mmap_read_unlock(mm);

	/*
	 * The folios are those the vma mapped when it was looked up; a
	 * concurrent munmap() leaves them pinned as it would leave GUP's.
	 * Hole punching and truncation take the inode lock exclusively:
	 * held shared, every folio found present is still there for
	 * memfd_pin_folios(), which therefore never allocates one (that
	 * would bypass the vma's reservation, subpool and cgroup charge).
	 *
	 * Seals are added under the inode lock too. GUP pins under
	 * mmap_lock, so a writable vma exists when it pins and F_SEAL_WRITE
	 * then fails (the pins are seen); here the vma may have gone since
	 * the lookup and a seal come in between. So a writable pin needs a
	 * writable shared mapping of the file to exist now: then F_SEAL_WRITE
	 * is not set (it needs every writable mapping gone and keeps new ones
	 * out), and an F_SEAL_WRITE after the unlock sees these pins.
	 */
	inode_lock_shared(file_inode(file));
	if (write && !mapping_writably_mapped(file->f_mapping))
		npage = 0;
	else
		npage = fm_filepin_present(file, index, npage);
	ret = 0;
	if (npage)
		ret = fm_compat_memfd_pin_folios(file, (loff_t)index << PAGE_SHIFT,
						 ((loff_t)(index + npage) << PAGE_SHIFT) - 1,
						 folios, max_folios, &offset);
	inode_unlock_shared(file_inode(file));
	fput(file);
	/* Any failure is GUP's to report, as stock would. */
	if (ret <= 0)
		return 0;
	*first = offset >> PAGE_SHIFT;
	return ret;
}
