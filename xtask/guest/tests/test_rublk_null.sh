#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# rublk's null target (plain copy mode: no -r/-u/-z/-p options) against
# whichever ublk driver is loaded: add, fio I/O, delete.
#
# The null target keeps no data (a read returns whatever is in the server's
# buffer for that tag), so no data can be verified here; fio checks that
# every write and read completes without error at 4k and at larger block
# sizes, with a deep queue on two hardware queues. test_rublk_loop.sh
# verifies data.

# shellcheck source-path=SCRIPTDIR source=rublk_lib.sh
. "$(dirname "$0")/rublk_lib.sh"
rublk_require

echo "driver features (UBLK_U_CMD_GET_FEATURES):"
timeout -k 5 "$STEP_TIMEOUT" "$RUBLK" features 2>&1

id=$(rublk_add null -q 2 -d 64) || exit 1
wait_bdev "$id"
rublk_info "$id"
dev=/dev/ublkb$id

run_fio "null 4k randwrite+randread" --name=w4k --filename="$dev" --rw=randrw \
	--bs=4k --size=32M --io_size=32M
run_fio "null 4k-512k randwrite+randread" --name=wbig --filename="$dev" --rw=randrw \
	--bsrange=8k-512k --size=256M --io_size=64M

rublk_del "$id"
echo "ok: rublk null: add, I/O, delete"
