/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * foliomap: a VFIO type1 IOMMU backend that pins, maps and unmaps memory
 * one physically contiguous run at a time.
 *
 * Internal declarations shared by the module's files. Data flow:
 *
 *   MAP_DMA   -> ioctl.c (argument checks) -> fm_do_map() (map_dma.c)
 *             -> a fm_dma linked in the tree (dma.c)
 *             -> fm_pin_map_dma() (pin.c), batch after batch:
 *                fill a batch and cut it into runs (batch.c)
 *             -> charge the batch once (charge.c)
 *             -> grow the open run, map each run in every domain (run.c)
 *                and append it to the run record (record.c)
 *   UNMAP_DMA -> ioctl.c -> fm_do_unmap() (unmap_dma.c) -> find mappings
 *             -> unmap runs from every domain into one IOTLB gather
 *                (unmap.c)
 *             -> one flush -> release whole runs and uncharge (release.c)
 *
 * Locking: iommu->lock (a mutex) protects everything reachable from a
 * struct fm_iommu except device_list, which has its own mutex so that the
 * dma_unmap callbacks of emulated-IOMMU devices can run without iommu->lock;
 * device_list_lock comes first when both are taken (devices.c). Pinning
 * takes the owning mm's mmap_lock (read) inside iommu->lock; accounting
 * takes it for write. Nothing takes iommu->lock under mmap_lock.
 */
#ifndef _FOLIOMAP_H
#define _FOLIOMAP_H

#include <linux/iommu.h>
#include <linux/list.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/rbtree.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/types.h>
#include <linux/vfio.h>

#include "compat.h"
#include "vfio_private.h"

/* Module parameters (main.c), same names and meaning as stock type1. */
extern bool fm_allow_unsafe_interrupts;
extern bool fm_disable_hugepages;
extern unsigned int fm_dma_entry_limit;
extern int fm_pin_threads;
extern unsigned int fm_pin_parallel_min_mb;

/* Cumulative counters of one container (debugfs.c), under iommu->lock. */
struct fm_stats {
	u64			map_calls;
	u64			unmap_calls;
	u64			runs_mapped;
	u64			runs_unmapped;
	u64			batches;
	u64			batch_pages;
	u64			folio_pinned_pages;	/* by memfd_pin_folios() */
	u64			domain_joins;	/* groups attached to a domain in use */
	/* MAP_DMA pinned in parallel (parallel.c) */
	u64			parallel_maps;
	u64			parallel_helpers;	/* helper threads they started */
	u64			parallel_chunks;	/* chunks charged and mapped */
	u64			parallel_helper_chunks;	/* ... of them filled by helpers */
	u64			parallel_chunk_ns;	/* time filling them */
	u64			parallel_takeovers;	/* helper batches the caller redid */
	u64			parallel_wasted_pages;	/* pinned by helpers, never mapped */
};

/* One container. */
struct fm_iommu {
	struct list_head	domain_list;	/* struct fm_domain */
	struct list_head	iova_list;	/* struct fm_iova_range, sorted */
	struct list_head	emulated_groups; /* struct fm_group, no domain */
	struct mutex		lock;
	struct rb_root		dma_tree;	/* struct fm_dma, by iova */
	struct list_head	device_list;	/* struct vfio_device (emulated users) */
	struct mutex		device_list_lock;
	unsigned int		dma_avail;	/* entries left before -ENOSPC */
	unsigned int		vaddr_invalid_count;
	u64			pgsize_bitmap;	/* intersection over domains */
	u64			num_non_pinned_groups;
	bool			v2;
	bool			dirty_page_tracking;
	struct fm_stats		stats;
	struct dentry		*debugfs;	/* its directory, or NULL/ERR_PTR */
};

/* One IOMMU domain and the groups attached to it. */
struct fm_domain {
	struct iommu_domain	*domain;
	struct list_head	next;
	struct list_head	group_list;	/* struct fm_group */
	struct iommu_device	*unit;		/* built for this IOMMU, or NULL */
	bool			enforce_cache_coherency;
};

struct fm_group {
	struct iommu_group	*iommu_group;
	struct list_head	next;
	bool			pinned_page_dirty_scope;
};

/* A usable IOVA range, inclusive at both ends. */
struct fm_iova_range {
	struct list_head	list;
	dma_addr_t		start;
	dma_addr_t		end;
};

/* A physically contiguous stretch of pfns, in IOVA order. */
struct fm_run {
	unsigned long	pfn;
	unsigned long	npage;
};

/*
 * At most one record entry per this many pages of a mapping (16 bytes per
 * 256 KiB, below 0.01% of the mapping); more fragmented memory has no
 * record and is walked in the IOMMU instead. A mapping with folio pins
 * needs its record and has no such bound (at worst 16 bytes per 4K page).
 */
#define FM_REC_PAGES_PER_ENTRY	64
#define FM_REC_MIN_ENTRIES	16

/* One VFIO_IOMMU_MAP_DMA mapping. */
struct fm_dma {
	struct rb_node		node;
	dma_addr_t		iova;
	unsigned long		vaddr;
	size_t			size;
	int			prot;		/* IOMMU_READ | IOMMU_WRITE */
	bool			iommu_mapped;	/* pinned and in every domain */
	bool			lock_cap;	/* CAP_IPC_LOCK at map time */
	bool			vaddr_invalid;
	/*
	 * Set when any pfn of this mapping was reserved or not backed by a
	 * struct page (PFNMAP). Never cleared: a page may become reserved
	 * after it was pinned. While clear, whole runs are unpinned at once.
	 */
	bool			has_rsvd;
	/*
	 * Set when any pfn came from a VM_PFNMAP lookup, which pins nothing.
	 * While clear, every pfn in the IOMMU came from GUP and holds a pin,
	 * reserved or not. Never cleared.
	 */
	bool			has_pfnmap;
	/*
	 * Pins are counted per folio (filepin.c): every run of the record
	 * holds one pin on each folio it touches, not one per page. Set
	 * by the first pin batch, when the first page lies in a shared
	 * hugetlbfs vma. Release relies on three facts, each checked with
	 * WARN_ON_ONCE where it is used: such a mapping never drops its
	 * record (fm_rec_drop), so the IOMMU leaf walk never releases it
	 * (fm_unmap_unpin_domain), and its record entries never join
	 * (fm_rec_add: only disable_hugepages maps runs that touch).
	 */
	bool			folio_pins;
	struct task_struct	*task;		/* mapping task (get_task_struct) */
	struct mm_struct	*mm;		/* its mm (mmgrab) */
	struct rb_root		pfn_list;	/* struct fm_vpfn: external pins */
	unsigned long		*bitmap;	/* dirty bitmap when tracking */
	size_t			locked_vm;	/* pages charged to mm for this dma */
	/*
	 * The run record: the pfn runs this mapping's pins were mapped
	 * with, in IOVA order from dma->iova, appended only after every
	 * domain accepted the run, so that [iova, iova + rec_pages pages)
	 * is exactly what is pinned and mapped. Unmap and replay use it
	 * instead of asking the IOMMU page by page. NULL when the memory
	 * was too fragmented (rec_dropped), when no memory was free, or
	 * while nothing is pinned. Points to rec_one while it has one entry.
	 */
	struct fm_run		*rec;
	struct fm_run		rec_one;
	unsigned int		rec_nr;
	unsigned int		rec_max;
	unsigned long		rec_pages;
	bool			rec_dropped;
};

/* A page pinned through the in-kernel API (pin_pages) of an emulated device. */
struct fm_vpfn {
	struct rb_node		node;
	dma_addr_t		iova;
	unsigned long		pfn;
	unsigned int		ref_count;
};

/*
 * How many of the @npage pfns from @pfn (at most) are known not to be
 * valid from one pfn_valid() test: validity is constant over an aligned
 * FM_PFN_VALID_BLOCK, and over sections without a memory map
 * (fm_compat_invalid_end()). 0 if @pfn is valid (has a struct page).
 */
static inline unsigned long fm_invalid_pfns(unsigned long pfn, unsigned long npage)
{
	if (pfn_valid(pfn))
		return 0;
	return min(npage, fm_compat_invalid_end(pfn) - pfn);
}

/* The number of pages from @pfn (at most @n) inside the folio of its page. */
static inline unsigned long fm_folio_segment(unsigned long pfn, unsigned long n)
{
	struct page *page = pfn_to_page(pfn);
	struct folio *folio = page_folio(page);

	return min_t(unsigned long, n, folio_nr_pages(folio) - folio_page_idx(folio, page));
}

/* main.c */
extern const struct vfio_iommu_driver_ops fm_driver_ops;

/* dma.c: the tree of mappings, compared by last byte (iova + size may wrap) */
static inline dma_addr_t fm_dma_last(const struct fm_dma *dma)
{
	return dma->iova + dma->size - 1;
}

struct fm_dma *fm_dma_find(struct fm_iommu *iommu, dma_addr_t start, size_t size);
bool fm_dma_range_splits(struct fm_iommu *iommu, dma_addr_t iova, dma_addr_t last);
struct rb_node *fm_dma_find_first_node(struct fm_iommu *iommu, dma_addr_t start,
				       size_t size);

/*
 * Whether [iova, last] starts or ends inside a mapping, i.e. would split it:
 * v2 unmaps and dirty-bitmap queries may span mappings but never split one.
 * @first is the lowest mapping overlapping the range (NULL if none), which
 * the caller looked up anyway: the only one that can hold @iova, and the
 * one holding @last unless the range spans several, so that a range of
 * one mapping (a 4K unmap) costs no further descent of the tree (nor a
 * call: inline).
 */
static inline bool fm_dma_range_splits_at(struct fm_iommu *iommu, struct rb_node *first,
					  dma_addr_t iova, dma_addr_t last)
{
	struct fm_dma *dma = first ? rb_entry(first, struct fm_dma, node) : NULL;

	if (!dma)
		return false;
	if (dma->iova < iova)
		return true;
	if (fm_dma_last(dma) >= last)
		return fm_dma_last(dma) != last;
	dma = fm_dma_find(iommu, last, 1);
	return dma && fm_dma_last(dma) != last;
}

struct fm_dma_slot {
	struct rb_node	**link;
	struct rb_node	*parent;
};

bool fm_dma_find_slot(struct fm_iommu *iommu, dma_addr_t iova, size_t size,
		      struct fm_dma_slot *slot);
void fm_dma_link(struct fm_iommu *iommu, struct fm_dma *dma, struct fm_dma_slot *slot);

static inline void fm_dma_unlink(struct fm_iommu *iommu, struct fm_dma *dma)
{
	rb_erase(&dma->node, &iommu->dma_tree);
}

/*
 * iova.c: usable IOVA ranges (aperture minus reserved regions). All but the
 * list-only helpers need iommu->lock held.
 */
bool fm_iova_range_usable(struct fm_iommu *iommu, dma_addr_t start, dma_addr_t end);
void fm_iova_list_free(struct list_head *iova);
int fm_iova_list_copy(struct fm_iommu *iommu, struct list_head *copy);
void fm_iova_list_replace(struct fm_iommu *iommu, struct list_head *list);
bool fm_iova_aperture_conflict(struct fm_iommu *iommu, dma_addr_t start, dma_addr_t end);
bool fm_iova_resv_conflict(struct fm_iommu *iommu, struct list_head *resv);
int fm_iova_clamp(struct list_head *list, dma_addr_t start, dma_addr_t end);
int fm_iova_exclude_resv(struct list_head *list, struct list_head *resv);
void fm_iova_rebuild(struct fm_iommu *iommu);
void fm_resv_list_free(struct list_head *resv);

/*
 * The pin pipeline (pin.h has its inside): map_dma.c -> pin.c -> batch.c ->
 * charge.c -> run.c -> record.c; replay.c. fm_do_map takes iommu->lock
 * itself. fm_replay is called with iommu->lock held and @domain not yet on
 * domain_list; on failure it leaves nothing mapped in @domain and nothing
 * pinned on its behalf.
 */
int fm_do_map(struct fm_iommu *iommu, struct vfio_iommu_type1_dma_map *map);
int fm_replay(struct fm_iommu *iommu, struct fm_domain *domain);
/* batch.c: one pfn of dma->mm for pin_pages; the caller holds a reference on the mm. */
int fm_pin_one(struct fm_dma *dma, unsigned long vaddr, unsigned long *pfn);
/*
 * record.c: the run record. Inline, as every unmap asks and frees: does it
 * cover exactly the first @size bytes of @dma?
 */
static inline bool fm_rec_covers(const struct fm_dma *dma, size_t size)
{
	return dma->rec && !dma->rec_dropped && size &&
	       (size_t)dma->rec_pages << PAGE_SHIFT == size;
}

static inline void fm_rec_free(struct fm_dma *dma)
{
	if (dma->rec && dma->rec != &dma->rec_one)
		kvfree(dma->rec);
	dma->rec = NULL;
	dma->rec_nr = 0;
	dma->rec_max = 0;
	dma->rec_pages = 0;
	dma->rec_dropped = false;
}

/* charge.c: locked memory and its owner */
struct fm_owner {
	struct task_struct	*task;		/* its RLIMIT_MEMLOCK */
	struct mm_struct	*mm;		/* its locked_vm */
	bool			lock_cap;	/* CAP_IPC_LOCK: no limit */
};

static inline struct fm_owner fm_dma_owner(const struct fm_dma *dma)
{
	return (struct fm_owner){ .task = dma->task, .mm = dma->mm, .lock_cap = dma->lock_cap };
}

/*
 * Does the caller hold a user reference on @dma's mm already? The mapping's
 * own process does; a kthread using the mm (kthread_use_mm()) does not.
 */
static inline bool fm_dma_mm_held(const struct fm_dma *dma)
{
	return dma->mm == current->mm && !(current->flags & PF_KTHREAD);
}

struct fm_owner fm_owner_current(void);
void fm_dma_set_owner(struct fm_dma *dma, const struct fm_owner *who);

/* The references fm_dma_set_owner() took. */
static inline void fm_dma_put_owner(struct fm_dma *dma)
{
	put_task_struct(dma->task);
	mmdrop(dma->mm);
}

int fm_acct(const struct fm_owner *who, long npage, bool get_mm);
int fm_lock_acct(struct fm_dma *dma, long npage, bool async);

/*
 * filepin.c: shared hugetlbfs pinned by folio. fm_filepin_applies: is
 * @vma one that fm_filepin() takes? fm_filepin: pins the folios
 * already in the page cache behind up to @npage pages at @vaddr, at most
 * @max_folios; returns their number with *@first the page of the first
 * folio at @vaddr, or 0 when GUP is to pin (and report errors) instead.
 * Both are called with mmap_read_lock held; fm_filepin() always
 * returns with it released (the inode lock it takes must not nest inside
 * mmap_lock).
 */
bool fm_filepin_applies(struct vm_area_struct *vma, bool write);
long fm_filepin(struct mm_struct *mm, unsigned long vaddr, unsigned long npage,
		bool write, struct folio **folios, unsigned int max_folios,
		unsigned long *first);

/*
 * Unmap: unmap_dma.c -> unmap.c -> release.c. fm_do_unmap takes
 * iommu->lock itself; the rest is called with it held.
 */
int fm_do_unmap(struct fm_iommu *iommu, struct vfio_iommu_type1_dma_unmap *unmap,
		struct vfio_bitmap *bitmap);
/* unmap.c: out of every domain, flushed, then released */
void fm_dma_remove(struct fm_iommu *iommu, struct fm_dma *dma);
/*
 * Empty the first @size bytes of @dma from @domain alone, then unpin them.
 * Returns the number of physically contiguous runs released.
 */
unsigned long fm_unmap_unpin_domain(struct fm_dma *dma, struct iommu_domain *domain,
				    size_t size, bool do_accounting);
void fm_unmap_unpin_all(struct fm_iommu *iommu);
void fm_unmap_unpin_reaccount(struct fm_iommu *iommu);
/* release.c: unpin runs the IOMMU no longer maps, hand their charge back */
long fm_release_run_folios(struct fm_dma *dma, dma_addr_t iova, unsigned long pfn,
			   unsigned long npage, long *uncharge, bool vpfns);
long fm_unpin_run(struct fm_dma *dma, dma_addr_t iova, unsigned long pfn,
		  unsigned long npage, bool do_accounting);
void fm_unpin_external_page(struct fm_dma *dma, dma_addr_t iova, unsigned long pfn,
			    bool do_accounting);

/*
 * Emulated-IOMMU users: vpfn.c (the pages they pinned), pin_pages.c,
 * dma_rw.c, devices.c (registration, the dma_unmap callbacks)
 */
struct fm_vpfn *fm_vpfn_find(struct fm_dma *dma, dma_addr_t iova);

/* Where fm_vpfn_lookup() found no vpfn: the place to link a new one. */
struct fm_vpfn_slot {
	struct rb_node		*parent;
	struct rb_node		**link;
};

struct fm_vpfn *fm_vpfn_lookup(struct fm_dma *dma, dma_addr_t iova, struct fm_vpfn_slot *slot);
void fm_vpfn_insert(struct fm_dma *dma, struct fm_vpfn *new, const struct fm_vpfn_slot *slot);
unsigned long fm_vpfn_count_tree(struct fm_dma *dma, dma_addr_t iova, unsigned long npage);

/* Pages of [iova, +npage) that emulated devices pin: most mappings have none. */
static inline unsigned long fm_vpfn_count(struct fm_dma *dma, dma_addr_t iova,
					  unsigned long npage)
{
	return RB_EMPTY_ROOT(&dma->pfn_list) ? 0 : fm_vpfn_count_tree(dma, iova, npage);
}

int fm_pin_pages(void *iommu_data, struct iommu_group *group, dma_addr_t user_iova,
		 int npage, int prot, struct page **pages);
void fm_unpin_pages(void *iommu_data, dma_addr_t user_iova, int npage);
int fm_dma_rw(void *iommu_data, dma_addr_t user_iova, void *data, size_t count,
	      bool write);
void fm_register_device(void *iommu_data, struct vfio_device *vdev);
void fm_unregister_device(void *iommu_data, struct vfio_device *vdev);
void fm_notify_dma_unmap(struct fm_iommu *iommu, dma_addr_t iova, size_t size);

/* release.c, continued: the common case of a release, inline */
/*
 * unpin_user_page_range_dirty_lock() takes an unsigned long count, but
 * gup_folio_range_next() (6.1 and 6.12) clamps each large folio's share to
 * an unsigned int of what is left: with 2^32 pages or more left at a large
 * folio (16 TiB of physically contiguous 1G pages is one run) that share
 * becomes 0 and the loop never ends. Release such runs in pieces.
 */
#define FM_UNPIN_RANGE_MAX	BIT(30)	/* pages */

static inline void fm_unpin_range_dirty(struct page *page, unsigned long npage, bool dirty)
{
	while (npage) {
		unsigned long n = min(npage, FM_UNPIN_RANGE_MAX);

		unpin_user_page_range_dirty_lock(page, n, dirty);
		page = fm_compat_nth_page(page, n);
		npage -= n;
	}
}

/*
 * Unpin one physically contiguous run. Adds to @uncharge the pages whose
 * charge is released: those unpinned, less the externally pinned ones,
 * which stay charged for as long as their external pin lives (@vpfns:
 * the range may hold some). Returns the number of charged pages unpinned.
 *
 * Inline, for every unmap and unpin_pages comes here: the common case, no
 * reserved pfns and a pin per page, is one call and one refcount drop per
 * folio. Anything else goes folio by folio (release.c).
 */
static inline long fm_release_run(struct fm_dma *dma, dma_addr_t iova, unsigned long pfn,
				  unsigned long npage, long *uncharge, bool vpfns)
{
	if (dma->has_rsvd || dma->folio_pins)
		return fm_release_run_folios(dma, iova, pfn, npage, uncharge, vpfns);
	fm_unpin_range_dirty(pfn_to_page(pfn), npage, dma->prot & IOMMU_WRITE);
	*uncharge += npage - (vpfns ? fm_vpfn_count(dma, iova, npage) : 0);
	return npage;
}

/*
 * dirty.c: dirty page bitmaps. fm_dirty_start/stop/get_bitmap take
 * iommu->lock themselves; ioctl.c has checked the uAPI arguments (one flag,
 * no wrap-around, access_ok, bitmap size, pgsize equal to the smallest IOMMU
 * page size read under the lock, iova and size aligned to it, size != 0).
 * fm_dirty_start is a no-op when already tracking; fm_dirty_get_bitmap
 * returns -EINVAL when not tracking. fm_dirty_mark_all (iommu->lock held)
 * marks every page of every mapping dirty when tracking: detach calls it
 * when a group that could DMA anywhere leaves, as its writes are unknown.
 * fm_dirty_report_range (iommu->lock held) writes the bits of the mappings
 * that start in the range to the user and changes nothing, so that a
 * failed copy (-EFAULT) loses no bit; fm_dirty_get_bitmap clears them only
 * after every mapping's bits were written.
 */
int fm_dirty_bitmap_alloc(struct fm_dma *dma, size_t pgsize);
static inline void fm_dirty_bitmap_free(struct fm_dma *dma)
{
	if (!dma->bitmap)
		return;
	kvfree(dma->bitmap);
	dma->bitmap = NULL;
}

int fm_dirty_start(struct fm_iommu *iommu, size_t pgsize);
void fm_dirty_stop(struct fm_iommu *iommu);
int fm_dirty_get_bitmap(struct fm_iommu *iommu, dma_addr_t iova, size_t size,
			size_t pgsize, u64 __user *bitmap);
int fm_dirty_report_range(struct fm_iommu *iommu, dma_addr_t iova, size_t size,
			  size_t pgsize, u64 __user *bitmap);
void fm_dirty_mark_pinned(struct fm_iommu *iommu, struct fm_dma *dma,
			  dma_addr_t iova, int npage);
bool fm_dirty_scope_all_pinned(struct fm_iommu *iommu);
void fm_dirty_mark_all(struct fm_iommu *iommu);

/*
 * container.c: groups and domains. The driver ops take iommu->lock
 * themselves; fm_find_group, fm_has_emulated and fm_enforce_cache_coherency
 * need it held by the caller.
 */
void *fm_open(unsigned long arg);
void fm_release(void *iommu_data);
int fm_attach_group(void *iommu_data, struct iommu_group *group,
		    enum vfio_group_type type);
void fm_detach_group(void *iommu_data, struct iommu_group *group);
struct iommu_domain *fm_group_iommu_domain(void *iommu_data, struct iommu_group *group);
#ifdef FM_HAVE_DRIVER_OPS_NOTIFY
void fm_notify(void *iommu_data, enum vfio_iommu_notify_type event);
#endif
struct fm_group *fm_find_group(struct fm_iommu *iommu, struct iommu_group *iommu_group);
bool fm_has_emulated(struct fm_iommu *iommu);
int fm_enforce_cache_coherency(struct fm_iommu *iommu);

/* debugfs.c: per-container counters; all optional (no debugfs: no-ops) */
void fm_debugfs_init(void);
void fm_debugfs_exit(void);

/* parallel.c: the workqueue that reaps helper threads after their map */
int fm_par_init(void);
void fm_par_exit(void);
void fm_debugfs_open(struct fm_iommu *iommu);
void fm_debugfs_release(struct fm_iommu *iommu);

/* ioctl.c: the uAPI */
long fm_ioctl(void *iommu_data, unsigned int cmd, unsigned long arg);

#endif /* _FOLIOMAP_H */
