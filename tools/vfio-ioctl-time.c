// SPDX-License-Identifier: GPL-2.0-only
/*
 * vfio-ioctl-time.so: LD_PRELOAD shim that times a process's
 * VFIO_IOMMU_MAP_DMA and VFIO_IOMMU_UNMAP_DMA ioctls.
 *
 * Used by bench/vmm to time what a real VMM (QEMU) spends in those ioctls.
 * Every other ioctl goes straight to libc. For each MAP/UNMAP it appends two
 * lines to the file named by $VFIO_IOCTL_LOG (O_APPEND, one write(2) a line,
 * so nothing is buffered and a SIGKILLed process leaves a complete log):
 *
 *   B M|U <iova> <size> <t_begin>                      before the ioctl
 *   E M|U <iova> <size> <t_begin> <t_end> <ret> <errno> after it
 *
 *   X <t>                                              at exit(), in the
 *                                                      shim's destructor
 *
 * Times are CLOCK_MONOTONIC_RAW seconds (the same clock as vmm-bench), sizes
 * bytes (for UNMAP, E's size is the size the kernel reports unmapped). A B
 * line without its E line is an ioctl the process never returned from.
 *
 * Built as a shared object against the host's libc (it is loaded into the
 * host's dynamically linked QEMU, which the benchmark runs in a chroot of the
 * host's root file system inside the guest).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <linux/vfio.h>

static int (*real_ioctl)(int, unsigned long, ...);
static int log_fd = -2;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void log_line(const char *buf, int len)
{
	if (log_fd == -2) {
		const char *path = getenv("VFIO_IOCTL_LOG");

		log_fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
	}
	if (log_fd >= 0 && len > 0) {
		ssize_t r = write(log_fd, buf, len);

		(void)r;
	}
}

int ioctl(int fd, unsigned long req, ...)
{
	unsigned long long iova, size;
	int ret, err, len;
	double t0, t1;
	char op, buf[192];
	void *arg;
	va_list ap;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real_ioctl)
		real_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
	if (req != VFIO_IOMMU_MAP_DMA && req != VFIO_IOMMU_UNMAP_DMA)
		return real_ioctl(fd, req, arg);

	if (req == VFIO_IOMMU_MAP_DMA) {
		struct vfio_iommu_type1_dma_map *m = arg;

		op = 'M';
		iova = m->iova;
		size = m->size;
	} else {
		struct vfio_iommu_type1_dma_unmap *u = arg;

		op = 'U';
		iova = u->iova;
		size = u->size;
	}
	t0 = now();
	len = snprintf(buf, sizeof(buf), "B %c 0x%llx %llu %.9f\n", op, iova, size, t0);
	log_line(buf, len);
	t0 = now();
	ret = real_ioctl(fd, req, arg);
	t1 = now();
	err = ret < 0 ? errno : 0;
	if (op == 'U' && ret == 0)
		size = ((struct vfio_iommu_type1_dma_unmap *)arg)->size;
	len = snprintf(buf, sizeof(buf), "E %c 0x%llx %llu %.9f %.9f %d %d\n",
		       op, iova, size, t0, t1, ret, err);
	log_line(buf, len);
	if (ret < 0)
		errno = err;
	return ret;
}

/*
 * The process's last user-space moment (exit(): shared-object destructors
 * run after main has returned and after the atexit handlers): what follows
 * until the parent's waitpid returns is the kernel's exit (mm teardown, the
 * VFIO container's release: unmap and unpin of everything still mapped).
 */
__attribute__((destructor)) static void at_exit_time(void)
{
	char buf[64];
	int len;

	if (log_fd == -1 || (log_fd == -2 && !getenv("VFIO_IOCTL_LOG")))
		return;
	len = snprintf(buf, sizeof(buf), "X %.9f\n", now());
	log_line(buf, len);
}
