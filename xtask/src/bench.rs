//! `cargo xtask bench`: numbers from one benchmark boot, never a timed
//! assertion. By default the measurements of the C series' cover letter
//! (`cover`); with `--rust-vs-c` the Rust driver's IOPS against the C
//! driver's (`ratio`). This file holds the options and the boot both share.

mod cover;
mod plan;
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

#[derive(Clone, Debug, clap::Args)]
pub struct BenchOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
    /// Rounds per configuration, alternating inside each round [default:
    /// 3; 5 with --rust-vs-c].
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Seconds per fio run.
    #[arg(long, default_value_t = 10)]
    pub runtime: u32,
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
    /// With --rust-vs-c: the fio iodepths to measure, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,16,128",
        requires = "rust_vs_c"
    )]
    pub iodepth: Vec<u32>,
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
    if opts.rust_vs_c {
        ratio::run(&env, opts)
    } else {
        cover::run(&env, opts)
    }
}

/// One benchmark boot running `bench.sh` with `vars` in its job.env; the
/// console's `bench:` lines go to `on_line`. Fails if the guest had to be
/// killed or the kernel logged a splat; the samples are in the returned
/// job's directory (`bench.csv`).
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
    }
}
