//! `UBLK_F_NEED_GET_DATA`: copy-mode fetch commands may leave the buffer
//! out, and so may commits but for a read's; `UBLK_U_IO_NEED_GET_DATA` is
//! only taken for a write that the driver asked the server about; user copy
//! makes the flag pointless, and the driver clears it.

use anyhow::Result;
use libc::EINVAL;
use ublk_uapi::*;

use super::server::Server;
use super::usercopy::Held;
use super::{case, err, Case, QUEUED};
use crate::env::Env;
use crate::ring::Got;

fn fetch_without_buffer_with_need_get_data(env: &mut Env) -> Result<Got> {
    let mut s = Server::with_flags(env, 2, UBLK_F_NEED_GET_DATA)?;
    s.cmd(UBLK_U_IO_FETCH_REQ, 0, 0, 0)
}

fn need_get_data_for_a_read(env: &mut Env) -> Result<Got> {
    let mut h = Held::new(env, UBLK_F_NEED_GET_DATA)?;
    let addr = h.s.buf.addr();
    h.s.cmd(UBLK_U_IO_NEED_GET_DATA, 0, 0, addr)
}

fn commit_read_without_buffer_with_need_get_data(env: &mut Env) -> Result<Got> {
    let mut h = Held::new(env, UBLK_F_NEED_GET_DATA)?;
    h.s.cmd(UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 0, 0)
}

/// The probe's result is whether the device got UBLK_F_NEED_GET_DATA (1)
/// or not (0).
fn need_get_data_with_user_copy(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, UBLK_F_NEED_GET_DATA | UBLK_F_USER_COPY)?;
    Ok(Got::Res(i32::from(
        dev.info.flags & UBLK_F_NEED_GET_DATA != 0,
    )))
}

pub const CASES: &[Case] = &[
    case!(fetch_without_buffer_with_need_get_data, QUEUED),
    case!(need_get_data_for_a_read, err(EINVAL)),
    case!(commit_read_without_buffer_with_need_get_data, err(EINVAL)),
    case!(need_get_data_with_user_copy, Got::Res(0)),
];
