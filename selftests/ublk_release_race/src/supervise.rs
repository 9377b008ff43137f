//! Each case runs in a worker process of its own, which this process
//! watches. A driver that deadlocks leaves the worker's server thread
//! asleep in the kernel for good: such a process never finishes exiting
//! (its other threads are gone, that one is not), so a parent waiting for
//! its exit would hang with it. The worker therefore sends its verdict over
//! a pipe before it exits, and its output goes through another pipe that
//! this process copies to its own stdout: the test's log does not stay open
//! in a process that cannot exit.

use anyhow::{bail, Result};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::proc::{readable, write_all};

/// A case's verdict, kselftest style.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail(String),
    Skip(String),
}

/// What a worker reports: its verdict, and the id of a device it had to
/// leave behind (its server stuck), for this process to delete once the
/// worker is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub verdict: Verdict,
    pub left: Option<u32>,
}

impl Report {
    fn encode(&self) -> String {
        let left = self.left.map_or("-".to_string(), |id| id.to_string());
        let (code, why) = match &self.verdict {
            Verdict::Pass => ("0", ""),
            Verdict::Fail(m) => ("1", m.as_str()),
            Verdict::Skip(m) => ("4", m.as_str()),
        };
        format!("{code} {left} {}\n", why.replace('\n', " "))
    }

    fn decode(s: &str) -> Option<Self> {
        let line = s.lines().next()?;
        let mut it = line.splitn(3, ' ');
        let (code, left, why) = (it.next()?, it.next()?, it.next().unwrap_or(""));
        let left = match left {
            "-" => None,
            id => Some(id.parse().ok()?),
        };
        let verdict = match code {
            "0" => Verdict::Pass,
            "1" => Verdict::Fail(why.to_string()),
            "4" => Verdict::Skip(why.to_string()),
            _ => return None,
        };
        Some(Report { verdict, left })
    }
}

/// How a worker ended.
pub struct Finished {
    pub report: Report,
    /// Whether the worker process is gone (reaped).
    pub exited: bool,
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe2: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors that we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Copies what `fd` has to our stdout; false at its end.
fn relay(fd: RawFd) -> bool {
    let mut buf = [0u8; 4096];
    // SAFETY: `buf` is valid for writes of its length.
    let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if r <= 0 {
        return r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&buf[..r as usize]);
    let _ = out.flush();
    true
}

/// Reaps worker `pid` if it exits within 5 s; whether it did.
fn reap(pid: libc::pid_t) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let mut status = 0;
        // SAFETY: our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid || r < 0 {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `case` in a forked worker (this process must be single-threaded)
/// and returns its report, or a failure if it gives none within `budget`.
pub fn in_worker(budget: Duration, case: impl FnOnce() -> Report) -> Finished {
    match spawn(budget, case) {
        Ok(f) => f,
        Err(e) => Finished {
            report: Report {
                verdict: Verdict::Fail(format!("{e:#}")),
                left: None,
            },
            exited: false,
        },
    }
}

fn spawn(budget: Duration, case: impl FnOnce() -> Report) -> Result<Finished> {
    let (out_r, out_w) = pipe()?;
    let (ver_r, ver_w) = pipe()?;
    let _ = std::io::stdout().flush();
    // SAFETY: single-threaded; the worker leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: plain descriptor moves in the new process.
        unsafe {
            libc::dup2(out_w.as_raw_fd(), 1);
            libc::dup2(out_w.as_raw_fd(), 2);
        }
        drop(out_r);
        drop(ver_r);
        drop(out_w);
        let v = std::panic::catch_unwind(std::panic::AssertUnwindSafe(case)).unwrap_or_else(|_| {
            Report {
                verdict: Verdict::Fail("the case panicked".into()),
                left: None,
            }
        });
        let _ = std::io::stdout().flush();
        let _ = write_all(ver_w.as_raw_fd(), v.encode().as_bytes());
        // SAFETY: leaving without the parent's destructors; a thread stuck
        // in the kernel keeps the process from going away, not us.
        unsafe { libc::_exit(0) };
    }
    drop(out_w);
    drop(ver_w);
    let deadline = Instant::now() + budget;
    let mut verdict = String::new();
    let mut out_open = true;
    let got = loop {
        if out_open && readable(out_r.as_raw_fd(), Duration::ZERO)? {
            out_open = relay(out_r.as_raw_fd());
            continue;
        }
        if readable(ver_r.as_raw_fd(), Duration::ZERO)? {
            let mut b = [0u8; 1024];
            // SAFETY: `b` is valid for writes of its length.
            let r = unsafe { libc::read(ver_r.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
            if r > 0 {
                verdict.push_str(&String::from_utf8_lossy(&b[..r as usize]));
                if verdict.ends_with('\n') {
                    break Report::decode(&verdict);
                }
                continue;
            }
            // The worker is gone without a verdict.
            break None;
        }
        if Instant::now() >= deadline {
            println!(
                "# the case gave no verdict within {} s; killing its worker {pid}",
                budget.as_secs()
            );
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return Ok(Finished {
                report: Report {
                    verdict: Verdict::Fail(format!("no verdict within {} s", budget.as_secs())),
                    left: None,
                },
                exited: reap(pid),
            });
        }
        // Sleep until either pipe has something (or a tick passes).
        let mut fds = [
            libc::pollfd {
                fd: out_r.as_raw_fd(),
                events: if out_open { libc::POLLIN } else { 0 },
                revents: 0,
            },
            libc::pollfd {
                fd: ver_r.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 200) };
    };
    // The rest of its output, for a moment.
    let until = Instant::now() + Duration::from_secs(2);
    while out_open
        && Instant::now() < until
        && readable(out_r.as_raw_fd(), Duration::from_millis(200))?
    {
        out_open = relay(out_r.as_raw_fd());
    }
    let exited = reap(pid);
    if !exited {
        println!("# worker process {pid} has not exited (a thread of it is stuck in the kernel): left behind");
    }
    let report = got.unwrap_or_else(|| Report {
        verdict: Verdict::Fail("the worker process ended without a verdict (crashed?)".into()),
        left: None,
    });
    Ok(Finished { report, exited })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_roundtrip() {
        for (verdict, left) in [
            (Verdict::Pass, None),
            (Verdict::Fail("a b".into()), Some(3)),
            (Verdict::Fail(String::new()), None),
            (Verdict::Skip("why".into()), None),
        ] {
            let r = Report { verdict, left };
            assert_eq!(Report::decode(&r.encode()), Some(r));
        }
        let r = Report {
            verdict: Verdict::Fail("x\ny".into()),
            left: None,
        };
        assert_eq!(
            Report::decode(&r.encode()).map(|r| r.verdict),
            Some(Verdict::Fail("x y".into()))
        );
        assert_eq!(Report::decode("7 - x\n"), None);
        assert_eq!(Report::decode("1 x y\n"), None);
    }
}
