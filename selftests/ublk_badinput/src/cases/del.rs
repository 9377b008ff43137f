//! Deleting a device whose server still has /dev/ublkcN open: the device
//! keeps its number, and commands still find it, until the server closes
//! it. ublk servers delete their own device when they exit (libublk does),
//! racing with the tool that deleted it: the second DEL_DEV must succeed.

use anyhow::{bail, Result};
use libc::EEXIST;
use ublk_uapi::UBLK_U_CMD_GET_DEV_INFO;
use ublk_uapi::{UblksrvCtrlDevInfo, UBLK_U_CMD_ADD_DEV, UBLK_U_CMD_DEL_DEV_ASYNC};

use super::{case, err, Case, OK};
use crate::chardev::open_setup;
use crate::ctrl::{hdr, with_buf};
use crate::env::{dev_info, Env};
use crate::ring::Got;

/// Adds a device, opens its /dev/ublkcN, deletes the device without
/// waiting and runs `probe` with the number while the file is open.
fn deleted_while_open(env: &mut Env, probe: fn(&mut Env, u32) -> Result<Got>) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let _server = open_setup(dev.id)?;
    let r = env.ctrl.cmd(UBLK_U_CMD_DEL_DEV_ASYNC, &hdr(dev.id))?;
    if r != 0 {
        bail!(
            "setup: DEL_DEV_ASYNC failed: {}",
            crate::errno::show(Got::Res(r))
        );
    }
    probe(env, dev.id)
}

fn del_deleted_while_open(env: &mut Env) -> Result<Got> {
    deleted_while_open(env, |env, id| {
        env.ctrl.run(UBLK_U_CMD_DEL_DEV_ASYNC, &hdr(id))
    })
}

fn get_info_deleted_while_open(env: &mut Env) -> Result<Got> {
    deleted_while_open(env, |env, id| {
        let mut info = UblksrvCtrlDevInfo::default();
        env.ctrl
            .run(UBLK_U_CMD_GET_DEV_INFO, &with_buf(hdr(id), &mut info))
    })
}

fn add_id_deleted_while_open(env: &mut Env) -> Result<Got> {
    deleted_while_open(env, |env, id| {
        let mut info = dev_info(1, 2, 0);
        info.dev_id = id;
        let got = env
            .ctrl
            .run(UBLK_U_CMD_ADD_DEV, &with_buf(hdr(id), &mut info))?;
        if got == Got::Res(0) {
            env.created(id);
        }
        Ok(got)
    })
}

pub const CASES: &[Case] = &[
    case!(del_deleted_while_open, OK),
    case!(get_info_deleted_while_open, OK),
    case!(add_id_deleted_while_open, err(EEXIST)),
];
