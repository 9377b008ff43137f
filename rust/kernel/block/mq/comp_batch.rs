// SPDX-License-Identifier: GPL-2.0

//! Requests ended together.
//!
//! C header: [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h) (`struct io_comp_batch`)

use crate::{
    bindings,
    block::{mq::Operations, BlkStatus},
    sync::aref::ARef,
    types::Opaque,
};
use core::marker::PhantomData;

use super::Request;

/// Requests whose data was transferred in full, ended together when the batch is dropped: blk-mq
/// then finishes them (accounting, I/O schedulers' and rq-qos' bookkeeping) and frees their tags
/// in one go per hardware queue (`blk_mq_end_request_batch()`), instead of one request at a time.
///
/// [`Request::end_ok_batched`] adds a request; a request that cannot be batched is ended at once.
///
/// The requests of a batch keep their tags, and their request queue's usage count, until the
/// batch is dropped: a batch must be dropped soon, and never held across anything that waits for
/// its own requests (freezing their queue, deleting their disk). A batch that is leaked leaks its
/// requests, and such a wait never ends. A batch may be moved: nothing points to it.
///
/// # Invariants
///
/// `iob` is an initialized `struct io_comp_batch`. Its `complete` is `None` or
/// `blk_mq_end_request_batch()`, the only function [`Request::end_ok_batched`] passes. Each
/// request on its list was given back to blk-mq by [`Request::end_ok_batched`], all its bytes
/// transferred, and is not ended yet: it is ended by `complete` when the batch is dropped, and by
/// nothing else.
pub struct CompletionBatch<T: Operations> {
    iob: Opaque<bindings::io_comp_batch>,
    /// Not `Send`: a batch is filled and ended by one thread, as blk-mq's own batches are (a
    /// driver has no reason to hand one to another thread, which would only hold the requests
    /// longer).
    _p: PhantomData<(T, *mut ())>,
}

impl<T: Operations> CompletionBatch<T> {
    /// Returns an empty batch.
    pub fn new() -> Self {
        // INVARIANT: An all-zero `io_comp_batch` is an empty one (`DEFINE_IO_COMP_BATCH()`).
        Self {
            iob: Opaque::zeroed(),
            _p: PhantomData,
        }
    }

    pub(super) fn as_raw(&mut self) -> *mut bindings::io_comp_batch {
        self.iob.get()
    }
}

impl<T: Operations> Default for CompletionBatch<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Operations> Drop for CompletionBatch<T> {
    fn drop(&mut self) {
        let iob = self.iob.get();
        // SAFETY: By the type invariants, `iob` is initialized; `complete` is set once a request
        // was added, to `blk_mq_end_request_batch()`, which ends the requests of the list.
        if let Some(complete) = unsafe { (*iob).complete } {
            // SAFETY: By the type invariants, the requests of the list are ended by this call
            // only, and `iob` is not used afterwards.
            unsafe { complete(iob) };
        }
    }
}

impl<T: Operations> Request<T> {
    /// Ends a request whose data was transferred in full, in `batch` where blk-mq can batch it
    /// (no I/O scheduler tags, no `end_io` callback), at once otherwise: its bios end now, the
    /// request itself when `batch` is dropped.
    ///
    /// This function will return [`Err`] if `this` is not the only [`ARef`]
    /// referencing the request.
    pub fn end_ok_batched(
        this: ARef<Self>,
        batch: &mut CompletionBatch<T>,
    ) -> Result<(), ARef<Self>> {
        let bytes = this.nr_bytes();
        let request_ptr = Self::try_set_end(this)?;
        let iob = batch.as_raw();

        // SAFETY: By type invariant, `request_ptr` is a valid `struct request`. The success of
        // `try_set_end` guarantees that there are no `ARef`s pointing to it, so the driver hands
        // it back to the block layer here. `iob` is valid (type invariants of `batch`); a
        // request added to it was given back, with all its bytes transferred, and is ended by
        // `batch` only, which upholds its invariants.
        unsafe {
            if bindings::blk_update_request(request_ptr, BlkStatus::OK.as_raw(), bytes) {
                // Cannot happen: every byte was transferred. As `end_partial` does.
                bindings::blk_mq_requeue_request(request_ptr, true);
            } else if !bindings::blk_mq_add_to_batch(
                request_ptr,
                iob,
                false,
                Some(bindings::blk_mq_end_request_batch),
            ) {
                bindings::__blk_mq_end_request(request_ptr, BlkStatus::OK.as_raw());
            }
        }
        Ok(())
    }
}
