// SPDX-License-Identifier: GPL-2.0-only
/*
 * Parallel pinning of a large MAP_DMA. Faulting in and zeroing memory that
 * was never touched is most of what a VMM's MAP_DMA of guest RAM costs
 * without prealloc, and GUP does it one page after another. Here helper
 * threads (helper.c; started by parstart.c) fill the pipeline's batches
 * (pin.h) ahead of the caller, which alone charges and maps them, in IOVA
 * order, as it would its own: the charge, the run record and the error a
 * map returns are those of a serial map.
 *
 * The helpers are threads of the calling process (vhost_task_create(), the
 * user workers of vhost and of KVM's NX recovery; compat.h), created by
 * the calling thread. So they are in all of its cgroups (cpu, cpuset, io,
 * memory, pids, hugetlb) and count in its CPU time and PSI; they inherit
 * its affinity, nice level and task mempolicy (a real-time caller's
 * helpers run SCHED_OTHER, helper.c), share its mm, files nothing; they
 * get the process's fatal signals (GUP stops on them) and are part of an
 * OOM victim. A helper that cannot be created (pids.max, RLIMIT_NPROC,
 * memory) is not started: the map is then serial.
 *
 * The work: the rest of the dma is cut into chunks at vaddr multiples of a
 * power of two (2 MiB to 32 MiB), claimed in IOVA order by helpers and by
 * the caller, at most a window of them ahead of the oldest chunk not yet
 * consumed, each in slot (index % window) of a ring.
 *
 * Segments. A chunk has a front and, once the caller split it, a back.
 * Each segment's unfilled pages [vaddr, vaddr + left) are in one state,
 * changed only under par->lock, each change by one function below
 * (fm_seg_*()), which asserts the lock and the state it expects:
 *
 *	EMPTY --init(who)--> OWNED(who) --begin--> FILLING(who) --land--> OWNED(who)
 *	                                                         \-------> EMPTY
 *	OWNED/FILLING(helper) --handback--> OPEN --give(caller)--> OWNED(caller)
 *	OWNED/FILLING(helper) --take_over--> OWNED(caller)
 *	FILLING(helper) --split--> FILLING(helper), its batch in flight only
 *	                           + the back: OWNED(caller), the rest
 *
 *   - OWNED: @owner alone may fill it; FILLING: @owner fills
 *     [vaddr, vaddr + inflight) unlocked, into a batch of its own. A fill
 *     asks for no more than that (every kind of fill, batch.c, is bounded
 *     by the pages it is asked for), and landing more is a bug: a
 *     WARN_ON_ONCE and a failed map, never a wrap.
 *   - Ownership is a token: every change of owner gives the segment a new
 *     one, from a counter that never repeats, and every step a filler takes
 *     after an unlocked window (begin, land) first checks that the segment
 *     still holds the token it was given. A thread that lost its segment
 *     (taken over, split, handed back, or its ring slot since reused for
 *     another chunk) writes nothing to it: its batch is dropped.
 *   - Only the caller moves a segment from a helper to itself: it splits
 *     off what lies behind a helper's batch in flight, or takes a
 *     helper's segment over when that helper is not on a CPU (preempted,
 *     throttled, held) or not filling, so that it never waits for a helper
 *     that does not run; a helper that is only slower costs nothing.
 *   - A helper that fails hands its segment back (OPEN) and, but for
 *     hugetlbfs or device memory met meanwhile (-EXDEV, the caller's to
 *     pin), no chunk beyond the failure is claimed any more: the caller
 *     fills the failing part itself, so the error a map returns is the
 *     caller's own, met where a serial map meets it.
 *   - Landed batches wait on their segment's list; the caller takes them
 *     in order (front, then back) and frees each after charging and
 *     mapping it. A chunk is consumed when both segments are EMPTY with
 *     empty lists, and only then may its slot take another chunk.
 *
 * The end (fm_par_stop()). The caller marks the map stopping (nothing is
 * claimed or begun any more), waits for the helpers inside a fill (@busy;
 * each is within one batch of done, as no job control stops a thread in
 * the kernel), unpins every batch left in every slot, and detaches the
 * helpers. It never waits for a helper's exit (helper.c), so a helper
 * that is stopped, traced or frozen when the map ends holds up neither the
 * MAP_DMA nor the stop or freeze of its process.
 *
 * Locks: par->lock (a spinlock) guards every segment, chunk and counter of
 * struct fm_par; a helper's own lock (h->lock) guards its attachment to
 * the map, and is taken before par->lock. Fills run with neither held.
 *
 * Memory beyond the first error may have been filled by a helper before
 * the error was met: at most a window of chunks, each GUP'd as the map
 * asked (faulted in and charged to the memcg, copy-on-write broken for a
 * writable map, migrated out of ZONE_MOVABLE and CMA for the long-term
 * pin), then unpinned, never charged to locked memory. It stays in the
 * process as if the process had touched it.
 */
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/wait.h>

#include "parallel.h"
#include "trace.h"

/* ------------------------------------------------------------------ */
/* Segments: every change of state (see the top of the file) */

static void fm_seg_own(struct fm_par *par, struct fm_par_seg *g, unsigned int who)
{
	g->state = FM_SEG_OWNED;
	g->owner = who;
	g->token = ++par->next_token;
	g->inflight = 0;
}

/* EMPTY -> OWNED(@who): a chunk's front when claimed, or its back when split. */
static void fm_seg_init(struct fm_par *par, struct fm_par_seg *g, unsigned long vaddr,
			unsigned long npage, unsigned int who)
{
	lockdep_assert_held(&par->lock);
	WARN_ON_ONCE(g->state != FM_SEG_EMPTY || !list_empty(&g->batches));
	g->vaddr = vaddr;
	g->left = npage;
	fm_seg_own(par, g, who);
}

/* OPEN -> OWNED(caller) */
static void fm_seg_give(struct fm_par *par, struct fm_par_seg *g)
{
	lockdep_assert_held(&par->lock);
	WARN_ON_ONCE(g->state != FM_SEG_OPEN);
	fm_seg_own(par, g, FM_PAR_CALLER);
}

/* OWNED/FILLING(helper) -> OPEN: its filler gives up; the caller will fill it. */
static void fm_seg_handback(struct fm_par *par, struct fm_par_seg *g)
{
	lockdep_assert_held(&par->lock);
	WARN_ON_ONCE(g->state != FM_SEG_OWNED && g->state != FM_SEG_FILLING);
	g->state = FM_SEG_OPEN;
	g->owner = FM_PAR_NOBODY;
	g->token = ++par->next_token;
	g->inflight = 0;
}

/* OWNED/FILLING(helper) -> OWNED(caller); a batch in flight is dropped when it lands. */
static void fm_seg_take_over(struct fm_par *par, struct fm_par_seg *g)
{
	lockdep_assert_held(&par->lock);
	WARN_ON_ONCE(g->state != FM_SEG_OWNED && g->state != FM_SEG_FILLING);
	if (g->state == FM_SEG_FILLING)
		par->takeovers++;
	fm_seg_own(par, g, FM_PAR_CALLER);
}

/*
 * OWNED(@who, @tok) -> FILLING: what @who may fill now, from *@vaddr, at
 * most *@npage pages (a batch; the caller's own segment whole). False,
 * changing nothing, if @who lost the segment; false after handing it back
 * if the map stops, failed before it, or the process is dying.
 */
static bool fm_seg_begin(struct fm_par *par, struct fm_par_seg *g, unsigned int who, u64 tok,
			 unsigned long *vaddr, unsigned long *npage)
{
	lockdep_assert_held(&par->lock);
	if (g->state != FM_SEG_OWNED || g->token != tok)
		return false;
	if (who != FM_PAR_CALLER && (par->stopping || par->error || g->vaddr >= par->stop_at ||
				     fatal_signal_pending(current))) {
		fm_seg_handback(par, g);
		return false;
	}
	g->state = FM_SEG_FILLING;
	g->inflight = g->left;
	if (who != FM_PAR_CALLER)
		g->inflight = min_t(unsigned long, g->left, FM_BATCH_PAGES);
	*vaddr = g->vaddr;
	*npage = g->inflight;
	return true;
}

enum fm_land { FM_LAND_OK, FM_LAND_STALE, FM_LAND_FAILED };

/*
 * FILLING(@tok) -> OWNED or EMPTY: @n pages filled (or -errno) from the
 * start of the batch in flight, into @pb (NULL: the caller's own batch,
 * which it consumes itself). FM_LAND_OK: @pb is the segment's now. Else
 * the filler releases @pb: STALE, the segment is not @tok's any more;
 * FAILED, the fill failed (handed back) or returned more than was asked,
 * which fails the map.
 */
static enum fm_land fm_seg_land(struct fm_par *par, struct fm_par_chunk *c,
				struct fm_par_seg *g, u64 tok, struct fm_par_batch *pb, long n)
{
	lockdep_assert_held(&par->lock);
	if (g->state != FM_SEG_FILLING || g->token != tok)
		return FM_LAND_STALE;
	if (n < 0 || WARN_ON_ONCE(!n || n > g->inflight)) {
		if (n >= 0)
			par->error = -EFAULT;
		else if (n != -EXDEV)
			par->stop_at = min(par->stop_at, g->vaddr);
		fm_seg_handback(par, g);
		return FM_LAND_FAILED;
	}
	if (pb)
		list_add_tail(&pb->node, &g->batches);
	g->vaddr += n << PAGE_SHIFT;
	g->left -= n;
	g->inflight = 0;
	g->state = g->left ? FM_SEG_OWNED : FM_SEG_EMPTY;
	c->helped |= g->owner != FM_PAR_CALLER;
	return FM_LAND_OK;
}

/*
 * FILLING(helper) with more left than its batch in flight: the front keeps
 * that batch, the back (the caller's) gets the rest. False if no split.
 */
static bool fm_seg_split(struct fm_par *par, struct fm_par_chunk *c)
{
	struct fm_par_seg *g = &c->front;

	lockdep_assert_held(&par->lock);
	if (c->split || g->state != FM_SEG_FILLING || g->owner == FM_PAR_CALLER ||
	    g->left <= g->inflight)
		return false;
	c->split = true;
	fm_seg_init(par, &c->back, g->vaddr + (g->inflight << PAGE_SHIFT),
		    g->left - g->inflight, FM_PAR_CALLER);
	g->left = g->inflight;
	return true;
}

static bool fm_seg_drained(struct fm_par_seg *g)
{
	return g->state == FM_SEG_EMPTY && list_empty(&g->batches);
}

/* ------------------------------------------------------------------ */
/* Chunks */

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

/*
 * Under par->lock: hand out the next chunk to @who, its front OWNED by
 * @who (*@tok: the token). Its slot must be drained: anything else is a
 * bug, which fails the map rather than overwrite a batch.
 */
static struct fm_par_chunk *fm_par_take_next(struct fm_par *par, unsigned int who, u64 *tok)
{
	unsigned long i = par->claimed, npage, vaddr;
	struct fm_par_chunk *c = fm_par_chunk(par, i);

	lockdep_assert_held(&par->lock);
	if (WARN_ON_ONCE(!fm_seg_drained(&c->front) || !fm_seg_drained(&c->back))) {
		par->error = -EFAULT;
		return NULL;
	}
	par->claimed++;
	vaddr = fm_par_chunk_range(par, i, &npage);
	c->index = i;
	c->split = false;
	c->helped = false;
	c->ns = 0;
	fm_seg_init(par, &c->front, vaddr, npage, who);
	*tok = c->front.token;
	return c;
}

/*
 * Under par->lock: the next chunk to fill ahead, for @who, if the window
 * has room, the map goes on, and it lies before any failure.
 */
struct fm_par_chunk *fm_par_claim_locked(struct fm_par *par, unsigned int who, u64 *tok)
{
	unsigned long npage;

	lockdep_assert_held(&par->lock);
	if (par->stopping || par->error || par->claimed >= par->nr_chunks ||
	    par->claimed >= par->consumed + par->window ||
	    fm_par_chunk_range(par, par->claimed, &npage) >= par->stop_at)
		return NULL;
	return fm_par_take_next(par, who, tok);
}

/* ------------------------------------------------------------------ */
/* Batches */

static void fm_par_batch_free(struct fm_par_batch *pb)
{
	fm_batch_fini(&pb->batch);
	kfree(pb);
}

/*
 * Unpin a batch nobody charged or mapped: GUP's pins, one per page or,
 * with folio pins, one per folio segment of a run (batch.c); never
 * dirtied, since no device saw them. PFNMAP lookups hold no pin.
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

/* A filled batch nobody wants (@n pages, or -errno): unpin or free it. */
static void fm_par_batch_drop(struct fm_par *par, struct fm_par_batch *pb, long n)
{
	if (!pb)
		return;
	if (n > 0) {
		spin_lock(&par->lock);
		par->wasted += n;
		spin_unlock(&par->lock);
		fm_par_batch_release(par, pb);
	} else {
		fm_par_batch_free(pb);
	}
}

/* Unpin what was landed in @g and never consumed. */
static void fm_par_seg_release(struct fm_par *par, struct fm_par_seg *g)
{
	struct fm_par_batch *pb, *next;

	list_for_each_entry_safe(pb, next, &g->batches, node) {
		list_del(&pb->node);
		par->wasted += pb->batch.size;
		fm_par_batch_release(par, pb);
	}
	g->state = FM_SEG_EMPTY;
}

/* ------------------------------------------------------------------ */
/* Filling */

/* A helper's batch landed, or it gave its segment up: the caller may wait for it. */
static void fm_par_wake_caller(struct fm_par *par, unsigned int who)
{
	if (who != FM_PAR_CALLER && wq_has_sleeper(&par->wait))
		wake_up(&par->wait);
}

/*
 * Fill segment @g of chunk @c ahead of the caller, as @who holding token
 * @tok, through pinner @f, batch by batch, for as long as @who owns it and
 * it has pages left.
 */
void fm_par_fill_ahead(struct fm_par *par, struct fm_pinner *f, struct fm_par_chunk *c,
		       struct fm_par_seg *g, unsigned int who, u64 tok)
{
	for (;;) {
		unsigned long vaddr, npage;
		struct fm_par_batch *pb;
		enum fm_land landed;
		u64 start;
		long n;

		spin_lock(&par->lock);
		if (!fm_seg_begin(par, g, who, tok, &vaddr, &npage)) {
			spin_unlock(&par->lock);
			fm_par_wake_caller(par, who);
			return;
		}
		spin_unlock(&par->lock);
		fm_pause(FM_PAUSE_FILL, who, vaddr);

		start = ktime_get_ns();
		n = -ENOMEM;
		pb = kmalloc(sizeof(*pb), GFP_KERNEL_ACCOUNT);
		if (pb) {
			fm_batch_init(&pb->batch, npage);
			f->batch = &pb->batch;
			if (who == FM_PAR_CALLER || !fm_inject(FM_INJECT_HELPER))
				n = fm_pinner_fill(f, vaddr, npage);
			f->batch = NULL;
		}
		fm_pause(FM_PAUSE_FILLED, who, vaddr);

		spin_lock(&par->lock);
		landed = fm_seg_land(par, c, g, tok, pb, n);
		if (landed == FM_LAND_OK)
			c->ns += ktime_get_ns() - start;
		spin_unlock(&par->lock);
		if (landed != FM_LAND_OK)
			fm_par_batch_drop(par, pb, n);
		fm_par_wake_caller(par, who);
		fm_pause(FM_PAUSE_LANDED, who, vaddr);
		if (landed != FM_LAND_OK)
			return;
		cond_resched();
	}
}

/*
 * The caller fills @g, its own segment of the head chunk @c (token @tok),
 * into its own batch, which it consumes next: the pages, or -errno.
 */
static long fm_par_fill_head(struct fm_par *par, struct fm_par_chunk *c, struct fm_par_seg *g,
			     u64 tok)
{
	struct fm_pinner *f = &par->fill;
	unsigned long vaddr, npage;
	enum fm_land landed;
	u64 start = ktime_get_ns();
	long n;

	spin_lock(&par->lock);
	if (WARN_ON_ONCE(!fm_seg_begin(par, g, FM_PAR_CALLER, tok, &vaddr, &npage))) {
		spin_unlock(&par->lock);
		return -EFAULT;
	}
	spin_unlock(&par->lock);
	f->batch = par->own;
	n = fm_pinner_fill(f, vaddr, npage);
	f->batch = NULL;
	spin_lock(&par->lock);
	landed = fm_seg_land(par, c, g, tok, NULL, n);
	if (landed == FM_LAND_OK)
		c->ns += ktime_get_ns() - start;
	spin_unlock(&par->lock);
	/* Nobody takes the caller's segment: only its own error or a broken fill. */
	if (landed == FM_LAND_OK)
		return n;
	if (n > 0) {
		/* Filled more than asked: unpin it, fail the map. */
		fm_batch_release(par->p, 0, 0, false);
		return -EFAULT;
	}
	return n;
}

void fm_par_fill_init(struct fm_par *par, struct fm_pinner *f, bool helper)
{
	struct fm_pinner *p = par->p;

	fm_pinner_init(f, p->iommu, p->dma, NULL, NULL);
	f->single = p->single;
	f->mode_known = true;
	f->ordinary_only = helper;
}

/* ------------------------------------------------------------------ */
/* The caller: batches in IOVA order */

/* The charge made ahead covers @charge pages of a batch: take them (charge.c). */
bool fm_par_prepaid(struct fm_pinner *p, long charge)
{
	struct fm_par *par = p->par;

	WARN_ON_ONCE(par->prepaid && charge > par->prepaid);
	if (charge > par->prepaid)
		return false;
	par->prepaid -= charge;
	return true;
}

/* The head chunk is drained: counted, and the window moves on. */
static void fm_par_chunk_consumed(struct fm_par *par, struct fm_par_chunk *c)
{
	struct fm_pinner *p = par->p;
	unsigned long npage, vaddr = fm_par_chunk_range(par, c->index, &npage);

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

/* Does a helper still owe @g's batch in flight (@tok)? */
static bool fm_par_owes(struct fm_par *par, struct fm_par_seg *g, u64 tok)
{
	bool owes;

	spin_lock(&par->lock);
	owes = g->state == FM_SEG_FILLING && g->token == tok && list_empty(&g->batches);
	spin_unlock(&par->lock);
	return owes;
}

/*
 * The caller needs @g next and helper @who owes it its batch in flight
 * (@tok), with nothing left to split off: wait for that batch while the
 * helper runs on a CPU (as a mutex's spinner waits while its owner runs),
 * so that it is not filled twice; stop waiting within FM_PAR_WAIT_NS of
 * the helper leaving its CPU, or at once on a fatal signal.
 */
static void fm_par_wait_helper(struct fm_par *par, struct fm_par_seg *g, unsigned int who,
			       u64 tok)
{
	/* Pairs with fm_par_helper_place() (helper.c): the reference comes first. */
	struct task_struct *t = smp_load_acquire(&par->helpers[who - 1]->task);

	while (t && owner_on_cpu(t) && !fatal_signal_pending(current) &&
	       fm_par_owes(par, g, tok))
		wait_event_hrtimeout(par->wait, !fm_par_owes(par, g, tok),
				     ns_to_ktime(FM_PAR_WAIT_NS));
}

/*
 * The next batch in IOVA order, as p->batch, for the caller to charge and
 * map: its size in pages, or the caller's own error there. The head chunk
 * (the oldest not consumed) gives its landed batches first; its unfilled
 * rest the caller fills itself when it is nobody's, or its own. While a
 * helper fills it, the caller fills a chunk ahead, or splits the head
 * behind the helper's batch in flight, or takes it over.
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
		struct fm_par_seg *g;
		unsigned int who;
		u64 tok, atok;

		spin_lock(&par->lock);
		if (par->error || WARN_ON_ONCE(par->consumed == par->nr_chunks)) {
			spin_unlock(&par->lock);
			return par->error ?: -EFAULT;
		}
		c = par->consumed == par->claimed ? fm_par_take_next(par, FM_PAR_CALLER, &tok) :
						    fm_par_chunk(par, par->consumed);
		if (!c) {
			spin_unlock(&par->lock);
			continue;	/* par->error */
		}
		/* The front, then the back: the first not drained. */
		g = fm_seg_drained(&c->front) ? &c->back : &c->front;
		pb = list_first_entry_or_null(&g->batches, struct fm_par_batch, node);
		if (pb) {
			list_del(&pb->node);
			spin_unlock(&par->lock);
			par->cur = pb;
			p->batch = &pb->batch;
			return pb->batch.size;
		}
		if (g->state == FM_SEG_EMPTY) {
			spin_unlock(&par->lock);
			fm_par_chunk_consumed(par, c);
			continue;
		}
		if (g->state == FM_SEG_OPEN)
			fm_seg_give(par, g);
		if (g->owner == FM_PAR_CALLER) {
			tok = g->token;
			spin_unlock(&par->lock);
			return fm_par_fill_head(par, c, g, tok);
		}
		who = g->owner;
		tok = g->token;

		/* A helper's: fill a chunk ahead meanwhile, or split, or take it. */
		ahead = fm_par_claim_locked(par, FM_PAR_CALLER, &atok);
		if (ahead) {
			spin_unlock(&par->lock);
			fm_par_fill_ahead(par, &par->fill, ahead, &ahead->front, FM_PAR_CALLER,
					  atok);
			continue;
		}
		if (fm_seg_split(par, c)) {
			atok = c->back.token;
			spin_unlock(&par->lock);
			fm_pause(FM_PAUSE_SPLIT, FM_PAR_CALLER, c->back.vaddr);
			fm_par_fill_ahead(par, &par->fill, c, &c->back, FM_PAR_CALLER, atok);
			continue;
		}
		/* Between two batches of the helper's: nothing in flight to wait for. */
		if (g->state == FM_SEG_OWNED) {
			fm_seg_take_over(par, g);
			spin_unlock(&par->lock);
			continue;
		}
		spin_unlock(&par->lock);
		fm_par_wait_helper(par, g, who, tok);

		/* Still owed: take it over; the batch in flight is done twice. */
		spin_lock(&par->lock);
		if (g->state == FM_SEG_FILLING && g->token == tok && list_empty(&g->batches))
			fm_seg_take_over(par, g);
		spin_unlock(&par->lock);
	}
}

/* No helper inside a fill: only the caller touches the map's state. */
static bool fm_par_quiet(struct fm_par *par)
{
	bool quiet;

	spin_lock(&par->lock);
	quiet = !par->busy;
	spin_unlock(&par->lock);
	return quiet;
}

/*
 * After the caller's last batch, done (@mapped: all of it mapped) or
 * failed: let helpers begin nothing more, wait for those inside a fill
 * (running, within a batch of done), unpin whatever was landed and never
 * consumed, give back what is left of the charge made ahead, and detach
 * the helpers, which are reaped without the caller (see the top).
 */
void fm_par_stop(struct fm_pinner *p, bool mapped)
{
	struct fm_par *par = p->par;
	unsigned int i;

	spin_lock(&par->lock);
	par->stopping = true;
	spin_unlock(&par->lock);
	wait_event_idle(par->wait, fm_par_quiet(par));

	if (par->cur)
		fm_par_batch_free(par->cur);
	/* The last chunk is consumed only when the map was completed. */
	if (mapped && par->consumed < par->claimed) {
		struct fm_par_chunk *c = fm_par_chunk(par, par->consumed);

		if (fm_seg_drained(&c->front) && fm_seg_drained(&c->back))
			fm_par_chunk_consumed(par, c);
	}
	for (i = 0; i < par->window; i++) {
		fm_par_seg_release(par, &par->ring[i].front);
		fm_par_seg_release(par, &par->ring[i].back);
	}

	/* What the batches did not take of the charge made ahead. */
	fm_lock_acct(p->dma, -(long)par->prepaid, false);
	par->prepaid = 0;

	p->iommu->stats.parallel_maps++;
	p->iommu->stats.parallel_helpers += par->nr_helpers;
	p->iommu->stats.parallel_takeovers += par->takeovers;
	p->iommu->stats.parallel_wasted_pages += par->wasted;
	trace_foliomap_pin_parallel(p->dma->iova + (par->start - p->dma->vaddr),
				    (u64)par->npage << PAGE_SHIFT, par->nr_helpers + 1,
				    par->nr_chunks, par->takeovers, par->wasted);
	fm_par_detach_helpers(par);
	p->batch = par->own;
	p->par = NULL;
	fm_par_free(par);
}

void fm_par_free(struct fm_par *par)
{
	free_cpumask_var(par->cpus);
	kfree(par->ring);
	kfree(par);
}
