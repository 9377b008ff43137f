#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Where each ublk driver spends CPU time, in one boot: the C driver
# (ublk_drv) and the Rust driver (rust_ublk) in turn (C first in odd
# rounds, Rust first in even ones), 3 rounds; kublk's
# null target (1 queue, depth 128), fio 4k randread and randwrite at
# iodepth 16 on CPU 1, `perf record -a -e cpu-clock` for 6 s of each run
# (cpu-clock works under TCG). Prints the clocksource (compare only runs of
# one boot: a boot that fell back to hpet is slower everywhere), fio's
# IOPS and the share of each binary per run, and in the last round each
# driver module's symbols, the top kernel symbols and, for the Rust
# driver's read, the instructions of its hottest function; for the Rust
# driver also its glue in the kernel image (kernel crate functions and
# rust_helper_* calls) and their sum.
#
# MODES names the data modes to profile, in turn (default copy): copy,
# user_copy (kublk -u), zero_copy (-z), auto_zc (--auto_zc), batch (-b),
# as `cargo xtask bench rust-vs-c --modes` names them; ROUNDS the rounds
# per mode (default 3; the symbols are printed in the last).
#
# Boot with no driver loaded and run it:
#   cargo xtask vm --driver none -- bash xtask/guest/perf_drivers.sh
#   cargo xtask vm --driver none -- env MODES="zero_copy batch" ROUNDS=2 \
#     bash xtask/guest/perf_drivers.sh
# It uses the host's /usr/bin/perf (Debian's linux-perf), which the guest
# sees through its 9p root.
#
# Under TCG, samples land at translation block boundaries, mostly just
# after calls: a function's self time there counts the calls and branches
# it executes more than its instructions.
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
K=$SELFTESTS/kublk
# shellcheck source=xtask/guest/drivers_common.sh
. "$(dirname "$0")"/drivers_common.sh
command -v /usr/bin/perf >/dev/null || { echo "no /usr/bin/perf on the host (apt-get install linux-perf)"; exit 4; }
ROUNDS=${ROUNDS:-3}
for mode in ${MODES:-copy}; do
mode_opts "$mode"
for round in $(seq 1 "$ROUNDS"); do
for mod in $(driver_order "$round"); do
  modprobe $mod || { echo "modprobe $mod failed"; exit 1; }
  for rw in randread randwrite; do
    $K add -t null -q 1 -d 128 "${OPTS[@]}" > /tmp/add.txt 2>&1 || { cat /tmp/add.txt; exit 1; }
    dev=$(ls /dev/ublkb* | head -1)
    fio --name=p --filename=$dev --ioengine=io_uring --direct=1 --bs=4k --rw=$rw --iodepth=16 \
        --numjobs=1 --cpus_allowed=1 --time_based --runtime=10 --output-format=terse --terse-version=3 > /tmp/fio.txt 2>&1 &
    fpid=$!
    sleep 2
    /usr/bin/perf record -a -e cpu-clock -F 4000 -o /tmp/perf.data -- sleep 6 2>/dev/null >/dev/null
    wait $fpid
    echo "=== $mode round $round $mod $rw: $(awk -F';' '{print "iops read", $8, "write", $49}' /tmp/fio.txt)"
    /usr/bin/perf report -i /tmp/perf.data --stdio --no-children --sort dso 2>/dev/null | grep -v "^#" | grep -v "^$" | head -4
    if [ "$round" = "$ROUNDS" ]; then
      echo "--- module symbols ($mod)"
      /usr/bin/perf report -i /tmp/perf.data --stdio --no-children --sort dso,sym 2>/dev/null | grep -F "[$mod]" | head -30
      if [ $mod = rust_ublk ]; then
        # The Rust driver's glue outside its module: the kernel crate's
        # functions (Rust-mangled, _RN...) and the C helpers it calls
        # (rust_helper_*), which C code inlines.
        echo "--- kernel crate and rust_helper symbols (in the kernel image)"
        /usr/bin/perf report -i /tmp/perf.data --stdio --no-children --sort dso,sym 2>/dev/null \
          | grep -F "[kernel.vmlinux]" | grep -E "\] (_RN|rust_helper_)" > /tmp/glue.txt
        head -25 /tmp/glue.txt
        echo "sum: $(awk '{s += $1} END {printf "%.2f%%", s}' /tmp/glue.txt)"
      fi
      echo "--- top kernel symbols"
      /usr/bin/perf report -i /tmp/perf.data --stdio --no-children --sort sym 2>/dev/null | grep -v "^#" | grep -v "^$" | grep "\[k\]" | head -30
      if [ $mod = rust_ublk ] && [ $rw = randread ]; then
        sym=$(/usr/bin/perf report -i /tmp/perf.data --stdio --no-children --sort dso,sym 2>/dev/null | grep -F "[rust_ublk]" | head -1 | awk '{print $NF}')
        echo "--- annotate $sym"
        /usr/bin/perf annotate -i /tmp/perf.data --stdio -s "$sym" 2>&1 | grep -v "^\s*0.00 :" | grep -E "^\s+[0-9]+\.[0-9]+" | sort -rn | head -40
      fi
    fi
    $K del -a
    sleep 1
  done
  rmmod $mod || echo "rmmod $mod failed"
done
done
done
