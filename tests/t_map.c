// SPDX-License-Identifier: GPL-2.0-only
/* VFIO_IOMMU_MAP_DMA: valid mappings and every argument check. */
#include <stddef.h>
#include "common.h"

TEST_V12(map_basic_4k_pages)
{
	int c = th_container(t);
	char *p = th_anon(t, 16 * SZ_4K);

	MAP_OK(c, IOVA_A, p, 16 * SZ_4K);
	EXPECT_PINS_VMLCK(16, 16 * 4);
	UNMAP_OK(c, IOVA_A, 16 * SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST_V12(map_read_only_and_write_only_flags)
{
	int c = th_container(t);
	char *p = th_anon(t, 2 * SZ_4K);

	ASSERT_EQ(vu_map(c, IOVA_A, p, SZ_4K, VFIO_DMA_MAP_FLAG_READ), 0);
	ASSERT_EQ(vu_map(c, IOVA_B, p + SZ_4K, SZ_4K, VFIO_DMA_MAP_FLAG_WRITE), 0);
	EXPECT_EQ(th_pins(t), 2);
	UNMAP_OK(c, IOVA_A, SZ_4K);
	UNMAP_OK(c, IOVA_B, SZ_4K);
}

TEST_V12(map_argsz_and_flags)
{
	int c = th_container(t);
	char *p = th_anon(t, SZ_4K);
	struct vfio_iommu_type1_dma_map m = {
		.argsz = sizeof(m), .flags = RW,
		.vaddr = (uintptr_t)p, .iova = IOVA_A, .size = SZ_4K,
	};

	m.argsz = offsetof(struct vfio_iommu_type1_dma_map, size) + 7;
	EXPECT_EQ(th_map_raw(c, &m), -EINVAL);
	m.argsz = 0;
	EXPECT_EQ(th_map_raw(c, &m), -EINVAL);
	m.argsz = sizeof(m);
	m.flags = RW | (1 << 3);
	EXPECT_EQ(th_map_raw(c, &m), -EINVAL);
	m.flags = RW | (1U << 31);
	EXPECT_EQ(th_map_raw(c, &m), -EINVAL);
	/* neither READ nor WRITE */
	m.flags = 0;
	EXPECT_EQ(th_map_raw(c, &m), -EINVAL);
	/* VADDR never combines with READ/WRITE */
	m.flags = RW | VFIO_DMA_MAP_FLAG_VADDR;
	EXPECT_EQ(th_map_raw(c, &m), -EINVAL);
	m.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_VADDR;
	EXPECT_EQ(th_map_raw(c, &m), -EINVAL);
	EXPECT_EQ(th_pins(t), 0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	/* a larger argsz is accepted */
	m.flags = RW;
	m.argsz = sizeof(m) + 64;
	EXPECT_EQ(th_map_raw(c, &m), 0);
	UNMAP_OK(c, IOVA_A, SZ_4K);
}

TEST_V12(map_size_and_alignment)
{
	int c = th_container(t);
	char *p = th_anon(t, 4 * SZ_4K);

	EXPECT_EQ(vu_map(c, IOVA_A, p, 0, RW), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A + 0x800, p, SZ_4K, RW), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A + 1, p, SZ_4K, RW), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A, p + 0x800, SZ_4K, RW), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A, p, SZ_4K + 0x800, RW), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A, p, 0x800, RW), -EINVAL);
	EXPECT_EQ(vu_map(c, IOVA_A, p, 1, RW), -EINVAL);
	EXPECT_PINS_VMLCK(0, 0);
}

/* Any overlap with an existing mapping is -EEXIST; adjacency is fine. */
TEST_V12(map_overlap)
{
	int c = th_container(t);
	char *p = th_anon(t, 8 * SZ_4K);
	uint64_t a = IOVA_A + 4 * SZ_4K;

	MAP_OK(c, a, p, 4 * SZ_4K);
	EXPECT_EQ(vu_map(c, a, p + 4 * SZ_4K, 4 * SZ_4K, RW), -EEXIST);
	/* partial overlap at the start */
	EXPECT_EQ(vu_map(c, a - SZ_4K, p + 4 * SZ_4K, 2 * SZ_4K, RW), -EEXIST);
	/* partial overlap at the end */
	EXPECT_EQ(vu_map(c, a + 3 * SZ_4K, p + 4 * SZ_4K, 2 * SZ_4K, RW), -EEXIST);
	/* inside */
	EXPECT_EQ(vu_map(c, a + SZ_4K, p + 4 * SZ_4K, SZ_4K, RW), -EEXIST);
	EXPECT_EQ(vu_map(c, a + 3 * SZ_4K, p + 4 * SZ_4K, SZ_4K, RW), -EEXIST);
	/* covering */
	EXPECT_EQ(vu_map(c, a - SZ_4K, p + 2 * SZ_4K, 6 * SZ_4K, RW), -EEXIST);
	EXPECT_PINS_VMLCK(4, 16);
	/* adjacent below and above */
	MAP_OK(c, a - SZ_4K, p + 4 * SZ_4K, SZ_4K);
	MAP_OK(c, a + 4 * SZ_4K, p + 5 * SZ_4K, SZ_4K);
	EXPECT_EQ(th_pins(t), 6);
	UNMAP_OK(c, a - SZ_4K, SZ_4K);
	UNMAP_OK(c, a, 4 * SZ_4K);
	UNMAP_OK(c, a + 4 * SZ_4K, SZ_4K);
}

TEST_V12(map_wraparound)
{
	int c = th_container(t);
	char *p = th_anon(t, 2 * SZ_4K);

	/* IOVA wraps */
	EXPECT_EQ(vu_map(c, 0xfffffffffffff000ULL, p, 2 * SZ_4K, RW), wrap_errno());
	EXPECT_EQ(vu_map(c, 0xffffffffffe00000ULL, p, 0x400000, RW), wrap_errno());
	/* vaddr wraps */
	EXPECT_EQ(vu_map(c, IOVA_A, (void *)0xfffffffffffff000ULL, 2 * SZ_4K, RW),
		  wrap_errno());
	/*
	 * The last page of the address space is outside an aperture that
	 * ends below it (Intel, SMMUv3); AMD-Vi's ends there, and
	 * map_aperture_end maps that page.
	 */
	if (th_aperture_end(t) != UINT64_MAX)
		EXPECT_EQ(vu_map(c, 0xfffffffffffff000ULL, p, SZ_4K, RW), -EINVAL);
	EXPECT_EQ(th_pins(t), 0);
}

/* The group's MSI window (th_msi_window(): its reserved region of type msi). */
TEST_V12(map_msi_window)
{
	int c = th_container(t);
	char *p = th_anon(t, 4 * SZ_4K);
	uint64_t lo, hi;

	th_msi_window(t, &lo, &hi);
	th_diag("MSI window 0x%llx-0x%llx", (unsigned long long)lo, (unsigned long long)hi);
	ASSERT_GE(hi - lo + 1, 0x20000);
	EXPECT_EQ(vu_map(c, lo, p, SZ_4K, RW), -EINVAL);
	EXPECT_EQ(vu_map(c, hi + 1 - SZ_4K, p, SZ_4K, RW), -EINVAL);
	EXPECT_EQ(vu_map(c, lo + 0x10000, p, 2 * SZ_4K, RW), -EINVAL);
	/* straddling either edge */
	EXPECT_EQ(vu_map(c, lo - SZ_4K, p, 2 * SZ_4K, RW), -EINVAL);
	EXPECT_EQ(vu_map(c, hi + 1 - SZ_4K, p, 2 * SZ_4K, RW), -EINVAL);
	EXPECT_EQ(th_pins(t), 0);
	/* right below and right above are usable */
	MAP_OK(c, lo - SZ_4K, p, SZ_4K);
	MAP_OK(c, hi + 1, p + SZ_4K, SZ_4K);
	EXPECT_EQ(th_pins(t), 2);
	UNMAP_OK(c, lo - SZ_4K, SZ_4K);
	UNMAP_OK(c, hi + 1, SZ_4K);
}

/*
 * The end of the aperture (th_aperture_end(), per IOMMU): nothing maps
 * beyond it or across it, its last 2M and its last page map. AMD-Vi's ends
 * at 2^64 - 1: nothing lies beyond, a range across the end wraps around
 * (wrap_errno()), and on stock 6.1 and 6.12 a mapping of its end would stay
 * pinned for the guest's lifetime (th_end_mapping_leaks()): that part
 * SKIPs there, saying so.
 */
TEST_V12(map_aperture_end)
{
	int c = th_container(t);
	char *p = th_mem(t, VU_MEM_THP, SZ_2M);
	uint64_t end = th_aperture_end(t);

	th_diag("IOMMU %s, aperture ends at 0x%llx", vu_iommu_name(th_iommu()),
		(unsigned long long)end);
	if (end != UINT64_MAX) {
		EXPECT_EQ(vu_map(c, end + 1, p, SZ_4K, RW), -EINVAL);
		EXPECT_EQ(vu_map(c, end + 1 - SZ_4K, p, 2 * SZ_4K, RW), -EINVAL);
		if (end < (1ULL << 48))
			EXPECT_EQ(vu_map(c, 1ULL << 48, p, SZ_4K, RW), -EINVAL);
	} else {
		EXPECT_EQ(vu_map(c, end + 1 - SZ_4K, p, 2 * SZ_4K, RW), wrap_errno());
		EXPECT_EQ(vu_map(c, end + 1 - SZ_2M, p, 2 * SZ_2M, RW), wrap_errno());
	}
	EXPECT_EQ(th_pins(t), 0);
	if (end == UINT64_MAX && th_end_mapping_leaks())
		SKIP("the aperture ends at 2^64 - 1: stock type1 of %d.%d would map its end "
		     "and never unpin it (unmap loop while iova < iova + size, which wraps)",
		     th_kernel_series() / 100, th_kernel_series() % 100);
	/* the very last 2M of the aperture */
	MAP_OK(c, end + 1 - SZ_2M, p, SZ_2M);
	EXPECT_PINS_VMLCK(512, 2048);
	EXPECT_EQ(vu_map(c, end + 1 - SZ_4K, p, SZ_4K, RW), -EEXIST);
	UNMAP_OK(c, end + 1 - SZ_2M, SZ_2M);
	/* and the very last 4K page */
	MAP_OK(c, end + 1 - SZ_4K, p, SZ_4K);
	UNMAP_OK(c, end + 1 - SZ_4K, SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

/* No VMA at all behind vaddr. */
TEST_V12(map_bad_vaddr)
{
	int c = th_container(t);
	char *p = mmap(NULL, 4 * SZ_4K, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ASSERT_NE(p, MAP_FAILED);
	ASSERT_EQ(munmap(p, 4 * SZ_4K), 0);
	EXPECT_EQ(vu_map(c, IOVA_A, p, 4 * SZ_4K, RW), -EFAULT);
	EXPECT_EQ(vu_map(c, IOVA_A, NULL, SZ_4K, RW), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
}

/* A hole in the middle: the pinned head is rolled back, the IOVA stays free. */
TEST_V12(map_vaddr_hole_rolls_back)
{
	int c = th_container(t);
	char *p = th_anon(t, 64 * SZ_4K);

	ASSERT_EQ(munmap(p + 40 * SZ_4K, SZ_4K), 0);
	EXPECT_EQ(vu_map(c, IOVA_A, p, 64 * SZ_4K, RW), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	/* nothing is left at the IOVA: the head alone maps fine */
	MAP_OK(c, IOVA_A, p, 40 * SZ_4K);
	EXPECT_EQ(th_pins(t), 40);
	UNMAP_OK(c, IOVA_A, 40 * SZ_4K);
}

TEST_V12(map_readonly_memory)
{
	int c = th_container(t);
	char *p = th_anon(t, 4 * SZ_4K);
	char *none = th_anon(t, SZ_4K);

	ASSERT_EQ(mprotect(p, 4 * SZ_4K, PROT_READ), 0);
	ASSERT_EQ(mprotect(none, SZ_4K, PROT_NONE), 0);
	/* the device may write: needs writable memory */
	EXPECT_EQ(vu_map(c, IOVA_A, p, 4 * SZ_4K, RW), -EFAULT);
	EXPECT_EQ(vu_map(c, IOVA_A, p, 4 * SZ_4K, VFIO_DMA_MAP_FLAG_WRITE), -EFAULT);
	EXPECT_EQ(vu_map(c, IOVA_A, none, SZ_4K, VFIO_DMA_MAP_FLAG_READ), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	/* read-only DMA of read-only memory is fine */
	ASSERT_EQ(vu_map(c, IOVA_A, p, 4 * SZ_4K, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_PINS_VMLCK(4, 16);
	UNMAP_OK(c, IOVA_A, 4 * SZ_4K);
}

/* dma_entry_limit caps the number of mappings: -ENOSPC, then room again. */
TEST_V12(map_dma_entry_limit)
{
	long long old = th_param_read("dma_entry_limit");
	char *p = th_anon(t, 4 * SZ_4K);
	int groups[1], gfd, c, err, i;

	ASSERT_GT(old, 0);
	th_e1000e_groups(t, groups, 1);
	ASSERT_EQ(th_param_write("dma_entry_limit", 3), 0);
	/* the limit is read when the container's IOMMU is set */
	c = vu_container_setup(groups, 1, t->type, &gfd);
	err = th_param_write("dma_entry_limit", old);
	if (c >= 0) {
		th_own_fd(t, c);
		th_own_fd(t, gfd);
	}
	ASSERT_EQ(err, 0);
	ASSERT_EQ(th_param_read("dma_entry_limit"), old);
	ASSERT_GE(c, 0);

	EXPECT_EQ(th_dma_avail(c), 3);
	for (i = 0; i < 3; i++)
		MAP_OK(c, IOVA_A + i * SZ_2M, p + i * SZ_4K, SZ_4K);
	EXPECT_EQ(th_dma_avail(c), 0);
	EXPECT_EQ(vu_map(c, IOVA_A + 3 * SZ_2M, p + 3 * SZ_4K, SZ_4K, RW), -ENOSPC);
	EXPECT_EQ(th_pins(t), 3);
	/* overlap is still reported as such when full */
	EXPECT_EQ(vu_map(c, IOVA_A, p, SZ_4K, RW), -EEXIST);
	UNMAP_OK(c, IOVA_A + SZ_2M, SZ_4K);
	EXPECT_EQ(th_dma_avail(c), 1);
	MAP_OK(c, IOVA_A + 3 * SZ_2M, p + 3 * SZ_4K, SZ_4K);
	EXPECT_EQ(th_dma_avail(c), 0);
	/* a new container gets the restored default */
	{
		int g2[2], gfd2, c2;

		th_e1000e_groups(t, g2, 2);
		c2 = th_own_fd(t, vu_container_setup(&g2[1], 1, t->type, &gfd2));
		ASSERT_GE(c2, 0);
		th_own_fd(t, gfd2);
		EXPECT_EQ(th_dma_avail(c2), old);
	}
}

/* Many adjacent single-page mappings, removed by one unmap. */
TEST_V12(map_many_small)
{
	int c = th_container(t);
	char *p = th_anon(t, 64 * SZ_4K);
	int i;

	for (i = 0; i < 64; i++)
		MAP_OK(c, IOVA_A + i * SZ_4K, p + i * SZ_4K, SZ_4K);
	EXPECT_PINS_VMLCK(64, 256);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit") - 64);
	/* one unmap over all of them (allowed: it splits none) */
	UNMAP_OK(c, IOVA_A, 64 * SZ_4K);
	EXPECT_EQ(th_pins(t), 0);
}

TEST_HARNESS_MAIN
