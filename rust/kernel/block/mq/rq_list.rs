// SPDX-License-Identifier: GPL-2.0

//! A list of requests that blk-mq hands to a driver at once.
//!
//! C header: [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h)

use crate::{
    bindings,
    block::mq::{Operations, Request},
    sync::aref::ARef,
};
use core::marker::PhantomData;

/// The requests of one request queue that blk-mq passes to [`Operations::queue_rqs`], for
/// example when a plug is flushed.
///
/// Iterating over the list takes the requests out of it, in the order they were queued, and
/// starts them: each one is then the driver's, exactly as a request passed to
/// [`Operations::queue_rq`], and the driver must end it. The requests that are left in the list
/// when `queue_rqs` returns are queued one at a time with [`Operations::queue_rq`].
///
/// A request cannot be given back once it was taken: iterator adaptors that drop the items they
/// skip (`find`, `nth`, `zip`, ...) would leave those requests started and never ended. Take the
/// requests with a `for` loop or [`Iterator::next`], and stop taking them to leave the rest to
/// `queue_rq`.
///
/// # Invariants
///
/// - `list` points to a valid `struct rq_list` that blk-mq passed to the `queue_rqs` callback,
///   which lasts for the whole lifetime `'a`; no one else accesses it during `'a`.
/// - Its requests belong to a request queue of a tag set with the operations `T`; they are
///   initialized (the private data of each was set up by `init_request`), have a driver tag, and
///   are owned by the driver until they are taken out of the list and started, or blk-mq takes
///   them back after `queue_rqs` returns.
///
/// # Examples
///
/// A driver that serves each request of the list as it serves one from `queue_rq`:
///
/// ```
/// use kernel::block::mq::{self, Request, RqList};
/// use kernel::prelude::*;
/// use kernel::sync::aref::ARef;
///
/// struct MyDriver;
///
/// #[vtable]
/// impl mq::Operations for MyDriver {
///     type QueueData = ();
///     type RequestData = ();
///
///     fn new_request_data() -> impl PinInit<(), Error> {
///         Ok(())
///     }
///
///     fn queue_rq(
///         (): (),
///         rq: ARef<Request<Self>>,
///         _is_last: bool,
///     ) -> Result<(), (ARef<Request<Self>>, Error)> {
///         Request::end_ok(rq).map_err(|rq| (rq, EIO))
///     }
///
///     fn queue_rqs((): (), rqs: &mut RqList<'_, Self>) {
///         for rq in rqs {
///             // The request was taken out of the list, so its only reference is `rq`.
///             let _ = Request::end_ok(rq);
///         }
///     }
///
///     fn commit_rqs((): (), _hw_queue: u32) {}
///
///     fn complete(_rq: ARef<Request<Self>>) {}
/// }
/// ```
pub struct RqList<'a, T: Operations> {
    list: *mut bindings::rq_list,
    _p: PhantomData<(&'a mut bindings::rq_list, T)>,
}

impl<'a, T: Operations> RqList<'a, T> {
    /// Creates the list of requests that blk-mq passed to the `queue_rqs` callback.
    ///
    /// # Safety
    ///
    /// `list` must be the argument of a call to the `queue_rqs` callback of a tag set with the
    /// operations `T`, which lasts for the whole lifetime `'a`.
    pub(crate) unsafe fn from_raw(list: *mut bindings::rq_list) -> Self {
        // INVARIANT: By the safety requirements, `list` is what blk-mq passed to `queue_rqs`,
        // whose contract is that the requests belong to the request queue of the call, and are
        // the driver's until it returns.
        Self {
            list,
            _p: PhantomData,
        }
    }
}

impl<T: Operations> Iterator for RqList<'_, T> {
    type Item = ARef<Request<T>>;

    /// Takes the first request out of the list and starts it.
    fn next(&mut self) -> Option<ARef<Request<T>>> {
        // SAFETY: By the type invariants, `list` is a valid list that only this object accesses.
        let rq = unsafe { bindings::rq_list_pop(self.list) };
        if rq.is_null() {
            return None;
        }

        // SAFETY: By the type invariants, `rq` is an initialized request of a tag set with the
        // operations `T`, and the driver's now that it is out of the list.
        let rq = unsafe { Request::start_owned(rq) };
        Some(rq)
    }
}
