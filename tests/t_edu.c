// SPDX-License-Identifier: GPL-2.0-only
/*
 * Real device DMA through the IOMMU with QEMU's edu device: copy a page from
 * one mapping into the device and back out to another, and check the data.
 * This proves the mappings exist in the IOMMU with the right physical pages,
 * not only in the backend's bookkeeping.
 */
#include "common.h"
#include "edu.h"

/* Bytes moved per copy: within edu's buffer, short of its last byte. */
#define COPY_CNT	0xf00

/* RAM at src_iova -> device -> RAM at dst_iova; compare dst with src. */
static void copy_through_device(struct th *t, struct edu *e, uint64_t src_iova,
				const char *src, uint64_t dst_iova, char *dst)
{
	size_t i;

	for (i = 0; i < SZ_4K; i++)
		((volatile char *)src)[i] = (char)(i * 7 + 3);
	memset(dst, 0, SZ_4K);
	EDU_FROM_RAM(e, src_iova, 0, COPY_CNT);
	EDU_TO_RAM(e, 0, dst_iova, COPY_CNT);
	for (i = 0; i < COPY_CNT; i++)
		if (dst[i] != src[i])
			break;
	EXPECT_EQ(i, COPY_CNT);
	/* nothing beyond the transfer */
	for (; i < SZ_4K; i++)
		if (dst[i])
			break;
	EXPECT_EQ(i, SZ_4K);
}

TEST_V12(edu_dma_4k_pages)
{
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *p = th_anon(t, 4 * SZ_4K);

	edu_open(t, gfd, &e);
	MAP_OK(c, 0x100000, p, 2 * SZ_4K);
	MAP_OK(c, 0x200000, p + 2 * SZ_4K, 2 * SZ_4K);
	copy_through_device(t, &e, 0x101000, p + SZ_4K, 0x200000, p + 2 * SZ_4K);
	UNMAP_OK(c, 0x100000, 2 * SZ_4K);
	UNMAP_OK(c, 0x200000, 2 * SZ_4K);
}

/* Offsets inside large pages: the IOMMU must point at the right subpage. */
TEST_V12(edu_dma_hugepages)
{
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *thp = th_mem(t, VU_MEM_THP, 4 * SZ_2M);
	char *shm = th_mem(t, VU_MEM_POPULATE, SZ_2M);

	edu_open(t, gfd, &e);
	MAP_OK(c, 0x1000000, thp, 4 * SZ_2M);
	MAP_OK(c, 0x2000000, shm, SZ_2M);
	copy_through_device(t, &e, 0x1000000 + 3 * SZ_2M + 0x5000,
			    thp + 3 * SZ_2M + 0x5000, 0x2000000 + 0x1ff000, shm + 0x1ff000);
	copy_through_device(t, &e, 0x2000000 + 0x3000, shm + 0x3000,
			    0x1000000 + SZ_2M - SZ_4K, thp + SZ_2M - SZ_4K);
	UNMAP_OK(c, 0x1000000, 4 * SZ_2M);
	UNMAP_OK(c, 0x2000000, SZ_2M);
}

TEST(edu_dma_hugetlb2m)
{
	struct edu e;
	int gfd, c = edu_container(t, VFIO_TYPE1v2_IOMMU, &gfd);
	char *h = th_mem(t, VU_MEM_HUGETLB2M, 2 * SZ_2M);

	edu_open(t, gfd, &e);
	MAP_OK(c, 0x4000000, h, 2 * SZ_2M);
	copy_through_device(t, &e, 0x4000000 + 0x7000, h + 0x7000,
			    0x4000000 + SZ_2M + 0x9000, h + SZ_2M + 0x9000);
	UNMAP_OK(c, 0x4000000, 2 * SZ_2M);
}

/* edu joins a container whose mappings were made for an e1000e group. */
TEST_V12(edu_dma_after_attach)
{
	struct edu e;
	int c = th_container_type(t, t->type, 1);
	char *p = th_mem(t, VU_MEM_THP, 2 * SZ_2M);
	char *q = th_anon(t, 2 * SZ_4K);
	int gfd;

	MAP_OK(c, 0x1000000, p, 2 * SZ_2M);
	MAP_OK(c, 0x3000000, q, 2 * SZ_4K);
	gfd = th_own_fd(t, vu_group_attach(c, th_edu_group(t)));
	ASSERT_GE(gfd, 0);
	EXPECT_EQ(th_pins(t), 1026);
	edu_open(t, gfd, &e);
	copy_through_device(t, &e, 0x1000000 + SZ_2M + 0x2000, p + SZ_2M + 0x2000,
			    0x3000000 + SZ_4K, q + SZ_4K);
	UNMAP_OK(c, 0x1000000, 2 * SZ_2M);
	UNMAP_OK(c, 0x3000000, 2 * SZ_4K);
}

/* Shared file-backed memory (memfd). */
TEST_V12(edu_dma_memfd)
{
	struct edu e;
	int gfd, c = edu_container(t, t->type, &gfd);
	char *m = th_mem(t, VU_MEM_MEMFD, SZ_2M);

	edu_open(t, gfd, &e);
	MAP_OK(c, 0x800000, m, SZ_2M);
	copy_through_device(t, &e, 0x800000 + 0x10000, m + 0x10000,
			    0x800000 + 0x100000, m + 0x100000);
	UNMAP_OK(c, 0x800000, SZ_2M);
}

TEST_HARNESS_MAIN
