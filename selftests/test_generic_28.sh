#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# test_generic_20 for zero copy, auto buffer registration and batch I/O:
# kill the server of devices created with UBLK_F_SUPPORT_RQ_AFFINITY
# during I/O.

# shellcheck disable=SC2034 # test_generic_20.sh reads it
GENERIC_20_MODES="zero_copy auto_zc batch"
. "$(cd "$(dirname "$0")" && pwd)"/test_generic_20.sh
