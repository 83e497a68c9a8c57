/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Small VFIO helpers shared by dma-bench and the tests: containers, groups,
 * MAP/UNMAP wrappers that return -errno, memory of each kind the benchmark
 * and tests use, and the pin/locked-memory counters that must balance.
 */
#ifndef FOLIOMAP_VFIO_UTIL_H
#define FOLIOMAP_VFIO_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/vfio.h>

/* Open /dev/vfio/vfio and check the API version; -errno on failure. */
int vu_container_open(void);
/* Open /dev/vfio/<group>, check it is viable, add it to container. */
int vu_group_attach(int container, int group);
/* VFIO_SET_IOMMU; type is VFIO_TYPE1_IOMMU or VFIO_TYPE1v2_IOMMU. */
int vu_set_iommu(int container, int type);
/* Container with the given groups attached and the IOMMU type set. */
int vu_container_setup(const int *groups, int ngroups, int type, int *group_fds);

int vu_map(int container, uint64_t iova, void *vaddr, uint64_t size, uint32_t flags);
/* Returns -errno; *unmapped (if not NULL) receives the size the kernel reported. */
int vu_unmap(int container, uint64_t iova, uint64_t size, uint32_t flags,
	     uint64_t *unmapped);

/* Groups and PCI addresses exported by vm/run (VFIO_GROUPS, VFIO_BDFS). */
int vu_env_groups(int *groups, int max);
int vu_env_bdfs(char bdfs[][32], int max);
/* IOMMU group number of a PCI device such as 0000:00:03.0, or -errno. */
int vu_group_of_bdf(const char *bdf);

/*
 * The IOMMU that translates for the VFIO groups, from the units listed in
 * /sys/class/iommu: dmar* (Intel VT-d), ivhd* (AMD-Vi), smmu3.* (Arm
 * SMMUv3). VU_IOMMU_NONE: no unit at all; VU_IOMMU_OTHER: units of another
 * driver, or of two kinds.
 */
enum vu_iommu {
	VU_IOMMU_NONE,
	VU_IOMMU_INTEL,
	VU_IOMMU_AMD,
	VU_IOMMU_SMMUV3,
	VU_IOMMU_OTHER,
};
enum vu_iommu vu_iommu_kind(void);
const char *vu_iommu_name(enum vu_iommu kind);

/*
 * One line of /sys/kernel/iommu_groups/<N>/reserved_regions: an inclusive
 * range and its type ("direct", "direct-relaxable", "reserved", "msi").
 */
struct vu_resv {
	uint64_t start;
	uint64_t end;
	char type[24];
};
/* Up to max regions of the group, in the file's order (by start): count or -errno. */
int vu_group_resv_regions(int group, struct vu_resv *r, int max);
/*
 * The usable IOVA ranges of a container with its IOMMU set, from
 * VFIO_IOMMU_GET_INFO's IOVA-range capability: up to max of them into r
 * (may be NULL with max 0), the number the kernel reports, or -errno
 * (-ENOENT: no such capability).
 */
int vu_iova_ranges(int container, struct vfio_iova_range *r, int max);

/* Memory kinds, as in the seed's benchmark. */
enum vu_mem_kind {
	VU_MEM_THP,		/* private anonymous + MADV_HUGEPAGE */
	VU_MEM_POPULATE,	/* MAP_SHARED anonymous + MAP_POPULATE: 4K shmem */
	VU_MEM_HUGETLB2M,	/* 2M hugetlbfs pages */
	VU_MEM_HUGETLB1G,	/* 1G hugetlbfs pages */
	VU_MEM_MEMFD,		/* memfd_create, shared mapping */
	VU_MEM_MEMFD2M,		/* memfd_create(MFD_HUGETLB | MFD_HUGE_2MB), shared */
	VU_MEM_MEMFD1G,		/* memfd_create(MFD_HUGETLB | MFD_HUGE_1GB), shared */
	VU_MEM_NKINDS,
};
const char *vu_mem_name(enum vu_mem_kind kind);
int vu_mem_parse(const char *name, enum vu_mem_kind *kind);
/*
 * Map size bytes of the kind and fault in every page (one write a page).
 * Returns NULL with errno set; hugetlb kinds try to reserve pages first.
 */
void *vu_mem_alloc(enum vu_mem_kind kind, size_t size);
void vu_mem_free(void *p, size_t size);
/* Make sure n free hugepages of size_kb exist (writes nr_hugepages). */
int vu_hugepages_reserve(unsigned long size_kb, unsigned long n);
/*
 * A hugetlbfs memfd (MFD_CLOEXEC | MFD_HUGETLB and the page size: 2048 kB
 * or 1048576 kB) of size bytes (a multiple of the page size), with that
 * many free hugepages reserved first; nothing is faulted in. Returns the
 * fd, or -errno. vu_memfd2m_create() is the 2M one.
 */
int vu_memfd_huge_create(size_t size, unsigned long page_kb);
int vu_memfd2m_create(size_t size);
/*
 * Never-touched memory, NULL with errno on failure: vu_thp_map() private
 * anonymous, 2M-aligned, MADV_HUGEPAGE; vu_memfd2m_map() a MAP_SHARED
 * mapping of a vu_memfd2m_create() memfd (whose fd it closes: the mapping
 * holds the file, munmap frees it). vu_mem_alloc() faults them in.
 */
void *vu_thp_map(size_t size);
/*
 * madvise(MADV_HUGEPAGE or MADV_NOHUGEPAGE) where the kernel has THP; a
 * kernel without (Debian's PREEMPT_RT flavour) maps 4K pages anyway and
 * refuses the advice with EINVAL: 0 there.
 */
bool vu_have_thp(void);
int vu_madvise_thp(void *p, size_t len, int advice);
void *vu_memfd2m_map(size_t size);
/* The same with 1G pages (what QEMU's hugetlbsize=1G memfd backend maps). */
void *vu_memfd1g_map(size_t size);
/* Private hugetlbfs (2048 or 1048576 kB pages), the pages reserved first. */
void *vu_hugetlb_map(size_t size, unsigned long page_kb);

/* Counters that every test and benchmark loop checks for balance. */
struct vu_counters {
	long long foll_pin_acquired;	/* /proc/vmstat nr_foll_pin_acquired */
	long long foll_pin_released;	/* /proc/vmstat nr_foll_pin_released */
	long long vmlck_kb;		/* VmLck of this process */
};
/*
 * Calls vu_vmstat_refresh() first, or a balanced run could look like a leak
 * of a few dozen pages.
 */
int vu_counters_read(struct vu_counters *c);
/* Pages pinned and still not released since "before" (may be negative). */
long long vu_pins_outstanding(const struct vu_counters *before,
			      const struct vu_counters *after);

/* The number after "key:" (or "key ") in a /proc file such as meminfo; -1 if absent. */
long long vu_read_key(const char *path, const char *key);
/*
 * Fold the per-cpu vmstat deltas (/proc/sys/vm/stat_refresh, root only) so
 * that /proc/vmstat's pin counters are exact; best effort.
 */
void vu_vmstat_refresh(void);
/* A number read from or written to a sysfs/procfs file; -1 / -errno on failure. */
long long vu_read_number(const char *path);
int vu_write_number(const char *path, long long v);
/*
 * The directory @up levels above the running program's own (for
 * tests/bin/t_x, 0 is tests/bin and 2 the repository) into @buf: 0, or
 * -errno when /proc/self/exe cannot be read (@buf is then empty).
 */
int vu_exe_dir(char *buf, size_t len, int up);
/*
 * Insert the kernel module in the file at @path (init_module): 0 when
 * inserted, -EEXIST when a module of that name is loaded already, -errno.
 */
int vu_module_insert(const char *path);
/* Reference count of a loaded module (each open container holds one), or -1. */
long vu_module_refcnt(const char *mod);

/* Currently active backend, from /sys/module: "foliomap" or "stock". */
const char *vu_backend_name(void);
/*
 * Make want ("stock" or "foliomap") the active backend by running
 * "sh cmd want" (bench/switch-backend) unless it already is, then check
 * /sys/module. 0, or -errno with the reason on stderr (prefixed by prog).
 */
int vu_switch_backend(const char *prog, const char *cmd, const char *want);

double vu_now(void);	/* CLOCK_MONOTONIC_RAW seconds */
/* min, median, max and mean of n values (NAN for n == 0); the median alone (0 for n == 0). */
void vu_stats(const double *v, int n, double *min, double *med, double *max, double *avg);
double vu_median(const double *v, int n);

#endif
