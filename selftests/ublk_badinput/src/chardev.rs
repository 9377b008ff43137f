//! The per-device char device `/dev/ublkcN`: open, mmap of the io
//! descriptor area, and io commands (FETCH_REQ, COMMIT_AND_FETCH_REQ, ...)
//! on a plain (64-byte SQE) ring.

use anyhow::{bail, Result};
use io_uring::{opcode, squeue, types};
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};
use ublk_uapi::{UblksrvIoCmd, UblksrvIoDesc, UBLKSRV_CMD_BUF_OFFSET};

/// Opens `/dev/ublkc<id>` read-write; returns the errno as `Err(-errno)` so
/// that a failing open can itself be a probe. Waits for the node to appear.
pub fn open(id: u32) -> Result<File, i32> {
    open_flags(id, libc::O_RDWR)
}

/// [`open`] with open(2)'s `flags` (the access mode and any others).
pub fn open_flags(id: u32, flags: i32) -> Result<File, i32> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = format!("/dev/ublkc{id}");
    let mode = flags & libc::O_ACCMODE;
    let start = Instant::now();
    loop {
        match std::fs::OpenOptions::new()
            .read(mode != libc::O_WRONLY)
            .write(mode != libc::O_RDONLY)
            .custom_flags(flags & !libc::O_ACCMODE)
            .open(&path)
        {
            Ok(f) => return Ok(f),
            Err(e)
                if e.kind() == ErrorKind::NotFound && start.elapsed() < Duration::from_secs(5) =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(-e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
}

/// Waits for `/dev/ublkc<id>` to appear.
pub fn wait_node(id: u32) -> Result<()> {
    let path = format!("/dev/ublkc{id}");
    let start = Instant::now();
    while !std::path::Path::new(&path).exists() {
        if start.elapsed() > Duration::from_secs(5) {
            bail!("setup: {path} did not appear");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// [`open`] for a case's setup, where failure is an error.
pub fn open_setup(id: u32) -> Result<File> {
    match open(id) {
        Ok(f) => Ok(f),
        Err(e) => bail!(
            "setup: open /dev/ublkc{id}: {}",
            crate::errno::show(crate::ring::Got::Res(e))
        ),
    }
}

/// An mmap'ed range, unmapped on drop.
pub struct Mapping {
    addr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    pub fn addr(&self) -> *mut libc::c_void {
        self.addr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: addr/len are exactly what mmap returned and nobody else
        // holds a pointer into the range.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// mmap(2) of `fd`; `Err(-errno)` on failure.
pub fn mmap(fd: RawFd, len: usize, prot: i32, flags: i32, off: i64) -> Result<Mapping, i32> {
    // SAFETY: a fresh mapping chosen by the kernel; no existing memory is
    // touched.
    let addr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, off) };
    if addr == libc::MAP_FAILED {
        return Err(-errno());
    }
    Ok(Mapping { addr, len })
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// What a file system call returned, as a result: its value (at most
/// `i32::MAX`), or the negative errno.
pub fn syscall_result(ret: isize) -> crate::ring::Got {
    crate::ring::Got::Res(if ret < 0 {
        -errno()
    } else {
        // CAST: clamped to the range of `i32` first.
        ret.min(i32::MAX as isize) as i32
    })
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Size of one queue's io descriptor area, as the driver maps it.
pub fn desc_area(queue_depth: usize, io_desc_size: usize) -> usize {
    let page = page_size();
    (queue_depth * io_desc_size).div_ceil(page) * page
}

/// Maps the io descriptors of queue 0, of `depth` tags, of the char device
/// `fd` read-only, as a server does (setup step).
pub fn map_descs_setup(fd: RawFd, depth: usize) -> Result<Mapping> {
    let size = desc_area(depth, std::mem::size_of::<UblksrvIoDesc>());
    mmap(
        fd,
        size,
        libc::PROT_READ,
        libc::MAP_SHARED,
        UBLKSRV_CMD_BUF_OFFSET as i64,
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "setup: mmap of the descriptors: {}",
            crate::errno::show(crate::ring::Got::Res(e))
        )
    })
}

/// The 16-byte command area holding `c`.
pub fn cmd16(c: &UblksrvIoCmd) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0..2].copy_from_slice(&c.q_id.to_ne_bytes());
    out[2..4].copy_from_slice(&c.tag.to_ne_bytes());
    out[4..8].copy_from_slice(&c.result.to_ne_bytes());
    out[8..16].copy_from_slice(&c.addr.to_ne_bytes());
    out
}

/// An io command SQE on the char device `fd`.
pub fn io_sqe(fd: RawFd, op: u32, q_id: u16, tag: u16, addr: u64) -> squeue::Entry {
    io_sqe_result(fd, op, q_id, tag, addr, 0)
}

/// An io command SQE on the char device `fd` that reports `result` (a COMMIT).
pub fn io_sqe_result(
    fd: RawFd,
    op: u32,
    q_id: u16,
    tag: u16,
    addr: u64,
    result: i32,
) -> squeue::Entry {
    let c = UblksrvIoCmd {
        q_id,
        tag,
        result,
        addr,
    };
    opcode::UringCmd16::new(types::Fd(fd), op)
        .cmd(cmd16(&c))
        .build()
}

/// Buffer memory the FETCH_REQs of a case point at (copy mode wants one).
pub struct IoBuf(Vec<u8>);

impl Default for IoBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl IoBuf {
    pub fn new() -> Self {
        IoBuf(vec![0u8; crate::env::MAX_IO_BUF_BYTES as usize])
    }

    pub fn addr(&mut self) -> u64 {
        self.0.as_mut_ptr() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_command_layout() {
        let c = UblksrvIoCmd {
            q_id: 1,
            tag: 2,
            result: -5,
            addr: 0x10,
        };
        let b = cmd16(&c);
        assert_eq!(&b[0..4], &[1, 0, 2, 0]);
        assert_eq!(i32::from_ne_bytes(b[4..8].try_into().unwrap()), -5);
        assert_eq!(b[8], 0x10);
        assert_eq!(std::mem::size_of::<UblksrvIoCmd>(), 16);
    }

    #[test]
    fn descriptor_area() {
        let p = page_size();
        assert_eq!(desc_area(2, 24), p);
        assert_eq!(desc_area(4096, 24), 4096 * 24);
    }
}
