/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A small TAP harness in the style of the kernel's kselftest_harness.h.
 *
 *	TEST(name) { ... }		one test
 *	TEST_V12(name) { ... }		the same body twice: name/v1, name/v2
 *					(t->type is VFIO_TYPE1_IOMMU or
 *					VFIO_TYPE1v2_IOMMU, t->v2 says which)
 *
 * Every test runs in its own forked child, so a crash fails only that test.
 * Around each test the harness reads the pin counters (/proc/vmstat, after
 * forcing a per-cpu fold through /proc/sys/vm/stat_refresh) and VmLck:
 *  - in the child, after the body and after closing every fd the test
 *    registered (containers, groups): pins and VmLck must be back where they
 *    started;
 *  - in the parent, around the child's whole life: the pins must balance
 *    after the child exited (catches leaks on container release at exit).
 * Any imbalance fails the test and reports the delta.
 *
 * ASSERT_* report file:line and both values and end the test (teardown and
 * counter checks still run); EXPECT_* report and continue.  SKIP() is only
 * for a genuine capability absence and never counts as a pass.
 */
#ifndef FOLIOMAP_TESTS_HARNESS_H
#define FOLIOMAP_TESTS_HARNESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tools/vfio_util.h"

#define TH_MAX_TESTS	128
#define TH_MAX_FDS	32
#define TH_MAX_MEM	32
#ifndef TH_TIMEOUT
#define TH_TIMEOUT	120	/* seconds per test, TCG included; a program may define more */
#endif

struct th {
	const char *name;
	void (*fn)(struct th *t);
	int type;		/* VFIO_TYPE1_IOMMU, VFIO_TYPE1v2_IOMMU or 0 */
	bool v2;
	/* child-only state */
	int fds[TH_MAX_FDS];
	int nfds;
	struct { void *p; size_t size; } mem[TH_MAX_MEM];
	int nmem;
	bool failed;
	bool skipped;
	sigjmp_buf jmp;
	struct vu_counters start;
};

/* Shared with the parent through a MAP_SHARED page. */
struct th_result {
	int failed;
	int skipped;
	char reason[256];
};

static struct th th_tests[TH_MAX_TESTS];
static int th_ntests;
static struct th_result *th_res;

static inline void th_register(const char *name, void (*fn)(struct th *), int type)
{
	struct th *t;

	if (th_ntests == TH_MAX_TESTS) {
		fprintf(stderr, "harness: too many tests\n");
		exit(1);
	}
	t = &th_tests[th_ntests++];
	t->name = name;
	t->fn = fn;
	t->type = type;
	t->v2 = type == VFIO_TYPE1v2_IOMMU;
}

#define TEST(name)							\
	static void name(struct th *t);					\
	static void __attribute__((constructor)) th_reg_##name(void)	\
	{								\
		th_register(#name, name, 0);				\
	}								\
	static void name(struct th *t)

#define TEST_V12(name)							\
	static void name(struct th *t);					\
	static void __attribute__((constructor)) th_reg_##name(void)	\
	{								\
		th_register(#name "/v1", name, VFIO_TYPE1_IOMMU);	\
		th_register(#name "/v2", name, VFIO_TYPE1v2_IOMMU);	\
	}								\
	static void name(struct th *t)

/* ------------------------------------------------------------------ */
/* diagnostics */

static inline void th_diag(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	char *line, *save;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		printf("# %s\n", line);
	fflush(stdout);
}

static inline const char *th_errname(long long v)
{
	static const struct { int e; const char *n; } names[] = {
		{ EPERM, "EPERM" }, { ENOENT, "ENOENT" }, { EINTR, "EINTR" },
		{ EIO, "EIO" }, { E2BIG, "E2BIG" }, { EBADF, "EBADF" },
		{ EAGAIN, "EAGAIN" }, { ENOMEM, "ENOMEM" }, { EACCES, "EACCES" },
		{ EFAULT, "EFAULT" }, { EBUSY, "EBUSY" }, { EEXIST, "EEXIST" },
		{ ENODEV, "ENODEV" }, { EINVAL, "EINVAL" }, { ENOSPC, "ENOSPC" },
		{ ERANGE, "ERANGE" }, { ENOTTY, "ENOTTY" }, { ENOSYS, "ENOSYS" },
		{ EOVERFLOW, "EOVERFLOW" }, { EOPNOTSUPP, "EOPNOTSUPP" },
	};
	size_t i;

	if (v == 0)
		return "0";
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (v == -names[i].e)
			return names[i].n;
	return "?";
}

static inline void th_report(struct th *t, const char *file, int line,
			     const char *ea, const char *op, const char *eb,
			     long long a, long long b)
{
	th_diag("%s:%d: expected %s %s %s", file, line, ea, op, eb);
	th_diag("    %s = %lld (0x%llx)%s%s", ea, a, (unsigned long long)a,
		a < 0 && a > -4096 ? " -" : "", a < 0 && a > -4096 ? th_errname(a) : "");
	th_diag("    %s = %lld (0x%llx)%s%s", eb, b, (unsigned long long)b,
		b < 0 && b > -4096 ? " -" : "", b < 0 && b > -4096 ? th_errname(b) : "");
	t->failed = true;
}

static inline void __attribute__((noreturn)) th_abort(struct th *t)
{
	siglongjmp(t->jmp, 1);
}

#define TH_CMP(a, op, b, fatal, sa, sb) do {				\
	long long _a = (long long)(a), _b = (long long)(b);		\
	if (!(_a op _b)) {						\
		th_report(t, __FILE__, __LINE__, sa, #op, sb, _a, _b);	\
		if (fatal)						\
			th_abort(t);					\
	}								\
} while (0)

/*
 * The same on unsigned 64-bit values (IOVAs, which reach 2^64 - 1 behind
 * AMD-Vi): compared and printed unsigned.
 */
static inline void th_report_u(struct th *t, const char *file, int line,
			       const char *ea, const char *op, const char *eb,
			       unsigned long long a, unsigned long long b)
{
	th_diag("%s:%d: expected %s %s %s", file, line, ea, op, eb);
	th_diag("    %s = %llu (0x%llx)", ea, a, a);
	th_diag("    %s = %llu (0x%llx)", eb, b, b);
	t->failed = true;
}

#define TH_CMPU(a, op, b, fatal, sa, sb) do {				\
	unsigned long long _a = (a), _b = (b);				\
	if (!(_a op _b)) {						\
		th_report_u(t, __FILE__, __LINE__, sa, #op, sb, _a, _b);	\
		if (fatal)						\
			th_abort(t);					\
	}								\
} while (0)

#define ASSERT_EQ(a, b)	TH_CMP(a, ==, b, 1, #a, #b)
#define ASSERT_NE(a, b)	TH_CMP(a, !=, b, 1, #a, #b)
#define ASSERT_LT(a, b)	TH_CMP(a, <, b, 1, #a, #b)
#define ASSERT_LE(a, b)	TH_CMP(a, <=, b, 1, #a, #b)
#define ASSERT_GT(a, b)	TH_CMP(a, >, b, 1, #a, #b)
#define ASSERT_GE(a, b)	TH_CMP(a, >=, b, 1, #a, #b)
#define EXPECT_EQ(a, b)	TH_CMP(a, ==, b, 0, #a, #b)
#define EXPECT_NE(a, b)	TH_CMP(a, !=, b, 0, #a, #b)
#define EXPECT_LT(a, b)	TH_CMP(a, <, b, 0, #a, #b)
#define EXPECT_LE(a, b)	TH_CMP(a, <=, b, 0, #a, #b)
#define EXPECT_GT(a, b)	TH_CMP(a, >, b, 0, #a, #b)
#define EXPECT_GE(a, b)	TH_CMP(a, >=, b, 0, #a, #b)
#define EXPECT_LE_U(a, b)	TH_CMPU(a, <=, b, 0, #a, #b)
#define EXPECT_GT_U(a, b)	TH_CMPU(a, >, b, 0, #a, #b)
#define ASSERT_TRUE(c)	TH_CMP(!!(c), ==, 1, 1, #c, "true")
#define ASSERT_FALSE(c)	TH_CMP(!!(c), ==, 0, 1, #c, "false")
#define EXPECT_TRUE(c)	TH_CMP(!!(c), ==, 1, 0, #c, "true")
#define EXPECT_FALSE(c)	TH_CMP(!!(c), ==, 0, 0, #c, "false")

/* Fail now with a message (setup that could not be done, etc.). */
#define FAIL(...) do {							\
	th_diag("%s:%d: FAIL", __FILE__, __LINE__);			\
	th_diag(__VA_ARGS__);						\
	t->failed = true;						\
	th_abort(t);							\
} while (0)

/* Genuine capability absence only. */
#define SKIP(...) do {							\
	snprintf(th_res->reason, sizeof(th_res->reason), __VA_ARGS__);	\
	t->skipped = true;						\
	th_abort(t);							\
} while (0)

/* ------------------------------------------------------------------ */
/* resources released by the harness before the final counter check */

static inline int th_own_fd(struct th *t, int fd)
{
	if (fd >= 0 && t->nfds < TH_MAX_FDS)
		t->fds[t->nfds++] = fd;
	return fd;
}

/* Close an fd registered with th_own_fd before the test ends. */
static inline void th_close(struct th *t, int fd)
{
	int i;

	for (i = 0; i < t->nfds; i++) {
		if (t->fds[i] == fd) {
			t->fds[i] = -1;
			close(fd);
			return;
		}
	}
	close(fd);
}

static inline void *th_own_mem(struct th *t, void *p, size_t size)
{
	if (p && t->nmem < TH_MAX_MEM) {
		t->mem[t->nmem].p = p;
		t->mem[t->nmem].size = size;
		t->nmem++;
	}
	return p;
}

/* ------------------------------------------------------------------ */
/* counters */

/* Pins outstanding and VmLck (KiB) relative to the start of the test. */
static inline long long th_pins(struct th *t)
{
	struct vu_counters now;

	if (vu_counters_read(&now))
		FAIL("cannot read counters");
	return vu_pins_outstanding(&t->start, &now);
}

static inline long long th_vmlck_kb(struct th *t)
{
	struct vu_counters now;

	if (vu_counters_read(&now))
		FAIL("cannot read counters");
	return now.vmlck_kb - t->start.vmlck_kb;
}

/* ------------------------------------------------------------------ */
/* runner */

/*
 * FOLIOMAP_TIMEOUT_FACTOR (1 to 100; tests/check sets it for the debug
 * kernel, whose KASAN and lockdep make a guest several times slower)
 * multiplies TH_TIMEOUT; unset, the timeout is TH_TIMEOUT.
 */
static inline unsigned int th_timeout(void)
{
	const char *f = getenv("FOLIOMAP_TIMEOUT_FACTOR");
	long n = f ? strtol(f, NULL, 10) : 1;

	return TH_TIMEOUT * (unsigned int)(n >= 1 && n <= 100 ? n : 1);
}

static inline void th_child(struct th *t)
{
	struct vu_counters end;
	int i;

	alarm(th_timeout());
	if (vu_counters_read(&t->start)) {
		th_diag("cannot read /proc/vmstat pin counters or VmLck");
		th_res->failed = 1;
		return;
	}
	if (!sigsetjmp(t->jmp, 0))
		t->fn(t);

	for (i = t->nfds - 1; i >= 0; i--)
		if (t->fds[i] >= 0)
			close(t->fds[i]);
	t->nfds = 0;
	for (i = t->nmem - 1; i >= 0; i--)
		munmap(t->mem[i].p, t->mem[i].size);
	t->nmem = 0;

	if (vu_counters_read(&end)) {
		th_diag("cannot read counters after the test");
		t->failed = true;
	} else {
		long long pins = vu_pins_outstanding(&t->start, &end);
		long long lck = end.vmlck_kb - t->start.vmlck_kb;

		if (pins) {
			th_diag("fixture: %lld pages still pinned after teardown", pins);
			t->failed = true;
		}
		if (lck) {
			th_diag("fixture: VmLck changed by %lld kB after teardown", lck);
			t->failed = true;
		}
	}
	th_res->failed = t->failed;
	th_res->skipped = t->skipped && !t->failed;
}

static inline int th_run_one(struct th *t, int num)
{
	struct vu_counters before, after;
	bool parent_ok;
	int status, failed;
	pid_t pid;

	memset(th_res, 0, sizeof(*th_res));
	parent_ok = vu_counters_read(&before) == 0;
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		printf("not ok %d %s # fork: %s\n", num, t->name, strerror(errno));
		return 1;
	}
	if (pid == 0) {
		th_child(t);
		fflush(stdout);
		_exit(0);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	failed = th_res->failed;
	if (WIFSIGNALED(status)) {
		th_diag("test killed by signal %d%s", WTERMSIG(status),
			WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
		failed = 1;
	} else if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		th_diag("test exited with status %d", WEXITSTATUS(status));
		failed = 1;
	}
	if (parent_ok && vu_counters_read(&after) == 0) {
		long long pins = vu_pins_outstanding(&before, &after);

		if (pins) {
			th_diag("fixture: %lld pages still pinned after the test process exited",
				pins);
			failed = 1;
		}
	} else {
		th_diag("fixture: cannot read pin counters");
		failed = 1;
	}
	if (failed)
		printf("not ok %d %s\n", num, t->name);
	else if (th_res->skipped)
		printf("ok %d %s # SKIP %s\n", num, t->name, th_res->reason);
	else
		printf("ok %d %s\n", num, t->name);
	fflush(stdout);
	return failed;
}

/* Usage: prog [name-substring]: runs the tests whose name contains it. */
static inline int th_main(int argc, char **argv)
{
	const char *filter = argc > 1 ? argv[1] : NULL;
	int i, n = 0, num = 0, fails = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	th_res = mmap(NULL, sizeof(*th_res), PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (th_res == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (i = 0; i < th_ntests; i++)
		if (!filter || strstr(th_tests[i].name, filter))
			n++;
	printf("TAP version 13\n1..%d\n", n);
	th_diag("%s: backend %s", argv[0], vu_backend_name());
	for (i = 0; i < th_ntests; i++) {
		if (filter && !strstr(th_tests[i].name, filter))
			continue;
		fails += th_run_one(&th_tests[i], ++num);
	}
	return fails ? 1 : 0;
}

#define TEST_HARNESS_MAIN						\
	int main(int argc, char **argv)					\
	{								\
		return th_main(argc, argv);				\
	}

#endif
