// SPDX-License-Identifier: GPL-2.0-only
/* Locked-memory accounting (VmLck) and RLIMIT_MEMLOCK enforcement. */
#include "common.h"

#define P	SZ_4K

static void charge_kind(struct th *t, enum vu_mem_kind kind, size_t size)
{
	int c = th_container(t);
	char *p = th_mem(t, kind, size);

	MAP_OK(c, IOVA_B, p, size);
	EXPECT_EQ(th_vmlck_kb(t), size >> 10);
	EXPECT_EQ(th_pins(t), th_kind_pins(kind, size));
	UNMAP_OK(c, IOVA_B, size);
	EXPECT_EQ(th_vmlck_kb(t), 0);
	EXPECT_EQ(th_pins(t), 0);
}

TEST_V12(acct_thp)
{
	charge_kind(t, VU_MEM_THP, 8 * SZ_2M);
}

TEST_V12(acct_shmem_4k)
{
	charge_kind(t, VU_MEM_POPULATE, 8 * SZ_2M);
}

TEST_V12(acct_hugetlb2m)
{
	charge_kind(t, VU_MEM_HUGETLB2M, 8 * SZ_2M);
}

/* Stock charges each mapping: the same pages at two IOVAs count twice. */
TEST_V12(acct_same_memory_twice)
{
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_THP, 2 * SZ_2M);

	MAP_OK(c, IOVA_A, p, 2 * SZ_2M);
	MAP_OK(c, IOVA_B, p, 2 * SZ_2M);
	EXPECT_EQ(th_vmlck_kb(t), 2 * 4096);
	EXPECT_EQ(th_pins(t), 2 * 1024);
	UNMAP_OK(c, IOVA_A, 2 * SZ_2M);
	EXPECT_EQ(th_vmlck_kb(t), 4096);
	EXPECT_EQ(th_pins(t), 1024);
	UNMAP_OK(c, IOVA_B, 2 * SZ_2M);
	EXPECT_EQ(th_vmlck_kb(t), 0);
}

/* Partial overlap of the backing memory: each mapping charges its size. */
TEST_V12(acct_overlapping_vaddr)
{
	int c = th_container(t);
	char *p = th_anon(t, 8 * P);

	MAP_OK(c, IOVA_A, p, 6 * P);
	MAP_OK(c, IOVA_B, p + 2 * P, 6 * P);
	EXPECT_EQ(th_vmlck_kb(t), 12 * 4);
	EXPECT_EQ(th_pins(t), 12);
	UNMAP_OK(c, IOVA_A, 6 * P);
	UNMAP_OK(c, IOVA_B, 6 * P);
}

/*
 * Without CAP_IPC_LOCK a map beyond RLIMIT_MEMLOCK fails with -ENOMEM and
 * leaves nothing behind; once the limit allows, the same map works.
 */
static void rlimit_kind(struct th *t, enum vu_mem_kind kind)
{
	int c = th_container(t);
	char *p = th_mem(t, kind, 4 * SZ_2M);
	long long avail = th_dma_avail(c);

	th_drop_ipc_lock(t);
	th_set_memlock(t, 3 * SZ_2M);
	EXPECT_EQ(vu_map(c, IOVA_B, p, 4 * SZ_2M, RW), -ENOMEM);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(th_dma_avail(c), avail);
	/* nothing left at the IOVA: an unmap finds nothing */
	UNMAP_RANGE(c, IOVA_B, 4 * SZ_2M, 0);

	/* up to the limit is fine, one page more is not */
	MAP_OK(c, IOVA_A, p, 3 * SZ_2M);
	EXPECT_EQ(th_vmlck_kb(t), 3 * 2048);
	EXPECT_EQ(vu_map(c, IOVA_A + 3 * SZ_2M, p + 3 * SZ_2M, P, RW), -ENOMEM);
	EXPECT_EQ(th_vmlck_kb(t), 3 * 2048);
	EXPECT_EQ(th_pins(t), th_kind_pins(kind, 3 * SZ_2M));
	UNMAP_OK(c, IOVA_A, 3 * SZ_2M);

	th_set_memlock(t, 4 * SZ_2M);
	MAP_OK(c, IOVA_B, p, 4 * SZ_2M);
	EXPECT_EQ(th_vmlck_kb(t), 4 * 2048);
	EXPECT_EQ(th_pins(t), th_kind_pins(kind, 4 * SZ_2M));
	UNMAP_OK(c, IOVA_B, 4 * SZ_2M);
	EXPECT_EQ(th_vmlck_kb(t), 0);
}

TEST_V12(acct_rlimit_4k)
{
	rlimit_kind(t, VU_MEM_POPULATE);
}

TEST_V12(acct_rlimit_thp)
{
	rlimit_kind(t, VU_MEM_THP);
}

TEST(acct_rlimit_hugetlb2m)
{
	rlimit_kind(t, VU_MEM_HUGETLB2M);
}

/* With CAP_IPC_LOCK the limit does not apply, but the charge is made. */
TEST(acct_rlimit_ignored_with_cap)
{
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_THP, 2 * SZ_2M);

	th_set_memlock(t, SZ_2M);
	MAP_OK(c, IOVA_B, p, 2 * SZ_2M);
	EXPECT_EQ(th_vmlck_kb(t), 4096);
	UNMAP_OK(c, IOVA_B, 2 * SZ_2M);
	EXPECT_EQ(th_vmlck_kb(t), 0);
}

/* mlock()ed memory counts towards the same limit as DMA mappings. */
TEST(acct_rlimit_counts_mlock)
{
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_THP, 2 * SZ_2M);
	char *m = th_anon(t, SZ_2M);

	th_drop_ipc_lock(t);
	th_set_memlock(t, 3 * SZ_2M);
	ASSERT_EQ(mlock(m, SZ_2M), 0);
	EXPECT_EQ(vu_map(c, IOVA_B, p, 2 * SZ_2M, RW), 0);
	EXPECT_EQ(vu_map(c, IOVA_A, p, SZ_2M, RW), -ENOMEM);
	UNMAP_OK(c, IOVA_B, 2 * SZ_2M);
	ASSERT_EQ(munlock(m, SZ_2M), 0);
	EXPECT_EQ(th_vmlck_kb(t), 0);
}

TEST_HARNESS_MAIN
