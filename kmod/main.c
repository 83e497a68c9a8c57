// SPDX-License-Identifier: GPL-2.0-only
/*
 * foliomap: module entry points, parameters and the driver-ops table.
 *
 * The VFIO core offers a new container to the most recently registered
 * IOMMU driver that accepts its type, so loading foliomap after the stock
 * vfio_iommu_type1 makes it serve every container opened from then on;
 * unloading it hands new containers back to stock. Containers already open
 * keep their driver (the core holds a module reference for each).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/limits.h>
#include <linux/module.h>
#include <linux/moduleparam.h>

#include "foliomap.h"
#include "inject.h"

bool fm_allow_unsafe_interrupts;
module_param_named(allow_unsafe_interrupts, fm_allow_unsafe_interrupts, bool, 0644);
MODULE_PARM_DESC(allow_unsafe_interrupts,
		 "Accept groups whose MSIs are not isolated (no interrupt remapping): a device could then inject interrupts (default: no)");

bool fm_disable_hugepages;
module_param_named(disable_hugepages, fm_disable_hugepages, bool, 0644);
MODULE_PARM_DESC(disable_hugepages,
		 "Map every page separately, never as an IOMMU superpage (default: no)");

unsigned int fm_dma_entry_limit __read_mostly = U16_MAX;
module_param_named(dma_entry_limit, fm_dma_entry_limit, uint, 0644);
MODULE_PARM_DESC(dma_entry_limit,
		 "Maximum number of user DMA mappings per container, read when it is opened (default: 65535)");

/*
 * Serial on PREEMPT_RT: there a helper costs more than it saves when no
 * CPU is free for it (a first touch of 4 KiB shmem 1.3% slower with one
 * than without in a deterministic guest, bench/results/NOTES.md), and an
 * RT host keeps its CPUs for its real-time tasks. pin_threads=-1 asks for
 * helpers.
 */
int fm_pin_threads = IS_ENABLED(CONFIG_PREEMPT_RT) ? 0 : -1;
module_param_named(pin_threads, fm_pin_threads, int, 0644);
MODULE_PARM_DESC(pin_threads,
		 "Helper kernel threads that pin a large MAP_DMA with the caller: 0 off, -1 one fewer than the CPUs the caller may run on (at most 15) (default: -1, 0 on PREEMPT_RT)");

unsigned int fm_pin_parallel_min_mb = 64;
module_param_named(pin_parallel_min_mb, fm_pin_parallel_min_mb, uint, 0644);
MODULE_PARM_DESC(pin_parallel_min_mb,
		 "Smallest MAP_DMA, in MiB, that helper threads pin in parallel (default: 64)");

const struct vfio_iommu_driver_ops fm_driver_ops = {
	.name			= "foliomap",
	.owner			= THIS_MODULE,
	.open			= fm_open,
	.release		= fm_release,
	.ioctl			= fm_ioctl,
	.attach_group		= fm_attach_group,
	.detach_group		= fm_detach_group,
	.pin_pages		= fm_pin_pages,
	.unpin_pages		= fm_unpin_pages,
	.register_device	= fm_register_device,
	.unregister_device	= fm_unregister_device,
	.dma_rw			= fm_dma_rw,
	.group_iommu_domain	= fm_group_iommu_domain,
#ifdef FM_HAVE_DRIVER_OPS_NOTIFY
	.notify			= fm_notify,
#endif
};

static int __init fm_init(void)
{
	int ret;

	fm_debugfs_init();
	ret = fm_inject_init();
	if (ret)
		goto out_debugfs;
	ret = fm_par_init();
	if (ret)
		goto out_inject;
	ret = vfio_register_iommu_driver(&fm_driver_ops);
	if (ret)
		goto out_par;

	pr_info("serving new VFIO type1 containers; rmmod foliomap returns them to vfio_iommu_type1\n");
	return 0;

out_par:
	fm_par_exit();
out_inject:
	fm_inject_exit();
out_debugfs:
	fm_debugfs_exit();
	return ret;
}

static void __exit fm_exit(void)
{
	vfio_unregister_iommu_driver(&fm_driver_ops);
	fm_par_exit();
	fm_inject_exit();
	fm_debugfs_exit();
}

module_init(fm_init);
module_exit(fm_exit);

MODULE_LICENSE("GPL");
MODULE_AUTHOR("foliomap developers");
MODULE_DESCRIPTION("VFIO type1 IOMMU backend that pins, maps and unmaps whole folios");
MODULE_VERSION("0.4.0");	/* = PACKAGE_VERSION in dkms.conf */
/*
 * No MODULE_SOFTDEP("pre: vfio_iommu_type1"), although stock must load
 * first: "modprobe -r foliomap" would then remove stock too when no
 * container uses it, leaving no type1 driver at all instead of handing new
 * containers back to stock. The ordering lives in
 * /etc/modprobe.d/foliomap.conf (foliomap-modprobe.conf here).
 */
