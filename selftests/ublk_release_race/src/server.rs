//! The ublk server: one thread that fetches every tag of every queue of a
//! copy-mode device and serves each request at once (reads get zeroes,
//! which the driver copies from the tag's buffer at commit; writes and the
//! rest succeed), but for the AIO read of the test.
//!
//! Once the test arms it, the first READ of [`AIO_SECTORS`] sectors at
//! [`AIO_SECTOR`] is held: not committed. Once the test says that
//! BLKRRPART runs, the first READ of sector 0 (the rescan's, issued with
//! `disk->open_mutex` held) releases it: the server FIRST commits the held
//! read, in an `io_uring_enter()` of its own, and only THEN serves the read
//! of sector 0. The held read's completion drops the last reference of the
//! AIO child's file: if the driver ends it with bottom halves enabled, the
//! release (`blkdev_release()`, which takes `disk->open_mutex`) becomes task
//! work of this thread, run as that `io_uring_enter()` returns, and this
//! thread never comes back to serve the read that the rescan waits for.
//!
//! The thread tells the test what it does over a channel; the test sees a
//! [`Event::Releasing`] without the [`Event::Released`] that should follow
//! when the thread is stuck in that commit.

use anyhow::{bail, Context, Result};
use io_uring::{squeue, types, IoUring};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};
use ublk_badinput::chardev::{io_sqe, io_sqe_result};
use ublk_uapi::{
    UblksrvIoDesc, UBLK_IO_OP_READ, UBLK_IO_OP_WRITE, UBLK_IO_RES_ABORT,
    UBLK_U_IO_COMMIT_AND_FETCH_REQ, UBLK_U_IO_FETCH_REQ,
};

use crate::proc;

/// Tags per queue.
pub const DEPTH: u16 = 4;

/// The sector of the AIO read that the server holds: 3 MiB + 12 KiB, where
/// neither the partition scan nor udev's probes read a lone 4 KiB.
pub const AIO_SECTOR: u64 = (3 << 11) + 24;

/// Its length in sectors (the child reads 4 KiB).
pub const AIO_SECTORS: u32 = (crate::aio::READ_LEN >> 9) as u32;

/// What the test and the server thread share.
pub struct Shared {
    /// Hold the next AIO read.
    pub armed: AtomicBool,
    /// BLKRRPART is running: its read of sector 0 releases the held read.
    pub rescan: AtomicBool,
    /// Commit the held read now (the rescan ended without reading sector 0).
    pub release: AtomicBool,
    /// Leave the loop (the device was stopped).
    pub stop: AtomicBool,
    /// The server holds the AIO read now.
    pub holding: AtomicBool,
    /// Requests received.
    pub requests: AtomicU64,
    /// When the last one arrived, in ms since `t0`.
    last_ms: AtomicU64,
    /// The server thread's id, once it runs.
    pub tid: AtomicI32,
    /// The id of the thread that runs BLKRRPART, once it runs.
    pub rescan_tid: AtomicI32,
    t0: Instant,
}

impl Shared {
    pub fn new() -> Self {
        Shared {
            armed: AtomicBool::new(false),
            rescan: AtomicBool::new(false),
            release: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            holding: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
            tid: AtomicI32::new(0),
            rescan_tid: AtomicI32::new(0),
            t0: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    fn note_request(&self) {
        self.last_ms.store(self.now_ms(), SeqCst);
        self.requests.fetch_add(1, SeqCst);
    }

    /// How long ago the last request arrived; `None` before the first.
    pub fn quiet_for(&self) -> Option<Duration> {
        if self.requests.load(SeqCst) == 0 {
            return None;
        }
        let last = self.last_ms.load(SeqCst);
        Some(Duration::from_millis(self.now_ms().saturating_sub(last)))
    }
}

impl Default for Shared {
    fn default() -> Self {
        Self::new()
    }
}

/// What the server thread reports.
#[derive(Debug)]
pub enum Event {
    /// The AIO read arrived and is held.
    Held { q: u16, tag: u16 },
    /// A READ of sector 0 arrived while the AIO read is held and BLKRRPART
    /// runs; `rescan` says what /proc shows of the BLKRRPART thread then.
    Trigger { q: u16, tag: u16, rescan: String },
    /// The server is about to commit the held read, for the reason given.
    Releasing { why: &'static str },
    /// The commit of the held read returned, after `took`.
    Released { took: Duration },
    /// Something went wrong; the thread goes on where it can.
    Error(String),
}

/// What the test's threads send to it.
#[derive(Debug)]
pub enum Msg {
    Server(Event),
    /// BLKRRPART returned this (0 or -errno).
    Rescan(i32),
}

/// The user data of the commands of `q`/`tag`.
fn ud(q: u16, tag: u16) -> u64 {
    (u64::from(q) << 16) | u64::from(tag)
}

fn qtag(ud: u64) -> (u16, u16) {
    ((ud >> 16) as u16, ud as u16)
}

/// Whether `d` is the AIO read.
pub fn is_aio_read(d: &UblksrvIoDesc) -> bool {
    d.op() == UBLK_IO_OP_READ && d.start_sector == AIO_SECTOR && d.nr_sectors == AIO_SECTORS
}

/// Whether `d` reads sector 0.
pub fn reads_sector0(d: &UblksrvIoDesc) -> bool {
    d.op() == UBLK_IO_OP_READ && d.start_sector == 0 && d.nr_sectors > 0
}

/// What the thread needs: the char device, the address of each queue's
/// mapped descriptors, a buffer per tag (queue-major).
pub struct Setup {
    pub fd: RawFd,
    pub queues: u16,
    pub descs: Vec<usize>,
    pub bufs: Vec<Vec<u8>>,
    pub shared: Arc<Shared>,
    pub tx: Sender<Msg>,
}

struct Srv {
    s: Setup,
    ring: IoUring<squeue::Entry>,
    held: Option<(u16, u16, UblksrvIoDesc)>,
    /// The AIO read was held and released: never hold another.
    held_done: bool,
    /// Tags whose command is in the kernel.
    live: usize,
}

/// The server thread's body: serves until stopped, or until every command
/// was aborted (the device was stopped).
pub fn run(s: Setup) -> Result<()> {
    s.shared.tid.store(proc::gettid(), SeqCst);
    let entries = (u32::from(s.queues) * u32::from(DEPTH))
        .next_power_of_two()
        .max(8);
    let ring = IoUring::<squeue::Entry>::builder()
        .build(entries)
        .context("io_uring_setup")?;
    let mut srv = Srv {
        s,
        ring,
        held: None,
        held_done: false,
        live: 0,
    };
    srv.fetch_all()?;
    srv.serve_loop()
}

impl Srv {
    fn send(&self, e: Event) {
        let _ = self.s.tx.send(Msg::Server(e));
    }

    fn buf_addr(&mut self, q: u16, tag: u16) -> u64 {
        let i = usize::from(q) * usize::from(DEPTH) + usize::from(tag);
        self.s.bufs[i].as_mut_ptr() as u64
    }

    fn push(&mut self, sqe: squeue::Entry) -> Result<()> {
        // SAFETY: the buffers the command names live as long as the ring
        // (both are this thread's; the ring is dropped first).
        unsafe { self.ring.submission().push(&sqe) }.context("submission queue full")
    }

    /// FETCH_REQ of every tag, in one submission.
    fn fetch_all(&mut self) -> Result<()> {
        for q in 0..self.s.queues {
            for tag in 0..DEPTH {
                let addr = self.buf_addr(q, tag);
                let sqe =
                    io_sqe(self.s.fd, UBLK_U_IO_FETCH_REQ, q, tag, addr).user_data(ud(q, tag));
                self.push(sqe)?;
                self.live += 1;
            }
        }
        self.ring.submit().context("io_uring_enter (FETCH_REQ)")?;
        Ok(())
    }

    /// Completions that arrive within `wait`.
    fn completions(&mut self, wait: Duration) -> Result<Vec<(u64, i32)>> {
        let mut out: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        if out.is_empty() {
            let ts = types::Timespec::from(wait);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
                Err(e) => bail!("io_uring_enter (wait): {e}"),
            }
            out.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        }
        Ok(out)
    }

    fn serve_loop(&mut self) -> Result<()> {
        loop {
            if self.s.shared.stop.load(SeqCst) {
                return Ok(());
            }
            if self.held.is_some() && self.s.shared.release.load(SeqCst) {
                self.release_held("the test asked for it")?;
            }
            for (data, res) in self.completions(Duration::from_millis(50))? {
                let (q, tag) = qtag(data);
                match res {
                    0 => self.request(q, tag)?,
                    UBLK_IO_RES_ABORT => self.live -= 1,
                    r => {
                        self.live -= 1;
                        self.send(Event::Error(format!(
                            "the command of queue {q} tag {tag} completed with {r}"
                        )));
                    }
                }
            }
            if self.live == 0 && self.held.is_none() {
                return Ok(());
            }
        }
    }

    /// A request was delivered to `q`/`tag`.
    fn request(&mut self, q: u16, tag: u16) -> Result<()> {
        let base = self.s.descs[usize::from(q)] as *const UblksrvIoDesc;
        // SAFETY: the mapping holds the descriptors of every tag of queue
        // `q`, which the driver wrote before it completed the command.
        let desc = unsafe { std::ptr::read_volatile(base.add(usize::from(tag))) };
        self.s.shared.note_request();
        let sh = &self.s.shared;
        if sh.armed.load(SeqCst) && !self.held_done && self.held.is_none() && is_aio_read(&desc) {
            self.held = Some((q, tag, desc));
            sh.holding.store(true, SeqCst);
            self.send(Event::Held { q, tag });
            return Ok(());
        }
        if self.held.is_some() && sh.rescan.load(SeqCst) && reads_sector0(&desc) {
            let rescan = rescan_thread(sh.rescan_tid.load(SeqCst));
            self.send(Event::Trigger { q, tag, rescan });
            self.release_held("the rescan's read of sector 0 arrived")?;
        }
        self.commit(q, tag, &desc)
    }

    /// Commits the held read, in an io_uring_enter() of its own.
    fn release_held(&mut self, why: &'static str) -> Result<()> {
        let Some((q, tag, desc)) = self.held.take() else {
            return Ok(());
        };
        self.held_done = true;
        self.send(Event::Releasing { why });
        let start = Instant::now();
        self.commit(q, tag, &desc)?;
        self.s.shared.holding.store(false, SeqCst);
        self.send(Event::Released {
            took: start.elapsed(),
        });
        Ok(())
    }

    /// COMMIT_AND_FETCH_REQ of `q`/`tag` with the result that serves `d`.
    fn commit(&mut self, q: u16, tag: u16, d: &UblksrvIoDesc) -> Result<()> {
        let len = (d.nr_sectors as usize) << 9;
        let i = usize::from(q) * usize::from(DEPTH) + usize::from(tag);
        let res = match d.op() {
            UBLK_IO_OP_READ => {
                let len = len.min(self.s.bufs[i].len());
                self.s.bufs[i][..len].fill(0);
                len as i32
            }
            UBLK_IO_OP_WRITE => len as i32,
            _ => 0,
        };
        let addr = self.buf_addr(q, tag);
        let sqe = io_sqe_result(self.s.fd, UBLK_U_IO_COMMIT_AND_FETCH_REQ, q, tag, addr, res)
            .user_data(ud(q, tag));
        self.push(sqe)?;
        self.ring.submit().with_context(|| {
            format!("io_uring_enter (COMMIT_AND_FETCH_REQ of queue {q} tag {tag})")
        })?;
        Ok(())
    }
}

/// What /proc shows of the BLKRRPART thread `tid`, once it sleeps in the
/// kernel (up to 1 s): its read of sector 0 is what it waits for.
fn rescan_thread(tid: i32) -> String {
    if tid == 0 {
        return "the BLKRRPART thread has no id yet".into();
    }
    let start = Instant::now();
    while proc::thread_state(tid) != Some('D') && start.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let scan = match proc::thread_stack(tid) {
        Ok(frames) if frames.iter().any(|f| f.contains("bdev_disk_changed")) => {
            ", in bdev_disk_changed() (disk->open_mutex held)"
        }
        Ok(_) => ", its stack does not show bdev_disk_changed()",
        Err(_) => "",
    };
    format!("{}{scan}", proc::thread_line(tid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data() {
        assert_eq!(qtag(ud(3, 2)), (3, 2));
        assert_eq!(qtag(ud(0, 0xffff)), (0, 0xffff));
    }

    #[test]
    fn which_reads() {
        let d = |op: u8, sector: u64, n: u32| UblksrvIoDesc {
            op_flags: u32::from(op),
            nr_sectors: n,
            start_sector: sector,
            addr: 0,
        };
        assert!(is_aio_read(&d(UBLK_IO_OP_READ, AIO_SECTOR, 8)));
        assert!(!is_aio_read(&d(UBLK_IO_OP_READ, AIO_SECTOR, 16)));
        assert!(!is_aio_read(&d(UBLK_IO_OP_WRITE, AIO_SECTOR, 8)));
        assert!(reads_sector0(&d(UBLK_IO_OP_READ, 0, 8)));
        assert!(!reads_sector0(&d(UBLK_IO_OP_READ, 8, 8)));
        assert!(!reads_sector0(&d(UBLK_IO_OP_WRITE, 0, 8)));
        assert_eq!(AIO_SECTOR * 512, 3 * 1024 * 1024 + 12 * 1024);
    }
}
