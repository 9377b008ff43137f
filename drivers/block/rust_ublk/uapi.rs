// SPDX-License-Identifier: GPL-2.0

//! The ublk UAPI, `include/uapi/linux/ublk_cmd.h`, as the driver reads and writes it.
//!
//! The structures are exchanged as byte arrays in the native byte order and converted field by
//! field, so that values from user space are copied once and then validated.

use kernel::ioctl::{_IOR, _IOWR};

/// Size of `struct ublksrv_ctrl_cmd`, the payload of control commands.
pub(crate) const CTRL_CMD_SIZE: usize = 32;
/// Size of `struct ublksrv_ctrl_dev_info`.
pub(crate) const DEV_INFO_SIZE: usize = 64;
/// Size of `struct ublksrv_io_desc`.
pub(crate) const IO_DESC_SIZE: usize = 24;
/// Size of `struct ublk_params`.
pub(crate) const PARAMS_SIZE: usize = 152;
/// Size of the buffer of `UBLK_U_CMD_GET_FEATURES` (`UBLK_FEATURES_LEN`).
pub(crate) const FEATURES_LEN: usize = 8;

/// Largest queue depth (`UBLK_MAX_QUEUE_DEPTH`).
pub(crate) const MAX_QUEUE_DEPTH: u16 = 4096;
/// Largest number of queues (`UBLK_MAX_NR_QUEUES`).
pub(crate) const MAX_NR_QUEUES: u16 = 4096;

/// Device states (`UBLK_S_DEV_*`).
pub(crate) const S_DEV_DEAD: u16 = 0;
pub(crate) const S_DEV_LIVE: u16 = 1;

// Control command numbers (`UBLK_CMD_*`, `_IOC_NR()` of `UBLK_U_CMD_*`).
pub(crate) const CMD_GET_QUEUE_AFFINITY: u32 = 0x01;
pub(crate) const CMD_GET_DEV_INFO: u32 = 0x02;
pub(crate) const CMD_ADD_DEV: u32 = 0x04;
pub(crate) const CMD_DEL_DEV: u32 = 0x05;
pub(crate) const CMD_START_DEV: u32 = 0x06;
pub(crate) const CMD_STOP_DEV: u32 = 0x07;
pub(crate) const CMD_SET_PARAMS: u32 = 0x08;
pub(crate) const CMD_GET_PARAMS: u32 = 0x09;
pub(crate) const CMD_START_USER_RECOVERY: u32 = 0x10;
pub(crate) const CMD_END_USER_RECOVERY: u32 = 0x11;
pub(crate) const CMD_GET_DEV_INFO2: u32 = 0x12;
pub(crate) const CMD_GET_FEATURES: u32 = 0x13;
pub(crate) const CMD_DEL_DEV_ASYNC: u32 = 0x14;
pub(crate) const CMD_UPDATE_SIZE: u32 = 0x15;
pub(crate) const CMD_QUIESCE_DEV: u32 = 0x16;
pub(crate) const CMD_TRY_STOP_DEV: u32 = 0x17;

// I/O command numbers (`UBLK_IO_*`, `_IOC_NR()` of `UBLK_U_IO_*`).
pub(crate) const IO_FETCH_REQ: u32 = 0x20;
pub(crate) const IO_COMMIT_AND_FETCH_REQ: u32 = 0x21;
pub(crate) const IO_UNREGISTER_IO_BUF: u32 = 0x24;

/// Size of `struct ublksrv_io_cmd`, the payload of I/O commands.
pub(crate) const IO_CMD_SIZE: usize = 16;

// Operations of I/O descriptors (`UBLK_IO_OP_*`) and their flags (`UBLK_IO_F_*`).
pub(crate) const IO_OP_READ: u32 = 0;
pub(crate) const IO_OP_WRITE: u32 = 1;
pub(crate) const IO_OP_FLUSH: u32 = 2;
pub(crate) const IO_OP_DISCARD: u32 = 3;
pub(crate) const IO_OP_WRITE_ZEROES: u32 = 5;
pub(crate) const IO_F_FUA: u32 = 1 << 13;
pub(crate) const IO_F_NOUNMAP: u32 = 1 << 15;

/// Offset in `/dev/ublkcN` of the io descriptors of queue 0 (`UBLKSRV_CMD_BUF_OFFSET`).
pub(crate) const CMD_BUF_OFFSET: usize = 0;

const CTRL: u32 = b'u' as u32;

/// `UBLK_U_CMD_GET_FEATURES`, the only control command recognized by its full encoding.
pub(crate) const U_CMD_GET_FEATURES: u32 = _IOR::<[u8; CTRL_CMD_SIZE]>(CTRL, CMD_GET_FEATURES);
/// `UBLK_U_CMD_ADD_DEV`.
#[allow(dead_code)]
pub(crate) const U_CMD_ADD_DEV: u32 = _IOWR::<[u8; CTRL_CMD_SIZE]>(CTRL, CMD_ADD_DEV);

/// Returns the command number of an operation code (`_IOC_NR()`).
pub(crate) fn ioc_nr(op: u32) -> u32 {
    op & 0xff
}

/// Returns the type of an operation code (`_IOC_TYPE()`).
pub(crate) fn ioc_type(op: u32) -> u32 {
    (op >> 8) & 0xff
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes([b[off], b[off + 1]])
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(v)
}

/// Reads a field of a UAPI structure.
pub(crate) trait Field: Sized {
    /// Reads the field at `off` in `b`.
    fn at(b: &[u8], off: usize) -> Self;
}

impl Field for u8 {
    fn at(b: &[u8], off: usize) -> Self {
        b[off]
    }
}

impl Field for u16 {
    fn at(b: &[u8], off: usize) -> Self {
        u16_at(b, off)
    }
}

impl Field for u32 {
    fn at(b: &[u8], off: usize) -> Self {
        u32_at(b, off)
    }
}

impl Field for u64 {
    fn at(b: &[u8], off: usize) -> Self {
        u64_at(b, off)
    }
}

/// Writes `v` at `off` in `b`, in the native byte order.
pub(crate) fn put(b: &mut [u8], off: usize, v: &[u8]) {
    b[off..off + v.len()].copy_from_slice(v);
}

/// `struct ublksrv_ctrl_cmd`, the payload of a control command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CtrlCmd {
    pub(crate) dev_id: u32,
    pub(crate) queue_id: u16,
    pub(crate) len: u16,
    pub(crate) addr: u64,
    pub(crate) data: u64,
    pub(crate) dev_path_len: u16,
}

impl CtrlCmd {
    pub(crate) fn parse(b: &[u8; CTRL_CMD_SIZE]) -> Self {
        Self {
            dev_id: u32_at(b, 0),
            queue_id: u16_at(b, 4),
            len: u16_at(b, 6),
            addr: u64_at(b, 8),
            data: u64_at(b, 16),
            dev_path_len: u16_at(b, 24),
        }
    }
}

/// `struct ublksrv_io_cmd`, the payload of an I/O command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IoCmd {
    pub(crate) q_id: u16,
    pub(crate) tag: u16,
    pub(crate) result: i32,
    pub(crate) addr: u64,
}

impl IoCmd {
    pub(crate) fn parse(b: &[u8; IO_CMD_SIZE]) -> Self {
        Self {
            q_id: u16_at(b, 0),
            tag: u16_at(b, 2),
            result: i32::from_ne_bytes(u32_at(b, 4).to_ne_bytes()),
            addr: u64_at(b, 8),
        }
    }
}

/// `struct ublksrv_io_desc`, what the server reads about a request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IoDesc {
    pub(crate) op_flags: u32,
    pub(crate) nr_sectors: u32,
    pub(crate) start_sector: u64,
    pub(crate) addr: u64,
}

impl IoDesc {
    pub(crate) fn to_bytes(self) -> [u8; IO_DESC_SIZE] {
        let mut b = [0u8; IO_DESC_SIZE];
        put(&mut b, 0, &self.op_flags.to_ne_bytes());
        put(&mut b, 4, &self.nr_sectors.to_ne_bytes());
        put(&mut b, 8, &self.start_sector.to_ne_bytes());
        put(&mut b, 16, &self.addr.to_ne_bytes());
        b
    }
}

/// `struct ublksrv_ctrl_dev_info`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DevInfo {
    pub(crate) nr_hw_queues: u16,
    pub(crate) queue_depth: u16,
    pub(crate) state: u16,
    pub(crate) io_desc_size: u16,
    pub(crate) max_io_buf_bytes: u32,
    pub(crate) dev_id: u32,
    pub(crate) ublksrv_pid: i32,
    pub(crate) flags: u64,
    pub(crate) ublksrv_flags: u64,
    pub(crate) owner_uid: u32,
    pub(crate) owner_gid: u32,
}

impl DevInfo {
    pub(crate) fn parse(b: &[u8; DEV_INFO_SIZE]) -> Self {
        Self {
            nr_hw_queues: u16_at(b, 0),
            queue_depth: u16_at(b, 2),
            state: u16_at(b, 4),
            io_desc_size: u16_at(b, 6),
            max_io_buf_bytes: u32_at(b, 8),
            dev_id: u32_at(b, 12),
            ublksrv_pid: i32::from_ne_bytes(u32_at(b, 16).to_ne_bytes()),
            flags: u64_at(b, 24),
            ublksrv_flags: u64_at(b, 32),
            owner_uid: u32_at(b, 40),
            owner_gid: u32_at(b, 44),
        }
    }

    pub(crate) fn to_bytes(self) -> [u8; DEV_INFO_SIZE] {
        let mut b = [0u8; DEV_INFO_SIZE];
        put(&mut b, 0, &self.nr_hw_queues.to_ne_bytes());
        put(&mut b, 2, &self.queue_depth.to_ne_bytes());
        put(&mut b, 4, &self.state.to_ne_bytes());
        put(&mut b, 6, &self.io_desc_size.to_ne_bytes());
        put(&mut b, 8, &self.max_io_buf_bytes.to_ne_bytes());
        put(&mut b, 12, &self.dev_id.to_ne_bytes());
        put(&mut b, 16, &self.ublksrv_pid.to_ne_bytes());
        put(&mut b, 24, &self.flags.to_ne_bytes());
        put(&mut b, 32, &self.ublksrv_flags.to_ne_bytes());
        put(&mut b, 40, &self.owner_uid.to_ne_bytes());
        put(&mut b, 44, &self.owner_gid.to_ne_bytes());
        b
    }
}
