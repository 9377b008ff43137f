// SPDX-License-Identifier: GPL-2.0

//! From blk-mq to the server: a request reaches the server thread that fetched its io slot.
//!
//! [`dispatch`] runs in `queue_rq` or `queue_rqs`: it writes the io descriptor and hands the
//! request to the server's task through the slot's fetch command. [`deliver`] runs in that task:
//! it copies the data of a write to the server's buffer in copy mode, or registers the data as a
//! fixed buffer (`UBLK_F_AUTO_BUF_REG`), then completes the fetch command.
//!
//! The requests that blk-mq queues together (a plug flushed through `queue_rqs`) reach the
//! server's task in one task work per thread and ring ([`Batch`]): the slots of a batch are
//! chained by tag, each one naming the next, and the task work of the first command delivers
//! them all. The chain lives in the slots, so a batch allocates nothing.

use crate::{
    cmd::pdu_tag,
    copy::{copy_write, Copied},
    io::{Served, RES_ABORT},
    queue::{DiskOps, Queue, QueueState, Rq},
    slot::{describe, refuse, Handed, Held, Phase},
    uapi, zerocopy, zoned,
};
use kernel::{
    block::ReqOp,
    io_uring::{IssueFlags, QueuedIoUringCmd},
    prelude::*,
    sync::{aref::ARef, Arc},
    task::Task,
    warn_on,
};

/// Requests handed to the same server thread, on the same ring, that reach it in one task work.
///
/// The io slots of a batch are dispatched, each naming the next, and handed over to the task work
/// of the batch ([`Held::hand_over`]); the first one's fetch command is kept here until the batch
/// is submitted, and its task work delivers them all.
#[must_use = "the io slots of a batch wait until the batch is submitted"]
pub(crate) struct Batch<'a> {
    queue: &'a Arc<Queue>,
    /// The fetch command of the first io slot.
    head: QueuedIoUringCmd,
    /// The server thread that fetched the io slots; only compared, never dereferenced.
    task: *const Task,
    /// The last io slot, which the next one joining the batch is chained to.
    tail: Handed<'a>,
}

impl Batch<'_> {
    /// Whether the request of an io slot whose fetch command is `cmd`, sent by `task`, can reach
    /// the server in this batch's task work.
    fn takes(&self, queue: &Arc<Queue>, task: *const Task, cmd: &QueuedIoUringCmd) -> bool {
        Arc::ptr_eq(self.queue, queue) && self.task == task && self.head.same_ring(cmd)
    }

    /// Hands the batch to the server's task.
    pub(crate) fn submit(self) {
        let Batch {
            queue, head, tail, ..
        } = self;
        // The task work takes over the holds of the batch's slots: this context reaches none of
        // them any more.
        drop(tail);
        head.complete_in_task_with(queue.clone(), deliver);
    }
}

/// Hands `rq` to the server through the fetch command of its io slot (`ublk_queue_rq()`,
/// `ublk_queue_rqs()`).
///
/// The request goes in `batch` if it can, or starts a new batch, and the one it replaces is
/// submitted. The caller submits the last batch.
pub(crate) fn dispatch<'a>(queue: &'a Arc<Queue>, rq: ARef<Rq>, batch: &mut Option<Batch<'a>>) {
    let served = Served::new(queue, rq);
    let Some(slot) = queue.slot(served.tag() as usize) else {
        return served.finish(queue, EIO.to_errno(), 0);
    };
    // CAST: tags are below the depth of the queue, a `u16`.
    let tag = served.tag() as u16;
    // The server is going away, or has no command to hand the request over with (or a
    // cancellation is taking it): the request fails, or waits for the next server. The state is
    // read before the slot is held, so that a teardown that changed it, then waited for an RCU
    // grace period, finds no slot held by a refusal; and again after.
    if queue.state() != QueueState::Serving {
        return refuse(queue, served);
    }
    let mut io = match slot.hold(Phase::Fetched) {
        Some(io) if queue.state() == QueueState::Serving => io,
        Some(io) => {
            drop(io);
            return refuse(queue, served);
        }
        None => return refuse(queue, served),
    };
    // A request that the UAPI cannot describe (an operation it has no code for, a zone operation
    // of a disk that is not zoned, a driver request that is not a zone report) is an I/O error.
    let Some(desc) = describe(&served, io.addr()) else {
        drop(io);
        return served.finish(queue, EIO.to_errno(), 0);
    };
    if let Err(served) = io.dispatch(served, &desc) {
        // Held in `Fetched`, which takes a request.
        warn_on!(true);
        drop(io);
        return refuse(queue, served);
    }
    let task = io.task_ptr();
    let joins = match (batch.as_ref(), io.cmd()) {
        (Some(b), Some(cmd)) => b.takes(queue, task, cmd),
        _ => false,
    };
    if joins {
        if let Some(b) = batch {
            b.tail.link(tag);
            // The slot before stays handed over to the batch's task work, as this one now.
            b.tail = io.hand_over();
        }
        return;
    }
    let Some(head) = io.take_head_cmd() else {
        // A dispatched slot holds its fetch command.
        warn_on!(true);
        return;
    };
    let full = batch.replace(Batch {
        queue,
        head,
        task,
        tail: io.hand_over(),
    });
    if let Some(full) = full {
        full.submit();
    }
}

/// Completes the fetch commands of a batch of requests in the server's task, after copying the
/// data of writes to the server's buffers (`ublk_dispatch_req()`).
///
/// `head` is the fetch command of the first io slot of the batch.
fn deliver(head: QueuedIoUringCmd, queue: Arc<Queue>, issue_flags: IssueFlags<'_>) {
    let mut tag = pdu_tag(head.read_pdu());
    let mut head = Some(head);
    while let Some(slot) = queue.slot(tag) {
        // SAFETY: This is the task work that `Batch::submit` queued, once it dropped the batch's
        // `Handed`, with the fetch command of the first io slot of the batch, whose pdu names that
        // slot. `dispatch` handed the hold of every slot of the batch over, and chained each
        // slot to the next, whose tag `deliver_one` returns once it took the delivery of the slot
        // before: each slot of the batch is taken over once, here. The hand-overs, and the uses
        // of the `Handed`, happen before this take-over (`complete_in_task_with`): this task work
        // reaches every slot through `queue` and the command's pdu, and each next one through the
        // slot before.
        let io = unsafe { slot.resume() };
        match deliver_one(&queue, io, &mut head, issue_flags) {
            Some(next) => tag = next.into(),
            None => break,
        }
    }
    // Only `dispatch` hands a command to this function, with its slot at the head of a chain of
    // dispatched slots, which takes it.
    if let Some(head) = head {
        warn_on!(true);
        head.done(Err(RES_ABORT), issue_flags);
    }
}

/// Delivers the request of `io`, a dispatched io slot of a batch, which the task work took over,
/// through its fetch command, or `head` (the fetch command of the first slot of the batch, until
/// that slot takes it). Returns the tag of the next slot of the batch.
///
/// The slot is held from its dispatch until the server gets the request: nothing else moves a
/// dispatched or delivering slot on, so the copy of a write's data and the registration of its
/// buffer, which may sleep, run while it is held.
fn deliver_one(
    queue: &Queue,
    mut io: Held<'_>,
    head: &mut Option<QueuedIoUringCmd>,
    issue_flags: IssueFlags<'_>,
) -> Option<u16> {
    // Only the first slot of a batch has no command of its own.
    let delivery = if io.cmd().is_none() && head.is_none() {
        None
    } else {
        io.start_delivery()
    };
    let Some(delivery) = delivery else {
        warn_on!(true);
        return None;
    };
    let (served, next) = (delivery.served, delivery.next);
    // Checked above.
    let cmd = delivery.cmd.or_else(|| head.take())?;

    // The server's task is exiting: the request cannot be served, and fails, or waits for the
    // next server if the device recovers. The command completes with `UBLK_IO_RES_ABORT`, and
    // the slot is free for the next server to fetch.
    if issue_flags.is_task_work_canceled() {
        io.abort_delivery();
        let ending = io.without_server(queue, served, false);
        drop(io);
        cmd.done(Err(RES_ABORT), issue_flags);
        if let Some(ending) = ending {
            ending.end(queue);
        }
        return next;
    }
    if queue.data.auto_buf_reg() && zoned::has_data(served.op()) {
        // The buffer is registered with the server's ring before it learns about the request.
        deliver_registered(queue, io, served, cmd, issue_flags);
        return next;
    }
    if served.op() != ReqOp::Write || !queue.data.copies() {
        // No data to copy, or the server copies it: the server gets the request at once.
        io.serve(served);
        drop(io);
        cmd.done(Ok(0), issue_flags);
        return next;
    }
    if queue.data.needs_get_data() {
        // The server names the buffer for the write's data first.
        io.ask_for_buffer(served);
        drop(io);
        cmd.done(Ok(uapi::IO_RES_NEED_GET_DATA), issue_flags);
        return next;
    }
    deliver_write(queue, io, served, cmd, issue_flags);
    next
}

/// Copies the data of `served`, a write of the held slot `io`, to the server's buffer, then
/// completes the slot's fetch command `cmd`.
fn deliver_write(
    queue: &Queue,
    mut io: Held<'_>,
    served: Served,
    cmd: QueuedIoUringCmd,
    issue_flags: IssueFlags<'_>,
) {
    match copy_write(&served, io.addr()) {
        Copied::Whole => {
            io.serve(served);
            drop(io);
            cmd.done(Ok(0), issue_flags);
        }
        Copied::Part(bytes) => {
            // Part of a write could be copied: the server is told about that part only, and the
            // rest is dispatched again once it is done (`end_request()`).
            io.serve_part(served, bytes);
            drop(io);
            cmd.done(Ok(0), issue_flags);
        }
        Copied::Nothing => {
            // Nothing could be copied: the write is dispatched again a little later (the server's
            // buffer may be paged in by then), and the command waits for it.
            let aborted = io.rearm_same(queue, cmd);
            served.requeue();
            if let Some(cmd) = aborted {
                cmd.done(Err(RES_ABORT), issue_flags);
            }
        }
        Copied::Invalid => {
            // The request fails; the command waits for the next request, offered before the
            // request ends and frees its tag.
            let slot = io.slot();
            let aborted = io.rearm_same(queue, cmd);
            let ending = slot.settle(served, EIO.to_errno(), 0);
            if let Some(cmd) = aborted {
                cmd.done(Err(RES_ABORT), issue_flags);
            }
            if let Some(ending) = ending {
                ending.end(queue);
            }
        }
    }
}

/// Delivers a request with data on a device with `UBLK_F_AUTO_BUF_REG`: registers its buffer with
/// the ring of its fetch command `cmd`, at the index that the server named, then completes `cmd`.
///
/// If the registration fails, the server registers the buffer itself where it asked for that
/// (`UBLK_AUTO_BUF_REG_FALLBACK`: the io descriptor says `UBLK_IO_F_NEED_REG_BUF`); otherwise the
/// request fails, since the server would look for its data in a buffer that is not there, and
/// `cmd` waits for the slot's next request.
fn deliver_registered(
    queue: &Queue,
    mut io: Held<'_>,
    served: Served,
    cmd: QueuedIoUringCmd,
    issue_flags: IssueFlags<'_>,
) {
    if register_auto(&mut io, &served, &cmd, issue_flags) || io.need_reg_buf(&served) {
        io.serve(served);
        drop(io);
        cmd.done(Ok(0), issue_flags);
    } else {
        // The command waits for the next request, offered before the request ends.
        let slot = io.slot();
        let aborted = io.rearm_same(queue, cmd);
        let ending = slot.settle(served, EIO.to_errno(), 0);
        if let Some(ending) = ending {
            ending.end(queue);
        }
        if let Some(cmd) = aborted {
            cmd.done(Err(RES_ABORT), issue_flags);
        }
    }
}

/// Registers the data of `served`, the request of the held io slot `io`, with the ring of `cmd`
/// at the index that the slot names (`UBLK_F_AUTO_BUF_REG`), and returns whether that worked.
///
/// The slot lends the request to the buffer, and records the ring, which the commit of the
/// request unregisters the buffer from.
pub(crate) fn register_auto(
    io: &mut Held<'_>,
    served: &Served,
    cmd: &QueuedIoUringCmd,
    issue_flags: IssueFlags<'_>,
) -> bool {
    let Some((rq, index, lent)) = io.lend_auto(served) else {
        return false;
    };
    let registered = cmd
        .register_request_buffer::<DiskOps, zerocopy::BufRelease>(rq, index.into(), issue_flags)
        .is_ok();
    io.registered_auto(lent, registered.then(|| cmd.ring()));
    registered
}
