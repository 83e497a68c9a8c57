// SPDX-License-Identifier: GPL-2.0-only
/*
 * The container uAPI: argument checks and the GET_INFO capability chain.
 * The work is done elsewhere: fm_do_map (map_dma.c), fm_do_unmap
 * (unmap_dma.c) and the dirty tracking calls (dirty.c), which take
 * iommu->lock themselves.
 * Error codes match stock type1 of the same kernel.
 */
#include <linux/bitops.h>
#include <linux/err.h>
#include <linux/overflow.h>
#include <linux/slab.h>
#include <linux/stddef.h>
#include <linux/uaccess.h>
#include <linux/vfio.h>

#include "foliomap.h"

/*
 * A dirty bitmap is an array of u64, one bit per page. bitmap_set() takes
 * an int count of bits, hence at most INT_MAX pages per bitmap (8 TiB of
 * 4K pages), in a buffer of at most 256 MiB.
 */
#define FM_DIRTY_PAGES_MAX	((u64)INT_MAX)
#define FM_DIRTY_BITMAP_BYTES(npages)	(ALIGN((npages), BITS_PER_TYPE(u64)) / BITS_PER_BYTE)
#define FM_DIRTY_BITMAP_SIZE_MAX	FM_DIRTY_BITMAP_BYTES(FM_DIRTY_PAGES_MAX)

/* The smallest IOMMU page size: the unit of MAP/UNMAP and of dirty bits. */
static size_t fm_min_pgsize(struct fm_iommu *iommu)
{
	size_t pgsize;

	mutex_lock(&iommu->lock);
	pgsize = (size_t)1 << __ffs(iommu->pgsize_bitmap);
	mutex_unlock(&iommu->lock);
	return pgsize;
}

/* Can a user bitmap of @bitmap_size bytes hold @npages bits, within limits? */
static int fm_check_bitmap_size(u64 npages, u64 bitmap_size)
{
	if (!npages || npages > FM_DIRTY_PAGES_MAX || !bitmap_size ||
	    bitmap_size > FM_DIRTY_BITMAP_SIZE_MAX ||
	    bitmap_size < FM_DIRTY_BITMAP_BYTES(npages))
		return -EINVAL;
	return 0;
}

/*
 * Validate a user struct vfio_bitmap describing @size bytes of IOVA space:
 * writable buffer, non-zero page size, room for one bit per page.
 */
static int fm_check_user_bitmap(const struct vfio_bitmap *bitmap, u64 size)
{
	if (!access_ok((void __user *)bitmap->data, bitmap->size))
		return -EINVAL;
	if (!bitmap->pgsize)
		return -EINVAL;
	return fm_check_bitmap_size(size >> __ffs(bitmap->pgsize), bitmap->size);
}

/* Every type1 ioctl argument starts so (checked in fm_ioctl()). */
struct fm_ioctl_head {
	u32	argsz;
	u32	flags;
};

/*
 * Read the first @minsz bytes of an ioctl argument into @buf (-EFAULT),
 * then check its head (-EINVAL): argsz must cover them, and flags may hold
 * no bit outside @mask (U32_MAX for GET_INFO, whose flags are output).
 * Stock's checks, in stock's order, in one place. Inlined, so that @minsz
 * is a constant for copy_from_user(): a variable size costs every MAP_DMA
 * and UNMAP_DMA the hardened-usercopy check of the stack object.
 */
static __always_inline int fm_ioctl_copy_in(void *buf, unsigned long arg, size_t minsz, u32 mask)
{
	const struct fm_ioctl_head *head = buf;

	if (copy_from_user(buf, (void __user *)arg, minsz))
		return -EFAULT;
	if (head->argsz < minsz || head->flags & ~mask)
		return -EINVAL;
	return 0;
}

/*
 * The struct that some flags append after the first @minsz bytes (the
 * bitmap of UNMAP_DMA, the range of GET_BITMAP): argsz must cover it.
 */
static __always_inline int fm_ioctl_copy_tail(void *buf, size_t size, unsigned long arg,
					      u32 argsz, size_t minsz)
{
	if (argsz - minsz < size)
		return -EINVAL;
	if (copy_from_user(buf, (void __user *)arg + minsz, size))
		return -EFAULT;
	return 0;
}

/*
 * @iommu is NULL when the core asks which driver to pick for a new
 * container. VFIO_TYPE1_NESTING_IOMMU is reported as the kernel's stock
 * type1 does (compat.h); where that is 1, fm_open refuses it, and the core
 * then offers the container to the next driver (stock type1), which fails
 * the same way on x86 at attach time.
 */
static long fm_check_extension(struct fm_iommu *iommu, unsigned long arg)
{
	long ret;

	switch (arg) {
	case VFIO_TYPE1_IOMMU:
	case VFIO_TYPE1v2_IOMMU:
	case VFIO_UNMAP_ALL:
		return 1;
	case FM_TYPE1_NESTING_IOMMU:
		return fm_compat_nesting_extension();
	case VFIO_UPDATE_VADDR:
		/* Emulated devices could pin or dma_rw through a stale vaddr. */
		if (!iommu)
			return 0;
		mutex_lock(&iommu->lock);
		ret = !fm_has_emulated(iommu);
		mutex_unlock(&iommu->lock);
		return ret;
	case VFIO_DMA_CC_IOMMU:
		if (!iommu)
			return 0;
		mutex_lock(&iommu->lock);
		ret = fm_enforce_cache_coherency(iommu);
		mutex_unlock(&iommu->lock);
		return ret;
	default:
		return 0;
	}
}

/*
 * The GET_INFO capability chain, one entry per capability: its id, its
 * size now (0: left out) and how to fill it in, all under iommu->lock.
 * vfio_info_cap_add() hands out the space zeroed and with the header set.
 * The table's order is the chain's order, the one stock 6.1 and 6.12
 * build: users see the bytes (t_fuzz compares them with stock's).
 */
struct fm_info_cap {
	u16	id;
	size_t	(*size)(struct fm_iommu *iommu);
	void	(*fill)(struct fm_iommu *iommu, struct vfio_info_cap_header *header);
};

static size_t fm_cap_migration_size(struct fm_iommu *iommu)
{
	return sizeof(struct vfio_iommu_type1_info_cap_migration);
}

static void fm_cap_migration_fill(struct fm_iommu *iommu, struct vfio_info_cap_header *header)
{
	struct vfio_iommu_type1_info_cap_migration *cap =
		container_of(header, struct vfio_iommu_type1_info_cap_migration, header);

	/* Dirty bits are kept at the smallest page size only; no flags. */
	cap->pgsize_bitmap = (u64)1 << __ffs(iommu->pgsize_bitmap);
	cap->max_dirty_bitmap_size = FM_DIRTY_BITMAP_SIZE_MAX;
}

static size_t fm_cap_dma_avail_size(struct fm_iommu *iommu)
{
	return sizeof(struct vfio_iommu_type1_info_dma_avail);
}

static void fm_cap_dma_avail_fill(struct fm_iommu *iommu, struct vfio_info_cap_header *header)
{
	container_of(header, struct vfio_iommu_type1_info_dma_avail, header)->avail =
		iommu->dma_avail;
}

/* None while the list is empty (emulated groups only), as stock. */
static size_t fm_cap_iova_ranges_size(struct fm_iommu *iommu)
{
	struct vfio_iommu_type1_info_cap_iova_range *cap;
	size_t n = list_count_nodes(&iommu->iova_list);

	return n ? struct_size(cap, iova_ranges, n) : 0;
}

static void fm_cap_iova_ranges_fill(struct fm_iommu *iommu, struct vfio_info_cap_header *header)
{
	struct vfio_iommu_type1_info_cap_iova_range *cap =
		container_of(header, struct vfio_iommu_type1_info_cap_iova_range, header);
	struct fm_iova_range *range;

	list_for_each_entry(range, &iommu->iova_list, list) {
		cap->iova_ranges[cap->nr_iovas].start = range->start;
		cap->iova_ranges[cap->nr_iovas].end = range->end;
		cap->nr_iovas++;
	}
}

static const struct fm_info_cap fm_info_caps[] = {
	{ VFIO_IOMMU_TYPE1_INFO_CAP_MIGRATION, fm_cap_migration_size, fm_cap_migration_fill },
	{ VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL, fm_cap_dma_avail_size, fm_cap_dma_avail_fill },
	{ VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, fm_cap_iova_ranges_size,
	  fm_cap_iova_ranges_fill },
};

/* Build the chain; iommu->lock held. */
static int fm_info_caps_build(struct fm_iommu *iommu, struct vfio_info_cap *caps)
{
	const struct fm_info_cap *c;

	for (c = fm_info_caps; c < fm_info_caps + ARRAY_SIZE(fm_info_caps); c++) {
		struct vfio_info_cap_header *header;
		size_t size = c->size(iommu);

		if (!size)
			continue;
		header = vfio_info_cap_add(caps, size, c->id, 1);
		if (IS_ERR(header))
			return PTR_ERR(header);
		c->fill(iommu, header);
	}
	return 0;
}

/*
 * The chain goes right after the fixed struct when the user's buffer
 * (argsz) holds both. Otherwise only argsz is raised to the size needed
 * (cap_offset stays 0), so that the caller can retry with a bigger buffer.
 */
static int fm_info_put_caps(void __user *arg, struct vfio_iommu_type1_info *info,
			    struct vfio_info_cap *caps)
{
	size_t need = sizeof(*info) + caps->size;

	if (!caps->size)
		return 0;
	info->flags |= VFIO_IOMMU_INFO_CAPS;
	if (info->argsz < need) {
		info->argsz = need;
		return 0;
	}
	vfio_info_cap_shift(caps, sizeof(*info));
	if (copy_to_user(arg + sizeof(*info), caps->buf, caps->size))
		return -EFAULT;
	info->cap_offset = sizeof(*info);
	return 0;
}

static long fm_ioctl_get_info(struct fm_iommu *iommu, unsigned long arg)
{
	unsigned long minsz = offsetofend(struct vfio_iommu_type1_info, iova_pgsizes);
	struct vfio_iommu_type1_info info = {};
	struct vfio_info_cap caps = {};
	size_t outsz;
	int ret;

	ret = fm_ioctl_copy_in(&info, arg, minsz, U32_MAX);
	if (ret)
		return ret;
	/* Written back: as much of the struct as stock writes (compat.h). */
	outsz = fm_compat_info_outsz(info.argsz);

	mutex_lock(&iommu->lock);
	info.flags = VFIO_IOMMU_INFO_PGSIZES;
	info.iova_pgsizes = iommu->pgsize_bitmap;
	ret = fm_info_caps_build(iommu, &caps);
	mutex_unlock(&iommu->lock);

	if (!ret)
		ret = fm_info_put_caps((void __user *)arg, &info, &caps);
	if (!ret && copy_to_user((void __user *)arg, &info, outsz))
		ret = -EFAULT;
	kfree(caps.buf);
	return ret;
}

static long fm_ioctl_map_dma(struct fm_iommu *iommu, unsigned long arg)
{
	unsigned long minsz = offsetofend(struct vfio_iommu_type1_dma_map, size);
	u32 mask = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE | VFIO_DMA_MAP_FLAG_VADDR;
	struct vfio_iommu_type1_dma_map map;
	int ret;

	ret = fm_ioctl_copy_in(&map, arg, minsz, mask);
	return ret ? ret : fm_do_map(iommu, &map);
}

/*
 * With GET_DIRTY_BITMAP a struct vfio_bitmap follows the unmap struct; the
 * bitmap of the range is returned before anything is unmapped. It
 * cannot be combined with ALL or VADDR. fm_do_unmap checks what needs the
 * lock (alignment, tracking on, bitmap page size).
 */
static long fm_ioctl_unmap_dma(struct fm_iommu *iommu, unsigned long arg)
{
	unsigned long minsz = offsetofend(struct vfio_iommu_type1_dma_unmap, size);
	u32 mask = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP | VFIO_DMA_UNMAP_FLAG_ALL |
		   VFIO_DMA_UNMAP_FLAG_VADDR;
	struct vfio_iommu_type1_dma_unmap unmap;
	struct vfio_bitmap bitmap = {};
	int ret;

	ret = fm_ioctl_copy_in(&unmap, arg, minsz, mask);
	if (ret)
		return ret;

	if (unmap.flags & VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP) {
		if (unmap.flags & (VFIO_DMA_UNMAP_FLAG_ALL | VFIO_DMA_UNMAP_FLAG_VADDR))
			return -EINVAL;
		ret = fm_ioctl_copy_tail(&bitmap, sizeof(bitmap), arg, unmap.argsz, minsz);
		if (!ret)
			ret = fm_check_user_bitmap(&bitmap, unmap.size);
		if (ret)
			return ret;
	}

	ret = fm_do_unmap(iommu, &unmap, &bitmap);
	if (ret)
		return ret;

	/* Report how much was unmapped. */
	return copy_to_user((void __user *)arg, &unmap, minsz) ? -EFAULT : 0;
}

/* GET_BITMAP: a struct vfio_iommu_type1_dirty_bitmap_get follows. */
static long fm_dirty_pages_get(struct fm_iommu *iommu, unsigned long arg,
			       const struct vfio_iommu_type1_dirty_bitmap *dirty,
			       unsigned long minsz)
{
	struct vfio_iommu_type1_dirty_bitmap_get range;
	size_t pgsize;
	int ret;

	ret = fm_ioctl_copy_tail(&range, sizeof(range), arg, dirty->argsz, minsz);
	if (ret)
		return ret;
	/* As for MAP and UNMAP, a range may end at the last address, not wrap. */
	if (range.size && range.iova + range.size - 1 < range.iova)
		return -EOVERFLOW;

	ret = fm_check_user_bitmap(&range.bitmap, range.size);
	if (ret)
		return ret;

	/* Only the smallest page size is tracked. */
	pgsize = fm_min_pgsize(iommu);
	if (range.bitmap.pgsize != pgsize || range.iova & (pgsize - 1) ||
	    !range.size || range.size & (pgsize - 1))
		return -EINVAL;

	return fm_dirty_get_bitmap(iommu, range.iova, range.size, pgsize, range.bitmap.data);
}

static long fm_ioctl_dirty_pages(struct fm_iommu *iommu, unsigned long arg)
{
	unsigned long minsz = offsetofend(struct vfio_iommu_type1_dirty_bitmap, flags);
	u32 mask = VFIO_IOMMU_DIRTY_PAGES_FLAG_START | VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP |
		   VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP;
	struct vfio_iommu_type1_dirty_bitmap dirty;
	int ret;

	/* v1 may coalesce mappings, so it cannot tell what a range held. */
	if (!iommu->v2)
		return -EACCES;

	ret = fm_ioctl_copy_in(&dirty, arg, minsz, mask);
	if (ret)
		return ret;
	if (hweight32(dirty.flags) != 1)
		return -EINVAL;

	switch (dirty.flags) {
	case VFIO_IOMMU_DIRTY_PAGES_FLAG_START:
		return fm_dirty_start(iommu, fm_min_pgsize(iommu));
	case VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP:
		fm_dirty_stop(iommu);
		return 0;
	default:
		return fm_dirty_pages_get(iommu, arg, &dirty, minsz);
	}
}

long fm_ioctl(void *iommu_data, unsigned int cmd, unsigned long arg)
{
	struct fm_iommu *iommu = iommu_data;

	/* fm_ioctl_copy_in() reads every argument's head as a struct fm_ioctl_head. */
	BUILD_BUG_ON(offsetof(struct vfio_iommu_type1_info, flags) != 4 ||
		     offsetof(struct vfio_iommu_type1_dma_map, flags) != 4 ||
		     offsetof(struct vfio_iommu_type1_dma_unmap, flags) != 4 ||
		     offsetof(struct vfio_iommu_type1_dirty_bitmap, flags) != 4);

	switch (cmd) {
	case VFIO_CHECK_EXTENSION:
		return fm_check_extension(iommu, arg);
	case VFIO_IOMMU_GET_INFO:
		return fm_ioctl_get_info(iommu, arg);
	case VFIO_IOMMU_MAP_DMA:
		return fm_ioctl_map_dma(iommu, arg);
	case VFIO_IOMMU_UNMAP_DMA:
		return fm_ioctl_unmap_dma(iommu, arg);
	case VFIO_IOMMU_DIRTY_PAGES:
		return fm_ioctl_dirty_pages(iommu, arg);
	default:
		return -ENOTTY;
	}
}
