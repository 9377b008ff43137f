//! ADD_DEV: header and device info checks.

use anyhow::{bail, Result};
use libc::{EEXIST, EINVAL};
use ublk_uapi::*;

use super::{case, err, Case, OK};
use crate::ctrl::{hdr, with_buf};
use crate::env::{dev_info, Env, ABSENT_ID, ANY_ID};
use crate::errno::show;
use crate::ring::Got;

/// ADD_DEV of the default device info, changed by `f`; a device it creates
/// is deleted after the case.
fn add_with(
    env: &mut Env,
    f: impl FnOnce(&mut UblksrvCtrlCmd, &mut UblksrvCtrlDevInfo),
) -> Result<Got> {
    let mut info = dev_info(1, 2, 0);
    let mut h = with_buf(hdr(ANY_ID), &mut info);
    f(&mut h, &mut info);
    let got = env.ctrl.run(UBLK_U_CMD_ADD_DEV, &h)?;
    if matches!(got, Got::Res(r) if r >= 0) {
        env.created(info.dev_id);
    }
    Ok(got)
}

fn add_dev_ok(env: &mut Env) -> Result<Got> {
    add_with(env, |_, _| {})
}

fn add_dev_with_id_ok(env: &mut Env) -> Result<Got> {
    add_with(env, |h, i| {
        h.dev_id = ABSENT_ID;
        i.dev_id = ABSENT_ID;
    })
}

fn add_dev_len_short(env: &mut Env) -> Result<Got> {
    add_with(env, |h, _| h.len -= 1)
}

fn add_dev_len_zero(env: &mut Env) -> Result<Got> {
    add_with(env, |h, _| h.len = 0)
}

fn add_dev_addr_zero(env: &mut Env) -> Result<Got> {
    add_with(env, |h, _| h.addr = 0)
}

fn add_dev_queue_id_not_all_ones(env: &mut Env) -> Result<Got> {
    add_with(env, |h, _| h.queue_id = 0)
}

fn add_dev_queue_depth_zero(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| i.queue_depth = 0)
}

fn add_dev_queue_depth_too_big(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| i.queue_depth = UBLK_MAX_QUEUE_DEPTH as u16 + 1)
}

fn add_dev_nr_hw_queues_zero(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| i.nr_hw_queues = 0)
}

fn add_dev_nr_hw_queues_too_many(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| i.nr_hw_queues = UBLK_MAX_NR_QUEUES as u16 + 1)
}

fn add_dev_header_id_differs_from_info(env: &mut Env) -> Result<Got> {
    add_with(env, |h, i| {
        h.dev_id = ABSENT_ID;
        i.dev_id = ABSENT_ID + 1;
    })
}

fn add_dev_id_too_large(env: &mut Env) -> Result<Got> {
    // The C driver allows ids below 1 << MINORBITS (20).
    add_with(env, |h, i| {
        h.dev_id = 1 << 20;
        i.dev_id = 1 << 20;
    })
}

fn add_dev_id_taken(env: &mut Env) -> Result<Got> {
    let first = env.add(1, 2, 0)?;
    add_with(env, |h, i| {
        h.dev_id = first.id;
        i.dev_id = first.id;
    })
}

fn add_dev_recovery_reissue_alone(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| i.flags = UBLK_F_USER_RECOVERY_REISSUE)
}

fn add_dev_recovery_fail_io_alone(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| i.flags = UBLK_F_USER_RECOVERY_FAIL_IO)
}

fn add_dev_recovery_reissue_and_fail_io(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| {
        i.flags = UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE | UBLK_F_USER_RECOVERY_FAIL_IO
    })
}

fn add_dev_quiesce_without_recovery(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| i.flags = UBLK_F_QUIESCE)
}

fn add_dev_integrity_without_user_copy(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| i.flags = UBLK_F_INTEGRITY)
}

fn add_dev_zoned_without_user_copy(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| i.flags = UBLK_F_ZONED)
}

/// ADD_DEV of a zoned device with `data_path` (user copy or zero copy): the
/// device must keep UBLK_F_ZONED.
fn add_zoned(env: &mut Env, data_path: u64) -> Result<Got> {
    let mut info = dev_info(1, 2, UBLK_F_ZONED | data_path);
    let h = with_buf(hdr(ANY_ID), &mut info);
    let got = env.ctrl.run(UBLK_U_CMD_ADD_DEV, &h)?;
    if matches!(got, Got::Res(r) if r >= 0) {
        env.created(info.dev_id);
        if info.flags & UBLK_F_ZONED == 0 {
            anyhow::bail!(
                "ADD_DEV returned flags {:#x} without UBLK_F_ZONED",
                info.flags
            );
        }
    }
    Ok(got)
}

/// The C driver checks the zoned flag's data path once it found the number:
/// a taken number comes first.
fn add_dev_zoned_without_user_copy_id_taken(env: &mut Env) -> Result<Got> {
    let first = env.add(1, 2, 0)?;
    add_with(env, |h, i| {
        h.dev_id = first.id;
        i.dev_id = first.id;
        i.flags = UBLK_F_ZONED;
    })
}

fn add_dev_zoned_user_copy(env: &mut Env) -> Result<Got> {
    add_zoned(env, UBLK_F_USER_COPY)
}

fn add_dev_zoned_zero_copy(env: &mut Env) -> Result<Got> {
    add_zoned(env, UBLK_F_SUPPORT_ZERO_COPY)
}

fn add_dev_io_desc_size_too_small(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| {
        i.flags = UBLK_F_IO_DESC_SIZE;
        i.io_desc_size = 8;
    })
}

fn add_dev_io_desc_size_too_large(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| {
        i.flags = UBLK_F_IO_DESC_SIZE;
        i.io_desc_size = 512;
    })
}

fn add_dev_batch_io_depth_1(env: &mut Env) -> Result<Got> {
    add_with(env, |_, i| {
        i.flags = UBLK_F_BATCH_IO;
        i.queue_depth = 1;
    })
}

/// ADD_DEV with the fields the driver does not use filled in: its answer
/// and GET_DEV_INFO give them back as they were (a server may keep data of
/// its own there). 1 with what differed, if either does not.
fn add_dev_keeps_unused_fields(env: &mut Env) -> Result<Got> {
    let fill = |i: &mut UblksrvCtrlDevInfo| {
        i.ublksrv_flags = 0x5a5a_0000_0000_a5a5;
        i.pad1 = 7;
        i.reserved1 = 0x1111;
        i.reserved2 = u64::MAX;
    };
    let mut info = dev_info(1, 2, 0);
    fill(&mut info);
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_ADD_DEV, &with_buf(hdr(ANY_ID), &mut info))?;
    if r != 0 {
        bail!("setup: ADD_DEV got {}", show(Got::Res(r)));
    }
    env.created(info.dev_id);
    let mut got = UblksrvCtrlDevInfo::default();
    let r = env.ctrl.cmd(
        UBLK_U_CMD_GET_DEV_INFO,
        &with_buf(hdr(info.dev_id), &mut got),
    )?;
    if r != 0 {
        bail!("GET_DEV_INFO got {}", show(Got::Res(r)));
    }
    let mut want = UblksrvCtrlDevInfo::default();
    fill(&mut want);
    let unused = |i: &UblksrvCtrlDevInfo| (i.ublksrv_flags, i.pad1, i.reserved1, i.reserved2);
    let mut ok = true;
    for (what, i) in [("ADD_DEV", &info), ("GET_DEV_INFO", &got)] {
        if unused(i) != unused(&want) {
            println!(
                "# {what} gives back ublksrv_flags, pad1, reserved1, reserved2 {:x?}, not {:x?}",
                unused(i),
                unused(&want)
            );
            ok = false;
        }
    }
    Ok(if ok { OK } else { Got::Res(1) })
}

pub const CASES: &[Case] = &[
    case!(add_dev_ok, OK),
    case!(add_dev_keeps_unused_fields, OK),
    case!(add_dev_with_id_ok, OK),
    case!(add_dev_len_short, err(EINVAL)),
    case!(add_dev_len_zero, err(EINVAL)),
    case!(add_dev_addr_zero, err(EINVAL)),
    case!(add_dev_queue_id_not_all_ones, err(EINVAL)),
    case!(add_dev_queue_depth_zero, err(EINVAL)),
    case!(add_dev_queue_depth_too_big, err(EINVAL)),
    case!(add_dev_nr_hw_queues_zero, err(EINVAL)),
    case!(add_dev_nr_hw_queues_too_many, err(EINVAL)),
    case!(add_dev_header_id_differs_from_info, err(EINVAL)),
    case!(add_dev_id_too_large, err(EINVAL)),
    case!(add_dev_id_taken, err(EEXIST)),
    case!(add_dev_recovery_reissue_alone, err(EINVAL)),
    case!(add_dev_recovery_fail_io_alone, err(EINVAL)),
    case!(add_dev_recovery_reissue_and_fail_io, err(EINVAL)),
    case!(add_dev_quiesce_without_recovery, err(EINVAL)),
    case!(add_dev_integrity_without_user_copy, err(EINVAL)),
    case!(add_dev_zoned_without_user_copy, err(EINVAL)),
    case!(add_dev_zoned_without_user_copy_id_taken, err(EEXIST)),
    case!(add_dev_zoned_user_copy, OK),
    case!(add_dev_zoned_zero_copy, OK),
    case!(add_dev_io_desc_size_too_small, err(EINVAL)),
    case!(add_dev_io_desc_size_too_large, err(EINVAL)),
    // Found by ublk_fuzz: the C driver's batch event fifo of each queue
    // holds `queue_depth` entries, and kfifo_alloc() refused fewer than two
    // (EINVAL) until patches/08-ublk-fuzz-fixes.
    case!(add_dev_batch_io_depth_1, OK),
];
