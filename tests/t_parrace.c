// SPDX-License-Identifier: GPL-2.0-only
/*
 * Parallel pinning under forced interleavings: foliomap's test build holds
 * a chosen thread of a parallel MAP_DMA (a helper, or the caller) at a
 * chosen step (kmod/inject.h, <debugfs>/foliomap/pause) while the test
 * changes the world around it, then lets it go. Each test names the
 * interleaving it forces and fails if it was not reached.
 *
 *  - race_pfnmap_after_split: a device BAR is mmapped (MAP_FIXED) over
 *    the range a helper was about to fill, and the caller splits that
 *    range while the helper's batch is in flight;
 *  - race_recycled_slot: helper 1 is held just after landing the last
 *    batch of its chunk while the ring slot of that chunk is claimed
 *    again by helper 2;
 *  - race_held_at_end: a helper holds a filled batch while the caller
 *    finishes the map without it;
 *  - jobctl_*: a helper held where it returns to its worker loop while the
 *    process is group-stopped (SIGSTOP sent to the helper, the thread that
 *    then meets it), the helper is ptrace-stopped, or the process's cgroup
 *    is frozen: the MAP_DMA must complete, and the stop or freeze must
 *    take effect, without waiting for the helper;
 *  - policy_rt_caller: the helpers of a SCHED_FIFO caller run SCHED_OTHER.
 *
 * After every map: the result is stock's (0 here), every sampled IOVA
 * reads, through the edu device, the tag of the page the process had at
 * that address (so no IOVA is shifted), nothing is mapped past the end,
 * and pins, VmLck and the charge balance.
 *
 * foliomap's test build only (tests/check's foliomap-test guests); the
 * other guests do not run it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "edu.h"
#include "fmstats.h"

#define PZ_FILE		FM_DEBUGFS "/pause"
#define PR_IOVA		0x1000000ULL	/* 16 MiB: below edu's 28-bit mask */
#define PR_SCRATCH	0x800000ULL	/* edu's landing page for the tags */
#define PR_TAG(off)	(0xf011a9a000000000ULL | (uint64_t)(off))
#define PR_WINDOW_PER_THREAD	2	/* parallel.c's ring: 2 chunks per thread */
#define PR_ANY_HELPER	99

/* ------------------------------------------------------------------ */
/* the pause points */

/* Write @s to @path: 0 or -errno. */
static int pr_write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		ret = -errno;
	close(fd);
	return ret;
}

static int pz_cmd(const char *fmt, ...)
{
	char buf[96];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return pr_write_file(PZ_FILE, buf);
}

#define PZ(...)	ASSERT_EQ(pz_cmd(__VA_ARGS__), 0)

/* Is @who held at @point? *@at: the vaddr it is held at. */
static bool pz_held(unsigned int who, const char *point, unsigned long *at)
{
	char line[160], p[16], state[16];
	unsigned int w, nth, hits;
	unsigned long a;
	bool held = false;
	FILE *f = fopen(PZ_FILE, "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%u %15s %u %u %15s %lx", &w, p, &nth, &hits, state, &a) == 6 &&
		    w == who && !strcmp(p, point) && !strcmp(state, "held")) {
			held = true;
			if (at)
				*at = a;
		}
	fclose(f);
	return held;
}

/* The pause points' state, as diagnostics. */
static void pz_dump(void)
{
	char line[160];
	FILE *f = fopen(PZ_FILE, "r");

	while (f && fgets(line, sizeof(line), f))
		th_diag("pause: %s", strtok(line, "\n"));
	if (f)
		fclose(f);
}

static bool pz_wait_held(unsigned int who, const char *point, int ms, unsigned long *at)
{
	double t0 = vu_now();

	while (!pz_held(who, point, at)) {
		if (vu_now() - t0 > ms / 1000.0)
			return false;
		usleep(2000);
	}
	return true;
}

/*
 * foliomap's test build with helpers, parallel pinning from the first
 * bytes on with @threads helpers, nothing armed.
 */
static void pr_need(struct th *t, int threads)
{
	if (!is_foliomap())
		SKIP("foliomap's helper threads");
	if (!th_helpers_possible())
		SKIP("no helper threads on this kernel");
	th_mount(t, "debugfs", DEBUGFS);
	if (access(PZ_FILE, W_OK))
		SKIP("not foliomap's test build (tests/check's foliomap-test guests)");
	PZ("clear");
	ASSERT_EQ(th_param_write("pin_threads", threads), 0);
	ASSERT_EQ(th_param_write("pin_parallel_min_mb", 0), 0);
}

/* foliomap's counter @name of the newest container. */
static long long par_stat_of(struct th *t, const char *name)
{
	return stat_of(newest_container(t), name);
}

/* ------------------------------------------------------------------ */
/* memory, tags and the checks after a map */

/*
 * Private 4K anonymous memory never touched, @size of it from a 32 MiB
 * boundary (parallel.c's chunks are aligned to at most that: the same
 * chunks in every run), with 4 MiB more after the end: a fill that ran
 * past the end of the mapping would find pages to pin there. Not
 * registered with the harness: munmap(*@res, PR_MEM_LEN(@size)).
 */
#define PR_ALIGN		(16 * SZ_2M)
#define PR_MEM_LEN(size)	((size) + PR_ALIGN + 2 * SZ_2M)

static char *pr_mem4k_raw(size_t size, char **res)
{
	char *p;

	*res = mmap(NULL, PR_MEM_LEN(size), PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (*res == MAP_FAILED)
		return NULL;
	p = (char *)(((uintptr_t)*res + PR_ALIGN - 1) & ~(PR_ALIGN - 1));
	if (vu_madvise_thp(p, size + 2 * SZ_2M, MADV_NOHUGEPAGE))
		return NULL;
	return p;
}

/* The same, registered with the harness. */
static char *pr_mem4k(struct th *t, size_t size)
{
	char *res, *p = pr_mem4k_raw(size, &res);

	ASSERT_NE(p, NULL);
	th_own_mem(t, res, PR_MEM_LEN(size));
	return p;
}

/* Tag every page of [@p + @from, @p + @to) with its offset. */
static void pr_tag(char *p, size_t from, size_t to)
{
	size_t off;

	for (off = from; off < to; off += SZ_4K)
		*(volatile uint64_t *)(p + off) = PR_TAG(off);
}

struct pr_fix {
	int c, gfd;
	struct edu e;
	char *scratch;
	int bar_dev;
	struct vfio_region_info bar;
};

/* A v2 container with the edu group, edu open. */
static void pr_setup(struct th *t, struct pr_fix *f)
{
	f->c = edu_container(t, VFIO_TYPE1v2_IOMMU, &f->gfd);
	edu_open(t, f->gfd, &f->e);
	f->scratch = th_anon(t, SZ_4K);
	f->bar_dev = -1;
}

/* The ivshmem group in the container too, and its BAR2's region. */
static void pr_setup_bar(struct th *t, struct pr_fix *f)
{
	const char *bdf = getenv("VFIO_IVSHMEM_BDF");
	int g, gfd;

	if (!bdf || !*bdf)
		FAIL("no ivshmem device (vm/run --ivshmem sets VFIO_IVSHMEM_BDF)");
	g = vu_group_of_bdf(bdf);
	ASSERT_GE(g, 0);
	gfd = vu_group_attach(f->c, g);
	if (gfd < 0)
		FAIL("attach ivshmem group %d: %s", g, strerror(-gfd));
	th_own_fd(t, gfd);
	f->bar_dev = th_device_fd(t, gfd, bdf);
	th_bus_master(t, f->bar_dev);
	f->bar = (struct vfio_region_info){ .argsz = sizeof(f->bar),
					    .index = VFIO_PCI_BAR2_REGION_INDEX };
	ASSERT_EQ(ioctl(f->bar_dev, VFIO_DEVICE_GET_REGION_INFO, &f->bar), 0);
	ASSERT_TRUE(f->bar.flags & VFIO_REGION_INFO_FLAG_MMAP);
	ASSERT_GE(f->bar.size, 16 * SZ_2M);
}

/*
 * Through the device: the page at IOVA @iova + off holds the tag of @off,
 * for @nspread offsets spread over @size and every offset in @must.
 */
static void pr_check_tags(struct th *t, struct pr_fix *f, uint64_t iova, size_t size,
			  const size_t *must, int nmust, int nspread)
{
	size_t offs[48];
	int n = 0, i, bad = 0;

	for (i = 0; i < nmust && n < 24; i++)
		offs[n++] = must[i] & ~(SZ_4K - 1);
	for (i = 0; i < nspread && i < 16; i++)
		offs[n++] = (size / nspread * i + (size_t)i * 0x5000) % size & ~(SZ_4K - 1);
	offs[n++] = size - SZ_4K;
	for (i = 0; i < n; i++)
		EDU_FROM_RAM(&f->e, iova + offs[i], i * 8, 8);
	memset(f->scratch, 0, SZ_4K);
	/* Mapped only meanwhile: the tests' counts are the mapping's alone. */
	MAP_OK(f->c, PR_SCRATCH, f->scratch, SZ_4K);
	EDU_TO_RAM(&f->e, 0, PR_SCRATCH, n * 8);
	UNMAP_OK(f->c, PR_SCRATCH, SZ_4K);
	for (i = 0; i < n; i++) {
		uint64_t got = ((volatile uint64_t *)f->scratch)[i];

		if (got != PR_TAG(offs[i]) && bad++ < 4)
			th_diag("IOVA +0x%zx reads 0x%llx, not its page's tag 0x%llx", offs[i],
				(unsigned long long)got, (unsigned long long)PR_TAG(offs[i]));
	}
	EXPECT_EQ(bad, 0);
}

/* Nothing is mapped in the IOMMU just past [@iova, @iova + @size). */
static void pr_check_end(struct th *t, struct pr_fix *f, uint64_t iova, size_t size)
{
	char *g = th_anon(t, SZ_2M);

	MAP_OK(f->c, iova + size, g, SZ_2M);
	UNMAP_OK(f->c, iova + size, SZ_2M);
}

struct pr_map {
	int	c;
	char	*p;
	size_t	size;
	int	policy;		/* of the mapping thread: SCHED_OTHER or SCHED_FIFO */
};

static long pr_map_call(void *arg)
{
	struct pr_map *m = arg;

	if (m->policy != SCHED_OTHER) {
		struct sched_param sp = { .sched_priority = 1 };

		if (pthread_setschedparam(pthread_self(), m->policy, &sp))
			return -1000;
	}
	return vu_map(m->c, PR_IOVA, m->p, m->size, RW);
}

/* The map of @m returns within 120 s; its result. */
static long pr_join(struct th *t, struct th_call *call)
{
	if (!th_call_wait(call, 120000)) {
		pz_cmd("clear");
		FAIL("MAP_DMA did not return within 120 s");
	}
	return th_call_join(call);
}

/* ------------------------------------------------------------------ */

/*
 * A helper is held with its range claimed (fill); its range becomes a
 * device BAR (mmap MAP_FIXED over never-touched memory); it fills and is
 * held again before landing (filled) while the caller, needing that
 * range, splits it and is held (split); then the helper lands. The
 * helper's batch may cover no more than the range it still owns: the map
 * must succeed with the BAR's pfns exactly where the BAR is, anonymous
 * pages elsewhere, nothing past the end.
 */
TEST(race_pfnmap_after_split)
{
	/* Not a whole number of batches: a fill past the end has pages to take. */
	const size_t size = 64 * SZ_2M - 2 * SZ_4K, bar_len = 8 * SZ_2M;
	struct pr_fix f;
	struct th_call call;
	struct pr_map m;
	unsigned long at;
	size_t off, len, must[4];
	char *p;
	void *b;

	pr_need(t, 1);
	pr_setup(t, &f);
	pr_setup_bar(t, &f);
	p = pr_mem4k(t, size);
	PZ("arm 1 fill 1");
	PZ("arm 1 filled 1");
	PZ("arm 0 split 1");
	PZ("arm 1 landed 1");
	m = (struct pr_map){ .c = f.c, .p = p, .size = size };
	th_call_start(t, &call, pr_map_call, &m);

	ASSERT_TRUE(pz_wait_held(1, "fill", 60000, &at));
	off = at - (uintptr_t)p;
	ASSERT_LT(off, size);
	len = size - off < bar_len ? size - off : bar_len;
	th_diag("helper 1 held at +0x%zx; BAR over [+0x%zx, +0x%zx)", off, off, off + len);
	b = mmap(p + off, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, f.bar_dev,
		 f.bar.offset);
	ASSERT_EQ(b, p + off);
	pr_tag(p, off, off + len);
	PZ("release 1 fill");

	ASSERT_TRUE(pz_wait_held(1, "filled", 60000, NULL));
	if (!pz_wait_held(0, "split", 20000, NULL)) {
		pz_dump();
		pz_cmd("clear");
		th_diag("map: %ld", pr_join(t, &call));
		FAIL("the caller never split the helper's range: interleaving not reached");
	}
	PZ("release 1 filled");
	ASSERT_TRUE(pz_wait_held(1, "landed", 60000, NULL));
	PZ("release 1 landed");
	PZ("release 0 split");
	ASSERT_EQ(pr_join(t, &call), 0);

	/* The BAR's pages are not pinned or charged; every other page is. */
	EXPECT_ACCT((size - len) / SZ_4K);
	pr_tag(p, 0, off);
	pr_tag(p, off + len, size);
	must[0] = off;
	must[1] = off + 2 * SZ_2M - SZ_4K;
	must[2] = off + 2 * SZ_2M;
	must[3] = off + len - SZ_4K;
	pr_check_tags(t, &f, PR_IOVA, size, must, 4, 16);
	pr_check_end(t, &f, PR_IOVA, size);
	UNMAP_OK(f.c, PR_IOVA, size);
	EXPECT_ACCT(0);
	munmap(p + off, len);
}

/*
 * With two helpers and one batch per chunk (4 MiB): helper 1 is held just
 * after landing its chunk k; the caller consumes chunk k, and helper 2
 * claims chunk k + window, which lives in the same ring slot, and is held
 * before its fill. Helper 1 then goes on: it must not touch the slot it
 * no longer owns: the caller, coming to helper 2's chunk, must not split
 * it where helper 2's batch in flight starts (that batch forgotten). Then
 * helper 2. Up to eight maps, until helper 2 is the one to claim that
 * chunk (the caller may claim it first).
 */
TEST(race_recycled_slot)
{
	/* Chunks of one batch, 4 MiB; the end not a whole number of them. */
	const size_t size = 40 * SZ_2M - 2 * SZ_4K, chunk = 2 * SZ_2M;
	const unsigned long window = PR_WINDOW_PER_THREAD * 3;
	int attempt, reached = 0;
	struct pr_fix f;

	pr_need(t, 2);
	pr_setup(t, &f);
	for (attempt = 1; attempt <= 8 && !reached; attempt++) {
		char *p = pr_mem4k(t, size);
		struct pr_map m = { .c = f.c, .p = p, .size = size };
		struct th_call call;
		unsigned long at, target;
		size_t must[2];
		bool split;

		PZ("clear");
		PZ("arm 1 landed 1");
		th_call_start(t, &call, pr_map_call, &m);
		ASSERT_TRUE(pz_wait_held(1, "landed", 60000, &at));
		target = at + window * chunk;
		if (target + chunk <= (uintptr_t)p + size) {
			PZ("arm %d fill 1 %lx", PR_ANY_HELPER, target);
			reached = pz_wait_held(PR_ANY_HELPER, "fill", 5000, NULL);
		}
		th_diag("attempt %d: helper 1 held after landing +0x%lx; chunk +0x%lx %s",
			attempt, at - (uintptr_t)p, target - (uintptr_t)p,
			reached ? "held by helper 2 before its fill" : "not claimed by helper 2");
		PZ("release 1 landed");
		if (reached) {
			/*
			 * Helper 1 runs on with the slot claimed again. Had it
			 * written to the slot, the caller would split helper
			 * 2's chunk where its batch in flight starts: give it
			 * time to get there, then let helper 2 land.
			 */
			PZ("arm 0 split 1 %lx", target);
			split = pz_wait_held(0, "split", 3000, NULL);
			th_diag("the caller %s helper 2's chunk at its start",
				split ? "split" : "did not split");
			/*
			 * A split leaves the front the batch in flight: one at
			 * the chunk's start means that batch was forgotten.
			 */
			EXPECT_FALSE(split);
			PZ("release %d fill", PR_ANY_HELPER);
		}
		PZ("clear");
		ASSERT_EQ(pr_join(t, &call), 0);
		EXPECT_ACCT(size / SZ_4K);
		pr_tag(p, 0, size);
		must[0] = target - (uintptr_t)p;
		must[1] = must[0] + chunk - SZ_4K;
		pr_check_tags(t, &f, PR_IOVA, size, must, reached ? 2 : 0, 16);
		pr_check_end(t, &f, PR_IOVA, size);
		UNMAP_OK(f.c, PR_IOVA, size);
		EXPECT_ACCT(0);
	}
	if (!reached)
		FAIL("helper 2 never claimed the recycled slot's chunk in 8 maps");
}

/*
 * A helper holds a filled batch (filled) while the caller takes its range
 * over and completes the map; then it is let go. The map succeeds with
 * exactly its own pages, and the helper's batch is dropped.
 */
TEST(race_held_at_end)
{
	const size_t size = 32 * SZ_2M;
	struct pr_fix f;
	struct th_call call;
	struct pr_map m;
	char *p;

	pr_need(t, 1);
	pr_setup(t, &f);
	p = pr_mem4k(t, size);
	PZ("arm 1 filled 1");
	m = (struct pr_map){ .c = f.c, .p = p, .size = size };
	th_call_start(t, &call, pr_map_call, &m);
	ASSERT_TRUE(pz_wait_held(1, "filled", 60000, NULL));
	/* The caller finishes what it can alone meanwhile. */
	usleep(1000000);
	PZ("release 1 filled");
	ASSERT_EQ(pr_join(t, &call), 0);
	EXPECT_ACCT(size / SZ_4K);
	pr_tag(p, 0, size);
	pr_check_tags(t, &f, PR_IOVA, size, NULL, 0, 16);
	pr_check_end(t, &f, PR_IOVA, size);
	UNMAP_OK(f.c, PR_IOVA, size);
	EXPECT_ACCT(0);
}

/* ------------------------------------------------------------------ */
/* job control */

enum pr_jobctl { PR_SIGSTOP, PR_PTRACE, PR_FREEZE };

/* The first thread of @pid whose comm is the helpers', or 0. */
static pid_t pr_helper_tid(pid_t pid)
{
	char path[320], comm[64];
	struct dirent *e;
	pid_t tid = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return 0;
	while (!tid && (e = readdir(d))) {
		FILE *fc;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", pid, e->d_name);
		fc = fopen(path, "r");
		if (!fc)
			continue;
		if (fgets(comm, sizeof(comm), fc) &&
		    !strncmp(comm, FM_HELPER_COMM, strlen(FM_HELPER_COMM)))
			tid = atoi(e->d_name);
		fclose(fc);
	}
	closedir(d);
	return tid;
}

/* "frozen 1" in @cg's cgroup.events within @ms. */
static bool pr_cg_frozen_within(const char *cg, int ms)
{
	char path[160], line[64];
	double t0 = vu_now();

	snprintf(path, sizeof(path), "%s/cgroup.events", cg);
	for (;;) {
		FILE *fe = fopen(path, "r");
		bool frozen = false;

		if (fe) {
			while (fgets(line, sizeof(line), fe))
				frozen |= !strcmp(line, "frozen 1\n");
			fclose(fe);
		}
		if (frozen)
			return true;
		if (vu_now() - t0 > ms / 1000.0)
			return false;
		usleep(5000);
	}
}

/*
 * A child maps 64 MiB never touched with one helper, which is held at
 * "landed", where it returns to its worker loop next. The parent stops the
 * process (@how), lets the helper go, and checks the stop took effect
 * without the MAP_DMA waiting for the stopped helper; then resumes it.
 */
static void pr_jobctl(struct th *t, enum pr_jobctl how)
{
	const size_t size = 32 * SZ_2M;
	char cg[96], ch = 0, pidbuf[16];
	int groups[1], sync[2], res[2], st;
	pid_t pid, tid = 0;
	bool ok;

	pr_need(t, 1);
	th_e1000e_groups(t, groups, 1);
	snprintf(cg, sizeof(cg), "/sys/fs/cgroup/t_parrace.%d", getpid());
	if (how == PR_FREEZE) {
		if (access("/sys/fs/cgroup/cgroup.controllers", F_OK)) {
			mkdir("/sys/fs/cgroup", 0755);
			ASSERT_EQ(mount("cgroup2", "/sys/fs/cgroup", "cgroup2", 0, NULL), 0);
		}
		ASSERT_EQ(mkdir(cg, 0755), 0);
	}
	PZ("arm 1 landed 1");
	ASSERT_EQ(pipe(sync), 0);
	ASSERT_EQ(pipe(res), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		int gfd, c = vu_container_setup(groups, 1, VFIO_TYPE1v2_IOMMU, &gfd);
		char go, r;

		if (c < 0 || read(sync[0], &go, 1) != 1)
			_exit(2);
		r = vu_map(c, PR_IOVA, pr_mem4k(t, size), size, RW) ? 'E' : 'D';
		if (write(res[1], &r, 1) != 1)
			_exit(3);
		pause();
		_exit(0);
	}
	close(res[1]);
	if (how == PR_FREEZE) {
		char path[128];

		snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
		snprintf(pidbuf, sizeof(pidbuf), "%d", pid);
		EXPECT_EQ(pr_write_file(path, pidbuf), 0);
	}
	ASSERT_EQ(write(sync[1], "g", 1), 1);
	ok = pz_wait_held(1, "landed", 60000, NULL);
	EXPECT_TRUE(ok);
	if (ok) {
		char path[128];

		switch (how) {
		case PR_SIGSTOP:
			/* To the helper: it is the thread to meet the stop. */
			tid = pr_helper_tid(pid);
			EXPECT_GT(tid, 0);
			EXPECT_EQ(syscall(SYS_tgkill, pid, tid, SIGSTOP), 0);
			break;
		case PR_PTRACE:
			tid = pr_helper_tid(pid);
			EXPECT_GT(tid, 0);
			EXPECT_EQ(ptrace(PTRACE_SEIZE, tid, 0, 0), 0);
			EXPECT_EQ(ptrace(PTRACE_INTERRUPT, tid, 0, 0), 0);
			break;
		case PR_FREEZE:
			snprintf(path, sizeof(path), "%s/cgroup.freeze", cg);
			EXPECT_EQ(pr_write_file(path, "1"), 0);
			break;
		}
		usleep(100000);
	}
	PZ("release 1 landed");

	switch (how) {
	case PR_SIGSTOP:
		/* The whole group stops: the caller too, its map done. */
		ok = false;
		for (int i = 0; i < 500 && !ok; i++) {
			pid_t w = waitpid(pid, &st, WUNTRACED | WNOHANG);

			ok = w == pid && WIFSTOPPED(st);
			if (!ok)
				usleep(10000);
		}
		EXPECT_TRUE(ok);
		kill(pid, SIGCONT);
		ASSERT_EQ(read(res[0], &ch, 1), 1);
		break;
	case PR_PTRACE: {
		struct pollfd pfd = { .fd = res[0], .events = POLLIN };

		/* The helper is in a ptrace stop: the map returns all the same. */
		ok = poll(&pfd, 1, 5000) == 1 && read(res[0], &ch, 1) == 1;
		EXPECT_TRUE(ok);
		if (tid > 0) {
			EXPECT_EQ(waitpid(tid, &st, __WALL), tid);
			EXPECT_EQ(ptrace(PTRACE_DETACH, tid, 0, 0), 0);
		}
		if (!ok)
			ASSERT_EQ(read(res[0], &ch, 1), 1);
		break;
	}
	case PR_FREEZE: {
		char path[128];

		EXPECT_TRUE(pr_cg_frozen_within(cg, 5000));
		snprintf(path, sizeof(path), "%s/cgroup.freeze", cg);
		EXPECT_EQ(pr_write_file(path, "0"), 0);
		ASSERT_EQ(read(res[0], &ch, 1), 1);
		break;
	}
	}
	EXPECT_EQ(ch, 'D');
	kill(pid, SIGKILL);
	th_reap(t, pid);
	close(res[0]);
	close(sync[0]);
	close(sync[1]);
	if (how == PR_FREEZE) {
		for (int i = 0; i < 200 && rmdir(cg); i++)
			usleep(10000);
	}
	EXPECT_EQ(th_pins(t), 0);
	EXPECT_EQ(fm_helpers_alive(), 0);
}

TEST(jobctl_sigstop)
{
	pr_jobctl(t, PR_SIGSTOP);
}

TEST(jobctl_ptrace_helper)
{
	pr_jobctl(t, PR_PTRACE);
}

TEST(jobctl_cgroup_freeze)
{
	pr_jobctl(t, PR_FREEZE);
}

/*
 * A SCHED_FIFO caller's helper runs SCHED_OTHER: a real-time task's map
 * may use idle CPUs, never run bulk page faults at its priority on others.
 */
TEST(policy_rt_caller)
{
	const size_t size = 32 * SZ_2M;
	struct pr_fix f;
	struct th_call call;
	struct pr_map m;
	pid_t tid;
	char *p;

	pr_need(t, 1);
	pr_setup(t, &f);
	p = pr_mem4k(t, size);
	PZ("arm 1 fill 1");
	m = (struct pr_map){ .c = f.c, .p = p, .size = size, .policy = SCHED_FIFO };
	th_call_start(t, &call, pr_map_call, &m);
	ASSERT_TRUE(pz_wait_held(1, "fill", 60000, NULL));
	tid = pr_helper_tid(getpid());
	EXPECT_GT(tid, 0);
	if (tid > 0)
		EXPECT_EQ(sched_getscheduler(tid), SCHED_OTHER);
	PZ("release 1 fill");
	ASSERT_EQ(pr_join(t, &call), 0);
	EXPECT_ACCT(size / SZ_4K);
	UNMAP_OK(f.c, PR_IOVA, size);
	EXPECT_ACCT(0);
}

/* ------------------------------------------------------------------ */
/* stress: random pauses, memory changing under the map */

/*
 * What the mutator may put at a 2 MiB piece of the region: fresh
 * anonymous memory, the BAR (device memory), a 2 MiB hugetlbfs page, a
 * read-only stretch (put back after a while), or MADV_DONTNEED. Every page
 * that is ever at offset o of the region holds PR_TAG(o) before anything
 * can pin it, so that the device reading PR_TAG(o) at IOVA + o proves the
 * mapping is not shifted, whatever was there when it was pinned.
 */
enum pr_op { PR_OP_ANON, PR_OP_BAR, PR_OP_HUGETLB, PR_OP_RDONLY, PR_OP_DONTNEED, PR_NOPS };

struct pr_mutator {
	struct pr_fix	*f;
	char		*p;
	size_t		size;
	unsigned int	seed;
	volatile int	stop;
	unsigned long	ops[PR_NOPS];
};

static void *pr_mutate(void *arg)
{
	struct pr_mutator *m = arg;
	size_t pieces = m->size / SZ_2M;
	int i;

	/* From when the helpers run: before, the map would just stay serial. */
	for (i = 0; i < 2000 && !m->stop && !pr_helper_tid(getpid()); i++)
		usleep(500);

	while (!m->stop) {
		/* The first quarter is pinned before helpers may join. */
		size_t off = (pieces / 4 + rand_r(&m->seed) % (pieces - pieces / 4 - 1)) * SZ_2M;
		enum pr_op op = rand_r(&m->seed) % PR_NOPS;
		char *at = m->p + off;
		void *r = MAP_FAILED;

		switch (op) {
		case PR_OP_ANON:
			r = mmap(at, SZ_2M, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			break;
		case PR_OP_BAR:
			/* BAR page o for region offset o: its tag never changes. */
			if (m->f->bar_dev >= 0 && off + SZ_2M <= m->f->bar.size)
				r = mmap(at, SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
					 m->f->bar_dev, m->f->bar.offset + off);
			break;
		case PR_OP_HUGETLB:
			r = mmap(at, SZ_2M, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_FIXED, -1, 0);
			break;
		case PR_OP_RDONLY:
			if (!mprotect(at, SZ_2M, PROT_READ)) {
				usleep(rand_r(&m->seed) % 3000);
				mprotect(at, SZ_2M, PROT_READ | PROT_WRITE);
				m->ops[op]++;
			}
			break;
		case PR_OP_DONTNEED:
			if (!madvise(at, SZ_2M, MADV_DONTNEED)) {
				pr_tag(m->p, off, off + SZ_2M);
				m->ops[op]++;
			}
			break;
		default:
			break;
		}
		if (r == at) {
			pr_tag(m->p, off, off + SZ_2M);
			m->ops[op]++;
		} else if (r != MAP_FAILED) {
			munmap(r, SZ_2M);
		}
		usleep(rand_r(&m->seed) % 2000);
	}
	return NULL;
}

/* Seconds the stress test runs: FOLIOMAP_STRESS_SECONDS, else 20. */
static int pr_stress_seconds(void)
{
	const char *s = getenv("FOLIOMAP_STRESS_SECONDS");
	int n = s ? atoi(s) : 0;

	return n > 0 ? n : 20;
}

/*
 * Parallel maps of 48 MiB with helpers paused at random (30% of their
 * steps, up to 3 ms) while a thread changes the memory under the range
 * that is not pinned yet. Each map either fails with one of stock's
 * errnos, leaving nothing pinned or charged, or maps every sampled IOVA to
 * its offset's page and nothing past the end; after each unmap nothing is
 * pinned or charged.
 */
TEST(stress_mutations)
{
	const size_t size = 24 * SZ_2M - 3 * SZ_4K;
	int seconds = pr_stress_seconds(), maps = 0, ok = 0, efault = 0, other = 0;
	long long pmaps0, take0;
	struct pr_fix f;
	double t0;

	pr_need(t, 2);
	pr_setup(t, &f);
	pr_setup_bar(t, &f);
	PZ("random 300 3000");
	pmaps0 = par_stat_of(t, "parallel_maps");
	take0 = par_stat_of(t, "parallel_takeovers");
	t0 = vu_now();
	while (vu_now() - t0 < seconds) {
		struct pr_mutator mu = { .f = &f, .size = size, .seed = 1000 + maps };
		char *res, *p = pr_mem4k_raw(size, &res);
		struct pr_map m = { .c = f.c, .p = p, .size = size };
		struct th_call call;
		pthread_t mt;
		size_t must[6];
		long ret;
		int i;

		ASSERT_NE(p, NULL);
		/* Present 4K pages: helpers join, every page tagged. */
		pr_tag(p, 0, size);
		mu.p = p;
		th_call_start(t, &call, pr_map_call, &m);
		ASSERT_EQ(pthread_create(&mt, NULL, pr_mutate, &mu), 0);
		ret = pr_join(t, &call);
		mu.stop = 1;
		pthread_join(mt, NULL);
		maps++;
		if (ret) {
			if (ret == -EFAULT)
				efault++;
			else
				other++;
			if (ret != -EFAULT)
				th_diag("map %d: %ld (%s)", maps, ret, th_errname(ret));
			EXPECT_EQ(ret, -EFAULT);
			EXPECT_ACCT(0);
			munmap(res, PR_MEM_LEN(size));
			continue;
		}
		ok++;
		for (i = 0; i < 6; i++)
			must[i] = (size_t)rand_r(&mu.seed) % size;
		pr_check_tags(t, &f, PR_IOVA, size, must, 6, 2);
		pr_check_end(t, &f, PR_IOVA, size);
		UNMAP_OK(f.c, PR_IOVA, size);
		EXPECT_ACCT(0);
		munmap(res, PR_MEM_LEN(size));
		if (t->failed)
			break;
	}
	PZ("clear");
	th_diag("%d maps in %.0f s: %d mapped, %d -EFAULT, %d other; %lld parallel, %lld batches taken over",
		maps, vu_now() - t0, ok, efault, other, par_stat_of(t, "parallel_maps") - pmaps0,
		par_stat_of(t, "parallel_takeovers") - take0);
	EXPECT_GE(maps, 3);
	EXPECT_GE(par_stat_of(t, "parallel_maps") - pmaps0, maps / 2);
}

int main(int argc, char **argv)
{
	bool fm = is_foliomap();
	long long threads = fm ? th_param_read("pin_threads") : 0;
	long long min_mb = fm ? th_param_read("pin_parallel_min_mb") : 0;
	int ret = th_main(argc, argv);

	/* Whatever a test left: nothing held, the module's settings back. */
	if (fm) {
		pz_cmd("clear");
		if (th_param_write("pin_threads", threads) ||
		    th_param_write("pin_parallel_min_mb", min_mb)) {
			printf("# t_parrace: cannot restore pin_threads and pin_parallel_min_mb\n");
			ret = 1;
		}
	}
	return ret;
}
