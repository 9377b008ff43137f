//! Zero copy (`UBLK_F_SUPPORT_ZERO_COPY`): `UBLK_U_IO_REGISTER_IO_BUF`
//! registers the request of a tag as a fixed buffer of the command's ring,
//! and `UBLK_U_IO_UNREGISTER_IO_BUF` unregisters it. Registering needs a
//! request with data that the server serves and a free index in the ring's
//! table; io_uring's own errors come back as they are. A request that the
//! server commits while its buffer is registered ends only once io_uring
//! releases the buffer: when it is unregistered, or when its ring is torn
//! down.

use anyhow::{bail, Result};
use io_uring::squeue;
use libc::{EBUSY, EINVAL};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use ublk_uapi::*;

use super::server::Server;
use super::usercopy::Held;
use super::{case, err, Case, OK};
use crate::chardev::{io_sqe, io_sqe_result};
use crate::env::Env;
use crate::errno::show;
use crate::ring::{Got, Ring, PEEK, WAIT};

/// Size of the buffer table of the rings of these cases.
const TABLE: u32 = 4;

/// A held read on a zero-copy device, whose server ring has a buffer table.
fn held(env: &mut Env) -> Result<Held> {
    let mut h = Held::new(env, UBLK_F_SUPPORT_ZERO_COPY)?;
    h.s.ring.register_sparse_buffers(TABLE)?;
    Ok(h)
}

fn register_io_buf(env: &mut Env) -> Result<Got> {
    let mut h = held(env)?;
    h.s.cmd(UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 0)
}

fn register_io_buf_index_out_of_table(env: &mut Env) -> Result<Got> {
    let mut h = held(env)?;
    h.s.cmd(UBLK_U_IO_REGISTER_IO_BUF, 0, 0, u64::from(TABLE))
}

fn register_io_buf_index_in_use(env: &mut Env) -> Result<Got> {
    let mut h = held(env)?;
    match h.s.cmd(UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 1)? {
        Got::Res(0) => {}
        got => bail!("setup: the first REGISTER_IO_BUF got {}", show(got)),
    }
    h.s.cmd(UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 1)
}

fn register_io_buf_without_zero_copy(env: &mut Env) -> Result<Got> {
    let mut h = Held::new(env, UBLK_F_USER_COPY)?;
    h.s.ring.register_sparse_buffers(TABLE)?;
    h.s.cmd(UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 0)
}

/// A zero-copy device whose tag 0 is fetched and holds no request.
fn fetched(env: &mut Env) -> Result<Server> {
    let mut s = Server::with_flags(env, 2, UBLK_F_SUPPORT_ZERO_COPY)?;
    s.ring.register_sparse_buffers(TABLE)?;
    match s.cmd(UBLK_U_IO_FETCH_REQ, 0, 0, 0)? {
        Got::Pending => Ok(s),
        got => bail!("setup: FETCH_REQ completed with {}", show(got)),
    }
}

fn register_io_buf_of_fetched_tag(env: &mut Env) -> Result<Got> {
    let mut s = fetched(env)?;
    s.cmd(UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 0)
}

fn register_io_buf_of_fetched_tag_from_other_thread(env: &mut Env) -> Result<Got> {
    let s = fetched(env)?;
    let fd = s.file.as_raw_fd();
    let other = std::thread::spawn(move || -> Result<Got> {
        let mut ring = Ring::<squeue::Entry>::new()?;
        ring.register_sparse_buffers(TABLE)?;
        ring.run(io_sqe(fd, UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 0), WAIT)
    });
    match other.join() {
        Ok(r) => r,
        Err(_) => bail!("the registering thread panicked"),
    }
}

fn unregister_io_buf_never_registered(env: &mut Env) -> Result<Got> {
    let mut s = fetched(env)?;
    s.cmd(UBLK_U_IO_UNREGISTER_IO_BUF, 0, 0, 0)
}

fn unregister_io_buf_without_table(env: &mut Env) -> Result<Got> {
    let mut s = Server::with_flags(env, 2, UBLK_F_SUPPORT_ZERO_COPY)?;
    s.cmd(UBLK_U_IO_UNREGISTER_IO_BUF, 0, 0, 0)
}

/// Reads how many requests of the disk of device `id` are in flight.
fn in_flight(id: u32) -> Result<u64> {
    let path = format!("/sys/block/ublkb{id}/inflight");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        // The disk is gone (a device without user recovery stops once its
        // server does): nothing of it is in flight.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut sum = 0;
    for field in text.split_whitespace() {
        sum += field.parse::<u64>()?;
    }
    Ok(sum)
}

/// Waits up to 5 s for `done` to say yes.
fn within_5s(mut done: impl FnMut() -> Result<bool>) -> Result<bool> {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if done()? {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// The held read's buffer is registered, and the read committed: it must
/// stay in flight, its tag (the only one) busy, until `release` makes
/// io_uring let go of the buffer, and end then. The result is 0 if so, 1 if
/// the read ended at the commit (the commit's fetch got a new request), 2
/// if it was not in flight after the commit, 3 if it did not end within
/// 5 s of the release.
fn request_ends_at_release(
    env: &mut Env,
    register_on_own_ring: bool,
    release: impl FnOnce(&mut Held, Option<Ring<squeue::Entry>>) -> Result<()>,
) -> Result<Got> {
    let mut h = held(env)?;
    let fd = h.fd();
    let mut other = None;
    let got = if register_on_own_ring {
        h.s.cmd(UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 0)?
    } else {
        let mut ring = Ring::<squeue::Entry>::new()?;
        ring.register_sparse_buffers(TABLE)?;
        let got = ring.run(io_sqe(fd, UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 0), WAIT)?;
        other = Some(ring);
        got
    };
    if got != OK {
        bail!("setup: REGISTER_IO_BUF got {}", show(got));
    }
    let commit = io_sqe_result(
        fd,
        UBLK_U_IO_COMMIT_AND_FETCH_REQ,
        0,
        0,
        0,
        h.bytes() as i32,
    );
    let token = h.s.ring.submit(commit)?;
    if h.s.ring.wait(token, PEEK)? != Got::Pending {
        return Ok(Got::Res(1));
    }
    if in_flight(h.s.dev.id)? != 1 || h.s.ring.wait(token, PEEK)? != Got::Pending {
        return Ok(Got::Res(2));
    }
    release(&mut h, other)?;
    // Ended: nothing in flight, or the tag went to the next request.
    let ended = within_5s(|| {
        Ok(in_flight(h.s.dev.id)? == 0 || h.s.ring.wait(token, Duration::ZERO)? != Got::Pending)
    })?;
    Ok(Got::Res(if ended { 0 } else { 3 }))
}

fn request_ends_at_unregister(env: &mut Env) -> Result<Got> {
    request_ends_at_release(env, true, |h, _| {
        match h.s.cmd(UBLK_U_IO_UNREGISTER_IO_BUF, 0, 0, 0)? {
            Got::Res(0) => Ok(()),
            got => bail!("UNREGISTER_IO_BUF got {}", show(got)),
        }
    })
}

fn request_ends_at_ring_teardown(env: &mut Env) -> Result<Got> {
    request_ends_at_release(env, false, |_, ring| {
        drop(ring);
        Ok(())
    })
}

/// Reads the reference count of the module that provides the driver: the
/// Rust driver may be loaded as `rust_ublk`. `None` if neither is a module.
fn module_refcnt() -> Option<u64> {
    ["ublk_drv", "rust_ublk"].iter().find_map(|m| {
        let text = std::fs::read_to_string(format!("/sys/module/{m}/refcnt")).ok()?;
        text.trim().parse().ok()
    })
}

/// The server closes `/dev/ublkcN` while another ring of it holds the
/// buffer of its held read: the read stays in flight until that ring lets
/// go of the buffer, then ends (the device stops, having no user recovery),
/// and the references to the module come back to what they were (the
/// release of the file waits for the buffer beside, and may hold one
/// meanwhile). 0 if so; 1 if the read ended when the file was closed, 2
/// if it did not end within 5 s of the buffer's release, 3 if the module's
/// reference count did not come back within 5 s.
fn read_ends_once_closed_server_buffer_goes(env: &mut Env) -> Result<Got> {
    let before = module_refcnt();
    let h = held(env)?;
    let (id, fd) = (h.s.dev.id, h.fd());
    let mut other = Ring::<squeue::Entry>::new()?;
    other.register_sparse_buffers(TABLE)?;
    match other.run(io_sqe(fd, UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 0), WAIT)? {
        Got::Res(0) => {}
        got => bail!("setup: REGISTER_IO_BUF got {}", show(got)),
    }
    // The server goes: its ring, its file and its mapping of the descriptors.
    drop(h);
    std::thread::sleep(Duration::from_millis(200));
    if in_flight(id)? != 1 {
        return Ok(Got::Res(1));
    }
    drop(other);
    if !within_5s(|| Ok(in_flight(id)? == 0))? {
        return Ok(Got::Res(2));
    }
    if let Some(before) = before {
        if !within_5s(|| Ok(module_refcnt() == Some(before)))? {
            return Ok(Got::Res(3));
        }
    }
    Ok(Got::Res(0))
}

/// Counts the workers that run a work item of the Rust driver's own
/// release queue: while a worker runs one, its name ends in `+` and the
/// queue's name. The C driver has no such queue (0).
fn busy_release_workers() -> Result<usize> {
    let mut busy = 0;
    for entry in std::fs::read_dir("/proc")? {
        // Tasks come and go while the directory is read.
        let Ok(entry) = entry else { continue };
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        if comm.trim_end().ends_with("+rust_ublk_release") {
            busy += 1;
        }
    }
    Ok(busy)
}

/// Servers whose releases wait at once in this case.
const WAITING: usize = 4;

/// `WAITING` servers close `/dev/ublkcN` while other rings hold the buffers
/// of their held reads: each release waits for its buffer, and no release
/// may keep a worker meanwhile (the release queue runs a bounded number of
/// work items at once: as many dead servers whose buffers stay would hold
/// back the release of every other device); one worker looks at them all.
/// The busy workers of the release queue are counted every 50 ms for a
/// second: in the last half second the Rust driver must have exactly one,
/// the looking one (none would mean that the count tells nothing), the C
/// driver, which has no such queue, none. Then the
/// rings let go, and every read ends. 0 if so; 1 if a read ended when its
/// file was closed; 2 if the counts were others; 3 if a read did not end
/// within 5 s of its buffer's release.
fn waiting_releases_keep_no_worker(env: &mut Env) -> Result<Got> {
    let rust = !crate::ctrl::is_c_driver()?;
    let mut waiting = Vec::new();
    for _ in 0..WAITING {
        let h = held(env)?;
        let mut other = Ring::<squeue::Entry>::new()?;
        other.register_sparse_buffers(TABLE)?;
        match other.run(io_sqe(h.fd(), UBLK_U_IO_REGISTER_IO_BUF, 0, 0, 0), WAIT)? {
            Got::Res(0) => {}
            got => bail!("setup: REGISTER_IO_BUF got {}", show(got)),
        }
        waiting.push((h.s.dev.id, h, other));
    }
    let mut rings = Vec::new();
    for (id, h, other) in waiting {
        drop(h);
        rings.push((id, other));
    }
    // The releases run, find their buffers held, and wait.
    let mut counts = Vec::new();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(50));
        counts.push(busy_release_workers()?);
    }
    for &(id, _) in &rings {
        if in_flight(id)? != 1 {
            return Ok(Got::Res(1));
        }
    }
    for (id, other) in rings {
        drop(other);
        if !within_5s(|| Ok(in_flight(id)? == 0))? {
            return Ok(Got::Res(3));
        }
    }
    let last = &counts[counts.len() / 2..];
    let expected = usize::from(rust);
    if last.iter().any(|&n| n != expected) {
        println!(
            "# busy workers of the release queue every 50 ms while {WAITING} releases waited: \
             {counts:?}, expected {expected} in the last half"
        );
        return Ok(Got::Res(2));
    }
    Ok(Got::Res(0))
}

pub const CASES: &[Case] = &[
    case!(register_io_buf, OK),
    case!(register_io_buf_index_out_of_table, err(EINVAL)),
    case!(register_io_buf_index_in_use, err(EBUSY)),
    case!(register_io_buf_without_zero_copy, err(EINVAL)),
    case!(register_io_buf_of_fetched_tag, err(EBUSY)),
    case!(
        register_io_buf_of_fetched_tag_from_other_thread,
        err(EINVAL)
    ),
    case!(unregister_io_buf_never_registered, err(EINVAL)),
    case!(unregister_io_buf_without_table, err(EINVAL)),
    case!(request_ends_at_unregister, OK),
    case!(request_ends_at_ring_teardown, OK),
    case!(read_ends_once_closed_server_buffer_goes, OK),
    case!(waiting_releases_keep_no_worker, OK),
];
