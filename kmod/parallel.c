// SPDX-License-Identifier: GPL-2.0-only
/*
 * Parallel pinning of a large MAP_DMA. Faulting in and zeroing memory that
 * was never touched is most of what a VMM's MAP_DMA of guest RAM costs
 * without prealloc, and GUP does it one page after another. Here helper
 * kernel threads fill the pipeline's batches ahead of the caller:
 *
 *   - the dma is cut into chunks at vaddr multiples of a power of two
 *     (2 MiB to 32 MiB); chunks are claimed in IOVA order, by helpers and
 *     by the caller, at most a window of them ahead of the oldest one not
 *     yet consumed;
 *   - a chunk is filled with the ordinary fill (batch.c) into batches of
 *     its own: GUP pins, folio pins or PFNMAP lookups, nothing charged,
 *     nothing mapped, stopping at the first error;
 *   - the caller alone takes the batches in IOVA order and charges and maps
 *     them as it would its own (pin.c): the charge, the run record and the
 *     error returned are those of a serial map, and the first error in
 *     IOVA order ends the map;
 *   - at the end the helpers are stopped (they exit before the ioctl
 *     returns) and every batch not consumed is unpinned, never charged;
 *     a caller with a fatal signal passes SIGKILL on to them first, so
 *     that a helper in GUP stops as the caller would.
 *
 * A helper works in the caller's mm (kthread_use_mm()): faults there
 * charge the mm's memory cgroup, page tables too (the caller's memcg is
 * made active), and follow the vmas' NUMA policies. A helper runs only on
 * CPUs of the caller's node that the caller may run on, at its nice level.
 * What a kernel thread cannot take over stays the caller's: its own task
 * mempolicy or a cpuset that narrows its memory nodes keep the map serial,
 * and hugetlbfs memory, whose pages the hugetlb cgroup charges to the
 * faulting task, is never faulted by a helper (checked under the fill's
 * mmap_lock, batch.c; the caller fills what a helper left). The helpers'
 * CPU time is their own (kernel threads, outside the caller's cgroups):
 * pin_threads=0 turns them off.
 *
 * Memory beyond the first error may have been faulted in by a helper
 * before the error stopped it; it stays in the process, unpinned and
 * uncharged, as if the process had touched it. Likewise a helper's fault
 * that cannot be interrupted (a file whose server hangs) ahead of the
 * first error delays the map's return until it ends, where a serial map
 * would have returned the error without reaching that page.
 */
#include <linux/cpuset.h>
#include <linux/kthread.h>
#include <linux/ktime.h>
#include <linux/memcontrol.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/wait.h>

#include "pin.h"
#include "trace.h"

#define FM_PAR_MAX_HELPERS	15
#define FM_PAR_CHUNK_MIN	SZ_2M
#define FM_PAR_CHUNK_MAX	SZ_32M
/* Pages pinned serially, then judged, before helpers may join: 4 batches */
#define FM_PAR_PROBE_PAGES	(4 * FM_BATCH_PAGES)
/* Fewer pages per folio than this on average: 4K memory (fm_par_consider()) */
#define FM_PAR_SMALL_FOLIO	64
/* Chunks per thread in flight: one being filled, one waiting. */
#define FM_PAR_WINDOW_PER_THREAD 2

struct fm_par_batch {
	struct list_head	node;
	unsigned long		vaddr;		/* where the batch starts */
	struct fm_batch		batch;
};

struct fm_par_chunk {
	struct list_head	batches;	/* struct fm_par_batch, in order */
	unsigned long		vaddr;		/* not filled yet from here */
	unsigned long		left;		/* ... this many pages */
	long			err;		/* the fill's, after the batches */
	bool			handback;	/* a helper left the rest (hugetlbfs) */
	u64			ns;		/* time the fill took */
	unsigned int		filler;		/* 0: the caller, else helper n */
	bool			done;		/* filled: the caller's now */
};

struct fm_par;

struct fm_par_helper {
	struct fm_par		*par;
	struct task_struct	*task;
	unsigned int		id;		/* 1.. (0 is the caller) */
};

struct fm_par {
	struct fm_pinner	*p;		/* the caller's */
	struct fm_pinner	fill;		/* the caller's own fills */
	struct fm_batch		*own;		/* p's batch, back at the end */
	struct fm_par_batch	*cur;		/* being consumed by p */
	unsigned long		start;		/* vaddr the helpers' part starts at */
	unsigned long		npage;		/* pages from there to the dma's end */
	unsigned int		shift;		/* chunk size */
	unsigned long		nr_chunks;
	unsigned int		window;		/* chunks in the ring */
	struct fm_par_chunk	*ring;		/* chunk i at i % window */
	spinlock_t		lock;
	unsigned long		claimed;	/* chunks handed out */
	unsigned long		consumed;	/* chunks taken by p */
	bool			abort;
	wait_queue_head_t	wq;		/* chunk done, window moved, abort */
	struct mem_cgroup	*memcg;		/* the mm's, for page tables */
	cpumask_var_t		cpus;		/* where helpers may run */
	unsigned int		running;	/* helpers not yet out of their loop */
	unsigned int		nr_helpers;
	struct fm_par_helper	helpers[FM_PAR_MAX_HELPERS];
};

static struct fm_par_chunk *fm_par_chunk(struct fm_par *par, unsigned long i)
{
	return &par->ring[i % par->window];
}

/* Chunk @i: its first vaddr and its number of pages. */
static unsigned long fm_par_chunk_range(struct fm_par *par, unsigned long i,
					unsigned long *npage)
{
	unsigned long last = par->start + (par->npage << PAGE_SHIFT) - 1;
	unsigned long start = ((par->start >> par->shift) + i) << par->shift;
	unsigned long end = start + (1UL << par->shift) - 1;

	start = max(start, par->start);
	*npage = ((min(end, last) - start) >> PAGE_SHIFT) + 1;
	return start;
}

/* The next chunk to fill, if the window has room and nobody stopped. */
static bool fm_par_claim(struct fm_par *par, unsigned long *i)
{
	bool ok;

	spin_lock(&par->lock);
	ok = !par->abort && par->claimed < par->nr_chunks &&
	     par->claimed < par->consumed + par->window;
	if (ok)
		*i = par->claimed++;
	spin_unlock(&par->lock);
	return ok;
}

/* Does a waiting helper have anything to do, or nothing ever again? */
static bool fm_par_helper_wake(struct fm_par *par)
{
	bool wake;

	spin_lock(&par->lock);
	wake = par->abort || par->claimed == par->nr_chunks ||
	       par->claimed < par->consumed + par->window;
	spin_unlock(&par->lock);
	return wake;
}

static void fm_par_batch_free(struct fm_par_batch *pb)
{
	fm_batch_fini(&pb->batch);
	kfree(pb);
}

/*
 * Fill the rest of chunk @c through @f (a pinner of the caller's or a
 * helper's), up to its end or its first error: 0 or -errno. A helper
 * leaves hugetlbfs memory to the caller (c->handback), and so does a
 * helper stopped by a signal the caller did not get. Only the filler
 * touches the chunk until it is done, then only the caller.
 */
static long fm_par_fill(struct fm_par *par, struct fm_pinner *f, struct fm_par_chunk *c)
{
	u64 start = ktime_get_ns();
	long err = 0;

	while (c->left) {
		struct fm_par_batch *pb;
		long n;

		/* The caller's fatal signal, or the caller stopped the helpers. */
		if (READ_ONCE(par->abort) || fatal_signal_pending(current)) {
			err = -EINTR;
			break;
		}
		pb = kmalloc(sizeof(*pb), GFP_KERNEL);
		if (!pb) {
			/* A serial map allocates nothing here: the caller goes on. */
			c->handback = f->helper;
			err = f->helper ? 0 : -ENOMEM;
			break;
		}
		fm_batch_init(&pb->batch, c->left);
		f->batch = &pb->batch;
		n = fm_pinner_fill(f, c->vaddr, c->left);
		if (n < 0) {
			fm_par_batch_free(pb);
			c->handback = f->helper && (n == -EXDEV || n == -EINTR);
			err = c->handback ? 0 : n;
			break;
		}
		pb->vaddr = c->vaddr;
		list_add_tail(&pb->node, &c->batches);
		c->vaddr += n << PAGE_SHIFT;
		c->left -= n;
		cond_resched();
	}
	f->batch = NULL;
	c->ns += ktime_get_ns() - start;
	return err;
}

/* Claimed chunk @i: fill it and hand it to the caller. */
static void fm_par_fill_chunk(struct fm_par *par, struct fm_pinner *f, unsigned long i,
			      unsigned int filler)
{
	struct fm_par_chunk *c = fm_par_chunk(par, i);

	c->vaddr = fm_par_chunk_range(par, i, &c->left);
	c->ns = 0;
	c->handback = false;
	c->err = fm_par_fill(par, f, c);
	c->filler = filler;
	/* The batches and the result above are complete before done is. */
	smp_store_release(&c->done, true);
	wake_up_all(&par->wq);
}

static void fm_par_fill_init(struct fm_par *par, struct fm_pinner *f)
{
	struct fm_pinner *p = par->p;

	fm_pinner_init(f, p->iommu, p->dma, NULL, NULL);
	f->single = p->single;
	f->mode_known = true;
	f->helper = f != &par->fill;
}

static int fm_par_helper(void *data)
{
	struct fm_par_helper *h = data;
	struct fm_par *par = h->par;
	struct mem_cgroup *old;
	struct fm_pinner f;
	unsigned long i;

	/* The caller's SIGKILL is passed on (fm_par_stop()): GUP stops. */
	allow_kernel_signal(SIGKILL);
	fm_par_fill_init(par, &f);
	kthread_use_mm(par->p->mm);
	old = set_active_memcg(par->memcg);
	for (;;) {
		if (fm_par_claim(par, &i)) {
			fm_par_fill_chunk(par, &f, i, h->id);
			continue;
		}
		wait_event_idle(par->wq, fm_par_helper_wake(par));
		if (READ_ONCE(par->abort) || READ_ONCE(par->claimed) == par->nr_chunks)
			break;
	}
	set_active_memcg(old);
	kthread_unuse_mm(par->p->mm);
	spin_lock(&par->lock);
	par->running--;
	spin_unlock(&par->lock);
	wake_up_all(&par->wq);

	/* kthread_stop() reaps us: the ioctl never returns before. */
	set_current_state(TASK_IDLE);
	while (!kthread_should_stop()) {
		schedule();
		set_current_state(TASK_IDLE);
	}
	__set_current_state(TASK_RUNNING);
	return 0;
}

/*
 * Helpers for this caller: pin_threads (-1: one fewer than the CPUs they
 * may use, @mask), at most one fewer than the chunks. 0 when the caller's
 * memory placement is its task's, which a kernel thread does not have: a
 * task mempolicy, or a cpuset narrower than the memory nodes.
 */
static unsigned int fm_par_helpers_wanted(const struct cpumask *mask, unsigned long nr_chunks)
{
	int want = READ_ONCE(fm_pin_threads);
	unsigned int cpus = cpumask_weight(mask);

	if (!want || cpus < 2 || nr_chunks < 2 || fm_compat_task_mempolicy())
		return 0;
	if (!nodes_subset(node_states[N_MEMORY], cpuset_current_mems_allowed))
		return 0;
	if (want < 0 || want > cpus - 1)
		want = cpus - 1;
	return min3((unsigned long)want, nr_chunks - 1, (unsigned long)FM_PAR_MAX_HELPERS);
}

/*
 * The next helper, bound to par->cpus at the caller's nice level, not yet
 * woken. Its argument lives in @par, whether its function runs or not.
 */
static bool fm_par_helper_create(struct fm_par *par)
{
	struct fm_par_helper *h = &par->helpers[par->nr_helpers];
	struct task_struct *t;

	h->par = par;
	h->id = par->nr_helpers + 1;
	t = kthread_create(fm_par_helper, h, "foliomap-pin/%d", task_pid_nr(current));
	if (IS_ERR(t))
		return false;
	if (set_cpus_allowed_ptr(t, par->cpus)) {
		kthread_stop(t);
		return false;
	}
	set_user_nice(t, task_nice(current));
	h->task = t;
	par->nr_helpers++;
	return true;
}

/*
 * Is the rest of the dma for helpers? Not with hugetlbfs memory (above),
 * nor with device memory, whose lookups are quick and which the charge
 * made ahead would count for nothing. A range with holes fails where it
 * fails, as serially.
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

static void fm_par_free(struct fm_par *par)
{
	free_cpumask_var(par->cpus);
	kfree(par->ring);
	kfree(par);
}

/*
 * Called by fm_pin_map_dma() for a new mapping, between two batches, when
 * what is left of it (@npage pages from the open run's end) is worth
 * helpers: start them, if the caller may have them. Without (nothing to
 * gain, no memory, no thread) the map goes on serially.
 */
static void fm_par_start(struct fm_pinner *p, unsigned long npage)
{
	struct fm_dma *dma = p->dma;
	unsigned int helpers, i;
	struct fm_par *par;

	if (p->mm != current->mm)
		return;
	par = kzalloc(sizeof(*par), GFP_KERNEL);
	if (!par)
		return;
	par->p = p;
	par->own = p->batch;
	par->start = dma->vaddr + (fm_pinner_next_iova(p) - dma->iova);
	par->npage = npage;
	/*
	 * Helpers run on the caller's node, on CPUs it may use: with the
	 * default (local) policy, pages land where the caller's would.
	 */
	if (!zalloc_cpumask_var(&par->cpus, GFP_KERNEL)) {
		kfree(par);
		return;
	}
	cpumask_and(par->cpus, current->cpus_ptr, cpumask_of_node(numa_node_id()));
	helpers = fm_par_helpers_wanted(par->cpus, fm_par_nr_chunks(par, ilog2(FM_PAR_CHUNK_MIN)));
	/*
	 * Not on the caller's own CPU: woken from it, a helper would often
	 * start there and take turns with the caller until a load balance.
	 */
	cpumask_clear_cpu(raw_smp_processor_id(), par->cpus);
	if (!helpers || !fm_par_range_ok(par, p->mm)) {
		fm_par_free(par);
		return;
	}

	par->shift = fm_par_shift(npage << PAGE_SHIFT, helpers + 1);
	par->nr_chunks = fm_par_nr_chunks(par, par->shift);
	helpers = min_t(unsigned long, helpers, par->nr_chunks - 1);
	par->window = FM_PAR_WINDOW_PER_THREAD * (helpers + 1);
	par->ring = kcalloc(par->window, sizeof(*par->ring), GFP_KERNEL);
	if (!par->ring) {
		fm_par_free(par);
		return;
	}
	for (i = 0; i < par->window; i++)
		INIT_LIST_HEAD(&par->ring[i].batches);
	spin_lock_init(&par->lock);
	init_waitqueue_head(&par->wq);
	/* Every fill takes the pins the first fill (serial, before) chose. */
	fm_par_fill_init(par, &par->fill);

	/*
	 * The rest of the map is charged ahead, once; each batch then takes
	 * its charge from there (charge.c) and fm_par_stop() gives back what
	 * is left. A charge takes mmap_write_lock, which a charge per batch
	 * would take between the helpers' faults, stopping them each time.
	 * The rlimit is checked for the whole rest: a map that would not fit
	 * goes on serially and fails where a serial map fails, so helpers
	 * never hold pins beyond the limit.
	 */
	if (fm_lock_acct(dma, npage, false)) {
		fm_par_free(par);
		return;
	}
	p->prepaid = npage;
	par->memcg = get_mem_cgroup_from_mm(p->mm);

	while (par->nr_helpers < helpers && fm_par_helper_create(par))
		;
	if (!par->nr_helpers) {
		fm_lock_acct(dma, -(long)p->prepaid, false);
		p->prepaid = 0;
		mem_cgroup_put(par->memcg);
		fm_par_free(par);
		return;
	}
	par->running = par->nr_helpers;
	p->par = par;
	for (i = 0; i < par->nr_helpers; i++)
		wake_up_process(par->helpers[i].task);
}

/*
 * The pin pipeline (pin.c) asks here whether a new mapping of @size may
 * get helpers at all.
 */
bool fm_par_may(struct fm_pinner *p, size_t size)
{
	u64 min = (u64)READ_ONCE(fm_pin_parallel_min_mb) << 20;

	p->probe_done = 0;
	p->probe_segs = 0;
	p->probe_slow = 0;
	return READ_ONCE(fm_pin_threads) && size >= max_t(u64, min, 2 * FM_PAR_CHUNK_MIN);
}

/*
 * After each batch of a mapping fm_par_may() let through, with @left pages
 * to go: judge each FM_PAR_PROBE_PAGES by what pinning them took, and start
 * helpers for the rest once it is work worth sharing: memory GUP-fast could
 * not pin (never touched, or not pinnable without a fault: the locked walk,
 * which faults in and zeroes pages, did half of it or more), or small
 * folios (fewer than FM_PAR_SMALL_FOLIO pages on average, as charge.c
 * counts them: GUP's work is per page there). Memory present in large folios pins in
 * microseconds per GiB, far less than helpers cost to start, and stays
 * serial. Not timed: a clock in the decision would make it depend on
 * noise. Returns true to be asked again after the next batch.
 */
bool fm_par_consider(struct fm_pinner *p, unsigned long left)
{
	unsigned long done = (p->dma->size >> PAGE_SHIFT) - left;
	unsigned long window = done - p->probe_done;
	bool worth;

	if (window < FM_PAR_PROBE_PAGES)
		return true;
	worth = p->probe_slow * 2 >= window ||
		window < FM_PAR_SMALL_FOLIO * max(p->probe_segs, 1UL);
	p->probe_done = done;
	p->probe_segs = 0;
	p->probe_slow = 0;
	if (!worth)
		return true;
	fm_par_start(p, left);
	return false;
}

/* The consumed chunk's batches are all taken: move the window on. */
static void fm_par_chunk_consumed(struct fm_par *par, struct fm_par_chunk *c)
{
	struct fm_pinner *p = par->p;
	unsigned long npage, vaddr = fm_par_chunk_range(par, par->consumed, &npage);

	trace_foliomap_pin_chunk(p->dma->iova + (vaddr - p->dma->vaddr),
				 (u64)npage << PAGE_SHIFT, c->filler, c->ns);
	p->iommu->stats.parallel_chunks++;
	if (c->filler)
		p->iommu->stats.parallel_helper_chunks++;
	p->iommu->stats.parallel_chunk_ns += c->ns;

	c->done = false;
	spin_lock(&par->lock);
	par->consumed++;
	spin_unlock(&par->lock);
	wake_up_all(&par->wq);
}

/*
 * The next batch in IOVA order, as p->batch, for the caller to charge and
 * map: its size in pages, or the error the fill stopped at there. While
 * the batch it needs is still being filled, the caller fills the next
 * unclaimed chunk itself, or waits (killably) when there is none.
 */
long fm_par_next(struct fm_pinner *p)
{
	struct fm_par *par = p->par;
	unsigned long i;

	/* The batch before is consumed (pin.c mapped or released it). */
	if (par->cur) {
		fm_par_batch_free(par->cur);
		par->cur = NULL;
		p->batch = par->own;
	}
	for (;;) {
		struct fm_par_chunk *c;
		struct fm_par_batch *pb;

		if (WARN_ON_ONCE(par->consumed == par->nr_chunks))
			return -EFAULT;
		c = fm_par_chunk(par, par->consumed);
		/* Pairs with the filler's release: its batches are all there. */
		if (smp_load_acquire(&c->done)) {
			pb = list_first_entry_or_null(&c->batches, struct fm_par_batch, node);
			if (pb) {
				list_del(&pb->node);
				par->cur = pb;
				p->batch = &pb->batch;
				return pb->batch.size;
			}
			/* What a helper left, the caller fills in place. */
			if (c->handback) {
				c->handback = false;
				c->err = fm_par_fill(par, &par->fill, c);
				continue;
			}
			if (c->err)
				return c->err;
			fm_par_chunk_consumed(par, c);
			continue;
		}
		if (fm_par_claim(par, &i)) {
			fm_par_fill_chunk(par, &par->fill, i, 0);
			continue;
		}
		/* As above. */
		if (wait_event_killable(par->wq, smp_load_acquire(&c->done)))
			return -EINTR;
	}
}

/*
 * Unpin a batch nobody charged or mapped: GUP's or memfd_pin_folios()'
 * pins, one per page or, with folio pins, one per folio segment of a run
 * (batch.c); never dirtied, since no device saw them. PFNMAP lookups hold
 * no pin.
 */
static void fm_par_batch_release(struct fm_par *par, struct fm_par_batch *pb)
{
	bool folio_pins = par->p->dma->folio_pins;
	struct fm_batch *b = &pb->batch;
	unsigned long r;

	for (r = 0; r < b->nr_runs && !b->pfnmap; r++) {
		unsigned long pfn = b->runs[r].pfn, left = b->runs[r].npage;

		if (!folio_pins) {
			unpin_user_page_range_dirty_lock(pfn_to_page(pfn), left, false);
			continue;
		}
		while (left) {
			unsigned long len = fm_folio_segment(pfn, left);

			unpin_user_page(pfn_to_page(pfn));
			pfn += len;
			left -= len;
		}
	}
	fm_par_batch_free(pb);
}

/*
 * After the caller's last batch, done or failed: stop the helpers and wait
 * for them to leave their loop, killably: a caller killed meanwhile passes
 * SIGKILL on, so that a helper's GUP stops as the caller's would. Then
 * reap them and unpin whatever was filled and never consumed.
 */
void fm_par_stop(struct fm_pinner *p)
{
	struct fm_par *par = p->par;
	unsigned long i;
	unsigned int h;

	spin_lock(&par->lock);
	par->abort = true;
	spin_unlock(&par->lock);
	wake_up_all(&par->wq);
	if (wait_event_killable(par->wq, !READ_ONCE(par->running))) {
		for (h = 0; h < par->nr_helpers; h++)
			send_sig(SIGKILL, par->helpers[h].task, 1);
		wait_event(par->wq, !READ_ONCE(par->running));
	}
	for (h = 0; h < par->nr_helpers; h++)
		kthread_stop(par->helpers[h].task);

	if (par->cur)
		fm_par_batch_free(par->cur);
	/* The last chunk of a map that completed was taken but not counted. */
	if (par->consumed < par->claimed) {
		struct fm_par_chunk *c = fm_par_chunk(par, par->consumed);

		if (c->done && !c->left && !c->err && list_empty(&c->batches))
			fm_par_chunk_consumed(par, c);
	}
	/* Claimed chunks are all done now; the first may be partly consumed. */
	for (i = par->consumed; i < par->claimed; i++) {
		struct fm_par_chunk *c = fm_par_chunk(par, i);
		struct fm_par_batch *pb, *next;

		list_for_each_entry_safe(pb, next, &c->batches, node) {
			list_del(&pb->node);
			fm_par_batch_release(par, pb);
		}
	}

	/* What the batches did not take of the charge made ahead. */
	fm_lock_acct(p->dma, -(long)p->prepaid, false);
	p->prepaid = 0;

	p->iommu->stats.parallel_maps++;
	p->iommu->stats.parallel_helpers += par->nr_helpers;
	trace_foliomap_pin_parallel(p->dma->iova + (par->start - p->dma->vaddr),
				    (u64)par->npage << PAGE_SHIFT, par->nr_helpers + 1,
				    par->nr_chunks);
	p->batch = par->own;
	p->par = NULL;
	mem_cgroup_put(par->memcg);
	fm_par_free(par);
}
