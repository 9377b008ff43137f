// SPDX-License-Identifier: GPL-2.0

//! The io slots of a queue, and how requests travel through them.
//!
//! # The cycle of an io slot
//!
//! Each io slot (a tag of a queue) goes around a cycle:
//!
//! 1. The server sends `UBLK_U_IO_FETCH_REQ` for the slot: the driver keeps the command, the slot
//!    is [`IoState::Fetched`].
//! 2. blk-mq queues a request with the slot's tag ([`dispatch`]): the driver writes the io
//!    descriptor, the slot becomes [`IoState::Dispatched`], and the fetch command completes in
//!    the server's task ([`deliver`]), after the data of a write is copied to the server's buffer
//!    (the slot is [`IoState::Delivering`] meanwhile). The slot is then [`IoState::Serving`]: the
//!    server owns the request.
//!
//!    The requests that blk-mq queues together (a plug flushed through `queue_rqs`) reach the
//!    server's task in one task work per thread and ring ([`Batch`]): the slots of a batch are
//!    chained by tag, each one naming the next, and the task work of the first command delivers
//!    them all. The chain lives in the slots, so a batch allocates nothing.
//!
//!    With `UBLK_F_NEED_GET_DATA`, the fetch command of a write completes with
//!    `UBLK_IO_RES_NEED_GET_DATA` instead, without its data ([`IoState::NeedGetData`]): the server
//!    names the buffer for it with `UBLK_U_IO_NEED_GET_DATA` ([`need_get_data`]), which completes
//!    once the data is there.
//!
//!    With `UBLK_F_AUTO_BUF_REG`, the data of a read or a write is registered as a fixed buffer
//!    of the ring of the fetch command before the command completes ([`deliver_registered`]).
//! 3. The server handles the request and sends `UBLK_U_IO_COMMIT_AND_FETCH_REQ` with the result
//!    ([`commit_and_fetch`]): in copy mode, the data of a read is copied from the server's
//!    buffer; a buffer registered automatically is unregistered; the request ends, unless it is
//!    lent (below), and the new command waits for the next request (step 2).
//!
//! # Who owns what
//!
//! - An io slot is its own lock ([`Slot`]); the only lock over a queue is that of its lost
//!   requests (below), a leaf lock. The slot of a tag is
//!   only taken by the request of that tag (in `queue_rq` or `queue_rqs`, at most one at a time,
//!   since blk-mq hands a tag to one request at a time), by the next request of its batch, which
//!   links it ([`Batch`]), by the server thread that fetched the slot (its commands and their
//!   task work), by the user copies and buffer registrations of the server's threads
//!   ([`crate::usercopy`], [`crate::zerocopy`]) and io_uring's release of registered buffers, and
//!   by the paths that tear the queue down. Requests of different tags, and so submitters on
//!   different CPUs, never take the same lock, but for that link within a plug.
//! - A request has exactly one owner from `queue_rq` or `queue_rqs` until it ends: a [`Served`]
//!   value, which is not `Clone`. It is kept in the slot (parked there once ended while lent,
//!   below), or moved out of it by the function that works on it without the lock (the copy of a
//!   write's data in [`deliver`] and [`need_get_data`], the copy of a read's data in
//!   [`commit_and_fetch`], the registration in [`deliver_registered`]), and it is consumed by
//!   ending the request. The only other references to the request are those that the slot lent
//!   and counts, and it is only ended once none is left, so ending it does not fail.
//! - A read whose completion the `fail_io_timeout` fault injection dropped ([`Served::end`]) is
//!   owned by its queue from then on (`Queue::keep_lost`), until its timer expires and the
//!   timeout operation ends it, or the server goes away first and [`abort_all`] does
//!   ([`end_lost`]); whichever takes it out of the queue's list ends it.
//! - The io descriptor of a slot has one writer ([`DescWriter`]), kept in the slot, so writes to
//!   it are serialised by the slot's lock.
//! - The server's command is owned by the slot while it waits ([`IoState::Fetched`]), by a
//!   dispatched slot that waits for the task work of its batch, by the [`Batch`] whose first
//!   command it is until the batch is submitted, by the task work that completes it
//!   ([`deliver`]), or by io_uring once it completed.
//!
//! - With `UBLK_F_USER_COPY`, the server copies the data of a request that it serves itself, with
//!   `pread` and `pwrite` on `/dev/ublkcN` ([`crate::usercopy`]), from any thread; with zero
//!   copy, the data is registered as a fixed buffer of the server's io_uring
//!   ([`crate::zerocopy`]). A copy borrows the request from its io slot for as long as it runs, a
//!   registered buffer until io_uring releases it: the slot counts what it lent (`lent`), as the
//!   C driver counts references in `struct ublk_io`. A request that the server commits, or that
//!   fails, while it is lent is parked in the slot with its result, and the last user to give it
//!   back ends it ([`give_back`]).
//!
//! With user recovery, a request that no server takes may instead wait for the next server on
//! the requeue list ([`Io::without_server`]).
//!
//! Requests end in [`Served::end`] (directly, or through [`Served::finish`]): inline, or, with
//! `UBLK_F_SUPPORT_RQ_AFFINITY`, through `blk_mq_complete_request_remote()` so that the queue's
//! `rq_affinity` picks the CPU. Every way a request can end goes through it, errors, aborts, the
//! last user copy and the release of the last registered buffer included (but for a request of
//! a hardware queue that the device does not have, which cannot happen), or through
//! [`end_lost`], which ends the requests whose completion was dropped the same way.

use crate::{
    batch,
    chardev::Cmd,
    device::{Server, UblkDevice},
    iodesc::DescWriter,
    queue::{DiskOps, NoServer, Queue, QueueState, Rq, Slot},
    shmem,
    uapi::{self, AutoBufReg, IoCmd, IoDesc},
    zerocopy::{self, BufRelease},
    zoned,
};
use kernel::{
    block::{mq::Request, BlkStatus, ReqOp, SECTOR_SHIFT},
    bottom_half::{local_bh_disable, LocalBhDisabled},
    current,
    io_uring::{IoUringCmdCancel, IssueFlags, Issued, QueuedIoUringCmd, RingId},
    prelude::*,
    sync::{aref::ARef, atomic::Relaxed, Arc, SpinLockGuard},
    task::Task,
    uaccess::{UserPtr, UserSlice},
    warn_on,
};

/// The result with which the driver completes the server's commands when the device goes away
/// (`UBLK_IO_RES_ABORT`).
pub(crate) const RES_ABORT: Error = ENODEV;

/// How long a write whose data could not be copied to the server at all waits before it is
/// dispatched again, as in the C driver (`UBLK_REQUEUE_DELAY_MS`).
const REQUEUE_DELAY_MS: usize = 3;

/// A request that the driver owns, from `queue_rq` until it ends.
///
/// # Invariants
///
/// `rq` is the only reference to the request, but for those that its io slot lent to user copies
/// and registered buffers and counts in `lent` ([`Io::lend`]).
pub(crate) struct Served {
    rq: ARef<Rq>,
    /// The bytes of the request that the server was told about: fewer than the request has if
    /// the data of a write could only be copied in part.
    pub(crate) len: u32,
    /// Where the data lies in a buffer that the server registered, if it does, as the io
    /// descriptor gives it (`UBLK_IO_F_SHMEM_ZC`): the driver then copies none of it.
    pub(crate) shmem: Option<u64>,
    /// Whether the request is of a zoned device, whose requests may be zone operations.
    zoned: bool,
}

impl Served {
    /// Takes the request that blk-mq queued, and looks for its data in the buffers that the
    /// server registered (`UBLK_F_SHMEM_ZC`).
    pub(crate) fn new(queue: &Queue, rq: ARef<Rq>) -> Self {
        let len = rq.nr_bytes();
        // INVARIANT: `rq` is the reference that blk-mq passed to `queue_rq` or that `queue_rqs`
        // took from its list. The driver only duplicates it to lend it, once the request is the
        // server's, through its io slot.
        let mut served = Self {
            rq,
            len,
            shmem: None,
            zoned: queue.zoned,
        };
        served.shmem = queue
            .shmem
            .as_ref()
            .and_then(|table| shmem::find(table, &served));
        served
    }

    /// Records the result of the request and ends it: inline, or through
    /// `blk_mq_complete_request_remote()` if the queue honours `rq_affinity`.
    ///
    /// `error` is 0 or a negative errno; `bytes` is how much of the request the server
    /// transferred. The request must not be lent ([`Io::settle`] parks it if it is).
    pub(crate) fn finish(self, queue: &Queue, error: i32, bytes: u32) {
        self.record(error, bytes);
        self.end(queue);
    }

    /// Records where the data of the request landed, as the server's commit says, if it is a
    /// zone append (`zone_append_lba`, in the commit's `addr`).
    pub(crate) fn set_append_sector(&self, sector: u64) {
        if self.op() == ReqOp::ZoneAppend {
            self.rq.data_ref().append_sector.store(sector, Relaxed);
        }
    }

    /// Records the result with which the request ends.
    fn record(&self, error: i32, bytes: u32) {
        self.rq.data_ref().set(error, bytes);
    }

    /// Ends the request with the result recorded, as [`Served::finish`] does.
    pub(crate) fn end(self, queue: &Queue) {
        // Asked before the request is handed to another CPU: once it is marked complete, it
        // cannot time out.
        if self.loses_completion(queue) {
            // The timeout operation ends it with `ETIMEDOUT`, or `abort_all` with `EIO`
            // ([`end_lost`]). `self.rq` is the only reference to the request: in copy mode, which
            // `loses_completion` requires, the slot never lends it (user copy and buffer
            // registration are refused, and automatic registration is not copy mode).
            queue.keep_lost(self.rq);
            return;
        }
        route_end(queue, self.rq);
    }

    /// Whether the `fail_io_timeout` fault injection drops the completion of the request
    /// (`ublk_fake_timeout()`). As in the C driver, it is asked only for a read whose data the
    /// driver copied from the server in full, the one completion that ends its request in one go.
    fn loses_completion(&self, queue: &Queue) -> bool {
        let result = self.rq.data_ref();
        queue.copies_data()
            && self.shmem.is_none()
            && self.op() == ReqOp::Read
            && result.error.load(Relaxed) == 0
            && result.bytes.load(Relaxed) >= self.nr_bytes()
            && self.rq.should_fake_timeout()
    }

    /// Puts the request aside, on the requeue list of its queue, until a new server serves the
    /// queue (user recovery): `UBLK_U_CMD_END_USER_RECOVERY` kicks the list, and so does
    /// stopping the device, which fails them.
    ///
    /// Called under the lock of the request's io slot, after the queue's state was read under
    /// it, so that [`Queue::sync`] waits for it. The request must not be lent.
    fn shelve(self) {
        // By the type invariants, `rq` is the only reference, since the slot lent none.
        if let Err(rq) = Request::requeue_unkicked(self.rq) {
            warn_on!(true);
            drop(rq);
        }
    }

    /// Gives the request back to blk-mq, which dispatches it again after [`REQUEUE_DELAY_MS`].
    pub(crate) fn requeue(self) {
        // Only a request that the server does not own yet is requeued, and only those are lent:
        // by the type invariants, `rq` is the only reference, so this does not fail.
        warn_on!(Request::requeue(self.rq, REQUEUE_DELAY_MS).is_err());
    }
}

impl core::ops::Deref for Served {
    type Target = Rq;

    fn deref(&self) -> &Rq {
        &self.rq
    }
}

/// Where an io slot is in its cycle.
pub(crate) enum IoState {
    /// The server has no command for the slot.
    Idle,
    /// The server waits for a request with this command.
    Fetched(QueuedIoUringCmd),
    /// A request was handed to the server's task, which completes the fetch command
    /// ([`deliver`]).
    Dispatched {
        served: Served,
        /// The fetch command, unless it is the one whose task work delivers the batch that the
        /// request is part of.
        cmd: Option<QueuedIoUringCmd>,
        /// The tag of the next io slot of the batch.
        next: Option<u16>,
    },
    /// The server's task copies the data of the request, which it took from the slot.
    Delivering,
    /// The server's commit of the slot's request runs ([`commit_and_fetch`]): it took the request
    /// from the slot to end it, and offers the slot again with the same command. The slot is not
    /// [`IoState::Idle`] meanwhile, so that no `UBLK_U_IO_FETCH_REQ` takes it.
    Committing,
    /// The server serves the request (`UBLK_IO_FLAG_OWNED_BY_SRV` in the C driver).
    Serving(Served),
    /// The server owns the write, and was asked for the buffer of its data, which it names with
    /// `UBLK_U_IO_NEED_GET_DATA` (`UBLK_IO_FLAG_NEED_GET_DATA` in the C driver).
    NeedGetData(Served),
    /// The server's command for the slot completed with `UBLK_IO_RES_ABORT`: the server, which is
    /// going away, cannot fetch the slot again (`UBLK_IO_FLAG_CANCELED` in the C driver); the next
    /// server can.
    Aborted,
    /// `UBLK_F_BATCH_IO`: the server offered the slot with `UBLK_U_IO_PREP_IO_CMDS` or
    /// `UBLK_U_IO_COMMIT_IO_CMDS`, and it waits for a request (`UBLK_IO_FLAG_ACTIVE` in the C
    /// driver). No command is kept for it: the queue's fetch commands deliver its requests
    /// ([`crate::batch`]).
    Prepared,
    /// `UBLK_F_BATCH_IO`: the slot's request waits in its queue's event queue for a fetch
    /// command to deliver its tag to the server ([`crate::batch`]).
    Queued(Served),
}

/// An io slot.
///
/// # Invariants
///
/// - `lent` counts the references to the slot's request that [`Io::lend`] (and the automatic
///   registration of [`deliver_registered`]) handed out and that were not given back yet.
/// - `lent > 0` while `parked` is `Some`, and the parked request is the slot's only request: it
///   keeps its tag, so no other request reaches the slot until it ends.
pub(crate) struct Io {
    pub(crate) state: IoState,
    /// How many user copies borrow the slot's request ([`with_lent`]).
    lent: u32,
    /// The request, with its result recorded, that ended while user copies borrowed it: the last
    /// of them ends it. Meanwhile the request keeps its tag, so the slot gets no other.
    parked: Option<Served>,
    /// The server's buffer for the data of the slot's requests.
    pub(crate) addr: u64,
    /// Where the buffer of the slot's next request goes (`UBLK_F_AUTO_BUF_REG`).
    pub(crate) auto_reg: AutoBufReg,
    /// The ring that the buffer of the slot's request was registered with automatically, which
    /// the commit of the request unregisters it from if it comes through the same ring.
    pub(crate) auto_registered: Option<RingId>,
    /// The server thread that fetched the slot, the only one that may send its other commands.
    task: Option<ARef<Task>>,
    /// The writer of the slot's io descriptor.
    pub(crate) desc: DescWriter,
}

impl Io {
    pub(crate) fn new(desc: DescWriter) -> Self {
        Self {
            state: IoState::Idle,
            lent: 0,
            parked: None,
            addr: 0,
            auto_reg: AutoBufReg::default(),
            auto_registered: None,
            task: None,
            desc,
        }
    }

    pub(crate) fn take(&mut self) -> IoState {
        core::mem::replace(&mut self.state, IoState::Idle)
    }

    /// Checks that the slot belongs to the calling server thread and that the server owns its
    /// request, as the C driver does before it looks at a command other than a fetch.
    pub(crate) fn check_owner(&self) -> Result {
        if !self.task.as_deref().is_some_and(is_current) {
            return Err(EINVAL);
        }
        match self.state {
            IoState::Serving(_) | IoState::NeedGetData(_) => Ok(()),
            _ => Err(EBUSY),
        }
    }

    /// Lends a reference to the request that the server serves in the slot, with data (a read or
    /// a write), to a user copy or a registered buffer; `EINVAL` if there is none. The slot
    /// counts it until it comes back through [`give_back`].
    pub(crate) fn lend(&mut self) -> Result<ARef<Rq>> {
        let IoState::Serving(served) = &self.state else {
            return Err(EINVAL);
        };
        // Only reads and writes, zone appends and reports have data.
        if !zoned::has_data(served.op()) {
            return Err(EINVAL);
        }
        // INVARIANT: The slot counts this reference in `lent` until it is given back.
        let rq = served.rq.clone();
        self.lent += 1;
        Ok(rq)
    }

    /// Checks that the server was not asked for the buffer of the slot's write
    /// (`UBLK_F_NEED_GET_DATA`), which only `UBLK_U_IO_NEED_GET_DATA` answers.
    pub(crate) fn check_not_need_get_data(&self) -> Result {
        match self.state {
            IoState::NeedGetData(_) => Err(EINVAL),
            _ => Ok(()),
        }
    }

    /// Returns whether user copies or registered buffers hold the slot's request.
    pub(crate) fn is_lent(&self) -> bool {
        self.lent > 0
    }

    /// Returns whether the calling thread is the server thread that fetched the slot.
    pub(crate) fn is_own_thread(&self) -> bool {
        self.task.as_deref().is_some_and(is_current)
    }

    /// Keeps `fetch`, a command that the server sent with the buffer `addr`, to wait for the
    /// slot's next request. If the queue is not served (the device is stopped or quiesced, or the
    /// server is going away), the slot is [`IoState::Aborted`] and `fetch` is returned, for the
    /// caller to complete with `UBLK_IO_RES_ABORT` once the lock is dropped.
    fn refetch(
        &mut self,
        queue: &Queue,
        fetch: QueuedIoUringCmd,
        addr: u64,
    ) -> Option<QueuedIoUringCmd> {
        // Unlike the C driver, which keeps such a command until io_uring cancels it, a server that
        // is going away (the device is stopped or quiesced) gets no more requests.
        if queue.state() != QueueState::Serving {
            self.state = IoState::Aborted;
            return Some(fetch);
        }
        self.addr = addr;
        self.state = IoState::Fetched(fetch);
        None
    }

    /// Keeps `fetch`, the slot's fetch command, to wait for the slot's next request, as
    /// [`Io::refetch`] does with the slot's buffer.
    fn rearm(&mut self, queue: &Queue, fetch: QueuedIoUringCmd) -> Option<QueuedIoUringCmd> {
        let addr = self.addr;
        self.refetch(queue, fetch, addr)
    }

    /// Records the result of `served`, and returns it to be ended now, unless user copies still
    /// borrow it: then it is parked, and the last copy ends it.
    pub(crate) fn settle(&mut self, served: Served, error: i32, bytes: u32) -> Option<Served> {
        served.record(error, bytes);
        // A slot has one request at a time, so none is parked yet.
        if self.lent == 0 || warn_on!(self.parked.is_some()) {
            return Some(served);
        }
        self.parked = Some(served);
        None
    }

    /// Deals with `served`, the request of the slot, which no server takes (`__ublk_abort_rq()`,
    /// `__ublk_fail_req()`): puts it aside for the next server, or records its failure and
    /// returns it to be ended now, unless it is lent (then the last borrower ends it). `owned`
    /// if the server that went away owned it.
    pub(crate) fn without_server(
        &mut self,
        queue: &Queue,
        served: Served,
        owned: bool,
    ) -> Option<Served> {
        // A zone report that the driver sent itself waits for no server: its sender, possibly
        // `UBLK_U_CMD_START_DEV` holding the device lock that a new server needs, sees it fail.
        if served.op() == ReqOp::DrvIn {
            return self.settle(served, EIO.to_errno(), 0);
        }
        match queue.no_server(owned) {
            NoServer::Shelve if self.lent == 0 => {
                served.shelve();
                None
            }
            // A request that a buffer still holds cannot go back to blk-mq.
            NoServer::Shelve => self.settle(served, EIO.to_errno(), 0),
            NoServer::Fail(err) => self.settle(served, err.to_errno(), 0),
        }
    }

    /// Takes the request that the server owns.
    fn take_serving(&mut self) -> Option<Served> {
        match self.take() {
            IoState::Serving(served) | IoState::NeedGetData(served) => Some(served),
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
pub(crate) fn pdu(q_id: u16, tag: u16) -> u32 {
    (u32::from(q_id) << 16) | u32::from(tag)
}

fn pdu_tag(pdu: u32) -> usize {
    (pdu & 0xffff) as usize
}

fn pdu_queue(pdu: u32) -> usize {
    (pdu >> 16) as usize
}

/// Returns the io descriptor of `rq`, whose data goes to or comes from `addr`, unless it lies in
/// a registered buffer.
pub(crate) fn describe(rq: &Served, addr: u64) -> Option<IoDesc> {
    let (op, nr_sectors, start_sector) = match rq.op() {
        ReqOp::Read => (uapi::IO_OP_READ, rq.nr_sectors(), rq.sector()),
        ReqOp::Write => (uapi::IO_OP_WRITE, rq.nr_sectors(), rq.sector()),
        ReqOp::Flush => (uapi::IO_OP_FLUSH, rq.nr_sectors(), rq.sector()),
        ReqOp::Discard => (uapi::IO_OP_DISCARD, rq.nr_sectors(), rq.sector()),
        ReqOp::WriteZeroes => (uapi::IO_OP_WRITE_ZEROES, rq.nr_sectors(), rq.sector()),
        _ => zoned::describe(rq.zoned, rq)?,
    };
    let mut op_flags = op;
    if rq.is_fua() {
        op_flags |= uapi::IO_F_FUA;
    }
    if rq.op() == ReqOp::WriteZeroes && rq.is_nounmap() {
        op_flags |= uapi::IO_F_NOUNMAP;
    }
    if rq.has_integrity() {
        op_flags |= uapi::IO_F_INTEGRITY;
    }
    if rq.shmem.is_some() {
        op_flags |= uapi::IO_F_SHMEM_ZC;
    }
    Some(IoDesc {
        op_flags,
        nr_sectors,
        start_sector,
        addr: rq.shmem.unwrap_or(addr),
    })
}

/// Requests handed to the same server thread, on the same ring, that reach it in one task work.
///
/// The io slots of a batch are [`IoState::Dispatched`], each naming the next; the first one's
/// fetch command is kept here until the batch is submitted, and its task work delivers them all.
#[must_use = "the first io slot of a batch waits until the batch is submitted"]
pub(crate) struct Batch<'a> {
    queue: &'a Arc<Queue>,
    /// The fetch command of the first io slot.
    head: QueuedIoUringCmd,
    /// The server thread that fetched the io slots; only compared, never dereferenced.
    task: *const Task,
    /// The tag of the last io slot.
    tail: u16,
}

impl Batch<'_> {
    /// Whether the request of an io slot whose fetch command is `cmd`, sent by `task`, can reach
    /// the server in this batch's task work.
    fn takes(&self, queue: &Arc<Queue>, task: *const Task, cmd: &QueuedIoUringCmd) -> bool {
        Arc::ptr_eq(self.queue, queue) && self.task == task && self.head.same_ring(cmd)
    }

    /// Chains the io slot `tag`, dispatched already, after the last one of the batch.
    fn append(&mut self, tag: u16) {
        if let Some(tail) = self.queue.slot(self.tail.into()) {
            match &mut tail.lock().state {
                IoState::Dispatched { next, .. } => *next = Some(tag),
                // The batch's task work is not queued yet, so its slots stay dispatched.
                _ => {
                    warn_on!(true);
                }
            }
        }
        self.tail = tag;
    }

    /// Hands the batch to the server's task.
    pub(crate) fn submit(self) {
        self.head.complete_in_task_with(self.queue.clone(), deliver);
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
    let mut io = slot.lock();
    if queue.state() != QueueState::Serving {
        let served = io.without_server(queue, served, false);
        drop(io);
        if let Some(served) = served {
            served.end(queue);
        }
        return;
    }
    let Some(desc) = describe(&served, io.addr) else {
        drop(io);
        return served.finish(queue, EOPNOTSUPP.to_errno(), 0);
    };
    let cmd = match io.take() {
        IoState::Fetched(cmd) => cmd,
        other => {
            // No command to hand the request over with: the server is going away.
            io.state = other;
            let served = io.without_server(queue, served, false);
            drop(io);
            if let Some(served) = served {
                served.end(queue);
            }
            return;
        }
    };
    io.desc.write(&desc);
    let task = io
        .task
        .as_deref()
        .map_or(core::ptr::null(), core::ptr::from_ref);

    match batch {
        Some(b) if b.takes(queue, task, &cmd) => {
            io.state = IoState::Dispatched {
                served,
                cmd: Some(cmd),
                next: None,
            };
            drop(io);
            b.append(tag);
        }
        _ => {
            io.state = IoState::Dispatched {
                served,
                cmd: None,
                next: None,
            };
            drop(io);
            let full = batch.replace(Batch {
                queue,
                head: cmd,
                task,
                tail: tag,
            });
            if let Some(full) = full {
                full.submit();
            }
        }
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
        match deliver_one(&queue, slot, &mut head, issue_flags) {
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

/// Delivers the request of a dispatched io slot of a batch, and returns the tag of the next one.
///
/// `head` is the fetch command of the first slot of the batch until that slot takes it.
fn deliver_one(
    queue: &Queue,
    slot: &Slot,
    head: &mut Option<QueuedIoUringCmd>,
    issue_flags: IssueFlags<'_>,
) -> Option<u16> {
    // The server's task is exiting: the request cannot be served, and fails.
    let canceled = issue_flags.is_task_work_canceled();
    let (cmd, mut served, addr, next) = {
        let mut io = slot.lock();
        let (served, cmd, next) = match io.take() {
            IoState::Dispatched { served, cmd, next } => match cmd.or_else(|| head.take()) {
                Some(cmd) => (served, cmd, next),
                None => {
                    // Only the first slot of a batch has no command of its own.
                    io.state = IoState::Dispatched {
                        served,
                        cmd: None,
                        next,
                    };
                    warn_on!(true);
                    return None;
                }
            },
            other => {
                // A batch is a chain of dispatched slots.
                io.state = other;
                warn_on!(true);
                return None;
            }
        };
        if !canceled && queue.auto_buf_reg && zoned::has_data(served.op()) {
            // The buffer is registered with the server's ring before it learns about the request.
            deliver_registered(queue, slot, io, served, cmd, issue_flags);
            return next;
        }
        if !canceled && (served.op() != ReqOp::Write || !queue.copies_data()) {
            // No data to copy, or the server copies it: the server gets the request at once.
            io.state = IoState::Serving(served);
            drop(io);
            cmd.done(Ok(0), issue_flags);
            return next;
        }
        if !canceled && queue.need_get_data {
            // The server names the buffer for the write's data first.
            io.state = IoState::NeedGetData(served);
            drop(io);
            cmd.done(Ok(uapi::IO_RES_NEED_GET_DATA), issue_flags);
            return next;
        }
        io.state = IoState::Delivering;
        (cmd, served, io.addr, next)
    };

    let copy = if canceled {
        Copy::Whole
    } else {
        copy_write(&served, addr)
    };

    let mut io = slot.lock();
    match copy {
        Copy::Whole | Copy::Part(_) if !canceled => {
            if let Copy::Part(bytes) = copy {
                // Part of a write could be copied: the server is told about that part only, and
                // the rest is dispatched again once it is done (`end_request()`).
                served.len = bytes;
                io.desc.set_nr_sectors(bytes >> SECTOR_SHIFT);
            }
            io.state = IoState::Serving(served);
            drop(io);
            cmd.done(Ok(0), issue_flags);
        }
        Copy::Nothing if !canceled => {
            // As in the C driver, the write is dispatched again a little later (the server's
            // buffer may be paged in by then), and the command waits for it.
            let aborted = io.rearm(queue, cmd);
            drop(io);
            served.requeue();
            if let Some(cmd) = aborted {
                cmd.done(Err(RES_ABORT), issue_flags);
            }
        }
        _ => {
            // The request fails, or, if the server's task exits, waits for the next server if
            // the device recovers. The command waits for the next request, unless the server's
            // task exits: then it completes with `UBLK_IO_RES_ABORT`, and the slot is free for
            // the next server to fetch.
            let (cmd, served) = if canceled {
                io.state = IoState::Aborted;
                (Some(cmd), io.without_server(queue, served, false))
            } else {
                (io.rearm(queue, cmd), io.settle(served, EIO.to_errno(), 0))
            };
            drop(io);
            if let Some(cmd) = cmd {
                cmd.done(Err(RES_ABORT), issue_flags);
            }
            if let Some(served) = served {
                served.end(queue);
            }
        }
    }
    next
}

/// Delivers a request with data on a device with `UBLK_F_AUTO_BUF_REG`: registers its buffer with
/// the ring of its fetch command `cmd`, at the index that the server named, then completes `cmd`.
///
/// `io` is the locked slot, whose request `served` is. If the registration fails, the server
/// registers the buffer itself where it asked for that (`UBLK_AUTO_BUF_REG_FALLBACK`: the io
/// descriptor says `UBLK_IO_F_NEED_REG_BUF`); otherwise the request fails, as in the C driver,
/// and `cmd` waits for the slot's next request.
fn deliver_registered(
    queue: &Queue,
    slot: &Slot,
    mut io: SpinLockGuard<'_, Io>,
    served: Served,
    cmd: QueuedIoUringCmd,
    issue_flags: IssueFlags<'_>,
) {
    // The server sends no command for the request before it learns about it, below.
    io.state = IoState::Delivering;
    drop(io);

    let registered = register_auto(slot, &served, &cmd, issue_flags);

    let mut io = slot.lock();
    if registered || io.need_reg_buf(&served) {
        io.state = IoState::Serving(served);
        drop(io);
        cmd.done(Ok(0), issue_flags);
    } else {
        let aborted = io.rearm(queue, cmd);
        let served = io.settle(served, EIO.to_errno(), 0);
        drop(io);
        if let Some(served) = served {
            served.end(queue);
        }
        if let Some(cmd) = aborted {
            cmd.done(Err(RES_ABORT), issue_flags);
        }
    }
}

/// Registers the data of `served`, the request of `slot`, with the ring of `cmd` at the index
/// that the slot names (`UBLK_F_AUTO_BUF_REG`), and returns whether that worked.
///
/// The slot, which the caller must not hold locked, lends the request to the buffer, and records
/// the ring, which the commit of the request unregisters the buffer from.
pub(crate) fn register_auto(
    slot: &Slot,
    served: &Served,
    cmd: &QueuedIoUringCmd,
    issue_flags: IssueFlags<'_>,
) -> bool {
    let index = {
        let mut io = slot.lock();
        io.lent += 1;
        io.auto_reg.index
    };
    // INVARIANT: The slot counts this reference in `lent` until it is given back.
    let rq = served.rq.clone();
    let registered = cmd
        .register_request_buffer::<DiskOps, BufRelease>(rq, index.into(), issue_flags)
        .is_ok();
    let mut io = slot.lock();
    if registered {
        io.auto_registered = Some(cmd.ring());
    } else {
        // The registration dropped the reference that it was lent. The slot may have lent others
        // (a buffer that an earlier delivery of a batch registered, whose completion could not be
        // posted), which keep the request until they are given back.
        io.lent -= 1;
    }
    registered
}

impl Io {
    /// After a failed automatic registration of the buffer of `served`, the slot's request:
    /// returns whether the server registers it itself (`UBLK_AUTO_BUF_REG_FALLBACK`), and then
    /// tells it so in the io descriptor (`UBLK_IO_F_NEED_REG_BUF`). Otherwise the request fails.
    pub(crate) fn need_reg_buf(&mut self, served: &Served) -> bool {
        if !self.auto_reg.fallback {
            return false;
        }
        if let Some(mut desc) = describe(served, self.addr) {
            desc.op_flags |= uapi::IO_F_NEED_REG_BUF;
            self.desc.write(&desc);
        }
        true
    }
}

/// How much of a write's data [`copy_write`] copied to the server's buffer.
#[derive(Clone, Copy)]
pub(crate) enum Copy {
    /// All of it.
    Whole,
    /// This many bytes, a whole number of sectors: a fault ended the copy.
    Part(u32),
    /// Not a sector: a fault ended the copy.
    Nothing,
    /// None: the buffer's address range is not one of user memory.
    Invalid,
}

/// Copies the data of the write `rq` to the server's buffer at `addr`, unless it lies in a
/// registered buffer already.
pub(crate) fn copy_write(rq: &Served, addr: u64) -> Copy {
    if rq.shmem.is_some() {
        return Copy::Whole;
    }
    let len = rq.nr_bytes();
    // A fault ends the copy, and what was copied before it counts.
    let copied = match UserSlice::new(UserPtr::from_addr(addr as usize), len as usize)
        .with_iov_dest(|dest| rq.copy_to_iter(0, dest))
    {
        Ok(Ok(copied)) => copied,
        Ok(Err(_)) => 0,
        // An address that cannot be a user buffer does not become one later: unlike the C
        // driver, which retries such a write forever, fail it.
        Err(_) => return Copy::Invalid,
    };
    // CAST: `copied` is at most `len`, a `u32`.
    let copied = copied as u32;
    // Only whole sectors go to the server.
    let sectors = copied >> SECTOR_SHIFT;
    if copied == len {
        Copy::Whole
    } else if sectors == 0 {
        Copy::Nothing
    } else {
        Copy::Part(sectors << SECTOR_SHIFT)
    }
}

/// Ends `rq`, the only reference to the request, with the result recorded: inline, or through
/// `blk_mq_complete_request_remote()` if the queue honours `rq_affinity`.
///
/// Both run with bottom halves disabled. Ending a request ends its bios, and the completion of a
/// bio may drop the last reference to a file (an asynchronous direct read of a file closed
/// meanwhile, for example). In process context the release of that file would be task work of
/// the current task, which is often the server's; the release of a file of a ublk disk takes the
/// disk's `open_mutex`, which `bdev_open()` and `BLKRRPART` hold while they read the partition
/// table through the same server, and the server would wait for itself. With bottom halves
/// disabled, `in_interrupt()` is true and the release goes to a work item instead. The hand-over
/// to `blk_mq_complete_request_remote()` is in the section too: the `BLOCK_SOFTIRQ` that it raises
/// for a device with one hardware queue then runs when the section ends, without waking
/// `ksoftirqd`.
fn route_end(queue: &Queue, rq: ARef<Rq>) {
    let bh = local_bh_disable();
    if queue.rq_affinity {
        // `DiskOps::complete` ends it: in a softirq, or here if blk-mq ends it on this CPU.
        // `rq` is the only reference to the request: this does not fail.
        warn_on!(Request::complete(rq).is_err());
    } else {
        end_request(rq, &bh);
    }
}

/// Fails `rq` of `queue`, whose completion the fault injection dropped ([`Served::end`]) and
/// which was just taken out of the queue's list, with `error`: `ETIMEDOUT` (`BLK_STS_TIMEOUT`)
/// when its timer expired, `EIO` when the server went away first.
pub(crate) fn end_lost(queue: &Queue, rq: ARef<Rq>, error: Error) {
    rq.data_ref().set(error.to_errno(), 0);
    route_end(queue, rq);
}

/// Ends `rq` with the result that [`Served::finish`] recorded, with bottom halves disabled (see
/// [`route_end`] for why). Every end of a request of the driver is this function's: it is the
/// only caller of the `Request::end` family, and it takes the proof that bottom halves are
/// disabled.
pub(crate) fn end_request(rq: ARef<Rq>, _bh: &LocalBhDisabled) {
    let (error, bytes) = {
        let result = rq.data_ref();
        (result.error.load(Relaxed), result.bytes.load(Relaxed))
    };

    let ret = if error < 0 {
        Request::end(rq, BlkStatus::from(Error::from_errno(error)))
    } else if rq.op() == ReqOp::ZoneAppend {
        let sector = rq.data_ref().append_sector.load(Relaxed);
        Request::end_zone_append(rq, sector)
    } else if matches!(rq.op(), ReqOp::Read | ReqOp::Write) && bytes < rq.nr_bytes() {
        // A short read, or a write that the server got in part: the rest is dispatched again.
        Request::end_partial(rq, bytes)
    } else {
        Request::end_ok(rq)
    };
    // The driver ends a request through its only reference, a `Served` or the one blk-mq
    // passes to `complete`, so this does not fail.
    warn_on!(ret.is_err());
}

/// Lends the request that the server serves in `slot` to `f`, a user copy, and returns what `f`
/// returns; `EINVAL` if the server serves no request with data there.
///
/// The request does not end while `f` runs: a commit or a failure meanwhile parks it in the slot
/// ([`Io::settle`]), and the last user of the request ends it, with the result recorded then.
pub(crate) fn with_lent<R>(queue: &Queue, slot: &Slot, f: impl FnOnce(&Rq) -> R) -> Result<R> {
    let rq = slot.lock().lend()?;
    let ret = f(&rq);
    // The request may end below, once this is its only other reference.
    drop(rq);
    give_back(queue, slot);
    Ok(ret)
}

/// Gives back a reference to the request of `slot` that [`Io::lend`] lent, which the caller
/// dropped, and ends the request if it was parked and this was its last user.
pub(crate) fn give_back(queue: &Queue, slot: &Slot) {
    let parked = {
        let mut io = slot.lock();
        // Every reference lent is counted, and given back once.
        if warn_on!(io.lent == 0) {
            return;
        }
        io.lent -= 1;
        if io.lent == 0 {
            io.parked.take()
        } else {
            None
        }
    };
    if let Some(served) = parked {
        served.end(queue);
    }
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

/// Returns the buffer address that the io descriptors of a slot's requests give the server, as
/// the C driver does: the one that the fetch or commit command named, or, with
/// `UBLK_F_AUTO_BUF_REG`, where their buffer is registered, in the encoding of the SQE's `addr`.
fn buf_addr(queue: &Queue, io_cmd: &IoCmd, auto_reg: AutoBufReg) -> u64 {
    if queue.auto_buf_reg {
        auto_reg.to_sqe_addr()
    } else {
        io_cmd.addr
    }
}

/// Checks the buffer address of a fetch command, or of the commit of a request of operation
/// `op`, as the C driver does: none with user copy; in copy mode, the buffer of the request's
/// data, which may be left out where `UBLK_F_NEED_GET_DATA` asks for it later (not for a read,
/// whose data the commit copies from it).
fn check_buf(queue: &Queue, addr: u64, op: Option<ReqOp>) -> Result {
    let ok = if !queue.copies_data() {
        // But for a zone append, whose commit says where its data landed.
        addr == 0 || op == Some(ReqOp::ZoneAppend)
    } else {
        addr != 0 || (queue.need_get_data && op != Some(ReqOp::Read))
    };
    if ok {
        Ok(())
    } else {
        Err(EINVAL)
    }
}

/// Checks that the io slot of a command other than a fetch belongs to the calling server thread
/// and holds a request, as the C driver does before it looks at the command.
pub(crate) fn check_owner(dev: &UblkDevice, io_cmd: &IoCmd) -> Result {
    let (_, slot) = slot_of(dev, io_cmd)?;
    slot.lock().check_owner()
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

    // Serializes fetch commands, and counts them for `UBLK_U_CMD_START_DEV`.
    let mut state = dev.state.lock();
    {
        let io = slot.lock();
        if queue.state() == QueueState::Stopping {
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
        if !matches!(io.state, IoState::Idle) {
            return Err(EINVAL);
        }
    }

    let task = ARef::from(&**current!());
    cmd.write_pdu(&pdu(io_cmd.q_id, io_cmd.tag));
    let (cmd, queued) = cmd.queue_cancelable(issue_flags);
    let old_task = {
        let mut io = slot.lock();
        io.addr = buf_addr(queue, io_cmd, auto_reg);
        io.auto_reg = auto_reg;
        io.state = IoState::Fetched(cmd);
        io.task.replace(task)
    };
    if let Server::Attached { nr_fetched, .. } = &mut state.server {
        *nr_fetched += 1;
    }
    UblkDevice::fetched_by_current(&mut state.server);
    state.mark_fetched(dev, queue, io_cmd.q_id, 1);
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
    let (queue, slot) = slot_of(dev, io_cmd)?;

    let (served, registered) = {
        let mut io = slot.lock();
        io.check_owner()?;
        // A write whose buffer the server was asked for takes `UBLK_U_IO_NEED_GET_DATA` first.
        let IoState::Serving(served) = &io.state else {
            return Err(EINVAL);
        };
        check_buf(queue, io_cmd.addr, Some(served.op()))?;
        let auto_reg = zerocopy::auto_buf_reg(queue, &cmd)?;
        let served = io.take_serving().ok_or(EBUSY)?;
        io.state = IoState::Committing;
        let registered = io
            .auto_registered
            .take()
            .map(|ring| (ring, io.auto_reg.index));
        io.auto_reg = auto_reg;
        (served, registered)
    };
    let (error, bytes) = commit_result(queue, &served, io_cmd.result, io_cmd.addr);
    served.set_append_sector(io_cmd.addr);

    // The buffer registered automatically goes, unless the server sent the commit through
    // another ring, as the C driver does: the server must then unregister it itself.
    if let Some((ring, index)) = registered {
        if ring == cmd.ring() {
            // A buffer that the server unregistered already is no error.
            let _ = cmd.unregister_buffer(index.into(), issue_flags);
        }
    }

    // Offer the slot again before the request ends, which may free its tag for the next request.
    cmd.write_pdu(&pdu(io_cmd.q_id, io_cmd.tag));
    let (fetch, queued) = cmd.queue_cancelable(issue_flags);
    let (aborted, served) = {
        let mut io = slot.lock();
        let addr = buf_addr(queue, io_cmd, io.auto_reg);
        let aborted = io.refetch(queue, fetch, addr);
        (aborted, io.settle(served, error, bytes))
    };
    if let Some(served) = served {
        served.end(queue);
    }
    if let Some(fetch) = aborted {
        fetch.done(Err(RES_ABORT), issue_flags);
    }
    Ok(queued.into())
}

/// Returns the result with which `served` ends, the server having committed it with `result`
/// (`__ublk_complete_rq()`): 0 or a negative errno, and the bytes transferred. In copy mode, the
/// data of a read is copied from the server's buffer at `addr`.
pub(crate) fn commit_result(queue: &Queue, served: &Served, result: i32, addr: u64) -> (i32, u32) {
    let len = served.len;
    if result < 0 {
        // Any negative value fails the request; one that is not an errno fails it with `EIO`.
        let error = Error::try_from_errno(result).unwrap_or(EIO);
        (error.to_errno(), 0)
    } else if served.op() == ReqOp::Read && result == 0 {
        // Nothing read fails the read.
        (EIO.to_errno(), 0)
    } else if !queue.copies_data() || served.shmem.is_some() {
        // As in the C driver, a read or a write whose data the server copied itself, or reached
        // through a registered buffer, ends whole.
        (0, served.nr_bytes())
    } else if served.op() == ReqOp::Read {
        // CAST: `result` is not negative.
        let len = (result as u32).min(len);
        // A fault ends the copy; what was copied before it makes a short read.
        let copied = UserSlice::new(UserPtr::from_addr(addr as usize), len as usize)
            .with_iov_source(|src| served.copy_from_iter(0, src))
            .and_then(|copied| copied)
            .unwrap_or(0);
        // CAST: `copied` is at most `len`, a `u32`.
        let copied = copied as u32;
        if copied == 0 {
            (EIO.to_errno(), 0)
        } else {
            (0, copied)
        }
    } else if served.op() == ReqOp::Write {
        // As in the C driver, the result of a write is not a byte count: the server wrote what
        // it was told about, all of the request unless its data could only be copied in part.
        (0, len)
    } else {
        (0, served.nr_bytes())
    }
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
    let mut served = {
        let mut io = slot.lock();
        io.check_owner()?;
        // Only a write that the server was asked about takes this command.
        match io.take() {
            IoState::NeedGetData(served) => {
                io.state = IoState::Delivering;
                served
            }
            other => {
                io.state = other;
                return Err(EINVAL);
            }
        }
    };

    let copy = copy_write(&served, io_cmd.addr);
    if let Copy::Whole | Copy::Part(_) = copy {
        let mut io = slot.lock();
        io.addr = io_cmd.addr;
        // Unlike the C driver, the descriptor of a write whose data lies in a registered buffer
        // keeps naming that buffer: it says `UBLK_IO_F_SHMEM_ZC`.
        if served.shmem.is_none() {
            io.desc.set_addr(io_cmd.addr);
        }
        if let Copy::Part(bytes) = copy {
            // As at dispatch, the server is told about the part that could be copied.
            served.len = bytes;
            io.desc.set_nr_sectors(bytes >> SECTOR_SHIFT);
        }
        io.state = IoState::Serving(served);
        return Ok(Issued::Done(0));
    }

    // The command waits for the next request of the slot, as a fetch does.
    cmd.write_pdu(&pdu(io_cmd.q_id, io_cmd.tag));
    let (fetch, queued) = cmd.queue_cancelable(issue_flags);
    let aborted = slot.lock().refetch(queue, fetch, io_cmd.addr);
    match copy {
        // As in the C driver, the write is dispatched again a little later.
        Copy::Nothing => served.requeue(),
        // As at dispatch, a buffer that is not user memory does not become one later.
        _ => served.finish(queue, EIO.to_errno(), 0),
    }
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
    // As in the C driver, every queue of the device stops taking requests, until the next server.
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
    let fetch = {
        let mut io = slot.lock();
        match io.take() {
            IoState::Fetched(fetch) if cmd.refers_to(&fetch) => {
                io.state = IoState::Aborted;
                fetch
            }
            other => {
                io.state = other;
                return;
            }
        }
    };
    fetch.done(Err(RES_ABORT), issue_flags);
}

/// The server is going away: requests of every queue fail from now on, or wait for the next
/// server (the C driver's `ublk_start_cancel()`).
pub(crate) fn start_cancel(dev: &UblkDevice) {
    for queue in dev.queues.iter() {
        queue.fail_requests();
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
    for queue in dev.queues.iter() {
        for slot in queue.slots() {
            let served = {
                let mut io = slot.lock();
                // The ring that held a buffer registered automatically is gone.
                io.auto_registered = None;
                io.take_serving()
                    .and_then(|served| io.without_server(queue, served, true))
            };
            if let Some(served) = served {
                served.end(queue);
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
        .any(|queue| queue.slots().any(|slot| slot.lock().lent > 0))
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
            // The task reference is not put under the lock.
            let task = {
                let mut io = slot.lock();
                if matches!(io.state, IoState::Aborted) {
                    io.state = IoState::Idle;
                }
                io.task.take()
            };
            drop(task);
            batch::reset(slot);
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
    for queue in dev.queues.iter() {
        for slot in queue.slots() {
            let mut io = slot.lock();
            match io.take() {
                IoState::Fetched(cmd) => {
                    io.state = IoState::Aborted;
                    cmd.complete_in_task(|cmd, issue_flags| cmd.done(Err(RES_ABORT), issue_flags))
                }
                other => io.state = other,
            }
        }
        batch::stop(queue);
    }
}
