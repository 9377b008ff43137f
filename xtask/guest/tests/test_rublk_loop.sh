#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# rublk's loop target (plain copy mode: no -r/-u/-z/-p options) on a
# backing file in the guest's tmpfs, against whichever ublk driver is
# loaded: fio random writes with crc32c verification at 4k and at larger
# block sizes, then, after the device is deleted, the same checksums read
# straight from the backing file (the data really went through).

# shellcheck source-path=SCRIPTDIR source=rublk_lib.sh
. "$(dirname "$0")/rublk_lib.sh"
rublk_require

dir=$(mktemp -d /tmp/rublk-loop.XXXXXX) || die "mktemp failed"
trap 'rm -rf "$dir"' EXIT
back=$dir/backing.img
truncate -s 64M "$back" || die "cannot create $back"

id=$(rublk_add loop -f "$back" -q 2 -d 64) || exit 1
wait_bdev "$id"
rublk_info "$id"
dev=/dev/ublkb$id

small=(--name=v4k --rw=randwrite --bs=4k --offset=0 --size=16M
	--verify=crc32c --verify_fatal=1)
big=(--name=vbig --rw=randwrite --bsrange=8k-256k --offset=32M --size=24M
	--verify=crc32c --verify_fatal=1)
run_fio "loop 4k randwrite, crc32c verify" --filename="$dev" "${small[@]}"
run_fio "loop 8k-256k randwrite, crc32c verify" --filename="$dev" "${big[@]}"

rublk_del "$id"

# The device is gone: what fio wrote through it must be in the file.
run_fio "backing file, 4k region verify only" --filename="$back" --direct=0 \
	"${small[@]}" --verify_only
run_fio "backing file, 8k-256k region verify only" --filename="$back" --direct=0 \
	"${big[@]}" --verify_only
echo "ok: rublk loop: add, crc32c write+verify, delete, data in the backing file"
