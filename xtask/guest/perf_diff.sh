#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Where the Rust driver's extra CPU time per I/O goes, symbol by symbol,
# against the C driver's, in one boot: kublk's null target (1 queue,
# depth 128), fio 4k randread at iodepth 16 (or IODEPTH) on CPU 1, `perf record -a -e
# cpu-clock -F 4000` for 6 s of each run, the C driver (ublk_drv) and the
# Rust driver (rust_ublk) in turn, C first in odd rounds and Rust first in
# even ones. perf_drivers.sh prints each run's top symbols in shares of
# all samples; this prints samples per 1000 I/Os (the I/Os the disk
# completed while perf recorded), pooled over the rounds (all samples of a
# driver over all its I/Os), so that the two drivers compare whatever
# their IOPS:
#
# - the total, the idle loop's (pv_native_safe_halt, default_idle and the
#   cpuidle functions) and the rest, busy;
# - groups: the driver module (its own functions, which differ between
#   the drivers), the Rust driver's glue in the kernel image (kernel crate
#   functions, _RN..., and the rust_helper_* calls), fio, kublk, and the
#   rest of the kernel by symbol;
# - the 30 kernel symbols where the Rust driver's runs spend the most
#   samples per I/O more than the C driver's, and the 15 where they spend
#   the most fewer.
#
# MODES and ROUNDS as perf_drivers.sh (default: copy, 3 rounds); IODEPTH
# fio's (default 16).
#
#   cargo xtask vm --driver none -- env MODES="copy zero_copy" ROUNDS=3 \
#     bash "$PWD"/xtask/guest/perf_diff.sh
#
# Under TCG a sample lands at the end of a translation block, mostly just
# after a call: per-symbol numbers count calls and branches more than
# instructions.
K=$SELFTESTS/kublk
# shellcheck source=xtask/guest/drivers_common.sh
. "$(dirname "$0")"/drivers_common.sh
command -v /usr/bin/perf >/dev/null || { echo "no /usr/bin/perf on the host (apt-get install linux-perf)"; exit 4; }
ROUNDS=${ROUNDS:-3}
IODEPTH=${IODEPTH:-16}
OUT=/tmp/perf_diff
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"

for mode in ${MODES:-copy}; do
mode_opts "$mode"
rm -rf "$OUT"
mkdir -p "$OUT"
for round in $(seq 1 "$ROUNDS"); do
for mod in $(driver_order "$round"); do
	modprobe $mod || { echo "modprobe $mod failed"; exit 1; }
	$K add -t null -q 1 -d 128 "${OPTS[@]}" > /tmp/add.txt 2>&1 || { cat /tmp/add.txt; exit 1; }
	dev=$(basename "$(ls /dev/ublkb* | head -1)")
	fio --name=d --filename=/dev/$dev --ioengine=io_uring --direct=1 --bs=4k --rw=randread --iodepth="$IODEPTH" \
	    --numjobs=1 --cpus_allowed=1 --time_based --runtime=10 --output-format=terse --terse-version=3 > /tmp/fio.txt 2>&1 &
	fpid=$!
	sleep 2
	read -r rd0 _ < "/sys/block/$dev/stat"
	/usr/bin/perf record -a -e cpu-clock -F 4000 -o /tmp/perf.data -- sleep 6 2>/dev/null >/dev/null
	read -r rd1 _ < "/sys/block/$dev/stat"
	wait $fpid
	ios=$((rd1 - rd0))
	echo "=== $mode round $round $mod: $ios I/Os in the perf window ($((ios / 6)) per s)"
	# "<samples> <dso> <symbol>" per line.
	/usr/bin/perf report -i /tmp/perf.data --stdio --no-children -n --sort dso,sym 2>/dev/null \
	  | awk '/^#/ || NF < 4 {next} {n = $2; dso = $3; sym = $NF; print n, dso, sym}' \
	  > "$OUT/$mod.$round.txt"
	echo "$ios" > "$OUT/$mod.$round.ios"
	$K del -a
	sleep 1
	rmmod $mod || echo "rmmod $mod failed"
done
done

# Pooled over the rounds: samples per 1000 I/Os of each driver.
ios_c=$(cat "$OUT"/ublk_drv.*.ios | awk '{s += $1} END {print s + 0}')
ios_r=$(cat "$OUT"/rust_ublk.*.ios | awk '{s += $1} END {print s + 0}')
if [ "$ios_c" -le 0 ] || [ "$ios_r" -le 0 ]; then
	echo "--- $mode: a driver completed no I/O in its perf windows"
	continue
fi
cat "$OUT"/ublk_drv.*.txt | awk '{print "c", $0}' > "$OUT/all.txt"
cat "$OUT"/rust_ublk.*.txt | awk '{print "r", $0}' >> "$OUT/all.txt"
echo "--- $mode (iodepth $IODEPTH): samples per 1000 I/Os, pooled over $ROUNDS rounds (C: $ios_c I/Os, Rust: $ios_r)"
awk -v ic="$ios_c" -v ir="$ios_r" -v out="$OUT" '
	function group(dso, sym) {
		if (sym ~ /^(pv_native_safe_halt|default_idle|default_idle_call|cpuidle_idle_call|do_idle|cpu_idle_poll|acpi_idle_do_entry|acpi_safe_halt|intel_idle)$/)
			return "IDLE"
		if (dso == "[ublk_drv]" || dso == "[rust_ublk]")
			return "GROUP driver module"
		if (dso == "[kernel.vmlinux]" && sym ~ /^(_RN|rust_helper_)/)
			return "GROUP Rust glue in the kernel image"
		if (dso != "[kernel.vmlinux]")
			return "GROUP " dso
		return sym
	}
	{
		drv = $1; n = $2; dso = $3; sym = $4
		g = group(dso, sym)
		if (drv == "c") { c[g] += n; tc += n } else { r[g] += n; tr += n }
		seen[g] = 1
		if (g == "IDLE") { if (drv == "c") idc += n; else idr += n }
	}
	END {
		k = 1000
		printf "all samples: C %.1f Rust %.1f (Rust/C %.2fx)\n", tc * k / ic, tr * k / ir, (tr / ir) / (tc / ic)
		printf "idle:        C %.1f Rust %.1f\n", idc * k / ic, idr * k / ir
		bc = (tc - idc) * k / ic; br = (tr - idr) * k / ir
		printf "busy:        C %.1f Rust %.1f (Rust/C %.2fx, Rust - C %+.1f)\n", bc, br, br / bc, br - bc
		for (g in seen) {
			if (g == "IDLE")
				continue
			d = r[g] * k / ir - c[g] * k / ic
			printf "%+.2f %.2f %.2f %s\n", d, c[g] * k / ic, r[g] * k / ir, g > out "/diff.txt"
		}
	}' "$OUT/all.txt"
echo "groups (Rust - C, C, Rust):"
grep " GROUP " "$OUT/diff.txt" | sort -gr | sed 's/GROUP //'
for m in ublk_drv rust_ublk; do
	ios=$ios_c
	[ $m = rust_ublk ] && ios=$ios_r
	echo "the module's functions, $m (samples per 1000 I/Os):"
	cat "$OUT"/$m.*.txt | awk -v m="[$m]" -v ios="$ios" '$2 == m {n[$3] += $1}
		END {for (s in n) printf "%.2f %s\n", n[s] * 1000 / ios, s}' | sort -gr | head -15
done
echo "the Rust driver's glue in the kernel image (samples per 1000 I/Os):"
cat "$OUT"/rust_ublk.*.txt | awk -v ios="$ios_r" '$2 == "[kernel.vmlinux]" && $3 ~ /^(_RN|rust_helper_)/ {n[$3] += $1}
	END {for (s in n) printf "%.2f %s\n", n[s] * 1000 / ios, s}' | sort -gr | head -15
echo "kernel symbols, most more per I/O in the Rust runs (Rust - C, C, Rust):"
grep -v " GROUP " "$OUT/diff.txt" | sort -gr | head -30
echo "kernel symbols, most fewer per I/O in the Rust runs (Rust - C, C, Rust):"
grep -v " GROUP " "$OUT/diff.txt" | sort -g | head -15
done
