//! `bench rust-vs-c`: the Rust driver's IOPS against the C driver's, fio 4k
//! randread on kublk's null target at each iodepth of the plan, C and Rust
//! alternating round by round in one boot. Prints per iodepth each round's
//! IOPS, the median Rust/C ratio and the spread of the per-round ratios,
//! then a summary over the iodepths.

use anyhow::{bail, Result};

use super::mode::DataMode;
use super::plan::{self, Plan};
use super::samples::{first, kiops, Samples};
use super::stats::{median, spread};
use super::Env;
use crate::markdown;
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
    println!(
        "Measured with `cargo xtask bench rust-vs-c` in one boot: QEMU {}, 2 vCPUs; kublk null target, 1 queue, depth 128, data mode {}; fio 4k randread, io_uring, direct, {}s per run; C and Rust driver alternating, each loaded only for its run.",
        env.accel, modes.join(", "), plan.runtime
    );
    for &mode in &plan.modes {
        for &qd in &plan.iodepths {
            println!();
            print!(
                "{}",
                iodepth_table(&samples, &failures, mode, qd, plan.rounds)
            );
        }
    }
    println!();
    print!("{}", summary(&samples, &plan));
    println!();
    println!("raw samples: {}", job.dir.join("bench.csv").display());
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
fn failure_mode(f: &Failure) -> DataMode {
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

/// What one iodepth measured: IOPS per round of each driver and the
/// per-round ratios (rounds where both drivers have a result).
struct Depth {
    c: Vec<f64>,
    rust: Vec<f64>,
    ratios: Vec<f64>,
}

fn depth(s: &Samples, mode: DataMode, qd: u32, rounds: u32) -> Depth {
    let iops = |drv: &str, r: u32| first(s, "ratio", &mode.sample_key(qd, drv), r);
    let mut d = Depth {
        c: Vec::new(),
        rust: Vec::new(),
        ratios: Vec::new(),
    };
    for r in 1..=rounds {
        let (c, rust) = (iops("c", r), iops("rust", r));
        d.c.extend(c);
        d.rust.extend(rust);
        if let (Some(c), Some(rust)) = (c, rust) {
            if c > 0.0 {
                d.ratios.push(rust / c);
            }
        }
    }
    d
}

fn x(v: f64) -> String {
    format!("{v:.2}x")
}

fn median_or_dash(v: &[f64], f: fn(f64) -> String) -> String {
    if v.is_empty() {
        "-".to_string()
    } else {
        f(median(&mut v.to_vec()))
    }
}

fn spread_or_dash(v: &[f64]) -> String {
    spread(v).map_or("-".to_string(), |(lo, hi)| format!("{}-{}", x(lo), x(hi)))
}

/// One data mode at one iodepth: IOPS per round, the medians, the median
/// of the per-round Rust/C ratios and their spread (smallest to largest).
pub fn iodepth_table(
    s: &Samples,
    failures: &[Failure],
    mode: DataMode,
    qd: u32,
    rounds: u32,
) -> String {
    let iops = |drv: &str, r: u32| first(s, "ratio", &mode.sample_key(qd, drv), r);
    let cell = |drv: &str, r: u32| match iops(drv, r) {
        Some(v) => kiops(v),
        None => match failures.iter().find(|f| f.driver == drv) {
            Some(f) if f.iodepth == qd && f.round == r && failure_mode(f) == mode => {
                "failed".to_string()
            }
            Some(_) => "not run (failed earlier)".to_string(),
            None => "no result".to_string(),
        },
    };
    let what = match mode {
        DataMode::Copy => String::new(),
        m => format!(", {}", m.id()),
    };
    let mut out = markdown::header(&[
        &format!("fio 4k randread, iodepth {qd}, null target{what}"),
        "C (ublk_drv)",
        "Rust (rust_ublk)",
        "Rust/C",
    ]);
    for r in 1..=rounds {
        let ratio = match (iops("c", r), iops("rust", r)) {
            (Some(c), Some(rust)) if c > 0.0 => x(rust / c),
            _ => "-".to_string(),
        };
        out += &markdown::row(&[format!("round {r}"), cell("c", r), cell("rust", r), ratio]);
    }
    let d = depth(s, mode, qd, rounds);
    out += &markdown::row(&[
        format!(
            "median ({} C, {} Rust, {} ratios)",
            d.c.len(),
            d.rust.len(),
            d.ratios.len()
        ),
        median_or_dash(&d.c, kiops),
        median_or_dash(&d.rust, kiops),
        median_or_dash(&d.ratios, x),
    ]);
    out += &markdown::row(&[
        "spread of the per-round ratios",
        "",
        "",
        &spread_or_dash(&d.ratios),
    ]);
    out
}

/// One line per data mode and iodepth: median IOPS of each driver, the
/// median ratio and its spread.
pub fn summary(s: &Samples, plan: &Plan) -> String {
    let mut out = markdown::header(&[
        "data mode",
        "iodepth",
        "C median",
        "Rust median",
        "Rust/C median",
        "Rust/C spread",
        "rounds with both",
    ]);
    for &mode in &plan.modes {
        for &qd in &plan.iodepths {
            let d = depth(s, mode, qd, plan.rounds);
            out += &markdown::row(&[
                mode.id().to_string(),
                qd.to_string(),
                median_or_dash(&d.c, kiops),
                median_or_dash(&d.rust, kiops),
                median_or_dash(&d.ratios, x),
                spread_or_dash(&d.ratios),
                format!("{} of {}", d.ratios.len(), plan.rounds),
            ]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::samples::parse_csv;
    use super::*;

    const CSV: &str = "ratio,qd16/c,1,50000\nratio,qd16/rust,1,40000\n\
                       ratio,qd16/c,2,52000\nratio,qd16/rust,2,39000\n\
                       ratio,qd16/c,3,51000\nratio,qd16/rust,3,41000\n\
                       ratio,qd1/c,1,10000\nratio,qd1/rust,1,12000\n\
                       ratio,qd1/c,2,10000\nratio,qd1/rust,2,9000\n\
                       ratio,qd1/c,3,10000\nratio,qd1/rust,3,10000\n";

    #[test]
    fn per_iodepth() {
        let t = iodepth_table(&parse_csv(CSV), &[], DataMode::Copy, 16, 3);
        assert!(
            t.contains("| fio 4k randread, iodepth 16, null target |"),
            "{t}"
        );
        assert!(t.contains("| round 1 | 50.0K | 40.0K | 0.80x |"), "{t}");
        assert!(
            t.contains("| median (3 C, 3 Rust, 3 ratios) | 51.0K | 40.0K | 0.80x |"),
            "{t}"
        );
        assert!(
            t.contains("| spread of the per-round ratios | | | 0.75x-0.80x |"),
            "{t}"
        );
        let t = iodepth_table(&parse_csv(CSV), &[], DataMode::Copy, 1, 3);
        assert!(
            t.contains("| median (3 C, 3 Rust, 3 ratios) | 10.0K | 10.0K | 1.00x |"),
            "{t}"
        );
        assert!(t.contains("| 0.90x-1.20x |"), "{t}");
    }

    #[test]
    fn summary_over_iodepths() {
        let plan = Plan::new(&[1, 16, 128], 3, 10).unwrap();
        let t = summary(&parse_csv(CSV), &plan);
        assert!(
            t.contains("| copy | 1 | 10.0K | 10.0K | 1.00x | 0.90x-1.20x | 3 of 3 |"),
            "{t}"
        );
        assert!(
            t.contains("| copy | 16 | 51.0K | 40.0K | 0.80x | 0.75x-0.80x | 3 of 3 |"),
            "{t}"
        );
        assert!(t.contains("| copy | 128 | - | - | - | - | 0 of 3 |"), "{t}");
    }

    #[test]
    fn with_a_failed_driver() {
        let csv = "ratio,qd1/c,1,50000\nratio,qd1/rust,1,40000\nratio,qd1/c,2,52000\nratio,qd16/c,1,51000\n";
        let failures = parse_failures("rust|1|2|kublk add -t null failed (see the console)\n");
        assert_eq!(
            failures,
            [Failure {
                driver: "rust".into(),
                iodepth: 1,
                round: 2,
                reason: "kublk add -t null failed (see the console)".into(),
            }]
        );
        let s = parse_csv(csv);
        let t = iodepth_table(&s, &failures, DataMode::Copy, 1, 2);
        assert!(t.contains("| round 1 | 50.0K | 40.0K | 0.80x |"), "{t}");
        assert!(t.contains("| round 2 | 52.0K | failed | - |"), "{t}");
        assert!(
            t.contains("| median (2 C, 1 Rust, 1 ratios) | 51.0K | 40.0K | 0.80x |"),
            "{t}"
        );
        let t = iodepth_table(&s, &failures, DataMode::Copy, 16, 1);
        assert!(
            t.contains("| round 1 | 51.0K | not run (failed earlier) | - |"),
            "{t}"
        );
        assert!(
            t.contains("| spread of the per-round ratios | | | - |"),
            "{t}"
        );
        assert!(parse_failures("rust|x|1|why\nrust|1|why\n").is_empty());
    }

    #[test]
    fn per_data_mode() {
        let csv = "ratio,zero_copy/qd16/c,1,30000\nratio,zero_copy/qd16/rust,1,27000\nratio,qd16/c,1,50000\n";
        let failures = parse_failures("rust|16|1|zero_copy: fio failed\n");
        let s = parse_csv(csv);
        let t = iodepth_table(&s, &failures, DataMode::ZeroCopy, 16, 1);
        assert!(
            t.contains("| fio 4k randread, iodepth 16, null target, zero_copy |"),
            "{t}"
        );
        assert!(t.contains("| round 1 | 30.0K | 27.0K | 0.90x |"), "{t}");
        // The failure was in zero-copy mode: copy mode's Rust run did not
        // happen after it.
        let t = iodepth_table(&s, &failures, DataMode::Copy, 16, 1);
        assert!(
            t.contains("| round 1 | 50.0K | not run (failed earlier) | - |"),
            "{t}"
        );
        let plan = Plan::new(&[16], 1, 10)
            .unwrap()
            .with_modes(&[DataMode::Copy, DataMode::ZeroCopy])
            .unwrap();
        let t = summary(&s, &plan);
        assert!(
            t.contains("| zero_copy | 16 | 30.0K | 27.0K | 0.90x |"),
            "{t}"
        );
    }
}
