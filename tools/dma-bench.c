// SPDX-License-Identifier: GPL-2.0-only
/*
 * dma-bench: time VFIO_IOMMU_MAP_DMA and VFIO_IOMMU_UNMAP_DMA of one large
 * buffer, per kind of memory, in the seed's output format.
 *
 * For each mode the buffer is allocated and faulted in once; every loop then
 * opens a fresh container, maps the whole buffer in one MAP_DMA, unmaps it in
 * one UNMAP_DMA and checks that every pin and every locked page went away.
 *
 * With --backends stock,foliomap the loops alternate between the backends
 * (stock loop 1, foliomap loop 1, stock loop 2, ...) on the very same pages,
 * so drift and page placement hit both alike. Before each step the
 * --switch-cmd script is run as "sh SCRIPT BACKEND" to load or unload
 * foliomap; the active backend is then verified from /sys/module.
 *
 * Mode alias1g maps a terabyte-sized IOVA range out of the one 1G page a
 * guest can spare: a 1G memfd page mapped at every GiB of the buffer.
 * --latency runs a cyclictest-like probe on every CPU (latprobe.c) and
 * gives, per step, the latest wakeup during MAP_DMA and during UNMAP_DMA:
 * about the longest stretch the kernel ran without a preemption point.
 * It also counts how often the mapping thread blocked (voluntary context
 * switches) in each step: a thread that sleeps and wakes is enqueued
 * afresh, which is when a kernel's scheduler may run it ahead of the probe.
 * --unmap-by-close replaces UNMAP_DMA with closing the group and the
 * container while the buffer is mapped: type1's release, what a VMM's exit
 * costs.
 *
 * Exit status: 0 all good, 1 a leak or a failed ioctl, 2 usage or setup error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "latprobe.h"
#include "vfio_util.h"

#define SZ_2M		(2ULL << 20)
#define SZ_1G		(1ULL << 30)
#define MAX_BACKENDS	2
/* "bar": a PCI BAR (VM_PFNMAP device memory) instead of a kind of RAM. */
#define MODE_BAR	((enum vu_mem_kind)VU_MEM_NKINDS)
/* "alias1g": --gib GiB of buffer, each GiB of it the same 1G memfd page. */
#define MODE_ALIAS1G	((enum vu_mem_kind)(VU_MEM_NKINDS + 1))
#define MAX_MODES	12
#define CAP_IPC_LOCK_BIT 14

struct opts {
	int group;
	const char *bdf;
	double gib;
	int loops;
	int warmup;
	uint64_t iova;
	int type;
	enum vu_mem_kind modes[MAX_MODES];
	int nmodes;
	const char *backends[MAX_BACKENDS];
	int nbackends;
	const char *switch_cmd;
	const char *label;
	bool json;
	bool step_warmup;	/* untimed small map/unmap before each timed one */
	const char *bar_bdf;	/* bar mode: the device (default $VFIO_IVSHMEM_BDF) */
	int bar_index;		/* bar mode: the BAR (default 2, ivshmem's memory) */
	/* bar modes: bytes of the BAR each maps (0: bar, 256 MiB or less) */
	uint64_t bar_bytes[MAX_MODES];
	uint64_t bar_size;	/* the bar mode running: bytes mapped */
	char bar_name[24];	/* ... and its name, "bar" or "bar-64g" */
	const char *after_map;	/* --after-map: a command run while mapped */
	long latency_us;	/* --latency: the probe's period, 0 without */
	struct latprobe *lp;	/* ... and the probe, running */
	double lat_floor_us;	/* its latest wakeup over 0.5 s of nothing */
	bool unmap_by_close;	/* the unmap step closes group and container */
};

/* The results of one backend on one mode. */
struct series {
	const char *backend;
	double *map_s;
	double *unmap_s;
	double *map_lat_us;	/* --latency: latest probe wakeup per step */
	double *unmap_lat_us;
	long *map_sleeps;	/* --latency: voluntary context switches per step */
	long *unmap_sleeps;
	long long record_bytes;	/* foliomap's run record while mapped, -1 unknown */
	int n;
	int warmup;		/* untimed loops still to run */
	long long pin_leak;	/* pages, summed over loops */
	long long lck_leak;	/* pages, summed over loops */
	int failures;		/* failed ioctls */
};

/* One series per backend, for the warm-up and timed loops of one mode. */
static int series_init(const struct opts *o, struct series *s)
{
	int b;

	for (b = 0; b < o->nbackends; b++) {
		s[b].backend = o->backends[b];
		s[b].warmup = o->warmup;
		s[b].map_s = calloc(o->loops, sizeof(double));
		s[b].unmap_s = calloc(o->loops, sizeof(double));
		s[b].map_lat_us = calloc(o->loops, sizeof(double));
		s[b].unmap_lat_us = calloc(o->loops, sizeof(double));
		s[b].map_sleeps = calloc(o->loops, sizeof(long));
		s[b].unmap_sleeps = calloc(o->loops, sizeof(long));
		s[b].record_bytes = -1;
		if (!s[b].map_s || !s[b].unmap_s || !s[b].map_lat_us || !s[b].unmap_lat_us ||
		    !s[b].map_sleeps || !s[b].unmap_sleeps)
			return -ENOMEM;
	}
	return 0;
}

static FILE *human;	/* the seed-format text: stdout, or stderr with --json */
static long page_kb;

static void usage(FILE *f)
{
	fprintf(f,
"usage: dma-bench [--group N | --device BDF] [--gib G] [--loops L] [--warmup W]\n"
"                 [--iova ADDR] [--type1 v1|v2] [--modes thp,populate,hugetlb2m,hugetlb1g,memfd,memfd2m,memfd1g]\n"
"                 [--backends stock,foliomap --switch-cmd SCRIPT] [--json] [--label NAME]\n"
"                 [--bar-device BDF] [--bar-index N] [--no-step-warmup] [--latency[=US]]\n"
"                 [--after-map CMD]\n"
"\n"
"  --group N        VFIO group to attach (default: first of $VFIO_GROUPS)\n"
"  --device BDF     PCI device whose IOMMU group to use, e.g. 0000:00:03.0\n"
"  --gib G          buffer size in GiB, fractions allowed, multiple of 2 MiB (default 1)\n"
"  --loops L        map/unmap loops per mode and backend (default 5)\n"
"  --warmup W       untimed (but leak-checked) loops first (default 1): the first\n"
"                   map of fresh guest memory is slower under TCG\n"
"  --iova ADDR      IOVA of the mapping (default 0x100000000, 4 GiB)\n"
"  --type1 v1|v2    VFIO_TYPE1_IOMMU or VFIO_TYPE1v2_IOMMU (default v2)\n"
"  --modes LIST     memory kinds, comma separated (default thp,populate,hugetlb2m)\n"
"  --backends LIST  alternate these backends per loop (stock, foliomap); needs\n"
"                   --switch-cmd unless only the active backend is named\n"
"  --switch-cmd S   run \"sh S BACKEND\" to make BACKEND the active one\n"
"  --json           one JSON object per mode and backend on stdout, one a line;\n"
"                   the seed-format text then goes to stderr\n"
"  --label NAME     add \"label\": NAME to the JSON objects\n"
"  mode bar         map 256 MiB of a PCI BAR (device memory, VM_PFNMAP; all of a\n"
"                   smaller BAR) of --bar-device (default $VFIO_IVSHMEM_BDF,\n"
"                   vm/run --ivshmem) through a container holding that device's\n"
"                   own group; --gib does not apply\n"
"  mode bar-Ng      the same with N GiB of the BAR (bar-64g: a GPU's BAR)\n"
"  mode alias1g     --gib whole GiB of buffer, each GiB the same 1G memfd page\n"
"                   (one 1G page from the pool maps a terabyte of IOVA; needs the\n"
"                   IOMMU's 48-bit width for more than about 500 GiB at 4 GiB)\n"
"  --after-map CMD  run \"CMD BACKEND MODE IOVA BYTES\" (sh) after each MAP_DMA,\n"
"                   before its UNMAP_DMA, untimed: e.g. to read the IOMMU's tables\n"
"  --latency[=US]   a SCHED_FIFO probe thread per CPU wakes every US microseconds\n"
"                   (default 500) and the JSON gives its latest wakeup during each\n"
"                   MAP_DMA and UNMAP_DMA (map_maxlat_us, unmap_maxlat_us): about\n"
"                   the longest stretch without a preemption point\n"
"  --unmap-by-close the unmap step closes the group and the container with the\n"
"                   buffer mapped (type1's release: a VMM's exit) instead of\n"
"                   UNMAP_DMA; the JSON says \"unmap_step\": \"close\"\n"
"  --bar-index N    the BAR for mode bar (default 2: ivshmem's shared memory)\n"
"  --no-step-warmup no untimed 8 MiB map/unmap before each timed step (it keeps\n"
"                   TCG's retranslation of a just-reloaded module out of the times)\n");
}

/* "bar": the seed's row, 256 MiB of the BAR (all of a smaller one). */
#define BAR_DEFAULT_BYTES	(256ULL << 20)

static const char *mode_name(const struct opts *o, enum vu_mem_kind kind)
{
	if (kind == MODE_ALIAS1G)
		return "alias1g";
	return kind == MODE_BAR ? o->bar_name : vu_mem_name(kind);
}

static const char *mode_header(enum vu_mem_kind kind)
{
	if (kind == MODE_ALIAS1G)
		return "MEMFD HUGETLB 1G ALIASES";
	switch (kind) {
	case VU_MEM_THP:	return "MADV_HUGEPAGE";
	case VU_MEM_POPULATE:	return "MAP_POPULATE";
	case VU_MEM_HUGETLB2M:	return "HUGETLBFS";
	case VU_MEM_HUGETLB1G:	return "HUGETLBFS 1G";
	case VU_MEM_MEMFD:	return "MEMFD";
	case VU_MEM_MEMFD2M:	return "MEMFD HUGETLB";
	case VU_MEM_MEMFD1G:	return "MEMFD HUGETLB 1G";
	case MODE_BAR:		return "PCI BAR";
	default:		return "?";
	}
}

static bool has_cap_ipc_lock(void)
{
	char line[256];
	bool cap = false;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return geteuid() == 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long eff;

		if (sscanf(line, "CapEff: %llx", &eff) == 1) {
			cap = eff & (1ULL << CAP_IPC_LOCK_BIT);
			break;
		}
	}
	fclose(f);
	return cap;
}

/* type1 charges every pinned page to RLIMIT_MEMLOCK unless CAP_IPC_LOCK. */
static int check_memlock(uint64_t size)
{
	struct rlimit rl;

	if (has_cap_ipc_lock())
		return 0;
	if (getrlimit(RLIMIT_MEMLOCK, &rl))
		return 0;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= size)
		return 0;
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= size) {
		rl.rlim_cur = size;
		if (!setrlimit(RLIMIT_MEMLOCK, &rl))
			return 0;
	}
	fprintf(stderr,
		"dma-bench: RLIMIT_MEMLOCK is %llu KiB but mapping %" PRIu64 " KiB needs as much:\n"
		"  run as root (CAP_IPC_LOCK), or raise the limit first: ulimit -l unlimited\n"
		"  (or a 'memlock' line in /etc/security/limits.conf)\n",
		(unsigned long long)rl.rlim_cur / 1024, size / 1024);
	return -ENOMEM;
}

/* Is [iova, iova + size) inside one of the container's usable IOVA ranges? */
static int check_iova(int container, uint64_t iova, uint64_t size)
{
	struct vfio_iommu_type1_info *info;
	struct vfio_info_cap_header *hdr;
	size_t argsz = sizeof(*info);
	uint32_t off;
	int ret = -ERANGE, try;

	/* Twice at most: the second time with the argsz the first one asked for. */
	for (try = 0; ; try++) {
		info = calloc(1, argsz);
		if (!info)
			return -ENOMEM;
		info->argsz = argsz;
		if (ioctl(container, VFIO_IOMMU_GET_INFO, info) < 0)
			goto fail_errno;
		if (try || info->argsz <= argsz)
			break;
		argsz = info->argsz;
		free(info);
	}
	if (!(info->flags & VFIO_IOMMU_INFO_CAPS) || !info->cap_offset) {
		free(info);
		return 0;	/* no ranges reported: let MAP_DMA decide */
	}
	for (off = info->cap_offset; off && off + sizeof(*hdr) <= argsz; off = hdr->next) {
		struct vfio_iommu_type1_info_cap_iova_range *cap;
		uint32_t i;

		hdr = (void *)((char *)info + off);
		if (hdr->id != VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE)
			continue;
		cap = (void *)hdr;
		for (i = 0; i < cap->nr_iovas; i++)
			if (iova >= cap->iova_ranges[i].start &&
			    iova + size - 1 <= cap->iova_ranges[i].end)
				ret = 0;
		if (ret) {
			fprintf(stderr, "dma-bench: IOVA 0x%" PRIx64 "-0x%" PRIx64
				" is outside the usable ranges:\n", iova, iova + size - 1);
			for (i = 0; i < cap->nr_iovas; i++)
				fprintf(stderr, "  0x%llx-0x%llx\n",
					(unsigned long long)cap->iova_ranges[i].start,
					(unsigned long long)cap->iova_ranges[i].end);
			fprintf(stderr, "  pick one with --iova\n");
		}
		free(info);
		return ret;
	}
	free(info);
	return 0;
fail_errno:
	ret = -errno;
	free(info);
	return ret;
}

static void explain_group_error(int group, int err)
{
	fprintf(stderr, "dma-bench: cannot use VFIO group %d: %s\n", group, strerror(-err));
	switch (-err) {
	case ENOENT:
		fprintf(stderr, "  /dev/vfio/%d does not exist: bind the device to vfio-pci\n"
			"  (echo vfio-pci > /sys/bus/pci/devices/BDF/driver_override, unbind,\n"
			"  echo BDF > /sys/bus/pci/drivers_probe); see ls /dev/vfio\n", group);
		break;
	case EBUSY:
		fprintf(stderr, "  the group is not viable (every device in it must be bound to\n"
			"  vfio-pci or to no driver) or it is already in use by another container\n");
		break;
	case EACCES:
	case EPERM:
		fprintf(stderr, "  no permission on /dev/vfio/%d: run as root or chown it\n", group);
		break;
	case ENODEV:
		fprintf(stderr, "  no IOMMU backend accepts this type: is vfio_iommu_type1 loaded?\n"
			"  (modprobe vfio_iommu_type1); is the IOMMU on (intel_iommu=on)?\n");
		break;
	}
}

/* A fresh container with the group attached and the IOMMU type set. */
static int open_container(const struct opts *o, int *group_fd)
{
	int c = vu_container_setup(&o->group, 1, o->type, group_fd);

	if (c == -ENOENT && access("/dev/vfio/vfio", F_OK)) {
		fprintf(stderr, "dma-bench: /dev/vfio/vfio missing: load the vfio module\n");
		return c;
	}
	if (c < 0)
		explain_group_error(o->group, c);
	return c;
}

static void close_container(int container, int group_fd)
{
	close(group_fd);
	close(container);
}

/* Make backend @b the active one, where there is more than one to run. */
static int use_backend(const struct opts *o, int b)
{
	if (o->nbackends == 1 && !o->switch_cmd)
		return 0;
	return vu_switch_backend("dma-bench", o->switch_cmd, o->backends[b]);
}

/*
 * Under TCG the first run of code after it is loaded costs translation
 * time: switching backends reloads foliomap.ko before each of its steps
 * while stock's module stays loaded, so without this only foliomap's
 * timed ioctls would pay for translating its code again (about 1-3 ms per
 * ioctl, measured: 256 MiB BAR unmap 0.2 ms steady vs 1.5 ms right after
 * insmod). Each step of every backend therefore first maps and unmaps
 * the first 8 MiB, untimed, inside the balance check; a buffer over 4 GiB
 * (a GPU's BAR) its first 2 GiB, so that the paths of 1G leaves and of a
 * batch of several are translated too (bar-64g's map on 7.x: 0.22 ms
 * without, 0.05 ms under icount, where translation costs nothing).
 * --no-step-warmup turns it off.
 */
#define STEP_WARMUP_SIZE	(8ULL << 20)
#define STEP_WARMUP_BIG		(2ULL << 30)

static int step_warmup(const struct opts *o, int c, void *buf, uint64_t size)
{
	uint64_t len = size > 2 * STEP_WARMUP_BIG ? STEP_WARMUP_BIG :
		       size < STEP_WARMUP_SIZE ? size : STEP_WARMUP_SIZE;
	int err;

	if (!o->step_warmup)
		return 0;
	err = vu_map(c, o->iova, buf, len, VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE);
	if (!err)
		err = vu_unmap(c, o->iova, len, 0, NULL);
	if (err)
		fprintf(stderr, "dma-bench: ERROR: step warm-up map/unmap of %" PRIu64
			" bytes failed: %s\n", len, strerror(-err));
	return err;
}

/*
 * One step's counters before it, its times (UNMAP_DMA from t1b: the
 * record is read in between), the probe's latest wakeups (ns), its
 * UNMAP_DMA error, and whether its unmap step closed the container.
 */
struct step {
	struct vu_counters before;
	double t0, t1, t1b, t2;
	long long map_lat, unmap_lat;
	long map_sleeps, unmap_sleeps;
	long long record;
	int err;
	bool closed;
};

/*
 * The bytes of foliomap's run records (debugfs stats record_bytes) over
 * its containers, -1 without debugfs. The bench's container is the only
 * one with mappings.
 */
static long long foliomap_record_bytes(void)
{
	long long sum = -1;
	glob_t g;
	size_t i;

	if (glob("/sys/kernel/debug/foliomap/*/stats", 0, NULL, &g))
		return -1;
	for (i = 0; i < g.gl_pathc; i++) {
		long long v = vu_read_key(g.gl_pathv[i], "record_bytes");

		if (v >= 0)
			sum = (sum < 0 ? 0 : sum) + v;
	}
	globfree(&g);
	return sum;
}

/* How often the calling thread has blocked so far. */
static long thread_sleeps(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_THREAD, &ru) ? 0 : ru.ru_nvcsw;
}

/*
 * The timed part of one step, in container @c with group @gfd (whose
 * counters it reads first): the step warm-up, then MAP_DMA and UNMAP_DMA of
 * [@buf, +@size) at o->iova, or with --unmap-by-close, the closing of @gfd
 * and @c in UNMAP_DMA's place (st->closed). @what names the mode in
 * messages. Returns 0 when the caller is to close @c (unless st->closed)
 * and call step_done() (a failed UNMAP_DMA is counted and kept in
 * st->err), or -errno when the step stopped before that (no balance check
 * then).
 */
static int step_run(const struct opts *o, int c, int gfd, void *buf, uint64_t size,
		    const char *what, int loop, struct series *s, struct step *st)
{
	uint64_t unmapped = 0;
	int err;

	if (vu_counters_read(&st->before)) {
		fprintf(stderr, "dma-bench: cannot read /proc/vmstat nr_foll_pin_* or VmLck\n");
		return -ENOENT;
	}
	if (step_warmup(o, c, buf, size)) {
		s->failures++;
		return -EIO;
	}
	if (o->lp) {
		latprobe_reset(o->lp);
		st->map_sleeps = thread_sleeps();
	}
	st->t0 = vu_now();
	err = vu_map(c, o->iova, buf, size, VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE);
	st->t1 = vu_now();
	if (o->lp) {
		st->map_lat = latprobe_max_ns(o->lp);
		st->map_sleeps = thread_sleeps() - st->map_sleeps;
	}
	if (err) {
		fprintf(stderr, "dma-bench: ERROR: %s %s loop %d: MAP_DMA failed: %s\n",
			s->backend, what, loop + 1, strerror(-err));
		if (err == -ENOMEM)
			fprintf(stderr, "  over RLIMIT_MEMLOCK? run as root or ulimit -l unlimited\n");
		s->failures++;
		return err;
	}
	st->record = strcmp(s->backend, "foliomap") ? -1 : foliomap_record_bytes();
	if (o->after_map) {
		char cmd[512];

		snprintf(cmd, sizeof(cmd), "%s %s %s 0x%" PRIx64 " %" PRIu64, o->after_map,
			 s->backend, what, o->iova, size);
		fflush(NULL);
		if (system(cmd))
			fprintf(stderr, "dma-bench: --after-map command failed: %s\n", cmd);
	}
	if (o->lp) {
		latprobe_reset(o->lp);
		st->unmap_sleeps = thread_sleeps();
	}
	st->t1b = vu_now();
	if (o->unmap_by_close) {
		close_container(c, gfd);
		st->closed = true;
		unmapped = size;
	} else {
		st->err = vu_unmap(c, o->iova, size, 0, &unmapped);
	}
	st->t2 = vu_now();
	if (o->lp) {
		st->unmap_lat = latprobe_max_ns(o->lp);
		st->unmap_sleeps = thread_sleeps() - st->unmap_sleeps;
	}
	if (st->err || unmapped != size) {
		fprintf(stderr, "dma-bench: ERROR: %s %s loop %d: UNMAP_DMA %s, %" PRIu64
			" of %" PRIu64 " bytes unmapped\n", s->backend, what,
			loop + 1, st->err ? strerror(-st->err) : "short", unmapped, size);
		s->failures++;
	}
	return 0;
}

/*
 * After the step's container was closed: pins and VmLck must be back where
 * they were; the times count unless this was a warm-up loop. Returns the
 * step's UNMAP_DMA error.
 */
static int step_done(const char *what, int loop, struct series *s, const struct step *st)
{
	struct vu_counters after;
	long long pins, lck;

	if (vu_counters_read(&after))
		return -ENOENT;
	pins = vu_pins_outstanding(&st->before, &after);
	lck = (after.vmlck_kb - st->before.vmlck_kb) / page_kb;
	if (pins || lck) {
		fprintf(stderr, "dma-bench: ERROR: %s %s loop %d: after UNMAP_DMA %lld pages "
			"still pinned, %lld pages still locked (VmLck)\n", s->backend,
			what, loop + 1, pins, lck);
		s->pin_leak += pins;
		s->lck_leak += lck;
	}
	if (s->warmup) {
		s->warmup--;
		return st->err;
	}
	s->map_s[s->n] = st->t1 - st->t0;
	s->unmap_s[s->n] = st->t2 - st->t1b;
	s->map_lat_us[s->n] = st->map_lat / 1e3;
	s->unmap_lat_us[s->n] = st->unmap_lat / 1e3;
	s->map_sleeps[s->n] = st->map_sleeps;
	s->unmap_sleeps[s->n] = st->unmap_sleeps;
	if (st->record > s->record_bytes)
		s->record_bytes = st->record;
	s->n++;
	return st->err;
}

/* One step: fresh container, one MAP_DMA, one UNMAP_DMA, balance check. */
static int one_loop(const struct opts *o, enum vu_mem_kind kind, void *buf,
		    uint64_t size, struct series *s, int loop)
{
	struct step st = { 0 };
	int c, gfd, err;

	c = open_container(o, &gfd);
	if (c < 0)
		return c;
	if (loop == 0 && s->n == 0) {
		err = check_iova(c, o->iova, size);
		if (err) {
			close_container(c, gfd);
			return err;
		}
	}
	err = step_run(o, c, gfd, buf, size, mode_name(o, kind), loop, s, &st);
	if (!st.closed)
		close_container(c, gfd);
	return err ? err : step_done(mode_name(o, kind), loop, s, &st);
}

static void print_summary(const struct opts *o, enum vu_mem_kind kind, const struct series *s)
{
	double mn, md, mx, av, umn, umd, umx, uav;

	if (!s->n)
		return;
	vu_stats(s->map_s, s->n, &mn, &md, &mx, &av);
	vu_stats(s->unmap_s, s->n, &umn, &umd, &umx, &uav);
	fprintf(human, "# %s, %s, %g GiB, %d loops\n", s->backend, mode_name(o, kind),
		o->gib, s->n);
	fprintf(human, "------- AVERAGE (%s) --------\n", mode_header(kind));
	fprintf(human, "VFIO MAP DMA in %.3f s (%.1f GB/s)\n", av, o->gib / av);
	fprintf(human, "VFIO %s in %.3f s (%.1f GB/s)\n",
		o->unmap_by_close ? "CLOSE (unmap by release)" : "UNMAP DMA", uav, o->gib / uav);
	fprintf(human, "MAP   min %.4f median %.4f max %.4f s\n", mn, md, mx);
	fprintf(human, "UNMAP min %.4f median %.4f max %.4f s\n", umn, umd, umx);
	if (o->lp) {
		vu_stats(s->map_lat_us, s->n, &mn, &md, &mx, &av);
		vu_stats(s->unmap_lat_us, s->n, &umn, &umd, &umx, &uav);
		fprintf(human, "LATENCY (latest probe wakeup, floor %.0f us): MAP max %.0f us, "
			"UNMAP max %.0f us\n", o->lat_floor_us, mx, umx);
	}
	if (s->record_bytes >= 0)
		fprintf(human, "RUN RECORD %lld bytes while mapped\n", s->record_bytes);
	fflush(human);
}

static void print_array(const double *v, int n)
{
	int i;

	putchar('[');
	for (i = 0; i < n; i++)
		printf("%s%.6f", i ? ", " : "", v[i]);
	putchar(']');
}

static void print_long_array(const long *v, int n)
{
	int i;

	putchar('[');
	for (i = 0; i < n; i++)
		printf("%s%ld", i ? ", " : "", v[i]);
	putchar(']');
}

static void print_json(const struct opts *o, enum vu_mem_kind kind, const struct series *s)
{
	printf("{\"backend\": \"%s\", ", s->backend);
	if (o->label)
		printf("\"label\": \"%s\", ", o->label);
	printf("\"mode\": \"%s\", \"gib\": %g, \"loops\": %d, \"map_s\": ",
	       mode_name(o, kind), o->gib, s->n);
	print_array(s->map_s, s->n);
	printf(", \"unmap_s\": ");
	print_array(s->unmap_s, s->n);
	if (o->lp) {
		printf(", \"preempt\": \"%s\", \"latency_floor_us\": %.1f, \"map_maxlat_us\": ",
		       latprobe_preempt_model(), o->lat_floor_us);
		print_array(s->map_lat_us, s->n);
		printf(", \"unmap_maxlat_us\": ");
		print_array(s->unmap_lat_us, s->n);
		printf(", \"map_sleeps\": ");
		print_long_array(s->map_sleeps, s->n);
		printf(", \"unmap_sleeps\": ");
		print_long_array(s->unmap_sleeps, s->n);
	}
	if (s->record_bytes >= 0)
		printf(", \"record_bytes\": %lld", s->record_bytes);
	if (o->unmap_by_close)
		printf(", \"unmap_step\": \"close\"");
	printf(", \"map_median_s\": %.6f, \"unmap_median_s\": %.6f, "
	       "\"pin_leak_pages\": %lld, \"locked_vm_leak_pages\": %lld}\n",
	       vu_median(s->map_s, s->n), vu_median(s->unmap_s, s->n),
	       s->pin_leak, s->lck_leak);
	fflush(stdout);
}

/*
 * Every loop, the warm-up loops first, the backends alternating: @step
 * once per backend and loop. Setup errors (no group, bad IOVA) stop;
 * ioctl failures are counted in the series and the loops go on.
 */
static int run_loops(const struct opts *o, struct series *s,
		     int (*step)(const struct opts *o, struct series *s, int loop, void *arg),
		     void *arg)
{
	int loop, b, err;

	for (loop = 0; loop < o->warmup + o->loops; loop++) {
		for (b = 0; b < o->nbackends; b++) {
			err = use_backend(o, b);
			if (err)
				return err;
			err = step(o, &s[b], loop, arg);
			if (err && !s[b].failures)
				return err;
		}
	}
	return 0;
}

/* The summary (and JSON) of each backend's series, then frees them; *bad on a leak or failure. */
static void report_series(const struct opts *o, enum vu_mem_kind kind, struct series *s, int *bad)
{
	int b;

	for (b = 0; b < o->nbackends; b++) {
		print_summary(o, kind, &s[b]);
		if (o->json && s[b].n)
			print_json(o, kind, &s[b]);
		if (s[b].pin_leak || s[b].lck_leak || s[b].failures)
			*bad = 1;
		free(s[b].map_s);
		free(s[b].unmap_s);
		free(s[b].map_lat_us);
		free(s[b].unmap_lat_us);
		free(s[b].map_sleeps);
		free(s[b].unmap_sleeps);
	}
}

struct mem_step {
	enum vu_mem_kind kind;
	void *buf;
	uint64_t size;
};

static int mem_step(const struct opts *o, struct series *s, int loop, void *arg)
{
	struct mem_step *m = arg;

	return one_loop(o, m->kind, m->buf, m->size, s, loop);
}

/* hugetlbfs kinds: their page size in kB, else 0. */
static unsigned long huge_kb(enum vu_mem_kind kind)
{
	if (kind == MODE_ALIAS1G)
		return 1048576;
	switch (kind) {
	case VU_MEM_HUGETLB2M:
	case VU_MEM_MEMFD2M:
		return 2048;
	case VU_MEM_HUGETLB1G:
	case VU_MEM_MEMFD1G:
		return 1048576;
	default:
		return 0;
	}
}

/* Refuse early rather than let the OOM killer end the run. */
static int check_free_memory(enum vu_mem_kind kind, uint64_t size)
{
	long long avail = vu_read_key("/proc/meminfo", "MemAvailable");

	if (huge_kb(kind) || avail < 0)
		return 0;
	if ((uint64_t)avail * 1024 < size + (64ULL << 20)) {
		fprintf(stderr, "dma-bench: not enough memory for %s: %" PRIu64 " MiB wanted, "
			"%lld MiB available; give the guest more (vm/run --mem) or use --gib\n",
			vu_mem_name(kind), size >> 20, avail >> 10);
		return -ENOMEM;
	}
	return 0;
}

static void hugepage_paths(enum vu_mem_kind kind, char *nr, char *fr, size_t len)
{
	unsigned long kb = huge_kb(kind);

	snprintf(nr, len, "/sys/kernel/mm/hugepages/hugepages-%lukB/nr_hugepages", kb);
	snprintf(fr, len, "/sys/kernel/mm/hugepages/hugepages-%lukB/free_hugepages", kb);
}

/* @size bytes of PROT_NONE address space aligned to @align (a power of two), or NULL. */
static char *reserve_aligned(uint64_t size, uint64_t align)
{
	char *resv = mmap(NULL, size + align, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char *p;

	if (resv == MAP_FAILED)
		return NULL;
	p = (char *)(((uintptr_t)resv + align - 1) & ~(uintptr_t)(align - 1));
	if (p > resv)
		munmap(resv, p - resv);
	if ((uint64_t)(p - resv) < align)
		munmap(p + size, align - (p - resv));
	return p;
}

/*
 * Mode alias1g: @size bytes of address space, 1G-aligned, each GiB of it
 * a MAP_SHARED mapping of the same 1G memfd page, all faulted in (one 1G
 * leaf per GiB). The page stays while any alias maps it.
 */
static void *alias1g_map(uint64_t size)
{
	uint64_t off;
	int fd, err;
	char *p;

	fd = vu_memfd_huge_create(SZ_1G, 1048576);
	if (fd < 0) {
		errno = -fd;
		return NULL;
	}
	p = reserve_aligned(size, SZ_1G);
	if (!p)
		goto fail;
	for (off = 0; off < size; off += SZ_1G) {
		if (mmap(p + off, SZ_1G, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
		    MAP_FAILED) {
			err = errno;
			munmap(p, size);
			errno = err;
			goto fail;
		}
		*(volatile char *)(p + off) = 1;
	}
	close(fd);
	return p;

fail:
	err = errno;
	close(fd);
	errno = err;
	return NULL;
}

/*
 * Returns 0 done, <0 setup error (exit 2). Leaks and failed
 * ioctls are reported and set *bad.
 */
static int run_mode(const struct opts *o, enum vu_mem_kind kind, uint64_t size, int *bad)
{
	struct series s[MAX_BACKENDS] = { 0 };
	bool huge = huge_kb(kind) != 0;
	bool gigantic = huge_kb(kind) == 1048576;
	char nr_path[128], free_path[128];
	long long nr_before = -1;
	int ret = 0;
	void *buf;
	double t;

	if (gigantic && size % SZ_1G) {
		fprintf(stderr, "dma-bench: %s: %g GiB is not a whole number of 1G pages\n",
			mode_name(o, kind), o->gib);
		return -EINVAL;
	}
	if (check_free_memory(kind, size))
		return -ENOMEM;
	if (huge) {
		hugepage_paths(kind, nr_path, free_path, sizeof(nr_path));
		nr_before = vu_read_number(nr_path);
	}

	t = vu_now();
	buf = kind == MODE_ALIAS1G ? alias1g_map(size) : vu_mem_alloc(kind, size);
	if (!buf) {
		int err = errno;
		unsigned long long n = kind == MODE_ALIAS1G ? 1 : size / (gigantic ? SZ_1G : SZ_2M);

		if (huge) {
			long long fr = vu_read_number(free_path);

			if (nr_before >= 0)
				vu_write_number(nr_path, nr_before);
			fprintf(stderr, "dma-bench: cannot reserve %llu %s hugepages (%s, %lld "
				"free): %s\n", n, gigantic ? "1G" : "2M", strerror(err),
				fr < 0 ? 0 : fr, gigantic ? "boot the guest with hugepagesz=1G "
				"hugepages=N (bench/run does)" : "give the guest more memory "
				"or use a smaller --gib");
			return -ENOMEM;
		}
		fprintf(stderr, "dma-bench: cannot allocate %" PRIu64 " MiB of %s: %s\n",
			size >> 20, mode_name(o, kind), strerror(err));
		return -ENOMEM;
	}
	fprintf(human, "# %s: %" PRIu64 " MiB faulted in %.2f s", mode_name(o, kind),
		size >> 20, vu_now() - t);
	if (kind == VU_MEM_THP) {
		long long thp = vu_read_key("/proc/self/smaps_rollup", "AnonHugePages");

		if (thp >= 0)
			fprintf(human, ", %lld%% THP", thp * 1024 * 100 / (long long)size);
		if (thp >= 0 && (uint64_t)thp * 1024 < size / 2)
			fprintf(human, " (WARNING: THP mostly missing, check "
				"/sys/kernel/mm/transparent_hugepage/enabled)");
	}
	fprintf(human, "\n");

	ret = series_init(o, s);
	if (!ret)
		ret = run_loops(o, s, mem_step, &(struct mem_step){ kind, buf, size });
	report_series(o, kind, s, bad);
	vu_mem_free(buf, size);
	if (huge && nr_before >= 0)
		vu_write_number(nr_path, nr_before);	/* give the pool back for the next modes */
	return ret;
}

/*
 * Mode bar: device memory. Each loop attaches the device's group to a
 * fresh container, opens the device, mmaps the BAR at an address aligned
 * like the BAR (so vfio-pci can use PMD/PUD entries), faults every page
 * in (untimed), then times MAP_DMA and UNMAP_DMA of the whole BAR. Nothing
 * may be pinned or charged at any time.
 */
struct bar_loop {
	int container, gfd, dev;
	void *map;
	uint64_t size;
};

static int bar_open(const struct opts *o, int group, struct bar_loop *l)
{
	struct vfio_region_info r = { .argsz = sizeof(r), .index = o->bar_index };
	struct vfio_region_info cfg = { .argsz = sizeof(cfg),
					.index = VFIO_PCI_CONFIG_REGION_INDEX };
	uint16_t cmd;
	size_t i, stride;
	char *p;

	l->container = vu_container_setup(&group, 1, o->type, &l->gfd);
	if (l->container < 0) {
		explain_group_error(group, l->container);
		return l->container;
	}
	l->dev = ioctl(l->gfd, VFIO_GROUP_GET_DEVICE_FD, o->bar_bdf);
	if (l->dev < 0) {
		fprintf(stderr, "dma-bench: VFIO_GROUP_GET_DEVICE_FD %s: %s\n", o->bar_bdf,
			strerror(errno));
		goto fail;
	}
	if (ioctl(l->dev, VFIO_DEVICE_GET_REGION_INFO, &r) < 0 ||
	    !(r.flags & VFIO_REGION_INFO_FLAG_MMAP) || !r.size) {
		fprintf(stderr, "dma-bench: %s BAR%d is not an mmappable region\n",
			o->bar_bdf, o->bar_index);
		goto fail_dev;
	}
	/* Memory decoding on, or every access faults. */
	if (ioctl(l->dev, VFIO_DEVICE_GET_REGION_INFO, &cfg) < 0 ||
	    pread(l->dev, &cmd, 2, cfg.offset + 4) != 2)
		goto fail_dev;
	cmd |= 2;
	if (pwrite(l->dev, &cmd, 2, cfg.offset + 4) != 2)
		goto fail_dev;

	/* The part measured: mapped and faulted in, the rest left alone. */
	l->size = o->bar_size ? o->bar_size :
		  r.size < BAR_DEFAULT_BYTES ? r.size : BAR_DEFAULT_BYTES;
	if (l->size > r.size) {
		fprintf(stderr, "dma-bench: %s: %s BAR%d has only %llu MiB\n", o->bar_name,
			o->bar_bdf, o->bar_index, (unsigned long long)(r.size >> 20));
		goto fail_dev;
	}
	p = reserve_aligned(l->size, l->size < SZ_1G ? l->size : SZ_1G);
	if (!p)
		goto fail_dev;
	l->map = mmap(p, l->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, l->dev,
		      r.offset);
	if (l->map == MAP_FAILED) {
		fprintf(stderr, "dma-bench: mmap %s BAR%d: %s\n", o->bar_bdf, o->bar_index,
			strerror(errno));
		munmap(p, l->size);
		goto fail_dev;
	}
	/*
	 * Every page in, untimed. A BAR larger than 1 GiB (a GPU's) is
	 * touched once per GiB: vfio-pci maps such an aligned range with 1G
	 * leaves (6.12 and later) or all of it at the first fault (6.1),
	 * while a read of every 4K page would make the emulator back each
	 * one with host memory (64 GiB of it for bar-64g).
	 */
	stride = l->size > SZ_1G ? SZ_1G : 4096;
	for (i = 0; i < l->size; i += stride)
		(void)*(volatile char *)(p + i);
	return 0;

fail_dev:
	close(l->dev);
fail:
	close_container(l->container, l->gfd);
	return -EIO;
}

static void bar_close(struct bar_loop *l)
{
	munmap(l->map, l->size);
	close(l->dev);
	close_container(l->container, l->gfd);
}

static int bar_one_loop(const struct opts *o, int group, struct series *s, int loop)
{
	struct step st = { 0 };
	struct bar_loop l;
	int err;

	err = bar_open(o, group, &l);
	if (err)
		return err;
	if (loop == 0 && s->n == 0 && check_iova(l.container, o->iova, l.size)) {
		bar_close(&l);
		return -ERANGE;
	}
	err = step_run(o, l.container, l.gfd, l.map, l.size, o->bar_name, loop, s, &st);
	bar_close(&l);
	return err ? err : step_done(o->bar_name, loop, s, &st);
}

static int bar_step(const struct opts *o, struct series *s, int loop, void *arg)
{
	return bar_one_loop(o, *(int *)arg, s, loop);
}

static int run_bar_mode(const struct opts *o, int mode, int *bad)
{
	struct series s[MAX_BACKENDS] = { 0 };
	struct opts bo = *o;
	int group, ret = 0;
	struct bar_loop probe;

	bo.bar_size = o->bar_bytes[mode];
	if (bo.bar_size)
		snprintf(bo.bar_name, sizeof(bo.bar_name), "bar-%llug",
			 (unsigned long long)(bo.bar_size >> 30));
	else
		snprintf(bo.bar_name, sizeof(bo.bar_name), "bar");
	if (!bo.bar_bdf)
		bo.bar_bdf = getenv("VFIO_IVSHMEM_BDF");
	if (!bo.bar_bdf || !*bo.bar_bdf) {
		fprintf(human, "# %s skipped: no device: --bar-device BDF, or vm/run --ivshmem "
			"(sets VFIO_IVSHMEM_BDF)\n", bo.bar_name);
		return 1;
	}
	group = vu_group_of_bdf(bo.bar_bdf);
	if (group < 0) {
		fprintf(stderr, "dma-bench: no IOMMU group for %s\n", bo.bar_bdf);
		return -ENODEV;
	}
	if (bar_open(&bo, group, &probe))
		return -EIO;
	bo.gib = (double)probe.size / SZ_1G;
	fprintf(human, "# %s: %s BAR%d, %" PRIu64 " MiB mapped, group %d\n", bo.bar_name,
		bo.bar_bdf, bo.bar_index, probe.size >> 20, group);
	bar_close(&probe);

	ret = series_init(o, s);
	if (!ret)
		ret = run_loops(&bo, s, bar_step, &group);
	report_series(&bo, MODE_BAR, s, bad);
	return ret;
}

static int parse_modes(struct opts *o, const char *arg)
{
	char *dup = strdup(arg), *tok, *save = NULL;

	o->nmodes = 0;
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned long long g;
		char unit;

		if (!strcmp(tok, "alias1g") && o->nmodes < MAX_MODES) {
			o->modes[o->nmodes++] = MODE_ALIAS1G;
			continue;
		}
		if (!strcmp(tok, "bar") && o->nmodes < MAX_MODES) {
			o->bar_bytes[o->nmodes] = 0;
			o->modes[o->nmodes++] = MODE_BAR;
			continue;
		}
		if (sscanf(tok, "bar-%llu%c", &g, &unit) == 2 && unit == 'g' && g &&
		    g < (1ULL << 20) && o->nmodes < MAX_MODES) {
			o->bar_bytes[o->nmodes] = g << 30;
			o->modes[o->nmodes++] = MODE_BAR;
			continue;
		}
		if (o->nmodes == MAX_MODES || vu_mem_parse(tok, &o->modes[o->nmodes])) {
			fprintf(stderr, "dma-bench: unknown mode '%s' (thp, populate, hugetlb2m, "
				"hugetlb1g, memfd, memfd2m, memfd1g, bar, bar-Ng, alias1g)\n", tok);
			free(dup);
			return -EINVAL;
		}
		o->nmodes++;
	}
	free(dup);
	return o->nmodes ? 0 : -EINVAL;
}

static int parse_backends(struct opts *o, const char *arg)
{
	char *dup = strdup(arg), *tok, *save = NULL;

	o->nbackends = 0;
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (o->nbackends == MAX_BACKENDS ||
		    (strcmp(tok, "stock") && strcmp(tok, "foliomap"))) {
			fprintf(stderr, "dma-bench: bad backend list '%s' (stock,foliomap)\n", arg);
			free(dup);
			return -EINVAL;
		}
		o->backends[o->nbackends++] = strcmp(tok, "stock") ? "foliomap" : "stock";
	}
	free(dup);
	return o->nbackends ? 0 : -EINVAL;
}

static int resolve_group(struct opts *o)
{
	int groups[8];
	char bdfs[8][32];

	if (o->bdf) {
		o->group = vu_group_of_bdf(o->bdf);
		if (o->group < 0) {
			fprintf(stderr, "dma-bench: no IOMMU group for %s: %s (is the IOMMU on, "
				"does /sys/bus/pci/devices/%s exist?)\n", o->bdf,
				strerror(-o->group), o->bdf);
			return -ENODEV;
		}
		return 0;
	}
	if (o->group >= 0)
		return 0;
	if (vu_env_groups(groups, 8) > 0) {
		o->group = groups[0];
		return 0;
	}
	if (vu_env_bdfs(bdfs, 8) > 0 && (o->group = vu_group_of_bdf(bdfs[0])) >= 0)
		return 0;
	fprintf(stderr, "dma-bench: no device: pass --group N or --device BDF, or set "
		"VFIO_GROUPS (vm/run does)\n");
	return -ENODEV;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "group",	required_argument, NULL, 'g' },
		{ "device",	required_argument, NULL, 'd' },
		{ "gib",	required_argument, NULL, 's' },
		{ "loops",	required_argument, NULL, 'l' },
		{ "warmup",	required_argument, NULL, 'W' },
		{ "iova",	required_argument, NULL, 'i' },
		{ "type1",	required_argument, NULL, 't' },
		{ "modes",	required_argument, NULL, 'm' },
		{ "backends",	required_argument, NULL, 'b' },
		{ "switch-cmd",	required_argument, NULL, 'w' },
		{ "json",	no_argument,	   NULL, 'j' },
		{ "label",	required_argument, NULL, 'L' },
		{ "bar-device",	required_argument, NULL, 'B' },
		{ "bar-index",	required_argument, NULL, 'I' },
		{ "no-step-warmup", no_argument,  NULL, 'N' },
		{ "latency",	optional_argument, NULL, 'T' },
		{ "after-map",	required_argument, NULL, 'A' },
		{ "unmap-by-close", no_argument,  NULL, 'C' },
		{ "help",	no_argument,	   NULL, 'h' },
		{ 0 }
	};
	struct opts o = {
		.group = -1, .gib = 1, .loops = 5, .warmup = 1, .iova = 4ULL << 30,
		.type = VFIO_TYPE1v2_IOMMU, .bar_index = 2, .step_warmup = true,
	};
	int c, i, bad = 0, ret = 0;
	struct latprobe lp;
	uint64_t size;
	char *end;

	parse_modes(&o, "thp,populate,hugetlb2m");
	while ((c = getopt_long(argc, argv, "g:d:s:l:W:i:t:m:b:w:jL:B:I:Nh", lopts, NULL)) != -1) {
		switch (c) {
		case 'g':
			o.group = strtol(optarg, &end, 10);
			if (*end || o.group < 0)
				goto bad_arg;
			break;
		case 'd':
			o.bdf = optarg;
			break;
		case 's':
			o.gib = strtod(optarg, &end);
			if (*end || !(o.gib > 0))
				goto bad_arg;
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
		case 'i':
			o.iova = strtoull(optarg, &end, 0);
			if (*end)
				goto bad_arg;
			break;
		case 't':
			if (!strcmp(optarg, "v1"))
				o.type = VFIO_TYPE1_IOMMU;
			else if (!strcmp(optarg, "v2"))
				o.type = VFIO_TYPE1v2_IOMMU;
			else
				goto bad_arg;
			break;
		case 'm':
			if (parse_modes(&o, optarg))
				return 2;
			break;
		case 'b':
			if (parse_backends(&o, optarg))
				return 2;
			break;
		case 'w':
			o.switch_cmd = optarg;
			break;
		case 'j':
			o.json = true;
			break;
		case 'L':
			o.label = optarg;
			break;
		case 'B':
			o.bar_bdf = optarg;
			break;
		case 'N':
			o.step_warmup = false;
			break;
		case 'A':
			o.after_map = optarg;
			break;
		case 'T':
			o.latency_us = optarg ? strtol(optarg, &end, 10) : 500;
			if ((optarg && *end) || o.latency_us < 10)
				goto bad_arg;
			break;
		case 'C':
			o.unmap_by_close = true;
			break;
		case 'I':
			o.bar_index = strtol(optarg, &end, 10);
			if (*end || o.bar_index < 0 || o.bar_index > 5)
				goto bad_arg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	for (i = 0; o.unmap_by_close && i < o.nmodes; i++) {
		if (o.modes[i] == MODE_BAR) {
			/* The BAR's open device fd would keep the container. */
			fprintf(stderr, "dma-bench: --unmap-by-close is for memory, not the bar modes\n");
			return 2;
		}
	}
	human = o.json ? stderr : stdout;
	page_kb = sysconf(_SC_PAGESIZE) / 1024;
	if (!o.nbackends) {
		o.backends[0] = vu_backend_name();
		o.nbackends = 1;
	}

	size = (uint64_t)llround(o.gib * SZ_1G);
	if (!size || size % SZ_2M) {
		fprintf(stderr, "dma-bench: --gib %g is %" PRIu64 " bytes, not a multiple of 2 MiB\n",
			o.gib, size);
		return 2;
	}
	if (o.iova % SZ_2M) {
		fprintf(stderr, "dma-bench: --iova 0x%" PRIx64 " is not 2 MiB aligned: the "
			"IOMMU could not use superpages\n", o.iova);
		return 2;
	}
	if (resolve_group(&o) || check_memlock(size))
		return 2;
	/* Fail on a missing or unusable group before faulting in any memory. */
	c = open_container(&o, &i);
	if (c < 0)
		return 2;
	ret = check_iova(c, o.iova, size);
	close_container(c, i);
	if (ret)
		return 2;
	fprintf(human, "# dma-bench: group %d, %g GiB at IOVA 0x%" PRIx64 ", %d loops (+%d warm-up), "
		"type1 %s, backends", o.group, o.gib, o.iova, o.loops, o.warmup,
		o.type == VFIO_TYPE1_IOMMU ? "v1" : "v2");
	for (i = 0; i < o.nbackends; i++)
		fprintf(human, " %s", o.backends[i]);
	fprintf(human, "\n");

	if (o.latency_us) {
		ret = latprobe_start(&lp, o.latency_us);
		if (ret) {
			fprintf(stderr, "dma-bench: --latency: cannot start a SCHED_FIFO thread per "
				"CPU: %s (root, or CAP_SYS_NICE)\n", strerror(-ret));
			return 2;
		}
		/* What a wakeup costs with nothing else to do (once settled). */
		usleep(100000);
		latprobe_reset(&lp);
		usleep(500000);
		o.lat_floor_us = latprobe_max_ns(&lp) / 1e3;
		o.lp = &lp;
		fprintf(human, "# latency probe: every %ld us on %d CPUs, preempt=%s, floor %.0f us\n",
			o.latency_us, lp.ncpus, latprobe_preempt_model(), o.lat_floor_us);
	}
	for (i = 0; i < o.nmodes; i++) {
		if (o.modes[i] == MODE_BAR)
			ret = run_bar_mode(&o, i, &bad);
		else
			ret = run_mode(&o, o.modes[i], size, &bad);
		if (ret < 0)
			break;
	}
	if (o.lp)
		latprobe_stop(&lp);
	if (ret < 0)
		return 2;
	if (bad) {
		fprintf(stderr, "dma-bench: FAILED: leaks or failed ioctls above\n");
		return 1;
	}
	return 0;

bad_arg:
	fprintf(stderr, "dma-bench: bad argument '%s'\n", optarg);
	usage(stderr);
	return 2;
}
