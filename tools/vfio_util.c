// SPDX-License-Identifier: GPL-2.0-only
/* Shared VFIO helpers for dma-bench and the tests; see vfio_util.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vfio_util.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#define MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26)	/* MFD_HUGE_SHIFT, linux/memfd.h */
#endif
#ifndef MFD_HUGE_1GB
#define MFD_HUGE_1GB (30U << 26)
#endif

int vu_container_open(void)
{
	int fd = open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (ioctl(fd, VFIO_GET_API_VERSION) != VFIO_API_VERSION) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

int vu_group_attach(int container, int group)
{
	struct vfio_group_status st = { .argsz = sizeof(st) };
	char path[64];
	int fd, err;

	snprintf(path, sizeof(path), "/dev/vfio/%d", group);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, VFIO_GROUP_GET_STATUS, &st) < 0)
		goto fail;
	if (!(st.flags & VFIO_GROUP_FLAGS_VIABLE)) {
		errno = EBUSY;
		goto fail;
	}
	if (ioctl(fd, VFIO_GROUP_SET_CONTAINER, &container) < 0)
		goto fail;
	return fd;
fail:
	err = -errno;
	close(fd);
	return err;
}

int vu_set_iommu(int container, int type)
{
	return ioctl(container, VFIO_SET_IOMMU, type) < 0 ? -errno : 0;
}

int vu_container_setup(const int *groups, int ngroups, int type, int *group_fds)
{
	int c = vu_container_open();
	int i, err;

	if (c < 0)
		return c;
	for (i = 0; i < ngroups; i++) {
		group_fds[i] = vu_group_attach(c, groups[i]);
		if (group_fds[i] < 0) {
			err = group_fds[i];
			goto fail;
		}
		if (i == 0) {
			err = vu_set_iommu(c, type);
			if (err) {
				i++;
				goto fail;
			}
		}
	}
	return c;
fail:
	while (i-- > 0)
		if (group_fds[i] >= 0)
			close(group_fds[i]);
	close(c);
	return err;
}

int vu_map(int container, uint64_t iova, void *vaddr, uint64_t size, uint32_t flags)
{
	struct vfio_iommu_type1_dma_map m = {
		.argsz = sizeof(m),
		.flags = flags,
		.vaddr = (uintptr_t)vaddr,
		.iova = iova,
		.size = size,
	};

	return ioctl(container, VFIO_IOMMU_MAP_DMA, &m) < 0 ? -errno : 0;
}

int vu_unmap(int container, uint64_t iova, uint64_t size, uint32_t flags,
	     uint64_t *unmapped)
{
	struct vfio_iommu_type1_dma_unmap u = {
		.argsz = sizeof(u),
		.flags = flags,
		.iova = iova,
		.size = size,
	};
	int ret = ioctl(container, VFIO_IOMMU_UNMAP_DMA, &u) < 0 ? -errno : 0;

	if (unmapped)
		*unmapped = u.size;
	return ret;
}

int vu_env_groups(int *groups, int max)
{
	const char *s = getenv("VFIO_GROUPS");
	int n = 0;
	char *end;

	while (s && *s && n < max) {
		long v = strtol(s, &end, 10);

		if (end == s)
			break;
		groups[n++] = (int)v;
		s = end;
		while (*s == ' ')
			s++;
	}
	return n;
}

int vu_env_bdfs(char bdfs[][32], int max)
{
	const char *s = getenv("VFIO_BDFS");
	int n = 0;

	while (s && *s && n < max) {
		size_t len = strcspn(s, " ");

		if (len && len < 32) {
			memcpy(bdfs[n], s, len);
			bdfs[n++][len] = '\0';
		}
		s += len;
		while (*s == ' ')
			s++;
	}
	return n;
}

int vu_group_of_bdf(const char *bdf)
{
	char path[PATH_MAX], link[PATH_MAX];
	ssize_t len;
	char *base;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/iommu_group", bdf);
	len = readlink(path, link, sizeof(link) - 1);
	if (len < 0)
		return -errno;
	link[len] = '\0';
	base = strrchr(link, '/');
	return base ? atoi(base + 1) : -EINVAL;
}

enum vu_iommu vu_iommu_kind(void)
{
	enum vu_iommu kind = VU_IOMMU_NONE, k;
	DIR *d = opendir("/sys/class/iommu");
	struct dirent *e;

	if (!d)
		return VU_IOMMU_NONE;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (!strncmp(e->d_name, "dmar", 4))
			k = VU_IOMMU_INTEL;
		else if (!strncmp(e->d_name, "ivhd", 4))
			k = VU_IOMMU_AMD;
		else if (!strncmp(e->d_name, "smmu3.", 6))
			k = VU_IOMMU_SMMUV3;
		else
			k = VU_IOMMU_OTHER;
		/* units of two kinds: no single fault format or aperture */
		kind = kind == VU_IOMMU_NONE || kind == k ? k : VU_IOMMU_OTHER;
	}
	closedir(d);
	return kind;
}

const char *vu_iommu_name(enum vu_iommu kind)
{
	switch (kind) {
	case VU_IOMMU_INTEL:
		return "intel";
	case VU_IOMMU_AMD:
		return "amd";
	case VU_IOMMU_SMMUV3:
		return "smmuv3";
	case VU_IOMMU_NONE:
		return "none";
	default:
		return "other";
	}
}

int vu_group_resv_regions(int group, struct vu_resv *r, int max)
{
	char path[96], line[160];
	unsigned long long s, e;
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/iommu_groups/%d/reserved_regions", group);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		struct vu_resv tmp;

		if (sscanf(line, "%llx %llx %23s", &s, &e, tmp.type) != 3 || s > e) {
			fclose(f);
			return -EINVAL;
		}
		if (n < max) {
			r[n].start = s;
			r[n].end = e;
			strcpy(r[n].type, tmp.type);
		}
		n++;
	}
	fclose(f);
	return n <= max ? n : -E2BIG;
}

int vu_iova_ranges(int container, struct vfio_iova_range *r, int max)
{
	struct vfio_iommu_type1_info probe = { .argsz = sizeof(probe) };
	struct vfio_iommu_type1_info *info;
	struct vfio_iommu_type1_info_cap_iova_range *cap = NULL;
	uint32_t off, i, guard = 0;
	int ret;

	/* the first call says how large the capability chain is */
	if (ioctl(container, VFIO_IOMMU_GET_INFO, &probe) < 0)
		return -errno;
	if (!(probe.flags & VFIO_IOMMU_INFO_CAPS) || probe.argsz <= sizeof(probe))
		return -ENOENT;
	info = calloc(1, probe.argsz);
	if (!info)
		return -ENOMEM;
	info->argsz = probe.argsz;
	if (ioctl(container, VFIO_IOMMU_GET_INFO, info) < 0) {
		ret = -errno;
		goto out;
	}
	for (off = info->cap_offset; off && guard++ < 32;) {
		struct vfio_info_cap_header *h = (void *)((char *)info + off);

		if (off + sizeof(*h) > info->argsz)
			break;
		if (h->id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE) {
			cap = (void *)h;
			break;
		}
		off = h->next;
	}
	if (!cap || off + sizeof(*cap) + (uint64_t)cap->nr_iovas * sizeof(*r) > info->argsz) {
		ret = -ENOENT;
		goto out;
	}
	for (i = 0; i < cap->nr_iovas && i < (uint32_t)max; i++)
		r[i] = cap->iova_ranges[i];
	ret = cap->nr_iovas;
out:
	free(info);
	return ret;
}

static const char *const mem_names[VU_MEM_NKINDS] = {
	[VU_MEM_THP] = "thp",
	[VU_MEM_POPULATE] = "populate",
	[VU_MEM_HUGETLB2M] = "hugetlb2m",
	[VU_MEM_HUGETLB1G] = "hugetlb1g",
	[VU_MEM_MEMFD] = "memfd",
	[VU_MEM_MEMFD2M] = "memfd2m",
	[VU_MEM_MEMFD1G] = "memfd1g",
};

const char *vu_mem_name(enum vu_mem_kind kind)
{
	return kind < VU_MEM_NKINDS ? mem_names[kind] : "?";
}

int vu_mem_parse(const char *name, enum vu_mem_kind *kind)
{
	int i;

	for (i = 0; i < VU_MEM_NKINDS; i++) {
		if (!strcmp(name, mem_names[i])) {
			*kind = i;
			return 0;
		}
	}
	return -EINVAL;
}

long long vu_read_key(const char *path, const char *key)
{
	char line[256];
	size_t klen = strlen(key);
	long long v = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, klen) &&
		    (line[klen] == ' ' || line[klen] == ':' || line[klen] == '\t')) {
			char *p = line + klen;

			while (*p == ':' || *p == ' ' || *p == '\t')
				p++;
			v = strtoll(p, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

int vu_write_number(const char *path, long long v)
{
	FILE *f = fopen(path, "w");
	int ret;

	if (!f)
		return -errno;
	ret = fprintf(f, "%lld\n", v) < 0 ? -EIO : 0;
	if (fclose(f) && !ret)
		ret = -errno;
	return ret;
}

long long vu_read_number(const char *path)
{
	long long v = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

long vu_module_refcnt(const char *mod)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/module/%s/refcnt", mod);
	return (long)vu_read_number(path);
}

int vu_hugepages_reserve(unsigned long size_kb, unsigned long n)
{
	char free_path[192], nr_path[192];
	long long free_pages, total;

	snprintf(free_path, sizeof(free_path),
		 "/sys/kernel/mm/hugepages/hugepages-%lukB/free_hugepages", size_kb);
	snprintf(nr_path, sizeof(nr_path),
		 "/sys/kernel/mm/hugepages/hugepages-%lukB/nr_hugepages", size_kb);
	free_pages = vu_read_number(free_path);
	total = vu_read_number(nr_path);
	if (free_pages < 0 || total < 0)
		return -ENOENT;
	if (free_pages >= (long long)n)
		return 0;
	if (vu_write_number(nr_path, total + (n - free_pages)))
		return -EPERM;
	return vu_read_number(free_path) >= (long long)n ? 0 : -ENOMEM;
}

int vu_memfd_huge_create(size_t size, unsigned long page_kb)
{
	size_t page = (size_t)page_kb << 10;
	int fd, err;

	if ((page_kb != 2048 && page_kb != 1048576) || !size || size % page)
		return -EINVAL;
	err = vu_hugepages_reserve(page_kb, size / page);
	if (err)
		return err;
	fd = memfd_create(page_kb == 2048 ? "foliomap-2m" : "foliomap-1g",
			  MFD_CLOEXEC | MFD_HUGETLB |
			  (page_kb == 2048 ? MFD_HUGE_2MB : MFD_HUGE_1GB));
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, size)) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int vu_memfd2m_create(size_t size)
{
	return vu_memfd_huge_create(size, 2048);
}

void *vu_thp_map(size_t size)
{
	char *p = mmap(NULL, size + (2UL << 20), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t a;
	size_t head;

	if (p == MAP_FAILED)
		return NULL;
	/* 2M-align so every folio can be a THP. */
	a = ((uintptr_t)p + (2UL << 20) - 1) & ~((2UL << 20) - 1);
	head = a - (uintptr_t)p;
	if (head)
		munmap(p, head);
	munmap((char *)a + size, (2UL << 20) - head);
	vu_madvise_thp((void *)a, size, MADV_HUGEPAGE);
	return (void *)a;
}

bool vu_have_thp(void)
{
	return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
}

int vu_madvise_thp(void *p, size_t len, int advice)
{
	return vu_have_thp() ? madvise(p, len, advice) : 0;
}

static void *memfd_huge_map(size_t size, unsigned long page_kb)
{
	int fd = vu_memfd_huge_create(size, page_kb), err;
	void *p;

	if (fd < 0) {
		errno = -fd;
		return NULL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	err = errno;
	close(fd);
	errno = err;
	return p == MAP_FAILED ? NULL : p;
}

void *vu_memfd2m_map(size_t size)
{
	return memfd_huge_map(size, 2048);
}

void *vu_memfd1g_map(size_t size)
{
	return memfd_huge_map(size, 1048576);
}

void *vu_hugetlb_map(size_t size, unsigned long page_kb)
{
	size_t page = (size_t)page_kb << 10;
	void *p;
	int err;

	if ((page_kb != 2048 && page_kb != 1048576) || !size || size % page) {
		errno = EINVAL;
		return NULL;
	}
	err = vu_hugepages_reserve(page_kb, size / page);
	if (err) {
		errno = -err;
		return NULL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB |
		 (page_kb == 2048 ? MAP_HUGE_2MB : MAP_HUGE_1GB), -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void *vu_mem_alloc(enum vu_mem_kind kind, size_t size)
{
	int prot = PROT_READ | PROT_WRITE;
	size_t step = 4096, off;
	void *p = MAP_FAILED;
	int fd, err;

	switch (kind) {
	case VU_MEM_THP:
		p = vu_thp_map(size);
		if (!p)
			return NULL;
		break;
	case VU_MEM_POPULATE:
		p = mmap(NULL, size, prot, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		break;
	case VU_MEM_HUGETLB2M:
	case VU_MEM_HUGETLB1G:
		step = kind == VU_MEM_HUGETLB2M ? 2UL << 20 : 1UL << 30;
		p = vu_hugetlb_map(size, step >> 10);
		if (!p)
			return NULL;
		break;
	case VU_MEM_MEMFD:
		fd = memfd_create("foliomap", MFD_CLOEXEC);
		if (fd < 0)
			return NULL;
		if (ftruncate(fd, size) == 0)
			p = mmap(NULL, size, prot, MAP_SHARED, fd, 0);
		err = errno;
		close(fd);
		errno = err;
		break;
	case VU_MEM_MEMFD2M:
	case VU_MEM_MEMFD1G:
		step = kind == VU_MEM_MEMFD2M ? 2UL << 20 : 1UL << 30;
		p = kind == VU_MEM_MEMFD2M ? vu_memfd2m_map(size) : vu_memfd1g_map(size);
		if (!p)
			return NULL;
		break;
	default:
		errno = EINVAL;
		return NULL;
	}
	if (p == MAP_FAILED)
		return NULL;
	/* One write a page: faulting dominates under TCG, memset is slower. */
	for (off = 0; off < size; off += step)
		((volatile char *)p)[off] = 1;
	return p;
}

void vu_mem_free(void *p, size_t size)
{
	if (p)
		munmap(p, size);
}

void vu_vmstat_refresh(void)
{
	int fd = open("/proc/sys/vm/stat_refresh", O_WRONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = write(fd, "1\n", 2);

		(void)n;	/* best effort: without root they are merely less exact */
		close(fd);
	}
}

int vu_counters_read(struct vu_counters *c)
{
	vu_vmstat_refresh();
	c->foll_pin_acquired = vu_read_key("/proc/vmstat", "nr_foll_pin_acquired");
	c->foll_pin_released = vu_read_key("/proc/vmstat", "nr_foll_pin_released");
	c->vmlck_kb = vu_read_key("/proc/self/status", "VmLck");
	if (c->foll_pin_acquired < 0 || c->foll_pin_released < 0 || c->vmlck_kb < 0)
		return -ENOENT;
	return 0;
}

long long vu_pins_outstanding(const struct vu_counters *before,
			      const struct vu_counters *after)
{
	return (after->foll_pin_acquired - after->foll_pin_released) -
	       (before->foll_pin_acquired - before->foll_pin_released);
}

const char *vu_backend_name(void)
{
	return access("/sys/module/foliomap", F_OK) == 0 ? "foliomap" : "stock";
}

int vu_switch_backend(const char *prog, const char *cmd, const char *want)
{
	char *argv[4];
	int status, err;
	pid_t pid;

	if (!strcmp(vu_backend_name(), want))
		return 0;
	if (!cmd) {
		fprintf(stderr, "%s: backend %s wanted, %s active, and no --switch-cmd\n",
			prog, want, vu_backend_name());
		return -EINVAL;
	}
	/*
	 * posix_spawn(), not fork(): a fork write-protects every anonymous
	 * page of the caller for copy-on-write, so the next MAP_DMA of the
	 * benchmark's buffer would start with a write fault per THP that
	 * no VMM pays (QEMU keeps guest RAM out of fork with
	 * MADV_DONTFORK) and that hides the pinning being measured.
	 */
	fflush(NULL);
	argv[0] = "sh";
	argv[1] = (char *)cmd;
	argv[2] = (char *)want;
	argv[3] = NULL;
	err = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ);
	if (err)
		return -err;
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "%s: '%s %s' failed (status 0x%x)\n", prog, cmd, want, status);
		return -EIO;
	}
	if (strcmp(vu_backend_name(), want)) {
		fprintf(stderr, "%s: '%s %s' ran but %s is still active\n",
			prog, cmd, want, vu_backend_name());
		return -EIO;
	}
	return 0;
}

double vu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int vu_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void vu_stats(const double *v, int n, double *min, double *med, double *max, double *avg)
{
	double *s = n > 0 ? malloc(n * sizeof(*s)) : NULL;
	double sum = 0;
	int i;

	if (!s) {
		*min = *med = *max = *avg = NAN;
		return;
	}
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), vu_cmp_double);
	for (i = 0; i < n; i++)
		sum += s[i];
	*min = s[0];
	*max = s[n - 1];
	*med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	*avg = sum / n;
	free(s);
}

double vu_median(const double *v, int n)
{
	double min, med, max, avg;

	vu_stats(v, n, &min, &med, &max, &avg);
	return isnan(med) ? 0 : med;
}

int vu_exe_dir(char *buf, size_t len, int up)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	char *slash;
	int i;

	if (n < 0) {
		buf[0] = 0;
		return -errno;
	}
	buf[n] = 0;
	for (i = 0; i <= up; i++) {
		slash = strrchr(buf, '/');
		if (slash)
			*slash = 0;
	}
	return 0;
}

int vu_module_insert(const char *path)
{
	struct stat st;
	void *img;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	img = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (img == MAP_FAILED)
		return -errno;
	ret = syscall(SYS_init_module, img, (unsigned long)st.st_size, "") ? -errno : 0;
	munmap(img, st.st_size);
	return ret;
}
