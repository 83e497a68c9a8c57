// SPDX-License-Identifier: GPL-2.0-only
/*
 * vfio-smoke: the smallest real VFIO type1 round trip, for checking the guest
 * rig.  Opens /dev/vfio/vfio, attaches the first group of $VFIO_GROUPS, picks
 * VFIO_TYPE1v2_IOMMU (whichever backend is registered last serves it), maps
 * 64 MiB of anonymous memory at IOVA 1 GiB, unmaps it, prints "ok".
 * Build: gcc -static (the guest has no libc).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/vfio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define SZ (64UL << 20)

static void die(const char *what)
{
	fprintf(stderr, "vfio-smoke: %s: %s\n", what, strerror(errno));
	exit(1);
}

int main(void)
{
	const char *groups = getenv("VFIO_GROUPS");
	char path[64];
	int container, group;

	if (!groups || !*groups) {
		fprintf(stderr, "vfio-smoke: VFIO_GROUPS is not set\n");
		return 1;
	}
	snprintf(path, sizeof(path), "/dev/vfio/%d", atoi(groups));

	container = open("/dev/vfio/vfio", O_RDWR);
	if (container < 0)
		die("open /dev/vfio/vfio");
	if (ioctl(container, VFIO_GET_API_VERSION) != VFIO_API_VERSION)
		die("VFIO_GET_API_VERSION");
	if (ioctl(container, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU) <= 0)
		die("no VFIO_TYPE1v2_IOMMU");

	group = open(path, O_RDWR);
	if (group < 0)
		die(path);
	struct vfio_group_status st = { .argsz = sizeof(st) };
	if (ioctl(group, VFIO_GROUP_GET_STATUS, &st) || !(st.flags & VFIO_GROUP_FLAGS_VIABLE))
		die("group not viable");
	if (ioctl(group, VFIO_GROUP_SET_CONTAINER, &container))
		die("VFIO_GROUP_SET_CONTAINER");
	if (ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU))
		die("VFIO_SET_IOMMU");

	void *buf = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		die("mmap");
	struct vfio_iommu_type1_dma_map map = {
		.argsz = sizeof(map),
		.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
		.vaddr = (unsigned long)buf,
		.iova = 1UL << 30,
		.size = SZ,
	};
	if (ioctl(container, VFIO_IOMMU_MAP_DMA, &map))
		die("VFIO_IOMMU_MAP_DMA");
	struct vfio_iommu_type1_dma_unmap unmap = {
		.argsz = sizeof(unmap),
		.iova = 1UL << 30,
		.size = SZ,
	};
	if (ioctl(container, VFIO_IOMMU_UNMAP_DMA, &unmap))
		die("VFIO_IOMMU_UNMAP_DMA");
	if (unmap.size != SZ) {
		fprintf(stderr, "vfio-smoke: unmapped %llu bytes, wanted %lu\n",
			(unsigned long long)unmap.size, SZ);
		return 1;
	}
	printf("ok\n");
	return 0;
}
