// SPDX-License-Identifier: GPL-2.0-only
/*
 * Locked-memory accounting through longer flows: VmLck and pins exact after
 * every map and unmap (v1 unmaps that remove whole mappings they only
 * partly cover, v2 ranges with holes), UPDATE_VADDR with a new vaddr for the
 * same memory (same process, and another process taking the charge over),
 * the same pages mapped in two containers, read-only pins of memory never
 * written.
 */
#define _GNU_SOURCE
#include "edu.h"

static long long vmlck_now(struct th *t)
{
	struct vu_counters c;

	if (vu_counters_read(&c))
		FAIL("cannot read counters");
	return c.vmlck_kb;
}

/* pins and VmLck (KiB) since the test started; pages evaluated once */
/*
 * v1: A [1M, +16K), B THP [2M, +2M), C [4M, +8K), D [5M, +32K), E [6M, +4K).
 * An unmap starting inside A does nothing; one from B's start ending inside
 * C removes B and C whole; one starting in a hole and ending inside D
 * removes D; one over everything removes the rest.
 */
TEST(acct_v1_partial_unmaps)
{
	int c = th_container_type(t, VFIO_TYPE1_IOMMU, 1);
	char *a = th_anon(t, 4 * SZ_4K), *cc = th_anon(t, 2 * SZ_4K);
	char *d = th_anon(t, 8 * SZ_4K), *e = th_anon(t, SZ_4K);
	char *b = th_mem(t, VU_MEM_THP, SZ_2M);
	long long pages = 0;

	MAP_OK(c, 0x100000, a, 4 * SZ_4K);
	EXPECT_ACCT(pages += 4);
	MAP_OK(c, 0x200000, b, SZ_2M);
	EXPECT_ACCT(pages += 512);
	MAP_OK(c, 0x400000, cc, 2 * SZ_4K);
	EXPECT_ACCT(pages += 2);
	MAP_OK(c, 0x500000, d, 8 * SZ_4K);
	EXPECT_ACCT(pages += 8);
	MAP_OK(c, 0x600000, e, SZ_4K);
	EXPECT_ACCT(pages += 1);

	UNMAP_RANGE(c, 0x101000, 0x400000, 0);
	EXPECT_ACCT(pages);
	UNMAP_RANGE(c, 0x200000, 0x201000, SZ_2M + 2 * SZ_4K);
	EXPECT_ACCT(pages -= 514);
	/* B and C are gone: their IOVAs are free again */
	MAP_OK(c, 0x401000, cc, SZ_4K);
	EXPECT_ACCT(pages += 1);
	UNMAP_RANGE(c, 0x401000, SZ_4K, SZ_4K);
	EXPECT_ACCT(pages -= 1);
	UNMAP_RANGE(c, 0x4ff000, 0x2000, 8 * SZ_4K);
	EXPECT_ACCT(pages -= 8);
	UNMAP_RANGE(c, 0, 0x700000, 5 * SZ_4K);
	EXPECT_ACCT(pages -= 5);
	EXPECT_EQ(pages, 0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
}

/* v2: ranges with holes, a refused split changes nothing, then UNMAP_ALL. */
TEST(acct_v2_ranges_and_all)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *thp = th_mem(t, VU_MEM_THP, 2 * SZ_2M);
	char *shm = th_mem(t, VU_MEM_POPULATE, 64 * SZ_4K);
	char *a = th_anon(t, 3 * SZ_4K);
	long long pages = 0;

	MAP_OK(c, 0x1000000, thp, 2 * SZ_2M);
	EXPECT_ACCT(pages += 1024);
	MAP_OK(c, 0x2000000, shm, 64 * SZ_4K);
	EXPECT_ACCT(pages += 64);
	MAP_OK(c, 0x2100000, a, 3 * SZ_4K);
	EXPECT_ACCT(pages += 3);
	MAP_OK(c, 0x3000000, thp + SZ_2M, SZ_2M);	/* same pages again */
	EXPECT_ACCT(pages += 512);

	/* splits are refused and change nothing */
	EXPECT_EQ(vu_unmap(c, 0x1000000, SZ_2M, 0, NULL), -EINVAL);
	EXPECT_EQ(vu_unmap(c, 0x2000000, 0x101000, 0, NULL), -EINVAL);
	EXPECT_ACCT(pages);
	/* shm and a, with the hole between them */
	UNMAP_RANGE(c, 0x2000000, 0x103000, 67 * SZ_4K);
	EXPECT_ACCT(pages -= 67);
	UNMAP_RANGE(c, 0x2000000, 0x103000, 0);
	EXPECT_ACCT(pages);
	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, NULL), 0);
	EXPECT_ACCT(0);
}

/*
 * Same process, new vaddr for the same memory: a memfd mapped again
 * elsewhere, and a THP region moved by mremap().  Pins and VmLck never
 * change; the device still reaches the memory, now written through the new
 * addresses.
 */
TEST(acct_vaddr_new_address_same_memory)
{
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	int fd = memfd_create("lockacct", MFD_CLOEXEC);
	char *m, *m2, *thp = th_mem(t, VU_MEM_THP, SZ_2M), *thp2, *hole;
	char *scr = th_anon(t, SZ_4K);
	uint64_t done = 0;

	edu_open(t, gfd, &e);
	ASSERT_GE(fd, 0);
	th_own_fd(t, fd);
	ASSERT_EQ(ftruncate(fd, SZ_2M), 0);
	m = mmap(NULL, SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_NE(m, MAP_FAILED);
	memset(m, 0x11, SZ_2M);
	MAP_OK(c, 0x1000000, m, SZ_2M);
	MAP_OK(c, 0x2000000, thp, SZ_2M);
	MAP_OK(c, 0x3000000, scr, SZ_4K);
	EXPECT_ACCT(1025);

	ASSERT_EQ(vu_unmap(c, 0x1000000, 0x1200000, VFIO_DMA_UNMAP_FLAG_VADDR, &done), 0);
	EXPECT_EQ(done, 2 * SZ_2M);
	EXPECT_ACCT(1025);
	/* the old addresses go away; the pinned pages stay */
	ASSERT_EQ(munmap(m, SZ_2M), 0);
	m2 = th_own_mem(t, mmap(NULL, SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), SZ_2M);
	ASSERT_NE(m2, MAP_FAILED);
	hole = mmap(NULL, 2 * SZ_2M, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(hole, MAP_FAILED);
	thp2 = (char *)(((uintptr_t)hole + SZ_2M - 1) & ~(SZ_2M - 1));
	ASSERT_EQ(mremap(thp, SZ_2M, SZ_2M, MREMAP_MAYMOVE | MREMAP_FIXED, thp2), thp2);
	th_own_mem(t, thp2, SZ_2M);
	EXPECT_ACCT(1025);

	ASSERT_EQ(vu_map(c, 0x1000000, m2, SZ_2M, VFIO_DMA_MAP_FLAG_VADDR), 0);
	ASSERT_EQ(vu_map(c, 0x2000000, thp2, SZ_2M, VFIO_DMA_MAP_FLAG_VADDR), 0);
	EXPECT_ACCT(1025);
	/* valid again: a second re-attach is refused */
	EXPECT_EQ(vu_map(c, 0x2000000, thp2, SZ_2M, VFIO_DMA_MAP_FLAG_VADDR), -EINVAL);

	/* the device sees what is written through the new addresses */
	memset(m2 + 0x10000, 0x22, SZ_4K);
	memset(thp2 + 0x20000, 0x33, SZ_4K);
	EDU_FROM_RAM(&e, 0x1010000, 0, 0x400);
	EDU_FROM_RAM(&e, 0x2020000, 0x400, 0x400);
	EDU_TO_RAM(&e, 0, 0x3000000, 0x800);
	EXPECT_EQ(scr[0], 0x22);
	EXPECT_EQ(scr[0x3ff], 0x22);
	EXPECT_EQ(scr[0x400], 0x33);
	EXPECT_EQ(scr[0x7ff], 0x33);
	/* and the device writes land in them */
	EDU_TO_RAM(&e, 0, 0x2030000, 0x800);
	EXPECT_EQ(thp2[0x30000], 0x22);
	EXPECT_EQ(thp2[0x307ff], 0x33);

	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, NULL), 0);
	EXPECT_ACCT(0);
	munmap(hole, (size_t)(thp2 - hole));
}

/*
 * Another process re-attaches the vaddr (a forked child, whose inherited
 * MAP_SHARED memfd mapping is the same memory): the charge moves from the
 * parent's VmLck to the child's (stock vfio_change_dma_owner).  The child
 * exits with the mapping live; the pins stay until the parent unmaps, and
 * nothing is charged back to the parent.
 */
TEST(acct_vaddr_other_process_takes_charge)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *m = th_mem(t, VU_MEM_MEMFD, SZ_2M);
	long long res[3] = { -1, -1, -1 };
	struct th_child ch;

	MAP_OK(c, 0x1000000, m, SZ_2M);
	EXPECT_ACCT(512);
	ASSERT_EQ(vu_unmap(c, 0x1000000, SZ_2M, VFIO_DMA_UNMAP_FLAG_VADDR, NULL), 0);
	if (th_fork(t, &ch)) {
		long long before = vmlck_now(t);

		res[0] = vu_map(c, 0x1000000, m, SZ_2M, VFIO_DMA_MAP_FLAG_VADDR);
		res[1] = vmlck_now(t) - before;
		/* a second attempt: the mapping is valid now */
		res[2] = vu_map(c, 0x1000000, m, SZ_2M, VFIO_DMA_MAP_FLAG_VADDR);
		th_child_reply(&ch, res, sizeof(res));
	}
	th_child_collect(t, &ch, res, sizeof(res));
	EXPECT_EQ(res[0], 0);
	EXPECT_EQ(res[1], 2048);
	EXPECT_EQ(res[2], -EINVAL);
	/* the parent is no longer charged; the pages are still pinned */
	EXPECT_EQ(th_vmlck_kb(t), 0);
	EXPECT_EQ(th_pins(t), 512);
	/* the owner is gone: unmapping releases the pins, charges nobody */
	UNMAP_OK(c, 0x1000000, SZ_2M);
	EXPECT_ACCT(0);
}

/* The same pages in two containers: pinned and charged once per container. */
TEST_V12(acct_same_pages_two_containers)
{
	int groups[2], gfd[2], c1, c2;
	char *thp = th_mem(t, VU_MEM_THP, SZ_2M);
	char *a = th_anon(t, 4 * SZ_4K);

	th_e1000e_groups(t, groups, 2);
	c1 = th_container_of(t, t->type, &groups[0], 1, &gfd[0]);
	c2 = th_container_of(t, t->type, &groups[1], 1, &gfd[1]);
	MAP_OK(c1, 0x1000000, thp, SZ_2M);
	MAP_OK(c1, 0x2000000, a, 4 * SZ_4K);
	EXPECT_ACCT(516);
	MAP_OK(c2, 0x1000000, thp, SZ_2M);
	MAP_OK(c2, 0x3000000, a, 4 * SZ_4K);
	EXPECT_ACCT(2 * 516);
	/* the same IOVA in the other container is independent */
	EXPECT_EQ(vu_map(c2, 0x1000000, a, SZ_4K, RW), -EEXIST);
	EXPECT_EQ(vu_unmap(c2, 0x2000000, 4 * SZ_4K, 0, NULL), 0);
	EXPECT_ACCT(2 * 516);
	UNMAP_OK(c1, 0x1000000, SZ_2M);
	EXPECT_ACCT(516 + 4);
	UNMAP_OK(c1, 0x2000000, 4 * SZ_4K);
	EXPECT_ACCT(516);
	/* closing the other container with live mappings releases the rest */
	th_close(t, c2);
	th_close(t, gfd[1]);
	EXPECT_ACCT(0);
}

/*
 * Read-only mappings of private memory never written (the zero page, the
 * huge zero page): a long-term pin unshares it, so real pages are pinned
 * and charged like any others (stock 6.12). On 6.1 the 4K ones stay the
 * zero page, neither pinned nor charged (th_ro_zero_page_unshared()); the
 * huge zero page is a real THP there too.
 */
TEST(acct_read_only_untouched_memory)
{
	int c = th_container_type(t, VFIO_TYPE1v2_IOMMU, 1);
	char *p = mmap(NULL, 16 * SZ_4K, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *h = mmap(NULL, 2 * SZ_2M, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *h2;
	volatile char sink;
	int zero = th_ro_zero_page_unshared() ? 1 : 0;	/* a zero page counts */
	int i;

	ASSERT_NE(p, MAP_FAILED);
	th_own_mem(t, p, 16 * SZ_4K);
	/*
	 * 4K zero pages: without this, p's vma may merge with h's and its
	 * read faults land on a huge zero page (seen on 6.1: 11 pinned).
	 */
	ASSERT_EQ(vu_madvise_thp(p, 16 * SZ_4K, MADV_NOHUGEPAGE), 0);
	ASSERT_NE(h, MAP_FAILED);
	th_own_mem(t, h, 2 * SZ_2M);
	h2 = (char *)(((uintptr_t)h + SZ_2M - 1) & ~(SZ_2M - 1));
	ASSERT_EQ(vu_madvise_thp(h2, SZ_2M, MADV_HUGEPAGE), 0);
	/* read faults: the zero page and, if enabled, the huge zero page */
	for (i = 0; i < 16; i++)
		sink = p[i * SZ_4K];
	sink = h2[0];
	(void)sink;

	ASSERT_EQ(vu_map(c, 0x1000000, p, 16 * SZ_4K, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_ACCT(16 * zero);
	ASSERT_EQ(vu_map(c, 0x2000000, h2, SZ_2M, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_ACCT(16 * zero + 512);
	/* never read at all: no page table entry yet */
	ASSERT_EQ(vu_map(c, 0x3000000, h2 == h ? h + SZ_2M : h, SZ_4K, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_ACCT(16 * zero + 512 + zero);
	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, NULL), 0);
	EXPECT_ACCT(0);
}

TEST_HARNESS_MAIN
