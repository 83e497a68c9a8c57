/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * latprobe: how long the CPUs went without a preemption point, seen from
 * user space the way cyclictest sees it (latprobe.c).
 */
#ifndef LATPROBE_H
#define LATPROBE_H

#include <pthread.h>
#include <stdatomic.h>

#define LATPROBE_MAX_CPUS	64

struct latprobe_cpu {
	pthread_t thr;
	int cpu;
	long period_ns;
	atomic_llong max_ns;	/* latest wakeup since the last reset */
	atomic_int *stop;
	atomic_int ready;	/* 1 running, -errno could not start */
};

struct latprobe {
	struct latprobe_cpu cpu[LATPROBE_MAX_CPUS];
	int ncpus;
	atomic_int stop;
};

/* One SCHED_FIFO probe thread per online CPU; 0 or -errno (nothing left running). */
int latprobe_start(struct latprobe *lp, long period_us);
/* Forget what was seen so far. */
void latprobe_reset(struct latprobe *lp);
/* The latest wakeup on any CPU since the last reset, in nanoseconds. */
long long latprobe_max_ns(struct latprobe *lp);
void latprobe_stop(struct latprobe *lp);
/* The running kernel's preemption model ("voluntary", "full", ...) or "?". */
const char *latprobe_preempt_model(void);

#endif
