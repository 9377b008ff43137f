#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The "matrix" section of bench.sh (`cargo xtask bench matrix`), sourced
# by it: uses its log, rec and KUBLK, bench_cpu.sh's cpu_* (the CPU time
# per I/O) and run.sh's load_driver and status.
# The boot starts with no driver loaded.
#
# MATRIX_PLAN (job.env) is the whole run in order, one word per cell run:
# "round:driver:rw:iodepth:queues", driver one of c (ublk_drv), rust
# (rust_ublk), null_blk, rnull (rnull_mod). The host orders it; a run of
# words with the same round and driver is a block: the driver's module is
# loaded before the block, a device per queue count is made on first use,
# and after the block the devices are removed and the module unloaded (the
# two ublk drivers both register /dev/ublk-control).
#
# Devices: c, rust: kublk null target, -q <queues>, depth 128. null_blk:
# configfs, queue_mode=2 (mq), irqmode=0, hw_queue_depth=128,
# submit_queues=<queues>, no poll queues. rnull: configfs, irqmode 0 (its
# default); one hardware queue whatever is asked (7.3 has no setting), so
# the host plans it with 1 queue only. Scheduler "none" on every device.
#
# Per cell: fio 4k <rw>, io_uring, direct, MATRIX_JOBS jobs (one per CPU),
# <iodepth> per job, RUNTIME seconds, time based: the same job for every
# driver. While it runs, once the device has completed an I/O of this run,
# a window of RUNTIME - 1 seconds: the non-idle CPU time of all CPUs
# (/proc/stat: user nice system irq softirq steal, USER_HZ ticks) and the
# I/Os the device completed (/sys/block/<dev>/stat) over it (cpu_window).
#
# $JOB/bench.csv gets "matrix,<driver>/<rw>/qd<iodepth>/q<queues>/<what>,
# <round>,<value>" with what = iops (fio's), busy_ticks, ios, window_us;
# "matrix,clk_tck,0,<USER_HZ>"; "matrix,hwq/<driver>/q<queues>,<round>,<n>"
# (hardware queues in /sys/block/<dev>/mq). After each cell, for the host:
#   bench: cell <k>/<N> <round> <driver> <rw> <iodepth> <queues> <result>
# result: "iops=<v> busy_ticks=<t> ios=<n> user_hz=<hz>" (the last three
# only if the window lay inside the run), "failed" or "skipped". A driver
# that fails is recorded in $JOB/matrix-failures.txt
# ("driver|round|what|reason"), its later cells are skipped and the boot's
# status is non-zero.

CONFIGFS=/sys/kernel/config
MATRIX_FAILURES="$JOB/matrix-failures.txt"
MATRIX_FIO_OUT=/tmp/matrix-fio.txt
MATRIX_FAILED=" "
MATRIX_DRV=
declare -A MATRIX_DEV

matrix_fail() {
	# matrix_fail <driver> <round> <what> <reason>
	log "matrix: $1 driver, round $2, $3: $4"
	echo "$1|$2|$3|${4//|/ }" >> "$MATRIX_FAILURES"
	case "$MATRIX_FAILED" in
	*" $1 "*) ;;
	*) MATRIX_FAILED="$MATRIX_FAILED$1 " ;;
	esac
	# shellcheck disable=SC2034 # run.sh, which sources this, reports it
	status=1
}

matrix_module() {
	case "$1" in
	c) echo ublk_drv ;;
	rust) echo rust_ublk ;;
	null_blk) echo null_blk ;;
	rnull) echo rnull_mod ;;
	esac
}

matrix_configfs_dir() {
	case "$1" in
	null_blk) echo "$CONFIGFS/nullb" ;;
	rnull) echo "$CONFIGFS/rnull" ;;
	esac
}

matrix_load() {
	# matrix_load <driver>: load its module; MATRIX_WHY says why not
	local drv=$1
	case "$drv" in
	c | rust)
		load_driver "$drv" >&2 || { MATRIX_WHY="loading $(matrix_module "$drv") failed (see the console)"; return 1; }
		;;
	null_blk)
		modprobe null_blk nr_devices=0 queue_mode=2 irqmode=0 poll_queues=0 hw_queue_depth=128 ||
			{ MATRIX_WHY="modprobe null_blk failed"; return 1; }
		;;
	rnull)
		modprobe rnull_mod || { MATRIX_WHY="modprobe rnull_mod failed"; return 1; }
		;;
	esac
	return 0
}

matrix_attr() {
	# matrix_attr <dir> <name> <value>: write a configfs attribute
	echo "$3" > "$1/$2" 2>/dev/null || { MATRIX_WHY="writing $3 to $1/$2 failed"; return 1; }
}

matrix_add() {
	# matrix_add <driver> <queues>: make the block's device for <queues>
	# and set MATRIX_DEV[<queues>] to its name; MATRIX_WHY says why not
	local drv=$1 q=$2 out rc id name d
	case "$drv" in
	c | rust)
		out=$(timeout -k 5 60 "$KUBLK" add -t null -q "$q" -d 128 2>&1)
		rc=$?
		id=$(echo "$out" | sed -n 's/.*dev id \([0-9]*\).*/\1/p' | head -n 1)
		if [ "$rc" -ne 0 ] || [ -z "$id" ]; then
			MATRIX_WHY="kublk add -t null -q $q failed (exit $rc): $(echo "$out" | tail -n 2 | tr '\n' ' ' | cut -c1-160)"
			return 1
		fi
		name=ublkb$id
		MATRIX_DEV[$q]=$name
		;;
	null_blk)
		name=nullbq$q
		d=$(matrix_configfs_dir "$drv")/$name
		mkdir "$d" 2>/dev/null || { MATRIX_WHY="mkdir $d failed"; return 1; }
		MATRIX_DEV[$q]=$name
		matrix_attr "$d" queue_mode 2 && matrix_attr "$d" irqmode 0 &&
			matrix_attr "$d" hw_queue_depth 128 && matrix_attr "$d" submit_queues "$q" &&
			matrix_attr "$d" power 1 || return 1
		;;
	rnull)
		name=rnullb$q
		d=$(matrix_configfs_dir "$drv")/$name
		mkdir "$d" 2>/dev/null || { MATRIX_WHY="mkdir $d failed"; return 1; }
		MATRIX_DEV[$q]=$name
		matrix_attr "$d" irqmode 0 && matrix_attr "$d" power 1 || return 1
		;;
	esac
	# MATRIX_DEV is set as soon as there is something for matrix_end to
	# remove, also when a later step fails.
	udevadm settle --timeout=30 >/dev/null 2>&1
	for _ in $(seq 50); do
		[ -b "/dev/$name" ] && break
		sleep 0.1
	done
	if [ ! -b "/dev/$name" ]; then
		MATRIX_WHY="no block device /dev/$name"
		return 1
	fi
	if ! echo none > "/sys/block/$name/queue/scheduler" 2>/dev/null; then
		MATRIX_WHY="cannot set scheduler none on $name (has: $(cat "/sys/block/$name/queue/scheduler" 2>/dev/null))"
		return 1
	fi
	MATRIX_HWQ=$(find "/sys/block/$name/mq/" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
	return 0
}

matrix_end() {
	# matrix_end <round>: remove the block's devices, unload its module
	local drv=$MATRIX_DRV r=$1 q d mod
	[ -n "$drv" ] || return 0
	mod=$(matrix_module "$drv")
	case "$drv" in
	c | rust)
		pkill -9 -x kublk 2>/dev/null
		timeout -k 5 60 "$KUBLK" del -a >/dev/null 2>&1
		;;
	null_blk | rnull)
		for q in "${!MATRIX_DEV[@]}"; do
			d=$(matrix_configfs_dir "$drv")/${MATRIX_DEV[$q]}
			[ -d "$d" ] || continue
			echo 0 > "$d/power" 2>/dev/null
			rmdir "$d" || matrix_fail "$drv" "$r" unload "rmdir $d failed"
		done
		;;
	esac
	MATRIX_DEV=()
	MATRIX_DRV=
	udevadm settle --timeout=30 >/dev/null 2>&1
	if grep -q "^$mod " /proc/modules && ! rmmod "$mod"; then
		matrix_fail "$drv" "$r" unload "rmmod $mod failed"
	fi
}

matrix_begin() {
	# matrix_begin <driver> <round>: load the driver unless it failed before
	local drv=$1 r=$2
	case "$MATRIX_FAILED" in
	*" $drv "*) return 0 ;;
	esac
	MATRIX_WHY=
	if ! matrix_load "$drv"; then
		matrix_fail "$drv" "$r" setup "$MATRIX_WHY"
		rmmod "$(matrix_module "$drv")" 2>/dev/null
		return 0
	fi
	MATRIX_DRV=$drv
}

matrix_cell() {
	# matrix_cell <driver> <rw> <iodepth> <queues> <round>: one fio run on
	# the block's device; sets MATRIX_RES (the progress line's result) and
	# returns non-zero if it failed
	local drv=$1 rw=$2 qd=$3 q=$4 r=$5 name key pid rc iops cpu_ok
	name=${MATRIX_DEV[$q]}
	key="$drv/$rw/qd$qd/q$q"
	timeout -k 10 $((RUNTIME + 60)) fio --name=matrix --filename="/dev/$name" \
		--ioengine=io_uring --direct=1 --bs=4k --rw="$rw" --iodepth="$qd" \
		--numjobs="$MATRIX_JOBS" --cpus_allowed="0-$((MATRIX_JOBS - 1))" \
		--cpus_allowed_policy=split --group_reporting \
		--time_based --runtime="$RUNTIME" \
		--output-format=terse --terse-version=3 > "$MATRIX_FIO_OUT" 2>&1 &
	pid=$!
	cpu_window "$name" "$pid" 0 $((RUNTIME - 1))
	cpu_ok=$?
	wait "$pid"
	rc=$?
	# terse v3: field 8 is the read IOPS, field 49 the write IOPS
	iops=$(awk -F';' 'NF > 49 { print $8 + $49; exit }' "$MATRIX_FIO_OUT")
	if [ "$rc" -ne 0 ] || ! [[ "$iops" =~ ^[0-9]+(\.[0-9]*)?$ ]] || [ "${iops%.*}" -eq 0 ]; then
		matrix_fail "$drv" "$r" "$rw/qd$qd/q$q" "fio $rw iodepth $qd on /dev/$name failed (exit $rc, IOPS '$iops'): $(grep -m1 -i err "$MATRIX_FIO_OUT" | cut -c1-120)"
		MATRIX_RES=failed
		return 1
	fi
	rec matrix "$key/iops" "$r" "$iops"
	MATRIX_RES="iops=$iops"
	if [ "$cpu_ok" -eq 0 ]; then
		cpu_rec matrix "$key" "$r"
		MATRIX_RES="$MATRIX_RES busy_ticks=$CPU_WIN_BUSY ios=$CPU_WIN_IOS user_hz=$MATRIX_HZ"
	else
		log "matrix: $key round $r: the CPU window did not lie inside the fio run; no CPU time for it"
	fi
	return 0
}

bench_matrix() {
	local tok r drv rw qd q k=0 total block="" plan
	read -r -a plan <<< "$MATRIX_PLAN"
	total=${#plan[@]}
	MATRIX_HZ=$(cpu_hz)
	rec matrix clk_tck 0 "$MATRIX_HZ"
	: > "$MATRIX_FAILURES"
	grep -q " $CONFIGFS configfs " /proc/mounts || mount -t configfs configfs "$CONFIGFS"
	for tok in "${plan[@]}"; do
		IFS=: read -r r drv rw qd q <<< "$tok"
		k=$((k + 1))
		if [ "$r:$drv" != "$block" ]; then
			matrix_end "${block%%:*}"
			block="$r:$drv"
			matrix_begin "$drv" "$r"
		fi
		if [ "$MATRIX_DRV" != "$drv" ]; then
			MATRIX_RES=skipped
		elif [ -z "${MATRIX_DEV[$q]:-}" ] && ! { MATRIX_WHY= && matrix_add "$drv" "$q"; }; then
			matrix_fail "$drv" "$r" "setup of $q queue(s)" "$MATRIX_WHY"
			MATRIX_RES=failed
		else
			[ -n "${MATRIX_HWQ:-}" ] && rec matrix "hwq/$drv/q$q" "$r" "$MATRIX_HWQ"
			MATRIX_HWQ=
			matrix_cell "$drv" "$rw" "$qd" "$q" "$r"
		fi
		case "$MATRIX_FAILED" in
		*" $drv "*) [ "$MATRIX_DRV" = "$drv" ] && MATRIX_DRV_FAILED=1 ;;
		esac
		log "cell $k/$total $r $drv $rw $qd $q $MATRIX_RES"
		if [ "${MATRIX_DRV_FAILED:-0}" = 1 ]; then
			# Stop using it: the rest of its block is skipped.
			matrix_end "$r"
			MATRIX_DRV_FAILED=0
		fi
	done
	matrix_end "${block%%:*}"
}
