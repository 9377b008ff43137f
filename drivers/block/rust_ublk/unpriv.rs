// SPDX-License-Identifier: GPL-2.0

//! Devices that users without `CAP_SYS_ADMIN` create (`UBLK_F_UNPRIVILEGED_DEV`), and who may
//! send control commands to a device.
//!
//! The model is that of ublk_drv, which unprivileged tools and servers are written against:
//!
//! - A device that a privileged caller creates only takes control commands from privileged
//!   callers.
//! - A user may create an unprivileged device, without user copy, zero copy or automatic buffer
//!   registration, whose server the driver cannot trust with kernel buffers, and without user
//!   recovery, which would let its requests wait for a new server forever. The device records
//!   its owner's user and group ids (in the initial user namespace; every device records them).
//! - A control command of an unprivileged device names the path of its `/dev/ublkcN` in front of
//!   the command's buffer (`dev_path_len` bytes); the caller must be allowed to read that file,
//!   and to write it for a command that changes the device. Who may is thus whatever the
//!   administrator's udev rules give the node; only the owner is expected. Privileged callers
//!   pass the path too. `UBLK_U_CMD_GET_DEV_INFO2` also takes the path for a privileged device,
//!   since user space may not know how the device was created.
//! - Only the owner, and privileged callers, may open the disk: another user whom the owner
//!   granted access to the node could otherwise be handed a trap.
//! - A request of an unprivileged device that does not end within the queue's timeout kills the
//!   process that opened `/dev/ublkcN`, whose exit fails the requests it held; until then the
//!   request's timer is rearmed, so that it times out again if it outlives the process (another
//!   process may have `/dev/ublkcN` open too). A privileged device's requests wait.
//! - Partitions are not scanned on a disk whose server lacks `CAP_SYS_ADMIN` (whatever the
//!   device's owner), since the server could make the scan wait for ever with the disk's
//!   `open_mutex` held.

use crate::{
    control::{user_buf, Control},
    device::UblkDevice,
    uapi::{self, CtrlCmd},
};
use kernel::{
    cred::{capable, Capability},
    current,
    fs::path::{Access, Path},
    new_spinlock,
    prelude::*,
    sync::{aref::ARef, SpinLock},
    task::{Kgid, Kuid, Task},
};

/// A user id and a group id, in the initial user namespace: the owner of a device.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl Owner {
    /// Returns the real user and group ids of the caller (`current_uid_gid()`).
    pub(crate) fn current() -> Self {
        Self {
            uid: Kuid::current_uid().into_uid_in_init_ns(),
            gid: Kgid::current_gid().into_gid_in_init_ns(),
        }
    }
}

/// What the driver keeps about a device that a user without `CAP_SYS_ADMIN` created.
pub(crate) struct Unprivileged {
    /// Who created the device: the only user who may open its disk.
    owner: Owner,
    /// A task of the process that opened `/dev/ublkcN`, which a request that times out kills.
    /// `None` while no server has `/dev/ublkcN` open.
    server: Pin<KBox<SpinLock<Option<ARef<Task>>>>>,
}

impl Unprivileged {
    /// Returns what the driver keeps about an unprivileged device of `owner`.
    pub(crate) fn new(owner: Owner) -> Result<Self> {
        Ok(Self {
            owner,
            server: KBox::pin_init(new_spinlock!(None, "Unprivileged::server"), GFP_KERNEL)?,
        })
    }

    /// Checks an open of the disk (`ublk_open()`): only the owner and privileged callers may.
    pub(crate) fn may_open(&self) -> Result {
        if capable(Capability::SYS_ADMIN) || Owner::current() == self.owner {
            Ok(())
        } else {
            Err(EPERM)
        }
    }

    /// The current process opened `/dev/ublkcN`: it serves the device from now on.
    pub(crate) fn set_server(&self) {
        let task = ARef::from(&**current!());
        // Dropped after the lock is released.
        let _old = self.server.lock().replace(task);
    }

    /// The server closed `/dev/ublkcN`.
    pub(crate) fn clear_server(&self) {
        let _old = self.server.lock().take();
    }

    /// A request timed out: kills the server's process (`ublk_timeout()`), whose exit ends the
    /// request, if a server has `/dev/ublkcN` open.
    pub(crate) fn kill_server(&self) {
        let server = self.server.lock().clone();
        if let Some(task) = server {
            // `ESRCH`: the process is gone already, and its release ends the request.
            let _ = task.kill();
        }
    }
}

/// Longest path user space may pass in front of a control command's buffer (`PATH_MAX`).
const PATH_MAX: u16 = 4096;

/// Returns how a control command `nr` of an unprivileged device accesses it, or `EINVAL` for a
/// command that it does not take.
fn access_of(nr: u32) -> Result<Access> {
    match nr {
        uapi::CMD_GET_DEV_INFO
        | uapi::CMD_GET_DEV_INFO2
        | uapi::CMD_GET_QUEUE_AFFINITY
        | uapi::CMD_GET_PARAMS
        | uapi::CMD_GET_FEATURES => Ok(Access::READ),
        uapi::CMD_START_DEV
        | uapi::CMD_STOP_DEV
        | uapi::CMD_ADD_DEV
        | uapi::CMD_DEL_DEV
        | uapi::CMD_SET_PARAMS
        | uapi::CMD_START_USER_RECOVERY
        | uapi::CMD_END_USER_RECOVERY
        | uapi::CMD_UPDATE_SIZE
        | uapi::CMD_QUIESCE_DEV
        | uapi::CMD_TRY_STOP_DEV
        | uapi::CMD_REG_BUF
        | uapi::CMD_UNREG_BUF => Ok(Access::READ | Access::WRITE),
        // Also `UBLK_U_CMD_DEL_DEV_ASYNC`, which ublk_drv refuses them too: unprivileged servers
        // delete their devices with `UBLK_U_CMD_DEL_DEV`.
        _ => Err(EINVAL),
    }
}

/// Checks that the caller may send control command `nr` to `dev`
/// (`ublk_ctrl_uring_cmd_permission()`), and returns the command's header with the path of
/// `/dev/ublkcN` that it carries, if any, taken off the front of its buffer.
pub(crate) fn check_command(
    ctl: &Control,
    dev: &UblkDevice,
    nr: u32,
    mut header: CtrlCmd,
) -> Result<CtrlCmd> {
    if dev.queues.unprivileged.is_none() {
        if !capable(Capability::SYS_ADMIN) {
            return Err(EPERM);
        }
        if nr != uapi::CMD_GET_DEV_INFO2 {
            return Ok(header);
        }
    }

    let path_len = header.dev_path_len;
    if path_len == 0 || path_len > PATH_MAX || header.len < path_len {
        return Err(EINVAL);
    }
    // The path, with a NUL after it in any case (`memdup_user_nul()`).
    let mut path = KVec::from_elem(0u8, usize::from(path_len) + 1, GFP_KERNEL)?;
    user_buf(header.addr, usize::from(path_len))?
        .reader()
        .read_slice(&mut path[..usize::from(path_len)])?;
    let access = access_of(nr)?;

    let end = path.iter().position(|&c| c == 0).unwrap_or(path.len() - 1);
    let name = CStr::from_bytes_with_nul(&path[..=end]).map_err(|_| EINVAL)?;
    let found = Path::lookup(name)?;
    // A deleted device has no `/dev/ublkcN` that a path could name: no node passes, not even one
    // that anybody may create with a placeholder number (an overlayfs whiteout is `0:0`).
    match ctl.char_devt(dev) {
        Some(devt) if found.char_dev() == Some(devt) => {}
        _ => return Err(EPERM),
    }
    found.permission(access)?;

    header.len -= path_len;
    // Cannot wrap: the path was read from there.
    header.addr = header.addr.wrapping_add(u64::from(path_len));
    Ok(header)
}
