//! SET_PARAMS and GET_PARAMS: buffer lengths and every limit the C driver
//! checks in ublk_validate_params().

use anyhow::Result;
use libc::EINVAL;
use ublk_uapi::*;

use super::ctrl::basic_params;
use super::{case, err, Case, OK};
use crate::ctrl::{hdr, with_buf};
use crate::env::Env;
use crate::ring::Got;

/// SET_PARAMS on a fresh device of `basic_params()` changed by `f`.
fn set_with(env: &mut Env, f: impl FnOnce(&mut UblksrvCtrlCmd, &mut UblkParams)) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let mut p = basic_params();
    let mut h = with_buf(hdr(dev.id), &mut p);
    f(&mut h, &mut p);
    env.ctrl.run(UBLK_U_CMD_SET_PARAMS, &h)
}

fn set_params_ok(env: &mut Env) -> Result<Got> {
    set_with(env, |_, _| {})
}

fn set_params_unknown_type_bits_ignored(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.types |= 1 << 30)
}

fn set_params_basic_only_length(env: &mut Env) -> Result<Got> {
    // An older sender: the buffer ends after the basic parameters.
    let len = (8 + std::mem::size_of::<UblkParamBasic>()) as u16;
    set_with(env, |h, p| {
        h.len = len;
        p.len = len as u32;
    })
}

/// SET_PARAMS of valid parameters, then of a buffer whose `len` ends after
/// the header (8 bytes) with `types` still BASIC: the basic parameters are
/// not in the buffer. Found by ublk_fuzz.
fn set_params_short_after_valid(env: &mut Env) -> Result<Got> {
    let (dev, mut p) = dev_with_params(env)?;
    p.len = 8;
    env.ctrl
        .run(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(dev.id), &mut p))
}

fn set_params_len_only_header(env: &mut Env) -> Result<Got> {
    set_with(env, |h, _| h.len = 8)
}

fn set_params_addr_zero(env: &mut Env) -> Result<Got> {
    set_with(env, |h, _| h.addr = 0)
}

fn set_params_params_len_zero(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.len = 0)
}

fn set_params_params_len_beyond_buffer(env: &mut Env) -> Result<Got> {
    set_with(env, |h, _| h.len = 16)
}

fn set_params_types_zero(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.types = 0)
}

fn set_params_without_basic(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| {
        p.types = UBLK_PARAM_TYPE_DISCARD;
        p.discard.discard_granularity = 4096;
    })
}

fn set_params_logical_bs_shift_8(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.basic.logical_bs_shift = 8)
}

fn set_params_logical_bs_shift_above_page(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| {
        p.basic.logical_bs_shift = 13;
        p.basic.physical_bs_shift = 13;
    })
}

fn set_params_physical_below_logical(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| {
        p.basic.logical_bs_shift = 12;
        p.basic.physical_bs_shift = 9;
    })
}

fn set_params_physical_bs_shift_above_256m(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.basic.physical_bs_shift = 29)
}

fn set_params_io_min_shift_above_256m(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.basic.io_min_shift = 29)
}

fn set_params_io_opt_shift_above_256m(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.basic.io_opt_shift = 29)
}

fn set_params_max_sectors_above_max_io_buf(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.basic.max_sectors += 1)
}

fn set_params_max_sectors_below_page(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.basic.max_sectors = 4)
}

fn set_params_devt_is_read_only(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| p.types |= UBLK_PARAM_TYPE_DEVT)
}

fn set_params_discard_granularity_zero(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| {
        p.types |= UBLK_PARAM_TYPE_DISCARD;
        p.discard.max_discard_sectors = 8;
        p.discard.max_discard_segments = 1;
    })
}

fn set_params_discard_two_segments(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| {
        p.types |= UBLK_PARAM_TYPE_DISCARD;
        p.discard.discard_granularity = 4096;
        p.discard.max_discard_sectors = 8;
        p.discard.max_discard_segments = 2;
    })
}

fn set_params_zoned_on_plain_device(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| {
        p.types |= UBLK_PARAM_TYPE_ZONED;
        p.zoned.max_zone_append_sectors = 8;
    })
}

/// SET_PARAMS on a fresh zoned device (user copy) of `basic_params()` as
/// 8 zones of 256 sectors with zoned parameters, changed by `f`.
fn set_zoned_with(env: &mut Env, f: impl FnOnce(&mut UblkParams)) -> Result<Got> {
    let dev = env.add(1, 2, UBLK_F_ZONED | UBLK_F_USER_COPY)?;
    let mut p = basic_params();
    p.types |= UBLK_PARAM_TYPE_ZONED;
    p.basic.chunk_sectors = 256;
    p.zoned.max_open_zones = 4;
    p.zoned.max_active_zones = 8;
    p.zoned.max_zone_append_sectors = 64;
    f(&mut p);
    let h = with_buf(hdr(dev.id), &mut p);
    env.ctrl.run(UBLK_U_CMD_SET_PARAMS, &h)
}

fn set_params_zoned_ok(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |_| {})
}

fn set_params_zoned_without_zoned_params(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| p.types &= !UBLK_PARAM_TYPE_ZONED)
}

fn set_params_zoned_chunk_not_power_of_2(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| p.basic.chunk_sectors = 768)
}

fn set_params_zoned_chunk_zero(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| p.basic.chunk_sectors = 0)
}

fn set_params_zoned_append_zero(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| p.zoned.max_zone_append_sectors = 0)
}

fn set_params_zoned_open_above_zones(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| p.zoned.max_open_zones = 9)
}

fn set_params_zoned_active_above_zones(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| p.zoned.max_active_zones = 9)
}

fn set_params_zoned_limits_all_zones(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| {
        p.zoned.max_open_zones = 8;
        p.zoned.max_active_zones = 8;
    })
}

/// Adds segment parameters to `p`: boundary mask, segment size, segments.
fn segment(p: &mut UblkParams, mask: u64, size: u32, segments: u16) {
    p.types |= UBLK_PARAM_TYPE_SEGMENT;
    p.seg.seg_boundary_mask = mask;
    p.seg.max_segment_size = size;
    p.seg.max_segments = segments;
}

// The parameters that follow the zoned ones are checked on a zoned device
// too (ublk_drv skipped them before patch 0004 of
// `patches/08-ublk-fuzz-fixes`; found by the differential fuzzer).

fn set_params_zoned_segment_ok(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| segment(p, 4095, 4096, 16))
}

fn set_params_zoned_segment_boundary_too_small(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| segment(p, 2047, 4096, 16))
}

/// The fuzzer's own input: a mask of 0, which the block layer would have
/// taken as its default, so that only the driver's check refuses it.
fn set_params_zoned_segment_boundary_zero(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| segment(p, 0, 4096, 128))
}

fn set_params_zoned_dma_alignment_page(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| {
        p.types |= UBLK_PARAM_TYPE_DMA_ALIGN;
        p.dma.alignment = 4096;
    })
}

fn set_params_zoned_integrity_without_flag(env: &mut Env) -> Result<Got> {
    set_zoned_with(env, |p| {
        p.types |= UBLK_PARAM_TYPE_INTEGRITY;
        p.integrity.metadata_size = 8;
        p.integrity.interval_exp = 9;
    })
}

fn set_params_dma_alignment_page(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| {
        p.types |= UBLK_PARAM_TYPE_DMA_ALIGN;
        p.dma.alignment = 4096;
    })
}

fn set_params_dma_alignment_not_mask(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| {
        p.types |= UBLK_PARAM_TYPE_DMA_ALIGN;
        p.dma.alignment = 5;
    })
}

fn set_params_segment_boundary_not_mask(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| segment(p, 4094, 4096, 16))
}

fn set_params_segment_boundary_too_small(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| segment(p, 2047, 4096, 16))
}

fn set_params_segment_size_too_small(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| segment(p, 4095, 512, 16))
}

fn set_params_integrity_without_flag(env: &mut Env) -> Result<Got> {
    set_with(env, |_, p| {
        p.types |= UBLK_PARAM_TYPE_INTEGRITY;
        p.integrity.metadata_size = 8;
        p.integrity.interval_exp = 9;
    })
}

/// A fresh device whose parameters SET_PARAMS set to `basic_params()`
/// (setup step); the device and those parameters.
fn dev_with_params(env: &mut Env) -> Result<(crate::env::Dev, UblkParams)> {
    let dev = env.add(1, 2, 0)?;
    let mut p = basic_params();
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(dev.id), &mut p))?;
    if r != 0 {
        anyhow::bail!("setup: SET_PARAMS got {}", crate::errno::show(Got::Res(r)));
    }
    Ok((dev, p))
}

/// GET_PARAMS on a fresh device with parameters set, header changed by `f`.
fn get_with(env: &mut Env, f: impl FnOnce(&mut UblksrvCtrlCmd, &mut UblkParams)) -> Result<Got> {
    let (dev, _) = dev_with_params(env)?;
    let mut p = UblkParams {
        len: std::mem::size_of::<UblkParams>() as u32,
        ..Default::default()
    };
    let mut h = with_buf(hdr(dev.id), &mut p);
    f(&mut h, &mut p);
    env.ctrl.run(UBLK_U_CMD_GET_PARAMS, &h)
}

fn get_params_ok(env: &mut Env) -> Result<Got> {
    get_with(env, |_, _| {})
}

fn get_params_len_only_header(env: &mut Env) -> Result<Got> {
    get_with(env, |h, _| h.len = 8)
}

fn get_params_addr_zero(env: &mut Env) -> Result<Got> {
    get_with(env, |h, _| h.addr = 0)
}

fn get_params_params_len_zero(env: &mut Env) -> Result<Got> {
    get_with(env, |_, p| p.len = 0)
}

fn get_params_params_len_beyond_buffer(env: &mut Env) -> Result<Got> {
    get_with(env, |h, _| h.len = 16)
}

pub const CASES: &[Case] = &[
    case!(set_params_ok, OK),
    case!(set_params_unknown_type_bits_ignored, OK),
    case!(set_params_basic_only_length, OK),
    // Found by ublk_fuzz: the C driver copied params.len bytes over the
    // earlier parameters and validated the mix (0) until
    // patches/08-ublk-fuzz-fixes.
    case!(set_params_short_after_valid, err(EINVAL)),
    case!(set_params_len_only_header, err(EINVAL)),
    case!(set_params_addr_zero, err(EINVAL)),
    case!(set_params_params_len_zero, err(EINVAL)),
    case!(set_params_params_len_beyond_buffer, err(EINVAL)),
    case!(set_params_types_zero, err(EINVAL)),
    case!(set_params_without_basic, err(EINVAL)),
    case!(set_params_logical_bs_shift_8, err(EINVAL)),
    case!(set_params_logical_bs_shift_above_page, err(EINVAL)),
    case!(set_params_physical_below_logical, err(EINVAL)),
    case!(set_params_physical_bs_shift_above_256m, err(EINVAL)),
    case!(set_params_io_min_shift_above_256m, err(EINVAL)),
    case!(set_params_io_opt_shift_above_256m, err(EINVAL)),
    case!(set_params_max_sectors_above_max_io_buf, err(EINVAL)),
    case!(set_params_max_sectors_below_page, err(EINVAL)),
    case!(set_params_devt_is_read_only, err(EINVAL)),
    case!(set_params_discard_granularity_zero, err(EINVAL)),
    case!(set_params_discard_two_segments, err(EINVAL)),
    case!(set_params_zoned_on_plain_device, err(EINVAL)),
    case!(set_params_zoned_ok, OK),
    case!(set_params_zoned_without_zoned_params, err(EINVAL)),
    case!(set_params_zoned_chunk_not_power_of_2, err(EINVAL)),
    case!(set_params_zoned_chunk_zero, err(EINVAL)),
    case!(set_params_zoned_append_zero, err(EINVAL)),
    case!(set_params_zoned_open_above_zones, err(EINVAL)),
    case!(set_params_zoned_active_above_zones, err(EINVAL)),
    case!(set_params_zoned_limits_all_zones, OK),
    case!(set_params_zoned_segment_ok, OK),
    case!(set_params_zoned_segment_boundary_too_small, err(EINVAL)),
    case!(set_params_zoned_segment_boundary_zero, err(EINVAL)),
    case!(set_params_zoned_dma_alignment_page, err(EINVAL)),
    case!(set_params_zoned_integrity_without_flag, err(EINVAL)),
    case!(set_params_dma_alignment_page, err(EINVAL)),
    case!(set_params_dma_alignment_not_mask, err(EINVAL)),
    case!(set_params_segment_boundary_not_mask, err(EINVAL)),
    case!(set_params_segment_boundary_too_small, err(EINVAL)),
    case!(set_params_segment_size_too_small, err(EINVAL)),
    case!(set_params_integrity_without_flag, err(EINVAL)),
    case!(get_params_ok, OK),
    case!(get_params_len_only_header, err(EINVAL)),
    case!(get_params_addr_zero, err(EINVAL)),
    case!(get_params_params_len_zero, err(EINVAL)),
    case!(get_params_params_len_beyond_buffer, err(EINVAL)),
];
