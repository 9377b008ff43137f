// SPDX-License-Identifier: GPL-2.0

//! Copy mode: the data of a request between its pages and the server's buffer, and what the
//! result of a commit means for the request.

use crate::{io::Served, queue::Queue};
use kernel::{
    block::{ReqOp, SECTOR_SHIFT},
    prelude::*,
    uaccess::{UserPtr, UserSlice},
};

/// How much of a write's data [`copy_write`] copied to the server's buffer.
#[derive(Clone, Copy)]
pub(crate) enum Copied {
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
pub(crate) fn copy_write(rq: &Served, addr: u64) -> Copied {
    if rq.shmem().is_some() {
        return Copied::Whole;
    }
    let len = rq.nr_bytes();
    // A fault ends the copy, and what was copied before it counts.
    let copied = match UserSlice::new(UserPtr::from_addr(addr as usize), len as usize)
        .with_iov_dest(|dest| rq.copy_to_iter(0, dest))
    {
        Ok(Ok(copied)) => copied,
        Ok(Err(_)) => 0,
        // An address that cannot be a user buffer does not become one later: unlike ublk_drv,
        // which retries such a write forever, fail it.
        Err(_) => return Copied::Invalid,
    };
    // CAST: `copied` is at most `len`, a `u32`.
    let copied = copied as u32;
    // Only whole sectors go to the server.
    let sectors = copied >> SECTOR_SHIFT;
    if copied == len {
        Copied::Whole
    } else if sectors == 0 {
        Copied::Nothing
    } else {
        Copied::Part(sectors << SECTOR_SHIFT)
    }
}

/// The result of a commit, as [`commit_result`] finds it.
pub(crate) enum Committed {
    /// The request ends with this errno (0 or negative) and these bytes.
    Done(i32, u32),
    /// In copy mode, the data of a read is to be copied from the server's buffer first, up to
    /// this many bytes ([`Committed::into_result`]). The copy may fault: the holder of the slot
    /// does it.
    CopyRead(u32),
}

impl Committed {
    /// Returns the result with which the request ends, copying the data of a read from the
    /// server's buffer at `addr` first if that is what is left to do.
    #[inline]
    pub(crate) fn into_result(self, served: &Served, addr: u64) -> (i32, u32) {
        let len = match self {
            Committed::Done(error, bytes) => return (error, bytes),
            Committed::CopyRead(len) => len,
        };
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
    }
}

/// Returns the result with which `served` ends, the server having committed it with `result`
/// (`__ublk_complete_rq()`): 0 or a negative errno, and the bytes transferred; or, for a read in
/// copy mode, that its data is to be copied from the server's buffer first.
pub(crate) fn commit_result(queue: &Queue, served: &Served, result: i32) -> Committed {
    let len = served.told_bytes();
    if result < 0 {
        // Any negative value fails the request; one that is not an errno fails it with `EIO`.
        let error = Error::try_from_errno(result).unwrap_or(EIO);
        Committed::Done(error.to_errno(), 0)
    } else if served.op() == ReqOp::Read && result == 0 {
        // Nothing read fails the read.
        Committed::Done(EIO.to_errno(), 0)
    } else if !queue.data.copies() || served.shmem().is_some() {
        // A read or a write whose data the server copied itself, or reached through a registered
        // buffer, ends whole: the result is not a byte count there.
        Committed::Done(0, served.nr_bytes())
    } else if served.op() == ReqOp::Read {
        // CAST: `result` is not negative.
        Committed::CopyRead((result as u32).min(len))
    } else if served.op() == ReqOp::Write {
        // The result of a write is not a byte count: the server wrote what it was told about,
        // `len`, all of the request unless its data could only be copied in part. Then only that
        // part ends, and the rest is dispatched again (`end_request`), where ublk_drv ends the
        // whole write and loses the tail that was not copied.
        Committed::Done(0, len)
    } else {
        Committed::Done(0, served.nr_bytes())
    }
}
