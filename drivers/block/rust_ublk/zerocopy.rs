// SPDX-License-Identifier: GPL-2.0

//! Zero copy: the data of a request that the server serves is registered as a fixed buffer of
//! the server's io_uring, so that the server's reads and writes of its backing storage use the
//! request's pages directly.
//!
//! - With `UBLK_F_SUPPORT_ZERO_COPY`, the server registers the buffer itself with
//!   `UBLK_U_IO_REGISTER_IO_BUF`, from any thread (`UBLK_F_BUF_REG_OFF_DAEMON`), and unregisters
//!   it with `UBLK_U_IO_UNREGISTER_IO_BUF` ([`register_io_buf`], [`unregister_io_buf`]).
//! - With `UBLK_F_AUTO_BUF_REG`, the driver registers it with the ring of the fetch command,
//!   at the index that the fetch or commit command names, before the server learns about the
//!   request ([`io`]'s delivery), and unregisters it when the server commits the request
//!   through the same ring.
//!
//! A registered buffer holds a reference to the request, lent by its io slot
//! ([`io::give_back`]), which comes back once io_uring no longer uses the buffer: when it is
//! unregistered and the last operation on it completed, or when the ring is torn down
//! ([`BufRelease`]). The request ends when the server committed it and the last reference came
//! back, in whichever of the two contexts comes last, through the same path as every request.

use crate::{
    chardev::Cmd,
    cmd,
    device::UblkDevice,
    features::F_SUPPORT_ZERO_COPY,
    io,
    queue::{DiskOps, Queue, Queues, Rq},
    slot::Phase,
    uapi::{AutoBufReg, IoCmd},
};
use kernel::{
    io_uring::{IssueFlags, Issued, RequestBufferRelease},
    prelude::*,
    sync::{aref::ARef, Arc},
    warn_on,
};

/// Returns where the buffer of the slot's next request goes, as the fetch or commit command `cmd`
/// names it, on a device with `UBLK_F_AUTO_BUF_REG`; the default on other devices.
pub(crate) fn auto_buf_reg(queue: &Queue, cmd: &Cmd<'_>) -> Result<AutoBufReg> {
    if queue.data.auto_buf_reg() {
        AutoBufReg::parse(cmd.sqe_addr())
    } else {
        Ok(AutoBufReg::default())
    }
}

/// `UBLK_U_IO_REGISTER_IO_BUF`: registers the data of the request that the server serves in the
/// command's io slot as the fixed buffer `addr` of the command's ring.
///
/// Any thread may register (`UBLK_F_BUF_REG_OFF_DAEMON`). On the slot's own thread, a slot whose
/// request the server does not own is `EBUSY`, as for the thread's other commands (see
/// `Slot::check_owner`); elsewhere it is `EINVAL`. Servers see the errnos of ublk_drv.
pub(crate) fn register_io_buf<'a>(
    dev: &UblkDevice,
    cmd: &Cmd<'a>,
    issue_flags: IssueFlags<'a>,
    io_cmd: &IoCmd,
) -> Result<Issued<'a>> {
    let (queue, slot) = cmd::slot_of(dev, io_cmd)?;
    // The errnos of `Slot::check_owner`, with the phase read once.
    if slot.is_own_thread() {
        match slot.phase() {
            Some(Phase::Serving) => {}
            // A write whose buffer the server was asked for takes `UBLK_U_IO_NEED_GET_DATA`.
            Some(Phase::NeedGetData) => return Err(EINVAL),
            _ => return Err(EBUSY),
        }
    }
    if !queue.data.zero_copy() {
        return Err(EINVAL);
    }
    let rq = slot.lend()?;
    // CAST: The index is the low 32 bits of `addr`, as ublk_drv reads it.
    let index = io_cmd.addr as u32;
    let registered = cmd.register_request_buffer::<DiskOps, BufRelease>(rq, index, issue_flags);
    if registered.is_err() {
        // SAFETY: The registration failed and dropped `rq`, the reference that `slot.lend()` lent
        // above; it is given back here only.
        unsafe { io::give_back(queue, slot) };
    }
    registered.map(|()| Issued::Done(0))
}

/// `UBLK_U_IO_UNREGISTER_IO_BUF`: unregisters the fixed buffer `addr` of the command's ring.
///
/// The buffer is released, and its request may end, once the ring's operations on it complete.
/// Neither the queue nor the tag of the command matter: the index names the buffer.
pub(crate) fn unregister_io_buf<'a>(
    dev: &UblkDevice,
    cmd: &Cmd<'a>,
    issue_flags: IssueFlags<'a>,
    io_cmd: &IoCmd,
) -> Result<Issued<'a>> {
    if dev.flags & F_SUPPORT_ZERO_COPY == 0 {
        return Err(EINVAL);
    }
    // CAST: The index is the low 32 bits of `addr`, as ublk_drv reads it.
    cmd.unregister_buffer(io_cmd.addr as u32, issue_flags)?;
    Ok(Issued::Done(0))
}

/// Takes back the references to requests that registered buffers held, once io_uring no longer
/// uses the buffers.
pub(crate) struct BufRelease;

// SAFETY: A registration lends a request of an io slot (`Slot::lend`, `Held::lend_auto`), and
// only a command on an open `/dev/ublkcN` registers one. While that file is open, it holds a
// reference to the module (its `owner`). When it is released, `UblkDevice::release` keeps the
// module until every lent request was given back through `release` below (with requests still
// lent, a work item holds a reference to the module until then), and one grace period of RCU
// Tasks after that: from its `give_back()` on, `release` does not sleep (it ends a parked request
// with bottom halves disabled, and drops a reference to the queues, which the device keeps too;
// the driver is not built with `CONFIG_PREEMPT_RT`, where spinlocks sleep), so once every task
// switched context voluntarily, none is still running it. The work item's own return is waited
// for by the module's exit, which destroys the queue that it runs on.
unsafe impl RequestBufferRelease<DiskOps> for BufRelease {
    fn release(rq: ARef<Rq>) {
        let queues: Arc<Queues> = rq.queue_data().into();
        // CAST: Queue indexes and tags are below 4096.
        let (q_id, tag) = (rq.queue_index() as usize, rq.tag() as usize);
        // The request may end below, once this is its only other reference.
        drop(rq);
        let Ok(queue) = queues.get(q_id) else {
            // The request of an io slot belongs to its queue.
            warn_on!(true);
            return;
        };
        let Some(slot) = queue.slot(tag) else {
            warn_on!(true);
            return;
        };
        // From here on nothing may sleep: the module may only be held by the grace period of RCU
        // Tasks that the release of `/dev/ublkcN` waits for (see the SAFETY comment above).
        // SAFETY: A registered buffer holds one reference lent from the slot of its request
        // (`Slot::lend` in `register_io_buf`, `Held::lend_auto` in the automatic registration),
        // which io_uring hands back here once, and which was dropped above.
        unsafe { io::give_back(queue, slot) };
    }
}
