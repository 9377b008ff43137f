// SPDX-License-Identifier: GPL-2.0

//! The blk-mq side of a device: its tag set and request operations.
//!
//! Each device has a tag set with one hardware queue per ublk queue and one tag per io slot of a
//! queue, so that a request's hardware queue and tag name the io slot that serves it. The tag set
//! exists from `UBLK_U_CMD_ADD_DEV` on, since `UBLK_U_CMD_GET_QUEUE_AFFINITY` reports its CPU
//! mapping before the device is started.

use kernel::{
    block::mq::{
        self,
        tag_set::{Flag, Flags},
        Request, TagSet,
    },
    prelude::*,
    sync::aref::ARef,
};

/// The blk-mq operations of a ublk device.
pub(crate) struct UblkQueue;

/// Returns the initializer of the tag set of a device with `nr_queues` queues of `depth` io slots.
pub(crate) fn new_tag_set(nr_queues: u16, depth: u16) -> impl PinInit<TagSet<UblkQueue>, Error> {
    // Like loop and null_blk, ublk devices start without an I/O scheduler: the server usually
    // sits in front of one already.
    let flags: Flags = Flag::NoDefaultScheduler.into();
    TagSet::new(nr_queues.into(), depth.into(), 1, flags)
}

#[vtable]
impl mq::Operations for UblkQueue {
    type QueueData = ();
    type RequestData = ();

    fn new_request_data() -> impl PinInit<(), Error> {
        Ok(())
    }

    fn queue_rq(_queue_data: (), _rq: ARef<Request<Self>>, _is_last: bool) -> Result {
        // There is no disk to submit requests yet: devices cannot be started.
        Err(EIO)
    }

    fn commit_rqs(_queue_data: ()) {}

    fn complete(_rq: ARef<Request<Self>>) {}
}
