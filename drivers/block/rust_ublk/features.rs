// SPDX-License-Identifier: GPL-2.0

//! Feature flags (`UBLK_F_*`): what the driver implements, advertises and accepts.

pub(crate) const F_SUPPORT_ZERO_COPY: u64 = 1 << 0;
pub(crate) const F_URING_CMD_COMP_IN_TASK: u64 = 1 << 1;
pub(crate) const F_USER_RECOVERY: u64 = 1 << 3;
pub(crate) const F_USER_RECOVERY_REISSUE: u64 = 1 << 4;
pub(crate) const F_UNPRIVILEGED_DEV: u64 = 1 << 5;
pub(crate) const F_CMD_IOCTL_ENCODE: u64 = 1 << 6;
pub(crate) const F_USER_COPY: u64 = 1 << 7;
pub(crate) const F_ZONED: u64 = 1 << 8;
pub(crate) const F_USER_RECOVERY_FAIL_IO: u64 = 1 << 9;
pub(crate) const F_AUTO_BUF_REG: u64 = 1 << 11;
pub(crate) const F_QUIESCE: u64 = 1 << 12;
pub(crate) const F_INTEGRITY: u64 = 1 << 16;
pub(crate) const F_IO_DESC_SIZE: u64 = 1 << 20;
pub(crate) const F_SUPPORT_RQ_AFFINITY: u64 = 1 << 21;

/// The recovery flags, of which only some combinations make sense.
pub(crate) const F_ALL_RECOVERY_FLAGS: u64 =
    F_USER_RECOVERY | F_USER_RECOVERY_REISSUE | F_USER_RECOVERY_FAIL_IO;

/// Largest io descriptor size that `UBLK_F_IO_DESC_SIZE` may ask for (`UBLK_MAX_IO_DESC_SIZE`).
pub(crate) const MAX_IO_DESC_SIZE: u16 = 256;

/// The features that the driver implements.
///
/// `UBLK_U_CMD_GET_FEATURES` returns exactly these, and `UBLK_U_CMD_ADD_DEV` clears every other
/// flag that user space asks for, so that the flags it returns are those the device really has.
pub(crate) const F_ALL: u64 = F_CMD_IOCTL_ENCODE | F_URING_CMD_COMP_IN_TASK | F_SUPPORT_RQ_AFFINITY;

/// The flags that every device has, whether user space asked for them or not.
///
/// Commands of `/dev/ublkcN` may be ioctl-encoded, and their completion is always posted from the
/// server's task.
pub(crate) const F_ALWAYS: u64 = F_CMD_IOCTL_ENCODE | F_URING_CMD_COMP_IN_TASK;
