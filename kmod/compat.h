/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Every difference between the kernels foliomap supports lives here, and
 * nothing else does. The rest of the module calls the fm_compat_*() helpers
 * and tests the FM_HAVE_* macros defined below; no other file looks at the
 * kernel version.
 *
 * Supported: Debian 12's 6.1 LTS kernel (linux-image-6.1.0-N-amd64), the
 * 6.12 kernel of Debian 12 and 13 (linux-image-6.12.N+deb12-amd64,
 * linux-image-6.12.N+deb13-amd64) and the 7.x kernels of Debian 13's
 * trixie-backports (linux-binary-7.M.N+deb13-amd64; 7.2 and 7.3). Each
 * feature macro was checked against each; the private VFIO declarations in
 * vfio_private.h were compared member by member with drivers/vfio/vfio.h of
 * each (struct vfio_iommu_driver_ops and enum vfio_group_type are the same
 * from 6.12 to 7.3).
 *
 *   FM_HAVE_GUP_VMAS              pin_user_pages_remote() takes a vmas array
 *   FM_HAVE_IOMMU_MAP_GFP         iommu_map() takes a gfp_t
 *   FM_HAVE_PAGING_DOMAIN_ALLOC   iommu_paging_domain_alloc(dev), ERR_PTR
 *   FM_HAVE_FOLLOW_PFNMAP         follow_pfnmap_start()/end() (else follow_pte())
 *   FM_HAVE_GROUP_ISOLATED_MSI    iommu_group_has_isolated_msi()
 *   FM_HAVE_UNTAGGED_ADDR_REMOTE  untagged_addr_remote(mm, addr)
 *   FM_HAVE_DRIVER_OPS_NOTIFY     struct vfio_iommu_driver_ops has notify
 *   FM_HAVE_MEMFD_PIN_FOLIOS      memfd_pin_folios() pins a file's folios
 *   FM_HAVE_MM_LOCK_SEQCOUNT      mm->mm_lock_seq is a seqcount_t that every
 *                                 mmap_write_lock() section writes (Debian
 *                                 6.12.117 has it, from 6.13; upstream 6.12
 *                                 has an int: Kbuild looks at the header
 *                                 and defines FM_MM_LOCK_SEQCOUNT_T; 6.1
 *                                 has no per-VMA locks)
 *   FM_HAVE_PIN_FAST_ONLY         pin_user_pages_fast_only(): GUP-fast that
 *                                 never takes mmap_lock (6.1; gone by 6.12)
 *   FM_HAVE_PFNMAP_ADDR_MASK      follow_pfnmap_args.addr_mask: the extent of
 *                                 the leaf entry found (6.15, so 7.x)
 *   FM_HAVE_FOLIO_BATCH_H         struct folio_batch lives in
 *                                 <linux/folio_batch.h> (7.x; <linux/pagevec.h>
 *                                 before, which 7.x no longer has)
 *   FM_HAVE_NTH_PAGE              nth_page() (gone in 7.x, where the memmap
 *                                 of a contiguous pfn range is contiguous)
 *   FM_HAVE_DOMAIN_JOIN           __iommu_get_iommu_dev() names the IOMMU
 *                                 instance behind a device, and
 *                                 IOMMU_CAP_ENFORCE_CACHE_COHERENCY says per
 *                                 device whether enforce_cache_coherency()
 *                                 works: a group can join an existing domain
 *                                 without a domain of its own first (6.12,
 *                                 7.x; 6.1 has neither)
 *
 * Stock type1 behaviour that differs (uAPI answers foliomap gives exactly
 * as the stock driver of the same kernel does):
 *   FM_HAVE_INFO_FULL_WRITEBACK   GET_INFO writes back min(argsz, sizeof(info))
 *                                 bytes, trailing pad included (6.12, 7.x);
 *                                 6.1 writes up to cap_offset, or only the
 *                                 fields before it when argsz ends before it
 *   FM_HAVE_NESTING_EXTENSION     VFIO_TYPE1_NESTING_IOMMU (6) is a uAPI
 *                                 constant and CHECK_EXTENSION answers 1 for
 *                                 it (6.1, 6.12; foliomap refuses it at open
 *                                 and leaves such containers to stock). 7.x
 *                                 renamed it __VFIO_RESERVED_TYPE1_NESTING_IOMMU
 *                                 (still 6): CHECK_EXTENSION answers 0, so no
 *                                 container gets it, and open() would take it
 *                                 as v2
 *   FM_HAVE_USER_WORKER           vhost_task_create(fn, handle_sigkill, arg,
 *                                 name): a worker that is a thread of the
 *                                 calling process (CLONE_THREAD | CLONE_VM,
 *                                 PF_USER_WORKER), ERR_PTR on failure (6.12
 *                                 and 7.x with CONFIG_VHOST_TASK, which
 *                                 Debian's VHOST selects; 6.1 has none, so
 *                                 parallel pinning is not built there)
 *   FM_HAVE_EXTERNAL_ARG_CHECKS   pin_pages refuses npage <= 0 (-EINVAL) and
 *                                 an IOVA range that wraps (-EOVERFLOW) before
 *                                 anything else, and unpin_pages WARNs and
 *                                 returns on such input (7.x; 6.1 and 6.12
 *                                 test npage and prot inside the lock, below)
 *
 * Checked and the same on both, so not here: pin_pages and dma_rw refuse
 * (-EBUSY) while a vaddr is invalid. 6.1's type1 still has code to wait for
 * a new vaddr instead (woken by the notify op), but Debian 6.1 returns
 * -EBUSY before reaching it, and refuses UPDATE_VADDR with emulated groups
 * and attaching while a vaddr is invalid, as 6.12 does.
 */
#ifndef _FOLIOMAP_COMPAT_H
#define _FOLIOMAP_COMPAT_H

#include <linux/version.h>

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 1, 0) && \
	LINUX_VERSION_CODE < KERNEL_VERSION(6, 2, 0)
#define FM_KERNEL_6_1
#elif LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0) && \
	LINUX_VERSION_CODE < KERNEL_VERSION(6, 13, 0)
#define FM_KERNEL_6_12
#elif LINUX_VERSION_CODE >= KERNEL_VERSION(7, 2, 0) && \
	LINUX_VERSION_CODE < KERNEL_VERSION(7, 4, 0)
#define FM_KERNEL_7
#else
/* vfio_private.h matches the VFIO core's private layout of these only. */
#error "foliomap supports Linux 6.1, 6.12, 7.2 and 7.3 only (Debian 12 and 13, trixie-backports)"
#endif

#include <linux/device.h>
#include <linux/iommu.h>
#include <linux/irqdomain.h>
#include <linux/mm.h>
#include <linux/mmzone.h>
#include <linux/overflow.h>
#include <linux/stddef.h>
#include <linux/vfio.h>

#ifdef FM_KERNEL_6_1
#define FM_HAVE_GUP_VMAS
#define FM_HAVE_DRIVER_OPS_NOTIFY
#define FM_HAVE_PIN_FAST_ONLY
#else
#define FM_HAVE_IOMMU_MAP_GFP
#define FM_HAVE_PAGING_DOMAIN_ALLOC
#define FM_HAVE_FOLLOW_PFNMAP
#define FM_HAVE_GROUP_ISOLATED_MSI
#define FM_HAVE_UNTAGGED_ADDR_REMOTE
#define FM_HAVE_INFO_FULL_WRITEBACK
#define FM_HAVE_MEMFD_PIN_FOLIOS
#define FM_HAVE_DOMAIN_JOIN
#ifdef CONFIG_VHOST_TASK
#define FM_HAVE_USER_WORKER
#endif
#if defined(CONFIG_PER_VMA_LOCK) && defined(FM_MM_LOCK_SEQCOUNT_T)
#define FM_HAVE_MM_LOCK_SEQCOUNT
#endif
#endif

#ifdef FM_KERNEL_7
#define FM_HAVE_PFNMAP_ADDR_MASK
#define FM_HAVE_FOLIO_BATCH_H
#define FM_HAVE_EXTERNAL_ARG_CHECKS
#else
#define FM_HAVE_NTH_PAGE
#define FM_HAVE_NESTING_EXTENSION
#endif

#ifdef FM_HAVE_FOLIO_BATCH_H
#include <linux/folio_batch.h>
#else
#include <linux/pagevec.h>
#endif

/* Long-term pin of up to @nr pages of @mm at @start; as GUP returns. */
static inline long fm_compat_pin_user_pages_remote(struct mm_struct *mm,
						   unsigned long start,
						   unsigned long nr,
						   unsigned int gup_flags,
						   struct page **pages)
{
#ifdef FM_HAVE_GUP_VMAS
	return pin_user_pages_remote(mm, start, nr, gup_flags, pages, NULL, NULL);
#else
	return pin_user_pages_remote(mm, start, nr, gup_flags, pages, NULL);
#endif
}

/* 6.1 allocates page tables with GFP_KERNEL whatever the caller wants. */
static inline int fm_compat_iommu_map(struct iommu_domain *domain,
				      unsigned long iova, phys_addr_t paddr,
				      size_t size, int prot, gfp_t gfp)
{
#ifdef FM_HAVE_IOMMU_MAP_GFP
	return iommu_map(domain, iova, paddr, size, prot, gfp);
#else
	return iommu_map(domain, iova, paddr, size, prot);
#endif
}

/*
 * An unmanaged paging domain for the IOMMU behind @dev, or an ERR_PTR.
 * 6.1 allocates per bus (NULL on failure, which stock 6.1 reports as -EIO).
 */
static inline struct iommu_domain *fm_compat_domain_alloc(struct device *dev)
{
#ifdef FM_HAVE_PAGING_DOMAIN_ALLOC
	return iommu_paging_domain_alloc(dev);
#else
	struct iommu_domain *domain = iommu_domain_alloc(dev->bus);

	return domain ? domain : ERR_PTR(-EIO);
#endif
}

#ifndef FM_HAVE_GROUP_ISOLATED_MSI
static inline int fm_compat_dev_intr_remap(struct device *dev, void *data)
{
	return device_iommu_capable(dev, IOMMU_CAP_INTR_REMAP);
}
#endif

/*
 * True when no device of @group can forge MSIs to another's vectors
 * (interrupt remapping or an equivalent). 6.1, as its stock type1: every
 * MSI irq domain remaps, or a device of the group has an IOMMU that remaps
 * interrupts.
 */
static inline bool fm_compat_group_msi_isolated(struct iommu_group *group)
{
#ifdef FM_HAVE_GROUP_ISOLATED_MSI
	return iommu_group_has_isolated_msi(group);
#else
	return irq_domain_check_msi_remap() ||
	       iommu_group_for_each_dev(group, NULL, fm_compat_dev_intr_remap) > 0;
#endif
}

#ifdef FM_HAVE_DOMAIN_JOIN
static inline int fm_compat_dev_cc_missing(struct device *dev, void *data)
{
	return !device_iommu_capable(dev, IOMMU_CAP_ENFORCE_CACHE_COHERENCY);
}

static inline int fm_compat_dev_unit(struct device *dev, void *data)
{
	struct iommu_device **unit = data;
	struct iommu_device *mine = dev->iommu ? __iommu_get_iommu_dev(dev) : NULL;

	if (!mine || (*unit && *unit != mine)) {
		*unit = NULL;
		return 1;	/* not one instance: stop */
	}
	*unit = mine;
	return 0;
}
#endif

/*
 * The IOMMU instance behind every device of @group; NULL when there are
 * several, or when the kernel cannot name it (6.1: the group then always
 * gets a domain of its own first, as in stock).
 */
static inline struct iommu_device *fm_compat_group_unit(struct iommu_group *group)
{
#ifdef FM_HAVE_DOMAIN_JOIN
	struct iommu_device *unit = NULL;

	iommu_group_for_each_dev(group, &unit, fm_compat_dev_unit);
	return unit;
#else
	return NULL;
#endif
}

/*
 * Whether a domain of @group's own would block no-snoop DMA once its
 * driver's enforce_cache_coherency() ran on it: true when every device of
 * the group can (always false on 6.1, where nothing asks).
 */
static inline bool fm_compat_group_cc_capable(struct iommu_group *group)
{
#ifdef FM_HAVE_DOMAIN_JOIN
	return !iommu_group_for_each_dev(group, NULL, fm_compat_dev_cc_missing);
#else
	return false;
#endif
}

/* @addr of @mm without its tag bits (x86 LAM on 6.12; none on 6.1). */
static inline unsigned long fm_compat_untagged_addr(struct mm_struct *mm,
						    unsigned long addr)
{
#ifdef FM_HAVE_UNTAGGED_ADDR_REMOTE
	return untagged_addr_remote(mm, addr);
#else
	return untagged_addr(addr);
#endif
}

/*
 * The pfn mapped at @addr of the VM_PFNMAP @vma and whether its entry is
 * writable, read under the page table lock, which is dropped again before
 * returning (as stock type1 does: the pfn is device memory, not a page
 * whose lifetime a pin would extend). mmap_lock held by the caller.
 * @npage: how many pages from @addr on the same leaf entry maps, with
 * pfns following each other from @pfn.
 * Returns 0, or -errno when nothing is mapped there (the caller faults it
 * in and retries).
 *
 * 7.x reports the leaf's extent in args.addr_mask: a PUD leaf answers for
 * the rest of its 1G block, a PMD leaf for the rest of its 2M block.
 * 6.12's follow_pfnmap_start() reports no extent (addr_mask appears in
 * 6.15), but it leaves args.ptep NULL exactly when the entry is a PMD or
 * PUD leaf (pfnmap_args_setup() in mm/memory.c), and either leaf maps at
 * least the whole PMD-aligned block around @addr contiguously. A pte
 * answers for one page; so does 6.1's follow_pte(), which only ever
 * returns ptes.
 */
static inline int fm_compat_follow_pfnmap(struct vm_area_struct *vma,
					  unsigned long addr, unsigned long *pfn,
					  bool *writable, unsigned long *npage)
{
#ifdef FM_HAVE_FOLLOW_PFNMAP
	struct follow_pfnmap_args args = { .vma = vma, .address = addr };
	int ret = follow_pfnmap_start(&args);

	if (ret)
		return ret;
	*pfn = args.pfn;
	*writable = args.writable;
#ifdef FM_HAVE_PFNMAP_ADDR_MASK
	*npage = ((~args.addr_mask & ~addr) >> PAGE_SHIFT) + 1;
#else
	*npage = args.ptep ? 1 : (PMD_SIZE - (addr & ~PMD_MASK)) >> PAGE_SHIFT;
#endif
	follow_pfnmap_end(&args);
	return 0;
#else
	spinlock_t *ptl;	/* the page table lock that follow_pte() took */
	pte_t *ptep;
	int ret = follow_pte(vma->vm_mm, addr, &ptep, &ptl);

	if (ret)
		return ret;
	*pfn = pte_pfn(*ptep);
	*writable = pte_write(*ptep);
	*npage = 1;
	pte_unmap_unlock(ptep, ptl);
	return 0;
#endif
}

/*
 * How many bytes of struct vfio_iommu_type1_info GET_INFO writes back to a
 * caller whose argsz (at least up to iova_pgsizes) is @argsz.
 */
static inline size_t fm_compat_info_outsz(u32 argsz)
{
#ifdef FM_HAVE_INFO_FULL_WRITEBACK
	return min_t(size_t, argsz, sizeof(struct vfio_iommu_type1_info));
#else
	size_t capsz = offsetofend(struct vfio_iommu_type1_info, cap_offset);

	return argsz >= capsz ? capsz :
	       offsetofend(struct vfio_iommu_type1_info, iova_pgsizes);
#endif
}

/*
 * Pin the folios of hugetlbfs/shmem @file that hold bytes [@start, @end]
 * (filepin.c). 6.1 has no way to pin by folio: GUP pins every 4K page.
 */
static inline bool fm_compat_have_memfd_pin_folios(void)
{
#ifdef FM_HAVE_MEMFD_PIN_FOLIOS
	return true;
#else
	return false;
#endif
}

static inline long fm_compat_memfd_pin_folios(struct file *file, loff_t start,
					      loff_t end, struct folio **folios,
					      unsigned int max_folios, pgoff_t *offset)
{
#ifdef FM_HAVE_MEMFD_PIN_FOLIOS
	return memfd_pin_folios(file, start, end, folios, max_folios, offset);
#else
	return -EOPNOTSUPP;
#endif
}

/*
 * GUP-fast of the caller's own mm that never falls back to the locked walk,
 * so it may run with mmap_lock held (6.1 only); returns the pages pinned.
 */
static inline bool fm_compat_have_pin_fast_only(void)
{
#ifdef FM_HAVE_PIN_FAST_ONLY
	return true;
#else
	return false;
#endif
}

static inline long fm_compat_pin_fast_only(unsigned long start, unsigned long nr,
					   unsigned int gup_flags, struct page **pages)
{
#ifdef FM_HAVE_PIN_FAST_ONLY
	return pin_user_pages_fast_only(start, nr, gup_flags, pages);
#else
	return 0;
#endif
}

/*
 * Work done without mmap_lock (GUP-fast), then checked under it: begin
 * gives a token, and retry, called with mmap_lock held, says whether a
 * mmap_write_lock() section (munmap, mmap, mprotect, ...) began since. No
 * write section began (and none was running at begin): the vmas seen under
 * the lock are the ones the lockless work saw. Upstream 6.13 names this
 * mmap_lock_speculate_try_begin()/_retry(). Without the seqcount (6.1),
 * begin says no: 6.1 runs GUP-fast under the lock instead (above).
 */
static inline bool fm_compat_mm_speculate_begin(struct mm_struct *mm, unsigned int *seq)
{
#ifdef FM_HAVE_MM_LOCK_SEQCOUNT
	*seq = raw_read_seqcount(&mm->mm_lock_seq);
	return !(*seq & 1);
#else
	return false;
#endif
}

static inline bool fm_compat_mm_speculate_retry(struct mm_struct *mm, unsigned int seq)
{
#ifdef FM_HAVE_MM_LOCK_SEQCOUNT
	mmap_assert_locked(mm);
	return read_seqcount_retry(&mm->mm_lock_seq, seq);
#else
	return true;
#endif
}

/* The page @n pages after @page in a physically contiguous range. */
static inline struct page *fm_compat_nth_page(struct page *page, unsigned long n)
{
#ifdef FM_HAVE_NTH_PAGE
	return nth_page(page, n);
#else
	return pfn_to_page(page_to_pfn(page) + n);
#endif
}

/*
 * VFIO_TYPE1_NESTING_IOMMU, which 7.x keeps only as a reserved number.
 * CHECK_EXTENSION answers fm_compat_nesting_extension() for it, as the
 * kernel's stock type1 does. 6.1 and 6.12 answer 1 and foliomap refuses
 * the type at open, leaving such a container to stock (which fails at
 * attach on x86); 7.x answers 0, so the core never opens it, and open()
 * would take it as v2 as stock 7.x does.
 */
#ifdef FM_HAVE_NESTING_EXTENSION
#define FM_TYPE1_NESTING_IOMMU	VFIO_TYPE1_NESTING_IOMMU
#else
#define FM_TYPE1_NESTING_IOMMU	__VFIO_RESERVED_TYPE1_NESTING_IOMMU
#endif

static inline long fm_compat_nesting_extension(void)
{
#ifdef FM_HAVE_NESTING_EXTENSION
	return 1;
#else
	return 0;
#endif
}

static inline bool fm_compat_nesting_opens_v2(void)
{
#ifdef FM_HAVE_NESTING_EXTENSION
	return false;
#else
	return true;
#endif
}

/*
 * pin_pages/unpin_pages input that 7.x's stock type1 refuses before
 * looking at anything else: npage <= 0 (pin: -EINVAL; the core passes a
 * negative npage through), and a range that wraps around the IOVA space
 * (pin: -EOVERFLOW). unpin_pages WARNs and returns on either. 6.1 and
 * 6.12 check neither: a wrapping range finds no mapping (-EINVAL) and
 * npage <= 0 pins or unpins nothing.
 */
static inline bool fm_compat_external_npage_bad(int npage)
{
#ifdef FM_HAVE_EXTERNAL_ARG_CHECKS
	return npage <= 0;
#else
	return false;
#endif
}

static inline bool fm_compat_external_range_wraps(dma_addr_t iova, int npage)
{
#ifdef FM_HAVE_EXTERNAL_ARG_CHECKS
	dma_addr_t end;

	return check_add_overflow(iova, ((dma_addr_t)npage << PAGE_SHIFT) - 1, &end);
#else
	return false;
#endif
}

/*
 * pfn_valid() cannot change inside an aligned block of this many pfns
 * (a memory subsection; a whole section without SPARSEMEM_VMEMMAP
 * subsections): testing one pfn answers for the block.
 */
#ifdef PAGES_PER_SUBSECTION
#define FM_PFN_VALID_BLOCK	PAGES_PER_SUBSECTION
#else
#define FM_PFN_VALID_BLOCK	PAGES_PER_SECTION
#endif

/*
 * Where pfn_valid() may next differ after the invalid @pfn: the end of its
 * FM_PFN_VALID_BLOCK, of its section when the section has no memory map
 * at all, or of a whole root of sections that has none (device memory
 * away from RAM, such as a GPU's BAR: 32 GiB a test).
 */
static inline unsigned long fm_compat_invalid_end(unsigned long pfn)
{
#ifdef CONFIG_SPARSEMEM
	unsigned long nr = pfn_to_section_nr(pfn);

	if (nr >= NR_MEM_SECTIONS)
		return ULONG_MAX;
#ifdef CONFIG_SPARSEMEM_EXTREME
	if (!mem_section || !mem_section[SECTION_NR_TO_ROOT(nr)])
		return section_nr_to_pfn((SECTION_NR_TO_ROOT(nr) + 1) * SECTIONS_PER_ROOT);
#endif
	if (!valid_section_nr(nr))
		return section_nr_to_pfn(nr + 1);
#endif
	return ALIGN(pfn + 1, FM_PFN_VALID_BLOCK);
}

/*
 * Does the calling task place its memory by a task mempolicy of its own
 * (set_mempolicy(), numactl), rather than on the node it runs on? The
 * field exists only with NUMA; every kernel here has it there.
 */
static inline bool fm_compat_task_mempolicy(void)
{
#ifdef CONFIG_NUMA
	return READ_ONCE(current->mempolicy);
#else
	return false;
#endif
}

/*
 * A worker thread of the calling process (parallel.c's helpers): created
 * stopped, started, woken, and stopped and reaped. NULL where there is no
 * such thread (6.1) or it could not be created (pids.max, RLIMIT_NPROC,
 * memory).
 */
#ifdef FM_HAVE_USER_WORKER
#include <linux/sched/vhost_task.h>

#define fm_compat_have_user_worker()	true
#define fm_user_worker			vhost_task

static inline struct fm_user_worker *
fm_compat_user_worker_create(bool (*fn)(void *), void (*killed)(void *), void *arg,
			     const char *name)
{
	struct vhost_task *w = vhost_task_create(fn, killed, arg, name);

	return IS_ERR_OR_NULL(w) ? NULL : w;
}

#define fm_compat_user_worker_start	vhost_task_start
#define fm_compat_user_worker_wake	vhost_task_wake
#define fm_compat_user_worker_stop	vhost_task_stop
#else
struct fm_user_worker;

#define fm_compat_have_user_worker()	false

static inline struct fm_user_worker *
fm_compat_user_worker_create(bool (*fn)(void *), void (*killed)(void *), void *arg,
			     const char *name)
{
	return NULL;
}

static inline void fm_compat_user_worker_start(struct fm_user_worker *w) { }
static inline void fm_compat_user_worker_wake(struct fm_user_worker *w) { }
static inline void fm_compat_user_worker_stop(struct fm_user_worker *w) { }
#endif

#endif /* _FOLIOMAP_COMPAT_H */
