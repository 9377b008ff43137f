#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# A new ublk device has no I/O scheduler ("none"), whatever its number of
# queues, and a scheduler can still be selected through sysfs.
#
# Single queue devices are the ones that matter: add_disk() gives blk-mq
# devices with one hardware queue mq-deadline unless the driver sets
# BLK_MQ_F_NO_SCHED_BY_DEFAULT, while devices with more queues get "none"
# anyway.

. "$(cd "$(dirname "$0")" && pwd)"/test_common.sh

ERR_CODE=0

_fail() {
	echo "$TID: FAIL: $*"
	ERR_CODE=255
}

# print the scheduler in use by device $1, the one in brackets
_cur_sched() {
	sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/block/ublkb"$1"/queue/scheduler
}

_prep_test "null" "new devices use no I/O scheduler, one can still be selected"

# add_disk() gives a single queue device mq-deadline only if it is
# registered by then, and doesn't load its module: load it first, or a
# single queue device would get "none" anyway.
modprobe mq-deadline > /dev/null 2>&1

for nr_queues in 1 2; do
	dev_id=$(_add_ublk_dev -t null -q "$nr_queues")
	_check_add_dev "$TID" $?

	if [ "$nr_queues" -eq 1 ] &&
	   ! grep -qw "mq-deadline" /sys/block/ublkb"$dev_id"/queue/scheduler; then
		echo "$TID: skip: mq-deadline is not available, a single queue" \
			"device gets no scheduler whatever the driver asks"
		_cleanup_test
		_show_result "$TID" "$UBLK_SKIP_CODE"
	fi

	sched=$(_cur_sched "$dev_id")
	if [ "$sched" != "none" ]; then
		_fail "$nr_queues queue(s): new device uses scheduler" \
			"'$sched', expected 'none'" \
			"($(cat /sys/block/ublkb"$dev_id"/queue/scheduler))"
	fi

	if [ "$nr_queues" -eq 1 ]; then
		sq_dev_id=$dev_id
	else
		_ublk_del_dev "$dev_id" > /dev/null
	fi
done

for sched in mq-deadline none; do
	if ! echo "$sched" > /sys/block/ublkb"$sq_dev_id"/queue/scheduler; then
		_fail "can't select scheduler $sched"
	fi
	cur=$(_cur_sched "$sq_dev_id")
	if [ "$cur" != "$sched" ]; then
		_fail "selected scheduler $sched, but the device uses '$cur'"
	fi
	if ! dd if=/dev/ublkb"$sq_dev_id" of=/dev/null bs=4k count=16 \
			iflag=direct status=none; then
		_fail "reading /dev/ublkb$sq_dev_id failed with scheduler $sched"
	fi
done

_cleanup_test
_show_result "$TID" "$ERR_CODE"
