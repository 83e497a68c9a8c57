// SPDX-License-Identifier: GPL-2.0-only
/* Containers with two groups: attach with mappings, detach, last group leaving. */
#include "common.h"

#define P	SZ_4K

static int unset_container(int gfd)
{
	return ioctl(gfd, VFIO_GROUP_UNSET_CONTAINER) < 0 ? -errno : 0;
}

TEST_V12(mg_two_groups_map_unmap)
{
	int c = th_container_type(t, t->type, 2);
	char *p = th_mem(t, VU_MEM_THP, 2 * SZ_2M);
	char *q = th_anon(t, 8 * P);

	MAP_OK(c, IOVA_B, p, 2 * SZ_2M);
	MAP_OK(c, IOVA_A, q, 8 * P);
	EXPECT_PINS_VMLCK(1024 + 8, 4096 + 32);
	UNMAP_OK(c, IOVA_B, 2 * SZ_2M);
	UNMAP_OK(c, IOVA_A, 8 * P);
	EXPECT_PINS_VMLCK(0, 0);
}

/* The second group joins a container that already has mappings. */
TEST_V12(mg_attach_with_mappings)
{
	int c = th_container_type(t, t->type, 1);
	char *p = th_mem(t, VU_MEM_THP, 2 * SZ_2M);
	char *q = th_anon(t, 16 * P);
	int groups[2], g2;

	th_e1000e_groups(t, groups, 2);
	MAP_OK(c, IOVA_B, p, 2 * SZ_2M);
	MAP_OK(c, IOVA_A, q, 8 * P);
	ASSERT_EQ(th_pins(t), 1032);
	g2 = th_own_fd(t, vu_group_attach(c, groups[1]));
	ASSERT_GE(g2, 0);
	/* no new pins, no new charge */
	EXPECT_PINS_VMLCK(1032, 4096 + 32);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit") - 2);
	/* existing mappings keep their shape, new ones work */
	EXPECT_EQ(vu_map(c, IOVA_A, q, P, RW), -EEXIST);
	MAP_OK(c, IOVA_A + SZ_2M, q + 8 * P, 8 * P);
	if (t->v2)
		EXPECT_EQ(vu_unmap(c, IOVA_B, SZ_2M, 0, NULL), -EINVAL);
	UNMAP_OK(c, IOVA_B, 2 * SZ_2M);
	UNMAP_RANGE(c, IOVA_A, SZ_1G - IOVA_A, 16 * P);
	EXPECT_PINS_VMLCK(0, 0);
}

/*
 * Groups that join a domain in use change nothing the container reports:
 * GET_INFO (flags, page sizes, IOVA ranges, migration and DMA-available
 * capabilities) is byte for byte the same, and so is DMA_CC_IOMMU; the
 * mappings made before stay in use. edu_dma_after_attach (t_edu) shows DMA
 * through such a domain.
 */
TEST_V12(mg_join_keeps_info)
{
	int c = th_container_type(t, t->type, 1);
	char *p = th_mem(t, VU_MEM_THP, 2 * SZ_2M);
	char before[4096], after[4096];
	int groups[2], cc, g2, g3;

	th_e1000e_groups(t, groups, 2);
	MAP_OK(c, IOVA_B, p, 2 * SZ_2M);
	ASSERT_EQ(th_get_info(c, before, sizeof(before)), 0);
	cc = ioctl(c, VFIO_CHECK_EXTENSION, VFIO_DMA_CC_IOMMU);
	ASSERT_GE(cc, 0);

	g2 = th_own_fd(t, vu_group_attach(c, groups[1]));
	ASSERT_GE(g2, 0);
	g3 = th_own_fd(t, vu_group_attach(c, th_edu_group(t)));
	ASSERT_GE(g3, 0);
	ASSERT_EQ(th_get_info(c, after, sizeof(after)), 0);
	EXPECT_EQ(memcmp(before, after, sizeof(before)), 0);
	EXPECT_EQ(ioctl(c, VFIO_CHECK_EXTENSION, VFIO_DMA_CC_IOMMU), cc);
	EXPECT_EQ(vu_map(c, IOVA_B, p, SZ_4K, RW), -EEXIST);
	EXPECT_PINS_VMLCK(1024, 4096);

	/* Each leaves again; the first group keeps the mappings. */
	th_close(t, g3);
	th_close(t, g2);
	ASSERT_EQ(th_get_info(c, after, sizeof(after)), 0);
	EXPECT_EQ(memcmp(before, after, sizeof(before)), 0);
	EXPECT_PINS_VMLCK(1024, 4096);
	UNMAP_OK(c, IOVA_B, 2 * SZ_2M);
	EXPECT_PINS_VMLCK(0, 0);
}

/* A group leaves while mappings exist: they stay for the remaining group. */
TEST_V12(mg_detach_with_mappings)
{
	int groups[2], gfds[2], c;
	char *q = th_anon(t, 8 * P);

	th_e1000e_groups(t, groups, 2);
	c = th_container_type(t, t->type, 2);
	/* th_container_type registered the group fds after the container */
	gfds[0] = t->fds[t->nfds - 2];
	gfds[1] = t->fds[t->nfds - 1];
	MAP_OK(c, IOVA_A, q, 8 * P);
	ASSERT_EQ(unset_container(gfds[1]), 0);
	EXPECT_EQ(unset_container(gfds[1]), -EINVAL);
	EXPECT_PINS_VMLCK(8, 32);
	EXPECT_EQ(vu_map(c, IOVA_A, q, P, RW), -EEXIST);
	/* and may come back */
	ASSERT_EQ(ioctl(gfds[1], VFIO_GROUP_SET_CONTAINER, &c), 0);
	EXPECT_EQ(th_pins(t), 8);
	UNMAP_OK(c, IOVA_A, 8 * P);
	EXPECT_EQ(th_pins(t), 0);
}

/* The last group leaving tears the IOMMU down: everything unpinned. */
TEST_V12(mg_last_group_leaves)
{
	int groups[1], gfd, c;
	char *p = th_mem(t, VU_MEM_THP, SZ_2M);
	char *q = th_anon(t, 8 * P);

	c = th_container_type(t, t->type, 1);
	gfd = t->fds[t->nfds - 1];
	th_e1000e_groups(t, groups, 1);
	MAP_OK(c, IOVA_B, p, SZ_2M);
	MAP_OK(c, IOVA_A, q, 8 * P);
	ASSERT_EQ(th_pins(t), 520);
	ASSERT_EQ(unset_container(gfd), 0);
	EXPECT_PINS_VMLCK(0, 0);
	/* no IOMMU any more */
	EXPECT_EQ(vu_map(c, IOVA_A, q, 8 * P, RW), -EINVAL);
	/* the container can be set up again, empty */
	ASSERT_EQ(ioctl(gfd, VFIO_GROUP_SET_CONTAINER, &c), 0);
	ASSERT_EQ(vu_set_iommu(c, t->type), 0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	MAP_OK(c, IOVA_A, q, 8 * P);
	EXPECT_EQ(th_pins(t), 8);
	UNMAP_OK(c, IOVA_A, 8 * P);
}

/* Closing every fd with mappings in a 2-group container releases all. */
TEST_V12(mg_close_with_mappings)
{
	int c = th_container_type(t, t->type, 2);
	char *p = th_mem(t, VU_MEM_THP, 4 * SZ_2M);

	MAP_OK(c, IOVA_B, p, 4 * SZ_2M);
	EXPECT_EQ(th_pins(t), 2048);
	/* the harness closes the fds and checks pins and VmLck */
}

TEST_HARNESS_MAIN
