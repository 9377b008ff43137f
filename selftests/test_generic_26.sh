#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# test_generic_18 for auto buffer registration and batch I/O: on which CPU ublk
# ends its requests, with and without UBLK_F_SUPPORT_RQ_AFFINITY.

# shellcheck disable=SC2034 # test_generic_18.sh reads it
GENERIC_18_MODES="auto_zc batch"
. "$(cd "$(dirname "$0")" && pwd)"/test_generic_18.sh
