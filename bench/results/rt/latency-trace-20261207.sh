#!/bin/sh
# Ad-hoc: dma-bench's latency probe (50 us) beside 4 GiB populate maps,
# with the scheduler's events traced and the trace buffer snapshotted at
# each new largest probe wakeup latency (a hist trigger's onmax().snapshot(),
# Documentation/trace/histogram.rst): what ran on the probe's CPU between
# its wakeup and its switch-in. Fair server as booted.
# Arguments: BACKENDS (stock,foliomap) LOOPS (8).
repo=/work/main
T=/sys/kernel/tracing
be=${1:-stock,foliomap} loops=${2:-8}
mount -t tracefs none $T 2>/dev/null
mount -t debugfs none /sys/kernel/debug 2>/dev/null
fs=/sys/kernel/debug/sched/fair_server
for c in 0 1; do echo "# fair server: cpu$c runtime $(cat $fs/cpu$c/runtime) period $(cat $fs/cpu$c/period)"; done
echo "# pin_threads: $(cat /sys/module/foliomap/parameters/pin_threads 2>/dev/null || echo 'not loaded yet')"
echo 8192 > $T/buffer_size_kb
echo > $T/trace
for e in sched/sched_switch sched/sched_waking sched/sched_wakeup sched/sched_migrate_task \
	 irq/irq_handler_entry irq/softirq_entry timer/hrtimer_expire_entry \
	 workqueue/workqueue_execute_start; do
	echo 1 > $T/events/$e/enable
done
# The probe threads are dma-bench's SCHED_FIFO 99 ones: kernel prio 0.
echo 'hist:keys=pid:ts0=common_timestamp.usecs if comm=="dma-bench" && prio==0' \
	> $T/events/sched/sched_waking/trigger
echo 'hist:keys=next_pid:lat=common_timestamp.usecs-$ts0:onmax($lat).save(prev_comm,prev_pid,prev_prio,prev_state):onmax($lat).snapshot() if next_comm=="dma-bench" && next_prio==0' \
	> $T/events/sched/sched_switch/trigger
echo 1 > $T/tracing_on
$repo/tools/dma-bench --gib 4 --modes populate --loops $loops --backends $be \
	--switch-cmd $repo/bench/switch-backend --latency=50 --json --label trace 2>/dev/null
echo 0 > $T/tracing_on
echo "# pin_threads: $(cat /sys/module/foliomap/parameters/pin_threads 2>/dev/null)"
echo "== hist"
cat $T/events/sched/sched_switch/hist | grep -v '^#' | grep -v '^$' | head -20
echo "== snapshot: the events of the largest wakeup latency, last 40 ms before it"
# The largest latency ends with the probe's switch-in, the snapshot's last
# such event; print everything on that CPU in the 40 ms before it.
cat $T/snapshot | grep -v '^#' > /tmp/snap.txt
wc -l < /tmp/snap.txt
awk '
	{ for (i = 1; i <= NF; i++) if ($i ~ /^\[[0-9]+\]$/) { cpu = $i; break }
	  for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) { t = substr($i, 1, length($i) - 1) + 0; break }
	  line[NR] = $0; lc[NR] = cpu; lt[NR] = t }
	/sched_switch:/ && /next_comm=dma-bench/ && /next_prio=0/ { last = NR }
	END {
		if (!last) { print "no probe switch-in in the snapshot"; exit }
		c = lc[last]; t1 = lt[last]
		for (i = 1; i <= last; i++)
			if (lt[i] >= t1 - 0.040 && (lc[i] == c || line[i] ~ /sched_waking|sched_wakeup/))
				print line[i]
	}' /tmp/snap.txt > /tmp/win.txt
wc -l < /tmp/win.txt
# Thin the probe churn on the other CPU; keep the first and last 150 lines.
head -150 /tmp/win.txt
echo "..."
tail -150 /tmp/win.txt
sh $repo/bench/switch-backend stock
