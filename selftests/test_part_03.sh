#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Unload the ublk driver module right after a device with a partition
# table was started and deleted.
#
# START_DEV adds the disk and leaves the partition scan to a work item
# (partition_scan_work in ublk_drv), so that a server which is slow to
# answer the scan's reads can't block START_DEV. That work item is not
# tied to any open file and holds no module reference: if STOP_DEV / DEL_DEV
# neither cancel it nor wait for it, it can still be queued or running when
# the device is gone and the module unloaded, and then runs code and data of
# a module that is no longer there (a use after free of the device and, once
# the module's memory is reused, a crash in the workqueue).
#
# Each round writes an MBR partition table (one primary partition, four
# logical ones in an extended partition, so the scan follows a chain of
# reads through the server) to a new backing file, adds a loop device on it
# (kublk add returns once START_DEV is done), deletes it at once and unloads
# the module as soon as its reference count allows, then loads it again.
# A round fails if the unload fails, the module stays listed, or a node or
# sysfs entry of the round's disk or its partitions is left; the kernel log
# (use after free, workqueue or module loader warnings) is for the runner
# to check.
#
# It works with whichever ublk driver module is loaded, ublk_drv or another
# module providing /dev/ublk-control (rust_ublk), and loads that same module
# again at the end. It skips when the driver is built in or can't be
# unloaded for other reasons (checked once before any device is added).

. "$(cd "$(dirname "$0")" && pwd)"/test_common.sh

ERR_CODE=0
ROUNDS=5
UBLK_MOD=""

_fail() {
	echo "$TID: FAIL: $*"
	ERR_CODE=255
}

_skip() {
	_cleanup_test
	echo "$TID: skip: $*"
	exit "$UBLK_SKIP_CODE"
}

# the ublk driver module in /proc/modules, if exactly one is listed
_loaded_ublk_module() {
	awk '$1 == "ublk_drv" || $1 == "rust_ublk" { print $1 }' /proc/modules
}

_module_listed() {
	grep -q "^$1 " /proc/modules
}

_load_module() {
	local i

	modprobe "$UBLK_MOD" || return 1
	for ((i = 0; i < 50; i++)); do
		[ -c /dev/ublk-control ] && return 0
		sleep 0.1
	done
	echo "$TID: /dev/ublk-control missing after loading $UBLK_MOD"
	return 1
}

# leave the module loaded for the tests that come after this one
_restore_module() {
	if [ -n "$UBLK_MOD" ] && ! _module_listed "$UBLK_MOD"; then
		modprobe "$UBLK_MOD"
	fi
}

# Wait until nothing holds the module (the server's files may be released
# a little after it exited, io_uring drops its files from a work item); the
# partition scan work holds no reference, so it doesn't delay the unload.
_wait_unused() {
	local refcnt=""
	local i

	for ((i = 0; i < 200; i++)); do
		read -r refcnt < /sys/module/"$UBLK_MOD"/refcnt || return 1
		[ "$refcnt" = 0 ] && return 0
		sleep 0.05
	done
	echo "$TID: $UBLK_MOD still in use (refcnt $refcnt) 10s after its devices were deleted"
	return 1
}

_unload_module() {
	_wait_unused || return 1
	if ! modprobe -r "$UBLK_MOD"; then
		echo "$TID: modprobe -r $UBLK_MOD failed"
		return 1
	fi
	if _module_listed "$UBLK_MOD"; then
		echo "$TID: $UBLK_MOD still in /proc/modules after modprobe -r"
		return 1
	fi
	return 0
}

# one primary partition and four logical ones behind it
_write_part_table() {
	sfdisk -q "$1" > /dev/null <<EOF
label: dos
start=2048, size=4MiB, type=83
start=10240, type=5
size=4MiB, type=83
size=4MiB, type=83
size=4MiB, type=83
size=4MiB, type=83
EOF
}

# _check_gone DEV_ID AFTER [EXTRA_PATH...]: the disk DEV_ID and its
# partitions (and EXTRA_PATHs) are gone
_check_gone() {
	local dev_id=$1
	local after=$2
	local f

	shift 2
	for f in /sys/block/ublkb"$dev_id" /dev/ublkb"$dev_id" \
		 /dev/ublkb"$dev_id"p* "$@"; do
		if [ -e "$f" ]; then
			echo "$TID: $f left after $after"
			return 1
		fi
	done
	return 0
}

if ! _have_program sfdisk; then
	echo "$TID: skip: sfdisk not installed"
	exit "$UBLK_SKIP_CODE"
fi

_prep_test "partition" "unload the driver right after START_DEV's partition scan work was queued"
trap _restore_module EXIT
trap 'exit 255' TERM INT

mods=$(_loaded_ublk_module)
if [ -z "$mods" ]; then
	[ -c /dev/ublk-control ] && _skip "the ublk driver is built in"
	_skip "no ublk driver module is loaded"
fi
if [ "$(echo "$mods" | wc -l)" -ne 1 ]; then
	_skip "more than one ublk driver module is loaded: $(echo "$mods" | tr '\n' ' ')"
fi
UBLK_MOD=$mods

# Can it be unloaded at all, before any device of ours existed?
[ -e /sys/module/"$UBLK_MOD"/refcnt ] || _skip "no module unloading (CONFIG_MODULE_UNLOAD)"
holders=$(ls /sys/module/"$UBLK_MOD"/holders 2> /dev/null)
[ -n "$holders" ] && _skip "$UBLK_MOD is used by module(s) $holders"
_wait_unused > /dev/null || _skip "$UBLK_MOD is in use before the test"
out=$(modprobe -r "$UBLK_MOD" 2>&1) || _skip "modprobe -r $UBLK_MOD fails before any device was added: $out"
if ! _load_module; then
	echo "$TID: FAIL: can't load $UBLK_MOD again"
	_cleanup_test
	_show_result "$TID" 255
fi

# The rounds prove something only if the driver scans the partition table:
# check that once, letting the scan finish.
_create_backfile 0 32M
_write_part_table "${UBLK_BACKFILES[0]}" || _fail "sfdisk failed"
if [ "$ERR_CODE" -eq 0 ]; then
	dev_id=$(_add_ublk_dev_no_settle -t loop "${UBLK_BACKFILES[0]}")
	_check_add_dev "$TID" $?
	for ((i = 0; i < 100; i++)); do
		[ -e /sys/block/ublkb"$dev_id"/ublkb"$dev_id"p8 ] && break
		sleep 0.1
	done
	if [ ! -e /sys/block/ublkb"$dev_id"/ublkb"$dev_id"p8 ]; then
		_fail "$UBLK_MOD: no partitions on ublkb$dev_id 10s after START_DEV," \
			"found:" /sys/block/ublkb"$dev_id"/ublkb"$dev_id"p*
	fi
	_ublk_del_dev "$dev_id"
fi

for ((round = 1; round <= ROUNDS && ERR_CODE == 0; round++)); do
	_create_backfile 0 32M
	if ! _write_part_table "${UBLK_BACKFILES[0]}"; then
		_fail "round $round: sfdisk failed"
		break
	fi

	# no udevadm settle: the scan work must still be pending or running
	dev_id=$(_add_ublk_dev_no_settle -t loop "${UBLK_BACKFILES[0]}")
	_check_add_dev "$TID" $?
	_ublk_del_dev "$dev_id"
	_check_gone "$dev_id" "kublk del" || _fail "round $round: device not deleted"

	if ! _unload_module; then
		_fail "round $round: unloading $UBLK_MOD right after START_DEV and DEL_DEV"
		break
	fi
	_check_gone "$dev_id" "modprobe -r" /dev/ublkc"$dev_id" || _fail "round $round: device left after unload"

	if ! _load_module; then
		_fail "round $round: can't load $UBLK_MOD again"
		break
	fi
	[ "$UBLK_TEST_QUIET" -eq 0 ] && echo "round $round: ublkb$dev_id added, deleted, $UBLK_MOD unloaded and loaded"
	_have_program udevadm && udevadm settle --timeout=20
done

_restore_module
_cleanup_test
_show_result "$TID" "$ERR_CODE"
