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

/* @group of @list (a domain's groups, or the emulated ones), or NULL. */
static struct fm_group *fm_group_in(struct list_head *list, struct iommu_group *iommu_group)
{
	struct fm_group *group;

	list_for_each_entry(group, list, next) {
		if (group->iommu_group == iommu_group)
			return group;
	}
	return NULL;
}

/*
 * The container's group for @iommu_group, or NULL, and in *@domain the
 * domain it is attached to (NULL for an emulated group). Every lookup of
 * a group goes through here: attach, detach, group_iommu_domain,
 * pin_pages.
 */
static struct fm_group *fm_group_lookup(struct fm_iommu *iommu, struct iommu_group *iommu_group,
					struct fm_domain **domain)
{
	struct fm_group *group;
	struct fm_domain *d;

	list_for_each_entry(d, &iommu->domain_list, next) {
		group = fm_group_in(&d->group_list, iommu_group);
		if (group) {
			*domain = d;
			return group;
		}
	}
	*domain = NULL;
	return fm_group_in(&iommu->emulated_groups, iommu_group);
}

struct fm_group *fm_find_group(struct fm_iommu *iommu, struct iommu_group *iommu_group)
{
	struct fm_domain *domain;

	return fm_group_lookup(iommu, iommu_group, &domain);
}

/* Take @group out of the container: off @domain's IOMMU first, if any. */
static void fm_group_free(struct fm_domain *domain, struct fm_group *group)
{
	if (domain)
		iommu_detach_group(domain->domain, group->iommu_group);
	list_del(&group->next);
	kfree(group);
}

/* Unlink @domain, detach what groups it still has and free it. */
static void fm_domain_free(struct fm_domain *domain)
{
	struct fm_group *group, *tmp;

	list_for_each_entry_safe(group, tmp, &domain->group_list, next)
		fm_group_free(domain, group);
	list_del(&domain->next);
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

	list_for_each_entry_safe(group, gtmp, &iommu->emulated_groups, next)
		fm_group_free(NULL, group);
	/* Unmap from every domain and flush before any page is released. */
	fm_unmap_unpin_all(iommu);
	list_for_each_entry_safe(domain, dtmp, &iommu->domain_list, next)
		fm_domain_free(domain);

	fm_iova_list_free(&iommu->iova_list);
	mutex_unlock(&iommu->lock);

	mutex_destroy(&iommu->device_list_lock);
	mutex_destroy(&iommu->lock);
	kfree(iommu);
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

/*
 * What attaching an IOMMU-backed group prepares before the container
 * changes: the existing domain the group joined, or else a new domain with
 * the group attached to it alone; and the container's usable IOVA ranges
 * as they would be with the group. The container's lists change only once
 * every check passed, at the end of fm_attach_iommu_group().
 */
struct fm_attach {
	struct fm_domain	*joined;	/* an existing domain, or NULL... */
	struct fm_domain	*domain;	/* ...a new one */
	bool			attached;	/* the group is on domain's IOMMU domain */
	struct iommu_device	*unit;		/* fm_compat_group_unit() */
	bool			cc;		/* fm_compat_group_cc_capable() */
	bool			resv_checked;	/* resv read, no conflict, MSIs fine */
	bool			joins_tried;	/* every domain that fits refused */
	struct list_head	resv;		/* the group's reserved regions */
	struct list_head	iova;		/* the usable ranges with the group */
	bool			sw_msi;		/* the MSI window is ours to map... */
	phys_addr_t		msi_base;	/* ...here */
};

static int fm_domain_alloc_one(struct device *dev, void *data)
{
	struct iommu_domain **domain = data;

	*domain = fm_compat_domain_alloc(dev);
	return 1;	/* any device of the group will do: stop here */
}

/*
 * A new domain for the group's IOMMU, the group attached to it. Walking
 * the group (under its own lock) keeps the device we allocate for from
 * leaving meanwhile. On failure nothing is left allocated.
 */
static int fm_attach_new_domain(struct fm_attach *a, struct fm_group *group)
{
	struct iommu_domain *domain = ERR_PTR(-ENODEV);
	int ret;

	a->domain = kzalloc(sizeof(*a->domain), GFP_KERNEL);
	if (!a->domain)
		return -ENOMEM;
	INIT_LIST_HEAD(&a->domain->group_list);

	iommu_group_for_each_dev(group->iommu_group, &domain, fm_domain_alloc_one);
	ret = PTR_ERR_OR_ZERO(domain);
	if (!ret) {
		a->domain->domain = domain;
		ret = iommu_attach_group(domain, group->iommu_group);
		if (!ret) {
			a->attached = true;
			return 0;
		}
		iommu_domain_free(domain);
	}
	kfree(a->domain);
	a->domain = NULL;
	return ret;
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

/* The aperture of the domain the group is on must hold every mapping. */
static int fm_attach_aperture(struct fm_iommu *iommu, struct iommu_domain *domain)
{
	struct iommu_domain_geometry *geo = &domain->geometry;

	if (fm_iova_aperture_conflict(iommu, geo->aperture_start, geo->aperture_end))
		return -EINVAL;
	return 0;
}

/* The group's reserved regions must not cover any mapping either. */
static int fm_attach_resv(struct fm_iommu *iommu, struct fm_attach *a,
			  struct fm_group *group)
{
	int ret;

	ret = iommu_get_group_resv_regions(group->iommu_group, &a->resv);
	if (ret)
		return ret;
	if (fm_iova_resv_conflict(iommu, &a->resv))
		return -EINVAL;
	return 0;
}

/*
 * The usable ranges with the group: the container's, within the aperture
 * of the group's domain, less the group's reserved regions. A domain of
 * its own is read once the group is attached; a domain in use that
 * fm_attach_fits() is read before, as attaching a device of the IOMMU it
 * was built for leaves it as it is. Works on a copy of the list.
 */
static int fm_attach_ranges(struct fm_iommu *iommu, struct fm_attach *a,
			    struct iommu_domain *domain)
{
	struct iommu_domain_geometry *geo = &domain->geometry;
	int ret;

	ret = fm_iova_list_copy(iommu, &a->iova);
	if (!ret)
		ret = fm_iova_clamp(&a->iova, geo->aperture_start, geo->aperture_end);
	if (!ret)
		ret = fm_iova_exclude_resv(&a->iova, &a->resv);
	if (ret)
		return ret;

	a->sw_msi = fm_resv_sw_msi(&a->resv, &a->msi_base);
	return 0;
}

/*
 * Would a domain of the group's own be interchangeable with @d? Yes when
 * it would be built for the same IOMMU instance (so by the same driver,
 * with the same ops, aperture and page sizes) and get the same no-snoop
 * policy, which the devices tell (@a->cc) without building it.
 */
static bool fm_attach_fits(struct fm_domain *d, struct fm_attach *a)
{
	return a->unit && d->unit == a->unit &&
	       d->enforce_cache_coherency ==
	       (a->cc && d->domain->ops->enforce_cache_coherency);
}

/*
 * Move the group, attached alone to the new domain, onto an existing
 * domain that maps the same way (same IOMMU driver, same no-snoop policy),
 * so that mappings are programmed once per distinct domain. Returns 1 when
 * moved (the new domain is then unused), 0 when the group stays on the new
 * domain, or an errno when it could be attached to neither.
 */
static int fm_attach_share(struct fm_iommu *iommu, struct fm_attach *a,
			   struct fm_group *group)
{
	struct iommu_domain *mine = a->domain->domain;
	struct fm_domain *d;
	int ret;

	list_for_each_entry(d, &iommu->domain_list, next) {
		if (d->domain->ops != mine->ops ||
		    d->enforce_cache_coherency != a->domain->enforce_cache_coherency)
			continue;
		/* fm_attach_try_join() tried it already. */
		if (a->joins_tried && fm_attach_fits(d, a))
			continue;

		iommu_detach_group(mine, group->iommu_group);
		a->attached = false;
		if (!iommu_attach_group(d->domain, group->iommu_group)) {
			list_add(&group->next, &d->group_list);
			/*
			 * A driver may reshape a domain for each IOMMU that
			 * joins (Intel narrows its address width): one that
			 * spans instances is never joined directly.
			 */
			if (d->unit != a->unit)
				d->unit = NULL;
			return 1;
		}
		ret = iommu_attach_group(mine, group->iommu_group);
		if (ret)
			return ret;
		a->attached = true;
	}
	return 0;
}

/*
 * The group stays on the new domain: it must leave the container a
 * common page size, gets the MSI window mapped, and is filled with every
 * mapping (fm_replay(), last, as it is the step that maps and pins).
 */
static int fm_attach_fill(struct fm_iommu *iommu, struct fm_attach *a)
{
	int ret;

	if (!fm_pgsize_bitmap(iommu, a->domain))
		return -EINVAL;
	if (a->sw_msi) {
		ret = iommu_get_msi_cookie(a->domain->domain, a->msi_base);
		/* -ENODEV: the domain handles MSIs without a cookie. */
		if (ret && ret != -ENODEV)
			return ret;
	}
	return fm_replay(iommu, a->domain);
}

/* Undo everything fm_attach_*() prepared; the container never saw it. */
static void fm_attach_abort(struct fm_attach *a, struct fm_group *group)
{
	if (a->domain) {
		if (a->attached)
			iommu_detach_group(a->domain->domain, group->iommu_group);
		iommu_domain_free(a->domain->domain);
		kfree(a->domain);
	}
	fm_iova_list_free(&a->iova);
	fm_resv_list_free(&a->resv);
}

/* A group whose devices could forge MSIs is refused unless allowed. */
static int fm_attach_msi_check(struct fm_group *group)
{
	if (READ_ONCE(fm_allow_unsafe_interrupts) ||
	    fm_compat_group_msi_isolated(group->iommu_group))
		return 0;
	pr_warn_ratelimited("group %d refused: its MSIs are not isolated (no interrupt remapping), so its devices could inject interrupts; allow_unsafe_interrupts=1 accepts that risk\n",
			    iommu_group_id(group->iommu_group));
	return -EPERM;
}

/*
 * Join a domain in use that a domain of the group's own would be
 * interchangeable with, without building one first. Stock type1 gives
 * every group a new domain, attaches it there, reads its no-snoop policy
 * and only then moves it to an existing domain of the same driver and
 * policy (fm_attach_share(), which still runs when no domain fits here):
 * a page table, two attaches and a detach, each flushing the IOMMU's
 * caches, for a domain thrown away. Every check of fm_attach_own_domain()
 * runs first, in the same order, on the geometry such a domain has, so the
 * group reaches a domain in use only once nothing can refuse it. Returns 1
 * when joined, 0 when no domain fits or took the group, or an errno.
 */
static int fm_attach_try_join(struct fm_iommu *iommu, struct fm_attach *a,
			      struct fm_group *group)
{
	struct fm_domain *d, *fit = NULL;
	int ret;

	a->unit = fm_compat_group_unit(group->iommu_group);
	if (!a->unit)
		return 0;
	a->cc = fm_compat_group_cc_capable(group->iommu_group);
	list_for_each_entry(d, &iommu->domain_list, next) {
		if (fm_attach_fits(d, a)) {
			fit = d;
			break;
		}
	}
	if (!fit)
		return 0;

	ret = fm_attach_aperture(iommu, fit->domain);
	if (!ret)
		ret = fm_attach_resv(iommu, a, group);
	if (!ret)
		ret = fm_attach_ranges(iommu, a, fit->domain);
	if (!ret)
		ret = fm_attach_msi_check(group);
	if (ret)
		return ret;
	a->resv_checked = true;

	d = fit;
	a->joins_tried = true;
	list_for_each_entry_from(d, &iommu->domain_list, next) {
		if (fm_attach_fits(d, a) &&
		    !iommu_attach_group(d->domain, group->iommu_group)) {
			a->joined = d;
			return 1;
		}
	}
	/* A domain of its own then: its ranges are computed again. */
	fm_iova_list_free(&a->iova);
	return 0;
}

/* Attach the group to a domain of its own, then share or fill it. */
static int fm_attach_own_domain(struct fm_iommu *iommu, struct fm_attach *a,
				struct fm_group *group)
{
	struct iommu_domain *domain;
	int shared;
	int ret;

	ret = fm_attach_new_domain(a, group);
	if (ret)
		return ret;
	domain = a->domain->domain;

	ret = fm_attach_aperture(iommu, domain);
	if (!ret && !a->resv_checked)
		ret = fm_attach_resv(iommu, a, group);
	if (!ret)
		ret = fm_attach_ranges(iommu, a, domain);
	if (!ret && !a->resv_checked)
		ret = fm_attach_msi_check(group);
	if (ret)
		return ret;

	/*
	 * Block no-snoop DMA whenever the IOMMU can: KVM then need not emulate
	 * WBINVD for the guest (VFIO_DMA_CC_IOMMU).
	 */
	if (domain->ops->enforce_cache_coherency)
		a->domain->enforce_cache_coherency = domain->ops->enforce_cache_coherency(domain);

	shared = fm_attach_share(iommu, a, group);
	if (shared < 0)
		return shared;
	if (shared) {
		iommu_domain_free(domain);
		kfree(a->domain);
		a->domain = NULL;
		return 0;
	}
	a->domain->unit = a->unit;
	return fm_attach_fill(iommu, a);
}

/* Attach an IOMMU-backed group; iommu->lock held. */
static int fm_attach_iommu_group(struct fm_iommu *iommu, struct fm_group *group)
{
	struct fm_attach a = {
		.resv = LIST_HEAD_INIT(a.resv),
		.iova = LIST_HEAD_INIT(a.iova),
	};
	int ret;

	ret = fm_attach_try_join(iommu, &a, group);
	if (ret < 0)
		goto abort;
	if (ret) {
		list_add(&group->next, &a.joined->group_list);
		iommu->stats.domain_joins++;
	} else {
		ret = fm_attach_own_domain(iommu, &a, group);
		if (ret)
			goto abort;
		if (a.domain) {
			list_add(&group->next, &a.domain->group_list);
			list_add(&a.domain->next, &iommu->domain_list);
			iommu->pgsize_bitmap = fm_pgsize_bitmap(iommu, NULL);
		}
	}
	fm_iova_list_replace(iommu, &a.iova);
	fm_resv_list_free(&a.resv);
	/*
	 * The group's devices can write anywhere they are mapped, unseen by
	 * dirty tracking, until the group shows it only uses pin_pages.
	 */
	iommu->num_non_pinned_groups++;
	return 0;

abort:
	fm_attach_abort(&a, group);
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
 * A group has left. Holding a group is what entitles the container to its
 * mappings: once no group is left, they go. @last_domain: the group took
 * the last IOMMU domain with it (still on the list); then emulated groups
 * keep the mappings, unpinned but for what their devices pin, for
 * pin_pages to pin on demand.
 */
static void fm_group_left(struct fm_iommu *iommu, bool last_domain)
{
	bool emulated = fm_has_emulated(iommu);

	if (!last_domain && (emulated || !list_empty(&iommu->domain_list)))
		return;
	if (emulated) {
		fm_unmap_unpin_reaccount(iommu);
		return;
	}
	/* Emulated devices unregister before their group leaves. */
	WARN_ON_ONCE(!list_empty(&iommu->device_list));
	fm_unmap_unpin_all(iommu);
}

void fm_detach_group(void *iommu_data, struct iommu_group *iommu_group)
{
	struct fm_iommu *iommu = iommu_data;
	struct fm_domain *domain;
	struct fm_group *group;
	bool dirty_unseen;

	mutex_lock(&iommu->lock);

	group = fm_group_lookup(iommu, iommu_group, &domain);
	if (!group)
		goto out_unlock;
	/* Always false for an emulated group: it can only pin. */
	dirty_unseen = !group->pinned_page_dirty_scope;
	fm_group_free(domain, group);

	if (!domain) {
		fm_group_left(iommu, false);
	} else {
		if (list_empty(&domain->group_list)) {
			fm_group_left(iommu, list_is_singular(&iommu->domain_list));
			fm_domain_free(domain);
			iommu->pgsize_bitmap = fm_pgsize_bitmap(iommu, NULL);
		}
		/* The aperture may widen, the group's reserved regions free up. */
		fm_iova_rebuild(iommu);
	}

	/*
	 * The scope may now narrow to pinned pages only; what the departed
	 * devices wrote is unknown, so report everything dirty once.
	 */
	if (dirty_unseen) {
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

	/* Read under the lock: a detach frees the fm_domain. */
	mutex_lock(&iommu->lock);
	if (fm_group_lookup(iommu, iommu_group, &domain) && domain)
		ret = domain->domain;
	mutex_unlock(&iommu->lock);

	/* An emulated group has no IOMMU domain: -ENODEV. */
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
