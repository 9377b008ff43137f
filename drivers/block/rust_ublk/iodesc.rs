// SPDX-License-Identifier: GPL-2.0

//! The io descriptors of a queue: the pages that the server maps read-only from `/dev/ublkcN`.
//!
//! Each io slot of a queue has a `struct ublksrv_io_desc`, at `tag * desc_size` bytes into the
//! queue's descriptor area, where `desc_size` is 24, the size of the structure, or what the server
//! asked for with `UBLK_F_IO_DESC_SIZE` (a multiple of 8 up to 256: room for fields it adds after
//! the structure, which the driver leaves zero). The driver writes the descriptor of a request
//! before it hands the request to the server, and the server reads it once it got the completion
//! of its fetch command.

use crate::uapi::{
    IoDesc, CMD_BUF_OFFSET, IO_DESC_ADDR, IO_DESC_NR_SECTORS, IO_DESC_SIZE, MAX_QUEUE_DEPTH,
};
use core::ptr::{self, NonNull};
use kernel::{
    alloc::allocator::Vmalloc, mm::virt::VmaNew, page::PAGE_SIZE, prelude::*, sync::Arc,
    types::Opaque, warn_on,
};

/// Size in bytes of the descriptor area of a queue of `depth` io slots of `desc_size` bytes.
fn area_size(depth: u16, desc_size: u16) -> usize {
    (usize::from(depth) * usize::from(desc_size)).next_multiple_of(PAGE_SIZE)
}

/// Distance in bytes between the descriptor areas of two consecutive queues in `/dev/ublkcN`:
/// the size of the area of the deepest possible queue, with descriptors of `desc_size` bytes.
fn area_stride(desc_size: u16) -> usize {
    area_size(MAX_QUEUE_DEPTH, desc_size)
}

/// The memory that holds the io descriptors of a queue, as the server maps it.
///
/// The driver keeps the area mapped for its whole life (it is `vmalloc` memory), so writing a
/// descriptor is a plain store; the server maps the same pages read-only.
///
/// # Invariants
///
/// - `area` holds `area_size(depth, desc_size)` bytes, a whole number of pages, enough for `depth`
///   descriptors of `desc_size` bytes, where `depth` is the number of [`DescWriter`]s created
///   with it ([`new_descs`]). Its length never changes.
/// - `desc_size >= IO_DESC_SIZE`.
/// - Only the [`DescWriter`]s created with it write to `area`, each to one descriptor, through
///   the interior mutability of its bytes.
pub(crate) struct DescPages {
    area: VVec<Opaque<u8>>,
    desc_size: u16,
}

// SAFETY: A shared `DescPages` gives access to the bytes of its area only in this module: `map`
// looks up the pages and touches no byte, and a `DescWriter` writes its own descriptor only,
// through `&mut self`. So no two threads write the same bytes at once, and the driver never reads
// them.
unsafe impl Sync for DescPages {}

impl DescPages {
    /// Maps the descriptors of queue `q_id` into `vma`, read-only, if `vma` asks for exactly
    /// them.
    pub(crate) fn map(&self, q_id: usize, vma: &VmaNew) -> Result {
        if vma.writable() {
            return Err(EPERM);
        }
        // The descriptors are written by the driver only: no `mprotect()` to writable either.
        vma.try_clear_maywrite()?;
        if queue_of(vma, self.desc_size)? != q_id || vma.end() - vma.start() != self.area.len() {
            return Err(EINVAL);
        }
        vma.set_dontexpand();
        // Not memory that the server may pin (`get_user_pages()` fails on an I/O mapping): the
        // driver keeps writing it, and no buffer of the server's I/O lies in it. Nor is it part
        // of a core dump.
        vma.set_io();
        vma.set_dontdump();
        let vma = vma.set_mixedmap();
        for offset in (0..self.area.len()).step_by(PAGE_SIZE) {
            let Some(byte) = self.area.get(offset) else {
                break;
            };
            // SAFETY: `byte` is in the `vmalloc` allocation of `self.area`, which stays allocated
            // while `self` is borrowed, longer than the page is used here.
            let page = unsafe { Vmalloc::to_page(NonNull::from(byte).cast()) };
            vma.vm_insert_page(vma.start() + offset, &page)?;
        }
        Ok(())
    }
}

/// Allocates zeroed descriptors of `desc_size` bytes for a queue of `depth` io slots: the memory
/// to map, and one writer per io slot. `desc_size` below the size of `struct ublksrv_io_desc` is
/// `EINVAL`.
pub(crate) fn new_descs(depth: u16, desc_size: u16) -> Result<(Arc<DescPages>, KVec<DescWriter>)> {
    if usize::from(desc_size) < IO_DESC_SIZE {
        return Err(EINVAL);
    }
    let size = area_size(depth, desc_size);
    // Zeroed: the server maps whole pages, past the last descriptor too.
    let mut area = VVec::<Opaque<u8>>::with_capacity(size, GFP_KERNEL | __GFP_ZERO)?;
    // SAFETY: The capacity is at least `size`, and the allocation is zeroed (`__GFP_ZERO`): the
    // first `size` elements are initialized.
    unsafe { area.inc_len(size) };
    // INVARIANT: `area` holds `area_size(depth, desc_size)` bytes, for `depth` descriptors of
    // `desc_size` bytes; `desc_size` was checked above.
    let pages = Arc::new(DescPages { area, desc_size }, GFP_KERNEL)?;
    let mut writers = KVec::with_capacity(depth.into(), GFP_KERNEL)?;
    for tag in 0..depth {
        // INVARIANT: `tag < depth`, so `(tag + 1) * desc_size <= depth * desc_size`, which is at
        // most `area_size(depth, desc_size)`, the size of the area; and this is the only writer
        // created for `tag`: the area is new, and no other function creates a `DescWriter`.
        writers.push(
            DescWriter {
                pages: pages.clone(),
                tag,
            },
            GFP_KERNEL,
        )?;
    }
    Ok((pages, writers))
}

/// The writer of the io descriptor of one io slot.
///
/// Writing takes `&mut self`, so whoever owns the writer (the holder of the io slot) serialises
/// the writes of that descriptor.
///
/// # Invariants
///
/// - `(tag + 1) * pages.desc_size <= pages.area.len()`.
/// - `self` is the only writer of descriptor `tag` of `pages`.
pub(crate) struct DescWriter {
    pages: Arc<DescPages>,
    tag: u16,
}

impl DescWriter {
    /// Writes the descriptor.
    ///
    /// The server reads it once it is told about the request, after this.
    #[inline]
    pub(crate) fn write(&mut self, desc: &IoDesc) {
        self.write_at(0, &desc.to_bytes());
    }

    /// Changes the number of sectors of the request that the descriptor describes.
    #[inline]
    pub(crate) fn set_nr_sectors(&mut self, nr_sectors: u32) {
        self.write_at(IO_DESC_NR_SECTORS, &nr_sectors.to_ne_bytes());
    }

    /// Changes the address of the buffer that the descriptor names.
    #[inline]
    pub(crate) fn set_addr(&mut self, addr: u64) {
        self.write_at(IO_DESC_ADDR, &addr.to_ne_bytes());
    }

    /// Writes `bytes` at `offset` into the descriptor.
    #[inline]
    fn write_at<const N: usize>(&mut self, offset: usize, bytes: &[u8; N]) {
        // `offset` and `bytes` come from the layout of a descriptor, so they stay in it.
        if warn_on!(offset + N > IO_DESC_SIZE) {
            return;
        }
        let start = usize::from(self.tag) * usize::from(self.pages.desc_size) + offset;
        // By the type invariants, the area holds the descriptor; this check is never true.
        let Some(dst) = self.pages.area.get(start..start + N) else {
            warn_on!(true);
            return;
        };
        // SAFETY: `dst` is `N` bytes of the area, which `Opaque` lets a shared borrow write, and
        // `bytes` is valid for reads of `N` bytes and no part of the area. By the type invariants,
        // `self` is the only writer of these bytes, and `&mut self` excludes a concurrent write
        // through it. The server maps the area read-only; it may read it at any time, which gives
        // it stale or torn bytes at worst, and it reads a descriptor only after it is told about
        // the request.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), Opaque::cast_into(dst.as_ptr()), N) };
    }
}

/// Returns the queue whose descriptors a mapping of `/dev/ublkcN` at `vma` asks for, on a device
/// whose descriptors are `desc_size` bytes.
pub(crate) fn queue_of(vma: &VmaNew, desc_size: u16) -> Result<usize> {
    // `vm_pgoff` holds the whole mmap offset in pages; in bytes it overflows a 32-bit `usize`.
    let offset = vma.pgoff().checked_mul(PAGE_SIZE).ok_or(EINVAL)?;
    let offset = offset.checked_sub(CMD_BUF_OFFSET).ok_or(EINVAL)?;
    // The stride is never zero (`desc_size` is at least 24): `checked_div` only keeps a panic
    // path out of the code.
    offset.checked_div(area_stride(desc_size)).ok_or(EINVAL)
}
