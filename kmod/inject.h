/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Fail points of the test build (make FOLIOMAP_TEST=1; tests/check builds
 * it for the debug kernel), for failures no allocation can cause: GUP
 * failing or returning short, iommu_map() failing, a helper thread failing
 * in the middle of a chunk. The kernel's fault-injection framework decides
 * (inject.c), so the caller's points take part in a task's
 * /proc/thread-self/fail-nth sweep like any allocation of that task does
 * (tests/t_failnth.c). A shipped module has none: without FOLIOMAP_TEST
 * fm_inject() is constant false and the points compile away.
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

#ifdef FOLIOMAP_TEST
bool fm_inject(enum fm_inject_point point);
int fm_inject_init(void);
void fm_inject_exit(void);
#else
static inline bool fm_inject(enum fm_inject_point point)
{
	return false;
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
