#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# test_generic_19 for zero copy, auto buffer registration and batch I/O:
# write and verify data on devices created with
# UBLK_F_SUPPORT_RQ_AFFINITY.
#
# test_generic_19.sh picks the modes by the name of the test.

. "$(cd "$(dirname "$0")" && pwd)"/test_generic_19.sh
