// SPDX-License-Identifier: GPL-2.0-only
/*
 * The container uAPI: argument checks and the GET_INFO capability chain.
 * The work is done elsewhere: fm_do_map (pin.c), fm_do_unmap (unmap.c) and
 * the dirty tracking calls (dirty.c), which take iommu->lock themselves.
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

static int fm_cap_migration(struct fm_iommu *iommu, struct vfio_info_cap *caps)
{
	struct vfio_iommu_type1_info_cap_migration *cap;
	struct vfio_info_cap_header *header;

	header = vfio_info_cap_add(caps, sizeof(*cap), VFIO_IOMMU_TYPE1_INFO_CAP_MIGRATION, 1);
	if (IS_ERR(header))
		return PTR_ERR(header);

	cap = container_of(header, struct vfio_iommu_type1_info_cap_migration, header);
	cap->flags = 0;
	/* Dirty bits are kept at the smallest page size only. */
	cap->pgsize_bitmap = (u64)1 << __ffs(iommu->pgsize_bitmap);
	cap->max_dirty_bitmap_size = FM_DIRTY_BITMAP_SIZE_MAX;
	return 0;
}

static int fm_cap_dma_avail(struct fm_iommu *iommu, struct vfio_info_cap *caps)
{
	struct vfio_iommu_type1_info_dma_avail *cap;
	struct vfio_info_cap_header *header;

	header = vfio_info_cap_add(caps, sizeof(*cap), VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL, 1);
	if (IS_ERR(header))
		return PTR_ERR(header);

	cap = container_of(header, struct vfio_iommu_type1_info_dma_avail, header);
	cap->avail = iommu->dma_avail;
	return 0;
}

/* No capability while the list is empty (emulated groups only), as stock. */
static int fm_cap_iova_ranges(struct fm_iommu *iommu, struct vfio_info_cap *caps)
{
	struct vfio_iommu_type1_info_cap_iova_range *cap;
	struct vfio_info_cap_header *header;
	struct fm_iova_range *range;
	u32 n = 0;

	list_for_each_entry(range, &iommu->iova_list, list)
		n++;
	if (!n)
		return 0;

	header = vfio_info_cap_add(caps, struct_size(cap, iova_ranges, n),
				   VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, 1);
	if (IS_ERR(header))
		return PTR_ERR(header);

	cap = container_of(header, struct vfio_iommu_type1_info_cap_iova_range, header);
	cap->nr_iovas = n;
	n = 0;
	list_for_each_entry(range, &iommu->iova_list, list) {
		cap->iova_ranges[n].start = range->start;
		cap->iova_ranges[n].end = range->end;
		n++;
	}
	return 0;
}

/*
 * The capability chain follows the fixed struct. When argsz is too small
 * for it, only argsz is raised to the size needed (cap_offset stays 0) so
 * that the caller can retry with a bigger buffer.
 */
static long fm_ioctl_get_info(struct fm_iommu *iommu, unsigned long arg)
{
	unsigned long minsz = offsetofend(struct vfio_iommu_type1_info, iova_pgsizes);
	struct vfio_iommu_type1_info info = {};
	struct vfio_info_cap caps = {};
	size_t outsz;
	int ret;

	if (copy_from_user(&info, (void __user *)arg, minsz))
		return -EFAULT;
	if (info.argsz < minsz)
		return -EINVAL;
	/* Written back: as much of the struct as stock writes (compat.h). */
	outsz = fm_compat_info_outsz(info.argsz);

	mutex_lock(&iommu->lock);
	info.flags = VFIO_IOMMU_INFO_PGSIZES;
	info.iova_pgsizes = iommu->pgsize_bitmap;
	ret = fm_cap_migration(iommu, &caps);
	if (!ret)
		ret = fm_cap_dma_avail(iommu, &caps);
	if (!ret)
		ret = fm_cap_iova_ranges(iommu, &caps);
	mutex_unlock(&iommu->lock);
	if (ret)
		goto out_free;

	if (caps.size) {
		info.flags |= VFIO_IOMMU_INFO_CAPS;
		if (info.argsz < sizeof(info) + caps.size) {
			info.argsz = sizeof(info) + caps.size;
		} else {
			vfio_info_cap_shift(&caps, sizeof(info));
			if (copy_to_user((void __user *)arg + sizeof(info), caps.buf, caps.size)) {
				ret = -EFAULT;
				goto out_free;
			}
			info.cap_offset = sizeof(info);
		}
	}

	if (copy_to_user((void __user *)arg, &info, outsz))
		ret = -EFAULT;
out_free:
	kfree(caps.buf);
	return ret;
}

static long fm_ioctl_map_dma(struct fm_iommu *iommu, unsigned long arg)
{
	unsigned long minsz = offsetofend(struct vfio_iommu_type1_dma_map, size);
	u32 mask = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE | VFIO_DMA_MAP_FLAG_VADDR;
	struct vfio_iommu_type1_dma_map map;

	if (copy_from_user(&map, (void __user *)arg, minsz))
		return -EFAULT;
	if (map.argsz < minsz || map.flags & ~mask)
		return -EINVAL;

	return fm_do_map(iommu, &map);
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

	if (copy_from_user(&unmap, (void __user *)arg, minsz))
		return -EFAULT;
	if (unmap.argsz < minsz || unmap.flags & ~mask)
		return -EINVAL;

	if (unmap.flags & VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP) {
		if (unmap.flags & (VFIO_DMA_UNMAP_FLAG_ALL | VFIO_DMA_UNMAP_FLAG_VADDR))
			return -EINVAL;
		if (unmap.argsz < minsz + sizeof(bitmap))
			return -EINVAL;
		if (copy_from_user(&bitmap, (void __user *)arg + minsz, sizeof(bitmap)))
			return -EFAULT;
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

	if (dirty->argsz - minsz < sizeof(range))
		return -EINVAL;
	if (copy_from_user(&range, (void __user *)arg + minsz, sizeof(range)))
		return -EFAULT;
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

	/* v1 may coalesce mappings, so it cannot tell what a range held. */
	if (!iommu->v2)
		return -EACCES;

	if (copy_from_user(&dirty, (void __user *)arg, minsz))
		return -EFAULT;
	if (dirty.argsz < minsz || dirty.flags & ~mask)
		return -EINVAL;
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
