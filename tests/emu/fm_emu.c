// SPDX-License-Identifier: GPL-2.0-only
/*
 * fm_emu: a test-only emulated-IOMMU VFIO device.  Loaded by
 * tests/t_emulated.c inside the test guest only.
 *
 * Two platform devices, "fm_emu" and "fm_emu.1", are bound to this module's
 * platform driver; its probe registers a vfio_device with
 * vfio_register_emulated_iommu_dev(), which gives each a group of its own
 * (/dev/vfio/<N>, N = the iommu_group of /sys/bus/platform/devices/<name>).
 * Userspace adds a group to a type1 container, opens the device by name and
 * drives vfio_pin_pages(), vfio_unpin_pages() and vfio_dma_rw() through the
 * ioctls of fm_emu.h.
 *
 * Pins are kept as records (one per successful FM_EMU_PIN).  The dma_unmap
 * callback releases every record overlapping the range, as an mdev driver
 * must; close_device releases whatever is left.  Counters are exported by
 * FM_EMU_STATS.
 *
 * emu->lock guards the records and counters only; it is never held across
 * vfio_pin_pages() or vfio_unpin_pages().  Those take the backend's own
 * locks, and the backend calls dma_unmap with its device list locked:
 * holding emu->lock around them would order it both before and after the
 * backend's locks (stock type1 takes iommu->lock, then its
 * device_list_lock, and the callback takes emu->lock), which lockdep
 * rightly reports.  A record is therefore added just after its pages were
 * pinned: an unmap callback that runs in between finds nothing to release,
 * and the backend, which still sees the pins, calls it again.
 *
 * unmap_delay_ms (module parameter, 0644): when non-zero, the next dma_unmap
 * callback of a device that holds pins counts itself in unmap_calls, then
 * sleeps that long before it unpins, and resets the parameter to 0 (one
 * shot).  The backend holds its device list lock across the callbacks, so
 * this holds a window open in which userspace opens or closes the other
 * device while the callback runs (t_emulated's lockorder tests).
 *
 * mmap of the device fd: driver-owned memory in a VM_IO vma, the way some
 * drivers hand out their buffers: ordinary pages of one large folio
 * (FM_EMU_MMAP_MAX at most), inserted with vm_insert_page(), so their ptes
 * are not special. GUP refuses VM_IO vmas; a type1 backend must too.
 */
#include <linux/delay.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/platform_device.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vfio.h>
#include <linux/workqueue.h>

#include "compat.h"
#include "fm_emu.h"

struct fm_emu_rec {
	struct list_head list;
	dma_addr_t iova;
	int npage;
};

struct fm_emu_dev {
	struct vfio_device vdev;
	struct mutex lock;		/* records and stats */
	struct list_head records;
	struct fm_emu_stats stats;
};

static struct platform_device *fm_emu_pdev, *fm_emu_pdev2;

static unsigned int unmap_delay_ms;
module_param(unmap_delay_ms, uint, 0644);
MODULE_PARM_DESC(unmap_delay_ms,
		 "sleep this long in the next dma_unmap callback before unpinning (one shot)");

static struct fm_emu_dev *to_emu(struct vfio_device *vdev)
{
	return container_of(vdev, struct fm_emu_dev, vdev);
}

/* Take one record off the device onto @list; emu->lock held. */
static void fm_emu_take_rec(struct fm_emu_dev *emu, struct fm_emu_rec *rec,
			    struct list_head *list)
{
	emu->stats.pinned_pages -= rec->npage;
	emu->stats.records--;
	list_move_tail(&rec->list, list);
}

/* Unpin and free the records taken; emu->lock not held. */
static void fm_emu_put_recs(struct fm_emu_dev *emu, struct list_head *list)
{
	struct fm_emu_rec *rec, *next;

	list_for_each_entry_safe(rec, next, list, list) {
		vfio_unpin_pages(&emu->vdev, rec->iova, rec->npage);
		list_del(&rec->list);
		kfree(rec);
	}
}

/* Release @rec unless an unmap callback already did (it may be freed). */
static void fm_emu_drop_rec(struct fm_emu_dev *emu, struct fm_emu_rec *rec)
{
	struct fm_emu_rec *r;
	LIST_HEAD(drop);

	mutex_lock(&emu->lock);
	list_for_each_entry(r, &emu->records, list) {
		if (r == rec) {
			fm_emu_take_rec(emu, r, &drop);
			break;
		}
	}
	mutex_unlock(&emu->lock);
	fm_emu_put_recs(emu, &drop);
}

static long fm_emu_pin(struct fm_emu_dev *emu, void __user *arg)
{
	struct fm_emu_pin p;
	struct page **pages;
	struct fm_emu_rec *rec;
	int alloc, i, ret;

	if (copy_from_user(&p, arg, sizeof(p)))
		return -EFAULT;
	/* The pages array is only touched for 1..VFIO_PIN_PAGES_MAX_ENTRIES. */
	alloc = clamp(p.npage, 1, 1024);
	pages = kcalloc(alloc, sizeof(*pages), GFP_KERNEL);
	rec = kzalloc(sizeof(*rec), GFP_KERNEL);
	if (!pages || !rec) {
		ret = -ENOMEM;
		goto out;
	}

	ret = vfio_pin_pages(&emu->vdev, p.iova, p.npage, p.prot, pages);
	p.ret = ret;
	if (ret > 0) {
		for (i = 0; i < ret; i++) {
			u64 *va = kmap_local_page(pages[i]);
			u64 first = va[0];

			if (p.tag)
				va[1] = p.tag + i;
			kunmap_local(va);
			if (p.sig && put_user(first, (u64 __user *)(uintptr_t)p.sig + i))
				p.sig = 0;	/* report nothing more; pins stay recorded */
		}
		rec->iova = p.iova;
		rec->npage = ret;
		mutex_lock(&emu->lock);
		list_add_tail(&rec->list, &emu->records);
		emu->stats.pinned_pages += ret;
		emu->stats.records++;
		mutex_unlock(&emu->lock);
	}
	ret = 0;
	if (copy_to_user(arg, &p, sizeof(p))) {
		/* Userspace cannot learn of these pins: give them back. */
		if (p.ret > 0)
			fm_emu_drop_rec(emu, rec);
		ret = -EFAULT;
	}
	if (p.ret > 0)
		rec = NULL;	/* the list's now, or already released */
out:
	kfree(rec);
	kfree(pages);
	return ret;
}

static long fm_emu_unpin(struct fm_emu_dev *emu, void __user *arg)
{
	struct fm_emu_unpin u;
	struct fm_emu_rec *rec;
	LIST_HEAD(drop);
	long ret = -ENOENT;

	if (copy_from_user(&u, arg, sizeof(u)))
		return -EFAULT;
	mutex_lock(&emu->lock);
	list_for_each_entry(rec, &emu->records, list) {
		if (rec->iova == u.iova && rec->npage == u.npage) {
			fm_emu_take_rec(emu, rec, &drop);
			ret = 0;
			break;
		}
	}
	mutex_unlock(&emu->lock);
	fm_emu_put_recs(emu, &drop);
	return ret;
}

struct fm_emu_rw_work {
	struct work_struct work;
	struct vfio_device *vdev;
	dma_addr_t iova;
	void *buf;
	size_t len;
	bool write;
	int ret;
};

static void fm_emu_rw_fn(struct work_struct *work)
{
	struct fm_emu_rw_work *w = container_of(work, struct fm_emu_rw_work, work);

	w->ret = vfio_dma_rw(w->vdev, w->iova, w->buf, w->len, w->write);
}

static long fm_emu_rw(struct fm_emu_dev *emu, void __user *arg)
{
	struct fm_emu_rw r;
	struct fm_emu_rw_work w = {};
	void __user *ubuf;
	void *buf;
	long ret;

	if (copy_from_user(&r, arg, sizeof(r)))
		return -EFAULT;
	if (r.len > FM_EMU_MAX_RW)
		return -E2BIG;
	ubuf = (void __user *)(uintptr_t)r.uaddr;
	buf = kvzalloc(max_t(size_t, r.len, 1), GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	ret = -EFAULT;
	if ((r.flags & FM_EMU_RW_WRITE) && copy_from_user(buf, ubuf, r.len))
		goto out;

	w.vdev = &emu->vdev;
	w.iova = r.iova;
	w.buf = (r.flags & FM_EMU_RW_NULL) ? NULL : buf;
	w.len = r.len;
	w.write = r.flags & FM_EMU_RW_WRITE;
	if (r.flags & FM_EMU_RW_KTHREAD) {
		INIT_WORK_ONSTACK(&w.work, fm_emu_rw_fn);
		queue_work(system_unbound_wq, &w.work);
		flush_work(&w.work);
		destroy_work_on_stack(&w.work);
	} else {
		fm_emu_rw_fn(&w.work);
	}
	r.ret = w.ret;

	if (!w.ret && !(r.flags & FM_EMU_RW_WRITE) && copy_to_user(ubuf, buf, r.len))
		goto out;
	ret = copy_to_user(arg, &r, sizeof(r)) ? -EFAULT : 0;
out:
	kvfree(buf);
	return ret;
}

static long fm_emu_ioctl(struct vfio_device *vdev, unsigned int cmd, unsigned long arg)
{
	struct fm_emu_dev *emu = to_emu(vdev);
	void __user *uarg = (void __user *)arg;
	struct fm_emu_stats s;

	switch (cmd) {
	case FM_EMU_PIN:
		return fm_emu_pin(emu, uarg);
	case FM_EMU_UNPIN:
		return fm_emu_unpin(emu, uarg);
	case FM_EMU_RW:
		return fm_emu_rw(emu, uarg);
	case FM_EMU_STATS:
		mutex_lock(&emu->lock);
		s = emu->stats;
		mutex_unlock(&emu->lock);
		return copy_to_user(uarg, &s, sizeof(s)) ? -EFAULT : 0;
	}
	return -ENOTTY;
}

/* The backend is about to unmap [iova, iova + length): drop our pins there. */
static void fm_emu_dma_unmap(struct vfio_device *vdev, u64 iova, u64 length)
{
	struct fm_emu_dev *emu = to_emu(vdev);
	struct fm_emu_rec *rec, *next;
	u64 last = iova + length - 1;
	unsigned int delay = 0;
	LIST_HEAD(drop);

	mutex_lock(&emu->lock);
	emu->stats.unmap_calls++;
	emu->stats.last_unmap_iova = iova;
	emu->stats.last_unmap_len = length;
	/* Only a device that has pins to drop takes the delay. */
	if (!list_empty(&emu->records))
		delay = xchg(&unmap_delay_ms, 0);
	if (delay) {
		/* FM_EMU_STATS shows the call while it sleeps. */
		mutex_unlock(&emu->lock);
		msleep(delay);
		mutex_lock(&emu->lock);
	}
	list_for_each_entry_safe(rec, next, &emu->records, list) {
		u64 rlast = rec->iova + ((u64)rec->npage << PAGE_SHIFT) - 1;

		if (rec->iova > last || rlast < iova)
			continue;
		emu->stats.unmap_unpinned += rec->npage;
		fm_emu_take_rec(emu, rec, &drop);
	}
	mutex_unlock(&emu->lock);
	fm_emu_put_recs(emu, &drop);
}

static int fm_emu_open_device(struct vfio_device *vdev)
{
	struct fm_emu_dev *emu = to_emu(vdev);

	mutex_lock(&emu->lock);
	emu->stats.opens++;
	mutex_unlock(&emu->lock);
	return 0;
}

static void fm_emu_close_device(struct vfio_device *vdev)
{
	struct fm_emu_dev *emu = to_emu(vdev);
	struct fm_emu_rec *rec, *next;
	LIST_HEAD(drop);

	mutex_lock(&emu->lock);
	list_for_each_entry_safe(rec, next, &emu->records, list) {
		emu->stats.close_unpinned += rec->npage;
		fm_emu_take_rec(emu, rec, &drop);
	}
	mutex_unlock(&emu->lock);
	fm_emu_put_recs(emu, &drop);
}

static int fm_emu_init_dev(struct vfio_device *vdev)
{
	struct fm_emu_dev *emu = to_emu(vdev);

	mutex_init(&emu->lock);
	INIT_LIST_HEAD(&emu->records);
	return 0;
}

/*
 * The folio is freed when the last pte (or pin) lets go of it: each
 * vm_insert_page() takes a reference, ours is dropped right away.
 */
static int fm_emu_mmap(struct vfio_device *vdev, struct vm_area_struct *vma)
{
	unsigned long size = vma->vm_end - vma->vm_start, off;
	struct page *page;
	int ret = 0;

	if (vma->vm_pgoff || size > FM_EMU_MMAP_MAX)
		return -EINVAL;
	page = alloc_pages(GFP_KERNEL | __GFP_COMP | __GFP_ZERO, get_order(size));
	if (!page)
		return -ENOMEM;
	FM_EMU_VM_FLAGS_SET(vma, VM_IO | VM_DONTEXPAND | VM_DONTDUMP);
	for (off = 0; off < size && !ret; off += PAGE_SIZE)
		ret = vm_insert_page(vma, vma->vm_start + off, page + (off >> PAGE_SHIFT));
	put_page(page);
	return ret;
}

#ifdef FM_EMU_RELEASE_MUST_FREE
static void fm_emu_release_dev(struct vfio_device *vdev)
{
	vfio_free_device(vdev);
}
#endif

static const struct vfio_device_ops fm_emu_ops = {
	.name		= "fm-emu",
	.init		= fm_emu_init_dev,
#ifdef FM_EMU_RELEASE_MUST_FREE
	.release	= fm_emu_release_dev,
#endif
	.open_device	= fm_emu_open_device,
	.close_device	= fm_emu_close_device,
	.ioctl		= fm_emu_ioctl,
	.mmap		= fm_emu_mmap,
	.dma_unmap	= fm_emu_dma_unmap,
#ifdef FM_EMU_HAVE_IOMMUFD_OPS
	.bind_iommufd	= vfio_iommufd_emulated_bind,
	.unbind_iommufd	= vfio_iommufd_emulated_unbind,
	.attach_ioas	= vfio_iommufd_emulated_attach_ioas,
#endif
#ifdef FM_EMU_HAVE_DETACH_IOAS
	.detach_ioas	= vfio_iommufd_emulated_detach_ioas,
#endif
};

static int fm_emu_probe(struct platform_device *pdev)
{
	struct fm_emu_dev *emu;
	int ret;

	emu = vfio_alloc_device(fm_emu_dev, vdev, &pdev->dev, &fm_emu_ops);
	if (IS_ERR(emu))
		return PTR_ERR(emu);
	ret = vfio_register_emulated_iommu_dev(&emu->vdev);
	if (ret) {
		vfio_put_device(&emu->vdev);
		return ret;
	}
	platform_set_drvdata(pdev, emu);
	return 0;
}

static void fm_emu_remove(struct platform_device *pdev)
{
	struct fm_emu_dev *emu = platform_get_drvdata(pdev);

	vfio_unregister_group_dev(&emu->vdev);
	vfio_put_device(&emu->vdev);
}

static struct platform_driver fm_emu_driver = {
	.driver = {
		.name = FM_EMU_NAME,
	},
	.probe = fm_emu_probe,
	FM_EMU_PLATFORM_REMOVE(fm_emu_remove),
	/* The device gets its own emulated group; no default domain to claim. */
	.driver_managed_dma = true,
};

/* One device, bound to the driver; NULL if it could not be created or bound. */
static struct platform_device *fm_emu_add(int id)
{
	struct platform_device *pdev;

	pdev = platform_device_register_simple(FM_EMU_NAME, id, NULL, 0);
	if (IS_ERR(pdev))
		return NULL;
	if (!platform_get_drvdata(pdev)) {
		platform_device_unregister(pdev);
		return NULL;
	}
	return pdev;
}

static int __init fm_emu_init(void)
{
	int ret = platform_driver_register(&fm_emu_driver);

	if (ret)
		return ret;
	/* "fm_emu" and "fm_emu.1" (FM_EMU_NAME2) */
	fm_emu_pdev = fm_emu_add(PLATFORM_DEVID_NONE);
	fm_emu_pdev2 = fm_emu_add(1);
	if (!fm_emu_pdev || !fm_emu_pdev2) {
		if (fm_emu_pdev)
			platform_device_unregister(fm_emu_pdev);
		if (fm_emu_pdev2)
			platform_device_unregister(fm_emu_pdev2);
		platform_driver_unregister(&fm_emu_driver);
		return -ENODEV;
	}
	return 0;
}

static void __exit fm_emu_exit(void)
{
	platform_device_unregister(fm_emu_pdev2);
	platform_device_unregister(fm_emu_pdev);
	platform_driver_unregister(&fm_emu_driver);
}

module_init(fm_emu_init);
module_exit(fm_emu_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("foliomap tests: emulated-IOMMU VFIO device driving pin_pages/dma_rw");
