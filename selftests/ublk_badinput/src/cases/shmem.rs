//! Shared-memory zero copy (`UBLK_F_SHMEM_ZC`): `UBLK_U_CMD_REG_BUF` pins
//! a page-aligned buffer of the caller and returns the lowest free index;
//! `UBLK_U_CMD_UNREG_BUF` takes the index in `data[0]`. Without the
//! feature both get EOPNOTSUPP; unknown flags, a reserved field, a length
//! of zero, above 4 GiB or not page aligned, an address not page aligned
//! and an index outside 0..=65535 get EINVAL; memory that cannot be pinned
//! (unmapped, or read-only without UBLK_SHMEM_BUF_READ_ONLY) EFAULT; pages
//! of a registered buffer EEXIST; an index without a buffer ENOENT. A read
//! into a registered buffer reaches the server with UBLK_IO_F_SHMEM_ZC and
//! the buffer's index and offset as its address.

use anyhow::{bail, Context, Result};
use libc::{EEXIST, EFAULT, EINVAL, ENOENT, EOPNOTSUPP};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use ublk_uapi::*;

use super::server::Server;
use super::{case, err, Case, OK};
use crate::chardev::{self, io_sqe_result, Mapping};
use crate::ctrl::{hdr, with_buf};
use crate::env::{Dev, Env};
use crate::errno::show;
use crate::ring::{Got, WAIT};

/// Pages of the buffers of these cases.
const PAGES: usize = 4;

/// An anonymous mapping of `pages` pages with protection `prot`, touched
/// so that it is backed.
fn anon(pages: usize, prot: i32) -> Result<Mapping> {
    let len = pages * chardev::page_size();
    let m = chardev::mmap(-1, len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, 0)
        .map_err(|e| anyhow::anyhow!("setup: mmap of {len} bytes: {}", show(Got::Res(e))))?;
    if prot & libc::PROT_WRITE != 0 {
        // SAFETY: the mapping is `len` bytes, writable, and ours alone.
        unsafe { std::ptr::write_bytes(m.addr().cast::<u8>(), 0, len) };
    }
    Ok(m)
}

fn reg(env: &mut Env, dev: &Dev, mut r: UblkShmemBufReg) -> Result<Got> {
    let h = with_buf(hdr(dev.id), &mut r);
    env.ctrl.run(UBLK_U_CMD_REG_BUF, &h)
}

fn unreg(env: &mut Env, dev: &Dev, index: u64) -> Result<Got> {
    let mut h = hdr(dev.id);
    h.data[0] = index;
    env.ctrl.run(UBLK_U_CMD_UNREG_BUF, &h)
}

/// The argument registering `pages` pages at `m`.
fn buf(m: &Mapping, pages: usize) -> UblkShmemBufReg {
    UblkShmemBufReg {
        addr: m.addr() as u64,
        len: (pages * chardev::page_size()) as u64,
        ..Default::default()
    }
}

fn shmem_dev(env: &mut Env) -> Result<Dev> {
    let dev = env.add(1, 1, UBLK_F_SHMEM_ZC)?;
    if dev.info.flags & UBLK_F_SHMEM_ZC == 0 {
        bail!("setup: the device lacks UBLK_F_SHMEM_ZC");
    }
    Ok(dev)
}

/// Registers `r` on `dev`, which must succeed with index `want` (setup).
fn reg_setup(env: &mut Env, dev: &Dev, r: UblkShmemBufReg, want: i32) -> Result<()> {
    match reg(env, dev, r)? {
        Got::Res(i) if i == want => Ok(()),
        got => bail!("setup: REG_BUF got {}, not index {want}", show(got)),
    }
}

fn reg_buf(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    reg(env, &dev, buf(&m, PAGES))
}

fn reg_buf_second_gets_next_index(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(2 * PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    reg_setup(env, &dev, buf(&m, PAGES), 0)?;
    let mut second = buf(&m, PAGES);
    second.addr += (PAGES * chardev::page_size()) as u64;
    reg(env, &dev, second)
}

fn reg_buf_without_shmem_zc(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 1, 0)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    reg(env, &dev, buf(&m, PAGES))
}

fn reg_buf_unknown_flag(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let mut r = buf(&m, PAGES);
    r.flags = UBLK_SHMEM_BUF_READ_ONLY << 1;
    reg(env, &dev, r)
}

fn reg_buf_reserved_set(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let mut r = buf(&m, PAGES);
    r.reserved = 1;
    reg(env, &dev, r)
}

fn reg_buf_len_zero(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let mut r = buf(&m, PAGES);
    r.len = 0;
    reg(env, &dev, r)
}

fn reg_buf_len_not_page_aligned(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let mut r = buf(&m, PAGES);
    r.len -= 512;
    reg(env, &dev, r)
}

fn reg_buf_len_above_4g(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let mut r = buf(&m, PAGES);
    r.len = (1 << 32) + chardev::page_size() as u64;
    reg(env, &dev, r)
}

fn reg_buf_addr_not_page_aligned(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let mut r = buf(&m, PAGES - 1);
    r.addr += 512;
    reg(env, &dev, r)
}

fn reg_buf_unmapped(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let r = {
        let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
        buf(&m, PAGES)
    };
    // The mapping is gone: nothing to pin.
    reg(env, &dev, r)
}

fn reg_buf_partly_unmapped(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let page = chardev::page_size();
    // SAFETY: unmaps the last page of our own mapping, which nothing uses;
    // munmap of the whole range at drop tolerates the hole.
    if unsafe { libc::munmap(m.addr().cast::<u8>().add((PAGES - 1) * page).cast(), page) } != 0 {
        bail!("setup: munmap of the last page failed");
    }
    reg(env, &dev, buf(&m, PAGES))
}

fn reg_buf_read_only_memory(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ)?;
    reg(env, &dev, buf(&m, PAGES))
}

fn reg_buf_read_only_memory_read_only_flag(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ)?;
    let mut r = buf(&m, PAGES);
    r.flags = UBLK_SHMEM_BUF_READ_ONLY;
    reg(env, &dev, r)
}

fn reg_buf_pages_already_registered(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    reg_setup(env, &dev, buf(&m, PAGES), 0)?;
    // The second buffer overlaps the first by its first page.
    let mut r = buf(&m, 1);
    r.addr += ((PAGES - 1) * chardev::page_size()) as u64;
    reg(env, &dev, r)
}

fn reg_buf_bad_argument_address(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let mut h = hdr(dev.id);
    h.addr = 8;
    h.len = std::mem::size_of::<UblkShmemBufReg>() as u16;
    env.ctrl.run(UBLK_U_CMD_REG_BUF, &h)
}

fn reg_buf_short_argument(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let mut r = buf(&m, PAGES);
    let mut h = with_buf(hdr(dev.id), &mut r);
    // Only `addr` is read: the length is then zero.
    h.len = 8;
    env.ctrl.run(UBLK_U_CMD_REG_BUF, &h)
}

fn unreg_buf(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    reg_setup(env, &dev, buf(&m, PAGES), 0)?;
    unreg(env, &dev, 0)
}

fn unreg_buf_twice(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    reg_setup(env, &dev, buf(&m, PAGES), 0)?;
    match unreg(env, &dev, 0)? {
        Got::Res(0) => {}
        got => bail!("setup: the first UNREG_BUF got {}", show(got)),
    }
    unreg(env, &dev, 0)
}

fn reg_buf_after_unreg_reuses_index(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(2 * PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    reg_setup(env, &dev, buf(&m, PAGES), 0)?;
    let mut second = buf(&m, PAGES);
    second.addr += (PAGES * chardev::page_size()) as u64;
    reg_setup(env, &dev, second, 1)?;
    match unreg(env, &dev, 0)? {
        Got::Res(0) => {}
        got => bail!("setup: UNREG_BUF got {}", show(got)),
    }
    // The pages of buffer 0 are free again, and so is its index.
    reg(env, &dev, buf(&m, PAGES))
}

fn unreg_buf_never_registered(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    unreg(env, &dev, 3)
}

fn unreg_buf_negative_index(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    unreg(env, &dev, u64::MAX)
}

fn unreg_buf_index_above_65535(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    unreg(env, &dev, 65536)
}

fn unreg_buf_without_shmem_zc(env: &mut Env) -> Result<Got> {
    let dev = env.add(1, 1, 0)?;
    unreg(env, &dev, 0)
}

/// Serves the requests of tag 0, whose fetch is `token`, until one says
/// `UBLK_IO_F_SHMEM_ZC`, and returns its address; `None` at `deadline`.
/// The others (the partition scan, udev) are answered as reads of zeroes.
fn serve_until_shmem(
    s: &mut Server,
    descs: &Mapping,
    mut token: u64,
    deadline: Instant,
) -> Result<Option<u64>> {
    let fd = s.file.as_raw_fd();
    let addr = s.buf.addr();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match s.ring.wait(token, left.min(WAIT))? {
            Got::Res(0) => {}
            Got::Pending => continue,
            got => bail!("setup: the fetch completed with {}", show(got)),
        }
        // SAFETY: the mapping holds the descriptor of tag 0, which the
        // driver wrote before it completed the fetch.
        let desc = unsafe { std::ptr::read_volatile(descs.addr().cast::<UblksrvIoDesc>()) };
        if desc.op_flags & UBLK_IO_F_SHMEM_ZC != 0 {
            return Ok(Some(desc.addr));
        }
        let res = (desc.nr_sectors << 9) as i32;
        token = s.ring.submit(io_sqe_result(
            fd,
            UBLK_U_IO_COMMIT_AND_FETCH_REQ,
            0,
            0,
            addr,
            res,
        ))?;
    }
}

/// An O_DIRECT read of two pages of device `dev_id` into `addr`.
fn direct_read(dev_id: u32, addr: usize, len: usize) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = format!("/dev/ublkb{dev_id}");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .with_context(|| format!("opening {path}"))?;
    // SAFETY: `addr` is `len` bytes of a mapping that outlives this read,
    // which only this thread writes to meanwhile.
    let r = unsafe { libc::pread(f.as_raw_fd(), addr as *mut libc::c_void, len, 0) };
    if r < 0 {
        bail!("O_DIRECT read: {}", show(Got::Res(-chardev::errno())));
    }
    Ok(())
}

fn read_into_registered_buffer(env: &mut Env) -> Result<Got> {
    let mut s = Server::with_flags(env, 1, UBLK_F_SHMEM_ZC)?;
    let page = chardev::page_size();
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    reg_setup(env, &s.dev, buf(&m, PAGES), 0)?;
    let fd = s.file.as_raw_fd();
    let descs = chardev::map_descs_setup(fd, 1)?;
    let addr = s.buf.addr();
    let token = s
        .ring
        .submit(io_sqe_result(fd, UBLK_U_IO_FETCH_REQ, 0, 0, addr, 0))?;
    s.set_params(env)?;
    match s.start(env, std::process::id() as u64)? {
        Got::Res(0) => {}
        got => bail!("setup: START_DEV got {}", show(got)),
    }
    let dev_id = s.dev.id;
    // Two pages from the second page of the buffer: offset one page.
    let target = m.addr() as usize + page;
    let reader = std::thread::spawn(move || direct_read(dev_id, target, 2 * page));
    let got = serve_until_shmem(
        &mut s,
        &descs,
        token,
        Instant::now() + Duration::from_secs(20),
    );
    // Closing the char device (the server and the descriptors' mapping) fails the request it
    // holds, which ends the read.
    drop(s);
    drop(descs);
    let read = reader.join();
    let got = got?;
    if got.is_none() {
        match read {
            Ok(Err(e)) => bail!("setup: {e:#}"),
            Err(_) => bail!("setup: the reading thread panicked"),
            Ok(Ok(())) => {}
        }
    }
    Ok(match got {
        Some(a) if a == ublk_shmem_zc_addr(0, page as u32) => OK,
        Some(a) => {
            println!(
                "# the read names buffer {} at offset {}, not buffer 0 at offset {page}",
                ublk_shmem_zc_index(a),
                ublk_shmem_zc_offset(a)
            );
            err(EINVAL)
        }
        None => {
            println!("# no request of the read said UBLK_IO_F_SHMEM_ZC");
            err(ENOENT)
        }
    })
}

/// Serves tag 0 from its own thread, on `ring` (the thread fetches and
/// commits: a tag belongs to the thread that fetched it), until `stop`;
/// returns the address of the first request that said
/// `UBLK_IO_F_SHMEM_ZC`. Other requests are answered as reads of zeroes.
fn serve_in_thread(
    mut ring: crate::ring::Ring<io_uring::squeue::Entry>,
    fd: std::os::fd::RawFd,
    descs: usize,
    buf: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<Option<u64>> {
    use std::sync::atomic::Ordering;
    let mut found = None;
    let mut token = ring.submit(io_sqe_result(fd, UBLK_U_IO_FETCH_REQ, 0, 0, buf, 0))?;
    loop {
        match ring.wait(token, Duration::from_millis(200))? {
            Got::Pending if stop.load(Ordering::Relaxed) => return Ok(found),
            Got::Pending => continue,
            Got::Res(0) => {}
            got => bail!("the fetch completed with {}", show(got)),
        }
        // SAFETY: `descs` maps the descriptor of tag 0, which the driver
        // wrote before it completed the fetch, and outlives this thread.
        let desc = unsafe { std::ptr::read_volatile(descs as *const UblksrvIoDesc) };
        if desc.op_flags & UBLK_IO_F_SHMEM_ZC != 0 && found.is_none() {
            found = Some(desc.addr);
        }
        let res = (desc.nr_sectors << 9) as i32;
        token = ring.submit(io_sqe_result(
            fd,
            UBLK_U_IO_COMMIT_AND_FETCH_REQ,
            0,
            0,
            buf,
            res,
        ))?;
    }
}

/// REG_BUF on a live device freezes its queue, which waits for the
/// requests in flight (served meanwhile by the server's thread); a read
/// into the buffer then reaches the server as shared memory.
fn reg_buf_on_live_device_then_read(env: &mut Env) -> Result<Got> {
    use std::sync::{atomic::AtomicBool, atomic::Ordering, Arc};
    let mut s = Server::with_flags(env, 1, UBLK_F_SHMEM_ZC)?;
    let page = chardev::page_size();
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let fd = s.file.as_raw_fd();
    let descs = chardev::map_descs_setup(fd, 1)?;
    let ring = std::mem::replace(&mut s.ring, crate::ring::Ring::new()?);
    let stop = Arc::new(AtomicBool::new(false));
    let (descs_addr, io_buf) = (descs.addr() as usize, s.buf.addr());
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || serve_in_thread(ring, fd, descs_addr, io_buf, stop))
    };
    let run = (|| -> Result<Got> {
        s.set_params(env)?;
        match s.start(env, std::process::id() as u64)? {
            Got::Res(0) => {}
            got => bail!("setup: START_DEV got {}", show(got)),
        }
        // The partition scan and udev's reads may be in flight: the
        // freeze waits for the server thread to answer them.
        match reg(env, &s.dev, buf(&m, PAGES))? {
            Got::Res(0) => {}
            got => return Ok(got),
        }
        direct_read(s.dev.id, m.addr() as usize + page, 2 * page)?;
        Ok(OK)
    })();
    stop.store(true, Ordering::Relaxed);
    let found = server.join();
    drop(s);
    drop(descs);
    let got = run?;
    if got != OK {
        return Ok(got);
    }
    let found = match found {
        Ok(found) => found?,
        Err(_) => bail!("the server thread panicked"),
    };
    Ok(match found {
        Some(a) if a == ublk_shmem_zc_addr(0, page as u32) => OK,
        Some(a) => {
            println!(
                "# the read names buffer {} at offset {}, not buffer 0 at offset {page}",
                ublk_shmem_zc_index(a),
                ublk_shmem_zc_offset(a)
            );
            err(EINVAL)
        }
        None => {
            println!("# no request of the read said UBLK_IO_F_SHMEM_ZC");
            err(ENOENT)
        }
    })
}

/// Pages pinned in the whole system: nr_foll_pin_acquired less
/// nr_foll_pin_released of /proc/vmstat, after the per-CPU differences
/// were folded into them (vm.stat_refresh).
fn pinned_pages() -> Result<i64> {
    std::fs::write("/proc/sys/vm/stat_refresh", "1\n")
        .context("setup: write /proc/sys/vm/stat_refresh")?;
    let vmstat = std::fs::read_to_string("/proc/vmstat").context("setup: read /proc/vmstat")?;
    let get = |key: &str| -> Result<i64> {
        vmstat
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("setup: no {key} in /proc/vmstat"))
    };
    Ok(get("nr_foll_pin_acquired")? - get("nr_foll_pin_released")?)
}

/// A buffer registered on a device deleted with DEL_DEV_ASYNC is unpinned
/// once the server closed /dev/ublkcN (C: the char device's release),
/// without any later command naming the device: the system's count of
/// pinned pages (/proc/vmstat) goes back to what it was before the
/// registration. Nothing else pins pages meanwhile: the cases run one at
/// a time, and no other test runs beside them.
fn del_async_unpins_buffer(env: &mut Env) -> Result<Got> {
    let dev = shmem_dev(env)?;
    let m = anon(PAGES, libc::PROT_READ | libc::PROT_WRITE)?;
    let before = pinned_pages()?;
    reg_setup(env, &dev, buf(&m, PAGES), 0)?;
    let registered = pinned_pages()?;
    if registered - before < PAGES as i64 {
        bail!(
            "setup: REG_BUF of {PAGES} pages moved the pinned pages of /proc/vmstat from {before} \
             to {registered} only"
        );
    }
    let server = chardev::open_setup(dev.id)?;
    match env.ctrl.cmd(UBLK_U_CMD_DEL_DEV_ASYNC, &hdr(dev.id))? {
        0 => {}
        r => bail!("setup: DEL_DEV_ASYNC got {}", show(Got::Res(r))),
    }
    drop(server);
    // The release runs when the file's last reference goes, after close:
    // allow it a few seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = pinned_pages()?;
        if now <= before {
            return Ok(OK);
        }
        if Instant::now() > deadline {
            println!(
                "# {} pages still pinned ({now}, {before} before REG_BUF): the deleted device \
                 keeps its buffer pinned",
                now - before
            );
            return Ok(err(libc::EBUSY));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub const CASES: &[Case] = &[
    case!(reg_buf, OK),
    case!(reg_buf_second_gets_next_index, Got::Res(1)),
    case!(reg_buf_without_shmem_zc, err(EOPNOTSUPP)),
    case!(reg_buf_unknown_flag, err(EINVAL)),
    case!(reg_buf_reserved_set, err(EINVAL)),
    case!(reg_buf_len_zero, err(EINVAL)),
    case!(reg_buf_len_not_page_aligned, err(EINVAL)),
    case!(reg_buf_len_above_4g, err(EINVAL)),
    case!(reg_buf_addr_not_page_aligned, err(EINVAL)),
    case!(reg_buf_unmapped, err(EFAULT)),
    case!(reg_buf_partly_unmapped, err(EFAULT)),
    case!(reg_buf_read_only_memory, err(EFAULT)),
    case!(reg_buf_read_only_memory_read_only_flag, OK),
    case!(reg_buf_pages_already_registered, err(EEXIST)),
    case!(reg_buf_bad_argument_address, err(EFAULT)),
    case!(reg_buf_short_argument, err(EINVAL)),
    case!(unreg_buf, OK),
    case!(unreg_buf_twice, err(ENOENT)),
    case!(reg_buf_after_unreg_reuses_index, OK),
    case!(unreg_buf_never_registered, err(ENOENT)),
    case!(unreg_buf_negative_index, err(EINVAL)),
    case!(unreg_buf_index_above_65535, err(EINVAL)),
    case!(unreg_buf_without_shmem_zc, err(EOPNOTSUPP)),
    case!(read_into_registered_buffer, OK),
    case!(reg_buf_on_live_device_then_read, OK),
    case!(del_async_unpins_buffer, OK),
];
