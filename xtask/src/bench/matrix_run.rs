//! `bench matrix`: the C and Rust ublk drivers against the in-kernel null
//! drivers (null_blk, rnull) over rw x iodepth x queue count, in one boot
//! with alternating rounds. Prints the estimate before the boot and a line
//! per cell during it; writes the markdown report, the CSV and the SVG plot
//! into a new directory under target/bench/ (`matrix-latest` points at it)
//! and prints the report.

use anyhow::{bail, Context, Result};
use std::time::{Instant, SystemTime};

use super::matrix::Plan;
use super::matrix_progress;
use super::matrix_report::{self, RunInfo};
use super::{outdir, plot, BlkDriver, Env};
use crate::guest::{self, Accel};
use crate::pipeline::KernelOpts;
use crate::progress::{detail, fmt_duration, phase};

/// `cargo xtask bench matrix`.
#[derive(Clone, Debug, clap::Args)]
pub struct MatrixOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
    /// Rounds: every cell once per round, in the order of the round.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Seconds per fio run (short enough that the default matrix, 42
    /// cells, 5 rounds, stays under 30 minutes under TCG).
    #[arg(long, default_value_t = 4)]
    pub runtime: u32,
    /// The drivers, comma separated: c and rust as in selftest's and vm's
    /// --driver, plus the in-kernel null_blk and rnull; default all four,
    /// because the matrix is their comparison.
    #[arg(
        long = "driver",
        value_name = "DRIVER,...",
        value_enum,
        value_delimiter = ',',
        default_value = "c,rust,null_blk,rnull"
    )]
    pub drivers: Vec<BlkDriver>,
    /// The fio iodepths, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,128")]
    pub iodepth: Vec<u32>,
    /// The hardware queue counts, comma separated (at most the guest's 2
    /// CPUs).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub queues: Vec<u32>,
    /// No boot: write the report, CSV and plot of an earlier run again
    /// from its directory's samples.csv (with the options that run had),
    /// e.g. after the report gained a column.
    #[arg(long, value_name = "DIR")]
    pub report_from: Option<std::path::PathBuf>,
}

/// The files of a run's directory.
const REPORT: &str = "matrix.md";
const CSV: &str = "matrix.csv";
const PLOT: &str = "matrix.svg";
const SAMPLES: &str = "samples.csv";

/// The plan of a run with `opts`.
fn plan(opts: &MatrixOpts) -> Result<Plan> {
    Plan::new(
        &opts.drivers,
        &opts.iodepth,
        &opts.queues,
        opts.rounds,
        opts.runtime,
    )
}

/// `--report-from DIR`: the report, CSV and plot of the run saved in
/// `dir`, written again there from its samples, with the current report
/// code. The run's machine and date come from its old report.
pub fn report_from(opts: &MatrixOpts, dir: &std::path::Path) -> Result<()> {
    let plan = plan(opts)?;
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .with_context(|| format!("reading {}", dir.join(name).display()))
    };
    let samples = super::samples::parse_csv(&read(SAMPLES)?);
    let info = run_info(&read(REPORT)?).with_context(|| {
        format!(
            "{}: no 'in one boot on <machine>, <date>; <n> rounds.' line",
            dir.join(REPORT).display()
        )
    })?;
    // A saved run keeps no failure list: the guest's job directory had it.
    let stats = matrix_report::collect(&samples, &plan, &[]);
    let report = matrix_report::markdown(&stats, &plan, &info, &[], PLOT);
    let title = format!(
        "ublk drivers vs in-kernel null drivers: fio 4k, {} rounds of {} s, {}, {}",
        plan.rounds(),
        plan.runtime(),
        info.machine,
        info.date
    );
    let svg = plot::svg(&stats, &plan, &title)?;
    for (name, text) in [
        (REPORT, &report),
        (CSV, &matrix_report::csv(&stats, &plan)),
        (PLOT, &svg),
    ] {
        std::fs::write(dir.join(name), text)
            .with_context(|| format!("writing {}", dir.join(name).display()))?;
    }
    println!("{report}");
    println!("written again: {} ({REPORT}, {CSV}, {PLOT})", dir.display());
    Ok(())
}

/// The machine and date of a run, from its report's first line.
fn run_info(report: &str) -> Option<RunInfo> {
    let rest = report.split("in one boot on ").nth(1)?;
    let (head, _) = rest.split_once(" rounds.")?;
    let (machine_date, _) = head.rsplit_once("; ")?;
    let (machine, date) = machine_date.rsplit_once(", ")?;
    Some(RunInfo {
        machine: machine.to_string(),
        date: date.to_string(),
    })
}

pub fn run(env: &Env, opts: &MatrixOpts) -> Result<()> {
    let started = Instant::now();
    let plan = plan(opts)?;
    let ids: Vec<&str> = plan.drivers.iter().map(|d| d.id()).collect();
    let qds: Vec<String> = plan.base.iodepths.iter().map(u32::to_string).collect();
    let qs: Vec<String> = plan.queues.iter().map(u32::to_string).collect();
    phase(format!(
        "benchmark boot (driver matrix: {}; randread and randwrite; iodepth {}; queues {}; {} rounds, {} s per fio run)",
        ids.join(", "),
        qds.join(", "),
        qs.join(", "),
        plan.rounds(),
        plan.runtime()
    ));
    phase(format!("estimate: {}", plan.estimate_text(&env.accel)));
    if !plan.unsupported.is_empty() {
        detail(format!(
            "not run: {} cells (rnull has one hardware queue in 7.3; see the report's notes)",
            plan.unsupported.len()
        ));
    }
    // Booted with no driver: the guest loads each one for its block.
    let (job, bench_start) = super::boot_timed(
        env,
        plan.guest_vars(),
        plan.limit(&env.accel),
        |l, elapsed| match matrix_progress::parse(l) {
            Some(c) => detail(matrix_progress::format(
                &c,
                plan.rounds(),
                started.elapsed(),
                matrix_progress::time_left(&c, elapsed),
            )),
            None => detail(l),
        },
    )?;
    if let Some(start) = bench_start {
        let runs = plan.total_runs();
        let spent = start.elapsed();
        detail(format!(
            "the cells took {} in all: {:.1} s per cell run, {} s of it fio (the estimate assumed {:.1} s)",
            fmt_duration(spent),
            spent.as_secs_f64() / f64::from(runs),
            plan.runtime(),
            plan.per_run_estimate(&env.accel).as_secs_f64()
        ));
    }

    let samples = super::read_samples(&job)?;
    let failures = matrix_report::parse_failures(
        &std::fs::read_to_string(job.dir.join("matrix-failures.txt")).unwrap_or_default(),
    );
    let stats = matrix_report::collect(&samples, &plan, &failures);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (stamp, date) = outdir::utc(now);
    let info = RunInfo {
        machine: format!("QEMU {}, {} vCPUs", env.accel, guest::CPUS),
        date: date.clone(),
    };
    let report = matrix_report::markdown(&stats, &plan, &info, &failures, PLOT);
    let title = format!(
        "ublk drivers vs in-kernel null drivers: fio 4k, {} rounds of {} s, QEMU {} ({} vCPUs), {date}",
        plan.rounds(),
        plan.runtime(),
        match env.accel {
            Accel::Kvm => "KVM",
            Accel::Tcg { .. } => "TCG",
        },
        guest::CPUS
    );
    let svg = plot::svg(&stats, &plan, &title)?;

    let saved = outdir::save(
        &env.layout.bench_results(),
        "matrix",
        &stamp,
        &[
            (REPORT, &report),
            (CSV, &matrix_report::csv(&stats, &plan)),
            (PLOT, &svg),
        ],
        &job.dir.join("bench.csv"),
        SAMPLES,
    )?;
    let (dir, latest) = (saved.dir, saved.latest);

    println!("{report}");
    println!(
        "written: {} ({REPORT}, {CSV}, {PLOT}; {SAMPLES}: every sample of the guest); {} points at it",
        dir.display(),
        latest.display()
    );
    println!("guest job (console, dmesg): {}", job.dir.display());

    if !failures.is_empty() {
        bail!(
            "{} driver failure(s) (see the report's notes); console and logs: {}",
            failures.len(),
            job.dir.display()
        );
    }
    if job.status().as_deref() != Some("0") {
        bail!(
            "the benchmark guest ended with status {:?}; see {}",
            job.status(),
            job.dir.display()
        );
    }
    let missing: Vec<String> = stats
        .iter()
        .filter(|s| s.iops.len() < plan.rounds() as usize)
        .map(|s| s.cell.key())
        .collect();
    if !missing.is_empty() {
        bail!(
            "cells without a result in every round: {} (console: {})",
            missing.join(", "),
            job.console().display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_info_from_a_report() {
        let md = "## ublk drivers against the in-kernel null drivers\n\nMeasured with `cargo xtask bench matrix` in one boot on QEMU TCG (software emulation: no vmx/svm in /proc/cpuinfo), 2 vCPUs, 2026-12-06 18:45 UTC; 7 rounds.\n\n- fio";
        let i = run_info(md).unwrap();
        assert_eq!(
            i.machine,
            "QEMU TCG (software emulation: no vmx/svm in /proc/cpuinfo), 2 vCPUs"
        );
        assert_eq!(i.date, "2026-12-06 18:45 UTC");
        assert!(run_info("no such line").is_none());
    }
}
