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
	if [ "$rc" -eq 124 ]; then
		# Where the driver waits, for the log: the blocked tasks' stacks.
		echo w >/proc/sysrq-trigger 2>/dev/null
		die "rublk add $* did not finish in ${STEP_TIMEOUT}s"
	fi
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

# rublk_require_flag <id> <flag value> <name>: the device must have the
# UBLK_F_* flag, as "rublk list" prints the flags: a driver that silently
# dropped the flag would otherwise let a mode's test run in copy mode.
rublk_require_flag() {
	local flags
	flags=$(rublk_info "$1" | sed -n 's/.* flags \(0x[0-9a-f]*\) .*/\1/p' | head -n 1)
	[ -n "$flags" ] || die "rublk list -n $1 printed no flags"
	(( flags & $2 )) || die "device $1 lacks UBLK_F_$3 (flags $flags)"
}

# rublk_require_mode <id> [rublk add options...]: the device must have the
# flags of the data mode that the options ask for.
rublk_require_mode() {
	local id=$1
	shift
	case " $* " in
	*" -u "*) rublk_require_flag "$id" $((1 << 7)) USER_COPY ;;
	*" -z "*) rublk_require_flag "$id" $((1 << 11)) AUTO_BUF_REG ;;
	esac
}

# rublk_null_io <what> [rublk add options...]: rublk's null target, with the
# given data mode options: add, fio I/O, delete.
#
# The null target keeps no data (a read returns whatever is in the server's
# buffer for that tag, or nothing is copied at all with user copy), so no
# data can be verified; fio checks that every write and read completes
# without error at 4k and at larger block sizes, with a deep queue on two
# hardware queues. rublk_loop_verify verifies data.
rublk_null_io() {
	local what=$1 id dev
	shift
	id=$(rublk_add null -q 2 -d 64 "$@") || exit 1
	wait_bdev "$id"
	rublk_info "$id"
	rublk_require_mode "$id" "$@"
	dev=/dev/ublkb$id

	run_fio "null ($what) 4k randwrite+randread" --name=w4k --filename="$dev" \
		--rw=randrw --bs=4k --size=32M --io_size=32M
	run_fio "null ($what) 4k-512k randwrite+randread" --name=wbig --filename="$dev" \
		--rw=randrw --bsrange=8k-512k --size=256M --io_size=64M

	rublk_del "$id"
	echo "ok: rublk null ($what): add, I/O, delete"
}

# rublk_loop_verify <what> [rublk add options...]: rublk's loop target, with
# the given data mode options, on a backing file in the guest's tmpfs: fio
# random writes with crc32c verification at 4k and at larger block sizes,
# then, after the device is deleted, the same checksums read straight from
# the backing file (the data really went through).
rublk_loop_verify() {
	local what=$1 dir back id dev
	shift
	dir=$(mktemp -d /tmp/rublk-loop.XXXXXX) || die "mktemp failed"
	# shellcheck disable=SC2064 # the directory is known now
	trap "rm -rf '$dir'" EXIT
	back=$dir/backing.img
	truncate -s 64M "$back" || die "cannot create $back"

	id=$(rublk_add loop -f "$back" -q 2 -d 64 "$@") || exit 1
	wait_bdev "$id"
	rublk_info "$id"
	rublk_require_mode "$id" "$@"
	dev=/dev/ublkb$id

	local small=(--name=v4k --rw=randwrite --bs=4k --offset=0 --size=16M
		--verify=crc32c --verify_fatal=1)
	local big=(--name=vbig --rw=randwrite --bsrange=8k-256k --offset=32M
		--size=24M --verify=crc32c --verify_fatal=1)
	run_fio "loop ($what) 4k randwrite, crc32c verify" --filename="$dev" "${small[@]}"
	run_fio "loop ($what) 8k-256k randwrite, crc32c verify" --filename="$dev" "${big[@]}"

	rublk_del "$id"

	# The device is gone: what fio wrote through it must be in the file.
	run_fio "backing file, 4k region verify only" --filename="$back" --direct=0 \
		"${small[@]}" --verify_only
	run_fio "backing file, 8k-256k region verify only" --filename="$back" --direct=0 \
		"${big[@]}" --verify_only
	echo "ok: rublk loop ($what): add, crc32c write+verify, delete, data in the backing file"
}
