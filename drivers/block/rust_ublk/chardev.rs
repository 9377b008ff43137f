// SPDX-License-Identifier: GPL-2.0

//! `/dev/ublkcN`, the device through which the ublk server serves the I/O of a device.
//!
//! It is the character device `ublkcN` of class `ublk-char`, whose minor number is the device
//! number `N` in the driver's region of character device numbers ([`control::Control`]), below
//! `/dev/ublk-control`'s device: user space finds devices by listing `/sys/class/ublk-char`. It
//! is added with the device it belongs to, and removed when the device is deleted. Only one
//! process, the ublk server, can have it open at a time. The server maps the io descriptors of
//! each queue read-only, and sends the io commands of [`crate::io`] with io_uring. With
//! `UBLK_F_USER_COPY`, it reads and writes the data of requests with `pread` and `pwrite`
//! ([`crate::usercopy`]).

use crate::{
    batch, commit,
    control::Control,
    device::UblkDevice,
    features::F_BATCH_IO,
    iodesc, teardown,
    uapi::{self, IoCmd},
    usercopy::{self, UserIter},
    zerocopy,
};
use kernel::{
    chrdev::{self, CharDevice},
    fs::{File, Kiocb},
    io_uring::{IoUringCmd, IoUringCmdCancel, IssueFlags, Issued},
    iov::{IovIterDest, IovIterSource},
    miscdevice::{MiscCmdFile, MiscDevice},
    mm::{virt::VmaNew, Mm},
    prelude::*,
    str::CString,
    sync::{aref::ARef, Arc, ArcBorrow},
};

/// An io command being issued on `/dev/ublkcN`.
pub(crate) type Cmd<'a> = IoUringCmd<'a, MiscCmdFile<CharDev>>;

/// The file operations of `/dev/ublkcN`.
pub(crate) struct CharDev;

/// The data of `/dev/ublkcN`: its device, told when the char device is released.
///
/// The char device and its `struct device` are freed, and this dropped, once the registration is
/// dropped and the last file of it closed. Only then may its number go to another device: a file
/// or a node that still names the old char device (an `O_PATH` descriptor, a node made with
/// `mknod`) finds the old device, deleted, until then.
pub(crate) struct CharDevData(Arc<UblkDevice>);

impl Drop for CharDevData {
    fn drop(&mut self) {
        self.0.record_char_dev_release();
    }
}

/// Adds `/dev/ublkcN` for `dev`, with minor number `N`.
pub(crate) fn register(
    ctl: &Control,
    dev: Arc<UblkDevice>,
) -> Result<chrdev::Registration<CharDev>> {
    let name = CString::try_from_fmt(fmt!("ublkc{}", dev.id))?;
    let parent = ctl.parent();
    let data = CharDevData(dev);
    chrdev::Registration::register(
        &ctl.region,
        data.0.id,
        &ctl.class,
        parent.as_deref(),
        &name,
        data,
    )
}

impl CharDevice for CharDev {
    fn open(_file: &File, data: &CharDevData) -> Result<Arc<UblkDevice>> {
        let dev = &data.0;
        let mut state = dev.state.lock();
        state.attach_server()?;
        if let Some(u) = &dev.queues.unprivileged {
            u.set_server();
        }
        drop(state);
        Ok(dev.clone())
    }
}

#[vtable]
impl MiscDevice for CharDev {
    type Ptr = Arc<UblkDevice>;
    type RegistrationData = CharDevData;

    // `UBLK_U_IO_FETCH_IO_CMDS` of `UBLK_F_BATCH_IO`.
    const URING_CMD_MULTISHOT: bool = true;

    // Opened as a char device: `CharDevice::open`.

    fn release(dev: Arc<UblkDevice>, _file: &File) {
        // Every command of the server is completed by now, since a queued command keeps the file
        // open.
        UblkDevice::release(dev);
    }

    fn read_iter(kiocb: Kiocb<'_, Arc<UblkDevice>>, iov: &mut IovIterDest<'_>) -> Result<usize> {
        usercopy::copy(&kiocb.file(), kiocb.ki_pos(), UserIter::ToServer(iov))
    }

    fn write_iter(kiocb: Kiocb<'_, Arc<UblkDevice>>, iov: &mut IovIterSource<'_>) -> Result<usize> {
        usercopy::copy(&kiocb.file(), kiocb.ki_pos(), UserIter::FromServer(iov))
    }

    fn mmap(dev: ArcBorrow<'_, UblkDevice>, _file: &File, vma: &VmaNew) -> Result {
        {
            // Only one process maps the io descriptors: the server.
            let mm: &Mm = vma.mm();
            let mut server_mm = dev.server_mm.lock();
            match &*server_mm {
                None => *server_mm = Some(ARef::from(mm)),
                Some(server) if !core::ptr::eq(&**server, mm) => return Err(EINVAL),
                Some(_) => {}
            }
        }
        if vma.writable() {
            return Err(EPERM);
        }
        let q_id = iodesc::queue_of(vma, dev.io_desc_size)?;
        dev.queues.get(q_id)?.desc_pages.map(q_id, vma)
    }

    #[inline]
    fn uring_cmd<'a>(
        dev: ArcBorrow<'_, UblkDevice>,
        cmd: Cmd<'a>,
        issue_flags: IssueFlags<'a>,
    ) -> Result<Issued<'a>> {
        // io_uring issues the command from a worker thread (`IOSQE_ASYNC`, or a retry after the
        // inline issue could not proceed without blocking). The io slots belong to the server's
        // threads, and the ring lock is taken after the device lock here: issue the command again
        // from the thread that submitted it, with the ring lock held.
        let cmd = match cmd.issue_in_task(issue_flags) {
            Ok(queued) => return Ok(queued.into()),
            Err(cmd) => cmd,
        };
        if dev.flags & F_BATCH_IO != 0 {
            return batch::uring_cmd(&dev, cmd, issue_flags);
        }
        // Only `UBLK_F_BATCH_IO` has a multishot command.
        if cmd.is_multishot() {
            return Err(EINVAL);
        }
        let op = cmd.cmd_op();
        if !uapi::is_ublk_op(op) {
            return Err(EOPNOTSUPP);
        }
        let io_cmd = IoCmd::parse(&cmd.read_cmd::<[u8; uapi::IO_CMD_SIZE]>()?);
        // Answered before the queue and the tag are looked at: they do not matter to it (it names
        // the buffer by index), so a server may send any, as it may to ublk_drv.
        if uapi::ioc_nr(op) == uapi::IO_UNREGISTER_IO_BUF {
            return zerocopy::unregister_io_buf(&dev, &cmd, issue_flags, &io_cmd);
        }
        match uapi::ioc_nr(op) {
            uapi::IO_FETCH_REQ => commit::fetch(&dev, cmd, issue_flags, &io_cmd),
            uapi::IO_COMMIT_AND_FETCH_REQ => {
                commit::commit_and_fetch(&dev, cmd, issue_flags, &io_cmd)
            }
            uapi::IO_NEED_GET_DATA => commit::need_get_data(&dev, cmd, issue_flags, &io_cmd),
            uapi::IO_REGISTER_IO_BUF => zerocopy::register_io_buf(&dev, &cmd, issue_flags, &io_cmd),
            // Other commands need features that devices of this driver lack. The slot's owner is
            // checked first, so that servers see the same errno as with ublk_drv, whose
            // `ublk_ch_uring_cmd_local()` checks it before the operation.
            _ => commit::check_owner(&dev, &io_cmd).and(Err(EINVAL)),
        }
    }

    fn uring_cmd_cancel(
        dev: ArcBorrow<'_, UblkDevice>,
        cmd: IoUringCmdCancel<'_>,
        issue_flags: IssueFlags<'_>,
    ) {
        teardown::cancel(&dev, cmd, issue_flags);
    }
}
