#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# rublk's null target in plain copy mode (no -r/-u/-z/-p options) against
# whichever ublk driver is loaded: add, fio I/O, delete (rublk_null_io).

# shellcheck source-path=SCRIPTDIR source=rublk_lib.sh
. "$(dirname "$0")/rublk_lib.sh"
rublk_require

echo "driver features (UBLK_U_CMD_GET_FEATURES):"
timeout -k 5 "$STEP_TIMEOUT" "$RUBLK" features 2>&1

rublk_null_io "copy"
