// SPDX-License-Identifier: GPL-2.0-only
/*
 * The pages emulated-IOMMU devices pinned through pin_pages (pin_pages.c):
 * one struct fm_vpfn each in its dma's pfn_list, keyed by IOVA and
 * reference counted. Each holds one pin of its own. It is charged to the
 * mapping's owner only while the dma is not iommu_mapped; once the dma is
 * mapped, the IOMMU pin covers the charge, and the pin pipeline
 * (charge.c) and release (release.c) count vpfn pages out when they
 * charge and uncharge.
 */
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
 * the first, then an in-order walk (fm_vpfn_count() skips an empty tree).
 */
unsigned long fm_vpfn_count_tree(struct fm_dma *dma, dma_addr_t iova, unsigned long npage)
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

/*
 * The vpfn at @iova, or NULL and in @slot where one for @iova is to be
 * linked: pin_pages looks up and inserts in one descent. The slot is good
 * until the tree changes, and the tree only changes under iommu->lock,
 * which pin_pages holds from the lookup to the insert.
 */
struct fm_vpfn *fm_vpfn_lookup(struct fm_dma *dma, dma_addr_t iova, struct fm_vpfn_slot *slot)
{
	struct rb_node **link = &dma->pfn_list.rb_node, *parent = NULL;

	while (*link) {
		struct fm_vpfn *vpfn = rb_entry(*link, struct fm_vpfn, node);

		parent = *link;
		if (iova < vpfn->iova)
			link = &parent->rb_left;
		else if (iova > vpfn->iova)
			link = &parent->rb_right;
		else
			return vpfn;
	}
	slot->parent = parent;
	slot->link = link;
	return NULL;
}

void fm_vpfn_insert(struct fm_dma *dma, struct fm_vpfn *new, const struct fm_vpfn_slot *slot)
{
	rb_link_node(&new->node, slot->parent, slot->link);
	rb_insert_color(&new->node, &dma->pfn_list);
}
