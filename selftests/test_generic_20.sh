#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Kill the ublk server of a device created with UBLK_F_SUPPORT_RQ_AFFINITY
# while I/O is running, in every data copy mode kublk offers. The driver
# then ends the requests the server owned, and those it is handed
# afterwards, through blk_mq_complete_request_remote() too:
#  - the I/O must fail quickly, the device must become DEAD and be
#    deleted without hanging;
#  - with recovery, the device must be quiesced, recovered and deleted.
#
# First with a server that holds every request for 2 seconds, so that all
# of them are owned by the server when it is killed, then with a server
# that completes requests at once, so that completions are in flight.
# fio runs on CPU 0, the server on CPU 1, rq_affinity is 2.
#
# This script checks copy mode and recovery; test_generic_28 sources it to
# check the other modes (the table of modes by test below), so that each
# stays well under the selftests' time limit. A test none of whose modes
# the kernel supports is skipped.

. "$(cd "$(dirname "$0")" && pwd)"/test_common.sh

ERR_CODE=0
SUBMIT_CPU=0
SERVER_CPU=1
# seconds a killed server's fio may take to exit before this test fails
FIO_EXIT_TIMEOUT=30

_skip() {
	echo "$TID: skip: $*"
	_cleanup_test
	exit "$UBLK_SKIP_CODE"
}

_fail() {
	echo "$TID: FAIL: $*"
	ERR_CODE=255
}

_prep_dev() {
	local what=$1
	local dev_id=$2
	local pid

	pid=$(_get_ublk_daemon_pid "$dev_id")
	if ! taskset -a -p -c "$SERVER_CPU" "$pid" > /dev/null; then
		_fail "$what: can't move ublk server $pid to CPU $SERVER_CPU"
	fi
	if ! echo 2 > /sys/block/ublkb"$dev_id"/queue/rq_affinity; then
		_fail "$what: can't set rq_affinity of /dev/ublkb$dev_id to 2"
	fi
}

# the disk sequence number of /dev/ublkb$1: unlike the device number, it
# is never reused, so it tells this disk from a device of the same number
# that a test running beside this one added after it was deleted
_diskseq() {
	cat /sys/block/ublkb"$1"/diskseq 2>/dev/null
}

# is process $1 still running (and not just waiting to be reaped)?
_running() {
	local state

	state=$(awk '{ print $3 }' /proc/"$1"/stat 2>/dev/null)
	[ -n "$state" ] && [ "$state" != "Z" ]
}

# completed reads + writes of device $1
_ios() {
	awk '{ print $1 + $5 }' /sys/block/ublkb"$1"/stat 2>/dev/null
}

# wait up to 30 seconds for I/O beyond $2 completed ones to reach device
# $1 (requests in flight, or more completed) while fio, pid $3, runs: a
# slow machine may not have fio going 2 seconds after it started, and a
# server killed before that tests nothing
_wait_io() {
	local dev=$1
	local before=$2
	local fio_pid=$3
	local i r w n

	for ((i = 0; i < 300; i++)); do
		_running "$fio_pid" || return 1
		{ read -r r w < /sys/block/ublkb"$dev"/inflight; } 2>/dev/null
		n=$(_ios "$dev")
		if [ "${r:-0}" -gt 0 ] || [ "${w:-0}" -gt 0 ] ||
			[ "${n:-0}" -gt "$before" ]; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# wait up to $FIO_EXIT_TIMEOUT seconds for child $1 to exit, return its
# exit status, or 255 if it is still running
_wait_exit() {
	local pid=$1
	local i

	for ((i = 0; i < FIO_EXIT_TIMEOUT * 10; i++)); do
		if ! _running "$pid"; then
			wait "$pid"
			return $?
		fi
		sleep 0.1
	done
	return 255
}

# $1: "hold" (server holds each request for 2s) or "run", the rest: kublk
# options of the data copy mode
_kill_server() {
	local kind=$1
	local dev_id
	local state
	local fio_pid
	local fio_ret
	local start
	local args=()
	local what
	local ios
	local seq

	shift
	what="server killed, $kind, options '$*'"
	if [ "$kind" = "hold" ]; then
		args=(-t fault_inject -q 1 -d 4 --delay_us 2000000)
	else
		args=(-t null -q 2)
	fi

	dev_id=$(_add_ublk_dev "${args[@]}" --rq_affinity "$@")
	_check_add_dev "$TID" $?
	_prep_dev "$what" "$dev_id"
	seq=$(_diskseq "$dev_id")

	ios=$(_ios "$dev_id")
	taskset -c "$SUBMIT_CPU" fio --name=kill --filename=/dev/ublkb"$dev_id" \
		--rw=randrw --direct=1 --ioengine=libaio --bs=4k --iodepth=64 \
		--numjobs=1 --size=1G --runtime=20 --time_based \
		--allow_file_create=0 > /dev/null 2>&1 &
	fio_pid=$!
	if ! _wait_io "$dev_id" "${ios:-0}" "$fio_pid"; then
		_fail "$what: no I/O from fio reached device $dev_id within 30s"
	fi
	sleep 2
	if ! _running "$fio_pid"; then
		_fail "$what: fio exited before the server was killed"
	fi

	start=$SECONDS
	state=$(__ublk_kill_daemon "$dev_id" "DEAD")
	if [ "$state" != "DEAD" ]; then
		_fail "$what: device $dev_id is $state after killing the server, expected DEAD"
	fi

	_wait_exit "$fio_pid"
	fio_ret=$?
	if [ "$fio_ret" -eq 255 ] && _running "$fio_pid"; then
		_fail "$what: fio still runs ${FIO_EXIT_TIMEOUT}s after the server was killed"
		kill -9 "$fio_pid" 2>/dev/null
		wait "$fio_pid" 2>/dev/null
	elif [ "$fio_ret" -eq 0 ]; then
		_fail "$what: fio saw no error although the server was killed"
	elif [ "$kind" = "hold" ] && [ $((SECONDS - start)) -ge 10 ]; then
		_fail "$what: fio took $((SECONDS - start))s to fail after the kill, expected < 10s"
	fi

	if ! timeout 60 "$UBLK_PROG" del -n "$dev_id" > /dev/null; then
		_fail "$what: deleting device $dev_id failed or took more than 60s"
	fi
	sed -i "/^${dev_id}$/d" "${UBLK_TEST_DIR}/.ublk_devs"
	udevadm settle --timeout=20
	if [ -e /dev/ublkb"$dev_id" ] && [ ! -b /dev/ublkb"$dev_id" ]; then
		# fio re-created the node as a regular file, don't leave it
		rm -f /dev/ublkb"$dev_id"
	fi
	if [ -n "$seq" ] && [ "$(_diskseq "$dev_id")" = "$seq" ]; then
		_fail "$what: /dev/ublkb$dev_id (diskseq $seq) still exists" \
			"after deleting the device"
	fi
}

_recover() {
	local what="recovery, options '$*'"
	local dev_id
	local state
	local fio_pid

	dev_id=$(_add_ublk_dev -t null -q 2 -r 1 --rq_affinity "$@")
	_check_add_dev "$TID" $?
	_prep_dev "$what" "$dev_id"

	taskset -c "$SUBMIT_CPU" fio --name=recover \
		--filename=/dev/ublkb"$dev_id" --rw=randread --direct=1 \
		--ioengine=libaio --bs=4k --iodepth=64 --numjobs=1 --size=1G \
		--runtime=20 --time_based > /dev/null 2>&1 &
	fio_pid=$!
	sleep 2

	state=$(__ublk_kill_daemon "$dev_id" "QUIESCED")
	if [ "$state" != "QUIESCED" ]; then
		_fail "$what: device $dev_id is $state after killing the server, expected QUIESCED"
	else
		state=$(_recover_ublk_dev -n "$dev_id" -t null -q 2 -r 1 \
			--rq_affinity "$@")
		if [ "$state" != "LIVE" ]; then
			_fail "$what: device $dev_id is $state after recovery, expected LIVE"
		else
			_prep_dev "$what" "$dev_id"
			sleep 1
		fi
	fi

	if ! timeout 60 "$UBLK_PROG" del -n "$dev_id" > /dev/null; then
		_fail "$what: deleting device $dev_id failed or took more than 60s"
	fi
	sed -i "/^${dev_id}$/d" "${UBLK_TEST_DIR}/.ublk_devs"
	udevadm settle --timeout=20

	if ! _wait_exit "$fio_pid" && _running "$fio_pid"; then
		_fail "$what: fio still runs ${FIO_EXIT_TIMEOUT}s after the device was deleted"
		kill -9 "$fio_pid" 2>/dev/null
		wait "$fio_pid" 2>/dev/null
	fi
	if [ -e /dev/ublkb"$dev_id" ] && [ ! -b /dev/ublkb"$dev_id" ]; then
		rm -f /dev/ublkb"$dev_id"
	fi
}

# Kill the servers of devices of data copy mode $1, whose kublk options
# are the rest
_kill_mode() {
	shift
	_kill_server hold "$@"
	_kill_server run "$@"
}

_prep_test "fault_inject" "kill the server of UBLK_F_SUPPORT_RQ_AFFINITY devices during I/O"

if ! _have_feature "SUPPORT_RQ_AFFINITY"; then
	_skip "the kernel doesn't support UBLK_F_SUPPORT_RQ_AFFINITY"
fi
for prog in fio taskset timeout; do
	if ! _have_program "$prog"; then
		_skip "$prog is missing"
	fi
done
if ! taskset -c "$SUBMIT_CPU" true 2>/dev/null ||
   ! taskset -c "$SERVER_CPU" true 2>/dev/null; then
	_skip "needs CPUs $SUBMIT_CPU and $SERVER_CPU online and usable"
fi

# the data copy modes of each test that runs this script
case "$TID" in
generic_20)	modes="copy" ;;
generic_28)	modes="user_copy zero_copy auto_zc batch" ;;
*)		modes="" ;;
esac
_run_data_modes _kill_mode "$modes"

if [ "$TID" = "generic_20" ] && _have_feature "USER_RECOVERY"; then
	# requests owned by the server are failed, then reissued
	_recover
	_recover -i 1
	_recover -z
fi

_cleanup_test
_show_result "$TID" "$ERR_CODE"
