//! `/dev/ublk-control`: an open control device and an SQE128 ring, and
//! builders for control command headers.

use anyhow::{bail, Context, Result};
use io_uring::{opcode, squeue, types};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;
use ublk_uapi::{UblksrvCtrlCmd, UBLK_U_CMD_DEL_DEV, UBLK_U_CMD_GET_FEATURES};

use crate::ring::{Got, Ring, WAIT};

pub const CONTROL: &str = "/dev/ublk-control";

/// DEL_DEV waits until the device's char device is released, which happens
/// in a work item after the last close.
const DEL_WAIT: Duration = Duration::from_secs(30);

/// The 80-byte command area of an SQE128 holding `c`.
pub fn cmd80(c: &UblksrvCtrlCmd) -> [u8; 80] {
    let mut out = [0u8; 80];
    out[0..4].copy_from_slice(&c.dev_id.to_ne_bytes());
    out[4..6].copy_from_slice(&c.queue_id.to_ne_bytes());
    out[6..8].copy_from_slice(&c.len.to_ne_bytes());
    out[8..16].copy_from_slice(&c.addr.to_ne_bytes());
    out[16..24].copy_from_slice(&c.data[0].to_ne_bytes());
    out[24..26].copy_from_slice(&c.dev_path_len.to_ne_bytes());
    out[26..28].copy_from_slice(&c.pad.to_ne_bytes());
    out[28..32].copy_from_slice(&c.reserved.to_ne_bytes());
    out
}

/// A control command SQE for `fd`.
pub fn sqe128(fd: RawFd, op: u32, c: &UblksrvCtrlCmd) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(fd), op)
        .cmd(cmd80(c))
        .build()
}

/// A header for a command on `dev_id` that is not per queue.
pub fn hdr(dev_id: u32) -> UblksrvCtrlCmd {
    UblksrvCtrlCmd {
        dev_id,
        queue_id: u16::MAX,
        ..Default::default()
    }
}

/// Points `h` at the bytes of `buf`.
pub fn with_buf<T>(mut h: UblksrvCtrlCmd, buf: &mut T) -> UblksrvCtrlCmd {
    h.addr = buf as *mut T as u64;
    h.len = std::mem::size_of::<T>() as u16;
    h
}

pub struct Ctrl {
    file: File,
    ring: Ring<squeue::Entry128>,
}

impl Ctrl {
    pub fn open() -> Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(CONTROL)
            .with_context(|| format!("opening {CONTROL}"))?;
        Ok(Ctrl {
            file,
            ring: Ring::new()?,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Runs one control command; every control command completes at once
    /// except START_DEV and END_USER_RECOVERY, which wait for the server.
    pub fn run(&mut self, op: u32, c: &UblksrvCtrlCmd) -> Result<Got> {
        let fd = self.fd();
        self.ring.run(sqe128(fd, op, c), WAIT)
    }

    /// Like [`Ctrl::run`], but a command that does not complete is an error.
    pub fn cmd(&mut self, op: u32, c: &UblksrvCtrlCmd) -> Result<i32> {
        match self.run(op, c)? {
            Got::Res(r) => Ok(r),
            Got::Pending => bail!("control command {op:#x} did not complete in {WAIT:?}"),
        }
    }

    /// The driver's feature flags (GET_FEATURES).
    pub fn features(&mut self) -> Result<u64> {
        let mut f = 0u64;
        let r = self.cmd(UBLK_U_CMD_GET_FEATURES, &with_buf(hdr(0), &mut f))?;
        if r < 0 {
            bail!("GET_FEATURES failed: {}", crate::errno::show(Got::Res(r)));
        }
        Ok(f)
    }

    /// Deletes device `id`. A device created unprivileged wants its char
    /// device path in front of the buffer even from root: retry with it.
    pub fn del(&mut self, id: u32) -> Result<()> {
        let fd = self.fd();
        let r = match self
            .ring
            .run(sqe128(fd, UBLK_U_CMD_DEL_DEV, &hdr(id)), DEL_WAIT)?
        {
            Got::Res(r) => r,
            Got::Pending => bail!("DEL_DEV of device {id} did not complete in {DEL_WAIT:?}"),
        };
        let r = if r == -libc::EINVAL || r == -libc::EPERM {
            let mut path = format!("/dev/ublkc{id}\0").into_bytes();
            let mut h = hdr(id);
            h.addr = path.as_mut_ptr() as u64;
            h.len = path.len() as u16;
            h.dev_path_len = path.len() as u16;
            match self
                .ring
                .run(sqe128(fd, UBLK_U_CMD_DEL_DEV, &h), DEL_WAIT)?
            {
                Got::Res(r) => r,
                Got::Pending => bail!("DEL_DEV of device {id} did not complete in {DEL_WAIT:?}"),
            }
        } else {
            r
        };
        if r < 0 && r != -libc::ENODEV {
            bail!("DEL_DEV of device {id} failed: {r}");
        }
        Ok(())
    }
}

/// Whether modprobe's `module` is the Rust implementation of the ublk driver (a kernel configured
/// with `CONFIG_BLK_DEV_UBLK_IMPL_RUST` has it as `ublk_drv`): its description says so. An error
/// if `modinfo` cannot tell (no such module, or no `modinfo`).
pub fn is_rust_implementation(module: &str) -> anyhow::Result<bool> {
    let out = std::process::Command::new("modinfo")
        .args(["-F", "description", module])
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run modinfo for {module}: {e}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "modinfo {module} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).contains("Rust"))
}

/// Whether the ublk driver loaded is the C one: the module `ublk_drv`, unless the Rust
/// implementation is `ublk_drv` in this kernel. An error if `modinfo` cannot tell which one the
/// loaded `ublk_drv` is: the C driver's known bugs would otherwise hide the Rust one's.
pub fn is_c_driver() -> anyhow::Result<bool> {
    if !std::path::Path::new("/sys/module/ublk_drv").exists() {
        return Ok(false);
    }
    Ok(!is_rust_implementation("ublk_drv")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_area_layout() {
        let c = UblksrvCtrlCmd {
            dev_id: 0x0403_0201,
            queue_id: 0xffff,
            len: 64,
            addr: 0x1122_3344_5566_7788,
            data: [9],
            dev_path_len: 11,
            pad: 0,
            reserved: 0,
        };
        let b = cmd80(&c);
        assert_eq!(&b[0..4], &[1, 2, 3, 4]);
        assert_eq!(&b[4..8], &[0xff, 0xff, 64, 0]);
        assert_eq!(u64::from_ne_bytes(b[8..16].try_into().unwrap()), c.addr);
        assert_eq!(b[16], 9);
        assert_eq!(b[24], 11);
        assert!(b[32..].iter().all(|&x| x == 0));
        assert_eq!(std::mem::size_of::<UblksrvCtrlCmd>(), 32);
    }
}
