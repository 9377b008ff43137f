// SPDX-License-Identifier: GPL-2.0

//! Zoned block devices: the zone report that a driver gives the block layer, and the driver
//! private requests that a driver sends to its own queue to build one.
//!
//! C header: [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h)

use crate::{
    bindings,
    block::mq::Operations,
    error::{from_err_ptr, to_result, Result},
    prelude::*,
};
use core::{marker::PhantomData, mem::size_of, pin::Pin, ptr::NonNull};

/// A zone as a zone report describes it (`struct blk_zone`): its start, length and write
/// pointer in sectors, its type and condition.
#[repr(transparent)]
pub struct Zone(bindings::blk_zone);

impl Zone {
    /// The size of a zone in a report: reports are arrays of `struct blk_zone`.
    pub const SIZE: usize = size_of::<bindings::blk_zone>();

    /// Reads a zone from the bytes of a report, as the device wrote them.
    pub fn from_bytes(bytes: &[u8; Self::SIZE]) -> Self {
        // SAFETY: `bytes` has the size of a `struct blk_zone`, which is made of integers only and
        // has no padding, so any bytes are a valid one; the read is unaligned.
        Self(unsafe { bytes.as_ptr().cast::<bindings::blk_zone>().read_unaligned() })
    }

    /// Returns the first sector of the zone.
    pub fn start(&self) -> u64 {
        self.0.start
    }

    /// Returns the length of the zone in sectors; a report ends early with a zone of length 0.
    pub fn len(&self) -> u64 {
        self.0.len
    }

    /// Returns whether the zone has length 0, which ends a report early.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
}

/// A zone report that the block layer asks a driver for ([`Operations::report_zones`]): the
/// driver reads the zones from its device and passes each, in order, to [`ZoneReport::report`],
/// which gives it its index in the report and stops at the number of zones asked for.
///
/// # Invariants
///
/// - `disk` points to a disk made by [`GenDiskBuilder::build`] with the operations `T`, which the
///   block layer keeps alive while it asks for the report, and which is zoned.
/// - `args` is null or points to the arguments of the report in progress, whose callback may
///   store each zone at its index in an array of `limit` zones.
/// - `reported` zones were reported, with the indexes `0..reported`; `reported <= limit`.
///
/// [`GenDiskBuilder::build`]: super::gen_disk::GenDiskBuilder::build
pub struct ZoneReport<'a, T: Operations> {
    disk: NonNull<bindings::gendisk>,
    args: *mut bindings::blk_report_zones_args,
    limit: u32,
    reported: u32,
    _p: PhantomData<(&'a bindings::gendisk, T)>,
}

impl<'a, T: Operations> ZoneReport<'a, T> {
    /// Wraps the arguments of the `report_zones` operation of a disk, which asked for at most
    /// `nr_zones` zones.
    ///
    /// # Safety
    ///
    /// `disk` must point to a zoned disk made with the operations `T` that stays alive for `'a`,
    /// and `args` must be null or point to the arguments of the report in progress, valid for
    /// `'a`, whose callback takes zones of the indexes `0..nr_zones`.
    pub(crate) unsafe fn new(
        disk: NonNull<bindings::gendisk>,
        args: *mut bindings::blk_report_zones_args,
        nr_zones: u32,
    ) -> Self {
        // INVARIANT: By the safety requirements; nothing was reported yet.
        Self {
            disk,
            args,
            limit: nr_zones,
            reported: 0,
            _p: PhantomData,
        }
    }

    /// Returns how many zones were reported so far.
    pub fn reported(&self) -> u32 {
        self.reported
    }

    /// Returns how many more zones the report takes.
    pub fn remaining(&self) -> u32 {
        self.limit - self.reported
    }

    fn queue(&self) -> *mut bindings::request_queue {
        // SAFETY: By the type invariants, `disk` is valid; a disk has its queue for as long as it
        // lives.
        unsafe { (*self.disk.as_ptr()).queue }
    }

    /// Returns the number of zones of the disk.
    pub fn disk_nr_zones(&self) -> u32 {
        // SAFETY: By the type invariants, `disk` is valid. The zoned disk's number of zones is
        // set before its zones are first reported; a revalidation, or the release of the zone
        // resources of a disk being deleted, may change it meanwhile, which the driver can only
        // see as a report that ends early or fails.
        unsafe { (*self.disk.as_ptr()).nr_zones }
    }

    /// Returns the size of the disk's zones, in sectors (a power of 2).
    pub fn zone_sectors(&self) -> u32 {
        // SAFETY: The queue is valid, and so are its limits, which `chunk_sectors` is read from.
        unsafe { (*self.queue()).limits.chunk_sectors }
    }

    /// Returns the largest request that the disk takes, in sectors (`queue_max_hw_sectors()`).
    pub fn max_hw_sectors(&self) -> u32 {
        // SAFETY: The queue is valid, and so are its limits.
        unsafe { (*self.queue()).limits.max_hw_sectors }
    }

    /// Allocates a driver private request that reads from the device (`REQ_OP_DRV_IN`) on the
    /// disk's queue (`blk_mq_alloc_request()`), for the driver to learn about the zones.
    ///
    /// This may sleep until a tag is free. It fails while the queue is dying.
    pub fn alloc_drv_in(&self) -> Result<DrvRequest<'_, T>> {
        // SAFETY: The queue is valid. `REQ_OP_DRV_IN` with no flags may sleep, which the context
        // of `report_zones` allows.
        let rq = from_err_ptr(unsafe {
            bindings::blk_mq_alloc_request(self.queue(), bindings::req_op_REQ_OP_DRV_IN, 0)
        })?;
        // INVARIANT: `rq` was just allocated on a queue of a tag set with the operations `T`, and
        // is not inserted anywhere. The allocation holds a reference to the queue's usage, so
        // the queue is not torn down before the request is freed.
        Ok(DrvRequest {
            // SAFETY: `from_err_ptr` returned no error, so `rq` is a valid pointer.
            rq: unsafe { NonNull::new_unchecked(rq) },
            executed: false,
            _p: PhantomData,
        })
    }

    /// Reports `zone`, the next zone of the report, to the block layer (`disk_report_zone()`),
    /// which checks it and may change its condition. Fails with `EINVAL` once the report has
    /// as many zones as were asked for, or with the error of the block layer's callback.
    pub fn report(&mut self, zone: &mut Zone) -> Result {
        if self.reported >= self.limit {
            return Err(EINVAL);
        }
        // SAFETY: By the type invariants, `disk` is valid and `args` is null or the arguments of
        // the report in progress, whose callback takes the index `reported`, below `limit`.
        // `zone` is a valid `struct blk_zone` that the call may change.
        to_result(unsafe {
            bindings::disk_report_zone(
                self.disk.as_ptr(),
                &raw mut zone.0,
                self.reported,
                self.args,
            )
        })?;
        // INVARIANT: One more zone was reported, with the next index; still at most `limit`.
        self.reported += 1;
        Ok(())
    }
}

/// A driver private request that the driver allocated on the queue of one of its disks
/// ([`ZoneReport::alloc_drv_in`]), to send to itself, and frees when it is dropped.
///
/// # Invariants
///
/// `rq` points to a request that `blk_mq_alloc_request()` allocated on a queue of a tag set with
/// the operations `T` and that is not freed. It is the driver's: it is not in flight, unless
/// [`DrvRequest::execute`] runs. `executed` says whether it was executed.
pub struct DrvRequest<'a, T: Operations> {
    rq: NonNull<bindings::request>,
    executed: bool,
    _p: PhantomData<(&'a bindings::request_queue, T)>,
}

impl<T: Operations> DrvRequest<'_, T> {
    /// Returns the driver data of the request, [`Operations::RequestData`], with which the
    /// driver tells [`Operations::queue_rq`] what the request is for.
    pub fn data_ref(&self) -> Pin<&T::RequestData> {
        // SAFETY: By the type invariants, `rq` is a request of a tag set with the operations `T`,
        // whose private data is an initialized `RequestDataWrapper<T>`; it lives as long as the
        // request, and does not move: it is pinned.
        unsafe {
            let wrapper = super::Request::<T>::wrapper_ptr(self.rq.as_ptr().cast());
            Pin::new_unchecked(&*super::request::RequestDataWrapper::data_ptr(
                wrapper.as_ptr(),
            ))
        }
    }

    /// Sends the request to the driver with the first `len` bytes of `buf` as its data
    /// (`blk_rq_map_kern()`), and waits until the driver ended it (`blk_execute_rq()`); they then
    /// hold what the driver read.
    ///
    /// Fails with `EINVAL` if the request was executed before, or if `len` is 0, larger than
    /// `buf`, or larger than the queue takes in one request; otherwise with the status the request
    /// ended with. `buf` is a [`KVVec`] because `blk_rq_map_kern()` maps memory of the kernel's
    /// linear map or of vmalloc, which is what a `KVVec` allocates.
    pub fn execute(&mut self, buf: &mut KVVec<u8>, len: usize) -> Result {
        if self.executed || len == 0 || len > buf.len() {
            return Err(EINVAL);
        }
        let len = u32::try_from(len).map_err(|_| EINVAL)?;
        // SAFETY: By the type invariants, `rq` is a valid request that the driver owns. `buf` is
        // memory of the linear map or of vmalloc, valid for `len` bytes; the bio that maps it is
        // released when the request ends, before `blk_execute_rq()` returns below, and `buf` is
        // borrowed mutably until then, so it is neither freed nor moved meanwhile.
        to_result(unsafe {
            bindings::blk_rq_map_kern(
                self.rq.as_ptr(),
                buf.as_mut_ptr().cast(),
                len,
                GFP_KERNEL.as_raw(),
            )
        })?;
        self.executed = true;
        // SAFETY: `rq` is valid, owned by the driver and has its data mapped: it goes to the
        // driver's `queue_rq`, and is the driver's again once this returns.
        let status = unsafe { bindings::blk_execute_rq(self.rq.as_ptr(), false) };
        // SAFETY: `blk_status_to_errno()` only maps a value.
        to_result(unsafe { bindings::blk_status_to_errno(status) })
    }
}

impl<T: Operations> Drop for DrvRequest<'_, T> {
    fn drop(&mut self) {
        // SAFETY: By the type invariants, `rq` is a request that `blk_mq_alloc_request()`
        // allocated, not freed and not in flight: `execute` waits until it ended.
        unsafe { bindings::blk_mq_free_request(self.rq.as_ptr()) };
    }
}
