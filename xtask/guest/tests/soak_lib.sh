#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# What the long-running tests (test_kill_recover.sh, test_many_devices.sh)
# share: the driver module under test, reloading it once nothing holds it,
# and what must come back after a round: unreclaimable slab memory, the
# loaded modules with their references, no ublk device left.
#
# The caller defines CMD_WAIT (s for one command), STATE_WAIT (s for a
# device's state), RECOVER_WAIT (s for one `kublk recover`) and
# UNUSED_WAIT (s for the module's users to go), and
# sources test_common.sh first (UBLK_SKIP_CODE, UBLK_PROG, _have_program).
# What these functions set (NOW, MOD, kasan, slabs, mods) is the caller's
# to read, and mods0 (round 0's mods) and SLAB_KIB its to set:
# shellcheck disable=SC2034,SC2154

# fail <what>: the test fails (its EXIT trap cleans up).
fail() {
	echo "FAIL: $*"
	exit 1
}

# soak_find_module: sets MOD to the loaded module that provides
# /dev/ublk-control (ublk_drv or rust_ublk); a skip without one, a failure
# with both.
soak_find_module() {
	MOD=$(awk '$1 == "ublk_drv" || $1 == "rust_ublk" { print $1 }' /proc/modules)
	[ -n "$MOD" ] || {
		echo "no ublk driver module loaded (built in?): cannot reload it"
		exit "$UBLK_SKIP_CODE"
	}
	[[ "$MOD" =~ ^[a-z_]+$ ]] || {
		echo "FAIL: both ublk drivers are loaded ($(echo "$MOD" | tr '\n' ' ')): which one is under test?"
		exit 1
	}
}

# soak_require: fio, and the selftests' _run_data_modes (without it no
# round would run, which must not look like a skip).
soak_require() {
	_have_program fio || {
		echo "fio not installed"
		exit "$UBLK_SKIP_CODE"
	}
	declare -F _run_data_modes >/dev/null || {
		echo "FAIL: $SELFTESTS/test_common.sh has no _run_data_modes"
		exit 1
	}
}

# list_field <id> <awk field>: a field of `kublk list -n <id>`'s device
# line (7: the server's pid, 11: the state).
list_field() {
	timeout -k 5 "$CMD_WAIT" "$UBLK_PROG" list -n "$1" 2>/dev/null |
		awk -v f="$2" '/state/ { print $f; exit }'
}

# wait_state <id> <state> <what>: the device must reach it within
# STATE_WAIT s.
wait_state() {
	local state deadline
	now_ms
	deadline=$((NOW + STATE_WAIT * 1000))
	while :; do
		state=$(list_field "$1" 11)
		[ "$state" = "$2" ] && return 0
		now_ms
		[ "$NOW" -gt "$deadline" ] && fail "$3: device $1 in state '$state', not $2 after ${STATE_WAIT}s"
		sleep 0.1
	done
}

# soak_recover <id> <state> <what> <kublk options...>: `kublk recover -n
# <id> <options>` of a device without a server (in <state>: QUIESCED, or
# FAIL_IO, which kublk calls UNKNOWN). The C driver shows QUIESCED a moment
# before it lets START_USER_RECOVERY in (EBUSY while the old server's
# /dev/ublkcN is still open: its io_uring is torn down after its exit), and
# kublk then only says that the command failed: retried for up to
# STATE_WAIT s while the device stays in <state>. RECOVER_WAIT bounds one
# `kublk recover`.
soak_recover() {
	local id=$1 state=$2 what=$3 out rc i deadline
	shift 3
	now_ms
	deadline=$((NOW + STATE_WAIT * 1000))
	for ((i = 0; ; i++)); do
		out=$(timeout -k 5 "$RECOVER_WAIT" "$UBLK_PROG" recover -n "$id" "$@" 2>&1)
		rc=$?
		[ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && fail "$what: kublk recover -n $id did not return in ${RECOVER_WAIT}s"
		[ "$rc" -eq 0 ] && return 0
		[ "$(list_field "$id" 11)" = "$state" ] || break
		now_ms
		[ "$NOW" -gt "$deadline" ] && break
		sleep 0.2
	done
	fail "$what: kublk recover -n $id $* failed (exit $rc, $i retries): $out"
}

# soak_find_kasan: sets kasan on a KASAN kernel, which keeps freed objects
# in quarantine (tens of MiB): slab is reported, not judged, there.
soak_find_kasan() {
	kasan=
	if grep -q ' kasan_report$' /proc/kallsyms 2>/dev/null ||
		dmesg | grep -q "KernelAddressSanitizer initialized"; then
		kasan=1
	fi
}

# now_ms: sets NOW to the time in ms (no fork: bash's clock).
now_ms() {
	local t=${EPOCHREALTIME/./}
	NOW=$((10#$t / 1000))
}

# ms_sleep <ms>: sleep that many milliseconds.
ms_sleep() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# reload_module <what>: unload the driver once nothing holds it, load it again.
reload_module() {
	local refcnt i
	for ((i = 0; i < UNUSED_WAIT * 10; i++)); do
		read -r refcnt </sys/module/"$MOD"/refcnt
		[ "$refcnt" = 0 ] && break
		sleep 0.1
	done
	[ "$refcnt" = 0 ] || fail "$1: $MOD still in use (refcnt $refcnt) ${UNUSED_WAIT}s after its devices were deleted"
	timeout -k 5 "$CMD_WAIT" modprobe -r "$MOD" || fail "$1: modprobe -r $MOD failed"
	grep -q "^$MOD " /proc/modules && fail "$1: $MOD still listed after modprobe -r"
	timeout -k 5 "$CMD_WAIT" modprobe "$MOD" || fail "$1: modprobe $MOD failed or did not return in ${CMD_WAIT}s"
	for ((i = 0; i < 50; i++)); do
		[ -c /dev/ublk-control ] && return 0
		sleep 0.1
	done
	fail "$1: /dev/ublk-control missing after loading $MOD"
}

# slab_kib <file>: unreclaimable slab memory, after dropping what can be
# dropped; also keeps a copy of /proc/slabinfo in <file>.
slab_kib() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
	cat /proc/slabinfo >"$1" 2>/dev/null
	awk '$1 == "SUnreclaim:" { print $2 }' /proc/meminfo
}

# slab_growth <before> <after>: the five caches whose memory grew most
# (/proc/slabinfo needs CONFIG_SLUB_DEBUG, which a tinyconfig SLUB lacks).
slab_growth() {
	[ -s "$1" ] || {
		echo "(no /proc/slabinfo on this kernel)"
		return
	}
	awk 'NR == FNR { if (FNR > 2) kib[$1] = $3 * $4 / 1024; next }
	     FNR > 2 { d = $3 * $4 / 1024 - kib[$1]; if (d > 0) printf "%s +%d KiB\n", $1, d }' \
		"$1" "$2" | sort -t+ -k2 -rn | head -n 5 | tr '\n' ' '
}

# leftovers: ublk devices, disks and char devices that should be gone.
leftovers() {
	ls -d /sys/class/ublk-char/* /sys/block/ublkb* \
		/dev/ublkc* /dev/ublkb* 2>/dev/null | tr '\n' ' '
}

# memory_sample <n> <dir>: what must come back after each round:
# unreclaimable slab (appended to `slabs`; /proc/slabinfo kept as
# <dir>/slabinfo.<n>) and the loaded modules with their reference counts
# (in `mods`); no ublk device may be left.
memory_sample() {
	local left
	left=$(leftovers)
	[ -z "$left" ] || fail "round $1: left after deleting the devices and reloading $MOD: $left"
	slabs+=("$(slab_kib "$2/slabinfo.$1")")
	mods=$(awk '{ print $1 "/" $3 }' /proc/modules | sort | tr '\n' ' ')
}

# memory_check <n> <dir> <what> [<ref> [unjudged]]: after memory_sample
# <n>, the modules and their references must be those of sample 0, and
# slab within SLAB_KIB of sample <ref>'s (default 0; not judged under KASAN
# or with "unjudged").
memory_check() {
	local growth ref=${4:-0}
	[ "$mods" = "$mods0" ] || fail "$3: modules (name/references) now: $mods; at the start: $mods0"
	growth=$((slabs[-1] - slabs[ref]))
	[ -n "$kasan" ] || [ -n "$5" ] || [ "$growth" -le "$SLAB_KIB" ] ||
		fail "$3: unreclaimable slab memory $growth KiB above sample $ref's (more than $SLAB_KIB); grew most: $(slab_growth "$2/slabinfo.$ref" "$2/slabinfo.$1")"
}
