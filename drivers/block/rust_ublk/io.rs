// SPDX-License-Identifier: GPL-2.0

//! The io slots of a queue, and how requests travel through them.
//!
//! Each io slot (a tag of a queue) goes around a cycle:
//!
//! 1. The server sends `UBLK_U_IO_FETCH_REQ` for the slot: the driver keeps the command, the slot
//!    is [`IoState::Fetched`].
//! 2. blk-mq queues a request with the slot's tag ([`dispatch`]): the driver writes the io
//!    descriptor, the slot becomes [`IoState::Serving`], and the fetch command completes in the
//!    server's task ([`deliver`]), after the data of a write is copied to the server's buffer.
//! 3. The server handles the request and sends `UBLK_U_IO_COMMIT_AND_FETCH_REQ` with the result
//!    ([`commit_and_fetch`]): the data of a read is copied from the server's buffer, the request
//!    ends, and the new command waits for the next request (step 2).
//!
//! Requests end in [`finish`]: inline, or, with `UBLK_F_SUPPORT_RQ_AFFINITY`, through
//! `blk_mq_complete_request_remote()` so that the queue's `rq_affinity` picks the CPU. Every way a
//! request can end goes through it, errors and aborts included.

use crate::{
    chardev::Cmd,
    device::{Server, UblkDevice},
    queue::{Queue, QueueState, Rq},
    uapi::{self, IoCmd, IoDesc},
};
use kernel::{
    block::{mq::Request, BlkStatus, ReqOp},
    current,
    io_uring::{IoUringCmdCancel, IssueFlags, Issued, QueuedIoUringCmd},
    prelude::*,
    sync::{aref::ARef, atomic::Relaxed, Arc},
    task::Task,
    uaccess::{UserPtr, UserSlice},
};

/// The result with which the driver completes the server's commands when the device goes away
/// (`UBLK_IO_RES_ABORT`).
const RES_ABORT: Error = ENODEV;

/// Where an io slot is in its cycle.
pub(crate) enum IoState {
    /// The server has no command for the slot.
    Idle,
    /// The server waits for a request with this command.
    Fetched(QueuedIoUringCmd),
    /// The server serves this request.
    Serving(ARef<Rq>),
}

/// An io slot.
pub(crate) struct Io {
    state: IoState,
    /// The server's buffer for the data of the slot's requests.
    addr: u64,
    /// The server thread that fetched the slot, the only one that may send its other commands.
    task: Option<ARef<Task>>,
}

impl Io {
    pub(crate) fn new() -> Self {
        Self {
            state: IoState::Idle,
            addr: 0,
            task: None,
        }
    }

    fn take(&mut self) -> IoState {
        core::mem::replace(&mut self.state, IoState::Idle)
    }

    /// Checks that the slot belongs to the calling server thread and holds a request, as the C
    /// driver does before it looks at a command other than a fetch.
    fn check_owner(&self) -> Result {
        if !self.task.as_deref().is_some_and(is_current) {
            return Err(EINVAL);
        }
        match self.state {
            IoState::Serving(_) => Ok(()),
            _ => Err(EBUSY),
        }
    }

    /// Takes the request that the slot serves, if it serves one.
    fn take_serving(&mut self) -> Option<ARef<Rq>> {
        match self.take() {
            IoState::Serving(rq) => Some(rq),
            other => {
                self.state = other;
                None
            }
        }
    }
}

/// Returns whether `task` is the calling thread.
fn is_current(task: &Task) -> bool {
    core::ptr::eq(task, &**current!())
}

/// The pdu of the driver's commands: the queue and the tag of their io slot.
fn pdu(q_id: u16, tag: u16) -> u32 {
    (u32::from(q_id) << 16) | u32::from(tag)
}

fn pdu_tag(pdu: u32) -> usize {
    (pdu & 0xffff) as usize
}

fn pdu_queue(pdu: u32) -> usize {
    (pdu >> 16) as usize
}

/// Returns the io descriptor of `rq`, whose data goes to or comes from `addr`.
fn describe(rq: &Rq, addr: u64) -> Option<IoDesc> {
    let mut op_flags = match rq.op() {
        ReqOp::Read => uapi::IO_OP_READ,
        ReqOp::Write => uapi::IO_OP_WRITE,
        ReqOp::Flush => uapi::IO_OP_FLUSH,
        ReqOp::Discard => uapi::IO_OP_DISCARD,
        ReqOp::WriteZeroes => uapi::IO_OP_WRITE_ZEROES,
        _ => return None,
    };
    if rq.is_fua() {
        op_flags |= uapi::IO_F_FUA;
    }
    if rq.op() == ReqOp::WriteZeroes && rq.is_nounmap() {
        op_flags |= uapi::IO_F_NOUNMAP;
    }
    Some(IoDesc {
        op_flags,
        nr_sectors: rq.nr_sectors(),
        start_sector: rq.sector(),
        addr,
    })
}

/// Hands `rq` to the server through the fetch command of its io slot (`ublk_queue_rq()`).
pub(crate) fn dispatch(queue: &Arc<Queue>, rq: ARef<Rq>) {
    let tag = rq.tag() as usize;
    let mut guard = queue.slots.lock();
    let slots = &mut *guard;
    if slots.state != QueueState::Serving {
        drop(guard);
        return finish(queue, rq, EIO.to_errno(), 0);
    }
    let Some(io) = slots.ios.get_mut(tag) else {
        drop(guard);
        return finish(queue, rq, EIO.to_errno(), 0);
    };
    let Some(desc) = describe(&rq, io.addr) else {
        drop(guard);
        return finish(queue, rq, EOPNOTSUPP.to_errno(), 0);
    };
    let cmd = match io.take() {
        IoState::Fetched(cmd) => cmd,
        other => {
            // No command to hand the request over with: the server is going away.
            io.state = other;
            drop(guard);
            return finish(queue, rq, EIO.to_errno(), 0);
        }
    };
    // CAST: `tag` is an index of `ios`, whose length is a `u16`.
    if slots.descs.write(tag as u16, &desc).is_err() {
        // There is a descriptor for every io slot, so this does not happen.
        io.state = IoState::Fetched(cmd);
        drop(guard);
        return finish(queue, rq, EIO.to_errno(), 0);
    }
    io.state = IoState::Serving(rq);
    drop(guard);

    cmd.complete_in_task_with(queue.clone(), deliver);
}

/// Completes the fetch command of a request in the server's task, after copying the data of a
/// write to the server's buffer.
fn deliver(cmd: QueuedIoUringCmd, queue: Arc<Queue>, issue_flags: IssueFlags<'_>) {
    let tag = pdu_tag(cmd.read_pdu());

    let found = {
        let slots = queue.slots.lock();
        match slots.ios.get(tag) {
            Some(Io {
                state: IoState::Serving(rq),
                addr,
                ..
            }) => Some((rq.clone(), *addr)),
            _ => None,
        }
    };
    let Some((rq, addr)) = found else {
        return cmd.done(Err(RES_ABORT), issue_flags);
    };

    // The server's task is exiting: the request cannot be served.
    let mut ok = !issue_flags.is_task_work_canceled();
    if ok && rq.op() == ReqOp::Write {
        let len = rq.nr_bytes() as usize;
        let copied = UserSlice::new(UserPtr::from_addr(addr as usize), len)
            .with_iov_dest(|dest| rq.copy_to_iter(0, dest));
        ok = matches!(copied, Ok(Ok(n)) if n == len);
    }
    drop(rq);

    if ok {
        return cmd.done(Ok(0), issue_flags);
    }

    // The request fails; the command waits for the next one, unless the task is exiting.
    let canceled = issue_flags.is_task_work_canceled();
    let (state, cmd) = {
        let mut slots = queue.slots.lock();
        let Some(io) = slots.ios.get_mut(tag) else {
            return cmd.done(Err(RES_ABORT), issue_flags);
        };
        let state = io.take();
        if canceled {
            (state, Some(cmd))
        } else {
            io.state = IoState::Fetched(cmd);
            (state, None)
        }
    };
    if let Some(cmd) = cmd {
        cmd.done(Err(RES_ABORT), issue_flags);
    }
    if let IoState::Serving(rq) = state {
        finish(&queue, rq, EIO.to_errno(), 0);
    }
}

/// Records the result of `rq` and ends it: inline, or through `blk_mq_complete_request_remote()`
/// if the queue honours `rq_affinity`.
///
/// `error` is 0 or a negative errno; `bytes` is how much of a read the server filled.
pub(crate) fn finish(queue: &Queue, rq: ARef<Rq>, error: i32, bytes: u32) {
    rq.data_ref().set(error, bytes);
    if queue.rq_affinity {
        Request::complete(rq);
    } else {
        end_request(rq);
    }
}

/// Ends `rq` with the result that [`finish`] recorded (`ublk_complete_rq()`).
pub(crate) fn end_request(rq: ARef<Rq>) {
    let (error, bytes) = {
        let result = rq.data_ref();
        (result.error.load(Relaxed), result.bytes.load(Relaxed))
    };

    let ret = if error < 0 {
        Request::end(rq, BlkStatus::from(Error::from_errno(error)))
    } else if rq.op() == ReqOp::Read && bytes < rq.nr_bytes() {
        // A short read: the rest is dispatched again.
        Request::end_partial(rq, bytes)
    } else {
        Request::end_ok(rq)
    };
    if ret.is_err() {
        pr_warn!("request still referenced when it ends\n");
    }
}

/// Returns queue and tag of an io command, checked against the device.
fn slot_of<'a>(dev: &'a UblkDevice, io_cmd: &IoCmd) -> Result<&'a Arc<Queue>> {
    let queue = dev.queues.get(io_cmd.q_id.into())?;
    if io_cmd.tag >= dev.depth {
        return Err(EINVAL);
    }
    Ok(queue)
}

/// Checks that the io slot of a command other than a fetch belongs to the calling server thread
/// and holds a request, as the C driver does before it looks at the command.
pub(crate) fn check_owner(dev: &UblkDevice, io_cmd: &IoCmd) -> Result {
    let queue = slot_of(dev, io_cmd)?;
    let slots = queue.slots.lock();
    slots.ios[usize::from(io_cmd.tag)].check_owner()
}

/// `UBLK_U_IO_FETCH_REQ`: the server offers an io slot for the first time.
pub(crate) fn fetch<'a>(
    dev: &UblkDevice,
    mut cmd: Cmd<'a>,
    issue_flags: IssueFlags<'a>,
    io_cmd: &IoCmd,
) -> Result<Issued<'a>> {
    let queue = slot_of(dev, io_cmd)?;
    let tag = usize::from(io_cmd.tag);

    // Copy mode: the server must have a buffer for the data.
    if io_cmd.addr == 0 {
        return Err(EINVAL);
    }

    // Serializes fetch commands, and counts them for `UBLK_U_CMD_START_DEV`.
    let mut state = dev.state.lock();
    {
        let slots = queue.slots.lock();
        if slots.state == QueueState::Stopping {
            return Err(RES_ABORT);
        }
        // Fetching is over once every io slot was fetched.
        match state.server {
            Server::Attached { nr_fetched, .. } if nr_fetched == dev.nr_ios() => return Err(EBUSY),
            Server::Attached { .. } => {}
            // A command keeps `/dev/ublkcN` open, so the server is attached.
            Server::Detached => return Err(EINVAL),
        }
        // Each io slot is fetched once.
        if !matches!(slots.ios[tag].state, IoState::Idle) {
            return Err(EINVAL);
        }
    }

    let task = ARef::from(&**current!());
    cmd.write_pdu(&pdu(io_cmd.q_id, io_cmd.tag));
    let (cmd, queued) = cmd.queue_cancelable(issue_flags);
    let old_task = {
        let mut slots = queue.slots.lock();
        let io = &mut slots.ios[tag];
        io.addr = io_cmd.addr;
        io.state = IoState::Fetched(cmd);
        io.task.replace(task)
    };
    if let Server::Attached { nr_fetched, tgid } = &mut state.server {
        *nr_fetched += 1;
        // As the C driver: the server is the process that fetches, which may not be the one
        // that opened `/dev/ublkcN`.
        *tgid = current!().tgid_nr_ns(None);
    }
    if state.nr_fetched() == dev.nr_ios() {
        dev.ready.notify_all();
    }
    drop(state);
    drop(old_task);
    Ok(queued.into())
}

/// `UBLK_U_IO_COMMIT_AND_FETCH_REQ`: the server reports the result of a request and offers the
/// io slot again.
pub(crate) fn commit_and_fetch<'a>(
    dev: &UblkDevice,
    mut cmd: Cmd<'a>,
    issue_flags: IssueFlags<'a>,
    io_cmd: &IoCmd,
) -> Result<Issued<'a>> {
    let queue = slot_of(dev, io_cmd)?;
    let tag = usize::from(io_cmd.tag);

    let rq = {
        let mut slots = queue.slots.lock();
        let io = &mut slots.ios[tag];
        io.check_owner()?;
        // Copy mode: the data of the request is in the buffer the command names.
        if io_cmd.addr == 0 {
            return Err(EINVAL);
        }
        io.take_serving().ok_or(EBUSY)?
    };

    let (error, bytes) = if io_cmd.result < 0 {
        // Any negative value fails the request; one that is not an errno fails it with `EIO`.
        let error = Error::try_from_errno(io_cmd.result).unwrap_or(EIO);
        (error.to_errno(), 0)
    } else if rq.op() == ReqOp::Read {
        // CAST: `result` is not negative.
        let len = (io_cmd.result as u32).min(rq.nr_bytes());
        // A fault ends the copy; what was copied before it makes a short read.
        let copied = UserSlice::new(UserPtr::from_addr(io_cmd.addr as usize), len as usize)
            .with_iov_source(|src| rq.copy_from_iter(0, src))
            .and_then(|copied| copied)
            .unwrap_or(0);
        // CAST: `copied` is at most `len`, a `u32`.
        let copied = copied as u32;
        if copied == 0 {
            (EIO.to_errno(), 0)
        } else {
            (0, copied)
        }
    } else {
        (0, rq.nr_bytes())
    };

    // Offer the slot again before the request ends, which may free its tag for the next request.
    cmd.write_pdu(&pdu(io_cmd.q_id, io_cmd.tag));
    let (fetch, queued) = cmd.queue_cancelable(issue_flags);
    let aborted = {
        let mut slots = queue.slots.lock();
        if slots.state == QueueState::Stopping {
            Some(fetch)
        } else {
            let io = &mut slots.ios[tag];
            io.addr = io_cmd.addr;
            io.state = IoState::Fetched(fetch);
            None
        }
    };
    finish(queue, rq, error, bytes);
    if let Some(fetch) = aborted {
        fetch.done(Err(RES_ABORT), issue_flags);
    }
    Ok(queued.into())
}

/// io_uring cancels a command of the server: its ring is torn down or its task exits.
///
/// The command completes with `UBLK_IO_RES_ABORT`, and the queue stops taking requests, since
/// no one serves them any more.
pub(crate) fn cancel(dev: &UblkDevice, cmd: IoUringCmdCancel<'_>, issue_flags: IssueFlags<'_>) {
    let pdu = cmd.read_pdu::<u32>();
    let Ok(queue) = dev.queues.get(pdu_queue(pdu)) else {
        return;
    };
    let fetch = {
        let mut slots = queue.slots.lock();
        slots.state.fail_requests();
        let Some(io) = slots.ios.get_mut(pdu_tag(pdu)) else {
            return;
        };
        match io.take() {
            IoState::Fetched(fetch) if cmd.refers_to(&fetch) => fetch,
            other => {
                io.state = other;
                return;
            }
        }
    };
    fetch.done(Err(RES_ABORT), issue_flags);
}

/// The server closed `/dev/ublkcN`: the requests it was serving fail, and later ones too.
pub(crate) fn abort_all(dev: &UblkDevice) {
    for queue in dev.queues.iter() {
        queue.slots.lock().state.fail_requests();
        for tag in 0..usize::from(dev.depth) {
            let state = queue.slots.lock().ios[tag].take_serving();
            if let Some(rq) = state {
                finish(queue, rq, EIO.to_errno(), 0);
            }
        }
    }
}

/// The server is gone: a new server may fetch the io slots again.
pub(crate) fn reset_all(dev: &UblkDevice) {
    for queue in dev.queues.iter() {
        {
            let mut slots = queue.slots.lock();
            slots.state = QueueState::Serving;
        }
        for tag in 0..usize::from(dev.depth) {
            // The task reference is not put under the lock.
            let task = queue.slots.lock().ios[tag].task.take();
            drop(task);
        }
    }
}

/// The device is stopped: the server's commands complete with `UBLK_IO_RES_ABORT`, so that it
/// exits, and commands it sends from now on do too.
pub(crate) fn stop_all(dev: &UblkDevice) {
    for queue in dev.queues.iter() {
        let mut slots = queue.slots.lock();
        slots.state = QueueState::Stopping;
        for io in slots.ios.iter_mut() {
            match io.take() {
                IoState::Fetched(cmd) => {
                    cmd.complete_in_task(|cmd, issue_flags| cmd.done(Err(RES_ABORT), issue_flags))
                }
                other => io.state = other,
            }
        }
    }
}
