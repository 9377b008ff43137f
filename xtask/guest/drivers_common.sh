#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Shared by the hand-run scripts that compare the two drivers in one boot
# (perf_drivers.sh, perf_diff.sh, counters_drivers.sh), which source it.

# shellcheck disable=SC2034 # OPTS is for the scripts that source this
mode_opts() {
	# mode_opts <mode>: sets OPTS to kublk's options for a data mode, named
	# as `cargo xtask bench rust-vs-c --modes` names them; exits on another
	OPTS=()
	case $1 in
	copy) ;;
	user_copy) OPTS=(-u) ;;
	zero_copy) OPTS=(-z) ;;
	auto_zc) OPTS=(--auto_zc) ;;
	batch) OPTS=(-b) ;;
	*)
		echo "unknown data mode '$1' (copy, user_copy, zero_copy, auto_zc, batch)"
		exit 2
		;;
	esac
}

driver_order() {
	# driver_order <round>: the two driver modules in the order of that
	# round: C first in odd rounds, Rust first in even ones, so that what a
	# run leaves behind weighs on both drivers alike
	if [ $(($1 % 2)) -eq 0 ]; then
		echo "rust_ublk ublk_drv"
	else
		echo "ublk_drv rust_ublk"
	fi
}
