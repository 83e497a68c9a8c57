// SPDX-License-Identifier: GPL-2.0-only
/*
 * Large MAP_DMA of memory never touched, which foliomap pins with helper
 * threads (pin_threads, pin_parallel_min_mb): the same checks on both
 * backends. The device sees the right page at every chunk boundary, for
 * every kind of memory; a failure in a middle chunk (a PROT_NONE hole,
 * RLIMIT_MEMLOCK, a userfaultfd range nobody serves) fails the whole map
 * with stock's error and leaves nothing pinned or charged; SIGKILL in the
 * middle of 2 GiB; two containers mapping at once. On foliomap, the
 * counters show the helpers were used (or not: hugetlbfs), and no helper
 * thread outlives the ioctl.
 */
#define _GNU_SOURCE
#include <linux/userfaultfd.h>
#include <pthread.h>

#include "edu.h"
#include "fmstats.h"

#define PAR_SIZE	(32 * SZ_2M)	/* 64 MiB: parallel at the default too */
#define PAR_IOVA	0x1000000ULL	/* below edu's 28-bit DMA mask */

/* Memory of @kind, never touched (populated only for "populate"). */
enum par_mem { PAR_THP, PAR_ANON4K, PAR_SHM4K, PAR_MEMFD4K, PAR_POPULATE, PAR_NKINDS };
static const char *const par_mem_name[] = { "thp", "anon4k", "shm4k", "memfd4k", "populate" };

static char *par_mem(struct th *t, enum par_mem kind, size_t size)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS, fd = -1;
	char *p;

	if (kind == PAR_SHM4K || kind == PAR_POPULATE)
		flags = MAP_SHARED | MAP_ANONYMOUS | (kind == PAR_POPULATE ? MAP_POPULATE : 0);
	if (kind == PAR_MEMFD4K) {
		fd = memfd_create("t_parallel", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, size))
			FAIL("memfd: %s", strerror(errno));
		flags = MAP_SHARED;
	}
	if (kind == PAR_THP) {
		p = vu_thp_map(size);
		if (!p)
			FAIL("vu_thp_map: %s", strerror(errno));
		return th_own_mem(t, p, size);
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED)
		FAIL("mmap %zu: %s", size, strerror(errno));
	if (kind == PAR_ANON4K && vu_madvise_thp(p, size, MADV_NOHUGEPAGE))
		FAIL("madvise: %s", strerror(errno));
	return th_own_mem(t, p, size);
}

/*
 * No helper thread is left: each exits before its MAP_DMA returns. They
 * are threads of the mapping process, so they are looked for among every
 * process's threads.
 */
static int par_helpers_alive(void)
{
	return fm_helpers_alive();
}

/* foliomap: the newest container's counter, after mounting debugfs. */
static long long par_stat(struct th *t, const char *name)
{
	th_mount(t, "debugfs", DEBUGFS);
	return stat_of(newest_container(t), name);
}

/* RAM at @src_iova -> device -> RAM at @dst_iova, compared with @src. */
static void par_copy(struct th *t, struct edu *e, uint64_t src_iova, char *src,
		     uint64_t dst_iova, char *dst)
{
	size_t i;

	for (i = 0; i < EDU_MAX_CNT; i++)
		((volatile char *)src)[i] = (char)(i * 13 + 5);
	memset(dst, 0, EDU_MAX_CNT);
	EDU_FROM_RAM(e, src_iova, 0, EDU_MAX_CNT);
	EDU_TO_RAM(e, 0, dst_iova, EDU_MAX_CNT);
	for (i = 0; i < EDU_MAX_CNT; i++)
		if (dst[i] != src[i])
			break;
	EXPECT_EQ(i, EDU_MAX_CNT);
}

/*
 * Each kind, 64 MiB never touched: pins and VmLck exact, and the device
 * reads and writes the page the process sees on both sides of chunk
 * boundaries (2 MiB apart at the least) and at the ends.
 */
TEST(par_first_touch_kinds_dma)
{
	static const uint64_t off[] = { 0, SZ_2M - SZ_4K, SZ_2M, 8 * SZ_2M + 0x5000,
					16 * SZ_2M - SZ_4K, PAR_SIZE - SZ_4K };
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd), k;
	unsigned int i;

	edu_open(t, gfd, &e);
	for (k = 0; k < PAR_NKINDS; k++) {
		char *p = par_mem(t, k, PAR_SIZE);
		long long maps0 = is_foliomap() ? par_stat(t, "parallel_maps") : 0;

		th_diag("%s", par_mem_name[k]);
		MAP_OK(c, PAR_IOVA, p, PAR_SIZE);
		EXPECT_ACCT(PAR_SIZE / SZ_4K);
		for (i = 0; i + 1 < sizeof(off) / sizeof(off[0]); i++)
			par_copy(t, &e, PAR_IOVA + off[i], p + off[i],
				 PAR_IOVA + off[i + 1], p + off[i + 1]);
		if (is_foliomap() && th_param_read("pin_threads"))
			EXPECT_EQ(par_stat(t, "parallel_maps"), maps0 + th_helpers_possible());
		UNMAP_OK(c, PAR_IOVA, PAR_SIZE);
		EXPECT_ACCT(0);
		EXPECT_EQ(par_helpers_alive(), 0);
	}
}

/*
 * One MAP_DMA over three adjacent vmas never touched: THP, 4K shmem, 4K
 * private anon. The device sees the right page on both sides of each vma
 * boundary; pins and VmLck exact.
 */
TEST(par_mixed_vmas_dma)
{
	static const uint64_t off[] = { 0x3000, 16 * SZ_2M - SZ_4K, 16 * SZ_2M, 20 * SZ_2M,
					24 * SZ_2M - SZ_4K, 24 * SZ_2M, PAR_SIZE - SZ_4K };
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	char *p = par_mem(t, PAR_THP, PAR_SIZE);
	unsigned int i;

	edu_open(t, gfd, &e);
	ASSERT_EQ(mmap(p + 16 * SZ_2M, 8 * SZ_2M, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0), p + 16 * SZ_2M);
	ASSERT_EQ(mmap(p + 24 * SZ_2M, 8 * SZ_2M, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), p + 24 * SZ_2M);
	ASSERT_EQ(vu_madvise_thp(p + 24 * SZ_2M, 8 * SZ_2M, MADV_NOHUGEPAGE), 0);
	MAP_OK(c, PAR_IOVA, p, PAR_SIZE);
	EXPECT_ACCT(PAR_SIZE / SZ_4K);
	for (i = 0; i + 1 < sizeof(off) / sizeof(off[0]); i++)
		par_copy(t, &e, PAR_IOVA + off[i], p + off[i], PAR_IOVA + off[i + 1], p + off[i + 1]);
	UNMAP_OK(c, PAR_IOVA, PAR_SIZE);
	EXPECT_ACCT(0);
	EXPECT_EQ(par_helpers_alive(), 0);
}

/*
 * A hole in a middle chunk: stock's -EFAULT, nothing pinned or charged,
 * and the IOVA range free again.
 */
TEST(par_prot_none_in_middle)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *p = par_mem(t, PAR_THP, PAR_SIZE);

	ASSERT_EQ(mprotect(p + 20 * SZ_2M + 0x3000, SZ_4K, PROT_NONE), 0);
	EXPECT_EQ(vu_map(c, PAR_IOVA, p, PAR_SIZE, RW), -EFAULT);
	EXPECT_ACCT(0);
	EXPECT_EQ(par_helpers_alive(), 0);
	MAP_OK(c, PAR_IOVA, p, 20 * SZ_2M);
	EXPECT_ACCT(20 * SZ_2M / SZ_4K);
	UNMAP_OK(c, PAR_IOVA, 20 * SZ_2M);
	EXPECT_ACCT(0);
}

/*
 * RLIMIT_MEMLOCK reached in a middle chunk (4K memory, so the charge
 * grows page by page): -ENOMEM, nothing left pinned or charged.
 */
TEST(par_memlock_in_middle)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *p = par_mem(t, PAR_SHM4K, PAR_SIZE);

	th_drop_ipc_lock(t);
	th_set_memlock(t, PAR_SIZE / 2 + 3 * SZ_4K);
	EXPECT_EQ(vu_map(c, PAR_IOVA, p, PAR_SIZE, RW), -ENOMEM);
	EXPECT_ACCT(0);
	EXPECT_EQ(par_helpers_alive(), 0);
	/* Within the limit, the same memory maps. */
	MAP_OK(c, PAR_IOVA, p, PAR_SIZE / 2);
	EXPECT_ACCT(PAR_SIZE / 2 / SZ_4K);
	UNMAP_OK(c, PAR_IOVA, PAR_SIZE / 2);
	EXPECT_ACCT(0);
}

struct par_mapper {
	int	container;
	char	*mem;
	long	ret;
};

static long par_map_call(void *arg)
{
	struct par_mapper *m = arg;

	return vu_map(m->container, PAR_IOVA, m->mem, PAR_SIZE, RW);
}

/*
 * A userfaultfd range nobody serves in a middle chunk: the map fails at
 * once (no wait for the fd), nothing pinned.
 */
TEST(par_userfaultfd_in_middle)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *p = par_mem(t, PAR_ANON4K, PAR_SIZE);
	struct par_mapper m = { .container = c, .mem = p };
	struct th_call call;

	th_uffd_register(t, p + 24 * SZ_2M, 2 * SZ_2M, UFFDIO_REGISTER_MODE_MISSING);
	/* A kernel that waited for the fd would never return: bounded. */
	th_call_start(t, &call, par_map_call, &m);
	ASSERT_TRUE(th_call_wait(&call, 120000));
	EXPECT_EQ(th_call_join(&call), -EFAULT);
	EXPECT_ACCT(0);
	EXPECT_EQ(par_helpers_alive(), 0);
}

static void *par_thp_untouched(size_t size)
{
	return vu_thp_map(size);
}

/*
 * SIGKILL while 2 GiB of THP never touched is being mapped: the process
 * dies promptly, every pin is released, and no helper is left.
 */
TEST(par_sigkill_2g)
{
	const size_t size = 2 * SZ_1G;
	int groups[1], rfd, status;
	long long at_kill = 0;
	char done;
	pid_t pid;

	th_e1000e_groups(t, groups, 1);
	pid = th_mapper_start(t, groups[0], par_thp_untouched, size, SZ_1G, &rfd);
	done = th_mapper_kill_at(t, pid, rfd, 16 * 512, &at_kill, &status);
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	EXPECT_EQ(done, 0);
	EXPECT_GE(at_kill, 16 * 512);
	EXPECT_EQ(th_pins(t), 0);
	EXPECT_EQ(par_helpers_alive(), 0);
}

/* Two containers, each with its own group, map 64 MiB at the same time. */
TEST(par_two_containers_at_once)
{
	int groups[2], gfd[2], c[2], i;
	struct par_mapper m[2];
	struct th_call call[2];

	th_e1000e_groups(t, groups, 2);
	for (i = 0; i < 2; i++) {
		c[i] = th_container_of(t, VFIO_TYPE1v2_IOMMU, &groups[i], 1, &gfd[i]);
		m[i] = (struct par_mapper){ .container = c[i],
					    .mem = par_mem(t, i ? PAR_SHM4K : PAR_THP, PAR_SIZE) };
	}
	for (i = 0; i < 2; i++)
		th_call_start(t, &call[i], par_map_call, &m[i]);
	for (i = 0; i < 2; i++) {
		ASSERT_TRUE(th_call_wait(&call[i], 600000));
		EXPECT_EQ(th_call_join(&call[i]), 0);
	}
	EXPECT_ACCT(2 * PAR_SIZE / SZ_4K);
	EXPECT_EQ(par_helpers_alive(), 0);
	for (i = 0; i < 2; i++)
		UNMAP_OK(c[i], PAR_IOVA, PAR_SIZE);
	EXPECT_ACCT(0);
}

/*
 * foliomap: hugetlbfs memory is pinned by the caller alone (the hugetlb
 * cgroup charges the faulting task); the map is the same otherwise.
 */
TEST(par_hugetlb_stays_serial)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *h = th_mem(t, VU_MEM_HUGETLB2M, 8 * SZ_2M);
	long long maps0;

	if (!is_foliomap())
		SKIP("foliomap's counters");
	maps0 = par_stat(t, "parallel_maps");
	MAP_OK(c, PAR_IOVA, h, 8 * SZ_2M);
	EXPECT_PINS_VMLCK(th_kind_pins(VU_MEM_HUGETLB2M, 8 * SZ_2M), 8 * SZ_2M >> 10);
	EXPECT_EQ(par_stat(t, "parallel_maps"), maps0);
	UNMAP_OK(c, PAR_IOVA, 8 * SZ_2M);
	EXPECT_ACCT(0);
}

/*
 * foliomap: with pin_threads=1 a map of 64 MiB uses one helper (none on
 * 6.1) after its first 16 MiB, the rest cut into chunks the caller takes
 * in order; the counters say so. Whether the helper filled a chunk depends on
 * scheduling: it is asked of one of four maps. Pages a helper pinned for
 * nothing in a map that succeeded are those of batches the caller took
 * over, 1024 at most each.
 */
TEST(par_counters_and_threads_param)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	long long threads0 = th_param_read("pin_threads"), helper_chunks = 0;
	long long maps0, helpers0, chunks0, hchunks0, take0, waste0, chunks = 0;
	int i;

	if (!is_foliomap())
		SKIP("foliomap's counters");
	ASSERT_EQ(th_param_write("pin_threads", 1), 0);
	maps0 = par_stat(t, "parallel_maps");
	if (!th_helpers_possible()) {
		/* 6.1: pin_threads asks for a helper, none is started. */
		MAP_OK(c, PAR_IOVA, par_mem(t, PAR_THP, PAR_SIZE), PAR_SIZE);
		EXPECT_EQ(par_stat(t, "parallel_maps"), maps0);
		EXPECT_EQ(fm_helpers_alive(), 0);
		UNMAP_OK(c, PAR_IOVA, PAR_SIZE);
		EXPECT_ACCT(0);
		ASSERT_EQ(th_param_write("pin_threads", threads0), 0);
		return;
	}
	helpers0 = par_stat(t, "parallel_helpers");
	chunks0 = par_stat(t, "parallel_chunks");
	hchunks0 = par_stat(t, "parallel_helper_chunks");
	take0 = par_stat(t, "parallel_takeovers");
	waste0 = par_stat(t, "parallel_wasted_pages");
	for (i = 0; i < 4 && !helper_chunks; i++) {
		char *p = par_mem(t, PAR_THP, PAR_SIZE);

		MAP_OK(c, PAR_IOVA, p, PAR_SIZE);
		EXPECT_ACCT(PAR_SIZE / SZ_4K);
		UNMAP_OK(c, PAR_IOVA, PAR_SIZE);
		EXPECT_EQ(par_stat(t, "parallel_maps"), maps0 + i + 1);
		EXPECT_EQ(par_stat(t, "parallel_helpers"), helpers0 + i + 1);
		/*
		 * What follows the first batch, in about 4 chunks per thread
		 * of a power of two, 2 MiB at least: 8 to 32 chunks.
		 */
		chunks = par_stat(t, "parallel_chunks") - chunks0;
		EXPECT_GE(chunks, 8 * (i + 1));
		EXPECT_LE(chunks, 32 * (i + 1));
		helper_chunks = par_stat(t, "parallel_helper_chunks") - hchunks0;
		EXPECT_LE(helper_chunks, chunks);
	}
	EXPECT_GE(helper_chunks, 1);
	th_diag("helper filled %lld of %lld chunks in %d maps, %lld batches taken over", helper_chunks,
		chunks, i, par_stat(t, "parallel_takeovers") - take0);
	EXPECT_LE(par_stat(t, "parallel_wasted_pages") - waste0,
		  1024 * (par_stat(t, "parallel_takeovers") - take0));

	/* Off: the same map is serial. */
	ASSERT_EQ(th_param_write("pin_threads", 0), 0);
	maps0 = par_stat(t, "parallel_maps");
	take0 = par_stat(t, "parallel_takeovers");
	waste0 = par_stat(t, "parallel_wasted_pages");
	MAP_OK(c, PAR_IOVA, par_mem(t, PAR_SHM4K, PAR_SIZE), PAR_SIZE);
	EXPECT_EQ(par_stat(t, "parallel_maps"), maps0);
	EXPECT_EQ(par_stat(t, "parallel_takeovers"), take0);
	EXPECT_EQ(par_stat(t, "parallel_wasted_pages"), waste0);
	UNMAP_OK(c, PAR_IOVA, PAR_SIZE);
	EXPECT_ACCT(0);
	ASSERT_EQ(th_param_write("pin_threads", threads0), 0);
}

int main(int argc, char **argv)
{
	long long threads = is_foliomap() ? th_param_read("pin_threads") : 0;
	int ret = th_main(argc, argv);

	/* A test that failed half way may have left its own setting. */
	if (is_foliomap() && th_param_write("pin_threads", threads)) {
		printf("# t_parallel: cannot restore pin_threads\n");
		ret = 1;
	}
	return ret;
}
