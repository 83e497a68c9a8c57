// SPDX-License-Identifier: GPL-2.0-only
/*
 * latprobe: the longest stretch a CPU ran kernel code without a preemption
 * point, measured as cyclictest measures it. One SCHED_FIFO thread per CPU,
 * bound to it, sleeps until an absolute time one period ahead and notes how
 * late it woke. The timer fires on time; the probe then runs as soon as the
 * task on its CPU reaches a preemption point (cond_resched(), a sleep, the
 * return to user space; under preempt=full or RT, any preempt_enable()). So
 * a wakeup is late by the rest of the stretch the timer fired in, plus the
 * cost of a wakeup itself (measure that floor with nothing else running).
 * The maximum over a stretch of work, sampled every period, approaches the
 * longest stretch.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "latprobe.h"

static long long ts_ns(const struct timespec *t)
{
	return t->tv_sec * 1000000000LL + t->tv_nsec;
}

static void *probe_fn(void *arg)
{
	struct latprobe_cpu *c = arg;
	struct sched_param sp = { .sched_priority = sched_get_priority_max(SCHED_FIFO) };
	struct timespec next, now;
	cpu_set_t set;
	int err;

	CPU_ZERO(&set);
	CPU_SET(c->cpu, &set);
	err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	if (!err)
		err = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	atomic_store(&c->ready, err ? -err : 1);
	if (err)
		return NULL;

	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!atomic_load(c->stop)) {
		long long late;

		next.tv_nsec += c->period_ns;
		while (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
		late = ts_ns(&now) - ts_ns(&next);
		if (late > atomic_load(&c->max_ns))
			atomic_store(&c->max_ns, late);
		/* After a late wakeup, the next period counts from now. */
		if (late > c->period_ns)
			next = now;
	}
	return NULL;
}

int latprobe_start(struct latprobe *lp, long period_us)
{
	cpu_set_t online;
	int cpu, err = 0;

	memset(lp, 0, sizeof(*lp));
	if (sched_getaffinity(0, sizeof(online), &online))
		return -errno;
	for (cpu = 0; cpu < CPU_SETSIZE && lp->ncpus < LATPROBE_MAX_CPUS; cpu++) {
		struct latprobe_cpu *c = &lp->cpu[lp->ncpus];

		if (!CPU_ISSET(cpu, &online))
			continue;
		c->cpu = cpu;
		c->period_ns = period_us * 1000;
		c->stop = &lp->stop;
		err = -pthread_create(&c->thr, NULL, probe_fn, c);
		if (err)
			break;
		lp->ncpus++;
		while (!atomic_load(&c->ready))
			sched_yield();
		if (atomic_load(&c->ready) < 0) {
			err = atomic_load(&c->ready);
			break;
		}
	}
	if (err)
		latprobe_stop(lp);
	return err;
}

void latprobe_reset(struct latprobe *lp)
{
	int i;

	for (i = 0; i < lp->ncpus; i++)
		atomic_store(&lp->cpu[i].max_ns, 0);
}

long long latprobe_max_ns(struct latprobe *lp)
{
	long long max = 0;
	int i;

	for (i = 0; i < lp->ncpus; i++)
		if (atomic_load(&lp->cpu[i].max_ns) > max)
			max = atomic_load(&lp->cpu[i].max_ns);
	return max;
}

void latprobe_stop(struct latprobe *lp)
{
	int i;

	atomic_store(&lp->stop, 1);
	for (i = 0; i < lp->ncpus; i++)
		pthread_join(lp->cpu[i].thr, NULL);
	lp->ncpus = 0;
}

const char *latprobe_preempt_model(void)
{
	static const char *const names[] = { "none", "voluntary", "full", "lazy" };
	char line[128] = "";
	struct utsname u;
	FILE *f;
	size_t i;

	/* PREEMPT_DYNAMIC kernels: "none (voluntary) full lazy" */
	f = fopen("/sys/kernel/debug/sched/preempt", "r");
	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = 0;
		fclose(f);
		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			char want[16];

			snprintf(want, sizeof(want), "(%s)", names[i]);
			if (strstr(line, want))
				return names[i];
		}
	}
	if (!uname(&u)) {
		if (strstr(u.version, "PREEMPT_RT"))
			return "rt";
		if (strstr(u.version, "PREEMPT "))
			return "full";
	}
	return "?";
}
