#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# kill -9 of the ublk server in a loop, under fio with verify, on a
# recovering device, in rounds with the device deleted and the driver module
# reloaded between them, against whichever ublk driver is loaded; one round
# per data mode, in turn.
#
# Each round serves a loop device in one data mode (KILL_MODES, all by
# default: copy, get_data, user_copy, zero_copy, auto_zc, auto_zc_fallback,
# batch; those the kernel lacks are left out, and said so; auto_zc_fallback
# runs on kublk's null target, the only one that takes it, which keeps no
# data, so its passes verify nothing), KILL_ROUNDS passes over the modes,
# and with user recovery in one of two ways
# (KILL_RECOVERY: reissue, fail_io, or alternate, the default: mode by mode,
# flipping with each pass and with the seed's parity, so that two passes,
# or two runs of the suite with seeds of either parity, take each mode both
# ways):
# - reissue (-r 1 -i 1): when its server dies the device is quiesced,
#   requests wait, and those the dead server had received are reissued to
#   the next one, so no I/O may fail;
# - fail_io (-r 1 -e 1, UBLK_F_USER_RECOVERY_FAIL_IO): the requests the dead
#   server had fail with EIO, and those that come while there is none with
#   EREMOTEIO; fio goes on after either (and does not verify a write that
#   failed; any other errno fails the pass), and the round's last pass, run
#   after its last recovery, must see no error at all. The state while
#   there is no server is FAIL_IO, which kublk prints as UNKNOWN.
# In each round a new device is added; fio writes and verifies through it
# again and again while another loop kills the server, waits for QUIESCED
# (FAIL_IO), runs `kublk recover` and waits for LIVE, CYCLES times per round.
# Where each kill lands is drawn from a seed (printed; KILL_SEED=N replays
# the draws, not the timing): about three in four kills wait up to 2 s for
# requests in flight (at least half of them must find some), the others come
# at a random delay, I/O in flight or not; a third of the waiting ones are
# followed by a kill of the next recovery: a random 0 to 150 ms after
# `kublk recover` starts, every process of it is killed, before, during or
# after START_USER_RECOVERY, its FETCHes and END_USER_RECOVERY (or after
# the command returned); the device must then be without a server again
# and the next `kublk recover` must bring it
# back. Each fio pass writes three regions: 4k and 8k-256k random writes
# with crc32c checksums, and 4k-64k random writes of a pattern unique to the
# pass (its number and the offset), so that a write lost across a kill,
# which would leave an earlier pass's valid checksummed data in place, fails
# the verify. Then the device is deleted (its nodes must go), the last pass
# is verified again from the backing file, the module is unloaded (nothing
# may hold it) and loaded again, and memory is compared with a baseline
# taken before the first round (after a warm-up device was added, written
# and deleted, the module loaded afresh): the kernel's unreclaimable slab
# memory may exceed it by at most SLAB_KIB (a failure names the caches that
# grew most; reported, not judged, on a KASAN kernel), the loaded modules
# and their reference
# counts must be the same, and no ublk device, disk or char device may be
# left. Every step is bounded: a driver command, a wait for a state, a
# recovery, a fio pass, an unload that takes too long fails the test. The
# harness fails it too on any kernel splat.
#
# It prints its numbers: kills (and how many found requests in flight),
# recovery times (kill to LIVE), fio passes and what they verified, memory
# after each round.
#
# 49 kills with their recoveries (7 modes, 7 kills each) took 118 s (C) and
# 129 s (Rust) under TCG, 5 to 6 minutes on the debug kernel, more than the
# harness's per-test timeout leaves on a slow machine:
# xtask-timeout: 600

SELFTESTS=${SELFTESTS:?SELFTESTS (the upstream ublk selftests) not set}
# shellcheck source=/dev/null
. "$SELFTESTS/test_common.sh"
# test_common.sh finds kublk next to the running script; this one is not there.
UBLK_PROG=$SELFTESTS/kublk
export UBLK_PROG
TID=kill_recover
# shellcheck source-path=SCRIPTDIR source=soak_lib.sh
. "$(dirname "$0")/soak_lib.sh"

# A longer soak: KILL_ROUNDS, KILL_CYCLES, KILL_MODES and KILL_RECOVERY (README.md, "A
# longer soak"). The modes: those of _run_data_modes, and auto_zc_fallback
# (zero copy with automatic registration that may fall back to the server's).
MODES=${KILL_MODES:-copy get_data user_copy zero_copy auto_zc auto_zc_fallback batch}
ROUNDS=${KILL_ROUNDS:-1}  # passes over the modes
CYCLES=${KILL_CYCLES:-7} # kills per round: 49 in all
# Growth of SUnreclaim allowed after any round from the baseline (it moves
# by up to 430 KiB between rounds here, leaking nothing; KILL_SLAB_KIB=-1
# shows what a failure prints).
SLAB_KIB=${KILL_SLAB_KIB:-1024}
CMD_WAIT=30       # s for one kublk command (add, list, del)
STATE_WAIT=20     # s for QUIESCED/FAIL_IO after a kill, and for LIVE after a recover
RECOVER_WAIT=30   # s for `kublk recover` to return
FIO_WAIT=120      # s for one fio pass
UNUSED_WAIT=10    # s for the module's users to go after its device
BASE_TARGET=(-q 2 -d 64 -r 1)
TARGET=(-t loop "${BASE_TARGET[@]}")
FILES=() # the backing file of a loop target, set once it exists
nodata=  # set in a round on kublk's null target, which keeps no data
RECOVERY=${KILL_RECOVERY:-alternate}
case "$RECOVERY" in
reissue | fail_io | alternate) ;;
*)
	echo "KILL_RECOVERY must be reissue, fail_io or alternate, not '$RECOVERY'"
	exit 1
	;;
esac
SEED=${KILL_SEED:-$(($(date +%s%N) % 32768))}
for v in "KILL_SEED=$SEED" "KILL_ROUNDS=$ROUNDS" "KILL_CYCLES=$CYCLES" "KILL_SLAB_KIB=$SLAB_KIB"; do
	[[ "${v#*=}" =~ ^(0|-?[1-9][0-9]*)$ ]] || {
		echo "${v%%=*} must be a number, not '${v#*=}'"
		exit 1
	}
done
[ "$ROUNDS" -ge 1 ] && [ "$CYCLES" -ge 1 ] || {
	echo "KILL_ROUNDS ($ROUNDS) and KILL_CYCLES ($CYCLES) must be at least 1"
	exit 1
}
[ -n "$MODES" ] || {
	echo "KILL_MODES is empty: no data mode to test"
	exit 1
}
RANDOM=$SEED

soak_require
for m in $MODES; do
	case "$m" in
	copy | get_data | user_copy | zero_copy | auto_zc | auto_zc_fallback | batch) ;;
	*)
		echo "KILL_MODES: '$m' of '$MODES' is no data mode (copy get_data user_copy zero_copy auto_zc auto_zc_fallback batch)"
		exit 1
		;;
	esac
done
features=(USER_RECOVERY USER_RECOVERY_REISSUE)
[ "$RECOVERY" = reissue ] || features+=(USER_RECOVERY_FAIL_IO)
for f in "${features[@]}"; do
	_have_feature "$f" || {
		echo "feature $f not supported"
		exit "$UBLK_SKIP_CODE"
	}
done
soak_find_module
soak_find_kasan

_prep_test "recover" "kill -9 of the server in a loop under fio verify ($CYCLES per round, $ROUNDS round(s) per mode of: $MODES)"
_create_backfile 0 64M
back=${UBLK_BACKFILES[0]}
FILES=("$back")
STOP=$UBLK_TEST_DIR/stop
ABORT=$UBLK_TEST_DIR/abort
STATS=$UBLK_TEST_DIR/fio-runs
FIOLOG=$UBLK_TEST_DIR/fio.log
dev_id=
dev=
fio_pid=

# On any exit before the end: delete the device (which fails the I/O that
# waits for a server), stop fio, and leave the module loaded for the tests
# that come after; within the 15 s that the harness gives a test between
# its SIGTERM and SIGKILL.
finished=
cleanup() {
	[ -n "$finished" ] && return
	touch "$ABORT" "$STOP"
	[ -n "$dev_id" ] && timeout -k 1 5 "$UBLK_PROG" del -n "$dev_id" >/dev/null 2>&1
	if [ -n "$fio_pid" ]; then
		pkill -9 -P "$fio_pid" 2>/dev/null
		kill -9 "$fio_pid" 2>/dev/null
		wait "$fio_pid" 2>/dev/null
	fi
	grep -q "^$MOD " /proc/modules || timeout -k 1 5 modprobe "$MOD"
	rm -f "$ABORT" "$STOP" "$STATS" "$FIOLOG" "$UBLK_TEST_DIR"/slabinfo.*
	_remove_files
	rmdir "$UBLK_TEST_DIR" 2>/dev/null
}
trap cleanup EXIT

# add_dev: a new device; sets dev_id and dev.
add_dev() {
	local out
	out=$(timeout -k 5 "$CMD_WAIT" "$UBLK_PROG" add "${TARGET[@]}" "${FILES[@]}" 2>&1) ||
		fail "kublk add ${TARGET[*]} failed or did not return in ${CMD_WAIT}s: $out"
	dev_id=$(echo "$out" | sed -n 's/^dev id \([0-9]*\):.*/\1/p' | head -n 1)
	[ -n "$dev_id" ] || fail "kublk add printed no device id: $out"
	dev=/dev/ublkb$dev_id
	udevadm settle --timeout=20 >/dev/null 2>&1
}

# del_dev <what>: deletes the device; its nodes must go.
del_dev() {
	local i
	timeout -k 5 "$CMD_WAIT" "$UBLK_PROG" del -n "$dev_id" ||
		fail "$1: kublk del -n $dev_id failed or did not return in ${CMD_WAIT}s"
	for ((i = 0; i < 100; i++)); do
		[ -e "/dev/ublkc$dev_id" ] || [ -e "$dev" ] || break
		sleep 0.1
	done
	[ -e "/dev/ublkc$dev_id" ] && fail "$1: /dev/ublkc$dev_id still exists 10s after kublk del"
	[ -e "$dev" ] && fail "$1: $dev still exists 10s after kublk del"
	dev_id=
}

# kill_in_recovery <what>: the device has no server; start `kublk recover` and,
# a random 0 to 150 ms after, kill -9 every process of it: the command, its
# child and the detached server the child forks, which a single pkill could
# miss (forked between its scan and its kill), so until none is left. The
# device must then be without one again: at once if the kill came before
# END_USER_RECOVERY; if it came after, once the dead server's io_uring is
# torn down. A recovery that failed by itself before the kill (the C
# driver's EBUSY while the old server's files close) is started again.
# Counts in `early` the kills that came while the command still ran (before,
# or just after, END), in `late` those that came after it returned (the new
# server killed); prints each.
kill_in_recovery() {
	local rpid i n rc deadline delay=$((RANDOM % 151)) when
	local pat="^$UBLK_PROG recover -n $dev_id "
	now_ms
	deadline=$((NOW + STATE_WAIT * 1000))
	while :; do
		timeout -k 5 "$RECOVER_WAIT" "$UBLK_PROG" recover -n "$dev_id" "${TARGET[@]}" "${FILES[@]}" >/dev/null 2>&1 &
		rpid=$!
		ms_sleep "$delay"
		if kill -0 "$rpid" 2>/dev/null; then
			# The `timeout` first: it starts nothing more.
			kill -9 "$rpid"
			early=$((early + 1))
			when="while kublk recover ran"
			break
		fi
		wait "$rpid"
		rc=$?
		if [ "$rc" -eq 0 ]; then
			late=$((late + 1))
			when="after kublk recover returned"
			break
		fi
		now_ms
		[ "$NOW" -gt "$deadline" ] && fail "$1: kublk recover kept failing by itself (exit $rc) for ${STATE_WAIT}s"
		sleep 0.1
	done
	# Every kublk of this recovery, until none has been seen three times
	# in a row (one may be forked, or exec'd by the killed `timeout`'s
	# child, in between).
	for ((i = 0, n = 0; n < 3; i++)); do
		[ "$i" -lt 200 ] || fail "$1: kublk recover's processes still there after 200 rounds of kill -9"
		if pkill -9 -f "$pat"; then n=0; else n=$((n + 1)); fi
		sleep 0.01
	done
	wait "$rpid" 2>/dev/null
	wait_state "$dev_id" "$nosrv" "$1, after killing its recovery ${delay} ms in"
	echo "$1: the next recovery killed ${delay} ms after its start, $when"
}

# The pass number, unique over the rounds, is in its seed and its pattern.
small=(--name=v4k --rw=randwrite --bs=4k --offset=0 --size=8M
	--verify=crc32c --verify_fatal=1)
big=(--name=vbig --rw=randwrite --bsrange=8k-256k --offset=16M --size=8M
	--verify=crc32c --verify_fatal=1)
# pattern <id>: the third region's job, data unique to pass <id>.
pattern() {
	echo --name=vpat --rw=randwrite --bsrange=4k-64k --offset=32M --size=8M \
		--verify=pattern "--verify_pattern=0x$(printf '%08x' "$1")%o" --verify_fatal=1
}

# fio_loop <round> <recovery>: write+verify passes until STOP exists; one
# line per pass in STATS: its id and how many of its I/Os failed. In a
# fail_io round fio goes on after an EIO or EREMOTEIO (and does not verify
# what failed),
# and one more pass runs once STOP exists, after the round's last recovery,
# which must see no error.
fio_loop() {
	local n=0 id rc errs bad final coe=()
	# EIO for the requests a dead server had, EREMOTEIO for those that
	# come while there is none.
	[ "$2" = fail_io ] && coe=(--continue_on_error=io "--ignore_error=5:121,5:121")
	while :; do
		final=
		if [ -e "$STOP" ]; then
			[ "$2" = fail_io ] || break
			final=1
			coe=()
		fi
		n=$((n + 1))
		id=$(($1 * 1000 + n))
		# shellcheck disable=SC2046 # pattern's words are options
		timeout -k 10 "$FIO_WAIT" fio --ioengine=io_uring --direct=1 --iodepth=16 \
			--allow_file_create=0 --randseed=$((20250701 + id)) --filename="$dev" \
			"${coe[@]}" "${small[@]}" ${nodata:+--verify=null} "${big[@]}" \
			${nodata:+--verify=null} $(pattern "$id") ${nodata:+--verify=null} >"$FIOLOG" 2>&1
		rc=$?
		# The test failed already and its cleanup deleted the device
		# under this pass: not a failure of its own.
		[ "$rc" -ne 0 ] && [ -e "$ABORT" ] && return 0
		# With --continue_on_error, one line per job:
		# "errors    : total=N, first_error=E/<strerror>"; E is 0, 5
		# (EIO) or 121 (EREMOTEIO), any other errno stops fio.
		errs=$(awk -F'[=,]' '/errors *: total=/ { s += $2 } END { print s + 0 }' "$FIOLOG")
		bad=$(sed -n 's/.*errors *: total=[0-9]*, first_error=\([0-9]*\).*/\1/p' "$FIOLOG" |
			grep -vx -e 0 -e 5 -e 121 | head -n 1)
		if [ "$rc" -ne 0 ] || [ -n "$bad" ]; then
			cat "$FIOLOG"
			[ "$rc" -eq 124 ] && echo "FAIL: fio pass $id did not finish in ${FIO_WAIT}s"
			[ -n "$bad" ] && echo "FAIL: fio pass $id: an I/O failed with errno $bad, not EIO or EREMOTEIO"
			[ -n "$final" ] && echo "FAIL: fio pass $id, after the round's last recovery, saw an error"
			echo "FAIL: fio pass $id failed (exit $rc): I/O error or verify mismatch across a kill"
			return 1
		fi
		echo "$id $errs" >>"$STATS"
		[ -n "$final" ] && break
	done
}

# wait_fio <fail?> <passes>: the fio loop ends within the time of <passes>
# passes (a FAIL_IO round's loop runs one more after STOP); with 1, it must
# have succeeded.
wait_fio() {
	local i
	for ((i = 0; i < ($2 * FIO_WAIT + 20) * 10; i++)); do
		kill -0 "$fio_pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$fio_pid" 2>/dev/null; then
		[ "$1" = 1 ] || return 0
		fail "the fio loop did not end $(($2 * FIO_WAIT + 20))s after it was told to: inflight $(cat "/sys/block/ublkb$dev_id/inflight" 2>/dev/null)"
	fi
	wait "$fio_pid"
	local rc=$?
	fio_pid=
	[ "$1" = 1 ] && [ "$rc" -ne 0 ] && fail "the fio loop failed (above)"
	return 0
}

min=999999 max=0 sum=0 kills=0 busy=0 runs=0 slabs=() timed=0
fail_rounds=0 fail_busy=0 eio=0 nosrv=QUIESCED unverified=0
waited=0 delayed=0 in_recovery=0 early=0 late=0 waited_busy=0
# The baseline: after one device has been added, written through and
# deleted (the kernel's first-use allocations are made then, not leaked
# later), the module loaded afresh.
add_dev
timeout -k 10 "$FIO_WAIT" fio --ioengine=io_uring --direct=1 --iodepth=16 --allow_file_create=0 \
	--filename="$dev" --name=warmup --rw=randwrite --bs=4k --size=4M >"$FIOLOG" 2>&1 || {
	cat "$FIOLOG"
	fail "warm-up: fio on a new device failed"
}
del_dev "warm-up"
reload_module "warm-up"
memory_sample 0 "$UBLK_TEST_DIR"
mods0=$mods
echo "baseline: SUnreclaim ${slabs[0]} KiB; modules (name/references): $mods0"
# round <mode> <kublk options>: a round with the device served in <mode>
# (_run_data_modes calls it, once per mode that the kernel supports).
r=0
round() {
	local mode=$1
	shift
	local rec=$RECOVERY rflags
	r=$((r + 1))
	pos=$((pos + 1))
	if [ "$rec" = alternate ]; then
		if [ $(((p + pos + SEED) % 2)) = 0 ]; then rec=reissue; else rec=fail_io; fi
	fi
	if [ "$rec" = reissue ]; then
		rflags=(-i 1)
		nosrv=QUIESCED
	else
		rflags=(-e 1)
		nosrv=UNKNOWN
		fail_rounds=$((fail_rounds + 1))
	fi
	if [ "$mode" = auto_zc_fallback ]; then
		# kublk's loop target does not take --auto_zc_fallback; its null
		# target keeps no data: fio's passes verify nothing there.
		nodata=1
		FILES=()
		TARGET=(-t null "${BASE_TARGET[@]}" "${rflags[@]}" "$@")
	else
		nodata=
		FILES=("$back")
		TARGET=(-t loop "${BASE_TARGET[@]}" "${rflags[@]}" "$@")
	fi
	rounds_of+=("$mode/$rec")
	rm -f "$STOP"
	: >"$STATS"
	add_dev
	echo "round $r ($mode, $rec): device $dev_id: kublk add ${TARGET[*]} ${FILES[*]}"

	fio_loop "$r" "$rec" &
	fio_pid=$!
	for ((c = 1; c <= CYCLES; c++)); do
		what="round $r ($mode, $rec), kill $c"
		kill -0 "$fio_pid" 2>/dev/null || break
		pid=$(list_field "$dev_id" 7)
		[[ "$pid" =~ ^[0-9]+$ ]] && [ "$pid" -gt 1 ] ||
			fail "$what: no server pid for device $dev_id ('$pid')"
		point=$((RANDOM % 4))
		if [ "$point" = 2 ]; then
			# A random point, I/O in flight or not.
			delayed=$((delayed + 1))
			ms_sleep $((RANDOM % 1000))
		else
			# While the server has requests: wait up to 2 s for some,
			# then up to 20 ms more.
			waited=$((waited + 1))
			for ((i = 0; i < 20; i++)); do
				read -r rd wr <"/sys/block/ublkb$dev_id/inflight"
				[ $((rd + wr)) -gt 0 ] && break
				sleep 0.1
			done
			ms_sleep $((RANDOM % 20))
		fi
		read -r rd wr <"/sys/block/ublkb$dev_id/inflight"
		if [ $((rd + wr)) -gt 0 ]; then
			busy=$((busy + 1))
			[ "$rec" = fail_io ] && fail_busy=$((fail_busy + 1))
			[ "$point" = 2 ] || waited_busy=$((waited_busy + 1))
		fi
		kill -9 "$pid"
		now_ms
		t0=$NOW
		kills=$((kills + 1))
		wait_state "$dev_id" "$nosrv" "$what, after kill -9 $pid"
		if [ "$point" = 3 ]; then
			in_recovery=$((in_recovery + 1))
			kill_in_recovery "$what"
		fi
		soak_recover "$dev_id" "$nosrv" "$what" "${TARGET[@]}" "${FILES[@]}"
		wait_state "$dev_id" LIVE "$what, after kublk recover"
		[ "$point" = 3 ] && continue
		now_ms
		ms=$((NOW - t0))
		sum=$((sum + ms))
		timed=$((timed + 1))
		[ "$ms" -lt "$min" ] && min=$ms
		[ "$ms" -gt "$max" ] && max=$ms
	done
	touch "$STOP"
	if [ "$rec" = fail_io ]; then wait_fio 1 2; else wait_fio 1 1; fi
	[ "$c" -gt "$CYCLES" ] || fail "round $r: the fio loop ended after $((c - 1)) of $CYCLES kills"

	n=$(wc -l <"$STATS")
	[ "$n" -gt 0 ] || fail "round $r: no fio pass completed"
	runs=$((runs + n))
	last=$(tail -n 1 "$STATS" | cut -d' ' -f1)
	errs=$(awk '{ s += $2 } END { print s + 0 }' "$STATS")
	[ "$rec" = fail_io ] && eio=$((eio + errs))

	del_dev "round $r"

	# The device is gone: what the last pass wrote must be in the backing
	# file (--verify_only before the jobs: for all three).
	# shellcheck disable=SC2046 # pattern's words are options
	[ -n "$nodata" ] || timeout -k 10 "$FIO_WAIT" fio --ioengine=psync --verify_only \
		--randseed=$((20250701 + last)) --filename="$back" \
		"${small[@]}" "${big[@]}" $(pattern "$last") >"$FIOLOG" 2>&1 || {
		cat "$FIOLOG"
		fail "round $r: the backing file does not hold what fio pass $last wrote"
	}
	[ -n "$nodata" ] && unverified=$((unverified + n))

	reload_module "round $r"
	memory_sample "$r" "$UBLK_TEST_DIR"
	echo "round $r ($mode, $rec): $CYCLES kills, $n fio passes ($errs I/Os failed), SUnreclaim ${slabs[-1]} KiB after the reload"
	memory_check "$r" "$UBLK_TEST_DIR" "round $r"
}

# The modes of _run_data_modes, in its order, then auto_zc_fallback, which
# it does not know; KILL_ROUNDS times.
std_modes=
fallback=
for m in $MODES; do
	if [ "$m" = auto_zc_fallback ]; then fallback=1; else std_modes="$std_modes $m"; fi
done
rounds_of=()
ERR_CODE=0
for ((p = 1; p <= ROUNDS; p++)); do
	pos=0 # the round's place in the pass
	if [ -n "$std_modes" ]; then
		_run_data_modes round "$std_modes"
		[ "$ERR_CODE" -eq 0 ] || fail "KILL_MODES '$MODES': see above"
	fi
	if [ -n "$fallback" ]; then
		if _have_feature ZERO_COPY && _have_feature AUTO_BUF_REG; then
			round auto_zc_fallback -z --auto_zc --auto_zc_fallback
		else
			echo "$TID: mode auto_zc_fallback not tested, the kernel lacks ZERO_COPY or AUTO_BUF_REG"
		fi
	fi
done
[ "$r" -gt 0 ] || {
	echo "$TID: skip: the kernel supports none of the data modes $MODES"
	exit "$UBLK_SKIP_CODE"
}

echo "kill_recover: $kills kills in $r rounds (${rounds_of[*]}) from seed $SEED: $waited after waiting for requests in flight ($in_recovery of them followed by a kill of the next recovery: $early while \`kublk recover\` still ran, $late after it returned), $delayed at a random delay; $busy found requests in flight ($waited_busy of the $waited that waited for some)"
echo "kill_recover: kill -9 to LIVE ($timed kills not followed by a second): min ${min} ms, mean $((sum / (timed ? timed : 1))) ms, max ${max} ms"
echo "kill_recover: $runs fio passes completed, each writing 24 MiB and verifying what it wrote (crc32c, and a pattern unique to each pass), but for the $eio I/Os that failed (EIO, EREMOTEIO) in the $fail_rounds FAIL_IO rounds ($fail_busy of their kills found requests in flight) and the $unverified passes on the null target (auto_zc_fallback), which keeps no data; no other error; each loop round's last pass verified again from the backing file"
echo "kill_recover: $MOD unloaded and loaded $((r + 1)) times, the same modules and references after each round as before the first, no ublk device left; SUnreclaim before round 1 and after each round: ${slabs[*]} KiB ($([ -n "$kasan" ] && echo "not judged on KASAN" || echo "at most $SLAB_KIB above the first"))"
[ -n "$kasan" ] && echo "kill_recover: KASAN kernel: slab growth reported, not judged (its quarantine holds freed objects)"
[ "$waited_busy" -ge $((waited / 2)) ] || fail "only $waited_busy of the $waited kills that waited for requests in flight found some: the test did not test recovery under I/O"
# A FAIL_IO device fails the I/O that its dead server had or that came
# while it had none: kills that found some and made nothing fail did not
# test it.
[ "$fail_busy" -lt 3 ] || [ "$eio" -gt 0 ] || fail "no I/O failed in the FAIL_IO rounds, though $fail_busy kills found requests in flight"

finished=1
rm -f "$STOP" "$STATS" "$FIOLOG" "$UBLK_TEST_DIR"/slabinfo.*
_cleanup_test
_show_result "$TID" 0
