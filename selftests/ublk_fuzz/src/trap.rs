//! Buffers a control command's `addr` may point at that a driver must not
//! be able to use whole: a page the process may only read, a page it may
//! not touch, and a buffer whose end runs into that page. A driver reads
//! and writes user memory only through the user copy helpers, which fail
//! with EFAULT there (after the bytes that could be copied).
//!
//! Each round maps its own (World owns one): what a driver wrote into the
//! writable page in one round, or on the other driver, is not there in the
//! next.

use anyhow::{bail, Result};

/// Four pages: writable, inaccessible, read-only, inaccessible (so that
/// nothing a driver reads past the read-only page finds another mapping).
pub struct Trap {
    base: *mut libc::c_void,
    page: usize,
}

impl Trap {
    pub fn new() -> Result<Self> {
        let page = ublk_badinput::chardev::page_size();
        // SAFETY: a fresh anonymous mapping chosen by the kernel; no
        // existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            bail!(
                "mmap of the trap pages: {}",
                std::io::Error::last_os_error()
            );
        }
        let t = Trap { base, page };
        for (n, prot) in [
            (1, libc::PROT_NONE),
            (2, libc::PROT_READ),
            (3, libc::PROT_NONE),
        ] {
            // SAFETY: page `n` of the mapping above, which `t` owns.
            if unsafe { libc::mprotect(t.at(n * page) as *mut _, page, prot) } != 0 {
                bail!(
                    "mprotect of a trap page: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(t)
    }

    fn at(&self, off: usize) -> u64 {
        self.base as u64 + off as u64
    }

    /// The read-only page.
    pub fn read_only(&self) -> u64 {
        self.at(2 * self.page)
    }

    /// The page the process may not touch.
    pub fn no_access(&self) -> u64 {
        self.at(self.page)
    }

    /// 16 writable bytes, then the page the process may not touch: the
    /// buffers of ADD_DEV, GET_DEV_INFO, SET_PARAMS and GET_PARAMS are
    /// longer (GET_FEATURES' and GET_QUEUE_AFFINITY's fit).
    pub fn overrun(&self) -> u64 {
        self.at(self.page - 16)
    }
}

impl Drop for Trap {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made, which no reference points into:
        // the drivers were only given its addresses, as numbers, and a
        // command still queued (START_DEV, END_USER_RECOVERY) that used one
        // later would only fail with EFAULT.
        unsafe { libc::munmap(self.base, 4 * self.page) };
    }
}
