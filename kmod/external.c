// SPDX-License-Identifier: GPL-2.0-only
/*
 * Emulated-IOMMU devices (mdev and the like) reach guest memory through
 * the container: pin_pages/unpin_pages for single pages, dma_rw for copies.
 *
 * Each externally pinned page is a struct fm_vpfn in its dma's pfn_list,
 * keyed by IOVA and reference counted. It holds one pin of its own. It is
 * charged to the mapping's mm only while the dma is not iommu_mapped; once
 * the dma is mapped, the IOMMU pin covers the charge, and the pin pipeline
 * and unmap pipeline skip vpfn pages when they charge and uncharge.
 */
#include <linux/kthread.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "foliomap.h"

struct fm_vpfn *fm_vpfn_find(struct fm_dma *dma, dma_addr_t iova)
{
	struct rb_node *node = dma->pfn_list.rb_node;

	while (node) {
		struct fm_vpfn *vpfn = rb_entry(node, struct fm_vpfn, node);

		if (iova < vpfn->iova)
			node = node->rb_left;
		else if (iova > vpfn->iova)
			node = node->rb_right;
		else
			return vpfn;
	}
	return NULL;
}

/*
 * The number of external pins in [iova, iova + npage pages): one descent to
 * the first, then an in-order walk. O(1) while the tree is empty.
 */
unsigned long fm_vpfn_count(struct fm_dma *dma, dma_addr_t iova, unsigned long npage)
{
	dma_addr_t last = iova + (npage << PAGE_SHIFT) - 1;
	struct rb_node *node = dma->pfn_list.rb_node, *first = NULL;
	unsigned long count = 0;

	while (node) {
		struct fm_vpfn *vpfn = rb_entry(node, struct fm_vpfn, node);

		if (vpfn->iova < iova) {
			node = node->rb_right;
		} else {
			first = node;
			node = node->rb_left;
		}
	}
	for (node = first; node; node = rb_next(node)) {
		if (rb_entry(node, struct fm_vpfn, node)->iova > last)
			break;
		count++;
	}
	return count;
}

static void fm_vpfn_link(struct fm_dma *dma, struct fm_vpfn *new)
{
	struct rb_node **link = &dma->pfn_list.rb_node, *parent = NULL;

	while (*link) {
		parent = *link;
		if (new->iova < rb_entry(parent, struct fm_vpfn, node)->iova)
			link = &parent->rb_left;
		else
			link = &parent->rb_right;
	}
	rb_link_node(&new->node, parent, link);
	rb_insert_color(&new->node, &dma->pfn_list);
}

/*
 * Pin the page behind @iova for an emulated device and record it. Memory
 * without a struct page cannot be handed out as a struct page: -EINVAL.
 */
static int fm_pin_external(struct fm_dma *dma, dma_addr_t iova, unsigned long *pfn)
{
	unsigned long vaddr = dma->vaddr + (iova - dma->iova);
	bool charge = !dma->iommu_mapped;
	/* The mapping's own process holds its mm already (a kthread does not). */
	bool own_mm = dma->mm == current->mm && !(current->flags & PF_KTHREAD);
	struct fm_vpfn *vpfn;
	bool rsvd;
	int ret;

	if (!own_mm && !mmget_not_zero(dma->mm))
		return -ENODEV;

	ret = fm_pin_one(dma, vaddr, pfn);
	if (ret)
		goto out;
	ret = -EINVAL;
	if (!pfn_valid(*pfn))
		goto out;

	/* Reserved pages are not charged. */
	rsvd = PageReserved(pfn_to_page(*pfn));
	if (rsvd)
		dma->has_rsvd = true;

	ret = -ENOMEM;
	vpfn = kzalloc(sizeof(*vpfn), GFP_KERNEL_ACCOUNT);
	if (!vpfn)
		goto unpin;

	if (charge && !rsvd) {
		ret = fm_lock_acct(dma, 1, false);
		if (ret) {
			kfree(vpfn);
			goto unpin;
		}
	}

	vpfn->iova = iova;
	vpfn->pfn = *pfn;
	vpfn->ref_count = 1;
	fm_vpfn_link(dma, vpfn);
	ret = 0;
	goto out;

unpin:
	fm_unpin_external_page(dma, iova, *pfn, false);
out:
	if (!own_mm)
		mmput(dma->mm);
	return ret;
}

/* Drop one reference; the last one unpins and uncharges if it was charged. */
static void fm_unpin_external(struct fm_dma *dma, dma_addr_t iova)
{
	struct fm_vpfn *vpfn = fm_vpfn_find(dma, iova);
	unsigned long pfn;

	if (!vpfn || --vpfn->ref_count)
		return;

	pfn = vpfn->pfn;
	rb_erase(&vpfn->node, &dma->pfn_list);
	kfree(vpfn);
	fm_unpin_external_page(dma, iova, pfn, !dma->iommu_mapped);
}

/* Undo the first @npage pins of a failed fm_pin_pages(). */
static void fm_unpin_range(struct fm_iommu *iommu, dma_addr_t user_iova, int npage)
{
	struct fm_dma *dma = NULL;
	int i;

	for (i = 0; i < npage; i++) {
		dma_addr_t iova = user_iova + ((dma_addr_t)i << PAGE_SHIFT);

		if (!dma || iova < dma->iova || iova > dma->iova + dma->size - 1)
			dma = fm_dma_find(iommu, iova, PAGE_SIZE);
		if (!dma)
			break;
		fm_unpin_external(dma, iova);
	}
}

int fm_pin_pages(void *iommu_data, struct iommu_group *iommu_group, dma_addr_t user_iova,
		 int npage, int prot, struct page **pages)
{
	struct fm_iommu *iommu = iommu_data;
	struct fm_dma *dma = NULL;
	struct fm_group *group;
	int i, ret;

	if (!iommu || !pages || fm_compat_external_npage_bad(npage))
		return -EINVAL;
	if (!iommu->v2)
		return -EACCES;
	if (fm_compat_external_range_wraps(user_iova, npage))
		return -EOVERFLOW;

	mutex_lock(&iommu->lock);

	/* No vaddr to pin through until the owner supplies a new one. */
	ret = -EBUSY;
	if (iommu->vaddr_invalid_count)
		goto out;
	/* Only devices that can be told to unpin may pin. */
	ret = -EINVAL;
	if (list_empty(&iommu->device_list))
		goto out;

	for (i = 0; i < npage; i++) {
		dma_addr_t iova = user_iova + ((dma_addr_t)i << PAGE_SHIFT);
		struct fm_vpfn *vpfn;
		unsigned long pfn;

		if (!dma || iova < dma->iova || iova > dma->iova + dma->size - 1)
			dma = fm_dma_find(iommu, iova, PAGE_SIZE);
		if (!dma) {
			ret = -EINVAL;
			goto unwind;
		}
		if ((dma->prot & prot) != prot) {
			ret = -EPERM;
			goto unwind;
		}

		vpfn = fm_vpfn_find(dma, iova);
		if (vpfn) {
			vpfn->ref_count++;
			pages[i] = pfn_to_page(vpfn->pfn);
			continue;
		}

		ret = fm_pin_external(dma, iova, &pfn);
		if (ret)
			goto unwind;
		pages[i] = pfn_to_page(pfn);
		fm_dirty_mark_pinned(iommu, dma, iova, 1);
	}

	/* This group evidently uses pin_pages: its dirty scope is known now. */
	group = fm_find_group(iommu, iommu_group);
	if (group && !group->pinned_page_dirty_scope) {
		group->pinned_page_dirty_scope = true;
		iommu->num_non_pinned_groups--;
	}
	ret = npage;
	goto out;

unwind:
	fm_unpin_range(iommu, user_iova, i);
	memset(pages, 0, sizeof(*pages) * (i + 1));
out:
	mutex_unlock(&iommu->lock);
	return ret;
}

void fm_unpin_pages(void *iommu_data, dma_addr_t user_iova, int npage)
{
	struct fm_iommu *iommu = iommu_data;

	if (!iommu->v2)
		return;
	/* As the kernel's stock type1 (compat.h): a device driver's bug. */
	if (WARN_ON(fm_compat_external_npage_bad(npage) ||
		    fm_compat_external_range_wraps(user_iova, npage)))
		return;

	mutex_lock(&iommu->lock);
	fm_unpin_range(iommu, user_iova, npage);
	mutex_unlock(&iommu->lock);
}

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

/*
 * Lock order: device_list_lock, then iommu->lock; never the other way round.
 *
 * The dma_unmap callbacks run under device_list_lock (the list must not
 * change under the walk) and unpin through fm_unpin_pages(), which takes
 * iommu->lock: device_list_lock -> iommu->lock is forced on us. Stock
 * type1 takes iommu->lock first here, so a device opened while another
 * device's callback runs waits for device_list_lock holding iommu->lock,
 * which the callback waits for: both hang. So the list is changed with
 * both held, device_list_lock first, and fm_notify_dma_unmap() releases
 * iommu->lock before it takes device_list_lock. Holding both here keeps
 * list_empty(&device_list) valid under iommu->lock alone (fm_pin_pages,
 * fm_notify_dma_unmap), and the walk valid under device_list_lock alone.
 * Nothing else in foliomap takes device_list_lock.
 */
void fm_register_device(void *iommu_data, struct vfio_device *vdev)
{
	struct fm_iommu *iommu = iommu_data;

	if (!vdev->ops->dma_unmap)
		return;

	mutex_lock(&iommu->device_list_lock);
	mutex_lock(&iommu->lock);
	list_add(&vdev->iommu_entry, &iommu->device_list);
	mutex_unlock(&iommu->lock);
	mutex_unlock(&iommu->device_list_lock);
}

void fm_unregister_device(void *iommu_data, struct vfio_device *vdev)
{
	struct fm_iommu *iommu = iommu_data;

	if (!vdev->ops->dma_unmap)
		return;

	mutex_lock(&iommu->device_list_lock);
	mutex_lock(&iommu->lock);
	list_del(&vdev->iommu_entry);
	mutex_unlock(&iommu->lock);
	mutex_unlock(&iommu->device_list_lock);
}

/*
 * Ask every emulated device to drop its pins in [iova, iova + size); called
 * and returns with iommu->lock held. The devices unpin through
 * fm_unpin_pages(), which takes iommu->lock, and device_list_lock comes
 * before iommu->lock (above): iommu->lock is released first, so the caller
 * must look everything up again afterwards. The list may change in between;
 * the walk sees it as it is under device_list_lock.
 */
void fm_notify_dma_unmap(struct fm_iommu *iommu, dma_addr_t iova, size_t size)
{
	struct vfio_device *vdev;

	if (list_empty(&iommu->device_list))
		return;

	mutex_unlock(&iommu->lock);
	mutex_lock(&iommu->device_list_lock);

	list_for_each_entry(vdev, &iommu->device_list, iommu_entry)
		vdev->ops->dma_unmap(vdev, iova, size);

	mutex_unlock(&iommu->device_list_lock);
	mutex_lock(&iommu->lock);
}
