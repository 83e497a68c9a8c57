/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Every difference between the kernels foliomap supports lives here, and
 * nothing else does. The rest of the module calls the fm_compat_*() helpers
 * and tests the FM_HAVE_* macros defined below.
 */
#ifndef _FOLIOMAP_COMPAT_H
#define _FOLIOMAP_COMPAT_H

#include <linux/version.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 12, 0) || \
	LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
#error "foliomap supports Linux 6.12 (Debian 12 backports); this kernel is not supported"
#endif

#endif /* _FOLIOMAP_COMPAT_H */
