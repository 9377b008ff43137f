//! ublk_release_race: reaches, on demand, the deadlock that ublk drivers
//! avoid by ending requests with bottom halves disabled, and checks that
//! the driver under test does not fall into it.
//!
//! A ublk server thread ends requests inline when it commits them
//! (COMMIT_AND_FETCH_REQ, copy mode). If the bio completion of such a
//! request drops the last reference of a file, fput() in process context
//! with bottom halves enabled queues the file's release as task work of
//! the current task, the server thread. Releasing a block device file takes
//! `disk->open_mutex` (bdev_release()). If another thread holds that mutex
//! while it reads the partition table through the same server (BLKRRPART),
//! nobody serves the read: deadlock. With bottom halves disabled,
//! in_interrupt() is true, fput() hands the file to the delayed_fput work
//! and the server goes on.
//!
//! The program is its own ublk server (one thread, copy mode). An AIO child
//! opens the disk with O_DIRECT, submits a read and closes the disk, so
//! that the AIO request holds the file's last reference; the server holds
//! that read; BLKRRPART runs in a thread; when its read of sector 0 reaches
//! the server, the server first commits the held read, then serves the
//! rest. Pass: BLKRRPART returns 0 within 30 s, the AIO read completes with
//! 4096 bytes, the device is stopped and deleted. Fail: anything else; a
//! hang is reported with the kernel stacks of the server and BLKRRPART
//! threads, and the device is left behind.
//!
//! Two cases: a device without flags (the request ends inline), and one
//! with UBLK_F_SUPPORT_RQ_AFFINITY if the driver has it, pinned so that
//! blk_mq_complete_request_remote() leaves the completion to the server's
//! context (its inline fallback).
//!
//! KTAP output, one line per case; exit 0 if every case that ran passed,
//! 1 if one failed, 4 (kselftest skip) if none could run, saying why.
//!
//! Usage: ublk_release_race [SUBSTRING...] (runs the cases whose name
//! contains one of them)

mod aio;
mod device;
mod proc;
mod race;
mod server;
mod supervise;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use race::{Outcome, Spec};
use supervise::{Report, Verdict};
use ublk_badinput::ctrl::{Ctrl, CONTROL};
use ublk_uapi::UBLK_F_SUPPORT_RQ_AFFINITY;

const KSFT_PASS: u8 = 0;
const KSFT_FAIL: u8 = 1;
const KSFT_SKIP: u8 = 4;

/// The whole run stays below the harness's default per-test timeout (300 s).
const RUN_BUDGET: Duration = Duration::from_secs(270);
/// One case: 30 s of BLKRRPART plus setup and teardown under TCG.
const CASE_BUDGET: Duration = Duration::from_secs(150);

/// The possible CPUs (blk-mq maps every possible CPU to a queue).
fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| proc::parse_cpu_list(&s))
        .map_or(1, |v| v.len().max(1))
}

/// Deletes device `id`, which a hung case left behind, once its worker is
/// gone. (A hung rescan waits for its read killably: the worker's exit ends
/// that wait, BLKRRPART fails and lets go of disk->open_mutex, the server
/// thread's release of the file goes on, and the server can exit.)
fn delete_left(id: u32, exited: bool) {
    if !exited {
        println!("# ublkb{id} is left behind: its worker process is still stuck");
        return;
    }
    match Ctrl::open().and_then(|mut c| c.del(id)) {
        Ok(()) => println!("# ublkb{id} deleted after its worker process exited"),
        Err(e) => println!("# ublkb{id} is left behind: {e:#}"),
    }
}

fn skip(why: &str) -> ExitCode {
    println!("# SKIP {why}");
    ExitCode::from(KSFT_SKIP)
}

fn main() -> ExitCode {
    let filters: Vec<String> = std::env::args().skip(1).collect();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("must run as root (ADD_DEV, BLKRRPART, BLKFLSBUF)");
    }
    if !std::path::Path::new(CONTROL).exists() {
        return skip(&format!("{CONTROL} does not exist (no ublk driver loaded)"));
    }
    if !std::path::Path::new("/proc/sys/fs/aio-max-nr").exists() {
        return skip("the kernel has no AIO (CONFIG_AIO): no /proc/sys/fs/aio-max-nr");
    }
    // The control device is closed again before the workers are forked.
    let features = match Ctrl::open().and_then(|mut c| c.features()) {
        Ok(f) => f,
        Err(e) => {
            println!("# {e:#}");
            return ExitCode::from(KSFT_FAIL);
        }
    };
    let queues = possible_cpus().min(8) as u16;
    let cases = [
        (
            Spec {
                name: "release_race_inline",
                flags: 0,
                queues: 1,
                pin: false,
            },
            None,
        ),
        (
            Spec {
                name: "release_race_rq_affinity",
                flags: UBLK_F_SUPPORT_RQ_AFFINITY,
                queues,
                pin: true,
            },
            (features & UBLK_F_SUPPORT_RQ_AFFINITY == 0)
                .then_some("the driver does not report UBLK_F_SUPPORT_RQ_AFFINITY in GET_FEATURES"),
        ),
    ];
    let selected: Vec<_> = cases
        .iter()
        .filter(|(s, _)| filters.is_empty() || filters.iter().any(|f| s.name.contains(f.as_str())))
        .collect();
    if selected.is_empty() {
        return skip("no case matches the arguments");
    }
    let start = Instant::now();
    println!("KTAP version 1");
    println!("1..{}", selected.len());
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut last_skip = String::new();
    for (n, (spec, not_run)) in selected.iter().enumerate() {
        let n = n + 1;
        let verdict = if let Some(why) = not_run {
            Verdict::Skip(why.to_string())
        } else {
            let left = RUN_BUDGET.saturating_sub(start.elapsed());
            if left < Duration::from_secs(60) {
                Verdict::Skip("not enough of the run's time budget left".into())
            } else {
                println!(
                    "# {}: {} queue(s), flags {:#x}{}",
                    spec.name,
                    spec.queues,
                    spec.flags,
                    if spec.pin { ", pinned" } else { "" }
                );
                let done = supervise::in_worker(left.min(CASE_BUDGET), || {
                    let (verdict, left) = match race::run(spec) {
                        Outcome::Pass => (Verdict::Pass, None),
                        Outcome::Fail(m) => (Verdict::Fail(m), None),
                        Outcome::Hung(m, id) => (Verdict::Fail(m), Some(id)),
                        Outcome::Skip(m) => (Verdict::Skip(m), None),
                    };
                    Report { verdict, left }
                });
                if let Some(id) = done.report.left {
                    delete_left(id, done.exited);
                }
                done.report.verdict
            }
        };
        match verdict {
            Verdict::Pass => {
                passed += 1;
                println!("ok {n} {}", spec.name);
            }
            Verdict::Fail(m) => {
                failed += 1;
                println!("# FAIL {}: {m}", spec.name);
                println!("not ok {n} {}", spec.name);
            }
            Verdict::Skip(m) => {
                skipped += 1;
                println!("ok {n} {} # SKIP {m}", spec.name);
                last_skip = m;
            }
        }
    }
    println!(
        "# {passed} passed, {failed} failed, {skipped} skipped in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    if failed > 0 {
        ExitCode::from(KSFT_FAIL)
    } else if passed > 0 {
        ExitCode::from(KSFT_PASS)
    } else {
        // The runner takes the last line as the reason of a skip.
        println!("# SKIP {last_skip}");
        ExitCode::from(KSFT_SKIP)
    }
}
