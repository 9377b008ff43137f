//! io commands on /dev/ublkcN (copy mode): queue and tag range, FETCH_REQ
//! once per tag and only before the device is ready, COMMIT only for a
//! tag that the calling task fetched and that holds a request.

use anyhow::{bail, Result};
use io_uring::squeue;
use libc::{EBUSY, EINVAL, ENODEV};
use std::os::fd::AsRawFd;
use ublk_uapi::ioctl::{iowr, UBLK_IOC_TYPE};
use ublk_uapi::*;

use super::server::Server;
use super::{case, err, Case, QUEUED};
use crate::chardev::io_sqe;
use crate::ctrl::hdr;
use crate::env::Env;
use crate::errno::show;
use crate::ring::{Got, Ring, PEEK};

/// An io opcode the driver does not know.
const UNKNOWN_IO: u32 = iowr(UBLK_IOC_TYPE, 0x30, std::mem::size_of::<UblksrvIoCmd>());

fn probe(env: &mut Env, depth: u16, fetched: &[u16], op: u32, q_id: u16, tag: u16) -> Result<Got> {
    let mut s = Server::new(env, depth)?;
    for &t in fetched {
        s.fetch(t)?;
    }
    let addr = s.buf.addr();
    s.cmd(op, q_id, tag, addr)
}

fn fetch_ok(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[], UBLK_U_IO_FETCH_REQ, 0, 0)
}

fn fetch_queue_out_of_range(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[], UBLK_U_IO_FETCH_REQ, 1, 0)
}

fn fetch_queue_all_ones(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[], UBLK_U_IO_FETCH_REQ, u16::MAX, 0)
}

fn fetch_tag_out_of_range(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[], UBLK_U_IO_FETCH_REQ, 0, 2)
}

fn fetch_tag_all_ones(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[], UBLK_U_IO_FETCH_REQ, 0, u16::MAX)
}

fn fetch_without_buffer(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 2)?;
    s.cmd(UBLK_U_IO_FETCH_REQ, 0, 0, 0)
}

fn fetch_same_tag_twice(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[0], UBLK_U_IO_FETCH_REQ, 0, 0)
}

fn fetch_when_all_tags_fetched(env: &mut Env) -> Result<Got> {
    // Depth 1: the first FETCH makes the device ready.
    probe(env, 1, &[0], UBLK_U_IO_FETCH_REQ, 0, 0)
}

fn fetch_after_stop_dev(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 2)?;
    let r = env.ctrl.cmd(UBLK_U_CMD_STOP_DEV, &hdr(s.dev.id))?;
    if r != 0 {
        bail!("setup: STOP_DEV failed: {}", show(Got::Res(r)));
    }
    let addr = s.buf.addr();
    s.cmd(UBLK_U_IO_FETCH_REQ, 0, 0, addr)
}

fn commit_never_fetched(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[], UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 0)
}

fn commit_fetched_tag_without_request(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[0], UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 0)
}

fn commit_queue_out_of_range(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[0], UBLK_U_IO_COMMIT_AND_FETCH_REQ, 1, 0)
}

fn commit_tag_out_of_range(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[0], UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 2)
}

fn commit_from_other_task(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 2)?;
    s.fetch(0)?;
    let fd = s.file.as_raw_fd();
    let addr = s.buf.addr();
    // Another thread (task) of the same process, with its own ring.
    let other = std::thread::spawn(move || -> Result<Got> {
        let mut ring = Ring::<squeue::Entry>::new()?;
        ring.run(io_sqe(fd, UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 0, addr), PEEK)
    });
    match other.join() {
        Ok(r) => r,
        Err(_) => bail!("the committing thread panicked"),
    }
}

fn need_get_data_without_request(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[0], UBLK_U_IO_NEED_GET_DATA, 0, 0)
}

fn unregister_io_buf_without_zero_copy(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 2)?;
    s.cmd(UBLK_U_IO_UNREGISTER_IO_BUF, 0, 0, 0)
}

fn unknown_io_command(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[], UNKNOWN_IO, 0, 0)
}

fn unknown_io_command_on_fetched_tag(env: &mut Env) -> Result<Got> {
    probe(env, 2, &[0], UNKNOWN_IO, 0, 0)
}

pub const CASES: &[Case] = &[
    case!(fetch_ok, QUEUED),
    case!(fetch_queue_out_of_range, err(EINVAL)),
    case!(fetch_queue_all_ones, err(EINVAL)),
    case!(fetch_tag_out_of_range, err(EINVAL)),
    case!(fetch_tag_all_ones, err(EINVAL)),
    case!(fetch_without_buffer, err(EINVAL)),
    case!(fetch_same_tag_twice, err(EINVAL)),
    case!(fetch_when_all_tags_fetched, err(EBUSY)),
    case!(fetch_after_stop_dev, err(ENODEV)),
    case!(commit_never_fetched, err(EINVAL)),
    case!(commit_fetched_tag_without_request, err(EBUSY)),
    case!(commit_queue_out_of_range, err(EINVAL)),
    case!(commit_tag_out_of_range, err(EINVAL)),
    case!(commit_from_other_task, err(EINVAL)),
    case!(need_get_data_without_request, err(EBUSY)),
    case!(unregister_io_buf_without_zero_copy, err(EINVAL)),
    case!(unknown_io_command, err(EINVAL)),
    case!(unknown_io_command_on_fetched_tag, err(EBUSY)),
];
