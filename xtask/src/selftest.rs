//! `cargo xtask selftest`: the upstream ublk selftests plus ours, in QEMU,
//! against the C and/or the Rust driver, reported as KTAP.

use anyhow::{bail, Result};
use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::digest;
use crate::eta::Eta;
use crate::guest::job::{self, Driver, Job, Mode};
use crate::guest::{self, Accel, Ending, Guest, Limits, Outcome};
use crate::kbuild::Outputs;
use crate::ktap::{self, Status, TestResult};
use crate::layout::Layout;
use crate::pipeline::{self, KernelOpts};
use crate::progress::{detail, fmt_duration, phase};
use crate::splat::{self, Splat};
use crate::tier;
use crate::userland::{self, Userland};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverChoice {
    C,
    Rust,
    Both,
}

#[derive(Clone, Debug, clap::Args)]
pub struct SelftestOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
    /// The ublk driver to test: c, rust, or both (default: one boot per
    /// driver, each with every selected test).
    #[arg(long, value_enum, default_value = "both")]
    pub driver: DriverChoice,
    /// Run only tests whose name matches REGEX (repeatable: any may match).
    #[arg(long = "filter", value_name = "REGEX")]
    pub filters: Vec<String>,
    /// List the selected tests and exit. Builds nothing: it only prepares
    /// the kernel tree (source + patches/), where the test list is (on a
    /// fresh clone that fetches the kernel source first, a minute or two).
    #[arg(long)]
    pub list: bool,
    /// A smoke run of a few minutes per driver: test_generic_03,
    /// test_null_01, test_loop_02, test_stripe_02, test_batch_02,
    /// test_generic_21, test_part_04, test_rublk_null and the
    /// harness_reports_warn self-check (about 1 min of tests per driver
    /// plus the boots; the list is `QUICK` in xtask/src/selftest.rs).
    /// Combines with --filter.
    #[arg(long)]
    pub quick: bool,
    /// Per-test timeout in the guest, seconds [default: 300; 900 with
    /// `--config debug`, whose KASAN kernel runs the tests 3 to 10 times
    /// slower under TCG].
    #[arg(long)]
    pub test_timeout: Option<u64>,
    /// How many tests may run at once in a guest (default 2, what CI runs;
    /// 1: one after the other, in name order).
    /// Tests that change what others see run alone whatever this says
    /// (`--list` shows which and why).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub parallel: u32,
    /// Limit for the whole run (all boots), seconds [default: 4500; 10800
    /// with `--config debug`].
    #[arg(long)]
    pub timeout: Option<u64>,
    /// What CI runs: the Rust driver first, every test; then the C driver
    /// with our tests, one upstream test per family, the tests it skipped
    /// in the recorded baseline and every test the Rust driver did not
    /// pass; the others are reported as skipped against it. The whole
    /// suite instead if the C driver's inputs differ from those the
    /// baseline was recorded with (xtask/src/tier.rs). With one driver:
    /// its whole suite.
    #[arg(long)]
    pub ci: bool,
    /// After a whole run that passed, record each driver's results as the
    /// baseline of test times and the C driver's stamp (xtask/times/),
    /// to be committed. Default kernel only.
    #[arg(long, conflicts_with_all = ["filters", "quick", "ci"])]
    pub save_baseline: bool,
}

impl SelftestOpts {
    fn debug(&self) -> bool {
        self.kernel.flavour == crate::pipeline::Flavour::Debug
    }

    /// The per-test timeout, seconds.
    pub fn test_timeout(&self) -> u64 {
        self.test_timeout
            .unwrap_or(if self.debug() { 900 } else { 300 })
    }

    /// The limit for the whole run, seconds.
    pub fn timeout(&self) -> u64 {
        self.timeout
            .unwrap_or(if self.debug() { 3 * 3600 } else { 75 * 60 })
    }
}

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

/// What one boot left behind, judged.
pub struct Boot {
    pub status: Option<String>,
    pub ending: Ending,
    pub splats: Vec<Splat>,
}

impl Boot {
    pub fn failed(&self) -> bool {
        self.status.as_deref() != Some("0")
            || !self.splats.is_empty()
            || matches!(self.ending, Ending::Killed(_))
    }
}

/// Splats from the guest's dmesg file and its console (the console also has
/// what was printed after the last dmesg write, e.g. a panic).
pub fn boot_splats(job: &Job) -> Vec<Splat> {
    let mut all = Vec::new();
    for p in [job.dmesg(), job.console()] {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for s in splat::scan(&text) {
            if !all.iter().any(|a: &Splat| a.line == s.line) {
                all.push(s);
            }
        }
    }
    all
}

fn judge(job: &Job, outcome: &Outcome) -> Boot {
    Boot {
        status: job.status(),
        ending: outcome.ending.clone(),
        splats: boot_splats(job),
    }
}

fn tail(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// What every boot of a run shares.
struct Ctx<'a> {
    layout: &'a Layout,
    kernel: &'a Outputs,
    userland: &'a Userland,
    accel: &'a Accel,
}

/// Echoes a boot's result lines, each with the estimate of the time left.
struct Echo<'a> {
    /// Prefix of this boot's tests in the estimate (`c/`).
    prefix: String,
    eta: &'a mut Eta,
    /// When the guest was started.
    boot_start: Instant,
}

impl Ctx<'_> {
    fn boot(
        &self,
        name: &str,
        driver: Driver,
        mode: &Mode,
        limits: &Limits,
        mut echo: Option<Echo>,
    ) -> Result<(Job, Outcome)> {
        let job = job::create(self.layout, name, self.kernel, self.userland, driver, mode)?;
        let g = Guest {
            kernel: self.kernel,
            job: &job,
            accel: self.accel,
            size: guest::Size::default(),
        };
        let outcome = guest::run_watched(g.command(), limits, &job.console(), |line| {
            let l = line.trim_start();
            let Some(echo) = echo.as_mut() else {
                return;
            };
            if l.starts_with("xtask: driver") {
                detail(format!("{name}: {l}"));
            }
            let Some(r) = ktap::parse(l).results.pop() else {
                return;
            };
            let test = format!("{}{}", echo.prefix, r.name);
            match echo.eta.finished(&test, echo.boot_start.elapsed()) {
                Some(left) => detail(format!("{name}: {l}  [~{} left]", fmt_duration(left))),
                None => detail(format!("{name}: {l}")),
            }
        })?;
        Ok((job, outcome))
    }
}

/// Runs one harness self-check: a boot that must be reported as failed with
/// a splat of `kind`.
fn harness_check(ctx: &Ctx, name: &str) -> Result<TestResult> {
    let (command, kind) = match name {
        HARNESS_PANIC => ("echo c > /proc/sysrq-trigger; sleep 60", "panic"),
        _ => (
            "modprobe lkdtm && echo WARNING > /sys/kernel/debug/provoke-crash/DIRECT",
            "WARNING",
        ),
    };
    let start = Instant::now();
    let limits = Limits {
        total: Duration::from_secs(240),
        stall: None,
    };
    let mode = Mode::Command(command.into());
    let (job, outcome) = ctx.boot(name, Driver::None, &mode, &limits, None)?;
    let boot = judge(&job, &outcome);
    let found = boot.splats.iter().any(|s| s.kind == kind);
    let ok = boot.failed() && found;
    let secs = start.elapsed().as_secs_f64();
    let detail = if ok {
        format!("time={secs:.1}s")
    } else {
        format!(
            "injected {kind} not reported (splats: {:?}, status {:?}, {:?}); console {}",
            boot.splats.iter().map(|s| s.kind).collect::<Vec<_>>(),
            boot.status,
            boot.ending,
            job.console().display()
        )
    };
    Ok(TestResult {
        number: 0,
        name: name.into(),
        status: if ok { Status::Pass } else { Status::Fail },
        detail,
        seconds: Some(secs),
    })
}

/// Turns one suite boot into per-test results plus a kernel_log result.
fn suite_results(job: &Job, outcome: &Outcome, tests: &[String], prefix: &str) -> Vec<TestResult> {
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

/// The tests a run selects, and what `--ci` does with them.
struct Plan {
    /// What `--filter` and `--quick` keep of `all`.
    selected: Vec<String>,
    tiering: Tiering,
}

impl Plan {
    /// Reads the test list from the prepared tree (no build needed).
    fn new(opts: &SelftestOpts, layout: &Layout, filters: &[Regex]) -> Result<Plan> {
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
    fn print_list(&self) {
        for t in &self.selected {
            let sharing = match crate::sharing::reason(t) {
                Some(why) => format!(" ({}: {why})", crate::sharing::of(t).word()),
                None => String::new(),
            };
            println!("{t}{sharing}{}", self.tiering.list_note(t));
        }
    }
}

pub fn run(opts: &SelftestOpts) -> Result<bool> {
    let run_start = Instant::now();
    let layout = pipeline::layout(&opts.kernel)?;
    let filters: Vec<Regex> = opts
        .filters
        .iter()
        .map(|f| Regex::new(f).map_err(|e| anyhow::anyhow!("--filter {f:?}: {e}")))
        .collect::<Result<_>>()?;
    if opts.save_baseline && opts.debug() {
        bail!("--save-baseline records the default kernel's baseline (what CI runs), not --config debug's");
    }
    if opts.list {
        // The list is in the prepared tree: no configuration, no build.
        pipeline::ensure_tree(&layout, &opts.kernel.tree)?;
        Plan::new(opts, &layout, &filters)?.print_list();
        return Ok(true);
    }
    let kernel = pipeline::ensure_kernel(&layout, &opts.kernel)?;
    let userland = userland::ensure(&layout, &kernel)?;
    let Plan { selected, tiering } = Plan::new(opts, &layout, &filters)?;
    // What our tests are now, before the guest runs them: a test edited
    // during the run must not be recorded as passed by the C driver.
    let ours_at_start = if opts.save_baseline {
        Some(tier::ours_hashes(&ours_dirs(&layout))?)
    } else {
        None
    };
    if selected.is_empty() {
        bail!("no test matches the given --filter/--quick selection");
    }
    let drivers: Vec<Driver> = match opts.driver {
        DriverChoice::C => vec![Driver::C],
        DriverChoice::Rust => vec![Driver::Rust],
        // `--ci`: the C driver's tests depend on what the Rust driver passed.
        DriverChoice::Both if opts.ci => vec![Driver::Rust, Driver::C],
        DriverChoice::Both => vec![Driver::C, Driver::Rust],
    };
    for d in &drivers {
        let m = d.module().unwrap();
        if !kernel
            .modules()
            .iter()
            .any(|p| p.file_stem().is_some_and(|s| s == m))
        {
            bail!(
                "{m}.ko was not built in {}: the {} driver is not in this kernel",
                kernel.out.display(),
                d.name()
            );
        }
    }
    let accel = guest::accel::probe();
    phase(format!("QEMU accelerator: {accel}"));
    job::prune(&layout.runs(), 12);

    let ctx = Ctx {
        layout: &layout,
        kernel: &kernel,
        userland: &userland,
        accel: &accel,
    };
    let mut results: Vec<TestResult> = Vec::new();
    for h in [HARNESS_PANIC, HARNESS_WARN] {
        if selected.iter().any(|t| t == h) {
            phase(format!("harness self-check {h}"));
            let r = harness_check(&ctx, h)?;
            detail(ktap::line(&r));
            results.push(r);
        }
    }
    let suite: Vec<String> = selected
        .iter()
        .filter(|t| !t.starts_with("harness_"))
        .cloned()
        .collect();
    let mut job_dirs = Vec::new();
    let mut why_failed = Vec::new();
    let prefix_of = |d: &Driver| {
        if drivers.len() > 1 {
            format!("{}/", d.name())
        } else {
            String::new()
        }
    };
    let boots: Vec<(String, String)> = drivers
        .iter()
        .map(|d| (prefix_of(d), format!("-selftest-{}", d.name())))
        .collect();
    // Under `--ci`, the C boot's tests as the newest Rust results predict
    // them; the Rust boot of this run decides.
    let projected = |d: &Driver| match &tiering.share {
        Some(share) if *d == Driver::C => share
            .of(&suite, &newest_results(&layout, Driver::Rust))
            .into_iter()
            .map(|(t, _)| t)
            .collect(),
        _ => suite.clone(),
    };
    let pending: Vec<String> = drivers
        .iter()
        .zip(&boots)
        .flat_map(|(d, (p, _))| projected(d).into_iter().map(move |t| format!("{p}{t}")))
        .collect();
    let mut eta = Eta::load(&layout.runs(), &layout.baseline_times(), &boots, pending);
    let mut rust_results: Vec<TestResult> = Vec::new();
    let mut c_ran = None;
    let mut recorded = Vec::new();
    if !suite.is_empty() {
        for d in &drivers {
            let prefix = prefix_of(d);
            let suite = match &tiering.share {
                Some(share) if *d == Driver::C => {
                    let picked = share.of(&suite, &rust_results);
                    let tests: Vec<String> = picked.iter().map(|(t, _)| t.clone()).collect();
                    eta.replace_pending(&prefix, &tests);
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
                    c_ran = Some((tests.len(), suite.len(), left_out));
                    if tests.is_empty() {
                        continue;
                    }
                    tests
                }
                _ => suite.clone(),
            };
            let left = Duration::from_secs(opts.timeout()).saturating_sub(run_start.elapsed());
            phase(format!(
                "booting {} guest with the {} driver: {} tests, up to {} at once, per-test timeout {}s, {} left",
                accel,
                d.name(),
                suite.len(),
                opts.parallel,
                opts.test_timeout(),
                fmt_duration(left)
            ));
            let longest = own_timeout(&layout.harness_tests()).max(opts.test_timeout());
            let limits = Limits {
                total: left,
                stall: Some(Duration::from_secs(longest + 120)),
            };
            // Tests that share the guest start longest first; one at a
            // time, in name order.
            let order = if opts.parallel > 1 {
                crate::sharing::order(&suite, |t| eta.secs(&format!("{prefix}{t}")))
            } else {
                suite.clone()
            };
            let mode = Mode::Selftest {
                tests: order.clone(),
                test_timeout_s: opts.test_timeout(),
                jobs: opts.parallel,
            };
            let name = format!("selftest-{}", d.name());
            let echo = Echo {
                prefix: prefix.clone(),
                eta: &mut eta,
                boot_start: Instant::now(),
            };
            let (job, outcome) = ctx.boot(&name, *d, &mode, &limits, Some(echo))?;
            eta.boot_ended(outcome.elapsed);
            detail(format!(
                "guest finished in {} ({:?}; last test started: {})",
                fmt_duration(outcome.elapsed),
                outcome.ending,
                outcome.last_started.as_deref().unwrap_or("none")
            ));
            let these = suite_results(&job, &outcome, &order, &prefix);
            let failed: Vec<(String, String)> = these
                .iter()
                .filter(|r| matches!(r.status, Status::Fail | Status::Timeout))
                .filter_map(|r| {
                    let bare = r.name.strip_prefix(&prefix)?.to_string();
                    Some((bare, r.name.clone()))
                })
                .collect();
            why_failed.extend(digest::lines(&job.dir, &failed));
            if *d == Driver::Rust {
                rust_results = these
                    .iter()
                    .filter_map(|r| {
                        let name = r.name.strip_prefix(&prefix)?.to_string();
                        Some(TestResult { name, ..r.clone() })
                    })
                    .collect();
            }
            results.extend(these);
            recorded.push((d.name(), job.results()));
            job_dirs.push(job.dir);
        }
    }

    if let Some((_, _, left_out)) = &c_ran {
        let why = format!(
            "--ci: passed against the Rust driver; the C driver's inputs match the recorded stamp {}",
            tier::short(tiering.stamp.as_deref().unwrap_or_default())
        );
        for t in left_out {
            results.push(TestResult {
                number: 0,
                name: format!("{}{t}", prefix_of(&Driver::C)),
                status: Status::Skip,
                detail: why.clone(),
                seconds: None,
            });
        }
    }
    println!("KTAP version 1");
    println!("1..{}", results.len());
    for (i, r) in results.iter_mut().enumerate() {
        r.number = i + 1;
        println!("{}", ktap::line(r));
    }
    for d in &job_dirs {
        println!("# results, logs, console and dmesg: {}", d.display());
    }
    for l in &why_failed {
        println!("{l}");
    }
    let report = ktap::Report {
        plan: Some(results.len()),
        results,
    };
    let (p, f, s) = (
        report.count(Status::Pass),
        report.count(Status::Fail) + report.count(Status::Timeout),
        report.count(Status::Skip),
    );
    match (&c_ran, &tiering.whole_why) {
        (Some((ran, of, _)), _) => println!(
            "# --ci: the C driver ran {ran} of {of} tests: its inputs match the recorded stamp {}; the whole run is `cargo xtask selftest`",
            tier::short(tiering.stamp.as_deref().unwrap_or_default())
        ),
        (None, Some(why)) if opts.ci => {
            println!("# --ci: the whole suite ran against every driver: {why}")
        }
        _ => {}
    }
    if opts.save_baseline {
        if f == 0 {
            tier::save_baseline(
                &layout.baseline_times(),
                &recorded,
                tiering.stamp.as_deref(),
                ours_at_start.as_deref().unwrap_or_default(),
            )?;
        } else {
            println!("# --save-baseline: nothing recorded, the run did not pass");
        }
    }
    println!("# total time {}", fmt_duration(run_start.elapsed()));
    println!("selftest: {p} passed, {f} failed, {s} skipped");
    Ok(f == 0)
}

/// What the C driver runs under `--ci` (see tier.rs).
struct Tiering {
    /// `Some`: it runs its share of the suite.
    share: Option<Share>,
    /// The stamp of the C driver's inputs in this run's tree (with `--ci`
    /// or `--save-baseline`).
    stamp: Option<String>,
    /// Why it runs the whole suite under `--ci`.
    whole_why: Option<String>,
}

/// What decides the C driver's share under `--ci`.
struct Share {
    /// Our tests (selftests/ and the harness tests) whose directory
    /// changed since the baseline.
    ours: BTreeSet<String>,
    /// The tests it skipped in the recorded baseline.
    c_skips: BTreeSet<String>,
}

impl Share {
    fn of(&self, suite: &[String], rust: &[TestResult]) -> Vec<(String, tier::Why)> {
        tier::c_share(suite, &self.ours, &self.c_skips, rust)
    }
}

impl Tiering {
    fn decide(
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

    /// What `--list` says of `test` under `--ci`.
    fn list_note(&self, test: &str) -> &'static str {
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

/// The longest timeout that a harness test in `dir` declares for itself
/// (a `# xtask-timeout: N` line, which the guest's runner honours when it
/// is longer than the per-test timeout), 0 if none does.
fn own_timeout(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| l.strip_prefix("# xtask-timeout: ")?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .max()
        .unwrap_or(0)
}

/// The directories of our tests, by the name `OURS_FILE` (tier/times.rs) records.
fn ours_dirs(layout: &Layout) -> Vec<(&'static str, PathBuf)> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_timeouts_of_harness_tests() {
        let dir = std::env::temp_dir().join(format!("xtask-own-timeout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(own_timeout(&dir), 0);
        std::fs::write(dir.join("test_a.sh"), "#!/bin/bash\n# xtask-timeout: 600\n").unwrap();
        std::fs::write(
            dir.join("test_b.sh"),
            "# xtask-timeout: 450\n# xtask-timeout: x\n",
        )
        .unwrap();
        assert_eq!(own_timeout(&dir), 600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn debug_kernel_gets_longer_timeouts() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            opts: SelftestOpts,
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("selftest").chain(args.iter().copied()))
                .unwrap()
                .opts
        };
        let o = parse(&[]);
        assert_eq!((o.test_timeout(), o.timeout(), o.parallel), (300, 4500, 2));
        let o = parse(&["--config", "debug"]);
        assert_eq!((o.test_timeout(), o.timeout()), (900, 10800));
        let o = parse(&["--config", "debug", "--test-timeout", "60"]);
        assert_eq!(o.test_timeout(), 60);
    }

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

    #[test]
    fn boot_verdict() {
        let b = Boot {
            status: Some("0".into()),
            ending: Ending::Exited(Some(0)),
            splats: vec![],
        };
        assert!(!b.failed());
        let b = Boot {
            status: None,
            ending: Ending::Exited(Some(0)),
            splats: vec![],
        };
        assert!(b.failed());
    }
}
