#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# test_generic_18 for NEED_GET_DATA, user copy and zero copy: on which CPU ublk
# ends its requests, with and without UBLK_F_SUPPORT_RQ_AFFINITY.

# shellcheck disable=SC2034 # test_generic_18.sh reads it
GENERIC_18_MODES="get_data user_copy zero_copy"
. "$(cd "$(dirname "$0")" && pwd)"/test_generic_18.sh
