//! io_uring plumbing: submit one entry, wait for its completion with a
//! timeout. A command the driver accepted and queued (e.g. a FETCH_REQ)
//! never completes on its own; it shows up as [`Got::Pending`] and is
//! cancelled when the ring is dropped.

use anyhow::{bail, Context, Result};
use io_uring::{cqueue, squeue, types, IoUring};
use std::time::{Duration, Instant};

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
    next: u64,
    /// Completions that arrived while waiting for another one.
    early: Vec<(u64, i32)>,
}

impl<S: squeue::EntryMarker> Ring<S> {
    pub fn new() -> Result<Self> {
        let ring = IoUring::<S, cqueue::Entry>::builder()
            .build(16)
            .context("io_uring_setup")?;
        Ok(Ring {
            ring,
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

    /// Submits `sqe` and waits up to `wait` for its completion.
    pub fn run(&mut self, sqe: S, wait: Duration) -> Result<Got> {
        let token = self.submit(sqe)?;
        self.wait(token, wait)
    }
}
