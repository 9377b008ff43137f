#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# /dev/ublkcN as ublk servers and tools find it, on whichever ublk driver is
# loaded: a character device of class ublk-char, its major that of the
# region "ublk-char" in /proc/devices, its minor the device id N, below the
# ublk-control misc device; UBLK_PARAM_TYPE_DEVT reports that number. rublk
# (libublk's for_each_dev_id), like ublksrv's "ublk list" and "ublk del -a",
# lists /sys/class/ublk-char to find the devices: "rublk list" must show
# every device, and "rublk del -a" delete them all.

# shellcheck source-path=SCRIPTDIR source=rublk_lib.sh
. "$(dirname "$0")/rublk_lib.sh"

CLASS=/sys/class/ublk-char

# What needs no server comes first: a driver whose /dev/ublkcN is no longer
# of class ublk-char fails here even where rublk is missing.
major=$(awk '$2 == "ublk-char" { print $1 }' /proc/devices)
[ -n "$major" ] || die "no ublk-char character device region in /proc/devices"
echo "ublk-char major: $major"
[ -d "$CLASS" ] || die "no $CLASS"

rublk_require

# A device with a chosen id, one with a higher one, one with the first free.
ids="$(rublk_add null -n 0) $(rublk_add null -n 7) $(rublk_add null)"
echo "devices: $ids"

for id in $ids; do
	wait_bdev "$id"
	entry=$CLASS/ublkc$id
	[ -e "$entry" ] || die "no $entry (class entries: $(ls "$CLASS"))"
	devt=$(cat "$entry/dev") || die "cannot read $entry/dev"
	[ "$devt" = "$major:$id" ] || die "$entry/dev is $devt, not $major:$id"
	[ -c "/dev/ublkc$id" ] || die "/dev/ublkc$id is not a character device"
	node=$(stat -c '%Hr:%Lr' "/dev/ublkc$id")
	[ "$node" = "$devt" ] || die "/dev/ublkc$id is $node, $entry/dev $devt"
	grep -qx "MAJOR=$major" "$entry/uevent" || die "$entry/uevent: $(cat "$entry/uevent")"
	grep -qx "MINOR=$id" "$entry/uevent" || die "$entry/uevent: $(cat "$entry/uevent")"
	grep -qx "DEVNAME=ublkc$id" "$entry/uevent" || die "$entry/uevent: $(cat "$entry/uevent")"
	path=$(readlink -f "$entry")
	case "$path" in
	*/devices/virtual/misc/ublk-control/ublkc"$id") ;;
	*) die "$entry is $path, not below the ublk-control device" ;;
	esac
	[ "$(readlink -f "/sys/dev/char/$devt")" = "$path" ] ||
		die "/sys/dev/char/$devt is $(readlink -f "/sys/dev/char/$devt"), not $path"
	subsystem=$(basename "$(readlink -f "$entry/subsystem")")
	[ "$subsystem" = ublk-char ] || die "$entry/subsystem is $subsystem"
	# UBLK_PARAM_TYPE_DEVT, as rublk prints it.
	reported=$(rublk_info "$id" | sed -n 's/.*ublkc: \([0-9]*:[0-9]*\) .*/\1/p')
	[ "$reported" = "$devt" ] || die "rublk list -n $id reports ublkc $reported, not $devt"
done

# Every device, found through /sys/class/ublk-char.
listed=$(timeout -k 5 "$STEP_TIMEOUT" "$RUBLK" list 2>&1 | sed -n 's/^dev id \([0-9]*\):.*/\1/p' |
	sort -n | tr '\n' ' ')
want=$(echo "$ids" | tr ' ' '\n' | sort -n | tr '\n' ' ')
echo "rublk list: $listed"
[ "$listed" = "$want" ] || die "rublk list shows devices '$listed', not '$want'"

timeout -k 5 "$STEP_TIMEOUT" "$RUBLK" del -a || die "rublk del -a failed"
for _ in $(seq 100); do
	[ -z "$(ls "$CLASS")" ] && ! ls /dev/ublkc* /dev/ublkb* >/dev/null 2>&1 && break
	sleep 0.1
done
[ -z "$(ls "$CLASS")" ] || die "rublk del -a left $(ls "$CLASS") in $CLASS"
ls /dev/ublkc* /dev/ublkb* >/dev/null 2>&1 && die "rublk del -a left $(ls /dev/ublkc* /dev/ublkb*)"
for _ in $(seq 100); do
	pgrep -x rublk >/dev/null || break
	sleep 0.1
done
pgrep -x rublk >/dev/null && die "rublk daemons still run after rublk del -a: $(pgrep -a -x rublk)"
listed=$(timeout -k 5 "$STEP_TIMEOUT" "$RUBLK" list 2>&1 | sed -n 's/^dev id \([0-9]*\):.*/\1/p')
[ -z "$listed" ] || die "rublk list still shows devices $listed after rublk del -a"
# The region lives as long as the module.
grep -q ' ublk-char$' /proc/devices || die "ublk-char left /proc/devices with the devices"
echo "ok"
