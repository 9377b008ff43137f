//! Unprivileged callers (uid 65534, no capabilities) on an inherited
//! /dev/ublk-control fd, against devices root created.

use anyhow::Result;
use io_uring::squeue;
use libc::{EINVAL, EPERM};
use std::os::fd::RawFd;
use ublk_uapi::*;

use super::ctrl::{basic_params, PathBuf2};
use super::{case, err, Case, OK};
use crate::child::{self, As};
use crate::ctrl::{hdr, sqe128, with_buf};
use crate::env::{Env, ANY_ID};
use crate::ring::{Got, Ring, WAIT};

/// Runs one control command as nobody on the inherited control fd.
fn as_nobody(env: &mut Env, op: u32, h: UblksrvCtrlCmd) -> Result<Got> {
    let fd: RawFd = env.ctrl.fd();
    let (got, _) = child::run(As::Nobody, move || {
        let mut ring = Ring::<squeue::Entry128>::new()?;
        Ok((ring.run(sqe128(fd, op, &h), WAIT)?, ANY_ID))
    })?;
    Ok(got)
}

/// ADD_DEV as nobody; a device it creates anyway is deleted by root.
fn add_as_nobody(env: &mut Env, flags: u64) -> Result<Got> {
    Ok(super::unpriv_dev::add_as(env, As::Nobody, flags)?.0)
}

fn unprivileged_add_dev(env: &mut Env) -> Result<Got> {
    add_as_nobody(env, 0)
}

fn unprivileged_add_dev_unprivileged_user_copy(env: &mut Env) -> Result<Got> {
    // UBLK_F_UNPRIVILEGED_DEV devices may not use user copy.
    add_as_nobody(env, UBLK_F_UNPRIVILEGED_DEV | UBLK_F_USER_COPY)
}

fn unprivileged_get_features(env: &mut Env) -> Result<Got> {
    let mut f = 0u64;
    as_nobody(env, UBLK_U_CMD_GET_FEATURES, with_buf(hdr(0), &mut f))
}

fn unprivileged_get_dev_info(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let mut info = UblksrvCtrlDevInfo::default();
    as_nobody(
        env,
        UBLK_U_CMD_GET_DEV_INFO,
        with_buf(hdr(dev.id), &mut info),
    )
}

fn unprivileged_get_dev_info2(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    crate::chardev::wait_node(dev.id)?;
    let mut b = PathBuf2::new(&format!("/dev/ublkc{}", dev.id));
    let h = b.hdr(dev.id);
    as_nobody(env, UBLK_U_CMD_GET_DEV_INFO2, h)
}

fn unprivileged_get_queue_affinity(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let mut mask = [0u64; 16];
    as_nobody(
        env,
        UBLK_U_CMD_GET_QUEUE_AFFINITY,
        with_buf(hdr(dev.id), &mut mask),
    )
}

fn unprivileged_set_params(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let mut p = basic_params();
    as_nobody(env, UBLK_U_CMD_SET_PARAMS, with_buf(hdr(dev.id), &mut p))
}

fn unprivileged_get_params(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let mut p = basic_params();
    as_nobody(env, UBLK_U_CMD_GET_PARAMS, with_buf(hdr(dev.id), &mut p))
}

fn unprivileged_stop_dev(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    as_nobody(env, UBLK_U_CMD_STOP_DEV, hdr(dev.id))
}

fn unprivileged_del_dev(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    as_nobody(env, UBLK_U_CMD_DEL_DEV, hdr(dev.id))
}

pub const CASES: &[Case] = &[
    case!(unprivileged_add_dev, err(EPERM)),
    case!(unprivileged_add_dev_unprivileged_user_copy, err(EINVAL)),
    case!(unprivileged_get_features, OK),
    case!(unprivileged_get_dev_info, err(EPERM)),
    case!(unprivileged_get_dev_info2, err(EPERM)),
    case!(unprivileged_get_queue_affinity, err(EPERM)),
    case!(unprivileged_set_params, err(EPERM)),
    case!(unprivileged_get_params, err(EPERM)),
    case!(unprivileged_stop_dev, err(EPERM)),
    case!(unprivileged_del_dev, err(EPERM)),
];
