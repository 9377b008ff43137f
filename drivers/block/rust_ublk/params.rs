// SPDX-License-Identifier: GPL-2.0

//! Device parameters (`struct ublk_params`), set by `UBLK_U_CMD_SET_PARAMS` and read back by
//! `UBLK_U_CMD_GET_PARAMS`.
//!
//! The parameters are kept as the bytes user space sent, so that reading them back returns what
//! was set; they are validated as ublk_drv validates them, so that it and this driver accept and
//! refuse the same parameters.

use crate::{
    features::{F_INTEGRITY, F_ZONED},
    uapi::{Field, PARAMS_SIZE},
};
use core::mem::{offset_of, size_of};
use kernel::{
    block::mq::gen_disk::{GenDiskBuilder, Integrity, IntegrityChecksum, Zoned},
    page::{PAGE_SHIFT, PAGE_SIZE},
    prelude::*,
    uapi as u,
};

pub(crate) const TYPE_BASIC: u32 = u::UBLK_PARAM_TYPE_BASIC;
pub(crate) const TYPE_DISCARD: u32 = u::UBLK_PARAM_TYPE_DISCARD;
pub(crate) const TYPE_DEVT: u32 = u::UBLK_PARAM_TYPE_DEVT;
pub(crate) const TYPE_ZONED: u32 = u::UBLK_PARAM_TYPE_ZONED;
pub(crate) const TYPE_DMA_ALIGN: u32 = u::UBLK_PARAM_TYPE_DMA_ALIGN;
pub(crate) const TYPE_SEGMENT: u32 = u::UBLK_PARAM_TYPE_SEGMENT;
pub(crate) const TYPE_INTEGRITY: u32 = u::UBLK_PARAM_TYPE_INTEGRITY;

/// All parameter types of the UAPI (`UBLK_PARAM_TYPE_ALL`).
pub(crate) const TYPE_ALL: u32 = TYPE_BASIC
    | TYPE_DISCARD
    | TYPE_DEVT
    | TYPE_ZONED
    | TYPE_DMA_ALIGN
    | TYPE_SEGMENT
    | TYPE_INTEGRITY;

// Device attributes (`UBLK_ATTR_*`) of the basic parameters.
const ATTR_READ_ONLY: u32 = u::UBLK_ATTR_READ_ONLY;
const ATTR_ROTATIONAL: u32 = u::UBLK_ATTR_ROTATIONAL;
const ATTR_VOLATILE_CACHE: u32 = u::UBLK_ATTR_VOLATILE_CACHE;
const ATTR_FUA: u32 = u::UBLK_ATTR_FUA;

// Offsets in `struct ublk_params`, and in the parameter structures it holds.
type P = u::ublk_params;
const OFF_LEN: usize = offset_of!(P, len);
const OFF_TYPES: usize = offset_of!(P, types);
const OFF_BASIC: usize = offset_of!(P, basic);
const OFF_DISCARD: usize = offset_of!(P, discard);
const OFF_DEVT: usize = offset_of!(P, devt);
const OFF_DMA: usize = offset_of!(P, dma);
const OFF_SEG: usize = offset_of!(P, seg);
const OFF_INTEGRITY: usize = offset_of!(P, integrity);
const OFF_ZONED: usize = offset_of!(P, zoned);
const D_ALIGNMENT: usize = offset_of!(u::ublk_param_discard, discard_alignment);
const D_GRANULARITY: usize = offset_of!(u::ublk_param_discard, discard_granularity);
const D_MAX_SECTORS: usize = offset_of!(u::ublk_param_discard, max_discard_sectors);
const D_MAX_WRITE_ZEROES: usize = offset_of!(u::ublk_param_discard, max_write_zeroes_sectors);
const D_MAX_SEGMENTS: usize = offset_of!(u::ublk_param_discard, max_discard_segments);
const S_BOUNDARY_MASK: usize = offset_of!(u::ublk_param_segment, seg_boundary_mask);
const S_MAX_SIZE: usize = offset_of!(u::ublk_param_segment, max_segment_size);
const S_MAX_SEGMENTS: usize = offset_of!(u::ublk_param_segment, max_segments);

/// Size of the header of `struct ublk_params` (`len` and `types`): what is read first.
pub(crate) const HEADER_SIZE: usize = OFF_TYPES + size_of::<u32>();

/// Smallest segment size (`UBLK_MIN_SEGMENT_SIZE`).
const MIN_SEGMENT_SIZE: u64 = u::UBLK_MIN_SEGMENT_SIZE as u64;
/// Upper bound of the physical block size, io_min and io_opt: log2 of 256 MiB, the bound that
/// ublk_drv checks too, so that the same parameters are valid.
const MAX_BS_SHIFT: u8 = 28;
const SECTOR_SHIFT: u32 = 9;

/// Device parameters (`struct ublk_params`).
#[derive(Clone)]
pub(crate) struct Params {
    raw: [u8; PARAMS_SIZE],
}

/// The basic parameters (`struct ublk_param_basic`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Basic {
    pub(crate) attrs: u32,
    pub(crate) logical_bs_shift: u8,
    pub(crate) physical_bs_shift: u8,
    pub(crate) io_opt_shift: u8,
    pub(crate) io_min_shift: u8,
    pub(crate) max_sectors: u32,
    pub(crate) chunk_sectors: u32,
    pub(crate) dev_sectors: u64,
    pub(crate) virt_boundary_mask: u64,
}

/// The integrity parameters (`struct ublk_param_integrity`).
struct IntegrityParams {
    /// `LBMD_PI_CAP_*`.
    flags: u32,
    max_integrity_segments: u16,
    interval_exp: u8,
    metadata_size: u8,
    pi_offset: u8,
    /// `LBMD_PI_CSUM_*`.
    csum_type: u8,
    tag_size: u8,
}

/// The zoned parameters (`struct ublk_param_zoned`).
struct ZonedParams {
    max_open_zones: u32,
    max_active_zones: u32,
    max_zone_append_sectors: u32,
}

impl IntegrityParams {
    /// Returns whether the device checks protection information itself, and whether the
    /// protection information has a reference tag; `EINVAL` for unknown flags.
    fn flags(&self) -> Result<(bool, bool)> {
        if self.flags & !(u::LBMD_PI_CAP_INTEGRITY | u::LBMD_PI_CAP_REFTAG) != 0 {
            return Err(EINVAL);
        }
        Ok((
            self.flags & u::LBMD_PI_CAP_INTEGRITY != 0,
            self.flags & u::LBMD_PI_CAP_REFTAG != 0,
        ))
    }

    /// Returns the checksum of the protection information; `EINVAL` for an unknown one.
    fn checksum(&self) -> Result<IntegrityChecksum> {
        Ok(match u32::from(self.csum_type) {
            u::LBMD_PI_CSUM_NONE => IntegrityChecksum::None,
            u::LBMD_PI_CSUM_IP => IntegrityChecksum::Ip,
            u::LBMD_PI_CSUM_CRC16_T10DIF => IntegrityChecksum::Crc,
            u::LBMD_PI_CSUM_CRC64_NVME => IntegrityChecksum::Crc64,
            _ => return Err(EINVAL),
        })
    }

    /// Returns the size of the protection information, by its checksum.
    fn pi_tuple_size(&self) -> Result<u8> {
        Ok(match self.checksum()? {
            IntegrityChecksum::None => 0,
            IntegrityChecksum::Ip | IntegrityChecksum::Crc => 8,
            IntegrityChecksum::Crc64 => 16,
        })
    }
}

impl Params {
    /// Returns empty parameters, as a new device has.
    pub(crate) const fn new() -> Self {
        Self {
            raw: [0; PARAMS_SIZE],
        }
    }

    /// Forgets every parameter, as a new device has none.
    pub(crate) fn clear(&mut self) {
        *self = Self::new();
    }

    fn get<T: Field>(&self, off: usize) -> T {
        T::at(&self.raw, off)
    }

    /// Returns the parameter types that are set.
    pub(crate) fn types(&self) -> u32 {
        self.get(OFF_TYPES)
    }

    fn set_types(&mut self, types: u32) {
        types.put(&mut self.raw, OFF_TYPES);
    }

    /// Changes the size of the device in the basic parameters (`UBLK_U_CMD_UPDATE_SIZE`).
    pub(crate) fn set_dev_sectors(&mut self, sectors: u64) {
        type B = u::ublk_param_basic;
        sectors.put(&mut self.raw, OFF_BASIC + offset_of!(B, dev_sectors));
    }

    /// Returns the basic parameters.
    pub(crate) fn basic(&self) -> Basic {
        type B = u::ublk_param_basic;
        let b = OFF_BASIC;
        Basic {
            attrs: self.get(b + offset_of!(B, attrs)),
            logical_bs_shift: self.get(b + offset_of!(B, logical_bs_shift)),
            physical_bs_shift: self.get(b + offset_of!(B, physical_bs_shift)),
            io_opt_shift: self.get(b + offset_of!(B, io_opt_shift)),
            io_min_shift: self.get(b + offset_of!(B, io_min_shift)),
            max_sectors: self.get(b + offset_of!(B, max_sectors)),
            chunk_sectors: self.get(b + offset_of!(B, chunk_sectors)),
            dev_sectors: self.get(b + offset_of!(B, dev_sectors)),
            virt_boundary_mask: self.get(b + offset_of!(B, virt_boundary_mask)),
        }
    }

    /// Returns the integrity parameters.
    fn integrity(&self) -> IntegrityParams {
        type I = u::ublk_param_integrity;
        let i = OFF_INTEGRITY;
        IntegrityParams {
            flags: self.get(i + offset_of!(I, flags)),
            max_integrity_segments: self.get(i + offset_of!(I, max_integrity_segments)),
            interval_exp: self.get(i + offset_of!(I, interval_exp)),
            metadata_size: self.get(i + offset_of!(I, metadata_size)),
            pi_offset: self.get(i + offset_of!(I, pi_offset)),
            csum_type: self.get(i + offset_of!(I, csum_type)),
            tag_size: self.get(i + offset_of!(I, tag_size)),
        }
    }

    /// Returns the zoned parameters.
    fn zoned(&self) -> ZonedParams {
        type Z = u::ublk_param_zoned;
        let z = OFF_ZONED;
        ZonedParams {
            max_open_zones: self.get(z + offset_of!(Z, max_open_zones)),
            max_active_zones: self.get(z + offset_of!(Z, max_active_zones)),
            max_zone_append_sectors: self.get(z + offset_of!(Z, max_zone_append_sectors)),
        }
    }

    /// Replaces the parameters with the first `len` bytes of `bytes`, which came from user space,
    /// and validates them for a device with the flags `flags` whose I/O buffers have
    /// `max_io_buf_bytes` bytes.
    ///
    /// Unknown parameter types are ignored. On error the parameters are cleared, so that no invalid
    /// parameters survive.
    ///
    /// Integrity parameters are valid only for a device with `UBLK_F_INTEGRITY`; a device with
    /// `UBLK_F_ZONED` must have zoned parameters, any other must not.
    pub(crate) fn set(&mut self, bytes: &[u8], max_io_buf_bytes: u32, flags: u64) -> Result {
        let integrity = flags & F_INTEGRITY != 0;
        let zoned = flags & F_ZONED != 0;
        let mut raw = [0u8; PARAMS_SIZE];
        let len = bytes.len().min(PARAMS_SIZE);
        raw[..len].copy_from_slice(&bytes[..len]);
        self.raw = raw;
        self.set_types(self.types() & TYPE_ALL);
        let ret = self.validate(max_io_buf_bytes, integrity, zoned);
        if ret.is_err() {
            *self = Self::new();
        }
        ret
    }

    /// Validates the parameters as `ublk_validate_params()` does.
    fn validate(&self, max_io_buf_bytes: u32, integrity: bool, zoned: bool) -> Result {
        let types = self.types();

        // The basic parameters are the only ones that must be set.
        if types & TYPE_BASIC == 0 {
            return Err(EINVAL);
        }
        let p = self.basic();
        if u32::from(p.logical_bs_shift) > PAGE_SHIFT as u32
            || u32::from(p.logical_bs_shift) < SECTOR_SHIFT
            || p.physical_bs_shift > MAX_BS_SHIFT
            || p.io_min_shift > MAX_BS_SHIFT
            || p.io_opt_shift > MAX_BS_SHIFT
            || p.logical_bs_shift > p.physical_bs_shift
            || p.max_sectors > (max_io_buf_bytes >> SECTOR_SHIFT)
            || p.max_sectors < (1 << (PAGE_SHIFT as u32 - SECTOR_SHIFT))
            // The zones of a zoned device are its chunks.
            || (zoned && !p.chunk_sectors.is_power_of_two())
        {
            return Err(EINVAL);
        }

        if types & TYPE_DISCARD != 0 {
            let max_discard_sectors: u32 = self.get(OFF_DISCARD + D_MAX_SECTORS);
            let max_discard_segments: u16 = self.get(OFF_DISCARD + D_MAX_SEGMENTS);
            let discard_granularity: u32 = self.get(OFF_DISCARD + D_GRANULARITY);
            // Only single-segment discard is supported.
            if max_discard_sectors != 0 && max_discard_segments != 1 {
                return Err(EINVAL);
            }
            if discard_granularity == 0 {
                return Err(EINVAL);
            }
        }

        // The device numbers are read-only.
        if types & TYPE_DEVT != 0 {
            return Err(EINVAL);
        }

        // A zoned device has zoned parameters, and only a zoned device has them
        // (`ublk_dev_param_zoned_validate()`). Unlike ublk_drv, which returns here, the
        // parameters that follow are still checked for a zoned device.
        if types & TYPE_ZONED != 0 {
            if !cfg!(CONFIG_BLK_DEV_ZONED) {
                return Err(EOPNOTSUPP);
            }
            let z = self.zoned();
            if !zoned || z.max_zone_append_sectors == 0 {
                return Err(EINVAL);
            }
            // The chunk size is a power of 2, checked above.
            let nr_zones = p.dev_sectors >> p.chunk_sectors.trailing_zeros();
            if u64::from(z.max_active_zones) > nr_zones || u64::from(z.max_open_zones) > nr_zones {
                return Err(EINVAL);
            }
        } else if zoned {
            return Err(EINVAL);
        }

        if types & TYPE_DMA_ALIGN != 0 {
            let alignment: u32 = self.get(OFF_DMA + offset_of!(u::ublk_param_dma_align, alignment));
            if alignment as usize >= kernel::page::PAGE_SIZE
                || !alignment.wrapping_add(1).is_power_of_two()
            {
                return Err(EINVAL);
            }
        }

        if types & TYPE_SEGMENT != 0 {
            let seg_boundary_mask: u64 = self.get(OFF_SEG + S_BOUNDARY_MASK);
            let max_segment_size: u32 = self.get(OFF_SEG + S_MAX_SIZE);
            let boundary = seg_boundary_mask.wrapping_add(1);
            if !boundary.is_power_of_two()
                || boundary < MIN_SEGMENT_SIZE
                || u64::from(max_segment_size) < MIN_SEGMENT_SIZE
            {
                return Err(EINVAL);
            }
        }

        if types & TYPE_INTEGRITY != 0 {
            if !integrity {
                return Err(EINVAL);
            }
            let i = self.integrity();
            i.flags()?;
            let pi_tuple_size = i.pi_tuple_size()?;
            if i.metadata_size == 0
                || (i.csum_type == u::LBMD_PI_CSUM_NONE as u8
                    && i.flags & u::LBMD_PI_CAP_REFTAG != 0)
                || u32::from(i.pi_offset) + u32::from(pi_tuple_size) > u32::from(i.metadata_size)
                || u32::from(i.interval_exp) < SECTOR_SHIFT
                || i.interval_exp > p.logical_bs_shift
            {
                return Err(EINVAL);
            }
        }

        Ok(())
    }

    /// Returns a builder of the disk of a device with these parameters, which were validated.
    pub(crate) fn disk_builder(&self) -> Result<GenDiskBuilder> {
        let types = self.types();
        if types & TYPE_BASIC == 0 {
            return Err(EINVAL);
        }
        let p = self.basic();
        let mut b = GenDiskBuilder::new()
            .logical_block_size(1u32 << p.logical_bs_shift)?
            .physical_block_size((1u32 << p.physical_bs_shift).min(PAGE_SIZE as u32))?
            .capacity_sectors(p.dev_sectors)
            .max_hw_sectors(p.max_sectors)
            // The server may not answer I/O before `UBLK_U_CMD_START_DEV` returns.
            .defer_partition_scan(true)
            // No segment limits of its own (the server's segment parameters may set some), and
            // 4-byte aligned direct I/O. ublk_drv sets the same limits; servers written against
            // it expect them.
            .segments(u16::MAX, u32::MAX, 0)
            .dma_alignment(3)
            .io_sizes(1u32 << p.io_min_shift, 1u32 << p.io_opt_shift)
            .rotational(p.attrs & ATTR_ROTATIONAL != 0)
            .read_only(p.attrs & ATTR_READ_ONLY != 0)
            .write_cache(p.attrs & ATTR_VOLATILE_CACHE != 0, p.attrs & ATTR_FUA != 0)
            .chunk_sectors(p.chunk_sectors)
            .virt_boundary_mask(p.virt_boundary_mask);
        if types & TYPE_ZONED != 0 {
            let z = self.zoned();
            b = b.zoned(Zoned {
                zone_sectors: p.chunk_sectors,
                max_open_zones: z.max_open_zones,
                max_active_zones: z.max_active_zones,
                max_append_sectors: z.max_zone_append_sectors,
            });
        }
        if types & TYPE_DISCARD != 0 {
            let alignment: u32 = self.get(OFF_DISCARD + D_ALIGNMENT);
            let granularity: u32 = self.get(OFF_DISCARD + D_GRANULARITY);
            let max_sectors: u32 = self.get(OFF_DISCARD + D_MAX_SECTORS);
            let max_write_zeroes: u32 = self.get(OFF_DISCARD + D_MAX_WRITE_ZEROES);
            let max_segments: u16 = self.get(OFF_DISCARD + D_MAX_SEGMENTS);
            b = b
                .discard(max_sectors, max_segments, granularity, alignment)
                .max_write_zeroes_sectors(max_write_zeroes);
        }
        if types & TYPE_DMA_ALIGN != 0 {
            b = b.dma_alignment(self.get(OFF_DMA + offset_of!(u::ublk_param_dma_align, alignment)));
        }
        if types & TYPE_INTEGRITY != 0 {
            let i = self.integrity();
            let (device_capable, ref_tag) = i.flags()?;
            b = b.integrity(Integrity {
                metadata_size: i.metadata_size,
                pi_offset: i.pi_offset,
                pi_tuple_size: i.pi_tuple_size()?,
                interval_exp: i.interval_exp,
                tag_size: i.tag_size,
                checksum: i.checksum()?,
                device_capable,
                ref_tag,
                // Whatever the parameters say, as ublk_drv's `ublk_integrity_flags()` sets it.
                split_interval_capable: true,
                max_segments: match i.max_integrity_segments {
                    0 => u16::MAX,
                    n => n,
                },
            });
        }
        if types & TYPE_SEGMENT != 0 {
            b = b.segments(
                self.get(OFF_SEG + S_MAX_SEGMENTS),
                self.get(OFF_SEG + S_MAX_SIZE),
                self.get(OFF_SEG + S_BOUNDARY_MASK),
            );
        }
        Ok(b)
    }

    /// Returns the parameters as `UBLK_U_CMD_GET_PARAMS` reports them: with the device numbers
    /// of the character device and of the disk, if there is one (`0:0` otherwise).
    pub(crate) fn with_devt(&self, char_devt: (u32, u32), disk_devt: (u32, u32)) -> Self {
        let mut p = self.clone();
        type T = u::ublk_param_devt;
        let devt = [
            (offset_of!(T, char_major), char_devt.0),
            (offset_of!(T, char_minor), char_devt.1),
            (offset_of!(T, disk_major), disk_devt.0),
            (offset_of!(T, disk_minor), disk_devt.1),
        ];
        for (off, v) in devt {
            v.put(&mut p.raw, OFF_DEVT + off);
        }
        p.set_types(p.types() | TYPE_DEVT);
        p
    }

    /// Returns the bytes of `struct ublk_params`.
    pub(crate) fn as_bytes(&self) -> &[u8; PARAMS_SIZE] {
        &self.raw
    }
}

/// Reads the `len` field of a `struct ublk_params_header`.
pub(crate) fn header_len(header: &[u8; HEADER_SIZE]) -> u32 {
    u32::at(header, OFF_LEN)
}

/// Reads the `types` field of a `struct ublk_params_header`.
pub(crate) fn header_types(header: &[u8; HEADER_SIZE]) -> u32 {
    u32::at(header, OFF_TYPES)
}
