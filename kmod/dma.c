// SPDX-License-Identifier: GPL-2.0-only
/*
 * The tree of mappings of a container, ordered by IOVA. Mappings never
 * overlap, so ordering by start address orders them completely.
 *
 * All ranges are compared by their last byte, never by "start + size":
 * a mapping may end at the very last IOVA, where start + size wraps to 0.
 */
#include "foliomap.h"

/*
 * Any mapping that overlaps [start, start + size). A size of 0 is taken as
 * 1 so that a lookup of a single address works either way.
 */
struct fm_dma *fm_dma_find(struct fm_iommu *iommu, dma_addr_t start, size_t size)
{
	dma_addr_t last = start + (size ? size - 1 : 0);
	struct rb_node *node = iommu->dma_tree.rb_node;

	while (node) {
		struct fm_dma *dma = rb_entry(node, struct fm_dma, node);

		if (last < dma->iova)
			node = node->rb_left;
		else if (start > fm_dma_last(dma))
			node = node->rb_right;
		else
			return dma;
	}
	return NULL;
}

bool fm_dma_range_splits(struct fm_iommu *iommu, dma_addr_t iova, dma_addr_t last)
{
	return fm_dma_range_splits_at(iommu, fm_dma_find_first_node(iommu, iova,
								     last - iova + 1),
				      iova, last);
}

/*
 * The lowest mapping that overlaps [start, start + size), or NULL. A size of
 * 0 means "up to the end of the IOVA space".
 */
struct rb_node *fm_dma_find_first_node(struct fm_iommu *iommu, dma_addr_t start,
				       size_t size)
{
	struct rb_node *node = iommu->dma_tree.rb_node;
	struct rb_node *found = NULL;

	/* Descend to the lowest mapping whose last byte is at or above start. */
	while (node) {
		struct fm_dma *dma = rb_entry(node, struct fm_dma, node);

		if (start > fm_dma_last(dma)) {
			node = node->rb_right;
		} else {
			found = node;
			if (start >= dma->iova)
				break;
			node = node->rb_left;
		}
	}

	if (found && size) {
		struct fm_dma *dma = rb_entry(found, struct fm_dma, node);

		if (dma->iova > start + size - 1)
			return NULL;
	}
	return found;
}

/*
 * Find where a new mapping of [iova, iova + size) goes, in the descent that
 * also looks for a mapping it would overlap: false if there is one. The
 * descent passes both tree neighbours of the new start, the mapping
 * before it (which may reach into the range) and the one after (the first
 * that may start inside it), so it meets any mapping the range overlaps.
 * The slot stays valid while iommu->lock is held.
 */
bool fm_dma_find_slot(struct fm_iommu *iommu, dma_addr_t iova, size_t size,
		      struct fm_dma_slot *slot)
{
	dma_addr_t last = iova + size - 1;

	slot->link = &iommu->dma_tree.rb_node;
	slot->parent = NULL;
	while (*slot->link) {
		struct fm_dma *cur = rb_entry(*slot->link, struct fm_dma, node);

		if (cur->iova <= last && fm_dma_last(cur) >= iova)
			return false;
		slot->parent = *slot->link;
		if (iova < cur->iova)
			slot->link = &slot->parent->rb_left;
		else
			slot->link = &slot->parent->rb_right;
	}
	return true;
}

/* Link @dma at @slot, which fm_dma_find_slot() gave for its range. */
void fm_dma_link(struct fm_iommu *iommu, struct fm_dma *dma, struct fm_dma_slot *slot)
{
	rb_link_node(&dma->node, slot->parent, slot->link);
	rb_insert_color(&dma->node, &iommu->dma_tree);
}
