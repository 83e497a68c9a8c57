// SPDX-License-Identifier: GPL-2.0-only
/*
 * Real device DMA through the IOMMU with QEMU's edu device: copy a page from
 * one mapping into the device and back out to another, and check the data.
 * This proves the mappings exist in the IOMMU with the right physical pages,
 * not only in the backend's bookkeeping.
 */
#include <sys/uio.h>
#include "common.h"

#define EDU_DMA_SRC	0x80
#define EDU_DMA_DST	0x88
#define EDU_DMA_CNT	0x90
#define EDU_DMA_CMD	0x98
#define EDU_CMD_START	1
#define EDU_CMD_TO_RAM	2
#define EDU_BUF		0x40000ULL	/* the device's 4K buffer */
#define EDU_IOVA_MAX	(1ULL << 28)	/* edu's default DMA mask */
/* QEMU 7.2's edu rejects a transfer reaching the buffer's last byte. */
#define EDU_CNT		0xf00

struct edu {
	int dev;
	volatile uint8_t *bar;
	size_t bar_size;
};

static void edu_open(struct th *t, int gfd, struct edu *e)
{
	char bdfs[4][32];
	int n = vu_env_bdfs(bdfs, 4);
	struct vfio_region_info bar = { .argsz = sizeof(bar), .index = VFIO_PCI_BAR0_REGION_INDEX };
	struct vfio_region_info cfg = { .argsz = sizeof(cfg), .index = VFIO_PCI_CONFIG_REGION_INDEX };
	uint16_t cmd;
	void *p;

	if (n < 1)
		FAIL("VFIO_BDFS is empty");
	e->dev = th_own_fd(t, ioctl(gfd, VFIO_GROUP_GET_DEVICE_FD, bdfs[n - 1]));
	if (e->dev < 0)
		FAIL("VFIO_GROUP_GET_DEVICE_FD %s: %s", bdfs[n - 1], strerror(errno));
	ASSERT_EQ(ioctl(e->dev, VFIO_DEVICE_GET_REGION_INFO, &bar), 0);
	ASSERT_EQ(ioctl(e->dev, VFIO_DEVICE_GET_REGION_INFO, &cfg), 0);
	ASSERT_GE(bar.size, 0x100);
	p = mmap(NULL, bar.size, PROT_READ | PROT_WRITE, MAP_SHARED, e->dev, bar.offset);
	if (p == MAP_FAILED)
		FAIL("mmap BAR0: %s", strerror(errno));
	e->bar = th_own_mem(t, p, bar.size);
	e->bar_size = bar.size;
	/* bus master on */
	ASSERT_EQ(pread(e->dev, &cmd, 2, cfg.offset + 4), 2);
	cmd |= 4;
	ASSERT_EQ(pwrite(e->dev, &cmd, 2, cfg.offset + 4), 2);
	/* identification register: 0xRRmmnnxx, major 1 */
	ASSERT_EQ(*(volatile uint32_t *)e->bar & 0xff, 0xed);
}

/* 32-bit accesses: every address used here is below 4G. */
static void wr64(struct edu *e, unsigned int off, uint64_t v)
{
	*(volatile uint32_t *)(e->bar + off) = (uint32_t)v;
}

static uint64_t rd64(struct edu *e, unsigned int off)
{
	return *(volatile uint32_t *)(e->bar + off);
}

static int edu_dma(struct edu *e, uint64_t src, uint64_t dst, uint64_t cnt, uint64_t cmd)
{
	int i;

	wr64(e, EDU_DMA_SRC, src);
	wr64(e, EDU_DMA_DST, dst);
	wr64(e, EDU_DMA_CNT, cnt);
	wr64(e, EDU_DMA_CMD, cmd | EDU_CMD_START);
	for (i = 0; i < 5000; i++) {
		if (!(rd64(e, EDU_DMA_CMD) & EDU_CMD_START))
			return 0;
		usleep(1000);
	}
	return -ETIMEDOUT;
}

/* RAM at src_iova -> device -> RAM at dst_iova; compare dst with src. */
static void copy_through_device(struct th *t, struct edu *e, uint64_t src_iova,
				const char *src, uint64_t dst_iova, char *dst)
{
	size_t i;

	ASSERT_LT(src_iova | dst_iova, EDU_IOVA_MAX);
	for (i = 0; i < SZ_4K; i++)
		((volatile char *)src)[i] = (char)(i * 7 + 3);
	memset(dst, 0, SZ_4K);
	ASSERT_EQ(edu_dma(e, src_iova, EDU_BUF, EDU_CNT, 0), 0);
	ASSERT_EQ(edu_dma(e, EDU_BUF, dst_iova, EDU_CNT, EDU_CMD_TO_RAM), 0);
	for (i = 0; i < EDU_CNT; i++)
		if (dst[i] != src[i])
			break;
	EXPECT_EQ(i, EDU_CNT);
	/* nothing beyond the transfer */
	for (; i < SZ_4K; i++)
		if (dst[i])
			break;
	EXPECT_EQ(i, SZ_4K);
}

static int edu_container(struct th *t, int type, int *gfd)
{
	int g = th_edu_group(t);

	return th_container_of(t, type, &g, 1, gfd);
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
