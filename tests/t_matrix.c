// SPDX-License-Identifier: GPL-2.0-only
/*
 * The workload matrix's operations under the kernel's bug finders: every row
 * of tools/matrix-bench (first touch, copy-on-write, small calls, vIOMMU
 * churn, 65535 mappings, replay into a shared and a first domain, v1 partial
 * unmap, an mdev's pin_pages) runs once on the backend under test, so that
 * KASAN, lockdep, UBSAN and kmemleak see each of them. A test passes when
 * matrix-bench's own checks pass (every step succeeded; pins and VmLck back
 * where they were after each step: its exit status 0) and, as everywhere,
 * nothing stays pinned. Its times mean nothing here and are not looked at.
 *
 * Runs on a kernel with fault injection (the debug kernel, make check-debug)
 * or with FOLIOMAP_MATRIX=1; elsewhere the program plans no tests (1..0):
 * make bench runs the same rows on the production kernels.
 */
#include <sys/wait.h>

/* Per test; the debug kernel multiplies it (FOLIOMAP_TIMEOUT_FACTOR). */
#define TH_TIMEOUT	900

#include "common.h"
#include "emu_dev.h"

static char repo[PATH_MAX];

/*
 * Run matrix-bench over the rows starting with @prefix, one loop, no
 * warm-up, on whichever backend serves new containers (no switching: the
 * guest loaded the backend under test). Its text goes into the TAP as
 * diagnostics; returns its exit status, or -1 when it did not exit.
 */
static int run_rows(struct th *t, const char *prefix)
{
	char bench[PATH_MAX + 32], emu[PATH_MAX + 128], out[] = "/tmp/t_matrix.XXXXXX";
	const char *backend = vu_backend_name();
	char line[512];
	int fd, status;
	FILE *f;
	pid_t pid;

	ASSERT_EQ(emu_module_path(emu, sizeof(emu)), 0);
	snprintf(bench, sizeof(bench), "%s/tools/matrix-bench", repo);
	ASSERT_EQ(access(bench, X_OK), 0);
	fd = mkstemp(out);
	ASSERT_GE(fd, 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (!pid) {
		dup2(fd, 1);
		dup2(fd, 2);
		execl(bench, "matrix-bench", "--backends", backend, "--loops", "1",
		      "--warmup", "0", "--rows", prefix, "--ft-mib", "64",
		      "--emu-ko", emu, (char *)NULL);
		_exit(127);
	}
	close(fd);
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	f = fopen(out, "r");
	/* Its own "# " comments lose theirs: one level of TAP comment. */
	while (f && fgets(line, sizeof(line), f))
		th_diag("%s", strncmp(line, "# ", 2) ? line : line + 2);
	if (f)
		fclose(f);
	unlink(out);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define MATRIX_TEST(name, prefix)					\
	TEST(name)							\
	{								\
		EXPECT_EQ(run_rows(t, prefix), 0);			\
	}

MATRIX_TEST(matrix_first_touch, "ft-")
MATRIX_TEST(matrix_cow_thp, "cow-")
MATRIX_TEST(matrix_small_calls, "small-")
MATRIX_TEST(matrix_churn, "churn")
MATRIX_TEST(matrix_many_mappings, "many-")
MATRIX_TEST(matrix_replay, "replay")
MATRIX_TEST(matrix_partial_v1, "partial-")
MATRIX_TEST(matrix_emu_pin, "emu-")

int main(int argc, char **argv)
{
	const char *force = getenv("FOLIOMAP_MATRIX");

	if (access("/proc/thread-self/fail-nth", F_OK) && !(force && !strcmp(force, "1"))) {
		printf("TAP version 13\n1..0\n# t_matrix: not a debug kernel (no fault"
		       " injection; FOLIOMAP_MATRIX=1 runs it anyway)\n");
		return 0;
	}
	/* tests/bin/t_matrix: the repository is two levels up. */
	if (vu_exe_dir(repo, sizeof(repo), 2)) {
		printf("TAP version 13\n1..1\nnot ok 1 t_matrix: cannot find the repository\n");
		return 1;
	}
	return th_main(argc, argv);
}
