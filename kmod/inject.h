/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The test build (make FOLIOMAP_TEST=1; tests/check builds it for the
 * debug kernel and for the race tests' guests) has two kinds of points a
 * shipped module has none of: without FOLIOMAP_TEST, fm_inject() is
 * constant false, fm_pause() empty, and both compile away.
 *
 * Fail points, for failures no allocation can cause: GUP failing or
 * returning short, iommu_map() failing, a helper thread failing in the
 * middle of a chunk. The kernel's fault-injection framework decides
 * (inject.c), so the caller's points take part in a task's
 * /proc/thread-self/fail-nth sweep like any allocation of that task does
 * (tests/t_failnth.c). On a kernel without fault injection they never fail.
 *
 * Pause points, for interleavings a test must force rather than hope for:
 * a test holds a chosen thread of a parallel map (helper N, or the caller,
 * 0) at a chosen step, at a chosen vaddr if it likes, until it lets it go,
 * or pauses every helper at random for a while (tests/t_parrace.c,
 * <debugfs>/foliomap/pause). @vaddr is where the step's range starts.
 */
#ifndef FOLIOMAP_INJECT_H
#define FOLIOMAP_INJECT_H

#include <linux/types.h>

enum fm_inject_point {
	FM_INJECT_GUP,		/* GUP fails: -ENOMEM, nothing pinned */
	FM_INJECT_GUP_SHORT,	/* GUP is asked for half: a short return */
	FM_INJECT_IOMMU_MAP,	/* iommu_map() fails: -ENOMEM */
	FM_INJECT_HELPER,	/* a helper's batch fails: -ENOMEM, handed back */
	FM_INJECT_NR,
};

/* Steps of a parallel map's fill (parallel.c) a test may hold a thread at. */
enum fm_pause_point {
	FM_PAUSE_FILL,		/* a range to fill is ours: before the fill */
	FM_PAUSE_FILLED,	/* the batch is filled: before it is landed */
	FM_PAUSE_LANDED,	/* the batch landed (or was dropped): before the next */
	FM_PAUSE_SPLIT,		/* the caller split a helper's range: before its fill */
	FM_PAUSE_NR,
};

#ifdef FOLIOMAP_TEST
#define fm_test_build	true
bool fm_inject(enum fm_inject_point point);
void fm_pause(enum fm_pause_point point, unsigned int who, unsigned long vaddr);
int fm_inject_init(void);
void fm_inject_exit(void);
#else
#define fm_test_build	false
static inline bool fm_inject(enum fm_inject_point point)
{
	return false;
}

static inline void fm_pause(enum fm_pause_point point, unsigned int who,
			    unsigned long vaddr)
{
}

static inline int fm_inject_init(void)
{
	return 0;
}

static inline void fm_inject_exit(void)
{
}
#endif

#endif /* FOLIOMAP_INJECT_H */
