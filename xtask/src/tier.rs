//! `cargo xtask selftest --ci`: what CI runs, and why it fits its budget.
//!
//! Once the Rust driver passes what the C driver passes, the whole suite
//! costs as much per driver, and a fresh build plus two whole halves no
//! longer fit CI's 90 minutes on a slow machine. The Rust driver is what
//! this repository develops; the C driver only changes when what it is
//! built and tested from changes. So `--ci` boots the Rust driver first
//! with every test, then the C driver with:
//!
//! - our own tests (selftests/, the harness tests) whose file, or a file
//!   their directory's tests share, changed since the baseline
//!   ([`ours_changed`]): they are kept out of the stamp, as they change
//!   most;
//! - one upstream test per family ([`C_SMOKE`]);
//! - every test that did not pass against the Rust driver in this run
//!   (skipped for a missing feature, or failed), and every test that the
//!   C driver skipped in the recorded baseline: no test goes unrun, and
//!   none counts as covered by a run in which it only skipped;
//!
//! and reports each test it leaves out as skipped against the C driver,
//! saying why. The C driver runs the whole suite instead whenever the
//! [`stamp`] of its inputs differs from the one a passing whole run
//! recorded in xtask/times/ (`--save-baseline`). With one driver, `--ci`
//! runs its whole suite.
//!
//! This file is that policy; `hashes.rs` hashes our tests, `stamp.rs`
//! makes the stamp of the C driver's inputs, `times.rs` reads and writes
//! what a baseline records in xtask/times/.

mod hashes;
mod stamp;
mod times;

use anyhow::{bail, Result};
use std::collections::BTreeSet;

use crate::ktap::{Status, TestResult};

pub use hashes::{ours_changed, ours_hashes};
pub use stamp::{stamp, STAMP_COVERS};
pub use times::{recorded, recorded_c_skips, save_baseline, STAMP_FILE};

/// The upstream tests the C driver runs under `--ci` when its stamp is
/// unchanged: one per family of the suite, the quickest that exercises it.
pub const C_SMOKE: &[&str] = &[
    "test_batch_02.sh",
    "test_generic_03.sh",
    "test_integrity_01.sh",
    "test_loop_02.sh",
    "test_null_01.sh",
    "test_params_01.sh",
    "test_part_02.sh",
    "test_recover_04.sh",
    "test_shmemzc_01.sh",
    "test_stress_07.sh",
    "test_stripe_02.sh",
];

/// Checks that every [`C_SMOKE`] test is in the suite `all`.
pub fn check_smoke(all: &[String]) -> Result<()> {
    let missing: Vec<&str> = C_SMOKE
        .iter()
        .copied()
        .filter(|t| !all.iter().any(|a| a == t))
        .collect();
    if !missing.is_empty() {
        bail!(
            "tier.rs C_SMOKE names tests that are not in the suite: {}",
            missing.join(", ")
        );
    }
    Ok(())
}

/// The tests of `suite` that did not pass in `rust` (the Rust boot's
/// results, bare names): skipped, failed, or not reported.
pub fn not_passed(suite: &[String], rust: &[TestResult]) -> Vec<String> {
    suite
        .iter()
        .filter(|t| {
            rust.iter()
                .find(|r| &r.name == *t)
                .is_none_or(|r| r.status != Status::Pass)
        })
        .cloned()
        .collect()
}

/// Why a test of the suite runs against the C driver under `--ci`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// One of ours.
    Ours,
    /// One per family.
    Smoke,
    /// The C driver skipped it in the recorded baseline.
    SkippedOnC,
    /// It did not pass against the Rust driver in this run.
    NotPassedOnRust,
}

/// The C driver's share of `suite` under `--ci` with an unchanged stamp:
/// each test it runs, with the first reason; in `suite`'s order.
pub fn c_share(
    suite: &[String],
    ours: &BTreeSet<String>,
    c_skips: &BTreeSet<String>,
    rust: &[TestResult],
) -> Vec<(String, Why)> {
    let missed = not_passed(suite, rust);
    suite
        .iter()
        .filter_map(|t| {
            let why = if ours.contains(t) {
                Why::Ours
            } else if C_SMOKE.contains(&t.as_str()) {
                Why::Smoke
            } else if c_skips.contains(t) {
                Why::SkippedOnC
            } else if missed.contains(t) {
                Why::NotPassedOnRust
            } else {
                return None;
            };
            Some((t.clone(), why))
        })
        .collect()
}

/// Whether the C driver runs the whole suite under `--ci`, and why: the
/// run's driver choice (`both`), the stamp of this tree and the recorded
/// one. `None`: it runs its share.
pub fn whole_c_suite(both: bool, now: &str, recorded: Option<&str>) -> Option<String> {
    if !both {
        return Some("one driver runs its whole suite".into());
    }
    match recorded {
        None => Some(format!(
            "no stamp recorded in xtask/times/{STAMP_FILE}: run `cargo xtask selftest --save-baseline` and commit xtask/times/"
        )),
        Some(r) if r != now => Some(format!(
            "the C driver's inputs changed since the recorded stamp ({now} now, {} recorded): record it again with a passing `cargo xtask selftest --save-baseline` and commit xtask/times/",
            short(r)
        )),
        Some(_) => None,
    }
}

/// The first 12 hex digits of a stamp.
pub fn short(stamp: &str) -> &str {
    stamp.get(..12).unwrap_or(stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn result(name: &str, status: Status) -> TestResult {
        TestResult {
            number: 0,
            name: name.into(),
            status,
            detail: String::new(),
            seconds: Some(1.0),
        }
    }

    #[test]
    fn c_share_keeps_ours_smoke_c_skips_and_what_rust_did_not_pass() {
        let suite = names(&[
            "test_generic_02.sh",
            "test_generic_03.sh",
            "test_generic_08.sh",
            "test_generic_09.sh",
            "test_generic_18.sh",
            "test_loop_06.sh",
            "test_stress_03.sh",
        ]);
        let ours: BTreeSet<String> = ["test_generic_18.sh".to_string()].into();
        let c_skips: BTreeSet<String> = ["test_generic_02.sh".to_string()].into();
        let rust = [
            result("test_generic_02.sh", Status::Pass),
            result("test_generic_03.sh", Status::Pass),
            result("test_generic_08.sh", Status::Skip),
            result("test_generic_09.sh", Status::Pass),
            result("test_generic_18.sh", Status::Pass),
            result("test_loop_06.sh", Status::Fail),
            // test_stress_03.sh: no result (the guest died before it).
        ];
        let share = c_share(&suite, &ours, &c_skips, &rust);
        let expect = [
            ("test_generic_02.sh", Why::SkippedOnC),
            ("test_generic_03.sh", Why::Smoke),
            ("test_generic_08.sh", Why::NotPassedOnRust),
            ("test_generic_18.sh", Why::Ours),
            ("test_loop_06.sh", Why::NotPassedOnRust),
            ("test_stress_03.sh", Why::NotPassedOnRust),
        ];
        assert_eq!(
            share,
            expect
                .iter()
                .map(|(t, w)| (t.to_string(), *w))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn whole_suite_unless_both_drivers_and_the_stamp_matches() {
        let s = "a".repeat(64);
        assert!(whole_c_suite(false, &s, Some(&s)).is_some());
        assert!(whole_c_suite(true, &s, None)
            .unwrap()
            .contains("no stamp recorded"));
        let other = "b".repeat(64);
        let why = whole_c_suite(true, &s, Some(&other)).unwrap();
        assert!(
            why.contains("aaaaaaaaaaaa now, bbbbbbbbbbbb recorded"),
            "{why}"
        );
        assert_eq!(whole_c_suite(true, &s, Some(&s)), None);
    }

    #[test]
    fn smoke_names_must_exist() {
        let mut all: Vec<String> = names(C_SMOKE);
        assert!(check_smoke(&all).is_ok());
        all.retain(|t| t != "test_loop_02.sh");
        let e = check_smoke(&all).unwrap_err().to_string();
        assert!(e.contains("test_loop_02.sh"), "{e}");
    }
}
