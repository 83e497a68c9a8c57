// SPDX-License-Identifier: GPL-2.0-only
/*
 * fm_serve: which IOMMU driver serves a new VFIO container? Opens a type1v2
 * container with the first group of VFIO_GROUPS, maps and unmaps 2 MiB
 * through it, and prints the module whose reference count the container
 * took: "foliomap" or "vfio_iommu_type1" (or "none: <reason>", exit 1).
 * A helper for tests/host/dkms-guest.sh (not a TAP program).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../tools/vfio_util.h"

int main(void)
{
	static const char *mods[] = { "foliomap", "vfio_iommu_type1" };
	long before[2], after[2];
	int groups[8], gfd, c, i, n;
	const char *who = NULL;
	size_t sz = 2 << 20;
	char *p;

	n = vu_env_groups(groups, 8);
	if (n < 1) {
		printf("none: no VFIO_GROUPS\n");
		return 1;
	}
	for (i = 0; i < 2; i++)
		before[i] = vu_module_refcnt(mods[i]);
	c = vu_container_setup(groups, 1, VFIO_TYPE1v2_IOMMU, &gfd);
	if (c < 0) {
		printf("none: container setup failed: %s\n", strerror(-c));
		return 1;
	}
	for (i = 0; i < 2; i++) {
		after[i] = vu_module_refcnt(mods[i]);
		if (before[i] >= 0 && after[i] == before[i] + 1)
			who = mods[i];
	}
	p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		 -1, 0);
	if (p == MAP_FAILED || vu_map(c, 1 << 30, p, sz, VFIO_DMA_MAP_FLAG_READ |
				      VFIO_DMA_MAP_FLAG_WRITE) ||
	    vu_unmap(c, 1 << 30, sz, 0, NULL)) {
		printf("none: map/unmap through the container failed: %s\n", strerror(errno));
		return 1;
	}
	printf("%s\n", who ? who : "none: no module reference taken");
	close(c);
	close(gfd);
	return who ? 0 : 1;
}
