#!/bin/sh
# Ad-hoc: the CPU share a CFS busy loop on CPU 1 gets with and without
# timerlat (period 100 us) running, fair server as booted.
T=/sys/kernel/tracing
mount -t tracefs none $T 2>/dev/null
mount -t debugfs none /sys/kernel/debug 2>/dev/null
busy() { taskset -c 1 sh -c 'j=0; while [ $j -lt 20000 ]; do j=$((j+1)); done'; }
t() { a=$(cut -d' ' -f1 /proc/uptime); busy; b=$(cut -d' ' -f1 /proc/uptime); echo "$1: $(awk -v a=$a -v b=$b 'BEGIN{printf "%.2f", b-a}') s"; }
t "no tracer"
echo 100 > $T/osnoise/timerlat_period_us
echo timerlat > $T/current_tracer
echo 1 > $T/tracing_on
t "timerlat 100 us"
echo 0 > $T/tracing_on
echo nop > $T/current_tracer
t "no tracer again"
for c in 0 1; do echo "cpu$c fair_server runtime $(cat /sys/kernel/debug/sched/fair_server/cpu$c/runtime) period $(cat /sys/kernel/debug/sched/fair_server/cpu$c/period)"; done
