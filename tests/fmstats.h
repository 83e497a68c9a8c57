/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * foliomap's per-container counters in debugfs (<debugfs>/foliomap/<id>/
 * stats), for the tests that read them: debugfs or tracefs mounted on
 * demand, the newest container's id, one counter by name; and foliomap's
 * helper threads, wherever they are.
 */
#ifndef FOLIOMAP_TESTS_FMSTATS_H
#define FOLIOMAP_TESTS_FMSTATS_H

#include <dirent.h>
#include <sys/mount.h>

#include "common.h"

#define DEBUGFS		"/sys/kernel/debug"
#define TRACEFS		"/sys/kernel/tracing"
#define FM_DEBUGFS	DEBUGFS "/foliomap"

static inline void th_mount(struct th *t, const char *type, const char *dir)
{
	char probe[256];

	snprintf(probe, sizeof(probe), "%s/%s", dir,
		 strcmp(type, "tracefs") ? "foliomap" : "trace");
	if (access(probe, F_OK) == 0)
		return;
	if (mount(type, dir, type, 0, NULL) && errno != EBUSY)
		FAIL("mount -t %s %s: %s", type, dir, strerror(errno));
}

/* The highest numbered container directory (the newest), 0 if none. */
static inline int newest_container(struct th *t)
{
	DIR *d = opendir(FM_DEBUGFS);
	struct dirent *e;
	int id = 0;

	if (!d)
		FAIL("%s: %s", FM_DEBUGFS, strerror(errno));
	while ((e = readdir(d)))
		if (atoi(e->d_name) > id)
			id = atoi(e->d_name);
	closedir(d);
	return id;
}

/* One counter of container @id, -1 if missing. */
static inline long long stat_of(int id, const char *name)
{
	char path[128], key[64];
	long long v, ret = -1;
	FILE *f;

	snprintf(path, sizeof(path), FM_DEBUGFS "/%d/stats", id);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fscanf(f, "%63s %lld", key, &v) == 2)
		if (!strcmp(key, name))
			ret = v;
	fclose(f);
	return ret;
}

/* The comm of foliomap's helper threads (threads of the mapping process). */
#define FM_HELPER_COMM	"foliomap-pin"

/*
 * Threads whose comm starts with FM_HELPER_COMM, in any process
 * (/proc/<pid>/task/<tid>/comm), once more than none is found: a helper
 * is reaped by a kernel worker right after the MAP_DMA that started it
 * (kmod/parallel.c), so it is given up to 5 s to go. -1 if /proc cannot
 * be read.
 */
static inline int fm_helpers_count(void)
{
	char path[600], comm[64];
	struct dirent *e, *te;
	DIR *d = opendir("/proc"), *td;
	int n = 0;
	FILE *f;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/task", e->d_name);
		td = opendir(path);
		if (!td)
			continue;	/* gone meanwhile */
		while ((te = readdir(td))) {
			if (te->d_name[0] < '0' || te->d_name[0] > '9')
				continue;
			snprintf(path, sizeof(path), "/proc/%s/task/%s/comm", e->d_name, te->d_name);
			f = fopen(path, "r");
			if (!f)
				continue;
			if (fgets(comm, sizeof(comm), f) &&
			    !strncmp(comm, FM_HELPER_COMM, strlen(FM_HELPER_COMM)))
				n++;
			fclose(f);
		}
		closedir(td);
	}
	closedir(d);
	return n;
}

static inline int fm_helpers_alive(void)
{
	int n, i;

	for (i = 0; (n = fm_helpers_count()) > 0 && i < 500; i++)
		usleep(10000);
	return n;
}

#endif
