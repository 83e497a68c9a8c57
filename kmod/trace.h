/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * foliomap tracepoints (events/foliomap/ in tracefs): where map and unmap
 * time goes, one event per mapping.
 *
 *   foliomap_map    a MAP_DMA mapping pinned, charged and mapped
 *   foliomap_unmap  a mapping taken out of the IOMMU and released
 *   foliomap_pin_chunk     a chunk of a MAP_DMA pinned in parallel, when
 *                          the caller took it: helped 1 when a helper
 *                          thread filled some of it; ns is the fills' time
 *   foliomap_pin_parallel  a MAP_DMA pinned in parallel: threads (the
 *                          caller and its helpers), chunks, batches the
 *                          caller filled again rather than wait for a
 *                          helper (takeovers), pages helpers pinned for
 *                          nothing (wasted)
 *
 * iova and size describe the mapping, pages = size / PAGE_SIZE; runs is the
 * number of physically contiguous runs the pin pipeline mapped (one
 * iommu_map() per run and domain) or the unmap pipeline released (one
 * unpin call each); ns is the time the pipeline took.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM foliomap

#if !defined(_FOLIOMAP_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _FOLIOMAP_TRACE_H

#include <linux/tracepoint.h>

DECLARE_EVENT_CLASS(foliomap_dma,
		    TP_PROTO(u64 iova, u64 size, unsigned long runs, u64 ns),
		    TP_ARGS(iova, size, runs, ns),
		    TP_STRUCT__entry(__field(u64, iova)
				     __field(u64, size)
				     __field(unsigned long, pages)
				     __field(unsigned long, runs)
				     __field(u64, ns)),
		    TP_fast_assign(__entry->iova = iova;
				   __entry->size = size;
				   __entry->pages = size >> PAGE_SHIFT;
				   __entry->runs = runs;
				   __entry->ns = ns;),
		    TP_printk("iova=0x%llx size=0x%llx pages=%lu runs=%lu ns=%llu",
			      __entry->iova, __entry->size, __entry->pages,
			      __entry->runs, __entry->ns));

DEFINE_EVENT(foliomap_dma, foliomap_map,
	     TP_PROTO(u64 iova, u64 size, unsigned long runs, u64 ns),
	     TP_ARGS(iova, size, runs, ns));

DEFINE_EVENT(foliomap_dma, foliomap_unmap,
	     TP_PROTO(u64 iova, u64 size, unsigned long runs, u64 ns),
	     TP_ARGS(iova, size, runs, ns));

TRACE_EVENT(foliomap_pin_chunk,
	    TP_PROTO(u64 iova, u64 size, bool helped, u64 ns),
	    TP_ARGS(iova, size, helped, ns),
	    TP_STRUCT__entry(__field(u64, iova)
			     __field(u64, size)
			     __field(unsigned int, helped)
			     __field(u64, ns)),
	    TP_fast_assign(__entry->iova = iova;
			   __entry->size = size;
			   __entry->helped = helped;
			   __entry->ns = ns;),
	    TP_printk("iova=0x%llx size=0x%llx helped=%u ns=%llu",
		      __entry->iova, __entry->size, __entry->helped, __entry->ns));

TRACE_EVENT(foliomap_pin_parallel,
	    TP_PROTO(u64 iova, u64 size, unsigned int threads, unsigned long chunks,
		     unsigned long takeovers, unsigned long wasted),
	    TP_ARGS(iova, size, threads, chunks, takeovers, wasted),
	    TP_STRUCT__entry(__field(u64, iova)
			     __field(u64, size)
			     __field(unsigned int, threads)
			     __field(unsigned long, chunks)
			     __field(unsigned long, takeovers)
			     __field(unsigned long, wasted)),
	    TP_fast_assign(__entry->iova = iova;
			   __entry->size = size;
			   __entry->threads = threads;
			   __entry->chunks = chunks;
			   __entry->takeovers = takeovers;
			   __entry->wasted = wasted;),
	    TP_printk("iova=0x%llx size=0x%llx threads=%u chunks=%lu takeovers=%lu wasted=%lu",
		      __entry->iova, __entry->size, __entry->threads, __entry->chunks,
		      __entry->takeovers, __entry->wasted));

#endif /* _FOLIOMAP_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE trace
#include <trace/define_trace.h>
