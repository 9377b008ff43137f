//! User copy (`UBLK_F_USER_COPY`): pread/pwrite on /dev/ublkcN at a
//! position that names the queue, the tag and an offset into the request's
//! data. Kernel-backed memory, a device that is not live or has no user
//! copy, and a copy against the request's direction get EACCES; the
//! integrity flag without UBLK_F_INTEGRITY, a queue, tag or offset out of
//! range get EINVAL. Fetch and commit carry no buffer with user copy, and
//! must carry one without it.

use anyhow::{bail, Result};
use io_uring::{opcode, squeue, types};
use libc::{EACCES, EINVAL};
use std::os::fd::{AsRawFd, RawFd};
use ublk_uapi::*;

use super::server::Server;
use super::{case, err, Case};
use crate::chardev::{self, io_sqe, Mapping};
use crate::env::Env;
use crate::errno::show;
use crate::ring::{Got, Ring, PEEK, WAIT};

/// How much a probe copies.
const LEN: usize = 512;

/// The user-copy file position of `offset` into the data of `tag` of queue `q_id`.
pub(super) fn pos(q_id: u16, tag: u16, offset: u32) -> i64 {
    (UBLKSRV_IO_BUF_OFFSET
        + (u64::from(q_id) << UBLK_QID_OFF)
        + (u64::from(tag) << UBLK_TAG_OFF)
        + u64::from(offset)) as i64
}

fn pwrite(fd: RawFd, pos: i64) -> Got {
    let buf = [0x5au8; LEN];
    // SAFETY: `buf` is valid for reads of LEN bytes.
    let r = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), LEN, pos) };
    syscall_result(r)
}

fn pread(fd: RawFd, pos: i64) -> Got {
    let mut buf = [0u8; LEN];
    // SAFETY: `buf` is valid for writes of LEN bytes.
    let r = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), LEN, pos) };
    syscall_result(r)
}

fn syscall_result(r: isize) -> Got {
    if r < 0 {
        Got::Res(-chardev::errno())
    } else {
        Got::Res(r as i32)
    }
}

/// A started one-tag device whose server holds the device's first request,
/// a read (the partition scan's), without answering it. Dropping it fails
/// the request.
pub(super) struct Held {
    pub(super) s: Server,
    _descs: Mapping,
    desc: UblksrvIoDesc,
}

impl Held {
    pub(super) fn new(env: &mut Env, flags: u64) -> Result<Self> {
        let mut s = Server::with_flags(env, 1, flags)?;
        let fd = s.file.as_raw_fd();
        let descs = chardev::map_descs_setup(fd, 1)?;
        let addr = if flags & (UBLK_F_USER_COPY | UBLK_F_SUPPORT_ZERO_COPY) != 0 {
            0
        } else {
            s.buf.addr()
        };
        let token = s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 0, addr))?;
        s.set_params(env)?;
        match s.start(env, std::process::id() as u64)? {
            Got::Res(0) => {}
            got => bail!("setup: START_DEV got {}", show(got)),
        }
        match s.ring.wait(token, WAIT)? {
            Got::Res(0) => {}
            got => bail!("setup: no request reached the server: {}", show(got)),
        }
        // SAFETY: the mapping holds the descriptor of tag 0, which the driver
        // wrote before it completed the fetch.
        let desc = unsafe { std::ptr::read_volatile(descs.addr().cast::<UblksrvIoDesc>()) };
        if desc.op() != UBLK_IO_OP_READ || desc.nr_sectors == 0 {
            bail!(
                "setup: the first request is op {} of {} sectors, not a read",
                desc.op(),
                desc.nr_sectors
            );
        }
        Ok(Held {
            s,
            _descs: descs,
            desc,
        })
    }

    fn user_copy(env: &mut Env) -> Result<Self> {
        Self::new(env, UBLK_F_USER_COPY)
    }

    pub(super) fn fd(&self) -> RawFd {
        self.s.file.as_raw_fd()
    }

    pub(super) fn bytes(&self) -> u32 {
        self.desc.nr_sectors << 9
    }
}

fn user_copy_write_read_data(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    Ok(pwrite(h.fd(), pos(0, 0, 0)))
}

fn user_copy_from_other_thread(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    let fd = h.fd();
    match std::thread::spawn(move || pwrite(fd, pos(0, 0, 0))).join() {
        Ok(got) => Ok(got),
        Err(_) => bail!("the copying thread panicked"),
    }
}

fn user_copy_against_direction(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    Ok(pread(h.fd(), pos(0, 0, 0)))
}

fn user_copy_offset_at_end(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    Ok(pwrite(h.fd(), pos(0, 0, h.bytes())))
}

fn user_copy_offset_past_end(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    Ok(pwrite(h.fd(), pos(0, 0, h.bytes() + 1)))
}

fn user_copy_queue_out_of_range(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    Ok(pwrite(h.fd(), pos(1, 0, 0)))
}

fn user_copy_tag_out_of_range(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    Ok(pwrite(h.fd(), pos(0, 1, 0)))
}

fn user_copy_integrity_flag(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    Ok(pwrite(
        h.fd(),
        pos(0, 0, 0) | UBLKSRV_IO_INTEGRITY_FLAG as i64,
    ))
}

fn user_copy_below_buffer_offset(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    Ok(pwrite(h.fd(), 0))
}

fn user_copy_registered_buffer(env: &mut Env) -> Result<Got> {
    let h = Held::user_copy(env)?;
    let mut buf = vec![0x5au8; LEN];
    let mut ring = Ring::<squeue::Entry>::new()?;
    // SAFETY: `buf` outlives `ring`, which is dropped first.
    unsafe { ring.register_buffer(&mut buf)? };
    let sqe = opcode::WriteFixed::new(types::Fd(h.fd()), buf.as_ptr(), LEN as u32, 0)
        .offset(pos(0, 0, 0) as u64)
        .build();
    let got = ring.run(sqe, WAIT);
    drop(ring);
    got
}

fn user_copy_device_not_live(env: &mut Env) -> Result<Got> {
    let mut s = Server::with_flags(env, 1, UBLK_F_USER_COPY)?;
    let fd = s.file.as_raw_fd();
    match s.ring.run(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 0, 0), PEEK)? {
        Got::Pending => {}
        got => bail!("setup: FETCH_REQ completed with {}", show(got)),
    }
    Ok(pwrite(fd, pos(0, 0, 0)))
}

fn user_copy_without_user_copy(env: &mut Env) -> Result<Got> {
    let h = Held::new(env, 0)?;
    Ok(pwrite(h.fd(), pos(0, 0, 0)))
}

fn fetch_with_buffer_with_user_copy(env: &mut Env) -> Result<Got> {
    let mut s = Server::with_flags(env, 1, UBLK_F_USER_COPY)?;
    let addr = s.buf.addr();
    s.cmd(UBLK_U_IO_FETCH_REQ, 0, 0, addr)
}

fn commit_with_buffer_with_user_copy(env: &mut Env) -> Result<Got> {
    let mut h = Held::user_copy(env)?;
    let addr = h.s.buf.addr();
    h.s.cmd(UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 0, addr)
}

fn commit_without_buffer_in_copy_mode(env: &mut Env) -> Result<Got> {
    let mut h = Held::new(env, 0)?;
    h.s.cmd(UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 0, 0)
}

pub const CASES: &[Case] = &[
    case!(user_copy_write_read_data, Got::Res(LEN as i32)),
    case!(user_copy_from_other_thread, Got::Res(LEN as i32)),
    case!(user_copy_against_direction, err(EACCES)),
    case!(user_copy_offset_at_end, Got::Res(0)),
    case!(user_copy_offset_past_end, err(EINVAL)),
    case!(user_copy_queue_out_of_range, err(EINVAL)),
    case!(user_copy_tag_out_of_range, err(EINVAL)),
    case!(user_copy_integrity_flag, err(EINVAL)),
    case!(user_copy_below_buffer_offset, err(EINVAL)),
    case!(user_copy_registered_buffer, err(EACCES)),
    case!(user_copy_device_not_live, err(EACCES)),
    case!(user_copy_without_user_copy, err(EACCES)),
    case!(fetch_with_buffer_with_user_copy, err(EINVAL)),
    case!(commit_with_buffer_with_user_copy, err(EINVAL)),
    case!(commit_without_buffer_in_copy_mode, err(EINVAL)),
];
