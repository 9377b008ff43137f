// SPDX-License-Identifier: GPL-2.0

//! The blk-mq side of a device: its tag set, its queues and the request operations.
//!
//! Each device has a tag set with one hardware queue per ublk queue and one tag per io slot of a
//! queue, so that a request's hardware queue and tag name the io slot that serves it. The tag set
//! exists from `UBLK_U_CMD_ADD_DEV` on, since `UBLK_U_CMD_GET_QUEUE_AFFINITY` reports its CPU
//! mapping before the device is started.

use crate::{
    io::{self, Io},
    iodesc::{DescPages, IoDescs},
};
use kernel::{
    block::mq::{
        self,
        tag_set::{Flag, Flags},
        Request, TagSet,
    },
    new_spinlock,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        Arc, ArcBorrow, SpinLock,
    },
};

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

/// The io slots of a queue and what tells whether they can take requests.
pub(crate) struct Slots {
    /// One io slot per tag.
    pub(crate) ios: KVec<Io>,
    /// The writer of the io descriptors of the io slots.
    pub(crate) descs: IoDescs,
    /// Whether the queue is served.
    pub(crate) state: QueueState,
}

/// Whether a queue is served.
///
/// ```text
///          io_uring cancels a command of the server,
///          or the server closes /dev/ublkcN
///   Serving --------------------------------------> Dead
///      |                                              |
///      | UBLK_U_CMD_STOP_DEV, UBLK_U_CMD_DEL_DEV      | UBLK_U_CMD_STOP_DEV, UBLK_U_CMD_DEL_DEV
///      v                                              v
///   Stopping <----------------------------------------+
/// ```
///
/// `Dead` and `Stopping` go back to `Serving` when the server closes `/dev/ublkcN`, once its
/// requests failed: a new server may then fetch the io slots.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueState {
    /// Requests go to the server.
    Serving,
    /// The server is going away: requests fail instead of waiting for it.
    Dead,
    /// The device is stopped: requests fail, and the commands that the server sends complete at
    /// once with `UBLK_IO_RES_ABORT` instead of waiting for requests, so that it exits.
    Stopping,
}

impl QueueState {
    /// The server is going away: requests fail from now on.
    pub(crate) fn fail_requests(&mut self) {
        if *self == QueueState::Serving {
            *self = QueueState::Dead;
        }
    }
}

/// A ublk queue: a hardware queue of the disk, served by the server's io_uring commands.
#[pin_data]
pub(crate) struct Queue {
    /// The number of the queue.
    pub(crate) q_id: u16,
    /// Whether requests complete through `blk_mq_complete_request_remote()`, on the CPU that
    /// `rq_affinity` picks (`UBLK_F_SUPPORT_RQ_AFFINITY`).
    pub(crate) rq_affinity: bool,
    /// The io descriptors, as the server maps them.
    pub(crate) desc_pages: Arc<DescPages>,
    /// The io slots.
    #[pin]
    pub(crate) slots: SpinLock<Slots>,
}

impl Queue {
    fn new(q_id: u16, depth: u16, rq_affinity: bool) -> Result<Arc<Self>> {
        let mut ios = KVec::with_capacity(depth.into(), GFP_KERNEL)?;
        for _ in 0..depth {
            ios.push(Io::new(), GFP_KERNEL)?;
        }
        let descs = IoDescs::new(depth)?;
        Arc::pin_init(
            try_pin_init!(Self {
                q_id,
                rq_affinity,
                desc_pages: descs.pages().clone(),
                slots <- new_spinlock!(Slots {
                    ios,
                    descs,
                    state: QueueState::Serving,
                }),
            }),
            GFP_KERNEL,
        )
    }
}

/// The queues of a device, which its disk passes to the request operations.
pub(crate) struct Queues {
    queues: KVec<Arc<Queue>>,
}

impl Queues {
    /// Creates `nr_queues` queues of `depth` io slots.
    pub(crate) fn new(nr_queues: u16, depth: u16, rq_affinity: bool) -> Result<Arc<Self>> {
        let mut queues = KVec::with_capacity(nr_queues.into(), GFP_KERNEL)?;
        for q_id in 0..nr_queues {
            queues.push(Queue::new(q_id, depth, rq_affinity)?, GFP_KERNEL)?;
        }
        Ok(Arc::new(Self { queues }, GFP_KERNEL)?)
    }

    /// Returns queue `q_id`, or `EINVAL` if there is no such queue.
    pub(crate) fn get(&self, q_id: usize) -> Result<&Arc<Queue>> {
        self.queues.get(q_id).ok_or(EINVAL)
    }

    /// Returns the queues.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Queue>> {
        self.queues.iter()
    }
}

/// What a request carries from the server's commit to the end of the request, which may run on
/// another CPU.
#[pin_data]
pub(crate) struct RqResult {
    /// A negative errno, or 0.
    pub(crate) error: Atomic<i32>,
    /// The bytes that the server transferred.
    pub(crate) bytes: Atomic<u32>,
}

impl RqResult {
    /// Records the result of a request before it is ended.
    pub(crate) fn set(&self, error: i32, bytes: u32) {
        self.error.store(error, Relaxed);
        self.bytes.store(bytes, Relaxed);
    }
}

#[vtable]
impl mq::Operations for DiskOps {
    type QueueData = Arc<Queues>;
    type RequestData = RqResult;

    fn new_request_data() -> impl PinInit<RqResult, Error> {
        try_pin_init!(RqResult {
            error: Atomic::new(0),
            bytes: Atomic::new(0),
        })
    }

    fn queue_rq(queues: ArcBorrow<'_, Queues>, rq: ARef<Rq>, _is_last: bool) -> Result {
        let queue = queues.get(rq.queue_index() as usize)?;
        io::dispatch(queue, rq);
        Ok(())
    }

    fn commit_rqs(_queues: ArcBorrow<'_, Queues>) {}

    fn complete(rq: ARef<Rq>) {
        io::end_request(rq);
    }
}
