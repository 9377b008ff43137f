// SPDX-License-Identifier: GPL-2.0

//! The io descriptors of a queue: the pages that the server maps read-only from `/dev/ublkcN`.
//!
//! Each io slot of a queue has a `struct ublksrv_io_desc`, at `tag * 24` bytes into the queue's
//! descriptor area. The driver writes the descriptor of a request before it hands the request to
//! the server, and the server reads it once it got the completion of its fetch command.

use crate::uapi::{IoDesc, CMD_BUF_OFFSET, IO_DESC_SIZE, MAX_QUEUE_DEPTH};
use kernel::{
    mm::virt::VmaNew,
    page::{Page, PAGE_SIZE},
    prelude::*,
    sync::Arc,
};

/// Size in bytes of the descriptor area of a queue of `depth` io slots.
fn area_size(depth: u16) -> usize {
    (usize::from(depth) * IO_DESC_SIZE).next_multiple_of(PAGE_SIZE)
}

/// Distance in bytes between the descriptor areas of two consecutive queues in `/dev/ublkcN`:
/// the size of the area of the deepest possible queue.
fn area_stride() -> usize {
    area_size(MAX_QUEUE_DEPTH)
}

/// The pages that hold the io descriptors of a queue, as the server maps them.
///
/// # Invariants
///
/// - `pages` hold `area_size(depth)` bytes, enough for `depth` descriptors.
/// - Only the [`IoDescs`] created with them writes to them.
pub(crate) struct DescPages {
    depth: u16,
    pages: KVec<Page>,
}

impl DescPages {
    /// Maps the descriptors of queue `q_id` into `vma`, read-only, if `vma` asks for exactly
    /// them.
    pub(crate) fn map(&self, q_id: usize, vma: &VmaNew) -> Result {
        if vma.writable() {
            return Err(EPERM);
        }
        // The descriptors are written by the driver only: no `mprotect()` to writable either.
        vma.try_clear_maywrite()?;
        if queue_of(vma)? != q_id || vma.end() - vma.start() != self.pages.len() * PAGE_SIZE {
            return Err(EINVAL);
        }
        vma.set_dontexpand();
        let vma = vma.set_mixedmap();
        for (i, page) in self.pages.iter().enumerate() {
            vma.vm_insert_page(vma.start() + i * PAGE_SIZE, page)?;
        }
        Ok(())
    }
}

/// The writer of the io descriptors of a queue.
///
/// Writing takes `&mut self`: the owner of the writer (the queue's io slots, under their lock)
/// serialises the writes.
///
/// # Invariants
///
/// `self` is the only writer of `pages`.
pub(crate) struct IoDescs {
    pages: Arc<DescPages>,
}

impl IoDescs {
    /// Allocates zeroed descriptors for a queue of `depth` io slots.
    pub(crate) fn new(depth: u16) -> Result<Self> {
        let nr_pages = area_size(depth) / PAGE_SIZE;
        let mut pages = KVec::with_capacity(nr_pages, GFP_KERNEL)?;
        for _ in 0..nr_pages {
            pages.push(Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?, GFP_KERNEL)?;
        }
        // INVARIANT: `nr_pages` pages hold `area_size(depth)` bytes, and the pages are new, so
        // the returned object is their only writer.
        Ok(Self {
            pages: Arc::new(DescPages { depth, pages }, GFP_KERNEL)?,
        })
    }

    /// Returns the pages of the descriptors, to map them.
    pub(crate) fn pages(&self) -> &Arc<DescPages> {
        &self.pages
    }

    /// Writes the descriptor of the io slot `tag`.
    ///
    /// The server reads it once it is told about the request, after this.
    pub(crate) fn write(&mut self, tag: u16, desc: &IoDesc) -> Result {
        if tag >= self.pages.depth {
            return Err(EINVAL);
        }
        let bytes = desc.to_bytes();
        let mut offset = usize::from(tag) * IO_DESC_SIZE;
        let mut src = &bytes[..];
        // A descriptor may cross a page boundary, since 24 does not divide `PAGE_SIZE`.
        while !src.is_empty() {
            let in_page = offset % PAGE_SIZE;
            let len = src.len().min(PAGE_SIZE - in_page);
            let page = &self.pages.pages[offset / PAGE_SIZE];
            // SAFETY: `src` is valid for reads of `len` bytes, and `in_page + len` does not pass
            // the end of the page. By the type invariants, `self` is the only writer of the pages,
            // and `&mut self` excludes a concurrent write through it. The server maps the pages
            // read-only; it may read them at any time, which gives it stale or torn bytes at
            // worst, and it reads a descriptor only after it is told about the request.
            unsafe { page.write_raw(src.as_ptr(), in_page, len)? };
            src = &src[len..];
            offset += len;
        }
        Ok(())
    }
}

/// Returns the queue whose descriptors a mapping of `/dev/ublkcN` at `vma` asks for.
pub(crate) fn queue_of(vma: &VmaNew) -> Result<usize> {
    let offset = vma.pgoff() * PAGE_SIZE;
    let offset = offset.checked_sub(CMD_BUF_OFFSET).ok_or(EINVAL)?;
    Ok(offset / area_stride())
}
