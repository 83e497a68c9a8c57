// SPDX-License-Identifier: GPL-2.0-only
/*
 * Every memory kind at 2M, 64M and 256M: map, pins and VmLck, unmap,
 * balance. Pins: one per 4K page, except foliomap's one per folio for a
 * mapping of hugetlbfs (t_hugetlbfs.c).
 */
#include "common.h"

static void map_kind(struct th *t, enum vu_mem_kind kind, size_t size)
{
	int c = th_container(t);
	char *p = th_mem(t, kind, size);
	double t0, t1, t2;

	t0 = vu_now();
	MAP_OK(c, IOVA_B, p, size);
	t1 = vu_now();
	EXPECT_PINS_VMLCK(th_kind_pins(kind, size), size >> 10);
	if (size > SZ_2M) {
		uint64_t done = ~0ULL;

		/* v2 refuses to split; v1 unmaps nothing from inside */
		EXPECT_EQ(vu_unmap(c, IOVA_B + SZ_2M, size - SZ_2M, 0, &done),
			  t->v2 ? -EINVAL : 0);
		if (!t->v2)
			EXPECT_EQ(done, 0);
		EXPECT_EQ(th_pins(t), th_kind_pins(kind, size));
	}
	t2 = vu_now();
	UNMAP_OK(c, IOVA_B, size);
	th_diag("%s %zuM: map %.3fs unmap %.3fs", vu_mem_name(kind), size >> 20,
		t1 - t0, vu_now() - t2);
	EXPECT_PINS_VMLCK(0, 0);
}

#define KIND_TESTS(kind, name)						\
	TEST(name##_2M) { t->type = VFIO_TYPE1_IOMMU; map_kind(t, kind, 2ULL << 20); } \
	TEST(name##_64M) { t->type = VFIO_TYPE1v2_IOMMU; t->v2 = true; map_kind(t, kind, 64ULL << 20); } \
	TEST(name##_256M) { t->type = VFIO_TYPE1v2_IOMMU; t->v2 = true; map_kind(t, kind, 256ULL << 20); }

KIND_TESTS(VU_MEM_THP, thp)
KIND_TESTS(VU_MEM_POPULATE, populate)
KIND_TESTS(VU_MEM_HUGETLB2M, hugetlb2m)
KIND_TESTS(VU_MEM_MEMFD, memfd)

/* The same memory mapped in pieces of mixed kinds in one container. */
TEST_V12(mixed_kinds_one_container)
{
	int c = th_container(t);
	enum vu_mem_kind kinds[] = { VU_MEM_THP, VU_MEM_POPULATE, VU_MEM_HUGETLB2M, VU_MEM_MEMFD };
	size_t size = 4 * SZ_2M;
	long long pins = 0;
	unsigned int i;

	for (i = 0; i < 4; i++) {
		MAP_OK(c, IOVA_B + i * SZ_1G, th_mem(t, kinds[i], size), size);
		pins += th_kind_pins(kinds[i], size);
	}
	EXPECT_PINS_VMLCK(pins, 4 * size >> 10);
	UNMAP_RANGE(c, IOVA_B, 4 * SZ_1G, 4 * size);
	EXPECT_EQ(th_pins(t), 0);
}

TEST_HARNESS_MAIN
