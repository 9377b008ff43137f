#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# kill -9 of the ublk server in a loop, under fio with crc32c verify, on a
# recovering device, against whichever ublk driver is loaded.
#
# kublk serves a loop device with user recovery and reissue (-r 1 -i 1): when
# its server dies the device is quiesced, requests wait, and those the dead
# server had received are reissued to the next one, so no I/O may fail. fio
# writes and verifies through the device again and again while another loop
# kills the server at a random point of the I/O, waits for QUIESCED, starts
# `kublk recover` and waits for LIVE: KILL_CYCLES times (50 unless set). Then
# the device is deleted and the checksums of the last fio run are verified
# from the backing file. Every step is bounded: a wait for a state, a
# recovery or a fio run that takes too long fails the test. The harness
# fails it too on any kernel splat.
#
# It prints its numbers: cycles, recovery times (kill to LIVE), fio runs and
# what they verified.

SELFTESTS=${SELFTESTS:?SELFTESTS (the upstream ublk selftests) not set}
# shellcheck source=/dev/null
. "$SELFTESTS/test_common.sh"
# test_common.sh finds kublk next to the running script; this one is not there.
UBLK_PROG=$SELFTESTS/kublk
export UBLK_PROG
TID=kill_recover

CYCLES=${KILL_CYCLES:-50}
STATE_WAIT=20   # s for QUIESCED after a kill, and for LIVE after a recover
RECOVER_WAIT=30 # s for `kublk recover` to return
FIO_WAIT=120    # s for one fio run
TARGET=(-t loop -q 2 -d 64 -r 1 -i 1)

fail() {
	echo "FAIL: $*"
	[ -n "${STOP:-}" ] && touch "$STOP"
	exit 1
}

_have_program fio || {
	echo "fio not installed"
	exit "$UBLK_SKIP_CODE"
}
for f in USER_RECOVERY USER_RECOVERY_REISSUE; do
	_have_feature "$f" || {
		echo "feature $f not supported"
		exit "$UBLK_SKIP_CODE"
	}
done

_prep_test "recover" "kill -9 of the server in a loop under fio verify ($CYCLES cycles)"
_create_backfile 0 64M
back=${UBLK_BACKFILES[0]}
STOP=$UBLK_TEST_DIR/stop
STATS=$UBLK_TEST_DIR/fio-runs

dev_id=$(_add_ublk_dev "${TARGET[@]}" "$back")
_check_add_dev "$TID" $?
dev=/dev/ublkb$dev_id
echo "device $dev_id: kublk add ${TARGET[*]} $back"

# now_ms: monotonic enough for seconds-long steps.
now_ms() { date +%s%3N; }

# wait_state <state> <what>: the device must reach it within STATE_WAIT s.
wait_state() {
	local state deadline=$(($(now_ms) + STATE_WAIT * 1000))
	while :; do
		state=$(_get_ublk_dev_state "$dev_id")
		[ "$state" = "$1" ] && return 0
		[ "$(now_ms)" -gt "$deadline" ] && fail "$2: state $state, not $1 after ${STATE_WAIT}s"
		sleep 0.1
	done
}

# Two regions, both verified after each write pass: 4k random writes, and
# random writes of 8k to 256k.
small=(--name=v4k --rw=randwrite --bs=4k --offset=0 --size=16M
	--verify=crc32c --verify_fatal=1)
big=(--name=vbig --rw=randwrite --bsrange=8k-256k --offset=32M --size=16M
	--verify=crc32c --verify_fatal=1)

# fio_loop: write+verify passes until STOP exists; one line per pass in STATS.
fio_loop() {
	local n=0 rc
	while [ ! -e "$STOP" ]; do
		n=$((n + 1))
		timeout -k 10 "$FIO_WAIT" fio --ioengine=io_uring --direct=1 --iodepth=16 \
			--randseed=$((20250701 + n)) --filename="$dev" \
			"${small[@]}" "${big[@]}" >"$UBLK_TEST_DIR/fio.log" 2>&1
		rc=$?
		if [ "$rc" -ne 0 ]; then
			cat "$UBLK_TEST_DIR/fio.log"
			[ "$rc" -eq 124 ] && fail "fio pass $n did not finish in ${FIO_WAIT}s"
			fail "fio pass $n failed (exit $rc): I/O error or verify mismatch across a kill"
		fi
		echo "$n $((n + 20250701))" >>"$STATS"
	done
}

# On any exit before the end: stop fio, then delete the device.
finished=
cleanup() {
	[ -n "$finished" ] && return
	touch "$STOP"
	wait
	_cleanup_test >/dev/null 2>&1
}
trap cleanup EXIT

touch "$STATS"
fio_loop &
fio_pid=$!

min=999999 max=0 sum=0
for ((c = 1; c <= CYCLES; c++)); do
	[ -e "$STOP" ] && break
	# Let fio get requests in flight: 0.2 to 1.0 s after the last recovery.
	sleep "0.$((RANDOM % 9 + 2))"
	pid=$(_get_ublk_daemon_pid "$dev_id")
	[ -n "$pid" ] || fail "cycle $c: no server pid for device $dev_id"
	t0=$(now_ms)
	kill -9 "$pid"
	wait_state QUIESCED "cycle $c, after kill -9 $pid"
	out=$(timeout -k 5 "$RECOVER_WAIT" "$UBLK_PROG" recover -n "$dev_id" "${TARGET[@]}" "$back" 2>&1)
	rc=$?
	[ "$rc" -eq 124 ] && fail "cycle $c: kublk recover did not return in ${RECOVER_WAIT}s"
	[ "$rc" -eq 0 ] || fail "cycle $c: kublk recover failed (exit $rc): $out"
	wait_state LIVE "cycle $c, after kublk recover"
	ms=$(($(now_ms) - t0))
	sum=$((sum + ms))
	[ "$ms" -lt "$min" ] && min=$ms
	[ "$ms" -gt "$max" ] && max=$ms
done
done_cycles=$((c - 1))

touch "$STOP"
wait "$fio_pid" || fail "the fio loop failed (above)"
[ "$done_cycles" -eq "$CYCLES" ] || fail "stopped after $done_cycles of $CYCLES cycles"

runs=$(wc -l <"$STATS")
[ "$runs" -gt 0 ] || fail "no fio pass completed"
last_seed=$(tail -n 1 "$STATS" | cut -d' ' -f2)

_ublk_del_dev "$dev_id" || fail "kublk del -n $dev_id failed"
udevadm settle --timeout=20 >/dev/null 2>&1

# The device is gone: what the last pass wrote must be in the backing file.
timeout -k 10 "$FIO_WAIT" fio --ioengine=psync --randseed="$last_seed" \
	--filename="$back" "${small[@]}" "${big[@]}" --verify_only \
	>"$UBLK_TEST_DIR/fio.log" 2>&1 || {
	cat "$UBLK_TEST_DIR/fio.log"
	fail "the backing file does not hold what the last fio pass wrote"
}

echo "kill_recover: $CYCLES cycles, kill -9 to LIVE: min ${min} ms, mean $((sum / CYCLES)) ms, max ${max} ms"
echo "kill_recover: $runs fio passes completed, $((runs * 32)) MiB written and verified with crc32c, 0 errors; last pass verified from the backing file"

finished=1
rm -f "$STOP" "$STATS" "$UBLK_TEST_DIR/fio.log"
_cleanup_test
_show_result "$TID" 0
