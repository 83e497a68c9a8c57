// SPDX-License-Identifier: GPL-2.0-only
/*
 * Emulated-IOMMU users (mdev-like devices) through the in-kernel API:
 * vfio_pin_pages, vfio_unpin_pages, vfio_dma_rw and the dma_unmap callback.
 *
 * The test module tests/emu/fm_emu.ko (bin/fm_emu-<uname -r>.ko next to
 * this program) registers two emulated-IOMMU vfio devices, "fm_emu" and
 * "fm_emu.1", each in a group of its own.  main() inserts it when it is not
 * loaded and removes it again at the end.  Each test puts the first group in
 * a type1 container (alone, or with an e1000e group, whose domain pins and
 * charges every mapping), opens the device and drives the module with the
 * ioctls of emu/fm_emu.h; the lockorder tests use both.
 */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <sys/utsname.h>

#include "common.h"
#include "emu_dev.h"

#define NP		16		/* pages per test mapping */
#define MSZ		(NP * SZ_4K)
#define IOMMU_R		1
#define IOMMU_W		2
#define SIG(i)		(0x5e5e000000000000ULL | (uint64_t)(i))

/* Private anonymous memory with SIG(page) in the first u64 of each page. */
static uint64_t *sig_mem(struct th *t, size_t size)
{
	uint64_t *p = th_anon(t, size);
	size_t i;

	for (i = 0; i < size / SZ_4K; i++)
		p[i * (SZ_4K / 8)] = SIG(i);
	return p;
}

#define KB(pages)	((long long)(pages) * 4)

/* emu_v2(), then MSZ of sig_mem() mapped read/write at IOVA_A. */
static uint64_t *emu_v2_mapped(struct th *t, struct emu *e, bool nic)
{
	uint64_t *p;

	emu_v2(t, e, nic);
	p = sig_mem(t, MSZ);
	MAP_OK(e->c, IOVA_A, p, MSZ);
	return p;
}

/* ------------------------------------------------------------------ */
/* setup */

TEST(emu_device_opens)
{
	struct emu e;
	struct fm_emu_stats s;

	emu_v2(t, &e, false);
	s = emu_stats(t, &e);
	EXPECT_GE(s.opens, 1);
	EXPECT_EQ(s.records, 0);
	/* a wrong name is refused */
	EXPECT_LT(ioctl(e.egfd, VFIO_GROUP_GET_DEVICE_FD, "fm_emu_nope"), 0);
}

/* ------------------------------------------------------------------ */
/* pin_pages / unpin_pages and accounting */

/* Emulated group alone: MAP pins nothing; each pinned page is charged once. */
TEST(pin_charges_without_iommu_group)
{
	struct emu e;
	uint64_t sig[4] = { 0 };
	int i;

	emu_v2_mapped(t, &e, false);
	EXPECT_PINS_VMLCK(0, 0);

	ASSERT_EQ(emu_pin_sig(t, &e, IOVA_A + 2 * SZ_4K, 4, IOMMU_R | IOMMU_W, sig, 0), 4);
	for (i = 0; i < 4; i++)
		EXPECT_EQ(sig[i], SIG(2 + i));
	EXPECT_PINS_VMLCK(4, KB(4));

	/* the same pages again: a reference, no new pin or charge */
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + 3 * SZ_4K, 2, IOMMU_R), 2);
	EXPECT_PINS_VMLCK(4, KB(4));

	emu_unpin(t, &e, IOVA_A + 2 * SZ_4K, 4);
	EXPECT_PINS_VMLCK(2, KB(2));
	emu_unpin(t, &e, IOVA_A + 3 * SZ_4K, 2);
	EXPECT_PINS_VMLCK(0, 0);
	UNMAP_OK(e.c, IOVA_A, MSZ);
	EXPECT_EQ(emu_stats(t, &e).unmap_calls, 0);	/* nothing was pinned */
}

/* An IOMMU group in the container already pinned and charged the pages. */
TEST(pin_not_double_charged_with_iommu_group)
{
	struct emu e;
	uint64_t sig[3] = { 0 };
	int i;

	emu_v2_mapped(t, &e, true);
	EXPECT_PINS_VMLCK(NP, KB(NP));

	ASSERT_EQ(emu_pin_sig(t, &e, IOVA_A + 5 * SZ_4K, 3, IOMMU_W, sig, 0), 3);
	for (i = 0; i < 3; i++)
		EXPECT_EQ(sig[i], SIG(5 + i));
	/* the external pin holds a pin of its own but no extra charge */
	EXPECT_PINS_VMLCK(NP + 3, KB(NP));
	emu_unpin(t, &e, IOVA_A + 5 * SZ_4K, 3);
	EXPECT_PINS_VMLCK(NP, KB(NP));

	/* unmapping while pinned: the callback drops them, nothing leaks */
	ASSERT_EQ(emu_pin(t, &e, IOVA_A, NP, IOMMU_R | IOMMU_W), NP);
	EXPECT_EQ(th_pins(t), 2 * NP);
	UNMAP_OK(e.c, IOVA_A, MSZ);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(emu_stats(t, &e).pinned_pages, 0);
}

/* The module writes through the pinned page: userspace sees it. */
TEST(pin_writes_reach_user_memory)
{
	struct emu e;
	uint64_t *p;
	int i;

	p = emu_v2_mapped(t, &e, false);
	ASSERT_EQ(emu_pin_sig(t, &e, IOVA_A + SZ_4K, 8, IOMMU_R | IOMMU_W, NULL, 0x7700), 8);
	for (i = 0; i < 8; i++)
		EXPECT_EQ(p[(1 + i) * (SZ_4K / 8) + 1], 0x7700 + i);
	EXPECT_EQ(p[1], 0);
	emu_unpin(t, &e, IOVA_A + SZ_4K, 8);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/* THP, 4K shmem and hugetlbfs memory: the right page at every offset. */
TEST(pin_memory_kinds)
{
	static const enum vu_mem_kind kinds[] = { VU_MEM_THP, VU_MEM_POPULATE, VU_MEM_HUGETLB2M };
	const size_t size = 4 * SZ_2M;
	struct emu e;
	size_t k;

	emu_v2(t, &e, false);
	for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		static const size_t offs[] = { 0, 1, 511, 512, 513, 1023, 2047 };
		uint64_t *p = th_mem(t, kinds[k], size), sig;
		size_t i;

		for (i = 0; i < size / SZ_4K; i++)
			p[i * (SZ_4K / 8)] = SIG(i);
		MAP_OK(e.c, IOVA_A, p, size);
		for (i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
			sig = 0;
			ASSERT_EQ(emu_pin_sig(t, &e, IOVA_A + offs[i] * SZ_4K, 1, IOMMU_R,
					      &sig, 0), 1);
			EXPECT_EQ(sig, SIG(offs[i]));
		}
		EXPECT_EQ(th_vmlck_kb(t), KB(7));
		EXPECT_EQ(th_pins(t), 7);
		/* unmap drops them through the callback */
		UNMAP_OK(e.c, IOVA_A, size);
		EXPECT_PINS_VMLCK(0, 0);
	}
}

/* A pin spanning two adjacent mappings, and the largest allowed pin. */
TEST(pin_across_mappings_and_max)
{
	struct emu e;
	uint64_t *a, *b, *big;
	static uint64_t sig[512];

	emu_v2(t, &e, false);
	a = sig_mem(t, MSZ);
	b = sig_mem(t, MSZ);
	MAP_OK(e.c, IOVA_A, a, MSZ);
	MAP_OK(e.c, IOVA_A + MSZ, b, MSZ);
	ASSERT_EQ(emu_pin_sig(t, &e, IOVA_A + MSZ - 2 * SZ_4K, 4, IOMMU_R, sig, 0), 4);
	EXPECT_EQ(sig[0], SIG(NP - 2));
	EXPECT_EQ(sig[1], SIG(NP - 1));
	EXPECT_EQ(sig[2], SIG(0));
	EXPECT_EQ(sig[3], SIG(1));
	EXPECT_PINS_VMLCK(4, KB(4));
	emu_unpin(t, &e, IOVA_A + MSZ - 2 * SZ_4K, 4);

	big = sig_mem(t, 512 * SZ_4K);
	MAP_OK(e.c, IOVA_B, big, 512 * SZ_4K);
	ASSERT_EQ(emu_pin_sig(t, &e, IOVA_B, 512, IOMMU_R | IOMMU_W, sig, 0), 512);
	EXPECT_EQ(sig[0], SIG(0));
	EXPECT_EQ(sig[511], SIG(511));
	EXPECT_PINS_VMLCK(512, KB(512));
	emu_unpin(t, &e, IOVA_B, 512);
	EXPECT_PINS_VMLCK(0, 0);
	UNMAP_OK(e.c, IOVA_B, 512 * SZ_4K);
	UNMAP_OK(e.c, IOVA_A, 2 * MSZ);
}

/* Stock's answers to bad pin_pages arguments; nothing stays pinned. */
TEST(pin_invalid_args)
{
	struct emu e;
	uint64_t sig = 0;
	long long before;

	emu_v2_mapped(t, &e, false);

	EXPECT_EQ(emu_pin(t, &e, IOVA_B, 1, IOMMU_R), -EINVAL);		/* not mapped */
	EXPECT_EQ(emu_pin(t, &e, IOVA_A - SZ_4K, 1, IOMMU_R), -EINVAL);	/* just below */
	EXPECT_EQ(emu_pin(t, &e, IOVA_A + MSZ, 1, IOMMU_R), -EINVAL);	/* just above */
	EXPECT_EQ(emu_pin(t, &e, IOVA_A, 0, IOMMU_R), -EINVAL);		/* npage 0 */
	EXPECT_EQ(emu_pin(t, &e, IOVA_A, 513, IOMMU_R), -E2BIG);		/* > 512 */
	EXPECT_EQ(emu_pin(t, &e, IOVA_A, INT_MAX, IOMMU_R), -E2BIG);
	/* running off the end of the mapping: everything pinned so far undone */
	EXPECT_EQ(emu_pin(t, &e, IOVA_A + MSZ - 2 * SZ_4K, 3, IOMMU_R), -EINVAL);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(emu_stats(t, &e).records, 0);

	/* unaligned iova: stock pins the page that holds it */
	before = th_pins(t);
	ASSERT_EQ(emu_pin_sig(t, &e, IOVA_A + 3 * SZ_4K + 0x800, 1, IOMMU_R, &sig, 0), 1);
	EXPECT_EQ(sig, SIG(3));
	EXPECT_PINS_VMLCK(before + 1, KB(1));
	emu_unpin(t, &e, IOVA_A + 3 * SZ_4K + 0x800, 1);
	EXPECT_PINS_VMLCK(0, 0);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/*
 * A range that wraps around the IOVA space: stock 7.x refuses it before
 * looking at the mappings (-EOVERFLOW); 6.1 and 6.12 look its first page
 * up and find no mapping there (-EINVAL). foliomap answers as the stock
 * driver of its kernel.
 */
TEST(pin_wrapping_range)
{
	struct emu e;
	uint64_t *p;

	emu_v2(t, &e, false);
	p = sig_mem(t, MSZ);
	MAP_OK(e.c, IOVA_A, p, MSZ);
	EXPECT_EQ(emu_pin(t, &e, 0xfffffffffffff000ULL, 2, IOMMU_R),
		  th_stock_upstream_type1() ? -EOVERFLOW : -EINVAL);
	EXPECT_EQ(th_pins(t), 0);
	EXPECT_EQ(th_vmlck_kb(t), 0);
	EXPECT_EQ(emu_stats(t, &e).records, 0);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/* A negative npage: vfio core compares it as unsigned with the maximum. */
TEST(pin_negative_npage)
{
	struct emu e;

	emu_v2_mapped(t, &e, false);
	EXPECT_EQ(emu_pin(t, &e, IOVA_A, -1, IOMMU_R), -E2BIG);
	EXPECT_EQ(th_pins(t), 0);
	EXPECT_EQ(emu_stats(t, &e).records, 0);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/* Write access to a read-only mapping: -EPERM, nothing left pinned. */
TEST(pin_prot_readonly_mapping)
{
	struct emu e;
	uint64_t *p;

	emu_v2(t, &e, false);
	p = sig_mem(t, MSZ);
	ASSERT_EQ(vu_map(e.c, IOVA_A, p, MSZ, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_EQ(emu_pin(t, &e, IOVA_A, 2, IOMMU_W), -EPERM);
	EXPECT_EQ(emu_pin(t, &e, IOVA_A, 2, IOMMU_R | IOMMU_W), -EPERM);
	EXPECT_EQ(th_pins(t), 0);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A, 2, IOMMU_R), 2);
	EXPECT_EQ(th_pins(t), 2);
	emu_unpin(t, &e, IOVA_A, 2);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/* pin_pages is a v2 feature: -EACCES in a v1 container. */
TEST(pin_v1_container)
{
	struct emu e;
	uint64_t *p;

	emu_setup(t, &e, VFIO_TYPE1_IOMMU, false);
	p = sig_mem(t, MSZ);
	MAP_OK(e.c, IOVA_A, p, MSZ);
	EXPECT_EQ(emu_pin(t, &e, IOVA_A, 1, IOMMU_R), -EACCES);
	EXPECT_EQ(th_pins(t), 0);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/* ------------------------------------------------------------------ */
/* the dma_unmap callback */

static void unmap_callback_body(struct th *t, bool nic)
{
	struct emu e;
	uint64_t *a, *b, *c, done;
	struct fm_emu_stats s0, s;
	long long base_pins = nic ? 3 * NP : 0;

	emu_v2(t, &e, nic);
	a = sig_mem(t, MSZ);
	b = sig_mem(t, MSZ);
	c = sig_mem(t, MSZ);
	MAP_OK(e.c, IOVA_A, a, MSZ);
	MAP_OK(e.c, IOVA_A + MSZ, b, MSZ);
	MAP_OK(e.c, IOVA_B, c, MSZ);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + SZ_4K, 2, IOMMU_R), 2);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + 4 * SZ_4K, 1, IOMMU_W), 1);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + MSZ + 7 * SZ_4K, 3, IOMMU_R), 3);
	EXPECT_PINS_VMLCK(base_pins + 6, nic ? KB(3 * NP) : KB(6));
	s0 = emu_stats(t, &e);

	/* a mapping nobody pinned: no callback */
	UNMAP_OK(e.c, IOVA_B, MSZ);
	s = emu_stats(t, &e);
	EXPECT_EQ(s.unmap_calls, s0.unmap_calls);

	/* the first mapping: one callback with its range, its 3 pins dropped */
	UNMAP_OK(e.c, IOVA_A, MSZ);
	s = emu_stats(t, &e);
	EXPECT_EQ(s.unmap_calls, s0.unmap_calls + 1);
	EXPECT_EQ(s.last_unmap_iova, IOVA_A);
	EXPECT_EQ(s.last_unmap_len, MSZ);
	EXPECT_EQ(s.unmap_unpinned, s0.unmap_unpinned + 3);
	EXPECT_EQ(s.pinned_pages, 3);
	EXPECT_PINS_VMLCK((nic ? NP : 0) + 3, nic ? KB(NP) : KB(3));

	/* UNMAP_ALL reaches the second one */
	ASSERT_EQ(vu_unmap(e.c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, &done), 0);
	EXPECT_EQ(done, MSZ);
	s = emu_stats(t, &e);
	EXPECT_EQ(s.unmap_calls, s0.unmap_calls + 2);
	EXPECT_EQ(s.last_unmap_iova, IOVA_A + MSZ);
	EXPECT_EQ(s.last_unmap_len, MSZ);
	EXPECT_EQ(s.pinned_pages, 0);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST(unmap_callback_emulated_only)
{
	unmap_callback_body(t, false);
}

TEST(unmap_callback_with_iommu_group)
{
	unmap_callback_body(t, true);
}

/* One UNMAP_DMA over several pinned mappings: one callback per mapping. */
TEST(unmap_callback_range_of_mappings)
{
	struct emu e;
	uint64_t *p;
	struct fm_emu_stats s0, s;
	int i;

	emu_v2(t, &e, true);
	p = sig_mem(t, 4 * MSZ);
	for (i = 0; i < 4; i++)
		MAP_OK(e.c, IOVA_A + i * MSZ, (char *)p + i * MSZ, MSZ);
	for (i = 0; i < 4; i += 2)
		ASSERT_EQ(emu_pin(t, &e, IOVA_A + i * MSZ + SZ_4K, 1, IOMMU_R), 1);
	s0 = emu_stats(t, &e);
	UNMAP_OK(e.c, IOVA_A, 4 * MSZ);
	s = emu_stats(t, &e);
	EXPECT_EQ(s.unmap_calls - s0.unmap_calls, 2);
	EXPECT_EQ(s.last_unmap_iova, IOVA_A + 2 * MSZ);
	EXPECT_EQ(s.pinned_pages, 0);
	EXPECT_PINS_VMLCK(0, 0);
}

/* ------------------------------------------------------------------ */
/* groups leaving and containers closing while pinned */

/*
 * The e1000e group leaves while the emulated device pins pages: its domain
 * goes, the mappings are unpinned and re-accounted, VmLck keeps only the
 * externally pinned pages (stock vfio_iommu_unmap_unpin_reaccount).
 */
TEST(detach_iommu_group_reaccounts)
{
	struct emu e;
	uint64_t sig = 0;
	int none = -1;

	emu_v2_mapped(t, &e, true);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + 2 * SZ_4K, 4, IOMMU_R | IOMMU_W), 4);
	EXPECT_PINS_VMLCK(NP + 4, KB(NP));

	ASSERT_EQ(ioctl(e.ngfd, VFIO_GROUP_UNSET_CONTAINER, &none), 0);
	EXPECT_PINS_VMLCK(4, KB(4));

	/* the container still works for the emulated device */
	ASSERT_EQ(emu_pin_sig(t, &e, IOVA_A + 9 * SZ_4K, 1, IOMMU_R, &sig, 0), 1);
	EXPECT_EQ(sig, SIG(9));
	EXPECT_PINS_VMLCK(5, KB(5));
	emu_unpin(t, &e, IOVA_A + 2 * SZ_4K, 4);
	EXPECT_EQ(th_vmlck_kb(t), KB(1));
	UNMAP_OK(e.c, IOVA_A, MSZ);
	EXPECT_PINS_VMLCK(0, 0);
}

/*
 * The e1000e group joins a container whose mappings the emulated device
 * already pinned: the replay pins every page but charges only the others.
 */
TEST(attach_iommu_group_after_pins)
{
	struct emu e;
	int groups[1], nfd;

	emu_v2_mapped(t, &e, false);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A, 3, IOMMU_R), 3);
	EXPECT_EQ(th_vmlck_kb(t), KB(3));

	th_e1000e_groups(t, groups, 1);
	nfd = th_own_fd(t, vu_group_attach(e.c, groups[0]));
	ASSERT_GE(nfd, 0);
	EXPECT_PINS_VMLCK(NP + 3, KB(NP));

	emu_unpin(t, &e, IOVA_A, 3);
	EXPECT_PINS_VMLCK(NP, KB(NP));
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + 8 * SZ_4K, 2, IOMMU_R), 2);
	th_close(t, nfd);	/* detach with pins: reaccount */
	EXPECT_PINS_VMLCK(2, KB(2));
	UNMAP_OK(e.c, IOVA_A, MSZ);
	EXPECT_PINS_VMLCK(0, 0);
}

/*
 * A replay pins the mappings that only emulated groups knew, of every
 * size: a page, more than a small batch holds, more than a whole batch.
 * Each is pinned and charged in full. With RLIMIT_MEMLOCK at @limit pages
 * (0: none) the attach fails and every mapping it pinned is released
 * again: at the last mapping (limit one page short), or in the middle of
 * the 1500-page one, part of which is mapped by then.
 */
static const unsigned int replay_pages[] = { 1, 20, 1500, 3 };
#define REPLAY_MAPS	(sizeof(replay_pages) / sizeof(replay_pages[0]))

static unsigned int replay_total(void)
{
	unsigned int i, total = 0;

	for (i = 0; i < REPLAY_MAPS; i++)
		total += replay_pages[i];
	return total;
}

static void replay_sizes_body(struct th *t, unsigned int limit)
{
	const unsigned int *pages = replay_pages;
	/* the last page of the 1500-page mapping */
	uint64_t big_last = IOVA_A + (uint64_t)(pages[0] + pages[1] + pages[2] - 1) * SZ_4K;
	unsigned int i, total = replay_total(), off = 0;
	bool over_limit = limit;
	int groups[1], nfd;
	uint64_t *p;
	struct emu e;

	emu_v2(t, &e, false);
	p = sig_mem(t, (size_t)total * SZ_4K);
	/* A mapping keeps the CAP_IPC_LOCK its creator had: drop it first. */
	if (over_limit) {
		th_drop_ipc_lock(t);
		th_set_memlock(t, (unsigned long long)limit * SZ_4K);
	}
	for (i = 0; i < REPLAY_MAPS; off += pages[i++])
		MAP_OK(e.c, IOVA_A + (uint64_t)off * SZ_4K, (char *)p + (size_t)off * SZ_4K,
		       (size_t)pages[i] * SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);

	th_e1000e_groups(t, groups, 1);
	if (over_limit) {
		EXPECT_EQ(vu_group_attach(e.c, groups[0]), -ENOMEM);
		EXPECT_PINS_VMLCK(0, 0);
	} else {
		nfd = th_own_fd(t, vu_group_attach(e.c, groups[0]));
		ASSERT_GE(nfd, 0);
		EXPECT_PINS_VMLCK(total, KB(total));
		/* pinned again, not charged */
		ASSERT_EQ(emu_pin(t, &e, big_last, 1, IOMMU_R), 1);
		EXPECT_PINS_VMLCK(total + 1, KB(total));
		emu_unpin(t, &e, big_last, 1);
		th_close(t, nfd);
		EXPECT_PINS_VMLCK(0, 0);
	}
	UNMAP_OK(e.c, IOVA_A, (uint64_t)total * SZ_4K);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST(attach_replays_mappings_of_every_size)
{
	replay_sizes_body(t, 0);
}

TEST(attach_replay_over_rlimit_unwinds)
{
	replay_sizes_body(t, replay_total() - 1);
}

TEST(attach_replay_over_rlimit_mid_mapping_unwinds)
{
	replay_sizes_body(t, 1100);
}

/*
 * Large folios: external pins inside 2M runs across a replay (attach) and a
 * reaccount (detach), for THP and hugetlbfs memory.
 */
static void folio_replay_body(struct th *t, enum vu_mem_kind kind)
{
	static const int offs[] = { 1, 511, 512, 1000 };
	const size_t size = 4 * SZ_2M, np = size / SZ_4K;
	struct emu e;
	uint64_t *p, sig;
	int groups[1], nfd;
	size_t i;

	emu_v2(t, &e, false);
	p = th_mem(t, kind, size);
	for (i = 0; i < np; i++)
		p[i * (SZ_4K / 8)] = SIG(i);
	MAP_OK(e.c, IOVA_A, p, size);
	for (i = 0; i < 4; i++) {
		sig = 0;
		ASSERT_EQ(emu_pin_sig(t, &e, IOVA_A + offs[i] * SZ_4K, 1, IOMMU_R | IOMMU_W,
				      &sig, 0), 1);
		EXPECT_EQ(sig, SIG(offs[i]));
	}
	EXPECT_PINS_VMLCK(4, KB(4));

	th_e1000e_groups(t, groups, 1);
	nfd = th_own_fd(t, vu_group_attach(e.c, groups[0]));
	ASSERT_GE(nfd, 0);
	EXPECT_PINS_VMLCK(th_kind_pins(kind, size) + 4, KB(np));
	emu_unpin(t, &e, IOVA_A + 511 * SZ_4K, 1);
	EXPECT_PINS_VMLCK(th_kind_pins(kind, size) + 3, KB(np));

	th_close(t, nfd);
	EXPECT_PINS_VMLCK(3, KB(3));
	UNMAP_OK(e.c, IOVA_A, size);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST(folio_replay_reaccount_thp)
{
	folio_replay_body(t, VU_MEM_THP);
}

TEST(folio_replay_reaccount_hugetlb2m)
{
	folio_replay_body(t, VU_MEM_HUGETLB2M);
}

/* Unmapping pinned mappings of 2M folios through an IOMMU domain. */
TEST(folio_unmap_with_pins)
{
	const size_t size = 4 * SZ_2M, np = size / SZ_4K;
	struct emu e;
	uint64_t *p;

	emu_v2(t, &e, true);
	p = th_mem(t, VU_MEM_THP, size);
	MAP_OK(e.c, IOVA_A, p, size);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + 510 * SZ_4K, 4, IOMMU_R), 4);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + 2047 * SZ_4K, 1, IOMMU_R), 1);
	EXPECT_PINS_VMLCK(np + 5, KB(np));
	UNMAP_OK(e.c, IOVA_A, size);
	EXPECT_PINS_VMLCK(0, 0);
}

/* A v2 unmap that would split a pinned mapping fails before any callback. */
TEST(unmap_split_refused_keeps_pins)
{
	struct emu e;
	struct fm_emu_stats s0;

	emu_v2_mapped(t, &e, true);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A, 2, IOMMU_R), 2);
	s0 = emu_stats(t, &e);
	EXPECT_EQ(vu_unmap(e.c, IOVA_A, SZ_4K, 0, NULL), -EINVAL);
	EXPECT_EQ(emu_stats(t, &e).unmap_calls, s0.unmap_calls);
	EXPECT_EQ(emu_stats(t, &e).pinned_pages, 2);
	EXPECT_EQ(th_pins(t), NP + 2);
	UNMAP_OK(e.c, IOVA_A, MSZ);
	EXPECT_EQ(emu_stats(t, &e).unmap_calls, s0.unmap_calls + 1);
	EXPECT_EQ(th_pins(t), 0);
}

/*
 * Closing the container and group fds while the device pins pages: the
 * open device keeps the container alive (pins stay); closing the device
 * drops its pins (close_device), then the container goes and unpins the rest.
 */
static void close_with_pins_body(struct th *t, bool nic)
{
	struct emu e;
	uint64_t *p;
	struct fm_emu_stats s;

	emu_v2(t, &e, nic);
	p = sig_mem(t, MSZ);
	MAP_OK(e.c, IOVA_A, p, MSZ);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + SZ_4K, 5, IOMMU_R | IOMMU_W), 5);
	EXPECT_EQ(th_pins(t), (nic ? NP : 0) + 5);

	th_close(t, e.c);
	EXPECT_EQ(th_pins(t), (nic ? NP : 0) + 5);
	if (nic) {
		/* the IOMMU group leaves: only the external pins stay charged */
		th_close(t, e.ngfd);
		EXPECT_PINS_VMLCK(5, KB(5));
	}
	th_close(t, e.egfd);
	EXPECT_PINS_VMLCK(5, KB(5));
	s = emu_stats(t, &e);
	EXPECT_EQ(s.pinned_pages, 5);

	th_close(t, e.dev);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST(close_with_pins_emulated_only)
{
	close_with_pins_body(t, false);
}

TEST(close_with_pins_with_iommu_group)
{
	close_with_pins_body(t, true);
}

/* The device fd closes first: close_device unpins, the container lives on. */
TEST(close_device_first)
{
	struct emu e;

	emu_v2_mapped(t, &e, true);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A, 4, IOMMU_R), 4);
	th_close(t, e.dev);
	EXPECT_PINS_VMLCK(NP, KB(NP));
	UNMAP_OK(e.c, IOVA_A, MSZ);
	EXPECT_EQ(th_pins(t), 0);
}

/* ------------------------------------------------------------------ */
/* dma_rw */

static void rw_body(struct th *t, bool nic, unsigned int kflag)
{
	struct emu e;
	unsigned char *p, *q, *buf;
	size_t i;

	emu_v2(t, &e, nic);
	p = th_anon(t, MSZ);
	q = th_anon(t, MSZ);
	for (i = 0; i < MSZ; i++) {
		p[i] = (unsigned char)(i * 7 + 1);
		q[i] = (unsigned char)(i * 13 + 5);
	}
	/* two mappings adjacent in IOVA, apart in the address space */
	MAP_OK(e.c, IOVA_A, p, MSZ);
	MAP_OK(e.c, IOVA_A + MSZ, q, MSZ);
	buf = th_anon(t, 2 * MSZ);

	/* read at an odd offset, three pages long */
	memset(buf, 0, 3 * SZ_4K);
	ASSERT_EQ(emu_rw(t, e.dev, IOVA_A + 100, buf, 3 * SZ_4K, kflag), 0);
	EXPECT_EQ(memcmp(buf, p + 100, 3 * SZ_4K), 0);

	/* read across the two mappings */
	ASSERT_EQ(emu_rw(t, e.dev, IOVA_A + MSZ - 5000, buf, 10000, kflag), 0);
	EXPECT_EQ(memcmp(buf, p + MSZ - 5000, 5000), 0);
	EXPECT_EQ(memcmp(buf + 5000, q, 5000), 0);

	/* write across the two mappings, then check from userspace */
	for (i = 0; i < 12000; i++)
		buf[i] = (unsigned char)(0xa5 ^ i);
	ASSERT_EQ(emu_rw(t, e.dev, IOVA_A + MSZ - 6001, buf, 12000,
			 kflag | FM_EMU_RW_WRITE), 0);
	EXPECT_EQ(memcmp(p + MSZ - 6001, buf, 6001), 0);
	EXPECT_EQ(memcmp(q, buf + 6001, 12000 - 6001), 0);
	EXPECT_EQ(p[MSZ - 6002], (unsigned char)((MSZ - 6002) * 7 + 1));
	EXPECT_EQ(q[12000 - 6001], (unsigned char)((12000 - 6001) * 13 + 5));

	/* one byte */
	buf[0] = 0x3c;
	ASSERT_EQ(emu_rw(t, e.dev, IOVA_A + 7, buf, 1, kflag | FM_EMU_RW_WRITE), 0);
	EXPECT_EQ(p[7], 0x3c);

	/* dma_rw pins nothing */
	EXPECT_PINS_VMLCK(nic ? 2 * NP : 0, nic ? KB(2 * NP) : 0);
	UNMAP_OK(e.c, IOVA_A, 2 * MSZ);
}

TEST(dma_rw_read_write)
{
	rw_body(t, false, 0);
}

TEST(dma_rw_read_write_kthread)
{
	rw_body(t, false, FM_EMU_RW_KTHREAD);
}

TEST(dma_rw_with_iommu_group)
{
	rw_body(t, true, 0);
}

TEST(dma_rw_invalid)
{
	struct emu e;
	unsigned char *p, *buf;

	emu_v2(t, &e, false);
	p = th_anon(t, MSZ);
	buf = th_anon(t, 2 * MSZ);
	MAP_OK(e.c, IOVA_A, p, MSZ);
	ASSERT_EQ(vu_map(e.c, IOVA_B, p, MSZ, VFIO_DMA_MAP_FLAG_READ), 0);

	EXPECT_EQ(emu_rw(t, e.dev, IOVA_A + MSZ, buf, 16, 0), -EINVAL);	/* unmapped */
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_A - 1, buf, 16, 0), -EINVAL);
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_A, buf, 0, 0), -EINVAL);		/* len 0 */
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_A, buf, 16, FM_EMU_RW_NULL), -EINVAL);
	/* runs into a hole: -EINVAL after copying what was mapped */
	memset(buf, 0x11, 2 * SZ_4K);
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_A + MSZ - SZ_4K, buf, 2 * SZ_4K,
			 FM_EMU_RW_WRITE), -EINVAL);
	EXPECT_EQ(p[MSZ - 1], 0x11);
	/* read-only mapping: reads work, writes -EPERM */
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_B, buf, 64, 0), 0);
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_B, buf, 64, FM_EMU_RW_WRITE), -EPERM);
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_B, buf, 64, FM_EMU_RW_WRITE | FM_EMU_RW_KTHREAD),
		  -EPERM);
	UNMAP_OK(e.c, IOVA_B, MSZ);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/* The mapping's vaddr no longer maps memory: -EFAULT (nothing pinned). */
TEST(dma_rw_unmapped_vaddr)
{
	struct emu e;
	unsigned char *p, buf[64];

	emu_v2(t, &e, false);
	p = mmap(NULL, MSZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(p, MAP_FAILED);
	MAP_OK(e.c, IOVA_A, p, MSZ);
	munmap(p, MSZ);
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_A, buf, sizeof(buf), 0), -EFAULT);
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_A, buf, sizeof(buf), FM_EMU_RW_WRITE), -EFAULT);
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_A, buf, sizeof(buf), FM_EMU_RW_KTHREAD), -EFAULT);
	EXPECT_EQ(emu_pin(t, &e, IOVA_A, 1, IOMMU_R), -EFAULT);
	EXPECT_EQ(th_pins(t), 0);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/* Another process (here a fork child) is not the mapping's mm: -EFAULT. */
TEST(dma_rw_from_other_process)
{
	struct emu e;
	unsigned char *p;
	int status;
	pid_t pid;

	emu_v2(t, &e, false);
	p = th_anon(t, MSZ);
	MAP_OK(e.c, IOVA_A, p, MSZ);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		unsigned char b[16];
		struct fm_emu_rw r = { .iova = IOVA_A, .uaddr = (uintptr_t)b, .len = 16 };
		int rc = ioctl(e.dev, FM_EMU_RW, &r) ? 100 : (int)-r.ret;

		r.flags = FM_EMU_RW_KTHREAD;	/* a kthread borrows the owner's mm */
		if (rc == EFAULT && (ioctl(e.dev, FM_EMU_RW, &r) || r.ret))
			rc = 101;
		_exit(rc);
	}
	status = th_reap(t, pid);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), EFAULT);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/* dma_rw has no v2 requirement. */
TEST(dma_rw_v1_container)
{
	struct emu e;
	unsigned char *p, buf[32];

	emu_setup(t, &e, VFIO_TYPE1_IOMMU, false);
	p = th_anon(t, MSZ);
	memset(p, 0x42, 64);
	MAP_OK(e.c, IOVA_A, p, MSZ);
	EXPECT_EQ(emu_rw(t, e.dev, IOVA_A + 8, buf, sizeof(buf), 0), 0);
	EXPECT_EQ(buf[0], 0x42);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/* UPDATE_VADDR is off while an emulated group is in the container. */
TEST(vaddr_update_refused_with_emulated_group)
{
	struct emu e;
	uint64_t done = ~0ULL;

	emu_v2_mapped(t, &e, true);
	EXPECT_EQ(ioctl(e.c, VFIO_CHECK_EXTENSION, VFIO_UPDATE_VADDR), 0);
	EXPECT_EQ(vu_unmap(e.c, IOVA_A, MSZ, VFIO_DMA_UNMAP_FLAG_VADDR, &done), -EBUSY);
	EXPECT_EQ(vu_unmap(e.c, 0, 0, VFIO_DMA_UNMAP_FLAG_VADDR | VFIO_DMA_UNMAP_FLAG_ALL,
			   &done), -EBUSY);
	/* the mapping is untouched: pin and unmap still work */
	ASSERT_EQ(emu_pin(t, &e, IOVA_A, 1, IOMMU_R), 1);
	EXPECT_EQ(th_pins(t), NP + 1);
	UNMAP_OK(e.c, IOVA_A, MSZ);
	EXPECT_EQ(th_pins(t), 0);
}

/* An emulated group cannot join while a vaddr is invalidated (-EBUSY). */
TEST(emulated_attach_refused_while_vaddr_invalid)
{
	int groups[1], gfds[1], c, g;
	uint64_t *p, done = 0;

	th_e1000e_groups(t, groups, 1);
	c = th_container_of(t, VFIO_TYPE1v2_IOMMU, groups, 1, gfds);
	p = sig_mem(t, MSZ);
	MAP_OK(c, IOVA_A, p, MSZ);
	ASSERT_EQ(vu_unmap(c, IOVA_A, MSZ, VFIO_DMA_UNMAP_FLAG_VADDR, &done), 0);
	EXPECT_EQ(vu_group_attach(c, emu_group(t)), -EBUSY);
	ASSERT_EQ(vu_map(c, IOVA_A, p, MSZ, VFIO_DMA_MAP_FLAG_VADDR), 0);
	g = th_own_fd(t, vu_group_attach(c, emu_group(t)));
	ASSERT_GE(g, 0);
	EXPECT_EQ(th_pins(t), NP);
	UNMAP_OK(c, IOVA_A, MSZ);
}

/* ------------------------------------------------------------------ */
/* dirty tracking scope */

/*
 * An emulated group alone has a pinned-page dirty scope: only the pages it
 * pinned or wrote through dma_rw are dirty.
 */
TEST(dirty_scope_emulated_only)
{
	struct emu e;
	uint64_t bitmap[1] = { 0 };
	unsigned char b = 1;
	struct {
		struct vfio_iommu_type1_dirty_bitmap db;
		struct vfio_iommu_type1_dirty_bitmap_get g;
	} d = { 0 };
	struct vfio_iommu_type1_dirty_bitmap st = { .argsz = sizeof(st) };

	emu_v2_mapped(t, &e, false);
	st.flags = VFIO_IOMMU_DIRTY_PAGES_FLAG_START;
	ASSERT_EQ(ioctl(e.c, VFIO_IOMMU_DIRTY_PAGES, &st), 0);
	ASSERT_EQ(emu_pin(t, &e, IOVA_A + 3 * SZ_4K, 1, IOMMU_R | IOMMU_W), 1);
	ASSERT_EQ(emu_rw(t, e.dev, IOVA_A + 5 * SZ_4K + 10, &b, 1, FM_EMU_RW_WRITE), 0);
	ASSERT_EQ(emu_rw(t, e.dev, IOVA_A + 9 * SZ_4K, &b, 1, 0), 0);	/* a read */

	d.db.argsz = sizeof(d);
	d.db.flags = VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP;
	d.g.iova = IOVA_A;
	d.g.size = MSZ;
	d.g.bitmap.pgsize = SZ_4K;
	d.g.bitmap.size = sizeof(bitmap);
	d.g.bitmap.data = (void *)bitmap;
	ASSERT_EQ(ioctl(e.c, VFIO_IOMMU_DIRTY_PAGES, &d), 0);
	EXPECT_EQ(bitmap[0] & 0xffff, (1 << 3) | (1 << 5));

	st.flags = VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP;
	ASSERT_EQ(ioctl(e.c, VFIO_IOMMU_DIRTY_PAGES, &st), 0);
	emu_unpin(t, &e, IOVA_A + 3 * SZ_4K, 1);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

/*
 * A dirty report whose copy to user space fails part way (-EFAULT) must not
 * lose the bits it could not deliver. Three mappings of an emulated-only
 * container (pinned-page scope: exact bits), 4 pages each, at these page
 * offsets from IOVA_A: A at 0, B at 5 (sharing A's u64 word), C at 32769
 * (word 512, one bit into it: the second page of the user's bitmap). One
 * page of each is written through dma_rw. The bitmap's second page is
 * read-only: A and B reach the user, C's copy faults.
 */
#define DF_A		0ULL
#define DF_B		5ULL
#define DF_C		32769ULL
#define DF_NP		4ULL
#define DF_PAGES	(DF_C + DF_NP)		/* the range, in pages */
#define DF_BYTES	(2 * SZ_4K)		/* room for DF_PAGES bits */
#define DF_W0		((1ULL << (DF_A + 1)) | (1ULL << DF_B))	/* A page 1, B page 0 */
#define DF_W512		(1ULL << (DF_C % 64 + 2))		/* C page 2 */

struct df_req {
	union {
		struct {
			struct vfio_iommu_type1_dirty_bitmap d;
			struct vfio_iommu_type1_dirty_bitmap_get g;
		} get;
		struct {
			struct vfio_iommu_type1_dma_unmap u;
			struct vfio_bitmap b;
		} unmap;
	};
};

static int df_dirty(int c, uint32_t flags)
{
	struct vfio_iommu_type1_dirty_bitmap d = { .argsz = sizeof(d), .flags = flags };

	return ioctl(c, VFIO_IOMMU_DIRTY_PAGES, &d) < 0 ? -errno : 0;
}

/* GET_BITMAP (unmap false) or UNMAP_DMA with GET_DIRTY_BITMAP over the range. */
static int df_report(int c, bool unmap, uint64_t *bm, uint64_t *done)
{
	struct df_req r;
	int ret;

	memset(&r, 0, sizeof(r));
	if (unmap) {
		r.unmap.u.argsz = sizeof(r.unmap);
		r.unmap.u.flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP;
		r.unmap.u.iova = IOVA_A;
		r.unmap.u.size = DF_PAGES * SZ_4K;
		r.unmap.b.pgsize = SZ_4K;
		r.unmap.b.size = DF_BYTES;
		r.unmap.b.data = (void *)bm;
		ret = ioctl(c, VFIO_IOMMU_UNMAP_DMA, &r.unmap) < 0 ? -errno : 0;
		*done = ret ? 0 : r.unmap.u.size;
		return ret;
	}
	r.get.d.argsz = sizeof(r.get);
	r.get.d.flags = VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP;
	r.get.g.iova = IOVA_A;
	r.get.g.size = DF_PAGES * SZ_4K;
	r.get.g.bitmap.pgsize = SZ_4K;
	r.get.g.bitmap.size = DF_BYTES;
	r.get.g.bitmap.data = (void *)bm;
	return ioctl(c, VFIO_IOMMU_DIRTY_PAGES, &r.get) < 0 ? -errno : 0;
}

/* A zeroed bitmap of DF_BYTES; with ro, its second page read-only. */
static uint64_t *df_bitmap(struct th *t, bool ro)
{
	uint64_t *bm = th_anon(t, DF_BYTES);

	memset(bm, 0, DF_BYTES);
	if (ro && mprotect((char *)bm + SZ_4K, SZ_4K, PROT_READ))
		FAIL("mprotect: %s", strerror(errno));
	return bm;
}

/*
 * The bits of A and B (word 0) and C (word 512). With exact, every word of
 * the range is compared: the holes between the mappings stay 0. Stock
 * shifts a mapping's bitmap in place and clears only its first bits: the
 * stale bits come back further up on later reports, in the holes.
 */
#define DF_MASK0	((0xfULL << DF_A) | (0xfULL << DF_B))
#define DF_MASK512	(0xfULL << (DF_C % 64))

static void df_expect_words(struct th *t, const uint64_t *bm, uint64_t w0, uint64_t w512,
			    bool exact)
{
	size_t i;

	if (!exact) {
		EXPECT_EQ(bm[0] & DF_MASK0, w0);
		EXPECT_EQ(bm[512] & DF_MASK512, w512);
		return;
	}
	EXPECT_EQ(bm[0], w0);
	for (i = 1; i < 512; i++)
		if (bm[i])
			break;
	EXPECT_EQ(i, 512);
	EXPECT_EQ(bm[512], w512);
}

static void df_run(struct th *t, bool unmap)
{
	uint64_t *p, *bm, done = 0;
	unsigned char b = 0xd1;
	struct emu e;

	emu_v2(t, &e, false);
	p = sig_mem(t, 3 * DF_NP * SZ_4K);
	MAP_OK(e.c, IOVA_A + DF_A * SZ_4K, p, DF_NP * SZ_4K);
	MAP_OK(e.c, IOVA_A + DF_B * SZ_4K, p + DF_NP * 512, DF_NP * SZ_4K);
	MAP_OK(e.c, IOVA_A + DF_C * SZ_4K, p + 2 * DF_NP * 512, DF_NP * SZ_4K);
	ASSERT_EQ(df_dirty(e.c, VFIO_IOMMU_DIRTY_PAGES_FLAG_START), 0);
	ASSERT_EQ(emu_rw(t, e.dev, IOVA_A + (DF_A + 1) * SZ_4K, &b, 1, FM_EMU_RW_WRITE), 0);
	ASSERT_EQ(emu_rw(t, e.dev, IOVA_A + DF_B * SZ_4K + 8, &b, 1, FM_EMU_RW_WRITE), 0);
	ASSERT_EQ(emu_rw(t, e.dev, IOVA_A + (DF_C + 2) * SZ_4K, &b, 1, FM_EMU_RW_WRITE), 0);

	/* C's copy faults, after A's and B's bits were written */
	EXPECT_EQ(df_report(e.c, unmap, df_bitmap(t, true), &done), -EFAULT);

	bm = df_bitmap(t, false);
	ASSERT_EQ(df_report(e.c, unmap, bm, &done), 0);
	if (is_foliomap()) {
		/* nothing was cleared, shifted or unmapped: the same bits again */
		if (unmap)
			EXPECT_EQ(done, 3 * DF_NP * SZ_4K);
		df_expect_words(t, bm, DF_W0, DF_W512, true);
	} else {
		/*
		 * Stock: A's and B's bits were cleared (GET_BITMAP) or A and B
		 * unmapped (UNMAP_DMA) before C's copy failed, and C's bitmap
		 * stayed shifted in place: its bit comes back one page high.
		 */
		if (unmap)
			EXPECT_EQ(done, DF_NP * SZ_4K);
		df_expect_words(t, bm, 0, DF_W512 << 1, false);
	}

	if (!unmap) {
		/* reported: cleared now, on both */
		bm = df_bitmap(t, false);
		ASSERT_EQ(df_report(e.c, false, bm, &done), 0);
		df_expect_words(t, bm, 0, 0, is_foliomap());
		UNMAP_RANGE(e.c, IOVA_A, DF_PAGES * SZ_4K, 3 * DF_NP * SZ_4K);
	}
	EXPECT_EQ(df_dirty(e.c, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP), 0);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST(dirty_unmap_bitmap_fault_keeps_bits)
{
	df_run(t, true);
}

TEST(dirty_get_bitmap_fault_keeps_bits)
{
	df_run(t, false);
}

/* ------------------------------------------------------------------ */
/* lock order: a device opened or closed while a dma_unmap callback runs */

#define LO_DELAY_MS	1000	/* the callback's sleep (fm_emu unmap_delay_ms) */
#define LO_DELAY_PARAM	"/sys/module/fm_emu/parameters/unmap_delay_ms"
#define LO_TIMEOUT_S	30	/* the racing process must be done by then */
#define LO_NPIN		4

/* Written by the racing process, read by the test once it has exited. */
struct lo_result {
	int stage;		/* 1 device ready, 2 callback entered, 3 done */
	int unmap_ret;
	uint64_t unmap_size;
	long long dev_ret;	/* open: 0 or -errno, close: 0 or -errno */
	double dev_s;		/* how long the open or close took */
};

struct lo_unmap {
	int c;
	int ret;
	uint64_t size;
};

static void *lo_unmap_fn(void *arg)
{
	struct lo_unmap *u = arg;

	u->ret = vu_unmap(u->c, IOVA_A, MSZ, 0, &u->size);
	return NULL;
}

/*
 * The racing process: UNMAP_DMA in a thread (fm_emu's callback for the
 * first device sleeps LO_DELAY_MS), and once the callback has started, the
 * second device is opened (register_device) or closed (unregister_device)
 * from this thread. Stock type1 takes iommu->lock, then device_list_lock
 * there, while the callback holds device_list_lock and unpins through
 * iommu->lock: neither returns. Never returns.
 */
static void __attribute__((noreturn)) lo_racer(struct lo_result *r, int c, int dev1, int g2,
					       bool unregister, uint64_t calls0)
{
	struct lo_unmap u = { .c = c };
	struct fm_emu_stats s;
	pthread_t thr;
	int dev2 = -1, i;
	double t0;

	if (unregister) {
		dev2 = ioctl(g2, VFIO_GROUP_GET_DEVICE_FD, FM_EMU_NAME2);
		if (dev2 < 0) {
			r->dev_ret = -errno;
			_exit(1);
		}
	}
	r->stage = 1;
	if (pthread_create(&thr, NULL, lo_unmap_fn, &u))
		_exit(1);
	/* The callback counts itself before it sleeps. */
	for (i = 0; i < 10000; i++) {
		if (ioctl(dev1, FM_EMU_STATS, &s))
			_exit(1);
		if (s.unmap_calls != calls0)
			break;
		usleep(1000);
	}
	if (s.unmap_calls == calls0)
		_exit(1);
	r->stage = 2;

	t0 = vu_now();
	if (unregister)
		r->dev_ret = close(dev2) ? -errno : 0;
	else
		r->dev_ret = ioctl(g2, VFIO_GROUP_GET_DEVICE_FD, FM_EMU_NAME2) < 0 ? -errno : 0;
	r->dev_s = vu_now() - t0;

	pthread_join(thr, NULL);
	r->unmap_ret = u.ret;
	r->unmap_size = u.size;
	r->stage = 3;
	_exit(0);
}

/*
 * Two emulated groups in one container; the first device pins pages, a
 * process of the test's unmaps them and meanwhile opens or closes the second
 * device. foliomap orders device_list_lock before iommu->lock everywhere:
 * the open or close waits for the callback (so it takes about LO_DELAY_MS,
 * which shows the race was run), then both return and every pin is gone.
 */
static void lo_run(struct th *t, bool unregister)
{
	int groups[2], gfds[2], c, dev1, status;
	struct lo_result *r;
	struct fm_emu_stats s0, s;
	uint64_t *p;
	pid_t pid;

	if (!is_foliomap())
		SKIP("stock type1 deadlocks here (register/unregister_device take iommu->lock, then device_list_lock; the dma_unmap callback holds device_list_lock and unpins through iommu->lock)");

	groups[0] = emu_group_of(t, FM_EMU_NAME);
	groups[1] = emu_group_of(t, FM_EMU_NAME2);
	c = th_container_of(t, VFIO_TYPE1v2_IOMMU, groups, 2, gfds);
	dev1 = th_own_fd(t, ioctl(gfds[0], VFIO_GROUP_GET_DEVICE_FD, FM_EMU_NAME));
	if (dev1 < 0)
		FAIL("VFIO_GROUP_GET_DEVICE_FD(%s): %s", FM_EMU_NAME, strerror(errno));
	r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(r != MAP_FAILED);
	th_own_mem(t, r, sizeof(*r));

	p = sig_mem(t, MSZ);
	MAP_OK(c, IOVA_A, p, MSZ);
	{
		struct emu e = { .c = c, .dev = dev1, .egfd = gfds[0], .ngfd = -1 };

		ASSERT_EQ(emu_pin(t, &e, IOVA_A + SZ_4K, LO_NPIN, IOMMU_R | IOMMU_W), LO_NPIN);
	}
	EXPECT_PINS_VMLCK(LO_NPIN, KB(LO_NPIN));

	/* The module's counters add up over the program's tests. */
	if (ioctl(dev1, FM_EMU_STATS, &s0))
		FAIL("FM_EMU_STATS: %s", strerror(errno));
	ASSERT_EQ(vu_write_number(LO_DELAY_PARAM, LO_DELAY_MS), 0);
	fflush(stdout);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0)
		lo_racer(r, c, dev1, gfds[1], unregister, s0.unmap_calls);

	/* A deadlocked process cannot be killed or reaped: do not wait for it. */
	if (!th_reap_within(pid, &status, LO_TIMEOUT_S * 1000)) {
		kill(pid, SIGKILL);
		vu_write_number(LO_DELAY_PARAM, 0);
		FAIL("deadlock: after %d s UNMAP_DMA and the %s of %s are still blocked (stage %d)",
		     LO_TIMEOUT_S, unregister ? "close" : "open", FM_EMU_NAME2, r->stage);
	}
	vu_write_number(LO_DELAY_PARAM, 0);
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(WEXITSTATUS(status), 0);
	ASSERT_EQ(r->stage, 3);

	EXPECT_EQ(r->dev_ret, 0);
	EXPECT_EQ(r->unmap_ret, 0);
	EXPECT_EQ(r->unmap_size, MSZ);
	/* It waited for the callback: the race was run, not missed. */
	th_diag("%s during the callback took %.3f s", unregister ? "close" : "open",
		r->dev_s);
	EXPECT_GE((long long)(r->dev_s * 1000), LO_DELAY_MS / 4);

	if (ioctl(dev1, FM_EMU_STATS, &s))
		FAIL("FM_EMU_STATS: %s", strerror(errno));
	EXPECT_EQ(s.unmap_calls - s0.unmap_calls, 1);
	EXPECT_EQ(s.unmap_unpinned - s0.unmap_unpinned, LO_NPIN);
	EXPECT_EQ(s.pinned_pages, 0);
	EXPECT_EQ(s.records, 0);
	EXPECT_PINS_VMLCK(0, 0);
	/* The container still works. */
	MAP_OK(c, IOVA_A, p, MSZ);
	UNMAP_OK(c, IOVA_A, MSZ);
}

TEST(lockorder_open_device_during_unmap_callback)
{
	lo_run(t, false);
}

TEST(lockorder_close_device_during_unmap_callback)
{
	lo_run(t, true);
}

/* ------------------------------------------------------------------ */
/* rules GUP enforces: VM_IO vmas, userfaultfd faults nobody serves */

/* 64K of fm_emu's driver-owned memory: one large folio in a VM_IO vma. */
static void *emu_vm_io(struct th *t, struct emu *e, void *at)
{
	void *p = mmap(at, FM_EMU_MMAP_MAX, PROT_READ | PROT_WRITE,
		       MAP_SHARED | (at ? MAP_FIXED : 0), e->dev, 0);

	if (p == MAP_FAILED)
		FAIL("mmap of the fm_emu device: %s", strerror(errno));
	if (!at)
		th_own_mem(t, p, FM_EMU_MMAP_MAX);
	return p;
}

/*
 * GUP refuses VM_IO vmas, so stock never pins driver-owned pages mapped
 * there, even with struct pages and ordinary ptes: -EFAULT, nothing pinned
 * or charged, for device-readable (no write fault, no file-backed write
 * rule to trip over) and device-writable mappings alike.
 */
TEST_V12(vm_io_mapping_refused)
{
	struct emu e;
	void *p;

	emu_setup(t, &e, t->type, true);
	p = emu_vm_io(t, &e, NULL);
	EXPECT_EQ(vu_map(e.c, IOVA_A, p, FM_EMU_MMAP_MAX, VFIO_DMA_MAP_FLAG_READ), -EFAULT);
	EXPECT_EQ(vu_map(e.c, IOVA_A, p, FM_EMU_MMAP_MAX, RW), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(th_dma_avail(e.c), th_param_read("dma_entry_limit"));
}

/*
 * The VM_IO vma right after 4 MiB of ordinary memory, in one MAP_DMA: it
 * is reached by a later pin batch than the first, after ordinary pages
 * were pinned. -EFAULT and everything released; the ordinary part alone
 * maps.
 */
TEST(vm_io_after_ordinary_memory)
{
	const size_t head = 1024 * SZ_4K, size = head + FM_EMU_MMAP_MAX;
	struct emu e;
	char *p;

	emu_v2(t, &e, true);
	p = th_anon(t, size);
	memset(p, 1, head);
	emu_vm_io(t, &e, p + head);
	EXPECT_EQ(vu_map(e.c, IOVA_A, p, size, VFIO_DMA_MAP_FLAG_READ), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	MAP_OK(e.c, IOVA_A, p, head);
	EXPECT_EQ(th_pins(t), 1024);
	UNMAP_OK(e.c, IOVA_A, head);
	EXPECT_EQ(th_pins(t), 0);
}

static long emu_pin_fn(void *arg)
{
	struct emu *e = arg;
	struct fm_emu_pin p = { .iova = IOVA_A, .npage = 1, .prot = IOMMU_R | IOMMU_W };

	return ioctl(e->dev, FM_EMU_PIN, &p) ? -errno : p.ret;
}

static long emu_attach_fn(void *arg)
{
	int *cg = arg;	/* container, group */

	return vu_group_attach(cg[0], cg[1]);
}

/* Private 4K memory never touched, registered for missing faults. */
static void *uffd_mem(struct th *t, size_t size, int *uffd)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ASSERT_NE(p, MAP_FAILED);
	th_own_mem(t, p, size);
	ASSERT_EQ(vu_madvise_thp(p, size, MADV_NOHUGEPAGE), 0);
	*uffd = th_uffd_register(t, p, size, UFFDIO_REGISTER_MODE_MISSING);
	return p;
}

/*
 * Wait for @c; if it still waits for a fault after 5 s, close @uffd so
 * that it can finish, and fail. Returns its result.
 */
static long uffd_call_answers(struct th *t, struct th_call *c, int uffd, const char *what)
{
	bool done = th_call_wait(c, 5000);
	long ret;

	if (!done)
		th_close(t, uffd);
	ret = th_call_join(c);
	if (!done) {
		th_diag("%s waited for a userfaultfd fault nobody serves (then %ld)", what, ret);
		t->failed = true;
	}
	return ret;
}

/* pin_pages of a missing page in such a range: -EFAULT at once, as stock. */
TEST(pin_userfaultfd_unserved)
{
	struct th_call call;
	struct emu e;
	int uffd;
	void *p;

	emu_v2(t, &e, false);
	p = uffd_mem(t, MSZ, &uffd);
	MAP_OK(e.c, IOVA_A, p, MSZ);
	th_call_start(t, &call, emu_pin_fn, &e);
	EXPECT_EQ(uffd_call_answers(t, &call, uffd, "pin_pages"), -EFAULT);
	EXPECT_EQ(emu_stats(t, &e).records, 0);
	if (emu_stats(t, &e).records)
		emu_unpin(t, &e, IOVA_A, 1);
	UNMAP_OK(e.c, IOVA_A, MSZ);
	EXPECT_PINS_VMLCK(0, 0);
}

/*
 * An IOMMU group joining a container whose mapping (made while only the
 * emulated group was there, so nothing was pinned) covers such a range:
 * the replay pins it, gets -EFAULT at once as stock, and the group is
 * refused with nothing pinned.
 */
TEST(replay_userfaultfd_unserved)
{
	struct th_call call;
	int cg[2], uffd;
	struct emu e;
	long gfd;
	void *p;

	emu_v2(t, &e, false);
	p = uffd_mem(t, MSZ, &uffd);
	MAP_OK(e.c, IOVA_A, p, MSZ);
	cg[0] = e.c;
	th_e1000e_groups(t, &cg[1], 1);
	th_call_start(t, &call, emu_attach_fn, cg);
	gfd = uffd_call_answers(t, &call, uffd, "the replay of an attach");
	if (gfd >= 0)
		th_close(t, th_own_fd(t, gfd));
	EXPECT_EQ(gfd, -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	UNMAP_OK(e.c, IOVA_A, MSZ);
}

int main(int argc, char **argv)
{
	int ret;

	if (emu_module_load())
		fprintf(stderr, "t_emulated: fm_emu not loaded; every test will fail\n");
	ret = th_main(argc, argv);
	emu_module_unload();
	return ret;
}
