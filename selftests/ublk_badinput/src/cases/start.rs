//! Device state around START_DEV: the pid must be the server's, a device
//! starts once, its parameters are fixed once started, and no FETCH_REQ is
//! taken once every tag is fetched.

use anyhow::Result;
use libc::{EACCES, EBUSY, EEXIST, EINVAL};
use ublk_uapi::*;

use super::ctrl::basic_params;
use super::server::Server;
use super::{case, err, Case};
use crate::ctrl::{hdr, with_buf};
use crate::env::Env;
use crate::ring::Got;

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

pub const CASES: &[Case] = &[
    case!(start_dev_pid_not_server, err(EINVAL)),
    case!(start_dev_twice, err(EEXIST)),
    case!(set_params_on_started_device, err(EACCES)),
    case!(fetch_on_started_device, err(EBUSY)),
];
