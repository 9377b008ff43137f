// SPDX-License-Identifier: GPL-2.0

//! `/dev/ublkcN`, the device through which the ublk server serves the I/O of a device.
//!
//! It is a misc device named `ublkcN`, registered with the device it belongs to. Only one
//! process, the ublk server, can have it open at a time. The server maps the io descriptors of
//! each queue read-only, and sends the io commands of [`crate::io`] with io_uring.

use crate::{
    device::UblkDevice,
    io, iodesc,
    uapi::{self, IoCmd},
};
use kernel::{
    current,
    fs::File,
    io_uring::{IoUringCmd, IoUringCmdCancel, IssueFlags},
    miscdevice::{MiscDevice, MiscDeviceRegistration},
    mm::virt::VmaNew,
    prelude::*,
    str::CString,
    sync::{Arc, ArcBorrow},
};

/// The file operations of `/dev/ublkcN`.
pub(crate) struct CharDev;

/// Registers `/dev/ublkcN` for `dev`.
pub(crate) fn register(dev: Arc<UblkDevice>) -> Result<Pin<KBox<MiscDeviceRegistration<CharDev>>>> {
    let name = CString::try_from_fmt(fmt!("ublkc{}", dev.id))?;
    KBox::pin_init(
        MiscDeviceRegistration::register_with_name(name, dev),
        GFP_KERNEL,
    )
}

#[vtable]
impl MiscDevice for CharDev {
    type Ptr = Arc<UblkDevice>;
    type RegistrationData = Arc<UblkDevice>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Arc<UblkDevice>> {
        let dev = misc.data();
        let mut state = dev.state.lock();
        if state.char_open {
            return Err(EBUSY);
        }
        state.char_open = true;
        state.server_tgid = Some(current!().tgid_nr_ns(None));
        drop(state);
        Ok(dev.clone())
    }

    fn release(dev: Arc<UblkDevice>, _file: &File) {
        // Every command of the server is completed by now, since a queued command keeps the file
        // open. What the server was serving fails.
        io::abort_all(&dev);
        // Without user recovery, a started device dies with its server: its disk goes away, and
        // the device can only be deleted.
        dev.stop();
        io::reset_all(&dev);
        *dev.server_mm.lock() = None;
        let mut state = dev.state.lock();
        state.nr_fetched = 0;
        state.char_open = false;
        state.server_tgid = None;
        drop(state);
        dev.ready.notify_all();
    }

    fn mmap(dev: ArcBorrow<'_, UblkDevice>, _file: &File, vma: &VmaNew) -> Result {
        {
            // Only one process maps the io descriptors: the server.
            let mm = core::ptr::from_ref(vma.mm()) as usize;
            let mut server_mm = dev.server_mm.lock();
            match *server_mm {
                None => *server_mm = Some(mm),
                Some(server) if server != mm => return Err(EINVAL),
                Some(_) => {}
            }
        }
        if vma.writable() {
            return Err(EPERM);
        }
        let q_id = iodesc::queue_of(vma)?;
        dev.queues.get(q_id)?.descs.map(q_id, vma)
    }

    fn uring_cmd(
        dev: ArcBorrow<'_, UblkDevice>,
        cmd: IoUringCmd<'_>,
        issue_flags: IssueFlags<'_>,
    ) -> Result<i32> {
        let op = cmd.cmd_op();
        if !matches!(uapi::ioc_type(op), 0 | 0x75) {
            return Err(EOPNOTSUPP);
        }
        // Zero copy buffers are never registered; the C driver answers this before looking at
        // the queue and tag.
        if uapi::ioc_nr(op) == uapi::IO_UNREGISTER_IO_BUF {
            return Err(EINVAL);
        }
        let io_cmd = IoCmd::parse(&cmd.read_cmd::<[u8; uapi::IO_CMD_SIZE]>()?);
        match uapi::ioc_nr(op) {
            uapi::IO_FETCH_REQ => io::fetch(&dev, cmd, issue_flags, &io_cmd),
            uapi::IO_COMMIT_AND_FETCH_REQ => io::commit_and_fetch(&dev, cmd, issue_flags, &io_cmd),
            // Other commands need features that devices of this driver lack; the C driver first
            // checks that the slot belongs to the calling server task.
            _ => io::check_owner(&dev, &io_cmd).and(Err(EINVAL)),
        }
    }

    fn uring_cmd_cancel(
        dev: ArcBorrow<'_, UblkDevice>,
        cmd: IoUringCmdCancel<'_>,
        issue_flags: IssueFlags<'_>,
    ) {
        io::cancel(&dev, cmd, issue_flags);
    }
}
