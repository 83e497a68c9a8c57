#!/bin/sh
# Ad-hoc: timerlat (period 100 us) while short CFS processes start on
# CPU 1 now and then; no VFIO. Stalls >= TH us with stacks.
T=/sys/kernel/tracing
th=${1:-1000} n=${2:-40} work=${3:-3000}
mount -t tracefs none $T 2>/dev/null
mount -t debugfs none /sys/kernel/debug 2>/dev/null
for c in 0 1; do echo "fair_server cpu$c runtime $(cat /sys/kernel/debug/sched/fair_server/cpu$c/runtime 2>/dev/null)"; done
[ -n "${TL_FS_OFF:-}" ] && for c in 0 1; do echo 0 > /sys/kernel/debug/sched/fair_server/cpu$c/runtime; done
echo 100 > $T/osnoise/timerlat_period_us
echo $th > $T/osnoise/print_stack
echo 8192 > $T/buffer_size_kb
echo > $T/trace
echo timerlat > $T/current_tracer
rm -f /tmp/tlfifo; mkfifo /tmp/tlfifo
cat $T/trace_pipe > /tmp/tlfifo &
cpid=$!
awk -v th=$th '
	/context *thread/ { n = $(NF-1); if (n + 0 >= th * 1000) { show = 1; print } else show = 0; next }
	/=>/ || /<stack trace>/ { if (show) print; next }
	{ show = 0 }' < /tmp/tlfifo > /tmp/tl2.out &
apid=$!
echo 1 > $T/tracing_on
i=0
while [ $i -lt $n ]; do
	taskset -c ${TL_CPU:-1} sh -c "j=0; while [ \$j -lt $work ]; do j=\$((j+1)); done"
	usleep 20000
	i=$((i + 1))
done
echo 0 > $T/tracing_on
sleep 1
kill $cpid
wait $apid
echo nop > $T/current_tracer
echo "== $n CFS processes of $work iterations on cpu ${TL_CPU:-1}: $(grep -c context /tmp/tl2.out) thread latencies >= $th us"
grep context /tmp/tl2.out | sort -n -k 9 | tail -8
head -${TL_LINES:-120} /tmp/tl2.out
