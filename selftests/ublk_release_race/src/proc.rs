//! Process and thread plumbing: bounded pipe reads, CPU pinning, thread
//! ids, and what /proc says about a thread (for the report of a hang).

use anyhow::{bail, Result};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// The calling thread's id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Pins thread `tid` (0: the caller) to CPU `cpu`.
pub fn pin(tid: i32, cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid set; CPU_SET checks the bound.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set of its own size.
    let r = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        bail!(
            "sched_setaffinity of thread {tid} to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Writes all of `buf` to `fd`.
pub fn write_all(fd: RawFd, mut buf: &[u8]) -> Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for reads of its length.
        let r = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            bail!("write: {e}");
        }
        buf = &buf[r as usize..];
    }
    Ok(())
}

/// Waits up to `wait` for `fd` to be readable.
pub fn readable(fd: RawFd, wait: Duration) -> Result<bool> {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            bail!("poll: {e}");
        }
        if r > 0 {
            return Ok(true);
        }
        if left.is_zero() {
            return Ok(false);
        }
    }
}

/// Reads up to `buf.len()` bytes from `fd` within `wait`, as one record:
/// returns how many it got, 0 if nothing came in time or at end of file.
pub fn poll_read(fd: RawFd, buf: &mut [u8], wait: Duration) -> Result<usize> {
    let deadline = Instant::now() + wait;
    let mut got = 0;
    while got < buf.len() {
        if !readable(fd, deadline.saturating_duration_since(Instant::now()))? {
            return Ok(got);
        }
        // SAFETY: the rest of `buf` is valid for writes.
        let r = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            bail!("read: {e}");
        }
        if r == 0 {
            return Ok(got);
        }
        got += r as usize;
    }
    Ok(got)
}

/// The CPUs of a kernel CPU list (`0`, `0-3`, `0,2-3`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

fn task_file(tid: i32, name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/{name}")).ok()
}

/// The scheduler state letter of thread `tid` of this process (`R`, `S`,
/// `D`, ...), from its stat line.
pub fn thread_state(tid: i32) -> Option<char> {
    let stat = task_file(tid, "stat")?;
    // The name in parentheses may hold spaces: the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// One line on thread `tid` of this process: its state, wchan, and the
/// system call it is in (number and arguments), as /proc tells.
pub fn thread_line(tid: i32) -> String {
    let state = thread_state(tid).map_or("?".to_string(), |c| c.to_string());
    let wchan = task_file(tid, "wchan").unwrap_or_else(|| "?".into());
    let syscall = task_file(tid, "syscall").unwrap_or_else(|| "?".into());
    let syscall: Vec<&str> = syscall.split_whitespace().take(3).collect();
    format!(
        "thread {tid}: state {state}, wchan {}, syscall {}",
        if wchan.trim().is_empty() {
            "-"
        } else {
            wchan.trim()
        },
        syscall.join(" ")
    )
}

/// The kernel stack of thread `tid` of this process, one line per frame;
/// `Err` with the reason when /proc does not show it.
pub fn thread_stack(tid: i32) -> Result<Vec<String>, String> {
    let path = format!("/proc/self/task/{tid}/stack");
    match std::fs::read_to_string(&path) {
        Ok(s) => Ok(s.lines().map(|l| l.trim().to_string()).collect()),
        Err(e) => Err(format!("{path}: {e} (no CONFIG_STACKTRACE?)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0\n"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-3"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpu_list("0,2-3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn own_thread() {
        let tid = gettid();
        assert!(thread_state(tid).is_some());
        assert!(thread_line(tid).starts_with(&format!("thread {tid}: state ")));
    }
}
