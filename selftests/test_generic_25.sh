#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# test_generic_18 for NEED_GET_DATA, user copy and zero copy: on which CPU ublk
# ends its requests, with and without UBLK_F_SUPPORT_RQ_AFFINITY.
#
# test_generic_18.sh picks the modes by the name of the test.

. "$(cd "$(dirname "$0")" && pwd)"/test_generic_18.sh
