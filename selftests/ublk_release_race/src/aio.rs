//! Linux AIO through the raw syscalls (`io_setup`, `io_submit`,
//! `io_getevents`; no libaio), and the child process that holds the last
//! reference of a file of the disk in an AIO request.
//!
//! The child opens the disk with `O_RDONLY | O_DIRECT`, submits one
//! `IOCB_CMD_PREAD` and closes the descriptor at once: `io_submit()` took a
//! reference of the file for the request (`fget()` in `__io_submit_one()`),
//! which the request drops when it completes (`iocb_destroy()`, from the
//! bio's end: `blkdev_bio_end_io_async()` -> `aio_complete_rw()` ->
//! `iocb_put()`). With the descriptor closed, that is the file's last
//! reference, so the release of the file (`blkdev_release()`) follows
//! wherever the request ends.
//!
//! The child is forked before the test starts any thread or opens anything
//! of the device (it inherits nothing that matters), and waits for the
//! parent's go over a pipe.

use anyhow::{bail, Context, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::proc::{poll_read, write_all};

/// `struct iocb` of `<linux/aio_abi.h>`.
#[repr(C)]
#[derive(Default)]
struct Iocb {
    aio_data: u64,
    #[cfg(target_endian = "little")]
    aio_key: u32,
    aio_rw_flags: i32,
    #[cfg(target_endian = "big")]
    aio_key: u32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// `struct io_event` of `<linux/aio_abi.h>`.
#[repr(C)]
#[derive(Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PREAD: u16 = 0;

/// Bytes the child reads.
pub const READ_LEN: usize = 4096;

/// How long the child waits for its read's completion.
const EVENT_WAIT: Duration = Duration::from_secs(90);

/// How long the child waits for the go.
const GO_WAIT: Duration = Duration::from_secs(240);

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// An AIO context of one request, destroyed on drop (which waits for a
/// request still in flight: drop it only once the request completed).
struct Ctx(libc::c_ulong);

impl Ctx {
    fn new() -> Result<Self, i32> {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the context id to `ctx`.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, 1 as libc::c_uint, &mut ctx) };
        if r != 0 {
            return Err(-errno());
        }
        Ok(Ctx(ctx))
    }

    /// Submits `iocb`; Ok once the kernel took it.
    fn submit(&self, iocb: &mut Iocb) -> Result<(), i32> {
        let mut list = [iocb as *mut Iocb];
        // SAFETY: one valid iocb; its buffer outlives the request (the
        // child waits for the completion or exits).
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_submit,
                self.0,
                1 as libc::c_long,
                list.as_mut_ptr(),
            )
        };
        match r {
            1 => Ok(()),
            r if r < 0 => Err(-errno()),
            _ => Err(-libc::EAGAIN),
        }
    }

    /// Waits up to `wait` for the one event; `Ok(None)` on timeout.
    fn event(&self, wait: Duration) -> Result<Option<i64>, i32> {
        let mut ev = IoEvent::default();
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        loop {
            // SAFETY: room for one event; a valid timeout.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.0,
                    1 as libc::c_long,
                    1 as libc::c_long,
                    &mut ev,
                    &ts,
                )
            };
            match r {
                1 => return Ok(Some(ev.res)),
                0 => return Ok(None),
                _ if errno() == libc::EINTR => continue,
                _ => return Err(-errno()),
            }
        }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: our own context.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.0) };
    }
}

/// A 4 KiB-aligned buffer for the O_DIRECT read.
struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        AlignedBuf { ptr, layout }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Where the child's run stopped, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Stage {
    Open = 1,
    Setup = 2,
    Submit = 3,
    Event = 4,
    Go = 5,
}

impl Stage {
    fn from(v: u32) -> Option<Self> {
        Some(match v {
            1 => Stage::Open,
            2 => Stage::Setup,
            3 => Stage::Submit,
            4 => Stage::Event,
            5 => Stage::Go,
            _ => return None,
        })
    }

    pub fn what(self) -> &'static str {
        match self {
            Stage::Open => "open of the disk with O_DIRECT",
            Stage::Setup => "io_setup",
            Stage::Submit => "io_submit",
            Stage::Event => "io_getevents",
            Stage::Go => "the wait for the go",
        }
    }
}

/// What the child reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The read is submitted and the descriptor closed.
    Submitted,
    /// The read's event: its result (bytes or -errno).
    Done(i64),
    /// No event within the child's wait.
    NoEvent,
    /// A step failed with -errno.
    Failed(Stage, i32),
}

fn encode(r: Report) -> [u8; 16] {
    let (kind, stage, val) = match r {
        Report::Submitted => (1u32, 0u32, 0i64),
        Report::Done(v) => (2, 0, v),
        Report::NoEvent => (3, 0, 0),
        Report::Failed(s, e) => (4, s as u32, e as i64),
    };
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&kind.to_ne_bytes());
    b[4..8].copy_from_slice(&stage.to_ne_bytes());
    b[8..16].copy_from_slice(&val.to_ne_bytes());
    b
}

fn decode(b: &[u8; 16]) -> Option<Report> {
    let kind = u32::from_ne_bytes(b[0..4].try_into().ok()?);
    let stage = u32::from_ne_bytes(b[4..8].try_into().ok()?);
    let val = i64::from_ne_bytes(b[8..16].try_into().ok()?);
    Some(match kind {
        1 => Report::Submitted,
        2 => Report::Done(val),
        3 => Report::NoEvent,
        4 => Report::Failed(Stage::from(stage)?, val as i32),
        _ => return None,
    })
}

/// The parent's side of the child.
pub struct Child {
    pid: libc::pid_t,
    /// Closed once the child is no longer needed: a child still waiting
    /// for the go then exits.
    go: Option<OwnedFd>,
    reports: OwnedFd,
    reaped: bool,
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe2: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors that we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Child {
    /// Forks the child. The process must be single-threaded.
    pub fn spawn(offset: u64) -> Result<Self> {
        let (go_r, go_w) = pipe()?;
        let (rep_r, rep_w) = pipe()?;
        // SAFETY: single-threaded, so the child may allocate; it leaves
        // with _exit and never returns into the caller.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            drop(go_w);
            drop(rep_r);
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                child_main(&go_r, &rep_w, offset)
            }));
            // SAFETY: leaving the forked child without running the
            // parent's destructors.
            unsafe { libc::_exit(if out.is_ok() { 0 } else { 1 }) };
        }
        Ok(Child {
            pid,
            go: Some(go_w),
            reports: rep_r,
            reaped: false,
        })
    }

    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Tells the child to read from the disk of device `id`, from CPU
    /// `cpu` if given.
    pub fn go(&self, id: u32, cpu: Option<usize>) -> Result<()> {
        let cpu = cpu.map_or(-1i64, |c| c as i64);
        let mut b = [0u8; 12];
        b[0..4].copy_from_slice(&id.to_ne_bytes());
        b[4..12].copy_from_slice(&cpu.to_ne_bytes());
        let Some(go) = &self.go else {
            bail!("the AIO child was let go already");
        };
        write_all(go.as_raw_fd(), &b).context("telling the AIO child to start")
    }

    /// Closes the go pipe: a child that did not get the go exits.
    pub fn let_go(&mut self) {
        self.go = None;
    }

    /// The child's next report, waiting up to `wait`; `None` if none came.
    pub fn report(&self, wait: Duration) -> Result<Option<Report>> {
        let mut b = [0u8; 16];
        match poll_read(self.reports.as_raw_fd(), &mut b, wait)? {
            0 => Ok(None),
            16 => decode(&b)
                .map(Some)
                .context("the AIO child sent a report that makes no sense"),
            n => bail!("the AIO child went away ({n} bytes of a report)"),
        }
    }

    /// Reaps the child if it exited within `wait`; false if it did not.
    pub fn reap(&mut self, wait: Duration) -> bool {
        let start = Instant::now();
        while !self.reaped {
            let mut status = 0;
            // SAFETY: our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid || r < 0 {
                self.reaped = true;
            } else if start.elapsed() > wait {
                return false;
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        true
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            // A child still waiting for the go (the test failed before)
            // leaves at the pipe's end or at this kill; a child whose read
            // is stuck does not go away, and is not waited for.
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            self.reap(Duration::from_secs(2));
        }
    }
}

fn send(fd: &OwnedFd, r: Report) {
    let _ = write_all(fd.as_raw_fd(), &encode(r));
}

/// The child: waits for the go, pins itself, opens the disk with O_DIRECT,
/// submits the read, closes the disk, reports, waits for the event and
/// reports its result.
fn child_main(go: &OwnedFd, rep: &OwnedFd, offset: u64) {
    let mut b = [0u8; 12];
    match poll_read(go.as_raw_fd(), &mut b, GO_WAIT) {
        Ok(12) => {}
        // The parent gave up, or went away.
        Ok(_) => return,
        Err(_) => return send(rep, Report::Failed(Stage::Go, -libc::EIO)),
    }
    let id = u32::from_ne_bytes(b[0..4].try_into().unwrap());
    let cpu = i64::from_ne_bytes(b[4..12].try_into().unwrap());
    if cpu >= 0 {
        // Best effort: the parent says when it asked for a CPU.
        let _ = crate::proc::pin(0, cpu as usize);
    }
    let mut opts = std::fs::OpenOptions::new();
    std::os::unix::fs::OpenOptionsExt::custom_flags(opts.read(true), libc::O_DIRECT);
    let disk = match ublk_badinput::cases::server::open_disk(id, &opts) {
        Ok(f) => f,
        Err(e) => return send(rep, Report::Failed(Stage::Open, e)),
    };
    let ctx = match Ctx::new() {
        Ok(c) => c,
        Err(e) => return send(rep, Report::Failed(Stage::Setup, e)),
    };
    let buf = AlignedBuf::new(READ_LEN);
    let mut iocb = Iocb {
        aio_lio_opcode: IOCB_CMD_PREAD,
        aio_fildes: disk.as_raw_fd() as u32,
        aio_buf: buf.ptr as u64,
        aio_nbytes: READ_LEN as u64,
        aio_offset: offset as i64,
        ..Default::default()
    };
    if let Err(e) = ctx.submit(&mut iocb) {
        return send(rep, Report::Failed(Stage::Submit, e));
    }
    // The request now holds the file's last reference.
    drop(disk);
    send(rep, Report::Submitted);
    match ctx.event(EVENT_WAIT) {
        Ok(Some(res)) => {
            send(rep, Report::Done(res));
            drop(ctx);
            drop(buf);
        }
        Ok(None) => {
            send(rep, Report::NoEvent);
            // The read is still in flight: io_destroy() would wait for it,
            // and freeing the buffer would let it write into freed memory.
            std::mem::forget(ctx);
            std::mem::forget(buf);
        }
        Err(e) => {
            send(rep, Report::Failed(Stage::Event, e));
            std::mem::forget(ctx);
            std::mem::forget(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_sizes() {
        assert_eq!(std::mem::size_of::<Iocb>(), 64);
        assert_eq!(std::mem::size_of::<IoEvent>(), 32);
        assert_eq!(std::mem::offset_of!(Iocb, aio_lio_opcode), 16);
        assert_eq!(std::mem::offset_of!(Iocb, aio_fildes), 20);
        assert_eq!(std::mem::offset_of!(Iocb, aio_buf), 24);
        assert_eq!(std::mem::offset_of!(Iocb, aio_offset), 40);
        assert_eq!(std::mem::offset_of!(Iocb, aio_flags), 56);
    }

    /// One AIO read of a regular file through [`Ctx`]: checks the ABI of
    /// the structs against the running kernel (passes without AIO).
    #[test]
    fn read_a_file() {
        let path =
            std::env::temp_dir().join(format!("ublk_release_race.aio.{}", std::process::id()));
        let data: Vec<u8> = (0..READ_LEN * 2).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let ctx = match Ctx::new() {
            Ok(c) => c,
            // No AIO in this kernel, or a seccomp filter forbids it.
            Err(e) if e == -libc::ENOSYS || e == -libc::EPERM => return,
            Err(e) => panic!("io_setup: {e}"),
        };
        let buf = AlignedBuf::new(READ_LEN);
        let mut iocb = Iocb {
            aio_lio_opcode: IOCB_CMD_PREAD,
            aio_fildes: file.as_raw_fd() as u32,
            aio_buf: buf.ptr as u64,
            aio_nbytes: READ_LEN as u64,
            aio_offset: READ_LEN as i64,
            ..Default::default()
        };
        ctx.submit(&mut iocb).unwrap();
        drop(file);
        assert_eq!(
            ctx.event(Duration::from_secs(10)),
            Ok(Some(READ_LEN as i64))
        );
        // SAFETY: the read completed into the buffer's READ_LEN bytes.
        let got = unsafe { std::slice::from_raw_parts(buf.ptr, READ_LEN) };
        assert_eq!(got, &data[READ_LEN..]);
    }

    #[test]
    fn report_roundtrip() {
        for r in [
            Report::Submitted,
            Report::Done(4096),
            Report::Done(-5),
            Report::NoEvent,
            Report::Failed(Stage::Submit, -libc::EINVAL),
        ] {
            assert_eq!(decode(&encode(r)), Some(r));
        }
    }
}
