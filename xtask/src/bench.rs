//! `cargo xtask bench`: numbers from one benchmark boot, never a timed
//! assertion. By default the measurements of the C series' cover letter
//! (`cover`); with `--rust-vs-c` the Rust driver's IOPS against the C
//! driver's (`ratio`); with `--matrix` both ublk drivers and the in-kernel
//! null drivers over rw, iodepth and queue count (`matrix_run`). This file
//! holds the options and the boot they share.

mod cover;
mod matrix;
mod matrix_progress;
mod matrix_report;
mod matrix_run;
mod mode;
mod outdir;
mod plan;
mod plot;
mod ratio;
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
pub use mode::DataMode;

/// Seconds per fio run unless --runtime says otherwise (not --matrix).
pub const DEFAULT_RUNTIME: u32 = 10;

#[derive(Clone, Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("fio_mode").args(["rust_vs_c", "matrix"]).multiple(true)))]
pub struct BenchOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
    /// Rounds per configuration, alternating inside each round [default:
    /// 3; 5 with --rust-vs-c or --matrix].
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Seconds per fio run [default: 10; 4 with --matrix].
    #[arg(long)]
    pub runtime: Option<u32>,
    /// Devices added per round for the START_DEV measurement.
    #[arg(long, default_value_t = 64)]
    pub devices: u32,
    /// kublk option that requests UBLK_F_SUPPORT_RQ_AFFINITY.
    #[arg(long, default_value = "--rq_affinity")]
    pub flag_option: String,
    /// Instead: the Rust driver's IOPS against the C driver's (fio 4k
    /// randread on the null target, each --iodepth in turn), alternating
    /// in one boot.
    #[arg(long)]
    pub rust_vs_c: bool,
    /// Instead: the driver matrix. C ublk, Rust ublk, null_blk and rnull;
    /// fio 4k randread and randwrite at each --iodepth and each --queues,
    /// every cell once per round, in one boot. Writes a markdown report, a
    /// CSV and an SVG plot under target/bench/.
    #[arg(long)]
    pub matrix: bool,
    /// With --rust-vs-c or --matrix: the fio iodepths to measure, comma
    /// separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,16,128",
        requires = "fio_mode"
    )]
    pub iodepth: Vec<u32>,
    /// With --rust-vs-c: the data modes to measure, comma separated (kublk
    /// null target: no option, -u, -z, --auto_zc).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "copy",
        requires = "rust_vs_c"
    )]
    pub modes: Vec<DataMode>,
    /// With --matrix: the drivers, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "c,rust,null_blk,rnull",
        requires = "matrix"
    )]
    pub drivers: Vec<BlkDriver>,
    /// Instead of a boot: print the cover letter's tables from the
    /// samples (bench.csv) of an earlier run, e.g. one that a kernel splat
    /// cut short.
    #[arg(long, value_name = "BENCH_CSV", conflicts_with = "fio_mode")]
    pub report: Option<std::path::PathBuf>,
    /// With --matrix: the hardware queue counts, comma separated (at most
    /// the guest's 2 CPUs).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2",
        requires = "matrix"
    )]
    pub queues: Vec<u32>,
}

/// What every benchmark boot needs: the built kernel and guest userspace,
/// and the accelerator QEMU will use.
pub struct Env {
    pub layout: Layout,
    pub kernel: Outputs,
    pub userland: Userland,
    pub accel: Accel,
}

/// What clap cannot say: --rust-vs-c and --matrix are two different runs.
/// (A clap conflict between them would let `--rust-vs-c --queues 1` pass,
/// as clap counts a conflicting argument as meeting `requires`.)
fn check(opts: &BenchOpts) -> Result<()> {
    if opts.rust_vs_c && opts.matrix {
        bail!("--rust-vs-c and --matrix are separate runs: give one of them");
    }
    Ok(())
}

pub fn run(opts: &BenchOpts) -> Result<()> {
    check(opts)?;
    if let Some(csv) = &opts.report {
        let text =
            std::fs::read_to_string(csv).with_context(|| format!("reading {}", csv.display()))?;
        print!("{}", cover::table(&samples::parse_csv(&text)));
        return Ok(());
    }
    let layout = pipeline::layout(&opts.kernel)?;
    let kernel = pipeline::ensure_kernel(&layout, &opts.kernel)?;
    let userland = userland::ensure(&layout, &kernel)?;
    let accel = guest::accel::probe();
    phase(format!("QEMU accelerator: {accel}"));
    let env = Env {
        layout,
        kernel,
        userland,
        accel,
    };
    if opts.matrix {
        matrix_run::run(&env, opts)
    } else if opts.rust_vs_c {
        ratio::run(&env, opts)
    } else {
        cover::run(&env, opts)
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

    fn parse(args: &[&str]) -> Result<BenchOpts, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
    }

    #[test]
    fn options() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.rounds, o.rust_vs_c), (None, false));
        let o = parse(&["--rust-vs-c"]).unwrap();
        assert_eq!(o.iodepth, [1, 16, 128]);
        let o = parse(&["--rust-vs-c", "--iodepth", "32,4", "--rounds", "2"]).unwrap();
        assert_eq!((o.iodepth, o.rounds), (vec![32, 4], Some(2)));
        assert!(
            parse(&["--iodepth", "4"]).is_err(),
            "--iodepth needs --rust-vs-c"
        );
        assert!(parse(&["--rust-vs-c", "--iodepth", "4,x"]).is_err());
        assert_eq!(o.runtime, None);
        assert_eq!(parse(&["--runtime", "3"]).unwrap().runtime, Some(3));
    }

    #[test]
    fn matrix_options() {
        let o = parse(&["--matrix"]).unwrap();
        assert!(o.matrix && !o.rust_vs_c);
        assert_eq!(o.iodepth, [1, 16, 128]);
        assert_eq!(o.drivers, BlkDriver::ALL);
        assert_eq!(o.queues, [1, 2]);
        let o = parse(&[
            "--matrix",
            "--drivers",
            "rust,null_blk",
            "--queues",
            "2",
            "--iodepth",
            "8",
            "--runtime",
            "6",
        ])
        .unwrap();
        assert_eq!(o.drivers, [BlkDriver::Rust, BlkDriver::NullBlk]);
        assert_eq!(
            (o.queues, o.iodepth, o.runtime),
            (vec![2], vec![8], Some(6))
        );
        assert!(check(&parse(&["--matrix", "--rust-vs-c"]).unwrap()).is_err());
        assert!(check(&parse(&["--matrix"]).unwrap()).is_ok());
        assert!(parse(&["--matrix", "--drivers", "nvme"]).is_err());
        assert!(
            parse(&["--drivers", "c"]).is_err(),
            "--drivers needs --matrix"
        );
        assert!(
            parse(&["--queues", "1"]).is_err(),
            "--queues needs --matrix"
        );
        assert!(parse(&["--rust-vs-c", "--queues", "1"]).is_err());
    }
}
