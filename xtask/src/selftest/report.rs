//! The end of a run: every result as KTAP, where the logs are, why tests
//! failed, and the counts.

use std::path::PathBuf;

use crate::ktap::{self, Status, TestResult};

/// How many results passed, failed (or timed out) and skipped.
pub(super) struct Counts {
    pub pass: usize,
    pub fail: usize,
    pub skip: usize,
}

/// Prints `results` as KTAP (numbered in order), the job directories and
/// the `# why` lines; returns the counts.
pub(super) fn print(
    mut results: Vec<TestResult>,
    job_dirs: &[PathBuf],
    why_failed: &[String],
) -> Counts {
    println!("KTAP version 1");
    println!("1..{}", results.len());
    for (i, r) in results.iter_mut().enumerate() {
        r.number = i + 1;
        println!("{}", ktap::line(r));
    }
    for d in job_dirs {
        println!("# results, logs, console and dmesg: {}", d.display());
    }
    for l in why_failed {
        println!("{l}");
    }
    let report = ktap::Report {
        plan: Some(results.len()),
        results,
    };
    Counts {
        pass: report.count(Status::Pass),
        fail: report.count(Status::Fail) + report.count(Status::Timeout),
        skip: report.count(Status::Skip),
    }
}

/// The run's last line.
pub(super) fn summary(c: &Counts) {
    println!(
        "selftest: {} passed, {} failed, {} skipped",
        c.pass, c.fail, c.skip
    );
}
