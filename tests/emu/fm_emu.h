/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * fm_emu: a test-only emulated-IOMMU VFIO device (tests/emu/fm_emu.c).
 * The ioctls below are issued on the device fd that
 * VFIO_GROUP_GET_DEVICE_FD(FM_EMU_NAME) returns; they call the in-kernel
 * container API (vfio_pin_pages, vfio_unpin_pages, vfio_dma_rw) of
 * whichever IOMMU backend serves the container.  Shared by the module and
 * tests/t_emulated.c.
 */
#ifndef FM_EMU_H
#define FM_EMU_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define FM_EMU_NAME	"fm_emu"	/* platform device and vfio device name */
#define FM_EMU_NAME2	"fm_emu.1"	/* the second device (its own group) */
#define FM_EMU_MAX_RW	(16u << 20)	/* largest dma_rw buffer */
#define FM_EMU_MMAP_MAX	(64u << 10)	/* largest mmap of the device fd */

/*
 * vfio_pin_pages(iova, npage, prot). ret = its return value (npage or
 * -errno).  On success the module keeps the pin as one record (released by
 * FM_EMU_UNPIN with the same iova/npage, by a dma_unmap callback that
 * overlaps it, or when the device fd is closed) and, when sig is non-zero,
 * writes the first u64 of each pinned page (read through the struct page)
 * to the u64 array at sig, npage entries.  With tag != 0 it then stores tag
 * + i into the second u64 of page i (a write through the pinned page).
 */
struct fm_emu_pin {
	__u64 iova;
	__s32 npage;
	__s32 prot;		/* IOMMU_READ 1 | IOMMU_WRITE 2 */
	__u64 sig;		/* user pointer to __u64[npage] or 0 */
	__u64 tag;
	__s64 ret;
};

/* vfio_unpin_pages of a record pinned by FM_EMU_PIN; -ENOENT if none. */
struct fm_emu_unpin {
	__u64 iova;
	__s32 npage;
	__s32 pad;
};

/*
 * vfio_dma_rw(iova, buf, len, write) with a kernel buffer copied from/to
 * the user buffer at uaddr.  FM_EMU_RW_KTHREAD runs the call in a kworker
 * (no mm: the backend must borrow the mapping's mm).  FM_EMU_RW_NULL passes
 * a NULL kernel buffer.  ret = vfio_dma_rw's return value.
 */
#define FM_EMU_RW_WRITE		1u
#define FM_EMU_RW_KTHREAD	2u
#define FM_EMU_RW_NULL		4u
struct fm_emu_rw {
	__u64 iova;
	__u64 uaddr;
	__u64 len;
	__u32 flags;
	__u32 pad;
	__s64 ret;
};

struct fm_emu_stats {
	__u64 unmap_calls;	/* dma_unmap callbacks */
	__u64 last_unmap_iova;
	__u64 last_unmap_len;
	__u64 unmap_unpinned;	/* pages unpinned by dma_unmap callbacks */
	__u64 pinned_pages;	/* pages held now (sum over records) */
	__u64 records;		/* pin records held now */
	__u64 close_unpinned;	/* pages unpinned by close_device */
	__u64 opens;		/* open_device calls */
};

#define FM_EMU_TYPE	'F'
#define FM_EMU_PIN	_IOWR(FM_EMU_TYPE, 0xa0, struct fm_emu_pin)
#define FM_EMU_UNPIN	_IOW(FM_EMU_TYPE, 0xa1, struct fm_emu_unpin)
#define FM_EMU_RW	_IOWR(FM_EMU_TYPE, 0xa2, struct fm_emu_rw)
#define FM_EMU_STATS	_IOR(FM_EMU_TYPE, 0xa3, struct fm_emu_stats)

#endif
