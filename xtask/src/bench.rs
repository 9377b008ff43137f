//! `cargo xtask bench`: numbers from one benchmark boot, never a timed
//! assertion. `bench cover`: the measurements of the C series' cover
//! letter (`cover`); `bench rust-vs-c`: the Rust driver's IOPS and guest CPU
//! time per I/O against the C driver's (`ratio`); `bench matrix`: both ublk drivers and the
//! in-kernel null drivers over rw, iodepth and queue count (`matrix_run`);
//! `bench affinity`: UBLK_F_SUPPORT_RQ_AFFINITY with a CPU-bound ublk
//! server (`affinity_run`);
//! `bench report`: `cover`'s tables from an earlier run's samples. This
//! file holds the subcommands and the boot they share; each run's options
//! are in its module.

mod affinity;
mod affinity_plot;
mod affinity_report;
mod affinity_run;
mod cover;
mod cpu;
mod matrix;
mod matrix_progress;
mod matrix_report;
mod matrix_run;
mod mode;
mod outdir;
mod plan;
mod plot;
mod ratio;
mod ratio_report;
mod samples;
mod stats;

use anyhow::{bail, Context, Result};
use std::time::Duration;

use crate::guest::job::{self, Driver, Job, Mode};
use crate::guest::{self, Accel, Ending, Guest, Limits};
use crate::kbuild::Outputs;
use crate::layout::Layout;
use crate::pipeline::{self, KernelOpts};
use crate::progress::{detail, fmt_duration, phase};
use crate::userland::{self, Userland};

pub use matrix::BlkDriver;

/// Seconds per fio run of `cover` and `rust-vs-c` unless --runtime says
/// otherwise.
pub const DEFAULT_RUNTIME: u32 = 10;

/// How often and how long `cover` and `rust-vs-c` run fio.
#[derive(Clone, Debug, clap::Args)]
pub struct Repeat {
    /// Rounds: each configuration once per round, alternating inside
    /// each round.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Seconds per fio run.
    #[arg(long, default_value_t = DEFAULT_RUNTIME)]
    pub runtime: u32,
}

#[derive(Clone, Debug, clap::Args)]
pub struct BenchOpts {
    #[command(subcommand)]
    pub run: BenchCmd,
}

/// The benchmark runs: each is one boot of its own (`report`: none).
#[derive(Clone, Debug, clap::Subcommand)]
pub enum BenchCmd {
    /// What the C series' cover letter claims: scheduler default,
    /// rq_affinity, START_DEV time (markdown tables).
    Cover(cover::CoverOpts),
    /// The Rust driver's IOPS and guest CPU time per I/O against the C
    /// driver's: fio 4k randread on kublk's null target in each --modes
    /// data mode at each --iodepth, alternating in one boot.
    RustVsC(ratio::RatioOpts),
    /// The driver matrix: C ublk, Rust ublk, null_blk and rnull; fio 4k
    /// randread and randwrite at each --iodepth and each --queues, every
    /// cell once per round, in one boot. Writes a markdown report, a CSV
    /// and an SVG plot under target/bench/.
    Matrix(matrix_run::MatrixOpts),
    /// UBLK_F_SUPPORT_RQ_AFFINITY's benefit and cost: a ublk server whose
    /// CPU is the bottleneck (kublk null --busy_ns, pinned to the last
    /// CPU, fio on the others), flag off and on over rq_affinity and
    /// iodepth, and a sweep of the server's CPU cost per I/O for the
    /// crossover, in one boot. Writes a markdown report, a CSV and an SVG
    /// plot under target/bench/.
    Affinity(affinity::AffinityOpts),
    /// No boot: print `cover`'s tables from the samples (bench.csv) of an
    /// earlier run, e.g. one that a kernel splat cut short.
    Report {
        /// The run's bench.csv (in its job directory).
        #[arg(value_name = "BENCH_CSV")]
        csv: std::path::PathBuf,
    },
}

/// What every benchmark boot needs: the built kernel and guest userspace,
/// and the accelerator QEMU will use.
pub struct Env {
    pub layout: Layout,
    pub kernel: Outputs,
    pub userland: Userland,
    pub accel: Accel,
}

pub fn run(opts: &BenchOpts) -> Result<()> {
    let kernel = match &opts.run {
        BenchCmd::Report { csv } => {
            let text = std::fs::read_to_string(csv)
                .with_context(|| format!("reading {}", csv.display()))?;
            print!("{}", cover::table(&samples::parse_csv(&text)));
            return Ok(());
        }
        BenchCmd::Matrix(o) if o.report_from.is_some() => {
            let dir = o
                .report_from
                .as_deref()
                .unwrap_or(std::path::Path::new("."));
            return matrix_run::report_from(o, dir);
        }
        BenchCmd::Cover(o) => &o.kernel,
        BenchCmd::RustVsC(o) => &o.kernel,
        BenchCmd::Matrix(o) => &o.kernel,
        BenchCmd::Affinity(o) => &o.kernel,
    };
    let env = Env::new(kernel)?;
    match &opts.run {
        BenchCmd::Cover(o) => cover::run(&env, o),
        BenchCmd::RustVsC(o) => ratio::run(&env, o),
        BenchCmd::Matrix(o) => matrix_run::run(&env, o),
        BenchCmd::Affinity(o) => affinity_run::run(&env, o),
        BenchCmd::Report { .. } => unreachable!("handled above"),
    }
}

impl Env {
    /// Builds what is stale and probes the accelerator.
    fn new(opts: &KernelOpts) -> Result<Env> {
        let layout = pipeline::layout(opts)?;
        let kernel = pipeline::ensure_kernel(&layout, opts)?;
        let userland = userland::ensure(&layout, &kernel)?;
        let accel = guest::accel::probe();
        phase(format!("QEMU accelerator: {accel}"));
        Ok(Env {
            layout,
            kernel,
            userland,
            accel,
        })
    }
}

/// One benchmark boot running `bench.sh` with `vars` in its job.env; the
/// console's `bench:` lines go to `on_line`. Fails if the guest had to be
/// killed or the kernel logged a splat; the samples are in the returned
/// job's directory (`bench.csv`).
/// A benchmark boot with no driver loaded (the guest script loads each
/// one itself): `on_line` gets each guest line and the time since the
/// first one, the script starting after the boot; returns the job and when
/// that first line came.
pub fn boot_timed(
    env: &Env,
    vars: Vec<(String, String)>,
    total: Duration,
    mut on_line: impl FnMut(&str, Duration),
) -> Result<(Job, Option<std::time::Instant>)> {
    let mut start: Option<std::time::Instant> = None;
    let job = boot(env, Driver::None, vars, total, |l| {
        let s = *start.get_or_insert_with(std::time::Instant::now);
        on_line(l, s.elapsed());
    })?;
    Ok((job, start))
}

pub fn boot(
    env: &Env,
    driver: Driver,
    vars: Vec<(String, String)>,
    total: Duration,
    on_line: impl FnMut(&str),
) -> Result<Job> {
    boot_sized(env, driver, vars, total, guest::Size::default(), on_line)
}

/// [`boot`] with a guest of `size`.
pub fn boot_sized(
    env: &Env,
    driver: Driver,
    vars: Vec<(String, String)>,
    total: Duration,
    size: guest::Size,
    mut on_line: impl FnMut(&str),
) -> Result<Job> {
    let job = job::create(
        &env.layout,
        "bench",
        &env.kernel,
        &env.userland,
        driver,
        &Mode::Bench(vars),
    )?;
    let g = Guest {
        kernel: &env.kernel,
        job: &job,
        accel: &env.accel,
        size,
    };
    // Every guest step has its own timeout; this only bounds a wedged guest.
    let limits = Limits { total, stall: None };
    let outcome = guest::run_watched(g.command(), &limits, &job.console(), |l| {
        if l.starts_with("bench:") {
            on_line(l);
        }
    })?;
    detail(format!(
        "guest finished in {}",
        fmt_duration(outcome.elapsed)
    ));
    if let Ending::Killed(why) = outcome.ending {
        bail!("benchmark guest killed: {why}");
    }
    let splats = crate::selftest::boot_splats(&job);
    if !splats.is_empty() {
        bail!(
            "kernel splats during the benchmark: {:?}; see {}",
            splats,
            job.dir.display()
        );
    }
    if let Some(why) = job.not_started() {
        bail!("{why}; console in {}", job.console().display());
    }
    Ok(job)
}

/// The samples the guest wrote.
pub fn read_samples(job: &Job) -> Result<samples::Samples> {
    let csv = std::fs::read_to_string(job.dir.join("bench.csv"))
        .context("no bench.csv from the guest")?;
    Ok(samples::parse_csv(&csv))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchOpts,
    }

    fn parse(args: &[&str]) -> Result<BenchCmd, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .map(|c| c.bench.run)
    }

    #[test]
    fn cover_options() {
        let Ok(BenchCmd::Cover(o)) = parse(&["cover"]) else {
            panic!("cover")
        };
        assert_eq!((o.repeat.rounds, o.repeat.runtime, o.devices), (5, 10, 64));
        let Ok(BenchCmd::Cover(o)) = parse(&["cover", "--runtime", "3"]) else {
            panic!("cover --runtime")
        };
        assert_eq!(o.repeat.runtime, 3);
        assert!(parse(&[]).is_err(), "a run must be named");
        assert!(parse(&["cover", "--iodepth", "4"]).is_err());
    }

    #[test]
    fn rust_vs_c_options() {
        let Ok(BenchCmd::RustVsC(o)) = parse(&["rust-vs-c"]) else {
            panic!("rust-vs-c")
        };
        assert_eq!(
            (o.iodepth, o.repeat.rounds, o.repeat.runtime),
            (vec![1, 16, 128], 5, 10)
        );
        assert_eq!(o.modes, [mode::DataMode::Copy]);
        let Ok(BenchCmd::RustVsC(o)) = parse(&["rust-vs-c", "--iodepth", "32,4", "--rounds", "2"])
        else {
            panic!("rust-vs-c --iodepth")
        };
        assert_eq!((o.iodepth, o.repeat.rounds), (vec![32, 4], 2));
        assert!(parse(&["rust-vs-c", "--iodepth", "4,x"]).is_err());
        assert!(parse(&["rust-vs-c", "--queues", "1"]).is_err());
        assert!(parse(&["rust-vs-c", "--driver", "c"]).is_err());
    }

    #[test]
    fn matrix_options() {
        let Ok(BenchCmd::Matrix(o)) = parse(&["matrix"]) else {
            panic!("matrix")
        };
        assert_eq!(o.iodepth, [1, 16, 128]);
        assert_eq!(o.drivers, BlkDriver::ALL);
        assert_eq!((o.queues, o.rounds, o.runtime), (vec![1, 2], 5, 4));
        let Ok(BenchCmd::Matrix(o)) = parse(&[
            "matrix",
            "--driver",
            "rust,null_blk",
            "--queues",
            "2",
            "--iodepth",
            "8",
            "--runtime",
            "6",
        ]) else {
            panic!("matrix options")
        };
        assert_eq!(o.drivers, [BlkDriver::Rust, BlkDriver::NullBlk]);
        assert_eq!((o.queues, o.iodepth, o.runtime), (vec![2], vec![8], 6));
        assert!(parse(&["matrix", "--driver", "nvme"]).is_err());
        assert!(parse(&["matrix", "--modes", "copy"]).is_err());
    }

    #[test]
    fn report_takes_a_file() {
        let Ok(BenchCmd::Report { csv }) = parse(&["report", "x/bench.csv"]) else {
            panic!("report")
        };
        assert_eq!(csv, std::path::Path::new("x/bench.csv"));
        assert!(parse(&["report"]).is_err());
    }
}
