#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# test_generic_19 for zero copy, auto buffer registration and batch I/O:
# write and verify data on devices created with
# UBLK_F_SUPPORT_RQ_AFFINITY.

# shellcheck disable=SC2034 # test_generic_19.sh reads it
GENERIC_19_MODES="zero_copy auto_zc batch"
. "$(cd "$(dirname "$0")" && pwd)"/test_generic_19.sh
