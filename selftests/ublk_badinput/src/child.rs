//! Runs a probe in a forked child, which reports what it got over a pipe:
//! as another process (a second mm, a second tgid), or as an unprivileged
//! caller that switched to uid/gid 65534 (nobody), which drops every
//! capability. File descriptors opened before (e.g. the control device) are
//! inherited, so the driver's own check is what is tested, not the
//! permissions of the device node.

use anyhow::{bail, Context, Result};
use std::io::Read;
use std::os::fd::FromRawFd;

use crate::env::ANY_ID;
use crate::ring::Got;

const NOBODY: libc::uid_t = 65534;

/// What the child reports: the probe's result and a device id it created
/// (`ANY_ID` if none), so that the parent can delete it.
pub type Report = (Got, u32);

fn encode(r: Result<Report>) -> [u8; 12] {
    let (kind, val, id) = match r {
        Ok((Got::Res(v), id)) => (0i32, v, id),
        Ok((Got::Pending, id)) => (1, 0, id),
        Err(_) => (2, 0, ANY_ID),
    };
    let mut b = [0u8; 12];
    b[0..4].copy_from_slice(&kind.to_ne_bytes());
    b[4..8].copy_from_slice(&val.to_ne_bytes());
    b[8..12].copy_from_slice(&id.to_ne_bytes());
    b
}

fn decode(b: &[u8; 12]) -> Result<Report> {
    let kind = i32::from_ne_bytes(b[0..4].try_into().unwrap());
    let val = i32::from_ne_bytes(b[4..8].try_into().unwrap());
    let id = u32::from_ne_bytes(b[8..12].try_into().unwrap());
    match kind {
        0 => Ok((Got::Res(val), id)),
        1 => Ok((Got::Pending, id)),
        _ => bail!("the unprivileged child could not run its probe"),
    }
}

/// Becomes user and group `id`, without supplementary groups, which drops
/// every capability.
pub fn drop_privileges(id: libc::uid_t) -> Result<()> {
    // SAFETY: plain syscalls on this (single-threaded, forked) process.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(id, id, id) != 0
            || libc::setresuid(id, id, id) != 0
        {
            bail!("dropping privileges: {}", std::io::Error::last_os_error());
        }
        if libc::geteuid() != id {
            bail!("still uid {}", libc::geteuid());
        }
    }
    Ok(())
}

/// Who the child is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum As {
    /// Same credentials as the parent.
    Same,
    /// uid/gid 65534, no supplementary groups, no capabilities.
    Nobody,
    /// uid and gid the given id, no supplementary groups, no capabilities.
    User(libc::uid_t),
}

/// Runs `probe` in a child; the process must be single-threaded.
pub fn run(who: As, probe: impl FnOnce() -> Result<Report>) -> Result<Report> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe2: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the test runs single-threaded, so the child may allocate; it
    // leaves with _exit, never returning into the parent's code or
    // destructors.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let dropped = match who {
                As::Same => Ok(()),
                As::Nobody => drop_privileges(NOBODY),
                As::User(id) => drop_privileges(id),
            };
            dropped.and_then(|()| probe())
        }))
        .unwrap_or_else(|_| Err(anyhow::anyhow!("probe panicked")));
        let b = encode(out);
        // SAFETY: writing a local buffer to our pipe, then leaving at once.
        unsafe {
            libc::write(fds[1], b.as_ptr().cast(), b.len());
            libc::_exit(0);
        }
    }
    // SAFETY: fds[0] is the read end we own; fds[1] is the child's.
    let mut rd = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    unsafe { libc::close(fds[1]) };
    let mut b = [0u8; 12];
    let got = rd.read_exact(&mut b).context("reading the child's report");
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    got?;
    decode(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_roundtrip() {
        let r = decode(&encode(Ok((Got::Res(-libc::EPERM), 7)))).unwrap();
        assert_eq!(r, (Got::Res(-libc::EPERM), 7));
        let r = decode(&encode(Ok((Got::Pending, ANY_ID)))).unwrap();
        assert_eq!(r, (Got::Pending, ANY_ID));
        assert!(decode(&encode(Err(anyhow::anyhow!("x")))).is_err());
    }
}
