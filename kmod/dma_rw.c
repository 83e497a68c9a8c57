// SPDX-License-Identifier: GPL-2.0-only
/*
 * dma_rw: emulated-IOMMU devices copy to and from guest memory by IOVA,
 * through the mapping's own address space; writes mark the pages dirty
 * (dirty.c).
 */
#include <linux/kthread.h>
#include <linux/sched/mm.h>
#include <linux/uaccess.h>

#include "foliomap.h"

/*
 * Copy between @data and the part of one mapping that starts at
 * @user_iova, through the mapping's own address space. Returns the bytes
 * copied or -errno.
 */
static ssize_t fm_dma_rw_chunk(struct fm_iommu *iommu, dma_addr_t user_iova, void *data,
			       size_t count, bool write)
{
	bool kthread = !current->mm;
	struct fm_dma *dma;
	void __user *uaddr;
	size_t offset;
	ssize_t ret;

	dma = fm_dma_find(iommu, user_iova, 1);
	if (!dma)
		return -EINVAL;
	if ((write && !(dma->prot & IOMMU_WRITE)) || !(dma->prot & IOMMU_READ))
		return -EPERM;
	if (!mmget_not_zero(dma->mm))
		return -EPERM;

	offset = user_iova - dma->iova;
	count = min(count, dma->size - offset);
	uaddr = (void __user *)(dma->vaddr + offset);

	/* Only a kthread may borrow the mm; a process must be the owner. */
	ret = -EFAULT;
	if (kthread)
		kthread_use_mm(dma->mm);
	else if (current->mm != dma->mm)
		goto out;

	if (write) {
		if (!copy_to_user(uaddr, data, count)) {
			dma_addr_t page = ALIGN_DOWN(user_iova, PAGE_SIZE);

			fm_dirty_mark_pinned(iommu, dma, page,
					     DIV_ROUND_UP(user_iova + count - page, PAGE_SIZE));
			ret = count;
		}
	} else if (!copy_from_user(data, uaddr, count)) {
		ret = count;
	}

	if (kthread)
		kthread_unuse_mm(dma->mm);
out:
	mmput(dma->mm);
	return ret;
}

int fm_dma_rw(void *iommu_data, dma_addr_t user_iova, void *data, size_t count,
	      bool write)
{
	struct fm_iommu *iommu = iommu_data;
	ssize_t done;
	int ret = 0;

	mutex_lock(&iommu->lock);

	if (iommu->vaddr_invalid_count) {
		ret = -EBUSY;
		goto out;
	}

	while (count) {
		done = fm_dma_rw_chunk(iommu, user_iova, data, count, write);
		if (done < 0) {
			ret = done;
			break;
		}
		count -= done;
		data += done;
		user_iova += done;
	}
out:
	mutex_unlock(&iommu->lock);
	return ret;
}
