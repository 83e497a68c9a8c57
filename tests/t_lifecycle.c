// SPDX-License-Identifier: GPL-2.0-only
/*
 * Concurrency and the ends of a container's life: threads mapping and
 * unmapping disjoint and overlapping ranges in one container; a process
 * killed in the middle of a large map; a container closed with every kind of
 * live mapping; fork() after mapping (the child shares the container fd: it
 * may unmap the parent's mappings and map its own, as in stock); groups
 * detached with mappings live.  The last test checks the guest still does
 * real DMA after all that.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include "edu.h"

/* pins and VmLck (KiB) since the test started; pages evaluated once */
/* ------------------------------------------------------------------ */
/* threads */

#define NTHREADS	4
#define NOPS		250
#define SLOT_PAGES	8
#define NSHARED		6			/* S_k = [k * 4, k * 4 + 8) pages */
#define NPRIVATE	2			/* per thread */
/* clear of the MSI window of every IOMMU (arm64's is 0x8000000-0x80fffff) */
#define SHARED_BASE	0xa000000ULL
#define PRIVATE_BASE	0x9000000ULL

struct mt {
	int c;
	bool v2;
	char *shared_mem[NSHARED];
	char *private_mem[NTHREADS][NPRIVATE];
	atomic_llong mapped, unmapped;		/* bytes */
	/*
	 * v2: the shared slots' operations under one lock, against a model of
	 * which are mapped, so that each answer is checked exactly (a map
	 * -EEXIST only over a mapped neighbour, an unmap -EINVAL only where it
	 * would split one); they still race the private slots'. v1 (whose
	 * unmap of a split range is loosely defined) runs them unlocked.
	 */
	pthread_mutex_t shared_lock;
	bool shared_have[NSHARED];
	atomic_int bad;
	char why[256];
};

struct mt_arg {
	struct mt *mt;
	int id;
};

static void mt_bad(struct mt *mt, const char *fmt, long long a, long long b)
{
	if (atomic_fetch_add(&mt->bad, 1) == 0)
		snprintf(mt->why, sizeof(mt->why), fmt, a, b);
}

static void *mt_thread(void *p)
{
	struct mt_arg *arg = p;
	struct mt *mt = arg->mt;
	unsigned int seed = 0x1234 + arg->id;
	bool have[NPRIVATE] = { false };
	const uint64_t slot = SLOT_PAGES * SZ_4K;
	int i;

	for (i = 0; i < NOPS; i++) {
		int r = rand_r(&seed) % 4, k, ret;
		uint64_t iova, done = ~0ULL;

		switch (r) {
		case 0:	/* map a private slot: exactly as this thread knows it */
			k = rand_r(&seed) % NPRIVATE;
			iova = PRIVATE_BASE + (arg->id * NPRIVATE + k) * 0x100000ULL;
			ret = vu_map(mt->c, iova, mt->private_mem[arg->id][k], slot, RW);
			if (ret != (have[k] ? -EEXIST : 0))
				mt_bad(mt, "private map: %lld (had it: %lld)", ret, have[k]);
			if (!ret) {
				have[k] = true;
				atomic_fetch_add(&mt->mapped, slot);
			}
			break;
		case 1:	/* unmap a private slot */
			k = rand_r(&seed) % NPRIVATE;
			iova = PRIVATE_BASE + (arg->id * NPRIVATE + k) * 0x100000ULL;
			ret = vu_unmap(mt->c, iova, slot, 0, &done);
			if (ret || done != (have[k] ? slot : 0))
				mt_bad(mt, "private unmap: %lld, size %lld", ret, done);
			have[k] = false;
			if (!ret)
				atomic_fetch_add(&mt->unmapped, done);
			break;
		case 2:	/* map an overlapping shared slot: success or -EEXIST */
			k = rand_r(&seed) % NSHARED;
			if (mt->v2)
				pthread_mutex_lock(&mt->shared_lock);
			ret = vu_map(mt->c, SHARED_BASE + k * 4 * SZ_4K, mt->shared_mem[k], slot, RW);
			if (mt->v2) {
				/* S_k overlaps S_k-1 and S_k+1 */
				bool busy = mt->shared_have[k] || (k > 0 && mt->shared_have[k - 1]) ||
					    (k + 1 < NSHARED && mt->shared_have[k + 1]);

				if (ret != (busy ? -EEXIST : 0))
					mt_bad(mt, "shared map: %lld (slot %lld)", ret, k);
				if (!ret)
					mt->shared_have[k] = true;
				pthread_mutex_unlock(&mt->shared_lock);
			} else if (ret && ret != -EEXIST) {
				mt_bad(mt, "shared map: %lld (slot %lld)", ret, k);
			}
			if (!ret)
				atomic_fetch_add(&mt->mapped, slot);
			break;
		case 3:	/*
			 * unmap a shared slot: all of one mapping or nothing;
			 * v2 refuses a range that would split a neighbour, and
			 * only that
			 */
			k = rand_r(&seed) % NSHARED;
			if (mt->v2)
				pthread_mutex_lock(&mt->shared_lock);
			ret = vu_unmap(mt->c, SHARED_BASE + k * 4 * SZ_4K, slot, 0, &done);
			if (mt->v2) {
				bool split = (k > 0 && mt->shared_have[k - 1]) ||
					     (k + 1 < NSHARED && mt->shared_have[k + 1]);

				if (split ? ret != -EINVAL :
				    ret || done != (mt->shared_have[k] ? slot : 0))
					mt_bad(mt, split ? "shared unmap over a neighbour's edge: %lld, size %lld" :
					       "shared unmap: %lld, size %lld", ret, done);
				if (!ret)
					mt->shared_have[k] = false;
				pthread_mutex_unlock(&mt->shared_lock);
			} else if (ret || (done != 0 && done != slot)) {
				mt_bad(mt, "shared unmap: %lld, size %lld", ret, done);
			}
			if (!ret)
				atomic_fetch_add(&mt->unmapped, done);
			break;
		}
	}
	return NULL;
}

TEST_V12(lc_threads_map_unmap)
{
	int c = th_container(t);
	struct mt *mt = calloc(1, sizeof(*mt));
	struct mt_arg args[NTHREADS];
	pthread_t th[NTHREADS];
	uint64_t left, done = 0;
	int i, j;

	ASSERT_TRUE(mt != NULL);
	ASSERT_EQ(pthread_mutex_init(&mt->shared_lock, NULL), 0);
	mt->c = c;
	mt->v2 = t->v2;
	for (i = 0; i < NSHARED; i++)
		mt->shared_mem[i] = th_anon(t, SLOT_PAGES * SZ_4K);
	for (i = 0; i < NTHREADS; i++)
		for (j = 0; j < NPRIVATE; j++)
			mt->private_mem[i][j] = th_anon(t, SLOT_PAGES * SZ_4K);
	for (i = 0; i < NTHREADS; i++) {
		args[i] = (struct mt_arg){ .mt = mt, .id = i };
		ASSERT_EQ(pthread_create(&th[i], NULL, mt_thread, &args[i]), 0);
	}
	for (i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	if (mt->bad)
		th_diag("%d inconsistent results; first: %s", (int)mt->bad, mt->why);
	EXPECT_EQ(mt->bad, 0);
	th_diag("mapped %lld KiB, unmapped %lld KiB", (long long)mt->mapped >> 10,
		(long long)mt->unmapped >> 10);
	ASSERT_GE(mt->mapped, mt->unmapped);
	left = mt->mapped - mt->unmapped;
	EXPECT_ACCT((long long)(left / SZ_4K));
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit") -
		  (long long)(left / (SLOT_PAGES * SZ_4K)));
	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), 0);
	EXPECT_EQ(done, left);
	EXPECT_ACCT(0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	free(mt);
}

/* ------------------------------------------------------------------ */
/* a process killed while it maps 1 GiB */

/* 4K shmem, not populated: the map faults every page in */
static void *shm_unpopulated(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

TEST(lc_killed_during_large_map)
{
	const size_t size = SZ_1G;
	long refcnt0 = vu_module_refcnt(th_backend_module());
	int groups[1], rfd, status;
	char done;
	long long at_kill = 0;
	pid_t pid;

	th_e1000e_groups(t, groups, 1);
	pid = th_mapper_start(t, groups[0], shm_unpopulated, size, 0x40000000, &rfd);
	/* kill once a few thousand pages are pinned */
	done = th_mapper_kill_at(t, pid, rfd, 4096, &at_kill, &status);
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* the kill landed in the middle of the map */
	EXPECT_EQ(done, 0);
	EXPECT_GE(at_kill, 4096);
	EXPECT_LT(at_kill, (long long)(size / SZ_4K));
	/* the container went away with the process: everything released */
	EXPECT_EQ(th_pins(t), 0);
	EXPECT_EQ(th_module_refcnt_back(th_backend_module(), refcnt0), refcnt0);
	/* the group is free again and works */
	{
		int gfd, c = th_container_of(t, VFIO_TYPE1v2_IOMMU, groups, 1, &gfd);
		char *a = th_anon(t, 4 * SZ_4K);

		MAP_OK(c, 0x40000000, a, 4 * SZ_4K);
		EXPECT_ACCT(4);
		UNMAP_OK(c, 0x40000000, 4 * SZ_4K);
	}
}

/* ------------------------------------------------------------------ */
/* close with live mappings of every kind */

TEST_V12(lc_close_with_live_mappings)
{
	int groups[2], gfd[2], c, dev;
	char *thp = th_mem(t, VU_MEM_THP, 2 * SZ_2M);
	char *shm = th_mem(t, VU_MEM_POPULATE, 32 * SZ_4K);
	char *mfd = th_mem(t, VU_MEM_MEMFD, SZ_2M);
	char *a = th_anon(t, 3 * SZ_4K);
	void *bar;
	size_t barlen;
	long refcnt;

	th_e1000e_groups(t, groups, 1);
	groups[1] = th_edu_group(t);
	c = th_container_of(t, t->type, groups, 2, gfd);
	refcnt = vu_module_refcnt(th_backend_module());
	dev = th_device_fd(t, gfd[0], th_bdf(t, 0));
	bar = th_bar_mmap(t, dev, VFIO_PCI_BAR0_REGION_INDEX, NULL, &barlen);
	MAP_OK(c, 0x1000000, thp, 2 * SZ_2M);
	MAP_OK(c, 0x2000000, shm, 32 * SZ_4K);
	MAP_OK(c, 0x3000000, mfd, SZ_2M);
	MAP_OK(c, 0x4000000, a, 3 * SZ_4K);
	MAP_OK(c, 0x5000000, bar, barlen);
	MAP_OK(c, 0x6000000, thp, SZ_2M);		/* the same THP again */
	ASSERT_EQ(vu_unmap(c, 0x3000000, SZ_2M, VFIO_DMA_UNMAP_FLAG_VADDR, NULL), 0);
	EXPECT_ACCT(1024 + 32 + 512 + 3 + 512);
	/* the container fd goes first; the groups still hold the container */
	th_close(t, c);
	EXPECT_ACCT(1024 + 32 + 512 + 3 + 512);
	th_close(t, gfd[1]);
	EXPECT_ACCT(1024 + 32 + 512 + 3 + 512);
	/*
	 * Every fd closed, but the BAR mmap holds the device file, which holds
	 * its group, which holds the container: all stays until the munmap.
	 */
	th_close(t, dev);
	th_close(t, gfd[0]);
	EXPECT_ACCT(1024 + 32 + 512 + 3 + 512);
	EXPECT_EQ(vu_module_refcnt(th_backend_module()), refcnt);
	ASSERT_EQ(munmap(bar, barlen), 0);
	EXPECT_ACCT(0);
	EXPECT_EQ(vu_module_refcnt(th_backend_module()), refcnt - 1);
}

/* ------------------------------------------------------------------ */
/* fork() after mapping */

/*
 * The child inherits the container fd.  Stock 6.12 lets it unmap the
 * parent's mapping (the parent's VmLck drops) and map its own memory
 * (charged to the child; still pinned and reachable after the child
 * exits).  The parent's pinned pages stay the parent's: the child writes
 * its copies, the device reads and writes the parent's.
 */
TEST_V12(lc_fork_after_map)
{
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *thp = th_mem(t, VU_MEM_THP, SZ_2M);
	char *a = th_anon(t, 4 * SZ_4K), *z = th_anon(t, 4 * SZ_4K);
	long long res[6];
	struct th_child ch;
	uint64_t done = 0;

	edu_open(t, gfd, &e);
	memset(thp, 0x11, SZ_2M);
	memset(a, 0x22, 4 * SZ_4K);
	MAP_OK(c, 0x1000000, thp, SZ_2M);
	MAP_OK(c, 0x2000000, a, 4 * SZ_4K);
	MAP_OK(c, 0x3000000, z, 4 * SZ_4K);
	EXPECT_ACCT(520);
	if (th_fork(t, &ch)) {
		struct vu_counters c0, c1;
		char *w = mmap(NULL, 4 * SZ_4K, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		uint64_t cd = ~0ULL;

		vu_counters_read(&c0);
		memset(thp, 0xcc, SZ_2M);	/* the child's copies */
		memset(a, 0xcc, 4 * SZ_4K);
		memset(w, 0x77, 4 * SZ_4K);
		res[0] = vu_unmap(c, 0x3000000, 4 * SZ_4K, 0, &cd);
		res[1] = cd;
		res[2] = vu_map(c, 0x4000000, w, 4 * SZ_4K, RW);
		vu_counters_read(&c1);
		res[3] = c1.vmlck_kb - c0.vmlck_kb;
		/* the parent's mapping of the same vaddr is not the child's */
		res[4] = vu_map(c, 0x1000000, thp, SZ_2M, RW);
		res[5] = 0;
		th_child_reply(&ch, res, sizeof(res));
	}
	th_child_collect(t, &ch, res, sizeof(res));
	EXPECT_EQ(res[0], 0);
	EXPECT_EQ(res[1], 4 * SZ_4K);
	EXPECT_EQ(res[2], 0);
	EXPECT_EQ(res[3], 16);
	EXPECT_EQ(res[4], -EEXIST);
	/* z is gone (the parent's charge with it); the child's w is pinned */
	EXPECT_PINS_VMLCK(512 + 4 + 4, (512 + 4) * 4);
	EXPECT_EQ(vu_unmap(c, 0x3000000, 4 * SZ_4K, 0, &done), 0);
	EXPECT_EQ(done, 0);

	/* the device reads the parent's THP, writes the parent's pages */
	EXPECT_EQ((uint8_t)thp[0x1000], 0x11);
	EDU_FROM_RAM(&e, 0x1001000, 0, 0x800);
	EDU_FROM_RAM(&e, 0x4000000, 0x800, 0x400);	/* the dead child's page */
	EDU_TO_RAM(&e, 0, 0x2001000, 0xc00);
	EXPECT_EQ((uint8_t)a[0x1000], 0x11);
	EXPECT_EQ((uint8_t)a[0x17ff], 0x11);
	EXPECT_EQ((uint8_t)a[0x1800], 0x77);
	EXPECT_EQ((uint8_t)a[0x1bff], 0x77);
	EXPECT_EQ((uint8_t)a[0x1c00], 0x22);
	EXPECT_EQ((uint8_t)a[0], 0x22);

	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), 0);
	EXPECT_EQ(done, SZ_2M + 8 * SZ_4K);
	EXPECT_ACCT(0);
}

/* ------------------------------------------------------------------ */
/* groups detached with mappings live */

static int unset_container(int gfd)
{
	return ioctl(gfd, VFIO_GROUP_UNSET_CONTAINER) < 0 ? -errno : 0;
}

/*
 * Two e1000e groups; mappings of THP, 4K pages, an invalidated vaddr and the
 * second e1000e's BAR.  The first group leaves: nothing changes.  The second
 * cannot while its device is open (-EBUSY); once closed it leaves and takes
 * everything with it.  The container then has no IOMMU (-EINVAL) until a
 * group and SET_IOMMU give it a fresh, empty one.
 */
TEST_V12(lc_group_detach_with_mappings)
{
	int groups[2], gfd[2], c, dev;
	char *thp = th_mem(t, VU_MEM_THP, SZ_2M);
	char *a = th_anon(t, 4 * SZ_4K);
	char *mfd = th_mem(t, VU_MEM_MEMFD, 16 * SZ_4K);
	const char *mod = th_backend_module();
	long refcnt;
	void *bar;
	size_t barlen;
	uint64_t done = 0;

	th_e1000e_groups(t, groups, 2);
	c = th_container_of(t, t->type, groups, 2, gfd);
	refcnt = vu_module_refcnt(mod);
	dev = th_device_fd(t, gfd[1], th_bdf(t, 1));
	bar = th_bar_mmap(t, dev, VFIO_PCI_BAR0_REGION_INDEX, NULL, &barlen);
	MAP_OK(c, 0x1000000, thp, SZ_2M);
	MAP_OK(c, 0x2000000, a, 4 * SZ_4K);
	MAP_OK(c, 0x3000000, mfd, 16 * SZ_4K);
	MAP_OK(c, 0x4000000, bar, barlen);
	ASSERT_EQ(vu_unmap(c, 0x3000000, 16 * SZ_4K, VFIO_DMA_UNMAP_FLAG_VADDR, NULL), 0);
	EXPECT_ACCT(532);

	ASSERT_EQ(unset_container(gfd[0]), 0);
	EXPECT_ACCT(532);
	EXPECT_EQ(unset_container(gfd[0]), -EINVAL);	/* not in a container */
	UNMAP_OK(c, 0x2000000, 4 * SZ_4K);
	MAP_OK(c, 0x2000000, a, 4 * SZ_4K);
	EXPECT_ACCT(532);

	EXPECT_EQ(unset_container(gfd[1]), -EBUSY);
	EXPECT_ACCT(532);
	ASSERT_EQ(munmap(bar, barlen), 0);
	th_close(t, dev);
	ASSERT_EQ(unset_container(gfd[1]), 0);
	EXPECT_ACCT(0);
	EXPECT_EQ(vu_module_refcnt(mod), refcnt - 1);
	EXPECT_EQ(vu_map(c, 0x2000000, a, 4 * SZ_4K, RW), -EINVAL);
	EXPECT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), -EINVAL);
	EXPECT_EQ(th_dma_avail(c), -EINVAL);

	/* a fresh IOMMU for the container */
	ASSERT_EQ(ioctl(gfd[0], VFIO_GROUP_SET_CONTAINER, &c), 0);
	ASSERT_EQ(vu_set_iommu(c, t->type), 0);
	EXPECT_EQ(vu_module_refcnt(mod), refcnt);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	UNMAP_RANGE(c, 0, 0x10000000, 0);
	MAP_OK(c, 0x3000000, mfd, 16 * SZ_4K);
	EXPECT_ACCT(16);
	UNMAP_OK(c, 0x3000000, 16 * SZ_4K);
}

/* ------------------------------------------------------------------ */

/* After everything above: the IOMMU still maps, and device DMA works. */
TEST(lc_guest_still_works)
{
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	int c2 = th_container_type(t, VFIO_TYPE1_IOMMU, 2);
	char *thp = th_mem(t, VU_MEM_THP, SZ_2M), *a = th_anon(t, SZ_4K);

	edu_open(t, gfd, &e);
	memset(thp + 0x3000, 0x5e, 0x100);
	MAP_OK(c, 0x1000000, thp, SZ_2M);
	MAP_OK(c, 0x2000000, a, SZ_4K);
	MAP_OK(c2, 0x1000000, thp, SZ_2M);
	EXPECT_ACCT(1025);
	EDU_FROM_RAM(&e, 0x1003000, 0, 0x100);
	EDU_TO_RAM(&e, 0, 0x2000010, 0x100);
	EXPECT_EQ((uint8_t)a[0x10], 0x5e);
	EXPECT_EQ((uint8_t)a[0x10f], 0x5e);
	EXPECT_EQ(a[0x110], 0);
	UNMAP_OK(c, 0x1000000, SZ_2M);
	UNMAP_OK(c, 0x2000000, SZ_4K);
	UNMAP_OK(c2, 0x1000000, SZ_2M);
	EXPECT_ACCT(0);
}

TEST_HARNESS_MAIN
