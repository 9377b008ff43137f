// SPDX-License-Identifier: GPL-2.0

//! User copy (`UBLK_F_USER_COPY`): the server copies the data of the requests that it serves
//! itself, with `pread` and `pwrite` on `/dev/ublkcN`, instead of naming a buffer in its
//! commands.
//!
//! The file position names the queue, the tag and an offset into the data of the tag's request
//! ([`UserCopyPos`]). Any thread of the server may copy, while the server serves the request:
//! the copy borrows it from its io slot ([`io::with_lent`]). The checks, and the errno of each,
//! are those of ublk_drv's `ublk_user_copy()`, so that servers see the same errors.
//!
//! With `UBLK_F_INTEGRITY`, positions with `UBLKSRV_IO_INTEGRITY_FLAG` name an offset into the
//! integrity metadata of the request instead of its data.

use crate::{device::UblkDevice, features::F_INTEGRITY, io, uapi::UserCopyPos, zoned};
use kernel::{
    iov::{IovIterDest, IovIterSource},
    prelude::*,
};

/// The user memory of a copy, and which way the data goes.
pub(crate) enum UserIter<'a, 'data> {
    /// `read_iter`: the server reads the data of a write.
    ToServer(&'a mut IovIterDest<'data>),
    /// `write_iter`: the server writes the data of a read.
    FromServer(&'a mut IovIterSource<'data>),
}

impl UserIter<'_, '_> {
    fn is_user_backed(&self) -> bool {
        match self {
            Self::ToServer(dest) => dest.is_user_backed(),
            Self::FromServer(src) => src.is_user_backed(),
        }
    }
}

/// Copies data of the request that `pos` names between it and `iter`, and returns how many bytes
/// were copied: up to the end of the request's data or of `iter`, fewer if user memory faults.
pub(crate) fn copy(dev: &UblkDevice, pos: i64, iter: UserIter<'_, '_>) -> Result<usize> {
    // Registered io_uring buffers and other kernel memory are refused.
    if !iter.is_user_backed() {
        return Err(EACCES);
    }
    if !dev.is_live() {
        return Err(EACCES);
    }
    let pos = UserCopyPos::parse(pos);
    // The integrity metadata of requests is only there with `UBLK_F_INTEGRITY`.
    if pos.integrity && dev.flags & F_INTEGRITY == 0 {
        return Err(EINVAL);
    }
    let queue = dev.queues.get(pos.q_id.into())?;
    if !queue.data.user_copy() {
        return Err(EACCES);
    }
    if pos.tag >= dev.depth {
        return Err(EINVAL);
    }
    let slot = queue.slot(pos.tag.into()).ok_or(EINVAL)?;
    io::with_lent(queue, slot, |rq| {
        let len = if pos.integrity {
            rq.integrity_bytes()
        } else {
            rq.nr_bytes()
        };
        if pos.offset > len {
            return Err(EINVAL);
        }
        // CAST: The offset is at most the size of the request's data or metadata, a `u32`.
        let offset = pos.offset as usize;
        match iter {
            UserIter::ToServer(dest) if zoned::to_server(rq.op()) => {
                if pos.integrity {
                    rq.copy_integrity_to_iter(offset, dest)
                } else {
                    rq.copy_to_iter(offset, dest)
                }
            }
            UserIter::FromServer(src) if !zoned::to_server(rq.op()) => {
                if pos.integrity {
                    rq.copy_integrity_from_iter(offset, src)
                } else {
                    rq.copy_from_iter(offset, src)
                }
            }
            // The data of a write is only read, that of a read only written.
            _ => Err(EACCES),
        }
    })?
}
