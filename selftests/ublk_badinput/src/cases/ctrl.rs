//! Control commands other than ADD_DEV and the parameters: lengths,
//! addresses, device ids, queue ids, unknown commands, device state, and a
//! ring without SQE128.

use anyhow::Result;
use io_uring::{opcode, squeue, types};
use libc::{EINVAL, ENODEV, ENOENT, EOPNOTSUPP, EPERM, ESPIPE};
use ublk_uapi::ioctl::{iowr, UBLK_IOC_TYPE};
use ublk_uapi::*;

use super::{case, err, Case, OK};
use crate::chardev::syscall_result;
use crate::ctrl::{cmd80, hdr, sqe128, with_buf};
use crate::env::{Env, ABSENT_ID};
use crate::ring::{Got, Ring, WAIT};

/// A control opcode the driver does not know.
pub const UNKNOWN_CTRL: u32 = iowr(UBLK_IOC_TYPE, 0x30, std::mem::size_of::<UblksrvCtrlCmd>());

/// Valid basic parameters for a test device.
pub fn basic_params() -> UblkParams {
    UblkParams {
        len: std::mem::size_of::<UblkParams>() as u32,
        types: UBLK_PARAM_TYPE_BASIC,
        basic: UblkParamBasic {
            logical_bs_shift: 9,
            physical_bs_shift: 12,
            io_opt_shift: 12,
            io_min_shift: 9,
            max_sectors: crate::env::MAX_IO_BUF_BYTES >> 9,
            dev_sectors: 2048,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A buffer with a char device path in front of a device info, as
/// GET_DEV_INFO2 wants it; returns the header for it.
pub struct PathBuf2 {
    buf: Vec<u8>,
    path_len: u16,
}

impl PathBuf2 {
    pub fn new(path: &str) -> Self {
        let mut buf = path.as_bytes().to_vec();
        buf.push(0);
        let path_len = buf.len() as u16;
        buf.resize(buf.len() + std::mem::size_of::<UblksrvCtrlDevInfo>(), 0);
        PathBuf2 { buf, path_len }
    }

    /// The device information that GET_DEV_INFO2 wrote after the path.
    pub fn info(&self) -> UblksrvCtrlDevInfo {
        let after = &self.buf[usize::from(self.path_len)..];
        assert!(after.len() >= std::mem::size_of::<UblksrvCtrlDevInfo>());
        // SAFETY: `after` holds a whole `UblksrvCtrlDevInfo`, plain old
        // data, read unaligned.
        unsafe { std::ptr::read_unaligned(after.as_ptr().cast()) }
    }

    pub fn hdr(&mut self, dev_id: u32) -> UblksrvCtrlCmd {
        let mut h = hdr(dev_id);
        h.addr = self.buf.as_mut_ptr() as u64;
        h.len = self.buf.len() as u16;
        h.dev_path_len = self.path_len;
        h
    }
}

fn features(env: &mut Env, len: u16, addr_zero: bool) -> Result<Got> {
    let mut f = 0u64;
    let mut h = with_buf(hdr(0), &mut f);
    h.len = len;
    if addr_zero {
        h.addr = 0;
    }
    env.ctrl.run(UBLK_U_CMD_GET_FEATURES, &h)
}

fn get_features_ok(env: &mut Env) -> Result<Got> {
    features(env, UBLK_FEATURES_LEN, false)
}

fn get_features_len_short(env: &mut Env) -> Result<Got> {
    features(env, 4, false)
}

fn get_features_len_long(env: &mut Env) -> Result<Got> {
    // 16 bytes of buffer behind an 8-byte u64 would be an overflow if the
    // driver wrote them: give it a real 16-byte buffer.
    let mut f = [0u64; 2];
    let h = with_buf(hdr(0), &mut f);
    env.ctrl.run(UBLK_U_CMD_GET_FEATURES, &h)
}

fn get_features_addr_zero(env: &mut Env) -> Result<Got> {
    features(env, UBLK_FEATURES_LEN, true)
}

// --- a device id that does not exist: ENODEV before anything else ---

fn get_dev_info_absent_dev(env: &mut Env) -> Result<Got> {
    let mut info = UblksrvCtrlDevInfo::default();
    env.ctrl.run(
        UBLK_U_CMD_GET_DEV_INFO,
        &with_buf(hdr(ABSENT_ID), &mut info),
    )
}

fn get_dev_info2_absent_dev(env: &mut Env) -> Result<Got> {
    let mut b = PathBuf2::new(&format!("/dev/ublkc{ABSENT_ID}"));
    env.ctrl.run(UBLK_U_CMD_GET_DEV_INFO2, &b.hdr(ABSENT_ID))
}

fn get_dev_info_any_id(env: &mut Env) -> Result<Got> {
    let mut info = UblksrvCtrlDevInfo::default();
    env.ctrl
        .run(UBLK_U_CMD_GET_DEV_INFO, &with_buf(hdr(u32::MAX), &mut info))
}

fn get_queue_affinity_absent_dev(env: &mut Env) -> Result<Got> {
    let mut mask = [0u64; 16];
    env.ctrl.run(
        UBLK_U_CMD_GET_QUEUE_AFFINITY,
        &with_buf(hdr(ABSENT_ID), &mut mask),
    )
}

fn set_params_absent_dev(env: &mut Env) -> Result<Got> {
    let mut p = basic_params();
    env.ctrl
        .run(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(ABSENT_ID), &mut p))
}

fn get_params_absent_dev(env: &mut Env) -> Result<Got> {
    let mut p = basic_params();
    env.ctrl
        .run(UBLK_U_CMD_GET_PARAMS, &with_buf(hdr(ABSENT_ID), &mut p))
}

fn start_dev_absent_dev(env: &mut Env) -> Result<Got> {
    let mut h = hdr(ABSENT_ID);
    h.data[0] = std::process::id() as u64;
    env.ctrl.run(UBLK_U_CMD_START_DEV, &h)
}

fn stop_dev_absent_dev(env: &mut Env) -> Result<Got> {
    env.ctrl.run(UBLK_U_CMD_STOP_DEV, &hdr(ABSENT_ID))
}

fn del_dev_absent_dev(env: &mut Env) -> Result<Got> {
    env.ctrl.run(UBLK_U_CMD_DEL_DEV, &hdr(ABSENT_ID))
}

fn unknown_command_absent_dev(env: &mut Env) -> Result<Got> {
    env.ctrl.run(UNKNOWN_CTRL, &hdr(ABSENT_ID))
}

fn del_dev_twice(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let first = env.ctrl.cmd(UBLK_U_CMD_DEL_DEV, &hdr(dev.id))?;
    if first != 0 {
        anyhow::bail!("setup: first DEL_DEV failed: {first}");
    }
    env.ctrl.run(UBLK_U_CMD_DEL_DEV, &hdr(dev.id))
}

// --- GET_DEV_INFO / GET_DEV_INFO2 ---

fn dev_info_with(env: &mut Env, f: impl FnOnce(&mut UblksrvCtrlCmd)) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let mut info = UblksrvCtrlDevInfo::default();
    let mut h = with_buf(hdr(dev.id), &mut info);
    f(&mut h);
    env.ctrl.run(UBLK_U_CMD_GET_DEV_INFO, &h)
}

fn get_dev_info_ok(env: &mut Env) -> Result<Got> {
    dev_info_with(env, |_| {})
}

fn get_dev_info_len_short(env: &mut Env) -> Result<Got> {
    dev_info_with(env, |h| h.len -= 1)
}

fn get_dev_info_addr_zero(env: &mut Env) -> Result<Got> {
    dev_info_with(env, |h| h.addr = 0)
}

fn dev_info2_with(
    env: &mut Env,
    path: Option<&str>,
    f: impl FnOnce(&mut UblksrvCtrlCmd),
) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let own = format!("/dev/ublkc{}", dev.id);
    // The node must exist for the path checks.
    crate::chardev::wait_node(dev.id)?;
    let mut b = PathBuf2::new(path.unwrap_or(&own));
    let mut h = b.hdr(dev.id);
    f(&mut h);
    env.ctrl.run(UBLK_U_CMD_GET_DEV_INFO2, &h)
}

fn get_dev_info2_ok(env: &mut Env) -> Result<Got> {
    dev_info2_with(env, None, |_| {})
}

fn get_dev_info2_no_path(env: &mut Env) -> Result<Got> {
    dev_info2_with(env, None, |h| h.dev_path_len = 0)
}

fn get_dev_info2_path_longer_than_len(env: &mut Env) -> Result<Got> {
    dev_info2_with(env, None, |h| h.len = h.dev_path_len - 1)
}

fn get_dev_info2_info_len_short(env: &mut Env) -> Result<Got> {
    dev_info2_with(env, None, |h| h.len -= 1)
}

fn get_dev_info2_path_of_other_node(env: &mut Env) -> Result<Got> {
    dev_info2_with(env, Some("/dev/null"), |_| {})
}

fn get_dev_info2_path_missing(env: &mut Env) -> Result<Got> {
    dev_info2_with(env, Some("/dev/ublk-no-such-node"), |_| {})
}

// --- GET_QUEUE_AFFINITY ---

fn affinity_with(env: &mut Env, f: impl FnOnce(&mut UblksrvCtrlCmd)) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let mut mask = [0u64; 16];
    let mut h = with_buf(hdr(dev.id), &mut mask);
    f(&mut h);
    env.ctrl.run(UBLK_U_CMD_GET_QUEUE_AFFINITY, &h)
}

fn get_queue_affinity_ok(env: &mut Env) -> Result<Got> {
    affinity_with(env, |_| {})
}

fn get_queue_affinity_queue_out_of_range(env: &mut Env) -> Result<Got> {
    affinity_with(env, |h| h.data[0] = 1)
}

fn get_queue_affinity_len_zero(env: &mut Env) -> Result<Got> {
    affinity_with(env, |h| h.len = 0)
}

fn get_queue_affinity_len_not_multiple_of_8(env: &mut Env) -> Result<Got> {
    affinity_with(env, |h| h.len = 12)
}

fn get_queue_affinity_addr_zero(env: &mut Env) -> Result<Got> {
    affinity_with(env, |h| h.addr = 0)
}

// --- unknown command, state ---

fn on_fresh_dev(env: &mut Env, op: u32, f: impl FnOnce(&mut UblksrvCtrlCmd)) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let mut h = hdr(dev.id);
    f(&mut h);
    env.ctrl.run(op, &h)
}

/// START_DEV may wait for the server; run it on a ring of its own so that
/// a driver that waits cannot block the following cases' commands.
fn start_dev_with(env: &mut Env, pid: u64, params: bool) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    if params {
        let mut p = basic_params();
        let r = env
            .ctrl
            .cmd(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(dev.id), &mut p))?;
        if r != 0 {
            anyhow::bail!("setup: SET_PARAMS failed: {r}");
        }
    }
    let mut h = hdr(dev.id);
    h.data[0] = pid;
    let mut ring = Ring::<squeue::Entry128>::new()?;
    ring.run(sqe128(env.ctrl.fd(), UBLK_U_CMD_START_DEV, &h), WAIT)
}

fn unknown_command(env: &mut Env) -> Result<Got> {
    on_fresh_dev(env, UNKNOWN_CTRL, |_| {})
}

fn start_dev_pid_zero(env: &mut Env) -> Result<Got> {
    start_dev_with(env, 0, true)
}

fn start_dev_pid_negative(env: &mut Env) -> Result<Got> {
    start_dev_with(env, (-1i64) as u64, true)
}

fn start_dev_without_params(env: &mut Env) -> Result<Got> {
    start_dev_with(env, std::process::id() as u64, false)
}

fn stop_dev_never_started(env: &mut Env) -> Result<Got> {
    on_fresh_dev(env, UBLK_U_CMD_STOP_DEV, |_| {})
}

fn try_stop_dev_never_started(env: &mut Env) -> Result<Got> {
    on_fresh_dev(env, UBLK_U_CMD_TRY_STOP_DEV, |_| {})
}

fn update_size_never_started(env: &mut Env) -> Result<Got> {
    on_fresh_dev(env, UBLK_U_CMD_UPDATE_SIZE, |h| h.data[0] = 4096)
}

fn quiesce_dev_without_flag(env: &mut Env) -> Result<Got> {
    on_fresh_dev(env, UBLK_U_CMD_QUIESCE_DEV, |_| {})
}

fn start_user_recovery_without_flag(env: &mut Env) -> Result<Got> {
    on_fresh_dev(env, UBLK_U_CMD_START_USER_RECOVERY, |_| {})
}

// --- file syscalls: the control device is not seekable ---

fn pread_control(env: &mut Env) -> Result<Got> {
    let mut buf = [0u8; 8];
    // SAFETY: reading at most `buf.len()` bytes into a local buffer.
    let ret = unsafe { libc::pread(env.ctrl.fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    Ok(syscall_result(ret))
}

fn pwrite_control(env: &mut Env) -> Result<Got> {
    let buf = [0u8; 8];
    // SAFETY: writing `buf.len()` bytes from a local buffer.
    let ret = unsafe { libc::pwrite(env.ctrl.fd(), buf.as_ptr().cast(), buf.len(), 0) };
    Ok(syscall_result(ret))
}

fn lseek_control(env: &mut Env) -> Result<Got> {
    // SAFETY: a plain syscall on a descriptor we own.
    let ret = unsafe { libc::lseek(env.ctrl.fd(), 0, libc::SEEK_SET) };
    Ok(syscall_result(ret as isize))
}

// --- a ring without SQE128 ---

fn plain_ring(env: &mut Env, op: u32, h: &UblksrvCtrlCmd) -> Result<Got> {
    let mut ring = Ring::<squeue::Entry>::new()?;
    let c: [u8; 16] = cmd80(h)[..16].try_into().unwrap();
    let sqe = opcode::UringCmd16::new(types::Fd(env.ctrl.fd()), op)
        .cmd(c)
        .build();
    ring.run(sqe, WAIT)
}

fn get_features_without_sqe128(env: &mut Env) -> Result<Got> {
    let mut f = 0u64;
    plain_ring(env, UBLK_U_CMD_GET_FEATURES, &with_buf(hdr(0), &mut f))
}

fn get_dev_info_without_sqe128(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let mut info = UblksrvCtrlDevInfo::default();
    plain_ring(
        env,
        UBLK_U_CMD_GET_DEV_INFO,
        &with_buf(hdr(dev.id), &mut info),
    )
}

pub const CASES: &[Case] = &[
    case!(get_features_ok, OK),
    case!(pread_control, err(ESPIPE)),
    case!(pwrite_control, err(ESPIPE)),
    case!(lseek_control, err(ESPIPE)),
    case!(get_features_len_short, err(EINVAL)),
    case!(get_features_len_long, err(EINVAL)),
    case!(get_features_addr_zero, err(EINVAL)),
    case!(get_dev_info_absent_dev, err(ENODEV)),
    case!(get_dev_info2_absent_dev, err(ENODEV)),
    case!(get_dev_info_any_id, err(ENODEV)),
    case!(get_queue_affinity_absent_dev, err(ENODEV)),
    case!(set_params_absent_dev, err(ENODEV)),
    case!(get_params_absent_dev, err(ENODEV)),
    case!(start_dev_absent_dev, err(ENODEV)),
    case!(stop_dev_absent_dev, err(ENODEV)),
    case!(del_dev_absent_dev, err(ENODEV)),
    case!(unknown_command_absent_dev, err(ENODEV)),
    case!(del_dev_twice, err(ENODEV)),
    case!(get_dev_info_ok, OK),
    case!(get_dev_info_len_short, err(EINVAL)),
    case!(get_dev_info_addr_zero, err(EINVAL)),
    case!(get_dev_info2_ok, OK),
    case!(get_dev_info2_no_path, err(EINVAL)),
    case!(get_dev_info2_path_longer_than_len, err(EINVAL)),
    case!(get_dev_info2_info_len_short, err(EINVAL)),
    case!(get_dev_info2_path_of_other_node, err(EPERM)),
    case!(get_dev_info2_path_missing, err(ENOENT)),
    case!(get_queue_affinity_ok, OK),
    case!(get_queue_affinity_queue_out_of_range, err(EINVAL)),
    case!(get_queue_affinity_len_zero, err(EINVAL)),
    case!(get_queue_affinity_len_not_multiple_of_8, err(EINVAL)),
    case!(get_queue_affinity_addr_zero, err(EINVAL)),
    case!(unknown_command, err(EOPNOTSUPP)),
    case!(start_dev_pid_zero, err(EINVAL)),
    case!(start_dev_pid_negative, err(EINVAL)),
    case!(start_dev_without_params, err(EINVAL)),
    case!(stop_dev_never_started, OK),
    case!(try_stop_dev_never_started, err(ENODEV)),
    case!(update_size_never_started, err(ENODEV)),
    case!(quiesce_dev_without_flag, err(EOPNOTSUPP)),
    case!(start_user_recovery_without_flag, err(EINVAL)),
    case!(get_features_without_sqe128, err(EINVAL)),
    case!(get_dev_info_without_sqe128, err(EINVAL)),
];
