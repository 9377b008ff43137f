//! /dev/ublkcN itself: a second opener, and mmap of the io descriptor area
//! (read-only, one queue's size, queue chosen by the offset, one mm).

use anyhow::Result;
use libc::{EACCES, EBUSY, EINVAL, EPERM, MAP_PRIVATE, MAP_SHARED, PROT_READ, PROT_WRITE};
use std::os::fd::AsRawFd;
use ublk_uapi::UBLK_MAX_QUEUE_DEPTH;

use super::{case, err, Case, OK};
use crate::chardev::{self, desc_area, open_setup};
use crate::child::{self, As};
use crate::env::{Dev, Env, ANY_ID};
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
];
