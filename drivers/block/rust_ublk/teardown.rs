// SPDX-License-Identifier: GPL-2.0

//! The server goes away, or the device stops: the server's commands complete with
//! `UBLK_IO_RES_ABORT`, and its requests fail or wait for the next server.
//!
//! These paths visit the io slots of a queue one at a time, after changing the queue's state: a
//! slot is either visited, or held meanwhile by a context that sees the new state when it lets go
//! ([`crate::slot::Held::rearm`]), or dispatched, held until the task work that delivers its
//! request completes the command.

use crate::{
    batch,
    cmd::{pdu_queue, pdu_tag},
    device::UblkDevice,
    io::{end_lost, RES_ABORT},
    queue::QueueState,
    slot::Phase,
};
use kernel::{
    io_uring::{IoUringCmdCancel, IssueFlags},
    prelude::*,
    sync::{atomic::Full, barrier::smp_mb, rcu::synchronize_rcu},
    warn_on,
};

/// io_uring cancels a command of the server: its ring is torn down or its task exits.
///
/// The command completes with `UBLK_IO_RES_ABORT`, and the queue stops taking requests, since
/// no one serves them any more.
pub(crate) fn cancel(dev: &UblkDevice, cmd: IoUringCmdCancel<'_>, issue_flags: IssueFlags<'_>) {
    let pdu = cmd.read_pdu::<u32>();
    let Ok(queue) = dev.queues.get(pdu_queue(pdu)) else {
        return;
    };
    // The server is going away: every queue of the device, which it serves too, stops taking
    // requests, until the next server.
    {
        // Not under the device lock: `UBLK_U_CMD_START_DEV` holds it while a zoned disk reads
        // its zones from the server, whose exit, which comes through here, fails that read.
        let mut canceled = dev.canceled.lock();
        *canceled = true;
        start_cancel(dev);
    }
    if pdu_tag(pdu) == batch::FETCH_TAG.into() {
        return batch::cancel(queue, &cmd, issue_flags);
    }
    let Some(slot) = queue.slot(pdu_tag(pdu)) else {
        return;
    };
    // A slot held meanwhile is being dispatched, or held by a `queue_rq` that refuses its request
    // and lets go of it, or is dispatched and waits for the task work that delivers its request,
    // which completes the command: io_uring tries to cancel the command again, until it
    // completes.
    let fetch = slot
        .hold(Phase::Fetched)
        .and_then(|mut io| io.abort_fetch(|fetch| cmd.refers_to(fetch)));
    if let Some(fetch) = fetch {
        fetch.done(Err(RES_ABORT), issue_flags);
    }
}

/// Waits until the contexts that may hold an io slot when the queues' states changed let go of
/// it, or see the change when they do, before the slots are visited. Process context only.
///
/// `queue_rq` reads the state before it holds a slot, in an RCU read-side critical section: after
/// a grace period, every `queue_rq` that holds one saw the change, let go of its slot, or handed a
/// dispatched slot over to the task work that delivers its request, which these paths leave. The
/// server's commands and their task work re-check the state when they let go of a slot that
/// they re-armed ([`crate::slot::Held::rearm`]); the barrier orders the visits after the change,
/// which a cancellation may have made before, on another CPU, with a fully ordered exchange.
fn wait_for_holders() {
    synchronize_rcu();
    smp_mb(Full);
}

/// The server is going away: requests of every queue fail from now on, or wait for the next
/// server.
pub(crate) fn start_cancel(dev: &UblkDevice) {
    for queue in dev.queues.iter() {
        queue.lose_server();
    }
}

/// The server closed `/dev/ublkcN`, and io_uring released every buffer that held its requests
/// ([`any_lent`]): the requests it was serving fail, or, with user recovery, wait for the next
/// server (`ublk_abort_queue()`). Reads whose completion the fault injection dropped fail with
/// `EIO` instead of waiting for their timer.
///
/// Every command of the server completed before (a command keeps the file open), so no io slot
/// is dispatched or delivering any more.
pub(crate) fn abort_all(dev: &UblkDevice) {
    start_cancel(dev);
    wait_for_holders();
    for queue in dev.queues.iter() {
        for slot in queue.slots() {
            // Nothing holds the slots any more (`wait_for_holders`).
            let ending = slot
                .hold_any(&[Phase::Serving, Phase::NeedGetData, Phase::Queued])
                .and_then(|mut io| {
                    let served = io.take_orphan()?;
                    io.without_server(queue, served, true)
                });
            if let Some(ending) = ending {
                ending.end(queue);
            }
        }
        batch::abort(queue);
        while let Some(rq) = queue.pop_lost() {
            end_lost(queue, rq, EIO);
        }
    }
}

/// Returns whether a request of the device is lent: a user copy or a registered buffer holds it.
pub(crate) fn any_lent(dev: &UblkDevice) -> bool {
    dev.queues
        .iter()
        .any(|queue| queue.slots().any(|slot| slot.is_lent()))
}

/// The server is gone: a new server may fetch the io slots again.
///
/// Unless `serving`, the queues keep their state (a started device that recovers: its requests
/// wait or fail until the new server fetched every io slot of their queue).
pub(crate) fn reset_all(dev: &UblkDevice, serving: bool) {
    for queue in dev.queues.iter() {
        if serving {
            queue.set_state(QueueState::Serving);
        }
        for slot in queue.slots() {
            let io = slot.hold_any(&[Phase::Aborted, Phase::Prepared, Phase::Idle]);
            // Every command of the server completed, so a slot is in one of those phases.
            let Some(mut io) = io else {
                warn_on!(true);
                continue;
            };
            // The task reference is put once the slot is let go.
            let task = io.reset();
            drop(io);
            drop(task);
        }
    }
}

/// The device is stopped: the server's commands complete with `UBLK_IO_RES_ABORT`, so that it
/// exits, and commands it sends from now on do too.
pub(crate) fn stop_all(dev: &UblkDevice) {
    for queue in dev.queues.iter() {
        queue.set_state(QueueState::Stopping);
    }
    // A `UBLK_U_CMD_START_DEV` or `UBLK_U_CMD_END_USER_RECOVERY` that waits gives up.
    dev.ready.notify_all();
    abort_commands(dev);
}

/// Completes the server's commands that wait for requests with `UBLK_IO_RES_ABORT`
/// (`ublk_cancel_dev()`).
pub(crate) fn abort_commands(dev: &UblkDevice) {
    wait_for_holders();
    for queue in dev.queues.iter() {
        for slot in queue.slots() {
            // A slot held meanwhile is let go by a holder that sees the queue's new state, or is
            // dispatched: its task work completes the command with the request, and the commit
            // that follows re-arms the slot and sees the state.
            let cmd = slot
                .hold(Phase::Fetched)
                .and_then(|mut io| io.abort_fetch(|_| true));
            if let Some(cmd) = cmd {
                cmd.complete_in_task(|cmd, issue_flags| cmd.done(Err(RES_ABORT), issue_flags));
            }
        }
        batch::stop(queue);
    }
}
