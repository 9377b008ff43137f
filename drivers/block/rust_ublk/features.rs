// SPDX-License-Identifier: GPL-2.0

//! Feature flags (`UBLK_F_*`): what the driver implements, advertises and accepts.

use kernel::uapi as u;

// CAST: The flags are `u32` or `u64` constants in the bindings; the UAPI field is a `__u64`.

pub(crate) const F_SUPPORT_ZERO_COPY: u64 = u::UBLK_F_SUPPORT_ZERO_COPY as u64;
pub(crate) const F_NEED_GET_DATA: u64 = u::UBLK_F_NEED_GET_DATA as u64;
pub(crate) const F_URING_CMD_COMP_IN_TASK: u64 = u::UBLK_F_URING_CMD_COMP_IN_TASK as u64;
pub(crate) const F_USER_RECOVERY: u64 = u::UBLK_F_USER_RECOVERY as u64;
pub(crate) const F_USER_RECOVERY_REISSUE: u64 = u::UBLK_F_USER_RECOVERY_REISSUE as u64;
pub(crate) const F_UNPRIVILEGED_DEV: u64 = u::UBLK_F_UNPRIVILEGED_DEV as u64;
pub(crate) const F_CMD_IOCTL_ENCODE: u64 = u::UBLK_F_CMD_IOCTL_ENCODE as u64;
pub(crate) const F_USER_COPY: u64 = u::UBLK_F_USER_COPY as u64;
pub(crate) const F_ZONED: u64 = u::UBLK_F_ZONED as u64;
pub(crate) const F_USER_RECOVERY_FAIL_IO: u64 = u::UBLK_F_USER_RECOVERY_FAIL_IO as u64;
pub(crate) const F_AUTO_BUF_REG: u64 = u::UBLK_F_AUTO_BUF_REG as u64;
pub(crate) const F_QUIESCE: u64 = u::UBLK_F_QUIESCE as u64;
pub(crate) const F_PER_IO_DAEMON: u64 = u::UBLK_F_PER_IO_DAEMON as u64;
pub(crate) const F_BUF_REG_OFF_DAEMON: u64 = u::UBLK_F_BUF_REG_OFF_DAEMON as u64;
pub(crate) const F_INTEGRITY: u64 = u::UBLK_F_INTEGRITY as u64;
pub(crate) const F_IO_DESC_SIZE: u64 = u::UBLK_F_IO_DESC_SIZE as u64;
pub(crate) const F_SUPPORT_RQ_AFFINITY: u64 = u::UBLK_F_SUPPORT_RQ_AFFINITY as u64;
pub(crate) const F_SHMEM_ZC: u64 = u::UBLK_F_SHMEM_ZC as u64;
pub(crate) const F_NO_AUTO_PART_SCAN: u64 = u::UBLK_F_NO_AUTO_PART_SCAN as u64;
pub(crate) const F_BATCH_IO: u64 = u::UBLK_F_BATCH_IO as u64;
pub(crate) const F_UPDATE_SIZE: u64 = u::UBLK_F_UPDATE_SIZE as u64;
pub(crate) const F_SAFE_STOP_DEV: u64 = u::UBLK_F_SAFE_STOP_DEV as u64;

/// The recovery flags, of which only some combinations make sense.
pub(crate) const F_ALL_RECOVERY_FLAGS: u64 =
    F_USER_RECOVERY | F_USER_RECOVERY_REISSUE | F_USER_RECOVERY_FAIL_IO;

/// Largest io descriptor size that `UBLK_F_IO_DESC_SIZE` may ask for: the bound of ublk_drv
/// (`UBLK_MAX_IO_DESC_SIZE`), which the UAPI header does not define, so that servers may ask for
/// the same sizes.
pub(crate) const MAX_IO_DESC_SIZE: u16 = 256;

/// The features that the driver implements.
///
/// `UBLK_U_CMD_GET_FEATURES` returns exactly these, and `UBLK_U_CMD_ADD_DEV` clears every other
/// flag that user space asks for, so that the flags it returns are those the device really has.
pub(crate) const F_ALL: u64 = F_SUPPORT_ZERO_COPY
    | F_NEED_GET_DATA
    | F_CMD_IOCTL_ENCODE
    | F_URING_CMD_COMP_IN_TASK
    | F_USER_COPY
    | F_AUTO_BUF_REG
    | F_PER_IO_DAEMON
    | F_BUF_REG_OFF_DAEMON
    | F_SHMEM_ZC
    | F_IO_DESC_SIZE
    | F_NO_AUTO_PART_SCAN
    | F_BATCH_IO
    | F_UPDATE_SIZE
    | F_SAFE_STOP_DEV
    | F_USER_RECOVERY
    | F_USER_RECOVERY_REISSUE
    | F_USER_RECOVERY_FAIL_IO
    | F_QUIESCE
    | F_SUPPORT_RQ_AFFINITY
    | F_UNPRIVILEGED_DEV
    | if cfg!(CONFIG_BLK_DEV_INTEGRITY) {
        F_INTEGRITY
    } else {
        0
    }
    // Advertised without `CONFIG_BLK_DEV_ZONED` too, and then refused at `UBLK_U_CMD_ADD_DEV`.
    // ublk_drv does the same; tools written against it expect it.
    | F_ZONED;

/// The flags that every device has, whether user space asked for them or not.
///
/// Commands of `/dev/ublkcN` may be ioctl-encoded, their completion is always posted from the
/// server's task, each io slot belongs to the server thread that fetched it, not each queue to
/// one thread, any thread may register the data of a request as a buffer, and
/// `UBLK_U_CMD_TRY_STOP_DEV` works.
pub(crate) const F_ALWAYS: u64 = F_CMD_IOCTL_ENCODE
    | F_URING_CMD_COMP_IN_TASK
    | F_PER_IO_DAEMON
    | F_BUF_REG_OFF_DAEMON
    | F_SAFE_STOP_DEV;

/// The flags that `UBLK_F_BATCH_IO` clears: its io slots belong to no server thread, and its commit
/// commands name the buffers of writes before they arrive.
pub(crate) const F_NOT_WITH_BATCH_IO: u64 = F_PER_IO_DAEMON | F_NEED_GET_DATA;

/// The flags that make `UBLK_F_NEED_GET_DATA` pointless, and that the driver clears it for: the
/// data of a write does not go through a buffer that the server names.
pub(crate) const F_NO_GET_DATA: u64 = F_USER_COPY | F_SUPPORT_ZERO_COPY | F_AUTO_BUF_REG;
