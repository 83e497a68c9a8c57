// SPDX-License-Identifier: GPL-2.0-only
/*
 * A GPU-sized BAR: the ivshmem BAR of vm/run --ivshmem 64G (tests/check
 * boots every guest so; a BAR under 16 GiB SKIPs), device memory that is
 * looked up, never pinned.
 *
 *  - bigbar_whole_watchdog: the whole BAR mapped and unmapped with the
 *    soft-lockup watchdog at its tightest (watchdog_thresh 1: a CPU that
 *    does not schedule for 2 s is reported, and vm/run fails the guest on
 *    the report, as on an RCU stall). Stock looks the BAR up one pfn at a
 *    time, 23 s for 64 GiB under TCG. Stock 6.1/6.12 also unmaps it one
 *    pfn at a time without a preemption point (upstream's fix came with
 *    commit bc78c90728cd): 1.4 s for 64 GiB on x86, 3.3 s on arm64 under
 *    TCG, so stock there gets watchdog_thresh 5 (reported from 10 s on).
 *  - bigbar_killed_mid_map: a child maps the BAR twice over (128 GiB of
 *    IOVA in one MAP_DMA) and is SIGKILLed 10 ms into the ioctl: it dies,
 *    its container goes (the backend's module reference with it), and the
 *    group maps the BAR's first GiB again in a new container. foliomap
 *    stops at the signal; stock finishes the map first (about 46 s). On
 *    7.x both map it in about a millisecond: the child is killed holding
 *    the mapping (the test says which).
 */
#define TH_TIMEOUT	600	/* stock's lookups, 23 s per 64 GiB under TCG */
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "common.h"
#include "edu.h"

#define BIG_MIN		(16ULL << 30)
#define BIG_IOVA	(64ULL << 30)	/* 1G-aligned: 1G leaves where the BAR allows */
#define ALIASES		2
#define WATCHDOG	"/proc/sys/kernel/watchdog_thresh"

/* The tightest threshold the backend under test holds (see above). */
static int bigbar_watchdog_thresh(void)
{
	return is_foliomap() || th_stock_upstream_type1() ? 1 : 5;
}

struct bigbar {
	int c, gfd, dev;
	char *bar;
	size_t size;
};

/*
 * Container @c gets the ivshmem group and type1 v2; the BAR is mmapped @n times back to
 * back, 1G-aligned, and touched once per GiB: vfio-pci maps an aligned
 * range with 1G leaves (6.12 on) or all of it at the first fault (6.1). A
 * read of every page would have the emulator back all of it with host
 * memory. Exits the process on failure when @child.
 */
static int bigbar_open(struct th *t, int c, struct bigbar *b, int n, bool child)
{
	const char *bdf = getenv("VFIO_IVSHMEM_BDF");
	struct vfio_region_info r = { .argsz = sizeof(r), .index = VFIO_PCI_BAR2_REGION_INDEX };
	char *res, *p;
	size_t off;
	int g, i;

	if (!bdf || !*bdf)
		return -ENODEV;
	g = vu_group_of_bdf(bdf);
	b->c = c;
	b->gfd = vu_group_attach(c, g);
	if (g < 0 || b->gfd < 0)
		return -EIO;
	/* A device fd needs the container's IOMMU set. */
	if (ioctl(c, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU))
		return -EIO;
	b->dev = ioctl(b->gfd, VFIO_GROUP_GET_DEVICE_FD, bdf);
	if (b->dev < 0 || ioctl(b->dev, VFIO_DEVICE_GET_REGION_INFO, &r) < 0)
		return -EIO;
	if (r.size < BIG_MIN)
		return -ENOSPC;
	b->size = r.size;
	res = mmap(NULL, n * r.size + SZ_1G, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (res == MAP_FAILED)
		return -ENOMEM;
	p = (char *)(((uintptr_t)res + SZ_1G - 1) & ~(uintptr_t)(SZ_1G - 1));
	for (i = 0; i < n; i++)
		if (mmap(p + i * r.size, r.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			 b->dev, r.offset) == MAP_FAILED)
			return -errno;
	if (!child)
		th_own_mem(t, res, n * r.size + SZ_1G);
	b->bar = p;
	for (off = 0; off < n * r.size; off += SZ_1G)
		(void)*(volatile char *)(p + off);
	return 0;
}

/* The BAR in container @c, or SKIP/FAIL. */
static void bigbar_setup(struct th *t, int c, struct bigbar *b, int n)
{
	int err = bigbar_open(t, c, b, n, false);

	if (err == -ENODEV)
		SKIP("no ivshmem device (vm/run --ivshmem 64G sets VFIO_IVSHMEM_BDF)");
	if (err == -ENOSPC)
		SKIP("the ivshmem BAR is under 16 GiB (vm/run --ivshmem 64G)");
	if (err)
		FAIL("ivshmem BAR: %s", strerror(-err));
	th_own_fd(t, b->gfd);
	th_own_fd(t, b->dev);
	th_bus_master(t, b->dev);
}

/* An empty v2 container served by the backend under test. */
static int bigbar_container(struct th *t, long *ref)
{
	const char *mod = th_backend_module();
	int c = vu_container_open();

	ASSERT_GE(c, 0);
	th_own_fd(t, c);
	*ref = vu_module_refcnt(mod);
	return c;
}

TEST(bigbar_whole_watchdog)
{
	long long thresh = vu_read_number(WATCHDOG);
	struct bigbar b;
	long ref;
	int c = bigbar_container(t, &ref);
	double t0, t1, t2;
	int err;

	bigbar_setup(t, c, &b, 1);
	ASSERT_EQ(vu_module_refcnt(th_backend_module()), ref + 1);
	if (thresh < 0)
		SKIP("no soft-lockup watchdog (%s)", WATCHDOG);
	ASSERT_EQ(vu_write_number(WATCHDOG, bigbar_watchdog_thresh()), 0);

	t0 = vu_now();
	err = vu_map(c, BIG_IOVA, b.bar, b.size, RW);
	t1 = vu_now();
	if (!err)
		err = vu_unmap(c, BIG_IOVA, b.size, 0, NULL);
	t2 = vu_now();
	vu_write_number(WATCHDOG, thresh);
	ASSERT_EQ(err, 0);
	th_diag("%zu GiB BAR: map %.4f s, unmap %.4f s (watchdog_thresh %d)", b.size >> 30,
		t1 - t0, t2 - t1, bigbar_watchdog_thresh());
	EXPECT_PINS_VMLCK(0, 0);
	EXPECT_EQ(th_dma_avail(c), th_param_read("dma_entry_limit"));
	/* nothing is left at the IOVA: its first GiB maps again */
	MAP_OK(c, BIG_IOVA, b.bar, SZ_1G);
	UNMAP_OK(c, BIG_IOVA, SZ_1G);
}

/* The child: its own container and BAR, one MAP_DMA, then waits to be killed. */
static void killed_child(struct th *t, int ready_fd, int done_fd)
{
	struct bigbar b;
	int c = vu_container_open();
	char x = 'r';

	int err = c < 0 ? -EIO : bigbar_open(t, c, &b, ALIASES, true);

	if (err)
		_exit(err == -ENODEV || err == -ENOSPC ? 2 : 5);
	if (write(ready_fd, &x, 1) != 1)
		_exit(3);
	x = vu_map(c, BIG_IOVA, b.bar, ALIASES * b.size, RW) ? 'e' : 'd';
	if (write(done_fd, &x, 1) != 1)
		_exit(4);
	/* A map faster than the parent's delay (7.x): killed holding it. */
	for (;;)
		pause();
}

/* @pid's system time in clock ticks (/proc/PID/stat field 15), or -1. */
static long long child_stime(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long v = 0;
	int i, n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	p = strrchr(buf, ')');	/* after comm, which may hold spaces */
	if (!p)
		return -1;
	/* Field 3 (state) is the first after ") "; stime is field 15. */
	for (i = 3, p += 2; i < 15 && p; i++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	if (!p || sscanf(p, "%llu", &v) != 1)
		return -1;
	return v;
}

TEST(bigbar_killed_mid_map)
{
	const char *mod = th_backend_module();
	int ready[2], done[2], st;
	struct bigbar b;
	long ref0 = vu_module_refcnt(mod);
	long long stime0;
	int i, in_kernel = 0, returned;
	double t0;
	char x = 0;
	pid_t pid;

	ASSERT_EQ(pipe(ready), 0);
	ASSERT_EQ(pipe(done), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (!pid)
		killed_child(t, ready[1], done[1]);
	close(ready[1]);
	close(done[1]);
	if (read(ready[0], &x, 1) != 1) {
		waitpid(pid, &st, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 2)
			SKIP("no ivshmem BAR of 16 GiB or more (vm/run --ivshmem 64G)");
		FAIL("the child failed to set up (status 0x%x)", st);
	}
	/*
	 * The kill must land inside the ioctl: after the child's kernel time
	 * grew past what it had at "ready" (its only syscall since is the
	 * MAP_DMA; ticks credit it while it runs there), and before the map
	 * returned (nothing on @done after its death).
	 */
	stime0 = child_stime(pid);
	ASSERT_GE(stime0, 0);
	for (i = 0; i < 50000; i++) {
		struct pollfd pfd = { .fd = done[0], .events = POLLIN };

		if (poll(&pfd, 1, 0) > 0)
			break;		/* the map returned first */
		if (child_stime(pid) > stime0) {
			in_kernel = 1;
			break;
		}
		usleep(200);
	}
	t0 = mono_now();
	ASSERT_EQ(kill(pid, SIGKILL), 0);
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	returned = read(done[0], &x, 1) == 1;
	th_diag("the %d x BAR MAP_DMA %s; the child died %.3f s after the kill", ALIASES,
		returned ? "had returned before the kill" : in_kernel ?
		"was running when killed" : "had not started (no kernel time yet)", mono_now() - t0);
	close(ready[0]);
	close(done[0]);
	/* The child's container is gone, and the group serves a new one. */
	EXPECT_EQ(th_module_refcnt_back(mod, ref0), ref0);
	EXPECT_PINS_VMLCK(0, 0);
	{
		long ref;
		int c = bigbar_container(t, &ref);

		bigbar_setup(t, c, &b, 1);
		MAP_OK(c, BIG_IOVA, b.bar, SZ_1G);
		UNMAP_OK(c, BIG_IOVA, SZ_1G);
	}
	/* Checked last: a kernel whose whole map is faster than a tick (7.x). */
	if (returned)
		SKIP("the %d x BAR MAP_DMA returned before the child had a tick of kernel time:"
		     " no kill can land inside it here", ALIASES);
	EXPECT_TRUE(in_kernel);
}

TEST_HARNESS_MAIN
