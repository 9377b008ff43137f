#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The ublk driver as user space looks it up by name, on whichever driver is
# loaded: ublksrv refuses to start without /sys/module/ublk_drv, scripts and
# the selftests run "modprobe ublk_drv", users read
# /sys/module/ublk_drv/parameters/ublks_max. The driver under test must be
# the module ublk_drv (the Rust one as a kernel configured with
# BLK_DEV_UBLK_IMPL_RUST ships it), with that parameter, and modprobe must
# resolve the name to the module that is loaded.

die() {
	echo "FAIL: $*" >&2
	exit 1
}

mods=$(awk '$1 == "ublk_drv" || $1 == "rust_ublk" { print $1 }' /proc/modules | tr '\n' ' ')
echo "ublk modules loaded: $mods"
[ "$mods" = "ublk_drv " ] ||
	die "the ublk driver is not the module ublk_drv ('$mods'): servers that look it up by name do not find it"
[ -d /sys/module/ublk_drv ] || die "no /sys/module/ublk_drv"

desc=$(modinfo -F description ublk_drv) || die "modinfo ublk_drv failed"
echo "ublk_drv: $desc ($(modinfo -n ublk_drv))"
# DRIVER (job.env, c or rust): the implementation the harness loaded.
case "${DRIVER:-}:$desc" in
rust:*Rust*) ;;
c:*Rust*) die "the C driver's boot found the Rust ublk_drv" ;;
rust:*) die "the Rust driver's boot found a ublk_drv that is not the Rust one" ;;
esac

param=/sys/module/ublk_drv/parameters/ublks_max
[ -r "$param" ] || die "no $param: $(ls /sys/module/ublk_drv/parameters 2>&1)"
max=$(cat "$param") || die "cannot read $param"
# The harness loads the module without parameters: the default.
[ "$max" = 64 ] || die "$param is '$max', not the default 64"
# Writable by root in the C driver, read-only in the Rust one (its module
# parameters cannot change after load).
mode=$(stat -c %a "$param")
case "${DRIVER:-}:$mode" in
c:644 | rust:444) ;;
*) die "$param has mode $mode (driver '${DRIVER:-}'): C's is 644, Rust's 444" ;;
esac

# The name resolves, and loading what is loaded is a no-op.
out=$(modprobe -n -v ublk_drv 2>&1) || die "modprobe -n ublk_drv failed: $out"
out=$(modprobe ublk_drv 2>&1) || die "modprobe ublk_drv failed: $out"
mods=$(awk '$1 == "ublk_drv" || $1 == "rust_ublk" { print $1 }' /proc/modules | tr '\n' ' ')
[ "$mods" = "ublk_drv " ] || die "modprobe ublk_drv changed the ublk modules to '$mods'"
[ -c /dev/ublk-control ] || die "/dev/ublk-control went away"
echo "ok"
