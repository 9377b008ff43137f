//! `#[repr(C)]` structs of `include/uapi/linux/ublk_cmd.h` and the header's
//! `static inline` helpers.
//!
//! Naming: C `struct ublk_foo_bar` / `struct ublksrv_foo` become `UblkFooBar`
//! / `UblksrvFoo`; field names are kept verbatim.
//!
//! Anonymous unions: both unions of the header have members of one identical
//! type (`nr_sectors`/`nr_zones`: `__u32`, `addr`/`zone_append_lba`: `__u64`),
//! so they are represented by a single plain field named after the first
//! member, plus accessor methods for the alias. This keeps the structs
//! `Copy + Default + Debug + Eq` and free of `unsafe`, with identical layout.

use core::mem::{align_of, size_of};

use crate::consts::{UBLK_SHMEM_ZC_IDX_MASK, UBLK_SHMEM_ZC_IDX_OFF, UBLK_SHMEM_ZC_OFF_MASK};

/// Parameter buffer of `UBLK_U_CMD_REG_BUF` (`struct ublk_shmem_buf_reg`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkShmemBufReg {
    /// Userspace virtual address of the shared memory.
    pub addr: u64,
    /// Size in bytes (page aligned).
    pub len: u64,
    /// `UBLK_SHMEM_BUF_*` flags.
    pub flags: u32,
    pub reserved: u32,
}

/// Control command payload, carried in the io_uring SQE command area
/// (`struct ublksrv_ctrl_cmd`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblksrvCtrlCmd {
    /// Target device id.
    pub dev_id: u32,
    /// Target queue, or `u16::MAX` (-1) if the command is not per queue.
    pub queue_id: u16,
    /// Length of the command-specific buffer at `addr`.
    pub len: u16,
    /// Command-specific buffer (in or out).
    pub addr: u64,
    /// Inline command data.
    pub data: [u64; 1],
    /// Length of the device path prepended to the buffer, NUL included
    /// (unprivileged devices and `UBLK_CMD_GET_DEV_INFO2`).
    pub dev_path_len: u16,
    pub pad: u16,
    pub reserved: u32,
}

/// Device information (`struct ublksrv_ctrl_dev_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblksrvCtrlDevInfo {
    pub nr_hw_queues: u16,
    pub queue_depth: u16,
    /// One of `UBLK_S_DEV_*`.
    pub state: u16,
    /// Size of one io descriptor (`UBLK_F_IO_DESC_SIZE`).
    pub io_desc_size: u16,
    pub max_io_buf_bytes: u32,
    pub dev_id: u32,
    pub ublksrv_pid: i32,
    pub pad1: u32,
    /// `UBLK_F_*` feature flags.
    pub flags: u64,
    /// Private to the ublk server; not interpreted by the driver.
    pub ublksrv_flags: u64,
    /// Owner uid, filled in by the kernel.
    pub owner_uid: u32,
    /// Owner gid, filled in by the kernel.
    pub owner_gid: u32,
    pub reserved1: u64,
    pub reserved2: u64,
}

/// I/O descriptor shared with the driver through the mmapped command buffer,
/// indexed by tag (`struct ublksrv_io_desc`).
///
/// The C anonymous union `{ nr_sectors; nr_zones; }` is the single field
/// `nr_sectors`; use [`nr_zones`](Self::nr_zones) for `UBLK_IO_OP_REPORT_ZONES`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblksrvIoDesc {
    /// Operation in bits 0..7 (`UBLK_IO_OP_*`), flags in bits 8..31
    /// (`UBLK_IO_F_*`).
    pub op_flags: u32,
    /// Number of sectors (aliases `nr_zones`).
    pub nr_sectors: u32,
    /// First sector of the I/O.
    pub start_sector: u64,
    /// Buffer address in the server (or shared-memory encoding with
    /// `UBLK_IO_F_SHMEM_ZC`).
    pub addr: u64,
}

impl UblksrvIoDesc {
    /// The `nr_zones` member of the union (for `UBLK_IO_OP_REPORT_ZONES`).
    pub const fn nr_zones(&self) -> u32 {
        self.nr_sectors
    }

    /// Sets the `nr_zones` member of the union.
    pub fn set_nr_zones(&mut self, nr_zones: u32) {
        self.nr_sectors = nr_zones;
    }

    /// Request operation (`UBLK_IO_OP_*`), like `ublksrv_get_op()`.
    pub const fn op(&self) -> u8 {
        ublksrv_get_op(self)
    }

    /// Request flags shifted down by 8, like `ublksrv_get_flags()`.
    ///
    /// Note that the `UBLK_IO_F_*` constants are defined unshifted; test them
    /// against [`op_flags`](Self::op_flags).
    pub const fn flags(&self) -> u32 {
        ublksrv_get_flags(self)
    }
}

/// Returns the operation (`UBLK_IO_OP_*`) of an io descriptor.
pub const fn ublksrv_get_op(iod: &UblksrvIoDesc) -> u8 {
    (iod.op_flags & 0xff) as u8
}

/// Returns the flags of an io descriptor, shifted down by 8 bits.
pub const fn ublksrv_get_flags(iod: &UblksrvIoDesc) -> u32 {
    iod.op_flags >> 8
}

/// Automatic buffer registration data, carried in the SQE `addr` field with
/// `UBLK_F_AUTO_BUF_REG` (`struct ublk_auto_buf_reg`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkAutoBufReg {
    /// io_uring fixed-buffer index to register the request buffer at.
    pub index: u16,
    /// `UBLK_AUTO_BUF_REG_*` flags.
    pub flags: u8,
    pub reserved0: u8,
    pub reserved1: u32,
}

impl UblkAutoBufReg {
    /// Decodes the SQE `addr` value, like `ublk_sqe_addr_to_auto_buf_reg()`.
    pub const fn from_sqe_addr(sqe_addr: u64) -> Self {
        ublk_sqe_addr_to_auto_buf_reg(sqe_addr)
    }

    /// Encodes into an SQE `addr` value, like
    /// `ublk_auto_buf_reg_to_sqe_addr()`.
    pub const fn to_sqe_addr(&self) -> u64 {
        ublk_auto_buf_reg_to_sqe_addr(self)
    }
}

/// Decodes an SQE `addr` value into a [`UblkAutoBufReg`]: bits 0..15 index,
/// 16..23 flags, 24..31 reserved0, 32..63 reserved1.
pub const fn ublk_sqe_addr_to_auto_buf_reg(sqe_addr: u64) -> UblkAutoBufReg {
    UblkAutoBufReg {
        index: sqe_addr as u16,
        flags: (sqe_addr >> 16) as u8,
        reserved0: (sqe_addr >> 24) as u8,
        reserved1: (sqe_addr >> 32) as u32,
    }
}

/// Encodes a [`UblkAutoBufReg`] into an SQE `addr` value.
pub const fn ublk_auto_buf_reg_to_sqe_addr(buf: &UblkAutoBufReg) -> u64 {
    buf.index as u64
        | (buf.flags as u64) << 16
        | (buf.reserved0 as u64) << 24
        | (buf.reserved1 as u64) << 32
}

/// I/O command payload, carried in the io_uring SQE command area
/// (`struct ublksrv_io_cmd`).
///
/// The C anonymous union `{ addr; zone_append_lba; }` is the single field
/// `addr`; use [`zone_append_lba`](Self::zone_append_lba) for zone appends.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblksrvIoCmd {
    pub q_id: u16,
    pub tag: u16,
    /// I/O result (commit commands only).
    pub result: i32,
    /// Server buffer address (aliases `zone_append_lba`).
    pub addr: u64,
}

impl UblksrvIoCmd {
    /// The `zone_append_lba` member of the union.
    pub const fn zone_append_lba(&self) -> u64 {
        self.addr
    }

    /// Sets the `zone_append_lba` member of the union.
    pub fn set_zone_append_lba(&mut self, lba: u64) {
        self.addr = lba;
    }
}

/// Mandatory header of each element of a batch I/O buffer
/// (`struct ublk_elem_header`). Optional `u64` buffer address and zone LBA
/// follow depending on `UBLK_BATCH_F_*`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkElemHeader {
    pub tag: u16,
    /// Buffer index (only with `UBLK_F_AUTO_BUF_REG`).
    pub buf_index: u16,
    /// Completion result (commit only).
    pub result: i32,
}

/// Batch I/O command payload (`struct ublk_batch_io`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkBatchIo {
    pub q_id: u16,
    /// `UBLK_BATCH_F_*` flags.
    pub flags: u16,
    /// Number of elements in the buffer.
    pub nr_elem: u16,
    /// Size in bytes of each element.
    pub elem_bytes: u8,
    pub reserved: u8,
    pub reserved2: u64,
}

/// Basic device parameters (`struct ublk_param_basic`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkParamBasic {
    /// `UBLK_ATTR_*` attributes.
    pub attrs: u32,
    pub logical_bs_shift: u8,
    pub physical_bs_shift: u8,
    pub io_opt_shift: u8,
    pub io_min_shift: u8,
    pub max_sectors: u32,
    pub chunk_sectors: u32,
    pub dev_sectors: u64,
    pub virt_boundary_mask: u64,
}

/// Discard parameters (`struct ublk_param_discard`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkParamDiscard {
    pub discard_alignment: u32,
    pub discard_granularity: u32,
    pub max_discard_sectors: u32,
    pub max_write_zeroes_sectors: u32,
    pub max_discard_segments: u16,
    pub reserved0: u16,
}

/// Device numbers, read-only (`struct ublk_param_devt`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkParamDevt {
    pub char_major: u32,
    pub char_minor: u32,
    pub disk_major: u32,
    pub disk_minor: u32,
}

/// Zoned device parameters (`struct ublk_param_zoned`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkParamZoned {
    pub max_open_zones: u32,
    pub max_active_zones: u32,
    pub max_zone_append_sectors: u32,
    pub reserved: [u8; 20],
}

/// DMA alignment parameter (`struct ublk_param_dma_align`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkParamDmaAlign {
    pub alignment: u32,
    pub pad: [u8; 4],
}

/// Segment limits (`struct ublk_param_segment`); all three must be non-zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkParamSegment {
    /// `seg_boundary_mask + 1` must be a power of two `>=
    /// UBLK_MIN_SEGMENT_SIZE`.
    pub seg_boundary_mask: u64,
    /// Must be `>= UBLK_MIN_SEGMENT_SIZE`.
    pub max_segment_size: u32,
    pub max_segments: u16,
    pub pad: [u8; 2],
}

/// Integrity (metadata) parameters (`struct ublk_param_integrity`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkParamIntegrity {
    /// `LBMD_PI_CAP_*` flags (linux/fs.h).
    pub flags: u32,
    /// 0 means unlimited.
    pub max_integrity_segments: u16,
    pub interval_exp: u8,
    /// Must be non-zero with `UBLK_PARAM_TYPE_INTEGRITY`.
    pub metadata_size: u8,
    pub pi_offset: u8,
    /// `LBMD_PI_CSUM_*` (linux/fs.h).
    pub csum_type: u8,
    pub tag_size: u8,
    pub pad: [u8; 5],
}

/// All device parameters, for `UBLK_U_CMD_SET_PARAMS` /
/// `UBLK_U_CMD_GET_PARAMS` (`struct ublk_params`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UblkParams {
    /// Total length of the structure as understood by the sender; the driver
    /// may update it.
    pub len: u32,
    /// `UBLK_PARAM_TYPE_*` bits telling which members are valid.
    pub types: u32,
    pub basic: UblkParamBasic,
    pub discard: UblkParamDiscard,
    pub devt: UblkParamDevt,
    pub zoned: UblkParamZoned,
    pub dma: UblkParamDmaAlign,
    pub seg: UblkParamSegment,
    pub integrity: UblkParamIntegrity,
}

/// Builds a shared-memory zero-copy address from a buffer index and a byte
/// offset (`UBLK_IO_F_SHMEM_ZC`).
pub const fn ublk_shmem_zc_addr(index: u16, offset: u32) -> u64 {
    ((index as u64) << UBLK_SHMEM_ZC_IDX_OFF) | offset as u64
}

/// Buffer index of a shared-memory zero-copy address.
pub const fn ublk_shmem_zc_index(addr: u64) -> u16 {
    ((addr >> UBLK_SHMEM_ZC_IDX_OFF) & UBLK_SHMEM_ZC_IDX_MASK) as u16
}

/// Byte offset of a shared-memory zero-copy address.
pub const fn ublk_shmem_zc_offset(addr: u64) -> u32 {
    (addr & UBLK_SHMEM_ZC_OFF_MASK) as u32
}

// Compile-time layout checks. Sizes are ABI independent except for
// `UblkParams`, whose `seg` member is 8-aligned only where `u64` is (not on
// i386). The integration test `header_layout` checks every field against the
// C compiler.
const A64: usize = align_of::<u64>();

macro_rules! assert_layout {
    ($($ty:ty => $size:expr, $align:expr;)*) => {
        $(
            const _: () = assert!(size_of::<$ty>() == $size);
            const _: () = assert!(align_of::<$ty>() == $align);
        )*
    };
}

assert_layout! {
    UblkShmemBufReg => 24, A64;
    UblksrvCtrlCmd => 32, A64;
    UblksrvCtrlDevInfo => 64, A64;
    UblksrvIoDesc => 24, A64;
    UblkAutoBufReg => 8, 4;
    UblksrvIoCmd => 16, A64;
    UblkElemHeader => 8, 4;
    UblkBatchIo => 16, A64;
    UblkParamBasic => 32, A64;
    UblkParamDiscard => 20, 4;
    UblkParamDevt => 16, 4;
    UblkParamZoned => 32, 4;
    UblkParamDmaAlign => 8, 4;
    UblkParamSegment => 16, A64;
    UblkParamIntegrity => 16, 4;
    UblkParams => if A64 == 8 { 152 } else { 148 }, A64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_buf_reg_roundtrip() {
        let reg = UblkAutoBufReg {
            index: 0x1234,
            flags: 0x56,
            reserved0: 0x78,
            reserved1: 0x9abc_def0,
        };
        let addr = reg.to_sqe_addr();
        assert_eq!(addr, 0x9abc_def0_7856_1234);
        assert_eq!(UblkAutoBufReg::from_sqe_addr(addr), reg);
    }

    #[test]
    fn shmem_zc_roundtrip() {
        let addr = ublk_shmem_zc_addr(0xbeef, 0x1234_5678);
        assert_eq!(ublk_shmem_zc_index(addr), 0xbeef);
        assert_eq!(ublk_shmem_zc_offset(addr), 0x1234_5678);
    }

    #[test]
    fn io_desc_accessors() {
        let mut iod = UblksrvIoDesc {
            op_flags: crate::UBLK_IO_F_FUA | crate::UBLK_IO_OP_WRITE as u32,
            ..Default::default()
        };
        assert_eq!(iod.op(), crate::UBLK_IO_OP_WRITE);
        assert_eq!(iod.flags() << 8, crate::UBLK_IO_F_FUA);
        iod.set_nr_zones(7);
        assert_eq!(iod.nr_sectors, 7);
        assert_eq!(iod.nr_zones(), 7);
    }
}
