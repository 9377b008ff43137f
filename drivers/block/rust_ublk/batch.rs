// SPDX-License-Identifier: GPL-2.0

//! Batch io (`UBLK_F_BATCH_IO`): the server handles the io slots of a queue in batches, with three
//! commands instead of one per slot.
//!
//! - `UBLK_U_IO_PREP_IO_CMDS` offers a set of io slots, named in an array of elements, for their
//!   first requests ([`prep`]): each becomes prepared ([`Phase::Prepared`]).
//! - `UBLK_U_IO_FETCH_IO_CMDS` is a multishot command ([`MultishotCmd`]) that stays with the
//!   queue: each time requests arrive, it completes once more, with the tags of their io slots
//!   written to a buffer that the server provided ([`fetch`], [`deliver`]).
//! - `UBLK_U_IO_COMMIT_IO_CMDS` reports the results of a set of requests, and offers their io
//!   slots again ([`commit`]).
//!
//! # The event queue
//!
//! A request that blk-mq queues ([`queue_rq`]) makes its io slot queued ([`Phase::Queued`]), and
//! its tag goes to the queue's event queue ([`Events`]): a ring of tags, and the fetch commands of
//! the server waiting to deliver them. One fetch command at a time is *active*: it is taken out of
//! the event queue, and delivers tags in the server's task until none is left, then goes back.
//! The tag of an io slot is in the event queue exactly while the slot is queued, so the ring
//! never holds more tags than the queue has slots.
//!
//! Delivering a tag ([`Phase::Delivering`]) copies the data of a write to the server's buffer
//! (copy mode) or registers the request's data with the fetch command's ring
//! (`UBLK_F_AUTO_BUF_REG`), and then the server serves the request ([`Phase::Serving`]): from
//! there on, user copies, `UBLK_U_IO_REGISTER_IO_BUF` and the commit work as without batch io.
//! A tag whose completion cannot be posted goes back to the event queue.
//!
//! # Locks
//!
//! The event queue has its own lock, innermost: a tag goes into it once its io slot is queued and
//! let go, so that whoever takes the tag finds the slot queued; no slot is held under it.

use crate::{
    chardev::Cmd,
    cmd, copy,
    copy::Copied,
    device::{DeviceState, UblkDevice},
    dispatch,
    io::{Served, RES_ABORT},
    queue::{DiskOps, Queue, QueueState, Rq},
    slot::{describe, refuse, Held, Phase, Slot},
    uapi::{self, AutoBufReg, BatchIo, Elem, IoCmd},
    zerocopy, zoned,
};
use kernel::{
    alloc::kvec::InsertError,
    block::{mq::CompletionBatch, ReqOp},
    io_uring::{IoUringCmdCancel, IssueFlags, Issued, MultishotCmd, QueuedIoUringCmd},
    new_spinlock,
    prelude::*,
    sync::{aref::ARef, Arc, SpinLock},
    uaccess::{UserPtr, UserSlice},
    warn_on,
};

/// The most tags that one completion of a fetch command reports: a round gathers its tags on the
/// stack before it copies them to the server's buffer.
const MAX_TAGS_PER_CQE: usize = 128;

/// How many rounds of tags one task work of a fetch command delivers before it lets the server's
/// task run, so that requests that keep coming cannot hold the task in the kernel (a soft lockup).
const MAX_ROUNDS: u32 = 32;

/// The elements of a commit are read from user memory in chunks of this many bytes, on the stack:
/// a multiple of 48, the least common multiple of the element sizes (8, 16 and 24 bytes), so that
/// no element straddles two chunks.
const COMMIT_CHUNK: usize = 480;

/// The tag that the pdu of a fetch command names: fetch commands belong to a queue, not a slot.
pub(crate) const FETCH_TAG: u16 = u16::MAX;

/// The tags of a queue's requests that wait for a fetch command, in order.
///
/// # Invariants
///
/// `len <= tags.len()`, and `head < tags.len()` unless `tags` is empty: the ring holds the `len`
/// tags from `head` on, wrapping around.
struct TagRing {
    tags: KVec<u16>,
    head: usize,
    len: usize,
}

impl TagRing {
    fn new(depth: u16) -> Result<Self> {
        let tags = KVec::from_elem(0, depth.into(), GFP_KERNEL)?;
        // INVARIANT: The ring is empty.
        Ok(Self {
            tags,
            head: 0,
            len: 0,
        })
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `tag` at the end; a ring that is full already (which a queue cannot make) keeps it
    /// out and says so.
    fn push(&mut self, tag: u16) -> bool {
        let cap = self.tags.len();
        if warn_on!(self.len == cap) {
            return false;
        }
        self.tags[(self.head + self.len) % cap] = tag;
        // INVARIANT: There was room for one more.
        self.len += 1;
        true
    }

    fn pop(&mut self) -> Option<u16> {
        if self.len == 0 {
            return None;
        }
        let tag = self.tags[self.head];
        // INVARIANT: One tag fewer, from the next one on.
        self.head = (self.head + 1) % self.tags.len();
        self.len -= 1;
        Some(tag)
    }

    fn clear(&mut self) {
        // INVARIANT: The ring is empty.
        self.head = 0;
        self.len = 0;
    }
}

/// The event queue of a queue of a device with `UBLK_F_BATCH_IO` (see the module documentation).
///
/// # Invariants
///
/// - Each tag is at most once in `tags`, and the io slot of a tag in `tags` is queued
///   ([`Phase::Queued`]). A queued slot's tag is in `tags`, or with the active fetch command's
///   delivery, which took it out and is about to deliver it; or the server is gone, and
///   [`crate::teardown::abort_all`] failed the slot's request before [`abort`] clears `tags`.
/// - `active` is true exactly while one fetch command, taken out of `idle` by
///   [`Events::acquire`], is owned by a delivery ([`deliver`] or its task work).
pub(crate) struct Events {
    /// The tags of the queued io slots.
    tags: TagRing,
    /// The fetch commands that wait for tags; the first one is the next to become active.
    idle: KVec<MultishotCmd>,
    /// Whether a fetch command is active: taken out of `idle` to deliver tags.
    active: bool,
}

/// The event queue, under its lock.
pub(crate) type EventQueue = SpinLock<Events>;

/// Returns the initializer of the event queue of a queue of `depth` io slots.
pub(crate) fn new_events(depth: u16) -> Result<impl PinInit<EventQueue>> {
    let events = Events {
        tags: TagRing::new(depth)?,
        idle: KVec::new(),
        active: false,
    };
    Ok(new_spinlock!(events, "ublk_batch_events"))
}

impl Events {
    /// Makes the first idle fetch command active and returns it, if tags wait and no fetch
    /// command is active.
    fn acquire(&mut self) -> Option<MultishotCmd> {
        if self.active || self.tags.is_empty() || self.idle.is_empty() {
            return None;
        }
        let fcmd = self.idle.remove(0).ok()?;
        // INVARIANT: The caller hands `fcmd` to a delivery.
        self.active = true;
        Some(fcmd)
    }

    /// Keeps `fcmd` to wait for tags: first in line if `front`, last otherwise. Gives it back if
    /// there is no memory for it.
    fn park(&mut self, fcmd: MultishotCmd, front: bool) -> Result<(), MultishotCmd> {
        if self.idle.reserve(1, GFP_ATOMIC).is_err() {
            return Err(fcmd);
        }
        let at = if front { 0 } else { self.idle.len() };
        self.idle
            .insert_within_capacity(at, fcmd)
            .map_err(|err| match err {
                InsertError::IndexOutOfBounds(fcmd) | InsertError::OutOfCapacity(fcmd) => fcmd,
            })
    }
}

/// Returns the event queue of `queue`, which a queue of a device with `UBLK_F_BATCH_IO` has.
fn events(queue: &Queue) -> Result<&EventQueue> {
    queue.events.as_deref().ok_or(EINVAL)
}

/// The io commands of a device with `UBLK_F_BATCH_IO`: the three batch commands by their full
/// encoding; of the others, `UBLK_U_IO_UNREGISTER_IO_BUF`, then the queue and the tag are checked,
/// then only `UBLK_U_IO_REGISTER_IO_BUF` is taken. Servers see the same errno as with ublk_drv,
/// whose `ublk_ch_batch_io_uring_cmd()` checks in this order.
pub(crate) fn uring_cmd<'a>(
    dev: &UblkDevice,
    cmd: Cmd<'a>,
    issue_flags: IssueFlags<'a>,
) -> Result<Issued<'a>> {
    let op = cmd.cmd_op();
    if let uapi::U_IO_PREP_IO_CMDS | uapi::U_IO_COMMIT_IO_CMDS | uapi::U_IO_FETCH_IO_CMDS = op {
        let hdr = BatchIo::parse(&cmd.read_cmd::<[u8; uapi::BATCH_IO_SIZE]>()?);
        return match op {
            uapi::U_IO_PREP_IO_CMDS => prep(dev, &cmd, &hdr),
            uapi::U_IO_COMMIT_IO_CMDS => commit(dev, &cmd, issue_flags, &hdr),
            _ => fetch(dev, cmd, issue_flags, &hdr),
        };
    }

    let io_cmd = IoCmd::parse(&cmd.read_cmd::<[u8; uapi::IO_CMD_SIZE]>()?);
    if op == uapi::U_IO_UNREGISTER_IO_BUF {
        return zerocopy::unregister_io_buf(dev, &cmd, issue_flags, &io_cmd);
    }
    cmd::slot_of(dev, &io_cmd)?;
    if op != uapi::U_IO_REGISTER_IO_BUF {
        return Err(EOPNOTSUPP);
    }
    zerocopy::register_io_buf(dev, &cmd, issue_flags, &io_cmd)
}

/// Checks the header of `UBLK_U_IO_PREP_IO_CMDS` and `UBLK_U_IO_COMMIT_IO_CMDS`
/// (`ublk_check_batch_cmd()`), and returns the queue that it names.
fn check_header<'a>(dev: &'a UblkDevice, hdr: &BatchIo) -> Result<&'a Arc<Queue>> {
    let queue = dev.queues.get(hdr.q_id.into())?;
    if hdr.nr_elem > dev.depth {
        return Err(E2BIG);
    }
    // Only zoned devices have zone appends, whose commits say where their data landed.
    if hdr.flags & uapi::BATCH_F_HAS_ZONE_LBA != 0 && !queue.zoned {
        return Err(EINVAL);
    }
    // Only in copy mode do the commands name buffers.
    if hdr.flags & uapi::BATCH_F_HAS_BUF_ADDR != 0 && !queue.data.copies() {
        return Err(EINVAL);
    }
    if hdr.flags & uapi::BATCH_F_AUTO_BUF_REG_FALLBACK != 0 && !queue.data.auto_buf_reg() {
        return Err(EINVAL);
    }
    if hdr.flags & !uapi::BATCH_F_ALL != 0 {
        return Err(EINVAL);
    }
    // The fallback comes with a buffer index, not an address.
    if hdr.flags & uapi::BATCH_F_AUTO_BUF_REG_FALLBACK != 0
        && hdr.flags & uapi::BATCH_F_HAS_BUF_ADDR != 0
    {
        return Err(EINVAL);
    }
    if usize::from(hdr.elem_bytes) != hdr.expected_elem_bytes() {
        return Err(EINVAL);
    }
    Ok(queue)
}

/// Returns the buffer that an element names for its io slot's next request, in the form that the
/// slot keeps it (see [`cmd::buf_addr`]), with where the buffer goes on a device with
/// `UBLK_F_AUTO_BUF_REG`; `EINVAL` if a device in copy mode gets no buffer.
fn elem_buf(queue: &Queue, hdr: &BatchIo, elem: &Elem) -> Result<(u64, AutoBufReg)> {
    if queue.data.auto_buf_reg() {
        let reg = AutoBufReg {
            index: elem.buf_index,
            fallback: hdr.flags & uapi::BATCH_F_AUTO_BUF_REG_FALLBACK != 0,
        };
        Ok((reg.to_sqe_addr(), reg))
    } else if queue.data.copies() && elem.buf_addr == 0 {
        Err(EINVAL)
    } else {
        Ok((elem.buf_addr, AutoBufReg::default()))
    }
}

/// Returns the io slot that an element names.
fn elem_slot<'a>(dev: &UblkDevice, queue: &'a Queue, elem: &Elem) -> Result<&'a Slot> {
    if elem.tag >= dev.depth {
        return Err(EINVAL);
    }
    queue.slot(elem.tag.into()).ok_or(EINVAL)
}

/// `UBLK_U_IO_PREP_IO_CMDS`: the server offers io slots for their first requests.
///
/// The elements are taken in order; at the first that fails, those taken before it are given
/// back, and the command fails with that element's errno: it takes all of its slots or none, and
/// the server need not find out which it holds.
fn prep<'a>(dev: &UblkDevice, cmd: &Cmd<'a>, hdr: &BatchIo) -> Result<Issued<'a>> {
    let queue = check_header(dev, hdr)?;
    if hdr.nr_elem == 0 {
        return Ok(Issued::Done(0));
    }
    let elem_bytes = usize::from(hdr.elem_bytes);
    let total = usize::from(hdr.nr_elem) * elem_bytes;
    let mut elems = KVVec::new();
    // CAST: A user address; one that does not fit in `usize` faults like any other bad one.
    UserSlice::new(UserPtr::from_addr(cmd.sqe_addr() as usize), total)
        .read_all(&mut elems, GFP_KERNEL)?;

    // Serializes the offers of io slots, and counts them for `UBLK_U_CMD_START_DEV`.
    let mut state = dev.state.lock();
    // At most `nr_elem`, a `u16`.
    let mut done: u16 = 0;
    let mut ret = Ok(());
    for b in elems.chunks_exact(elem_bytes) {
        ret = prep_one(dev, queue, &state, done.into(), hdr, &Elem::parse(b, hdr));
        if ret.is_err() {
            break;
        }
        done += 1;
    }
    if let Err(e) = ret {
        for b in elems.chunks_exact(elem_bytes).take(done.into()) {
            unprep_one(queue, &Elem::parse(b, hdr));
        }
        return Err(e);
    }
    state.count_fetched(dev, queue, hdr.q_id, done);
    Ok(Issued::Done(0))
}

/// Offers the io slot of one element of `UBLK_U_IO_PREP_IO_CMDS` (`ublk_batch_prep_io()`), after
/// `pending` others of the same command.
fn prep_one(
    dev: &UblkDevice,
    queue: &Queue,
    state: &DeviceState,
    pending: u32,
    hdr: &BatchIo,
    elem: &Elem,
) -> Result {
    let slot = elem_slot(dev, queue, elem)?;
    let (addr, auto_reg) = elem_buf(queue, hdr, elem)?;
    if queue.state() == QueueState::Stopping {
        return Err(RES_ABORT);
    }
    state.may_fetch(dev, pending)?;
    // Each io slot is offered once. The device lock keeps the slot idle: only offers, under it,
    // leave that phase.
    slot.hold(Phase::Idle)
        .ok_or(EINVAL)?
        .prepare(addr, auto_reg)
}

/// Takes back the offer of the io slot of an element that [`prep_one`] took
/// (`ublk_batch_unprep_io()`).
fn unprep_one(queue: &Queue, elem: &Elem) {
    let Some(slot) = queue.slot(elem.tag.into()) else {
        return;
    };
    // No request reaches the slot before the device starts, which waits for the device lock.
    let unprepared = slot
        .hold(Phase::Prepared)
        .is_some_and(|mut io| io.unprepare());
    warn_on!(!unprepared);
}

/// `UBLK_U_IO_COMMIT_IO_CMDS`: the server reports the results of requests, and offers their io
/// slots again.
///
/// Returns the bytes of the elements taken, all of them on success; if an element fails, those
/// before it were taken, and the command returns their bytes, or the element's errno if it was
/// the first (`ublk_handle_batch_commit_cmd()`).
fn commit<'a>(
    dev: &UblkDevice,
    cmd: &Cmd<'a>,
    issue_flags: IssueFlags<'a>,
    hdr: &BatchIo,
) -> Result<Issued<'a>> {
    let queue = check_header(dev, hdr)?;
    let elem_bytes = usize::from(hdr.elem_bytes);
    let total = usize::from(hdr.nr_elem) * elem_bytes;
    // CAST: A user address; one that does not fit in `usize` faults like any other bad one.
    let mut reader = UserSlice::new(UserPtr::from_addr(cmd.sqe_addr() as usize), total).reader();
    let mut chunk = [0u8; COMMIT_CHUNK];
    let mut done = 0;
    // The requests that end inline with all their data, finished together after the walk.
    let mut ends = CompletionBatch::new();
    let ret = 'walk: loop {
        let len = (total - done).min(COMMIT_CHUNK);
        if len == 0 {
            break Ok(());
        }
        if let Err(e) = reader.read_slice(&mut chunk[..len]) {
            break Err(e);
        }
        for b in chunk[..len].chunks_exact(elem_bytes) {
            let elem = Elem::parse(b, hdr);
            if let Err(e) = commit_one(dev, queue, cmd, issue_flags, hdr, &elem, &mut ends) {
                break 'walk Err(e);
            }
            done += elem_bytes;
        }
    };
    drop(ends);
    match ret {
        Err(e) if done == 0 => Err(e),
        // CAST: At most `u16::MAX` elements of at most 255 bytes.
        _ => Ok(Issued::Done(done as u32)),
    }
}

/// Reports the result of the request of one element of `UBLK_U_IO_COMMIT_IO_CMDS`, and offers
/// its io slot again (`ublk_batch_commit_io()`).
fn commit_one(
    dev: &UblkDevice,
    queue: &Queue,
    cmd: &Cmd<'_>,
    issue_flags: IssueFlags<'_>,
    hdr: &BatchIo,
    elem: &Elem,
    ends: &mut CompletionBatch<DiskOps>,
) -> Result {
    let slot = elem_slot(dev, queue, elem)?;
    // Any server thread commits; a slot that another context holds right now is taken.
    let mut io = slot.hold(Phase::Serving).ok_or(EBUSY)?;
    let (addr, auto_reg) = elem_buf(queue, hdr, elem)?;
    // The slot waits for its next request, which cannot come before this one ends.
    let (served, registered) = io.start_batch_commit(addr, auto_reg)?;
    served.set_append_sector(elem.zone_lba);

    // The slot stays held while the data of a read is copied and the buffer registered
    // automatically is unregistered: nothing else moves it on meanwhile.
    let (error, bytes) =
        copy::commit_result(queue, &served, elem.result).into_result(&served, elem.buf_addr);
    // The buffer registered automatically goes if the commit comes through the ring it was
    // registered with: a command unregisters buffers of its own ring only. Otherwise the server
    // must unregister it itself.
    if let Some((ring, index)) = registered {
        if ring == cmd.ring() {
            // A buffer that the server unregistered already is no error.
            let _ = cmd.unregister_buffer(index.into(), issue_flags);
        }
    }
    // The slot waits for its next request before the request ends and frees its tag.
    drop(io);
    if let Some(ending) = slot.settle(served, error, bytes) {
        ending.end_in(queue, ends);
    }
    Ok(())
}

/// `UBLK_U_IO_FETCH_IO_CMDS`: a multishot command that delivers the tags of the queue's requests
/// to the server, into buffers of the group it names.
fn fetch<'a>(
    dev: &UblkDevice,
    mut cmd: Cmd<'a>,
    issue_flags: IssueFlags<'a>,
    hdr: &BatchIo,
) -> Result<Issued<'a>> {
    let queue = dev.queues.get(hdr.q_id.into())?;
    if !cmd.is_multishot() {
        return Err(EINVAL);
    }
    if usize::from(hdr.elem_bytes) != size_of::<u16>() || hdr.flags != 0 {
        return Err(EINVAL);
    }
    let events = events(queue)?;
    // The queue no longer takes fetch commands once the server or the device goes away: the
    // command completes at once with `UBLK_IO_RES_ABORT`, which tells the server to exit, rather
    // than wait for requests that the queue no longer gives it.
    if queue.state() != QueueState::Serving {
        return Err(RES_ABORT);
    }

    cmd.write_pdu(&cmd::pdu(hdr.q_id, FETCH_TAG));
    let (fcmd, queued) = cmd.queue_cancelable(issue_flags);
    let fcmd = match MultishotCmd::new(fcmd) {
        Ok(fcmd) => fcmd,
        // Checked above.
        Err(fcmd) => {
            fcmd.done(Err(EINVAL), issue_flags);
            return Ok(queued.into());
        }
    };
    let ring = fcmd.ring();
    let mut ev = events.lock();
    // Checked again under the lock, which `stop` takes after it changed the state to drain the
    // fetch commands: a fetch command that it did not see sees the change.
    if queue.state() != QueueState::Serving {
        drop(ev);
        fcmd.done(Err(RES_ABORT), issue_flags);
        return Ok(queued.into());
    }
    if let Err(fcmd) = ev.park(fcmd, false) {
        drop(ev);
        fcmd.done(Err(ENOMEM), issue_flags);
        return Ok(queued.into());
    }
    let active = ev.acquire();
    drop(ev);
    if let Some(active) = active {
        if active.ring() == ring {
            // The ring lock of the command being issued is held: deliver now.
            deliver(active, queue.clone(), issue_flags);
        } else {
            active.complete_in_task_with(queue.clone(), deliver);
        }
    }
    Ok(queued.into())
}

/// Queues `rq` for the server on a device with `UBLK_F_BATCH_IO` (`ublk_batch_queue_rq()`): its
/// io slot becomes queued, and its tag goes to the event queue. If `kick`, the tags of the event
/// queue go to the server.
pub(crate) fn queue_rq(queue: &Arc<Queue>, rq: ARef<Rq>, last: bool) {
    let served = Served::new(queue, rq);
    let Ok(events) = events(queue) else {
        return served.finish(queue, EIO.to_errno(), 0);
    };
    let Some(slot) = queue.slot(served.tag() as usize) else {
        return served.finish(queue, EIO.to_errno(), 0);
    };
    // CAST: tags are below the depth of the queue, a `u16`.
    let tag = served.tag() as u16;
    // The server is going away, or did not offer the slot: the request fails, or waits for the
    // next server. The state is read before the slot is held, as in `dispatch::dispatch`.
    if queue.state() != QueueState::Serving {
        return refuse(queue, served);
    }
    let mut io = match slot.hold(Phase::Prepared) {
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
    if let Err(served) = io.enqueue(served, &desc) {
        // Held in `Prepared`, which takes a request.
        warn_on!(true);
        drop(io);
        return refuse(queue, served);
    }
    // The slot is let go queued before its tag goes to the event queue: a fetch command that
    // takes the tag, on another CPU, finds it queued.
    drop(io);
    // INVARIANT: The slot is queued; it was not, so its tag was not in the ring, which has room
    // for every tag of the queue.
    let pushed = events.lock().tags.push(tag);
    if !pushed {
        // No fetch command knows the tag, and no teardown visits the slot before this returns
        // (this runs in `queue_rq`'s RCU read-side critical section): it is still queued.
        if let Some(served) = slot.hold(Phase::Queued).and_then(|mut io| io.dequeue()) {
            served.finish(queue, EIO.to_errno(), 0);
        }
        return;
    }
    if last {
        kick(queue);
    }
}

/// Hands the tags of the event queue of `queue` to a fetch command, unless one is active
/// already (`ublk_commit_rqs()`).
pub(crate) fn kick(queue: &Arc<Queue>) {
    let Ok(events) = events(queue) else {
        return;
    };
    let active = events.lock().acquire();
    if let Some(active) = active {
        active.complete_in_task_with(queue.clone(), deliver);
    }
}

/// Delivers the tags of the event queue of `queue` to the server through `fcmd`, the active
/// fetch command, in the server's task (`ublk_batch_dispatch()`).
fn deliver(mut fcmd: MultishotCmd, queue: Arc<Queue>, issue_flags: IssueFlags<'_>) {
    let Ok(events) = events(&queue) else {
        warn_on!(true);
        return fcmd.done(Err(EINVAL), issue_flags);
    };
    let mut rounds = 0;
    loop {
        if issue_flags.is_task_work_canceled() {
            // The server's task exits: it takes no more requests.
            return retire(&queue, events, fcmd, Err(RES_ABORT), issue_flags);
        }
        if let Err(e) = deliver_round(&queue, events, &mut fcmd, issue_flags) {
            return retire(&queue, events, fcmd, Err(e), issue_flags);
        }

        let mut ev = events.lock();
        let serving = queue.state() == QueueState::Serving;
        if ev.tags.is_empty() || !serving {
            ev.active = false;
            if !serving {
                // The server goes away: its fetch commands are done.
                drop(ev);
                return fcmd.done(Err(RES_ABORT), issue_flags);
            }
            // The command waits for the next tags, first in line; without memory for that, it
            // completes, and the server sends it again.
            if let Err(fcmd) = ev.park(fcmd, true) {
                drop(ev);
                return fcmd.done(Err(ENOMEM), issue_flags);
            }
            return;
        }
        drop(ev);
        rounds += 1;
        if rounds >= MAX_ROUNDS {
            // Let the server's task run; the command stays active.
            return fcmd.complete_in_task_with(queue, deliver);
        }
    }
}

/// Completes `fcmd`, the active fetch command, with `ret`, and hands the tags left to the next
/// fetch command, if any.
fn retire(
    queue: &Arc<Queue>,
    events: &EventQueue,
    fcmd: MultishotCmd,
    ret: Result<i32>,
    issue_flags: IssueFlags<'_>,
) {
    let next = {
        let mut ev = events.lock();
        ev.active = false;
        ev.acquire()
    };
    fcmd.done(ret, issue_flags);
    if let Some(next) = next {
        next.complete_in_task_with(queue.clone(), deliver);
    }
}

/// Delivers up to one buffer's worth of tags of the event queue through `fcmd`
/// (`__ublk_batch_dispatch()`). An error ends the fetch command: the group has no buffer left
/// (`ENOBUFS`), or the completion could not be posted, and the tags went back to the event queue.
fn deliver_round(
    queue: &Queue,
    events: &EventQueue,
    fcmd: &mut MultishotCmd,
    issue_flags: IssueFlags<'_>,
) -> Result {
    let mut buf = fcmd.select_buffer(issue_flags)?;
    let max = buf.len().min(MAX_TAGS_PER_CQE * size_of::<u16>()) / size_of::<u16>();
    if max == 0 {
        return Err(ENOBUFS);
    }
    let mut tags = [0u16; MAX_TAGS_PER_CQE];
    let mut nr = 0;
    {
        let mut ev = events.lock();
        while nr < max {
            let Some(tag) = ev.tags.pop() else { break };
            tags[nr] = tag;
            nr += 1;
        }
    }

    // The tags whose requests reached the server; the others were requeued or failed.
    let mut kept = 0;
    for i in 0..nr {
        if deliver_tag(queue, tags[i], buf.cmd(), issue_flags) {
            tags[kept] = tags[i];
            kept += 1;
        }
    }
    if kept == 0 {
        // Nothing to report: the buffer goes back to its group.
        drop(buf);
        return Ok(());
    }

    let mut bytes = [0u8; MAX_TAGS_PER_CQE * 2];
    for (i, tag) in tags[..kept].iter().enumerate() {
        bytes[2 * i..2 * i + 2].copy_from_slice(&tag.to_ne_bytes());
    }
    let posted = match buf.write(&bytes[..2 * kept]) {
        Ok(()) => buf.post().map_err(|_| ENOBUFS),
        Err(e) => {
            drop(buf);
            Err(e)
        }
    };
    if let Err(e) = posted {
        // The server did not learn about the requests: they wait for the next fetch command.
        for &tag in &tags[..kept] {
            undeliver_tag(queue, events, tag, fcmd, issue_flags);
        }
        return Err(if e == EFAULT { ENOBUFS } else { e });
    }
    Ok(())
}

/// Prepares the delivery of the request of the queued io slot `tag` through the fetch command
/// `fcmd` (`__ublk_batch_prep_dispatch()`), and returns whether the request reached the server:
/// it was requeued if none of the data of a write could be copied, and it failed if its buffer
/// could not be registered and the server did not ask to do it itself.
fn deliver_tag(
    queue: &Queue,
    tag: u16,
    fcmd: &QueuedIoUringCmd,
    issue_flags: IssueFlags<'_>,
) -> bool {
    let Some(slot) = queue.slot(tag.into()) else {
        warn_on!(true);
        return false;
    };
    // Only the tags of queued slots are in the event queue. The slot is held until the server
    // gets the request, through the copy of a write's data and the registration of its buffer:
    // nothing else moves a delivering slot on.
    let Some(mut io) = slot.hold(Phase::Queued) else {
        warn_on!(true);
        return false;
    };
    // A delivery whose completion could not be posted may have changed the io descriptor: it
    // is written afresh at every delivery, so that the server never reads a stale one.
    let Some((served, addr)) = io.start_tag_delivery() else {
        warn_on!(true);
        return false;
    };
    let mut part = None;

    if queue.data.copies() && served.op() == ReqOp::Write {
        match copy::copy_write(&served, addr) {
            Copied::Whole => {}
            // The server is told about the part that could be copied; the rest is dispatched
            // again once it is done.
            Copied::Part(bytes) => part = Some(bytes),
            Copied::Nothing => {
                // The write is dispatched again a little later, when the copy may succeed
                // (`io::REQUEUE_DELAY_MS`). A queue that copies lends nothing: no user copy or
                // registered buffer holds the request.
                io.end_tag_delivery();
                drop(io);
                served.requeue();
                return false;
            }
            Copied::Invalid => {
                fail_delivery(queue, io, served);
                return false;
            }
        }
    }

    if queue.data.auto_buf_reg()
        && zoned::has_data(served.op())
        && !dispatch::register_auto(&mut io, &served, fcmd, issue_flags)
        && !io.need_reg_buf(&served)
    {
        fail_delivery(queue, io, served);
        return false;
    }

    match part {
        Some(bytes) => io.serve_part(served, bytes),
        None => io.serve(served),
    }
    true
}

/// Fails `served`, the request of the held io slot `io`, whose delivery failed; the slot waits
/// for its next request. A buffer registered by an earlier delivery of the request, whose
/// completion could not be posted, may still hold it: the request is then parked, and ends once
/// it is given back.
fn fail_delivery(queue: &Queue, mut io: Held<'_>, served: Served) {
    let slot = io.slot();
    io.end_tag_delivery();
    // The slot waits for its next request before the request ends and frees its tag.
    drop(io);
    if let Some(ending) = slot.settle(served, EIO.to_errno(), 0) {
        ending.end(queue);
    }
}

/// Takes back the delivery of the request of io slot `tag`, whose completion could not be posted
/// (`ublk_batch_dispatch_fail()`): the slot is queued again, its buffer registered automatically
/// is unregistered, and the tag goes back to the event queue.
fn undeliver_tag(
    queue: &Queue,
    events: &EventQueue,
    tag: u16,
    fcmd: &MultishotCmd,
    issue_flags: IssueFlags<'_>,
) {
    let Some(slot) = queue.slot(tag.into()) else {
        return;
    };
    let registered = {
        // The server did not learn about the request, but may have guessed its tag and
        // committed it: then it ended, or its commit holds the slot.
        let Some(mut io) = slot.hold(Phase::Serving) else {
            return;
        };
        let Some(undelivered) = io.undeliver() else {
            return;
        };
        // The slot is let go queued before its tag goes back to the event queue, as in
        // `queue_rq`.
        drop(io);
        // INVARIANT: The slot is queued again; the delivery took its tag out of the ring.
        events.lock().tags.push(tag);
        undelivered.auto_registered
    };
    if let Some(index) = registered {
        let _ = fcmd.unregister_buffer(index.into(), issue_flags);
    }
}

/// io_uring cancels a fetch command of queue `queue` (`ublk_batch_cancel_cmd()`): it completes
/// with `UBLK_IO_RES_ABORT` unless it is active, and then completes once it is done delivering.
pub(crate) fn cancel(queue: &Queue, cmd: &IoUringCmdCancel<'_>, issue_flags: IssueFlags<'_>) {
    let Ok(events) = events(queue) else {
        return;
    };
    let fcmd = {
        let mut ev = events.lock();
        let Some(i) = ev.idle.iter().position(|fcmd| cmd.refers_to(fcmd)) else {
            return;
        };
        ev.idle.remove(i).ok()
    };
    if let Some(fcmd) = fcmd {
        fcmd.done(Err(RES_ABORT), issue_flags);
    }
}

/// The device is stopped: the idle fetch commands complete with `UBLK_IO_RES_ABORT`; the active
/// one does when it is done delivering.
pub(crate) fn stop(queue: &Queue) {
    let Ok(events) = events(queue) else {
        return;
    };
    loop {
        let fcmd = events.lock().idle.pop();
        let Some(fcmd) = fcmd else {
            break;
        };
        fcmd.into_queued()
            .complete_in_task(|cmd, issue_flags| cmd.done(Err(RES_ABORT), issue_flags));
    }
}

/// The server closed `/dev/ublkcN`, and [`crate::teardown::abort_all`] failed the requests whose
/// tags wait in the event queue, as those it was serving: the event queue is emptied.
pub(crate) fn abort(queue: &Queue) {
    let Ok(events) = events(queue) else {
        return;
    };
    // `teardown::abort_all` failed the requests of queued slots as those the server owned (or,
    // with user recovery, left them for the next server): a tag that waits here ends as one
    // that was delivered, so the tags are only dropped.
    let mut ev = events.lock();
    ev.tags.clear();
    // Every command of the server completed before its file was released.
    warn_on!(!ev.idle.is_empty() || ev.active);
}
