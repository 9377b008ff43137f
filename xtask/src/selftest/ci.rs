//! What `--ci` does in this run (the policy is tier.rs): the stamp, the
//! C driver's share or why it runs the whole suite, what `--list` says.

use anyhow::Result;
use std::collections::BTreeSet;
use std::path::PathBuf;

use super::{DriverChoice, SelftestOpts};
use crate::guest::job::{self, Driver};
use crate::ktap::{self, Status, TestResult};
use crate::layout::Layout;
use crate::progress::phase;
use crate::tier;

/// What the C driver runs under `--ci` (see tier.rs).
pub(super) struct Tiering {
    /// `Some`: it runs its share of the suite.
    pub share: Option<Share>,
    /// The stamp of the C driver's inputs in this run's tree (with `--ci`
    /// or `--save-baseline`).
    pub stamp: Option<String>,
    /// Why it runs the whole suite under `--ci`.
    whole_why: Option<String>,
}

/// What decides the C driver's share under `--ci`.
pub(super) struct Share {
    /// Our tests (selftests/ and the harness tests) whose directory
    /// changed since the baseline.
    ours: BTreeSet<String>,
    /// The tests it skipped in the recorded baseline.
    c_skips: BTreeSet<String>,
}

/// What the C driver ran of the suite under `--ci` with its share.
pub(super) struct CShare {
    ran: usize,
    of: usize,
    /// The tests it left out: they passed against the Rust driver.
    left_out: Vec<String>,
}

impl Share {
    fn of(&self, suite: &[String], rust: &[TestResult]) -> Vec<(String, tier::Why)> {
        tier::c_share(suite, &self.ours, &self.c_skips, rust)
    }

    /// The C driver's tests, now that the Rust boot gave `rust`, and what
    /// it leaves out; says so.
    pub fn c_tests(&self, suite: &[String], rust: &[TestResult]) -> (Vec<String>, CShare) {
        let picked = self.of(suite, rust);
        let tests: Vec<String> = picked.iter().map(|(t, _)| t.clone()).collect();
        phase(format!(
            "--ci: the C driver runs {} of {} tests ({}); the other {} passed against the Rust driver and are reported as skipped against the C driver",
            tests.len(),
            suite.len(),
            tier_counts(&picked),
            suite.len() - tests.len()
        ));
        let left_out: Vec<String> = suite
            .iter()
            .filter(|t| !tests.contains(t))
            .cloned()
            .collect();
        let ran = CShare {
            ran: tests.len(),
            of: suite.len(),
            left_out,
        };
        (tests, ran)
    }
}

impl CShare {
    /// The tests the C driver left out, as skipped against it (`prefix`:
    /// its test names').
    pub fn left_out_results(&self, prefix: &str, tiering: &Tiering) -> Vec<TestResult> {
        let why = format!(
            "--ci: passed against the Rust driver; the C driver's inputs match the recorded stamp {}",
            tier::short(tiering.stamp.as_deref().unwrap_or_default())
        );
        self.left_out
            .iter()
            .map(|t| TestResult {
                number: 0,
                name: format!("{prefix}{t}"),
                status: Status::Skip,
                detail: why.clone(),
                seconds: None,
            })
            .collect()
    }
}

impl Tiering {
    pub fn decide(
        opts: &SelftestOpts,
        layout: &Layout,
        all: &[String],
        selftests: &[String],
    ) -> Result<Tiering> {
        let stamp = if opts.ci || opts.save_baseline {
            Some(tier::stamp(
                &layout.tree(),
                selftests,
                opts.kernel.flavour.name(),
                &opts.kernel.flavour.fragment_paths(layout),
            )?)
        } else {
            None
        };
        let none = |stamp, whole_why| Tiering {
            share: None,
            stamp,
            whole_why,
        };
        let Some(now) = stamp.as_deref().filter(|_| opts.ci) else {
            return Ok(none(stamp, None));
        };
        tier::check_smoke(all)?;
        let times = layout.baseline_times();
        let recorded = tier::recorded(&times)?;
        let both = opts.driver == DriverChoice::Both;
        if let Some(why) = tier::whole_c_suite(both, now, recorded.as_deref()) {
            phase(format!("--ci: whole suite against every driver: {why}"));
            return Ok(none(stamp, Some(why)));
        }
        // Our tests run against the C driver when they, or what the tests of
        // their directory share, changed since the baseline.
        let ours = tier::ours_changed(&times, &ours_dirs(layout))?;
        phase(format!(
            "--ci: the C driver's inputs match the recorded stamp {now} ({}): the Rust driver runs every test, then the C driver its share",
            tier::STAMP_COVERS
        ));
        Ok(Tiering {
            share: Some(Share {
                ours,
                c_skips: tier::recorded_c_skips(&times),
            }),
            stamp,
            whole_why: None,
        })
    }

    /// The tests driver `d` is expected to run of `suite`, for the
    /// estimate: under `--ci`, the C boot's as the newest Rust results
    /// predict them (the Rust boot of this run decides).
    pub fn projected(&self, layout: &Layout, d: Driver, suite: &[String]) -> Vec<String> {
        match &self.share {
            Some(share) if d == Driver::C => share
                .of(suite, &newest_results(layout, Driver::Rust))
                .into_iter()
                .map(|(t, _)| t)
                .collect(),
            _ => suite.to_vec(),
        }
    }

    /// The run's closing `# --ci:` line: what the C driver ran, or why the
    /// whole suite ran.
    pub fn note(&self, opts: &SelftestOpts, c_ran: Option<&CShare>) {
        match (c_ran, &self.whole_why) {
            (Some(c), _) => println!(
                "# --ci: the C driver ran {} of {} tests: its inputs match the recorded stamp {}; the whole run is `cargo xtask selftest`",
                c.ran,
                c.of,
                tier::short(self.stamp.as_deref().unwrap_or_default())
            ),
            (None, Some(why)) if opts.ci => {
                println!("# --ci: the whole suite ran against every driver: {why}")
            }
            _ => {}
        }
    }

    /// What `--list` says of `test` under `--ci`.
    pub fn list_note(&self, test: &str) -> &'static str {
        match &self.share {
            Some(share) if !test.starts_with("harness_") => {
                if share.ours.contains(test) {
                    " [--ci: both drivers: one of ours, changed since the baseline]"
                } else if tier::C_SMOKE.contains(&test) {
                    " [--ci: both drivers]"
                } else if share.c_skips.contains(test) {
                    " [--ci: both drivers: the C driver skipped it in the baseline]"
                } else {
                    " [--ci: Rust driver; C driver only if the Rust driver does not pass it]"
                }
            }
            _ => "",
        }
    }
}

/// The directories of our tests, by the name `OURS_FILE` (tier/times.rs) records.
pub(super) fn ours_dirs(layout: &Layout) -> Vec<(&'static str, PathBuf)> {
    vec![
        ("selftests", layout.repo.join("selftests")),
        ("harness", layout.harness_tests()),
    ]
}

/// `3 ours, 11 one per family, ...` for the C driver's share.
fn tier_counts(picked: &[(String, tier::Why)]) -> String {
    let n = |w: tier::Why| picked.iter().filter(|(_, x)| *x == w).count();
    format!(
        "{} ours changed since the baseline, {} one per family, {} it skipped in the baseline, {} the Rust driver did not pass",
        n(tier::Why::Ours),
        n(tier::Why::Smoke),
        n(tier::Why::SkippedOnC),
        n(tier::Why::NotPassedOnRust)
    )
}

/// The newest results of `driver`'s boots: the newest run of this
/// checkout, else the committed baseline.
fn newest_results(layout: &Layout, driver: Driver) -> Vec<TestResult> {
    let suffix = format!("-selftest-{}", driver.name());
    let file = match job::newest(&layout.runs(), &suffix, "results.ktap") {
        Some(d) => d.join("results.ktap"),
        None => layout
            .baseline_times()
            .join(format!("selftest-{}.ktap", driver.name())),
    };
    ktap::parse(&std::fs::read_to_string(file).unwrap_or_default()).results
}
