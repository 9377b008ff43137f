//! /dev/ublkcN itself: a second opener, and mmap of the io descriptor area
//! (read-only, one queue's size, queue chosen by the offset, one mm).

use anyhow::{bail, Result};
use libc::{EACCES, EBUSY, EINVAL, EPERM, MAP_PRIVATE, MAP_SHARED, PROT_READ, PROT_WRITE};
use std::fs::File;
use std::os::fd::AsRawFd;
use ublk_uapi::{UBLK_F_IO_DESC_SIZE, UBLK_MAX_QUEUE_DEPTH, UBLK_U_CMD_ADD_DEV};

use super::{case, err, Case, OK};
use crate::chardev::{self, desc_area, open_setup};
use crate::child::{self, As};
use crate::ctrl::{hdr, with_buf};
use crate::env::{dev_info, Dev, Env, ANY_ID};
use crate::errno::show;
use crate::ring::Got;

fn result(r: Result<chardev::Mapping, i32>) -> Got {
    match r {
        Ok(_) => Got::Res(0),
        Err(e) => Got::Res(e),
    }
}

fn desc_size(dev: &Dev) -> usize {
    match dev.info.io_desc_size {
        0 => std::mem::size_of::<ublk_uapi::UblksrvIoDesc>(),
        n => n as usize,
    }
}

/// One queue's descriptor area of `dev`.
fn area(dev: &Dev) -> usize {
    desc_area(dev.info.queue_depth as usize, desc_size(dev))
}

/// Opens the char device of `id` and closes it again.
fn open_result(id: u32) -> Got {
    match chardev::open(id) {
        Ok(_) => Got::Res(0),
        Err(e) => Got::Res(e),
    }
}

fn open_ok(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    Ok(open_result(dev.id))
}

fn open_twice(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let _first = open_setup(dev.id)?;
    Ok(open_result(dev.id))
}

fn mmap_with(env: &mut Env, f: impl FnOnce(&Dev) -> (usize, i32, i32, i64)) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let file = open_setup(dev.id)?;
    let (len, prot, flags, off) = f(&dev);
    Ok(result(chardev::mmap(
        file.as_raw_fd(),
        len,
        prot,
        flags,
        off,
    )))
}

fn mmap_read_only_ok(env: &mut Env) -> Result<Got> {
    mmap_with(env, |d| (area(d), PROT_READ, MAP_SHARED, 0))
}

fn mmap_writable_shared(env: &mut Env) -> Result<Got> {
    mmap_with(env, |d| (area(d), PROT_READ | PROT_WRITE, MAP_SHARED, 0))
}

fn mmap_writable_private(env: &mut Env) -> Result<Got> {
    mmap_with(env, |d| (area(d), PROT_READ | PROT_WRITE, MAP_PRIVATE, 0))
}

fn mmap_size_too_big(env: &mut Env) -> Result<Got> {
    mmap_with(env, |d| (2 * area(d), PROT_READ, MAP_SHARED, 0))
}

fn mmap_offset_past_last_queue(env: &mut Env) -> Result<Got> {
    // Queue q's area starts at q * (area of a queue of the largest depth).
    mmap_with(env, |d| {
        let stride = desc_area(UBLK_MAX_QUEUE_DEPTH as usize, desc_size(d));
        (
            area(d),
            PROT_READ,
            MAP_SHARED,
            (d.info.nr_hw_queues as usize * stride) as i64,
        )
    })
}

fn mprotect_writable(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let file = open_setup(dev.id)?;
    let len = area(&dev);
    let map = match chardev::mmap(file.as_raw_fd(), len, PROT_READ, MAP_SHARED, 0) {
        Ok(m) => m,
        Err(e) => anyhow::bail!(
            "setup: read-only mmap failed: {}",
            crate::errno::show(Got::Res(e))
        ),
    };
    // SAFETY: changes the protection of our own mapping only.
    let r = unsafe { libc::mprotect(map.addr(), len, PROT_READ | PROT_WRITE) };
    Ok(Got::Res(if r == 0 { 0 } else { -chardev::errno() }))
}

fn mmap_from_second_process(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 2, 0)?;
    let file = open_setup(dev.id)?;
    let len = area(&dev);
    let _first = match chardev::mmap(file.as_raw_fd(), len, PROT_READ, MAP_SHARED, 0) {
        Ok(m) => m,
        Err(e) => anyhow::bail!(
            "setup: read-only mmap failed: {}",
            crate::errno::show(Got::Res(e))
        ),
    };
    let fd = file.as_raw_fd();
    let (got, _) = child::run(As::Same, move || {
        Ok((
            result(chardev::mmap(fd, len, PROT_READ, MAP_SHARED, 0)),
            ANY_ID,
        ))
    })?;
    Ok(got)
}

/// Depth and descriptor size of the `UBLK_F_IO_DESC_SIZE` cases: 128
/// descriptors of 64 bytes take two pages, where 24-byte ones take one.
const DEPTH_64: u16 = 128;
const DESC_64: u16 = 64;

/// A device of `nr_queues` queues of [`DEPTH_64`] tags that asks for
/// [`DESC_64`]-byte io descriptors, its char device open (setup step). Err
/// unless ADD_DEV kept the flag and the size.
fn add_desc_64(env: &mut Env, nr_queues: u16) -> Result<(Dev, File)> {
    let mut info = dev_info(nr_queues, DEPTH_64, UBLK_F_IO_DESC_SIZE);
    info.io_desc_size = DESC_64;
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_ADD_DEV, &with_buf(hdr(ANY_ID), &mut info))?;
    if r < 0 {
        bail!(
            "setup: ADD_DEV with io_desc_size {DESC_64}: {}",
            show(Got::Res(r))
        );
    }
    env.created(info.dev_id);
    if info.flags & UBLK_F_IO_DESC_SIZE == 0 || info.io_desc_size != DESC_64 {
        bail!(
            "ADD_DEV of io_desc_size {DESC_64} returned flags {:#x}, io_desc_size {}",
            info.flags,
            info.io_desc_size
        );
    }
    if info.nr_hw_queues != nr_queues {
        bail!(
            "setup: ADD_DEV gave {} queues, not {nr_queues}",
            info.nr_hw_queues
        );
    }
    let file = open_setup(info.dev_id)?;
    Ok((
        Dev {
            id: info.dev_id,
            info,
        },
        file,
    ))
}

fn mmap_io_desc_size_64(env: &mut Env) -> Result<Got> {
    let (_dev, file) = add_desc_64(env, 1)?;
    let len = desc_area(DEPTH_64.into(), DESC_64.into());
    Ok(result(chardev::mmap(
        file.as_raw_fd(),
        len,
        PROT_READ,
        MAP_SHARED,
        0,
    )))
}

fn mmap_io_desc_size_64_queue_1(env: &mut Env) -> Result<Got> {
    // Queue 1's area starts after that of the deepest queue with
    // descriptors of this size.
    let (_dev, file) = add_desc_64(env, 2)?;
    let len = desc_area(DEPTH_64.into(), DESC_64.into());
    let off = desc_area(UBLK_MAX_QUEUE_DEPTH as usize, DESC_64.into()) as i64;
    Ok(result(chardev::mmap(
        file.as_raw_fd(),
        len,
        PROT_READ,
        MAP_SHARED,
        off,
    )))
}

fn mmap_io_desc_size_64_default_size(env: &mut Env) -> Result<Got> {
    // The area of 24-byte descriptors is not the area of this device.
    let (_dev, file) = add_desc_64(env, 1)?;
    let len = desc_area(
        DEPTH_64.into(),
        std::mem::size_of::<ublk_uapi::UblksrvIoDesc>(),
    );
    Ok(result(chardev::mmap(
        file.as_raw_fd(),
        len,
        PROT_READ,
        MAP_SHARED,
        0,
    )))
}

pub const CASES: &[Case] = &[
    case!(open_ok, OK),
    case!(open_twice, err(EBUSY)),
    case!(mmap_read_only_ok, OK),
    case!(mmap_writable_shared, err(EPERM)),
    case!(mmap_writable_private, err(EPERM)),
    case!(mmap_size_too_big, err(EINVAL)),
    case!(mmap_offset_past_last_queue, err(EINVAL)),
    case!(mprotect_writable, err(EACCES)),
    case!(mmap_from_second_process, err(EINVAL)),
    case!(mmap_io_desc_size_64, OK),
    case!(mmap_io_desc_size_64_queue_1, OK),
    case!(mmap_io_desc_size_64_default_size, err(EINVAL)),
];
