// SPDX-License-Identifier: GPL-2.0-only
/*
 * vmm-bench: start a VMM (QEMU with a vfio-pci device and -S), time how long
 * it takes until it answers QMP and how long it takes to exit after a QMP
 * "quit", and check that every pin it took is given back.
 *
 *   vmm-bench --qmp SOCK --ioctl-log FILE --shim SO --ram-mib N
 *             [--chroot DIR] [--backend B] [--backing K] [--gib G]
 *             [--kill] [--timeout SEC] -- QEMU [ARGS...]
 *
 * One run:
 *   1. fold the vmstat counters (/proc/sys/vm/stat_refresh) and note the pin
 *      counters (nr_foll_pin_acquired - nr_foll_pin_released), free hugepages
 *      and nr_mlock;
 *   2. t0 = CLOCK_MONOTONIC_RAW; fork; the child chroots to DIR (if given),
 *      sets LD_PRELOAD=SO (tools/vfio-ioctl-time.so, which logs every
 *      VFIO_IOMMU_MAP_DMA/UNMAP_DMA with its duration into FILE) and execs QEMU;
 *   3. connect to the QMP socket SOCK, read the greeting, qmp_capabilities,
 *      query-status; t_ready when its answer arrives. QEMU realizes vfio-pci
 *      and maps all guest RAM into the container during machine init, before
 *      its main loop serves QMP: checked from the ioctl log (the last MAP_DMA
 *      ended before t_ready) and from the VMM's VmLck (>= the RAM size);
 *   4. read the VMM's VmLck and the pins held, t_quit; send "quit"; waitpid;
 *      t_exit. Unmapping happens in the kernel when the exiting process closes
 *      the container, before waitpid returns;
 *   5. fold the counters again: pins and free hugepages must be back at their
 *      step-1 values (polled up to 3 s).
 * start_s = t_ready - t0, stop_s = t_exit - t_quit, ioctl_s = time inside
 * MAP_DMA + UNMAP_DMA ioctls (from the shim's log; QEMU maps the RAM at
 * vfio-pci realize, then at machine reset unmaps and remaps it in pieces
 * around the legacy ROM holes: ioctl_trace lists every call).
 * Parts: premap_s = t0 until the first MAP_DMA begins (exec, QEMU init,
 * RAM prealloc: no VFIO yet); map_to_ready_s = from there until t_ready;
 * exit_user_s = t_quit until QEMU's exit() (the shim's destructor);
 * exit_kernel_s = from there until waitpid returns (the kernel's exit:
 * mm teardown and the container release, which unmaps and unpins the RAM).
 * pin_leak_pages: pins not given back after the exit. locked_vm_leak_pages:
 * the VMM's VmLck just before quit minus the pages its MAP_DMAs pinned (type1
 * charges each pinned page to locked_vm; the mm is gone after the exit, so
 * this is the last moment it can be compared).
 *
 * --kill: no QMP; wait until the shim logs the start of a MAP_DMA of at least
 * half the RAM, SIGKILL the VMM, waitpid, then step 5.
 *
 * SOCK and FILE are opened both by us and by QEMU (inside DIR): the caller
 * makes them the same file (bench/guest-vmm bind-mounts the guest's /tmp into
 * the chroot). One JSON object on stdout; QEMU's output goes to stderr.
 * Exit status: 0 good, 1 a leak or a failed check, 2 setup or VMM failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vfio_util.h"

static const char *qmp_path, *log_path, *shim, *root, *backend = "", *backing = "";
static double gib;
static long ram_mib;
static int timeout_s = 300;
static bool kill_mode;
static pid_t vmm = -1;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };

	nanosleep(&ts, NULL);
}

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "vmm-bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (vmm > 0) {
		kill(vmm, SIGKILL);
		waitpid(vmm, NULL, 0);
	}
	exit(2);
}

struct counters {
	long long pins;		/* nr_foll_pin_acquired - nr_foll_pin_released */
	long long huge_free;	/* HugePages_Free */
	long long mlock;	/* nr_mlock */
};

static void counters(struct counters *c)
{
	vu_vmstat_refresh();
	c->pins = vu_read_key("/proc/vmstat", "nr_foll_pin_acquired") -
		  vu_read_key("/proc/vmstat", "nr_foll_pin_released");
	c->huge_free = vu_read_key("/proc/meminfo", "HugePages_Free");
	c->mlock = vu_read_key("/proc/vmstat", "nr_mlock");
}

/* The shim's log. */
struct ioctls {
	int n_map, n_unmap, open;	/* open: B lines without their E line */
	double map_s, unmap_s, last_map_end;
	double first_map_begin;		/* 0 if none */
	double exit_time;		/* the shim's destructor ran; 0 if not */
	long long mapped, unmapped;	/* bytes, successful calls */
	int failed;
	bool big_begun;			/* a MAP of >= half the RAM has begun */
	bool big_done;			/* ... and returned */
	char trace[1024];		/* "M@iova+MiB:seconds ..." */
};

static void read_log(struct ioctls *io)
{
	char line[256], op;
	unsigned long long iova, size;
	double t0, t1;
	int ret, err;
	FILE *f = fopen(log_path, "r");

	memset(io, 0, sizeof(*io));
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "B %c %llx %llu %lf", &op, &iova, &size, &t0) == 4) {
			io->open++;
			if (op == 'M' && !io->first_map_begin)
				io->first_map_begin = t0;
			if (op == 'M' && size >= (unsigned long long)ram_mib << 19)
				io->big_begun = true;
		} else if (sscanf(line, "X %lf", &t0) == 1) {
			io->exit_time = t0;
		} else if (sscanf(line, "E %c %llx %llu %lf %lf %d %d", &op, &iova, &size,
				  &t0, &t1, &ret, &err) == 7) {
			io->open--;
			size_t tl = strlen(io->trace);

			if (tl < sizeof(io->trace) - 64)
				snprintf(io->trace + tl, sizeof(io->trace) - tl, "%s%c@0x%llx+%lluK:%.6f%s",
					 tl ? " " : "", op, iova, size >> 10, t1 - t0, ret ? "!" : "");
			if (ret)
				io->failed++;
			if (op == 'M') {
				io->n_map++;
				io->map_s += t1 - t0;
				if (!ret)
					io->mapped += size;
				if (t1 > io->last_map_end)
					io->last_map_end = t1;
				if (size >= (unsigned long long)ram_mib << 19)
					io->big_done = true;
			} else {
				io->n_unmap++;
				io->unmap_s += t1 - t0;
				if (!ret)
					io->unmapped += size;
			}
		}
	}
	fclose(f);
}

/* QMP: one message a line. Returns the first line containing want. */
static char qbuf[65536];
static size_t qlen;

static char *qmp_read(int fd, const char *want, double deadline)
{
	static char line[65536];

	for (;;) {
		char *nl = memchr(qbuf, '\n', qlen);

		if (nl) {
			size_t n = nl - qbuf + 1;

			memcpy(line, qbuf, n);
			line[n] = 0;
			memmove(qbuf, qbuf + n, qlen - n);
			qlen -= n;
			if (strstr(line, "\"error\""))
				die("QMP error: %s", line);
			if (strstr(line, want))
				return line;
			continue;	/* an event */
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int ms = (int)((deadline - now()) * 1000);

		if (ms <= 0)
			die("no QMP answer within %d s", timeout_s);
		if (poll(&p, 1, ms < 100 ? ms : 100) < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t r = read(fd, qbuf + qlen, sizeof(qbuf) - 1 - qlen);

		if (r <= 0)
			die("QMP connection closed (VMM died?)");
		qlen += r;
	}
}

static void qmp_send(int fd, const char *cmd)
{
	size_t n = strlen(cmd);

	if (write(fd, cmd, n) != (ssize_t)n)
		die("QMP write: %s", strerror(errno));
}

static int qmp_connect(double deadline)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int status;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", qmp_path);
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			die("socket: %s", strerror(errno));
		if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			return fd;
		close(fd);
		if (waitpid(vmm, &status, WNOHANG) == vmm) {
			vmm = -1;
			die("the VMM exited (status 0x%x) before serving QMP", status);
		}
		if (now() > deadline)
			die("no QMP socket %s within %d s", qmp_path, timeout_s);
		sleep_s(0.0005);
	}
}

static long long vmlck_kb(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	return vu_read_key(path, "VmLck");
}

static long long smaps_kb(pid_t pid, const char *key)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pid);
	return vu_read_key(path, key);
}

/* Poll until the pins and free hugepages are back (or 3 s passed). */
static double settle(const struct counters *base, struct counters *after)
{
	double t0 = now();

	for (;;) {
		counters(after);
		if ((after->pins == base->pins && after->huge_free == base->huge_free) ||
		    now() - t0 > 3)
			return now() - t0;
		sleep_s(0.02);
	}
}

static void usage(void)
{
	fprintf(stderr,
"usage: vmm-bench --qmp SOCK --ioctl-log FILE --shim SO --ram-mib N [--chroot DIR]\n"
"                 [--backend B] [--backing K] [--gib G] [--kill] [--timeout SEC]\n"
"                 -- QEMU [ARGS...]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "qmp", 1, 0, 'q' }, { "ioctl-log", 1, 0, 'l' }, { "shim", 1, 0, 's' },
		{ "ram-mib", 1, 0, 'r' }, { "chroot", 1, 0, 'c' }, { "backend", 1, 0, 'b' },
		{ "backing", 1, 0, 'k' }, { "gib", 1, 0, 'g' }, { "kill", 0, 0, 'K' },
		{ "timeout", 1, 0, 't' }, { 0 }
	};
	struct counters base, held, after;
	struct ioctls io_ready, io;
	double t0, t_ready = 0, t_quit = 0, t_exit, deadline, settle_s;
	long long lck_ready = -1, lck_quit = -1, thp_kb = -1;
	bool killed_in_map = false, map_before_ready = true;
	const char *active;
	int c, status, qfd = -1, bad = 0;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'q': qmp_path = optarg; break;
		case 'l': log_path = optarg; break;
		case 's': shim = optarg; break;
		case 'r': ram_mib = atol(optarg); break;
		case 'c': root = optarg; break;
		case 'b': backend = optarg; break;
		case 'k': backing = optarg; break;
		case 'g': gib = atof(optarg); break;
		case 'K': kill_mode = true; break;
		case 't': timeout_s = atoi(optarg); break;
		default: usage();
		}
	}
	if (!qmp_path || !log_path || !shim || ram_mib <= 0 || optind >= argc)
		usage();
	active = access("/sys/module/foliomap", F_OK) ? "stock" : "foliomap";
	if (*backend && strcmp(backend, active))
		die("--backend %s but %s is the active type1 backend", backend, active);
	backend = active;
	unlink(qmp_path);
	unlink(log_path);

	counters(&base);
	fflush(NULL);
	t0 = now();
	vmm = fork();
	if (vmm < 0)
		die("fork: %s", strerror(errno));
	if (!vmm) {
		dup2(2, 1);
		if (root && (chroot(root) || chdir("/"))) {
			perror("vmm-bench: chroot");
			_exit(127);
		}
		setenv("LD_PRELOAD", shim, 1);
		setenv("VFIO_IOCTL_LOG", log_path, 1);
		execv(argv[optind], argv + optind);
		perror("vmm-bench: exec");
		_exit(127);
	}
	deadline = t0 + timeout_s;

	if (kill_mode) {
		/* SIGKILL as soon as the big MAP_DMA has begun. */
		for (;;) {
			read_log(&io);
			if (io.big_begun)
				break;
			if (waitpid(vmm, &status, WNOHANG) == vmm) {
				vmm = -1;
				die("the VMM exited (status 0x%x) before mapping its RAM", status);
			}
			if (now() > deadline)
				die("no RAM MAP_DMA within %d s", timeout_s);
			sleep_s(0.0002);
		}
		t_quit = now();
		kill(vmm, SIGKILL);
		if (waitpid(vmm, &status, 0) != vmm)
			die("waitpid: %s", strerror(errno));
		t_exit = now();
		vmm = -1;
		read_log(&io);
		/* The ioctl never returned: the kill landed inside MAP_DMA. */
		killed_in_map = !io.big_done;
		settle_s = settle(&base, &after);
		bad = after.pins != base.pins || after.huge_free != base.huge_free;
		printf("{\"kind\": \"kill\", \"backend\": \"%s\", \"backing\": \"%s\", \"gib\": %g, "
		       "\"killed_in_map\": %s, \"kill_to_exit_s\": %.6f, \"settle_s\": %.3f, "
		       "\"pin_leak_pages\": %lld, \"hugepages_leak\": %lld, \"mlock_diff_pages\": %lld, "
		       "\"ioctl_trace\": \"%s\"}\n",
		       backend, backing, gib, killed_in_map ? "true" : "false", t_exit - t_quit,
		       settle_s, after.pins - base.pins, base.huge_free - after.huge_free,
		       after.mlock - base.mlock, io.trace);
		return bad ? 1 : 0;
	}

	qfd = qmp_connect(deadline);
	qmp_read(qfd, "\"QMP\"", deadline);
	qmp_send(qfd, "{\"execute\": \"qmp_capabilities\"}\n");
	qmp_read(qfd, "\"return\"", deadline);
	qmp_send(qfd, "{\"execute\": \"query-status\"}\n");
	const char *st = qmp_read(qfd, "\"return\"", deadline);
	t_ready = now();
	if (!strstr(st, "prelaunch"))
		fprintf(stderr, "vmm-bench: unexpected status (not -S?): %s", st);

	lck_ready = vmlck_kb(vmm);
	thp_kb = smaps_kb(vmm, "AnonHugePages");
	counters(&held);
	read_log(&io_ready);
	if (io_ready.open || io_ready.last_map_end > t_ready || io_ready.mapped < ram_mib << 20) {
		map_before_ready = false;
		fprintf(stderr, "vmm-bench: RAM not fully mapped when QMP answered "
			"(%lld MiB mapped, %d ioctls open)\n", io_ready.mapped >> 20, io_ready.open);
	}

	lck_quit = vmlck_kb(vmm);
	t_quit = now();
	qmp_send(qfd, "{\"execute\": \"quit\"}\n");
	if (waitpid(vmm, &status, 0) != vmm)
		die("waitpid: %s", strerror(errno));
	t_exit = now();
	vmm = -1;
	close(qfd);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "vmm-bench: the VMM exited with status 0x%x\n", status);
		bad = 1;
	}
	settle_s = settle(&base, &after);
	read_log(&io);

	/* type1 charges every page it pins for a mapping to locked_vm. */
	long long lck_diff = lck_quit / 4 - (io_ready.mapped - io_ready.unmapped) / 4096;

	if (after.pins != base.pins || after.huge_free != base.huge_free) {
		fprintf(stderr, "vmm-bench: ERROR: %lld pins, %lld hugepages not given back\n",
			after.pins - base.pins, base.huge_free - after.huge_free);
		bad = 1;
	}
	if (lck_diff || lck_quit < ram_mib << 10) {
		fprintf(stderr, "vmm-bench: ERROR: VmLck %lld kB before quit, RAM %ld MiB, "
			"mapped %lld kB\n", lck_quit, ram_mib, (io_ready.mapped - io_ready.unmapped) >> 10);
		bad = 1;
	}
	if (!map_before_ready || io.failed)
		bad = 1;

	printf("{\"kind\": \"run\", \"backend\": \"%s\", \"backing\": \"%s\", \"gib\": %g, "
	       "\"start_s\": %.6f, \"stop_s\": %.6f, \"ioctl_s\": %.6f, "
	       "\"map_ioctl_s\": %.6f, \"unmap_ioctl_s\": %.6f, \"n_map\": %d, \"n_unmap\": %d, "
	       "\"mapped_kb\": %lld, \"vmlck_ready_kb\": %lld, \"vmlck_quit_kb\": %lld, "
	       "\"pins_held_pages\": %lld, \"anon_huge_kb\": %lld, \"hugepages_used\": %lld, "
	       "\"last_map_to_ready_s\": %.6f, \"map_before_ready\": %s, \"failed_ioctls\": %d, "
	       "\"settle_s\": %.3f, \"pin_leak_pages\": %lld, \"locked_vm_leak_pages\": %lld, "
	       "\"hugepages_leak\": %lld, \"mlock_diff_pages\": %lld, "
	       "\"premap_s\": %.6f, \"map_to_ready_s\": %.6f, \"exit_user_s\": %.6f, \"exit_kernel_s\": %.6f, "
	       "\"ioctl_trace\": \"%s\"}\n",
	       backend, backing, gib, t_ready - t0, t_exit - t_quit, io.map_s + io.unmap_s,
	       io.map_s, io.unmap_s, io.n_map, io.n_unmap, io_ready.mapped >> 10,
	       lck_ready, lck_quit, held.pins - base.pins, thp_kb, base.huge_free - held.huge_free,
	       t_ready - io_ready.last_map_end, map_before_ready ? "true" : "false", io.failed,
	       settle_s, after.pins - base.pins, lck_diff, base.huge_free - after.huge_free,
	       after.mlock - base.mlock, io_ready.first_map_begin - t0,
	       t_ready - io_ready.first_map_begin,
	       io.exit_time ? io.exit_time - t_quit : -1, io.exit_time ? t_exit - io.exit_time : -1,
	       io.trace);
	return bad;
}
