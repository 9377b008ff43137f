// SPDX-License-Identifier: GPL-2.0

//! Pinning the pages of user memory (`FOLL_PIN`).
//!
//! A driver that shares memory with a user process for longer than a system call, and finds
//! that memory again by its physical pages, pins the pages: they then stay in place, whatever
//! the process does to its mappings, until the driver releases them.
//!
//! C header: [`include/linux/mm.h`](srctree/include/linux/mm.h)

use crate::{
    alloc::{flags::GFP_KERNEL, KVVec},
    bindings,
    error::{code::*, to_result, Result},
    page::PAGE_SIZE,
};

/// Pages of the current task's memory, pinned for long-term use (`FOLL_PIN | FOLL_LONGTERM`).
///
/// The pins are released when this is dropped.
///
/// # Invariants
///
/// Each of `pages` is a valid `struct page` that was pinned with `pin_user_pages_fast()`, and
/// `self` owns that pin.
///
/// # Examples
///
/// ```
/// use kernel::{mm::pinned::PinnedPages, page::PAGE_SIZE, prelude::*};
///
/// /// Pins a page-aligned buffer that a process shares with the driver, and returns the page
/// /// frame number of its first page.
/// fn share(addr: usize, len: usize) -> Result<(PinnedPages, usize)> {
///     if len == 0 || len % PAGE_SIZE != 0 || addr % PAGE_SIZE != 0 {
///         return Err(EINVAL);
///     }
///     let pages = PinnedPages::pin_longterm(addr, len / PAGE_SIZE, true)?;
///     let first = pages.pfns().next().ok_or(EINVAL)?;
///     Ok((pages, first))
/// }
/// ```
pub struct PinnedPages {
    pages: KVVec<*mut bindings::page>,
}

// SAFETY: `PinnedPages` only owns pins, which any thread may release: `unpin_user_pages()` does
// not depend on the task that pinned the pages.
unsafe impl Send for PinnedPages {}

// SAFETY: The `&self` methods of `PinnedPages` only read the page pointers, which do not change.
unsafe impl Sync for PinnedPages {}

impl PinnedPages {
    /// Pins the `nr_pages` pages of the current task's memory from the page-aligned address
    /// `addr`, for long-term use, and for the kernel to write to them if `write`.
    ///
    /// # Errors
    ///
    /// - [`EINVAL`] for an address that is not page aligned, for no pages or for more than
    ///   `i32::MAX`;
    /// - [`EFAULT`] for a task without an address space (a kernel thread), or if only some of
    ///   the pages could be pinned (none stays pinned then);
    /// - [`ENOMEM`] if the array of pages cannot be allocated;
    /// - the error of `pin_user_pages_fast()` otherwise, for example [`EFAULT`] for an unmapped
    ///   address or a mapping that is not writable when `write`.
    pub fn pin_longterm(addr: usize, nr_pages: usize, write: bool) -> Result<Self> {
        if addr % PAGE_SIZE != 0 || nr_pages == 0 {
            return Err(EINVAL);
        }
        // `pin_user_pages_fast()` works on the current task's address space, and dereferences it.
        if crate::current!().mm().is_none() {
            return Err(EFAULT);
        }
        let nr: i32 = nr_pages.try_into().map_err(|_| EINVAL)?;
        let mut pages = KVVec::with_capacity(nr_pages, GFP_KERNEL)?;
        let mut flags = bindings::FOLL_LONGTERM;
        if write {
            flags |= bindings::FOLL_WRITE;
        }
        // SAFETY: `pages` has room for `nr_pages` page pointers, which the function writes at
        // most. The current task has an address space (checked above), against which the
        // function checks the user address `addr`.
        let pinned = unsafe {
            bindings::pin_user_pages_fast(
                addr,
                nr,
                flags,
                pages.spare_capacity_mut().as_mut_ptr().cast(),
            )
        };
        to_result(pinned)?;
        // CAST: `pinned` is not negative, and at most `nr_pages`.
        let pinned = pinned as usize;
        // SAFETY: `pages` is empty, and `pin_user_pages_fast()` wrote its first `pinned`
        // elements, pointers to the pages it pinned; `pinned <= nr_pages`, which is at most its
        // capacity.
        unsafe { pages.inc_len(pinned) };
        // INVARIANT: The `pinned` pages are pinned, and the pins are ours.
        let this = Self { pages };
        if pinned != nr_pages {
            // Dropping `this` unpins the pages that were pinned.
            return Err(EFAULT);
        }
        Ok(this)
    }

    /// Returns the number of pages.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Returns whether there are no pages; never true for pages from
    /// [`PinnedPages::pin_longterm`].
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Returns the page frame numbers of the pages, in the order of their user addresses.
    ///
    /// The frame numbers stay those of the pages for as long as `self` lives: pinned pages do
    /// not move.
    pub fn pfns(&self) -> impl Iterator<Item = usize> + '_ {
        self.pages.iter().map(|&page| {
            // SAFETY: By the type invariant, `page` is a valid `struct page`.
            unsafe { bindings::page_to_pfn(page) }
        })
    }
}

impl Drop for PinnedPages {
    fn drop(&mut self) {
        if self.pages.is_empty() {
            return;
        }
        // SAFETY: By the type invariant, the pages are pinned and we own the pins, which we
        // release here, once.
        unsafe { bindings::unpin_user_pages(self.pages.as_mut_ptr(), self.pages.len()) };
    }
}
