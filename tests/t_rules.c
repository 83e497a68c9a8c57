// SPDX-License-Identifier: GPL-2.0-only
/*
 * Rules the stock driver enforces through GUP, which a backend must keep
 * however it pins: a userfaultfd fault nobody serves fails MAP_DMA at once
 * (-EFAULT) instead of waiting with the container locked, a device-
 * readable map needs a readable vma, and a writable pin of a memfd never
 * coexists with F_SEAL_WRITE on it. (VM_IO mappings,
 * which need driver-owned memory, are in t_emulated.)
 */
#include "common.h"	/* first: it defines _GNU_SOURCE */
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#define NPG		16
#define WAIT_MS		5000	/* "at once": stock answers in milliseconds */

/* Private 4K anonymous memory, never touched. */
static char *untouched(struct th *t, size_t size)
{
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ASSERT_NE(p, MAP_FAILED);
	th_own_mem(t, p, size);
	ASSERT_EQ(vu_madvise_thp(p, size, MADV_NOHUGEPAGE), 0);
	return p;
}

struct map_call {
	int		c;
	uint64_t	iova;
	void		*p;
	size_t		size;
	uint32_t	flags;
};

static long map_fn(void *arg)
{
	struct map_call *m = arg;

	return vu_map(m->c, m->iova, m->p, m->size, m->flags);
}

static long info_fn(void *arg)
{
	struct vfio_iommu_type1_info info = { .argsz = sizeof(info) };

	return ioctl(*(int *)arg, VFIO_IOMMU_GET_INFO, &info) ? -errno : 0;
}

/*
 * MAP_DMA of @m in a thread of its own, and a GET_INFO on the same
 * container from another while it runs: both must answer, the map with
 * @expect. A map still waiting after WAIT_MS is unblocked by closing the
 * userfaultfd (the fault then proceeds), and whatever it mapped is removed
 * before the test fails.
 */
static void map_must_answer(struct th *t, struct map_call *m, int uffd, long expect)
{
	struct th_call map, info;
	bool map_done, info_done;
	long ret;

	th_call_start(t, &map, map_fn, m);
	usleep(20000);
	th_call_start(t, &info, info_fn, &m->c);
	map_done = th_call_wait(&map, WAIT_MS);
	info_done = th_call_wait(&info, WAIT_MS);
	if (!map_done)
		th_close(t, uffd);
	ret = th_call_join(&map);
	EXPECT_EQ(th_call_join(&info), 0);
	if (!map_done || !info_done) {
		vu_unmap(m->c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, NULL);
		FAIL("MAP_DMA %s, GET_INFO %s after %d ms (map then returned %ld)",
		     map_done ? "answered" : "still waiting",
		     info_done ? "answered" : "still blocked", WAIT_MS, ret);
	}
	EXPECT_EQ(ret, expect);
	EXPECT_PINS_VMLCK(0, 0);
}

/* Missing pages in a range registered for missing faults: -EFAULT at once. */
TEST_V12(uffd_missing_unserved)
{
	const size_t size = NPG * SZ_4K;
	struct map_call m = { .c = th_container(t), .iova = IOVA_A,
			      .p = untouched(t, size), .size = size, .flags = RW };
	int uffd = th_uffd_register(t, m.p, size, UFFDIO_REGISTER_MODE_MISSING);

	map_must_answer(t, &m, uffd, -EFAULT);
	/* read-only too: a read fault of a missing page is raised the same way */
	m.flags = VFIO_DMA_MAP_FLAG_READ;
	map_must_answer(t, &m, uffd, -EFAULT);
}

/*
 * 4 MiB of populated memory, then the registered range: the fault is
 * raised well past the first pin batch, after pages were already pinned.
 */
TEST(uffd_missing_after_populated)
{
	const size_t head = 1024 * SZ_4K, size = head + NPG * SZ_4K;
	struct map_call m = { .c = th_container(t), .iova = IOVA_A,
			      .p = untouched(t, size), .size = size, .flags = RW };
	int uffd;

	memset(m.p, 1, head);
	uffd = th_uffd_register(t, (char *)m.p + head, size - head,
				UFFDIO_REGISTER_MODE_MISSING);
	map_must_answer(t, &m, uffd, -EFAULT);
	EXPECT_EQ(th_dma_avail(m.c), th_param_read("dma_entry_limit"));
}

/*
 * Write-protected pages: a device-writable map needs a write fault, which
 * the userfaultfd raises: -EFAULT at once. A read-only map needs no fault
 * and is pinned, as by stock.
 */
TEST(uffd_wp_unserved)
{
	const size_t size = NPG * SZ_4K;
	struct map_call m = { .c = th_container(t), .iova = IOVA_A,
			      .p = untouched(t, size), .size = size, .flags = RW };
	struct uffdio_writeprotect wp = {
		.range = { .start = (uintptr_t)m.p, .len = size },
		.mode = UFFDIO_WRITEPROTECT_MODE_WP,
	};
	int uffd;

	memset(m.p, 1, size);
	uffd = th_uffd_register(t, m.p, size, UFFDIO_REGISTER_MODE_WP);
	ASSERT_EQ(ioctl(uffd, UFFDIO_WRITEPROTECT, &wp), 0);

	map_must_answer(t, &m, uffd, -EFAULT);

	ASSERT_EQ(vu_map(m.c, IOVA_A, m.p, size, VFIO_DMA_MAP_FLAG_READ), 0);
	EXPECT_PINS_VMLCK(NPG, NPG * 4);
	UNMAP_OK(m.c, IOVA_A, size);
	EXPECT_EQ(th_pins(t), 0);
}

/*
 * Memory mapped PROT_WRITE only (x86 ptes are readable all the same): GUP
 * asks for VM_READ for a device-readable map and refuses it, -EFAULT, with
 * nothing pinned; device-writable, it needs VM_WRITE only and pins.
 */
TEST(write_only_memory)
{
	const size_t size = NPG * SZ_4K;
	int c = th_container(t);
	char *p = mmap(NULL, size, PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ASSERT_NE(p, MAP_FAILED);
	th_own_mem(t, p, size);
	ASSERT_EQ(vu_madvise_thp(p, size, MADV_NOHUGEPAGE), 0);
	for (size_t i = 0; i < size; i += SZ_4K)
		p[i] = 1;
	EXPECT_EQ(vu_map(c, IOVA_A, p, size, VFIO_DMA_MAP_FLAG_READ), -EFAULT);
	EXPECT_PINS_VMLCK(0, 0);
	ASSERT_EQ(vu_map(c, IOVA_A, p, size, RW), 0);
	EXPECT_EQ(th_pins(t), NPG);
	UNMAP_OK(c, IOVA_A, size);
	EXPECT_PINS_VMLCK(0, 0);
}

/* ------------------------------------------------------------------ */
/* F_SEAL_WRITE against a writable pin */

#define RACE_ROUNDS	400
#define RACE_MAX_US	300

struct sealer {
	int		fd;
	void		*p;
	unsigned int	delay_us;
	volatile int	*map_done;	/* set by the mapper when its ioctl returned */
	int		munmap_ret;
	int		seal_ret;	/* 0 sealed, -errno, 1 not tried */
	long long	due_ns;		/* CLOCK_MONOTONIC the sealer woke up at */
};

static long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * After a random delay, take the mapping away and seal the file: the
 * moment the mapper may be anywhere inside MAP_DMA. Not tried when the
 * mapper already answered (its pins would then only make the seal wait).
 * The wakeup is an absolute time, for the mapper to tell whether it fell
 * inside its ioctl.
 */
static void *sealer_fn(void *arg)
{
	struct sealer *s = arg;
	struct timespec ts;

	s->due_ns = mono_ns() + (long long)s->delay_us * 1000;
	ts.tv_sec = s->due_ns / 1000000000LL;
	ts.tv_nsec = s->due_ns % 1000000000LL;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	s->munmap_ret = munmap(s->p, SZ_2M);
	s->seal_ret = 1;
	if (!*s->map_done)
		s->seal_ret = fcntl(s->fd, F_ADD_SEALS, F_SEAL_WRITE) ? -errno : 0;
	return NULL;
}

/*
 * One thread maps a 2M hugetlbfs memfd for device writes while another
 * munmaps it and adds F_SEAL_WRITE, both on one CPU with the sealer at
 * real-time priority, so that it runs wherever the mapper is preempted.
 * Stock pins under mmap_lock: the munmap waits for the pin, and the seal
 * then sees it (-EBUSY), or the pin finds no mapping (-EFAULT). A MAP_DMA
 * that succeeded on a file whose write seal also succeeded would let the
 * device write to sealed memory: never allowed.  The race must have been
 * run: in some round the sealer's wakeup falls inside the mapper's ioctl
 * (it then runs at the ioctl's first preemption point), else the test
 * fails, having shown nothing.
 */
TEST(seal_write_races_map)
{
	struct sched_param rt = { .sched_priority = 1 };
	int c = th_container(t), i, maps = 0, seals = 0, both = 0, inside = 0;
	pthread_attr_t attr;
	cpu_set_t one;

	if (vu_hugepages_reserve(2048, 1))
		SKIP("no 2M hugetlb page");
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
	ASSERT_EQ(pthread_attr_init(&attr), 0);
	ASSERT_EQ(pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED), 0);
	ASSERT_EQ(pthread_attr_setschedpolicy(&attr, SCHED_FIFO), 0);
	ASSERT_EQ(pthread_attr_setschedparam(&attr, &rt), 0);
	srand(12345);

	for (i = 0; i < RACE_ROUNDS; i++) {
		volatile int done = 0;
		struct sealer s = { .map_done = &done };
		pthread_t thr;
		long long t0, t1;
		int ret;

		s.fd = memfd_create("seal", MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
		ASSERT_GE(s.fd, 0);
		ASSERT_EQ(ftruncate(s.fd, SZ_2M), 0);
		s.p = mmap(NULL, SZ_2M, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd, 0);
		ASSERT_NE(s.p, MAP_FAILED);
		*(volatile char *)s.p = 1;	/* the folio is in the page cache */
		s.delay_us = rand() % RACE_MAX_US;

		ASSERT_EQ(pthread_create(&thr, &attr, sealer_fn, &s), 0);
		t0 = mono_ns();
		ret = vu_map(c, IOVA_A, s.p, SZ_2M, RW);
		t1 = mono_ns();
		done = 1;
		pthread_join(thr, NULL);
		inside += s.due_ns >= t0 && s.due_ns <= t1;

		EXPECT_EQ(s.munmap_ret, 0);
		maps += !ret;
		seals += !s.seal_ret;
		if (!ret && !s.seal_ret) {
			both++;
			th_diag("round %d: MAP_DMA and F_SEAL_WRITE both succeeded (delay %u us)",
				i, s.delay_us);
		}
		if (!ret)
			UNMAP_OK(c, IOVA_A, SZ_2M);
		else
			EXPECT_EQ(ret, -EFAULT);
		close(s.fd);
		if (both)
			break;
	}
	th_diag("%d rounds: %d maps, %d seals, %d both, %d with the sealer's wakeup inside MAP_DMA",
		i, maps, seals, both, inside);
	EXPECT_EQ(both, 0);
	EXPECT_GT(inside, 0);
	EXPECT_PINS_VMLCK(0, 0);
}

TEST_HARNESS_MAIN
