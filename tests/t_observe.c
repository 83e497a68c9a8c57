// SPDX-License-Identifier: GPL-2.0-only
/*
 * foliomap's observability: the per-container counters in debugfs
 * (<debugfs>/foliomap/<id>/stats) and the foliomap_map/foliomap_unmap
 * tracepoints. foliomap only: on stock the program plans no test (1..0),
 * since stock has neither.
 */
#include <sys/stat.h>

#include "common.h"
#include "fmstats.h"

#define THP_SIZE	(8 * SZ_2M)

/* At most a run per 2M folio; a kernel without THP gives 4K pages. */
static long long thp_runs_max(void)
{
	return vu_have_thp() ? THP_SIZE / SZ_2M : THP_SIZE / SZ_4K;
}

/* Close every fd of the test: the container goes once its groups go. */
static void close_all(struct th *t)
{
	int i;

	for (i = 0; i < t->nfds; i++)
		if (t->fds[i] >= 0)
			th_close(t, t->fds[i]);
}

TEST(debugfs_container_counters)
{
	int before, id, c;
	char dir[128];
	void *thp, *small;
	long long runs;

	th_mount(t, "debugfs", DEBUGFS);
	before = newest_container(t);
	c = th_container(t);
	id = newest_container(t);
	/* Ids count up; closed containers' directories are gone. */
	ASSERT_TRUE(id > before);
	EXPECT_EQ(stat_of(id, "mappings"), 0);
	EXPECT_EQ(stat_of(id, "map_calls"), 0);

	thp = th_mem(t, VU_MEM_THP, THP_SIZE);
	small = th_anon(t, 16 * SZ_4K);
	MAP_OK(c, IOVA_A, thp, THP_SIZE);
	EXPECT_EQ(stat_of(id, "mappings"), 1);
	EXPECT_EQ(stat_of(id, "mapped_pages"), THP_SIZE / SZ_4K);
	EXPECT_EQ(stat_of(id, "locked_pages"), THP_SIZE / SZ_4K);
	EXPECT_EQ(stat_of(id, "map_calls"), 1);
	/* One run per 2M folio at most: neighbouring folios may merge. */
	runs = stat_of(id, "runs_mapped");
	EXPECT_GE(runs, 1);
	EXPECT_LE(runs, thp_runs_max());
	EXPECT_EQ(stat_of(id, "batch_pages"), THP_SIZE / SZ_4K);
	/*
	 * The run record: at least one 16-byte entry. Without THP the 4K
	 * pages may be too fragmented for one (record.c): then none.
	 */
	if (vu_have_thp())
		EXPECT_GE(stat_of(id, "record_bytes"), 16);
	/*
	 * GUP batches of 1024 page pointers (4 MiB of 4K pages) each; pinned
	 * in parallel (run-all's pin_parallel_min_mb), batches also end at
	 * chunk boundaries, 2 MiB apart or more.
	 */
	if (stat_of(id, "parallel_maps")) {
		EXPECT_GE(stat_of(id, "batches"), (THP_SIZE + 1024 * SZ_4K - 1) / (1024 * SZ_4K));
		EXPECT_LE(stat_of(id, "batches"), THP_SIZE / SZ_2M);
	} else {
		EXPECT_EQ(stat_of(id, "batches"), (THP_SIZE + 1024 * SZ_4K - 1) / (1024 * SZ_4K));
		EXPECT_EQ(stat_of(id, "avg_batch_pages"),
			  THP_SIZE < 1024 * SZ_4K ? THP_SIZE / SZ_4K : 1024);
	}

	MAP_OK(c, IOVA_B, small, 16 * SZ_4K);
	EXPECT_EQ(stat_of(id, "mappings"), 2);
	EXPECT_EQ(stat_of(id, "mapped_pages"), THP_SIZE / SZ_4K + 16);
	EXPECT_EQ(stat_of(id, "map_calls"), 2);
	EXPECT_LE(stat_of(id, "runs_mapped"), runs + 16);

	UNMAP_OK(c, IOVA_A, THP_SIZE);
	EXPECT_EQ(stat_of(id, "unmap_calls"), 1);
	EXPECT_EQ(stat_of(id, "mappings"), 1);
	EXPECT_GE(stat_of(id, "runs_unmapped"), 1);
	EXPECT_LE(stat_of(id, "runs_unmapped"), thp_runs_max());
	UNMAP_OK(c, IOVA_B, 16 * SZ_4K);
	EXPECT_EQ(stat_of(id, "unmap_calls"), 2);
	EXPECT_EQ(stat_of(id, "mappings"), 0);
	EXPECT_EQ(stat_of(id, "mapped_pages"), 0);
	EXPECT_EQ(stat_of(id, "locked_pages"), 0);
	EXPECT_EQ(stat_of(id, "record_bytes"), 0);
	/* A failed unmap counts nothing. */
	UNMAP_RANGE(c, IOVA_B, 16 * SZ_4K, 0);
	EXPECT_EQ(stat_of(id, "unmap_calls"), 2);

	/* The directory goes with the container. */
	snprintf(dir, sizeof(dir), FM_DEBUGFS "/%d", id);
	ASSERT_EQ(access(dir, F_OK), 0);
	close_all(t);
	EXPECT_NE(access(dir, F_OK), 0);
}

/*
 * folio_pinned_pages: pages pinned through memfd_pin_folios(), cumulative.
 * On 6.12 a mapping of shared hugetlbfs memory (a 2M-hugetlbfs memfd) adds
 * its pages; a THP mapping adds none. On 6.1 (no memfd_pin_folios) it stays
 * 0, the memfd being pinned a huge page at a time by GUP (hugepin.c): one
 * pin per folio on every kernel.
 */
TEST(debugfs_folio_pinned_pages)
{
	const size_t msize = 4 * SZ_2M;
	bool folio = th_kernel_series() >= 612;
	long long f0;
	void *thp, *mfd;
	int id, c;

	th_mount(t, "debugfs", DEBUGFS);
	c = th_container(t);
	id = newest_container(t);
	f0 = stat_of(id, "folio_pinned_pages");
	ASSERT_EQ(f0, 0);

	thp = th_mem(t, VU_MEM_THP, THP_SIZE);
	MAP_OK(c, IOVA_A, thp, THP_SIZE);
	EXPECT_EQ(th_pins(t), THP_SIZE / SZ_4K);
	EXPECT_EQ(stat_of(id, "folio_pinned_pages"), 0);

	mfd = th_mem(t, VU_MEM_MEMFD2M, msize);
	MAP_OK(c, IOVA_B, mfd, msize);
	EXPECT_PINS_VMLCK(THP_SIZE / SZ_4K + th_kind_pins(VU_MEM_MEMFD2M, msize),
			  (THP_SIZE + msize) >> 10);
	EXPECT_EQ(stat_of(id, "folio_pinned_pages"), folio ? msize / SZ_4K : 0);
	EXPECT_EQ(stat_of(id, "mapped_pages"), (THP_SIZE + msize) / SZ_4K);

	/* cumulative: unmapping takes nothing off */
	UNMAP_OK(c, IOVA_B, msize);
	UNMAP_OK(c, IOVA_A, THP_SIZE);
	EXPECT_EQ(stat_of(id, "folio_pinned_pages"), folio ? msize / SZ_4K : 0);
	EXPECT_PINS_VMLCK(0, 0);
}

/*
 * domains and domain_joins: a group of the same IOMMU joins the domain in
 * use directly on 6.12 and later (6.1: it gets a domain of its own first,
 * then moves to the shared one, as in stock). Either way the container
 * keeps one domain and pins and charges nothing more. DMA through a joined
 * domain: edu_dma_after_attach (t_edu), on both backends.
 */
TEST(debugfs_domain_joins)
{
	long long joins = th_kernel_series() >= 612;
	int groups[2], g2, g3, id, c;
	char *p, *q;

	th_mount(t, "debugfs", DEBUGFS);
	th_e1000e_groups(t, groups, 2);
	c = th_container(t);
	id = newest_container(t);
	EXPECT_EQ(stat_of(id, "domains"), 1);
	EXPECT_EQ(stat_of(id, "domain_joins"), 0);

	p = th_mem(t, VU_MEM_THP, 2 * SZ_2M);
	q = th_anon(t, 2 * SZ_4K);
	MAP_OK(c, IOVA_A, p, 2 * SZ_2M);
	MAP_OK(c, IOVA_B, q, 2 * SZ_4K);
	g2 = th_own_fd(t, vu_group_attach(c, groups[1]));
	ASSERT_GE(g2, 0);
	EXPECT_EQ(stat_of(id, "domains"), 1);
	EXPECT_EQ(stat_of(id, "domain_joins"), joins);
	EXPECT_PINS_VMLCK(1026, (2 * SZ_2M + 2 * SZ_4K) >> 10);

	/* It leaves and comes back: the same domain, joined again. */
	ASSERT_EQ(ioctl(g2, VFIO_GROUP_UNSET_CONTAINER), 0);
	EXPECT_EQ(stat_of(id, "domains"), 1);
	ASSERT_EQ(ioctl(g2, VFIO_GROUP_SET_CONTAINER, &c), 0);
	EXPECT_EQ(stat_of(id, "domain_joins"), 2 * joins);
	th_close(t, g2);

	/* edu, another device behind the same IOMMU, joins too. */
	g3 = th_own_fd(t, vu_group_attach(c, th_edu_group(t)));
	ASSERT_GE(g3, 0);
	EXPECT_EQ(stat_of(id, "domains"), 1);
	EXPECT_EQ(stat_of(id, "domain_joins"), 3 * joins);
	EXPECT_PINS_VMLCK(1026, (2 * SZ_2M + 2 * SZ_4K) >> 10);
	UNMAP_OK(c, IOVA_A, 2 * SZ_2M);
	UNMAP_OK(c, IOVA_B, 2 * SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

static void write_file(struct th *t, const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_TRUNC);

	if (fd < 0)
		FAIL("open %s: %s", path, strerror(errno));
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		FAIL("write %s: %s", path, strerror(errno));
	close(fd);
}

/* Find "<event>: iova=0x<iova> ..." in the trace; fills pages, runs, ns. */
static bool find_event(const char *trace, const char *event, uint64_t iova,
		       unsigned long *pages, unsigned long *runs, unsigned long long *ns)
{
	char want[96];
	const char *p;
	unsigned long long size;

	snprintf(want, sizeof(want), "%s: iova=0x%llx ", event, (unsigned long long)iova);
	p = strstr(trace, want);
	if (!p)
		return false;
	return sscanf(p + strlen(want), "size=0x%llx pages=%lu runs=%lu ns=%llu",
		      &size, pages, runs, ns) == 4;
}

TEST(tracepoints_map_unmap)
{
	static char trace[1 << 16];
	unsigned long pages, runs;
	unsigned long long ns;
	void *thp, *small;
	ssize_t n;
	int c, fd;

	th_mount(t, "tracefs", TRACEFS);
	c = th_container(t);
	thp = th_mem(t, VU_MEM_THP, THP_SIZE);
	small = th_anon(t, 16 * SZ_4K);
	/*
	 * Enabling an event also starts recording comms and tgids, which
	 * live-patches the scheduler's sched_switch/sched_wakeup sites while
	 * the other vCPU runs them: under QEMU TCG that once left a stale
	 * int3 in ttwu_do_activate() (an Oops in the rig, not in foliomap).
	 * Only foliomap's own sites are patched with both off.
	 */
	write_file(t, TRACEFS "/options/record-cmd", "0");
	write_file(t, TRACEFS "/options/record-tgid", "0");
	write_file(t, TRACEFS "/events/foliomap/enable", "1");
	write_file(t, TRACEFS "/trace", "");
	MAP_OK(c, IOVA_A, thp, THP_SIZE);
	MAP_OK(c, IOVA_B, small, 16 * SZ_4K);
	UNMAP_OK(c, IOVA_A, THP_SIZE);
	UNMAP_OK(c, IOVA_B, 16 * SZ_4K);
	write_file(t, TRACEFS "/events/foliomap/enable", "0");

	fd = open(TRACEFS "/trace", O_RDONLY);
	ASSERT_TRUE(fd >= 0);
	n = read(fd, trace, sizeof(trace) - 1);
	close(fd);
	ASSERT_TRUE(n > 0);
	trace[n] = 0;

	ASSERT_TRUE(find_event(trace, "foliomap_map", IOVA_A, &pages, &runs, &ns));
	EXPECT_EQ(pages, THP_SIZE / SZ_4K);
	EXPECT_GE(runs, 1);
	EXPECT_LE(runs, thp_runs_max());
	EXPECT_GE(ns, 1);
	ASSERT_TRUE(find_event(trace, "foliomap_map", IOVA_B, &pages, &runs, &ns));
	EXPECT_EQ(pages, 16);
	EXPECT_GE(runs, 1);
	EXPECT_LE(runs, 16);
	ASSERT_TRUE(find_event(trace, "foliomap_unmap", IOVA_A, &pages, &runs, &ns));
	EXPECT_EQ(pages, THP_SIZE / SZ_4K);
	EXPECT_GE(runs, 1);
	EXPECT_LE(runs, thp_runs_max());
	EXPECT_GE(ns, 1);
	ASSERT_TRUE(find_event(trace, "foliomap_unmap", IOVA_B, &pages, &runs, &ns));
	EXPECT_EQ(pages, 16);
	EXPECT_LE(runs, 16);
}

int main(int argc, char **argv)
{
	if (!is_foliomap()) {
		printf("TAP version 13\n1..0\n# t_observe: foliomap only (debugfs counters, tracepoints)\n");
		return 0;
	}
	return th_main(argc, argv);
}
