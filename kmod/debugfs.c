// SPDX-License-Identifier: GPL-2.0-only
/*
 * Per-container counters in debugfs: <debugfs>/foliomap/<id>/stats, one
 * directory per open container (id: 1, 2, ... in opening order), created
 * at open and removed at release. Optional: without debugfs (not built,
 * not mounted, or creation failing) the container works the same and the
 * counters are simply not shown.
 *
 *   mappings        live MAP_DMA mappings
 *   mapped_pages    pages of those mappings in the IOMMU (pinned, or
 *                   device memory)
 *   locked_pages    pages charged to the owners' locked memory
 *   record_bytes    memory of the mappings' run records (record.c)
 *   map_calls       successful MAP_DMA (new mappings; not VADDR updates)
 *   unmap_calls     successful UNMAP_DMA that removed something
 *   runs_mapped     physically contiguous runs mapped by the pin pipeline
 *   runs_unmapped   runs released by the unmap pipeline
 *   batches         pin batches filled (one GUP call or PFNMAP walk each)
 *   batch_pages     pages in those batches
 *   avg_batch_pages batch_pages / batches
 *   domains         IOMMU domains of the container (groups that can share
 *                   one do)
 *   domain_joins    groups attached straight to a domain in use, without
 *                   a domain of their own first (6.12 and later)
 *   parallel_maps   MAP_DMA pinned by the caller with helper threads
 *   parallel_helpers       helper threads those maps started
 *   parallel_chunks        chunks of them charged and mapped
 *   parallel_helper_chunks ... of which a helper filled some or all
 *   parallel_chunk_ns      time spent filling those chunks, all threads
 *   parallel_takeovers     batches a helper had in flight that the caller
 *                          filled itself rather than wait (parallel.c)
 *   parallel_wasted_pages  pages helpers pinned and unpinned unmapped: those
 *                          batches, and what a failed map left filled
 */
#include <linux/debugfs.h>
#include <linux/math64.h>
#include <linux/seq_file.h>

#include "foliomap.h"

static struct dentry *fm_debugfs_root;
static atomic_t fm_debugfs_next_id = ATOMIC_INIT(0);

static int fm_stats_show(struct seq_file *m, void *unused)
{
	struct fm_iommu *iommu = m->private;
	struct fm_stats s;
	u64 mapped = 0, locked = 0, mappings = 0, domains = 0, record = 0;
	struct fm_domain *domain;
	struct rb_node *n;

	mutex_lock(&iommu->lock);
	s = iommu->stats;
	list_for_each_entry(domain, &iommu->domain_list, next)
		domains++;
	for (n = rb_first(&iommu->dma_tree); n; n = rb_next(n)) {
		struct fm_dma *dma = rb_entry(n, struct fm_dma, node);

		mappings++;
		if (dma->iommu_mapped)
			mapped += dma->size >> PAGE_SHIFT;
		locked += dma->locked_vm;
		record += (u64)dma->rec_max * sizeof(*dma->rec);
	}
	mutex_unlock(&iommu->lock);

	seq_printf(m, "mappings %llu\n", mappings);
	seq_printf(m, "mapped_pages %llu\n", mapped);
	seq_printf(m, "locked_pages %llu\n", locked);
	seq_printf(m, "record_bytes %llu\n", record);
	seq_printf(m, "map_calls %llu\n", s.map_calls);
	seq_printf(m, "unmap_calls %llu\n", s.unmap_calls);
	seq_printf(m, "runs_mapped %llu\n", s.runs_mapped);
	seq_printf(m, "runs_unmapped %llu\n", s.runs_unmapped);
	seq_printf(m, "batches %llu\n", s.batches);
	seq_printf(m, "batch_pages %llu\n", s.batch_pages);
	seq_printf(m, "folio_pinned_pages %llu\n", s.folio_pinned_pages);
	seq_printf(m, "avg_batch_pages %llu\n",
		   s.batches ? div64_u64(s.batch_pages, s.batches) : 0);
	seq_printf(m, "domains %llu\n", domains);
	seq_printf(m, "domain_joins %llu\n", s.domain_joins);
	seq_printf(m, "parallel_maps %llu\n", s.parallel_maps);
	seq_printf(m, "parallel_helpers %llu\n", s.parallel_helpers);
	seq_printf(m, "parallel_chunks %llu\n", s.parallel_chunks);
	seq_printf(m, "parallel_helper_chunks %llu\n", s.parallel_helper_chunks);
	seq_printf(m, "parallel_chunk_ns %llu\n", s.parallel_chunk_ns);
	seq_printf(m, "parallel_takeovers %llu\n", s.parallel_takeovers);
	seq_printf(m, "parallel_wasted_pages %llu\n", s.parallel_wasted_pages);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(fm_stats);

void fm_debugfs_open(struct fm_iommu *iommu)
{
	char name[16];

	iommu->debugfs = NULL;
	if (IS_ERR_OR_NULL(fm_debugfs_root))
		return;
	snprintf(name, sizeof(name), "%d", atomic_inc_return(&fm_debugfs_next_id));
	iommu->debugfs = debugfs_create_dir(name, fm_debugfs_root);
	debugfs_create_file("stats", 0444, iommu->debugfs, iommu, &fm_stats_fops);
}

/* Waits for readers of the stats file to finish: nothing can see @iommu after. */
void fm_debugfs_release(struct fm_iommu *iommu)
{
	debugfs_remove(iommu->debugfs);
	iommu->debugfs = NULL;
}

void fm_debugfs_init(void)
{
	fm_debugfs_root = debugfs_create_dir(KBUILD_MODNAME, NULL);
}

void fm_debugfs_exit(void)
{
	debugfs_remove(fm_debugfs_root);
}
