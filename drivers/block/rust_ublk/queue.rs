// SPDX-License-Identifier: GPL-2.0

//! The blk-mq side of a device: its tag set, its queues and the request operations.
//!
//! Each device has a tag set with one hardware queue per ublk queue and one tag per io slot of a
//! queue, so that a request's hardware queue and tag name the io slot that serves it. The tag set
//! exists from `UBLK_U_CMD_ADD_DEV` on, since `UBLK_U_CMD_GET_QUEUE_AFFINITY` reports its CPU
//! mapping before the device is started.

use crate::{
    batch::{self, EventQueue},
    dispatch,
    features::{
        F_AUTO_BUF_REG, F_BATCH_IO, F_NEED_GET_DATA, F_SHMEM_ZC, F_SUPPORT_RQ_AFFINITY,
        F_SUPPORT_ZERO_COPY, F_UNPRIVILEGED_DEV, F_USER_COPY, F_USER_RECOVERY,
        F_USER_RECOVERY_FAIL_IO, F_USER_RECOVERY_REISSUE, F_ZONED,
    },
    io,
    iodesc::{self, DescPages},
    shmem,
    slot::Slot,
    unpriv::{Owner, Unprivileged},
    zoned,
};
use kernel::{
    alloc::kvec::PushError,
    block::mq::{
        self,
        tag_set::{Flag, Flags},
        Request, RqList, TagSet,
    },
    bottom_half::local_bh_disable,
    new_spinlock,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, AtomicType, Full, Relaxed},
        rcu::synchronize_rcu,
        Arc, ArcBorrow, SpinLock,
    },
    warn_on,
};

#[cfg(CONFIG_BLK_DEV_ZONED)]
use kernel::block::mq::zoned::ZoneReport;

/// The blk-mq operations of a ublk device.
pub(crate) struct DiskOps;

/// A request of a ublk device.
pub(crate) type Rq = Request<DiskOps>;

/// Returns the initializer of the tag set of a device with `nr_queues` queues of `depth` io slots.
pub(crate) fn new_tag_set(nr_queues: u16, depth: u16) -> impl PinInit<TagSet<DiskOps>, Error> {
    // Like loop and null_blk, ublk devices start without an I/O scheduler: the server usually
    // sits in front of one already.
    let flags: Flags = Flag::NoDefaultScheduler.into();
    TagSet::new(nr_queues.into(), depth.into(), 1, flags)
}

/// Whether a queue is served.
///
/// ```text
///          io_uring cancels a command of the server,
///          or the server closes /dev/ublkcN
///   Serving --------------------------------------> Dead ----------------> FailIo
///      |                                              |   server gone,       |
///      | UBLK_U_CMD_STOP_DEV, UBLK_U_CMD_DEL_DEV      |   recovery with      |
///      v                                              v   FAIL_IO            |
///   Stopping <----------------------------------------+----------------------+
/// ```
///
/// `Dead` and `Stopping` go back to `Serving` when the server closes `/dev/ublkcN`, once its
/// requests failed or were put aside: a new server may then fetch the io slots. On a started
/// device with user recovery, `Dead` and `FailIo` stay until a new server fetched every io slot
/// of the queue.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum QueueState {
    /// Requests go to the server.
    Serving = 0,
    /// The server is going away, or gone: requests fail instead of waiting for it, or, with user
    /// recovery, wait for the next server.
    Dead = 1,
    /// The device is stopped: requests fail, and the commands that the server sends complete at
    /// once with `UBLK_IO_RES_ABORT` instead of waiting for requests, so that it exits.
    Stopping = 2,
    /// The server is gone from a device with `UBLK_F_USER_RECOVERY_FAIL_IO`: requests fail with
    /// `EREMOTEIO` until a new server serves the queue.
    FailIo = 3,
}

/// What happens to a request that no server takes ([`Queue::no_server`]).
pub(crate) enum NoServer {
    /// The request waits, unkicked, on the requeue list, for a new server.
    Shelve,
    /// The request fails with this error.
    Fail(Error),
}

// SAFETY:
// - `QueueState` is `repr(i32)`, so it has the size and alignment of `i32`.
// - It is round-trip transmutable to `i32`: each of its values is a valid `i32`, and transmuting
//   that `i32` back gives the same value.
// - It is `Send` (a unit-only enum).
unsafe impl AtomicType for QueueState {
    type Repr = i32;
}

/// How the data of a device's requests travels between the driver and the server, fixed at
/// `UBLK_U_CMD_ADD_DEV`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Data {
    /// The driver copies the data between each request and the buffer that the server names in
    /// its commands; with `UBLK_F_SHMEM_ZC`, not for a request whose data lies in a buffer the
    /// server registered (the io descriptor names where instead).
    Copy {
        /// The server names the buffer for the data of a write only once it learnt about the
        /// write (`UBLK_F_NEED_GET_DATA`).
        need_get_data: bool,
    },
    /// The server reaches the data itself, lent by the request's io slot, in one or more of
    /// these ways (at least one is set).
    Lent {
        /// With `pread` and `pwrite` on `/dev/ublkcN` (`UBLK_F_USER_COPY`).
        user_copy: bool,
        /// As an io_uring fixed buffer that it registers (`UBLK_U_IO_REGISTER_IO_BUF`,
        /// `UBLK_F_SUPPORT_ZERO_COPY`).
        zero_copy: bool,
        /// As an io_uring fixed buffer that the driver registers before the server learns
        /// about the request (`UBLK_F_AUTO_BUF_REG`).
        auto_buf_reg: bool,
    },
}

impl Data {
    /// The data mode that the `UBLK_F_*` flags of a device select; `UBLK_F_NEED_GET_DATA` means
    /// nothing when the data is lent.
    pub(crate) fn new(flags: u64) -> Self {
        let user_copy = flags & F_USER_COPY != 0;
        let zero_copy = flags & F_SUPPORT_ZERO_COPY != 0;
        let auto_buf_reg = flags & F_AUTO_BUF_REG != 0;
        if user_copy || zero_copy || auto_buf_reg {
            Data::Lent {
                user_copy,
                zero_copy,
                auto_buf_reg,
            }
        } else {
            Data::Copy {
                need_get_data: flags & F_NEED_GET_DATA != 0,
            }
        }
    }

    /// Returns whether the driver copies the data (copy mode).
    pub(crate) fn copies(self) -> bool {
        matches!(self, Data::Copy { .. })
    }

    /// Returns whether the server names the buffer of a write only once it learnt about it.
    pub(crate) fn needs_get_data(self) -> bool {
        match self {
            Data::Copy { need_get_data } => need_get_data,
            Data::Lent { .. } => false,
        }
    }

    /// Returns whether the server may copy the data with `pread` and `pwrite`.
    pub(crate) fn user_copy(self) -> bool {
        match self {
            Data::Lent { user_copy, .. } => user_copy,
            Data::Copy { .. } => false,
        }
    }

    /// Returns whether the server may register the data as a fixed buffer itself.
    pub(crate) fn zero_copy(self) -> bool {
        match self {
            Data::Lent { zero_copy, .. } => zero_copy,
            Data::Copy { .. } => false,
        }
    }

    /// Returns whether the driver registers the data as a fixed buffer for the server.
    pub(crate) fn auto_buf_reg(self) -> bool {
        match self {
            Data::Lent { auto_buf_reg, .. } => auto_buf_reg,
            Data::Copy { .. } => false,
        }
    }
}

/// What happens to a device's requests while no server serves it, fixed at
/// `UBLK_U_CMD_ADD_DEV` (which accepts these four combinations of the recovery flags only).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Recovery {
    /// No recovery: the device stops with its server, its requests fail.
    None,
    /// `UBLK_F_USER_RECOVERY`: new requests wait for the next server; those that the server had
    /// fail.
    Requeue,
    /// `UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE`: new requests and those that the
    /// server had wait for the next server, which gets the latter again.
    Reissue,
    /// `UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_FAIL_IO`: the device waits for the next
    /// server, its requests fail meanwhile.
    FailIo,
}

impl Recovery {
    /// The policy that the `UBLK_F_USER_RECOVERY*` flags of a device select.
    pub(crate) fn new(flags: u64) -> Self {
        if flags & F_USER_RECOVERY == 0 {
            Recovery::None
        } else if flags & F_USER_RECOVERY_FAIL_IO != 0 {
            Recovery::FailIo
        } else if flags & F_USER_RECOVERY_REISSUE != 0 {
            Recovery::Reissue
        } else {
            Recovery::Requeue
        }
    }

    /// Returns whether new requests wait for the next server rather than fail.
    pub(crate) fn requeues(self) -> bool {
        matches!(self, Recovery::Requeue | Recovery::Reissue)
    }
}

/// A ublk queue: a hardware queue of the disk, served by the server's io_uring commands.
///
/// There is no lock over the whole queue but that of `lost`, a leaf lock taken in process context
/// only, with no other lock held: each io slot is held in turn by the request of its tag and the
/// server thread that fetched it (see [`crate::io`] and [`crate::slot`]). The state of the queue
/// is an atomic that the io paths read before and while they hold a slot, and that the paths
/// that change it (cancellation, `/dev/ublkcN` release, `UBLK_U_CMD_STOP_DEV`) write before they
/// visit the slots one after the other: a slot either is visited, or its holder sees the new
/// state, or it is dispatched and held for the task work that delivers its request, which
/// completes its command ([`crate::teardown`]).
pub(crate) struct Queue {
    /// Whether requests complete through `blk_mq_complete_request_remote()`, on the CPU that
    /// `rq_affinity` picks (`UBLK_F_SUPPORT_RQ_AFFINITY`).
    pub(crate) rq_affinity: bool,
    /// How the data of requests travels between the driver and the server.
    pub(crate) data: Data,
    /// What happens to requests while no server serves the queue.
    pub(crate) recovery: Recovery,
    /// Whether the device is zoned (`UBLK_F_ZONED`): its requests may be zone operations, and
    /// reports of zones that the driver sends itself ([`zoned::report`]).
    pub(crate) zoned: bool,
    /// The buffers that the server registered, in which the data of requests may lie
    /// (`UBLK_F_SHMEM_ZC`).
    pub(crate) shmem: Option<Arc<shmem::Table>>,
    /// The io descriptors, as the server maps them.
    pub(crate) desc_pages: Arc<DescPages>,
    /// The tags of the requests that wait for the server's fetch commands, and those commands
    /// (`UBLK_F_BATCH_IO`).
    pub(crate) events: Option<Pin<KBox<EventQueue>>>,
    /// Whether the queue is served.
    state: Atomic<QueueState>,
    /// The io slots, one per tag, in one allocation (a slot is 192 bytes without debugging
    /// options: 768 KiB for the deepest queue, in vmalloc memory where no contiguous pages are
    /// at hand).
    slots: Pin<KVBox<[Slot]>>,
    /// The reads whose completion the `fail_io_timeout` fault injection dropped, until they time
    /// out ([`io::Ending::end`], [`DiskOps::timeout`]) or the server goes away
    /// ([`crate::teardown::abort_all`]).
    ///
    /// # Invariants
    ///
    /// Each entry is the only reference to a started request of this queue that is not marked
    /// complete, so it holds a tag of the queue: there is at most one per tag, and the list has
    /// room for one per tag.
    lost: Pin<KBox<SpinLock<KVec<ARef<Rq>>>>>,
}

impl Queue {
    fn new(
        depth: u16,
        desc_size: u16,
        flags: u64,
        shmem: Option<Arc<shmem::Table>>,
    ) -> Result<Arc<Self>> {
        let (desc_pages, writers) = iodesc::new_descs(depth, desc_size)?;
        let mut writers = writers.into_iter();
        let data = Data::new(flags);
        // The server reaches the data of requests itself: their slots lend them.
        let lends = !data.copies();
        let slots = KVBox::pin_slice(
            // `new_descs` returns one writer per tag.
            |_| Slot::new(writers.next(), lends),
            depth.into(),
            GFP_KERNEL,
        )?;
        let lost = KBox::pin_init(
            new_spinlock!(KVec::with_capacity(depth.into(), GFP_KERNEL)?, "ublk_lost"),
            GFP_KERNEL,
        )?;
        let events = if flags & F_BATCH_IO != 0 {
            Some(KBox::pin_init(batch::new_events(depth)?, GFP_KERNEL)?)
        } else {
            None
        };
        Ok(Arc::new(
            Self {
                rq_affinity: flags & F_SUPPORT_RQ_AFFINITY != 0,
                zoned: flags & F_ZONED != 0,
                data,
                recovery: Recovery::new(flags),
                shmem,
                desc_pages,
                events,
                state: Atomic::new(QueueState::Serving),
                slots,
                lost,
            },
            GFP_KERNEL,
        )?)
    }

    /// Keeps `rq`, the only reference to a started request of this queue whose completion the
    /// fault injection dropped (not marked complete), until it times out.
    pub(crate) fn keep_lost(&self, rq: ARef<Rq>) {
        let mut lost = self.lost.lock();
        // INVARIANT: By the requirements of this function, `rq` is the only reference to a
        // started request of this queue that is not complete; it holds its tag until it ends, so
        // it is in the list once, and the list has room for one per tag.
        let full = lost.push_within_capacity(rq).err();
        // Not under the lock: ending the request may reach the driver again.
        drop(lost);
        if let Some(PushError(rq)) = full {
            warn_on!(true);
            io::end_lost(self, rq, ETIMEDOUT);
        }
    }

    /// Takes back the request whose completion the fault injection dropped, if `rq` is one.
    pub(crate) fn take_lost(&self, rq: &mq::TimedOutRequest<'_, DiskOps>) -> Option<ARef<Rq>> {
        let mut lost = self.lost.lock();
        let i = lost.iter().position(|kept| rq.is(kept))?;
        lost.remove(i).ok()
    }

    /// Takes back a request whose completion the fault injection dropped, if there is one.
    pub(crate) fn pop_lost(&self) -> Option<ARef<Rq>> {
        self.lost.lock().pop()
    }

    /// Returns the io slot `tag`, if the queue has one.
    #[inline]
    pub(crate) fn slot(&self, tag: usize) -> Option<&Slot> {
        self.slots.get(tag)
    }

    /// Returns the io slots.
    pub(crate) fn slots(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter()
    }

    /// Returns whether the queue is served.
    ///
    /// The io paths read it before and while they hold an io slot. The changes below are fully
    /// ordered, and come before the slots are visited: a slot that a visit finds held is let go
    /// by a holder that reads the state again afterwards, if it left a command in the slot
    /// ([`crate::slot::Held::rearm`]).
    #[inline]
    pub(crate) fn state(&self) -> QueueState {
        self.state.load(Relaxed)
    }

    /// Sets the state of the queue, before the slots are visited.
    pub(crate) fn set_state(&self, state: QueueState) {
        self.state.xchg(state, Full);
    }

    /// The server is going away: the queue is not served from now on (`Dead`), unless it is
    /// stopped already. Its requests then fail, or wait for the next server, as the device's
    /// recovery says.
    pub(crate) fn lose_server(&self) {
        let _ = self
            .state
            .cmpxchg(QueueState::Serving, QueueState::Dead, Full);
    }

    /// A new server fetched every io slot of the queue: it is served again, unless it is stopped.
    pub(crate) fn serve_again(&self) {
        for from in [QueueState::Dead, QueueState::FailIo] {
            let _ = self.state.cmpxchg(from, QueueState::Serving, Full);
        }
    }

    /// The server of a device with `UBLK_F_USER_RECOVERY_FAIL_IO` is gone: requests fail with
    /// `EREMOTEIO` until a new server serves the queue, unless it is stopped.
    pub(crate) fn fail_io(&self) {
        for from in [QueueState::Serving, QueueState::Dead] {
            let _ = self.state.cmpxchg(from, QueueState::FailIo, Full);
        }
    }

    /// Returns what happens to a request of the queue that no server takes (`__ublk_abort_rq()`,
    /// `__ublk_fail_req()`): `owned` if the server that went away had it already.
    pub(crate) fn no_server(&self, owned: bool) -> NoServer {
        match self.state() {
            QueueState::Stopping => NoServer::Fail(EIO),
            QueueState::FailIo => NoServer::Fail(EREMOTEIO),
            _ if owned && self.recovery == Recovery::Reissue => NoServer::Shelve,
            _ if !owned && self.recovery.requeues() => NoServer::Shelve,
            _ => NoServer::Fail(EIO),
        }
    }
}

/// Waits until the paths that put requests aside for the next server saw the queue states that
/// the caller set: a request put aside because of an older state is on the requeue list once
/// this returns. Process context only.
///
/// Each of those paths reads the state and puts the request aside in one RCU read-side critical
/// section: blk-mq runs `queue_rq` and `queue_rqs` in one, since the tag set is not blocking, and
/// [`crate::slot::Held::without_server`] takes one.
pub(crate) fn sync_shelving() {
    synchronize_rcu();
}

/// The queues of a device, which its disk passes to the request operations.
pub(crate) struct Queues {
    queues: KVec<Arc<Queue>>,
    /// The buffers that the server registered, for a device with `UBLK_F_SHMEM_ZC`.
    pub(crate) shmem: Option<Arc<shmem::Table>>,
    /// The owner and server of a device with `UBLK_F_UNPRIVILEGED_DEV`.
    pub(crate) unprivileged: Option<Unprivileged>,
}

impl Queues {
    /// Creates `nr_queues` queues of `depth` io slots with io descriptors of `desc_size` bytes,
    /// for a device with the feature flags `flags` that `owner` created.
    pub(crate) fn new(
        nr_queues: u16,
        depth: u16,
        desc_size: u16,
        flags: u64,
        owner: Owner,
    ) -> Result<Arc<Self>> {
        let shmem = if flags & F_SHMEM_ZC != 0 {
            Some(shmem::new_table()?)
        } else {
            None
        };
        let mut queues = KVec::with_capacity(nr_queues.into(), GFP_KERNEL)?;
        for _ in 0..nr_queues {
            queues.push(
                Queue::new(depth, desc_size, flags, shmem.clone())?,
                GFP_KERNEL,
            )?;
        }
        let unprivileged = if flags & F_UNPRIVILEGED_DEV != 0 {
            Some(Unprivileged::new(owner)?)
        } else {
            None
        };
        Ok(Arc::new(
            Self {
                queues,
                shmem,
                unprivileged,
            },
            GFP_KERNEL,
        )?)
    }

    /// Returns queue `q_id`, or `EINVAL` if there is no such queue.
    pub(crate) fn get(&self, q_id: usize) -> Result<&Arc<Queue>> {
        self.queues.get(q_id).ok_or(EINVAL)
    }

    /// Returns the queues.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Queue>> {
        self.queues.iter()
    }

    /// Fails `rq`, a request of a hardware queue that the device does not have, with `error`,
    /// as any request of the device ends (its queues all end requests alike). Never happens: the
    /// tag set has a hardware queue per queue. Gives the request back if the device has no queue
    /// at all (never either).
    fn fail_unqueued(&self, rq: ARef<Rq>, error: Error) -> Result<(), (ARef<Rq>, Error)> {
        warn_on!(true);
        match self.queues.first() {
            Some(queue) => {
                io::end_lost(queue, rq, error);
                Ok(())
            }
            None => Err((rq, error)),
        }
    }
}

/// What a request carries from the server's commit to the end of the request, which may run on
/// another CPU.
///
/// Its fields are stored and loaded `Relaxed`: what orders a store before the load on the CPU
/// that ends the request is the hand-over itself. `blk_mq_complete_request_remote()` queues the
/// request on that CPU's completion list with a fully ordered `llist_add()` before it sends an IPI
/// or raises the softirq that runs `DiskOps::complete`; a parked request's last lender takes it
/// over through its slot's fully ordered lending word; a request ended inline is read on the CPU
/// that stored it.
#[pin_data]
pub(crate) struct RqResult {
    /// The result, for the context that ends the request after it was recorded ([`RqResult::set`]).
    result: Atomic<u64>,
    /// Where the data of a zone append landed, as the server's commit says.
    pub(crate) append_sector: Atomic<u64>,
    /// For a driver private request that reports zones ([`zoned::report`]): the first sector and
    /// the number of zones asked for; 0 zones in any other request.
    pub(crate) report_sector: Atomic<u64>,
    pub(crate) report_zones: Atomic<u32>,
}

impl RqResult {
    /// Records the result of a request before it is ended elsewhere: `error`, 0 or a negative
    /// errno, and the `bytes` that the server transferred.
    pub(crate) fn set(&self, error: i32, bytes: u32) {
        // CAST: The errno is kept as the bits of an `i32`, and read back as one.
        let error = u64::from(error as u32);
        self.result.store((u64::from(bytes) << 32) | error, Relaxed);
    }

    /// Returns the result that [`RqResult::set`] recorded.
    pub(crate) fn get(&self) -> (i32, u32) {
        let result = self.result.load(Relaxed);
        // CAST: The low half holds the bits of the errno, the high half the bytes.
        ((result as u32) as i32, (result >> 32) as u32)
    }
}

#[vtable]
impl mq::Operations for DiskOps {
    type QueueData = Arc<Queues>;
    type RequestData = RqResult;

    fn new_request_data() -> impl PinInit<RqResult, Error> {
        try_pin_init!(RqResult {
            result: Atomic::new(0),
            append_sector: Atomic::new(0),
            report_sector: Atomic::new(0),
            report_zones: Atomic::new(0),
        })
    }

    #[inline]
    fn queue_rq(
        queues: ArcBorrow<'_, Queues>,
        rq: ARef<Rq>,
        is_last: bool,
    ) -> Result<(), (ARef<Rq>, Error)> {
        let queue = match queues.get(rq.queue_index() as usize) {
            Ok(queue) => queue,
            Err(e) => return queues.fail_unqueued(rq, e),
        };
        if queue.events.is_some() {
            batch::queue_rq(queue, rq, is_last);
            return Ok(());
        }
        let mut batch = None;
        dispatch::dispatch(queue, rq, &mut batch);
        if let Some(batch) = batch {
            batch.submit();
        }
        Ok(())
    }

    fn queue_rqs(queues: ArcBorrow<'_, Queues>, rqs: &mut RqList<'_, Self>) {
        let queues = &*queues;
        let mut batch = None;
        // The last `UBLK_F_BATCH_IO` queue that got a tag and was not kicked yet.
        let mut unkicked: Option<&Arc<Queue>> = None;
        for rq in rqs {
            match queues.get(rq.queue_index() as usize) {
                Ok(queue) if queue.events.is_some() => {
                    batch::queue_rq(queue, rq, false);
                    // The tags queued go to the server's fetch commands: a queue is kicked once
                    // the requests of the list move on to another queue, and at the end.
                    if let Some(last) = unkicked.replace(queue) {
                        if !Arc::ptr_eq(last, queue) {
                            batch::kick(last);
                        }
                    }
                }
                Ok(queue) => dispatch::dispatch(queue, rq, &mut batch),
                Err(e) => {
                    if let Err((rq, e)) = queues.fail_unqueued(rq, e) {
                        // A device has a queue.
                        let bh = local_bh_disable();
                        io::end_request(rq, e.to_errno(), 0, &bh, None);
                    }
                }
            }
        }
        if let Some(batch) = batch {
            batch.submit();
        }
        if let Some(last) = unkicked {
            batch::kick(last);
        }
    }

    fn commit_rqs(queues: ArcBorrow<'_, Queues>, hw_queue: u32) {
        // The tags queued to the hardware queue go to the server's fetch commands.
        if let Ok(queue) = queues.get(hw_queue as usize) {
            batch::kick(queue);
        }
    }

    fn complete(rq: ARef<Rq>) {
        // In a softirq, where this nests; inline in `io::route_end`'s section; or in process
        // context when a CPU goes offline with completions queued to it.
        let (error, bytes) = rq.data_ref().get();
        let bh = local_bh_disable();
        io::end_request(rq, error, bytes, &bh, None);
    }

    #[cfg(CONFIG_BLK_DEV_ZONED)]
    fn report_zones(report: &mut ZoneReport<'_, Self>, sector: u64, nr_zones: u32) -> Result {
        zoned::report(report, sector, nr_zones)
    }

    fn open(queues: ArcBorrow<'_, Queues>) -> Result {
        match &queues.unprivileged {
            Some(u) => u.may_open(),
            None => Ok(()),
        }
    }

    fn timeout(rq: mq::TimedOutRequest<'_, Self>) -> mq::TimeoutReturn {
        // A request whose completion the fault injection dropped is ended here, if it is still
        // in its queue's list (the server's exit may have ended it meanwhile). The requests that
        // the server has not answered yet wait for it, however long it takes, unless the device
        // is unprivileged: then the server is killed, and its exit ends them.
        let queues = rq.queue_data();
        let Ok(queue) = queues.get(rq.queue_index() as usize) else {
            // There is one hardware queue per ublk queue.
            warn_on!(true);
            return mq::TimeoutReturn::ResetTimer;
        };
        if let Some(lost) = queue.take_lost(&rq) {
            io::end_lost(queue, lost, ETIMEDOUT);
            return mq::TimeoutReturn::Done;
        }
        if let Some(u) = &queues.unprivileged {
            u.kill_server();
        }
        // ublk_drv returns `BLK_EH_DONE` after the kill. Rearming the timer instead lets a
        // request that the process's exit did not end (another process has `/dev/ublkcN` open)
        // time out again.
        mq::TimeoutReturn::ResetTimer
    }
}
