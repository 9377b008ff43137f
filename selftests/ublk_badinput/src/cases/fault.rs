//! A server whose buffer faults while the driver copies a write into it
//! (copy mode). The C driver does not fail the write: if nothing could be
//! copied it dispatches the request again a little later, and if part could
//! it tells the server about that part only (the io descriptor's
//! `nr_sectors`). A driver that fails the write with EIO instead fails these
//! cases.

use anyhow::{bail, Context, Result};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use ublk_uapi::*;

use super::server::{open_disk, Server};
use super::{case, Case};
use crate::chardev::{self, io_sqe, io_sqe_result, page_size, Mapping};
use crate::env::{Env, MAX_IO_BUF_BYTES};
use crate::errno::show;
use crate::ring::Got;

/// The byte every written sector is filled with.
const PATTERN: u8 = 0x5a;

/// A one-tag server that serves whatever comes, with a buffer of the
/// largest I/O size whose pages' protection a case changes while it serves.
struct Serving {
    s: Server,
    descs: Mapping,
    buf: Mapping,
    /// The token of the FETCH or COMMIT that waits for the next request.
    token: u64,
    /// The write descriptors served so far: (start sector, sectors).
    writes: Vec<(u64, u32)>,
}

impl Serving {
    fn start(env: &mut Env) -> Result<Self> {
        if page_size() != 4096 {
            bail!(
                "setup: the expected sizes assume 4 KiB pages, not {}",
                page_size()
            );
        }
        let mut s = Server::new(env, 1)?;
        let fd = s.file.as_raw_fd();
        let descs = chardev::map_descs_setup(fd, 1)?;
        let buf = chardev::mmap(
            -1,
            MAX_IO_BUF_BYTES as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            0,
        )
        .map_err(|e| anyhow::anyhow!("setup: mmap of the buffer: {}", show(Got::Res(e))))?;
        let addr = buf.addr() as u64;
        let token = s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 0, addr))?;
        s.set_params(env)?;
        match s.start(env, std::process::id() as u64)? {
            Got::Res(0) => {}
            got => bail!("setup: START_DEV got {}", show(got)),
        }
        Ok(Serving {
            s,
            descs,
            buf,
            token,
            writes: Vec::new(),
        })
    }

    /// Sets the protection of buffer page `page` (`PROT_*`).
    fn protect(&self, page: usize, prot: i32) -> Result<()> {
        let p = page_size();
        // SAFETY: the range is a page of the buffer, which this object maps.
        let r =
            unsafe { libc::mprotect(self.buf.addr().cast::<u8>().add(page * p).cast(), p, prot) };
        if r != 0 {
            bail!("setup: mprotect: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Serves requests for `time`: reads and writes are committed in full
    /// (what the descriptor says), others with 0.
    fn serve(&mut self, time: Duration) -> Result<()> {
        let end = Instant::now() + time;
        while Instant::now() < end {
            let left = end.saturating_duration_since(Instant::now());
            match self
                .s
                .ring
                .wait(self.token, left.min(Duration::from_millis(20)))?
            {
                Got::Pending => continue,
                Got::Res(0) => {}
                Got::Res(r) => bail!("the fetch command completed with {}", show(Got::Res(r))),
            }
            // SAFETY: the mapping holds the descriptor of tag 0, which the
            // driver wrote before it completed the command.
            let desc =
                unsafe { std::ptr::read_volatile(self.descs.addr().cast::<UblksrvIoDesc>()) };
            let bytes = desc.nr_sectors << 9;
            let result = match desc.op() {
                UBLK_IO_OP_WRITE => {
                    self.writes.push((desc.start_sector, desc.nr_sectors));
                    bytes as i32
                }
                UBLK_IO_OP_READ => bytes as i32,
                _ => 0,
            };
            let fd = self.s.file.as_raw_fd();
            let addr = self.buf.addr() as u64;
            let sqe = io_sqe_result(fd, UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 0, addr, result);
            self.token = self.s.ring.submit(sqe)?;
        }
        Ok(())
    }

    /// Serves until `writer` returns, at most `limit`.
    fn serve_until(&mut self, writer: &Writer, limit: Duration) -> Result<()> {
        let end = Instant::now() + limit;
        while !writer.is_done() {
            if Instant::now() > end {
                bail!("the write did not complete within {limit:?}");
            }
            self.serve(Duration::from_millis(50))?;
        }
        Ok(())
    }
}

/// A thread that writes `len` bytes of [`PATTERN`] at offset 0 of
/// the disk of device `id` with O_DIRECT; its result is the pwrite result or
/// -errno.
struct Writer {
    tid: i32,
    done: mpsc::Receiver<i32>,
    result: std::cell::Cell<Option<i32>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    fn spawn(id: u32, len: usize) -> Result<Self> {
        let (tx, done) = mpsc::channel();
        let (tid_tx, tid_rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tid_tx.send(unsafe { libc::gettid() });
            let _ = tx.send(write_direct(id, len).unwrap_or_else(|e| e));
        });
        let tid = tid_rx
            .recv_timeout(Duration::from_secs(5))
            .context("setup: the writer thread did not start")?;
        Ok(Writer {
            tid,
            done,
            result: std::cell::Cell::new(None),
            thread: Some(thread),
        })
    }

    fn is_done(&self) -> bool {
        if self.result.get().is_none() {
            if let Ok(r) = self.done.try_recv() {
                self.result.set(Some(r));
            }
        }
        self.result.get().is_some()
    }

    /// Whether the thread sleeps uninterruptibly, as it does once its
    /// write is submitted and until it completes.
    fn is_waiting_for_io(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{}/stat", self.tid));
        // The state follows the command name, which is in parentheses.
        stat.ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('D'))
            })
            .unwrap_or(false)
    }

    fn result(mut self) -> i32 {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.result
            .get()
            .or_else(|| self.done.try_recv().ok())
            .unwrap_or(-libc::EIO)
    }
}

fn write_direct(id: u32, len: usize) -> Result<i32, i32> {
    let file = open_disk(
        id,
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT),
    )?;
    let layout = std::alloc::Layout::from_size_align(len, 4096).map_err(|_| -libc::EINVAL)?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(-libc::ENOMEM);
    }
    // SAFETY: `ptr` is a fresh, zeroed allocation of `len` bytes.
    let data = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
    data.fill(PATTERN);
    let r = file.write_at(data, 0);
    // SAFETY: allocated above with the same layout, no reference left.
    unsafe { std::alloc::dealloc(ptr, layout) };
    match r {
        Ok(n) => Ok(n as i32),
        Err(e) => Err(-e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// Nothing of a 4 KiB write can be copied to the buffer until it is
/// restored, 200 ms after the write was submitted: the write waits and
/// completes then. The result is that of pwrite.
fn write_while_buffer_faults(env: &mut Env) -> Result<Got> {
    let mut sv = Serving::start(env)?;
    // Let the partition scan and udev's probe pass first (reads that come
    // while the buffer faults only fail those).
    sv.serve(Duration::from_millis(500))?;
    sv.protect(0, libc::PROT_NONE)?;
    let writer = Writer::spawn(sv.s.dev.id, 4096)?;
    let submitted = Instant::now();
    while !writer.is_waiting_for_io() && !writer.is_done() {
        if submitted.elapsed() > Duration::from_secs(5) {
            bail!("the write was not submitted within 5 s");
        }
        sv.serve(Duration::from_millis(5))?;
    }
    sv.serve(Duration::from_millis(200))?;
    if writer.is_done() {
        let r = writer.result();
        bail!(
            "the write completed while the buffer faulted: {}",
            show(Got::Res(r))
        );
    }
    if !sv.writes.is_empty() {
        bail!(
            "the server got a write it could not have the data of: {:?}",
            sv.writes
        );
    }
    sv.protect(0, libc::PROT_READ | libc::PROT_WRITE)?;
    sv.serve_until(&writer, Duration::from_secs(10))
        .context("after the buffer came back")?;
    let r = writer.result();
    if sv.writes != [(0, 8)] {
        bail!("the server got the writes {:?}, not [(0, 8)]", sv.writes);
    }
    check_data(&sv, 8)?;
    Ok(Got::Res(r))
}

/// The second page of the buffer faults: the server is told about the first
/// 4 KiB of an 8 KiB write only. The result is how many sectors of the
/// write the server got in all, once pwrite succeeded: the rest is
/// dispatched again.
fn write_half_into_faulting_buffer(env: &mut Env) -> Result<Got> {
    let mut sv = Serving::start(env)?;
    sv.serve(Duration::from_millis(500))?;
    sv.protect(1, libc::PROT_NONE)?;
    let writer = Writer::spawn(sv.s.dev.id, 8192)?;
    sv.serve_until(&writer, Duration::from_secs(10))?;
    sv.protect(1, libc::PROT_READ | libc::PROT_WRITE)?;
    let r = writer.result();
    if r != 8192 {
        bail!("pwrite of 8192 bytes returned {}", show(Got::Res(r)));
    }
    let Some(&(start, sectors)) = sv.writes.first() else {
        bail!("the server got no write");
    };
    if (start, sectors) != (0, 8) {
        bail!("the first write the server got is {sectors} sectors at {start}, not 8 at 0");
    }
    check_data(&sv, 8)?;
    let mut next = 0;
    for &(start, sectors) in &sv.writes {
        if start != next {
            bail!(
                "the server got the writes {:?}: not contiguous from 0",
                sv.writes
            );
        }
        next += u64::from(sectors);
    }
    Ok(Got::Res(next as i32))
}

/// Checks that the first `sectors` sectors of the buffer hold the pattern.
fn check_data(sv: &Serving, sectors: u32) -> Result<()> {
    let len = sectors as usize * 512;
    if len > MAX_IO_BUF_BYTES as usize {
        bail!("{sectors} sectors do not fit in the buffer");
    }
    // SAFETY: the buffer maps `MAX_IO_BUF_BYTES` bytes, all readable again.
    let data = unsafe { std::slice::from_raw_parts(sv.buf.addr().cast::<u8>(), len) };
    if let Some(i) = data.iter().position(|&b| b != PATTERN) {
        bail!(
            "byte {i} the server got is {:#x}, not {PATTERN:#x}",
            data[i]
        );
    }
    Ok(())
}

pub const CASES: &[Case] = &[
    case!(write_while_buffer_faults, Got::Res(4096)),
    case!(
        write_half_into_faulting_buffer,
        Got::Res(16),
        c_bug = (
            Got::Res(8),
            "ends the whole write when the server got part of it: 4 KiB are lost"
        )
    ),
];
