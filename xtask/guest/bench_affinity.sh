#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The "rqa" section of bench.sh (`cargo xtask bench affinity`), sourced by
# it: uses its log, rec and KUBLK, and run.sh's status. The boot starts
# with ublk_drv loaded.
#
# What it measures: a ublk server whose CPU is the bottleneck (kublk's
# null target with --busy_ns, one queue, depth 128, every thread pinned to
# CPU RQA_SERVER_CPU) serving fio 4k randread, io_uring, direct, RQA_JOBS
# jobs on the other CPUs (RQA_FIO_CPUS, one job per CPU), with and without
# UBLK_F_SUPPORT_RQ_AFFINITY (FLAG_OPT), at a queue/rq_affinity value.
#
# RQA_PLAN (job.env) is the whole run in order, one word per cell run:
# "round:flag:rq_affinity:iodepth:cost_ns", flag 0 or 1. A device per
# (flag, cost_ns) is added on its first use and kept to the end.
#
# Per cell: fio RUNTIME seconds, time based; once the device has completed
# an I/O of this run, a window of RUNTIME - 1 seconds: the non-idle CPU
# time (/proc/stat: user nice system irq softirq steal, USER_HZ ticks) of
# all CPUs and of the server's CPU, the server CPU's system + irq +
# softirq time, and the READs the device completed (/sys/block/*/stat).
#
# $JOB/bench.csv gets "rqa,<off|on>/rqa<n>/qd<n>/cost<ns>/<what>,<round>,
# <value>" with what = iops, p50_us, p99_us (fio's completion latency),
# busy_ticks, server_ticks, server_sys_ticks, ios, window_us; and
# "rqa,clk_tck,0,<USER_HZ>". After each cell, for the host:
#   bench: cell <k>/<N> <round> <flag> <rqa> <iodepth> <cost_ns> <result>
# A cell that fails is recorded in $JOB/rqa-failures.txt
# ("cell|round|what|reason") and the boot's status is non-zero.

RQA_FAILURES="$JOB/rqa-failures.txt"
RQA_FIO_OUT=/tmp/rqa-fio.txt
declare -A RQA_DEV

rqa_fail() {
	# rqa_fail <cell> <round> <what> <reason>
	log "rqa: $1, round $2, $3: $4"
	echo "$1|$2|$3|${4//|/ }" >> "$RQA_FAILURES"
	# shellcheck disable=SC2034 # run.sh, which sources this, reports it
	status=1
}

rqa_add() {
	# rqa_add <flag> <cost_ns>: add the device, pin its server, set
	# RQA_DEV[<flag>:<cost_ns>]; RQA_WHY says why not
	local flag=$1 cost=$2 out rc id pid opts=()
	[ "$flag" = 1 ] && opts+=("$FLAG_OPT")
	[ "$cost" -gt 0 ] && opts+=(--busy_ns "$cost")
	out=$(timeout -k 5 60 "$KUBLK" add -t null -q 1 -d 128 "${opts[@]}" 2>&1)
	rc=$?
	id=$(echo "$out" | sed -n 's/.*dev id \([0-9]*\).*/\1/p' | head -n 1)
	if [ "$rc" -ne 0 ] || [ -z "$id" ]; then
		RQA_WHY="kublk add -t null -q 1 -d 128 ${opts[*]} failed (exit $rc): $(echo "$out" | tail -n 2 | tr '\n' ' ' | cut -c1-160)"
		return 1
	fi
	pid=$("$KUBLK" list -n "$id" 2>/dev/null | sed -n 's/.*pid \([0-9]*\).*/\1/p' | head -n 1)
	if [ -z "$pid" ] || ! taskset -a -p -c "$RQA_SERVER_CPU" "$pid" >/dev/null; then
		RQA_WHY="cannot pin the server of ublkb$id (pid '$pid') to CPU $RQA_SERVER_CPU"
		return 1
	fi
	udevadm settle --timeout=30 >/dev/null 2>&1
	for _ in $(seq 50); do
		[ -b "/dev/ublkb$id" ] && break
		sleep 0.1
	done
	if ! echo none > "/sys/block/ublkb$id/queue/scheduler" 2>/dev/null; then
		RQA_WHY="cannot set scheduler none on ublkb$id"
		return 1
	fi
	RQA_DEV[$flag:$cost]=ublkb$id
	log "rqa: flag $flag, busy_ns $cost: ublkb$id, server pid $pid on CPU $RQA_SERVER_CPU"
}

rqa_stat() {
	# rqa_stat <dev>: RQA_BUSY (non-idle ticks, all CPUs), RQA_SRV and
	# RQA_SRV_SYS (the server CPU's non-idle and system + irq + softirq
	# ticks), RQA_IOS (READs completed by <dev>), RQA_US (wall clock, us);
	# builtins only, so reading them costs next to no CPU time
	local name u n s irq sirq st
	while read -r name u n s _ _ irq sirq st _; do
		case "$name" in
		cpu) RQA_BUSY=$((u + n + s + irq + sirq + st)) ;;
		"cpu$RQA_SERVER_CPU")
			RQA_SRV=$((u + n + s + irq + sirq + st))
			RQA_SRV_SYS=$((s + irq + sirq))
			;;
		cpu*) ;;
		*) break ;;
		esac
	done < /proc/stat
	read -r RQA_IOS _ < "/sys/block/$1/stat"
	RQA_US=${EPOCHREALTIME//[.,]/}
}

rqa_cell() {
	# rqa_cell <flag> <rqa> <iodepth> <cost_ns> <round>: one fio run; sets
	# RQA_RES (the progress line's result), non-zero if it failed
	local flag=$1 rqa=$2 qd=$3 cost=$4 r=$5 name key pid rc iops p50 p99 alive
	local busy0 srv0 sys0 ios0 us0 start_ios onoff=off
	[ "$flag" = 1 ] && onoff=on
	name=${RQA_DEV[$flag:$cost]}
	key="$onoff/rqa$rqa/qd$qd/cost$cost"
	if ! echo "$rqa" > "/sys/block/$name/queue/rq_affinity"; then
		rqa_fail "$key" "$r" setup "cannot set rq_affinity $rqa on $name"
		RQA_RES=failed
		return 1
	fi
	timeout -k 10 $((RUNTIME + 60)) fio --name=rqa --filename="/dev/$name" \
		--ioengine=io_uring --direct=1 --bs=4k --rw=randread --iodepth="$qd" \
		--numjobs="$RQA_JOBS" --cpus_allowed="$RQA_FIO_CPUS" \
		--cpus_allowed_policy=split --group_reporting \
		--percentile_list=50:99 --time_based --runtime="$RUNTIME" \
		--output-format=terse --terse-version=3 > "$RQA_FIO_OUT" 2>&1 &
	pid=$!
	rqa_stat "$name"
	start_ios=$RQA_IOS
	# The window starts once the device has completed an I/O of this run.
	for _ in $(seq 300); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
		rqa_stat "$name"
		[ "$RQA_IOS" -gt "$start_ios" ] && break
	done
	busy0=$RQA_BUSY srv0=$RQA_SRV sys0=$RQA_SRV_SYS ios0=$RQA_IOS us0=$RQA_US
	kill -0 "$pid" 2>/dev/null && sleep $((RUNTIME - 1))
	rqa_stat "$name"
	alive=0
	kill -0 "$pid" 2>/dev/null && alive=1
	wait "$pid"
	rc=$?
	# terse v3: field 8 the read IOPS, 18-37 the read completion latency
	# percentiles ("50.000000%=<us>")
	read -r iops p50 p99 < <(awk -F';' 'NF > 49 {
		p50 = ""; p99 = ""
		for (i = 18; i <= 37; i++) {
			split($i, kv, "%=")
			if (kv[1] + 0 == 50) p50 = kv[2]
			if (kv[1] + 0 == 99) p99 = kv[2]
		}
		print $8, p50, p99
		exit
	}' "$RQA_FIO_OUT")
	if [ "$rc" -ne 0 ] || ! [[ "$iops" =~ ^[0-9]+(\.[0-9]*)?$ ]] || [ "${iops%.*}" -eq 0 ]; then
		rqa_fail "$key" "$r" fio "fio randread iodepth $qd on /dev/$name failed (exit $rc, IOPS '$iops'): $(grep -m1 -i err "$RQA_FIO_OUT" | cut -c1-120)"
		RQA_RES=failed
		return 1
	fi
	rec rqa "$key/iops" "$r" "$iops"
	RQA_RES="iops=$iops"
	if [ -n "$p50" ] && [ -n "$p99" ]; then
		rec rqa "$key/p50_us" "$r" "$p50"
		rec rqa "$key/p99_us" "$r" "$p99"
		RQA_RES="$RQA_RES p50=${p50}us p99=${p99}us"
	fi
	if [ "$alive" -eq 1 ] && [ "$RQA_IOS" -gt "$ios0" ]; then
		rec rqa "$key/busy_ticks" "$r" $((RQA_BUSY - busy0))
		rec rqa "$key/server_ticks" "$r" $((RQA_SRV - srv0))
		rec rqa "$key/server_sys_ticks" "$r" $((RQA_SRV_SYS - sys0))
		rec rqa "$key/ios" "$r" $((RQA_IOS - ios0))
		rec rqa "$key/window_us" "$r" $((RQA_US - us0))
		RQA_RES="$RQA_RES busy_ticks=$((RQA_BUSY - busy0)) server_ticks=$((RQA_SRV - srv0)) ios=$((RQA_IOS - ios0))"
	else
		log "rqa: $key round $r: the CPU window did not lie inside the fio run; no CPU time for it"
	fi
	return 0
}

bench_rqa() {
	local tok r flag rqa qd cost k=0 total plan hz
	read -r -a plan <<< "$RQA_PLAN"
	total=${#plan[@]}
	hz=$(getconf CLK_TCK 2>/dev/null)
	[[ "$hz" =~ ^[0-9]+$ ]] || hz=100
	rec rqa clk_tck 0 "$hz"
	: > "$RQA_FAILURES"
	log "rqa: clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null), $(nproc) CPUs, server on CPU $RQA_SERVER_CPU, fio on $RQA_FIO_CPUS"
	for tok in "${plan[@]}"; do
		IFS=: read -r r flag rqa qd cost <<< "$tok"
		k=$((k + 1))
		if [ -z "${RQA_DEV[$flag:$cost]:-}" ] && ! { RQA_WHY= && rqa_add "$flag" "$cost"; }; then
			rqa_fail "flag$flag/cost$cost" "$r" setup "$RQA_WHY"
			RQA_DEV[$flag:$cost]=-
			RQA_RES=failed
		elif [ "${RQA_DEV[$flag:$cost]}" = - ]; then
			RQA_RES=skipped
		else
			rqa_cell "$flag" "$rqa" "$qd" "$cost" "$r"
		fi
		log "cell $k/$total $r $flag $rqa $qd $cost $RQA_RES"
	done
	pkill -9 -x kublk 2>/dev/null
	timeout -k 5 60 "$KUBLK" del -a >/dev/null 2>&1
	udevadm settle --timeout=30 >/dev/null 2>&1
}
