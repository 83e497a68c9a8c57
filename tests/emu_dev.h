/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The test module tests/emu/fm_emu.ko from a test program: loading it
 * (bin/fm_emu-<uname -r>.ko next to the program; main() calls
 * emu_module_load() and emu_module_unload()), a container holding its
 * device's group, and its ioctls (emu/fm_emu.h). Used by t_emulated and
 * t_failnth.
 */
#ifndef FOLIOMAP_TESTS_EMU_DEV_H
#define FOLIOMAP_TESTS_EMU_DEV_H

#include <limits.h>
#include <sys/syscall.h>
#include <sys/utsname.h>

#include "common.h"
#include "emu/fm_emu.h"

static bool emu_inserted;

/* ------------------------------------------------------------------ */
/* module and device */

/* tests/bin/fm_emu-<release>.ko, beside the running program. */
static inline int emu_module_path(char *path, size_t len)
{
	char dir[PATH_MAX];
	struct utsname u;
	int ret = vu_exe_dir(dir, sizeof(dir), 0);

	if (ret)
		return ret;
	if (uname(&u))
		return -errno;
	snprintf(path, len, "%s/fm_emu-%s.ko", dir, u.release);
	return 0;
}

static inline int emu_module_load(void)
{
	char path[PATH_MAX + 128];
	int ret;

	if (access("/sys/module/fm_emu", F_OK) == 0)
		return 0;
	ret = emu_module_path(path, sizeof(path));
	if (ret)
		return ret;
	ret = vu_module_insert(path);
	if (ret == -EEXIST)
		ret = 0;
	else if (!ret)
		emu_inserted = true;
	if (ret)
		fprintf(stderr, "fm_emu: %s: %s (make -C tests)\n", path, strerror(-ret));
	return ret;
}

static inline void emu_module_unload(void)
{
	if (emu_inserted && syscall(SYS_delete_module, "fm_emu", O_NONBLOCK))
		fprintf(stderr, "fm_emu: delete_module: %s\n", strerror(errno));
}

/* IOMMU group number of an emulated device (FM_EMU_NAME or FM_EMU_NAME2). */
static inline int emu_group_of(struct th *t, const char *name)
{
	char link[PATH_MAX], path[PATH_MAX], *slash;
	ssize_t n;

	snprintf(path, sizeof(path), "/sys/bus/platform/devices/%s/iommu_group", name);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		FAIL("%s has no iommu_group (module not loaded?): %s", name, strerror(errno));
	link[n] = 0;
	slash = strrchr(link, '/');
	return atoi(slash ? slash + 1 : link);
}

static inline int emu_group(struct th *t)
{
	return emu_group_of(t, FM_EMU_NAME);
}

struct emu {
	int c;			/* container */
	int dev;		/* fm_emu device fd */
	int egfd;		/* emulated group fd */
	int ngfd;		/* e1000e group fd or -1 */
};

/*
 * Container of the given type with the emulated group and, with nic, the
 * first e1000e group (attached first: it sets the IOMMU up).
 */
static inline void emu_setup(struct th *t, struct emu *e, int type, bool nic)
{
	int groups[2], gfds[2], n = 0;

	if (nic)
		th_e1000e_groups(t, &groups[n++], 1);
	groups[n++] = emu_group(t);
	e->c = th_container_of(t, type, groups, n, gfds);
	e->ngfd = nic ? gfds[0] : -1;
	e->egfd = gfds[n - 1];
	e->dev = ioctl(e->egfd, VFIO_GROUP_GET_DEVICE_FD, FM_EMU_NAME);
	if (e->dev < 0)
		FAIL("VFIO_GROUP_GET_DEVICE_FD(%s): %s", FM_EMU_NAME, strerror(errno));
	th_own_fd(t, e->dev);
}

static inline void emu_v2(struct th *t, struct emu *e, bool nic)
{
	emu_setup(t, e, VFIO_TYPE1v2_IOMMU, nic);
}

static inline long long emu_pin_sig(struct th *t, struct emu *e, uint64_t iova, int npage,
			     int prot, uint64_t *sig, uint64_t tag)
{
	struct fm_emu_pin p = {
		.iova = iova, .npage = npage, .prot = prot,
		.sig = (uintptr_t)sig, .tag = tag,
	};

	if (ioctl(e->dev, FM_EMU_PIN, &p))
		FAIL("FM_EMU_PIN: %s", strerror(errno));
	return p.ret;
}

static inline long long emu_pin(struct th *t, struct emu *e, uint64_t iova, int npage, int prot)
{
	return emu_pin_sig(t, e, iova, npage, prot, NULL, 0);
}

static inline void emu_unpin(struct th *t, struct emu *e, uint64_t iova, int npage)
{
	struct fm_emu_unpin u = { .iova = iova, .npage = npage };

	if (ioctl(e->dev, FM_EMU_UNPIN, &u))
		FAIL("FM_EMU_UNPIN(0x%llx, %d): %s", (unsigned long long)iova, npage,
		     strerror(errno));
}

static inline long long emu_rw(struct th *t, int dev, uint64_t iova, void *buf, uint64_t len,
			unsigned int flags)
{
	struct fm_emu_rw r = { .iova = iova, .uaddr = (uintptr_t)buf, .len = len,
			       .flags = flags };

	if (ioctl(dev, FM_EMU_RW, &r))
		FAIL("FM_EMU_RW: %s", strerror(errno));
	return r.ret;
}

static inline struct fm_emu_stats emu_stats(struct th *t, struct emu *e)
{
	struct fm_emu_stats s;

	if (ioctl(e->dev, FM_EMU_STATS, &s))
		FAIL("FM_EMU_STATS: %s", strerror(errno));
	return s;
}

#endif /* FOLIOMAP_TESTS_EMU_DEV_H */
