//! Device state around START_DEV: the pid must be the server's, a device
//! starts once, its parameters are fixed once started, no FETCH_REQ is
//! taken once every tag is fetched, and a zoned device's server may go away
//! while START_DEV reads its zones, or answer it with none.

use anyhow::{bail, Result};
use io_uring::squeue;
use libc::{EACCES, EBUSY, EEXIST, EINVAL, EIO, ENODEV};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use ublk_uapi::*;

use super::ctrl::basic_params;
use super::server::Server;
use super::{case, err, Case};
use crate::chardev::{io_sqe, io_sqe_result};
use crate::ctrl::{hdr, sqe128, with_buf};
use crate::env::Env;
use crate::errno::show;
use crate::ring::{Got, Ring, PEEK, WAIT};

fn start_dev_pid_not_server(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.fetch(0)?;
    s.set_params(env)?;
    // pid 1 is init, not the process that opened /dev/ublkcN.
    s.start(env, 1)
}

fn start_dev_twice(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.start_setup(env)?;
    s.start(env, std::process::id() as u64)
}

fn set_params_on_started_device(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.start_setup(env)?;
    let mut p = basic_params();
    env.ctrl
        .run(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(s.dev.id), &mut p))
}

fn fetch_on_started_device(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.start_setup(env)?;
    let addr = s.buf.addr();
    s.cmd(UBLK_U_IO_FETCH_REQ, 0, 0, addr)
}

/// Sets zoned parameters (zones of 256 sectors) on `s`'s device and sends
/// START_DEV on a ring of its own: START_DEV reads the zones through the
/// server before it completes.
fn start_zoned(env: &mut Env, s: &Server) -> Result<(Ring<squeue::Entry128>, u64)> {
    let mut p = basic_params();
    p.types |= UBLK_PARAM_TYPE_ZONED;
    p.basic.chunk_sectors = 256;
    p.zoned.max_zone_append_sectors = 64;
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(s.dev.id), &mut p))?;
    if r != 0 {
        bail!(
            "setup: SET_PARAMS of zoned parameters failed: {}",
            show(Got::Res(r))
        );
    }
    let mut h = hdr(s.dev.id);
    h.data[0] = std::process::id() as u64;
    let mut ctrl = Ring::<squeue::Entry128>::new()?;
    let start = ctrl.submit(sqe128(env.ctrl.fd(), UBLK_U_CMD_START_DEV, &h))?;
    Ok((ctrl, start))
}

/// A zoned device (user copy) whose server answers START_DEV's zone report
/// with no zone (result 0, nothing copied): START_DEV fails with ENODEV, the
/// block layer's "no zones reported". A short answer is the end of the
/// server's zones: a driver that took it for the end of one request only
/// asks again from the same sector, as long as the server answers, and
/// START_DEV never completes (the C driver of 7.3.4). More than a few
/// requests for the report is that bug.
fn start_dev_zoned_report_answered_empty(env: &mut Env) -> Result<Got> {
    const MAX_REPORTS: u32 = 4;
    let mut s = Server::with_flags(env, 2, UBLK_F_ZONED | UBLK_F_USER_COPY)?;
    let fd = s.file.as_raw_fd();
    // With user copy, commands name no buffer.
    let mut fetches = [
        s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 0, 0))?,
        s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 1, 0))?,
    ];
    let (mut ctrl, start) = start_zoned(env, &s)?;
    let deadline = Instant::now() + WAIT;
    let mut reports = 0;
    loop {
        if let got @ Got::Res(_) = ctrl.wait(start, Duration::ZERO)? {
            return Ok(got);
        }
        for (tag, fetch) in (0u16..).zip(fetches.iter_mut()) {
            match s.ring.wait(*fetch, Duration::from_millis(20))? {
                Got::Pending => continue,
                Got::Res(0) => {}
                got => bail!("a fetch of tag {tag} completed with {}", show(got)),
            }
            reports += 1;
            if reports > MAX_REPORTS {
                bail!(
                    "the driver asked for the zones {reports} times after empty answers: \
                     a short answer must end the report"
                );
            }
            // No zone: nothing copied, result 0.
            let sqe = io_sqe_result(fd, UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, tag, 0, 0);
            *fetch = s.ring.submit(sqe)?;
        }
        if Instant::now() >= deadline {
            bail!(
                "START_DEV did not complete within {WAIT:?} ({reports} report requests answered)"
            );
        }
    }
}

/// A zoned device (user copy) whose server goes away while it holds the
/// zone report that START_DEV's reading of the zones sent it: START_DEV
/// fails with the report's error, and the device can be deleted (the case's
/// cleanup). A driver that held a lock across the report that the server's
/// exit needs would hang here.
fn start_dev_zoned_server_exits_during_report(env: &mut Env) -> Result<Got> {
    // Two tags: the report takes one, the other's fetch stays queued, so that
    // the server's exit cancels a command before it releases the char device.
    let mut s = Server::with_flags(env, 2, UBLK_F_ZONED | UBLK_F_USER_COPY)?;
    let fd = s.file.as_raw_fd();
    // With user copy, commands name no buffer.
    let fetches = [
        s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 0, 0))?,
        s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 1, 0))?,
    ];
    let (mut ctrl, start) = start_zoned(env, &s)?;
    // The report reaches the server through one of its fetches.
    let deadline = Instant::now() + WAIT;
    'report: loop {
        for &fetch in &fetches {
            match s.ring.wait(fetch, PEEK)? {
                Got::Res(0) => break 'report,
                Got::Pending => {}
                got => bail!("setup: a fetch completed with {}", show(got)),
            }
        }
        if Instant::now() >= deadline {
            bail!("setup: no request reached the server");
        }
    }
    // The server goes away: its ring, then its char device.
    drop(s);
    ctrl.wait(start, WAIT)
}

pub const CASES: &[Case] = &[
    case!(start_dev_pid_not_server, err(EINVAL)),
    case!(start_dev_twice, err(EEXIST)),
    case!(set_params_on_started_device, err(EACCES)),
    case!(fetch_on_started_device, err(EBUSY)),
    case!(start_dev_zoned_server_exits_during_report, err(EIO)),
    case!(start_dev_zoned_report_answered_empty, err(ENODEV)),
];
