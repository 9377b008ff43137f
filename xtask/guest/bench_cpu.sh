#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Guest CPU time per I/O, measured the same way for bench.sh's "ratio"
# section (`cargo xtask bench rust-vs-c`) and bench_matrix.sh (`cargo
# xtask bench matrix`); sourced by bench.sh (copied beside it), uses its
# rec.
#
# While a fio run goes on in the background: once the device has completed
# an I/O of this run, and after an optional delay (fio's ramp), a window of
# a given number of seconds; over it the non-idle CPU time of all CPUs
# (/proc/stat: user nice system irq softirq steal, USER_HZ ticks) and the
# I/Os the device completed (/sys/block/<dev>/stat). The host divides the
# one by the other.
#
# Samples (cpu_rec): "<section>,<key>/busy_ticks,<round>,<ticks>",
# "<section>,<key>/ios,<round>,<I/Os>" and
# "<section>,<key>/window_us,<round>,<wall time of the window>";
# once per boot "<section>,clk_tck,0,<USER_HZ>".

cpu_hz() {
	# cpu_hz: USER_HZ, the unit of /proc/stat (100 if getconf cannot say)
	local hz
	hz=$(getconf CLK_TCK 2>/dev/null)
	[[ "$hz" =~ ^[0-9]+$ ]] || hz=100
	echo "$hz"
}

cpu_stat() {
	# cpu_stat <dev>: CPU_BUSY (non-idle ticks, all CPUs), CPU_IOS
	# (completed I/Os of <dev>), CPU_US (wall clock in microseconds);
	# builtins only, so reading them costs next to no CPU time
	local u n s irq sirq st rd wr
	read -r _ u n s _ _ irq sirq st _ < /proc/stat
	read -r rd _ _ _ wr _ < "/sys/block/$1/stat"
	CPU_US=${EPOCHREALTIME//[.,]/}
	CPU_BUSY=$((u + n + s + irq + sirq + st))
	CPU_IOS=$((rd + wr))
}

cpu_window() {
	# cpu_window <dev> <pid> <delay> <seconds>: the fio run <pid> on
	# /dev/<dev> has just been started; wait until the device has
	# completed an I/O of it (at most 30 s), then <delay> seconds more,
	# and measure over the next <seconds>. Sets CPU_WIN_BUSY, CPU_WIN_IOS
	# and CPU_WIN_US and returns 0 if the window lay inside the run and
	# the device completed I/Os in it; else they are empty and it returns
	# non-zero. Call it before waiting for <pid>.
	local dev=$1 pid=$2 delay=$3 secs=$4 start_ios busy0 ios0 us0
	CPU_WIN_BUSY='' CPU_WIN_IOS='' CPU_WIN_US=''
	cpu_stat "$dev"
	start_ios=$CPU_IOS
	# The window starts once the device has completed an I/O of this run.
	for _ in $(seq 300); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
		cpu_stat "$dev"
		[ "$CPU_IOS" -gt "$start_ios" ] && break
	done
	if [ "$delay" -gt 0 ] && kill -0 "$pid" 2>/dev/null; then
		sleep "$delay"
		cpu_stat "$dev"
	fi
	busy0=$CPU_BUSY ios0=$CPU_IOS us0=$CPU_US
	[ "$secs" -ge 1 ] || return 1
	kill -0 "$pid" 2>/dev/null && sleep "$secs"
	cpu_stat "$dev"
	kill -0 "$pid" 2>/dev/null || return 1
	[ "$CPU_IOS" -gt "$ios0" ] || return 1
	# shellcheck disable=SC2034 # the callers read them
	CPU_WIN_BUSY=$((CPU_BUSY - busy0)) CPU_WIN_IOS=$((CPU_IOS - ios0)) CPU_WIN_US=$((CPU_US - us0))
	return 0
}

cpu_rec() {
	# cpu_rec <section> <key> <round>: the samples of the last window
	rec "$1" "$2/busy_ticks" "$3" "$CPU_WIN_BUSY"
	rec "$1" "$2/ios" "$3" "$CPU_WIN_IOS"
	rec "$1" "$2/window_us" "$3" "$CPU_WIN_US"
}

cpu_us_per_io() {
	# cpu_us_per_io <ticks> <USER_HZ> <I/Os>: microseconds, one decimal
	awk -v t="$1" -v hz="$2" -v n="$3" \
		'BEGIN { if (hz > 0 && n > 0) printf "%.1f", t * 1e6 / hz / n }'
}
