// SPDX-License-Identifier: GPL-2.0

//! The server's io commands for one io slot: `UBLK_U_IO_FETCH_REQ`,
//! `UBLK_U_IO_COMMIT_AND_FETCH_REQ` and `UBLK_U_IO_NEED_GET_DATA`.
//!
//! They run in the server thread that fetched the slot (a command that io_uring issues from a
//! worker is issued again from that thread, [`crate::chardev`]).

use crate::{
    chardev::Cmd,
    cmd::{buf_addr, check_buf, pdu, slot_of},
    copy::{commit_result, copy_write, Copied},
    device::UblkDevice,
    io::{Served, RES_ABORT},
    queue::{Queue, QueueState},
    slot::{Held, Phase, Slot},
    uapi::{AutoBufReg, IoCmd},
    zerocopy,
};
use kernel::{
    io_uring::{IssueFlags, Issued, RingId},
    prelude::*,
};

/// Checks that the io slot of a command other than a fetch belongs to the calling server thread
/// and holds a request. Done before the command is looked at, so that servers see the same errno
/// as with ublk_drv, which checks this first.
pub(crate) fn check_owner(dev: &UblkDevice, io_cmd: &IoCmd) -> Result {
    let (_, slot) = slot_of(dev, io_cmd)?;
    slot.check_owner()
}

/// `UBLK_U_IO_FETCH_REQ`: the server offers an io slot for the first time.
pub(crate) fn fetch<'a>(
    dev: &UblkDevice,
    mut cmd: Cmd<'a>,
    issue_flags: IssueFlags<'a>,
    io_cmd: &IoCmd,
) -> Result<Issued<'a>> {
    let (queue, slot) = slot_of(dev, io_cmd)?;

    check_buf(queue, io_cmd.addr, None)?;
    let auto_reg = zerocopy::auto_buf_reg(queue, &cmd)?;

    // Serializes fetch commands, and counts them for `UBLK_U_CMD_START_DEV`. `UBLK_U_CMD_STOP_DEV`
    // aborts the fetched slots under it too.
    let mut state = dev.state.lock();
    if queue.state() == QueueState::Stopping {
        return Err(RES_ABORT);
    }
    state.may_fetch(dev, 0)?;
    // Each io slot is fetched once. The device lock keeps the slot idle: only fetch commands,
    // under it, leave that phase.
    let mut io = slot.hold(Phase::Idle).ok_or(EINVAL)?;

    cmd.write_pdu(&pdu(io_cmd.q_id, io_cmd.tag));
    let (cmd, queued) = cmd.queue_cancelable(issue_flags);
    let fetched = io.fetch(cmd, buf_addr(queue, io_cmd, auto_reg), auto_reg);
    drop(io);
    let old_task = match fetched {
        Ok(old_task) => old_task,
        Err(cmd) => {
            drop(state);
            cmd.done(Err(EINVAL), issue_flags);
            return Ok(queued.into());
        }
    };
    state.count_fetched(dev, queue, io_cmd.q_id, 1);
    drop(state);
    drop(old_task);
    Ok(queued.into())
}

/// `UBLK_U_IO_COMMIT_AND_FETCH_REQ`: the server reports the result of a request and offers the
/// io slot again.
///
/// The command is queued first, to wait for the slot's next request: a commit that turns out to
/// be wrong then completes it with its errno. That posts what returning the errno from the issue
/// would: io commands are issued with the ring locked (see [`crate::chardev`]), so io_uring's
/// cancellation, which takes that lock too, cannot come in between. The slot is held once, from
/// taking the request to offering the slot again.
pub(crate) fn commit_and_fetch<'a>(
    dev: &UblkDevice,
    mut cmd: Cmd<'a>,
    issue_flags: IssueFlags<'a>,
    io_cmd: &IoCmd,
) -> Result<Issued<'a>> {
    let (queue, slot) = slot_of(dev, io_cmd)?;
    let auto_reg = zerocopy::auto_buf_reg(queue, &cmd);
    cmd.write_pdu(&pdu(io_cmd.q_id, io_cmd.tag));
    let (fetch, queued) = cmd.queue_cancelable(issue_flags);

    let (io, taken) = match take_for_commit(slot, queue, io_cmd, auto_reg) {
        Ok(taken) => taken,
        Err(e) => {
            fetch.done(Err(e), issue_flags);
            return Ok(queued.into());
        }
    };
    let Taken {
        served,
        registered,
        auto_reg,
    } = taken;
    served.set_append_sector(io_cmd.addr);
    // The slot stays held while the data of a read is copied from the server's buffer and the
    // buffer registered automatically is unregistered: nothing else moves a committing slot on.
    let (error, bytes) =
        commit_result(queue, &served, io_cmd.result).into_result(&served, io_cmd.addr);
    // The buffer registered automatically goes, unless the server sent the commit through
    // another ring: a command unregisters buffers of its own ring only, so the server must then
    // unregister it itself.
    if let Some((registered_ring, index)) = registered {
        if registered_ring == fetch.ring() {
            // A buffer that the server unregistered already is no error.
            let _ = fetch.unregister_buffer(index.into(), issue_flags);
        }
    }
    // The slot is offered again before the request ends, which may free its tag for the next
    // request.
    let aborted = io.rearm(queue, fetch, buf_addr(queue, io_cmd, auto_reg));
    let ending = slot.settle(served, error, bytes);
    if let Some(ending) = ending {
        ending.end(queue);
    }
    if let Some(fetch) = aborted {
        fetch.done(Err(RES_ABORT), issue_flags);
    }
    Ok(queued.into())
}

/// What a commit takes from its io slot.
struct Taken {
    /// The request that the commit reports on.
    served: Served,
    /// The ring and the index of the buffer registered automatically for the request, if any.
    registered: Option<(RingId, u16)>,
    /// Where the buffer of the slot's next request goes, as the command names it.
    auto_reg: AutoBufReg,
}

/// Checks the commit `io_cmd` of io slot `slot`, holds the slot and takes the request it reports
/// on. `auto_reg` is where the command says the buffer of the slot's next request goes, or why
/// that could not be read. The checks come in the order of ublk_drv's
/// `ublk_check_commit_and_fetch()`, so that servers see the same errno.
fn take_for_commit<'a>(
    slot: &'a Slot,
    queue: &Queue,
    io_cmd: &IoCmd,
    auto_reg: Result<AutoBufReg>,
) -> Result<(Held<'a>, Taken)> {
    // The errnos of `Slot::check_owner`, then a write whose buffer the server was asked for
    // takes `UBLK_U_IO_NEED_GET_DATA` first; a slot that another context holds right now is
    // taken.
    if !slot.is_own_thread() {
        return Err(EINVAL);
    }
    let mut io = slot
        .hold(Phase::Serving)
        .ok_or_else(|| match slot.phase() {
            Some(Phase::NeedGetData) => EINVAL,
            _ => EBUSY,
        })?;
    let op = io.serving().ok_or(EINVAL)?.op();
    check_buf(queue, io_cmd.addr, Some(op))?;
    let auto_reg = auto_reg?;
    let (served, registered) = io.start_commit(auto_reg)?;
    Ok((
        io,
        Taken {
            served,
            registered,
            auto_reg,
        },
    ))
}

/// `UBLK_U_IO_NEED_GET_DATA`: the server names the buffer for the data of a write that it was
/// asked about (`UBLK_F_NEED_GET_DATA`), and the driver copies the data there.
///
/// The command completes with 0 once the data is in the buffer, as much of it as could be copied
/// (the io descriptor says how much). If none could, the command waits, as a fetch, for the
/// write to be dispatched again, or the write fails if the buffer is not user memory.
pub(crate) fn need_get_data<'a>(
    dev: &UblkDevice,
    mut cmd: Cmd<'a>,
    issue_flags: IssueFlags<'a>,
    io_cmd: &IoCmd,
) -> Result<Issued<'a>> {
    let (queue, slot) = slot_of(dev, io_cmd)?;
    slot.check_owner()?;
    // Only a write that the server was asked about takes this command.
    let mut io = slot.hold(Phase::NeedGetData).ok_or(EINVAL)?;
    let served = io.start_get_data()?;

    // The slot stays held while the data is copied.
    let copy = copy_write(&served, io_cmd.addr);
    let part = match copy {
        Copied::Whole => Some(None),
        Copied::Part(bytes) => Some(Some(bytes)),
        Copied::Nothing | Copied::Invalid => None,
    };
    if let Some(part) = part {
        io.serve_got_data(served, io_cmd.addr, part);
        return Ok(Issued::Done(0));
    }

    // The command waits for the next request of the slot, as a fetch does.
    cmd.write_pdu(&pdu(io_cmd.q_id, io_cmd.tag));
    let (fetch, queued) = cmd.queue_cancelable(issue_flags);
    let aborted = io.rearm(queue, fetch, io_cmd.addr);
    match copy {
        // Nothing could be copied: the write is dispatched again a little later, when the copy
        // may succeed (`io::REQUEUE_DELAY_MS`).
        Copied::Nothing => served.requeue(),
        // As at dispatch, a buffer that is not user memory does not become one later.
        _ => served.finish(queue, EIO.to_errno(), 0),
    }
    if let Some(fetch) = aborted {
        fetch.done(Err(RES_ABORT), issue_flags);
    }
    Ok(queued.into())
}
