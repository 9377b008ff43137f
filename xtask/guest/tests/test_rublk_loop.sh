#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# rublk's loop target in plain copy mode (no -r/-u/-z/-p options), against
# whichever ublk driver is loaded: crc32c write+verify through the device,
# then the checksums from the backing file (rublk_loop_verify).

# shellcheck source-path=SCRIPTDIR source=rublk_lib.sh
. "$(dirname "$0")/rublk_lib.sh"
rublk_require
rublk_loop_verify "copy"
