#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Helpers of the rublk harness tests (sourced). rublk is the Rust ublk
# server from the crates registry that the harness builds (RUBLK, from
# job.env; RUBLK_MISSING says why there is none). Every step that talks to
# the driver runs under a timeout, so a driver that does not answer fails
# the test with a message instead of hanging it.

SKIP=4
STEP_TIMEOUT=${STEP_TIMEOUT:-60}

# To stderr: die also runs inside $(...).
die() {
	echo "FAIL: $*" >&2
	exit 1
}

rublk_require() {
	if [ -z "${RUBLK:-}" ]; then
		echo "rublk binary missing: ${RUBLK_MISSING:-RUBLK not set in job.env}"
		exit "$SKIP"
	fi
	if [ ! -x "$RUBLK" ]; then
		echo "rublk binary missing: no executable $RUBLK"
		exit "$SKIP"
	fi
	command -v fio >/dev/null || {
		echo "fio not installed"
		exit "$SKIP"
	}
}

# rublk_add <target> <args...>: adds a device, prints its id. rublk forks a
# daemon that serves the device; the parent prints "dev id N: ..." once the
# device is live.
rublk_add() {
	local out rc id
	out=$(timeout -k 5 "$STEP_TIMEOUT" "$RUBLK" add "$@" 2>&1)
	rc=$?
	echo "rublk add $*: exit $rc" >&2
	echo "$out" >&2
	[ "$rc" -eq 124 ] && die "rublk add $* did not finish in ${STEP_TIMEOUT}s"
	[ "$rc" -eq 0 ] || die "rublk add $* failed (exit $rc)"
	id=$(echo "$out" | sed -n 's/^dev id \([0-9]*\):.*/\1/p' | head -n 1)
	[ -n "$id" ] || die "rublk add $* printed no device id"
	echo "$id"
}

# wait_bdev <id>: /dev/ublkbN must be a block device within 20 s.
wait_bdev() {
	udevadm settle --timeout=20 >/dev/null 2>&1
	for _ in $(seq 200); do
		[ -b "/dev/ublkb$1" ] && return 0
		sleep 0.1
	done
	die "/dev/ublkb$1 did not appear"
}

# rublk_del <id>: deletes the device; the device nodes and the daemon must go.
rublk_del() {
	local id=$1 rc
	timeout -k 5 "$STEP_TIMEOUT" "$RUBLK" del -n "$id"
	rc=$?
	[ "$rc" -eq 0 ] || die "rublk del -n $id failed (exit $rc)"
	for _ in $(seq 100); do
		[ -e "/dev/ublkc$id" ] || [ -e "/dev/ublkb$id" ] || break
		sleep 0.1
	done
	[ -e "/dev/ublkc$id" ] && die "/dev/ublkc$id still exists after rublk del"
	[ -e "/dev/ublkb$id" ] && die "/dev/ublkb$id still exists after rublk del"
	for _ in $(seq 100); do
		pgrep -x rublk >/dev/null || return 0
		sleep 0.1
	done
	die "a rublk daemon is still running after rublk del: $(pgrep -a -x rublk)"
}

# rublk_info <id>: the driver's view of the device, for the log.
rublk_info() {
	timeout -k 5 "$STEP_TIMEOUT" "$RUBLK" list -n "$1" 2>&1 || die "rublk list -n $1 failed"
}

# run_fio <what> <fio args...>: fio under a timeout; fails the test on any
# error, verify mismatch included (fio exits non-zero then).
run_fio() {
	local what=$1 rc
	shift
	echo "fio: $what"
	timeout -k 10 300 fio --ioengine=io_uring --direct=1 --iodepth=16 \
		--randseed=20250701 --group_reporting "$@"
	rc=$?
	[ "$rc" -eq 124 ] && die "fio ($what) did not finish in 300s"
	[ "$rc" -eq 0 ] || die "fio ($what) failed (exit $rc)"
}
