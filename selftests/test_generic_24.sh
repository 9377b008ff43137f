#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# A completion that the fail_io_timeout fault injection drops fails its
# request once queue/io_timeout expires, and the device can still be
# deleted; with and without UBLK_F_SUPPORT_RQ_AFFINITY. If the server
# exits first, the request fails with EIO at once instead, and neither the
# server's exit nor the deletion waits for its timer.
#
# ublk asks blk_should_fake_timeout() whether to drop the completion of a
# copy-mode READ that the server completed in full. A dropped completion
# must leave the request in flight until it times out, then ublk_timeout()
# fails it with BLK_STS_TIMEOUT, so the reader sees ETIMEDOUT. Before,
# the READ's data reached the reader but the request was never ended:
# it held its tag and the queue's usage count, and deleting the device
# hung in del_gendisk().

. "$(cd "$(dirname "$0")" && pwd)"/test_common.sh

ERR_CODE=0
FI=/sys/kernel/debug/fail_io_timeout

_fail() {
	echo "$TID: FAIL: $*"
	ERR_CODE=255
}

# _read <dev_id>: one 4k direct READ, 1 GiB into the device, away from what
# udev reads; given up after 60 seconds (unless dd sleeps uninterruptibly).
_read() {
	timeout 60 dd if=/dev/ublkb"$1" of=/dev/null bs=4k count=1 \
		skip=262144 iflag=direct status=none 2>&1
}

_prep_test "fault_inject" "a completion dropped by fail_io_timeout fails its request"

if [ ! -d "$FI" ]; then
	echo "$TID: skip: no $FI (needs CONFIG_FAIL_IO_TIMEOUT and debugfs)"
	_cleanup_test
	exit "$UBLK_SKIP_CODE"
fi
for prog in dd timeout; do
	if ! _have_program "$prog"; then
		echo "$TID: skip: $prog is missing"
		_cleanup_test
		exit "$UBLK_SKIP_CODE"
	fi
done

# fail_io_timeout's settings are global: put them back on exit
FI_KNOBS="probability interval times verbose space"
declare -A FI_SAVED=()
for k in $FI_KNOBS; do
	FI_SAVED[$k]=$(cat "$FI/$k")
done
_restore_fi() {
	local k

	for k in $FI_KNOBS; do
		echo "${FI_SAVED[$k]}" > "$FI/$k"
	done
}
trap _restore_fi EXIT

# no partition scan READ (asynchronous, after udev settles) may take the
# one injection meant for the test's READ
noscan=()
if _have_feature "NO_AUTO_PART_SCAN"; then
	noscan=(--no_auto_part_scan)
fi

modes=("")
if _have_feature "SUPPORT_RQ_AFFINITY"; then
	modes+=("--rq_affinity")
fi

for mode in "${modes[@]}"; do
	what="${mode:-no flag}"
	# shellcheck disable=SC2086 # $mode is empty or one option
	dev_id=$(_add_ublk_dev -t fault_inject -q 1 -d 16 "${noscan[@]}" $mode)
	_check_add_dev "$TID" $?
	bdev=/sys/block/ublkb"$dev_id"

	echo 1000 > "$bdev"/queue/io_timeout
	echo 0 > "$FI"/verbose
	echo 0 > "$FI"/space
	echo 1 > "$FI"/interval
	echo 100 > "$FI"/probability
	echo 1 > "$FI"/times
	echo 1 > "$bdev"/io-timeout-fail
	out=$(_read "$dev_id")
	rc=$?
	echo 0 > "$bdev"/io-timeout-fail
	left=$(cat "$FI"/times)
	echo 0 > "$FI"/probability

	if [ "$left" = 1 ]; then
		echo "$TID: skip: the driver never asked blk_should_fake_timeout() ($what)"
		_cleanup_test
		[ "$ERR_CODE" -eq 0 ] && ERR_CODE=$UBLK_SKIP_CODE
		_show_result "$TID" "$ERR_CODE"
	fi
	if [ "$rc" -eq 124 ]; then
		_fail "$what: READ with a dropped completion still pending after 60 s"
	elif [ "$rc" -eq 0 ]; then
		_fail "$what: READ with a dropped completion succeeded"
	elif ! grep -q "timed out" <<< "$out"; then
		_fail "$what: READ with a dropped completion failed, but not with ETIMEDOUT: $out"
	fi
	if ! out=$(_read "$dev_id"); then
		_fail "$what: the next READ failed: $out"
	fi

	# a request that was never ended would block this for good
	_ublk_del_dev "$dev_id" > /dev/null &
	del=$!
	for _ in $(seq 120); do
		kill -0 "$del" 2> /dev/null || break
		sleep 0.5
	done
	if kill -0 "$del" 2> /dev/null; then
		_fail "$what: deleting the device still blocked after 60 s"
		_show_result "$TID" "$ERR_CODE"
	fi
	wait "$del"
done

# The server exits while a dropped completion waits for its timer, set
# far beyond what the checks below allow.
dev_id=$(_add_ublk_dev -t fault_inject -q 1 -d 16 "${noscan[@]}")
_check_add_dev "$TID" $?
bdev=/sys/block/ublkb"$dev_id"
echo 60000 > "$bdev"/queue/io_timeout
echo 1 > "$FI"/times
echo 100 > "$FI"/probability
echo 1 > "$bdev"/io-timeout-fail
start=$SECONDS
_read "$dev_id" > "$UBLK_TEST_DIR"/exit_read.out &
reader=$!
# the injection is spent when the completion is dropped
for _ in $(seq 200); do
	[ "$(cat "$FI"/times)" = 0 ] && break
	sleep 0.1
done
left=$(cat "$FI"/times)
echo 0 > "$bdev"/io-timeout-fail
echo 0 > "$FI"/probability
if [ "$left" != 0 ]; then
	_fail "server exit: the READ's completion was not dropped"
else
	state=$(__ublk_kill_daemon "$dev_id" "DEAD")
	[ "$state" = "DEAD" ] || _fail "server exit: device is $state, not DEAD"
fi
wait "$reader"
rc=$?
took=$((SECONDS - start))
out=$(cat "$UBLK_TEST_DIR"/exit_read.out)
if [ "$rc" -eq 0 ]; then
	_fail "server exit: READ with a dropped completion succeeded"
elif ! grep -q "Input/output error" <<< "$out"; then
	_fail "server exit: READ with a dropped completion did not fail with EIO: $out"
elif [ "$took" -ge 30 ]; then
	_fail "server exit: READ with a dropped completion took ${took}s to fail"
fi
if ! timeout 30 "${UBLK_PROG}" del -n "$dev_id" > /dev/null 2>&1; then
	_fail "server exit: deleting the device failed or took 30 s"
else
	# _cleanup_test must not delete the number again: a test running
	# beside this one may have been given it by now
	sed -i "/^${dev_id}$/d" "${UBLK_TEST_DIR}/.ublk_devs"
fi

_cleanup_test
_show_result "$TID" "$ERR_CODE"
