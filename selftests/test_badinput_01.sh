#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Bad input to every ublk command gets a clear errno, the one the C driver
# returns: wrong lengths and addresses, absent device ids, queue and tag ids
# out of range, FETCH_REQ twice, COMMIT_AND_FETCH_REQ of a tag the server
# does not own, parameters that break a limit, commands in the wrong device
# state, unprivileged callers and devices, a ring without SQE128, a second
# opener and bad mmaps of /dev/ublkcN.
#
# The cases are a table in ublk_badinput, a Rust program (the
# selftests/ublk_badinput crate of the ublk-rs repository) that the test
# harness builds and installs next to kublk. It runs against whichever ublk
# driver owns /dev/ublk-control and prints one KTAP line per case. Without
# the program the test is skipped.

ksft_skip=4
prog="$(cd "$(dirname "$0")" && pwd)/ublk_badinput"

if [ ! -f "$prog" ] || [ ! -x "$prog" ]; then
	echo "ublk_badinput is not built (cargo build --release -p ublk-badinput)"
	exit $ksft_skip
fi

"$prog" "$@"
case $? in
0) exit 0 ;;
4) exit $ksft_skip ;;
*) exit 1 ;;
esac
