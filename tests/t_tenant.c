// SPDX-License-Identifier: GPL-2.0-only
/*
 * A large MAP_DMA as the tenant that makes it sees it. foliomap's helpers
 * are threads of the calling process (vhost_task: comm "foliomap-pin",
 * created by the calling thread, reaped before the ioctl returns), so what
 * bounds the caller bounds them: they are in its cgroup and count in its
 * CPU time, stay within its cpu.max, are not started when pids.max or a
 * single allowed CPU leaves no room for them (the map goes on serially),
 * take the calling thread's affinity, scheduling policy, nice level and
 * memory policy, and die with it when the memcg OOM killer kills it in the
 * middle of the map. Every map runs on both backends with its pins and
 * VmLck checked; what only helpers can show SKIPs after that on stock, on
 * 6.1 (no vhost_task there) and with pin_threads=0.
 *
 * Each test runs in a cgroup of its own under a cgroup2 mounted at
 * /sys/fs/cgroup (mounted here when it is not), with the cpu, cpuset, pids,
 * memory (and io) controllers enabled below the root. Memory is 4K
 * anonymous private never touched, 256 MiB: what foliomap's helpers pin
 * (run-all sets pin_parallel_min_mb to 0).
 */
/* cpu.max at 20% stretches a map to tens of seconds under TCG. */
#define TH_TIMEOUT	300
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <linux/mempolicy.h>

#include "edu.h"
#include "fmstats.h"

#define TN_SIZE		(256ULL << 20)
#define TN_PAGES	(TN_SIZE / SZ_4K)
#define TN_IOVA		IOVA_B
#define TN_OOM_SIZE	(512ULL << 20)	/* mapped under memory.max 64M */
#define TN_MAP_WAIT_S	240		/* a MAP_DMA that takes longer fails */
#define CGROOT		"/sys/fs/cgroup"
#define TN_ALL_CPUS	-2		/* tn_map.cpu: every online CPU */

/* ------------------------------------------------------------------ */
/* files */

/* @path's content, NUL-terminated: its length, or -1. */
static ssize_t tn_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return n;
}

/* One write(), so that the kernel's answer to it is the errno: 0 or -errno. */
static int tn_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* Is @word one of the space-separated words of @list? */
static bool tn_has_word(const char *list, const char *word)
{
	size_t len = strlen(word);
	const char *p = list;

	while ((p = strstr(p, word))) {
		if ((p == list || p[-1] == ' ') &&
		    (!p[len] || p[len] == ' ' || p[len] == '\n'))
			return true;
		p += len;
	}
	return false;
}

/* ------------------------------------------------------------------ */
/* cgroups */

static void tn_cg_set(struct th *t, const char *cg, const char *file, const char *val)
{
	char path[256];
	int ret;

	snprintf(path, sizeof(path), "%s/%s", cg, file);
	ret = tn_write(path, val);
	if (ret)
		FAIL("echo '%s' > %s: %s", val, path, strerror(-ret));
}

/* "key value" of a flat-keyed file (cpu.stat, memory.events, ...). */
static long long tn_cg_key(struct th *t, const char *cg, const char *file, const char *key)
{
	char path[256];
	long long v;

	snprintf(path, sizeof(path), "%s/%s", cg, file);
	v = vu_read_key(path, key);
	if (v < 0)
		FAIL("no '%s' in %s", key, path);
	return v;
}

static long long tn_cg_num(struct th *t, const char *cg, const char *file)
{
	char path[256];
	long long v;

	snprintf(path, sizeof(path), "%s/%s", cg, file);
	v = vu_read_number(path);
	if (v < 0)
		FAIL("cannot read a number from %s", path);
	return v;
}

/*
 * cgroup2 at CGROOT, with the controllers the tests use enabled for its
 * children. io is enabled when the kernel has it; the others must be.
 */
static void tn_cgroup_root(struct th *t)
{
	static const char *const ctl[] = { "cpu", "cpuset", "pids", "memory", "io" };
	char avail[512], word[16];
	unsigned int i;

	if (access(CGROOT "/cgroup.controllers", F_OK)) {
		mkdir(CGROOT, 0755);
		if (mount("cgroup2", CGROOT, "cgroup2", 0, NULL) && errno != EBUSY)
			FAIL("mount -t cgroup2 cgroup2 %s: %s", CGROOT, strerror(errno));
	}
	if (tn_read(CGROOT "/cgroup.controllers", avail, sizeof(avail)) < 0)
		FAIL("%s/cgroup.controllers: %s", CGROOT, strerror(errno));
	for (i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++) {
		if (!tn_has_word(avail, ctl[i])) {
			if (!strcmp(ctl[i], "io"))
				continue;
			FAIL("no %s controller: cgroup.controllers is '%s'", ctl[i], avail);
		}
		/* One at a time: the errno says which one failed. */
		snprintf(word, sizeof(word), "+%s", ctl[i]);
		tn_cg_set(t, CGROOT, "cgroup.subtree_control", word);
	}
}

/* Move this process (every thread of it) into @cg: 0 or -errno. */
static int tn_cg_enter(const char *cg)
{
	char path[256], pid[16];

	snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
	snprintf(pid, sizeof(pid), "%d", getpid());
	return tn_write(path, pid);
}

/* rmdir @cg (gone already is fine): 0 or -errno. */
static int tn_cg_remove(const char *cg)
{
	int i;

	/* A task that just left may still count for a moment. */
	for (i = 0; i < 100; i++) {
		if (!rmdir(cg) || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			break;
		usleep(10000);
	}
	return -errno;
}

/* A second cgroup of the test, for a child that must be alone in it. */
static void tn_cg_victim_path(char *path, size_t len, const char *cg)
{
	snprintf(path, len, "%s.victim", cg);
}

/*
 * Run @body in a cgroup of its own (@cg: its directory), entered by the
 * whole test process first, left and removed after, also when the body
 * ended with an ASSERT or a FAIL; the victim cgroup too, if made.
 */
static void tn_run(struct th *t, void (*body)(struct th *t, const char *cg))
{
	static char cg[128], victim[160];
	sigjmp_buf outer;
	int ret, err;

	tn_cgroup_root(t);
	snprintf(cg, sizeof(cg), CGROOT "/t_tenant.%d", getpid());
	tn_cg_victim_path(victim, sizeof(victim), cg);
	if (mkdir(cg, 0755))
		FAIL("mkdir %s: %s", cg, strerror(errno));
	ret = tn_cg_enter(cg);
	if (ret) {
		rmdir(cg);
		FAIL("cannot move into %s: %s", cg, strerror(-ret));
	}

	memcpy(outer, t->jmp, sizeof(outer));
	ret = sigsetjmp(t->jmp, 0);
	if (!ret)
		body(t, cg);
	memcpy(t->jmp, outer, sizeof(outer));

	err = tn_cg_enter(CGROOT);
	if (!err)
		err = tn_cg_remove(victim);
	if (!err)
		err = tn_cg_remove(cg);
	if (err) {
		th_diag("cannot move back to %s and remove %s (and %s): %s", CGROOT, cg,
			victim, strerror(-err));
		t->failed = true;
	}
	if (ret)
		th_abort(t);
}

/* A test whose body runs in a cgroup of its own, @cg (tn_run()). */
#define TENANT_TEST(name)						\
	static void name##_body(struct th *t, const char *cg);		\
	TEST(name)							\
	{								\
		tn_run(t, name##_body);					\
	}								\
	static void name##_body(struct th *t, const char *cg)

/* ------------------------------------------------------------------ */
/* memory, counters */

/*
 * @size bytes of 4K anonymous private memory never touched, between two
 * PROT_NONE pages so that its vma is its own (numa_maps' line for it
 * starts at its address); NULL on failure.
 */
static char *tn_mem_raw(size_t size)
{
	char *g = mmap(NULL, size + 2 * SZ_4K, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char *p = g + SZ_4K;

	if (g == MAP_FAILED)
		return NULL;
	if (mmap(p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		 -1, 0) != p || vu_madvise_thp(p, size, MADV_NOHUGEPAGE)) {
		munmap(g, size + 2 * SZ_4K);
		return NULL;
	}
	return p;
}

static char *tn_mem(struct th *t, size_t size)
{
	char *p = tn_mem_raw(size);

	if (!p)
		FAIL("%zu MiB of 4K anonymous memory: %s", size >> 20, strerror(errno));
	th_own_mem(t, p - SZ_4K, size + 2 * SZ_4K);
	return p;
}

/* foliomap: a counter of the newest container (the test's own). */
static long long tn_stat(struct th *t, const char *name)
{
	th_mount(t, "debugfs", DEBUGFS);
	return stat_of(newest_container(t), name);
}

/*
 * Why a foliomap map of memory never touched gets no helper here, or NULL
 * when it should get one.
 */
static const char *tn_no_helpers(void)
{
	if (!is_foliomap())
		return "stock type1 pins in the calling thread alone";
	/* Debian's 6.1.0-N: 601; 6.12.N is 612 */
	if (th_kernel_series() == 601)
		return "6.1 has no vhost_task: foliomap pins serially there";
	if (th_param_read("pin_threads") == 0)
		return "pin_threads=0";
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return "one CPU";
	return NULL;
}

/*
 * foliomap: the map just made ran with helpers where it can have them
 * (parallel_maps one more than @maps0), serially where it cannot.
 */
static void tn_expect_parallel(struct th *t, long long maps0)
{
	if (is_foliomap())
		EXPECT_EQ(tn_stat(t, "parallel_maps"), maps0 + (tn_no_helpers() ? 0 : 1));
}

static long long tn_maps0(struct th *t)
{
	return is_foliomap() ? tn_stat(t, "parallel_maps") : 0;
}

static double tn_thread_cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU time of the whole process, every thread that ever ran in it. */
static double tn_process_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* ------------------------------------------------------------------ */
/* /proc/self/task/<tid> */

/* Its Cpus_allowed_list: 0, or -1 if gone. */
static int tn_task_cpus(const char *dir, char *cpus, size_t len)
{
	char path[96], buf[4096], *p;
	size_t n;

	snprintf(path, sizeof(path), "%s/status", dir);
	if (tn_read(path, buf, sizeof(buf)) < 0)
		return -1;
	p = strstr(buf, "\nCpus_allowed_list:");
	if (!p)
		return -1;
	p += strlen("\nCpus_allowed_list:");
	p += strspn(p, " \t");
	n = strcspn(p, "\n");
	if (n >= len)
		n = len - 1;
	memcpy(cpus, p, n);
	cpus[n] = 0;
	return 0;
}

/* Its nice level and scheduling policy (stat fields 19 and 41): 0, or -1. */
static int tn_task_sched(const char *dir, long long *nice, long long *policy)
{
	char path[96], buf[1024], *p;
	int field;

	snprintf(path, sizeof(path), "%s/stat", dir);
	/* comm, field 2, may hold spaces and parentheses: fields after the last ')' */
	if (tn_read(path, buf, sizeof(buf)) < 0)
		return -1;
	p = strrchr(buf, ')');
	if (!p)
		return -1;
	for (field = 3; field <= 41; field++) {
		p += strspn(p + 1, " ") + 1;
		if (!*p)
			return -1;
		if (field == 19)
			*nice = strtoll(p, NULL, 10);
		if (field == 41)
			*policy = strtoll(p, NULL, 10);
		p += strcspn(p, " ") - 1;
	}
	return 0;
}

static bool tn_task_is_helper(const char *dir)
{
	char path[96], comm[64];

	snprintf(path, sizeof(path), "%s/comm", dir);
	return tn_read(path, comm, sizeof(comm)) > 0 &&
	       !strncmp(comm, FM_HELPER_COMM, strlen(FM_HELPER_COMM));
}

/* Is thread @tid listed in @cg's cgroup.threads? */
static bool tn_cg_has_thread(const char *cg, pid_t tid)
{
	char path[256], buf[4096], *p, *end;

	snprintf(path, sizeof(path), "%s/cgroup.threads", cg);
	if (tn_read(path, buf, sizeof(buf)) < 0)
		return false;
	for (p = buf; *p; p = end) {
		long v = strtol(p, &end, 10);

		if (end == p)
			break;
		if (v == tid)
			return true;
	}
	return false;
}

/* ------------------------------------------------------------------ */
/* a MAP_DMA in a thread of its own, its helpers watched meanwhile */

struct tn_map {
	int		container;
	char		*mem;
	size_t		size;
	/* what the mapping thread sets on itself before its MAP_DMA */
	int		sched_policy;	/* -1: left as created */
	int		nice;		/* with set_nice */
	bool		set_nice;
	int		cpu;		/* -1: left; >= 0: that CPU alone; TN_ALL_CPUS */
	int		bind_node;	/* >= 0: task policy MPOL_BIND to that node */
	/* what it found */
	const char	*failed;	/* a set-up call that failed, with err */
	int		err;
	char		cpus[64];	/* its Cpus_allowed_list */
	long long	nice_now, policy;	/* its stat fields 19 and 41 */
	double		cpu_s;		/* its CPU time in MAP_DMA */
};

static void tn_map_init(struct tn_map *m, int container, char *mem, size_t size)
{
	memset(m, 0, sizeof(*m));
	m->container = container;
	m->mem = mem;
	m->size = size;
	m->sched_policy = -1;
	m->cpu = -1;
	m->bind_node = -1;
}

static long tn_map_setup_failed(struct tn_map *m, const char *what)
{
	m->failed = what;
	m->err = errno;
	return -EINVAL;
}

static long tn_map_fn(void *arg)
{
	struct tn_map *m = arg;
	struct sched_param sp = { 0 };
	char dir[64];
	cpu_set_t set;
	double t0;
	long ret;
	int i;

	if (m->sched_policy >= 0 && sched_setscheduler(0, m->sched_policy, &sp))
		return tn_map_setup_failed(m, "sched_setscheduler");
	/* Linux: the nice level of this thread alone */
	if (m->set_nice && setpriority(PRIO_PROCESS, gettid(), m->nice))
		return tn_map_setup_failed(m, "setpriority");
	if (m->cpu != -1) {
		CPU_ZERO(&set);
		if (m->cpu == TN_ALL_CPUS)
			for (i = 0; i < sysconf(_SC_NPROCESSORS_ONLN) && i < CPU_SETSIZE; i++)
				CPU_SET(i, &set);
		else
			CPU_SET(m->cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			return tn_map_setup_failed(m, "sched_setaffinity");
	}
	if (m->bind_node >= 0) {
		unsigned long nodes = 1UL << m->bind_node;

		if (syscall(SYS_set_mempolicy, MPOL_BIND, &nodes, sizeof(nodes) * 8 + 1))
			return tn_map_setup_failed(m, "set_mempolicy(MPOL_BIND)");
	}
	snprintf(dir, sizeof(dir), "/proc/self/task/%d", gettid());
	if (tn_task_cpus(dir, m->cpus, sizeof(m->cpus)) ||
	    tn_task_sched(dir, &m->nice_now, &m->policy))
		return tn_map_setup_failed(m, "reading its own /proc/self/task entry");

	t0 = tn_thread_cpu();
	ret = vu_map(m->container, TN_IOVA, m->mem, m->size, RW);
	m->cpu_s = tn_thread_cpu() - t0;
	return ret;
}

#define TN_MAX_SEEN	32

/* One helper as the watcher saw it: samples taken while it was alive. */
struct tn_seen {
	pid_t		tid;
	int		samples;
	char		cpus[64];	/* the first sample's */
	long long	nice, policy;	/* the first sample's */
	int		changed;	/* samples with other CPUs, nice or policy */
	int		elsewhere;	/* samples with another cgroup in its cgroup file */
	int		listed;		/* samples with it in cgroup.threads */
	int		unlisted;	/* ... without */
	bool		last_listed;
};

struct tn_watch {
	const char	*cg;		/* the cgroup the helpers must be in, or NULL */
	int		polls;
	int		n;
	struct tn_seen	seen[TN_MAX_SEEN];
};

static struct tn_seen *tn_seen_of(struct tn_watch *w, pid_t tid)
{
	int i;

	for (i = 0; i < w->n; i++)
		if (w->seen[i].tid == tid)
			return &w->seen[i];
	if (w->n == TN_MAX_SEEN)
		return NULL;
	w->seen[w->n].tid = tid;
	return &w->seen[w->n++];
}

/*
 * One look at the process's threads: each helper's CPUs, nice, policy and
 * cgroup, kept only if it was still a helper after they were read (so the
 * values were its own, read while it was alive).
 */
static void tn_watch_poll(struct tn_watch *w)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	w->polls++;
	while (d && (e = readdir(d))) {
		char dir[64], cpus[64], path[96], cgfile[256], want[160];
		long long nice, policy;
		bool listed = false, elsewhere = false;
		pid_t tid = atoi(e->d_name);
		struct tn_seen *s;

		if (tid <= 0)
			continue;
		snprintf(dir, sizeof(dir), "/proc/self/task/%d", tid);
		if (!tn_task_is_helper(dir) || tn_task_cpus(dir, cpus, sizeof(cpus)) ||
		    tn_task_sched(dir, &nice, &policy))
			continue;
		if (w->cg) {
			snprintf(path, sizeof(path), "%s/cgroup", dir);
			snprintf(want, sizeof(want), "0::%s\n", w->cg + strlen(CGROOT));
			elsewhere = tn_read(path, cgfile, sizeof(cgfile)) < 0 || strcmp(cgfile, want);
			listed = tn_cg_has_thread(w->cg, tid);
		}
		if (!tn_task_is_helper(dir))
			continue;
		s = tn_seen_of(w, tid);
		if (!s)
			continue;
		if (!s->samples++) {
			snprintf(s->cpus, sizeof(s->cpus), "%s", cpus);
			s->nice = nice;
			s->policy = policy;
		} else if (strcmp(s->cpus, cpus) || s->nice != nice || s->policy != policy) {
			s->changed++;
		}
		s->elsewhere += elsewhere;
		s->listed += listed;
		s->unlisted += !listed;
		s->last_listed = listed;
	}
	if (d)
		closedir(d);
}

/*
 * Run @m's MAP_DMA in a thread of its own; meanwhile, with @w, look at its
 * helpers every 2 ms. Its result; fails the test if it takes longer than
 * TN_MAP_WAIT_S or the thread's set-up failed.
 */
static long tn_map_run(struct th *t, struct tn_map *m, struct tn_watch *w)
{
	struct th_call call;
	double t0 = vu_now();
	long ret;

	th_call_start(t, &call, tn_map_fn, m);
	while (!th_call_wait(&call, w ? 2 : 1000)) {
		if (w)
			tn_watch_poll(w);
		if (vu_now() - t0 > TN_MAP_WAIT_S)
			FAIL("MAP_DMA of %zu MiB did not return within %d s", m->size >> 20,
			     TN_MAP_WAIT_S);
	}
	ret = th_call_join(&call);
	if (m->failed)
		FAIL("mapping thread: %s: %s", m->failed, strerror(m->err));
	return ret;
}

/*
 * What the watcher saw: no helper when none is expected (@why), else at
 * least one, and each, in every sample, with the mapping thread's CPUs,
 * nice level and policy, in the watched cgroup (its own cgroup file) and
 * listed in its cgroup.threads (but maybe in its last sample: a thread
 * that exits leaves the list a little before /proc).
 */
static void tn_expect_seen(struct th *t, const struct tn_watch *w, const struct tn_map *m,
			   const char *why)
{
	int i;

	th_diag("%d helper(s) seen in %d looks; mapping thread: CPUs %s, nice %lld, policy %lld",
		w->n, w->polls, m->cpus, m->nice_now, m->policy);
	if (why) {
		EXPECT_EQ(w->n, 0);
		return;
	}
	EXPECT_GE(w->n, 1);
	for (i = 0; i < w->n; i++) {
		const struct tn_seen *s = &w->seen[i];
		bool cg_ok = !w->cg || (!s->elsewhere && s->listed &&
					(!s->unlisted || (s->unlisted == 1 && !s->last_listed)));

		th_diag("helper %d: %d samples: CPUs %s, nice %lld, policy %lld, %d changed;"
			" cgroup file elsewhere %d, cgroup.threads listed %d / not %d",
			s->tid, s->samples, s->cpus, s->nice, s->policy, s->changed,
			s->elsewhere, s->listed, s->unlisted);
		EXPECT_EQ(strcmp(s->cpus, m->cpus), 0);
		EXPECT_EQ(s->nice, m->nice_now);
		EXPECT_EQ(s->policy, m->policy);
		EXPECT_EQ(s->changed, 0);
		EXPECT_TRUE(cg_ok);
	}
}

/*
 * Map @m (set up by the caller) in container @c while @w watches, check the
 * map, its helpers and the counters, unmap. Returns why no helper was
 * expected (the test SKIPs with it after its own checks of @m and @w), or
 * NULL.
 */
static const char *tn_map_watched(struct th *t, int c, struct tn_map *m, struct tn_watch *w)
{
	long long maps0 = tn_maps0(t);
	const char *why = tn_no_helpers();

	ASSERT_EQ(tn_map_run(t, m, w), 0);
	EXPECT_ACCT(TN_PAGES);
	tn_expect_parallel(t, maps0);
	tn_expect_seen(t, w, m, why);
	UNMAP_OK(c, TN_IOVA, TN_SIZE);
	EXPECT_ACCT(0);
	return why;
}

/* ------------------------------------------------------------------ */
/* tests */

/* foliomap: chunks of parallel maps so far, and those a helper filled. */
struct tn_chunks {
	long long	all, helpers;
};

static void tn_chunks_read(struct th *t, struct tn_chunks *c)
{
	c->all = tn_stat(t, "parallel_chunks");
	c->helpers = tn_stat(t, "parallel_helper_chunks");
}

/*
 * Helpers that filled some of the chunks since @c0 used CPU time for it,
 * and it is found where the caller's is (@where): @others, the CPU time
 * beyond the mapping thread's (and the watcher's), is at least a quarter
 * of what the helpers' share of the chunks would cost at the mapping
 * thread's rate (@caller; that thread also charges and maps every batch).
 * Helpers outside the caller's cgroup or process leave @others near 0.
 */
static void tn_expect_helper_cpu(struct th *t, const struct tn_chunks *c0, double caller,
				 const char *where, double others)
{
	struct tn_chunks c;
	double need;

	tn_chunks_read(t, &c);
	c.all -= c0->all;
	c.helpers -= c0->helpers;
	need = c.all ? caller * c.helpers / c.all / 4 : 0;
	th_diag("%s: helpers filled %lld of %lld chunks: %.3f s of CPU beyond the"
		" mapping thread's %.3f s, %.3f s expected at least",
		where, c.helpers, c.all, others, caller, need);
	if (c.helpers)
		EXPECT_GT((long long)(others * 1000), (long long)(need * 1000));
}

/*
 * The helpers are threads of the caller's cgroup: in its cgroup.threads
 * while they run, and their CPU time is in the cgroup's cpu.stat and in
 * the process's rusage, beyond the mapping thread's own.
 */
TENANT_TEST(tenant_helpers_in_caller_cgroup)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *p = tn_mem(t, TN_SIZE);
	const char *why = tn_no_helpers();
	struct tn_watch w = { .cg = cg };
	long long maps0 = tn_maps0(t);
	double use0, use, proc0, proc, self0, self;
	struct tn_chunks c0;
	struct tn_map m;

	if (!why)
		tn_chunks_read(t, &c0);
	tn_map_init(&m, c, p, TN_SIZE);
	use0 = tn_cg_key(t, cg, "cpu.stat", "usage_usec") / 1e6;
	proc0 = tn_process_cpu();
	self0 = tn_thread_cpu();
	ASSERT_EQ(tn_map_run(t, &m, &w), 0);
	/* The watcher's (this thread's) time is no helper's. */
	self = tn_thread_cpu() - self0;
	proc = tn_process_cpu() - proc0 - self - m.cpu_s;
	use = tn_cg_key(t, cg, "cpu.stat", "usage_usec") / 1e6 - use0 - self - m.cpu_s;
	EXPECT_ACCT(TN_PAGES);
	EXPECT_EQ(fm_helpers_alive(), 0);
	tn_expect_parallel(t, maps0);
	tn_expect_seen(t, &w, &m, why);
	th_diag("CPU time: mapping thread %.3f s, watcher %.3f s; others %.3f s (cpu.stat),"
		" %.3f s (rusage)", m.cpu_s, self, use, proc);
	if (!why) {
		tn_expect_helper_cpu(t, &c0, m.cpu_s, "cgroup cpu.stat", use);
		tn_expect_helper_cpu(t, &c0, m.cpu_s, "process rusage", proc);
	}
	UNMAP_OK(c, TN_IOVA, TN_SIZE);
	EXPECT_ACCT(0);
	if (why)
		SKIP("%s (the map was checked)", why);
}

/*
 * cpu.max 20%: the map's CPU time stays within the quota over the map's
 * wall time (half again, plus 0.2 s, for slack), and the helpers' share
 * of it is in there too (helpers outside the cgroup would leave the
 * quota alone and finish the map early).
 */
TENANT_TEST(tenant_cpu_max_not_escaped)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *p = tn_mem(t, TN_SIZE);
	const char *why = tn_no_helpers();
	long long maps0 = tn_maps0(t);
	double use0, use, t0, wall, self0, self;
	struct tn_chunks c0;
	struct tn_map m;

	if (!why)
		tn_chunks_read(t, &c0);
	tn_cg_set(t, cg, "cpu.max", "20000 100000");
	tn_map_init(&m, c, p, TN_SIZE);
	use0 = tn_cg_key(t, cg, "cpu.stat", "usage_usec") / 1e6;
	self0 = tn_thread_cpu();
	t0 = vu_now();
	ASSERT_EQ(tn_map_run(t, &m, NULL), 0);
	wall = vu_now() - t0;
	self = tn_thread_cpu() - self0;
	use = tn_cg_key(t, cg, "cpu.stat", "usage_usec") / 1e6 - use0;
	tn_cg_set(t, cg, "cpu.max", "max");
	th_diag("cpu.max 20%%: %.3f s of CPU in %.3f s (mapping thread %.3f s)",
		use, wall, m.cpu_s);
	EXPECT_LE((long long)(use * 1000), (long long)((0.2 * wall * 1.5 + 0.2) * 1000));
	EXPECT_ACCT(TN_PAGES);
	tn_expect_parallel(t, maps0);
	if (!why)
		tn_expect_helper_cpu(t, &c0, m.cpu_s, "cgroup cpu.stat", use - self - m.cpu_s);
	UNMAP_OK(c, TN_IOVA, TN_SIZE);
	EXPECT_ACCT(0);
	EXPECT_EQ(fm_helpers_alive(), 0);
}

/*
 * pids.max at pids.current: no thread can be created, so no helper is;
 * the map goes on serially and succeeds. Where helpers are expected, the
 * refusal shows in pids.events.
 */
TENANT_TEST(tenant_pids_max_serial)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *p = tn_mem(t, TN_SIZE);
	long long maps0 = tn_maps0(t), cur, ev0;
	char val[32];
	int ret;

	cur = tn_cg_num(t, cg, "pids.current");
	ev0 = tn_cg_key(t, cg, "pids.events", "max");
	th_diag("pids.max = pids.current = %lld", cur);
	snprintf(val, sizeof(val), "%lld", cur);
	tn_cg_set(t, cg, "pids.max", val);
	/* In this thread: another one could not be created either. */
	ret = vu_map(c, TN_IOVA, p, TN_SIZE, RW);
	tn_cg_set(t, cg, "pids.max", "max");
	ASSERT_EQ(ret, 0);
	EXPECT_ACCT(TN_PAGES);
	if (is_foliomap())
		EXPECT_EQ(tn_stat(t, "parallel_maps"), maps0);
	if (!tn_no_helpers())
		EXPECT_GT(tn_cg_key(t, cg, "pids.events", "max"), ev0);
	UNMAP_OK(c, TN_IOVA, TN_SIZE);
	EXPECT_ACCT(0);
	EXPECT_EQ(fm_helpers_alive(), 0);
}

/* One map of 256 MiB by @m, watched: no helper, pins and VmLck exact. */
static void tn_map_alone(struct th *t, int c, struct tn_map *m)
{
	long long maps0 = tn_maps0(t);
	struct tn_watch w = { 0 };

	ASSERT_EQ(tn_map_run(t, m, &w), 0);
	EXPECT_ACCT(TN_PAGES);
	th_diag("mapping thread's CPUs: %s", m->cpus);
	EXPECT_EQ(strcmp(m->cpus, "0"), 0);
	if (is_foliomap())
		EXPECT_EQ(tn_stat(t, "parallel_maps"), maps0);
	EXPECT_EQ(w.n, 0);
	UNMAP_OK(c, TN_IOVA, TN_SIZE);
	EXPECT_ACCT(0);
}

/*
 * A caller allowed one CPU starts no helper: by its cpuset (cpuset.cpus
 * "0"), then by sched_setaffinity() to CPU 0 alone.
 */
TENANT_TEST(tenant_one_cpu_no_helper)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char all[64];
	struct tn_map m;

	if (tn_read(CGROOT "/cpuset.cpus.effective", all, sizeof(all)) <= 0)
		FAIL("%s/cpuset.cpus.effective: %s", CGROOT, strerror(errno));
	tn_cg_set(t, cg, "cpuset.mems", "0");
	tn_cg_set(t, cg, "cpuset.cpus", "0");
	th_diag("cpuset.cpus 0");
	tn_map_init(&m, c, tn_mem(t, TN_SIZE), TN_SIZE);
	tn_map_alone(t, c, &m);

	tn_cg_set(t, cg, "cpuset.cpus", all);
	th_diag("cpuset.cpus %.*s, sched_setaffinity to CPU 0", (int)strcspn(all, "\n"), all);
	tn_map_init(&m, c, tn_mem(t, TN_SIZE), TN_SIZE);
	m.cpu = 0;
	tn_map_alone(t, c, &m);
}

/*
 * The helpers' Cpus_allowed_list is the mapping thread's: that thread may
 * run on every CPU, the process's other thread (the watcher) on the last
 * one only, so the calling thread's affinity is told from the process's.
 */
TENANT_TEST(tenant_helper_affinity_is_callers)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct tn_watch w = { .cg = cg };
	struct tn_map m;
	const char *why;
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(ncpu - 1, &one);
	ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
	tn_map_init(&m, c, tn_mem(t, TN_SIZE), TN_SIZE);
	m.cpu = TN_ALL_CPUS;
	why = tn_map_watched(t, c, &m, &w);
	if (ncpu >= 2) {
		char want[32];

		snprintf(want, sizeof(want), "0-%d", (int)ncpu - 1);
		EXPECT_EQ(strcmp(m.cpus, want), 0);
	}
	if (why)
		SKIP("%s (the map was checked)", why);
}

/* A mapping thread with SCHED_IDLE has SCHED_IDLE helpers (policy 5). */
TENANT_TEST(tenant_sched_idle_helpers)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	struct tn_watch w = { .cg = cg };
	struct tn_map m;
	const char *why;
	int i;

	tn_map_init(&m, c, tn_mem(t, TN_SIZE), TN_SIZE);
	m.sched_policy = SCHED_IDLE;
	why = tn_map_watched(t, c, &m, &w);
	EXPECT_EQ(m.policy, SCHED_IDLE);
	for (i = 0; i < w.n; i++)
		EXPECT_EQ(w.seen[i].policy, SCHED_IDLE);
	if (why)
		SKIP("%s (the map was checked)", why);
}

/* A SCHED_OTHER mapping thread at nice 10 has helpers at nice 10. */
TENANT_TEST(tenant_nice_helpers)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	struct tn_watch w = { .cg = cg };
	struct tn_map m;
	const char *why;
	int i;

	tn_map_init(&m, c, tn_mem(t, TN_SIZE), TN_SIZE);
	m.set_nice = true;
	m.nice = 10;
	why = tn_map_watched(t, c, &m, &w);
	EXPECT_EQ(m.policy, SCHED_OTHER);
	EXPECT_EQ(m.nice_now, 10);
	for (i = 0; i < w.n; i++)
		EXPECT_EQ(w.seen[i].nice, 10);
	if (why)
		SKIP("%s (the map was checked)", why);
}

/* Node 1 must exist: tests/check boots its guests with vm/run --numa. */
static void tn_need_node1(struct th *t)
{
	if (access("/sys/devices/system/node/node1", F_OK))
		FAIL("no NUMA node 1: this test needs a guest booted with vm/run --numa"
		     " (as tests/check does)");
}

/* Pages of the vma at @p on nodes 0 and 1 (numa_maps' N0=, N1=). */
static void tn_numa_pages(struct th *t, void *p, long long *n0, long long *n1)
{
	char start[32], line[4096], *tok, *save;
	bool found = false;
	FILE *f = fopen("/proc/self/numa_maps", "r");

	if (!f)
		FAIL("/proc/self/numa_maps: %s", strerror(errno));
	snprintf(start, sizeof(start), "%lx ", (unsigned long)p);
	*n0 = *n1 = 0;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, start, strlen(start)))
			continue;
		found = true;
		line[strcspn(line, "\n")] = 0;
		th_diag("numa_maps: %s", line);
		for (tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
			if (!strncmp(tok, "N0=", 3))
				*n0 = atoll(tok + 3);
			if (!strncmp(tok, "N1=", 3))
				*n1 = atoll(tok + 3);
		}
	}
	fclose(f);
	if (!found)
		FAIL("no vma at %p in /proc/self/numa_maps", p);
}

/* 256 MiB mapped by @m: every page on node 1; helpers used where they can be. */
static void tn_map_on_node1(struct th *t, int c, struct tn_map *m)
{
	long long maps0 = tn_maps0(t), n0, n1;

	ASSERT_EQ(tn_map_run(t, m, NULL), 0);
	EXPECT_ACCT(TN_PAGES);
	tn_numa_pages(t, m->mem, &n0, &n1);
	EXPECT_EQ(n0, 0);
	EXPECT_EQ(n1, TN_PAGES);
	tn_expect_parallel(t, maps0);
	UNMAP_OK(c, TN_IOVA, TN_SIZE);
	EXPECT_ACCT(0);
}

/* The mapping thread's task policy MPOL_BIND node 1 holds for its helpers. */
TENANT_TEST(tenant_membind_node1)
{
	int c;
	struct tn_map m;

	tn_need_node1(t);
	c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	tn_map_init(&m, c, tn_mem(t, TN_SIZE), TN_SIZE);
	m.bind_node = 1;
	tn_map_on_node1(t, c, &m);
}

/* The range's own policy (mbind MPOL_BIND node 1), no task policy. */
TENANT_TEST(tenant_mbind_node1)
{
	unsigned long nodes = 1UL << 1;
	struct tn_map m;
	char *p;
	int c;

	tn_need_node1(t);
	c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	p = tn_mem(t, TN_SIZE);
	ASSERT_EQ(syscall(SYS_mbind, p, TN_SIZE, MPOL_BIND, &nodes, sizeof(nodes) * 8 + 1, 0), 0);
	tn_map_init(&m, c, p, TN_SIZE);
	tn_map_on_node1(t, c, &m);
}

static char tn_victim[160];

/* The mapper child's memory (th_mapper_start()), after it joined tn_victim. */
static void *tn_victim_mem(size_t size)
{
	int ret = tn_cg_enter(tn_victim);

	if (ret) {
		fprintf(stderr, "t_tenant: cannot move into %s: %s\n", tn_victim, strerror(-ret));
		return NULL;
	}
	return tn_mem_raw(size);
}

/* What the mapper child reported before it died ('D', 'E' or nothing). */
static const char *tn_map_state(char done)
{
	return done == 'D' ? "done" : done == 'E' ? "failed" : "in progress";
}

/*
 * Waits up to 60 s for the mapper child to die (the memcg OOM killer's
 * SIGKILL), kills and reaps it when it did not, and reads what it reported
 * into @done (0: nothing, the map did not return). False when it had to be
 * killed.
 */
static bool tn_mapper_reap(pid_t pid, int rfd, int *status, char *done)
{
	bool died = th_reap_within(pid, status, 60000);

	if (!died) {
		kill(pid, SIGKILL);
		th_reap_within(pid, status, 10000);
	}
	if (read(rfd, done, 1) != 1)
		*done = 0;
	close(rfd);
	return died;
}

/*
 * A child alone in a cgroup with memory.max 64M and no swap maps 512 MiB
 * never touched: pinned pages cannot be reclaimed, so the memcg OOM killer
 * kills it in the middle of the map. It dies of SIGKILL promptly, nothing
 * stays pinned, its cgroup's charge is gone, and no helper is left.
 */
TENANT_TEST(tenant_oom_kill_mid_map)
{
	long long mem_after;
	int groups[1], rfd, status, ret;
	char path[200], done = 0;
	pid_t pid;

	th_e1000e_groups(t, groups, 1);
	tn_cg_victim_path(tn_victim, sizeof(tn_victim), cg);
	if (mkdir(tn_victim, 0755))
		FAIL("mkdir %s: %s", tn_victim, strerror(errno));
	tn_cg_set(t, tn_victim, "memory.max", "64M");
	/* Only with swap accounting; the guest has no swap anyway. */
	snprintf(path, sizeof(path), "%s/memory.swap.max", tn_victim);
	ret = tn_write(path, "0");
	if (ret && ret != -ENOENT)
		FAIL("echo 0 > %s: %s", path, strerror(-ret));
	pid = th_mapper_start(t, groups[0], tn_victim_mem, TN_OOM_SIZE, TN_IOVA, &rfd);
	if (!tn_mapper_reap(pid, rfd, &status, &done))
		FAIL("the mapper was not killed within 60 s (map %s)", tn_map_state(done));
	th_diag("mapper: %s %d, map %s; memory.events oom_kill %lld",
		WIFSIGNALED(status) ? "signal" : "exit",
		WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
		tn_map_state(done), tn_cg_key(t, tn_victim, "memory.events", "oom_kill"));
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	EXPECT_EQ(done, 0);
	EXPECT_GE(tn_cg_key(t, tn_victim, "memory.events", "oom_kill"), 1);
	EXPECT_EQ(th_pins(t), 0);
	EXPECT_EQ(fm_helpers_alive(), 0);
	mem_after = tn_cg_num(t, tn_victim, "memory.current");
	th_diag("memory.current after: %lld kB", mem_after >> 10);
	EXPECT_LT(mem_after, 16LL << 20);
	EXPECT_EQ(tn_cg_remove(tn_victim), 0);
}

/*
 * The mapper child's memory for tenant_oom_kill_in_iommu_map: touched,
 * then nothing more may be charged (memory.max = memory.current), so that
 * what a map of it needs first is the IOMMU's page tables.
 */
static void *tn_victim_mem_full(size_t size)
{
	char path[200], cur[32];
	char *p = tn_victim_mem(size);

	if (!p)
		return NULL;
	memset(p, 1, size);
	snprintf(path, sizeof(path), "%s/memory.current", tn_victim);
	if (tn_read(path, cur, sizeof(cur)) <= 0)
		return NULL;
	cur[strcspn(cur, "\n")] = 0;
	snprintf(path, sizeof(path), "%s/memory.max", tn_victim);
	if (tn_write(path, cur)) {
		fprintf(stderr, "t_tenant: echo %s > %s failed\n", cur, path);
		return NULL;
	}
	return p;
}

/*
 * The IOMMU's page tables for a map are charged to the mapping process's
 * memcg (GFP_KERNEL_ACCOUNT): a child whose memcg has no room left maps
 * 256 MiB of its 4K memory, touched before. The first page table the map
 * needs is charged over the limit and the memcg OOM killer kills the
 * child, after which its charges fail: iommu_map() fails in the middle of
 * the map. The error path must leave nothing mapped, pinned or charged,
 * and unmap only what is mapped (Arm's io-pgtable warns on unmapping what
 * is not: a failure of the whole guest run). foliomap maps serially here
 * (pin_threads=0), so that its helpers' creation is not what meets the
 * limit first. The kernel's OOM report says where the charge failed: in
 * iommu_map(), or (when slab or per-CPU charge caches gave out first) in
 * an allocation before it, which the test reports. On 6.1 nothing is
 * charged for the IOMMU's page tables (th_iommu_pgtables_charged()): the
 * map completes and the test kills the child, or one of the backend's own
 * charged allocations (the vfio_dma, foliomap's batch arrays and run
 * record) meets the limit first, when the memcg's per-CPU charge cache
 * does not cover it, and the OOM killer kills the child mid-map. Either
 * way nothing may stay pinned or charged; the test says which happened
 * and SKIPs the iommu_map() part.
 */
TENANT_TEST(tenant_oom_kill_in_iommu_map)
{
	long long threads0 = is_foliomap() ? th_param_read("pin_threads") : 0;
	bool charged = th_iommu_pgtables_charged();
	int groups[1], rfd, status, kfd;
	bool in_iommu_map = false, died = true;
	long long at_kill, oom_kills;
	pid_t pid;
	char done;

	th_e1000e_groups(t, groups, 1);
	tn_cg_victim_path(tn_victim, sizeof(tn_victim), cg);
	if (mkdir(tn_victim, 0755))
		FAIL("mkdir %s: %s", tn_victim, strerror(errno));
	if (is_foliomap())
		ASSERT_EQ(th_param_write("pin_threads", 0), 0);
	kfd = kmsg_open(t);
	pid = th_mapper_start(t, groups[0], tn_victim_mem_full, TN_SIZE, TN_IOVA, &rfd);
	if (charged)
		died = tn_mapper_reap(pid, rfd, &status, &done);
	else	/* Nothing can fail: kill the child once it reports. */
		done = th_mapper_kill_at(t, pid, rfd, LLONG_MAX, &at_kill, &status);
	if (is_foliomap())
		ASSERT_EQ(th_param_write("pin_threads", threads0), 0);
	if (!died)
		FAIL("the mapper was not killed within 60 s (map %s)", tn_map_state(done));
	oom_kills = tn_cg_key(t, tn_victim, "memory.events", "oom_kill");
	if (oom_kills >= 1)
		in_iommu_map = kmsg_wait(kfd, 2000, "iommu_map", NULL, NULL);
	th_diag("mapper: %s %d, map %s; memory.events oom_kill %lld; charge failed %s",
		WIFSIGNALED(status) ? "signal" : "exit",
		WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
		tn_map_state(done), oom_kills,
		oom_kills < 1 ? "nowhere" :
		in_iommu_map ? "in iommu_map()" : "before iommu_map()");
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	if (charged)
		EXPECT_GE(oom_kills, 1);
	/* Killed by the memcg: the map never returned; by the test: it was done. */
	EXPECT_EQ(done, oom_kills >= 1 ? 0 : 'D');
	EXPECT_EQ(th_pins(t), 0);
	EXPECT_EQ(fm_helpers_alive(), 0);
	EXPECT_LT(tn_cg_num(t, tn_victim, "memory.current"), 16LL << 20);
	EXPECT_EQ(tn_cg_remove(tn_victim), 0);
	if (!charged)
		SKIP("6.1's iommu_map() charges no page table to the memcg: %s "
		     "(nothing pinned or charged after the kill)",
		     oom_kills >= 1 ? "the OOM killer killed the mapper in an allocation "
				  "of the backend's own" : "the map completed");
}

int main(int argc, char **argv)
{
	return th_main(argc, argv);
}
