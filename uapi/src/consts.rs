//! Constants (`#define`s) of `include/uapi/linux/ublk_cmd.h`.
//!
//! Rust types are chosen after the field or API the constant is used with
//! (e.g. `UBLK_F_*` are `u64` like `ublksrv_ctrl_dev_info::flags`, opcodes are
//! `u32` like the io_uring `cmd_op`); the values are identical to the header.

use core::mem::size_of;

use crate::ioctl::{ior, iowr, UBLK_IOC_TYPE};
use crate::types::{UblkBatchIo, UblksrvCtrlCmd, UblksrvIoCmd};

const CTRL_CMD_SIZE: usize = size_of::<UblksrvCtrlCmd>();
const IO_CMD_SIZE: usize = size_of::<UblksrvIoCmd>();
const BATCH_IO_SIZE: usize = size_of::<UblkBatchIo>();

// ---------------------------------------------------------------------------
// Legacy (plain number) control opcodes. New code should use UBLK_U_CMD_*.
// ---------------------------------------------------------------------------

/// Legacy opcode: get the CPU affinity of a queue.
pub const UBLK_CMD_GET_QUEUE_AFFINITY: u32 = 0x01;
/// Legacy opcode: get device info.
pub const UBLK_CMD_GET_DEV_INFO: u32 = 0x02;
/// Legacy opcode: add a device.
pub const UBLK_CMD_ADD_DEV: u32 = 0x04;
/// Legacy opcode: delete a device.
pub const UBLK_CMD_DEL_DEV: u32 = 0x05;
/// Legacy opcode: start a device.
pub const UBLK_CMD_START_DEV: u32 = 0x06;
/// Legacy opcode: stop a device.
pub const UBLK_CMD_STOP_DEV: u32 = 0x07;
/// Legacy opcode: set device parameters.
pub const UBLK_CMD_SET_PARAMS: u32 = 0x08;
/// Legacy opcode: get device parameters.
pub const UBLK_CMD_GET_PARAMS: u32 = 0x09;
/// Legacy opcode: begin user recovery.
pub const UBLK_CMD_START_USER_RECOVERY: u32 = 0x10;
/// Legacy opcode: end user recovery.
pub const UBLK_CMD_END_USER_RECOVERY: u32 = 0x11;
/// Legacy opcode: get device info (unprivileged-capable variant).
pub const UBLK_CMD_GET_DEV_INFO2: u32 = 0x12;

// ---------------------------------------------------------------------------
// ioctl-encoded control opcodes (type 'u', argument struct ublksrv_ctrl_cmd).
// ---------------------------------------------------------------------------

/// `_IOR('u', UBLK_CMD_GET_QUEUE_AFFINITY, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_GET_QUEUE_AFFINITY: u32 = ior(
    UBLK_IOC_TYPE,
    UBLK_CMD_GET_QUEUE_AFFINITY as u8,
    CTRL_CMD_SIZE,
);
/// `_IOR('u', UBLK_CMD_GET_DEV_INFO, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_GET_DEV_INFO: u32 =
    ior(UBLK_IOC_TYPE, UBLK_CMD_GET_DEV_INFO as u8, CTRL_CMD_SIZE);
/// `_IOWR('u', UBLK_CMD_ADD_DEV, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_ADD_DEV: u32 = iowr(UBLK_IOC_TYPE, UBLK_CMD_ADD_DEV as u8, CTRL_CMD_SIZE);
/// `_IOWR('u', UBLK_CMD_DEL_DEV, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_DEL_DEV: u32 = iowr(UBLK_IOC_TYPE, UBLK_CMD_DEL_DEV as u8, CTRL_CMD_SIZE);
/// `_IOWR('u', UBLK_CMD_START_DEV, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_START_DEV: u32 = iowr(UBLK_IOC_TYPE, UBLK_CMD_START_DEV as u8, CTRL_CMD_SIZE);
/// `_IOWR('u', UBLK_CMD_STOP_DEV, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_STOP_DEV: u32 = iowr(UBLK_IOC_TYPE, UBLK_CMD_STOP_DEV as u8, CTRL_CMD_SIZE);
/// `_IOWR('u', UBLK_CMD_SET_PARAMS, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_SET_PARAMS: u32 =
    iowr(UBLK_IOC_TYPE, UBLK_CMD_SET_PARAMS as u8, CTRL_CMD_SIZE);
/// `_IOR('u', UBLK_CMD_GET_PARAMS, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_GET_PARAMS: u32 = ior(UBLK_IOC_TYPE, UBLK_CMD_GET_PARAMS as u8, CTRL_CMD_SIZE);
/// `_IOWR('u', UBLK_CMD_START_USER_RECOVERY, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_START_USER_RECOVERY: u32 = iowr(
    UBLK_IOC_TYPE,
    UBLK_CMD_START_USER_RECOVERY as u8,
    CTRL_CMD_SIZE,
);
/// `_IOWR('u', UBLK_CMD_END_USER_RECOVERY, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_END_USER_RECOVERY: u32 = iowr(
    UBLK_IOC_TYPE,
    UBLK_CMD_END_USER_RECOVERY as u8,
    CTRL_CMD_SIZE,
);
/// `_IOR('u', UBLK_CMD_GET_DEV_INFO2, struct ublksrv_ctrl_cmd)`.
pub const UBLK_U_CMD_GET_DEV_INFO2: u32 =
    ior(UBLK_IOC_TYPE, UBLK_CMD_GET_DEV_INFO2 as u8, CTRL_CMD_SIZE);
/// Read the driver's feature mask (`UBLK_FEATURES_LEN` bytes at `addr`).
pub const UBLK_U_CMD_GET_FEATURES: u32 = ior(UBLK_IOC_TYPE, 0x13, CTRL_CMD_SIZE);
/// Delete a device without waiting for its release.
pub const UBLK_U_CMD_DEL_DEV_ASYNC: u32 = ior(UBLK_IOC_TYPE, 0x14, CTRL_CMD_SIZE);
/// Change the device size (`data[0]`, in sectors); needs `UBLK_F_UPDATE_SIZE`.
pub const UBLK_U_CMD_UPDATE_SIZE: u32 = iowr(UBLK_IOC_TYPE, 0x15, CTRL_CMD_SIZE);
/// Quiesce the device; needs `UBLK_F_QUIESCE`.
pub const UBLK_U_CMD_QUIESCE_DEV: u32 = iowr(UBLK_IOC_TYPE, 0x16, CTRL_CMD_SIZE);
/// Stop the device only if nobody has it open; needs `UBLK_F_SAFE_STOP_DEV`.
pub const UBLK_U_CMD_TRY_STOP_DEV: u32 = iowr(UBLK_IOC_TYPE, 0x17, CTRL_CMD_SIZE);
/// Register a shared-memory buffer (`addr` points to a [`UblkShmemBufReg`]);
/// the result is the buffer index.
///
/// [`UblkShmemBufReg`]: crate::UblkShmemBufReg
pub const UBLK_U_CMD_REG_BUF: u32 = iowr(UBLK_IOC_TYPE, 0x18, CTRL_CMD_SIZE);
/// Unregister the shared-memory buffer whose index is in `data[0]`.
pub const UBLK_U_CMD_UNREG_BUF: u32 = iowr(UBLK_IOC_TYPE, 0x19, CTRL_CMD_SIZE);

/// [`UblkShmemBufReg::flags`](crate::UblkShmemBufReg::flags): pin the pages
/// read-only (works with write-sealed memfds).
pub const UBLK_SHMEM_BUF_READ_ONLY: u32 = 1 << 0;

/// Size in bytes of the feature mask returned by `UBLK_U_CMD_GET_FEATURES`.
pub const UBLK_FEATURES_LEN: u16 = 8;

// ---------------------------------------------------------------------------
// I/O commands (issued on /dev/ublkcN).
// ---------------------------------------------------------------------------

/// Legacy opcode: fetch the next request for a tag.
pub const UBLK_IO_FETCH_REQ: u32 = 0x20;
/// Legacy opcode: commit the result of a request and fetch the next one.
pub const UBLK_IO_COMMIT_AND_FETCH_REQ: u32 = 0x21;
/// Legacy opcode: provide the buffer for a write request
/// (`UBLK_F_NEED_GET_DATA`).
pub const UBLK_IO_NEED_GET_DATA: u32 = 0x22;

/// `_IOWR('u', UBLK_IO_FETCH_REQ, struct ublksrv_io_cmd)`.
pub const UBLK_U_IO_FETCH_REQ: u32 = iowr(UBLK_IOC_TYPE, UBLK_IO_FETCH_REQ as u8, IO_CMD_SIZE);
/// `_IOWR('u', UBLK_IO_COMMIT_AND_FETCH_REQ, struct ublksrv_io_cmd)`.
pub const UBLK_U_IO_COMMIT_AND_FETCH_REQ: u32 = iowr(
    UBLK_IOC_TYPE,
    UBLK_IO_COMMIT_AND_FETCH_REQ as u8,
    IO_CMD_SIZE,
);
/// `_IOWR('u', UBLK_IO_NEED_GET_DATA, struct ublksrv_io_cmd)`.
pub const UBLK_U_IO_NEED_GET_DATA: u32 =
    iowr(UBLK_IOC_TYPE, UBLK_IO_NEED_GET_DATA as u8, IO_CMD_SIZE);
/// Register a request buffer into the io_uring fixed-buffer table.
pub const UBLK_U_IO_REGISTER_IO_BUF: u32 = iowr(UBLK_IOC_TYPE, 0x23, IO_CMD_SIZE);
/// Unregister a request buffer from the io_uring fixed-buffer table.
pub const UBLK_U_IO_UNREGISTER_IO_BUF: u32 = iowr(UBLK_IOC_TYPE, 0x24, IO_CMD_SIZE);
/// Batch: prepare I/O commands (`UBLK_F_BATCH_IO`).
pub const UBLK_U_IO_PREP_IO_CMDS: u32 = iowr(UBLK_IOC_TYPE, 0x25, BATCH_IO_SIZE);
/// Batch: commit I/O results; returns the number of bytes handled.
pub const UBLK_U_IO_COMMIT_IO_CMDS: u32 = iowr(UBLK_IOC_TYPE, 0x26, BATCH_IO_SIZE);
/// Batch: multishot fetch of I/O commands into a provided buffer.
pub const UBLK_U_IO_FETCH_IO_CMDS: u32 = iowr(UBLK_IOC_TYPE, 0x27, BATCH_IO_SIZE);

/// I/O command result: success.
pub const UBLK_IO_RES_OK: i32 = 0;
/// I/O command result: the server must issue `UBLK_IO_NEED_GET_DATA`.
pub const UBLK_IO_RES_NEED_GET_DATA: i32 = 1;
/// I/O command result: aborted, do not re-fetch (`-ENODEV`).
pub const UBLK_IO_RES_ABORT: i32 = -19;

// ---------------------------------------------------------------------------
// mmap / pread / pwrite offsets on /dev/ublkcN.
// ---------------------------------------------------------------------------

/// mmap offset of the per-queue `ublksrv_io_desc` array.
pub const UBLKSRV_CMD_BUF_OFFSET: u64 = 0;
/// Base file offset for `UBLK_F_USER_COPY` pread/pwrite.
pub const UBLKSRV_IO_BUF_OFFSET: u64 = 0x8000_0000;

/// Maximum queue depth.
pub const UBLK_MAX_QUEUE_DEPTH: u32 = 4096;

/// Bit offset of the in-buffer byte offset in a user-copy position.
pub const UBLK_IO_BUF_OFF: u32 = 0;
/// Width of the in-buffer byte offset (32 MiB max per I/O).
pub const UBLK_IO_BUF_BITS: u32 = 25;
/// Mask of the in-buffer byte offset.
pub const UBLK_IO_BUF_BITS_MASK: u64 = (1 << UBLK_IO_BUF_BITS) - 1;

/// Bit offset of the tag in a user-copy position.
pub const UBLK_TAG_OFF: u32 = UBLK_IO_BUF_BITS;
/// Width of the tag.
pub const UBLK_TAG_BITS: u32 = 16;
/// Mask of the tag.
pub const UBLK_TAG_BITS_MASK: u64 = (1 << UBLK_TAG_BITS) - 1;

/// Bit offset of the queue id in a user-copy position.
pub const UBLK_QID_OFF: u32 = UBLK_TAG_OFF + UBLK_TAG_BITS;
/// Width of the queue id.
pub const UBLK_QID_BITS: u32 = 12;
/// Mask of the queue id.
pub const UBLK_QID_BITS_MASK: u64 = (1 << UBLK_QID_BITS) - 1;

/// Maximum number of hardware queues.
pub const UBLK_MAX_NR_QUEUES: u32 = 1 << UBLK_QID_BITS;

/// Total width of a user-copy position (relative to `UBLKSRV_IO_BUF_OFFSET`).
pub const UBLKSRV_IO_BUF_TOTAL_BITS: u32 = UBLK_QID_OFF + UBLK_QID_BITS;
/// Total size of the user-copy position space.
pub const UBLKSRV_IO_BUF_TOTAL_SIZE: u64 = 1 << UBLKSRV_IO_BUF_TOTAL_BITS;

/// Bit position of the "integrity buffer" flag in a user-copy position.
pub const UBLK_INTEGRITY_FLAG_OFF: u32 = 62;
/// User-copy position flag: access the integrity buffer, not the data.
pub const UBLKSRV_IO_INTEGRITY_FLAG: u64 = 1 << UBLK_INTEGRITY_FLAG_OFF;

// ---------------------------------------------------------------------------
// Device feature flags (ublksrv_ctrl_dev_info::flags).
// ---------------------------------------------------------------------------

/// Zero copy via `UBLK_U_IO_REGISTER_IO_BUF` / `UBLK_U_IO_UNREGISTER_IO_BUF`.
pub const UBLK_F_SUPPORT_ZERO_COPY: u64 = 1 << 0;
/// Always complete io commands from task work.
pub const UBLK_F_URING_CMD_COMP_IN_TASK: u64 = 1 << 1;
/// Write requests need an extra `UBLK_IO_NEED_GET_DATA` round trip.
pub const UBLK_F_NEED_GET_DATA: u64 = 1 << 2;
/// Recoverable device; outstanding I/O fails on server exit.
pub const UBLK_F_USER_RECOVERY: u64 = 1 << 3;
/// Recoverable device; outstanding I/O is reissued on server exit.
pub const UBLK_F_USER_RECOVERY_REISSUE: u64 = 1 << 4;
/// Device may be created and managed by an unprivileged user.
pub const UBLK_F_UNPRIVILEGED_DEV: u64 = 1 << 5;
/// Commands use the ioctl encoding (`UBLK_U_*`).
pub const UBLK_F_CMD_IOCTL_ENCODE: u64 = 1 << 6;
/// Data is copied with pread()/pwrite() on /dev/ublkcN.
pub const UBLK_F_USER_COPY: u64 = 1 << 7;
/// Zoned block device.
pub const UBLK_F_ZONED: u64 = 1 << 8;
/// Recoverable device; I/O fails while no server is attached.
pub const UBLK_F_USER_RECOVERY_FAIL_IO: u64 = 1 << 9;
/// `UBLK_U_CMD_UPDATE_SIZE` is supported.
pub const UBLK_F_UPDATE_SIZE: u64 = 1 << 10;
/// Request buffers are automatically registered into the io_uring buffer
/// table (see [`UblkAutoBufReg`](crate::UblkAutoBufReg)).
pub const UBLK_F_AUTO_BUF_REG: u64 = 1 << 11;
/// `UBLK_U_CMD_QUIESCE_DEV` is supported.
pub const UBLK_F_QUIESCE: u64 = 1 << 12;
/// Each (queue, tag) may be served by its own daemon task.
pub const UBLK_F_PER_IO_DAEMON: u64 = 1 << 13;
/// Buffer (un)registration may be issued from any task.
pub const UBLK_F_BUF_REG_OFF_DAEMON: u64 = 1 << 14;
/// Batched I/O commands (`UBLK_U_IO_*_IO_CMDS`).
pub const UBLK_F_BATCH_IO: u64 = 1 << 15;
/// Requests may carry an integrity/metadata buffer (needs `UBLK_F_USER_COPY`).
pub const UBLK_F_INTEGRITY: u64 = 1 << 16;
/// `UBLK_U_CMD_TRY_STOP_DEV` is supported.
pub const UBLK_F_SAFE_STOP_DEV: u64 = 1 << 17;
/// Do not scan partitions when the device is started.
pub const UBLK_F_NO_AUTO_PART_SCAN: u64 = 1 << 18;
/// Shared-memory zero copy (`UBLK_U_CMD_REG_BUF`, `UBLK_IO_F_SHMEM_ZC`).
pub const UBLK_F_SHMEM_ZC: u64 = 1 << 19;
/// The io descriptor size is given by `ublksrv_ctrl_dev_info::io_desc_size`.
pub const UBLK_F_IO_DESC_SIZE: u64 = 1 << 20;
/// Honour the queue's `rq_affinity`: when a device is created with this flag,
/// every request completion goes through `blk_mq_complete_request_remote()`.
///
/// Not (yet) in upstream Linux; added by this project's kernel patch series.
pub const UBLK_F_SUPPORT_RQ_AFFINITY: u64 = 1 << 21;

// ---------------------------------------------------------------------------
// Device states (ublksrv_ctrl_dev_info::state).
// ---------------------------------------------------------------------------

/// Device is not started.
pub const UBLK_S_DEV_DEAD: u16 = 0;
/// Device is started and serving I/O.
pub const UBLK_S_DEV_LIVE: u16 = 1;
/// Device is quiesced, waiting for a (new) server.
pub const UBLK_S_DEV_QUIESCED: u16 = 2;
/// Device fails all I/O until a server recovers it.
pub const UBLK_S_DEV_FAIL_IO: u16 = 3;

// ---------------------------------------------------------------------------
// Request operations (low 8 bits of ublksrv_io_desc::op_flags).
// ---------------------------------------------------------------------------

/// Read.
pub const UBLK_IO_OP_READ: u8 = 0;
/// Write.
pub const UBLK_IO_OP_WRITE: u8 = 1;
/// Cache flush.
pub const UBLK_IO_OP_FLUSH: u8 = 2;
/// Discard.
pub const UBLK_IO_OP_DISCARD: u8 = 3;
/// Write same.
pub const UBLK_IO_OP_WRITE_SAME: u8 = 4;
/// Write zeroes.
pub const UBLK_IO_OP_WRITE_ZEROES: u8 = 5;
/// Open a zone.
pub const UBLK_IO_OP_ZONE_OPEN: u8 = 10;
/// Close a zone.
pub const UBLK_IO_OP_ZONE_CLOSE: u8 = 11;
/// Finish a zone.
pub const UBLK_IO_OP_ZONE_FINISH: u8 = 12;
/// Zone append; the written LBA is returned in `zone_append_lba`.
pub const UBLK_IO_OP_ZONE_APPEND: u8 = 13;
/// Reset all zones.
pub const UBLK_IO_OP_ZONE_RESET_ALL: u8 = 14;
/// Reset a zone.
pub const UBLK_IO_OP_ZONE_RESET: u8 = 15;
/// Report zones as an array of `struct blk_zone` (see `nr_zones`).
pub const UBLK_IO_OP_REPORT_ZONES: u8 = 18;

// ---------------------------------------------------------------------------
// Request flags (ublksrv_io_desc::op_flags, bits 8..31, unshifted).
// ---------------------------------------------------------------------------

/// Fail fast on device errors.
pub const UBLK_IO_F_FAILFAST_DEV: u32 = 1 << 8;
/// Fail fast on transport errors.
pub const UBLK_IO_F_FAILFAST_TRANSPORT: u32 = 1 << 9;
/// Fail fast on driver errors.
pub const UBLK_IO_F_FAILFAST_DRIVER: u32 = 1 << 10;
/// Metadata I/O.
pub const UBLK_IO_F_META: u32 = 1 << 11;
/// Forced unit access.
pub const UBLK_IO_F_FUA: u32 = 1 << 13;
/// Do not unmap (write zeroes).
pub const UBLK_IO_F_NOUNMAP: u32 = 1 << 15;
/// Swap I/O.
pub const UBLK_IO_F_SWAP: u32 = 1 << 16;
/// Automatic buffer registration failed; the server must register manually.
pub const UBLK_IO_F_NEED_REG_BUF: u32 = 1 << 17;
/// Request has an integrity data buffer.
pub const UBLK_IO_F_INTEGRITY: u32 = 1 << 18;
/// `addr` encodes a shared-memory buffer index and offset.
pub const UBLK_IO_F_SHMEM_ZC: u32 = 1 << 19;

// ---------------------------------------------------------------------------
// Automatic buffer registration (UblkAutoBufReg::flags).
// ---------------------------------------------------------------------------

/// On auto-registration failure, complete the command with
/// `UBLK_IO_F_NEED_REG_BUF` instead of failing the request.
pub const UBLK_AUTO_BUF_REG_FALLBACK: u8 = 1 << 0;
/// All valid `UblkAutoBufReg::flags` bits.
pub const UBLK_AUTO_BUF_REG_F_MASK: u8 = UBLK_AUTO_BUF_REG_FALLBACK;

// ---------------------------------------------------------------------------
// Batch I/O element layout (UblkBatchIo::flags).
// ---------------------------------------------------------------------------

/// Each element carries a `u64` zone append LBA.
pub const UBLK_BATCH_F_HAS_ZONE_LBA: u16 = 1 << 0;
/// Each element carries a `u64` buffer address.
pub const UBLK_BATCH_F_HAS_BUF_ADDR: u16 = 1 << 1;
/// Auto buffer registration fallback for batch commands.
pub const UBLK_BATCH_F_AUTO_BUF_REG_FALLBACK: u16 = 1 << 2;

// ---------------------------------------------------------------------------
// Basic parameter attributes (UblkParamBasic::attrs).
// ---------------------------------------------------------------------------

/// Read-only device.
pub const UBLK_ATTR_READ_ONLY: u32 = 1 << 0;
/// Rotational device.
pub const UBLK_ATTR_ROTATIONAL: u32 = 1 << 1;
/// Device has a volatile write cache.
pub const UBLK_ATTR_VOLATILE_CACHE: u32 = 1 << 2;
/// Device supports FUA.
pub const UBLK_ATTR_FUA: u32 = 1 << 3;

// ---------------------------------------------------------------------------
// Parameter types (UblkParams::types).
// ---------------------------------------------------------------------------

/// `UblkParams::basic` is valid.
pub const UBLK_PARAM_TYPE_BASIC: u32 = 1 << 0;
/// `UblkParams::discard` is valid.
pub const UBLK_PARAM_TYPE_DISCARD: u32 = 1 << 1;
/// `UblkParams::devt` is valid (read-only).
pub const UBLK_PARAM_TYPE_DEVT: u32 = 1 << 2;
/// `UblkParams::zoned` is valid.
pub const UBLK_PARAM_TYPE_ZONED: u32 = 1 << 3;
/// `UblkParams::dma` is valid.
pub const UBLK_PARAM_TYPE_DMA_ALIGN: u32 = 1 << 4;
/// `UblkParams::seg` is valid.
pub const UBLK_PARAM_TYPE_SEGMENT: u32 = 1 << 5;
/// `UblkParams::integrity` is valid (needs `UBLK_F_INTEGRITY`).
pub const UBLK_PARAM_TYPE_INTEGRITY: u32 = 1 << 6;

/// Lower bound for segment sizes in [`UblkParamSegment`](crate::UblkParamSegment).
pub const UBLK_MIN_SEGMENT_SIZE: u32 = 4096;

// ---------------------------------------------------------------------------
// Shared-memory zero-copy address encoding (with UBLK_IO_F_SHMEM_ZC).
// ---------------------------------------------------------------------------

/// Mask of the byte offset (bits 0..31) in a shared-memory address.
pub const UBLK_SHMEM_ZC_OFF_MASK: u64 = 0xffff_ffff;
/// Bit position of the buffer index in a shared-memory address.
pub const UBLK_SHMEM_ZC_IDX_OFF: u32 = 32;
/// Mask of the buffer index (after shifting by `UBLK_SHMEM_ZC_IDX_OFF`).
pub const UBLK_SHMEM_ZC_IDX_MASK: u64 = 0xffff;
