#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=dash
#
# PID 1 of the xtask test guest, from a small initramfs holding only a
# static busybox. It builds the guest's root: the host's / over virtio-9p
# (read-only) under a tmpfs overlay, so the guest runs the host's own
# binaries (bash, fio, kublk) and can still write anywhere. The job
# directory (results, logs) is a second, writable 9p share mounted at the
# same path as on the host. Then it switches to that root, runs the job
# script and powers off.

/bin/busybox mkdir -p /proc /sys /dev /bin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

# cmdline_arg <name>: the value of <name>= on the kernel command line.
cmdline_arg() {
	for arg in $(cat /proc/cmdline); do
		case "$arg" in
		"$1"=*) echo "${arg#"$1"=}" ;;
		esac
	done
}

job=$(cmdline_arg xtask.job)

fail() {
	echo "xtask-init: $*"
	poweroff -f
}

[ -n "$job" ] || fail "no xtask.job= on the kernel command line"

mkdir -p /lower /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower ||
	fail "cannot mount the host root (9p tag hostroot)"
mount -t tmpfs -o size=50% tmpfs /rw || fail "cannot mount tmpfs"
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot ||
	fail "cannot mount the overlay root"

# The guest gets its own /run, /tmp and /dev/shm, which hide the host's.
# Host paths the job needs (xtask.keep=, colon-separated: the work
# directory, the cache, the repository) may lie below them: bind them from
# the overlay first and put them back on top afterwards.
keep=$(cmdline_arg xtask.keep)
kept=
i=0
for p in $(echo "$keep" | tr ':' ' '); do
	case "$p" in
	/run | /run/* | /tmp | /tmp/* | /dev | /dev/*) ;;
	*) continue ;;
	esac
	[ -d "/newroot$p" ] || fail "host path $p (xtask.keep) is not a directory in the guest's root"
	i=$((i + 1))
	mkdir -p "/rw/keep/$i"
	mount --bind "/newroot$p" "/rw/keep/$i" || fail "cannot bind host path $p"
	kept="$kept $i:$p"
done

mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
mount -t tmpfs -o mode=0755 tmpfs /newroot/run
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mkdir -p /newroot/dev/shm
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm
for e in $kept; do
	mkdir -p "/newroot${e#*:}"
	mount --move "/rw/keep/${e%%:*}" "/newroot${e#*:}" ||
		fail "cannot put host path ${e#*:} back over the guest's own mounts"
done
mkdir -p "/newroot$job"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 job "/newroot$job" ||
	fail "cannot mount the job directory (9p tag job)"

# switch_root, not chroot: tools such as udevadm refuse to act when the
# root of PID 1 differs from theirs. The new PID 1 is the host's static
# busybox (busybox-static is a prerequisite); it runs the job script as a
# child and powers off whatever the script does.
# shellcheck disable=SC2093 # nothing runs after switch_root: it is PID 1 now
exec switch_root /newroot /bin/busybox sh -c '
	/bin/bash "$0/guest-run.sh" "$0" </dev/console >/dev/console 2>&1
	echo "xtask-init: job script exited with $?" >/dev/console
	sync
	/bin/busybox poweroff -f' "$job"
fail "switch_root failed"
