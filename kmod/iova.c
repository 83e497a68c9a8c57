// SPDX-License-Identifier: GPL-2.0-only
/*
 * The usable IOVA list of a container: sorted, disjoint, inclusive ranges
 * that every domain can translate (the intersection of their apertures)
 * minus the reserved regions of every attached group. MAP_DMA accepts a
 * mapping only when it lies inside one range.
 *
 * The list is empty until the first IOMMU-backed group arrives; a container
 * of emulated-IOMMU groups only has no hardware limit, so an empty list
 * means everything is usable.
 *
 * Attach builds the new list on a copy and swaps it in only once the group
 * is committed, so a failed attach leaves the container as it was.
 */
#include <linux/iommu.h>
#include <linux/list.h>
#include <linux/minmax.h>
#include <linux/slab.h>

#include "foliomap.h"

static int fm_iova_add_before(struct list_head *pos, dma_addr_t start, dma_addr_t end)
{
	struct fm_iova_range *range;

	range = kmalloc(sizeof(*range), GFP_KERNEL);
	if (!range)
		return -ENOMEM;

	range->start = start;
	range->end = end;
	list_add_tail(&range->list, pos);
	return 0;
}

static void fm_iova_del(struct fm_iova_range *range)
{
	list_del(&range->list);
	kfree(range);
}

void fm_iova_list_free(struct list_head *iova)
{
	struct fm_iova_range *range, *tmp;

	list_for_each_entry_safe(range, tmp, iova, list)
		fm_iova_del(range);
}

/* Copy the container's list onto the empty @copy; on failure @copy stays empty. */
int fm_iova_list_copy(struct fm_iommu *iommu, struct list_head *copy)
{
	struct fm_iova_range *range;
	int ret;

	list_for_each_entry(range, &iommu->iova_list, list) {
		ret = fm_iova_add_before(copy, range->start, range->end);
		if (ret) {
			fm_iova_list_free(copy);
			return ret;
		}
	}
	return 0;
}

/* Make @list the container's list; @list is left empty. */
void fm_iova_list_replace(struct fm_iommu *iommu, struct list_head *list)
{
	fm_iova_list_free(&iommu->iova_list);
	list_splice_tail_init(list, &iommu->iova_list);
}

void fm_resv_list_free(struct list_head *resv)
{
	struct iommu_resv_region *region, *tmp;

	list_for_each_entry_safe(region, tmp, resv, list) {
		list_del(&region->list);
		kfree(region);
	}
}

/*
 * Would narrowing the container to the aperture [start, end] of a new
 * domain cut off an existing mapping, or leave nothing of the current
 * bounds? Mappings only exist inside the current bounds, so only the parts
 * of the bounds outside the new aperture need searching.
 */
bool fm_iova_aperture_conflict(struct fm_iommu *iommu, dma_addr_t start, dma_addr_t end)
{
	struct fm_iova_range *first, *last;

	if (list_empty(&iommu->iova_list))
		return false;

	first = list_first_entry(&iommu->iova_list, struct fm_iova_range, list);
	last = list_last_entry(&iommu->iova_list, struct fm_iova_range, list);

	if (start > last->end || end < first->start)
		return true;
	if (start > first->start && fm_dma_find(iommu, first->start, start - first->start))
		return true;
	if (end < last->end && fm_dma_find(iommu, end + 1, last->end - end))
		return true;
	return false;
}

/*
 * Direct-mapped regions that the IOMMU driver lets us reuse
 * (IOMMU_RESV_DIRECT_RELAXABLE: e.g. USB or graphics RMRRs) are neither
 * excluded nor a conflict, as in stock type1.
 */
static bool fm_resv_applies(const struct iommu_resv_region *region)
{
	return region->type != IOMMU_RESV_DIRECT_RELAXABLE && region->length;
}

/* Does an existing mapping overlap one of the reserved regions @resv? */
bool fm_iova_resv_conflict(struct fm_iommu *iommu, struct list_head *resv)
{
	struct iommu_resv_region *region;

	list_for_each_entry(region, resv, list) {
		if (fm_resv_applies(region) &&
		    fm_dma_find(iommu, region->start, region->length))
			return true;
	}
	return false;
}

/*
 * Limit @list to [start, end]. An empty list (no limit yet) becomes that
 * single range. The result may be empty; fm_iova_exclude_resv() reports it.
 */
int fm_iova_clamp(struct list_head *list, dma_addr_t start, dma_addr_t end)
{
	struct fm_iova_range *range, *tmp;

	if (list_empty(list))
		return fm_iova_add_before(list, start, end);

	list_for_each_entry_safe(range, tmp, list, list) {
		if (range->end < start || range->start > end) {
			fm_iova_del(range);
			continue;
		}
		range->start = max(range->start, start);
		range->end = min(range->end, end);
	}
	return 0;
}

/*
 * Cut the reserved regions @resv out of @list, splitting ranges around
 * them. -EINVAL when nothing usable is left. On -ENOMEM @list is still a
 * valid list, only partly cut; callers discard it.
 */
int fm_iova_exclude_resv(struct list_head *list, struct list_head *resv)
{
	struct iommu_resv_region *region;
	struct fm_iova_range *range, *tmp;
	int ret;

	list_for_each_entry(region, resv, list) {
		dma_addr_t rstart = region->start;
		dma_addr_t rend = region->start + region->length - 1;

		if (!fm_resv_applies(region))
			continue;

		list_for_each_entry_safe(range, tmp, list, list) {
			if (rstart > range->end || rend < range->start)
				continue;

			/* The pieces go in before @range, keeping the list sorted. */
			if (rstart > range->start) {
				ret = fm_iova_add_before(&range->list, range->start, rstart - 1);
				if (ret)
					return ret;
			}
			if (rend < range->end) {
				ret = fm_iova_add_before(&range->list, rend + 1, range->end);
				if (ret)
					return ret;
			}
			fm_iova_del(range);
		}
	}

	return list_empty(list) ? -EINVAL : 0;
}

/*
 * Recompute the list from the domains and groups still attached, after a
 * detach: the aperture may widen and the departed group's reserved regions
 * become usable. On failure the current list stays; it is a subset of the
 * true one, so nothing unsafe becomes mappable.
 */
void fm_iova_rebuild(struct fm_iommu *iommu)
{
	dma_addr_t start = 0, end = (dma_addr_t)~0;
	struct fm_domain *domain;
	struct fm_group *group;
	LIST_HEAD(resv);
	LIST_HEAD(list);
	int ret = 0;

	list_for_each_entry(domain, &iommu->domain_list, next) {
		struct iommu_domain_geometry *geo = &domain->domain->geometry;

		start = max(start, geo->aperture_start);
		end = min(end, geo->aperture_end);

		list_for_each_entry(group, &domain->group_list, next) {
			ret = iommu_get_group_resv_regions(group->iommu_group, &resv);
			if (ret)
				goto out;
		}
	}

	/*
	 * Attach refuses an aperture disjoint from the list, so this cannot
	 * happen; still, an inverted range must never enter the list.
	 */
	if (start > end)
		goto out;

	ret = fm_iova_add_before(&list, start, end);
	if (!ret)
		ret = fm_iova_exclude_resv(&list, &resv);
	if (!ret)
		fm_iova_list_replace(iommu, &list);
	fm_iova_list_free(&list);
out:
	fm_resv_list_free(&resv);
}

/* Is [start, end] inside a single usable range? */
bool fm_iova_range_usable(struct fm_iommu *iommu, dma_addr_t start, dma_addr_t end)
{
	struct fm_iova_range *range;

	if (list_empty(&iommu->iova_list))
		return true;

	list_for_each_entry(range, &iommu->iova_list, list) {
		if (start >= range->start && end <= range->end)
			return true;
	}
	return false;
}
