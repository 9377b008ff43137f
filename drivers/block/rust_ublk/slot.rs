// SPDX-License-Identifier: GPL-2.0

//! The state machine of an io slot.
//!
//! ```text
//!   from        to                  by                                    method
//!   Idle        Fetched             UBLK_U_IO_FETCH_REQ                   Held::fetch
//!   Fetched     Dispatched          queue_rq                              Io::dispatch
//!   Fetched     Aborted             io_uring cancels, the device stops,   Io::abort_fetch
//!                                   a re-arm finds the queue not served
//!   Dispatched  Delivering          the server's task work                Io::start_delivery
//!   Delivering  Serving             the server gets the request           Held::serve
//!   Delivering  NeedGetData         the server is asked for a buffer      Io::ask_for_buffer
//!   NeedGetData Delivering          UBLK_U_IO_NEED_GET_DATA               Io::start_get_data
//!   Delivering  Fetched or Aborted  the write waits or fails              Held::rearm
//!   Delivering  Aborted             the server's task exits               Io::abort_delivery
//!   Serving     Committing          UBLK_U_IO_COMMIT_AND_FETCH_REQ        Io::start_commit
//!   Committing  Fetched or Aborted  the commit offers the slot again      Held::rearm
//!   Serving,
//!   NeedGetData,
//!   Queued      Idle                the server is gone                    Io::take_orphan
//!   Aborted     Idle                a new server may fetch                Held::reset
//!
//!   UBLK_F_BATCH_IO:
//!   Idle        Prepared            UBLK_U_IO_PREP_IO_CMDS                Io::prepare
//!   Prepared    Idle                the preparation is taken back         Io::unprepare
//!   Prepared    Queued              queue_rq                              Io::enqueue
//!   Queued      Prepared            the event queue is full               Io::dequeue
//!   Queued      Delivering          a fetch command takes the tag         Io::start_tag_delivery
//!   Delivering  Prepared            the delivery fails                    Io::end_tag_delivery
//!   Serving     Queued              the delivery is not posted            Held::undeliver
//!   Serving     Prepared            UBLK_U_IO_COMMIT_IO_CMDS              Io::start_batch_commit
//!   Prepared    Idle                a new server may prepare              Held::reset
//! ```
//!
//! The phase is a plain value, and what a phase owns (the server's command, the request) is kept
//! beside it, so that a change of phase is a store and runs no destructor. Each transition is a
//! method of [`Io`]; nothing else changes the phase. A transition that another context can race
//! with (a fetch, a dispatch, a commit, a cancellation) checks the phase it starts from and
//! refuses; one that can only follow a transition that the same caller made (serving a request
//! whose delivery it started) warns if the phase is not the one it expects.
//!
//! # Holding a slot
//!
//! A [`Slot`] has no lock. Its phase is also an atomic word, and a context reaches the slot's
//! state by moving that word from the phase it expects to "held" ([`Slot::hold`]): one
//! compare-and-exchange, which fails if the slot is in another phase or held by someone else.
//! The holder then owns the state, may sleep (copy user memory, register a buffer), and makes the
//! phase it left visible when it lets go ([`Held`]'s drop). Nobody waits for a held slot: each
//! phase has one context that moves it on (blk-mq's `queue_rq` a fetched slot, the server's task
//! a dispatched one, the server thread that fetched the slot one it serves), and a context that
//! finds the slot held is one that races with that owner and loses, as it would find the slot in
//! the phase that follows (a cancellation finds a fetched slot held, by `queue_rq` and then by the
//! task work that delivers its request). The teardown paths, which change the queue's state and
//! then visit every slot, could find a slot held by a context that then leaves it as it was:
//! `queue_rq` reads the state before it holds a slot, and the teardown paths wait for an RCU grace
//! period before they visit (blk-mq calls `queue_rq` in an RCU read-side critical section); a
//! commit that re-arms the slot reads the state once it let go ([`Held::rearm`]).
//!
//! A dispatched slot is not let go: `queue_rq` hands its hold over to the task work that delivers
//! the request ([`Held::hand_over`]), which takes it without an exchange ([`Slot::resume`]). So
//! the request crosses from `queue_rq` to the server's task with one exchange, and the server's
//! task owns the slot from then until the server gets the request. What happened before the task
//! work was queued happens before what the task work reaches through its command and data
//! ([`QueuedIoUringCmd::complete_in_task`]), which is how it reaches the slots: that orders the
//! hand-over. Nothing but that task work moves a dispatched slot on, and the other contexts, the
//! teardown paths included, find it held and leave it to that task work, as they would leave a
//! dispatched slot: it may stay held past the grace period that the teardown paths wait for,
//! which only covers holders that leave a slot as it was.
//!
//! A request that the server serves may be lent to user copies and registered buffers, which
//! give it back from any context. Lending does not hold the slot: how many references are out is
//! an atomic word of its own ([`Lending`]), beside the address to lend from and the request
//! parked until they come back, which that word hands from one context to the next. Copy mode,
//! where nothing is lent, never touches it.

use crate::{
    io::{Ending, Served},
    iodesc::DescWriter,
    queue::{NoServer, Queue, QueueState, Rq},
    uapi::{self, AutoBufReg, IoDesc},
    zoned,
};
use core::{cell::UnsafeCell, ptr::NonNull};
use kernel::{
    block::{ReqOp, SECTOR_SHIFT},
    current,
    io_uring::{QueuedIoUringCmd, RingId},
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
        rcu,
    },
    task::Task,
    warn_on,
};

/// Where an io slot is in its cycle.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum Phase {
    /// The server has no command for the slot.
    Idle,
    /// The server waits for a request with the slot's fetch command.
    Fetched,
    /// A request was handed to the server's task, which completes the fetch command
    /// ([`crate::dispatch`]).
    Dispatched,
    /// The server's task copies or registers the data of the request, which it took from the
    /// slot.
    Delivering,
    /// The server's commit of the slot's request runs: it took the request from the slot to end
    /// it, and offers the slot again. No `UBLK_U_IO_FETCH_REQ` takes the slot meanwhile.
    Committing,
    /// The server serves the request.
    Serving,
    /// The server owns the write, and was asked for the buffer of its data, which it names with
    /// `UBLK_U_IO_NEED_GET_DATA`.
    NeedGetData,
    /// The server's command for the slot completed with `UBLK_IO_RES_ABORT`: the server, which is
    /// going away, cannot fetch the slot again; the next server can.
    Aborted,
    /// `UBLK_F_BATCH_IO`: the server offered the slot, and it waits for a request. The queue's
    /// fetch commands deliver its requests ([`crate::batch`]).
    Prepared,
    /// `UBLK_F_BATCH_IO`: the slot's request waits in its queue's event queue for a fetch command
    /// to deliver its tag to the server.
    Queued,
}

/// The value of [`Slot::state`] while a context holds the slot.
const HELD: i32 = -1;

impl Phase {
    /// Returns the phase whose value [`Slot::state`] holds, or `None` while the slot is held.
    #[inline]
    fn from_word(word: i32) -> Option<Phase> {
        const IDLE: i32 = Phase::Idle.word();
        const FETCHED: i32 = Phase::Fetched.word();
        const DISPATCHED: i32 = Phase::Dispatched.word();
        const DELIVERING: i32 = Phase::Delivering.word();
        const COMMITTING: i32 = Phase::Committing.word();
        const SERVING: i32 = Phase::Serving.word();
        const NEED_GET_DATA: i32 = Phase::NeedGetData.word();
        const ABORTED: i32 = Phase::Aborted.word();
        const PREPARED: i32 = Phase::Prepared.word();
        const QUEUED: i32 = Phase::Queued.word();
        // Every phase has its arm: see `Phase::word`.
        Some(match word {
            IDLE => Phase::Idle,
            FETCHED => Phase::Fetched,
            DISPATCHED => Phase::Dispatched,
            DELIVERING => Phase::Delivering,
            COMMITTING => Phase::Committing,
            SERVING => Phase::Serving,
            NEED_GET_DATA => Phase::NeedGetData,
            ABORTED => Phase::Aborted,
            PREPARED => Phase::Prepared,
            QUEUED => Phase::Queued,
            _ => return None,
        })
    }

    /// Returns the value of [`Slot::state`] in this phase. The match names every phase, so that a
    /// phase added to the enum fails to build here, next to [`Phase::from_word`], which must map
    /// it back.
    #[inline]
    const fn word(self) -> i32 {
        match self {
            Phase::Idle
            | Phase::Fetched
            | Phase::Dispatched
            | Phase::Delivering
            | Phase::Committing
            | Phase::Serving
            | Phase::NeedGetData
            | Phase::Aborted
            | Phase::Prepared
            | Phase::Queued => self as i32,
        }
    }
}

/// An io slot.
///
/// # Invariants
///
/// - `cmd` is `Some` in [`Phase::Fetched`], and in [`Phase::Dispatched`] unless the slot is the
///   first of a batch ([`Io::take_head_cmd`]); `None` in every other phase.
/// - `served` is `Some` in [`Phase::Dispatched`], [`Phase::Serving`], [`Phase::NeedGetData`]
///   and [`Phase::Queued`]; `None` in every other phase, when the function that runs the
///   transition holds the request.
/// - `next` is `None` but in [`Phase::Dispatched`].
pub(crate) struct Io {
    phase: Phase,
    cmd: Option<QueuedIoUringCmd>,
    served: Option<Served>,
    /// In [`Phase::Dispatched`]: the tag of the next io slot of the batch.
    next: Option<u16>,
    /// The server's buffer for the data of the slot's requests.
    addr: u64,
    /// Where the buffer of the slot's next request goes (`UBLK_F_AUTO_BUF_REG`).
    auto_reg: AutoBufReg,
    /// The ring that the buffer of the slot's request was registered with automatically, which
    /// the commit of the request unregisters it from if it comes through the same ring.
    auto_registered: Option<RingId>,
    /// The server thread that fetched the slot, the only one that may send its other commands.
    task: Option<ARef<Task>>,
    /// The writer of the slot's io descriptor.
    desc: DescWriter,
}

/// What [`Held::undeliver`] leaves to its caller: the index of the buffer registered automatically
/// for the request, which the caller unregisters.
pub(crate) struct Undelivered {
    pub(crate) auto_registered: Option<u16>,
}

/// What a slot hands to the task work that delivers its request.
pub(crate) struct Delivery {
    pub(crate) served: Served,
    /// The slot's own fetch command, unless it is the first slot of its batch.
    pub(crate) cmd: Option<QueuedIoUringCmd>,
    /// The tag of the next io slot of the batch.
    pub(crate) next: Option<u16>,
}

impl Io {
    pub(crate) fn new(desc: DescWriter) -> Self {
        // INVARIANT: `Idle` holds no command and no request, and nothing is lent.
        Self {
            phase: Phase::Idle,
            cmd: None,
            served: None,
            next: None,
            addr: 0,
            auto_reg: AutoBufReg::default(),
            auto_registered: None,
            task: None,
            desc,
        }
    }

    /// Returns the server's buffer for the data of the slot's requests.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }

    /// Returns the server thread that fetched the slot, if any; only compared, never
    /// dereferenced.
    pub(crate) fn task_ptr(&self) -> *const Task {
        self.task
            .as_deref()
            .map_or(core::ptr::null(), core::ptr::from_ref)
    }

    /// Returns the slot's fetch command, while the slot waits with one for its request or its
    /// request waits for the task work of its batch.
    pub(crate) fn cmd(&self) -> Option<&QueuedIoUringCmd> {
        self.cmd.as_ref()
    }

    /// Returns the request that the server serves, if it does.
    pub(crate) fn serving(&self) -> Option<&Served> {
        match self.phase {
            Phase::Serving => self.served.as_ref(),
            _ => None,
        }
    }

    /// `Idle` -> `Fetched`: keeps `cmd`, the first fetch command of the calling server thread
    /// for the slot, with the buffer `addr` and `auto_reg` for its requests, and returns the
    /// thread that fetched the slot before, whose reference the caller puts once it let go of the
    /// slot and of the device lock.
    ///
    /// The caller checked that the slot is idle; a slot that is not keeps its state, and `cmd`
    /// is returned.
    fn fetch(
        &mut self,
        cmd: QueuedIoUringCmd,
        addr: u64,
        auto_reg: AutoBufReg,
    ) -> Result<Option<ARef<Task>>, QueuedIoUringCmd> {
        if warn_on!(self.phase != Phase::Idle) {
            return Err(cmd);
        }
        self.addr = addr;
        self.auto_reg = auto_reg;
        // INVARIANT: `Fetched` holds the command.
        self.cmd = Some(cmd);
        self.phase = Phase::Fetched;
        Ok(self.task.replace(ARef::from(&**current!())))
    }

    /// `Idle` -> `Prepared` (`UBLK_F_BATCH_IO`): the server offers the slot, with the buffer
    /// `addr` and `auto_reg` for its requests. `EINVAL` if the slot was offered already.
    pub(crate) fn prepare(&mut self, addr: u64, auto_reg: AutoBufReg) -> Result {
        if self.phase != Phase::Idle {
            return Err(EINVAL);
        }
        // INVARIANT: `Prepared`, as `Idle`, holds no command and no request.
        self.phase = Phase::Prepared;
        self.addr = addr;
        self.auto_reg = auto_reg;
        Ok(())
    }

    /// `Prepared` -> `Idle`: takes back an offer that [`Io::prepare`] took.
    pub(crate) fn unprepare(&mut self) -> bool {
        if self.phase != Phase::Prepared {
            return false;
        }
        // INVARIANT: `Idle`, as `Prepared`, holds no command and no request.
        self.phase = Phase::Idle;
        true
    }

    /// `Fetched` -> `Dispatched`: hands `served` to the server's task through the slot's fetch
    /// command, after writing its descriptor `desc`. The command stays in the slot (the first
    /// slot of a batch gives it to the batch, [`Io::take_head_cmd`]). If the slot has no fetch
    /// command, `served` is returned.
    #[inline]
    pub(crate) fn dispatch(&mut self, served: Served, desc: &IoDesc) -> Result<(), Served> {
        if self.phase != Phase::Fetched {
            return Err(served);
        }
        self.desc.write(desc);
        // INVARIANT: `Dispatched` holds the request, and the command.
        self.served = Some(served);
        self.next = None;
        self.phase = Phase::Dispatched;
        Ok(())
    }

    /// Takes the fetch command of a dispatched slot, the first of its batch, whose task work
    /// delivers the batch.
    pub(crate) fn take_head_cmd(&mut self) -> Option<QueuedIoUringCmd> {
        if self.phase != Phase::Dispatched {
            return None;
        }
        // INVARIANT: The first slot of a batch may hold no command while dispatched.
        self.cmd.take()
    }

    /// Chains the dispatched slot `next` after this one, the last of its batch so far.
    fn link(&mut self, next: u16) {
        // The batch's task work is not queued yet, so its slots stay dispatched.
        if !warn_on!(self.phase != Phase::Dispatched) {
            self.next = Some(next);
        }
    }

    /// `Dispatched` -> `Delivering`: the task work of the batch takes the request, the fetch
    /// command and the link to the next slot.
    pub(crate) fn start_delivery(&mut self) -> Option<Delivery> {
        if self.phase != Phase::Dispatched {
            return None;
        }
        let served = self.served.take()?;
        // INVARIANT: `Delivering` holds neither the command nor the request.
        self.phase = Phase::Delivering;
        Some(Delivery {
            served,
            cmd: self.cmd.take(),
            next: self.next.take(),
        })
    }

    /// `Prepared` -> `Queued` (`UBLK_F_BATCH_IO`): `served` waits in the queue's event queue,
    /// after its descriptor `desc` was written. If the slot was not offered, `served` is
    /// returned.
    pub(crate) fn enqueue(&mut self, served: Served, desc: &IoDesc) -> Result<(), Served> {
        if self.phase != Phase::Prepared {
            return Err(served);
        }
        self.desc.write(desc);
        // INVARIANT: `Queued` holds the request.
        self.served = Some(served);
        self.phase = Phase::Queued;
        Ok(())
    }

    /// `Queued` -> `Prepared`: takes back the request that [`Io::enqueue`] queued.
    pub(crate) fn dequeue(&mut self) -> Option<Served> {
        if self.phase != Phase::Queued {
            return None;
        }
        // INVARIANT: `Prepared` holds no request: it is taken.
        self.phase = Phase::Prepared;
        self.served.take()
    }

    /// `Queued` -> `Delivering`: a fetch command takes the request to deliver its tag, and the
    /// descriptor is written afresh (a delivery whose completion could not be posted may have
    /// changed it). Returns the request and the server's buffer.
    pub(crate) fn start_tag_delivery(&mut self) -> Option<(Served, u64)> {
        if self.phase != Phase::Queued {
            return None;
        }
        let mut served = self.served.take()?;
        // INVARIANT: `Delivering` holds no request: it is taken.
        self.phase = Phase::Delivering;
        served.tell_all();
        if let Some(desc) = describe(&served, self.addr) {
            self.desc.write(&desc);
        }
        Some((served, self.addr))
    }

    /// `Delivering` -> `Serving`: the server gets the request.
    fn serve(&mut self, served: Served) {
        warn_on!(self.phase != Phase::Delivering);
        // INVARIANT: `Serving` holds the request.
        self.served = Some(served);
        self.phase = Phase::Serving;
    }

    /// `Delivering` -> `Serving`, for a write of which only `bytes` could be copied to the
    /// server's buffer: the server is told about that part only, and the rest is dispatched
    /// again once it is done.
    fn serve_part(&mut self, mut served: Served, bytes: u32) {
        served.tell_part(bytes);
        self.desc.set_nr_sectors(bytes >> SECTOR_SHIFT);
        self.serve(served);
    }

    /// `Delivering` -> `NeedGetData`: the server is asked for the buffer of the write's data.
    pub(crate) fn ask_for_buffer(&mut self, served: Served) {
        warn_on!(self.phase != Phase::Delivering);
        // INVARIANT: `NeedGetData` holds the request.
        self.served = Some(served);
        self.phase = Phase::NeedGetData;
    }

    /// `NeedGetData` -> `Delivering`: `UBLK_U_IO_NEED_GET_DATA` takes the write to copy its data.
    /// `EINVAL` if the server was not asked for a buffer.
    pub(crate) fn start_get_data(&mut self) -> Result<Served> {
        if self.phase != Phase::NeedGetData {
            return Err(EINVAL);
        }
        let served = self.served.take().ok_or(EINVAL)?;
        // INVARIANT: `Delivering` holds no request: it is taken.
        self.phase = Phase::Delivering;
        Ok(served)
    }

    /// `Delivering` -> `Serving` after `UBLK_U_IO_NEED_GET_DATA` copied the data of the write to
    /// the buffer `addr`: all of it, or the first `part` bytes.
    fn serve_got_data(&mut self, served: Served, addr: u64, part: Option<u32>) {
        self.addr = addr;
        // The descriptor of a write whose data lies in a registered buffer keeps naming that
        // buffer: it says `UBLK_IO_F_SHMEM_ZC`.
        if served.shmem().is_none() {
            self.desc.set_addr(addr);
        }
        match part {
            Some(bytes) => self.serve_part(served, bytes),
            None => self.serve(served),
        }
    }

    /// `Serving` -> `Committing`: the server's commit takes the request, and names the buffer
    /// `auto_reg` of the next one. Returns the request and the ring and index of its buffer
    /// registered automatically, if any. `EBUSY` if the server does not serve a request in the
    /// slot.
    #[inline]
    pub(crate) fn start_commit(
        &mut self,
        auto_reg: AutoBufReg,
    ) -> Result<(Served, Option<(RingId, u16)>)> {
        self.take_committed(Phase::Committing, auto_reg)
    }

    /// `Serving` -> `Prepared` (`UBLK_F_BATCH_IO`): as [`Io::start_commit`], for a slot whose
    /// next request reaches the server without a command of its own, and whose buffer is now
    /// `addr`.
    pub(crate) fn start_batch_commit(
        &mut self,
        addr: u64,
        auto_reg: AutoBufReg,
    ) -> Result<(Served, Option<(RingId, u16)>)> {
        let taken = self.take_committed(Phase::Prepared, auto_reg)?;
        self.addr = addr;
        Ok(taken)
    }

    fn take_committed(
        &mut self,
        to: Phase,
        auto_reg: AutoBufReg,
    ) -> Result<(Served, Option<(RingId, u16)>)> {
        if self.phase != Phase::Serving {
            return Err(EBUSY);
        }
        let served = self.served.take().ok_or(EBUSY)?;
        // INVARIANT: Neither `Committing` nor `Prepared` holds a command or a request.
        self.phase = to;
        let registered = self
            .auto_registered
            .take()
            .map(|ring| (ring, self.auto_reg.index));
        self.auto_reg = auto_reg;
        Ok((served, registered))
    }

    /// `Delivering` or `Committing` -> `Fetched`: keeps `fetch`, a command that the server sent
    /// with the buffer `addr`, to wait for the slot's next request. The holder checks that the
    /// queue is served once it let go ([`Held::rearm`]).
    fn rearm(&mut self, fetch: QueuedIoUringCmd, addr: u64) {
        warn_on!(!matches!(self.phase, Phase::Delivering | Phase::Committing));
        self.addr = addr;
        // INVARIANT: `Fetched` holds the command.
        self.cmd = Some(fetch);
        self.phase = Phase::Fetched;
    }

    /// `Delivering` -> `Aborted`: the server's task exits, and `fetch` completes with
    /// `UBLK_IO_RES_ABORT`: the slot is free for the next server to fetch.
    pub(crate) fn abort_delivery(&mut self) {
        warn_on!(self.phase != Phase::Delivering);
        // INVARIANT: `Delivering`, which the caller's delivery left, holds nothing.
        self.phase = Phase::Aborted;
    }

    /// `Delivering` -> `Prepared` (`UBLK_F_BATCH_IO`): the delivery failed, and the slot waits
    /// for its next request.
    pub(crate) fn end_tag_delivery(&mut self) {
        warn_on!(self.phase != Phase::Delivering);
        // INVARIANT: `Delivering`, which the caller's delivery left, holds nothing.
        self.phase = Phase::Prepared;
    }

    /// `Serving` -> `Queued` (`UBLK_F_BATCH_IO`): takes back the delivery of the request, whose
    /// completion could not be posted. Returns whether it was delivered, and the index of its
    /// buffer registered automatically, which the caller unregisters.
    fn undeliver(&mut self) -> Option<Undelivered> {
        if self.phase != Phase::Serving || self.served.is_none() {
            return None;
        }
        // INVARIANT: `Queued`, as `Serving`, holds the request.
        self.phase = Phase::Queued;
        Some(Undelivered {
            auto_registered: self.auto_registered.take().map(|_| self.auto_reg.index),
        })
    }

    /// `Fetched` -> `Aborted`: takes the fetch command, if `pred` says it is the one to abort,
    /// for the caller to complete with `UBLK_IO_RES_ABORT`.
    pub(crate) fn abort_fetch(
        &mut self,
        pred: impl FnOnce(&QueuedIoUringCmd) -> bool,
    ) -> Option<QueuedIoUringCmd> {
        if self.phase != Phase::Fetched || !self.cmd.as_ref().is_some_and(pred) {
            return None;
        }
        // INVARIANT: `Aborted` holds no command: it is taken.
        self.phase = Phase::Aborted;
        self.cmd.take()
    }

    /// `Serving`, `NeedGetData` or `Queued` -> `Idle`: the server that owned the request, or
    /// would have been told about it, is gone; takes the request. The ring that held a buffer
    /// registered automatically is gone too.
    pub(crate) fn take_orphan(&mut self) -> Option<Served> {
        self.auto_registered = None;
        match self.phase {
            Phase::Serving | Phase::NeedGetData | Phase::Queued => {
                // INVARIANT: `Idle` holds no request: it is taken.
                self.phase = Phase::Idle;
                self.served.take()
            }
            _ => None,
        }
    }

    /// `Aborted` or `Prepared` -> `Idle`: the server is gone, and a new one may fetch or offer
    /// the slot. Returns the thread that fetched it, whose reference the caller puts once it let
    /// go of the slot.
    fn reset(&mut self) -> Option<ARef<Task>> {
        if matches!(self.phase, Phase::Aborted | Phase::Prepared) {
            // INVARIANT: Neither holds a command or a request, nor does `Idle`.
            self.phase = Phase::Idle;
        }
        self.task.take()
    }

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

/// What an io slot lent of its request, and the request that waits for it to come back.
///
/// The request that the server serves is lent to user copies and registered buffers, from any
/// context, beside the slot's holder and the request's owner (the context that holds its
/// [`Served`]). How many references are out and two flags are one atomic word; the address of
/// the request to lend and the request that waits for the references to come back are kept
/// beside it, and that word says who may reach them. Lending and giving back are one atomic
/// exchange each. The slot keeps no reference of its own to lend from: the request stays in
/// flight while it is marked lent ([`Served::mark_lent`]), and it stays marked until the slot
/// lends no more of it and the count is back at 0 ([`Lending::close`], or the last
/// [`Lending::give_back`] of a parked request).
///
/// # Invariants
///
/// Let `count` be `word & COUNT`.
/// - `count` is the number of references to the slot's request that [`Lending::lend`] and
///   [`Lending::lend_auto`] handed out and that were not given back yet, and of the borrows of
///   `lendable` that [`Lending::lend_for`] runs.
/// - While `OPEN` is set, `lendable` holds the address of the slot's request, which the server
///   serves.
/// - While `lendable` holds the address of a request, the [`Served`] that owns that request is
///   marked lent ([`Served::mark_lent`]), or was dropped marked: the request is in flight.
/// - `lendable` is read by [`Lending::lend`] and [`Lending::lend_for`] only after they counted a
///   reference while `OPEN` was set, until that reference is given back, and by the request's
///   owner. It is written by the
///   request's owner only while it is `None` and `OPEN` is clear, and emptied only by the context
///   that finds `count` at 0 with `OPEN` clear and takes the request over, which then unmarks
///   it: its owner ([`Lending::close`]), or, for a parked request, the last
///   [`Lending::give_back`]. So it holds the address of the slot's request, in flight, while a
///   counted reference is out, and is not written while it is read.
/// - `PARKED` is set only while `OPEN` is clear and `count > 0`: `parked` then holds the slot's
///   request, which ended while it was lent, with its result recorded, and only the
///   [`Lending::give_back`] that brings `count` to 0 takes it. The parked request keeps its tag,
///   so no other request reaches the slot until it ends. While `PARKED` is clear, only the
///   request's owner reaches `parked`, which is `None` but while [`Lending::settle`] runs.
/// - `word` is 0 and both cells are `None` in a slot that does not lend (`Slot::lends`).
pub(crate) struct Lending {
    word: Atomic<u32>,
    /// The address of the request that the server serves, with data, which the slot may lend.
    lendable: UnsafeCell<Option<NonNull<Rq>>>,
    /// The request, with its result recorded, that ended while it was lent: the last user of it
    /// ends it.
    parked: UnsafeCell<Option<Served>>,
}

// SAFETY: The cells are reached as the type invariants say: by one context at a time for writes
// (the request's owner, or the one context that takes a parked request over), with the word's
// atomic exchanges ordering the hand-overs (release when the address to lend from or the parked
// request is published, acquire when it is reached), and shared reads of `lendable` only while no
// one writes it. Lenders of one request turn the address in `lendable` into `&Rq` on any thread
// at once, and `Rq` is `Sync`. The parked request moves to the context that takes it over
// (`Served` is `Send`).
unsafe impl Sync for Lending {}

// SAFETY: The address in `lendable` is only turned into `&Rq`, which may be used on any thread
// (`Rq` is `Sync`); the parked request may move to another thread (`Served` is `Send`).
unsafe impl Send for Lending {}

const _: () = {
    const fn is_send<T: Send>() {}
    const fn is_sync<T: Sync>() {}
    is_sync::<Rq>();
    is_send::<Served>();
};

impl Lending {
    /// The slot lends its request: [`Lending::lend`] may count one more reference.
    const OPEN: u32 = 1 << 31;
    /// The request ended while it was lent, and waits in `parked` for the last reference.
    const PARKED: u32 = 1 << 30;
    /// The bits of the word that count the references lent.
    const COUNT: u32 = Self::PARKED - 1;

    fn new() -> Self {
        // INVARIANT: Nothing is lent or parked.
        Self {
            word: Atomic::new(0),
            lendable: UnsafeCell::new(None),
            parked: UnsafeCell::new(None),
        }
    }

    /// Changes the word with `change`, which gets its value and returns the new one, or `None` to
    /// leave it as it is: a fully ordered exchange, or, if it is left, an acquire read. Returns the
    /// value it changed, or left.
    #[inline]
    fn update(&self, mut change: impl FnMut(u32) -> Option<u32>) -> u32 {
        let mut cur = self.word.load(Acquire);
        loop {
            let Some(new) = change(cur) else {
                return cur;
            };
            match self.word.cmpxchg(cur, new, Full) {
                Ok(_) => return cur,
                // A failed exchange reads `Relaxed`: read again with acquire ordering, so that
                // a value left unchanged is always an acquire read.
                Err(_) => cur = self.word.load(Acquire),
            }
        }
    }

    /// The slot lends `served`, the request that the server gets, from now on. Called by the
    /// request's owner, which delivers it.
    fn open(&self, served: &mut Served) {
        // Only the owner sets and clears `OPEN`: its own read of the flag is exact.
        if warn_on!(self.word.load(Relaxed) & Self::OPEN != 0) {
            return;
        }
        // SAFETY: The owner reads `lendable`, which is only written by the owner, and emptied by
        // a context that takes over a parked request: this one is not parked, its owner holds it.
        let cur = unsafe { *self.lendable.get() };
        match cur {
            // A delivery of the same request that was undone (`UBLK_F_BATCH_IO`) left it for the
            // references lent then; it stays until the request ends.
            Some(rq) => {
                // Another request would be lent for this one: lend nothing.
                if warn_on!(!core::ptr::eq::<Rq>(rq.as_ptr(), &**served)) {
                    return;
                }
            }
            None => {
                let rq = served.mark_lent();
                // SAFETY: `lendable` is `None` and `OPEN` is clear: by the type invariants, no
                // lender reads it (one that counted while `OPEN` was set finds it `Some` until
                // its reference is back), and the owner, this context, is the only writer.
                unsafe { *self.lendable.get() = Some(rq) };
            }
        }
        // INVARIANT: `lendable` holds the address of the request that the server gets, marked
        // lent, before `OPEN` is set. `OPEN` is clear (above), so adding it sets it; the exchange
        // is fully ordered, a release for the address written above.
        self.word.fetch_add(Self::OPEN, Full);
    }

    /// Counts a reference to the request that the server serves, to be given back with
    /// [`Lending::give_back`]; `EINVAL` if the slot does not lend one now.
    #[inline]
    fn count(&self) -> Result {
        let old = self.update(|cur| {
            if cur & Self::OPEN == 0 || cur & Self::COUNT == Self::COUNT {
                None
            } else {
                Some(cur + 1)
            }
        });
        if old & Self::OPEN == 0 {
            return Err(EINVAL);
        }
        // Each lender holds a reference to a request with a tag: never that many.
        if warn_on!(old & Self::COUNT == Self::COUNT) {
            return Err(EBUSY);
        }
        Ok(())
    }

    /// Lends a reference to the request that the server serves; `EINVAL` if the slot does not
    /// lend one now.
    #[inline]
    fn lend(&self) -> Result<ARef<Rq>> {
        self.count()?;
        // SAFETY: This context counted a reference while `OPEN` was set, which it gives back only
        // after this returns: by the type invariants, `lendable` holds the slot's request and is
        // not written meanwhile. The exchange in `count` was fully ordered, after the one that
        // set `OPEN` once `lendable` was written.
        let lendable = unsafe { *self.lendable.get() };
        match lendable {
            // INVARIANT: Counted above, until it is given back.
            // SAFETY: By the type invariants, the address is that of the slot's request, in
            // flight while this context's count is out.
            Some(rq) => Ok(ARef::from(unsafe { rq.as_ref() })),
            // Never, by the type invariants. Were it to happen, the count would stay: the request
            // would never end, and the device could not be deleted.
            None => {
                warn_on!(true);
                Err(EINVAL)
            }
        }
    }

    /// Lends the request that the server serves to `f`, by reference, and gives it back once `f`
    /// returned: what [`Lending::lend`] and [`Lending::give_back`] do around `f`, without a
    /// reference of its own (no request refcount taken and put). Returns what `f` returns, and
    /// the parked request if this was its last user: the caller ends it. `EINVAL` if the slot
    /// does not lend its request now.
    #[inline]
    fn lend_for<R>(&self, f: impl FnOnce(&Rq) -> R) -> Result<(R, Option<Ending>)> {
        self.count()?;
        // SAFETY: As in `lend`: counted while `OPEN` was set, and given back only below, after the
        // last use of this reference; `lendable` is not written until then.
        let lendable = unsafe { *self.lendable.get() };
        let ret = match lendable {
            // SAFETY: By the type invariants, the address is that of the slot's request, in
            // flight until the count taken above is given back, after `f` returned; the borrow
            // does not outlive `f`.
            Some(rq) => f(unsafe { rq.as_ref() }),
            // Never, by the type invariants; as in `lend`, the count stays.
            None => {
                warn_on!(true);
                return Err(EINVAL);
            }
        };
        Ok((ret, self.give_back()))
    }

    /// Counts a reference to the request, which its owner hands out itself (to the automatic
    /// registration of its buffer), whether the slot lends it or not yet. `false` if the count
    /// is full: then the caller hands out nothing.
    fn lend_auto(&self) -> bool {
        // INVARIANT: If counted, the caller hands out one reference, given back with
        // `give_back` or `unlend_auto`.
        let old = self.update(|cur| (cur & Self::COUNT != Self::COUNT).then_some(cur + 1));
        // Each lender holds a reference to a request with a tag: never that many.
        !warn_on!(old & Self::COUNT == Self::COUNT)
    }

    /// Takes back the count of a reference that [`Lending::lend_auto`] counted and that the
    /// owner got back (the registration failed and dropped it).
    fn unlend_auto(&self) {
        // The owner holds the request: it is not parked, so the count reaches 0 with no one to
        // end it, as it should.
        let old = self.update(|cur| (cur & Self::COUNT != 0).then(|| cur - 1));
        warn_on!(old & Self::COUNT == 0);
    }

    /// The slot lends nothing more of `served`, its request. Returns whether something lent is
    /// still out; if nothing is, the address to lend from goes, and the request is no longer
    /// marked lent. Called by the request's owner.
    fn close(&self, served: &mut Served) -> bool {
        // Only the owner sets and clears `OPEN`: its own read of the flag is exact. Clearing it
        // is a fully ordered exchange, and a read of a word left as it is an acquire read.
        let old = if self.word.load(Relaxed) & Self::OPEN != 0 {
            self.word.fetch_sub(Self::OPEN, Full)
        } else {
            self.word.load(Acquire)
        };
        let lent = old & Self::COUNT > 0;
        if !lent {
            // SAFETY: `OPEN` is clear and `count` was 0 with it: no lender reads `lendable`, and
            // none that reads it counts one more until the owner, this context, opens it again
            // (`lend_auto`, which only the owner calls, does not read it).
            let lendable = unsafe { (*self.lendable.get()).take() };
            if let Some(rq) = lendable {
                // `lendable` held another request's address, which `Lending::open` refuses, so
                // this cannot happen: `served` was not marked by this slot, and the other
                // request's owner stays marked.
                if !warn_on!(!core::ptr::eq::<Rq>(rq.as_ptr(), &**served)) {
                    // SAFETY: The address is gone from `lendable`, and every lender that read it
                    // gave its count back (above): nothing uses it any more.
                    unsafe { served.unmark_lent() };
                }
            }
        }
        lent
    }

    /// Records the result of `served`, the slot's request, and returns it to be ended now,
    /// unless something lent of it is still out: then it is parked, and the last reference given
    /// back ends it. The slot lends no more of it.
    fn settle(&self, mut served: Served, error: i32, bytes: u32) -> Option<Ending> {
        if !self.close(&mut served) {
            return Some(Ending::new(served, error, bytes));
        }
        served.record(error, bytes);
        // SAFETY: `PARKED` is clear (the owner, this context, sets it below), so by the type
        // invariants only the owner reaches `parked`.
        let parked = unsafe { &mut *self.parked.get() };
        // A slot has one request at a time: none is parked yet. Were one parked, this one would
        // not be parked over it.
        if warn_on!(parked.is_some()) {
            return Some(Ending::new(served, error, bytes));
        }
        *parked = Some(served);
        // INVARIANT: `parked` holds the request before `PARKED` is set, with `count > 0`.
        let old = self.update(|cur| (cur & Self::COUNT > 0).then_some(cur | Self::PARKED));
        if old & Self::COUNT > 0 {
            return None;
        }
        // Everything lent came back meanwhile, and the request was not parked.
        self.take_over()
    }

    /// Gives back a reference that [`Lending::lend`] or [`Lending::lend_auto`] counted, which the
    /// caller dropped. Returns the parked request if this was its last reference out: the caller
    /// ends it.
    fn give_back(&self) -> Option<Ending> {
        let old = self.update(|cur| match cur & Self::COUNT {
            0 => None,
            // INVARIANT: The last reference of a parked request: the word is reset for the slot's
            // next request, and this context takes it over.
            1 if cur & Self::PARKED != 0 => Some(0),
            _ => Some(cur - 1),
        });
        // Every reference lent is counted, and given back once.
        if warn_on!(old & Self::COUNT == 0) {
            return None;
        }
        if old & Self::COUNT == 1 && old & Self::PARKED != 0 {
            self.take_over()
        } else {
            None
        }
    }

    /// Takes the request over once `count` reached 0 with `OPEN` clear, for the context that saw
    /// it reach 0: the owner of a request that was not parked, or the last lender of a parked
    /// one. Returns the request to end.
    fn take_over(&self) -> Option<Ending> {
        // SAFETY: The caller saw `count` at 0 with `OPEN` clear, with acquire ordering (a fully
        // ordered exchange, or an acquire read): every earlier reader of `lendable` gave its
        // reference back before, and no lender counts one more. By the type invariants, this
        // context is the only one to reach `lendable`, and `parked` (written before `PARKED` by the
        // owner's exchange, which came before, or by the caller itself).
        let (lendable, parked) = unsafe { (&mut *self.lendable.get(), &mut *self.parked.get()) };
        lendable.take();
        let mut served = parked.take()?;
        // SAFETY: The address is gone from `lendable`, and every lender that read it gave its
        // count back (above): nothing uses it any more.
        unsafe { served.unmark_lent() };
        Some(Ending::recorded(served))
    }

    /// Returns whether user copies or registered buffers hold the slot's request.
    fn is_lent(&self) -> bool {
        self.word.load(Relaxed) & Self::COUNT > 0
    }
}

/// A reference that [`Held::lend_auto`] counted, which only [`Held::registered_auto`] takes: a
/// count of the slot's lending word is given back once, by whoever took it.
#[must_use = "the count must go to the registered buffer or back to the slot"]
pub(crate) struct AutoLent<'a>(&'a Slot);

/// An io slot: the state of one tag of a queue.
///
/// # Invariants
///
/// - While a [`Held`] or a [`Handed`] of the slot exists, or a hold that [`Held::hand_over`]
///   handed over waits for [`Slot::resume`], `state` is [`HELD`]; while `state` is a phase, it
///   is the phase of `io`. (A [`Held`] that is leaked leaves the slot held for good, and so does
///   a hold handed over whose task work is never queued.)
/// - `io` is only reached through the [`Held`] or the [`Handed`] that holds the slot.
/// - `task` points to the task that `io` names as the server thread that fetched the slot, or is
///   null if it names none; it is never dereferenced.
///
/// Each slot starts at a multiple of 64 bytes, a cache line on most machines: the slots of
/// neighbouring tags are written by the CPUs that submit their requests and the server threads
/// that serve them, which differ.
#[pin_data]
#[repr(align(64))]
pub(crate) struct Slot {
    state: Atomic<i32>,
    task: ThreadId,
    io: UnsafeCell<Io>,
    /// Whether the slot lends its requests: the server reaches their data itself.
    lends: bool,
    lending: Lending,
}

// SAFETY: `io` is only reached through the one `Held` or `Handed` that holds the slot, which the
// atomic `state` hands to one context at a time (with acquire and release ordering), as a lock
// would; a hold handed over ([`Held::hand_over`]) passes to the task work that takes it over
// ([`Slot::resume`]), which the queueing of the task work orders after the hand-over for what it
// reaches through its command and data, as it reaches the slot. `Io` may move between threads. A
// shared `Held` hands out `&Io`, which other threads may then use at once, so `Io` must be `Sync`
// too (both checked below). The other fields are `Sync`.
unsafe impl Sync for Slot {}

const _: () = {
    const fn is_send<T: Send>() {}
    const fn is_sync<T: Sync>() {}
    is_send::<Io>();
    is_sync::<Io>();
};

/// The server thread that fetched an io slot, as an address that is only compared, never
/// dereferenced.
struct ThreadId(Atomic<*const Task>);

// SAFETY: The address is only loaded, stored and compared, which any thread may do.
unsafe impl Send for ThreadId {}

// SAFETY: See `Send`: the address is only loaded, stored and compared, atomically.
unsafe impl Sync for ThreadId {}

impl Slot {
    /// Returns the initializer of an io slot whose io descriptor `desc` writes, which fails with
    /// `EINVAL` if there is none. The slot lends its requests if `lends`.
    pub(crate) fn new(desc: Option<DescWriter>, lends: bool) -> impl PinInit<Self, Error> {
        // INVARIANT: The slot is idle and not held, names no thread, and lent nothing.
        try_pin_init!(Self {
            state: Atomic::new(Phase::Idle.word()),
            task: ThreadId(Atomic::new(core::ptr::null())),
            io: UnsafeCell::new(Io::new(desc.ok_or(EINVAL)?)),
            lends,
            lending: Lending::new(),
        }? Error)
    }

    /// Holds the slot if it is in phase `from`, and returns the guard that reaches its state.
    /// `None` if it is in another phase, or held.
    #[inline]
    pub(crate) fn hold(&self, from: Phase) -> Option<Held<'_>> {
        // The exchange pairs with the release of the previous holder; it is fully ordered, so
        // that a holder's later read of its queue's state is ordered after it, as against the
        // visits of the teardown paths, which change the state first.
        self.state.cmpxchg(from.word(), HELD, Full).ok()?;
        // INVARIANT: The exchange moved `state` from a phase to `HELD`, for this guard, which
        // moves it back to a phase when it lets go (its drop, or `Held::rearm`).
        Some(Held { slot: self })
    }

    /// Holds the slot if it is in one of the phases `from`.
    pub(crate) fn hold_any(&self, from: &[Phase]) -> Option<Held<'_>> {
        from.iter().find_map(|phase| self.hold(*phase))
    }

    /// Takes over the hold of the dispatched slot that [`Held::hand_over`] kept held for the task
    /// work that delivers its request.
    ///
    /// # Safety
    ///
    /// The slot's hold was handed over ([`Held::hand_over`]) and not taken over since; the
    /// [`Handed`] of that hand-over is gone; and the hand-over, and every use of that [`Handed`],
    /// happen before this call (as they do for a task work queued after them with
    /// [`QueuedIoUringCmd::complete_in_task_with`] that reaches the slot through its command and
    /// data).
    #[inline]
    pub(crate) unsafe fn resume(&self) -> Held<'_> {
        // A slot handed over is held.
        debug_assert!(self.phase().is_none());
        // INVARIANT: By the safety requirements, `state` is `HELD` for the hold handed over, and
        // nothing else reaches `io` any more: the hold passes to the returned guard.
        Held { slot: self }
    }

    /// Returns the phase of the slot, or `None` while it is held.
    #[inline]
    pub(crate) fn phase(&self) -> Option<Phase> {
        Phase::from_word(self.state.load(Relaxed))
    }

    /// Returns whether the calling thread is the server thread that fetched the slot.
    #[inline]
    pub(crate) fn is_own_thread(&self) -> bool {
        core::ptr::eq(self.task.0.load(Relaxed), &**current!())
    }

    /// Checks that the slot belongs to the calling server thread and that the server owns its
    /// request: `EINVAL` for another thread, `EBUSY` if the server does not own the request, or
    /// if another context holds the slot right now. Done before a command other than a fetch is
    /// looked at, so that servers see the same errno as with ublk_drv, which checks this first.
    pub(crate) fn check_owner(&self) -> Result {
        if !self.is_own_thread() {
            return Err(EINVAL);
        }
        match self.phase() {
            Some(Phase::Serving | Phase::NeedGetData) => Ok(()),
            _ => Err(EBUSY),
        }
    }

    /// Lends a reference to the request that the server was given in the slot, with data (a read
    /// or a write), to a user copy or a registered buffer; `EINVAL` if there is none. The slot
    /// counts it until it comes back through [`Slot::give_back`].
    ///
    /// The slot is not held: lenders of one request may run at once, and beside the server
    /// thread that owns the slot. The request may be lent until its commit settles it
    /// ([`Slot::settle`]), after the commit took it: a user copy that races with the commit may
    /// still get it, and the request then ends when the copy gives it back.
    pub(crate) fn lend(&self) -> Result<ARef<Rq>> {
        // Nothing is lent in a slot that does not lend (type invariants of `Lending`).
        if !self.lends {
            return Err(EINVAL);
        }
        self.lending.lend()
    }

    /// Lends the request as [`Slot::lend`] does, to `f` by reference, and gives it back once
    /// `f` returned. Returns what `f` returns, and the request parked in the slot if this was its
    /// last user: the caller ends it.
    #[must_use = "the request that this may return must be ended"]
    pub(crate) fn lend_for<R>(&self, f: impl FnOnce(&Rq) -> R) -> Result<(R, Option<Ending>)> {
        if !self.lends {
            return Err(EINVAL);
        }
        self.lending.lend_for(f)
    }

    /// Records the result of `served`, the slot's request, which its holder took from it, and
    /// returns it to be ended now, unless user copies or registered buffers still hold it: then
    /// it is parked, and the last of them ends it. The slot lends no more of it from now on.
    ///
    /// A commit calls this once it let go of the slot in the phase that follows, so that the tag
    /// that the request frees when it ends finds the slot ready for the next request; the paths
    /// that fail a request whose server is gone may call it while they hold the slot.
    #[must_use = "the request that this returns must be ended"]
    #[inline]
    pub(crate) fn settle(&self, served: Served, error: i32, bytes: u32) -> Option<Ending> {
        if !self.lends {
            return Some(Ending::new(served, error, bytes));
        }
        self.lending.settle(served, error, bytes)
    }

    /// The slot lends nothing more of `served`, its request, which no longer is the server's.
    /// Returns whether something lent of it is still out.
    fn stop_lending(&self, served: &mut Served) -> bool {
        self.lends && self.lending.close(served)
    }

    /// Returns whether user copies or registered buffers hold the slot's request.
    pub(crate) fn is_lent(&self) -> bool {
        self.lends && self.lending.is_lent()
    }

    /// Takes back a reference that [`Slot::lend`] or [`Held::lend_auto`] lent, which the caller
    /// dropped. Returns the request parked in the slot if this was its last user: the caller
    /// ends it.
    ///
    /// # Safety
    ///
    /// The caller gives back one reference that [`Slot::lend`] or [`Held::lend_auto`] lent from
    /// this slot and that was not given back yet: each lent reference is given back once. (A
    /// reference given back that was not lent would take the count of another lender, and the
    /// request could be unmarked and end while a [`Slot::lend_for`] borrower still uses it by its
    /// address.)
    #[must_use = "the request that this returns must be ended"]
    pub(crate) unsafe fn give_back(&self) -> Option<Ending> {
        // Only a slot that lends lent something.
        if warn_on!(!self.lends) {
            return None;
        }
        self.lending.give_back()
    }
}

/// An io slot that the caller holds ([`Slot::hold`]): it reaches the slot's state, and makes the
/// phase it leaves the slot in visible when it is dropped.
///
/// # Invariants
///
/// `slot.state` is [`HELD`] for this guard, which moved it there from a phase ([`Slot::hold`]) or
/// took over a hold handed over to it ([`Slot::resume`]); it stays there until the guard lets go:
/// no other context reaches `slot.io` meanwhile.
pub(crate) struct Held<'a> {
    slot: &'a Slot,
}

impl Drop for Held<'_> {
    #[inline]
    fn drop(&mut self) {
        let phase = self.phase.word();
        // The release pairs with the exchange of the next holder.
        self.slot.state.store(phase, Release);
    }
}

impl core::ops::Deref for Held<'_> {
    type Target = Io;

    #[inline]
    fn deref(&self) -> &Io {
        // SAFETY: By the type invariants, only this guard reaches `slot.io` until it lets go,
        // which it does not while the returned borrow of it lives.
        unsafe { &*self.slot.io.get() }
    }
}

impl core::ops::DerefMut for Held<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Io {
        // SAFETY: By the type invariants, only this guard reaches `slot.io` until it lets go,
        // which it does not while the returned borrow of it lives; the borrow of `self` makes it
        // the only one.
        unsafe { &mut *self.slot.io.get() }
    }
}

/// A dispatched io slot whose hold [`Held::hand_over`] keeps for the task work that delivers its
/// request. It lets go of nothing when it is dropped: that task work takes the hold over
/// ([`Slot::resume`]).
///
/// # Invariants
///
/// `slot.state` is [`HELD`] for the hold handed over, and only this value reaches `slot.io` while
/// it exists.
#[must_use = "a dispatched io slot stays held until the task work that delivers it runs"]
pub(crate) struct Handed<'a> {
    slot: &'a Slot,
}

impl Handed<'_> {
    /// Chains the dispatched slot `next` after this one, the last of its batch so far: see
    /// `Io::link`.
    #[inline]
    pub(crate) fn link(&mut self, next: u16) {
        // SAFETY: By the type invariants, only this value reaches `slot.io`, and `&mut self` makes
        // this borrow the only one.
        let io = unsafe { &mut *self.slot.io.get() };
        io.link(next);
    }
}

impl<'a> Held<'a> {
    /// `Delivering` or `Committing` -> `Fetched`, and lets go of the slot: see `Io::rearm`.
    ///
    /// Then, if the queue is not served (the device is stopped or quiesced, or the server is
    /// going away), the command is taken back and returned, for the caller to complete with
    /// `UBLK_IO_RES_ABORT`; the slot is then `Aborted`. Unlike ublk_drv, which keeps such a
    /// command until io_uring cancels it, a server that is going away gets no more requests.
    #[must_use = "the command that this returns must be completed"]
    #[inline]
    pub(crate) fn rearm(
        mut self,
        queue: &Queue,
        fetch: QueuedIoUringCmd,
        addr: u64,
    ) -> Option<QueuedIoUringCmd> {
        Io::rearm(&mut self, fetch, addr);
        let slot = self.slot;
        // Letting go here instead of in `drop`, fully ordered: either a teardown, which changes
        // the state with a fully ordered exchange before it visits the slots, finds the slot
        // fetched, or the state is seen changed below.
        core::mem::forget(self);
        slot.state.xchg(Phase::Fetched.word(), Full);
        if queue.state() == QueueState::Serving {
            return None;
        }
        // The command is taken back at once if it can be: unless a teardown or a cancellation
        // took it (the slot is `Aborted` then, and they complete it), or someone holds the slot
        // right now. Nothing waits for that holder: it is a teardown or a cancellation, which
        // complete the command, or a `queue_rq` that read the state as served before it held the
        // slot, so it started before the state changed. A teardown that changed it waits for an
        // RCU grace period, in which that `queue_rq` ends, before it visits the slots and takes
        // the command, unless that `queue_rq` dispatched a request with it and handed the slot
        // over: the task work that delivers the request then completes the command, and the
        // commit of the request re-arms the slot and comes here again; io_uring's cancellation
        // of the command's ring, which changes it without waiting, asks to cancel the command
        // (queued as cancelable) until it is completed. Any other command left here waits as
        // every fetched command of a queue that is not served does, until the device stops or a
        // new server takes over.
        let mut io = slot.hold(Phase::Fetched)?;
        io.abort_fetch(|_| true)
    }

    /// As [`Held::rearm`], with the slot's buffer.
    #[must_use = "the command that this returns must be completed"]
    pub(crate) fn rearm_same(
        self,
        queue: &Queue,
        fetch: QueuedIoUringCmd,
    ) -> Option<QueuedIoUringCmd> {
        let addr = self.addr;
        self.rearm(queue, fetch, addr)
    }

    /// Keeps the dispatched slot held for the task work that delivers its request: nothing else
    /// holds it meanwhile, and that task work takes the hold over without an exchange
    /// ([`Slot::resume`]).
    #[inline]
    pub(crate) fn hand_over(self) -> Handed<'a> {
        // Only a dispatch, which leaves the slot `Dispatched`, hands it over.
        warn_on!(self.phase != Phase::Dispatched);
        let slot = self.slot;
        // The guard does not let go.
        core::mem::forget(self);
        // INVARIANT: `state` stays `HELD`, and the hold passes from the guard to `Handed`.
        Handed { slot }
    }

    /// `Idle` -> `Fetched`: see `Io::fetch`; the slot records the calling thread as the one
    /// that fetched it.
    pub(crate) fn fetch(
        &mut self,
        cmd: QueuedIoUringCmd,
        addr: u64,
        auto_reg: AutoBufReg,
    ) -> Result<Option<ARef<Task>>, QueuedIoUringCmd> {
        let old = Io::fetch(self, cmd, addr, auto_reg)?;
        // INVARIANT: `io` now names the calling thread.
        self.slot.task.0.store(self.task_ptr(), Relaxed);
        Ok(old)
    }

    /// `Aborted` or `Prepared` -> `Idle`: see `Io::reset`; the slot names no thread any more.
    pub(crate) fn reset(&mut self) -> Option<ARef<Task>> {
        // INVARIANT: `io` names no thread once this returns.
        self.slot.task.0.store(core::ptr::null(), Relaxed);
        Io::reset(self)
    }

    /// Lends a reference to `served`, the slot's request that the server's task delivers, to the
    /// buffer that the driver registers with the server's ring (`UBLK_F_AUTO_BUF_REG`). Returns
    /// it with the index to register it at, and the count of it, which
    /// [`Held::registered_auto`] takes; `None` if the slot cannot count one more.
    pub(crate) fn lend_auto(&mut self, served: &Served) -> Option<(ARef<Rq>, u16, AutoLent<'a>)> {
        // Only a queue with `UBLK_F_AUTO_BUF_REG` calls this, whose slots lend.
        self.slot
            .lending
            .lend_auto()
            .then(|| (served.lend_ref(), self.auto_reg.index, AutoLent(self.slot)))
    }

    /// Records the outcome of the automatic registration of the slot's buffer, which `lent`
    /// counted: the ring it is registered with (the buffer keeps the count until io_uring releases
    /// it), or, if it failed, the count is given back (the registration dropped the reference).
    pub(crate) fn registered_auto(&mut self, lent: AutoLent<'_>, ring: Option<RingId>) {
        // The count goes to the buffer, or back to the slot, here: only this slot's.
        let AutoLent(slot) = lent;
        if warn_on!(!core::ptr::eq(slot, self.slot)) {
            return;
        }
        match ring {
            Some(ring) => self.auto_registered = Some(ring),
            // The slot may have lent others (a buffer that an earlier delivery of a batch
            // registered, whose completion could not be posted), which keep the request until
            // they are given back.
            None => self.slot.lending.unlend_auto(),
        }
    }

    /// Deals with `served`, the request of the slot, which no server takes (`__ublk_abort_rq()`,
    /// `__ublk_fail_req()`): puts it aside for the next server, or records its failure and
    /// returns it to be ended now, unless it is lent (then the last borrower ends it). `owned`
    /// if the server that went away owned it.
    #[must_use = "the request that this returns must be ended"]
    pub(crate) fn without_server(
        &mut self,
        queue: &Queue,
        mut served: Served,
        owned: bool,
    ) -> Option<Ending> {
        // A zone report that the driver sent itself waits for no server: its sender, possibly
        // `UBLK_U_CMD_START_DEV` holding the device lock that a new server needs, sees it fail.
        if served.op() == ReqOp::DrvIn {
            return self.slot.settle(served, EIO.to_errno(), 0);
        }
        // The state is read and the request put aside in one RCU read-side critical section,
        // which `queue::sync_shelving` waits for.
        let _rcu = rcu::read_lock();
        match queue.no_server(owned) {
            NoServer::Shelve => {
                if self.slot.stop_lending(&mut served) {
                    // A request that a buffer still holds cannot go back to blk-mq.
                    self.slot.settle(served, EIO.to_errno(), 0)
                } else {
                    served.shelve();
                    None
                }
            }
            NoServer::Fail(err) => self.slot.settle(served, err.to_errno(), 0),
        }
    }

    /// `Delivering` -> `Serving`: the server gets the request, which the slot may lend from now
    /// on.
    pub(crate) fn serve(&mut self, mut served: Served) {
        self.start_lending(&mut served);
        Io::serve(self, served);
    }

    /// `Delivering` -> `Serving`, for a write of which only `bytes` could be copied to the
    /// server's buffer: see [`Held::serve`].
    pub(crate) fn serve_part(&mut self, mut served: Served, bytes: u32) {
        self.start_lending(&mut served);
        Io::serve_part(self, served, bytes);
    }

    /// `Delivering` -> `Serving` after `UBLK_U_IO_NEED_GET_DATA` copied the data of the write to
    /// the buffer `addr`: all of it, or the first `part` bytes. See [`Held::serve`].
    pub(crate) fn serve_got_data(&mut self, mut served: Served, addr: u64, part: Option<u32>) {
        self.start_lending(&mut served);
        Io::serve_got_data(self, served, addr, part);
    }

    /// The slot may lend `served`, the request that the server gets, if it has data.
    fn start_lending(&self, served: &mut Served) {
        // Only reads and writes, zone appends and reports have data.
        if self.slot.lends && zoned::has_data(served.op()) {
            // The holder owns `served`, the slot's request, which the server gets.
            self.slot.lending.open(served);
        }
    }

    /// `Serving` -> `Queued` (`UBLK_F_BATCH_IO`): see `Io::undeliver`; the slot lends the
    /// request no more.
    pub(crate) fn undeliver(&mut self) -> Option<Undelivered> {
        let undelivered = Io::undeliver(self)?;
        let slot = self.slot;
        // `Queued` holds the request, as `Serving` did.
        if let Some(served) = self.served.as_mut() {
            slot.stop_lending(served);
        }
        Some(undelivered)
    }
}

impl<'a> Held<'a> {
    /// Returns the io slot, which outlives the guard.
    pub(crate) fn slot(&self) -> &'a Slot {
        self.slot
    }
}

/// Deals with `served`, a request of `queue` that blk-mq queued and that the io slot of its tag
/// does not take, since no server waits there: it waits for the next server, or fails. Nothing
/// was lent of it.
pub(crate) fn refuse(queue: &Queue, served: Served) {
    // A zone report that the driver sent itself waits for no server.
    if served.op() == ReqOp::DrvIn {
        return served.finish(queue, EIO.to_errno(), 0);
    }
    match queue.no_server(false) {
        NoServer::Shelve => served.shelve(),
        NoServer::Fail(err) => served.finish(queue, err.to_errno(), 0),
    }
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
        _ => zoned::describe(rq.zoned(), rq)?,
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
    if rq.shmem().is_some() {
        op_flags |= uapi::IO_F_SHMEM_ZC;
    }
    Some(IoDesc {
        op_flags,
        nr_sectors,
        start_sector,
        addr: rq.shmem().unwrap_or(addr),
    })
}
