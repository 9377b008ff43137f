#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# A ublk server ends a request whose completion drops the last reference of
# a file of the disk while a partition rescan, holding disk->open_mutex,
# waits for that same server: the driver must not make the server release
# the file itself.
#
# A ublk server that commits a request (COMMIT_AND_FETCH_REQ, copy mode)
# ends it inline, in its own task. If the bio completion then drops the last
# reference of a file and bottom halves are enabled, fput() queues the
# file's release as task work of the server, which runs it when it returns
# to user space; releasing a block device file takes disk->open_mutex. If a
# BLKRRPART rescan holds that mutex while it reads the partition table
# through the same server, the server blocks on the mutex and never serves
# the read: deadlock. Drivers end requests with bottom halves disabled, so
# that fput() leaves the release to the delayed_fput work item instead
# (ublk_drv: the comment in __ublk_complete_rq()).
#
# ublk_release_race reaches that point on demand: it is its own ublk server
# (copy mode, one queue of four tags); a child opens the disk with O_DIRECT,
# submits a Linux AIO read of 4 KiB and closes the disk, so that the AIO
# request holds the file's last reference; the server holds that read; a
# thread drops the page cache (BLKFLSBUF) and runs BLKRRPART; when the
# rescan's read of sector 0 reaches the server, the server first commits
# the held read, then serves the rest. It passes if BLKRRPART returns 0
# within 30 s, the AIO read completes with 4096 bytes and the device is
# stopped and deleted. A hang fails, with the kernel stacks of the server
# and the BLKRRPART thread; its device is then left behind. A second case
# does the same with UBLK_F_SUPPORT_RQ_AFFINITY (if the driver has it), the
# server and the child pinned to a CPU that a queue maps alone, so that
# blk_mq_complete_request_remote() leaves the completion to the server's
# context.
#
# ublk_release_race is a Rust program (the selftests/ublk_release_race crate
# of the ublk-rs repository) that the test harness builds and installs next
# to kublk. Without it the test is skipped.

ksft_skip=4
prog="$(cd "$(dirname "$0")" && pwd)/ublk_release_race"

if [ ! -f "$prog" ] || [ ! -x "$prog" ]; then
	echo "ublk_release_race is not built (cargo build --release -p ublk-release-race)"
	exit $ksft_skip
fi

"$prog" "$@"
case $? in
0) exit 0 ;;
4) exit $ksft_skip ;;
*) exit 1 ;;
esac
