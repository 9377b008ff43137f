#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Write and verify data (fio, crc32c) on devices created with
# UBLK_F_SUPPORT_RQ_AFFINITY, in every data copy mode kublk offers, with
# one and with two queues, at rq_affinity 0, 1 and 2.
#
# fio runs on CPU 0 and the ublk server on CPU 1, so completions really
# move between CPUs: at rq_affinity 2 every request is sent back to CPU 0
# by IPI; at rq_affinity 0 the request is ended on CPU 1, in BLOCK_SOFTIRQ
# for the single queue device and in the ublk server task itself (the
# fallback of blk_mq_complete_request_remote()) for the device with two
# queues. What rq_affinity 1 does depends on whether the two CPUs share a
# cache.
#
# This script checks copy and user copy mode; test_generic_27 sources it
# to check the other modes (the table of modes by test below), so that
# each stays well under the selftests' time limit. A test none of whose
# modes the kernel supports is skipped.

. "$(cd "$(dirname "$0")" && pwd)"/test_common.sh

ERR_CODE=0
SUBMIT_CPU=0
SERVER_CPU=1

_skip() {
	echo "$TID: skip: $*"
	_cleanup_test
	exit "$UBLK_SKIP_CODE"
}

_fail() {
	echo "$TID: FAIL: $*"
	ERR_CODE=255
}

_verify_dev() {
	local mode=$1
	local nr_queues=$2
	local dev_id
	local pid
	local flags
	local aff
	local what="mode $mode, $nr_queues queue(s)"

	shift 2
	dev_id=$(_add_ublk_dev -t loop -q "$nr_queues" --rq_affinity "$@" \
		"${UBLK_BACKFILES[0]}")
	_check_add_dev "$TID" $?

	flags=$("$UBLK_PROG" list -n "$dev_id" | awk '{
		for (i = 1; i < NF; i++)
			if ($i == "flags") { print $(i + 1); exit }
	}')
	if [ -z "$flags" ] || (( !(flags & 0x200000) )); then
		_fail "$what: device $dev_id has flags '$flags'," \
			"without UBLK_F_SUPPORT_RQ_AFFINITY (0x200000)"
	fi

	pid=$(_get_ublk_daemon_pid "$dev_id")
	if ! taskset -a -p -c "$SERVER_CPU" "$pid" > /dev/null; then
		_fail "$what: can't move ublk server $pid to CPU $SERVER_CPU"
	fi

	for aff in 0 1 2; do
		if ! echo "$aff" > /sys/block/ublkb"$dev_id"/queue/rq_affinity; then
			_fail "$what: can't set rq_affinity to $aff"
			continue
		fi
		if ! taskset -c "$SUBMIT_CPU" fio --name=verify \
				--filename=/dev/ublkb"$dev_id" --rw=randwrite \
				--direct=1 --ioengine=libaio --bs=8k --iodepth=32 \
				--verify=crc32c --do_verify=1 --verify_state_save=0 \
				--size=4M > /dev/null; then
			_fail "$what, rq_affinity $aff: fio write/verify failed"
		elif [ "$UBLK_TEST_QUIET" -eq 0 ]; then
			echo "$what, rq_affinity $aff: verified"
		fi
	done

	_ublk_del_dev "$dev_id" > /dev/null
	udevadm settle --timeout=20
}

# Verify data on devices of data copy mode $1 with one queue and with two;
# the rest are the mode's kublk options
_verify_mode() {
	local mode=$1

	shift
	_verify_dev "$mode" 1 "$@"
	_verify_dev "$mode" 2 "$@"
}

_prep_test "loop" "data integrity with UBLK_F_SUPPORT_RQ_AFFINITY at rq_affinity 0, 1, 2"

if ! _have_feature "SUPPORT_RQ_AFFINITY"; then
	_skip "the kernel doesn't support UBLK_F_SUPPORT_RQ_AFFINITY"
fi
for prog in fio taskset awk; do
	if ! _have_program "$prog"; then
		_skip "$prog is missing"
	fi
done
if ! taskset -c "$SUBMIT_CPU" true 2>/dev/null ||
   ! taskset -c "$SERVER_CPU" true 2>/dev/null; then
	_skip "needs CPUs $SUBMIT_CPU and $SERVER_CPU online and usable"
fi

_create_backfile 0 64M

# the data copy modes of each test that runs this script
case "$TID" in
generic_19)	modes="copy user_copy" ;;
generic_27)	modes="zero_copy auto_zc batch" ;;
*)		modes="" ;;
esac
_run_data_modes _verify_mode "$modes"

_cleanup_test
_show_result "$TID" "$ERR_CODE"
