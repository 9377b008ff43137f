//! The time left of a run: [`time_left`], the one estimate that every
//! command's progress lines use (selftest's tests, bench rust-vs-c's
//! rounds, bench matrix's cells), and [`Eta`], what `cargo xtask selftest`
//! feeds it with each result: the per-test times of earlier runs (their
//! results.ktap), scaled by how fast this run's guests go compared with
//! them (the build before the first boot does not count).
//! The scale takes care of a slower machine, of tests sharing the guest
//! and of boots; tests never timed count as the median of those that were.
//! Where no run of this checkout has a test (a fresh clone, as CI's), its
//! time comes from the baseline committed in xtask/times/: the same times
//! also order the tests that share a guest, longest first.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use crate::ktap::{self, Status};

/// The time left at the pace so far: `elapsed` went on `done` units of
/// work and `todo` units remain (units of any size: a test's recorded
/// seconds, a round, a cell). None before any work is done.
pub fn time_left(elapsed: Duration, done: f64, todo: f64) -> Option<Duration> {
    (done > 0.0).then(|| Duration::from_secs_f64(elapsed.as_secs_f64() / done * todo))
}

/// Per-test seconds of earlier runs, and what this run has done so far.
pub struct Eta {
    last: HashMap<String, f64>,
    /// The same by bare test name (`test_x.sh`), whatever the driver: the
    /// time of a test that this driver never ran (it skipped it for a
    /// missing feature) is the other driver's.
    any_driver: HashMap<String, f64>,
    median: f64,
    /// Tests still to report, over every boot of this run.
    pending: Vec<String>,
    done: HashSet<String>,
    /// Sum of the earlier times of the tests done in this run.
    done_secs: f64,
    /// Time spent in the guests of this run that have ended.
    tested: Duration,
}

impl Eta {
    /// Times from the job directories in `runs`, newest first: a test takes
    /// the time of the newest run that has it, else that of the baseline
    /// in `baseline` (`<suffix without the dash>.ktap`, e.g.
    /// `selftest-c.ktap`). `boots` pairs the prefix of a boot's tests in
    /// `pending` (e.g. `c/`) with the suffix of its job directories (e.g.
    /// `-selftest-c`).
    pub fn load(
        runs: &Path,
        baseline: &Path,
        boots: &[(String, String)],
        pending: Vec<String>,
    ) -> Eta {
        let mut dirs: Vec<_> = std::fs::read_dir(runs)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        dirs.sort();
        let mut reports = Vec::new();
        for d in dirs.iter().rev() {
            let name = d.to_string_lossy();
            let Some((prefix, _)) = boots
                .iter()
                .find(|(_, suffix)| name.ends_with(suffix.as_str()))
            else {
                continue;
            };
            let text = std::fs::read_to_string(d.join("results.ktap")).unwrap_or_default();
            reports.push(prefixed(ktap::parse(&text), prefix));
        }
        for (prefix, suffix) in boots {
            let file = baseline.join(format!("{}.ktap", suffix.trim_start_matches('-')));
            let text = std::fs::read_to_string(file).unwrap_or_default();
            reports.push(prefixed(ktap::parse(&text), prefix));
        }
        // Every baseline, this run's drivers or not: by bare name only.
        let mut others: Vec<_> = std::fs::read_dir(baseline)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        others.retain(|f| f.extension().is_some_and(|e| e == "ktap"));
        others.sort();
        let others = others
            .iter()
            .map(|f| ktap::parse(&std::fs::read_to_string(f).unwrap_or_default()));
        Self::from_reports(reports.into_iter(), others, pending)
    }

    /// `reports`, newest first, give each test its time; `by_name` (and
    /// `reports`) give a test that has none the time of the same test under
    /// another driver, not counting skips (a skip takes no time to speak of).
    fn from_reports(
        reports: impl Iterator<Item = ktap::Report>,
        by_name: impl Iterator<Item = ktap::Report>,
        pending: Vec<String>,
    ) -> Eta {
        let mut last = HashMap::new();
        let mut any_driver = HashMap::new();
        for r in reports {
            for t in r.results {
                if let Some(s) = t.seconds {
                    if t.status != Status::Skip {
                        any_driver.entry(bare(&t.name).to_string()).or_insert(s);
                    }
                    last.entry(t.name).or_insert(s);
                }
            }
        }
        for r in by_name {
            for t in r.results {
                if let (Some(s), false) = (t.seconds, t.status == Status::Skip) {
                    any_driver.entry(bare(&t.name).to_string()).or_insert(s);
                }
            }
        }
        let mut all: Vec<f64> = last.values().copied().collect();
        all.sort_by(f64::total_cmp);
        let median = all.get(all.len() / 2).copied().unwrap_or(30.0);
        Eta {
            last,
            any_driver,
            median,
            pending,
            done: HashSet::new(),
            done_secs: 0.0,
            tested: Duration::ZERO,
        }
    }

    /// How long `test` took in the newest run (or baseline) that has it,
    /// else what the same test took with the other driver, else the median
    /// of the tests that were timed.
    pub fn secs(&self, test: &str) -> f64 {
        self.last
            .get(test)
            .or_else(|| self.any_driver.get(bare(test)))
            .copied()
            .unwrap_or(self.median)
    }

    /// Replaces the tests still to report under `prefix` (a boot whose
    /// tests were only known once an earlier boot ended) by `tests`.
    pub fn replace_pending(&mut self, prefix: &str, tests: &[String]) {
        debug_assert!(
            !prefix.is_empty(),
            "an empty prefix would replace every boot's tests"
        );
        self.pending.retain(|t| !t.starts_with(prefix));
        self.pending
            .extend(tests.iter().map(|t| format!("{prefix}{t}")));
    }

    /// Records that a guest ran for `elapsed`.
    pub fn boot_ended(&mut self, elapsed: Duration) {
        self.tested += elapsed;
    }

    /// Records that `test` reported, `in_boot` into the guest it runs in;
    /// returns the estimate of the time left, or `None` before it means
    /// anything.
    pub fn finished(&mut self, test: &str, in_boot: Duration) -> Option<Duration> {
        let elapsed = self.tested + in_boot;
        if !self.done.insert(test.to_string()) {
            return None;
        }
        self.done_secs += self.secs(test);
        let left: f64 = self
            .pending
            .iter()
            .filter(|t| !self.done.contains(*t))
            .map(|t| self.secs(t))
            .sum();
        // The first tests say little about the pace (the guest's boot is in
        // their time): no estimate before 5% of the run is done.
        let total = self.done_secs + left;
        if self.done_secs < 1.0 || self.done_secs < total * 0.05 {
            return None;
        }
        time_left(elapsed, self.done_secs, left)
    }
}

/// A test's name without the prefix of its boot (`c/test_x.sh`: `test_x.sh`).
fn bare(test: &str) -> &str {
    test.rsplit('/').next().unwrap_or(test)
}

/// `r` with its test names under a boot's prefix (`c/`).
fn prefixed(mut r: ktap::Report, prefix: &str) -> ktap::Report {
    for t in &mut r.results {
        t.name = format!("{prefix}{}", t.name);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_at_the_pace_so_far() {
        let t = |e, d, l| time_left(Duration::from_secs(e), d, l);
        assert_eq!(t(60, 3.0, 12.0), Some(Duration::from_secs(240)));
        assert_eq!(t(9, 15.0, 0.0), Some(Duration::ZERO));
        assert_eq!(t(9, 0.0, 15.0), None);
    }

    fn report(lines: &str) -> ktap::Report {
        ktap::parse(&format!("KTAP version 1\n{lines}"))
    }

    #[test]
    fn newest_time_wins_and_scale_applies() {
        let newest = report("ok 1 a.sh # time=10.0s\n");
        let older = report("ok 1 a.sh # time=99.0s\nok 2 b.sh # time=30.0s\n");
        let pending = vec!["a.sh".to_string(), "b.sh".into(), "c.sh".into()];
        let mut eta = Eta::from_reports([newest, older].into_iter(), std::iter::empty(), pending);
        // a took 10 s before and 20 s now: the run goes at half speed; b (30)
        // and c (never timed: the median of 10 and 30) are left.
        let left = eta.finished("a.sh", Duration::from_secs(20)).unwrap();
        assert_eq!(left.as_secs(), 2 * (30 + 30));
        assert_eq!(eta.finished("a.sh", Duration::from_secs(21)), None);
        let left = eta.finished("b.sh", Duration::from_secs(80)).unwrap();
        assert_eq!(left.as_secs(), 80 * 30 / 40);
    }

    #[test]
    fn replaced_pending_tests_count_instead() {
        let times = report("ok 1 a.sh # time=10.0s\nok 2 b.sh # time=30.0s\n");
        let pending = vec!["r/a.sh".to_string(), "c/a.sh".into(), "c/b.sh".into()];
        let by_name = std::iter::once(times);
        let mut eta = Eta::from_reports(std::iter::empty(), by_name, pending);
        eta.replace_pending("c/", &["a.sh".to_string()]);
        // r/a.sh ran at the recorded pace; c/a.sh alone is left.
        let left = eta.finished("r/a.sh", Duration::from_secs(10)).unwrap();
        assert_eq!(left.as_secs(), 10);
    }

    #[test]
    fn time_of_earlier_boots_counts() {
        let old = report("ok 1 a.sh # time=10.0s\nok 2 b.sh # time=10.0s\n");
        let pending = vec![
            "c/a.sh".into(),
            "c/b.sh".into(),
            "r/a.sh".into(),
            "r/b.sh".into(),
        ];
        let mut eta = Eta::from_reports([old].into_iter(), std::iter::empty(), pending);
        // Without history under these names, each test counts as the
        // median (10 s): a guest of 40 s ran two of them.
        eta.finished("c/a.sh", Duration::from_secs(20));
        eta.finished("c/b.sh", Duration::from_secs(40));
        eta.boot_ended(Duration::from_secs(40));
        // 60 s of guests for 30 s of history: twice as slow; one test of
        // 10 s left. Counting from the start of the second guest only
        // would give 20 s for 30 s.
        let left = eta.finished("r/a.sh", Duration::from_secs(20)).unwrap();
        assert_eq!(left.as_secs(), 20);
    }

    #[test]
    fn no_estimate_from_the_first_short_tests() {
        let old = report("ok 1 a.sh # time=1.0s\nok 2 b.sh # time=99.0s\n");
        let mut eta = Eta::from_reports(
            [old].into_iter(),
            std::iter::empty(),
            vec!["a.sh".into(), "b.sh".into()],
        );
        // a took 1 s of 100: its 20 s (mostly the boot) would give 33 min.
        assert_eq!(eta.finished("a.sh", Duration::from_secs(20)), None);
    }

    #[test]
    fn a_run_of_this_checkout_wins_over_the_baseline() {
        let dir = tempfile::tempdir().unwrap();
        let (runs, base) = (dir.path().join("runs"), dir.path().join("times"));
        std::fs::create_dir_all(runs.join("100-selftest-c")).unwrap();
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(
            runs.join("100-selftest-c/results.ktap"),
            "KTAP version 1\nok 1 a.sh # time=5.0s\n",
        )
        .unwrap();
        std::fs::write(
            base.join("selftest-c.ktap"),
            "KTAP version 1\nok 1 a.sh # time=50.0s\nok 2 b.sh # time=70.0s\n",
        )
        .unwrap();
        std::fs::write(
            base.join("selftest-rust.ktap"),
            "KTAP version 1\nok 1 a.sh # SKIP no feature (0.5s)\n",
        )
        .unwrap();
        let boots = [("c/".to_string(), "-selftest-c".to_string())];
        let eta = Eta::load(&runs, &base, &boots, vec!["c/a.sh".into(), "c/b.sh".into()]);
        // a: this checkout's run; b: only in the baseline (a fresh clone).
        assert_eq!(eta.secs("c/a.sh"), 5.0);
        assert_eq!(eta.secs("c/b.sh"), 70.0);
        // No time under this driver: the other driver's, skips aside.
        assert_eq!(eta.secs("rust/b.sh"), 70.0);
        assert_eq!(eta.secs("rust/x.sh"), eta.median);
    }

    #[test]
    fn no_history() {
        let mut eta = Eta::from_reports(
            std::iter::empty(),
            std::iter::empty(),
            vec!["a.sh".into(), "b.sh".into()],
        );
        assert_eq!(
            eta.finished("a.sh", Duration::from_secs(60))
                .unwrap()
                .as_secs(),
            60
        );
    }
}
