// SPDX-License-Identifier: GPL-2.0-only
/*
 * Scale: one buffer mapped many times at different IOVAs, beyond the 39-bit
 * aperture (the guest needs vm/run --aw-bits 48; tests/check boots every
 * guest so), with pins and VmLck exact after every phase.
 *
 *  - scale_2m_aliases_of_1g: 131072 MAP_DMAs of 2M (twice stock's default
 *    dma_entry_limit, which is raised for the container), each a 2M piece
 *    of ONE 1 GiB THP buffer (piece i % 512), at IOVA base + i * 8M: 256 GiB
 *    mapped, spread over 1 TiB of IOVA (base: 4G, or the first 4G boundary
 *    above it from which a usable range holds the TiB, scale_base(): 1 TiB
 *    behind AMD-Vi).  Then the upper half goes with one range UNMAP_DMA
 *    (holes included), every other mapping of the lower half with one
 *    UNMAP_DMA each, and the last quarter with the container's close.
 *  - scale_4g_pieces_1t: ONE 4 GiB THP buffer mapped whole 32 times at
 *    base + i * 32G, over the same 1 TiB; the same three release phases.
 *
 * Every mapping of the same memory pins its pages again and is charged to
 * VmLck again (stock semantics), so the counters reach 67M pins / 256 GiB
 * and 33M pins / 128 GiB in a 6 GiB guest: only counters (the test runs
 * with CAP_IPC_LOCK, RLIMIT_MEMLOCK does not apply).  A 2M THP folio then
 * holds 256 * 512 pins, far from any refcount limit.
 *
 * The sizes are chosen for make check: stock's cost grows with the bytes
 * mapped (4K pins on 6.1, one IOMMU walk per 4K page at unmap on both), about
 * 0.6 s per GiB on 6.1 under TCG.  FOLIOMAP_SCALE_2M=N / FOLIOMAP_SCALE_4G=N
 * (environment; tests/check passes them on) set the number of mappings (a
 * multiple of 4; the stride shrinks to keep them within 1 TiB, down to
 * back to back): 262144 and 256 are the full scale, 512 GiB of 2M aliases
 * and the whole 1 TiB aliasing the 4 GiB buffer (tests/README.md, t_scale).
 */
#define TH_TIMEOUT	900	/* per test: stock's unmaps are slow under TCG */
#include "common.h"

#define SZ_4G		(4 * SZ_1G)
#define SCALE_MIN	SZ_4G		/* above the MSI window (scale_base()) */
#define SCALE_ALIGN	SZ_4G		/* the 4G pieces' alignment */
#define SCALE_SPAN	(1ULL << 40)	/* 1 TiB of IOVA from the base */

static unsigned long env_count(const char *name, unsigned long def)
{
	const char *s = getenv(name);
	unsigned long v = s && *s ? strtoul(s, NULL, 0) : def;

	return v >= 4 && v % 4 == 0 ? v : def;
}

/*
 * The backend's dma_entry_limit is read when a container is opened: raise
 * it, open a v2 container on the first e1000e group, and put the old value
 * back right away (also when the setup fails).  Fails unless the backend
 * under test serves the container and it has exactly @limit entries.  The
 * group fd goes to *gfdp: the container lives until both are closed.
 */
static int scale_container(struct th *t, long long limit, int *gfdp)
{
	const char *mod = th_backend_module();
	long long old = th_param_read("dma_entry_limit"), avail;
	long ref0 = vu_module_refcnt(mod), ref1;
	int group, gfd, c, err;

	ASSERT_GT(old, 0);
	ASSERT_GE(ref0, 0);
	th_e1000e_groups(t, &group, 1);
	ASSERT_EQ(th_param_write("dma_entry_limit", limit), 0);
	c = vu_container_setup(&group, 1, VFIO_TYPE1v2_IOMMU, &gfd);
	err = th_param_write("dma_entry_limit", old);
	if (c < 0)
		FAIL("container setup failed: %s", strerror(-c));
	th_own_fd(t, c);
	th_own_fd(t, gfd);
	ASSERT_EQ(err, 0);
	ASSERT_EQ(th_param_read("dma_entry_limit"), old);
	ref1 = vu_module_refcnt(mod);
	if (ref1 != ref0 + 1)
		FAIL("container not served by %s (refcnt %ld -> %ld)", mod, ref0, ref1);
	avail = th_dma_avail(c);
	ASSERT_EQ(avail, limit);
	*gfdp = gfd;
	return c;
}

/*
 * The IOVA the mappings start at: the lowest multiple of SCALE_ALIGN from
 * SCALE_MIN on whose @span bytes lie in one usable IOVA range (GET_INFO).
 * Intel's 48-bit aperture has 4G (its one range above the MSI window);
 * AMD-Vi reserves the HyperTransport range 0xfd00000000-0xffffffffff (1012
 * GiB to 1 TiB) in every group, so its first whole TiB above the MSI window
 * starts at 1 TiB. A guest whose IOMMU reaches less than 2^48 (Intel's
 * 39-bit default) cannot run these tests: SKIP, saying so; an aperture of
 * 48 bits or more without such a span fails.
 */
static uint64_t scale_base(struct th *t, int c, uint64_t span)
{
	struct vfio_iova_range r[16];
	uint64_t end = th_aperture_end(t), base;
	int i, n = th_iova_ranges(t, c, r, 16);

	th_diag("IOMMU %s, aperture ends at 0x%llx", vu_iommu_name(th_iommu()),
		(unsigned long long)end);
	/* the last usable IOVA is the aperture's (t_info checks it too) */
	ASSERT_EQ(r[n - 1].end, end);
	for (i = 0; i < n; i++) {
		base = r[i].start < SCALE_MIN ? SCALE_MIN : r[i].start;
		base = (base + SCALE_ALIGN - 1) & ~(SCALE_ALIGN - 1);
		if (base < r[i].start || base > r[i].end || r[i].end - base < span - 1)
			continue;
		th_diag("IOVA range 0x%llx-0x%llx holds 0x%llx bytes from 0x%llx",
			(unsigned long long)r[i].start, (unsigned long long)r[i].end,
			(unsigned long long)span, (unsigned long long)base);
		return base;
	}
	if (end < (1ULL << 48) - 1)
		SKIP("the IOMMU aperture ends at 0x%llx (Intel: boot the guest with vm/run --aw-bits 48)",
		     (unsigned long long)end);
	FAIL("no usable IOVA range holds 0x%llx bytes above 0x%llx",
	     (unsigned long long)span, (unsigned long long)SCALE_MIN);
	return 0;
}

/* A THP buffer, every 2M of it faulted in (one store per 4K page). */
static char *thp_buffer(struct th *t, size_t size)
{
	char *p = th_mem(t, VU_MEM_THP, size);
	long long thp_kb = vu_read_key("/proc/self/smaps_rollup", "AnonHugePages");

	th_diag("%zu MiB THP buffer: AnonHugePages %lld kB", size >> 20, thp_kb);
	return p;
}

/* Pins and VmLck exactly @live mappings of @size each, and the entries left. */
#define EXPECT_LIVE(c, live, size, limit) do {				\
	uint64_t _n = (live), _sz = (size);				\
	EXPECT_EQ(th_pins(t), _n * (_sz / SZ_4K));			\
	EXPECT_EQ(th_vmlck_kb(t), _n * (_sz / 1024));			\
	EXPECT_EQ(th_dma_avail(c), (limit) - (long long)_n);		\
	th_diag("  %llu mappings live: pins %lld, VmLck %lld kB",	\
		(unsigned long long)_n, th_pins(t), th_vmlck_kb(t));	\
} while (0)

/*
 * n mappings of @size at base + i * stride, mapping i aliasing the piece
 * (i % pieces) of buf.  Then: one UNMAP_DMA over the upper half, one per
 * mapping for every other one of the lower half, close for the rest.
 */
static void scale_run(struct th *t, char *buf, uint64_t size, unsigned long pieces,
		      unsigned long n)
{
	long long limit = n;
	uint64_t stride = SCALE_SPAN / n / size * size;
	uint64_t base, last, done;
	unsigned long i, half = n / 2, left;
	double t0, t1, tq = 0, tl = 0;
	int c, gfd, ret;

	if (stride < size)
		stride = size;
	c = scale_container(t, limit, &gfd);
	base = scale_base(t, c, n * stride);
	last = base + (n - 1) * stride + size - 1;
	/* beyond the 39-bit aperture: only a 48-bit IOMMU can take these */
	ASSERT_GT(last, 1ULL << 39);
	th_diag("%lu mappings of %llu MiB (%lu pieces of the buffer), stride %llu MiB, "
		"IOVA 0x%llx-0x%llx", n, (unsigned long long)(size >> 20), pieces,
		(unsigned long long)(stride >> 20), (unsigned long long)base,
		(unsigned long long)last);
	EXPECT_LIVE(c, 0, size, limit);

	/* 1: map everything */
	t0 = vu_now();
	for (i = 0; i < n; i++) {
		ret = vu_map(c, base + i * stride, buf + (i % pieces) * size, size, RW);
		if (ret) {
			th_diag("MAP_DMA %lu of %lu (iova 0x%llx) failed", i, n,
				(unsigned long long)(base + i * stride));
			ASSERT_EQ(ret, 0);
		}
		/* per-MAP_DMA time of the first and the last quarter */
		if (i + 1 == n / 4)
			tq = vu_now() - t0;
		if (i + 1 == n - n / 4)
			tl = vu_now();
	}
	t1 = vu_now();
	th_diag("map: %lu MAP_DMA in %.2f s (%.1f us each; first quarter %.1f us, last %.1f us)",
		n, t1 - t0, (t1 - t0) * 1e6 / n, tq * 1e6 / (n / 4), (t1 - tl) * 1e6 / (n / 4));
	EXPECT_LIVE(c, n, size, limit);
	/* the same range again overlaps; one more mapping is over the limit */
	EXPECT_EQ(vu_map(c, base + (n - 1) * stride, buf, size, RW), -EEXIST);
	EXPECT_EQ(vu_map(c, base + n * stride, buf, size, RW), -ENOSPC);
	EXPECT_LIVE(c, n, size, limit);

	/* 2: the upper half with one range unmap (holes between mappings) */
	t0 = vu_now();
	done = 0;
	ASSERT_EQ(vu_unmap(c, base + half * stride, (n - half) * stride, 0, &done), 0);
	t1 = vu_now();
	ASSERT_EQ(done, (n - half) * size);
	th_diag("unmap: one UNMAP_DMA of %lu mappings in %.2f s", n - half, t1 - t0);
	EXPECT_LIVE(c, half, size, limit);

	/* 3: every other mapping of the lower half, one UNMAP_DMA each */
	t0 = vu_now();
	for (i = 1; i < half; i += 2) {
		done = 0;
		ret = vu_unmap(c, base + i * stride, size, 0, &done);
		if (ret || done != size) {
			th_diag("UNMAP_DMA of mapping %lu failed", i);
			ASSERT_EQ(ret, 0);
			ASSERT_EQ(done, size);
		}
	}
	t1 = vu_now();
	left = half - half / 2;
	th_diag("unmap: %lu UNMAP_DMA in %.2f s", half / 2, t1 - t0);
	EXPECT_LIVE(c, left, size, limit);

	/* 4: the rest with the container and its group */
	t0 = vu_now();
	th_close(t, gfd);
	th_close(t, c);
	t1 = vu_now();
	th_diag("close: %lu mappings released in %.2f s", left, t1 - t0);
	EXPECT_PINS_VMLCK(0, 0);
}

/* 131072 x 2M of one 1 GiB buffer over 1 TiB of IOVA. */
TEST(scale_2m_aliases_of_1g)
{
	unsigned long n = env_count("FOLIOMAP_SCALE_2M", 131072);
	char *buf = thp_buffer(t, SZ_1G);

	scale_run(t, buf, SZ_2M, SZ_1G / SZ_2M, n);
}

/* 32 x the whole of one 4 GiB buffer over 1 TiB of IOVA. */
TEST(scale_4g_pieces_1t)
{
	unsigned long n = env_count("FOLIOMAP_SCALE_4G", 32);
	char *buf = thp_buffer(t, SZ_4G);

	scale_run(t, buf, SZ_4G, 1, n);
}

TEST_HARNESS_MAIN
