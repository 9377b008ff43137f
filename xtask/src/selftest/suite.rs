//! The suite boots of a run: one per driver, in order, each with its tests
//! (under `--ci`, the C driver's share once the Rust boot has decided it),
//! its progress lines with the time left, and its results.

use anyhow::Result;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::boot::{own_timeout, Ctx, Echo};
use super::ci::{CShare, Tiering};
use super::verdict::suite_results;
use super::SelftestOpts;
use crate::digest;
use crate::eta::Eta;
use crate::guest::job::{Driver, Mode};
use crate::guest::Limits;
use crate::ktap::{Status, TestResult};
use crate::progress::{detail, fmt_duration, phase};

/// What the suite boots left.
#[derive(Default)]
pub(super) struct Boots {
    /// Every boot's results, names prefixed by the driver's.
    pub results: Vec<TestResult>,
    /// The job directory of each boot.
    pub job_dirs: Vec<PathBuf>,
    /// The `# why <test>:` lines of the failed tests.
    pub why_failed: Vec<String>,
    /// Under `--ci`, what the C driver ran of its share.
    pub c_ran: Option<CShare>,
    /// (driver name, results.ktap) of each boot, for `--save-baseline`.
    pub recorded: Vec<(&'static str, PathBuf)>,
}

/// The prefix of a driver's test names: `c/` when the run boots more than
/// one driver.
pub(super) fn prefix(drivers: &[Driver], d: Driver) -> String {
    if drivers.len() > 1 {
        format!("{}/", d.name())
    } else {
        String::new()
    }
}

/// The boots of one run and what they share.
struct Runner<'a> {
    ctx: &'a Ctx<'a>,
    opts: &'a SelftestOpts,
    run_start: Instant,
    eta: Eta,
    out: Boots,
}

/// Boots each of `drivers` with `suite` (the C driver with its share under
/// `--ci`).
pub(super) fn run(
    ctx: &Ctx,
    opts: &SelftestOpts,
    drivers: &[Driver],
    tiering: &Tiering,
    suite: &[String],
    run_start: Instant,
) -> Result<Boots> {
    let boots: Vec<(String, String)> = drivers
        .iter()
        .map(|d| (prefix(drivers, *d), format!("-selftest-{}", d.name())))
        .collect();
    let pending: Vec<String> = drivers
        .iter()
        .zip(&boots)
        .flat_map(|(d, (p, _))| {
            tiering
                .projected(ctx.layout, *d, suite)
                .into_iter()
                .map(move |t| format!("{p}{t}"))
        })
        .collect();
    let eta = Eta::load(
        &ctx.layout.runs(),
        &ctx.layout.baseline_times(),
        &boots,
        pending,
    );
    let mut r = Runner {
        ctx,
        opts,
        run_start,
        eta,
        out: Boots::default(),
    };
    if suite.is_empty() {
        return Ok(r.out);
    }
    let mut rust_results: Vec<TestResult> = Vec::new();
    for d in drivers {
        let prefix = prefix(drivers, *d);
        let tests = match &tiering.share {
            Some(share) if *d == Driver::C => {
                let (tests, ran) = share.c_tests(suite, &rust_results);
                r.eta.replace_pending(&prefix, &tests);
                r.out.c_ran = Some(ran);
                if tests.is_empty() {
                    continue;
                }
                tests
            }
            _ => suite.to_vec(),
        };
        let these = r.boot(*d, &prefix, &tests)?;
        if *d == Driver::Rust {
            rust_results = these
                .iter()
                .filter_map(|t| {
                    let name = t.name.strip_prefix(&prefix)?.to_string();
                    Some(TestResult { name, ..t.clone() })
                })
                .collect();
        }
        r.out.results.extend(these);
    }
    Ok(r.out)
}

impl Runner<'_> {
    /// One suite boot with driver `d`: boots the guest, echoes its results,
    /// judges them; records the boot and returns its results.
    fn boot(&mut self, d: Driver, prefix: &str, suite: &[String]) -> Result<Vec<TestResult>> {
        let opts = self.opts;
        let left = Duration::from_secs(opts.timeout()).saturating_sub(self.run_start.elapsed());
        phase(format!(
            "booting {} guest with the {} driver: {} tests, up to {} at once, per-test timeout {}s, {} left",
            self.ctx.accel,
            d.name(),
            suite.len(),
            opts.parallel,
            opts.test_timeout(),
            fmt_duration(left)
        ));
        let longest = own_timeout(&self.ctx.layout.harness_tests()).max(opts.test_timeout());
        let limits = Limits {
            total: left,
            stall: Some(Duration::from_secs(longest + 120)),
        };
        // Tests that share the guest start longest first; one at a
        // time, in name order.
        let order = if opts.parallel > 1 {
            crate::sharing::order(suite, |t| self.eta.secs(&format!("{prefix}{t}")))
        } else {
            suite.to_vec()
        };
        let mode = Mode::Selftest {
            tests: order.clone(),
            test_timeout_s: opts.test_timeout(),
            jobs: opts.parallel,
        };
        let name = format!("selftest-{}", d.name());
        let echo = Echo {
            prefix: prefix.to_string(),
            eta: &mut self.eta,
            boot_start: Instant::now(),
        };
        let (job, outcome) = self.ctx.boot(&name, d, &mode, &limits, Some(echo))?;
        self.eta.boot_ended(outcome.elapsed);
        detail(format!(
            "guest finished in {} ({:?}; last test started: {})",
            fmt_duration(outcome.elapsed),
            outcome.ending,
            outcome.last_started.as_deref().unwrap_or("none")
        ));
        let these = suite_results(&job, &outcome, &order, prefix);
        let failed: Vec<(String, String)> = these
            .iter()
            .filter(|r| matches!(r.status, Status::Fail | Status::Timeout))
            .filter_map(|r| {
                let bare = r.name.strip_prefix(prefix)?.to_string();
                Some((bare, r.name.clone()))
            })
            .collect();
        self.out.why_failed.extend(digest::lines(&job.dir, &failed));
        self.out.recorded.push((d.name(), job.results()));
        self.out.job_dirs.push(job.dir);
        Ok(these)
    }
}
