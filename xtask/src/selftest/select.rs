//! Which tests a run has: the suite's TEST_PROGS, our tests, the
//! harness's own, the self-checks; what `--quick` and `--filter` keep; and
//! `--list`.

use anyhow::{bail, Result};
use regex::Regex;
use std::path::Path;

use super::ci::Tiering;
use super::SelftestOpts;
use crate::layout::Layout;
use crate::userland;

/// Harness self-checks: boots that must be reported as failures.
pub const HARNESS_PANIC: &str = "harness_reports_panic";
pub const HARNESS_WARN: &str = "harness_reports_warn";

/// The `--quick` smoke run: a few short tests that cover each layer, about
/// a minute of tests per driver by the baseline times in xtask/times/ (plus
/// the boot): a generic one, the null and loop targets, striping, batch
/// io, two of ours (the C series' scheduler default and the partition
/// scan deadlock), rublk, and the harness's own check that a kernel
/// warning fails the run (a boot of its own). Keep it short: the whole
/// suite is the run without `--quick`.
pub const QUICK: &[&str] = &[
    "test_generic_03.sh",
    "test_null_01.sh",
    "test_loop_02.sh",
    "test_stripe_02.sh",
    "test_batch_02.sh",
    "test_generic_21.sh",
    "test_part_04.sh",
    "test_rublk_null.sh",
    HARNESS_WARN,
];

/// The `test_*.sh` scripts of a directory, sorted.
fn test_scripts(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.starts_with("test_") && n.ends_with(".sh"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Our own selftests (in the repo's selftests/ directory, bound upstream).
fn ours(layout: &Layout) -> Vec<String> {
    test_scripts(&layout.repo.join("selftests"))
}

/// The harness's own guest tests (xtask/guest/tests/), run after the
/// selftests; the guest runs them from its copy in the job directory.
fn harness_tests(layout: &Layout) -> Vec<String> {
    test_scripts(&layout.harness_tests())
}

pub fn select(all: &[String], quick: bool, filters: &[Regex]) -> Vec<String> {
    all.iter()
        .filter(|t| !quick || QUICK.contains(&t.as_str()))
        .filter(|t| filters.is_empty() || filters.iter().any(|f| f.is_match(t)))
        .cloned()
        .collect()
}

/// The tests a run selects, and what `--ci` does with them.
pub(super) struct Plan {
    /// What `--filter` and `--quick` keep of `all`.
    pub selected: Vec<String>,
    pub tiering: Tiering,
}

impl Plan {
    /// Reads the test list from the prepared tree (no build needed).
    pub fn new(opts: &SelftestOpts, layout: &Layout, filters: &[Regex]) -> Result<Plan> {
        let mut all = userland::test_progs(&layout.tree())?;
        let ours = ours(layout);
        for t in &ours {
            if !all.contains(t) {
                bail!("selftests/{t} is not listed in TEST_PROGS of the selftests Makefile (add it in its patch)");
            }
        }
        let harness = harness_tests(layout);
        for t in &harness {
            if all.contains(t) {
                bail!("xtask/guest/tests/{t} has the name of a selftest; rename it");
            }
        }
        all.extend(harness.iter().cloned());
        all.push(HARNESS_PANIC.into());
        all.push(HARNESS_WARN.into());
        let selected = select(&all, opts.quick, filters);
        let tiering = Tiering::decide(opts, layout, &all, &ours)?;
        Ok(Plan { selected, tiering })
    }

    /// `--list`: one line per selected test, with how it shares the guest
    /// and what `--ci` does with it.
    pub fn print_list(&self) {
        for t in &self.selected {
            let sharing = match crate::sharing::reason(t) {
                Some(why) => format!(" ({}: {why})", crate::sharing::of(t).word()),
                None => String::new(),
            };
            println!("{t}{sharing}{}", self.tiering.list_note(t));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ktap;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn selection() {
        let all = names(&[
            "test_null_01.sh",
            "test_null_02.sh",
            "test_generic_18.sh",
            HARNESS_WARN,
        ]);
        assert_eq!(select(&all, false, &[]), all);
        assert_eq!(
            select(&all, true, &[]),
            names(&["test_null_01.sh", HARNESS_WARN])
        );
        let f = [Regex::new("null").unwrap(), Regex::new("_18").unwrap()];
        assert_eq!(
            select(&all, false, &f),
            names(&["test_null_01.sh", "test_null_02.sh", "test_generic_18.sh"])
        );
        assert_eq!(select(&all, true, &f), names(&["test_null_01.sh"]));
    }

    /// `--quick` stays a smoke run: every test it names is in the C
    /// driver's recorded baseline, and by the recorded times its tests
    /// take under 2 minutes per driver (the boots come on top).
    #[test]
    fn quick_is_short_and_exists() {
        let times = Path::new(env!("CARGO_MANIFEST_DIR")).join("times");
        for driver in ["c", "rust"] {
            let file = times.join(format!("selftest-{driver}.ktap"));
            let results = ktap::parse(&std::fs::read_to_string(file).unwrap()).results;
            let secs: f64 = results
                .iter()
                .filter(|r| QUICK.contains(&r.name.as_str()))
                .filter_map(|r| r.seconds)
                .sum();
            assert!(secs < 120.0, "--quick: {secs}s of tests against {driver}");
            if driver == "c" {
                for t in QUICK.iter().filter(|t| t.starts_with("test_")) {
                    assert!(
                        results.iter().any(|r| r.name == *t),
                        "{t} not in {driver}'s baseline"
                    );
                }
            }
        }
    }
}
