//! `cargo xtask selftest`: the upstream ublk selftests plus ours, in QEMU,
//! against the C and/or the Rust driver, reported as KTAP.
//!
//! This file holds the options and the run in order; in `selftest/`:
//! `select.rs` (the test list, `--quick`, `--filter`, `--list`), `ci.rs`
//! (what `--ci` does in this run), `boot.rs` (a boot, its echo, the
//! self-checks), `suite.rs` (the suite boots, one per driver),
//! `verdict.rs` (a boot's results), `report.rs` (the KTAP and counts).

mod boot;
mod ci;
mod kunit;
mod report;
mod select;
mod suite;
mod verdict;

use anyhow::{bail, Result};
use regex::Regex;
use std::time::Instant;

use crate::guest;
use crate::guest::job::{self, Driver};
use crate::kbuild::Outputs;
use crate::ktap::{self, TestResult};
use crate::pipeline::{self, KernelOpts};
use crate::progress::{detail, fmt_duration, phase};
use crate::tier;
use crate::userland;
use boot::{harness_check, Ctx};
use select::Plan;

pub use boot::boot_splats;
pub use select::{HARNESS_PANIC, HARNESS_WARN};

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
    /// The ublk driver: c (the C ublk_drv), rust (the Rust one, as the module
    /// ublk_drv of modroot-rust), or both, one boot each with every selected
    /// test; default both, because the suite is meant to pass on both
    /// drivers.
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
    /// plus the boots; the list is `QUICK` in xtask/src/selftest/select.rs).
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

pub fn run(opts: &SelftestOpts) -> Result<bool> {
    let run_start = Instant::now();
    let layout = pipeline::layout(&opts.kernel)?;
    let filters = filters(opts)?;
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
        Some(tier::ours_hashes(&ci::ours_dirs(&layout))?)
    } else {
        None
    };
    if selected.is_empty() {
        bail!("no test matches the given --filter/--quick selection");
    }
    let drivers = drivers(opts);
    check_modules(&kernel, &drivers)?;
    let accel = guest::accel::probe();
    phase(format!("QEMU accelerator: {accel}"));
    job::prune(&layout.runs(), 12);

    let ctx = Ctx {
        layout: &layout,
        kernel: &kernel,
        userland: &userland,
        accel: &accel,
    };
    let mut results = harness_checks(&ctx, &selected)?;
    let suite: Vec<String> = selected
        .iter()
        .filter(|t| !t.starts_with("harness_"))
        .cloned()
        .collect();
    let boots = suite::run(&ctx, opts, &drivers, &tiering, &suite, run_start)?;
    results.extend(boots.results);
    if let Some(c) = &boots.c_ran {
        results.extend(c.left_out_results(&suite::prefix(&drivers, Driver::C), &tiering));
    }
    let counts = report::print(results, &boots.job_dirs, &boots.why_failed);
    tiering.note(opts, boots.c_ran.as_ref());
    if opts.save_baseline {
        if counts.fail == 0 {
            tier::save_baseline(
                &layout.baseline_times(),
                &boots.recorded,
                tiering.stamp.as_deref(),
                ours_at_start.as_deref().unwrap_or_default(),
            )?;
        } else {
            println!("# --save-baseline: nothing recorded, the run did not pass");
        }
    }
    println!("# total time {}", fmt_duration(run_start.elapsed()));
    report::summary(&counts);
    Ok(counts.fail == 0)
}

/// The `--filter` regexes.
fn filters(opts: &SelftestOpts) -> Result<Vec<Regex>> {
    opts.filters
        .iter()
        .map(|f| Regex::new(f).map_err(|e| anyhow::anyhow!("--filter {f:?}: {e}")))
        .collect()
}

/// The drivers to boot, in order.
fn drivers(opts: &SelftestOpts) -> Vec<Driver> {
    match opts.driver {
        DriverChoice::C => vec![Driver::C],
        DriverChoice::Rust => vec![Driver::Rust],
        // `--ci`: the C driver's tests depend on what the Rust driver passed.
        DriverChoice::Both if opts.ci => vec![Driver::Rust, Driver::C],
        DriverChoice::Both => vec![Driver::C, Driver::Rust],
    }
}

/// Checks that the kernel built the module of each driver, in the module
/// tree its boot uses.
fn check_modules(kernel: &Outputs, drivers: &[Driver]) -> Result<()> {
    for d in drivers {
        let m = d.module(false).unwrap();
        let tree = d.modroot(false, kernel);
        let mut found = Vec::new();
        crate::kbuild::collect_ko(&tree.join("lib/modules").join(&kernel.release), &mut found);
        if !found.iter().any(|p| p.file_stem().is_some_and(|s| s == m)) {
            bail!(
                "{m}.ko was not built in {}: the {} driver is not in this kernel",
                tree.display(),
                d.name()
            );
        }
    }
    Ok(())
}

/// The harness self-checks that `selected` has, one boot each.
fn harness_checks(ctx: &Ctx, selected: &[String]) -> Result<Vec<TestResult>> {
    let mut results = Vec::new();
    for h in [HARNESS_PANIC, HARNESS_WARN] {
        if selected.iter().any(|t| t == h) {
            phase(format!("harness self-check {h}"));
            let r = harness_check(ctx, h)?;
            detail(ktap::line(&r));
            results.push(r);
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
