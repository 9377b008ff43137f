//! A would-be ublk server for the io and state cases: a device, its char
//! device open, a ring for io commands and a buffer for them to point at.

use anyhow::{bail, Result};
use io_uring::squeue;
use std::fs::File;
use std::os::fd::AsRawFd;
use ublk_uapi::{UBLK_U_CMD_SET_PARAMS, UBLK_U_CMD_START_DEV, UBLK_U_IO_FETCH_REQ};

use crate::chardev::{io_sqe, open_setup, IoBuf};
use crate::ctrl::{hdr, sqe128, with_buf};
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

    /// SET_PARAMS with valid basic parameters (setup step).
    pub fn set_params(&self, env: &mut Env) -> Result<()> {
        let mut p = super::ctrl::basic_params();
        let h = with_buf(hdr(self.dev.id), &mut p);
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
        let mut h = hdr(self.dev.id);
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
