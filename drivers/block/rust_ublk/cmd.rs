// SPDX-License-Identifier: GPL-2.0

//! The server's io commands as they arrive: the io slot they name, the pdu that names it while
//! they wait, and the checks of the buffer address they carry.

use crate::{
    device::UblkDevice,
    queue::Queue,
    slot::Slot,
    uapi::{AutoBufReg, IoCmd},
};
use kernel::{block::ReqOp, prelude::*, sync::Arc};

/// The pdu of the driver's commands: the queue and the tag of their io slot.
pub(crate) fn pdu(q_id: u16, tag: u16) -> u32 {
    (u32::from(q_id) << 16) | u32::from(tag)
}

pub(crate) fn pdu_tag(pdu: u32) -> usize {
    (pdu & 0xffff) as usize
}

pub(crate) fn pdu_queue(pdu: u32) -> usize {
    (pdu >> 16) as usize
}

/// Returns the queue of an io command, checked against the device, and its io slot.
pub(crate) fn slot_of<'a>(
    dev: &'a UblkDevice,
    io_cmd: &IoCmd,
) -> Result<(&'a Arc<Queue>, &'a Slot)> {
    let queue = dev.queues.get(io_cmd.q_id.into())?;
    if io_cmd.tag >= dev.depth {
        return Err(EINVAL);
    }
    let slot = queue.slot(io_cmd.tag.into()).ok_or(EINVAL)?;
    Ok((queue, slot))
}

/// Returns the buffer address that the io descriptors of a slot's requests give the server: the one
/// that the fetch or commit command named, or, with `UBLK_F_AUTO_BUF_REG`, where their buffer is
/// registered, in the encoding of the SQE's `addr`.
pub(crate) fn buf_addr(queue: &Queue, io_cmd: &IoCmd, auto_reg: AutoBufReg) -> u64 {
    if queue.data.auto_buf_reg() {
        auto_reg.to_sqe_addr()
    } else {
        io_cmd.addr
    }
}

/// Checks the buffer address of a fetch command, or of the commit of a request of operation `op`:
/// none where the server reaches the data itself (user copy, zero copy, automatic buffer
/// registration), but for the commit of a zone append, whose `addr` says where its data landed;
/// in copy mode, the buffer of the request's data, which may be left out where
/// `UBLK_F_NEED_GET_DATA` asks for it later (not for a read, whose data the commit copies from
/// it). Anything else is `EINVAL`.
pub(crate) fn check_buf(queue: &Queue, addr: u64, op: Option<ReqOp>) -> Result {
    let ok = if !queue.data.copies() {
        // But for a zone append, whose commit says where its data landed.
        addr == 0 || op == Some(ReqOp::ZoneAppend)
    } else {
        addr != 0 || (queue.data.needs_get_data() && op != Some(ReqOp::Read))
    };
    if ok {
        Ok(())
    } else {
        Err(EINVAL)
    }
}
