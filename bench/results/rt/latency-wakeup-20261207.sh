#!/bin/sh
# Ad-hoc: dma-bench's latency probe (50 us) beside 4 GiB populate maps,
# unmaps and closes, serial, fair server as booted, under the kernel's
# wakeup_rt tracer (function tracing off, sched and hard-interrupt events
# on) with tracing_thresh 1000 us: any wakeup of a real-time thread that
# waits 1 ms or more for its CPU is kept with the events between its wakeup
# and its switch-in (the latest such one). Repeats ROUNDS processes of
# LOOPS maps with UNMAP_DMA and LOOPS with close; after each, prints the
# kept trace if there is one and, with STOP=1 (default), stops there.
# Arguments: BACKENDS (foliomap) LOOPS (10) ROUNDS (6) STOP (1).
repo=/work/main
T=/sys/kernel/tracing
be=${1:-foliomap} loops=${2:-10} rounds=${3:-6} stop=${4:-1}
mount -t tracefs none $T 2>/dev/null
mount -t debugfs none /sys/kernel/debug 2>/dev/null
fs=/sys/kernel/debug/sched/fair_server
for c in 0 1; do echo "# fair server: cpu$c runtime $(cat $fs/cpu$c/runtime) period $(cat $fs/cpu$c/period)"; done
echo 16384 > $T/buffer_size_kb
echo 0 > $T/options/function-trace
for e in sched/sched_switch sched/sched_wakeup sched/sched_waking sched/sched_migrate_task \
	 irq/irq_handler_entry irq/irq_handler_exit; do
	echo 1 > $T/events/$e/enable
done
echo 1000 > $T/tracing_thresh
echo wakeup_rt > $T/current_tracer
echo "# tracer: $(cat $T/current_tracer), thresh $(cat $T/tracing_thresh) us"
r=0
while [ $r -lt $rounds ]; do
	r=$((r + 1))
	for c in "" --unmap-by-close; do
		echo 0 > $T/tracing_max_latency
		$repo/tools/dma-bench --gib 4 --modes populate --loops $loops --backends $be \
			--switch-cmd $repo/bench/switch-backend --latency=50 $c --json \
			--label "wakeup-$r" 2>/dev/null
		lat=$(cat $T/tracing_max_latency)
		echo "# round $r ${c:-unmap}: wakeup_rt max latency $lat us"
		if [ "$lat" -ge 1000 ]; then
			echo "== trace of the stall"
			# Tracing off while reading, or a new wait replaces this one.
			echo 0 > $T/tracing_on
			cat $T/trace
			echo 1 > $T/tracing_on
			[ "$stop" = 1 ] || continue
			r=$rounds
			break
		fi
	done
done
echo nop > $T/current_tracer
echo "# pin_threads: $(cat /sys/module/foliomap/parameters/pin_threads 2>/dev/null)"
sh $repo/bench/switch-backend stock
