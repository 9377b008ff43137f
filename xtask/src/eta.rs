//! The estimate of the time left that `cargo xtask selftest` prints with
//! each result: from the per-test times of earlier runs (their
//! results.ktap), scaled by how fast this run goes compared with them.
//! The scale takes care of a slower machine, of tests sharing the guest
//! and of boots; tests never timed count as the median of those that were.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use crate::ktap;

/// Per-test seconds of earlier runs, and what this run has done so far.
pub struct Eta {
    last: HashMap<String, f64>,
    median: f64,
    /// Tests still to report, over every boot of this run.
    pending: Vec<String>,
    done: HashSet<String>,
    /// Sum of the earlier times of the tests done in this run.
    done_secs: f64,
}

impl Eta {
    /// Times from the job directories in `runs`, newest first: a test takes
    /// the time of the newest run that has it. `boots` pairs the prefix of
    /// a boot's tests in `pending` (e.g. `c/`) with the suffix of its job
    /// directories (e.g. `-selftest-c`).
    pub fn load(runs: &Path, boots: &[(String, String)], pending: Vec<String>) -> Eta {
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
            let mut r = ktap::parse(&text);
            for t in &mut r.results {
                t.name = format!("{prefix}{}", t.name);
            }
            reports.push(r);
        }
        Self::from_reports(reports.into_iter(), pending)
    }

    fn from_reports(reports: impl Iterator<Item = ktap::Report>, pending: Vec<String>) -> Eta {
        let mut last = HashMap::new();
        for r in reports {
            for t in r.results {
                if let Some(s) = t.seconds {
                    last.entry(t.name).or_insert(s);
                }
            }
        }
        let mut all: Vec<f64> = last.values().copied().collect();
        all.sort_by(f64::total_cmp);
        let median = all.get(all.len() / 2).copied().unwrap_or(30.0);
        Eta {
            last,
            median,
            pending,
            done: HashSet::new(),
            done_secs: 0.0,
        }
    }

    fn secs(&self, test: &str) -> f64 {
        self.last.get(test).copied().unwrap_or(self.median)
    }

    /// Records that `test` reported, `elapsed` into the run; returns the
    /// estimate of the time left, or `None` before it means anything.
    pub fn finished(&mut self, test: &str, elapsed: Duration) -> Option<Duration> {
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
        if self.done_secs < 1.0 {
            return None;
        }
        let scale = elapsed.as_secs_f64() / self.done_secs;
        Some(Duration::from_secs_f64(left * scale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(lines: &str) -> ktap::Report {
        ktap::parse(&format!("KTAP version 1\n{lines}"))
    }

    #[test]
    fn newest_time_wins_and_scale_applies() {
        let newest = report("ok 1 a.sh # time=10.0s\n");
        let older = report("ok 1 a.sh # time=99.0s\nok 2 b.sh # time=30.0s\n");
        let pending = vec!["a.sh".to_string(), "b.sh".into(), "c.sh".into()];
        let mut eta = Eta::from_reports([newest, older].into_iter(), pending);
        // a took 10 s before and 20 s now: the run goes at half speed; b (30)
        // and c (never timed: the median of 10 and 30) are left.
        let left = eta.finished("a.sh", Duration::from_secs(20)).unwrap();
        assert_eq!(left.as_secs(), 2 * (30 + 30));
        assert_eq!(eta.finished("a.sh", Duration::from_secs(21)), None);
        let left = eta.finished("b.sh", Duration::from_secs(80)).unwrap();
        assert_eq!(left.as_secs(), 80 * 30 / 40);
    }

    #[test]
    fn no_history() {
        let mut eta = Eta::from_reports(std::iter::empty(), vec!["a.sh".into(), "b.sh".into()]);
        assert_eq!(
            eta.finished("a.sh", Duration::from_secs(60))
                .unwrap()
                .as_secs(),
            60
        );
    }
}
