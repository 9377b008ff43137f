#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Guest side of `cargo xtask bench` (sourced by run.sh in "bench" mode).
# Every measurement is repeated ROUNDS times, alternating the configurations
# being compared inside each round, and appended to $JOB/bench.csv as
# "section,config,round,value". The host computes medians.
#
# Sections:
#  sched:    fio 4k randread qd16 IOPS on 1 and 4 null devices, none vs
#            mq-deadline (set through sysfs), patched driver
#  affinity: fio 4k randread IOPS, fio on CPU 0, server on CPU 1, device
#            with/without UBLK_F_SUPPORT_RQ_AFFINITY, rq_affinity 0/1/2,
#            iodepth 16 and 96; and (section affinity_cpu, configs
#            ".../server" and ".../submit") the system + irq + softirq
#            time of CPU 1 and of CPU 0 per completed READ over the fio
#            run (/proc/stat, /sys/block/ublkbN/stat), in microseconds
#  start:    per device: device_add_disk() time (function_graph) and the
#            wall time of `kublk add`, NDEV devices, the unpatched 7.3.4
#            module (default mq-deadline) vs the patched one (default none)
#  ratio:    (`bench rust-vs-c`, booted with no driver loaded) fio 4k randread
#            IOPS on a null device, the C driver vs the Rust driver, for
#            each data mode of MODES and iodepth of IODEPTHS in turn: each
#            round loads ublk_drv, adds the device, runs fio, deletes it
#            and unloads the module, then the same with rust_ublk; config
#            "qd<iodepth>/<c|rust>" ("<mode>/qd<iodepth>/<c|rust>" for a
#            mode other than copy). Also the guest CPU time per I/O of each
#            run, as bench matrix measures it (bench_cpu.sh: a window of
#            RUNTIME - 1 seconds, from 1 s (fio's ramp) after the device's
#            first I/O of the run):
#            configs "<config>/busy_ticks", "<config>/ios",
#            "<config>/window_us" and "clk_tck" (round 0).
#            After each round a progress line "bench: [k/N] ..." (k rounds
#            of N done). A driver that fails is recorded in
#            $JOB/bench-failures.txt ("driver|iodepth|round|reason"), not
#            run again (at any iodepth), and the boot's status is non-zero.
#  matrix:   (`bench matrix`, booted with no driver loaded) C ublk, Rust ublk,
#            null_blk and rnull over rw x iodepth x queues, fio IOPS and
#            guest CPU time per I/O; in bench_matrix.sh (copied beside this
#            file), which describes its plan, samples and progress lines.
#  rqa:      (`bench affinity`) a ublk server whose CPU is the bottleneck,
#            with and without UBLK_F_SUPPORT_RQ_AFFINITY, over rq_affinity,
#            iodepth and the server's CPU cost per I/O; in bench_affinity.sh
#            (copied beside this file), which describes it.
#
# SECTIONS (job.env) lists the sections to run.

# shellcheck source=/dev/null
. "$JOB/bench_cpu.sh"

KUBLK="$SELFTESTS/kublk"
CSV="$JOB/bench.csv"
: > "$CSV"

log() { echo "bench: $*" >&2; }
rec() { echo "$1,$2,$3,$4" >> "$CSV"; }

fio_iops() {
	# fio_iops <iodepth> <dev>...: IOPS of a randread job per device, fio on CPU 0
	local qd=$1 args=() d i=0
	shift
	for d in "$@"; do
		args+=(--name="j$i" --filename="$d")
		i=$((i + 1))
	done
	taskset -c 0 fio --ioengine=io_uring --direct=1 --bs=4k --rw=randread \
		--iodepth="$qd" --time_based --runtime="$RUNTIME" --ramp_time=1 \
		--group_reporting --output-format=terse --terse-version=3 \
		"${args[@]}" 2>/dev/null | awk -F';' '{ print $8 }'
}

add_null() {
	# add_null <extra kublk args...>: prints the new device id
	local out id
	out=$(timeout -k 5 60 "$KUBLK" add -t null -q 1 -d 128 "$@" 2>&1) ||
		{ log "kublk add failed (exit $?): $out"; return 1; }
	id=$(echo "$out" | sed -n 's/.*dev id \([0-9]*\).*/\1/p' | head -n 1)
	[ -n "$id" ] || id=$("$KUBLK" list 2>/dev/null | sed -n 's/.*dev id \([0-9]*\).*/\1/p' | tail -n 1)
	echo "$id"
}

pin_server() {
	# all threads of the server of device $1 to CPU 1
	local pid
	pid=$("$KUBLK" list -n "$1" 2>/dev/null | sed -n 's/.*pid \([0-9]*\).*/\1/p' | head -n 1)
	[ -n "$pid" ] && taskset -a -p -c 1 "$pid" >/dev/null
}

del_all() { "$KUBLK" del -a >/dev/null 2>&1; udevadm settle --timeout=30 >/dev/null 2>&1; }

bench_sched() {
	local r s ids=() id
	for id in 1 2 3 4; do
		ids+=("$(add_null)")
	done
	for id in "${ids[@]}"; do pin_server "$id"; done
	udevadm settle --timeout=30 >/dev/null 2>&1
	for r in $(seq "$ROUNDS"); do
		for s in mq-deadline none; do
			for id in "${ids[@]}"; do echo "$s" > "/sys/block/ublkb$id/queue/scheduler"; done
			rec sched "$s/1dev" "$r" "$(fio_iops 16 "/dev/ublkb${ids[0]}")"
			rec sched "$s/4dev" "$r" "$(fio_iops 16 "${ids[@]/#/\/dev\/ublkb}")"
			log "sched round $r $s done"
		done
	done
	del_all
}

# cpu_sys <cpu>: system + irq + softirq time of <cpu> so far, in ticks
cpu_sys() {
	awk -v c="cpu$1" '$1 == c { print $4 + $7 + $8 }' /proc/stat
}

# reads_done <dev_id>: READs completed by /dev/ublkb<dev_id> so far
reads_done() {
	awk '{ print $1 }' "/sys/block/ublkb$1/stat"
}

# us_per_io <ticks before> <ticks after> <I/Os>
us_per_io() {
	awk -v a="$1" -v b="$2" -v n="$3" -v hz="$HZ_USER" \
		'BEGIN { if (n > 0) printf "%.2f", (b - a) * 1e6 / hz / n }'
}

bench_affinity() {
	local r flag rqa qd id_flag id_plain id cfg s0 s1 e0 e1 n0 n1
	HZ_USER=$(getconf CLK_TCK 2>/dev/null || echo 100)
	id_plain=$(add_null)
	id_flag=$(add_null $FLAG_OPT) || return 1
	for id in "$id_plain" "$id_flag"; do pin_server "$id"; done
	udevadm settle --timeout=30 >/dev/null 2>&1
	for r in $(seq "$ROUNDS"); do
		for qd in 16 96; do
			for rqa in 0 1 2; do
				for flag in without with; do
					id=$id_plain
					[ "$flag" = with ] && id=$id_flag
					echo "$rqa" > "/sys/block/ublkb$id/queue/rq_affinity"
					cfg="qd$qd/rqa$rqa/$flag"
					s0=$(cpu_sys 0) s1=$(cpu_sys 1) n0=$(reads_done "$id")
					rec affinity "$cfg" "$r" "$(fio_iops "$qd" "/dev/ublkb$id")"
					e0=$(cpu_sys 0) e1=$(cpu_sys 1) n1=$(reads_done "$id")
					rec affinity_cpu "$cfg/server" "$r" "$(us_per_io "$s1" "$e1" $((n1 - n0)))"
					rec affinity_cpu "$cfg/submit" "$r" "$(us_per_io "$s0" "$e0" $((n1 - n0)))"
				done
			done
		done
		log "affinity round $r done"
	done
	del_all
}

start_devices() {
	# start_devices <label> <round>: add NDEV devices, record timings, delete
	local label=$1 r=$2 i t0 t1 tr=/sys/kernel/tracing
	echo 0 > $tr/tracing_on
	echo > $tr/trace
	echo device_add_disk > $tr/set_graph_function
	echo 1 > $tr/max_graph_depth
	echo function_graph > $tr/current_tracer
	echo 1 > $tr/tracing_on
	for i in $(seq "$NDEV"); do
		t0=$(date +%s%N)
		add_null >/dev/null || break
		t1=$(date +%s%N)
		rec start "$label/kublk-add-ms" "$r" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e6 }')"
	done
	echo 0 > $tr/tracing_on
	# "  1) ! 8530.123 us |  device_add_disk();"
	awk '/device_add_disk/ { for (i = 1; i <= NF; i++) if ($i == "us") { v = $(i - 1); print v / 1000 } }' $tr/trace |
		while read -r ms; do rec start "$label/add_disk-ms" "$r" "$ms"; done
	echo nop > $tr/current_tracer
	echo > $tr/set_graph_function
	del_all
}

bench_start() {
	local r
	for r in $(seq "$ROUNDS"); do
		rmmod ublk_drv 2>/dev/null
		insmod "$BASE_MODULE" || { log "cannot load $BASE_MODULE"; return 1; }
		start_devices unpatched "$r"
		rmmod ublk_drv
		modprobe ublk_drv || return 1
		start_devices patched "$r"
		log "start round $r done"
	done
}

FAILURES="$JOB/bench-failures.txt"
RATIO_FIO_OUT=/tmp/ratio-fio.txt

ratio_fail() {
	# ratio_fail <driver> <iodepth> <round> <reason>
	log "$1 driver, iodepth $2, round $3: $4"
	echo "$1|$2|$3|${4//|/ }" >> "$FAILURES"
	# shellcheck disable=SC2034 # run.sh, which sources this, reports it
	status=1
}

ratio_one() {
	# ratio_one <c|rust> <iodepth> <round> <mode>: one measurement, the
	# module loaded and unloaded around it; sets RATIO_IOPS (empty if none)
	# and RATIO_CPU (CPU time per I/O in microseconds, empty if not
	# measured) and returns non-zero if the driver failed. Failures of a
	# mode other than copy say which ("mode: reason"), and so does the
	# sample's key.
	local drv=$1 qd=$2 r=$3 mode=$4 mod=ublk_drv id out rc iops ok=0 pid cpu_ok
	local key="qd$qd/$drv" opts=()
	[ "$drv" = rust ] && mod=rust_ublk
	case "$mode" in
	copy) ;;
	user_copy) opts=(-u) ;;
	zero_copy) opts=(-z) ;;
	auto_zc) opts=(--auto_zc) ;;
	batch) opts=(-b) ;;
	*)
		ratio_fail "$drv" "$qd" "$r" "$mode: unknown data mode"
		return 1
		;;
	esac
	[ "$mode" != copy ] && key="$mode/$key"
	RATIO_IOPS='' RATIO_CPU=''
	if ! load_driver "$drv" >&2; then
		ratio_fail "$drv" "$qd" "$r" "$mode: loading $mod failed"
		return 1
	fi
	out=$(timeout -k 5 60 "$KUBLK" add -t null -q 1 -d 128 "${opts[@]}" 2>&1)
	rc=$?
	id=$(echo "$out" | sed -n 's/.*dev id \([0-9]*\).*/\1/p' | head -n 1)
	if [ "$rc" -eq 124 ]; then
		ratio_fail "$drv" "$qd" "$r" "$mode: kublk add -t null ${opts[*]} did not finish in 60s"
		ok=1
	elif [ "$rc" -ne 0 ] || [ -z "$id" ]; then
		ratio_fail "$drv" "$qd" "$r" "$mode: kublk add -t null ${opts[*]} failed (exit $rc): $(echo "$out" | tail -n 2 | tr '\n' ' ' | cut -c1-160)"
		ok=1
	else
		pin_server "$id"
		udevadm settle --timeout=30 >/dev/null 2>&1
		timeout -k 10 $((RUNTIME + 60)) taskset -c 0 fio --ioengine=io_uring \
			--direct=1 --bs=4k --rw=randread --iodepth="$qd" --time_based \
			--runtime="$RUNTIME" --ramp_time=1 --name=ratio \
			--filename="/dev/ublkb$id" --output-format=terse --terse-version=3 \
			> "$RATIO_FIO_OUT" 2>&1 &
		pid=$!
		# After fio's 1 s ramp, RUNTIME - 1 seconds of its run.
		cpu_window "ublkb$id" "$pid" 1 $((RUNTIME - 1))
		cpu_ok=$?
		wait "$pid"
		rc=$?
		out=$(cat "$RATIO_FIO_OUT")
		iops=$(echo "$out" | awk -F';' 'NF > 8 { print $8; exit }')
		if [ "$rc" -ne 0 ] || ! [[ "$iops" =~ ^[0-9]+(\.[0-9]*)?$ ]] || [ "${iops%.*}" -eq 0 ]; then
			ratio_fail "$drv" "$qd" "$r" "$mode: fio 4k randread iodepth $qd on /dev/ublkb$id failed (exit $rc, IOPS '${iops}'): $(echo "$out" | grep -m1 -i err | cut -c1-120)"
			ok=1
		else
			rec ratio "$key" "$r" "$iops"
			RATIO_IOPS=$iops
			if [ "$cpu_ok" -eq 0 ]; then
				cpu_rec ratio "$key" "$r"
				RATIO_CPU=$(cpu_us_per_io "$CPU_WIN_BUSY" "$RATIO_HZ" "$CPU_WIN_IOS")
			else
				log "$drv driver, $mode mode, iodepth $qd, round $r: the CPU window did not lie inside the fio run; no CPU time for it"
			fi
		fi
	fi
	pkill -9 -x kublk 2>/dev/null
	timeout -k 5 60 "$KUBLK" del -a >/dev/null 2>&1
	udevadm settle --timeout=30 >/dev/null 2>&1
	if ! rmmod "$mod"; then
		ratio_fail "$drv" "$qd" "$r" "$mode: rmmod $mod failed"
		return 1
	fi
	return "$ok"
}

bench_ratio() {
	# For each data mode and iodepth, ROUNDS rounds of both drivers: C
	# first in odd rounds, Rust first in even ones, so that what a run
	# leaves behind (the module just unloaded, deferred frees, udev's
	# work) weighs on both drivers alike; a driver that failed once is
	# left out of every later run.
	local mode qd r drv order failed="" k=0 total res
	local -A got
	total=$(( $(echo "${MODES:-copy}" | wc -w) * $(echo "$IODEPTHS" | wc -w) * ROUNDS ))
	RATIO_HZ=$(cpu_hz)
	rec ratio clk_tck 0 "$RATIO_HZ"
	for mode in ${MODES:-copy}; do
	for qd in $IODEPTHS; do
		for r in $(seq "$ROUNDS"); do
			order="c rust"
			[ $((r % 2)) -eq 0 ] && order="rust c"
			for drv in $order; do
				case " $failed " in
				*" $drv "*)
					got[$drv]="not run (failed earlier)"
					continue
					;;
				esac
				if ratio_one "$drv" "$qd" "$r" "$mode"; then
					got[$drv]="$RATIO_IOPS IOPS"
					[ -n "$RATIO_CPU" ] && got[$drv]="${got[$drv]} ($RATIO_CPU us CPU per I/O)"
				else
					got[$drv]=failed
					failed="$failed $drv"
				fi
			done
			k=$((k + 1))
			res="C ${got[c]}, Rust ${got[rust]}"
			log "[$k/$total] $mode mode, iodepth $qd, round $r/$ROUNDS: $res"
		done
	done
	done
}

# shellcheck source=/dev/null
. "$JOB/bench_matrix.sh"
# shellcheck source=/dev/null
. "$JOB/bench_affinity.sh"

log "sections: $SECTIONS; rounds=$ROUNDS runtime=${RUNTIME}s modes '${MODES:-copy}' iodepths '$IODEPTHS' ndev=$NDEV flag option '$FLAG_OPT'"
for section in $SECTIONS; do
	"bench_$section"
done
log "done"
