/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * fm_emu's kernel differences (Debian 6.1 and 6.12), kept out of fm_emu.c.
 *
 *   FM_EMU_HAVE_IOMMUFD_OPS  vfio_device_ops has bind_iommufd/unbind_iommufd/
 *                            attach_ioas and the vfio_iommufd_emulated_*
 *                            helpers exist (6.2)
 *   FM_EMU_HAVE_DETACH_IOAS  ... and detach_ioas (6.6)
 *   FM_EMU_RELEASE_MUST_FREE vfio_device_ops.release is mandatory and must
 *                            call vfio_free_device() (before 6.2; later the
 *                            core frees the device itself)
 *   FM_EMU_PLATFORM_REMOVE() the platform_driver member for a void remove
 *                            callback: .remove from 6.11, .remove_new before
 *   FM_EMU_VM_FLAGS_SET()    set vma flags in an mmap handler: vm_flags_set()
 *                            from 6.3, a plain write before
 */
#ifndef FM_EMU_COMPAT_H
#define FM_EMU_COMPAT_H

#include <linux/version.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 1, 0)
#error "fm_emu needs Linux 6.1 or later (vfio_alloc_device)"
#endif

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 2, 0)
#define FM_EMU_HAVE_IOMMUFD_OPS
#else
#define FM_EMU_RELEASE_MUST_FREE
#endif
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 6, 0)
#define FM_EMU_HAVE_DETACH_IOAS
#endif

/* Initializer of the remove callback in struct platform_driver. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
#define FM_EMU_PLATFORM_REMOVE(fn)	.remove = (fn)
#else
#define FM_EMU_PLATFORM_REMOVE(fn)	.remove_new = (fn)
#endif

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
#define FM_EMU_VM_FLAGS_SET(vma, flags)	vm_flags_set(vma, flags)
#else
#define FM_EMU_VM_FLAGS_SET(vma, flags)	((vma)->vm_flags |= (flags))
#endif

#endif /* FM_EMU_COMPAT_H */
