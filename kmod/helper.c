// SPDX-License-Identifier: GPL-2.0-only
/*
 * The helper threads of a parallel map (parallel.c): threads of the
 * calling process, made with vhost_task_create() through compat.h, created
 * by the caller in fm_par_start() (parstart.c).
 *
 * A helper is attached to its map (h->par) from its creation until the
 * map ends. While attached it claims chunks and fills them
 * (fm_par_helper_work()); inside a fill it is "busy", and the map's state
 * lives until it leaves. At the end the caller, once no helper is busy,
 * detaches them all (fm_par_detach_helpers()) and returns: it never waits
 * for a helper to exit. Each helper, the next time its loop runs it, sees
 * itself detached and asks to be reaped; fm_par_reap() on the
 * foliomap_reap workqueue then stops it (vhost_task_stop(): it exits at
 * once, having asked) and frees it. A killed helper asks from its
 * SIGKILL callback instead. So a helper that is group-stopped, traced or
 * frozen when the map ends holds up neither the MAP_DMA nor the stop or
 * freeze of its process; it is reaped when it runs again. The one window
 * left is a stop that catches a helper between asking and exiting: it
 * holds up the reaping worker, not the process, until the helper runs.
 * Each helper holds a reference on the module until it is reaped.
 *
 * h->lock guards h->par, h->dead and h->reaping, and is taken before
 * par->lock.
 */
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "parallel.h"

static struct workqueue_struct *fm_par_reap_wq;

/* A helper is done with the map: reap it (once). Under h->lock. */
static void fm_par_helper_reap_locked(struct fm_par_helper *h)
{
	lockdep_assert_held(&h->lock);
	if (!h->reaping) {
		h->reaping = true;
		queue_work(fm_par_reap_wq, &h->reap);
	}
}

/*
 * Reap a detached helper. It asked for it from its own loop (or was
 * killed), so it exits as soon as it is stopped here; one that a stop or
 * freeze caught in between holds up this worker, never the process.
 */
static void fm_par_reap(struct work_struct *work)
{
	struct fm_par_helper *h = container_of(work, struct fm_par_helper, reap);

	fm_compat_user_worker_stop(h->worker);
	if (h->task)
		put_task_struct(h->task);
	kfree(h);
	module_put(THIS_MODULE);
}

/*
 * A helper's first run: published for fm_par_wait_helper(), on the CPUs it
 * may use, and, under a real-time caller, SCHED_OTHER: a real-time task's
 * map may use idle CPUs, but bulk page faults at its priority on other
 * CPUs would hold off their real-time tasks, and the caller never waits
 * for a helper that does not run.
 */
static void fm_par_helper_place(struct fm_par_helper *h, struct fm_par *par)
{
	h->placed = true;
	/* The reference is taken before the pointer is seen. */
	smp_store_release(&h->task, get_task_struct(current));
	if (par->narrow)
		set_cpus_allowed_ptr(current, par->cpus);
	if (current->policy == SCHED_FIFO || current->policy == SCHED_RR)
		sched_set_normal(current, task_nice(current));
}

/*
 * The helper leaves its fill: the caller may be waiting for none to be
 * busy. The wake-up is made under par->lock, the helper's last touch of
 * the map: the caller frees it only after seeing !busy under that lock.
 */
static void fm_par_leave(struct fm_par *par)
{
	spin_lock(&par->lock);
	if (!--par->busy && par->stopping)
		wake_up(&par->wait);
	spin_unlock(&par->lock);
}

/*
 * A helper's work, called by its worker loop (compat.h) in
 * TASK_INTERRUPTIBLE: fill the next chunk, or return false to sleep until
 * the window moves (fm_par_chunk_consumed()) or the map ends. Once
 * detached it asks to be reaped.
 */
static bool fm_par_helper_work(void *data)
{
	struct fm_par_helper *h = data;
	struct fm_par_chunk *c = NULL;
	struct fm_par *par;
	u64 tok;

	spin_lock(&h->lock);
	par = h->par;
	if (!par) {
		fm_par_helper_reap_locked(h);
		spin_unlock(&h->lock);
		return false;
	}
	spin_lock(&par->lock);
	c = fm_par_claim_locked(par, h->id, &tok);
	if (c)
		par->busy++;
	spin_unlock(&par->lock);
	spin_unlock(&h->lock);
	if (!c)
		return false;

	/* Busy: @par lives until fm_par_leave(). */
	__set_current_state(TASK_RUNNING);
	if (!h->placed)
		fm_par_helper_place(h, par);
	fm_par_fill_ahead(par, &h->fill, c, &c->front, h->id, tok);
	fm_par_leave(par);
	return true;
}

/* The process got a fatal signal: the helper's loop ends, it runs no more. */
static void fm_par_helper_killed(void *data)
{
	struct fm_par_helper *h = data;

	spin_lock(&h->lock);
	h->dead = true;
	if (!h->par)
		fm_par_helper_reap_locked(h);
	spin_unlock(&h->lock);
}

/*
 * The next helper: a thread of the caller's process, created by the caller
 * and so in its cgroups, with its policy, nice level and mempolicy; not
 * started yet. Fails where the process may not have another thread.
 */
bool fm_par_helper_create(struct fm_par *par)
{
	struct fm_par_helper *h = kzalloc(sizeof(*h), GFP_KERNEL_ACCOUNT);

	if (!h)
		return false;
	spin_lock_init(&h->lock);
	INIT_WORK(&h->reap, fm_par_reap);
	h->par = par;
	h->id = par->nr_helpers + 1;
	fm_par_fill_init(par, &h->fill, true);
	h->worker = fm_compat_user_worker_create(fm_par_helper_work, fm_par_helper_killed, h,
						 "foliomap-pin");
	if (!h->worker) {
		kfree(h);
		return false;
	}
	/* Its code runs until it is reaped, after the map. */
	__module_get(THIS_MODULE);
	par->helpers[par->nr_helpers++] = h;
	return true;
}

/*
 * Wake the helpers to look for work. Under h->lock a helper that is not
 * dead has not passed its SIGKILL callback, so its task is still there.
 */
void fm_par_wake_helpers(struct fm_par *par)
{
	unsigned int i;

	for (i = 0; i < par->nr_helpers; i++) {
		struct fm_par_helper *h = par->helpers[i];

		spin_lock(&h->lock);
		if (!h->dead)
			fm_compat_user_worker_wake(h->worker);
		spin_unlock(&h->lock);
	}
}

/*
 * The map is over and no helper is busy: detach them. Each is woken to see
 * it, and asks to be reaped then (fm_par_helper_work()); a killed one
 * already asked, or is reaped here.
 */
void fm_par_detach_helpers(struct fm_par *par)
{
	unsigned int i;

	for (i = 0; i < par->nr_helpers; i++) {
		struct fm_par_helper *h = par->helpers[i];

		spin_lock(&h->lock);
		h->par = NULL;
		if (h->dead)
			fm_par_helper_reap_locked(h);
		else
			fm_compat_user_worker_wake(h->worker);
		spin_unlock(&h->lock);
		par->helpers[i] = NULL;
	}
}

/* The workqueue that reaps helpers after their map (main.c). */
int fm_par_init(void)
{
	if (!fm_compat_have_user_worker())
		return 0;
	fm_par_reap_wq = alloc_workqueue("foliomap_reap", WQ_UNBOUND, 0);
	return fm_par_reap_wq ? 0 : -ENOMEM;
}

/* Every helper was reaped (each held a module reference): nothing is queued. */
void fm_par_exit(void)
{
	if (fm_par_reap_wq)
		destroy_workqueue(fm_par_reap_wq);
}
