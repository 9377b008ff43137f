#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Many ublk devices at once, each with I/O, added and deleted in cycles
# while their servers are killed, against whichever ublk driver is loaded.
#
# Each cycle adds MANY_DEVICES devices of kublk's null target (one queue,
# depth 16), several at a time; device i is served in the data mode i of
# those the kernel has (copy, get_data, user_copy, zero_copy, auto_zc,
# batch, in turn) and, with the cycle, either without recovery, with user
# recovery that reissues (-r 1 -i 1), or with user recovery that fails I/O
# (-r 1 -e 1). One fio runs a job on every device (random 4k reads and
# writes, io_uring, O_DIRECT) for MANY_RUNTIME seconds. Meanwhile:
# - MANY_KILLS servers (a quarter of the devices by default) are killed with
#   kill -9, one after the other at random moments drawn from a seed
#   (printed; MANY_SEED=N replays the draws, not the timing); a recovering
#   device must reach QUIESCED (reissue) or FAIL_IO (kublk says UNKNOWN),
#   and `kublk recover` must bring it back LIVE; a device without recovery
#   is left dead until the cycle's end;
# - another loop adds a device, reads and writes through it with dd, and
#   deletes it, again and again (the numbers of the devices it deletes
#   come free and are taken again).
# fio's job on a device whose server died must end (any error is allowed on
# a device without recovery, EIO and EREMOTEIO on one that fails I/O); on a
# device whose server was not killed, or that reissues, no I/O may fail.
# Then the servers of another quarter are killed, every device is deleted,
# several at a time (their nodes must go), the module is unloaded (nothing
# may hold it) and loaded again, and memory is compared with a baseline
# taken before the first cycle: the loaded modules and their references
# must be the same, no ublk device, disk or char device may be left, and
# unreclaimable slab after each cycle but the first may exceed the first's
# by at most MANY_SLAB_KIB (the first cycle makes the first-use allocations
# of its number of devices, and is reported; on a KASAN kernel nothing is
# judged). With the suite's 24 devices a leak of about 40 KiB per device
# and cycle shows; in the long run's 256 devices, 4 KiB.
# Every step is bounded (a kublk command, a state, fio, the deletion); the
# harness fails the test on any kernel splat.
#
# It prints what each cycle did: devices added and the time it took, fio
# jobs and how they ended, kills and recoveries, the add/delete loop's
# devices, the deletion's time, memory.
#
# MANY_DEVICES (24 in the suite), MANY_CYCLES (2), MANY_KILLS, MANY_RUNTIME
# (15 s), MANY_SLAB_KIB (1024), MANY_SEED. The long run (README.md): 256
# devices, 2 cycles, 240 s of fio.
# xtask-timeout: 600

SELFTESTS=${SELFTESTS:?SELFTESTS (the upstream ublk selftests) not set}
# shellcheck source=/dev/null
. "$SELFTESTS/test_common.sh"
# test_common.sh finds kublk next to the running script; this one is not there.
UBLK_PROG=$SELFTESTS/kublk
export UBLK_PROG
TID=many_devices
# shellcheck source-path=SCRIPTDIR source=soak_lib.sh
. "$(dirname "$0")/soak_lib.sh"

DEVICES=${MANY_DEVICES:-24}
CYCLES=${MANY_CYCLES:-2}
KILLS=${MANY_KILLS:-$((DEVICES / 4))}
RUNTIME=${MANY_RUNTIME:-15}
SLAB_KIB=${MANY_SLAB_KIB:-1024}
SEED=${MANY_SEED:-$(($(date +%s%N) % 32768))}
PARALLEL=8       # kublk commands at once (add, del)
CMD_WAIT=60      # s for one kublk command; several run at once
STATE_WAIT=30    # s for a state after a kill or a recover
RECOVER_WAIT=60  # s for one `kublk recover`
UNUSED_WAIT=20   # s for the module's users to go after its devices
for v in "MANY_DEVICES=$DEVICES" "MANY_CYCLES=$CYCLES" "MANY_KILLS=$KILLS" \
	"MANY_RUNTIME=$RUNTIME" "MANY_SEED=$SEED" "MANY_SLAB_KIB=$SLAB_KIB"; do
	[[ "${v#*=}" =~ ^(0|[1-9][0-9]*)$ ]] || {
		echo "${v%%=*} must be a number, not '${v#*=}'"
		exit 1
	}
done
[ "$DEVICES" -ge 1 ] && [ "$DEVICES" -le 1024 ] || {
	echo "MANY_DEVICES ($DEVICES) must be 1 to 1024"
	exit 1
}
[ "$CYCLES" -ge 1 ] && [ "$RUNTIME" -ge 1 ] || {
	echo "MANY_CYCLES ($CYCLES) and MANY_RUNTIME ($RUNTIME) must be at least 1"
	exit 1
}
[ "$KILLS" -le "$DEVICES" ] || {
	echo "MANY_KILLS ($KILLS) must be at most MANY_DEVICES ($DEVICES)"
	exit 1
}
RANDOM=$SEED

soak_require
soak_find_module
soak_find_kasan
# Recovery kinds: none, and those the kernel has.
recoveries=(none)
_have_feature USER_RECOVERY_REISSUE && recoveries+=(reissue)
_have_feature USER_RECOVERY_FAIL_IO && recoveries+=(fail_io)

_prep_test "many" "$DEVICES devices at once with I/O, $CYCLES cycles of add, kill, recover, delete"
DIR=$UBLK_TEST_DIR
STOP=$DIR/stop
CHURN=$DIR/churn
fio_pid=
churn_pid=
ids=()

# On any exit before the end: stop fio and the add/delete loop, delete
# every device, leave the module loaded for the tests that come after.
finished=
cleanup() {
	local i
	[ -n "$finished" ] && return
	touch "$STOP"
	if [ -n "$churn_pid" ]; then
		# Its kublk add, dd or kublk del first, so that no device
		# comes after the deletion below.
		for ((i = 0; i < 30; i++)); do
			kill -0 "$churn_pid" 2>/dev/null || break
			sleep 0.1
		done
		pkill -9 -P "$churn_pid" 2>/dev/null
		kill -9 "$churn_pid" 2>/dev/null
	fi
	if [ -n "$fio_pid" ]; then
		pkill -9 -P "$fio_pid" 2>/dev/null
		kill -9 "$fio_pid" 2>/dev/null
	fi
	timeout -k 1 10 "$UBLK_PROG" del -a >/dev/null 2>&1
	grep -q "^$MOD " /proc/modules || timeout -k 1 5 modprobe "$MOD"
	rm -rf "$DIR"
}
trap cleanup EXIT

# The data modes the kernel has, as "name options..." lines.
data_modes=()
collect_mode() { data_modes+=("$*"); }
_run_data_modes collect_mode "copy get_data user_copy zero_copy auto_zc batch"
[ "${#data_modes[@]}" -gt 0 ] || fail "no data mode collected"

# target_of <index> <cycle>: sets MODE, REC and TARGET (kublk's options)
# of device <index> in cycle <cycle>.
target_of() {
	local m=${data_modes[$(($1 % ${#data_modes[@]}))]}
	local rec=${recoveries[$((($1 + $2) % ${#recoveries[@]}))]}
	MODE=${m%% *}
	REC=$rec
	# shellcheck disable=SC2206 # the mode's options are words
	TARGET=(-t null -q 1 -d 16 ${m#"$MODE"})
	case "$rec" in
	reissue) TARGET+=(-r 1 -i 1) ;;
	fail_io) TARGET+=(-r 1 -e 1) ;;
	esac
}

# add_one <index> <cycle>: adds device <index>; writes its id to
# $DIR/id.<index>, or its failure to $DIR/err.<index>.
add_one() {
	local out id
	target_of "$1" "$2"
	out=$(timeout -k 5 "$CMD_WAIT" "$UBLK_PROG" add "${TARGET[@]}" 2>&1)
	id=$(echo "$out" | sed -n 's/^dev id \([0-9]*\):.*/\1/p' | head -n 1)
	if [ -n "$id" ]; then
		echo "$id" >"$DIR/id.$1"
	else
		echo "kublk add ${TARGET[*]}: $out" >"$DIR/err.$1"
	fi
}

# del_one <id>: deletes it; its nodes must go (else $DIR/left.<id>).
del_one() {
	local i
	timeout -k 5 "$CMD_WAIT" "$UBLK_PROG" del -n "$1" >/dev/null 2>&1 ||
		echo "kublk del -n $1 failed or did not return in ${CMD_WAIT}s" >"$DIR/left.$1"
	for ((i = 0; i < 200; i++)); do
		[ -e "/dev/ublkc$1" ] || [ -e "/dev/ublkb$1" ] || return 0
		sleep 0.1
	done
	echo "/dev/ublkc$1 or /dev/ublkb$1 still there 20s after kublk del" >>"$DIR/left.$1"
}

# in_parallel <function> <args per call...>: PARALLEL calls at once.
in_parallel() {
	local f=$1 a pids=()
	shift
	for a in "$@"; do
		"$f" "$a" &
		pids+=($!)
		if [ "${#pids[@]}" = "$PARALLEL" ]; then
			wait "${pids[@]}"
			pids=()
		fi
	done
	[ "${#pids[@]}" = 0 ] || wait "${pids[@]}"
}

# churn <cycle>: until $STOP exists, add a device, dd through it, delete
# it; counts them in $CHURN (one line each), a failure ends the test.
churn() {
	local out id n=0
	while [ ! -e "$STOP" ]; do
		out=$(timeout -k 5 "$CMD_WAIT" "$UBLK_PROG" add -t null -q 1 -d 4 2>&1)
		id=$(echo "$out" | sed -n 's/^dev id \([0-9]*\):.*/\1/p' | head -n 1)
		[ -n "$id" ] || {
			echo "add/delete loop: kublk add failed: $out" >"$CHURN.fail"
			return
		}
		timeout -k 5 30 dd if=/dev/zero of="/dev/ublkb$id" bs=4k count=64 oflag=direct status=none &&
			timeout -k 5 30 dd if="/dev/ublkb$id" of=/dev/null bs=4k count=64 iflag=direct status=none || {
			echo "add/delete loop: dd on device $id failed" >"$CHURN.fail"
			return
		}
		del_one "$id"
		[ -e "$DIR/left.$id" ] && {
			echo "add/delete loop: $(cat "$DIR/left.$id")" >"$CHURN.fail"
			return
		}
		n=$((n + 1))
		echo "$id" >>"$CHURN"
	done
}

# draw <n> <k>: sets DRAWN to <k> of 0 .. <n>-1, drawn from the seed (in
# this shell: a subshell's RANDOM is seeded anew).
draw() {
	local i j t all=()
	for ((i = 0; i < $1; i++)); do all+=("$i"); done
	for ((i = 0; i < $2; i++)); do
		j=$((i + RANDOM % ($1 - i)))
		t=${all[$i]}
		all[i]=${all[$j]}
		all[j]=$t
	done
	DRAWN=("${all[@]:0:$2}")
}

# fio_jobs <cycle>: fio's job file, one job per device. A device whose
# server is killed (in VICTIMS) may fail I/O: without recovery its job ends
# at the first error; one that fails I/O goes on after EIO and EREMOTEIO. No
# other device may fail any.
fio_jobs() {
	local i
	printf '[global]\nioengine=io_uring\ndirect=1\nbs=4k\niodepth=4\nrw=randrw\nsize=64M\ntime_based=1\nruntime=%s\nthread=1\n' "$RUNTIME"
	for ((i = 0; i < DEVICES; i++)); do
		target_of "$i" "$1"
		printf '[dev%s]\nfilename=/dev/ublkb%s\n' "$i" "${ids[$i]}"
		[[ " ${VICTIMS[*]} " = *" $i "* ]] && [ "$REC" = fail_io ] &&
			printf 'continue_on_error=io\nignore_error=5:121,5:121\n'
	done
}

# cycle <n>
cycle() {
	local c=$1 i t0 t_add t_del job st pid id n deadline ok=0 tolerated=0 bad=()
	local killed=() recovered=0 rec_ms=0 dead=0 late=0 k
	rm -f "$STOP" "$CHURN" "$CHURN.fail" "$DIR"/id.* "$DIR"/err.* "$DIR"/left.*
	now_ms
	t0=$NOW
	in_parallel add_one_in_cycle $(seq 0 $((DEVICES - 1)))
	now_ms
	t_add=$((NOW - t0))
	ids=()
	for ((i = 0; i < DEVICES; i++)); do
		[ -s "$DIR/err.$i" ] && fail "cycle $c: device $i: $(cat "$DIR/err.$i")"
		[ -s "$DIR/id.$i" ] || fail "cycle $c: device $i: no id"
		ids+=("$(cat "$DIR/id.$i")")
	done
	udevadm settle --timeout=60 >/dev/null 2>&1
	echo "cycle $c: $DEVICES devices added in $((t_add / 1000)).$(printf '%03d' $((t_add % 1000)))s"

	# The kills: MANY_KILLS devices drawn from the seed, at random moments
	# within the first half of the run.
	draw "$DEVICES" "$KILLS"
	VICTIMS=("${DRAWN[@]}")
	fio_jobs "$c" >"$DIR/jobs.fio"
	fio --output-format=terse --terse-version=3 \
		"$DIR/jobs.fio" >"$DIR/fio.out" 2>"$DIR/fio.err" &
	fio_pid=$!
	churn "$c" &
	churn_pid=$!

	for k in "${VICTIMS[@]}"; do
		# At most 32.767 s each ($RANDOM's range).
		ms_sleep $((RANDOM % (RUNTIME * 500 / (KILLS + 1) + 1)))
		kill -0 "$fio_pid" 2>/dev/null || late=$((late + 1))
		id=${ids[$k]}
		target_of "$k" "$c"
		pid=$(list_field "$id" 7)
		[[ "$pid" =~ ^[0-9]+$ ]] && [ "$pid" -gt 1 ] ||
			fail "cycle $c: no server pid for device $id ('$pid')"
		kill -9 "$pid"
		killed+=("$k")
		case "$REC" in
		none)
			dead=$((dead + 1))
			;;
		reissue | fail_io)
			now_ms
			st=$NOW
			if [ "$REC" = reissue ]; then n=QUIESCED; else n=UNKNOWN; fi
			wait_state "$id" "$n" "cycle $c, kill of device $id's server ($MODE, $REC)"
			soak_recover "$id" "$n" "cycle $c, device $id ($MODE, $REC)" "${TARGET[@]}"
			wait_state "$id" LIVE "cycle $c, recovery of device $id ($MODE, $REC)"
			now_ms
			recovered=$((recovered + 1))
			rec_ms=$((rec_ms + NOW - st))
			;;
		esac
	done

	# The jobs of devices that wait for their recovery wait with them: fio's
	# bound runs from the last kill's recovery.
	now_ms
	deadline=$((NOW + (RUNTIME + 120) * 1000))
	while kill -0 "$fio_pid" 2>/dev/null; do
		now_ms
		[ "$NOW" -gt "$deadline" ] &&
			fail "cycle $c: fio did not end $((RUNTIME + 120))s after the last kill"
		sleep 0.5
	done
	wait "$fio_pid"
	fio_pid=
	touch "$STOP"
	wait "$churn_pid"
	churn_pid=
	[ -s "$CHURN.fail" ] && fail "cycle $c: $(cat "$CHURN.fail")"

	# terse v3: field 3 the job's name, 5 its error (0: none).
	for ((i = 0; i < DEVICES; i++)); do
		target_of "$i" "$c"
		job=$(awk -F';' -v j="dev$i" '$3 == j { print $5; exit }' "$DIR/fio.out")
		[ -n "$job" ] || {
			cat "$DIR/fio.err"
			fail "cycle $c: fio reported nothing of device ${ids[$i]} (dev$i)"
		}
		if [ "$job" = 0 ]; then
			ok=$((ok + 1))
		elif [[ " ${killed[*]} " = *" $i "* ]] && { [ "$REC" = none ] ||
			{ [ "$REC" = fail_io ] && [[ "$job" =~ ^(5|121)$ ]]; }; }; then
			# Any error without recovery (the job ends at the
			# first); EIO or EREMOTEIO with FAIL_IO.
			tolerated=$((tolerated + 1))
		else
			bad+=("device ${ids[$i]} ($MODE, $REC): error $job")
		fi
	done
	[ "${#bad[@]}" = 0 ] || {
		cat "$DIR/fio.err"
		fail "cycle $c: I/O failed: ${bad[*]}"
	}

	# A quarter of the servers (dead already or not) die just before the
	# deletion.
	draw "$DEVICES" $((DEVICES / 4))
	for i in "${DRAWN[@]}"; do
		pid=$(list_field "${ids[$i]}" 7)
		[[ "$pid" =~ ^[0-9]+$ ]] && [ "$pid" -gt 1 ] && kill -9 "$pid"
	done
	now_ms
	t0=$NOW
	in_parallel del_one "${ids[@]}"
	now_ms
	t_del=$((NOW - t0))
	for id in "${ids[@]}"; do
		[ -e "$DIR/left.$id" ] && fail "cycle $c: $(cat "$DIR/left.$id")"
	done
	ids=()
	reload_module "cycle $c"
	memory_sample "$c" "$DIR"
	echo "cycle $c: fio $DEVICES jobs: $ok without error, $tolerated with errors after their server's kill (no recovery or FAIL_IO); ${#killed[@]} kills ($late after fio's end): $recovered recovered (mean $((recovered > 0 ? rec_ms / recovered : 0)) ms from the kill to LIVE), $dead left dead; add/delete loop: $(wc -l <"$CHURN" 2>/dev/null || echo 0) devices; $DEVICES devices deleted in $((t_del / 1000)).$(printf '%03d' $((t_del % 1000)))s; SUnreclaim ${slabs[-1]} KiB after the reload"
	# The first cycle makes the first-use allocations of its number of
	# devices (it is reported); each later one must leave slab within
	# SLAB_KIB of the first's.
	if [ "$c" = 1 ]; then
		memory_check "$c" "$DIR" "cycle $c" 0 unjudged
	else
		memory_check "$c" "$DIR" "cycle $c" 1
	fi
}

add_one_in_cycle() { add_one "$1" "$cur"; }

echo "many_devices: seed $SEED (MANY_SEED=$SEED replays the draws), $DEVICES devices, $CYCLES cycles, $KILLS kills per cycle, ${RUNTIME}s of fio; modes: $(printf '%s, ' "${data_modes[@]%% *}" | sed 's/, $//'); recovery: ${recoveries[*]}"
slabs=()
# The baseline: after a device of each data mode has been added, written
# through and deleted (the kernel's first-use allocations are made then,
# not leaked later), the module loaded afresh.
for ((i = 0; i < ${#data_modes[@]}; i++)); do
	add_one "$i" 0
	[ -s "$DIR/id.$i" ] || fail "warm-up: $(cat "$DIR/err.$i" 2>/dev/null)"
	id=$(cat "$DIR/id.$i")
	timeout -k 5 30 dd if=/dev/zero of="/dev/ublkb$id" bs=4k count=16 oflag=direct status=none ||
		fail "warm-up: dd on device $id failed"
	del_one "$id"
	[ -e "$DIR/left.$id" ] && fail "warm-up: $(cat "$DIR/left.$id")"
done
reload_module "warm-up"
memory_sample 0 "$DIR"
mods0=$mods
echo "baseline: SUnreclaim ${slabs[0]} KiB; modules (name/references): $mods0"
for ((cur = 1; cur <= CYCLES; cur++)); do
	cycle "$cur"
done
[ -n "$kasan" ] && echo "many_devices: KASAN kernel: slab growth reported, not judged"
echo "many_devices: $CYCLES cycles of $DEVICES devices; SUnreclaim before the first cycle and after each: ${slabs[*]} KiB ($([ -n "$kasan" ] && echo "not judged on KASAN" || echo "each after the first at most $SLAB_KIB above the first cycle's"))"
finished=1
rm -f "$STOP" "$CHURN" "$DIR"/id.* "$DIR"/err.* "$DIR"/left.* "$DIR"/slabinfo.* "$DIR"/jobs.fio "$DIR"/fio.*
_cleanup_test
_show_result "$TID" 0
