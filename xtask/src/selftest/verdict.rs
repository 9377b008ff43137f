//! A suite boot's results: one per test, whether the guest reported it
//! or not, and `kernel_log` for the splats of the boot.

use std::path::Path;

use super::boot::judge;
use crate::guest::job::Job;
use crate::guest::{Ending, Outcome};
use crate::ktap::{self, Status, TestResult};

fn tail(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Turns one suite boot into per-test results plus a kernel_log result.
pub(super) fn suite_results(
    job: &Job,
    outcome: &Outcome,
    tests: &[String],
    prefix: &str,
) -> Vec<TestResult> {
    let report = ktap::parse(&std::fs::read_to_string(job.results()).unwrap_or_default());
    let boot = judge(job, outcome);
    let mut out = Vec::new();
    let died = match (&boot.status, &outcome.ending) {
        _ if job.not_started().is_some() => {
            job.not_started().map(|why| format!("{why} (see console)"))
        }
        (_, Ending::Killed(why)) => Some(format!("guest killed: {why}")),
        (None, Ending::Exited(code)) => Some(format!(
            "guest ended without finishing (qemu exit {code:?}; panic?)"
        )),
        _ => None,
    };
    let mut first_missing = true;
    for t in tests {
        let r = match report.results.iter().find(|r| &r.name == t) {
            Some(r) => r.clone(),
            None => {
                let detail = match (&died, first_missing) {
                    (Some(why), true) => why.clone(),
                    (Some(_), false) => "not run: the guest died earlier".into(),
                    (None, _) => "no result reported by the guest".into(),
                };
                first_missing = false;
                TestResult {
                    number: 0,
                    name: t.clone(),
                    status: Status::Fail,
                    detail,
                    seconds: None,
                }
            }
        };
        out.push(TestResult {
            name: format!("{prefix}{}", r.name),
            ..r
        });
    }
    let kernel_log = if boot.splats.is_empty() {
        TestResult {
            number: 0,
            name: format!("{prefix}kernel_log"),
            status: Status::Pass,
            detail: String::new(),
            seconds: None,
        }
    } else {
        let what: Vec<String> = boot
            .splats
            .iter()
            .map(|s| format!("{} during {}", s.kind, s.during))
            .collect();
        TestResult {
            number: 0,
            name: format!("{prefix}kernel_log"),
            status: Status::Fail,
            detail: format!("{} splat(s): {}", boot.splats.len(), what.join("; ")),
            seconds: None,
        }
    };
    out.push(kernel_log);
    let log = std::fs::read_to_string(job.dmesg()).unwrap_or_default();
    out.extend(super::kunit::boot_result(&log, prefix));
    if died.is_some() {
        println!("# console tail ({}):", job.console().display());
        for l in tail(&job.console(), 40) {
            println!("#   {l}");
        }
    }
    for s in &boot.splats {
        println!(
            "# splat: {} (line {} of the log, during {}): {}",
            s.kind, s.lineno, s.during, s.line
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn fake_job(results: &str, status: Option<&str>, dmesg: &str) -> (tempfile::TempDir, Job) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("results.ktap"), results).unwrap();
        if let Some(s) = status {
            std::fs::write(d.path().join("status"), s).unwrap();
        }
        std::fs::write(d.path().join("dmesg.txt"), dmesg).unwrap();
        std::fs::write(d.path().join("console.log"), "").unwrap();
        let job = Job {
            dir: d.path().to_path_buf(),
            initramfs: d.path().join("i"),
            keep: Vec::new(),
        };
        (d, job)
    }

    fn outcome(ending: Ending) -> Outcome {
        Outcome {
            ending,
            elapsed: Duration::from_secs(1),
            last_started: None,
        }
    }

    #[test]
    fn failed_setup_fails_every_test_and_says_why_once() {
        let (_d, job) = fake_job("", Some("setup-failed\n"), "");
        let r = suite_results(
            &job,
            &outcome(Ending::Exited(Some(0))),
            &names(&["a", "b"]),
            "",
        );
        assert!(r[..2].iter().all(|r| r.status == Status::Fail));
        assert!(
            r[0].detail.contains("the guest's setup failed"),
            "{}",
            r[0].detail
        );
        assert!(r[1].detail.contains("not run"), "{}", r[1].detail);
    }

    #[test]
    fn clean_boot() {
        let (_d, job) = fake_job(
            "KTAP version 1\n1..2\nok 1 a\nok 2 b # SKIP no fio\n",
            Some("0"),
            "[1.0] hello\n",
        );
        let r = suite_results(
            &job,
            &outcome(Ending::Exited(Some(0))),
            &names(&["a", "b"]),
            "",
        );
        let st: Vec<Status> = r.iter().map(|r| r.status).collect();
        assert_eq!(st, [Status::Pass, Status::Skip, Status::Pass]);
        assert_eq!(r[2].name, "kernel_log");
    }

    #[test]
    fn splat_fails_the_run_even_if_tests_pass() {
        let dmesg = "[1.0] xtask: start a\n[1.1] WARNING: CPU: 0 PID: 9 at drivers/block/ublk_drv.c:10 f+0x1/0x2\n";
        let (_d, job) = fake_job("KTAP version 1\n1..1\nok 1 a\n", Some("0"), dmesg);
        let r = suite_results(
            &job,
            &outcome(Ending::Exited(Some(0))),
            &names(&["a"]),
            "c/",
        );
        assert_eq!(r[0].status, Status::Pass);
        assert_eq!(r[1].name, "c/kernel_log");
        assert_eq!(r[1].status, Status::Fail);
        assert!(r[1].detail.contains("WARNING during a"), "{}", r[1].detail);
    }

    #[test]
    fn panic_mid_run_fails_running_and_remaining_tests() {
        let dmesg =
            "[1.0] xtask: start b\n[1.1] Kernel panic - not syncing: sysrq triggered crash\n";
        let (_d, job) = fake_job("KTAP version 1\n1..3\nok 1 a\n", None, dmesg);
        let r = suite_results(
            &job,
            &outcome(Ending::Exited(Some(0))),
            &names(&["a", "b", "c"]),
            "",
        );
        let st: Vec<Status> = r.iter().map(|r| r.status).collect();
        assert_eq!(st, [Status::Pass, Status::Fail, Status::Fail, Status::Fail]);
        assert!(r[1].detail.contains("without finishing"), "{}", r[1].detail);
        assert!(r[2].detail.contains("not run"));
        assert!(r[3].detail.contains("panic during b"), "{}", r[3].detail);
    }

    #[test]
    fn hang_reports_the_watchdog_reason() {
        let (_d, job) = fake_job("KTAP version 1\n1..1\n", None, "");
        let r = suite_results(
            &job,
            &outcome(Ending::Killed(
                "no progress for 420s (last started: 1 a)".into(),
            )),
            &names(&["a"]),
            "",
        );
        assert_eq!(r[0].status, Status::Fail);
        assert!(r[0].detail.contains("no progress for 420s"));
    }
}
