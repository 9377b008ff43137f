#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# test_generic_20 for user copy, zero copy, auto buffer registration and
# batch I/O: kill the server of devices created with
# UBLK_F_SUPPORT_RQ_AFFINITY during I/O.
#
# test_generic_20.sh picks the modes by the name of the test.

. "$(cd "$(dirname "$0")" && pwd)"/test_generic_20.sh
