#!/bin/sh
# Ad-hoc: dma-bench's latency probe (50 us) beside 4 GiB populate maps,
# unmaps and closes, fair server as booted, with the number of times the
# mapping thread blocked in each step (map_sleeps, unmap_sleeps).
# Arguments: LOOPS (8).
repo=/work/main
loops=${1:-8}
mount -t debugfs none /sys/kernel/debug 2>/dev/null
fs=/sys/kernel/debug/sched/fair_server
for c in 0 1; do echo "# fair server: cpu$c runtime $(cat $fs/cpu$c/runtime) period $(cat $fs/cpu$c/period)"; done
for c in "" --unmap-by-close; do
	$repo/tools/dma-bench --gib 4 --modes populate --loops $loops \
		--backends stock,foliomap --switch-cmd $repo/bench/switch-backend \
		--latency=50 $c --json --label sleeps 2>/dev/null
done
echo "# pin_threads: $(cat /sys/module/foliomap/parameters/pin_threads 2>/dev/null)"
sh $repo/bench/switch-backend stock
