#!/bin/sh
# Ad-hoc: dma-bench's latency probe (50 us) beside 4 GiB populate map /
# unmap / close, with 6.12's fair server as booted and with it off.
repo=/work/main
mount -t debugfs none /sys/kernel/debug 2>/dev/null
fs=/sys/kernel/debug/sched/fair_server
for state in ${TL_STATES:-on off}; do
	for c in 0 1; do
		[ $state = off ] && echo 0 > $fs/cpu$c/runtime
		echo "# fair server $state: cpu$c runtime $(cat $fs/cpu$c/runtime)" >&2
	done
	for c in "" --unmap-by-close; do
		$repo/tools/dma-bench --gib ${TL_GIB:-4} --modes populate --loops ${TL_LOOPS:-5} \
			--backends stock,foliomap --switch-cmd $repo/bench/switch-backend \
			--latency=50 $c --json --label "fs-$state" 2>/dev/null
	done
done
sh $repo/bench/switch-backend stock
