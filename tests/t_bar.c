// SPDX-License-Identifier: GPL-2.0-only
/*
 * Device memory: an e1000e's BAR0 mmapped through its VFIO device fd (a
 * VM_PFNMAP range) and mapped for DMA.  Stock 6.12 accepts it: the pfns are
 * looked up, never pinned and never charged.  Alone, next to ordinary
 * mappings in one container, and inside one mapping whose vaddr range runs
 * through ordinary memory, the BAR and ordinary memory again (the reserved
 * pfn paths: only the ordinary pages are pinned, charged and released).
 * With edu in the container, device DMA reads and writes the e1000e's
 * registers through the IOMMU (peer to peer) and reaches the ordinary pages
 * on both sides of the BAR.
 */
#include "edu.h"

#define E1000_RDBAL	0x2800
#define E1000_RDBAH	0x2804
#define E1000_RDLEN	0x2808

/* pins and VmLck (KiB) since the test started; pages evaluated once */
/* First e1000e's device fd in the container's group. */
static int e1000e_dev(struct th *t, int gfd)
{
	int dev = th_device_fd(t, gfd, th_bdf(t, 0));

	th_bus_master(t, dev);
	return dev;
}

/* BAR0 of dev, registered for munmap at teardown (before the fds close). */
static volatile uint8_t *bar0(struct th *t, int dev, size_t *size)
{
	void *p = th_bar_mmap(t, dev, VFIO_PCI_BAR0_REGION_INDEX, NULL, size);

	return th_own_mem(t, p, *size);
}

TEST_V12(bar_map_alone)
{
	int groups[1], gfd, c, dev;
	size_t size;
	volatile uint8_t *bar;

	th_e1000e_groups(t, groups, 1);
	c = th_container_of(t, t->type, groups, 1, &gfd);
	dev = e1000e_dev(t, gfd);
	bar = bar0(t, dev, &size);
	ASSERT_GE(size, 32 * SZ_4K);

	MAP_OK(c, IOVA_A, (void *)bar, size);
	EXPECT_ACCT(0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit") - 1);
	EXPECT_EQ(vu_map(c, IOVA_A + SZ_4K, (void *)bar, SZ_4K, RW), -EEXIST);
	/* a part of the BAR, read-only, elsewhere */
	ASSERT_EQ(vu_map(c, IOVA_B, (void *)(bar + 3 * SZ_4K), 5 * SZ_4K,
			 VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_ACCT(0);
	if (t->v2)
		EXPECT_EQ(vu_unmap(c, IOVA_A, SZ_4K, 0, NULL), -EINVAL);
	else
		UNMAP_RANGE(c, IOVA_A + SZ_4K, SZ_4K, 0);
	UNMAP_OK(c, IOVA_A, size);
	UNMAP_OK(c, IOVA_B, 5 * SZ_4K);
	EXPECT_ACCT(0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	/* and again: the lookup faults the ptes in only once */
	MAP_OK(c, IOVA_A, (void *)bar, size);
	UNMAP_OK(c, IOVA_A, size);
}

/* The BAR next to ordinary mappings: separate unmaps, then UNMAP_ALL. */
TEST_V12(bar_next_to_memory)
{
	int groups[1], gfd, c, dev;
	size_t size;
	volatile uint8_t *bar;
	char *thp = th_mem(t, VU_MEM_THP, SZ_2M);
	char *a = th_anon(t, 4 * SZ_4K);
	uint64_t done = 0;

	th_e1000e_groups(t, groups, 1);
	c = th_container_of(t, t->type, groups, 1, &gfd);
	dev = e1000e_dev(t, gfd);
	bar = bar0(t, dev, &size);

	MAP_OK(c, 0x1000000, thp, SZ_2M);
	MAP_OK(c, 0x1200000, (void *)bar, size);	/* right after the THP */
	MAP_OK(c, 0x1200000 + size, a, 4 * SZ_4K);	/* right after the BAR */
	EXPECT_ACCT(516);
	UNMAP_OK(c, 0x1200000, size);
	EXPECT_ACCT(516);
	MAP_OK(c, 0x1200000, (void *)bar, size);
	UNMAP_OK(c, 0x1000000, SZ_2M);
	EXPECT_ACCT(4);
	MAP_OK(c, 0x1000000, thp, SZ_2M);
	EXPECT_ACCT(516);
	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), 0);
	EXPECT_EQ(done, SZ_2M + size + 4 * SZ_4K);
	EXPECT_ACCT(0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
}

/*
 * Address space laid out as [head][BAR0][tail] with the BAR mmapped
 * MAP_FIXED between two ordinary private anonymous parts; head is a 2M THP
 * when thp_head, else 4 pages.  Returns the start; *len the total.
 */
static char *mixed_layout(struct th *t, int dev, bool thp_head, size_t tail,
			  size_t *head_len, size_t *bar_len, size_t *len)
{
	struct vfio_region_info r = { .argsz = sizeof(r), .index = VFIO_PCI_BAR0_REGION_INDEX };
	size_t head = thp_head ? SZ_2M : 4 * SZ_4K, size;
	char *res, *p;
	size_t off;

	ASSERT_EQ(ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &r), 0);
	*len = head + r.size + tail;
	res = mmap(NULL, *len + SZ_2M, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	ASSERT_NE(res, MAP_FAILED);
	th_own_mem(t, res, *len + SZ_2M);
	p = (char *)(((uintptr_t)res + SZ_2M - 1) & ~(SZ_2M - 1));
	if (thp_head)
		ASSERT_EQ(vu_madvise_thp(p, head, MADV_HUGEPAGE), 0);
	for (off = 0; off < head; off += SZ_4K)
		p[off] = 1;
	ASSERT_EQ(th_bar_mmap(t, dev, VFIO_PCI_BAR0_REGION_INDEX, p + head, &size), p + head);
	ASSERT_EQ(size, r.size);
	memset(p + head + size, 2, tail);
	*head_len = head;
	*bar_len = size;
	return p;
}

/*
 * One MAP_DMA over [4 pages][BAR][4 pages] and over [BAR][4 pages]
 * (the BAR first): only the ordinary pages are pinned and charged, and all
 * of them are released by the unmap.
 */
TEST_V12(bar_inside_one_mapping)
{
	int groups[1], gfd, c, dev;
	size_t head, barlen, len;
	char *p;

	th_e1000e_groups(t, groups, 1);
	c = th_container_of(t, t->type, groups, 1, &gfd);
	dev = e1000e_dev(t, gfd);
	p = mixed_layout(t, dev, false, 4 * SZ_4K, &head, &barlen, &len);

	MAP_OK(c, 0x1000000, p, len);
	EXPECT_ACCT(8);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit") - 1);
	MAP_OK(c, 0x2000000, p + head, barlen + 4 * SZ_4K);
	EXPECT_ACCT(12);
	/* the BAR alone a third time, and its first page once more */
	MAP_OK(c, 0x3000000, p + head, barlen);
	MAP_OK(c, 0x3100000, p + head, SZ_4K);
	EXPECT_ACCT(12);
	UNMAP_OK(c, 0x1000000, len);
	EXPECT_ACCT(4);
	UNMAP_RANGE(c, 0x2000000, 0x2000000, barlen + 4 * SZ_4K + barlen + SZ_4K);
	EXPECT_ACCT(0);
}

/* The mapping covers a THP, the BAR and 4K pages, then UNMAP_ALL. */
TEST_V12(bar_between_thp_and_pages)
{
	int groups[1], gfd, c, dev;
	size_t head, barlen, len;
	char *p;
	uint64_t done = 0;

	th_e1000e_groups(t, groups, 1);
	c = th_container_of(t, t->type, groups, 1, &gfd);
	dev = e1000e_dev(t, gfd);
	p = mixed_layout(t, dev, true, 4 * SZ_4K, &head, &barlen, &len);

	MAP_OK(c, 0x1000000, p, len);
	EXPECT_ACCT(516);
	/* the same THP on its own too */
	MAP_OK(c, 0x4000000, p, SZ_2M);
	EXPECT_ACCT(1028);
	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), 0);
	EXPECT_EQ(done, len + SZ_2M);
	EXPECT_ACCT(0);
}

/*
 * UPDATE_VADDR over a BAR mapping: invalidate, mmap the BAR again
 * elsewhere, re-attach; nothing is pinned or charged at any step.
 */
TEST(bar_vaddr_update)
{
	int groups[1], gfd, c, dev;
	size_t size = 0, size2 = 0;
	void *bar, *bar2;
	char *a = th_anon(t, 2 * SZ_4K);
	uint64_t done = 0;

	th_e1000e_groups(t, groups, 1);
	c = th_container_of(t, VFIO_TYPE1v2_IOMMU, groups, 1, &gfd);
	dev = e1000e_dev(t, gfd);
	bar = th_bar_mmap(t, dev, VFIO_PCI_BAR0_REGION_INDEX, NULL, &size);
	MAP_OK(c, IOVA_A, bar, size);
	MAP_OK(c, IOVA_A + size, a, 2 * SZ_4K);
	EXPECT_ACCT(2);
	ASSERT_EQ(vu_unmap(c, IOVA_A, size + 2 * SZ_4K, VFIO_DMA_UNMAP_FLAG_VADDR, &done), 0);
	EXPECT_EQ(done, size + 2 * SZ_4K);
	ASSERT_EQ(munmap(bar, size), 0);
	EXPECT_ACCT(2);
	/* two statements: th_own_mem's size must be read after the mmap */
	bar2 = th_bar_mmap(t, dev, VFIO_PCI_BAR0_REGION_INDEX, NULL, &size2);
	th_own_mem(t, bar2, size2);
	ASSERT_EQ(vu_map(c, IOVA_A, bar2, size2, VFIO_DMA_MAP_FLAG_VADDR), 0);
	ASSERT_EQ(vu_map(c, IOVA_A + size, a, 2 * SZ_4K, VFIO_DMA_MAP_FLAG_VADDR), 0);
	EXPECT_ACCT(2);
	ASSERT_EQ(vu_unmap(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), 0);
	EXPECT_EQ(done, size + 2 * SZ_4K);
	EXPECT_ACCT(0);
}

/* A read-only BAR mmap cannot back a device-writable mapping (as memory). */
TEST(bar_read_only_mmap)
{
	int groups[1], gfd, c, dev;
	struct vfio_region_info r = { .argsz = sizeof(r), .index = VFIO_PCI_BAR0_REGION_INDEX };
	void *p;

	th_e1000e_groups(t, groups, 1);
	c = th_container_of(t, VFIO_TYPE1v2_IOMMU, groups, 1, &gfd);
	dev = e1000e_dev(t, gfd);
	ASSERT_EQ(ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &r), 0);
	p = mmap(NULL, r.size, PROT_READ, MAP_SHARED, dev, r.offset);
	ASSERT_NE(p, MAP_FAILED);
	th_own_mem(t, p, r.size);
	EXPECT_EQ(vu_map(c, IOVA_A, p, r.size, RW), -EFAULT);
	EXPECT_EQ(vu_map(c, IOVA_A, p, r.size, VFIO_DMA_MAP_FLAG_WRITE), -EFAULT);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	ASSERT_EQ(vu_map(c, IOVA_A, p, r.size, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_ACCT(0);
	UNMAP_OK(c, IOVA_A, r.size);
}

/*
 * Peer to peer through the IOMMU: edu and the first e1000e in one container;
 * one mapping over [THP][e1000e BAR0][4 pages] at IOVA X.  edu reads the
 * e1000e's receive descriptor registers and THP data, writes both into the
 * tail pages, and writes a register of the e1000e, which the CPU then reads.
 */
TEST_V12(bar_peer_to_peer_dma)
{
	int groups[2], gfd[2], c, dev;
	size_t head, barlen, len;
	struct edu e;
	char *p, *tail;
	uint8_t regs[16];
	volatile uint8_t *bar;
	const uint64_t X = 0x4000000;
	uint32_t v = 0x87654320;

	th_e1000e_groups(t, groups, 1);
	groups[1] = th_edu_group(t);
	c = th_container_of(t, t->type, groups, 2, gfd);
	dev = e1000e_dev(t, gfd[0]);
	edu_open(t, gfd[1], &e);
	p = mixed_layout(t, dev, true, 4 * SZ_4K, &head, &barlen, &len);
	bar = (volatile uint8_t *)p + head;
	tail = p + head + barlen;

	*(volatile uint32_t *)(bar + E1000_RDBAL) = 0x12345670;
	*(volatile uint32_t *)(bar + E1000_RDBAH) = 0x9abc;
	*(volatile uint32_t *)(bar + E1000_RDLEN) = 0x1000;
	ASSERT_EQ(*(volatile uint32_t *)(bar + E1000_RDBAL), 0x12345670);
	memset(p + 0x1000, 0x3c, 0x100);
	memcpy(p + 0x2000, &v, 4);

	MAP_OK(c, X, p, len);
	EXPECT_ACCT(516);
	EDU_FROM_RAM(&e, X + head + E1000_RDBAL, 0, 16);
	EDU_FROM_RAM(&e, X + 0x1000, 16, 0x100);
	EDU_TO_RAM(&e, 0, X + head + barlen + SZ_4K, 0x110);
	memcpy(regs, (const void *)(bar + E1000_RDBAL), 16);
	EXPECT_EQ(memcmp(tail + SZ_4K, regs, 16), 0);
	EXPECT_EQ(*(uint32_t *)(tail + SZ_4K), 0x12345670);
	EXPECT_EQ(tail[SZ_4K + 16], 0x3c);
	EXPECT_EQ(tail[SZ_4K + 0x10f], 0x3c);
	EXPECT_EQ(tail[SZ_4K + 0x110], 2);	/* untouched beyond */

	/* device write into the e1000e's RDBAL */
	EDU_FROM_RAM(&e, X + 0x2000, 0x200, 4);
	EDU_TO_RAM(&e, 0x200, X + head + E1000_RDBAL, 4);
	EXPECT_EQ(*(volatile uint32_t *)(bar + E1000_RDBAL), v);

	UNMAP_OK(c, X, len);
	EXPECT_ACCT(0);
}

TEST_HARNESS_MAIN
