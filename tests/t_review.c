// SPDX-License-Identifier: GPL-2.0-only
/* Checks added in kmod review: pin and charge balance of special pages. */
#include <sys/mman.h>
#include "common.h"

/*
 * Read-only mapping of untouched anonymous memory. The zero page would be
 * reserved, unpinned (GUP takes no pin on it) and uncharged, but on 6.12
 * GUP never hands it out here: a FOLL_LONGTERM read-only pin of a page that
 * is not anonymous in a COW mapping unshares it first (gup_must_unshare()),
 * so every page becomes an ordinary anonymous page, pinned and charged. On
 * 6.1 the 15 untouched pages are the zero page: only the written one is
 * pinned and charged (th_ro_zero_page_unshared()). This pins that down on
 * both backends, across two map/unmap cycles.
 */
TEST_V12(review_zero_page_read_only)
{
	int c = th_container(t);
	char *p = mmap(NULL, 16 * SZ_4K, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int real = th_ro_zero_page_unshared() ? 16 : 1;	/* pages not the zero page */

	ASSERT_NE(p, MAP_FAILED);
	th_own_mem(t, p, 16 * SZ_4K);
	vu_madvise_thp(p, 16 * SZ_4K, MADV_NOHUGEPAGE);
	p[5 * SZ_4K] = 1;

	ASSERT_EQ(vu_map(c, IOVA_A, p, 16 * SZ_4K, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_PINS_VMLCK(real, real * 4);
	UNMAP_OK(c, IOVA_A, 16 * SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);

	/* Again: the pages are now populated, the balance must hold. */
	ASSERT_EQ(vu_map(c, IOVA_A, p, 16 * SZ_4K, VFIO_DMA_MAP_FLAG_READ), 0);
	UNMAP_OK(c, IOVA_A, 16 * SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST_HARNESS_MAIN
