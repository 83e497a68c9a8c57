// SPDX-License-Identifier: GPL-2.0-only
/*
 * Containers: open and release, attaching and detaching groups, and the
 * IOMMU domains behind them.
 *
 * A group of emulated-IOMMU devices (mdev) has no domain: its devices reach
 * memory only through pin_pages and dma_rw. Every other group is attached to
 * a domain, and groups whose IOMMUs are interchangeable share one, so that
 * each mapping is programmed once per distinct domain rather than per group.
 *
 * Holding a group is what entitles the container to its mappings: when the
 * last group that could use them leaves, they are unmapped and unpinned.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/err.h>
#include <linux/iommu.h>
#include <linux/list.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/printk.h>
#include <linux/slab.h>

#include "foliomap.h"

void *fm_open(unsigned long arg)
{
	struct fm_iommu *iommu;
	bool v2;

	switch (arg) {
	case VFIO_TYPE1_IOMMU:
		v2 = false;
		break;
	case VFIO_TYPE1v2_IOMMU:
		v2 = true;
		break;
	case FM_TYPE1_NESTING_IOMMU:
		/*
		 * No x86 IOMMU driver of 6.1 or 6.12 can nest: refused, and
		 * the core then tries the next driver that accepts the type,
		 * i.e. stock type1 when it is loaded. 7.x's stock opens the
		 * reserved number as v2 (compat.h).
		 */
		if (!fm_compat_nesting_opens_v2())
			return ERR_PTR(-EINVAL);
		v2 = true;
		break;
	default:
		return ERR_PTR(-EINVAL);
	}

	iommu = kzalloc(sizeof(*iommu), GFP_KERNEL);
	if (!iommu)
		return ERR_PTR(-ENOMEM);

	INIT_LIST_HEAD(&iommu->domain_list);
	INIT_LIST_HEAD(&iommu->iova_list);
	INIT_LIST_HEAD(&iommu->emulated_groups);
	INIT_LIST_HEAD(&iommu->device_list);
	mutex_init(&iommu->lock);
	mutex_init(&iommu->device_list_lock);
	iommu->dma_tree = RB_ROOT;
	iommu->dma_avail = READ_ONCE(fm_dma_entry_limit);
	/* No domain yet: pinning works in PAGE_SIZE units. */
	iommu->pgsize_bitmap = PAGE_MASK;
	iommu->v2 = v2;
	fm_debugfs_open(iommu);

	return iommu;
}

/* Detach every group of @domain and free it; the caller unlinks @domain. */
static void fm_domain_destroy(struct fm_domain *domain)
{
	struct fm_group *group, *tmp;

	list_for_each_entry_safe(group, tmp, &domain->group_list, next) {
		iommu_detach_group(domain->domain, group->iommu_group);
		list_del(&group->next);
		kfree(group);
	}
	iommu_domain_free(domain->domain);
	kfree(domain);
}

void fm_release(void *iommu_data)
{
	struct fm_iommu *iommu = iommu_data;
	struct fm_domain *domain, *dtmp;
	struct fm_group *group, *gtmp;

	fm_debugfs_release(iommu);

	/*
	 * Nobody else can reach the container any more; the lock is taken
	 * only because the data path expects it held.
	 */
	mutex_lock(&iommu->lock);

	list_for_each_entry_safe(group, gtmp, &iommu->emulated_groups, next) {
		list_del(&group->next);
		kfree(group);
	}

	/* Unmap from every domain and flush before any page is released. */
	fm_unmap_unpin_all(iommu);

	list_for_each_entry_safe(domain, dtmp, &iommu->domain_list, next) {
		list_del(&domain->next);
		fm_domain_destroy(domain);
	}

	fm_iova_list_free(&iommu->iova_list);
	mutex_unlock(&iommu->lock);

	mutex_destroy(&iommu->device_list_lock);
	mutex_destroy(&iommu->lock);
	kfree(iommu);
}

static struct fm_group *fm_domain_find_group(struct fm_domain *domain,
					     struct iommu_group *iommu_group)
{
	struct fm_group *group;

	list_for_each_entry(group, &domain->group_list, next) {
		if (group->iommu_group == iommu_group)
			return group;
	}
	return NULL;
}

struct fm_group *fm_find_group(struct fm_iommu *iommu, struct iommu_group *iommu_group)
{
	struct fm_domain *domain;
	struct fm_group *group;

	list_for_each_entry(domain, &iommu->domain_list, next) {
		group = fm_domain_find_group(domain, iommu_group);
		if (group)
			return group;
	}

	list_for_each_entry(group, &iommu->emulated_groups, next) {
		if (group->iommu_group == iommu_group)
			return group;
	}
	return NULL;
}

bool fm_has_emulated(struct fm_iommu *iommu)
{
	return !list_empty(&iommu->emulated_groups);
}

/* 1 when every domain blocks no-snoop DMA (VFIO_DMA_CC_IOMMU), else 0. */
int fm_enforce_cache_coherency(struct fm_iommu *iommu)
{
	struct fm_domain *domain;

	list_for_each_entry(domain, &iommu->domain_list, next) {
		if (!domain->enforce_cache_coherency)
			return 0;
	}
	return 1;
}

/*
 * The page sizes every domain supports, @extra included when not NULL.
 * Sizes below PAGE_SIZE are shown as PAGE_SIZE: pinning works in pages,
 * and the IOMMU driver may still use the smaller sizes to map them.
 *
 * Stock type1 also probes each domain for "fine-grained superpages" (AMD v1
 * page tables that can unmap 4K out of a 2M leaf) to unmap in bigger
 * chunks. foliomap does not need it: its unmap path follows the leaf size
 * that iommu_unmap reports, which every 6.12 driver gets right.
 */
static u64 fm_pgsize_bitmap(struct fm_iommu *iommu, struct fm_domain *extra)
{
	struct fm_domain *domain;
	u64 bitmap = ~0ULL;

	list_for_each_entry(domain, &iommu->domain_list, next)
		bitmap &= domain->domain->pgsize_bitmap;
	if (extra)
		bitmap &= extra->domain->pgsize_bitmap;

	if (bitmap & ~PAGE_MASK) {
		bitmap &= PAGE_MASK;
		bitmap |= PAGE_SIZE;
	}
	return bitmap;
}

/* Is the SW_MSI window of the group's IOMMU ours to map, and where? */
static bool fm_resv_sw_msi(struct list_head *resv, phys_addr_t *base)
{
	struct iommu_resv_region *region;
	bool found = false;

	list_for_each_entry(region, resv, list) {
		/* A hardware MSI window means the IOMMU translates MSIs itself. */
		if (region->type == IOMMU_RESV_MSI)
			return false;
		if (region->type == IOMMU_RESV_SW_MSI) {
			*base = region->start;
			found = true;
		}
	}
	return found;
}

static int fm_domain_alloc_one(struct device *dev, void *data)
{
	struct iommu_domain **domain = data;

	*domain = fm_compat_domain_alloc(dev);
	return 1;	/* any device of the group will do: stop here */
}

/*
 * Allocate a domain for the group's IOMMU. Walking the group (under its own
 * lock) keeps the device we ask about from leaving meanwhile.
 */
static struct iommu_domain *fm_group_domain_alloc(struct iommu_group *iommu_group)
{
	struct iommu_domain *domain = ERR_PTR(-ENODEV);

	iommu_group_for_each_dev(iommu_group, &domain, fm_domain_alloc_one);
	return domain;
}

/*
 * Move @group, attached alone to the new @domain, onto an existing domain
 * that maps the same way (same IOMMU driver, same no-snoop policy).
 * Returns 1 when moved (@domain is then detached and ready to free), 0 when
 * @group stays on @domain, or an errno when it could be attached to neither.
 */
static int fm_domain_share(struct fm_iommu *iommu, struct fm_domain *domain,
			   struct fm_group *group)
{
	struct fm_domain *d;
	int ret;

	list_for_each_entry(d, &iommu->domain_list, next) {
		if (d->domain->ops != domain->domain->ops ||
		    d->enforce_cache_coherency != domain->enforce_cache_coherency)
			continue;

		iommu_detach_group(domain->domain, group->iommu_group);
		if (!iommu_attach_group(d->domain, group->iommu_group)) {
			list_add(&group->next, &d->group_list);
			return 1;
		}

		ret = iommu_attach_group(domain->domain, group->iommu_group);
		if (ret)
			return ret;
	}
	return 0;
}

/* Attach an IOMMU-backed group; iommu->lock held. */
static int fm_attach_iommu_group(struct fm_iommu *iommu, struct fm_group *group)
{
	struct iommu_domain_geometry *geo;
	struct fm_domain *domain;
	phys_addr_t msi_base = 0;
	LIST_HEAD(resv);
	LIST_HEAD(iova);
	bool sw_msi;
	int ret;

	domain = kzalloc(sizeof(*domain), GFP_KERNEL);
	if (!domain)
		return -ENOMEM;
	INIT_LIST_HEAD(&domain->group_list);

	domain->domain = fm_group_domain_alloc(group->iommu_group);
	if (IS_ERR(domain->domain)) {
		ret = PTR_ERR(domain->domain);
		goto out_free;
	}

	ret = iommu_attach_group(domain->domain, group->iommu_group);
	if (ret)
		goto out_domain_free;

	/* Existing mappings must stay mappable in the new domain. */
	geo = &domain->domain->geometry;
	if (fm_iova_aperture_conflict(iommu, geo->aperture_start, geo->aperture_end)) {
		ret = -EINVAL;
		goto out_detach;
	}

	ret = iommu_get_group_resv_regions(group->iommu_group, &resv);
	if (ret)
		goto out_detach;

	if (fm_iova_resv_conflict(iommu, &resv)) {
		ret = -EINVAL;
		goto out_detach;
	}

	/* Work on a copy: the container's list only changes on success. */
	ret = fm_iova_list_copy(iommu, &iova);
	if (ret)
		goto out_detach;
	ret = fm_iova_clamp(&iova, geo->aperture_start, geo->aperture_end);
	if (ret)
		goto out_detach;
	ret = fm_iova_exclude_resv(&iova, &resv);
	if (ret)
		goto out_detach;

	sw_msi = fm_resv_sw_msi(&resv, &msi_base);

	if (!READ_ONCE(fm_allow_unsafe_interrupts) &&
	    !fm_compat_group_msi_isolated(group->iommu_group)) {
		pr_warn_ratelimited("group %d refused: its MSIs are not isolated (no interrupt remapping), so its devices could inject interrupts; allow_unsafe_interrupts=1 accepts that risk\n",
				    iommu_group_id(group->iommu_group));
		ret = -EPERM;
		goto out_detach;
	}

	/*
	 * Block no-snoop DMA whenever the IOMMU can: KVM then need not emulate
	 * WBINVD for the guest (VFIO_DMA_CC_IOMMU).
	 */
	if (domain->domain->ops->enforce_cache_coherency)
		domain->enforce_cache_coherency =
			domain->domain->ops->enforce_cache_coherency(domain->domain);

	ret = fm_domain_share(iommu, domain, group);
	if (ret < 0)
		goto out_domain_free;
	if (ret) {
		iommu_domain_free(domain->domain);
		kfree(domain);
		goto commit;
	}

	if (!fm_pgsize_bitmap(iommu, domain)) {
		ret = -EINVAL;
		goto out_detach;
	}

	/*
	 * Set up the MSI window before replaying, so that the replay is the
	 * last step that can fail and needs no undoing here.
	 */
	if (sw_msi) {
		ret = iommu_get_msi_cookie(domain->domain, msi_base);
		/* -ENODEV: the domain handles MSIs without a cookie. */
		if (ret && ret != -ENODEV)
			goto out_detach;
	}

	ret = fm_replay(iommu, domain);
	if (ret)
		goto out_detach;

	list_add(&group->next, &domain->group_list);
	list_add(&domain->next, &iommu->domain_list);
	iommu->pgsize_bitmap = fm_pgsize_bitmap(iommu, NULL);
commit:
	fm_iova_list_replace(iommu, &iova);
	fm_resv_list_free(&resv);
	/*
	 * The group's devices can write anywhere they are mapped, unseen by
	 * dirty tracking, until the group shows it only uses pin_pages.
	 */
	iommu->num_non_pinned_groups++;
	return 0;

out_detach:
	iommu_detach_group(domain->domain, group->iommu_group);
out_domain_free:
	iommu_domain_free(domain->domain);
out_free:
	fm_iova_list_free(&iova);
	fm_resv_list_free(&resv);
	kfree(domain);
	return ret;
}

int fm_attach_group(void *iommu_data, struct iommu_group *iommu_group,
		    enum vfio_group_type type)
{
	struct fm_iommu *iommu = iommu_data;
	struct fm_group *group;
	int ret;

	mutex_lock(&iommu->lock);

	/* A new domain is filled by pinning; no vaddr may be invalid then. */
	if (iommu->vaddr_invalid_count) {
		ret = -EBUSY;
		goto out_unlock;
	}

	if (fm_find_group(iommu, iommu_group)) {
		ret = -EINVAL;
		goto out_unlock;
	}

	group = kzalloc(sizeof(*group), GFP_KERNEL);
	if (!group) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	group->iommu_group = iommu_group;

	if (type == VFIO_EMULATED_IOMMU) {
		/* Its devices write memory only through pin_pages and dma_rw. */
		group->pinned_page_dirty_scope = true;
		list_add(&group->next, &iommu->emulated_groups);
		ret = 0;
	} else {
		ret = fm_attach_iommu_group(iommu, group);
		if (ret)
			kfree(group);
	}

out_unlock:
	mutex_unlock(&iommu->lock);
	return ret;
}

/*
 * The last domain is going: nothing can reach the mappings through an
 * IOMMU any more. Drop them all unless emulated devices still use them, in
 * which case only their externally pinned pages stay pinned and charged.
 */
static void fm_last_domain_gone(struct fm_iommu *iommu)
{
	if (list_empty(&iommu->emulated_groups)) {
		/* Emulated devices unregister before their group leaves. */
		WARN_ON_ONCE(!list_empty(&iommu->device_list));
		fm_unmap_unpin_all(iommu);
	} else {
		fm_unmap_unpin_reaccount(iommu);
	}
}

/* Detach @group from @domain, freeing the domain if it was the last group. */
static void fm_detach_from_domain(struct fm_iommu *iommu, struct fm_domain *domain,
				  struct fm_group *group)
{
	iommu_detach_group(domain->domain, group->iommu_group);
	list_del(&group->next);
	kfree(group);

	if (list_empty(&domain->group_list)) {
		if (list_is_singular(&iommu->domain_list))
			fm_last_domain_gone(iommu);
		list_del(&domain->next);
		iommu_domain_free(domain->domain);
		kfree(domain);
		iommu->pgsize_bitmap = fm_pgsize_bitmap(iommu, NULL);
	}

	fm_iova_rebuild(iommu);
}

void fm_detach_group(void *iommu_data, struct iommu_group *iommu_group)
{
	struct fm_iommu *iommu = iommu_data;
	struct fm_domain *domain;
	struct fm_group *group;
	bool was_non_pinned = false;

	mutex_lock(&iommu->lock);

	list_for_each_entry(group, &iommu->emulated_groups, next) {
		if (group->iommu_group != iommu_group)
			continue;

		list_del(&group->next);
		kfree(group);
		if (list_empty(&iommu->emulated_groups) && list_empty(&iommu->domain_list)) {
			WARN_ON_ONCE(!list_empty(&iommu->device_list));
			fm_unmap_unpin_all(iommu);
		}
		goto out_unlock;
	}

	list_for_each_entry(domain, &iommu->domain_list, next) {
		group = fm_domain_find_group(domain, iommu_group);
		if (!group)
			continue;

		was_non_pinned = !group->pinned_page_dirty_scope;
		fm_detach_from_domain(iommu, domain, group);
		break;
	}

	/*
	 * The scope may now narrow to pinned pages only; what the departed
	 * devices wrote is unknown, so report everything dirty once.
	 */
	if (was_non_pinned) {
		iommu->num_non_pinned_groups--;
		if (iommu->dirty_page_tracking)
			fm_dirty_mark_all(iommu);
	}

out_unlock:
	mutex_unlock(&iommu->lock);
}

struct iommu_domain *fm_group_iommu_domain(void *iommu_data, struct iommu_group *iommu_group)
{
	struct iommu_domain *ret = ERR_PTR(-ENODEV);
	struct fm_iommu *iommu = iommu_data;
	struct fm_domain *domain;

	if (!iommu || !iommu_group)
		return ERR_PTR(-EINVAL);

	mutex_lock(&iommu->lock);
	list_for_each_entry(domain, &iommu->domain_list, next) {
		if (fm_domain_find_group(domain, iommu_group)) {
			ret = domain->domain;
			break;
		}
	}
	mutex_unlock(&iommu->lock);

	return ret;
}

#ifdef FM_HAVE_DRIVER_OPS_NOTIFY
/*
 * 6.1's core calls this with VFIO_IOMMU_CONTAINER_CLOSE when the container
 * fd is released (groups may keep the container alive longer). Stock 6.1
 * uses it to wake in-kernel users waiting for an invalidated vaddr to be
 * replaced. Neither stock (Debian 6.1.192: pin_pages and dma_rw return
 * -EBUSY while any vaddr is invalid, before they could wait; attach
 * refuses likewise) nor foliomap ever waits there, so there is nobody to
 * wake: the close changes nothing else in the container.
 */
void fm_notify(void *iommu_data, enum vfio_iommu_notify_type event)
{
}
#endif
