//! UPDATE_SIZE and TRY_STOP_DEV on a started device, whose I/O a server
//! thread answers ([`Answering`]): the partition scan and udev's probes end
//! and close the disk, as with a real server.
//!
//! The C driver (`ublk_drv.c` of Linux 7.3.4):
//! - `ublk_ctrl_set_size()` only checks that the device has a disk (ENODEV
//!   before START_DEV, see `update_size_never_started` in `ctrl.rs`), not
//!   `UBLK_F_UPDATE_SIZE`: it stores `data[0]` in the basic parameters'
//!   `dev_sectors`, which GET_PARAMS then reports, and sets the capacity.
//! - `ublk_ctrl_try_stop_dev()` answers EBUSY while the disk has an opener
//!   (`disk_openers()`), and otherwise stops the device as STOP_DEV does:
//!   `ublk_detach_disk()` sets `UBLK_S_DEV_DEAD`.
//!
//! `UBLK_F_UPDATE_SIZE` and `UBLK_F_SAFE_STOP_DEV` announce the commands
//! (the C driver accepts UPDATE_SIZE from a device that did not ask for the
//! flag): a driver that does not report the flag in GET_FEATURES, one older
//! than the command, skips the case.

use anyhow::{bail, Result};
use libc::EBUSY;
use std::fs::File;
use std::time::{Duration, Instant};
use ublk_uapi::*;

use super::server::{open_disk, Answering};
use super::{case, err, Case, OK};
use crate::ctrl::{hdr, with_buf};
use crate::env::Env;
use crate::errno::show;
use crate::ring::Got;

/// The size UPDATE_SIZE sets, in sectors: twice what `basic_params()` says.
const NEW_SECTORS: u64 = 4096;

/// UPDATE_SIZE to [`NEW_SECTORS`] on a started device that asked for
/// `flags`. The result is that of UPDATE_SIZE; if that is 0 but GET_PARAMS
/// then reports another `dev_sectors`, 1.
fn update_size_started(env: &mut Env, flags: u64) -> Result<Got> {
    let a = Answering::start(env, flags)?;
    let id = a.s.dev.id;
    let mut h = hdr(id);
    h.data[0] = NEW_SECTORS;
    let got = env.ctrl.run(UBLK_U_CMD_UPDATE_SIZE, &h)?;
    if got != OK {
        return Ok(got);
    }
    let mut p = UblkParams {
        len: std::mem::size_of::<UblkParams>() as u32,
        ..Default::default()
    };
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_GET_PARAMS, &with_buf(hdr(id), &mut p))?;
    if r != 0 {
        bail!("GET_PARAMS after UPDATE_SIZE got {}", show(Got::Res(r)));
    }
    let sectors = p.basic.dev_sectors;
    if sectors != NEW_SECTORS {
        println!("# GET_PARAMS reports {sectors} sectors after UPDATE_SIZE to {NEW_SECTORS}");
        return Ok(Got::Res(1));
    }
    Ok(OK)
}

fn update_size_on_started_device(env: &mut Env) -> Result<Got> {
    update_size_started(env, UBLK_F_UPDATE_SIZE)
}

fn update_size_on_started_device_without_flag(env: &mut Env) -> Result<Got> {
    update_size_started(env, 0)
}

/// Opens the disk of device `id` read-only (setup step). Closing a
/// read-only opener makes udev start no probe (it watches for writers).
fn open_disk_setup(id: u32) -> Result<File> {
    open_disk(id, std::fs::OpenOptions::new().read(true))
        .map_err(|e| anyhow::anyhow!("setup: open of the disk ublkb{id}: {}", show(Got::Res(e))))
}

fn try_stop_dev_disk_open(env: &mut Env) -> Result<Got> {
    let a = Answering::start(env, 0)?;
    let _disk = open_disk_setup(a.s.dev.id)?;
    env.ctrl.run(UBLK_U_CMD_TRY_STOP_DEV, &hdr(a.s.dev.id))
}

/// GET_DEV_INFO of device `id`, which must succeed after the command `after`.
fn dev_info(env: &mut Env, id: u32, after: &str) -> Result<UblksrvCtrlDevInfo> {
    let mut info = UblksrvCtrlDevInfo::default();
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_GET_DEV_INFO, &with_buf(hdr(id), &mut info))?;
    if r != 0 {
        bail!("GET_DEV_INFO after {after} got {}", show(Got::Res(r)));
    }
    Ok(info)
}

/// TRY_STOP_DEV while the case holds the disk open (EBUSY), then once it
/// closed it. The result is that of the second TRY_STOP_DEV; if that is 0
/// but GET_DEV_INFO then reports a state other than `UBLK_S_DEV_DEAD`, 1.
/// udev's probe of the new disk may still hold it for a moment: EBUSY is
/// retried for up to 10 s.
fn try_stop_dev_disk_closed(env: &mut Env) -> Result<Got> {
    let a = Answering::start(env, 0)?;
    let id = a.s.dev.id;
    let disk = open_disk_setup(id)?;
    let busy = env.ctrl.run(UBLK_U_CMD_TRY_STOP_DEV, &hdr(id))?;
    if busy != err(EBUSY) {
        bail!(
            "TRY_STOP_DEV with the disk open got {}, not -EBUSY",
            show(busy)
        );
    }
    drop(disk);
    let start = Instant::now();
    let got = loop {
        let got = env.ctrl.run(UBLK_U_CMD_TRY_STOP_DEV, &hdr(id))?;
        if got != err(EBUSY) || start.elapsed() > Duration::from_secs(10) {
            break got;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if got != OK {
        return Ok(got);
    }
    let state = dev_info(env, id, "TRY_STOP_DEV")?.state;
    if state != UBLK_S_DEV_DEAD {
        println!("# GET_DEV_INFO reports state {state} after TRY_STOP_DEV, not UBLK_S_DEV_DEAD");
        return Ok(Got::Res(1));
    }
    Ok(OK)
}

/// GET_DEV_INFO of a started device after STOP_DEV, while its server
/// still runs: 0 if it reports no server (`ublksrv_pid` -1, as the C
/// driver's `ublk_detach_disk()` leaves it), 1 if it reports a pid. Found
/// by ublk_fuzz.
fn dev_info_pid_after_stop(env: &mut Env) -> Result<Got> {
    let a = Answering::start(env, 0)?;
    let id = a.s.dev.id;
    let r = env.ctrl.cmd(UBLK_U_CMD_STOP_DEV, &hdr(id))?;
    if r != 0 {
        bail!("STOP_DEV got {}", show(Got::Res(r)));
    }
    let pid = dev_info(env, id, "STOP_DEV")?.ublksrv_pid;
    if pid != -1 {
        println!("# GET_DEV_INFO reports ublksrv_pid {pid} after STOP_DEV, not -1");
        return Ok(Got::Res(1));
    }
    Ok(OK)
}

pub const CASES: &[Case] = &[
    case!(
        update_size_on_started_device,
        OK,
        needs = UBLK_F_UPDATE_SIZE
    ),
    case!(
        update_size_on_started_device_without_flag,
        OK,
        needs = UBLK_F_UPDATE_SIZE
    ),
    case!(
        try_stop_dev_disk_open,
        err(EBUSY),
        needs = UBLK_F_SAFE_STOP_DEV
    ),
    case!(try_stop_dev_disk_closed, OK, needs = UBLK_F_SAFE_STOP_DEV),
    case!(dev_info_pid_after_stop, OK),
];
