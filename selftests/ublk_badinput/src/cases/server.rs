//! A would-be ublk server for the io and state cases: a device, its char
//! device open, a ring for io commands and a buffer for them to point at;
//! and [`Answering`], a started device whose I/O a thread answers.

use anyhow::{bail, Result};
use io_uring::squeue;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use ublk_uapi::{
    UblkParams, UblksrvCtrlCmd, UblksrvIoDesc, UBLK_F_UNPRIVILEGED_DEV, UBLK_IO_OP_READ,
    UBLK_IO_OP_WRITE, UBLK_U_CMD_SET_PARAMS, UBLK_U_CMD_START_DEV, UBLK_U_IO_COMMIT_AND_FETCH_REQ,
    UBLK_U_IO_FETCH_REQ,
};

use crate::chardev::{self, io_sqe, io_sqe_result, map_descs_setup, open_setup, IoBuf, Mapping};
use crate::ctrl::{hdr, sqe128};
use crate::env::{Dev, Env};
use crate::errno::show;
use crate::ring::{Got, Ring, PEEK, WAIT};

/// A would-be server: the open char device and a ring for io commands.
/// Fields drop in order: the ring first (cancelling queued FETCHes), then
/// the char device, then the buffer.
pub struct Server {
    pub ring: Ring<squeue::Entry>,
    pub file: File,
    pub buf: IoBuf,
    pub dev: Dev,
}

impl Server {
    /// A device with one queue of `depth` tags, its char device open.
    pub fn new(env: &mut Env, depth: u16) -> Result<Self> {
        Self::with_flags(env, depth, 0)
    }

    /// [`Server::new`] for a device that asks for the feature flags `flags`, and gets them.
    pub fn with_flags(env: &mut Env, depth: u16, flags: u64) -> Result<Self> {
        let dev = env.add(1, depth, flags)?;
        if dev.info.flags & flags != flags {
            bail!(
                "setup: the device lacks flags {:#x} that it asked for",
                flags & !dev.info.flags
            );
        }
        Self::on(dev)
    }

    /// A server of `dev`, which exists already: its char device open.
    pub fn on(dev: Dev) -> Result<Self> {
        let file = open_setup(dev.id)?;
        Ok(Server {
            ring: Ring::new()?,
            file,
            buf: IoBuf::new(),
            dev,
        })
    }

    pub fn cmd(&mut self, op: u32, q_id: u16, tag: u16, addr: u64) -> Result<Got> {
        let fd = self.file.as_raw_fd();
        self.ring.run(io_sqe(fd, op, q_id, tag, addr), PEEK)
    }

    /// A FETCH_REQ that must be queued (setup step).
    pub fn fetch(&mut self, tag: u16) -> Result<()> {
        let addr = self.buf.addr();
        match self.cmd(UBLK_U_IO_FETCH_REQ, 0, tag, addr)? {
            Got::Pending => Ok(()),
            got => bail!("setup: FETCH_REQ of tag {tag} completed with {}", show(got)),
        }
    }

    /// The header of a control command of the device whose buffer is
    /// `payload`, built in `buf`: the commands of a device created with
    /// `UBLK_F_UNPRIVILEGED_DEV` carry the path of its char device in front
    /// of it, even from root.
    pub fn ctrl_hdr(&self, buf: &mut Vec<u8>, payload: &[u8]) -> UblksrvCtrlCmd {
        let mut h = hdr(self.dev.id);
        buf.clear();
        if self.dev.info.flags & UBLK_F_UNPRIVILEGED_DEV != 0 {
            buf.extend_from_slice(format!("/dev/ublkc{}\0", self.dev.id).as_bytes());
            h.dev_path_len = buf.len() as u16;
        }
        buf.extend_from_slice(payload);
        if !buf.is_empty() {
            h.addr = buf.as_mut_ptr() as u64;
            h.len = buf.len() as u16;
        }
        h
    }

    /// SET_PARAMS with valid basic parameters (setup step).
    pub fn set_params(&self, env: &mut Env) -> Result<()> {
        let p = super::ctrl::basic_params();
        let mut buf = Vec::new();
        // SAFETY: `UblkParams` is plain old data; its bytes are read only.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&p as *const UblkParams).cast::<u8>(),
                std::mem::size_of::<UblkParams>(),
            )
        };
        let h = self.ctrl_hdr(&mut buf, bytes);
        let r = env.ctrl.cmd(UBLK_U_CMD_SET_PARAMS, &h)?;
        if r != 0 {
            bail!("setup: SET_PARAMS failed: {}", show(Got::Res(r)));
        }
        Ok(())
    }

    /// START_DEV claiming `pid` as the server, on a ring of its own: a
    /// driver may wait in START_DEV for the server, and must not block the
    /// commands of the cases after this one.
    pub fn start(&self, env: &Env, pid: u64) -> Result<Got> {
        let mut buf = Vec::new();
        let mut h = self.ctrl_hdr(&mut buf, &[]);
        h.data[0] = pid;
        let mut ring = Ring::<squeue::Entry128>::new()?;
        ring.run(sqe128(env.ctrl.fd(), UBLK_U_CMD_START_DEV, &h), WAIT)
    }

    /// Starts the device: fetches every tag, sets parameters, START_DEV
    /// (setup step). The device's I/O (udev probing it) then reaches this
    /// "server", which never answers; dropping the server aborts it.
    pub fn start_setup(&mut self, env: &mut Env) -> Result<()> {
        for tag in 0..self.dev.info.queue_depth {
            self.fetch(tag)?;
        }
        self.set_params(env)?;
        match self.start(env, std::process::id() as u64)? {
            Got::Res(0) => Ok(()),
            got => bail!("setup: START_DEV got {}", show(got)),
        }
    }
}

/// A started one-tag device (copy mode) whose requests a thread of its own
/// answers: reads and writes in full (reads with the zeroes of the
/// server's buffer), others with 0. The partition scan and udev's probes
/// then end, and let go of the disk, as with a real server; START_DEV may
/// wait for them (it runs on the case's thread while this one answers).
///
/// The thread fetches and commits (a tag belongs to the task that fetched
/// it). It ends when its fetch completes with an error (the device was
/// stopped: the driver cancels the server's commands) or when this is
/// dropped, which waits for it before closing the char device.
pub struct Answering {
    pub s: Server,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
    _descs: Mapping,
}

impl Answering {
    /// Adds a device that asks for `flags`, answers its I/O and starts it
    /// (setup step).
    pub fn start(env: &mut Env, flags: u64) -> Result<Self> {
        let s = Server::with_flags(env, 1, flags)?;
        Self::start_server(env, s)
    }

    /// [`Answering::start`] for `dev`, a one-tag device that exists already.
    pub fn start_on(env: &mut Env, dev: Dev) -> Result<Self> {
        let s = Server::on(dev)?;
        Self::start_server(env, s)
    }

    /// [`Answering::start`] with `s`, a would-be server of a one-tag device.
    pub fn start_server(env: &mut Env, mut s: Server) -> Result<Self> {
        let fd = s.file.as_raw_fd();
        let descs = map_descs_setup(fd, 1)?;
        let ring = std::mem::replace(&mut s.ring, Ring::new()?);
        let stop = Arc::new(AtomicBool::new(false));
        let (descs_addr, buf) = (descs.addr() as usize, s.buf.addr());
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || answer(ring, fd, descs_addr, buf, stop))
        };
        let a = Answering {
            s,
            stop,
            thread: Some(thread),
            _descs: descs,
        };
        a.s.set_params(env)?;
        match a.s.start(env, std::process::id() as u64)? {
            Got::Res(0) => Ok(a),
            got => bail!("setup: START_DEV got {}", show(got)),
        }
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread of [`Answering`]: answers tag 0 of the char device `fd`,
/// whose descriptors are mapped at `descs`, with the buffer `buf`, until
/// `stop` or a fetch that completes with an error.
fn answer(
    mut ring: Ring<squeue::Entry>,
    fd: RawFd,
    descs: usize,
    buf: u64,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let mut token = ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 0, buf))?;
    loop {
        match ring.wait(token, Duration::from_millis(200))? {
            Got::Pending if stop.load(Ordering::Relaxed) => return Ok(()),
            Got::Pending => continue,
            Got::Res(0) => {}
            // Stopped (UBLK_IO_RES_ABORT) or refused: nothing to answer.
            Got::Res(_) => return Ok(()),
        }
        // SAFETY: `descs` maps the descriptor of tag 0, which the driver
        // wrote before it completed the fetch, and outlives this thread.
        let desc = unsafe { std::ptr::read_volatile(descs as *const UblksrvIoDesc) };
        let res = match desc.op() {
            UBLK_IO_OP_READ | UBLK_IO_OP_WRITE => (desc.nr_sectors << 9) as i32,
            _ => 0,
        };
        let commit = io_sqe_result(fd, UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 0, buf, res);
        token = ring.submit(commit)?;
    }
}

/// Opens the disk of device `id` with `options` through a node of its own,
/// made from the disk's device number in sysfs: whatever is at
/// `/dev/ublkb<id>` (a file another test left there, a node still on its
/// way) does not matter. `Err(-errno)` on failure.
pub fn open_disk(id: u32, options: &std::fs::OpenOptions) -> Result<File, i32> {
    let (major, minor) = disk_devt(id)?;
    let node = format!("/tmp/ublk_badinput.{}.ublkb{id}", std::process::id());
    let cnode = std::ffi::CString::new(node.clone()).map_err(|_| -libc::EINVAL)?;
    let _ = std::fs::remove_file(&node);
    // SAFETY: `cnode` is a valid C string; mknod has no other preconditions.
    let r = unsafe {
        libc::mknod(
            cnode.as_ptr(),
            libc::S_IFBLK | 0o600,
            libc::makedev(major, minor),
        )
    };
    if r != 0 {
        return Err(-chardev::errno());
    }
    let file = options.open(&node);
    let _ = std::fs::remove_file(&node);
    file.map_err(|e| -e.raw_os_error().unwrap_or(libc::EIO))
}

/// The device number of the disk of device `id`, from sysfs, waiting up to
/// 5 s for it to appear. `Err(-errno)` on failure.
pub fn disk_devt(id: u32) -> Result<(u32, u32), i32> {
    let sys = format!("/sys/block/ublkb{id}/dev");
    let start = Instant::now();
    let devt = loop {
        match std::fs::read_to_string(&sys) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return Err(-e.raw_os_error().unwrap_or(libc::ENOENT)),
        }
    };
    devt.trim()
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or(-libc::EINVAL)
}
