// SPDX-License-Identifier: GPL-2.0-only
/*
 * Parallel pinning of a large MAP_DMA. Faulting in and zeroing memory that
 * was never touched is most of what a VMM's MAP_DMA of guest RAM costs
 * without prealloc, and GUP does it one page after another. Here helper
 * threads fill the pipeline's batches ahead of the caller:
 *
 *   - the dma is cut into chunks at vaddr multiples of a power of two
 *     (2 MiB to 32 MiB); chunks are claimed in IOVA order, by helpers and
 *     by the caller, at most a window of them ahead of the oldest one not
 *     yet consumed;
 *   - a chunk is filled with the ordinary fill (batch.c) into batches of
 *     its own: GUP pins or PFNMAP lookups, nothing charged, nothing mapped;
 *   - the caller alone takes the batches in IOVA order and charges and maps
 *     them as it would its own (pin.c): the charge, the run record and the
 *     error returned are those of a serial map;
 *   - the caller waits for no helper that is not running: when the chunk
 *     it needs next is still being filled and there is no other to fill,
 *     it splits off the rest of that chunk behind the helper's batch in
 *     flight and fills it itself; if that batch is still not there then,
 *     it waits for it as long as the helper runs on a CPU (its batch is
 *     then at most a batch's time away, which doing it again would cost
 *     too, in work done twice), and takes the batch over otherwise: the
 *     helper's copy is dropped when it ends. A helper that is starved,
 *     preempted, stopped or throttled delays the map by at most one
 *     batch done twice, and a helper that is only slower costs nothing;
 *   - a helper that fails hands the rest of its chunk back and no chunk
 *     beyond the failure is claimed any more: the caller fills the failing
 *     part itself, so the error a map returns is always the caller's own,
 *     met where a serial map meets it;
 *   - at the end the helpers are stopped and reaped before the ioctl
 *     returns, and every batch not consumed is unpinned, never charged.
 *
 * The helpers are threads of the calling process (vhost_task_create(), the
 * user workers of vhost and of KVM's NX recovery; compat.h), created by
 * the calling thread. So they are in all of its cgroups (cpu, cpuset, io,
 * memory, pids, hugetlb) and count in its CPU time and PSI; they inherit
 * its affinity, scheduling policy, nice level and task mempolicy, share
 * its mm, files nothing; they get the process's fatal signals (GUP stops
 * on them) and are part of an OOM victim. A helper that cannot be created
 * (pids.max, RLIMIT_NPROC, memory) is not started: the map is then serial.
 * The only placement a helper chooses is its node: with the default (local)
 * policy, it runs on the caller's node, so that pages land where the
 * caller's would; with a task mempolicy the policy places them.
 *
 * Memory beyond the first error may have been filled by a helper before
 * the error was met: at most a window of chunks, each GUP'd as the map
 * asked (faulted in and charged to the memcg, copy-on-write broken for a
 * writable map, migrated out of ZONE_MOVABLE and CMA for the long-term
 * pin), then unpinned, never charged to locked memory. It stays in the
 * process as if the process had touched it.
 */
#include <linux/cpumask.h>
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
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
/* Pages of the rest looked at to tell memory never touched from present */
#define FM_PAR_PRESENT_SAMPLES	8
/* Chunks per thread in flight: one being filled, one waiting. */
#define FM_PAR_WINDOW_PER_THREAD 2

/* Who fills a chunk: the caller, helper 1.., or nobody (the caller's to do) */
#define FM_PAR_CALLER		0
#define FM_PAR_NOBODY		UINT_MAX

struct fm_par_batch {
	struct list_head	node;
	struct fm_batch		batch;
};

/*
 * A part of a chunk and who fills it. Under fm_par.lock, but for the fill
 * itself, done unlocked by its filler.
 */
struct fm_par_seg {
	struct list_head	batches;	/* filled, in order */
	unsigned long		vaddr;		/* not filled yet from here */
	unsigned long		left;		/* ... this many pages */
	unsigned long		inflight;	/* pages the filler's batch asks for now */
	unsigned int		filler;		/* who fills the rest */
};

/*
 * A chunk is its front, where its filler works, and once the caller split
 * it (fm_par_next()), its back: what lies behind the front filler's batch
 * in flight. The front is taken first.
 */
struct fm_par_chunk {
	struct fm_par_seg	front;
	struct fm_par_seg	back;
	bool			split;		/* the back was split off */
	bool			helped;		/* a helper filled part of it */
	u64			ns;		/* time its fills took */
};

struct fm_par;

struct fm_par_helper {
	struct fm_par		*par;
	struct fm_user_worker	*worker;
	struct fm_pinner	fill;		/* its own fills' pinner */
	struct task_struct	*task;		/* its thread, once it ran (a reference) */
	unsigned int		id;		/* 1.. (0 is the caller) */
	bool			placed;		/* on par->cpus */
};

struct fm_par {
	struct fm_pinner	*p;		/* the caller's */
	struct fm_pinner	fill;		/* the caller's own fills */
	struct fm_batch		*own;		/* p's batch */
	struct fm_par_batch	*cur;		/* being consumed by p */
	unsigned long		start;		/* vaddr the helpers' part starts at */
	unsigned long		npage;		/* pages from there to the dma's end */
	unsigned int		shift;		/* chunk size */
	unsigned long		nr_chunks;
	unsigned int		window;		/* chunks in the ring */
	struct fm_par_chunk	*ring;		/* chunk i at i % window */
	spinlock_t		lock;
	wait_queue_head_t	wait;		/* the caller, for a helper's batch */
	unsigned long		claimed;	/* chunks handed out */
	unsigned long		consumed;	/* chunks taken by p */
	unsigned long		stop_at;	/* a fill failed here: claim nothing beyond */
	unsigned long		takeovers;	/* helper batches the caller filled again */
	unsigned long		wasted;		/* pages helpers pinned for nothing */
	bool			abort;
	bool			narrow;		/* helpers run on cpus, not the caller's mask */
	cpumask_var_t		cpus;		/* where helpers may run */
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

/* Under par->lock: hand out the next chunk to @who. */
static struct fm_par_chunk *fm_par_take_next(struct fm_par *par, unsigned int who)
{
	unsigned long i = par->claimed++;
	struct fm_par_chunk *c = fm_par_chunk(par, i);

	c->front.vaddr = fm_par_chunk_range(par, i, &c->front.left);
	c->front.filler = who;
	c->front.inflight = 0;
	c->back.left = 0;
	c->back.inflight = 0;
	c->back.filler = FM_PAR_NOBODY;
	c->split = false;
	c->helped = false;
	c->ns = 0;
	return c;
}

/*
 * The next chunk to fill ahead, for @who, if the window has room, nobody
 * stopped, and it lies before any failure.
 */
static struct fm_par_chunk *fm_par_claim(struct fm_par *par, unsigned int who)
{
	struct fm_par_chunk *c = NULL;
	unsigned long npage;

	spin_lock(&par->lock);
	if (!par->abort && par->claimed < par->nr_chunks &&
	    par->claimed < par->consumed + par->window &&
	    fm_par_chunk_range(par, par->claimed, &npage) < par->stop_at)
		c = fm_par_take_next(par, who);
	spin_unlock(&par->lock);
	return c;
}

static void fm_par_batch_free(struct fm_par_batch *pb)
{
	fm_batch_fini(&pb->batch);
	kfree(pb);
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

/* Unpin what was filled in part @g and never consumed. */
static void fm_par_seg_release(struct fm_par *par, struct fm_par_seg *g)
{
	struct fm_par_batch *pb, *next;

	list_for_each_entry_safe(pb, next, &g->batches, node) {
		list_del(&pb->node);
		par->wasted += pb->batch.size;
		fm_par_batch_release(par, pb);
	}
}

/* A helper's batch landed, or it gave its part up: the caller may wait for it. */
static void fm_par_wake_caller(struct fm_par *par, unsigned int who)
{
	if (who != FM_PAR_CALLER && wq_has_sleeper(&par->wait))
		wake_up(&par->wait);
}

/*
 * Fill part @g of chunk @c ahead of the caller, as @who through pinner @f,
 * batch by batch, for as long as @who is its filler and it has pages left:
 * the caller may split the rest off or take it over at any time, and a
 * batch filled for what it took is dropped. A failure (an allocation,
 * GUP's error, hugetlbfs that a helper leaves alone: -EXDEV) hands the
 * rest back to the caller; any but the last also stops claims beyond it.
 * Returns the pages this call added.
 */
static unsigned long fm_par_fill_ahead(struct fm_par *par, struct fm_pinner *f,
				       struct fm_par_chunk *c, struct fm_par_seg *g,
				       unsigned int who)
{
	unsigned long added = 0;

	for (;;) {
		unsigned long vaddr, left;
		struct fm_par_batch *pb;
		u64 start;
		long n;

		spin_lock(&par->lock);
		if (g->filler != who || !g->left)
			goto out_unlock;
		if (par->abort || g->vaddr >= par->stop_at || fatal_signal_pending(current))
			goto handback;
		vaddr = g->vaddr;
		left = g->left;
		g->inflight = min_t(unsigned long, left, FM_BATCH_PAGES);
		spin_unlock(&par->lock);
		fm_pause(FM_PAUSE_FILL, who, vaddr);

		pb = kmalloc(sizeof(*pb), GFP_KERNEL_ACCOUNT);
		if (!pb) {
			spin_lock(&par->lock);
			if (g->filler == who && g->vaddr == vaddr)
				goto handback;
			goto out_unlock;
		}
		fm_batch_init(&pb->batch, left);
		f->batch = &pb->batch;
		start = ktime_get_ns();
		if (who != FM_PAR_CALLER && fm_inject(FM_INJECT_HELPER))
			n = -ENOMEM;
		else
			n = fm_pinner_fill(f, vaddr, left);
		f->batch = NULL;
		fm_pause(FM_PAUSE_FILLED, who, vaddr);

		spin_lock(&par->lock);
		if (g->filler != who || g->vaddr != vaddr) {
			/* Taken over by the caller meanwhile. */
			g->inflight = 0;
			if (n > 0)
				par->wasted += n;
			spin_unlock(&par->lock);
			if (n > 0)
				fm_par_batch_release(par, pb);
			else
				fm_par_batch_free(pb);
			fm_par_wake_caller(par, who);
			return added;
		}
		if (n < 0) {
			fm_par_batch_free(pb);
			if (n != -EXDEV)
				par->stop_at = min(par->stop_at, vaddr);
			goto handback;
		}
		/* A split leaves at least what the batch asked for (inflight). */
		list_add_tail(&pb->node, &g->batches);
		g->vaddr += n << PAGE_SHIFT;
		g->left -= n;
		g->inflight = 0;
		c->ns += ktime_get_ns() - start;
		c->helped |= who != FM_PAR_CALLER;
		spin_unlock(&par->lock);
		fm_par_wake_caller(par, who);
		added += n;
		fm_pause(FM_PAUSE_LANDED, who, vaddr);
		cond_resched();
	}
handback:
	g->filler = FM_PAR_NOBODY;
out_unlock:
	g->inflight = 0;
	spin_unlock(&par->lock);
	fm_par_wake_caller(par, who);
	return added;
}

static void fm_par_fill_init(struct fm_par *par, struct fm_pinner *f, bool helper)
{
	struct fm_pinner *p = par->p;

	fm_pinner_init(f, p->iommu, p->dma, NULL, NULL);
	f->single = p->single;
	f->mode_known = true;
	f->helper = helper;
}

/*
 * A helper's work, called by its worker loop (compat.h) in
 * TASK_INTERRUPTIBLE: fill the next chunk, or return false to sleep until
 * the window moves (fm_par_chunk_consumed()) or the caller stops us.
 */
static bool fm_par_helper_work(void *data)
{
	struct fm_par_helper *h = data;
	struct fm_par *par = h->par;
	struct fm_par_chunk *c;

	if (!h->placed) {
		__set_current_state(TASK_RUNNING);
		h->placed = true;
		/*
		 * For the caller to see whether we run (fm_par_wait_helper()):
		 * the reference is taken before the pointer is seen.
		 */
		smp_store_release(&h->task, get_task_struct(current));
		/* Only ever narrower than the caller's mask (fm_par_start()). */
		if (par->narrow)
			set_cpus_allowed_ptr(current, par->cpus);
	}
	c = fm_par_claim(par, h->id);
	if (!c)
		return false;
	__set_current_state(TASK_RUNNING);
	fm_par_fill_ahead(par, &h->fill, c, &c->front, h->id);
	return true;
}

/*
 * The process got a fatal signal: the worker exits. Its chunk, if any, was
 * handed back when GUP stopped; the caller, killed too, stops the map.
 */
static void fm_par_helper_killed(void *data)
{
}

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
 * The next helper: a thread of the caller's process, created by the caller
 * and so in its cgroups, with its policy, nice level and mempolicy; not
 * started yet. Fails where the process may not have another thread.
 */
static bool fm_par_helper_create(struct fm_par *par)
{
	struct fm_par_helper *h = &par->helpers[par->nr_helpers];

	h->par = par;
	h->id = par->nr_helpers + 1;
	h->placed = false;
	h->task = NULL;
	fm_par_fill_init(par, &h->fill, true);
	h->worker = fm_compat_user_worker_create(fm_par_helper_work, fm_par_helper_killed, h,
						 "foliomap-pin");
	if (!h->worker)
		return false;
	par->nr_helpers++;
	return true;
}

static void fm_par_wake_helpers(struct fm_par *par)
{
	unsigned int h;

	for (h = 0; h < par->nr_helpers; h++)
		if (par->helpers[h].worker)
			fm_compat_user_worker_wake(par->helpers[h].worker);
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

static void fm_par_free(struct fm_par *par)
{
	free_cpumask_var(par->cpus);
	kfree(par->ring);
	kfree(par);
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

	while (par->nr_helpers < helpers && fm_par_helper_create(par))
		;
	if (!par->nr_helpers) {
		fm_lock_acct(dma, -(long)p->prepaid, false);
		p->prepaid = 0;
		fm_par_free(par);
		return;
	}
	p->par = par;
	for (i = 0; i < par->nr_helpers; i++)
		fm_compat_user_worker_start(par->helpers[i].worker);
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
	p->probe_window = FM_PAR_PROBE_PAGES;
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
	unsigned long done = (p->dma->size >> PAGE_SHIFT) - left;
	unsigned long window = done - p->probe_done;
	bool worth;

	if (window < p->probe_window)
		return true;
	/* Helpers share the caller's mm: only for the caller's own memory. */
	if (p->mm != current->mm)
		return false;
	if (p->probe_slow * 2 >= window)
		worth = fm_par_rest_absent(p, p->dma->vaddr + (done << PAGE_SHIFT), left);
	else
		worth = window < FM_PAR_SMALL_FOLIO * max(p->probe_segs, 1UL);
	p->probe_done = done;
	p->probe_segs = 0;
	p->probe_slow = 0;
	if (!worth) {
		p->probe_window *= 2;
		return true;
	}
	fm_par_start(p, left);
	return false;
}

/* The chunk's batches are all charged and mapped: move the window on. */
static void fm_par_chunk_consumed(struct fm_par *par, struct fm_par_chunk *c)
{
	struct fm_pinner *p = par->p;
	unsigned long npage, vaddr = fm_par_chunk_range(par, par->consumed, &npage);

	trace_foliomap_pin_chunk(p->dma->iova + (vaddr - p->dma->vaddr),
				 (u64)npage << PAGE_SHIFT, c->helped, c->ns);
	p->iommu->stats.parallel_chunks++;
	if (c->helped)
		p->iommu->stats.parallel_helper_chunks++;
	p->iommu->stats.parallel_chunk_ns += c->ns;

	spin_lock(&par->lock);
	par->consumed++;
	spin_unlock(&par->lock);
	fm_par_wake_helpers(par);
}

/* The caller fills part @g of its chunk @c, one batch into its own batch. */
static long fm_par_fill_head(struct fm_par *par, struct fm_par_chunk *c,
			     struct fm_par_seg *g)
{
	struct fm_pinner *f = &par->fill;
	u64 start = ktime_get_ns();
	long n;

	f->batch = par->own;
	n = fm_pinner_fill(f, g->vaddr, g->left);
	f->batch = NULL;
	if (n < 0)
		return n;
	spin_lock(&par->lock);
	g->vaddr += n << PAGE_SHIFT;
	g->left -= n;
	c->ns += ktime_get_ns() - start;
	spin_unlock(&par->lock);
	return n;
}

/*
 * Under par->lock: is part @g, which the caller needs next, still a
 * helper's to fill, with nothing filled to take?
 */
static bool fm_par_helper_owes(struct fm_par_seg *g)
{
	return list_empty(&g->batches) && g->left && g->filler != FM_PAR_CALLER &&
	       g->filler != FM_PAR_NOBODY;
}

/*
 * Under par->lock, with part @g of the head chunk @c owed by a helper and
 * nothing else to do: split off what lies behind the helper's batch in
 * flight, for the caller to fill ahead (true), unless it was split before
 * or the batch in flight is the rest.
 */
static bool fm_par_split(struct fm_par_chunk *c, struct fm_par_seg *g)
{
	if (g != &c->front || c->split || g->left <= g->inflight)
		return false;
	c->split = true;
	c->back.vaddr = g->vaddr + (g->inflight << PAGE_SHIFT);
	c->back.left = g->left - g->inflight;
	c->back.filler = FM_PAR_CALLER;
	g->left = g->inflight;
	return true;
}

static bool fm_par_owes(struct fm_par *par, struct fm_par_seg *g, unsigned int who)
{
	bool owes;

	spin_lock(&par->lock);
	owes = g->filler == who && fm_par_helper_owes(g);
	spin_unlock(&par->lock);
	return owes;
}

/* How long the caller sleeps before it looks again whether a helper runs */
#define FM_PAR_WAIT_NS		(500 * NSEC_PER_USEC)

/*
 * The caller needs part @g next and helper @who owes it its batch in
 * flight, with nothing left to split off: wait for that batch while the
 * helper runs on a CPU (as a mutex's spinner waits while its owner runs),
 * so that it is not filled twice; stop waiting within FM_PAR_WAIT_NS of
 * the helper leaving its CPU, or at once on a fatal signal (GUP stops on
 * it in the helper too).
 */
static void fm_par_wait_helper(struct fm_par *par, struct fm_par_seg *g, unsigned int who)
{
	/* Pairs with the helper's store: its reference is taken before. */
	struct task_struct *t = smp_load_acquire(&par->helpers[who - 1].task);

	while (t && owner_on_cpu(t) && !fatal_signal_pending(current) &&
	       fm_par_owes(par, g, who))
		wait_event_hrtimeout(par->wait, !fm_par_owes(par, g, who),
				     ns_to_ktime(FM_PAR_WAIT_NS));
}

/*
 * The next batch in IOVA order, as p->batch, for the caller to charge and
 * map: its size in pages, or the caller's own error there. The head chunk
 * (the oldest not consumed) gives its filled batches first; its unfilled
 * rest the caller fills itself when it is nobody's, or its own. While a
 * helper fills it, the caller fills a chunk ahead, or, with none to claim,
 * takes the head chunk over.
 */
long fm_par_next(struct fm_pinner *p)
{
	struct fm_par *par = p->par;

	/* The batch before is consumed (pin.c mapped or released it). */
	if (par->cur) {
		fm_par_batch_free(par->cur);
		par->cur = NULL;
	}
	p->batch = par->own;
	for (;;) {
		struct fm_par_chunk *c, *ahead;
		struct fm_par_batch *pb;
		bool mine, split, owes;
		struct fm_par_seg *g;
		unsigned int who;

		if (WARN_ON_ONCE(par->consumed == par->nr_chunks))
			return -EFAULT;
		spin_lock(&par->lock);
		c = par->consumed == par->claimed ? fm_par_take_next(par, FM_PAR_CALLER) :
						    fm_par_chunk(par, par->consumed);
		/* The front, then the back: the first part not all taken. */
		g = c->front.left || !list_empty(&c->front.batches) ? &c->front : &c->back;
		pb = list_first_entry_or_null(&g->batches, struct fm_par_batch, node);
		if (pb) {
			list_del(&pb->node);
			spin_unlock(&par->lock);
			par->cur = pb;
			p->batch = &pb->batch;
			return pb->batch.size;
		}
		if (!g->left) {
			spin_unlock(&par->lock);
			fm_par_chunk_consumed(par, c);
			continue;
		}
		if (g->filler == FM_PAR_NOBODY)
			g->filler = FM_PAR_CALLER;
		mine = g->filler == FM_PAR_CALLER;
		spin_unlock(&par->lock);
		if (mine)
			return fm_par_fill_head(par, c, g);

		/* A helper fills it: fill a chunk ahead meanwhile, or split. */
		ahead = fm_par_claim(par, FM_PAR_CALLER);
		if (ahead && fm_par_fill_ahead(par, &par->fill, ahead, &ahead->front,
					       FM_PAR_CALLER))
			continue;
		spin_lock(&par->lock);
		owes = fm_par_helper_owes(g);
		who = g->filler;
		split = owes && fm_par_split(c, g);
		spin_unlock(&par->lock);
		if (split) {
			fm_pause(FM_PAUSE_SPLIT, FM_PAR_CALLER, c->back.vaddr);
			fm_par_fill_ahead(par, &par->fill, c, &c->back, FM_PAR_CALLER);
			continue;
		}
		if (!owes)
			continue;
		fm_par_wait_helper(par, g, who);

		/* Still owed: take it over; the batch in flight is done twice. */
		spin_lock(&par->lock);
		if (g->filler == who && fm_par_helper_owes(g)) {
			g->filler = FM_PAR_CALLER;
			if (g->inflight)
				par->takeovers++;
		}
		spin_unlock(&par->lock);
	}
}

/*
 * After the caller's last batch, done (@mapped: all of it mapped) or
 * failed: stop the helpers and reap them. A helper ends the batch it is
 * filling first; killed, it ends sooner, as GUP stops on the process's
 * fatal signal. Then unpin whatever was filled and never consumed.
 */
void fm_par_stop(struct fm_pinner *p, bool mapped)
{
	struct fm_par *par = p->par;
	unsigned long i;
	unsigned int h;

	spin_lock(&par->lock);
	par->abort = true;
	spin_unlock(&par->lock);
	for (h = 0; h < par->nr_helpers; h++) {
		fm_compat_user_worker_stop(par->helpers[h].worker);
		par->helpers[h].worker = NULL;
		if (par->helpers[h].task)
			put_task_struct(par->helpers[h].task);
	}

	if (par->cur)
		fm_par_batch_free(par->cur);
	/* The last chunk is consumed only when the map was completed. */
	if (mapped && par->consumed < par->claimed) {
		struct fm_par_chunk *c = fm_par_chunk(par, par->consumed);

		if (!c->front.left && list_empty(&c->front.batches) &&
		    !c->back.left && list_empty(&c->back.batches))
			fm_par_chunk_consumed(par, c);
	}
	/* Claimed chunks are all still now; the first may be partly consumed. */
	for (i = par->consumed; i < par->claimed; i++) {
		struct fm_par_chunk *c = fm_par_chunk(par, i);

		fm_par_seg_release(par, &c->front);
		fm_par_seg_release(par, &c->back);
	}

	/* What the batches did not take of the charge made ahead. */
	fm_lock_acct(p->dma, -(long)p->prepaid, false);
	p->prepaid = 0;

	p->iommu->stats.parallel_maps++;
	p->iommu->stats.parallel_helpers += par->nr_helpers;
	p->iommu->stats.parallel_takeovers += par->takeovers;
	p->iommu->stats.parallel_wasted_pages += par->wasted;
	trace_foliomap_pin_parallel(p->dma->iova + (par->start - p->dma->vaddr),
				    (u64)par->npage << PAGE_SHIFT, par->nr_helpers + 1,
				    par->nr_chunks, par->takeovers, par->wasted);
	p->batch = par->own;
	p->par = NULL;
	fm_par_free(par);
}
