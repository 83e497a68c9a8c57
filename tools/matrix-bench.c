// SPDX-License-Identifier: GPL-2.0-only
/*
 * matrix-bench: the workload matrix of make bench. Each row is one kind of
 * work a VMM gives its VFIO type1 backend (first touch of guest RAM, many
 * small MAP_DMA calls, vIOMMU churn, 65535 mappings, a second group joining,
 * v1 partial unmap, an mdev's pin_pages); one step of a row runs it once in
 * a fresh container and returns up to three times (metrics).
 *
 * Per row, the backends alternate per loop (stock first in odd loops,
 * foliomap first in even ones), switched by --switch-cmd as dma-bench does;
 * every step is followed by a balance check: the pins (nr_foll_pin_acquired
 * - released, after stat_refresh) and this process's VmLck must be back
 * where they were before it. Before the timed part every step maps and
 * unmaps a little, untimed, so that TCG's translation of a just-reloaded
 * module is not charged to foliomap (see dma-bench's step warm-up).
 *
 * stdout (--json): one line per row, metric and backend:
 *   {"row": "small-4k", "metric": "map", "unit": "us", "guard": 1,
 *    "backend": "stock", "loops": 5, "values": [...], "median": 0.0,
 *    "pin_leak_pages": 0, "locked_vm_leak_pages": 0, "failures": 0,
 *    "what": "..."}
 * guard 0 marks a metric that is not VFIO work (munmap of the memory), which
 * the regression guard of bench/run ignores. Progress goes to stderr.
 *
 * Exit status: 0 all good, 1 a leak or a failed step, 2 usage or setup error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vfio_util.h"
#include "../tests/emu/fm_emu.h"

#define SZ_4K		4096ULL
#define SZ_64K		(64ULL << 10)
#define SZ_2M		(2ULL << 20)
#define SZ_1G		(1ULL << 30)
#define MAX_BACKENDS	2
#define MAX_METRICS	3
#define RW		(VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE)

/* IOVA layout (the emulated IOMMU has 39 bits: below 512 GiB). */
#define IOVA_BIG	(4ULL << 30)	/* large mappings */
#define IOVA_SMALL	(16ULL << 30)	/* small calls, many mappings */
#define IOVA_WARM	(256ULL << 30)	/* step warm-up */
#define CHURN_SLOTS	(1U << 20)	/* scattered 4K IOVAs: 4 GiB from IOVA_SMALL */
#define CHURN_LIVE	64		/* live scattered mappings at a time */
#define WARM_BIG	(8ULL << 20)
#define WARM_SMALL	16

struct opts {
	int groups[2];
	int ngroups;
	const char *backends[MAX_BACKENDS];
	int nbackends;
	const char *switch_cmd;
	const char *emu_ko;
	const char *rows;	/* comma-separated row names or prefixes; NULL: all */
	int loops;
	int warmup;
	bool json;
	bool list;
	unsigned int ft_mib;	/* first touch size */
	unsigned int big_mib;	/* big THP buffer: churn, replay, 64K/2M calls */
	unsigned int n4k, n64k, n2m;
	unsigned int churn_ops;
	unsigned int many;	/* mappings of the many-* rows */
	unsigned int replay_maps;
	unsigned int partial_maps;
	unsigned int emu_pins;
};

struct ctx {
	const struct opts *o;
	char *big;		/* pre-faulted THP, big_mib */
	uint64_t big_size;
	char *small;		/* pre-faulted 4K private anon, small_pages */
	uint64_t small_pages;
	int loop;		/* for the seeds: the same per loop for both backends */
	bool emu_loaded;	/* by us: removed at the end */
	int emu_group;
};

struct metric_def {
	const char *name;
	const char *unit;	/* "s", "ms" or "us" */
	bool guard;
};

struct row {
	const char *name;
	const char *what;
	int (*step)(struct ctx *x, const struct row *r, double *v);
	int arg;
	int xloops;		/* loops multiplier: noisy rows get more */
	bool cold;		/* no warm-up loop: every step starts afresh anyway */
	bool prestep;		/* an untimed step before each timed one: see run_row */
	int nm;
	struct metric_def m[MAX_METRICS];
};

/* The results of one backend on one row. */
struct series {
	const char *backend;
	double *v[MAX_METRICS];
	int n;
	int warmup;
	long long pin_leak, lck_leak;
	int failures;
};

static long page_kb;

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: the same sequence for both backends of a loop */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dULL;
}

/* ------------------------------------------------------------------ */
/* memory */

enum ft_kind { FT_THP, FT_ANON4K, FT_SHM4K, FT_MEMFD2M, FT_COW_THP, FT_HUGETLB1G, FT_MEMFD1G };

/*
 * Write-protect the private anonymous memory of this process the way
 * fork() does: a child that exits at once leaves every THP of the parent
 * read-only until its next write fault (but for MADV_DONTFORK memory).
 */
static int cow_protect(void)
{
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (!pid)
		_exit(0);
	return waitpid(pid, NULL, 0) < 0 ? -errno : 0;
}

/*
 * size bytes of a kind, never touched (cow-thp's: written, to be
 * write-protected by cow_protect()); NULL with errno.
 */
static char *ft_alloc(enum ft_kind kind, uint64_t size)
{
	int prot = PROT_READ | PROT_WRITE;
	char *p;

	switch (kind) {
	case FT_THP:
		return vu_thp_map(size);
	case FT_COW_THP:
		return vu_mem_alloc(VU_MEM_THP, size);
	case FT_ANON4K:
		p = mmap(NULL, size, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		vu_madvise_thp(p, size, MADV_NOHUGEPAGE);
		return p;
	case FT_SHM4K:
		p = mmap(NULL, size, prot, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		return p == MAP_FAILED ? NULL : p;
	case FT_MEMFD2M:
		return vu_memfd2m_map(size);
	case FT_HUGETLB1G:
		return vu_hugetlb_map(size, 1048576);
	case FT_MEMFD1G:
		return vu_memfd1g_map(size);
	}
	errno = EINVAL;
	return NULL;
}

static int ctx_buffers(struct ctx *x)
{
	uint64_t i;

	if (!x->big) {
		x->big_size = (uint64_t)x->o->big_mib << 20;
		x->big = vu_mem_alloc(VU_MEM_THP, x->big_size);
		if (!x->big)
			return -errno;
		/* As QEMU's guest RAM: cow-thp's fork must not write-protect it. */
		madvise(x->big, x->big_size, MADV_DONTFORK);
	}
	if (!x->small) {
		x->small = ft_alloc(FT_ANON4K, x->small_pages * SZ_4K);
		if (!x->small)
			return -errno;
		madvise(x->small, x->small_pages * SZ_4K, MADV_DONTFORK);
		for (i = 0; i < x->small_pages; i++)
			((volatile char *)x->small)[i * SZ_4K] = 1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* containers */

static int open_c(struct ctx *x, int type, int *gfd)
{
	int c = vu_container_setup(&x->o->groups[0], 1, type, gfd);

	if (c < 0)
		fprintf(stderr, "matrix-bench: container with group %d: %s\n",
			x->o->groups[0], strerror(-c));
	return c;
}

static void close_c(int c, int gfd)
{
	close(gfd);
	close(c);
}

/* Untimed: THP and 4K maps and unmaps, so every path the row uses is translated. */
static int warm(struct ctx *x, int c)
{
	uint64_t done = 0;
	int i, err;

	err = vu_map(c, IOVA_WARM, x->big, WARM_BIG, RW);
	for (i = 0; !err && i < WARM_SMALL; i++)
		err = vu_map(c, IOVA_WARM + WARM_BIG + i * SZ_4K, x->small + i * SZ_4K, SZ_4K, RW);
	if (!err)
		err = vu_unmap(c, IOVA_WARM, WARM_BIG + WARM_SMALL * SZ_4K, 0, &done);
	if (err)
		fprintf(stderr, "matrix-bench: warm-up map/unmap: %s\n", strerror(-err));
	return err;
}

/* Map n mappings of len bytes, IOVAs from iova at stride, vaddr from addr(i). */
static int map_n(int c, uint64_t iova, uint64_t stride, uint64_t len, unsigned int n,
		 char *base, uint64_t wrap)
{
	unsigned int i;
	int err;

	for (i = 0; i < n; i++) {
		err = vu_map(c, iova + i * stride, base + (i * len) % wrap, len, RW);
		if (err) {
			fprintf(stderr, "matrix-bench: MAP_DMA %u of %u: %s\n", i, n,
				strerror(-err));
			return err;
		}
	}
	return 0;
}

static int unmap_expect(int c, uint64_t iova, uint64_t size, uint32_t flags, uint64_t want)
{
	uint64_t done = 0;
	int err = vu_unmap(c, iova, size, flags, &done);

	if (!err && done != want) {
		fprintf(stderr, "matrix-bench: UNMAP_DMA: %" PRIu64 " bytes unmapped, %" PRIu64
			" expected\n", done, want);
		err = -EIO;
	}
	if (err && err != -EIO)
		fprintf(stderr, "matrix-bench: UNMAP_DMA: %s\n", strerror(-err));
	return err;
}

/* ------------------------------------------------------------------ */
/* rows */

/*
 * First touch: MAP_DMA faults the memory in; then UNMAP_DMA, munmap. cow-thp:
 * the memory is written and write-protected by a fork first, so MAP_DMA
 * takes a write fault per THP instead.
 */
static int step_ft(struct ctx *x, const struct row *r, double *v)
{
	uint64_t size = (uint64_t)x->o->ft_mib << 20;
	double t0, t1, t2, t3;

	/* 1G pages: whole pages, at least one. */
	if (r->arg == FT_HUGETLB1G || r->arg == FT_MEMFD1G)
		size = (size + SZ_1G - 1) & ~(SZ_1G - 1);
	int c, gfd, err;
	char *p;

	p = ft_alloc(r->arg, size);
	if (!p) {
		fprintf(stderr, "matrix-bench: %s: %" PRIu64 " MiB: %s\n", r->name, size >> 20,
			strerror(errno));
		return -ENOMEM;
	}
	err = r->arg == FT_COW_THP ? cow_protect() : 0;
	c = err ? err : open_c(x, VFIO_TYPE1v2_IOMMU, &gfd);
	if (c < 0) {
		munmap(p, size);
		return c;
	}
	err = warm(x, c);
	if (!err) {
		t0 = vu_now();
		err = vu_map(c, IOVA_BIG, p, size, RW);
		t1 = vu_now();
		if (err)
			fprintf(stderr, "matrix-bench: %s: MAP_DMA: %s\n", r->name, strerror(-err));
		else
			err = unmap_expect(c, IOVA_BIG, size, 0, size);
		t2 = vu_now();
	}
	close_c(c, gfd);
	t3 = vu_now();
	munmap(p, size);
	if (!err) {
		v[0] = t1 - t0;
		v[1] = t2 - t1;
		v[2] = vu_now() - t3;
	}
	return err;
}

/* n calls of one chunk each, pre-faulted memory: MAP_DMA all, then UNMAP_DMA each. */
static int step_small(struct ctx *x, const struct row *r, double *v)
{
	uint64_t chunk = r->arg;
	unsigned int n, i;
	double t0, t1, t2;
	int c, gfd, err;
	char *base;
	uint64_t wrap;

	if (chunk == SZ_4K) {
		n = x->o->n4k;
		base = x->small;
		wrap = x->small_pages * SZ_4K;
	} else {
		n = chunk == SZ_64K ? x->o->n64k : x->o->n2m;
		base = x->big;
		wrap = x->big_size;
	}
	c = open_c(x, VFIO_TYPE1v2_IOMMU, &gfd);
	if (c < 0)
		return c;
	err = warm(x, c);
	if (err)
		goto out;
	t0 = vu_now();
	err = map_n(c, IOVA_SMALL, chunk, chunk, n, base, wrap);
	t1 = vu_now();
	if (err)
		goto out;
	for (i = 0; i < n && !err; i++)
		err = unmap_expect(c, IOVA_SMALL + i * chunk, chunk, 0, chunk);
	t2 = vu_now();
	if (!err) {
		v[0] = (t1 - t0) / n * 1e6;
		v[1] = (t2 - t1) / n * 1e6;
	}
out:
	close_c(c, gfd);
	return err;
}

/*
 * vIOMMU churn: a big live mapping (the guest's RAM as seen by another
 * device, or the VMM's own), and the guest mapping and unmapping single
 * 4K pages at scattered IOVAs, CHURN_LIVE of them live at a time. One op =
 * one UNMAP_DMA of the oldest and one MAP_DMA of a new one.
 */
static int step_churn(struct ctx *x, const struct row *r, double *v)
{
	unsigned int ring[CHURN_LIVE], head = 0, i, ops = x->o->churn_ops;
	uint64_t seed = 0x9e3779b97f4a7c15ULL * (x->loop + 1);
	uint8_t *used;
	double t0, t1;
	int c, gfd, err;

	used = calloc(CHURN_SLOTS / 8, 1);
	if (!used)
		return -ENOMEM;
	c = open_c(x, VFIO_TYPE1v2_IOMMU, &gfd);
	if (c < 0) {
		free(used);
		return c;
	}
	err = warm(x, c);
	if (!err)
		err = vu_map(c, IOVA_BIG, x->big, x->big_size, RW);
	if (err)
		goto out;

#define PICK(slot) do {							\
		do {							\
			slot = rng_next(&seed) % CHURN_SLOTS;		\
		} while (used[slot / 8] & (1 << (slot % 8)));		\
		used[slot / 8] |= 1 << (slot % 8);			\
	} while (0)
#define PAGE(slot)	(x->small + ((slot) % x->small_pages) * SZ_4K)

	for (i = 0; i < CHURN_LIVE && !err; i++) {
		PICK(ring[i]);
		err = vu_map(c, IOVA_SMALL + ring[i] * SZ_4K, PAGE(ring[i]), SZ_4K, RW);
	}
	t0 = vu_now();
	for (i = 0; i < ops && !err; i++) {
		unsigned int old = ring[head];

		err = vu_unmap(c, IOVA_SMALL + old * SZ_4K, SZ_4K, 0, NULL);
		used[old / 8] &= ~(1 << (old % 8));
		PICK(ring[head]);
		if (!err)
			err = vu_map(c, IOVA_SMALL + ring[head] * SZ_4K, PAGE(ring[head]),
				     SZ_4K, RW);
		head = (head + 1) % CHURN_LIVE;
	}
	t1 = vu_now();
#undef PICK
#undef PAGE
	if (err)
		fprintf(stderr, "matrix-bench: churn op %u: %s\n", i, strerror(-err));
	else
		v[0] = (t1 - t0) / ops * 1e6;
out:
	close_c(c, gfd);	/* releases whatever is left */
	free(used);
	return err;
}

/* 65535 4K mappings; arg 0: UNMAP_DMA(FLAG_ALL), arg 1: close the container. */
static int step_many(struct ctx *x, const struct row *r, double *v)
{
	unsigned int n = x->o->many;
	double t0, t1;
	int c, gfd, err;

	c = open_c(x, VFIO_TYPE1v2_IOMMU, &gfd);
	if (c < 0)
		return c;
	err = warm(x, c);
	if (!err)
		err = map_n(c, IOVA_SMALL, SZ_4K, SZ_4K, n, x->small, x->small_pages * SZ_4K);
	if (err) {
		close_c(c, gfd);
		return err;
	}
	t0 = vu_now();
	if (r->arg == 0) {
		err = unmap_expect(c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL, n * SZ_4K);
		t1 = vu_now();
		close_c(c, gfd);
	} else {
		/* The container's last group leaving releases the IOMMU: unmap, unpin. */
		close(c);
		close(gfd);
		t1 = vu_now();
	}
	if (!err)
		v[0] = t1 - t0;
	return err;
}

/*
 * A second group joins a container holding big_mib in replay_maps
 * mappings. arg 0: the second e1000e (same IOMMU: the backend may share
 * the first group's domain); arg 1: the container held only the emulated
 * fm_emu group (nothing pinned or mapped in an IOMMU yet), so the e1000e
 * gets the first IOMMU domain and everything is pinned and mapped into it
 * (the replay proper).
 */
static int emu_ready(struct ctx *x);

#define REPLAY_ATTACHES	16

static int step_replay(struct ctx *x, const struct row *r, double *v)
{
	unsigned int n = x->o->replay_maps;
	uint64_t len = x->big_size / n;
	int first, second, c, gfd, g2;
	char path[32];
	double t0, t1;
	int err, i;

	if (r->arg == 0) {
		if (x->o->ngroups < 2) {
			fprintf(stderr, "matrix-bench: %s needs two groups (--groups A,B)\n",
				r->name);
			return -ENODEV;
		}
		first = x->o->groups[0];
		second = x->o->groups[1];
	} else {
		err = emu_ready(x);
		if (err)
			return err;
		first = x->emu_group;
		second = x->o->groups[0];
	}
	c = vu_container_setup(&first, 1, VFIO_TYPE1v2_IOMMU, &gfd);
	if (c < 0) {
		fprintf(stderr, "matrix-bench: %s: container with group %d: %s\n", r->name,
			first, strerror(-c));
		return c;
	}
	snprintf(path, sizeof(path), "/dev/vfio/%d", second);
	g2 = open(path, O_RDWR | O_CLOEXEC);
	if (g2 < 0) {
		err = -errno;
		fprintf(stderr, "matrix-bench: %s: %s\n", path, strerror(errno));
		close_c(c, gfd);
		return err;
	}
	err = warm(x, c);
	if (!err)
		err = map_n(c, IOVA_BIG, len, len, n, x->big, x->big_size);
	/*
	 * Joining a domain that exists is one iommu_attach_group() of some
	 * 30 us: timed alone, it is noise. It is timed REPLAY_ATTACHES times,
	 * the group leaving in between (nothing to unmap: the first group
	 * keeps the domain). A first domain (replay-emu) is timed once.
	 */
	for (i = 0, v[0] = 0; !err && i < (r->arg ? 1 : REPLAY_ATTACHES); i++) {
		if (i && ioctl(g2, VFIO_GROUP_UNSET_CONTAINER) < 0) {
			err = -errno;
			fprintf(stderr, "matrix-bench: %s: VFIO_GROUP_UNSET_CONTAINER: %s\n",
				r->name, strerror(errno));
			break;
		}
		t0 = vu_now();
		err = ioctl(g2, VFIO_GROUP_SET_CONTAINER, &c) < 0 ? -errno : 0;
		t1 = vu_now();
		if (err)
			fprintf(stderr, "matrix-bench: %s: VFIO_GROUP_SET_CONTAINER: %s\n",
				r->name, strerror(-err));
		v[0] += (t1 - t0) / (r->arg ? 1 : REPLAY_ATTACHES);
	}
	if (!err)
		err = unmap_expect(c, IOVA_BIG, x->big_size, 0, x->big_size);
	close(g2);
	close_c(c, gfd);
	return err;
}

/*
 * v1 container, partial_maps 4K mappings with a 4K hole after each; one
 * UNMAP_DMA of a range covering the middle half of them (whole mappings and
 * the holes between: what v1 allows and v2 also accepts).
 */
static int step_partial(struct ctx *x, const struct row *r, double *v)
{
	unsigned int n = x->o->partial_maps, from = n / 4, cnt = n / 2;
	double t0, t1;
	int c, gfd, err;

	c = open_c(x, VFIO_TYPE1_IOMMU, &gfd);
	if (c < 0)
		return c;
	err = warm(x, c);
	if (!err)
		err = map_n(c, IOVA_SMALL, 2 * SZ_4K, SZ_4K, n, x->small, x->small_pages * SZ_4K);
	if (!err) {
		t0 = vu_now();
		err = unmap_expect(c, IOVA_SMALL + from * 2 * SZ_4K, cnt * 2 * SZ_4K, 0,
				   cnt * SZ_4K);
		t1 = vu_now();
		if (!err)
			v[0] = t1 - t0;
	}
	if (!err)
		err = unmap_expect(c, IOVA_SMALL, n * 2 * SZ_4K, 0, (n - cnt) * SZ_4K);
	close_c(c, gfd);
	return err;
}

/* fm_emu: inserted from --emu-ko unless loaded; its first device's group. */
static int emu_ready(struct ctx *x)
{
	char link[256], *slash;
	ssize_t n;
	int ret;

	if (x->emu_group > 0)
		return 0;
	if (access("/sys/module/fm_emu", F_OK)) {
		if (!x->o->emu_ko) {
			fprintf(stderr, "matrix-bench: fm_emu not loaded and no --emu-ko\n");
			return -ENOENT;
		}
		ret = vu_module_insert(x->o->emu_ko);
		if (ret && ret != -EEXIST) {
			fprintf(stderr, "matrix-bench: init_module %s: %s (make -C tests)\n",
				x->o->emu_ko, strerror(-ret));
			return ret;
		}
		x->emu_loaded = !ret;
	}
	n = readlink("/sys/bus/platform/devices/" FM_EMU_NAME "/iommu_group", link,
		     sizeof(link) - 1);
	if (n < 0) {
		fprintf(stderr, "matrix-bench: %s has no iommu_group: %s\n", FM_EMU_NAME,
			strerror(errno));
		return -ENODEV;
	}
	link[n] = 0;
	slash = strrchr(link, '/');
	x->emu_group = atoi(slash ? slash + 1 : link);
	return 0;
}

static void emu_unload(struct ctx *x)
{
	if (x->emu_loaded && syscall(SYS_delete_module, "fm_emu", O_NONBLOCK))
		fprintf(stderr, "matrix-bench: delete_module fm_emu: %s\n", strerror(errno));
}

/*
 * The external pin path (an mdev: vGPU, vfio-ap, ...): a container holding
 * only fm_emu's group, one mapping of the 4K buffer (nothing pinned at
 * MAP_DMA without an IOMMU domain), emu_pins vfio_pin_pages() of one page
 * each at scattered IOVAs, then vfio_unpin_pages() of each, oldest first.
 */
static int step_emu(struct ctx *x, const struct row *r, double *v)
{
	unsigned int n = x->o->emu_pins, i, pages = x->small_pages;
	uint64_t size = (uint64_t)pages * SZ_4K;
	int c, gfd, dev, err;
	double t0, t1, t2;

	err = emu_ready(x);
	if (err)
		return err;
	c = vu_container_setup(&x->emu_group, 1, VFIO_TYPE1v2_IOMMU, &gfd);
	if (c < 0) {
		fprintf(stderr, "matrix-bench: container with fm_emu group %d: %s\n",
			x->emu_group, strerror(-c));
		return c;
	}
	dev = ioctl(gfd, VFIO_GROUP_GET_DEVICE_FD, FM_EMU_NAME);
	if (dev < 0) {
		err = -errno;
		fprintf(stderr, "matrix-bench: VFIO_GROUP_GET_DEVICE_FD(%s): %s\n", FM_EMU_NAME,
			strerror(errno));
		close_c(c, gfd);
		return err;
	}
	err = warm(x, c);
	if (!err)
		err = vu_map(c, IOVA_SMALL, x->small, size, RW);
	/* Page i*k mod pages, k odd: n distinct scattered pages (pages is a power of 2). */
#define EMU_IOVA(i)	(IOVA_SMALL + ((uint64_t)(i) * 40503 % pages) * SZ_4K)
	t0 = vu_now();
	for (i = 0; i < n && !err; i++) {
		struct fm_emu_pin p = { .iova = EMU_IOVA(i), .npage = 1, .prot = 3 };

		if (ioctl(dev, FM_EMU_PIN, &p))
			err = -errno;
		else if (p.ret != 1)
			err = p.ret < 0 ? (int)p.ret : -EIO;
	}
	t1 = vu_now();
	if (err)
		fprintf(stderr, "matrix-bench: FM_EMU_PIN %u: %s\n", i, strerror(-err));
	for (i = 0; i < n && !err; i++) {
		struct fm_emu_unpin u = { .iova = EMU_IOVA(i), .npage = 1 };

		if (ioctl(dev, FM_EMU_UNPIN, &u)) {
			err = -errno;
			fprintf(stderr, "matrix-bench: FM_EMU_UNPIN %u: %s\n", i, strerror(errno));
		}
	}
	t2 = vu_now();
#undef EMU_IOVA
	if (!err) {
		v[0] = (t1 - t0) / n * 1e6;
		v[1] = (t2 - t1) / n * 1e6;
		err = unmap_expect(c, IOVA_SMALL, size, 0, size);
	}
	close(dev);
	close_c(c, gfd);
	return err;
}

/*
 * Not cold: a step maps memory never touched, but the first steps in a
 * fresh guest take pages from free lists no step has churned yet, and
 * under icount stock's first-touch map of 4K memory came out 5% cheaper
 * in the first one or two steps than in every later one. The warm-up loop
 * gives both backends that churned state before anything is timed.
 */
#define FT(kind, name, what, xl) \
	{ name, what, step_ft, kind, xl, false, false, 3, \
	  { { "map", "s", true }, { "unmap", "s", true }, { "munmap", "s", false } } }

static const struct row rows[] = {
	FT(FT_THP, "ft-thp", "first touch: MAP_DMA faults in never-touched THP memory", 2),
	/*
	 * A 4K first touch's time follows the number of physically contiguous
	 * runs it meets, which changes from loop to loop: its samples come in
	 * two groups about 2% apart, so a median of three is a coin toss.
	 */
	FT(FT_ANON4K, "ft-anon4k",
	   "first touch: private anon, MADV_NOHUGEPAGE (4K pages), never touched", 3),
	FT(FT_SHM4K, "ft-shm4k", "first touch: MAP_SHARED anon (4K shmem), never touched", 3),
	FT(FT_MEMFD2M, "ft-memfd2m", "first touch: 2M hugetlbfs memfd, never touched", 2),
	FT(FT_HUGETLB1G, "ft-hugetlb1g",
	   "first touch: private 1G hugetlbfs, never touched (FT_MIB rounded up to 1G)", 1),
	FT(FT_MEMFD1G, "ft-memfd1g",
	   "first touch: 1G hugetlbfs memfd, never touched (FT_MIB rounded up to 1G)", 1),
	FT(FT_COW_THP, "cow-thp",
	   "THP memory written, then write-protected by a fork: MAP_DMA breaks CoW", 2),
	{ "small-4k", "N x 4K MAP_DMA then N x UNMAP_DMA, pre-faulted 4K anon, per call",
	  step_small, SZ_4K, 2, false, false, 2, { { "map", "us", true }, { "unmap", "us", true } } },
	{ "small-64k", "N x 64K MAP_DMA then N x UNMAP_DMA, pre-faulted THP, per call",
	  step_small, SZ_64K, 2, false, false, 2, { { "map", "us", true }, { "unmap", "us", true } } },
	{ "small-2m", "N x 2M MAP_DMA then N x UNMAP_DMA, pre-faulted THP, per call",
	  step_small, SZ_2M, 2, false, false, 2, { { "map", "us", true }, { "unmap", "us", true } } },
	{ "churn", "4K UNMAP_DMA + MAP_DMA at scattered IOVAs beside a big live mapping, per op",
	  step_churn, 0, 2, false, false, 1, { { "op", "us", true } } },
	{ "many-unmapall", "65535 x 4K mappings: UNMAP_DMA(FLAG_ALL)",
	  step_many, 0, 1, true, false, 1, { { "unmap-all", "s", true } } },
	{ "many-close", "65535 x 4K mappings: close the container (release)",
	  step_many, 1, 1, true, false, 1, { { "close", "s", true } } },
	{ "replay", "2nd e1000e group joins a container with the big THP buffer in many mappings (16x)",
	  step_replay, 0, 1, false, true, 1, { { "attach", "s", true } } },
	{ "replay-emu", "e1000e joins a container of fm_emu's group holding the buffer: first domain",
	  step_replay, 1, 1, false, true, 1, { { "attach", "s", true } } },
	{ "partial-v1", "v1 container, many 4K mappings: one UNMAP_DMA of the middle half",
	  step_partial, 0, 2, false, false, 1, { { "unmap", "ms", true } } },
	{ "emu-pin", "fm_emu: vfio_pin_pages/unpin_pages of single scattered pages, per page",
	  step_emu, 0, 4, false, false, 2, { { "pin", "us", true }, { "unpin", "us", true } } },
};
#define NROWS	((int)(sizeof(rows) / sizeof(rows[0])))

/* ------------------------------------------------------------------ */
/* driver */

static double unit_scale(const char *unit)
{
	return !strcmp(unit, "ms") ? 1e3 : 1;	/* "us" rows compute us themselves */
}

/* One step of row r on the active backend, with the balance check around it. */
static int one_step(struct ctx *x, const struct row *r, struct series *s)
{
	struct vu_counters before, after;
	double v[MAX_METRICS];
	long long pins, lck;
	int err, m;

	if (vu_counters_read(&before)) {
		fprintf(stderr, "matrix-bench: cannot read /proc/vmstat nr_foll_pin_* or VmLck\n");
		return -ENOENT;
	}
	err = r->step(x, r, v);
	if (err)
		s->failures++;
	if (vu_counters_read(&after))
		return -ENOENT;
	pins = vu_pins_outstanding(&before, &after);
	lck = (after.vmlck_kb - before.vmlck_kb) / page_kb;
	if (pins || lck) {
		fprintf(stderr, "matrix-bench: ERROR: %s %s loop %d: %lld pages still pinned, "
			"%lld still locked (VmLck)\n", s->backend, r->name, x->loop + 1, pins, lck);
		s->pin_leak += pins;
		s->lck_leak += lck;
	}
	if (err)
		return err;
	if (s->warmup) {
		s->warmup--;
		return 0;
	}
	for (m = 0; m < r->nm; m++)
		s->v[m][s->n] = v[m] * unit_scale(r->m[m].unit);
	s->n++;
	return 0;
}

static void print_json(const struct row *r, const struct series *s)
{
	int m, i;

	for (m = 0; m < r->nm; m++) {
		printf("{\"row\": \"%s\", \"metric\": \"%s\", \"unit\": \"%s\", \"guard\": %d, "
		       "\"backend\": \"%s\", \"loops\": %d, \"values\": [", r->name,
		       r->m[m].name, r->m[m].unit, r->m[m].guard, s->backend, s->n);
		for (i = 0; i < s->n; i++)
			printf("%s%.6g", i ? ", " : "", s->v[m][i]);
		printf("], \"median\": %.6g, \"pin_leak_pages\": %lld, "
		       "\"locked_vm_leak_pages\": %lld, \"failures\": %d, \"what\": \"%s\"}\n",
		       vu_median(s->v[m], s->n), s->pin_leak, s->lck_leak, s->failures, r->what);
	}
	fflush(stdout);
}

/* Returns 0, or <0 on a setup error; leaks and failures set *bad. */
static int run_row(struct ctx *x, const struct row *r, int *bad)
{
	const struct opts *o = x->o;
	struct series s[MAX_BACKENDS] = { 0 };
	int loops = o->loops * r->xloops, warmup = r->cold ? 0 : o->warmup;
	int b, i, m, loop, ret = 0;
	double t = vu_now();

	for (b = 0; b < o->nbackends; b++) {
		s[b].backend = o->backends[b];
		s[b].warmup = warmup;
		for (m = 0; m < r->nm; m++) {
			s[b].v[m] = calloc(loops, sizeof(double));
			if (!s[b].v[m])
				return -ENOMEM;
		}
	}
	for (loop = 0; loop < warmup + loops && !ret; loop++) {
		x->loop = loop;
		for (i = 0; i < o->nbackends; i++) {
			/* stock first in odd loops, foliomap first in even ones */
			b = loop % 2 ? o->nbackends - 1 - i : i;
			if (o->nbackends > 1 || o->switch_cmd) {
				ret = vu_switch_backend("matrix-bench", o->switch_cmd,
							o->backends[b]);
				if (ret)
					break;
			}
			/*
			 * A short row times one call of code the step warm-up
			 * does not run (attaching a group): after a reload
			 * of foliomap TCG would translate it inside the timed
			 * call. One untimed (but checked) step first.
			 */
			if (r->prestep) {
				s[b].warmup++;
				if (one_step(x, r, &s[b]) == -ENOENT && !s[b].failures) {
					ret = -ENOENT;
					break;
				}
			}
			if (!s[b].failures && one_step(x, r, &s[b]) == -ENOENT && !s[b].failures) {
				ret = -ENOENT;
				break;
			}
			/* A failing row stops after its first failure of each backend. */
			if (s[b].failures)
				break;
		}
		for (b = 0; b < o->nbackends; b++)
			if (s[b].failures)
				loop = warmup + loops;
	}
	fprintf(stderr, "# %-14s %5.1f s", r->name, vu_now() - t);
	for (b = 0; b < o->nbackends; b++) {
		fprintf(stderr, "  %s", s[b].backend);
		for (m = 0; m < r->nm; m++)
			fprintf(stderr, " %s %.4g %s", r->m[m].name, vu_median(s[b].v[m], s[b].n),
				r->m[m].unit);
		if (s[b].failures || s[b].pin_leak || s[b].lck_leak) {
			fprintf(stderr, " (FAILED: %d failures, %lld pins, %lld locked leaked)",
				s[b].failures, s[b].pin_leak, s[b].lck_leak);
			*bad = 1;
		}
	}
	fprintf(stderr, "\n");
	for (b = 0; b < o->nbackends; b++) {
		if (o->json && (s[b].n || s[b].failures))
			print_json(r, &s[b]);
		for (m = 0; m < r->nm; m++)
			free(s[b].v[m]);
	}
	return ret;
}

static bool row_selected(const struct opts *o, const char *name)
{
	char *dup, *tok, *save = NULL;
	bool hit = false;

	if (!o->rows)
		return true;
	dup = strdup(o->rows);
	for (tok = strtok_r(dup, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save))
		hit = !strncmp(name, tok, strlen(tok));
	free(dup);
	return hit;
}

static void usage(FILE *f)
{
	int i;

	fprintf(f,
"usage: matrix-bench [--groups A,B] [--backends stock,foliomap --switch-cmd SCRIPT]\n"
"                    [--loops L] [--warmup W] [--rows PREFIX,...] [--emu-ko PATH] [--json]\n"
"                    [--ft-mib M] [--big-mib M] [--n4k N] [--n64k N] [--n2m N]\n"
"                    [--churn-ops N] [--many N] [--replay-maps N] [--partial-maps N]\n"
"                    [--emu-pins N] [--list]\n"
"\n"
"  --groups A,B     e1000e groups (default: the first two of $VFIO_GROUPS)\n"
"  --loops L        timed loops per row and backend (default 5; rows marked xN run N*L)\n"
"  --warmup W       untimed (but leak-checked) loops first (default 1; not for\n"
"                   the many-* rows, whose steps start afresh anyway)\n"
"  --rows LIST      only the rows whose names start with one of LIST\n"
"  --emu-ko PATH    fm_emu.ko for the emu rows (tests/bin/fm_emu-<kver>.ko)\n"
"  --ft-mib M       first touch size (default 512)   --big-mib M  THP buffer (1024)\n"
"  --n4k/--n64k/--n2m N   small calls (20000/20000/512)   --churn-ops N (20000)\n"
"  --many N         mappings of many-* (65535)       --replay-maps N (4096)\n"
"  --partial-maps N (16384)                          --emu-pins N (8192)\n"
"\nrows:\n");
	for (i = 0; i < NROWS; i++)
		fprintf(f, "  %-14s x%d %s\n", rows[i].name, rows[i].xloops, rows[i].what);
}

static int parse_uint(const char *s, unsigned int *v)
{
	char *end;
	unsigned long x = strtoul(s, &end, 0);

	if (*end || !x || x > 1U << 30)
		return -EINVAL;
	*v = x;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "groups",	  required_argument, NULL, 'g' },
		{ "backends",	  required_argument, NULL, 'b' },
		{ "switch-cmd",	  required_argument, NULL, 'w' },
		{ "loops",	  required_argument, NULL, 'l' },
		{ "warmup",	  required_argument, NULL, 'W' },
		{ "rows",	  required_argument, NULL, 'r' },
		{ "emu-ko",	  required_argument, NULL, 'e' },
		{ "json",	  no_argument,	     NULL, 'j' },
		{ "list",	  no_argument,	     NULL, 'L' },
		{ "ft-mib",	  required_argument, NULL, 1 },
		{ "big-mib",	  required_argument, NULL, 2 },
		{ "n4k",	  required_argument, NULL, 3 },
		{ "n64k",	  required_argument, NULL, 4 },
		{ "n2m",	  required_argument, NULL, 5 },
		{ "churn-ops",	  required_argument, NULL, 6 },
		{ "many",	  required_argument, NULL, 7 },
		{ "replay-maps",  required_argument, NULL, 8 },
		{ "partial-maps", required_argument, NULL, 9 },
		{ "emu-pins",	  required_argument, NULL, 10 },
		{ "help",	  no_argument,	     NULL, 'h' },
		{ 0 }
	};
	struct opts o = {
		.loops = 5, .warmup = 1, .ft_mib = 512, .big_mib = 1024,
		.n4k = 20000, .n64k = 20000, .n2m = 512, .churn_ops = 20000,
		.many = 65535, .replay_maps = 4096, .partial_maps = 16384, .emu_pins = 8192,
	};
	unsigned int *num[] = { NULL, &o.ft_mib, &o.big_mib, &o.n4k, &o.n64k, &o.n2m,
				&o.churn_ops, &o.many, &o.replay_maps, &o.partial_maps,
				&o.emu_pins };
	struct ctx x = { .o = &o };
	int c, i, ret = 0, bad = 0;
	char *end, *tok, *save;

	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'g':
			o.ngroups = 0;
			for (tok = strtok_r(optarg, ",", &save); tok && o.ngroups < 2;
			     tok = strtok_r(NULL, ",", &save))
				o.groups[o.ngroups++] = atoi(tok);
			break;
		case 'b':
			o.nbackends = 0;
			for (tok = strtok_r(optarg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				if (o.nbackends == MAX_BACKENDS ||
				    (strcmp(tok, "stock") && strcmp(tok, "foliomap")))
					goto bad_arg;
				o.backends[o.nbackends++] = strcmp(tok, "stock") ? "foliomap" : "stock";
			}
			break;
		case 'w':
			o.switch_cmd = optarg;
			break;
		case 'l':
			o.loops = strtol(optarg, &end, 10);
			if (*end || o.loops < 1)
				goto bad_arg;
			break;
		case 'W':
			o.warmup = strtol(optarg, &end, 10);
			if (*end || o.warmup < 0)
				goto bad_arg;
			break;
		case 'r':
			o.rows = optarg;
			break;
		case 'e':
			o.emu_ko = optarg;
			break;
		case 'j':
			o.json = true;
			break;
		case 'L':
			o.list = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			if (c >= 1 && c <= 10) {
				if (parse_uint(optarg, num[c]))
					goto bad_arg;
				break;
			}
			usage(stderr);
			return 2;
		}
	}
	if (o.list) {
		usage(stdout);
		return 0;
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	page_kb = sysconf(_SC_PAGESIZE) / 1024;
	if (!o.ngroups)
		o.ngroups = vu_env_groups(o.groups, 2);
	if (!o.ngroups) {
		fprintf(stderr, "matrix-bench: no group: --groups A,B or $VFIO_GROUPS\n");
		return 2;
	}
	if (!o.nbackends) {
		o.backends[0] = vu_backend_name();
		o.nbackends = 1;
	}
	if (o.ft_mib % 2 || o.big_mib % 2 || (uint64_t)o.n2m * SZ_2M > 64 * SZ_1G ||
	    o.replay_maps > o.big_mib * 256U || (o.big_mib * 256U) % o.replay_maps) {
		fprintf(stderr, "matrix-bench: sizes: --ft-mib/--big-mib even, --replay-maps "
			"dividing the buffer into whole pages\n");
		return 2;
	}
	/* The 4K buffer: a power of two of pages covering every 4K row. */
	x.small_pages = 1;
	while (x.small_pages < o.many || x.small_pages < o.n4k ||
	       x.small_pages < o.partial_maps || x.small_pages < o.emu_pins ||
	       x.small_pages < WARM_SMALL)
		x.small_pages <<= 1;
	if (o.many > 65535)
		fprintf(stderr, "matrix-bench: --many %u is above stock's dma_entry_limit 65535\n",
			o.many);

	ret = ctx_buffers(&x);
	if (ret) {
		fprintf(stderr, "matrix-bench: cannot allocate the buffers (%u MiB THP, %" PRIu64
			" MiB 4K): %s\n", o.big_mib, x.small_pages >> 8, strerror(-ret));
		return 2;
	}
	fprintf(stderr, "# matrix-bench: group %d", o.groups[0]);
	if (o.ngroups > 1)
		fprintf(stderr, " (second: %d)", o.groups[1]);
	fprintf(stderr, ", %d loops (+%d warm-up), backends", o.loops, o.warmup);
	for (i = 0; i < o.nbackends; i++)
		fprintf(stderr, " %s", o.backends[i]);
	fprintf(stderr, "\n");

	for (i = 0; i < NROWS && ret >= 0; i++) {
		long long nr = -1;

		if (!row_selected(&o, rows[i].name))
			continue;
		if (rows[i].step == step_ft && rows[i].arg == FT_MEMFD2M)
			nr = vu_read_number("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
		ret = run_row(&x, &rows[i], &bad);
		if (nr >= 0)	/* give the pool back */
			vu_write_number("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", nr);
	}
	emu_unload(&x);
	if (ret < 0)
		return 2;
	if (bad) {
		fprintf(stderr, "matrix-bench: FAILED: leaks or failed steps above\n");
		return 1;
	}
	return 0;

bad_arg:
	fprintf(stderr, "matrix-bench: bad argument '%s'\n", optarg);
	usage(stderr);
	return 2;
}
