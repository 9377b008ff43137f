#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Differential command fuzzing of the ublk UAPI: ublk_fuzz draws sequences
# of control commands, char device operations and io commands from a seed
# (mutated lengths, ids, flags, parameters, offsets and buffers; commands
# in the wrong state, from the wrong task, after a close, after the server
# went away), runs each against the C driver (ublk_drv) and then against
# the Rust driver (rust_ublk), loading each module in turn, and fails if
# the two answer any step differently (but for the known differences the
# program lists, with their reasons), if a step hangs, or if the module
# loaded before cannot be loaded again. The kernel log is checked by the
# harness.
#
# ublk_fuzz is a Rust program (the selftests/ublk_fuzz crate of the ublk-rs
# repository) that the test harness builds and installs next to kublk.
# Without it, or without both driver modules, the test is skipped.
#
# UBLK_FUZZ_TIME (seconds, default 120) bounds the run; UBLK_FUZZ_SEED
# picks the first seed (default: the time). A failing round prints the
# command that replays it.

ksft_skip=4
prog="$(cd "$(dirname "$0")" && pwd)/ublk_fuzz"

if [ ! -f "$prog" ] || [ ! -x "$prog" ]; then
	echo "ublk_fuzz is not built (cargo build --release -p ublk-fuzz)"
	exit $ksft_skip
fi

args=(--time "${UBLK_FUZZ_TIME:-120}" --steps 150)
[ -n "$UBLK_FUZZ_SEED" ] && args+=(--seed "$UBLK_FUZZ_SEED")

"$prog" "${args[@]}"
case $? in
0) exit 0 ;;
4) exit $ksft_skip ;;
*) exit 1 ;;
esac
