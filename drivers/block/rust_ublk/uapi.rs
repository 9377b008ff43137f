// SPDX-License-Identifier: GPL-2.0

//! The ublk UAPI, `include/uapi/linux/ublk_cmd.h`, as the driver reads and writes it.
//!
//! Constants, structure sizes and field offsets come from the bindings of the header
//! ([`kernel::uapi`]). The structures are exchanged as byte arrays in the native byte order and
//! converted field by field at those offsets, so that values from user space are copied once and
//! then validated, and so that reading the unions of the header needs no `unsafe`.

use core::mem::{offset_of, size_of};
use kernel::{
    ioctl::{_IOC_NR, _IOC_TYPE, _IOR, _IOWR},
    uapi as u,
};

/// Size of `struct ublksrv_ctrl_cmd`, the payload of control commands.
pub(crate) const CTRL_CMD_SIZE: usize = size_of::<u::ublksrv_ctrl_cmd>();
/// Size of `struct ublksrv_ctrl_dev_info`.
pub(crate) const DEV_INFO_SIZE: usize = size_of::<u::ublksrv_ctrl_dev_info>();
/// Size of `struct ublksrv_io_desc`.
pub(crate) const IO_DESC_SIZE: usize = size_of::<u::ublksrv_io_desc>();
/// Offset of `nr_sectors` (a union with `nr_zones`) in `struct ublksrv_io_desc`.
pub(crate) const IO_DESC_NR_SECTORS: usize = offset_of!(u::ublksrv_io_desc, __bindgen_anon_1);
/// Offset of `addr` in `struct ublksrv_io_desc`.
pub(crate) const IO_DESC_ADDR: usize = offset_of!(u::ublksrv_io_desc, addr);
/// The result of a fetch command that asks the server for the buffer of a write's data
/// (`UBLK_IO_RES_NEED_GET_DATA`).
// CAST: The result is 1.
pub(crate) const IO_RES_NEED_GET_DATA: i32 = u::UBLK_IO_RES_NEED_GET_DATA as i32;
/// Size of `struct ublk_params`.
pub(crate) const PARAMS_SIZE: usize = size_of::<u::ublk_params>();
/// Size of `struct ublksrv_io_cmd`, the payload of I/O commands.
pub(crate) const IO_CMD_SIZE: usize = size_of::<u::ublksrv_io_cmd>();
/// Size of the buffer of `UBLK_U_CMD_GET_FEATURES`.
pub(crate) const FEATURES_LEN: usize = u::UBLK_FEATURES_LEN as usize;

/// Largest queue depth.
// CAST: 4096 fits.
pub(crate) const MAX_QUEUE_DEPTH: u16 = u::UBLK_MAX_QUEUE_DEPTH as u16;
/// Largest number of queues.
// CAST: 4096 fits.
pub(crate) const MAX_NR_QUEUES: u16 = u::UBLK_MAX_NR_QUEUES as u16;

// Device states, as `UBLK_U_CMD_GET_DEV_INFO` reports them.
// CAST: The states are small numbers.
pub(crate) const S_DEV_DEAD: u16 = u::UBLK_S_DEV_DEAD as u16;
// CAST: As above.
pub(crate) const S_DEV_LIVE: u16 = u::UBLK_S_DEV_LIVE as u16;
// CAST: As above.
pub(crate) const S_DEV_QUIESCED: u16 = u::UBLK_S_DEV_QUIESCED as u16;
// CAST: As above.
pub(crate) const S_DEV_FAIL_IO: u16 = u::UBLK_S_DEV_FAIL_IO as u16;

// Control command numbers (`_IOC_NR()` of `UBLK_U_CMD_*`).
pub(crate) const CMD_GET_QUEUE_AFFINITY: u32 = u::UBLK_CMD_GET_QUEUE_AFFINITY;
pub(crate) const CMD_GET_DEV_INFO: u32 = u::UBLK_CMD_GET_DEV_INFO;
pub(crate) const CMD_ADD_DEV: u32 = u::UBLK_CMD_ADD_DEV;
pub(crate) const CMD_DEL_DEV: u32 = u::UBLK_CMD_DEL_DEV;
pub(crate) const CMD_START_DEV: u32 = u::UBLK_CMD_START_DEV;
pub(crate) const CMD_STOP_DEV: u32 = u::UBLK_CMD_STOP_DEV;
pub(crate) const CMD_SET_PARAMS: u32 = u::UBLK_CMD_SET_PARAMS;
pub(crate) const CMD_GET_PARAMS: u32 = u::UBLK_CMD_GET_PARAMS;
pub(crate) const CMD_START_USER_RECOVERY: u32 = u::UBLK_CMD_START_USER_RECOVERY;
pub(crate) const CMD_END_USER_RECOVERY: u32 = u::UBLK_CMD_END_USER_RECOVERY;
pub(crate) const CMD_GET_DEV_INFO2: u32 = u::UBLK_CMD_GET_DEV_INFO2;
// The header defines the newer commands only inside their `UBLK_U_CMD_*` and `UBLK_U_IO_*`
// ioctl encodings (`_IOR('u', nr, struct ...)`), which bindgen cannot evaluate: their numbers are
// spelled out here.
pub(crate) const CMD_GET_FEATURES: u32 = 0x13;
pub(crate) const CMD_DEL_DEV_ASYNC: u32 = 0x14;
pub(crate) const CMD_UPDATE_SIZE: u32 = 0x15;
pub(crate) const CMD_QUIESCE_DEV: u32 = 0x16;
pub(crate) const CMD_TRY_STOP_DEV: u32 = 0x17;
pub(crate) const CMD_REG_BUF: u32 = 0x18;
pub(crate) const CMD_UNREG_BUF: u32 = 0x19;

// I/O command numbers (`_IOC_NR()` of `UBLK_U_IO_*`).
pub(crate) const IO_FETCH_REQ: u32 = u::UBLK_IO_FETCH_REQ;
pub(crate) const IO_COMMIT_AND_FETCH_REQ: u32 = u::UBLK_IO_COMMIT_AND_FETCH_REQ;
pub(crate) const IO_NEED_GET_DATA: u32 = u::UBLK_IO_NEED_GET_DATA;
// See the newer control commands above.
pub(crate) const IO_REGISTER_IO_BUF: u32 = 0x23;
pub(crate) const IO_UNREGISTER_IO_BUF: u32 = 0x24;
const IO_PREP_IO_CMDS: u32 = 0x25;
const IO_COMMIT_IO_CMDS: u32 = 0x26;
const IO_FETCH_IO_CMDS: u32 = 0x27;

// The io commands of devices with `UBLK_F_BATCH_IO`, recognized by their full encoding only:
// ublk_drv refuses their number alone too.
pub(crate) const U_IO_REGISTER_IO_BUF: u32 = _IOWR::<u::ublksrv_io_cmd>(CTRL, IO_REGISTER_IO_BUF);
pub(crate) const U_IO_UNREGISTER_IO_BUF: u32 =
    _IOWR::<u::ublksrv_io_cmd>(CTRL, IO_UNREGISTER_IO_BUF);
pub(crate) const U_IO_PREP_IO_CMDS: u32 = _IOWR::<u::ublk_batch_io>(CTRL, IO_PREP_IO_CMDS);
pub(crate) const U_IO_COMMIT_IO_CMDS: u32 = _IOWR::<u::ublk_batch_io>(CTRL, IO_COMMIT_IO_CMDS);
pub(crate) const U_IO_FETCH_IO_CMDS: u32 = _IOWR::<u::ublk_batch_io>(CTRL, IO_FETCH_IO_CMDS);

// Operations of I/O descriptors and their flags.
pub(crate) const IO_OP_READ: u32 = u::UBLK_IO_OP_READ;
pub(crate) const IO_OP_WRITE: u32 = u::UBLK_IO_OP_WRITE;
pub(crate) const IO_OP_FLUSH: u32 = u::UBLK_IO_OP_FLUSH;
pub(crate) const IO_OP_DISCARD: u32 = u::UBLK_IO_OP_DISCARD;
pub(crate) const IO_OP_WRITE_ZEROES: u32 = u::UBLK_IO_OP_WRITE_ZEROES;
pub(crate) const IO_OP_ZONE_OPEN: u32 = u::UBLK_IO_OP_ZONE_OPEN;
pub(crate) const IO_OP_ZONE_CLOSE: u32 = u::UBLK_IO_OP_ZONE_CLOSE;
pub(crate) const IO_OP_ZONE_FINISH: u32 = u::UBLK_IO_OP_ZONE_FINISH;
pub(crate) const IO_OP_ZONE_APPEND: u32 = u::UBLK_IO_OP_ZONE_APPEND;
pub(crate) const IO_OP_ZONE_RESET_ALL: u32 = u::UBLK_IO_OP_ZONE_RESET_ALL;
pub(crate) const IO_OP_ZONE_RESET: u32 = u::UBLK_IO_OP_ZONE_RESET;
pub(crate) const IO_OP_REPORT_ZONES: u32 = u::UBLK_IO_OP_REPORT_ZONES;
pub(crate) const IO_F_FUA: u32 = u::UBLK_IO_F_FUA;
pub(crate) const IO_F_NOUNMAP: u32 = u::UBLK_IO_F_NOUNMAP;
pub(crate) const IO_F_NEED_REG_BUF: u32 = u::UBLK_IO_F_NEED_REG_BUF;
pub(crate) const IO_F_SHMEM_ZC: u32 = u::UBLK_IO_F_SHMEM_ZC;
pub(crate) const IO_F_INTEGRITY: u32 = u::UBLK_IO_F_INTEGRITY;

// Shared-memory zero copy (`UBLK_U_CMD_REG_BUF`).
pub(crate) const SHMEM_BUF_READ_ONLY: u32 = u::UBLK_SHMEM_BUF_READ_ONLY;
pub(crate) const SHMEM_BUF_REG_SIZE: usize = size_of::<u::ublk_shmem_buf_reg>();
/// Where the buffer index starts in the address of an io descriptor with `UBLK_IO_F_SHMEM_ZC`.
pub(crate) const SHMEM_ZC_IDX_OFF: u32 = u::UBLK_SHMEM_ZC_IDX_OFF;

/// Offset in `/dev/ublkcN` of the io descriptors of queue 0.
pub(crate) const CMD_BUF_OFFSET: usize = u::UBLKSRV_CMD_BUF_OFFSET as usize;

/// The ioctl type of ublk commands, which the header spells `'u'` in each encoding.
const CTRL: u32 = b'u' as u32;

/// `UBLK_U_CMD_GET_FEATURES`, the only control command recognized by its full encoding.
pub(crate) const U_CMD_GET_FEATURES: u32 = _IOR::<u::ublksrv_ctrl_cmd>(CTRL, CMD_GET_FEATURES);

/// Returns the command number of an operation code (`_IOC_NR()`).
pub(crate) fn ioc_nr(op: u32) -> u32 {
    _IOC_NR(op)
}

/// Returns whether an operation code is a ublk command: ioctl-encoded with type `'u'`, or a bare
/// command number (legacy servers) if the kernel accepts those
/// (`CONFIG_BLKDEV_UBLK_LEGACY_OPCODES`).
pub(crate) fn is_ublk_op(op: u32) -> bool {
    _IOC_TYPE(op) == CTRL || (_IOC_TYPE(op) == 0 && cfg!(CONFIG_BLKDEV_UBLK_LEGACY_OPCODES))
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes([b[off], b[off + 1]])
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn i32_at(b: &[u8], off: usize) -> i32 {
    i32::from_ne_bytes(u32_at(b, off).to_ne_bytes())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(v)
}

/// Reads and writes a field of a UAPI structure, in the native byte order.
pub(crate) trait Field: Sized {
    /// Reads the field at `off` in `b`.
    fn at(b: &[u8], off: usize) -> Self;

    /// Writes the field at `off` in `b`.
    fn put(self, b: &mut [u8], off: usize);
}

/// Writes `v` at `off` in `b`.
fn put_bytes(b: &mut [u8], off: usize, v: &[u8]) {
    b[off..off + v.len()].copy_from_slice(v);
}

impl Field for u8 {
    fn put(self, b: &mut [u8], off: usize) {
        put_bytes(b, off, &self.to_ne_bytes());
    }

    fn at(b: &[u8], off: usize) -> Self {
        b[off]
    }
}

impl Field for u16 {
    fn put(self, b: &mut [u8], off: usize) {
        put_bytes(b, off, &self.to_ne_bytes());
    }

    fn at(b: &[u8], off: usize) -> Self {
        u16_at(b, off)
    }
}

impl Field for u32 {
    fn put(self, b: &mut [u8], off: usize) {
        put_bytes(b, off, &self.to_ne_bytes());
    }

    fn at(b: &[u8], off: usize) -> Self {
        u32_at(b, off)
    }
}

impl Field for u64 {
    fn put(self, b: &mut [u8], off: usize) {
        put_bytes(b, off, &self.to_ne_bytes());
    }

    fn at(b: &[u8], off: usize) -> Self {
        u64_at(b, off)
    }
}

impl Field for i32 {
    fn put(self, b: &mut [u8], off: usize) {
        put_bytes(b, off, &self.to_ne_bytes());
    }

    fn at(b: &[u8], off: usize) -> Self {
        i32_at(b, off)
    }
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
            dev_id: u32_at(b, offset_of!(u::ublksrv_ctrl_cmd, dev_id)),
            queue_id: u16_at(b, offset_of!(u::ublksrv_ctrl_cmd, queue_id)),
            len: u16_at(b, offset_of!(u::ublksrv_ctrl_cmd, len)),
            addr: u64_at(b, offset_of!(u::ublksrv_ctrl_cmd, addr)),
            data: u64_at(b, offset_of!(u::ublksrv_ctrl_cmd, data)),
            dev_path_len: u16_at(b, offset_of!(u::ublksrv_ctrl_cmd, dev_path_len)),
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
            q_id: u16_at(b, offset_of!(u::ublksrv_io_cmd, q_id)),
            tag: u16_at(b, offset_of!(u::ublksrv_io_cmd, tag)),
            result: i32_at(b, offset_of!(u::ublksrv_io_cmd, result)),
            // The union of `addr` and `zone_append_lba`.
            addr: u64_at(b, offset_of!(u::ublksrv_io_cmd, __bindgen_anon_1)),
        }
    }
}

/// Where a user copy (`UBLK_F_USER_COPY`) reads or writes: the position in `/dev/ublkcN` of a
/// `pread`/`pwrite` names a queue, a tag and an offset into the data of that tag's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UserCopyPos {
    pub(crate) q_id: u16,
    pub(crate) tag: u16,
    /// Offset into the data of the request.
    pub(crate) offset: u32,
    /// Whether the copy is of the request's integrity data (`UBLKSRV_IO_INTEGRITY_FLAG`).
    pub(crate) integrity: bool,
}

impl UserCopyPos {
    /// Decodes a file position: relative to `UBLKSRV_IO_BUF_OFFSET`, with each field masked to its
    /// width, so that a position below that offset names a queue and a tag too large for any
    /// device.
    pub(crate) fn parse(pos: i64) -> Self {
        // CAST: The offset fits in an `i64`; the difference is a signed 64-bit one, as of two
        // `loff_t`s, and shifted arithmetically.
        let rel = pos.wrapping_sub(i64::from(u::UBLKSRV_IO_BUF_OFFSET));
        // CAST: Each field is masked to its width, at most 16 bits, or 25 for the offset.
        Self {
            q_id: ((rel >> u::UBLK_QID_OFF) & i64::from(u::UBLK_QID_BITS_MASK)) as u16,
            tag: ((rel >> u::UBLK_TAG_OFF) & i64::from(u::UBLK_TAG_BITS_MASK)) as u16,
            offset: (rel & i64::from(u::UBLK_IO_BUF_BITS_MASK)) as u32,
            // CAST: The flag is bit 62, inside an `i64`.
            integrity: pos & (u::UBLKSRV_IO_INTEGRITY_FLAG as i64) != 0,
        }
    }
}

/// `struct ublk_auto_buf_reg`, which the fetch and commit commands of a device with
/// `UBLK_F_AUTO_BUF_REG` carry in the `addr` field of their SQE: where the buffer of the slot's
/// next request goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AutoBufReg {
    /// The index in the ring's buffer table.
    pub(crate) index: u16,
    /// Whether a failed registration is left to the server (`UBLK_AUTO_BUF_REG_FALLBACK`),
    /// rather than failing the request.
    pub(crate) fallback: bool,
}

impl AutoBufReg {
    /// Decodes the `addr` field of an SQE as `ublk_sqe_addr_to_auto_buf_reg()` does: the index
    /// in bits 0-15, the flags in bits 16-23, the rest reserved. Reserved bits or unknown flags
    /// are `EINVAL`.
    pub(crate) fn parse(sqe_addr: u64) -> kernel::error::Result<Self> {
        // CAST: The fields are masked to their widths.
        let index = (sqe_addr & 0xffff) as u16;
        let flags = ((sqe_addr >> 16) & 0xff) as u32;
        if sqe_addr >> 24 != 0 || flags & !u::UBLK_AUTO_BUF_REG_F_MASK != 0 {
            return Err(kernel::error::code::EINVAL);
        }
        Ok(Self {
            index,
            fallback: flags & u::UBLK_AUTO_BUF_REG_FALLBACK != 0,
        })
    }

    /// Encodes the value as the `addr` field of an SQE, as `ublk_auto_buf_reg_to_sqe_addr()`
    /// does.
    pub(crate) fn to_sqe_addr(self) -> u64 {
        let flags = if self.fallback {
            u64::from(u::UBLK_AUTO_BUF_REG_FALLBACK)
        } else {
            0
        };
        u64::from(self.index) | (flags << 16)
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
        type D = u::ublksrv_io_desc;
        self.op_flags.put(&mut b, offset_of!(D, op_flags));
        // The union of `nr_sectors` and `nr_zones`.
        self.nr_sectors.put(&mut b, IO_DESC_NR_SECTORS);
        self.start_sector.put(&mut b, offset_of!(D, start_sector));
        self.addr.put(&mut b, offset_of!(D, addr));
        b
    }
}

/// `struct ublksrv_ctrl_dev_info`.
///
/// The fields the driver does not use are kept as `UBLK_U_CMD_ADD_DEV` got them and given back
/// with the rest: `ublksrv_flags`, which is the server's, and `pad1`, `reserved1` and
/// `reserved2`, which ublk_drv gives back too (a later UAPI may use them: servers must not rely
/// on what they hold).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DevInfo {
    pub(crate) nr_hw_queues: u16,
    pub(crate) queue_depth: u16,
    pub(crate) state: u16,
    pub(crate) io_desc_size: u16,
    pub(crate) max_io_buf_bytes: u32,
    pub(crate) dev_id: u32,
    pub(crate) ublksrv_pid: i32,
    pad1: u32,
    pub(crate) flags: u64,
    pub(crate) ublksrv_flags: u64,
    pub(crate) owner_uid: u32,
    pub(crate) owner_gid: u32,
    reserved1: u64,
    reserved2: u64,
}

impl DevInfo {
    pub(crate) fn parse(b: &[u8; DEV_INFO_SIZE]) -> Self {
        type I = u::ublksrv_ctrl_dev_info;
        Self {
            nr_hw_queues: u16_at(b, offset_of!(I, nr_hw_queues)),
            queue_depth: u16_at(b, offset_of!(I, queue_depth)),
            state: u16_at(b, offset_of!(I, state)),
            io_desc_size: u16_at(b, offset_of!(I, io_desc_size)),
            max_io_buf_bytes: u32_at(b, offset_of!(I, max_io_buf_bytes)),
            dev_id: u32_at(b, offset_of!(I, dev_id)),
            ublksrv_pid: i32_at(b, offset_of!(I, ublksrv_pid)),
            pad1: u32_at(b, offset_of!(I, pad1)),
            flags: u64_at(b, offset_of!(I, flags)),
            ublksrv_flags: u64_at(b, offset_of!(I, ublksrv_flags)),
            owner_uid: u32_at(b, offset_of!(I, owner_uid)),
            owner_gid: u32_at(b, offset_of!(I, owner_gid)),
            reserved1: u64_at(b, offset_of!(I, reserved1)),
            reserved2: u64_at(b, offset_of!(I, reserved2)),
        }
    }

    pub(crate) fn to_bytes(self) -> [u8; DEV_INFO_SIZE] {
        let mut b = [0u8; DEV_INFO_SIZE];
        type I = u::ublksrv_ctrl_dev_info;
        self.nr_hw_queues.put(&mut b, offset_of!(I, nr_hw_queues));
        self.queue_depth.put(&mut b, offset_of!(I, queue_depth));
        self.state.put(&mut b, offset_of!(I, state));
        self.io_desc_size.put(&mut b, offset_of!(I, io_desc_size));
        self.max_io_buf_bytes
            .put(&mut b, offset_of!(I, max_io_buf_bytes));
        self.dev_id.put(&mut b, offset_of!(I, dev_id));
        self.ublksrv_pid.put(&mut b, offset_of!(I, ublksrv_pid));
        self.pad1.put(&mut b, offset_of!(I, pad1));
        self.flags.put(&mut b, offset_of!(I, flags));
        self.ublksrv_flags.put(&mut b, offset_of!(I, ublksrv_flags));
        self.owner_uid.put(&mut b, offset_of!(I, owner_uid));
        self.owner_gid.put(&mut b, offset_of!(I, owner_gid));
        self.reserved1.put(&mut b, offset_of!(I, reserved1));
        self.reserved2.put(&mut b, offset_of!(I, reserved2));
        b
    }
}

/// Size of `struct ublk_batch_io`, the payload of the batch io commands.
pub(crate) const BATCH_IO_SIZE: usize = size_of::<u::ublk_batch_io>();
/// Size of `struct ublk_elem_header`, which starts each element of a batch io command.
pub(crate) const ELEM_HEADER_SIZE: usize = size_of::<u::ublk_elem_header>();

// CAST: The flags are `u32` constants in the bindings of a `__u16` field.
pub(crate) const BATCH_F_HAS_ZONE_LBA: u16 = u::UBLK_BATCH_F_HAS_ZONE_LBA as u16;
pub(crate) const BATCH_F_HAS_BUF_ADDR: u16 = u::UBLK_BATCH_F_HAS_BUF_ADDR as u16;
pub(crate) const BATCH_F_AUTO_BUF_REG_FALLBACK: u16 = u::UBLK_BATCH_F_AUTO_BUF_REG_FALLBACK as u16;
/// Every flag of a batch io command.
pub(crate) const BATCH_F_ALL: u16 =
    BATCH_F_HAS_ZONE_LBA | BATCH_F_HAS_BUF_ADDR | BATCH_F_AUTO_BUF_REG_FALLBACK;

/// `struct ublk_batch_io`, the payload of `UBLK_U_IO_PREP_IO_CMDS`, `UBLK_U_IO_COMMIT_IO_CMDS`
/// and `UBLK_U_IO_FETCH_IO_CMDS`. Its reserved fields are not checked: ublk_drv does not check
/// them either, so servers may leave them unset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchIo {
    pub(crate) q_id: u16,
    pub(crate) flags: u16,
    pub(crate) nr_elem: u16,
    pub(crate) elem_bytes: u8,
}

impl BatchIo {
    pub(crate) fn parse(b: &[u8; BATCH_IO_SIZE]) -> Self {
        Self {
            q_id: u16_at(b, offset_of!(u::ublk_batch_io, q_id)),
            flags: u16_at(b, offset_of!(u::ublk_batch_io, flags)),
            nr_elem: u16_at(b, offset_of!(u::ublk_batch_io, nr_elem)),
            elem_bytes: b[offset_of!(u::ublk_batch_io, elem_bytes)],
        }
    }

    /// Returns the size of each element that the flags call for: a `struct ublk_elem_header`,
    /// then the buffer address and the zone LBA if the flags say they are there.
    pub(crate) fn expected_elem_bytes(&self) -> usize {
        let mut bytes = ELEM_HEADER_SIZE;
        if self.flags & BATCH_F_HAS_BUF_ADDR != 0 {
            bytes += size_of::<u64>();
        }
        if self.flags & BATCH_F_HAS_ZONE_LBA != 0 {
            bytes += size_of::<u64>();
        }
        bytes
    }
}

/// An element of `UBLK_U_IO_PREP_IO_CMDS` or `UBLK_U_IO_COMMIT_IO_CMDS`: a
/// `struct ublk_elem_header`, then the buffer address if the command has
/// `UBLK_BATCH_F_HAS_BUF_ADDR`, then the zone LBA if it has `UBLK_BATCH_F_HAS_ZONE_LBA` (zoned
/// devices only).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Elem {
    pub(crate) tag: u16,
    /// The index of the buffer registered automatically (`UBLK_F_AUTO_BUF_REG`).
    pub(crate) buf_index: u16,
    pub(crate) result: i32,
    /// The buffer address, 0 if the command has none.
    pub(crate) buf_addr: u64,
    /// Where the data of a zone append landed; all ones, which is no sector, if the command has
    /// no zone LBA.
    pub(crate) zone_lba: u64,
}

impl Elem {
    /// Decodes an element of a command with the header `hdr`, whose element size was checked.
    pub(crate) fn parse(b: &[u8], hdr: &BatchIo) -> Self {
        let buf_addr = if hdr.flags & BATCH_F_HAS_BUF_ADDR != 0 {
            u64_at(b, ELEM_HEADER_SIZE)
        } else {
            0
        };
        let zone_lba = if hdr.flags & BATCH_F_HAS_ZONE_LBA != 0 {
            let off = if hdr.flags & BATCH_F_HAS_BUF_ADDR != 0 {
                ELEM_HEADER_SIZE + size_of::<u64>()
            } else {
                ELEM_HEADER_SIZE
            };
            u64_at(b, off)
        } else {
            u64::MAX
        };
        Self {
            tag: u16_at(b, offset_of!(u::ublk_elem_header, tag)),
            buf_index: u16_at(b, offset_of!(u::ublk_elem_header, buf_index)),
            result: i32_at(b, offset_of!(u::ublk_elem_header, result)),
            buf_addr,
            zone_lba,
        }
    }
}
