/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Parallel pinning's own state, shared by its three files and nothing
 * else (the pipeline's interface is in pin.h):
 *
 *   parallel.c  the protocol: segments and their states, chunks, fills,
 *               the caller's batches in IOVA order, the end of a map
 *   helper.c    the helper threads: their work loop, placement, detach
 *               and reaping
 *   parstart.c  whether a map gets helpers, and starting them
 */
#ifndef _FOLIOMAP_PARALLEL_H
#define _FOLIOMAP_PARALLEL_H

#include <linux/cpumask.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "pin.h"

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
/* How long the caller sleeps before it looks again whether a helper runs */
#define FM_PAR_WAIT_NS		(500 * NSEC_PER_USEC)

/* Who fills a segment: the caller, helper 1.., or nobody (OPEN) */
#define FM_PAR_CALLER		0
#define FM_PAR_NOBODY		UINT_MAX

enum fm_seg_state {
	FM_SEG_EMPTY,		/* no unfilled pages */
	FM_SEG_OPEN,		/* pages left, nobody's: the caller takes them */
	FM_SEG_OWNED,		/* pages left, @owner's, nothing in flight */
	FM_SEG_FILLING,		/* @owner fills [vaddr, vaddr + inflight) */
};

struct fm_par_batch {
	struct list_head	node;
	struct fm_batch		batch;
};

struct fm_par_seg {
	enum fm_seg_state	state;
	unsigned int		owner;
	u64			token;		/* of the current owner */
	unsigned long		vaddr;		/* not filled yet from here */
	unsigned long		left;		/* ... this many pages */
	unsigned long		inflight;	/* FILLING: pages asked for */
	struct list_head	batches;	/* landed, in vaddr order */
};

struct fm_par_chunk {
	unsigned long		index;		/* which chunk of the map */
	struct fm_par_seg	front;
	struct fm_par_seg	back;		/* split off the front (caller's) */
	bool			split;
	bool			helped;		/* a helper landed a batch of it */
	u64			ns;		/* time its fills took */
};

struct fm_par;

/*
 * A helper thread. Attached (@par set) from its creation until the end of
 * the map; then reaped by fm_par_reap_wq once it ran and saw itself
 * detached, or was killed: see the top of the file.
 */
struct fm_par_helper {
	spinlock_t		lock;		/* @par, @dead, @reaping */
	struct fm_par		*par;
	struct fm_user_worker	*worker;
	struct task_struct	*task;		/* once it ran (a reference) */
	struct fm_pinner	fill;		/* its fills' pinner, while busy */
	struct work_struct	reap;
	unsigned int		id;		/* 1.. (0 is the caller) */
	bool			placed;		/* its first run's setup done */
	bool			dead;		/* killed: runs no more */
	bool			reaping;
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
	unsigned long		prepaid;	/* charged ahead, not used yet */
	spinlock_t		lock;
	wait_queue_head_t	wait;		/* the caller: a batch, or !busy */
	u64			next_token;
	unsigned long		claimed;	/* chunks handed out */
	unsigned long		consumed;	/* chunks taken by p */
	unsigned long		stop_at;	/* a fill failed here: claim nothing beyond */
	unsigned int		busy;		/* helpers inside a fill */
	bool			stopping;	/* fm_par_stop(): nothing new */
	int			error;		/* a broken landing: fail the map */
	unsigned long		takeovers;	/* helper batches the caller filled again */
	unsigned long		wasted;		/* pages helpers pinned for nothing */
	bool			narrow;		/* helpers run on cpus, not the caller's mask */
	cpumask_var_t		cpus;		/* where helpers may run */
	unsigned int		nr_helpers;
	struct fm_par_helper	*helpers[FM_PAR_MAX_HELPERS];
};

/* parallel.c */
struct fm_par_chunk *fm_par_claim_locked(struct fm_par *par, unsigned int who, u64 *tok);
void fm_par_fill_ahead(struct fm_par *par, struct fm_pinner *f, struct fm_par_chunk *c,
		       struct fm_par_seg *g, unsigned int who, u64 tok);
void fm_par_fill_init(struct fm_par *par, struct fm_pinner *f, bool helper);
void fm_par_free(struct fm_par *par);

/* helper.c */
bool fm_par_helper_create(struct fm_par *par);
void fm_par_wake_helpers(struct fm_par *par);
void fm_par_detach_helpers(struct fm_par *par);

#endif /* _FOLIOMAP_PARALLEL_H */
