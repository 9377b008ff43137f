//! `bench rust-vs-c`: the Rust driver's IOPS and guest CPU time per I/O
//! against the C driver's, fio 4k randread on kublk's null target in each
//! data mode and at each iodepth of the plan, C and Rust in turn in one
//! boot, C first in odd rounds and Rust first in even ones. Prints (and writes into the job directory) the
//! report of `ratio_report`.

use anyhow::{bail, Context, Result};

use super::mode::DataMode;
use super::plan::{self, Plan};
use super::ratio_report;
use super::Env;
use crate::guest;
use crate::pipeline::KernelOpts;
use crate::progress::{detail, fmt_duration, phase};

/// `cargo xtask bench rust-vs-c`.
#[derive(Clone, Debug, clap::Args)]
pub struct RatioOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
    #[command(flatten)]
    pub repeat: super::Repeat,
    /// The fio iodepths to measure, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,128")]
    pub iodepth: Vec<u32>,
    /// The data modes to measure, comma separated (kublk null target: no
    /// option, -u, -z, --auto_zc, -b).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "copy")]
    pub modes: Vec<DataMode>,
}

/// The report's file in the job directory.
const REPORT: &str = "rust-vs-c.md";

pub fn run(env: &Env, opts: &RatioOpts) -> Result<()> {
    let plan = Plan::new(&opts.iodepth, opts.repeat.rounds, opts.repeat.runtime)?;
    let plan = plan.with_modes(&opts.modes)?;
    let qds: Vec<String> = plan.iodepths.iter().map(u32::to_string).collect();
    let modes: Vec<&str> = plan.modes.iter().map(|m| m.id()).collect();
    phase(format!(
        "benchmark boot (Rust vs C; {} mode; iodepth {}; {} rounds each, {}s per fio run): about {} in all (estimate)",
        modes.join(", "),
        qds.join(", "),
        plan.rounds,
        plan.runtime,
        fmt_duration(plan.estimate(&env.accel))
    ));
    // Booted with no driver: bench.sh loads each one for its own run.
    // Time left after each round: from the first `bench:` line (bench.sh
    // starting, after the boot).
    let (job, _) = super::boot_timed(
        env,
        plan.guest_vars(),
        plan.limit(&env.accel),
        |l, elapsed| match plan::time_left(l, elapsed) {
            Some(left) if !left.is_zero() => {
                detail(format!("{l} (about {} left)", fmt_duration(left)))
            }
            _ => detail(l),
        },
    )?;
    let samples = super::read_samples(&job)?;
    let failures = parse_failures(
        &std::fs::read_to_string(job.dir.join("bench-failures.txt")).unwrap_or_default(),
    );
    let machine = format!("QEMU {}, {} vCPUs", env.accel, guest::CPUS);
    let report = ratio_report::markdown(&samples, &failures, &plan, &machine);
    print!("{report}");
    let written = job.dir.join(REPORT);
    std::fs::write(&written, &report).with_context(|| format!("writing {}", written.display()))?;
    println!();
    println!("raw samples: {}", job.dir.join("bench.csv").display());
    println!("this report: {}", written.display());
    if !failures.is_empty() {
        for f in &failures {
            eprintln!(
                "bench: the {} driver failed at iodepth {}, round {}: {}",
                f.driver, f.iodepth, f.round, f.reason
            );
        }
        bail!(
            "a driver failed to serve I/O (no ratio for it); console and logs: {}",
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
    Ok(())
}

/// A driver that did not serve I/O in one run.
#[derive(Debug, PartialEq)]
pub struct Failure {
    pub driver: String,
    pub iodepth: u32,
    pub round: u32,
    pub reason: String,
}

/// The data mode of a failure: bench.sh starts the reason with `mode: `
/// (copy mode when it does not, as before modes were measured).
pub fn failure_mode(f: &Failure) -> DataMode {
    [
        DataMode::UserCopy,
        DataMode::ZeroCopy,
        DataMode::AutoZc,
        DataMode::Batch,
    ]
    .into_iter()
    .find(|m| f.reason.starts_with(&format!("{}: ", m.id())))
    .unwrap_or(DataMode::Copy)
}

/// Parses bench-failures.txt: `driver|iodepth|round|reason` lines.
pub fn parse_failures(text: &str) -> Vec<Failure> {
    super::samples::failure_lines(text)
        .filter_map(|[driver, iodepth, round, reason]| {
            Some(Failure {
                driver: driver.to_string(),
                iodepth: iodepth.parse().ok()?,
                round: round.parse().ok()?,
                reason: reason.to_string(),
            })
        })
        .collect()
}
