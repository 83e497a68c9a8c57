// SPDX-License-Identifier: GPL-2.0-only
/*
 * The test build's fail and pause points (inject.h).
 *
 * Fail points, on the kernel's fault-injection framework where the kernel
 * has it (the debug kernel; elsewhere they never fail). Two attributes,
 * each a directory at the top of debugfs with the usual knobs
 * (Documentation/fault-injection/fault-injection.rst):
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
 *
 * Pause points, <debugfs>/foliomap/pause. Written:
 *
 *   arm WHO POINT [NTH [VADDR]]
 *                         hold thread WHO (0 the caller, 1.. a helper; any
 *                         helper: 99) the NTH time (default 1) it reaches
 *                         POINT (fill, filled, landed, split) from now on,
 *                         counting only steps at VADDR when it is given
 *   release WHO POINT     let it go (it was held, or is not held yet)
 *   random PERMILLE US    every helper point sleeps up to US microseconds
 *                         with probability PERMILLE/1000 (0 0: off)
 *   clear                 everything off, every held thread let go
 *
 * Read: a line per armed point, "WHO POINT NTH HITS STATE AT" (STATE armed,
 * held or released; AT: the vaddr it was held at, or of its last hit, in
 * hex), then "random PERMILLE US". A held thread waits killably: a
 * fatal signal lets it go, and a test that dies cannot leave one behind
 * forever; it is never held with a lock taken (parallel.c's points lie
 * between its locked steps).
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/err.h>
#include <linux/fault-inject.h>
#include <linux/random.h>
#include <linux/seq_file.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "inject.h"

static struct dentry *fm_inject_counts, *fm_pause_file;

static const char *const fm_inject_names[FM_INJECT_NR] = {
	[FM_INJECT_GUP]		= "gup",
	[FM_INJECT_GUP_SHORT]	= "gup_short",
	[FM_INJECT_IOMMU_MAP]	= "iommu_map",
	[FM_INJECT_HELPER]	= "helper",
};

static atomic64_t fm_inject_reached[FM_INJECT_NR], fm_inject_failed[FM_INJECT_NR];

#if IS_ENABLED(CONFIG_FAULT_INJECTION_DEBUG_FS)
static DECLARE_FAULT_ATTR(fm_fail);
static DECLARE_FAULT_ATTR(fm_fail_helper);
static struct dentry *fm_fail_dir, *fm_fail_helper_dir;

static bool fm_should_fail(enum fm_inject_point point)
{
	return should_fail(point == FM_INJECT_HELPER ? &fm_fail_helper : &fm_fail, 1);
}

static int fm_fail_init(void)
{
	fm_fail_dir = fault_create_debugfs_attr("fail_foliomap", NULL, &fm_fail);
	if (IS_ERR(fm_fail_dir))
		return PTR_ERR(fm_fail_dir);
	fm_fail_helper_dir = fault_create_debugfs_attr("fail_foliomap_helper", NULL,
						       &fm_fail_helper);
	if (IS_ERR(fm_fail_helper_dir)) {
		debugfs_remove_recursive(fm_fail_dir);
		return PTR_ERR(fm_fail_helper_dir);
	}
	return 0;
}

static void fm_fail_exit(void)
{
	debugfs_remove_recursive(fm_fail_helper_dir);
	debugfs_remove_recursive(fm_fail_dir);
}
#else
static bool fm_should_fail(enum fm_inject_point point)
{
	return false;
}

static int fm_fail_init(void)
{
	return 0;
}

static void fm_fail_exit(void)
{
}
#endif

bool fm_inject(enum fm_inject_point point)
{
	bool fail = fm_should_fail(point);

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

/* Pause points */

#define FM_PAUSE_ARMS	8
#define FM_PAUSE_ANY_HELPER	99

static const char *const fm_pause_names[FM_PAUSE_NR] = {
	[FM_PAUSE_FILL]		= "fill",
	[FM_PAUSE_FILLED]	= "filled",
	[FM_PAUSE_LANDED]	= "landed",
	[FM_PAUSE_SPLIT]	= "split",
};

enum fm_pause_state { FM_PAUSE_UNUSED, FM_PAUSE_ARMED, FM_PAUSE_HELD, FM_PAUSE_RELEASED };

static const char *const fm_pause_state_names[] = {
	[FM_PAUSE_UNUSED]	= "unused",
	[FM_PAUSE_ARMED]	= "armed",
	[FM_PAUSE_HELD]		= "held",
	[FM_PAUSE_RELEASED]	= "released",
};

/*
 * Under fm_pause_lock. A held thread waits on fm_pause_wait until the
 * arm's generation moves on (released, cleared, or the slot armed anew).
 */
struct fm_pause_arm {
	enum fm_pause_state	state;
	unsigned int		gen;
	unsigned int		who;
	enum fm_pause_point	point;
	unsigned int		nth;
	unsigned int		hits;
	unsigned long		vaddr;		/* 0: any */
	unsigned long		at;		/* of the last hit */
};

static DEFINE_SPINLOCK(fm_pause_lock);
static DECLARE_WAIT_QUEUE_HEAD(fm_pause_wait);
static struct fm_pause_arm fm_pause_arms[FM_PAUSE_ARMS];
static unsigned int fm_pause_permille, fm_pause_us;

static bool fm_pause_released(struct fm_pause_arm *a, unsigned int gen)
{
	bool released;

	spin_lock(&fm_pause_lock);
	released = a->gen != gen;
	spin_unlock(&fm_pause_lock);
	return released;
}

/* Under fm_pause_lock: let @a's thread go. */
static void fm_pause_let_go(struct fm_pause_arm *a)
{
	a->state = FM_PAUSE_RELEASED;
	a->gen++;
}

/* Does arm @a count @who's step at @point, @vaddr? */
static bool fm_pause_matches(struct fm_pause_arm *a, enum fm_pause_point point,
			     unsigned int who, unsigned long vaddr)
{
	return a->state == FM_PAUSE_ARMED && a->point == point &&
	       (a->who == who || (a->who == FM_PAUSE_ANY_HELPER && who)) &&
	       (!a->vaddr || a->vaddr == vaddr);
}

void fm_pause(enum fm_pause_point point, unsigned int who, unsigned long vaddr)
{
	struct fm_pause_arm *hold = NULL;
	unsigned int permille, us, i, gen = 0;

	spin_lock(&fm_pause_lock);
	for (i = 0; i < FM_PAUSE_ARMS; i++) {
		struct fm_pause_arm *a = &fm_pause_arms[i];

		if (!fm_pause_matches(a, point, who, vaddr))
			continue;
		a->at = vaddr;
		if (++a->hits == a->nth) {
			a->state = FM_PAUSE_HELD;
			hold = a;
			gen = a->gen;
			break;
		}
	}
	permille = fm_pause_permille;
	us = fm_pause_us;
	spin_unlock(&fm_pause_lock);

	if (hold) {
		/* A fatal signal ends the hold; the arm stays "held" for the test to see. */
		wait_event_killable(fm_pause_wait, fm_pause_released(hold, gen));
		return;
	}
	if (who && permille && us && get_random_u32_below(1000) < permille)
		fsleep(get_random_u32_below(us) + 1);
}

static int fm_pause_show(struct seq_file *m, void *unused)
{
	unsigned int i;

	spin_lock(&fm_pause_lock);
	for (i = 0; i < FM_PAUSE_ARMS; i++) {
		struct fm_pause_arm *a = &fm_pause_arms[i];

		if (a->state != FM_PAUSE_UNUSED)
			seq_printf(m, "%u %s %u %u %s %lx\n", a->who, fm_pause_names[a->point],
				   a->nth, a->hits, fm_pause_state_names[a->state], a->at);
	}
	seq_printf(m, "random %u %u\n", fm_pause_permille, fm_pause_us);
	spin_unlock(&fm_pause_lock);
	return 0;
}

static int fm_pause_open(struct inode *inode, struct file *file)
{
	return single_open(file, fm_pause_show, NULL);
}

static int fm_pause_point_of(const char *name)
{
	int i;

	for (i = 0; i < FM_PAUSE_NR; i++)
		if (!strcmp(name, fm_pause_names[i]))
			return i;
	return -EINVAL;
}

/* Under fm_pause_lock: the arm of @who at @point that is not let go yet. */
static struct fm_pause_arm *fm_pause_find(unsigned int who, int point)
{
	unsigned int i;

	for (i = 0; i < FM_PAUSE_ARMS; i++) {
		struct fm_pause_arm *a = &fm_pause_arms[i];

		if ((a->state == FM_PAUSE_ARMED || a->state == FM_PAUSE_HELD) &&
		    a->who == who && a->point == point)
			return a;
	}
	return NULL;
}

static int fm_pause_cmd(const char *cmd)
{
	unsigned int who, nth = 1, a1, a2, i;
	unsigned long vaddr = 0;
	struct fm_pause_arm *a;
	char name[16];
	int point, n, ret = 0;

	if (sscanf(cmd, "random %u %u", &a1, &a2) == 2) {
		spin_lock(&fm_pause_lock);
		fm_pause_permille = min(a1, 1000U);
		fm_pause_us = min(a2, 100000U);
		spin_unlock(&fm_pause_lock);
		return 0;
	}
	if (!strcmp(cmd, "clear")) {
		spin_lock(&fm_pause_lock);
		for (i = 0; i < FM_PAUSE_ARMS; i++)
			if (fm_pause_arms[i].state != FM_PAUSE_UNUSED)
				fm_pause_let_go(&fm_pause_arms[i]);
		fm_pause_permille = 0;
		fm_pause_us = 0;
		spin_unlock(&fm_pause_lock);
		wake_up_all(&fm_pause_wait);
		return 0;
	}
	n = sscanf(cmd, "arm %u %15s %u %lx", &who, name, &nth, &vaddr);
	if (n >= 2) {
		point = fm_pause_point_of(name);
		if (point < 0 || !nth)
			return -EINVAL;
		spin_lock(&fm_pause_lock);
		ret = -EBUSY;
		for (i = 0; i < FM_PAUSE_ARMS && !fm_pause_find(who, point); i++) {
			a = &fm_pause_arms[i];
			if (a->state == FM_PAUSE_UNUSED || a->state == FM_PAUSE_RELEASED) {
				*a = (struct fm_pause_arm){ .state = FM_PAUSE_ARMED,
							   .gen = a->gen + 1, .who = who,
							   .point = point, .nth = nth,
							   .vaddr = vaddr };
				ret = 0;
				break;
			}
		}
		spin_unlock(&fm_pause_lock);
		return ret;
	}
	if (sscanf(cmd, "release %u %15s", &who, name) == 2) {
		point = fm_pause_point_of(name);
		if (point < 0)
			return -EINVAL;
		spin_lock(&fm_pause_lock);
		a = fm_pause_find(who, point);
		if (a)
			fm_pause_let_go(a);
		spin_unlock(&fm_pause_lock);
		if (!a)
			return -ENOENT;
		wake_up_all(&fm_pause_wait);
		return 0;
	}
	return -EINVAL;
}

static ssize_t fm_pause_write(struct file *file, const char __user *ubuf, size_t len,
			      loff_t *ppos)
{
	char buf[64];
	int ret;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	strim(buf);
	ret = fm_pause_cmd(buf);
	return ret ? ret : len;
}

static const struct file_operations fm_pause_fops = {
	.owner		= THIS_MODULE,
	.open		= fm_pause_open,
	.read		= seq_read,
	.llseek		= seq_lseek,
	.release	= single_release,
	.write		= fm_pause_write,
};

int fm_inject_init(void)
{
	struct dentry *root = debugfs_lookup("foliomap", NULL);
	int ret = fm_fail_init();

	if (ret) {
		dput(root);
		return ret;
	}
	/* The counters and pauses are for tests; without foliomap's directory, none. */
	if (root) {
		fm_inject_counts = debugfs_create_file("inject", 0444, root, NULL,
						       &fm_inject_fops);
		fm_pause_file = debugfs_create_file("pause", 0600, root, NULL, &fm_pause_fops);
	}
	dput(root);
	pr_info("test build: fail points%s, pause points in debugfs foliomap/pause\n",
		IS_ENABLED(CONFIG_FAULT_INJECTION_DEBUG_FS) ?
		" in debugfs fail_foliomap and fail_foliomap_helper" : " off (no fault injection)");
	return 0;
}

void fm_inject_exit(void)
{
	/* Nothing may stay held: the module's text is going away. */
	fm_pause_cmd("clear");
	debugfs_remove(fm_pause_file);
	debugfs_remove(fm_inject_counts);
	fm_fail_exit();
}
