// SPDX-License-Identifier: GPL-2.0-only
/*
 * Dirty page tracking: one bitmap per mapping, one bit per smallest IOMMU
 * page. Bits are set for pages pinned by emulated devices and pages written
 * by dma_rw. When some group can DMA anywhere unseen (it never used
 * pin_pages), every page of a mapped dma counts as dirty.
 *
 * A report copies each mapping's bits into the user's bitmap at the bit
 * offset of the mapping from the start of the requested range. Only when
 * every mapping's bits were written does GET_BITMAP clear them, keeping
 * what is still pinned (pinned pages stay dirty), and does unmap remove the
 * mappings: a report that fails (-EFAULT) changes nothing, and a retry
 * reports the same bits again: no bit is cleared before the user has it.
 */
#include <linux/bitmap.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "foliomap.h"

/* User bitmaps are arrays of u64. */
#define FM_U64_BITS		BITS_PER_TYPE(u64)
#define FM_BITMAP_BYTES(nbits)	(DIV_ROUND_UP(nbits, FM_U64_BITS) * sizeof(u64))
/* bitmap_set() and friends take an int number of bits. */
#define FM_BITMAP_BITS_MAX	((u64)INT_MAX)

int fm_dirty_bitmap_alloc(struct fm_dma *dma, size_t pgsize)
{
	u64 nbits = dma->size >> __ffs(pgsize);

	if (nbits > FM_BITMAP_BITS_MAX)
		return -EINVAL;

	/*
	 * Nothing ever sets a bit at or past nbits: a report copies the bits
	 * shifted into a bounce buffer, never in place.
	 */
	dma->bitmap = kvzalloc(FM_BITMAP_BYTES(nbits), GFP_KERNEL_ACCOUNT);
	return dma->bitmap ? 0 : -ENOMEM;
}

/* Pages pinned by emulated devices are dirty until they are unpinned. */
static void fm_dirty_populate(struct fm_dma *dma, unsigned long pgshift)
{
	struct rb_node *n;

	for (n = rb_first(&dma->pfn_list); n; n = rb_next(n)) {
		struct fm_vpfn *vpfn = rb_entry(n, struct fm_vpfn, node);

		__set_bit((vpfn->iova - dma->iova) >> pgshift, dma->bitmap);
	}
}

int fm_dirty_start(struct fm_iommu *iommu, size_t pgsize)
{
	struct rb_node *n, *p;
	int ret = 0;

	mutex_lock(&iommu->lock);
	if (iommu->dirty_page_tracking)
		goto out;

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n)) {
		struct fm_dma *dma = rb_entry(n, struct fm_dma, node);

		ret = fm_dirty_bitmap_alloc(dma, pgsize);
		if (ret) {
			for (p = rb_first(&iommu->dma_tree); p != n; p = rb_next(p))
				fm_dirty_bitmap_free(rb_entry(p, struct fm_dma, node));
			goto out;
		}
		fm_dirty_populate(dma, __ffs(pgsize));
	}
	iommu->dirty_page_tracking = true;
out:
	mutex_unlock(&iommu->lock);
	return ret;
}

void fm_dirty_stop(struct fm_iommu *iommu)
{
	struct rb_node *n;

	mutex_lock(&iommu->lock);
	if (iommu->dirty_page_tracking) {
		iommu->dirty_page_tracking = false;
		for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n))
			fm_dirty_bitmap_free(rb_entry(n, struct fm_dma, node));
	}
	mutex_unlock(&iommu->lock);
}

bool fm_dirty_scope_all_pinned(struct fm_iommu *iommu)
{
	return !iommu->num_non_pinned_groups;
}

/* Mark [iova, iova + npage pages) of @dma dirty, if tracking. */
void fm_dirty_mark_pinned(struct fm_iommu *iommu, struct fm_dma *dma,
			  dma_addr_t iova, int npage)
{
	unsigned long pgshift = __ffs(iommu->pgsize_bitmap);
	unsigned long first, last;

	if (!iommu->dirty_page_tracking || npage <= 0)
		return;

	first = (iova - dma->iova) >> pgshift;
	last = (iova - dma->iova + ((size_t)npage << PAGE_SHIFT) - 1) >> pgshift;
	bitmap_set(dma->bitmap, first, last - first + 1);
}

void fm_dirty_mark_all(struct fm_iommu *iommu)
{
	unsigned long pgshift = __ffs(iommu->pgsize_bitmap);
	struct rb_node *n;

	if (!iommu->dirty_page_tracking)
		return;

	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n)) {
		struct fm_dma *dma = rb_entry(n, struct fm_dma, node);

		bitmap_set(dma->bitmap, 0, dma->size >> pgshift);
	}
}

/*
 * A report goes through a bounce buffer of whole u64 words: a page, or these
 * few words on the stack when no page is free or the report is small.
 */
#define FM_DIRTY_STACK_WORDS	16

struct fm_dirty_buf {
	u64		*words;
	unsigned long	nr;
	u64		stack[FM_DIRTY_STACK_WORDS];
};

static void fm_dirty_buf_init(struct fm_dirty_buf *b, u64 nbits)
{
	b->words = b->stack;
	b->nr = FM_DIRTY_STACK_WORDS;
	if (nbits <= FM_DIRTY_STACK_WORDS * FM_U64_BITS)
		return;
	b->words = kmalloc(PAGE_SIZE, GFP_KERNEL | __GFP_NOWARN);
	if (b->words)
		b->nr = PAGE_SIZE / sizeof(u64);
	else
		b->words = b->stack;
}

static void fm_dirty_buf_free(struct fm_dirty_buf *b)
{
	if (b->words != b->stack)
		kfree(b->words);
}

/*
 * Word @k of @dma's bits as reported: all of the mapping's bits when @all,
 * nothing past its last bit, 0 outside [0, @nbits).
 */
static u64 fm_dirty_src_word(const struct fm_dma *dma, unsigned long nbits, bool all,
			     unsigned long k)
{
	unsigned long nwords = DIV_ROUND_UP(nbits, FM_U64_BITS);
	u64 w;

	/* dma->bitmap is an unsigned long bitmap, the user's one u64 words. */
	BUILD_BUG_ON(BITS_PER_LONG != FM_U64_BITS);
	if (k >= nwords)
		return 0;
	w = all ? ~0ULL : dma->bitmap[k];
	if (k == nwords - 1 && nbits % FM_U64_BITS)
		w &= GENMASK_ULL(nbits % FM_U64_BITS - 1, 0);
	return w;
}

/*
 * Write @dma's bits into the user bitmap whose bit 0 is @base, changing
 * nothing in @dma. A mapping may start in the middle of a u64 word: its
 * bits are shifted into place and the word's bits below it, written for
 * the previous mapping (or the user's own), are kept. Bits above the
 * mapping's last one in its last word are written as 0; a mapping that
 * starts in that word later in the same report keeps them from there.
 * So the same dma bits give the same user words, however often a report
 * is retried.
 */
static int fm_dirty_copy(struct fm_iommu *iommu, struct fm_dma *dma, dma_addr_t base,
			 unsigned long pgshift, u64 __user *ubitmap, struct fm_dirty_buf *b)
{
	unsigned long nbits = dma->size >> pgshift;
	unsigned long bit = (dma->iova - base) >> pgshift;
	unsigned int shift = bit % FM_U64_BITS;
	unsigned long nwords = DIV_ROUND_UP(nbits + shift, FM_U64_BITS);
	u64 __user *dst = ubitmap + bit / FM_U64_BITS;
	/* Devices that can write anywhere: all of a mapped dma may be dirty. */
	bool all = !fm_dirty_scope_all_pinned(iommu) && dma->iommu_mapped;
	unsigned long i, j, n;
	u64 below = 0, prev = 0;

	if (shift && get_user(below, dst))
		return -EFAULT;

	for (i = 0; i < nwords; i += n) {
		n = min(nwords - i, b->nr);
		for (j = 0; j < n; j++) {
			u64 cur = fm_dirty_src_word(dma, nbits, all, i + j);

			b->words[j] = cur << shift;
			if (shift)
				b->words[j] |= prev >> (FM_U64_BITS - shift);
			prev = cur;
		}
		if (!i && shift)
			b->words[0] |= below & GENMASK_ULL(shift - 1, 0);
		if (copy_to_user(dst + i, b->words, n * sizeof(u64)))
			return -EFAULT;
	}
	return 0;
}

/* The next mapping after @n (or @n itself) that starts in [iova, last]. */
static struct fm_dma *fm_dirty_next(struct rb_node **n, dma_addr_t iova, dma_addr_t last)
{
	for (; *n; *n = rb_next(*n)) {
		struct fm_dma *dma = rb_entry(*n, struct fm_dma, node);

		if (dma->iova > last)
			return NULL;
		if (dma->iova >= iova)
			return dma;
	}
	return NULL;
}

/*
 * Write the bits of the mappings that start in [iova, iova + size) to the
 * user bitmap, relative to @iova, and change nothing: on -EFAULT the same
 * report can be made again, with the same bits. Unmap calls this with
 * iommu->lock held, after every emulated device dropped its pins there,
 * and then removes the mappings; GET_BITMAP follows it with
 * fm_dirty_report_done() once everything was written.
 */
int fm_dirty_report_range(struct fm_iommu *iommu, dma_addr_t iova, size_t size,
			  size_t pgsize, u64 __user *bitmap)
{
	unsigned long pgshift = __ffs(pgsize);
	dma_addr_t last = iova + size - 1;
	struct fm_dirty_buf b;
	struct fm_dma *dma;
	struct rb_node *n;
	int ret = 0;

	fm_dirty_buf_init(&b, (((u64)last - iova) >> pgshift) + 1);
	n = fm_dma_find_first_node(iommu, iova, size);
	for (; (dma = fm_dirty_next(&n, iova, last)); n = rb_next(n)) {
		ret = fm_dirty_copy(iommu, dma, iova, pgshift, bitmap, &b);
		if (ret)
			break;
	}
	fm_dirty_buf_free(&b);
	return ret;
}

/*
 * After a complete report: reset the bits of the mappings that start in
 * [iova, iova + size) to what is still pinned (pinned pages stay dirty).
 */
static void fm_dirty_report_done(struct fm_iommu *iommu, dma_addr_t iova, size_t size,
				 size_t pgsize)
{
	unsigned long pgshift = __ffs(pgsize);
	dma_addr_t last = iova + size - 1;
	struct fm_dma *dma;
	struct rb_node *n;

	n = fm_dma_find_first_node(iommu, iova, size);
	for (; (dma = fm_dirty_next(&n, iova, last)); n = rb_next(n)) {
		bitmap_clear(dma->bitmap, 0, dma->size >> pgshift);
		fm_dirty_populate(dma, pgshift);
	}
}

int fm_dirty_get_bitmap(struct fm_iommu *iommu, dma_addr_t iova, size_t size,
			size_t pgsize, u64 __user *bitmap)
{
	int ret = -EINVAL;

	mutex_lock(&iommu->lock);
	/* Like a v2 unmap, the range may span mappings but not split one. */
	if (!iommu->dirty_page_tracking || fm_dma_range_splits(iommu, iova, iova + size - 1))
		goto out;

	/* Bits are cleared only once all of them reached the user. */
	ret = fm_dirty_report_range(iommu, iova, size, pgsize, bitmap);
	if (!ret)
		fm_dirty_report_done(iommu, iova, size, pgsize);
out:
	mutex_unlock(&iommu->lock);
	return ret;
}
