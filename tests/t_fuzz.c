// SPDX-License-Identifier: GPL-2.0-only
/*
 * Differential fuzzing of the type1 container uAPI.
 *
 * A seeded generator (splitmix64, so a seed gives the same sequence
 * everywhere) issues random ioctls on a container holding one e1000e group:
 * MAP_DMA (random iova/size/vaddr/flags, overlaps, bad values, wrap-around,
 * VADDR), UNMAP_DMA (exact, ranges, ALL, VADDR, GET_DIRTY_BITMAP, v1 and v2),
 * GET_INFO with random argsz, DIRTY_PAGES, CHECK_EXTENSION, bad argument
 * pointers and argsz.  Containers are closed and reopened (v1 or v2) at
 * random.  Each step appends one line to a trace: the operation and
 * everything the kernel returned (errno, written-back sizes, GET_INFO
 * fields, a hash of returned bitmaps and buffers).  A reference model of
 * the mappings predicts the success or failure (and errno where fixed) of
 * every MAP/UNMAP, the unmapped size, and after every step the invariants
 * VmLck == pinned pages == the sum of the modelled mapping sizes; after a
 * container closes, both must be back to zero.
 *
 * The one deliberate difference in the trace, EINVAL (stock 6.12) against
 * EOVERFLOW (foliomap, upstream) for an operation whose iova/vaddr range
 * wraps around, is normalised: such lines print "EWRAP" (raw errno after
 * " #", which comparisons ignore).
 *
 *   t_fuzz                          TAP, fixed seeds (run-all).  In a stock
 *                                   guest: differential, foliomap.ko inserted
 *                                   and removed by the program; otherwise the
 *                                   current backend with the model only.
 *   t_fuzz --seed S --steps N [--trace] [--diff] [--ko PATH]
 *                                   one run; prints the digest (and the trace);
 *                                   --diff runs stock then foliomap and
 *                                   reports the first differing line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tools/vfio_util.h"

#define PG		0x1000ULL
#define SZ_2M		0x200000ULL
#define WIN		0x10000000ULL		/* IOVA window of the fuzzer */
#define WIN_PAGES	1024ULL			/* 4 MiB of IOVA */
#define POOL_SIZE	(8 * SZ_2M)
/* pool layout (offsets): THP RW | 4K RW | hole | 4K RW | RO | unmapped */
#define P_THP_END	(2 * SZ_2M)
#define P_HOLE		(3 * SZ_2M)
#define P_HOLE_END	(P_HOLE + 16 * PG)
#define P_RW_END	(4 * SZ_2M)
#define P_RO_END	(P_RW_END + 64 * PG)
#define MAXMAP		512
#define DEF_STEPS	400
static const uint64_t fixed_seeds[] = { 1, 2, 3, 0x5eed };

#ifndef VFIO_DMA_UNMAP_FLAG_ALL
#define VFIO_DMA_UNMAP_FLAG_ALL (1 << 1)
#endif

/* ------------------------------------------------------------------ */
/* PRNG */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static bool chance(int percent)
{
	return below(100) < (uint64_t)percent;
}

/* ------------------------------------------------------------------ */
/* trace */

static FILE *trace_out;
static uint64_t digest;
static int violations;
static char line[1024];
static size_t line_len;

static void lp(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	line_len += vsnprintf(line + line_len, sizeof(line) - line_len, fmt, ap);
	va_end(ap);
	if (line_len >= sizeof(line))
		line_len = sizeof(line) - 1;
}

/* Emit the line; the digest covers it up to " #" (raw values, comments). */
static void lend(void)
{
	const char *c = strstr(line, " #");
	size_t n = c ? (size_t)(c - line) : line_len, i;

	for (i = 0; i < n; i++) {
		digest ^= (unsigned char)line[i];
		digest *= 0x100000001b3ULL;
	}
	digest ^= '\n';
	digest *= 0x100000001b3ULL;
	if (trace_out)
		fprintf(trace_out, "%s\n", line);
	line_len = 0;
	line[0] = 0;
}

static const char *ename(int r)
{
	static char buf[16];

	switch (-r) {
	case 0: return "0";
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case EEXIST: return "EEXIST";
	case EINVAL: return "EINVAL";
	case ENOSPC: return "ENOSPC";
	case ENOMEM: return "ENOMEM";
	case EACCES: return "EACCES";
	case ENOTTY: return "ENOTTY";
	case EOVERFLOW: return "EOVERFLOW";
	case E2BIG: return "E2BIG";
	}
	snprintf(buf, sizeof(buf), "E%d", -r);
	return buf;
}

/* Result of an op whose range wraps: EINVAL and EOVERFLOW are the same. */
static void lret(int r, bool wraps)
{
	if (wraps && (r == -EINVAL || r == -EOVERFLOW))
		lp(" -> EWRAP");
	else
		lp(" -> %s", ename(r));
}

static void violation(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	violations++;
	if (trace_out)
		fprintf(trace_out, "VIOLATION %s\n", buf);
	fprintf(stderr, "# VIOLATION %s\n", buf);
}

static uint64_t hash_bytes(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;

	while (n--) {
		h ^= *b++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* Hash of the first nbits bits of a bitmap (bits beyond are not compared). */
static uint64_t hash_bits(const uint64_t *bm, uint64_t nbits)
{
	uint64_t h = 0xcbf29ce484222325ULL, i, w;

	for (i = 0; i < (nbits + 63) / 64; i++) {
		w = bm[i];
		if (nbits - i * 64 < 64)
			w &= (1ULL << (nbits - i * 64)) - 1;
		h ^= w;
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* ------------------------------------------------------------------ */
/* memory pool and model */

static char *pool;
static uint64_t *bitmap_buf;		/* 64 KiB, for dirty bitmaps */
static char *info_buf;			/* GET_INFO buffers */

enum pg_kind { PK_RW, PK_RO, PK_NONE };

static enum pg_kind pool_kind(uint64_t off)
{
	if (off < P_HOLE || (off >= P_HOLE_END && off < P_RW_END))
		return PK_RW;
	if (off >= P_RW_END && off < P_RO_END)
		return PK_RO;
	return PK_NONE;
}

static int pool_setup(void)
{
	char *raw = mmap(NULL, POOL_SIZE + SZ_2M, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t off;

	if (raw == MAP_FAILED)
		return -errno;
	pool = (char *)(((uintptr_t)raw + SZ_2M - 1) & ~(SZ_2M - 1));
	vu_madvise_thp(pool, P_THP_END, MADV_HUGEPAGE);
	vu_madvise_thp(pool + P_THP_END, POOL_SIZE - P_THP_END, MADV_NOHUGEPAGE);
	for (off = 0; off < P_RO_END; off += PG)
		pool[off] = 1;
	if (mprotect(pool + P_RW_END, P_RO_END - P_RW_END, PROT_READ) ||
	    munmap(pool + P_HOLE, P_HOLE_END - P_HOLE) ||
	    munmap(pool + P_RO_END, POOL_SIZE - P_RO_END))
		return -errno;
	bitmap_buf = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	info_buf = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			-1, 0);
	if (bitmap_buf == MAP_FAILED || info_buf == MAP_FAILED)
		return -errno;
	return 0;
}

struct mdma {
	uint64_t iova, size;
	bool invalid;
};

static struct mdma model[MAXMAP];
static int nmodel;
static bool model_v2, model_tracking;
static int container = -1, group_fd = -1, group_no;
static uint64_t usable_lo[8], usable_hi[8];
static int nusable;
/* The last usable IOVA (GET_INFO; the aperture's end: 2^39 or 2^48 - 1). */
static uint64_t aperture_last = (1ULL << 39) - 1;
/* The group's MSI window (its reserved region of type msi; x86's by default). */
static uint64_t msi_window = 0xfee00000ULL;
static struct vu_counters base;
static const char *want_module;

static uint64_t model_pages(void)
{
	uint64_t n = 0;
	int i;

	for (i = 0; i < nmodel; i++)
		n += model[i].size / PG;
	return n;
}

static int cmp_mdma(const void *a, const void *b)
{
	const struct mdma *x = a, *y = b;

	return x->iova < y->iova ? -1 : x->iova > y->iova;
}

static void model_sort(void)
{
	qsort(model, nmodel, sizeof(model[0]), cmp_mdma);
}

/* First modelled mapping overlapping [iova, iova + size - 1], or -1. */
static int model_find(uint64_t iova, uint64_t last)
{
	int i;

	for (i = 0; i < nmodel; i++)
		if (model[i].iova <= last && model[i].iova + model[i].size - 1 >= iova)
			return i;
	return -1;
}

static bool usable(uint64_t iova, uint64_t last)
{
	int i;

	for (i = 0; i < nusable; i++)
		if (iova >= usable_lo[i] && last <= usable_hi[i])
			return true;
	return false;
}

/* ------------------------------------------------------------------ */
/* container */

static void read_usable(void)
{
	struct vfio_iommu_type1_info *info = (void *)info_buf;
	uint32_t off;

	nusable = 0;
	memset(info_buf, 0, 4096);
	info->argsz = 4096;
	if (ioctl(container, VFIO_IOMMU_GET_INFO, info) || !(info->flags & VFIO_IOMMU_INFO_CAPS))
		return;
	for (off = info->cap_offset; off && off < 4096;) {
		struct vfio_info_cap_header *h = (void *)(info_buf + off);

		if (h->id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE) {
			struct vfio_iommu_type1_info_cap_iova_range *r = (void *)h;
			uint32_t i;

			for (i = 0; i < r->nr_iovas && nusable < 8; i++) {
				usable_lo[nusable] = r->iova_ranges[i].start;
				usable_hi[nusable++] = r->iova_ranges[i].end;
				if (r->iova_ranges[i].end > aperture_last || nusable == 1)
					aperture_last = r->iova_ranges[i].end;
			}
		}
		off = h->next;
	}
}

/* The start of the group's MSI window, where its reserved regions say. */
static void read_msi_window(void)
{
	struct vu_resv r[16];
	int i, n = vu_group_resv_regions(group_no, r, 16);

	for (i = 0; i < n; i++)
		if (!strcmp(r[i].type, "msi"))
			msi_window = r[i].start;
}

static void counters(struct vu_counters *c)
{
	if (vu_counters_read(c))
		violation("cannot read counters");
}

static void check_invariants(const char *when)
{
	struct vu_counters now;
	long long pins, lck, want = model_pages();

	counters(&now);
	pins = vu_pins_outstanding(&base, &now);
	lck = now.vmlck_kb - base.vmlck_kb;
	if (pins != want || lck != want * 4)
		violation("%s: pins %lld VmLck %lld kB, model %lld pages (%lld kB)", when,
			  pins, lck, want, want * 4);
}

static void container_open(void)
{
	int type = chance(50) ? VFIO_TYPE1v2_IOMMU : VFIO_TYPE1_IOMMU;
	long ref0 = vu_module_refcnt(want_module), ref1;

	container = vu_container_setup(&group_no, 1, type, &group_fd);
	ref1 = vu_module_refcnt(want_module);
	lp("OPEN %s", type == VFIO_TYPE1v2_IOMMU ? "v2" : "v1");
	lret(container < 0 ? container : 0, false);
	lend();
	if (container < 0) {
		violation("container setup failed: %s", strerror(-container));
		return;
	}
	if (ref1 != ref0 + 1)
		violation("container not served by %s (refcnt %ld -> %ld)", want_module,
			  ref0, ref1);
	model_v2 = type == VFIO_TYPE1v2_IOMMU;
	model_tracking = false;
	nmodel = 0;
	read_usable();
}

static void container_close(void)
{
	if (container < 0)
		return;
	close(container);
	close(group_fd);
	container = group_fd = -1;
	nmodel = 0;
	lp("CLOSE");
	lend();
	check_invariants("after close");
}

/* ------------------------------------------------------------------ */
/* operations */

/* A vaddr: mostly pool pages (any kind), sometimes absolute bad values. */
static uint64_t pick_vaddr(uint64_t size, char *desc, size_t dlen)
{
	uint64_t off;

	if (chance(4)) {
		static const uint64_t bad[] = { 0, 1, PG, 0x7ffffffff000ULL, ~0ULL & ~(PG - 1) };
		uint64_t v = bad[below(5)];

		snprintf(desc, dlen, "abs:0x%llx", (unsigned long long)v);
		return v;
	}
	if (chance(25))
		off = below(4) * SZ_2M / 2;			/* THP-aligned-ish */
	else if (chance(10))
		off = P_HOLE - below(4) * PG;			/* near the hole */
	else if (chance(10))
		off = P_RW_END + below(64) * PG;		/* read-only */
	else
		off = below(P_RW_END / PG) * PG;
	if (off + size > POOL_SIZE || off + size < off)
		off = 0;
	snprintf(desc, dlen, "pool+0x%llx", (unsigned long long)off);
	return (uintptr_t)pool + off;
}

static uint64_t pick_size(void)
{
	if (chance(10))
		return SZ_2M;
	if (chance(5))
		return 2 * SZ_2M;
	return (1 + below(chance(70) ? 8 : 64)) * PG;
}

static uint64_t pick_iova(void)
{
	return WIN + below(WIN_PAGES) * PG;
}

/* An existing mapping's range, or a random one. */
static bool pick_existing(uint64_t *iova, uint64_t *size)
{
	int i;

	if (!nmodel)
		return false;
	i = below(nmodel);
	*iova = model[i].iova;
	*size = model[i].size;
	return true;
}

/* Expected MAP_DMA result (0, -errno, or 1 = "fails, errno not modelled"). */
static int model_map(uint32_t argsz, uint32_t flags, uint64_t vaddr, uint64_t iova,
		     uint64_t size, bool *wraps)
{
	bool set_vaddr = flags & VFIO_DMA_MAP_FLAG_VADDR;
	bool prot = flags & (VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE);
	uint64_t off;
	int i;

	*wraps = false;
	if (argsz < 32 || (flags & ~7u))
		return -EINVAL;
	/* upstream's (stock 7.x's) order: size, wrap, access, alignment */
	if (!size)
		return -EINVAL;
	if (iova + size - 1 < iova || vaddr + size - 1 < vaddr) {
		*wraps = true;
		return -EINVAL;
	}
	if ((prot && set_vaddr) || (!prot && !set_vaddr))
		return -EINVAL;
	if ((size | iova | vaddr) & (PG - 1))
		return -EINVAL;
	i = model_find(iova, iova + size - 1);
	if (set_vaddr) {
		if (i < 0)
			return -ENOENT;
		if (!model[i].invalid || model[i].iova != iova || model[i].size != size)
			return -EINVAL;
		return 0;
	}
	if (i >= 0)
		return -EEXIST;
	if (!usable(iova, iova + size - 1))
		return -EINVAL;
	/* pinning: every page must exist with the needed access */
	if (vaddr < (uintptr_t)pool || vaddr + size > (uintptr_t)pool + POOL_SIZE)
		return 1;
	for (off = vaddr - (uintptr_t)pool; off < vaddr - (uintptr_t)pool + size; off += PG) {
		enum pg_kind k = pool_kind(off);

		if (k == PK_NONE || (k == PK_RO && (flags & VFIO_DMA_MAP_FLAG_WRITE)))
			return 1;
	}
	return 0;
}

static void op_map(void)
{
	struct vfio_iommu_type1_dma_map m = { .argsz = sizeof(m) };
	char vdesc[64];
	uint64_t iova = pick_iova(), size = pick_size(), vaddr;
	uint32_t flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
	bool wraps;
	int expect, r, kind = below(100);

	vaddr = pick_vaddr(size, vdesc, sizeof(vdesc));
	if (kind < 10) {
		flags = below(8);				/* any flag mix */
	} else if (kind < 15) {
		flags = VFIO_DMA_MAP_FLAG_READ;
	} else if (kind < 18) {
		flags = VFIO_DMA_MAP_FLAG_WRITE;
	} else if (kind < 26) {
		/* re-attach a vaddr */
		flags = VFIO_DMA_MAP_FLAG_VADDR;
		if (chance(80))
			pick_existing(&iova, &size);
		vaddr = pick_vaddr(size, vdesc, sizeof(vdesc));
	} else if (kind < 40) {
		/* one bad field */
		switch (below(12)) {
		case 0: iova += 0x800; break;
		case 1: vaddr += 0x10; snprintf(vdesc + strlen(vdesc), 16, "+0x10"); break;
		case 2: size += 0x200; break;
		case 3: size = 0; break;
		case 4: iova = -(1 + below(4)) * PG; size = (2 + below(8)) * PG; break;
		case 5: vaddr = -(1 + below(2)) * PG; snprintf(vdesc, sizeof(vdesc), "abs:0x%llx",
				(unsigned long long)vaddr); break;
		case 6: iova = msi_window - below(4) * PG; break;		/* MSI window */
		case 7: iova = aperture_last + 1 - below(4) * PG; break;	/* aperture end */
		case 8: iova = 1ULL << (40 + below(20)); break;
		case 9: m.argsz = below(32); break;
		case 10: flags |= 1u << (3 + below(29)); break;
		case 11: m.argsz = 32 + below(4096); break;			/* larger is fine */
		}
	} else if (kind < 50 && nmodel) {
		/* overlap an existing mapping */
		uint64_t ei, es;

		pick_existing(&ei, &es);
		iova = ei + (below(es / PG + 2) - 1) * PG;
	}
	m.flags = flags;
	m.iova = iova;
	m.size = size;
	m.vaddr = vaddr;
	expect = model_map(m.argsz, flags, vaddr, iova, size, &wraps);
	r = ioctl(container, VFIO_IOMMU_MAP_DMA, &m) ? -errno : 0;
	lp("MAP argsz=%u flags=0x%x iova=0x%llx size=0x%llx vaddr=%s", m.argsz, flags,
	   (unsigned long long)iova, (unsigned long long)size, vdesc);
	lret(r, wraps);
	if (wraps && r)
		lp(" #raw=%s", ename(r));
	lend();

	if (expect == 1 ? r == 0 : (wraps ? !(r == -EINVAL || r == -EOVERFLOW) : r != expect))
		violation("MAP iova=0x%llx size=0x%llx flags=0x%x: got %s, model %s",
			  (unsigned long long)iova, (unsigned long long)size, flags, ename(r),
			  expect == 1 ? "failure" : ename(expect));
	if (r == 0) {
		int i = model_find(iova, iova + size - 1);

		if (flags & VFIO_DMA_MAP_FLAG_VADDR) {
			if (i >= 0)
				model[i].invalid = false;
		} else if (nmodel < MAXMAP) {
			model[nmodel].iova = iova;
			model[nmodel].size = size;
			model[nmodel].invalid = false;
			nmodel++;
			model_sort();
		}
	}
}

/*
 * Expected UNMAP_DMA: returns 0 or -errno, fills *done and applies the
 * effect to the model when apply is true.  bad_bitmap: the bitmap pointer
 * cannot be written (EFAULT at the first mapping).
 */
static int model_unmap(uint32_t argsz, uint32_t flags, uint64_t iova, uint64_t size,
		       uint64_t bm_pgsize, uint64_t bm_size, bool bad_bitmap,
		       uint64_t *done, bool *wraps, bool apply, bool *marked_out)
{
	const uint32_t mask = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP |
			      VFIO_DMA_UNMAP_FLAG_VADDR | VFIO_DMA_UNMAP_FLAG_ALL;
	bool all = flags & VFIO_DMA_UNMAP_FLAG_ALL, vaddr = flags & VFIO_DMA_UNMAP_FLAG_VADDR;
	bool dirty = flags & VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP;
	bool marked[MAXMAP] = { false };
	int i, first = -1;

	*done = 0;
	*wraps = false;
	if (argsz < 24 || (flags & ~mask))
		return -EINVAL;
	if (dirty && (flags & (VFIO_DMA_UNMAP_FLAG_ALL | VFIO_DMA_UNMAP_FLAG_VADDR)))
		return -EINVAL;
	if (dirty) {
		uint64_t npages = size >> __builtin_ctzll(bm_pgsize);

		if (argsz < 24 + sizeof(struct vfio_bitmap))
			return -EINVAL;
		if (!npages || !bm_size || bm_size < ((npages + 63) / 64) * 8)
			return -EINVAL;
	}
	if (iova & (PG - 1))
		return -EINVAL;
	if (all) {
		if (iova || size)
			return -EINVAL;
		size = ~0ULL;
	} else if (!size || (size & (PG - 1))) {
		return -EINVAL;
	} else if (iova + size - 1 < iova) {
		*wraps = true;
		return -EINVAL;
	}
	if (dirty && (!model_tracking || bm_pgsize != PG))
		return -EINVAL;
	if (model_v2 && !all) {
		i = model_find(iova, iova);
		if (i >= 0 && model[i].iova != iova)
			return -EINVAL;
		i = model_find(iova + size - 1, iova + size - 1);
		if (i >= 0 && model[i].iova + model[i].size != iova + size)
			return -EINVAL;
	}
	/* model[] is sorted: walk the mappings overlapping the range in order */
	for (i = 0; i < nmodel; i++) {
		if (model[i].iova + model[i].size - 1 < iova)
			continue;
		if (model[i].iova > iova + size - 1)
			break;
		if (first < 0)
			first = i;
		if (!model_v2 && iova > model[i].iova)
			break;
		if (vaddr) {
			if (model[i].invalid) {
				*done = 0;
				return -EINVAL;		/* marks rolled back */
			}
			marked[i] = true;
			*done += model[i].size;
			continue;
		}
		if (dirty && bad_bitmap)
			return -EFAULT;
		marked[i] = true;
		*done += model[i].size;
	}
	if (marked_out)
		memcpy(marked_out, marked, sizeof(marked));
	if (apply) {
		for (i = nmodel - 1; i >= 0; i--) {
			if (!marked[i])
				continue;
			if (vaddr)
				model[i].invalid = true;
			else
				model[i] = model[--nmodel];
		}
		model_sort();
	}
	return 0;
}

static void op_unmap(void)
{
	struct {
		struct vfio_iommu_type1_dma_unmap u;
		struct vfio_bitmap b;
	} a = { .u = { .argsz = sizeof(a.u) } };
	uint64_t iova = pick_iova(), size = pick_size(), done, bmbytes = 0;
	uint32_t flags = 0;
	bool wraps, bad_bitmap = false, marked[MAXMAP];
	static uint64_t want_bm[65536 / 8];
	int expect, r, kind = below(100);

	if (kind < 40) {
		pick_existing(&iova, &size);
	} else if (kind < 55) {
		/* a range covering several mappings and holes */
		iova = WIN + below(WIN_PAGES / 2) * PG;
		size = (1 + below(WIN_PAGES / 2)) * PG;
	} else if (kind < 60) {
		iova = 0;
		size = 0;
		flags = VFIO_DMA_UNMAP_FLAG_ALL;
		if (chance(20))
			size = PG;
	} else if (kind < 68) {
		flags = VFIO_DMA_UNMAP_FLAG_VADDR;
		if (chance(60))
			pick_existing(&iova, &size);
		if (chance(20)) {
			flags |= VFIO_DMA_UNMAP_FLAG_ALL;
			iova = size = 0;
		}
	} else if (kind < 78) {
		flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP;
		if (chance(70))
			pick_existing(&iova, &size);
	} else if (kind < 92) {
		switch (below(8)) {
		case 0: iova += 0x800; break;
		case 1: size += 0x10; break;
		case 2: size = 0; break;
		case 3: iova = -(1 + below(4)) * PG; size = (2 + below(8)) * PG; break;
		case 4: a.u.argsz = below(24); break;
		case 5: flags = 1u << (3 + below(29)); break;
		case 6: iova = 1ULL << 63; size = 1ULL << 63; break;	/* ends at 2^64 */
		case 7: flags = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP |
				(chance(50) ? VFIO_DMA_UNMAP_FLAG_ALL : VFIO_DMA_UNMAP_FLAG_VADDR);
			break;
		}
	}
	a.u.flags = flags;
	a.u.iova = iova;
	a.u.size = size;
	if (flags & VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP) {
		uint64_t npages = size / PG;

		a.u.argsz = sizeof(a);
		bmbytes = ((npages + 63) / 64) * 8;
		a.b.pgsize = chance(90) ? PG : 2 * PG;
		a.b.size = chance(90) ? bmbytes : bmbytes / 2;
		a.b.data = (void *)bitmap_buf;
		if (bmbytes > 65536) {
			a.b.size = 8;
			bmbytes = 8;
		}
		if (chance(10)) {
			a.b.data = (void *)(pool + P_HOLE);	/* unmapped */
			bad_bitmap = true;
		}
		if (chance(5))
			a.u.argsz = 24 + below(24);
		memset(bitmap_buf, 0, 65536);
	}
	expect = model_unmap(a.u.argsz, flags, iova, size, a.b.pgsize, a.b.size, bad_bitmap,
			     &done, &wraps, false, marked);
	/* what the bitmap should say: every page of every mapping removed */
	memset(want_bm, 0, sizeof(want_bm));
	if (!expect && (flags & VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP) && !bad_bitmap) {
		int i;
		uint64_t pg;

		for (i = 0; i < nmodel; i++)
			for (pg = 0; marked[i] && pg < model[i].size / PG; pg++) {
				uint64_t bit = (model[i].iova - iova) / PG + pg;

				if (bit < sizeof(want_bm) * 8)
					want_bm[bit / 64] |= 1ULL << (bit % 64);
			}
	}
	r = ioctl(container, VFIO_IOMMU_UNMAP_DMA, &a) ? -errno : 0;
	lp("UNMAP argsz=%u flags=0x%x iova=0x%llx size=0x%llx", a.u.argsz, flags,
	   (unsigned long long)iova, (unsigned long long)size);
	if (flags & VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP)
		lp(" bm=%s/0x%llx/0x%llx", bad_bitmap ? "bad" : "ok",
		   (unsigned long long)a.b.pgsize, (unsigned long long)a.b.size);
	lret(r, wraps);
	if (!r) {
		lp(" size=0x%llx", (unsigned long long)a.u.size);
		if ((flags & VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP) && !bad_bitmap) {
			uint64_t nbits = a.u.size ? size / PG : 0;

			if (nbits > bmbytes * 8)
				nbits = bmbytes * 8;
			lp(" bitmap=%016llx", (unsigned long long)hash_bits(bitmap_buf, nbits));
			if (!r && !expect && hash_bits(bitmap_buf, nbits) != hash_bits(want_bm, nbits))
				violation("UNMAP+bitmap iova=0x%llx size=0x%llx: bitmap %016llx... "
					  "model %016llx...", (unsigned long long)iova,
					  (unsigned long long)size,
					  (unsigned long long)bitmap_buf[0],
					  (unsigned long long)want_bm[0]);
		}
	}
	if (wraps && r)
		lp(" #raw=%s", ename(r));
	lend();

	if (wraps ? !(r == -EINVAL || r == -EOVERFLOW) : r != expect)
		violation("UNMAP flags=0x%x iova=0x%llx size=0x%llx: got %s, model %s", flags,
			  (unsigned long long)iova, (unsigned long long)size, ename(r),
			  ename(expect));
	else if (!r && a.u.size != done)
		violation("UNMAP flags=0x%x iova=0x%llx size=0x%llx: unmapped 0x%llx, model 0x%llx",
			  flags, (unsigned long long)iova, (unsigned long long)size,
			  (unsigned long long)a.u.size, (unsigned long long)done);
	/* The model follows the kernel when they disagree, to keep going. */
	if (!r || r == expect)
		model_unmap(a.u.argsz, flags, iova, size, a.b.pgsize, a.b.size, bad_bitmap,
			    &done, &wraps, true, NULL);
}

static void op_dirty(void)
{
	struct {
		struct vfio_iommu_type1_dirty_bitmap d;
		struct vfio_iommu_type1_dirty_bitmap_get g;
	} a = { .d = { .argsz = sizeof(a.d) } };
	static const uint32_t fl[] = {
		VFIO_IOMMU_DIRTY_PAGES_FLAG_START, VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP,
		VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP,
		VFIO_IOMMU_DIRTY_PAGES_FLAG_START | VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP,
		1u << 5,
	};
	uint64_t iova = pick_iova(), size = pick_size(), bytes;
	int r, k = below(10);

	a.d.flags = fl[k < 3 ? 0 : k < 5 ? 1 : k < 8 ? 2 : k < 9 ? 3 : 4];
	if (chance(5))
		a.d.argsz = below(8);
	if (a.d.flags == VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP) {
		if (chance(70))
			pick_existing(&iova, &size);
		else if (chance(30))
			size = 1 + below(3 * SZ_2M);
		a.d.argsz = chance(90) ? sizeof(a) : sizeof(a.d) + below(sizeof(a.g));
		bytes = ((size / PG + 63) / 64) * 8;
		if (bytes > 65536 || !bytes)
			bytes = 8;
		a.g.iova = iova;
		a.g.size = size;
		a.g.bitmap.pgsize = chance(90) ? PG : 2 * PG;
		a.g.bitmap.size = chance(90) ? bytes : bytes / 2;
		a.g.bitmap.data = (void *)bitmap_buf;
		memset(bitmap_buf, 0, bytes);
	}
	r = ioctl(container, VFIO_IOMMU_DIRTY_PAGES, &a) ? -errno : 0;
	lp("DIRTY argsz=%u flags=0x%x", a.d.argsz, a.d.flags);
	if (a.d.flags == VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP)
		lp(" iova=0x%llx size=0x%llx pgsize=0x%llx bmsize=0x%llx",
		   (unsigned long long)a.g.iova, (unsigned long long)a.g.size,
		   (unsigned long long)a.g.bitmap.pgsize, (unsigned long long)a.g.bitmap.size);
	lret(r, false);
	if (!r && a.d.flags == VFIO_IOMMU_DIRTY_PAGES_FLAG_GET_BITMAP)
		lp(" bitmap=%016llx", (unsigned long long)hash_bits(bitmap_buf, a.g.size / PG));
	lend();
	if (!r && a.d.flags == VFIO_IOMMU_DIRTY_PAGES_FLAG_START)
		model_tracking = true;
	if (!r && a.d.flags == VFIO_IOMMU_DIRTY_PAGES_FLAG_STOP)
		model_tracking = false;
	if (!model_v2 && r != -EACCES)
		violation("DIRTY on v1: got %s, stock gives EACCES", ename(r));
}

static void op_info(void)
{
	struct vfio_iommu_type1_info *info = (void *)info_buf;
	uint32_t argsz = chance(50) ? below(64) : below(1024);
	int r;

	memset(info_buf, 0xa5, 4096);
	info->argsz = argsz;
	r = ioctl(container, VFIO_IOMMU_GET_INFO, info) ? -errno : 0;
	lp("INFO argsz=%u", argsz);
	lret(r, false);
	if (!r)
		lp(" argsz=%u flags=0x%x pgsizes=0x%llx cap_offset=%u buf=%016llx", info->argsz,
		   info->flags, (unsigned long long)info->iova_pgsizes, info->cap_offset,
		   (unsigned long long)hash_bytes(info_buf, 1024));
	lend();
}

/* Bad argument pointers: EFAULT from every ioctl that copies its argument. */
static void op_badptr(void)
{
	static const unsigned long cmds[] = {
		VFIO_IOMMU_MAP_DMA, VFIO_IOMMU_UNMAP_DMA, VFIO_IOMMU_GET_INFO,
		VFIO_IOMMU_DIRTY_PAGES,
	};
	static const char *const names[] = { "MAP", "UNMAP", "INFO", "DIRTY" };
	int c = below(4), p = below(3), r;
	void *arg;
	const char *pd;

	if (p == 0) {
		arg = (void *)1;
		pd = "0x1";
	} else if (p == 1) {
		arg = pool + P_HOLE;
		pd = "hole";
	} else {
		/* a GET_INFO whose caps run into the hole: copy_to_user fails */
		struct vfio_iommu_type1_info *info = (void *)(pool + P_HOLE - 32);

		memset(info, 0, 32);
		info->argsz = 4096;
		c = 2;
		arg = info;
		pd = "edge";
	}
	r = ioctl(container, cmds[c], arg) ? -errno : 0;
	lp("BADPTR %s arg=%s", names[c], pd);
	lret(r, false);
	lend();
}

static void op_extension(void)
{
	unsigned long ext = below(12);
	int r = ioctl(container, VFIO_CHECK_EXTENSION, ext);

	lp("EXT %lu -> %d", ext, r < 0 ? -errno : r);
	lend();
}

/* One fuzz run against whatever backend serves new containers. */
static int fuzz_run(uint64_t seed, unsigned int steps)
{
	unsigned int s;

	rng_state = seed;
	digest = 0xcbf29ce484222325ULL;
	violations = 0;
	if (pool_setup()) {
		violation("pool setup failed");
		return violations;
	}
	counters(&base);
	lp("SEED 0x%llx STEPS %u", (unsigned long long)seed, steps);
	lend();
	container_open();
	for (s = 0; s < steps && container >= 0; s++) {
		int k = below(100);

		lp("%u ", s);
		if (k < 35)
			op_map();
		else if (k < 65)
			op_unmap();
		else if (k < 72)
			op_dirty();
		else if (k < 80)
			op_info();
		else if (k < 85)
			op_badptr();
		else if (k < 88)
			op_extension();
		else if (k < 90) {
			container_close();
			container_open();
			continue;
		} else {
			/* exact unmap of an existing mapping, to keep the space moving */
			op_unmap();
		}
		check_invariants("after step");
		if (violations > 20)
			break;
	}
	container_close();
	lp("END digest-so-far");
	lend();
	return violations;
}

/* ------------------------------------------------------------------ */
/* driver: passes in forked children, module switching, comparison */

struct pass {
	char path[64];
	uint64_t digest;
	int violations;		/* -1: the child died */
};

static int run_pass(uint64_t seed, unsigned int steps, const char *module, struct pass *p)
{
	int fd, status, pfd[2];
	pid_t pid;

	snprintf(p->path, sizeof(p->path), "/tmp/t_fuzz.%d.%s.%llx", getpid(), module,
		 (unsigned long long)seed);
	fd = open(p->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || pipe(pfd))
		return -errno;
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		trace_out = fdopen(fd, "w");
		want_module = module;
		fuzz_run(seed, steps);
		fclose(trace_out);
		if (write(pfd[1], &digest, sizeof(digest)) != sizeof(digest) ||
		    write(pfd[1], &violations, sizeof(violations)) != sizeof(violations))
			_exit(2);
		_exit(0);
	}
	close(fd);
	close(pfd[1]);
	p->violations = -1;
	if (read(pfd[0], &p->digest, sizeof(p->digest)) == sizeof(p->digest) &&
	    read(pfd[0], &p->violations, sizeof(p->violations)) == sizeof(p->violations)) {
		/* got them */
	} else {
		p->violations = -1;
	}
	close(pfd[0]);
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		p->violations = -1;
	return 0;
}

/* Compare two traces up to " #"; print the first difference. Returns 0 if equal. */
static int compare(const struct pass *a, const struct pass *b)
{
	FILE *fa = fopen(a->path, "r"), *fb = fopen(b->path, "r");
	char la[1100], lb[1100];
	int n = 0, ret = 0;

	if (!fa || !fb) {
		printf("# cannot open traces\n");
		ret = 1;
		goto out;
	}
	for (;;) {
		char *ra = fgets(la, sizeof(la), fa), *rb = fgets(lb, sizeof(lb), fb);
		char *c;

		n++;
		if (!ra && !rb)
			break;
		if (ra && (c = strstr(la, " #")))
			strcpy(c, "\n");
		if (rb && (c = strstr(lb, " #")))
			strcpy(c, "\n");
		if (!ra || !rb || strcmp(la, lb)) {
			printf("# first difference at trace line %d:\n#   stock:    %s#   foliomap: %s",
			       n, ra ? la : "(end)\n", rb ? lb : "(end)\n");
			ret = 1;
			break;
		}
	}
out:
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return ret;
}

static void print_violations(const struct pass *p, const char *who)
{
	FILE *f = fopen(p->path, "r");
	char l[1100];
	int shown = 0;

	if (p->violations < 0)
		printf("# %s: the fuzz process died (see the trace %s)\n", who, p->path);
	if (!f)
		return;
	while (fgets(l, sizeof(l), f) && shown < 5)
		if (!strncmp(l, "VIOLATION", 9)) {
			printf("# %s: %s", who, l);
			shown++;
		}
	fclose(f);
}

static int foliomap_insert(const char *ko)
{
	int ret;

	if (!access("/sys/module/foliomap", F_OK))
		return 0;
	ret = vu_module_insert(ko);
	if (ret)
		printf("# init_module %s: %s\n", ko, strerror(-ret));
	return ret ? -1 : 0;
}

/* --trace: a pass's trace file on stdout. */
static void show_file(const char *path)
{
	char cmd[1400];

	snprintf(cmd, sizeof(cmd), "cat %s", path);
	fflush(stdout);
	if (system(cmd)) {
		/* ignore */
	}
}

static int foliomap_remove(void)
{
	int i;

	for (i = 0; i < 50; i++) {
		if (!syscall(SYS_delete_module, "foliomap", O_NONBLOCK))
			return 0;
		if (errno == ENOENT)
			return 0;
		usleep(100000);
	}
	printf("# delete_module foliomap: %s\n", strerror(errno));
	return -1;
}

static void default_ko(char *buf, size_t len)
{
	char repo[PATH_MAX - 32];

	if (getenv("FOLIOMAP_KO")) {
		snprintf(buf, len, "%s", getenv("FOLIOMAP_KO"));
		return;
	}
	vu_exe_dir(repo, sizeof(repo), 2);	/* .../tests/bin/t_fuzz */
	snprintf(buf, len, "%s/kmod/foliomap.ko", repo);
}

/*
 * Differential run of several seeds: all stock passes, insert foliomap, all
 * foliomap passes, remove it.  Prints TAP (tap = true) or a report.
 */
static int differential(const uint64_t *seeds, int n, unsigned int steps, const char *ko,
			bool tap, bool show_trace)
{
	struct pass st[16], fm[16];
	int i, fails = 0;
	bool loaded;

	if (tap)
		printf("TAP version 13\n1..%d\n# differential: stock, then %s\n", n, ko);
	for (i = 0; i < n; i++)
		run_pass(seeds[i], steps, "vfio_iommu_type1", &st[i]);
	loaded = foliomap_insert(ko) == 0;
	for (i = 0; i < n && loaded; i++)
		run_pass(seeds[i], steps, "foliomap", &fm[i]);
	if (loaded && foliomap_remove())
		fails++;
	for (i = 0; i < n; i++) {
		bool ok = loaded && st[i].violations == 0 && fm[i].violations == 0;

		if (loaded) {
			printf("# seed 0x%llx steps %u: stock digest %016llx (%d violations), "
			       "foliomap digest %016llx (%d violations)\n",
			       (unsigned long long)seeds[i], steps,
			       (unsigned long long)st[i].digest, st[i].violations,
			       (unsigned long long)fm[i].digest, fm[i].violations);
			print_violations(&st[i], "stock");
			print_violations(&fm[i], "foliomap");
			if (compare(&st[i], &fm[i]))
				ok = false;
			else if (st[i].digest != fm[i].digest)
				ok = false;
		} else {
			printf("# foliomap could not be inserted\n");
		}
		if (show_trace)
			show_file(fm[i].path);
		if (tap)
			printf("%s %d fuzz-diff seed=0x%llx steps=%u\n", ok ? "ok" : "not ok", i + 1,
			       (unsigned long long)seeds[i], steps);
		else
			printf("%s seed=0x%llx steps=%u\n", ok ? "SAME" : "DIFFERENT",
			       (unsigned long long)seeds[i], steps);
		fails += !ok;
		unlink(st[i].path);
		if (loaded)
			unlink(fm[i].path);
	}
	return fails ? 1 : 0;
}

/* The current backend alone, model checks only. */
static int single(const uint64_t *seeds, int n, unsigned int steps, bool tap, bool show_trace)
{
	const char *mod = access("/sys/module/foliomap", F_OK) ? "vfio_iommu_type1" : "foliomap";
	struct pass p;
	int i, fails = 0;

	if (tap)
		printf("TAP version 13\n1..%d\n# single backend (%s), model checks only\n", n, mod);
	for (i = 0; i < n; i++) {
		bool ok;

		run_pass(seeds[i], steps, mod, &p);
		ok = p.violations == 0;
		printf("# seed 0x%llx steps %u: %s digest %016llx (%d violations)\n",
		       (unsigned long long)seeds[i], steps, mod, (unsigned long long)p.digest,
		       p.violations);
		print_violations(&p, mod);
		if (show_trace)
			show_file(p.path);
		if (tap)
			printf("%s %d fuzz seed=0x%llx steps=%u\n", ok ? "ok" : "not ok", i + 1,
			       (unsigned long long)seeds[i], steps);
		else
			printf("digest %016llx\n", (unsigned long long)p.digest);
		fails += !ok;
		unlink(p.path);
	}
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	uint64_t seed = 0;
	unsigned int steps = DEF_STEPS;
	bool have_seed = false, diff = false, trace = false;
	char ko[PATH_MAX];
	int groups[8], i;
	const char *backend = getenv("FOLIOMAP_BACKEND");

	setvbuf(stdout, NULL, _IOLBF, 0);
	default_ko(ko, sizeof(ko));
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
			seed = strtoull(argv[++i], NULL, 0);
			have_seed = true;
		} else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
			steps = strtoul(argv[++i], NULL, 0);
		} else if (!strcmp(argv[i], "--diff")) {
			diff = true;
		} else if (!strcmp(argv[i], "--trace")) {
			trace = true;
		} else if (!strcmp(argv[i], "--ko") && i + 1 < argc) {
			snprintf(ko, sizeof(ko), "%s", argv[++i]);
		} else {
			fprintf(stderr, "usage: %s [--seed S --steps N [--diff] [--trace] [--ko PATH]]\n",
				argv[0]);
			return 2;
		}
	}
	if (vu_env_groups(groups, 8) < 2) {
		printf("TAP version 13\n1..1\nnot ok 1 fuzz: VFIO_GROUPS has no e1000e group\n");
		return 1;
	}
	group_no = groups[0];
	read_msi_window();

	if (have_seed)
		return diff ? differential(&seed, 1, steps, ko, false, trace)
			    : single(&seed, 1, steps, false, trace);
	/* run-all: differential in the stock guest, model-only elsewhere */
	if ((!backend || !strcmp(backend, "stock")) && access("/sys/module/foliomap", F_OK))
		return differential(fixed_seeds, 4, DEF_STEPS, ko, true, false);
	return single(fixed_seeds, 4, DEF_STEPS, true, false);
}
