// SPDX-License-Identifier: GPL-2.0

//! Requests on their way through the io slots of a queue: who owns them, and how they end.
//!
//! # The cycle of an io slot
//!
//! Each io slot (a tag of a queue) goes around a cycle, whose phases and transitions are those of
//! [`crate::slot::Io`]:
//!
//! 1. The server sends `UBLK_U_IO_FETCH_REQ` for the slot ([`crate::commit::fetch`]): the slot
//!    keeps the command.
//! 2. blk-mq queues a request with the slot's tag ([`crate::dispatch`]): the driver writes the io
//!    descriptor and hands the request to the server's task, which completes the fetch command
//!    after copying the data of a write to the server's buffer (copy mode), asking for that
//!    buffer first (`UBLK_F_NEED_GET_DATA`), or registering the data as a fixed buffer
//!    (`UBLK_F_AUTO_BUF_REG`). The server then owns the request.
//! 3. The server handles the request and sends `UBLK_U_IO_COMMIT_AND_FETCH_REQ` with the result
//!    ([`crate::commit::commit_and_fetch`]): in copy mode, the data of a read is copied from the
//!    server's buffer; a buffer registered automatically is unregistered; the new command waits
//!    for the next request, and the request ends, unless it is lent (below).
//!
//! `UBLK_F_BATCH_IO` replaces the commands of one slot by commands for many ([`crate::batch`]).
//!
//! # Who owns what
//!
//! - An io slot ([`Slot`]) is held by one context at a time, which moves its phase on
//!   ([`crate::slot`]). The slot of a tag is only held by the request of that tag (in `queue_rq`
//!   or `queue_rqs`, at most one at a time, since blk-mq hands a tag to one request at a time),
//!   which hands a dispatched slot over to the task work that delivers its request (the next
//!   request of its batch links it through that hold), by the server thread that fetched the
//!   slot (its commands and their task work), and by the paths that tear the queue down
//!   ([`crate::teardown`]). The user copies and buffer registrations of the server's threads
//!   ([`crate::usercopy`], [`crate::zerocopy`]) and io_uring's release of registered buffers
//!   only count in the slot's lending word ([`crate::slot::Lending`]). Beside those, a queue
//!   has the lock of its lost requests (below) and, with batch io, that of its event queue, both
//!   leaf locks. Requests of different tags, and so submitters on different CPUs, never touch
//!   the same slot, but for that link within a plug.
//! - A request has exactly one owner from `queue_rq` or `queue_rqs` until it ends: a [`Served`]
//!   value, which is not `Clone`. It is kept in the slot (parked there once ended while lent,
//!   below), or taken out of it by the holder that works on it (the copies of a write's and a
//!   read's data, the registration of its buffer), and it is consumed by ending the request. The
//!   only other references to the request are those that the slot lent and counts, and it is
//!   only ended once none is left, so ending it does not fail.
//! - A read whose completion the `fail_io_timeout` fault injection dropped ([`Ending::end`]) is
//!   owned by its queue from then on (`Queue::keep_lost`), until its timer expires and the
//!   timeout operation ends it, or the server goes away first and
//!   [`crate::teardown::abort_all`] does ([`end_lost`]); whichever takes it out of the queue's
//!   list ends it.
//! - The io descriptor of a slot has one writer, kept in the slot, so writes to it are serialised
//!   by holding the slot.
//! - The server's command is owned by the slot while it waits, by a dispatched slot that waits
//!   for the task work of its batch, by the batch whose first command it is until the batch is
//!   submitted, by the task work that completes it, or by io_uring once it completed.
//! - With `UBLK_F_USER_COPY`, the server copies the data of a request that it serves itself, with
//!   `pread` and `pwrite` on `/dev/ublkcN` ([`crate::usercopy`]), from any thread; with zero copy,
//!   the data is registered as a fixed buffer of the server's io_uring ([`crate::zerocopy`]). A
//!   copy borrows the request from its io slot for as long as it runs, a registered buffer until
//!   io_uring releases it: the slot counts what it lent. A request that the server commits, or that
//!   fails, while it is lent is parked in the slot with its result, and the last user to give it
//!   back ends it ([`give_back`]).
//!
//! With user recovery, a request that no server takes may instead wait for the next server on
//! the requeue list ([`crate::slot::Held::without_server`]).
//!
//! Requests end in [`Ending::end`] (directly, or through [`Served::finish`]): inline, or, with
//! `UBLK_F_SUPPORT_RQ_AFFINITY`, through `blk_mq_complete_request_remote()` so that the queue's
//! `rq_affinity` picks the CPU. Every way a request can end goes through it, errors, aborts, the
//! last user copy and the release of the last registered buffer included, or through
//! [`end_lost`], which ends requests that no io slot holds the same way.

use crate::{
    queue::{DiskOps, Queue, Rq},
    shmem,
    slot::Slot,
};
use core::{mem::ManuallyDrop, ptr::NonNull};
use kernel::{
    block::{
        mq::{CompletionBatch, Request},
        BlkStatus, ReqOp,
    },
    bottom_half::{local_bh_disable, LocalBhDisabled},
    prelude::*,
    sync::{aref::ARef, atomic::Relaxed},
    warn_on,
};

/// The result with which the driver completes the server's commands when the device goes away
/// (`UBLK_IO_RES_ABORT`).
pub(crate) const RES_ABORT: Error = ENODEV;

/// How long a write whose data could not be copied to the server at all waits before it is
/// dispatched again, rather than be retried at once, over and over, while the copy cannot succeed.
const REQUEUE_DELAY_MS: usize = 3;

/// A request that the driver owns, from `queue_rq` until it ends.
///
/// # Invariants
///
/// - `rq` is the only reference to the request, but for those that its io slot lent to
///   registered buffers and counts ([`crate::slot::Slot::lend`], [`crate::slot::Held::lend_auto`]).
/// - While `lent` is set, the request's io slot may lend it by its address
///   ([`Served::mark_lent`]), and `rq` is not put (not even when this is dropped): no other
///   reference to the request can be the only one, which ending the request or giving it back to
///   blk-mq needs, so the address stays that of a request in flight, with its data. Only the slot
///   clears `lent`, once nothing it lent by that address is in use ([`Served::unmark_lent`]).
pub(crate) struct Served {
    /// Put when the request ends or goes back to blk-mq ([`Served::into_rq`]), or when this is
    /// dropped, but never while `lent` is set.
    rq: ManuallyDrop<ARef<Rq>>,
    /// Whether the io slot of the request lends it by its address.
    lent: bool,
    /// The bytes of the request that the server was told about: fewer than the request has if
    /// the data of a write could only be copied in part.
    len: u32,
    /// Where the data lies in a buffer that the server registered, if it does, as the io
    /// descriptor gives it (`UBLK_IO_F_SHMEM_ZC`): the driver then copies none of it.
    shmem: Option<u64>,
    /// Whether the request is of a zoned device, whose requests may be zone operations.
    zoned: bool,
}

impl Served {
    /// Returns the bytes of the request that the server is told about.
    #[inline]
    pub(crate) fn told_bytes(&self) -> u32 {
        self.len
    }

    /// The server is told about all the bytes of the request (a delivery, again from the start).
    #[inline]
    pub(crate) fn tell_all(&mut self) {
        self.len = self.nr_bytes();
    }

    /// The server is told about the first `bytes` of the request only: the data of a write
    /// could only be copied in part.
    #[inline]
    pub(crate) fn tell_part(&mut self, bytes: u32) {
        self.len = bytes;
    }

    /// Returns where the data lies in a buffer that the server registered (`UBLK_F_SHMEM_ZC`),
    /// if it does.
    #[inline]
    pub(crate) fn shmem(&self) -> Option<u64> {
        self.shmem
    }

    /// Takes the request that blk-mq queued, and looks for its data in the buffers that the
    /// server registered (`UBLK_F_SHMEM_ZC`).
    #[inline]
    pub(crate) fn new(queue: &Queue, rq: ARef<Rq>) -> Self {
        let len = rq.nr_bytes();
        // INVARIANT: `rq` is the reference that blk-mq passed to `queue_rq` or that `queue_rqs`
        // took from its list. The driver only duplicates it to lend it, once the request is the
        // server's, through its io slot.
        // INVARIANT: Not lent yet.
        let mut served = Self {
            rq: ManuallyDrop::new(rq),
            lent: false,
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

    /// Ends the request with `error` (0 or a negative errno) and `bytes` (how much of it the
    /// server transferred), as [`Ending::end`] does. The request must not be lent
    /// ([`crate::slot::Slot::settle`] parks it if it is).
    pub(crate) fn finish(self, queue: &Queue, error: i32, bytes: u32) {
        Ending::new(self, error, bytes).end(queue);
    }

    /// Returns a reference to the request, for its io slot to hand out to the buffer that the
    /// driver registers automatically, and to count until it is given back
    /// ([`crate::slot::Held::lend_auto`]).
    pub(crate) fn lend_ref(&self) -> ARef<Rq> {
        ARef::clone(&self.rq)
    }

    /// Marks the request as lent by its address, and returns the address, for its io slot to
    /// lend the request from while the server serves it ([`crate::slot::Held::serve`]), without
    /// a reference of its own. Until the slot unmarks it, the request does not end, go back to
    /// blk-mq or wait for another server: the address stays that of a request in flight.
    pub(crate) fn mark_lent(&mut self) -> NonNull<Rq> {
        // INVARIANT: Set, the request stays in flight until the slot clears it.
        self.lent = true;
        NonNull::from(&**self.rq)
    }

    /// Takes back the mark of [`Served::mark_lent`]: the request may end again.
    ///
    /// # Safety
    ///
    /// Nothing uses an address that [`Served::mark_lent`] returned for this request any more,
    /// and nothing will: the io slot that lends it counts no lender left and lends no more.
    pub(crate) unsafe fn unmark_lent(&mut self) {
        // INVARIANT: By the safety requirements, nothing uses the address any more.
        self.lent = false;
    }

    /// Takes the reference to the request, the only one but for those that registered buffers
    /// hold, to end the request or give it back to blk-mq. `None` if the request is marked lent
    /// ([`Served::mark_lent`]): its io slot may lend it by its address, so it must not end; it
    /// then never does, with a warning, since its reference stays (see `Drop`).
    fn into_rq(self) -> Option<ARef<Rq>> {
        // Not dropped: a marked request keeps its reference (see `Drop`), with one warning.
        let mut this = ManuallyDrop::new(self);
        if warn_on!(this.lent) {
            return None;
        }
        // SAFETY: `this` is never dropped, so `rq` is taken once, here, and not used after.
        Some(unsafe { ManuallyDrop::take(&mut this.rq) })
    }

    /// Returns whether the request is of a zoned device, whose requests may be zone operations.
    pub(crate) fn zoned(&self) -> bool {
        self.zoned
    }

    /// Records where the data of the request landed, as the server's commit says, if it is a
    /// zone append (`zone_append_lba`, in the commit's `addr`).
    pub(crate) fn set_append_sector(&self, sector: u64) {
        if self.op() == ReqOp::ZoneAppend {
            self.rq.data_ref().append_sector.store(sector, Relaxed);
        }
    }

    /// Records the result with which the request ends, for the context that ends it later: the
    /// last user of a parked request, or `DiskOps::complete`.
    pub(crate) fn record(&self, error: i32, bytes: u32) {
        self.rq.data_ref().set(error, bytes);
    }

    /// Puts the request aside, on the requeue list of its queue, until a new server serves the
    /// queue (user recovery): `UBLK_U_CMD_END_USER_RECOVERY` kicks the list, and so does
    /// stopping the device, which fails them.
    ///
    /// Called in `queue_rq`, or by [`crate::slot::Held::without_server`], in the RCU read-side
    /// critical section in which the queue's state was read, so that
    /// [`crate::queue::sync_shelving`] waits for it. The request must not be lent.
    pub(crate) fn shelve(self) {
        let Some(rq) = self.into_rq() else {
            return;
        };
        // By the type invariants, `rq` is the only reference, since the slot lent none.
        if let Err(rq) = Request::requeue_unkicked(rq) {
            warn_on!(true);
            drop(rq);
        }
    }

    /// Gives the request back to blk-mq, which dispatches it again after [`REQUEUE_DELAY_MS`].
    pub(crate) fn requeue(self) {
        let Some(rq) = self.into_rq() else {
            return;
        };
        // Only a request that the server does not own yet is requeued, and none of those is lent:
        // by the type invariants, `rq` is the only reference, so this does not fail.
        warn_on!(Request::requeue(rq, REQUEUE_DELAY_MS).is_err());
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // A request marked lent keeps this reference for ever: while its io slot may lend it by
        // its address, no other reference to it can be the only one, which ending it needs. The
        // request then never ends: a driver bug, which the warning points at.
        if warn_on!(self.lent) {
            return;
        }
        // SAFETY: Dropped once, here; `rq` is not used after.
        unsafe { ManuallyDrop::drop(&mut self.rq) };
    }
}

impl core::ops::Deref for Served {
    type Target = Rq;

    fn deref(&self) -> &Rq {
        &self.rq
    }
}

/// A request, with the result that it ends with.
#[must_use = "the request waits until it is ended"]
pub(crate) struct Ending {
    served: Served,
    /// 0 or a negative errno.
    error: i32,
    /// How much of the request the server transferred.
    bytes: u32,
}

impl Ending {
    pub(crate) fn new(served: Served, error: i32, bytes: u32) -> Self {
        Self {
            served,
            error,
            bytes,
        }
    }

    /// A request that was parked with its result recorded ([`Served::record`]).
    pub(crate) fn recorded(served: Served) -> Self {
        let (error, bytes) = served.rq.data_ref().get();
        Self::new(served, error, bytes)
    }

    /// Ends the request: inline, or through `blk_mq_complete_request_remote()` if the queue
    /// honours `rq_affinity`.
    #[inline]
    pub(crate) fn end(self, queue: &Queue) {
        self.end_maybe_in(queue, None);
    }

    /// Ends the request as [`Ending::end`] does; if it ends inline with all its data, blk-mq
    /// finishes it with the other requests of `batch`, when `batch` is dropped.
    pub(crate) fn end_in(self, queue: &Queue, batch: &mut CompletionBatch<DiskOps>) {
        self.end_maybe_in(queue, Some(batch));
    }

    fn end_maybe_in(self, queue: &Queue, batch: Option<&mut CompletionBatch<DiskOps>>) {
        // Asked before the request is handed to another CPU: once it is marked complete, it
        // cannot time out.
        let lost = self.loses_completion(queue);
        let Self {
            served,
            error,
            bytes,
        } = self;
        let Some(rq) = served.into_rq() else {
            return;
        };
        if lost {
            // The timeout operation ends it with `ETIMEDOUT`, or `abort_all` with `EIO`
            // ([`end_lost`]). `rq` is the only reference to the request: in copy mode, which
            // `loses_completion` requires, the slot never lends it (user copy and buffer
            // registration are refused, and automatic registration is not copy mode).
            queue.keep_lost(rq);
            return;
        }
        route_end(queue, rq, error, bytes, batch);
    }

    /// Whether the `fail_io_timeout` fault injection drops the completion of the request
    /// (`ublk_fake_timeout()`). It is asked only for a read whose data the driver copied from the
    /// server in full, the one completion that ends its request in one go. ublk_drv does the same;
    /// tests written against it expect it.
    fn loses_completion(&self, queue: &Queue) -> bool {
        let served = &self.served;
        queue.data.copies()
            && served.shmem.is_none()
            && served.op() == ReqOp::Read
            && self.error == 0
            && self.bytes >= served.nr_bytes()
            && served.should_fake_timeout()
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
///
/// A request ended inline with all its data goes in `batch`, if given: its bios end here, in the
/// section, and blk-mq finishes the request and frees its tag with the others of the batch.
fn route_end(
    queue: &Queue,
    rq: ARef<Rq>,
    error: i32,
    bytes: u32,
    batch: Option<&mut CompletionBatch<DiskOps>>,
) {
    let bh = local_bh_disable();
    if queue.rq_affinity {
        // `DiskOps::complete` ends it, with the result recorded here: in a softirq, or here if
        // blk-mq ends it on this CPU. `rq` is the only reference to the request: this does not
        // fail.
        rq.data_ref().set(error, bytes);
        warn_on!(Request::complete(rq).is_err());
    } else {
        end_request(rq, error, bytes, &bh, batch);
    }
}

/// Fails `rq`, a request of `queue` that no io slot holds, with `error`: a read whose completion
/// the fault injection dropped ([`Ending::end`]), just taken out of the queue's list
/// (`ETIMEDOUT`, `BLK_STS_TIMEOUT`, when its timer expired, `EIO` when the server went away
/// first), or a request of a hardware queue that the device does not have (never).
pub(crate) fn end_lost(queue: &Queue, rq: ARef<Rq>, error: Error) {
    route_end(queue, rq, error.to_errno(), 0, None);
}

/// Ends `rq` with `error` (0 or a negative errno) and `bytes` transferred, with bottom halves
/// disabled (see [`route_end`] for why). Every end of a request of the driver is this function's:
/// it is the only caller of the `Request::end` family, and it takes the proof that bottom halves
/// are disabled. A request that ends with all its data goes in `batch`, if given, whose drop
/// finishes it (its bios ended here).
pub(crate) fn end_request(
    rq: ARef<Rq>,
    error: i32,
    bytes: u32,
    _bh: &LocalBhDisabled,
    batch: Option<&mut CompletionBatch<DiskOps>>,
) {
    let ret = if error < 0 {
        Request::end(rq, BlkStatus::from(Error::from_errno(error)))
    } else if rq.op() == ReqOp::ZoneAppend {
        let sector = rq.data_ref().append_sector.load(Relaxed);
        Request::end_zone_append(rq, sector)
    } else if matches!(rq.op(), ReqOp::Read | ReqOp::Write) && bytes < rq.nr_bytes() {
        // A short read, or a write that the server got in part: the rest is dispatched again.
        Request::end_partial(rq, bytes)
    } else if let Some(batch) = batch {
        Request::end_ok_batched(rq, batch)
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
/// ([`crate::slot::Slot::settle`]), and the last user of the request ends it, with the result
/// recorded then.
pub(crate) fn with_lent<R>(queue: &Queue, slot: &Slot, f: impl FnOnce(&Rq) -> R) -> Result<R> {
    let (ret, parked) = slot.lend_for(f)?;
    if let Some(parked) = parked {
        parked.end(queue);
    }
    Ok(ret)
}

/// Gives back a reference to the request of `slot` that [`crate::slot::Slot::lend`] lent, which the
/// caller dropped, and ends the request if it was parked and this was its last user.
///
/// # Safety
///
/// As for [`Slot::give_back`]: the caller gives back one reference lent from `slot`, once.
pub(crate) unsafe fn give_back(queue: &Queue, slot: &Slot) {
    // SAFETY: By the safety requirements, as `Slot::give_back` requires.
    let parked = unsafe { slot.give_back() };
    if let Some(parked) = parked {
        parked.end(queue);
    }
}
