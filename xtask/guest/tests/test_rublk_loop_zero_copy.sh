#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# rublk's loop target with zero copy (-z: UBLK_F_AUTO_BUF_REG, each
# request's pages registered with the server's io_uring before it learns
# about the request, and read or written there by the backing file's
# O_DIRECT I/O), against whichever ublk driver is loaded: crc32c
# write+verify through the device, then the checksums from the backing file
# (rublk_loop_verify).

# shellcheck source-path=SCRIPTDIR source=rublk_lib.sh
. "$(dirname "$0")/rublk_lib.sh"
rublk_require
rublk_loop_verify "zero copy" -z
