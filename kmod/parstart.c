// SPDX-License-Identifier: GPL-2.0-only
/*
 * Whether a new mapping gets helper threads (parallel.c), and starting
 * them. The pin pipeline asks fm_par_may() once per mapping and
 * fm_par_consider() after its batches; a mapping whose first batches show
 * work worth sharing (memory never touched, or present in small folios)
 * gets up to pin_threads helpers for the rest, cut into chunks, with the
 * rest charged to locked memory once, ahead.
 */
#include <linux/cpumask.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/slab.h>

#include "parallel.h"

/*
 * Helpers for this caller: pin_threads (-1: one fewer than the CPUs they
 * may use, @mask), at most one fewer than the chunks.
 */
static unsigned int fm_par_helpers_wanted(const struct cpumask *mask, unsigned long nr_chunks)
{
	int want = READ_ONCE(fm_pin_threads);
	unsigned int cpus = cpumask_weight(mask);

	if (!want || (cpus < 2 && !fm_test_build) || nr_chunks < 2)
		return 0;
	/* The test build may have more helpers than CPUs (tests/t_parrace.c). */
	if (want < 0 || (want > cpus - 1 && !fm_test_build))
		want = cpus - 1;
	return min3((unsigned long)want, nr_chunks - 1, (unsigned long)FM_PAR_MAX_HELPERS);
}

/*
 * Is the rest of the dma for helpers? Not with hugetlbfs memory, pinned
 * by folio (filepin.c) or by 2 MiB pages, quick either way, nor with
 * device memory, whose lookups are quick and which the charge made ahead
 * would count for nothing. A range with holes fails where it fails, as
 * serially.
 */
static bool fm_par_range_ok(struct fm_par *par, struct mm_struct *mm)
{
	bool ok;

	mmap_read_lock(mm);
	ok = !fm_range_has_vm_flags(mm, fm_compat_untagged_addr(mm, par->start),
				    par->npage << PAGE_SHIFT, VM_HUGETLB | VM_PFNMAP | VM_IO);
	mmap_read_unlock(mm);
	return ok;
}

/*
 * Choose the chunk size: about four chunks per thread, between
 * FM_PAR_CHUNK_MIN and FM_PAR_CHUNK_MAX, so that threads finish close
 * together and a chunk is still milliseconds of work.
 */
static unsigned int fm_par_shift(unsigned long size, unsigned int threads)
{
	unsigned long chunk = size / (4 * threads);

	chunk = clamp_t(unsigned long, chunk, FM_PAR_CHUNK_MIN, FM_PAR_CHUNK_MAX);
	return ilog2(chunk);
}

static unsigned long fm_par_nr_chunks(struct fm_par *par, unsigned int shift)
{
	unsigned long last = par->start + (par->npage << PAGE_SHIFT) - 1;

	return (last >> shift) - (par->start >> shift) + 1;
}

/*
 * Where helpers may run: the caller's CPUs or, when its memory goes to the
 * node it runs on (no task mempolicy), those of them on its node.
 */
static bool fm_par_cpus(struct fm_par *par)
{
	if (!zalloc_cpumask_var(&par->cpus, GFP_KERNEL_ACCOUNT))
		return false;
	cpumask_copy(par->cpus, current->cpus_ptr);
	if (!fm_compat_task_mempolicy())
		cpumask_and(par->cpus, par->cpus, cpumask_of_node(numa_node_id()));
	par->narrow = !cpumask_equal(par->cpus, current->cpus_ptr);
	return true;
}

/*
 * Called by fm_par_consider() for a new mapping, between two batches, when
 * what is left of it (@npage pages from the open run's end) is worth
 * helpers: start them, if the caller may have them. Without (nothing to
 * gain, no memory, no thread) the map goes on serially.
 */
static void fm_par_start(struct fm_pinner *p, unsigned long npage)
{
	struct fm_dma *dma = p->dma;
	unsigned int helpers, i;
	struct fm_par *par;

	par = kzalloc(sizeof(*par), GFP_KERNEL_ACCOUNT);
	if (!par)
		return;
	par->p = p;
	par->own = p->batch;
	par->start = dma->vaddr + (fm_pinner_next_iova(p) - dma->iova);
	par->npage = npage;
	par->stop_at = ULONG_MAX;
	if (!fm_par_cpus(par)) {
		kfree(par);
		return;
	}
	helpers = fm_par_helpers_wanted(par->cpus, fm_par_nr_chunks(par, ilog2(FM_PAR_CHUNK_MIN)));
	if (!helpers || !fm_par_range_ok(par, p->mm)) {
		fm_par_free(par);
		return;
	}

	par->shift = fm_par_shift(npage << PAGE_SHIFT, helpers + 1);
	par->nr_chunks = fm_par_nr_chunks(par, par->shift);
	helpers = min_t(unsigned long, helpers, par->nr_chunks - 1);
	par->window = FM_PAR_WINDOW_PER_THREAD * (helpers + 1);
	par->ring = kcalloc(par->window, sizeof(*par->ring), GFP_KERNEL_ACCOUNT);
	if (!par->ring) {
		fm_par_free(par);
		return;
	}
	for (i = 0; i < par->window; i++) {
		INIT_LIST_HEAD(&par->ring[i].front.batches);
		INIT_LIST_HEAD(&par->ring[i].back.batches);
	}
	spin_lock_init(&par->lock);
	init_waitqueue_head(&par->wait);
	/* Every fill takes the pins the first fill (serial, before) chose. */
	fm_par_fill_init(par, &par->fill, false);

	/*
	 * The rest of the map is charged ahead, once; each batch then takes
	 * its charge from there (fm_par_prepaid()) and fm_par_stop() gives
	 * back what is left. A charge takes mmap_write_lock, which a charge
	 * per batch would take between the helpers' faults, stopping them
	 * each time. The rlimit is checked for the whole rest: a map that
	 * would not fit goes on serially and fails where a serial map fails,
	 * so helpers never hold pins beyond the limit.
	 */
	if (fm_lock_acct(dma, npage, false)) {
		fm_par_free(par);
		return;
	}
	par->prepaid = npage;

	while (par->nr_helpers < helpers && fm_par_helper_create(par))
		;
	if (!par->nr_helpers) {
		fm_lock_acct(dma, -(long)par->prepaid, false);
		fm_par_free(par);
		return;
	}
	p->par = par;
	for (i = 0; i < par->nr_helpers; i++)
		fm_compat_user_worker_start(par->helpers[i]->worker);
}

/*
 * The pin pipeline (pin.c) asks here whether a new mapping of @size may
 * get helpers at all.
 */
bool fm_par_may(struct fm_pinner *p, size_t size)
{
	u64 min = (u64)READ_ONCE(fm_pin_parallel_min_mb) << 20;

	p->probe = (struct fm_par_probe){ .window = FM_PAR_PROBE_PAGES };
	return fm_compat_have_user_worker() && READ_ONCE(fm_pin_threads) &&
	       size >= max_t(u64, min, 2 * FM_PAR_CHUNK_MIN);
}

/*
 * Is the rest of the dma (@left pages from @vaddr) mostly not present in
 * the page tables, memory never touched? Or present, and only slow to pin
 * because every page needs a write fault: copy-on-write after fork(), the
 * zero page. Each such fault must flush the TLB of every CPU the mm runs
 * on, which helpers would add to, so that memory stays serial. A few pages
 * spread over the rest are looked up with GUP-fast, which takes no lock
 * and faults nothing.
 */
static bool fm_par_rest_absent(struct fm_pinner *p, unsigned long vaddr, unsigned long left)
{
	unsigned long step = max(left / FM_PAR_PRESENT_SAMPLES, 1UL), i, absent = 0, n = 0;

	for (i = 0; i < left; i += step, n++) {
		struct page *page;

		if (get_user_pages_fast_only(vaddr + (i << PAGE_SHIFT), 1, 0, &page) == 1)
			put_page(page);
		else
			absent++;
	}
	return absent * 2 > n;
}

/*
 * After each batch of a mapping fm_par_may() let through, with @left pages
 * to go: judge a window of pages (FM_PAR_PROBE_PAGES, twice as many after
 * each window found not worth it, so that a long map judges a few times,
 * not once per window) by what pinning them took, and start
 * helpers for the rest once it is work worth sharing:
 *   - memory GUP-fast could not pin (the locked walk did half of it or
 *     more) and whose rest is not present: never touched, so the walk
 *     faults in and zeroes it, which parallelizes;
 *   - memory GUP-fast pinned in small folios (fewer than FM_PAR_SMALL_FOLIO
 *     pages on average, as charge.c counts them): GUP's work is per page.
 * Present memory in large folios pins in microseconds per GiB, far less
 * than helpers cost to start, and present memory that needs write faults
 * (fm_par_rest_absent()) gains nothing: both stay serial. Not timed: a
 * clock in the decision would make it depend on noise. Returns true to be
 * asked again after the next batch.
 */
bool fm_par_consider(struct fm_pinner *p, unsigned long left)
{
	struct fm_par_probe *pr = &p->probe;
	unsigned long done = (p->dma->size >> PAGE_SHIFT) - left;
	unsigned long window = done - pr->done;
	bool worth;

	if (window < pr->window)
		return true;
	/* Helpers share the caller's mm: only for the caller's own memory. */
	if (p->mm != current->mm)
		return false;
	if (pr->slow * 2 >= window)
		worth = fm_par_rest_absent(p, p->dma->vaddr + (done << PAGE_SHIFT), left);
	else
		worth = window < FM_PAR_SMALL_FOLIO * max(pr->segs, 1UL);
	pr->done = done;
	pr->segs = 0;
	pr->slow = 0;
	if (!worth) {
		pr->window *= 2;
		return true;
	}
	fm_par_start(p, left);
	return false;
}
