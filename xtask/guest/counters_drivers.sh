#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Scheduler and interrupt counters per I/O of each ublk driver, in one
# boot: the C driver (ublk_drv) and the Rust driver (rust_ublk) in turn,
# C first in odd rounds and Rust first in even ones;
# kublk's null target (1 queue, depth 128), fio 4k randread at iodepth 16
# (or IODEPTH)
# on CPU 1 (as perf_drivers.sh), counted over 6 s of each run, 2 s after
# its start. Per I/O completed by the disk: busy CPU time (/proc/stat,
# microseconds), context switches of the system (ctxt) and of the server's
# and fio's processes (voluntary and involuntary, /proc/PID/task/*/status),
# interrupts (intr), softirqs (softirq, and BLOCK of /proc/softirqs), and
# the IPIs of /proc/interrupts (RES rescheduling, CAL function call).
#
# Where the CPU time per I/O of the two drivers differs by more than the
# module's own samples (perf_drivers.sh), these say whether the rest is
# scheduling: a sleep and a wakeup per I/O more costs more than the code
# of a whole io path under TCG.
#
# MODES names the data modes as perf_drivers.sh does (default copy);
# ROUNDS the rounds per mode (default 3); RW the fio pattern (default
# randread); IODEPTH fio's (default 16).
#
#   cargo xtask vm --driver none -- env MODES="copy zero_copy" \
#     bash "$PWD"/xtask/guest/counters_drivers.sh
K=$SELFTESTS/kublk
# shellcheck source=xtask/guest/drivers_common.sh
. "$(dirname "$0")"/drivers_common.sh
ROUNDS=${ROUNDS:-3}
RW=${RW:-randread}
IODEPTH=${IODEPTH:-16}
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"

snap() {
	# snap <dev> <pids...>: prints "busy ctxt intr softirq block res cal
	# ios task_vol task_invol" for this moment
	local dev=$1 u n s irq sirq st busy ctxt intr soft block res cal rd wr vol=0 invol=0 p v i
	shift
	read -r _ u n s _ _ irq sirq st _ < /proc/stat
	busy=$((u + n + s + irq + sirq + st))
	ctxt=$(awk '$1 == "ctxt" {print $2}' /proc/stat)
	intr=$(awk '$1 == "intr" {print $2}' /proc/stat)
	soft=$(awk '$1 == "softirq" {print $2}' /proc/stat)
	block=$(awk '$1 == "BLOCK:" {s = 0; for (i = 2; i <= NF; i++) s += $i; print s}' /proc/softirqs)
	res=$(awk '$1 == "RES:" {s = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i; print s}' /proc/interrupts)
	cal=$(awk '$1 == "CAL:" {s = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i; print s}' /proc/interrupts)
	read -r rd _ _ _ wr _ < "/sys/block/$dev/stat"
	for p in "$@"; do
		# Threads that exit meanwhile are left out.
		read -r v i < <(cat /proc/"$p"/task/*/status 2>/dev/null | awk '
			/^voluntary_ctxt_switches/ {v += $2}
			/^nonvoluntary_ctxt_switches/ {i += $2}
			END {print v + 0, i + 0}')
		vol=$((vol + ${v:-0}))
		invol=$((invol + ${i:-0}))
	done
	echo "$busy $ctxt $intr $soft $block ${res:-0} ${cal:-0} $((rd + wr)) $vol $invol"
}

for mode in ${MODES:-copy}; do
mode_opts "$mode"
for round in $(seq 1 "$ROUNDS"); do
for mod in $(driver_order "$round"); do
	modprobe $mod || { echo "modprobe $mod failed"; exit 1; }
	$K add -t null -q 1 -d 128 "${OPTS[@]}" > /tmp/add.txt 2>&1 || { cat /tmp/add.txt; exit 1; }
	dev=$(basename "$(ls /dev/ublkb* | head -1)")
	fio --name=c --filename=/dev/$dev --ioengine=io_uring --direct=1 --bs=4k --rw=$RW --iodepth="$IODEPTH" \
	    --numjobs=1 --cpus_allowed=1 --time_based --runtime=10 --output-format=terse --terse-version=3 > /tmp/fio.txt 2>&1 &
	fpid=$!
	sleep 2
	# The server's processes and fio's (its jobs are processes of their own).
	pids=$(pgrep -x kublk; pgrep -x fio)
	# shellcheck disable=SC2086 # one word per process
	a=$(snap "$dev" $pids)
	sleep 6
	# shellcheck disable=SC2086
	b=$(snap "$dev" $pids)
	wait $fpid
	hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
	read -r -a A <<< "$a"
	read -r -a B <<< "$b"
	ios=$((B[7] - A[7]))
	if [ "$ios" -le 0 ]; then
		echo "=== $mode round $round $mod $RW: no I/O completed in the window"
	else
		awk -v hz="$hz" -v ios="$ios" -v head="=== $mode round $round $mod $RW iodepth $IODEPTH" \
		    -v a="$a" -v b="$b" 'BEGIN {
			split(a, A, " "); split(b, B, " ")
			printf "%s: ios %d (%.1fK/s) busy_us/io %.1f ctxt/io %.3f intr/io %.3f softirq/io %.3f block/io %.3f res/io %.3f cal/io %.3f task_vol/io %.3f task_invol/io %.3f\n",
			    head, ios, ios / 6000, (B[1] - A[1]) * 1e6 / hz / ios, (B[2] - A[2]) / ios,
			    (B[3] - A[3]) / ios, (B[4] - A[4]) / ios, (B[5] - A[5]) / ios,
			    (B[6] - A[6]) / ios, (B[7] - A[7]) / ios, (B[9] - A[9]) / ios, (B[10] - A[10]) / ios
		}'
	fi
	$K del -a
	sleep 1
	rmmod $mod || echo "rmmod $mod failed"
done
done
done
