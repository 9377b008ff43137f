#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# rublk's null target with user copy (-u: UBLK_F_USER_COPY; fetch and
# commit commands carry no buffer) against whichever ublk driver is loaded:
# add, fio I/O, delete (rublk_null_io). rublk 0.2.15 serves user copy on
# its null and zoned targets only; its loop target refuses -u ("loop
# doesn't support user copy"), so the data of user copy is verified by the
# upstream kublk tests (loop_06, loop_07, stripe_05, stripe_06).

# shellcheck source-path=SCRIPTDIR source=rublk_lib.sh
. "$(dirname "$0")/rublk_lib.sh"
rublk_require
rublk_null_io "user copy" -u
