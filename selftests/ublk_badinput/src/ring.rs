//! io_uring plumbing: submit one entry, wait for its completion with a
//! timeout. A command the driver accepted and queued (e.g. a FETCH_REQ)
//! never completes on its own; it shows up as [`Got::Pending`] and is
//! cancelled when the ring is dropped. A ring can hold provided buffers, for
//! multishot commands to write into.

use anyhow::{bail, Context, Result};
use io_uring::{cqueue, squeue, types, IoUring};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use crate::chardev::{self, Mapping};

/// What a probe returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Got {
    /// A completion (or syscall) result: 0 or more on success, -errno.
    Res(i32),
    /// No completion within the wait: the driver queued the command.
    Pending,
}

/// Long enough for any command that completes at once, even under TCG.
pub const WAIT: Duration = Duration::from_secs(10);
/// How long to look for the completion of a command that should be queued.
pub const PEEK: Duration = Duration::from_millis(300);

pub struct Ring<S: squeue::EntryMarker> {
    ring: IoUring<S, cqueue::Entry>,
    /// Dropped after `ring`, which may still write into them until then.
    provided: Vec<Provided>,
    next: u64,
    /// Completions that arrived while waiting for another one.
    early: Vec<(u64, i32)>,
}

/// A provided-buffer ring (`IORING_REGISTER_PBUF_RING`) of one buffer: the
/// buffer group a multishot command with `IOSQE_BUFFER_SELECT` writes into.
/// The buffer is used up by the first completion that carries data.
struct Provided {
    group: u16,
    /// The page-aligned ring of one `struct io_uring_buf`.
    ring: Mapping,
    buf: Mapping,
    len: usize,
}

// SAFETY: the two mappings are owned: no other value points into them, and
// unmapping them from another thread is fine.
unsafe impl Send for Provided {}

impl Provided {
    /// The ring and the buffer, with entry 0 filled in but not published.
    fn new(group: u16, len: usize) -> Result<Self> {
        let anon = |len| {
            chardev::mmap(
                -1,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                0,
            )
            .map_err(|e| {
                anyhow::anyhow!("mmap of {len} bytes: {}", crate::errno::show(Got::Res(e)))
            })
        };
        let ring = anon(chardev::page_size())?;
        let buf = anon(len)?;
        let entry = ring.addr().cast::<types::BufRingEntry>();
        // SAFETY: entry 0 lies in the fresh, writable page, ours alone.
        unsafe {
            (*entry).set_addr(buf.addr() as u64);
            (*entry).set_len(len as u32);
            (*entry).set_bid(0);
        }
        Ok(Provided {
            group,
            ring,
            buf,
            len,
        })
    }

    /// Publishes entry 0 to the kernel: the ring's tail becomes 1.
    fn publish(&self) {
        let entry = self.ring.addr().cast::<types::BufRingEntry>();
        // SAFETY: the tail is the `resv` field of entry 0 of our page, a
        // u16 that only this side writes; the kernel reads it with acquire.
        unsafe {
            let tail = types::BufRingEntry::tail(entry).cast_mut();
            AtomicU16::from_ptr(tail).store(1, Ordering::Release);
        }
    }
}

impl<S: squeue::EntryMarker> Ring<S> {
    pub fn new() -> Result<Self> {
        let ring = IoUring::<S, cqueue::Entry>::builder()
            .build(16)
            .context("io_uring_setup")?;
        Ok(Ring {
            ring,
            provided: Vec::new(),
            next: 1,
            early: Vec::new(),
        })
    }

    /// Queues `sqe` and submits it; returns the token to wait for.
    pub fn submit(&mut self, mut sqe: S) -> Result<u64> {
        let token = self.next;
        self.next += 1;
        sqe.set_user_data(token);
        // SAFETY: every buffer an entry points to is owned by the caller and
        // outlives the wait for its completion (or the ring, for queued ones).
        unsafe { self.ring.submission().push(&sqe) }.context("submission queue full")?;
        self.ring.submit().context("io_uring_enter")?;
        Ok(token)
    }

    /// Waits up to `wait` for the completion of `token`.
    pub fn wait(&mut self, token: u64, wait: Duration) -> Result<Got> {
        let start = Instant::now();
        loop {
            for cqe in self.ring.completion() {
                self.early.push((cqe.user_data(), cqe.result()));
            }
            if let Some(i) = self.early.iter().position(|(t, _)| *t == token) {
                return Ok(Got::Res(self.early.swap_remove(i).1));
            }
            let left = wait.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(Got::Pending);
            }
            let ts = types::Timespec::from(left);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
                Err(e) => bail!("io_uring_enter (wait): {e}"),
            }
        }
    }

    /// Registers `buf` as fixed buffer 0 of the ring.
    ///
    /// # Safety
    ///
    /// `buf` must stay valid until the ring is dropped.
    pub unsafe fn register_buffer(&mut self, buf: &mut [u8]) -> Result<()> {
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: the caller keeps `buf` valid for the ring's lifetime.
        unsafe { self.ring.submitter().register_buffers(&[iov]) }
            .context("io_uring_register(REGISTER_BUFFERS)")
    }

    /// Gives the ring an empty table of `nr` fixed buffers, for drivers to register buffers in.
    pub fn register_sparse_buffers(&mut self, nr: u32) -> Result<()> {
        self.ring
            .submitter()
            .register_buffers_sparse(nr)
            .context("io_uring_register(REGISTER_BUFFERS2, sparse)")
    }

    /// Registers buffer group `group`: one provided buffer of `len` bytes.
    pub fn provide_buffer(&mut self, group: u16, len: usize) -> Result<()> {
        let p = Provided::new(group, len)?;
        // SAFETY: the ring's memory is kept in `self.provided`, which is
        // dropped after the io_uring instance.
        unsafe {
            self.ring
                .submitter()
                .register_buf_ring_with_flags(p.ring.addr() as u64, 1, group, 0)
        }
        .context("io_uring_register(REGISTER_PBUF_RING)")?;
        p.publish();
        self.provided.push(p);
        Ok(())
    }

    /// The first `n` native-endian u16 of the buffer of group `group`, as a
    /// completion that selected it left them.
    pub fn provided_u16s(&self, group: u16, n: usize) -> Result<Vec<u16>> {
        let Some(p) = self.provided.iter().find(|p| p.group == group) else {
            bail!("no provided buffer in group {group}");
        };
        if n * 2 > p.len {
            bail!(
                "{n} u16 do not fit the {}-byte buffer of group {group}",
                p.len
            );
        }
        let base = p.buf.addr().cast::<u16>();
        // SAFETY: `n` u16 lie within the mapping; the kernel wrote them
        // before posting the completion the caller waited for.
        Ok((0..n)
            .map(|i| unsafe { std::ptr::read_volatile(base.add(i)) })
            .collect())
    }

    /// Submits `sqe` and waits up to `wait` for its completion.
    pub fn run(&mut self, sqe: S, wait: Duration) -> Result<Got> {
        let token = self.submit(sqe)?;
        self.wait(token, wait)
    }
}
