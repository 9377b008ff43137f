#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the test guest (started by init.sh, chrooted into the overlay
# root). Reads $JOB/job.env written by the host, sets the guest up (modules,
# udev, sfdisk, tracefs, a tmpfs TMPDIR), loads the requested ublk driver
# and then either runs the selftests, printing KTAP, or runs a command.
#
# Results go to files in $JOB (a writable 9p share), so they survive a guest
# crash up to the last write; the console only carries progress.

JOB=$1
# shellcheck source=/dev/null
. "$JOB/job.env"

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# For the harness tests (xtask/guest/tests/).
export RUBLK RUBLK_MISSING SELFTESTS DRIVER
export HOME=/root TERM=${TERM:-linux} TMPDIR=/tmp

say() { echo "xtask: $*"; }
# Markers in the kernel log (KERN_INFO: in dmesg, not on the console).
kmsg() { echo "<6>xtask: $*" > /dev/kmsg; }

setup() {
	hostname ublk-guest
	mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
	mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
	mkdir -p /dev/hugepages && mount -t hugetlbfs hugetlbfs /dev/hugepages 2>/dev/null
	mkdir -p /dev/pts && mount -t devpts devpts /dev/pts 2>/dev/null
	# What udev or systemd create on a normal system: bash's process
	# substitution (test_integrity_02's version check) opens /dev/fd/N.
	[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
	[ -e /dev/stdin ] || ln -s /proc/self/fd/0 /dev/stdin
	[ -e /dev/stdout ] || ln -s /proc/self/fd/1 /dev/stdout
	[ -e /dev/stderr ] || ln -s /proc/self/fd/2 /dev/stderr

	# Kernel log to the job directory as it is written.
	dmesg -w > "$JOB/dmesg.txt" 2>&1 &
	DMESG_PID=$!

	# The run's snapshot of the installed selftests is in the job directory,
	# a 9p share without a page cache: onto tmpfs, since tests start kublk
	# hundreds of times.
	local err
	if err=$(cp -a "$SELFTESTS" /run/xtask-selftests 2>&1); then
		SELFTESTS=/run/xtask-selftests
	else
		say "warning: selftests not copied to tmpfs ($err); running them from $SELFTESTS"
		rm -rf /run/xtask-selftests
	fi

	# Modules of the kernel under test.
	mkdir -p /lib/modules
	ln -sfn "$MODDIR" "/lib/modules/$(uname -r)"

	# udev and sfdisk from Debian packages unpacked on the host.
	if [ -n "${EXTRAS:-}" ] && [ -d "$EXTRAS" ]; then
		# -K: keep the root's /lib -> usr/lib style symlinks.
		rsync -aK --exclude=.xtask-id "$EXTRAS/" / || say "copying $EXTRAS failed"
		udevd=$(command -v systemd-udevd || ls /lib/systemd/systemd-udevd /usr/lib/systemd/systemd-udevd 2>/dev/null | head -n1)
		if [ -x "$udevd" ]; then
			# In a mount namespace of its own, where /dev stays
			# writable after dev_readonly: udev sets the nodes'
			# modes and makes the /dev/disk links.
			unshare -m --propagation private "$udevd" --daemon >/dev/null 2>&1
			udevadm trigger --action=add >/dev/null 2>&1
			udevadm settle --timeout=30 >/dev/null 2>&1
		else
			say "no systemd-udevd in $EXTRAS"
		fi
	fi
	dev_readonly
}

# dev_readonly: no process of the tests can create files in /dev.
#
# fio and dd create a regular file when they open /dev/ublkbN after the
# device went away (the stress and remove tests do that all the time): fio
# then runs its whole time on a file in memory instead of failing at once,
# and the file takes the place of the node devtmpfs makes for the next
# device with that number. Repairing that after the fact raced with
# devtmpfs: a node that vanished between two checks was made again by hand,
# and devtmpfs never removes a node it did not make, so every later device
# with that number left /dev/ublkcN behind. Read-only is a flag of this
# mount only: devtmpfs makes and removes the nodes through its own mount,
# and writing to a device node needs no writable mount.
dev_readonly() {
	mount -o remount,bind,ro /dev || {
		say "cannot make /dev read-only"
		return 1
	}
	if : 2>/dev/null >/dev/.xtask-probe; then
		rm -f /dev/.xtask-probe
		say "/dev is still writable after remounting it read-only"
		return 1
	fi
}

# load_driver c|rust: load exactly that ublk driver and check it owns
# /dev/ublk-control. The Rust driver is the module RUST_MODULE (job.env):
# ublk_drv of the module tree with the Rust implementation as ublk_drv, as
# a distribution ships it, so that the selftests' own `modprobe ublk_drv`
# finds the driver under test loaded; or rust_ublk beside the C ublk_drv
# (benchmarks, which load both in turn).
load_driver() {
	local want=$1 mod other impl
	case "$want" in
	c) mod=ublk_drv other=rust_ublk impl=C ;;
	rust)
		mod=${RUST_MODULE:-rust_ublk} impl=Rust
		other=ublk_drv
		[ "$mod" = ublk_drv ] && other=rust_ublk
		;;
	none) return 0 ;;
	*) say "unknown driver '$want'"; return 1 ;;
	esac
	if grep -q "^$other " /proc/modules; then
		say "driver check: $other is loaded, refusing to test $mod"
		return 1
	fi
	# Which implementation modprobe finds under the name: the Rust one's
	# description says so.
	case "$(modinfo -F description "$mod" 2>/dev/null)" in
	*Rust*) [ "$impl" = Rust ] ;;
	*) [ "$impl" = C ] ;;
	esac || {
		say "driver check: $mod in $MODDIR is not the $impl driver: $(modinfo -n "$mod" 2>&1)"
		return 1
	}
	if ! modprobe "$mod"; then
		local ko
		ko=$(find "$MODDIR/" -name "$mod.ko*" 2>/dev/null | head -n 1)
		if [ ! -d "$MODDIR" ]; then
			say "driver check: modprobe $mod failed: the guest cannot see the modules directory $MODDIR"
		elif [ -z "$ko" ]; then
			say "driver check: modprobe $mod failed: no $mod.ko in $MODDIR (/lib/modules/$(uname -r))"
		else
			say "driver check: modprobe $mod failed (module $ko)"
		fi
		return 1
	fi
	if ! grep -q "^$mod " /proc/modules; then
		say "driver check: $mod is not in /proc/modules after modprobe"
		return 1
	fi
	if grep -q "^$other " /proc/modules; then
		say "driver check: $other got loaded too"
		return 1
	fi
	local i
	for i in $(seq 50); do
		[ -c /dev/ublk-control ] && break
		sleep 0.1
	done
	if [ ! -c /dev/ublk-control ]; then
		say "driver check: /dev/ublk-control missing after loading $mod"
		return 1
	fi
	say "driver $mod loaded and owns /dev/ublk-control"
	return 0
}

# Between tests: kill leftover servers and delete leftover devices.
cleanup_between() {
	pkill -9 -x kublk 2>/dev/null
	pkill -9 -x rublk 2>/dev/null
	"$SELFTESTS/kublk" del -a >/dev/null 2>&1
	rm -rf /tmp/ublk* /run/ublksrvd 2>/dev/null
}

# plain_trace <file>: a test's xtrace without the time stamps PS4 puts
# after the "+" marks.
plain_trace() {
	sed -E 's/^(\++)[0-9]+[.,][0-9]+ /\1 /' "$1"
}

# Why a test exited with the skip code: its last line of output, or else
# the check it ran last (from the xtrace), e.g. a missing program.
skip_reason() {
	local log=$1 r
	r=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)
	# The suite's own markers say nothing about why; a failed feature
	# check in the trace does.
	case "$r" in
	*": [SKIP]"* | "ublk selftest: "*" done at "*)
		# A test that says why ("<test>: skip: <why>") is believed
		# first: a failed optional feature check is no reason.
		local said
		said=$(grep -m1 -E '^[a-z0-9_]+: skip: ' "$log")
		if [ -n "$said" ]; then
			r=$said
		elif [ -f "$log.trace" ]; then
			local f
			f=$(plain_trace "$log.trace" | awk '
				/^\++ _have_feature / { split($0, w, " "); feat = w[3]; next }
				feat != "" && /^\++ return 1$/ { last = feat; feat = ""; next }
				feat != "" && /^\++ return 0$/ { feat = "" }
				END { if (last != "") print "feature " last " not supported" }')
			[ -n "$f" ] && r=$f
		fi
		;;
	esac
	if [ -z "$r" ] && [ -f "$log.trace" ]; then
		r=$(plain_trace "$log.trace" | awk '
			/^\++ exit / {
				for (i = n; i > n - 4 && i > 0; i--) {
					if (l[i] ~ /^_have_program /) { split(l[i], w, " "); print w[2] " not installed"; exit }
					if (l[i] ~ /^_have_feature /) { split(l[i], w, " "); print "feature " w[2] " not supported"; exit }
				}
				print "exit after: " l[n]; exit
			}
			/^\++ / { sub(/^\++ /, ""); l[++n] = $0 }')
	fi
	echo "${r:-exited with the skip code, no message}" | tr -d '\r#' | cut -c1-160
}

# run_one <n> <test>: runs one test, writes its KTAP line to
# $JOB/logs/<test>.result. Runs in the background when tests share the
# guest, so it leaves the cleanup to its caller.
run_one() {
	local n=$1 t=$2 log rc start end secs reason result dir=$SELFTESTS
	# A harness test (copied into the job directory) or an upstream one.
	[ -f "$HARNESS_TESTS/$t" ] && dir=$HARNESS_TESTS
	log="$JOB/logs/$t.log"
	kmsg "start $t"
	say "start $n $t"
	start=$(date +%s.%N)
	# xtrace to a separate file: it names the check behind a silent skip,
	# and its time stamps say where the time goes (`cargo xtask profile`).
	# Bash does not take PS4 from the environment as root; BASH_ENV works
	# (every bash the test starts reads it too: it only sets PS4).
	# A test may declare a longer timeout of its own ("# xtask-timeout: N";
	# the host's watchdog allows for it, see own_timeout in selftest/boot.rs).
	local limit=$TEST_TIMEOUT own
	own=$(sed -n 's/^# xtask-timeout: \([0-9][0-9]*\)$/\1/p' "$dir/$t" | head -n 1)
	[ -n "$own" ] && [ "$own" -gt "$limit" ] && limit=$own
	(cd "$dir" && exec env BASH_XTRACEFD=9 BASH_ENV="$JOB/ps4.sh" timeout -k 15 "$limit" bash -x "./$t" 9>"$log.trace") \
		> "$log" 2>&1 </dev/null
	rc=$?
	end=$(date +%s.%N)
	secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
	kmsg "end $t rc=$rc"
	case $rc in
	0)
		# A test whose runs in the background all skipped may still
		# exit 0 (upstream test_recover_02.sh on a driver without user
		# recovery): it saw no pass, so it is reported as skipped.
		local skipped
		skipped=$(grep -c ': \[SKIP\]' "$log")
		if [ "$skipped" -gt 0 ]; then
			result="ok $n $t # SKIP exited 0, but $skipped of its runs reported [SKIP] (${secs}s)"
		else
			result="ok $n $t # time=${secs}s"
		fi
		;;
	4)
		reason=$(skip_reason "$log")
		result="ok $n $t # SKIP ${reason:-no reason given} (${secs}s)"
		;;
	124 | 137) result="not ok $n $t # TIMEOUT ${limit}s" ;;
	*) result="not ok $n $t # exit=$rc time=${secs}s" ;;
	esac
	case $rc in
	0 | 4) ;;
	# What is left in the guest (of any test running), for the digest of
	# failures (xtask/src/digest.rs).
	*) echo "xtask: left behind: $(left_behind)" >> "$log" ;;
	esac
	echo "$result" > "$log.result"
}

# left_behind: the ublk devices and the server and fio processes that exist
# now, on one line.
left_behind() {
	local devs procs
	devs=$(cd /dev && ls -d ublkc* ublkb* 2>/dev/null | tr '\n' ' ')
	# (ublk_release_race's server, stuck in the kernel when it fails, by the
	# 15 characters of its process name)
	procs=$(pgrep -a -x 'kublk|rublk|fio|ublk_badinput|ublk_release_ra' | cut -c1-60 | tr '\n' ';')
	echo "devices: ${devs:-none}; processes: ${procs:-none}"
}

# report <test>: appends the result of a finished test to results.ktap.
report() {
	local r="$JOB/logs/$1.log.result"
	[ -s "$r" ] || echo "not ok 0 $1 # the runner lost its result" > "$r"
	tee -a "$JOB/results.ktap" < "$r"
	sync "$JOB/results.ktap" 2>/dev/null
}

# Tests sharing the guest (JOBS > 1): pid -> test, and test -> group.
declare -A RUNNING=() GROUP_OF=()

# reap_one: waits for one running test and reports it.
reap_one() {
	local pid
	wait -n -p pid "${!RUNNING[@]}"
	[ -n "$pid" ] || return
	report "${RUNNING[$pid]}"
	unset "RUNNING[$pid]"
}

reap_all() {
	while [ "${#RUNNING[@]}" -gt 0 ]; do
		reap_one
	done
}

# group_busy <group>: whether a running test belongs to <group>.
group_busy() {
	local pid
	for pid in "${!RUNNING[@]}"; do
		[ "${GROUP_OF[${RUNNING[$pid]}]}" = "$1" ] && return 0
	done
	return 1
}

# tests.txt: one test per line, "<test> <sharing>", where <sharing> is
# "any" (may run beside any test), "alone" (runs with no other test), or
# a group name (runs beside any test but those of its group). Tests start
# in list order, up to $JOBS at once, except that a test whose group is
# busy lets the tests after it start first (never past a test that runs
# alone). Leftover servers and devices are cleaned up whenever no test
# runs.
run_selftests() {
	local n=0 total t share
	local -a tests=() shares=()
	while read -r t share; do
		[ -n "$t" ] || continue
		tests+=("$t")
		shares+=("${share:-alone}")
	done < "$JOB/tests.txt"
	total=${#tests[@]}
	export JOBS=${JOBS:-1}
	mkdir -p "$JOB/logs"
	# shellcheck disable=SC2016 # expanded by the traced shell, per line
	printf '%s\n' "PS4='+\${EPOCHREALTIME} '" > "$JOB/ps4.sh"
	{
		echo "KTAP version 1"
		echo "1..$total"
	} | tee "$JOB/results.ktap"
	# Indices of the tests not started yet, in list order.
	local -a waiting=("${!tests[@]}")
	local i j k pick
	while [ "${#waiting[@]}" -gt 0 ]; do
		i=${waiting[0]}
		t=${tests[$i]}
		share=${shares[$i]}
		if [ "$JOBS" -le 1 ] || [ "$share" = alone ]; then
			# Tests that ran beside each other leave what cleanup_between
			# removes only once none runs: now, before this one.
			if [ "$JOBS" -gt 1 ]; then
				reap_all
				cleanup_between
			fi
			run_one "$((i + 1))" "$t"
			report "$t"
			cleanup_between
			waiting=("${waiting[@]:1}")
			continue
		fi
		# The first waiting test that may start beside those running: one
		# whose group is busy lets the next ones go first, but no test
		# passes one that runs alone.
		pick=
		for k in "${!waiting[@]}"; do
			j=${waiting[$k]}
			[ "${shares[$j]}" = alone ] && break
			if [ "${shares[$j]}" = any ] || ! group_busy "${shares[$j]}"; then
				pick=$k
				break
			fi
		done
		if [ "${#RUNNING[@]}" -ge "$JOBS" ] || [ -z "$pick" ]; then
			reap_one
			continue
		fi
		j=${waiting[$pick]}
		unset "waiting[$pick]"
		waiting=("${waiting[@]}")
		t=${tests[$j]}
		GROUP_OF[$t]=${shares[$j]}
		run_one "$((j + 1))" "$t" &
		RUNNING[$!]=$t
	done
	reap_all
	cleanup_between
}

status=0
if ! setup; then
	echo "setup-failed" > "$JOB/status"
	status=1
elif ! load_driver "$DRIVER"; then
	echo "driver-load-failed" > "$JOB/status"
	status=1
else
	case "$MODE" in
	selftest)
		run_selftests
		;;
	command)
		kmsg "start command"
		say "start command" >&2
		bash "$JOB/command.sh"
		status=$?
		kmsg "end command rc=$status"
		;;
	bench)
		# shellcheck source=/dev/null
		. "$JOB/bench.sh"
		;;
	shell)
		say "interactive shell; exit or Ctrl-D powers the guest off"
		setsid -c bash -l
		status=$?
		;;
	esac
	echo "$status" > "$JOB/status"
fi
say "done status=$status"
sleep 0.5
kill "$DMESG_PID" 2>/dev/null
sync
exit "$status"
