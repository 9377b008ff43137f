//! Running QEMU (or any command) under a watchdog: console captured to a
//! file and handed line by line to the caller, a limit on the whole run and
//! a limit on the time without progress. A guest that hangs or panics ends
//! the run with a reason; it never hangs the harness.

use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Limits {
    /// The whole run.
    pub total: Duration,
    /// Longest time without a progress line (`xtask: start ...` or a KTAP
    /// result); `None` for no such limit.
    pub stall: Option<Duration>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The process exited by itself with this status.
    Exited(Option<i32>),
    /// The watchdog killed it.
    Killed(String),
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub ending: Ending,
    pub elapsed: Duration,
    /// Last progress marker seen (`xtask: start N name`).
    pub last_started: Option<String>,
}

/// Has the child of `cmd` killed (SIGKILL) when the thread that spawns it
/// ends, so that a harness that is itself killed (Ctrl-C reaches QEMU too,
/// in the same process group, but `kill PID` or a CI job's end do not)
/// leaves no QEMU running, holding its job directory and a CPU. Linux sends the signal when the
/// spawning *thread* exits: spawn from a thread that outlives the child, as
/// `run_watched` and `Command::status` do.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // CAST: a Linux pid fits in pid_t.
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec, so it
    // must be async-signal-safe: it allocates nothing and calls only
    // prctl(2), getppid(2) and _exit(2).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the prctl: no signal will come.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        })
    }
}

fn is_progress(line: &str) -> Option<Option<String>> {
    if let Some(pos) = line.find("xtask: start ") {
        return Some(Some(line[pos + "xtask: start ".len()..].trim().to_string()));
    }
    let l = line.trim_start();
    (l.starts_with("ok ") || l.starts_with("not ok ")).then_some(None)
}

/// A child that is killed, if still running, when this is dropped: an
/// error return of `run_watched` leaves no QEMU behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        // Both are no-ops for a child already reaped (std keeps its status).
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `cmd` with stdout (the guest console) captured to `console` and
/// passed to `on_line`; stdin is /dev/null.
pub fn run_watched(
    mut cmd: Command,
    limits: &Limits,
    console: &Path,
    mut on_line: impl FnMut(&str),
) -> Result<Outcome> {
    let mut child = Reaped(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {:?}", cmd.get_program()))?,
    );
    let mut log = std::fs::File::create(console)?;
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.0.stdout.take().unwrap();
    let stderr = child.0.stderr.take().unwrap();
    let tx2 = tx.clone();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        while r.read_until(b'\n', &mut buf).unwrap_or(0) > 0 {
            let _ = tx.send(String::from_utf8_lossy(&buf).trim_end().to_string());
            buf.clear();
        }
    });
    let err_reader = std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx2.send(format!("[host stderr] {l}"));
        }
    });
    let start = Instant::now();
    let mut last_progress = Instant::now();
    let mut last_started = None;
    let mut ending = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                writeln!(log, "{line}")?;
                if let Some(started) = is_progress(&line) {
                    last_progress = Instant::now();
                    if started.is_some() {
                        last_started = started;
                    }
                }
                on_line(&line);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
        }
        if let Some(st) = child.0.try_wait()? {
            ending = Some(Ending::Exited(st.code()));
        } else if start.elapsed() > limits.total {
            ending = Some(Ending::Killed(format!(
                "whole run exceeded {}s",
                limits.total.as_secs()
            )));
        } else if let Some(stall) = limits.stall {
            if last_progress.elapsed() > stall {
                ending = Some(Ending::Killed(format!(
                    "no progress for {}s (last started: {})",
                    stall.as_secs(),
                    last_started.as_deref().unwrap_or("nothing")
                )));
            }
        }
        if let Some(e) = &ending {
            if matches!(e, Ending::Killed(_)) {
                let _ = child.0.kill();
                let _ = child.0.wait();
            }
            break;
        }
    }
    // Drain what is left of the output.
    let _ = reader.join();
    let _ = err_reader.join();
    while let Ok(line) = rx.try_recv() {
        writeln!(log, "{line}")?;
        on_line(&line);
    }
    Ok(Outcome {
        ending: ending.unwrap(),
        elapsed: start.elapsed(),
        last_started,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn child_is_killed_when_its_spawning_thread_ends() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = std::thread::spawn(|| {
            let mut c = Command::new("sleep");
            c.arg("30");
            die_with_parent(&mut c);
            c.spawn().unwrap()
        })
        .join()
        .unwrap();
        let t = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if t.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the child outlived the thread that spawned it");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    }

    #[test]
    fn normal_exit_is_reported_with_status() {
        let d = tempfile::tempdir().unwrap();
        let mut lines = Vec::new();
        let limits = Limits {
            total: Duration::from_secs(20),
            stall: None,
        };
        let o = run_watched(
            sh("echo hello; echo 'ok 1 a'; exit 3"),
            &limits,
            &d.path().join("c"),
            |l| lines.push(l.to_string()),
        )
        .unwrap();
        assert_eq!(o.ending, Ending::Exited(Some(3)));
        assert_eq!(lines, ["hello", "ok 1 a"]);
        let saved = std::fs::read_to_string(d.path().join("c")).unwrap();
        assert_eq!(saved, "hello\nok 1 a\n");
    }

    #[test]
    fn stall_kills_and_names_the_test() {
        let d = tempfile::tempdir().unwrap();
        let limits = Limits {
            total: Duration::from_secs(30),
            stall: Some(Duration::from_secs(1)),
        };
        let t = Instant::now();
        let o = run_watched(
            sh("echo 'xtask: start 3 test_hang.sh'; exec sleep 60"),
            &limits,
            &d.path().join("c"),
            |_| {},
        )
        .unwrap();
        assert!(t.elapsed() < Duration::from_secs(10));
        match o.ending {
            Ending::Killed(why) => assert!(why.contains("3 test_hang.sh"), "{why}"),
            e => panic!("not killed: {e:?}"),
        }
        assert_eq!(o.last_started.as_deref(), Some("3 test_hang.sh"));
    }

    #[test]
    fn total_limit_kills_even_with_progress() {
        let d = tempfile::tempdir().unwrap();
        let limits = Limits {
            total: Duration::from_secs(2),
            stall: Some(Duration::from_secs(1)),
        };
        let o = run_watched(
            sh("while true; do echo 'ok 1 x'; sleep 0.2; done"),
            &limits,
            &d.path().join("c"),
            |_| {},
        )
        .unwrap();
        assert!(
            matches!(o.ending, Ending::Killed(ref w) if w.contains("whole run")),
            "{:?}",
            o.ending
        );
    }
}
