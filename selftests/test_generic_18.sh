#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Check on which CPU ublk ends its requests, with and without
# UBLK_F_SUPPORT_RQ_AFFINITY, in every data copy mode kublk offers with
# its fault_inject target (copy, NEED_GET_DATA, user copy, zero copy,
# auto buffer registration, batch I/O), for READ, WRITE, FLUSH, DISCARD
# and WRITE_ZEROES requests and for requests the ublk server fails.
#
# The I/O is submitted from CPU 0 and the ublk server runs on CPU 1, and
# queue/rq_affinity is 2 on every device:
#  - with the flag, every request has to be ended on CPU 0, the CPU that
#    submitted it;
#  - without the flag, ublk ignores rq_affinity and ends every request on
#    CPU 1, in the ublk server task that commits the result, as before.
#
# In copy mode, also:
#  - a READ that the server completes one sector short is ended for 7 of
#    its 8 sectors and requeued for the last one (the only case where
#    fewer bytes than the request's are ended), on the CPU above;
#  - at rq_affinity=0 the flag keeps completion on the server's CPU
#    (BLOCK_SOFTIRQ there, the device has one hardware queue), so a
#    driver that always ended requests on the submitting CPU fails;
#  - a READ still with the server when it is killed is failed by the
#    driver with -EIO, with the flag on the submitting CPU too.
#
# In zero copy mode, also READs and WRITEs whose buffer the null target
# registers and unregisters only after it committed the request
# (--unreg_after_commit): the driver ends such a request when the last
# reference to its buffer goes, in the unregister, not in the commit, and
# has to route that completion as any other.
#
# Where a request is ended is read from the block:block_rq_complete
# tracepoint. It fires in blk_update_request(), which ends the bios of the
# request, on the CPU that does it: in the ublk server task when ublk ends
# the request inline, in BLOCK_SOFTIRQ on the CPU blk-mq picked when the
# request went through blk_mq_complete_request_remote() and ublk's
# ->complete(). A trace instance records an event in the ring buffer of
# the CPU it fired on, so per_cpu/cpuN/trace of the instance holds exactly
# the completions that ran on CPU N. Events are matched by device, by
# operation and, but for flushes, by the sector the test uses, 1 GiB into
# the device, away from what udev and partition scanning read.
#
# This script checks copy mode and the server kill; test_generic_25 and
# test_generic_26 source it to check the other modes (the table of modes
# by test below), so that each stays well under the selftests' time
# limit. A test none of whose modes the kernel supports is skipped.

. "$(cd "$(dirname "$0")" && pwd)"/test_common.sh

ERR_CODE=0
SUBMIT_CPU=0
SERVER_CPU=1
IO_SECTOR=2097152
TRACE_INST=""
EXIT_PLAIN_CPUS=""

_skip() {
	echo "$TID: skip: $*"
	_cleanup_test
	exit "$UBLK_SKIP_CODE"
}

_fail() {
	echo "$TID: FAIL: $*"
	ERR_CODE=255
}

_trace_cleanup() {
	if [ -n "$TRACE_INST" ] && [ -d "$TRACE_INST" ]; then
		echo 0 > "$TRACE_INST/tracing_on" 2>/dev/null
		echo 0 > "$TRACE_INST/events/block/block_rq_complete/enable" 2>/dev/null
		rmdir "$TRACE_INST" 2>/dev/null
	fi
}

_find_tracefs() {
	local dir

	for dir in /sys/kernel/tracing /sys/kernel/debug/tracing; do
		if [ -d "$dir/instances" ]; then
			echo "$dir"
			return 0
		fi
	done
	if mount -t tracefs nodev /sys/kernel/tracing > /dev/null 2>&1 &&
	   [ -d /sys/kernel/tracing/instances ]; then
		echo /sys/kernel/tracing
		return 0
	fi
	return 1
}

# flags the driver granted to device $1, as printed by "kublk list"
_dev_flags() {
	"$UBLK_PROG" list -n "$1" | awk '{
		for (i = 1; i < NF; i++)
			if ($i == "flags") { print $(i + 1); exit }
	}'
}

# Submit one request of type $2 to device $1 from $SUBMIT_CPU
_submit_op() {
	local dev=$1
	local op=$2
	local blk=$((IO_SECTOR / 8))

	case "$op" in
	read|read_error|short_read)
		taskset -c "$SUBMIT_CPU" dd if="$dev" of=/dev/null bs=4k \
			count=1 skip="$blk" iflag=direct status=none 2>/dev/null
		;;
	write|write_error)
		taskset -c "$SUBMIT_CPU" dd if=/dev/zero of="$dev" bs=4k \
			count=1 seek="$blk" oflag=direct status=none 2>/dev/null
		;;
	flush)
		# nothing to write, then fsync(): one REQ_OP_FLUSH request
		taskset -c "$SUBMIT_CPU" dd if=/dev/zero of="$dev" bs=4k \
			count=0 conv=fsync status=none 2>/dev/null
		;;
	discard)
		taskset -c "$SUBMIT_CPU" blkdiscard -f -o $((IO_SECTOR << 9)) \
			-l 4096 "$dev" 2>/dev/null
		;;
	write_zeroes)
		taskset -c "$SUBMIT_CPU" blkdiscard -f -z -o $((IO_SECTOR << 9)) \
			-l 4096 "$dev" 2>/dev/null
		;;
	esac
}

# Print "cpu rwbs sector+sectors error" for each block_rq_complete event of
# operation $2 on the device with major,minor $1. One awk reads the trace
# of every CPU: under emulation each process started costs a lot.
_collect_events() {
	awk -v dev="$1" -v op="$2" -v sector="$IO_SECTOR" '{
		i = index($0, "block_rq_complete: ")
		if (!i)
			next
		# dev rwbs (cmd) sector + nr_sector ioprio [error]
		n = split(substr($0, i + 19), f, " ")
		if (n < 8 || f[1] != dev)
			next
		rwbs = f[2]
		if (op == "flush")
			ok = (rwbs == "FF")
		else if (op == "short_read")
			ok = (rwbs ~ /^R/ &&
			      (f[4] == sector || f[4] == sector + 7))
		else if (f[4] != sector)
			ok = 0
		else if (op ~ /^read/)
			ok = (rwbs ~ /^R/)
		else if (op == "write_zeroes")
			ok = (rwbs ~ /^WZ/)
		else if (op ~ /^write/)
			ok = (rwbs ~ /^W/ && rwbs !~ /^WZ/)
		else if (op == "discard")
			ok = (rwbs ~ /^D/)
		else
			ok = 0
		if (ok) {
			# .../per_cpu/cpuN/trace
			cpu = FILENAME
			sub(/\/trace$/, "", cpu)
			sub(/.*\/cpu/, "", cpu)
			print cpu, rwbs, f[4] "+" f[6], f[n]
		}
	}' "$TRACE_INST"/per_cpu/cpu*/trace
}

# Run operation $3 on device $1 (major,minor $2) and check that every
# completion of it ran on CPU $4, described by $5; $6 describes the device
_check_op() {
	local ret

	echo > "$TRACE_INST/trace"
	echo 1 > "$TRACE_INST/tracing_on"
	_submit_op "$1" "$3"
	ret=$?
	echo 0 > "$TRACE_INST/tracing_on"
	_check_events "$@" "$ret"
}

# Check the traced completions of operation $3 submitted to device $1
# (major,minor $2), whose submitter exited with $7: all on CPU $4,
# described by $5; $6 describes the device
_check_events() {
	local dev=$1
	local majmin=$2
	local op=$3
	local exp_cpu=$4
	local exp_desc=$5
	local what=$6
	local ret=$7
	local where
	local events
	local nr=0
	local nr_other=0
	local nr_bad=0
	local cpu
	local err

	case "$op" in
	*_error)
		if [ "$ret" -eq 0 ]; then
			_fail "$what: $op on $dev succeeded, expected it to fail with EIO"
		fi
		;;
	*)
		if [ "$ret" -ne 0 ]; then
			_fail "$what: $op on $dev failed (exit code $ret)"
		fi
		;;
	esac

	events=$(_collect_events "$majmin" "$op")
	# counted by the shell, which starts no process for it
	while read -r cpu _ _ err; do
		[ -n "$cpu" ] || continue
		nr=$((nr + 1))
		[ "$cpu" = "$exp_cpu" ] || nr_other=$((nr_other + 1))
		[ "$err" = "[-5]" ] || nr_bad=$((nr_bad + 1))
	done <<< "$events"

	if [ "$op" = "flush" ]; then
		where="(REQ_OP_FLUSH, rwbs FF)"
	else
		where="at sector $IO_SECTOR"
	fi
	if [ "$nr" -eq 0 ]; then
		_fail "$what: $op: no block_rq_complete event for $dev" \
			"($majmin) $where"
		return
	fi
	if [ "$nr_other" -ne 0 ]; then
		_fail "$what: $op: expected all $nr completions on CPU" \
			"$exp_cpu ($exp_desc), $nr_other ran elsewhere;" \
			"events (cpu rwbs sector+sectors error):"
		echo "$events"
		return
	fi
	if [[ "$op" == *_error ]]; then
		if [ "$nr_bad" -ne 0 ]; then
			_fail "$what: $op: expected every completion to carry" \
				"-EIO ([-5]); events (cpu rwbs sector+sectors error):"
			echo "$events"
			return
		fi
	fi
	if [ "$op" = "short_read" ]; then
		if ! echo "$events" | grep -q " $IO_SECTOR+7 " ||
		   ! echo "$events" | grep -q " $((IO_SECTOR + 7))+1 "; then
			_fail "$what: $op: expected 7 sectors ended at" \
				"$IO_SECTOR and the last one, requeued, at" \
				"$((IO_SECTOR + 7)); events (cpu rwbs" \
				"sector+sectors error):"
			echo "$events"
			return
		fi
	fi
	[ "$UBLK_TEST_QUIET" -eq 0 ] && echo "$what: $op: $nr completion(s) on CPU $exp_cpu"
}

# Create a fault_inject device, run operations on it and delete it.
# $1: name of the data copy mode, $2: "yes" for --rq_affinity, $3: what:
#  ok     READ, WRITE, FLUSH, DISCARD and WRITE_ZEROES at rq_affinity=2
#  error  READ and WRITE failed by the server (--err_code 5), rq_affinity=2
#  short  a READ completed one sector short (--short_read 1), rq_affinity=2
#  rqa0   READ and WRITE at rq_affinity=0
#  unreg  READ and WRITE on a null target that unregisters each buffer
#         after the commit (zero copy only), rq_affinity=2
# the rest: kublk options of the mode.
_test_dev() {
	local mode=$1
	local flag=$2
	local variant=$3
	local rqa=2
	local dev_id
	local dev
	local majmin
	local pid
	local flags
	local exp_cpu
	local exp_desc
	local what
	local op
	local ops
	local args=()

	shift 3
	args=(-t fault_inject -q 1 -d 16 "$@")
	case "$variant" in
	ok)	ops="read write flush discard write_zeroes" ;;
	error)	args+=(--err_code 5); ops="read_error write_error" ;;
	short)	args+=(--short_read 1); ops="short_read" ;;
	rqa0)	rqa=0; ops="read write" ;;
	unreg)	args=(-t null -q 1 -d 16 --unreg_after_commit 1 "$@")
		ops="read write" ;;
	esac
	if [ "$flag" = "yes" ]; then
		args+=(--rq_affinity)
	fi
	if [ "$flag" = "no" ]; then
		exp_cpu=$SERVER_CPU
		exp_desc="the ublk server's CPU, no UBLK_F_SUPPORT_RQ_AFFINITY"
	elif [ "$rqa" -eq 2 ]; then
		exp_cpu=$SUBMIT_CPU
		exp_desc="the submitting CPU, as rq_affinity=2 asks"
	else
		exp_cpu=$SERVER_CPU
		exp_desc="the ublk server's CPU, as rq_affinity=0 asks"
	fi
	what="mode $mode, rq_affinity flag $flag, rq_affinity=$rqa"

	dev_id=$(_add_ublk_dev "${args[@]}")
	_check_add_dev "$TID" $?
	dev=/dev/ublkb"$dev_id"

	flags=$(_dev_flags "$dev_id")
	if [ -z "$flags" ]; then
		_fail "$what: can't read the flags of device $dev_id"
	elif [ "$flag" = "yes" ] && (( !(flags & 0x200000) )); then
		_fail "$what: device $dev_id has flags $flags," \
			"without UBLK_F_SUPPORT_RQ_AFFINITY (0x200000)"
	elif [ "$flag" = "no" ] && (( flags & 0x200000 )); then
		_fail "$what: device $dev_id has flags $flags," \
			"with UBLK_F_SUPPORT_RQ_AFFINITY (0x200000) not asked for"
	fi

	pid=$(_get_ublk_daemon_pid "$dev_id")
	if ! taskset -a -p -c "$SERVER_CPU" "$pid" > /dev/null; then
		_fail "$what: can't move ublk server $pid to CPU $SERVER_CPU"
	fi
	if ! echo "$rqa" > /sys/block/ublkb"$dev_id"/queue/rq_affinity; then
		_fail "$what: can't set rq_affinity of $dev to $rqa"
	fi

	majmin=$(tr ':' ',' < /sys/block/ublkb"$dev_id"/dev)
	echo "dev == $(_get_disk_dev_t "$dev_id")" > \
		"$TRACE_INST/events/block/block_rq_complete/filter" 2>/dev/null

	for op in $ops; do
		_check_op "$dev" "$majmin" "$op" "$exp_cpu" "$exp_desc" \
			"$what"
	done

	_ublk_del_dev "$dev_id" > /dev/null
	udevadm settle --timeout=20
}

# Kill the server of a copy-mode device while it holds a READ (the
# fault_inject target waits 3 s before completing it): the driver fails
# the READ with -EIO when it tears the queue down. Without the flag ($1
# "no", run first) where it did is recorded in EXIT_PLAIN_CPUS. With the
# flag the completion has to reach the submitting CPU, which only tells
# something if the run without the flag ended it elsewhere: a driver
# that tears down on the submitting CPU (the C driver does) passes
# whatever it does, so the check then only reports that. The READ is
# submitted from CPU 1 and the server runs on CPU 0 here.
_test_exit() {
	local flag=$1
	local sub=$SERVER_CPU
	local srv=$SUBMIT_CPU
	local what="mode copy, rq_affinity flag $flag, server killed"
	local args=(-t fault_inject -q 1 -d 16 --delay_us 3000000)
	local dev_id
	local dev
	local majmin
	local pid
	local dd_pid
	local ret
	local seen=0
	local events
	local cpus

	if _have_feature "NO_AUTO_PART_SCAN"; then
		args+=(--no_auto_part_scan)
	fi
	[ "$flag" = "yes" ] && args+=(--rq_affinity)
	dev_id=$(_add_ublk_dev "${args[@]}")
	_check_add_dev "$TID" $?
	dev=/dev/ublkb"$dev_id"
	pid=$(_get_ublk_daemon_pid "$dev_id")
	if ! taskset -a -p -c "$srv" "$pid" > /dev/null; then
		_fail "$what: can't move ublk server $pid to CPU $srv"
	fi
	echo 2 > /sys/block/ublkb"$dev_id"/queue/rq_affinity
	majmin=$(tr ':' ',' < /sys/block/ublkb"$dev_id"/dev)
	echo "dev == $(_get_disk_dev_t "$dev_id")" > \
		"$TRACE_INST/events/block/block_rq_complete/filter" 2>/dev/null

	# what udev read when the device appeared must be done first
	for _ in $(seq 200); do
		[ "$(awk '{ print $1 + $2 }' /sys/block/ublkb"$dev_id"/inflight)" -eq 0 ] &&
			break
		sleep 0.1
	done
	echo > "$TRACE_INST/trace"
	echo 1 > "$TRACE_INST/tracing_on"
	timeout 60 taskset -c "$sub" dd if="$dev" of=/dev/null bs=4k \
		count=1 skip=$((IO_SECTOR / 8)) iflag=direct status=none \
		2> /dev/null &
	dd_pid=$!
	for _ in $(seq 40); do
		if [ "$(awk '{ print $1 }' /sys/block/ublkb"$dev_id"/inflight)" -gt 0 ]; then
			seen=1
			break
		fi
		sleep 0.05
	done
	kill -9 "$pid"
	wait "$dd_pid"
	ret=$?
	echo 0 > "$TRACE_INST/tracing_on"
	if [ "$seen" -eq 0 ]; then
		_fail "$what: the READ never reached the server within 2 s"
	elif [ "$flag" = "yes" ] && [ "$EXIT_PLAIN_CPUS" != "$sub" ]; then
		_check_events "$dev" "$majmin" read_error "$sub" \
			"the submitting CPU, as rq_affinity=2 asks" "$what" "$ret"
	else
		events=$(_collect_events "$majmin" read_error)
		cpus=$(echo "$events" | awk 'NF { print $1 }' | sort -u | xargs)
		[ "$flag" = "no" ] && EXIT_PLAIN_CPUS=$cpus
		echo "$what: the driver failed the READ on CPU(s) $cpus" \
			"(events: cpu rwbs sector+sectors error:" \
			"$(echo "$events" | xargs))"
		if [ "$flag" = "yes" ]; then
			echo "$what: not checked: without the flag the driver" \
				"failed it on the submitting CPU too"
		fi
	fi

	_ublk_del_dev "$dev_id" > /dev/null
	udevadm settle --timeout=20
}

# Test the devices of data copy mode $1, whose kublk options are the rest
_test_mode() {
	local mode=$1
	local flag

	shift
	for flag in yes no; do
		_test_dev "$mode" "$flag" ok "$@"
		_test_dev "$mode" "$flag" error "$@"
		if [ "$mode" = "copy" ]; then
			_test_dev "$mode" "$flag" short
			_test_dev "$mode" "$flag" rqa0
		fi
		if [ "$mode" = "zero_copy" ]; then
			_test_dev "$mode" "$flag" unreg "$@"
		fi
	done
}

_prep_test "fault_inject" "completion CPU with and without UBLK_F_SUPPORT_RQ_AFFINITY"

if ! _have_feature "SUPPORT_RQ_AFFINITY"; then
	_skip "the kernel doesn't support UBLK_F_SUPPORT_RQ_AFFINITY"
fi
for prog in dd taskset blkdiscard awk; do
	if ! _have_program "$prog"; then
		_skip "$prog is missing"
	fi
done
if ! taskset -c "$SUBMIT_CPU" true 2>/dev/null ||
   ! taskset -c "$SERVER_CPU" true 2>/dev/null; then
	_skip "needs CPUs $SUBMIT_CPU and $SERVER_CPU online and usable"
fi
if grep -qw threadirqs /proc/cmdline; then
	_skip "with threadirqs, blk-mq never redirects completions to another CPU"
fi
if ! TRACEFS=$(_find_tracefs); then
	_skip "tracefs with instances is not available"
fi

TRACE_INST="$TRACEFS/instances/ublk_${TID}_$$"
if ! mkdir "$TRACE_INST" 2>/dev/null; then
	TRACE_INST=""
	_skip "can't create the trace instance $TRACEFS/instances/ublk_${TID}_$$"
fi
trap _trace_cleanup EXIT
if [ ! -d "$TRACE_INST/events/block/block_rq_complete" ]; then
	_skip "the block:block_rq_complete tracepoint is not available"
fi
echo 0 > "$TRACE_INST/tracing_on"
if ! echo 1 > "$TRACE_INST/events/block/block_rq_complete/enable"; then
	_fail "can't enable block:block_rq_complete in $TRACE_INST"
	_cleanup_test
	_show_result "$TID" "$ERR_CODE"
fi

# the data copy modes of each test that runs this script
case "$TID" in
generic_18)	modes="copy" ;;
generic_25)	modes="get_data user_copy zero_copy" ;;
generic_26)	modes="auto_zc batch" ;;
*)		modes="" ;;
esac
_run_data_modes _test_mode "$modes"
if [ "$TID" = "generic_18" ]; then
	_test_exit no
	_test_exit yes
fi

_cleanup_test
_show_result "$TID" "$ERR_CODE"
