// SPDX-License-Identifier: GPL-2.0-only
/*
 * The test build's fail points (inject.h), on the kernel's fault-injection
 * framework. Two attributes, each a directory at the top of debugfs with
 * the usual knobs (Documentation/fault-injection/fault-injection.rst):
 *
 *   fail_foliomap         GUP, short GUP and iommu_map() in the calling
 *                         task. Its probability stays 0: only the task's
 *                         own /proc/thread-self/fail-nth reaches it, so a
 *                         sweep fails exactly the n-th point or allocation
 *                         of one ioctl.
 *   fail_foliomap_helper  a helper thread's batch. Helpers never see the
 *                         caller's fail-nth; a test sets probability 100,
 *                         times 1 and space k to fail the k-th helper batch.
 *
 * <debugfs>/foliomap/inject counts, per point, how often it was reached and
 * how often it failed, so that a sweep can say what it covered.
 */
#include <linux/debugfs.h>
#include <linux/err.h>
#include <linux/fault-inject.h>
#include <linux/seq_file.h>

#include "inject.h"

#if !IS_ENABLED(CONFIG_FAULT_INJECTION_DEBUG_FS)
#error "FOLIOMAP_TEST needs a kernel with CONFIG_FAULT_INJECTION_DEBUG_FS (make check-debug)"
#endif

static DECLARE_FAULT_ATTR(fm_fail);
static DECLARE_FAULT_ATTR(fm_fail_helper);
static struct dentry *fm_fail_dir, *fm_fail_helper_dir, *fm_inject_counts;

static const char *const fm_inject_names[FM_INJECT_NR] = {
	[FM_INJECT_GUP]		= "gup",
	[FM_INJECT_GUP_SHORT]	= "gup_short",
	[FM_INJECT_IOMMU_MAP]	= "iommu_map",
	[FM_INJECT_HELPER]	= "helper",
};

static atomic64_t fm_inject_reached[FM_INJECT_NR], fm_inject_failed[FM_INJECT_NR];

bool fm_inject(enum fm_inject_point point)
{
	struct fault_attr *attr = point == FM_INJECT_HELPER ? &fm_fail_helper : &fm_fail;
	bool fail = should_fail(attr, 1);

	atomic64_inc(&fm_inject_reached[point]);
	if (fail)
		atomic64_inc(&fm_inject_failed[point]);
	return fail;
}

static int fm_inject_show(struct seq_file *m, void *unused)
{
	int i;

	for (i = 0; i < FM_INJECT_NR; i++)
		seq_printf(m, "%s %lld %lld\n", fm_inject_names[i],
			   (long long)atomic64_read(&fm_inject_reached[i]),
			   (long long)atomic64_read(&fm_inject_failed[i]));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(fm_inject);

int fm_inject_init(void)
{
	struct dentry *root = debugfs_lookup("foliomap", NULL);

	fm_fail_dir = fault_create_debugfs_attr("fail_foliomap", NULL, &fm_fail);
	if (IS_ERR(fm_fail_dir)) {
		dput(root);
		return PTR_ERR(fm_fail_dir);
	}
	fm_fail_helper_dir = fault_create_debugfs_attr("fail_foliomap_helper", NULL,
						       &fm_fail_helper);
	if (IS_ERR(fm_fail_helper_dir)) {
		debugfs_remove_recursive(fm_fail_dir);
		dput(root);
		return PTR_ERR(fm_fail_helper_dir);
	}
	/* The counters are for tests; without foliomap's directory, none. */
	if (root)
		fm_inject_counts = debugfs_create_file("inject", 0444, root, NULL,
						       &fm_inject_fops);
	dput(root);
	pr_info("test build: fail points in debugfs fail_foliomap and fail_foliomap_helper\n");
	return 0;
}

void fm_inject_exit(void)
{
	debugfs_remove(fm_inject_counts);
	debugfs_remove_recursive(fm_fail_helper_dir);
	debugfs_remove_recursive(fm_fail_dir);
}
