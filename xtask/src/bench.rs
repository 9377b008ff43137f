//! `cargo xtask bench`: the measurements of the C series' cover letter, in
//! one boot, printed as a markdown table; with `--rust-vs-c`, the Rust
//! driver's IOPS against the C driver's instead. A command that prints
//! numbers, never a timed assertion.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::guest::job::{self, Driver, Mode};
use crate::guest::{self, Ending, Guest, Limits};
use crate::kbuild::Outputs;
use crate::layout::Layout;
use crate::pipeline::{self, KernelOpts};
use crate::progress::{detail, fmt_duration, phase};
use crate::userland;

#[derive(Clone, Debug, clap::Args)]
pub struct BenchOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
    /// Rounds per configuration (alternating inside each round).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
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
    /// randread, iodepth 16, null target), alternating in one boot.
    #[arg(long)]
    pub rust_vs_c: bool,
}

/// Builds ublk_drv.ko from the pristine `base` source against the built
/// kernel, as the "unpatched" side of the START_DEV comparison.
fn base_module(layout: &Layout, kernel: &Outputs, opts: &KernelOpts) -> Result<PathBuf> {
    let dir = layout.userland().join("ublk-base");
    std::fs::create_dir_all(&dir)?;
    let src = Command::new("git")
        .current_dir(layout.tree())
        .args(["show", "base:drivers/block/ublk_drv.c"])
        .output()?;
    if !src.status.success() {
        bail!("cannot read drivers/block/ublk_drv.c at base");
    }
    let c = dir.join("ublk_drv.c");
    if std::fs::read(&c).ok().as_deref() != Some(&src.stdout[..]) {
        std::fs::write(&c, &src.stdout)?;
    }
    std::fs::write(dir.join("Makefile"), "obj-m := ublk_drv.o\n")?;
    phase("building the unpatched 7.3.4 ublk_drv.ko (external module)");
    let out = Command::new("make")
        .current_dir(&kernel.out)
        .arg(format!("M={}", dir.display()))
        .arg(format!("LLVM={}", opts.llvm))
        .arg("modules")
        .env("LIBCLANG_PATH", crate::prereq::LIBCLANG_PATH)
        .output()?;
    if !out.status.success() {
        eprintln!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        bail!("building the unpatched ublk_drv.ko failed");
    }
    Ok(dir.join("ublk_drv.ko"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[idx.min(v.len() - 1)]
}

/// section → config → round → values
type Samples = BTreeMap<String, BTreeMap<String, BTreeMap<u32, Vec<f64>>>>;

pub fn parse_csv(text: &str) -> Samples {
    let mut s = Samples::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 4 {
            continue;
        }
        let (Ok(round), Ok(v)) = (f[2].parse::<u32>(), f[3].trim().parse::<f64>()) else {
            continue;
        };
        s.entry(f[0].into())
            .or_default()
            .entry(f[1].into())
            .or_default()
            .entry(round)
            .or_default()
            .push(v);
    }
    s
}

fn kiops(v: f64) -> String {
    format!("{:.1}K", v / 1000.0)
}

/// Median over rounds of a per-round single value (IOPS).
fn round_median(rounds: &BTreeMap<u32, Vec<f64>>) -> (f64, usize) {
    let mut per: Vec<f64> = rounds.values().filter_map(|v| v.first().copied()).collect();
    let n = per.len();
    (median(&mut per), n)
}

pub fn table(s: &Samples) -> String {
    let mut out = String::new();
    let get = |sec: &str, cfg: &str| s.get(sec).and_then(|m| m.get(cfg));
    out += "| scheduler (fio 4k randread, iodepth 16) | mq-deadline | none | none/mq-deadline |\n|---|---|---|---|\n";
    for devs in ["1dev", "4dev"] {
        if let (Some(a), Some(b)) = (
            get("sched", &format!("mq-deadline/{devs}")),
            get("sched", &format!("none/{devs}")),
        ) {
            let ((ma, n), (mb, _)) = (round_median(a), round_median(b));
            out += &format!(
                "| {} device(s), median of {n} | {} | {} | {:.2}x |\n",
                &devs[..1],
                kiops(ma),
                kiops(mb),
                mb / ma
            );
        }
    }
    out += "\n| rq_affinity (fio on CPU 0, server on CPU 1) | without flag | with UBLK_F_SUPPORT_RQ_AFFINITY | with/without |\n|---|---|---|---|\n";
    for qd in [16, 96] {
        for rqa in 0..3 {
            let cfg = |f: &str| format!("qd{qd}/rqa{rqa}/{f}");
            if let (Some(a), Some(b)) = (
                get("affinity", &cfg("without")),
                get("affinity", &cfg("with")),
            ) {
                let ((ma, n), (mb, _)) = (round_median(a), round_median(b));
                out += &format!(
                    "| iodepth {qd}, rq_affinity={rqa}, median of {n} | {} | {} | {:.2}x |\n",
                    kiops(ma),
                    kiops(mb),
                    mb / ma
                );
            }
        }
    }
    out += "\n| device start, per device (ms) | p50 | p99 | samples |\n|---|---|---|---|\n";
    for label in ["unpatched", "patched"] {
        for what in ["add_disk-ms", "kublk-add-ms"] {
            if let Some(r) = get("start", &format!("{label}/{what}")) {
                let mut all: Vec<f64> = r.values().flatten().copied().collect();
                let n = all.len();
                let (p50, p99) = (percentile(&mut all, 50.0), percentile(&mut all, 99.0));
                let name = match (label, what) {
                    ("unpatched", "add_disk-ms") => {
                        "7.3.4 (mq-deadline default): device_add_disk() in START_DEV"
                    }
                    ("unpatched", _) => "7.3.4 (mq-deadline default): whole `kublk add`",
                    (_, "add_disk-ms") => "patched (none default): device_add_disk() in START_DEV",
                    _ => "patched (none default): whole `kublk add`",
                };
                out += &format!("| {name} | {p50:.2} | {p99:.2} | {n} |\n");
            }
        }
    }
    out
}

pub fn run(opts: &BenchOpts) -> Result<()> {
    let layout = pipeline::layout(&opts.kernel)?;
    let kernel = pipeline::ensure_kernel(&layout, &opts.kernel)?;
    let userland = userland::ensure(&layout, &kernel)?;
    // The ratio boots with no driver and loads each in turn; the cover
    // letter's sections need the unpatched module and start with ublk_drv.
    let (sections, base, driver) = if opts.rust_vs_c {
        ("ratio", String::new(), Driver::None)
    } else {
        let base = base_module(&layout, &kernel, &opts.kernel)?;
        (
            "sched affinity start",
            base.display().to_string(),
            Driver::C,
        )
    };
    let accel = guest::accel::probe();
    phase(format!("QEMU accelerator: {accel}"));
    let vars = vec![
        ("SECTIONS".to_string(), sections.to_string()),
        ("BASE_MODULE".to_string(), base),
        ("FLAG_OPT".to_string(), opts.flag_option.clone()),
        ("ROUNDS".to_string(), opts.rounds.to_string()),
        ("RUNTIME".to_string(), opts.runtime.to_string()),
        ("NDEV".to_string(), opts.devices.to_string()),
    ];
    let job = job::create(
        &layout,
        "bench",
        &kernel,
        &userland,
        driver,
        &Mode::Bench(vars),
    )?;
    let g = Guest {
        kernel: &kernel,
        job: &job,
        accel: &accel,
    };
    phase(format!(
        "benchmark boot ({sections}; {} rounds, {}s per fio run)",
        opts.rounds, opts.runtime
    ));
    // Every guest step has its own timeout; this only bounds a wedged guest.
    let limits = Limits {
        total: Duration::from_secs(if opts.rust_vs_c { 1800 } else { 3 * 3600 }),
        stall: None,
    };
    let outcome = guest::run_watched(g.command(), &limits, &job.console(), |l| {
        if l.starts_with("bench:") {
            detail(l);
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
    let csv = std::fs::read_to_string(job.dir.join("bench.csv"))
        .context("no bench.csv from the guest")?;
    let samples = parse_csv(&csv);
    if opts.rust_vs_c {
        let failures = parse_failures(
            &std::fs::read_to_string(job.dir.join("bench-failures.txt")).unwrap_or_default(),
        );
        println!("Measured with `cargo xtask bench --rust-vs-c` in one boot: QEMU {accel}, 2 vCPUs; kublk null target, 1 queue, depth 128; fio 4k randread, iodepth 16, io_uring, direct, {}s per run; C and Rust driver alternating, each loaded only for its run.", opts.runtime);
        println!();
        print!("{}", ratio_table(&samples, &failures, opts.rounds));
        println!();
        println!("raw samples: {}", job.dir.join("bench.csv").display());
        if !failures.is_empty() {
            for f in &failures {
                eprintln!(
                    "bench: the {} driver failed in round {}: {}",
                    f.driver, f.round, f.reason
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
        return Ok(());
    }
    println!("Measured with `cargo xtask bench` in one boot: QEMU {accel}, 2 vCPUs; ublk null target, 1 queue, depth 128.");
    println!();
    print!("{}", table(&samples));
    println!();
    println!("raw samples: {}", job.dir.join("bench.csv").display());
    Ok(())
}

/// A driver that did not serve I/O in a round of the ratio.
#[derive(Debug, PartialEq)]
pub struct Failure {
    pub driver: String,
    pub round: u32,
    pub reason: String,
}

/// Parses bench-failures.txt: `driver|round|reason` lines.
pub fn parse_failures(text: &str) -> Vec<Failure> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '|');
            Some(Failure {
                driver: f.next()?.to_string(),
                round: f.next()?.parse().ok()?,
                reason: f.next()?.to_string(),
            })
        })
        .collect()
}

/// The ratio section: IOPS per round, then the medians and the median of
/// the per-round Rust/C ratios.
pub fn ratio_table(s: &Samples, failures: &[Failure], rounds: u32) -> String {
    let iops = |drv: &str, r: u32| {
        s.get("ratio")
            .and_then(|m| m.get(drv))
            .and_then(|m| m.get(&r))
            .and_then(|v| v.first().copied())
    };
    let cell = |drv: &str, r: u32| match iops(drv, r) {
        Some(v) => kiops(v),
        None => match failures.iter().find(|f| f.driver == drv) {
            Some(f) if f.round == r => "failed".to_string(),
            Some(_) => "not run (failed earlier)".to_string(),
            None => "no result".to_string(),
        },
    };
    let mut out = String::from(
        "| fio 4k randread, iodepth 16, null target | C (ublk_drv) | Rust (rust_ublk) | Rust/C |\n|---|---|---|---|\n",
    );
    let (mut cs, mut rs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 1..=rounds {
        let ratio = match (iops("c", r), iops("rust", r)) {
            (Some(c), Some(rust)) if c > 0.0 => {
                ratios.push(rust / c);
                format!("{:.2}x", rust / c)
            }
            _ => "-".to_string(),
        };
        cs.extend(iops("c", r));
        rs.extend(iops("rust", r));
        out += &format!(
            "| round {r} | {} | {} | {ratio} |\n",
            cell("c", r),
            cell("rust", r)
        );
    }
    let med = |v: &mut Vec<f64>, f: &dyn Fn(f64) -> String| {
        if v.is_empty() {
            "-".to_string()
        } else {
            f(median(v))
        }
    };
    out += &format!(
        "| median ({} C, {} Rust, {} ratios) | {} | {} | {} |\n",
        cs.len(),
        rs.len(),
        ratios.len(),
        med(&mut cs, &kiops),
        med(&mut rs, &kiops),
        med(&mut ratios, &|x| format!("{x:.2}x")),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 50.0), 51.0);
        assert_eq!(percentile(&mut v, 99.0), 99.0);
    }

    #[test]
    fn ratio() {
        let csv = "ratio,c,1,50000\nratio,rust,1,40000\nratio,c,2,52000\nratio,rust,2,39000\nratio,c,3,51000\nratio,rust,3,41000\n";
        let t = ratio_table(&parse_csv(csv), &[], 3);
        assert!(t.contains("| round 1 | 50.0K | 40.0K | 0.80x |"), "{t}");
        assert!(
            t.contains("| median (3 C, 3 Rust, 3 ratios) | 51.0K | 40.0K | 0.80x |"),
            "{t}"
        );
    }

    #[test]
    fn ratio_with_a_failed_driver() {
        let csv = "ratio,c,1,50000\nratio,c,2,52000\n";
        let failures = parse_failures("rust|1|kublk add -t null failed (see the console)\n");
        assert_eq!(failures[0].round, 1);
        assert_eq!(
            failures[0].reason,
            "kublk add -t null failed (see the console)"
        );
        let t = ratio_table(&parse_csv(csv), &failures, 2);
        assert!(t.contains("| round 1 | 50.0K | failed | - |"), "{t}");
        assert!(
            t.contains("| round 2 | 52.0K | not run (failed earlier) | - |"),
            "{t}"
        );
        assert!(
            t.contains("| median (2 C, 0 Rust, 0 ratios) | 51.0K | - | - |"),
            "{t}"
        );
    }

    #[test]
    fn table_from_csv() {
        let csv = "sched,mq-deadline/1dev,1,18000\nsched,none/1dev,1,72000\nsched,mq-deadline/1dev,2,19000\nsched,none/1dev,2,70000\n\
                   affinity,qd16/rqa2/without,1,50000\naffinity,qd16/rqa2/with,1,45000\n\
                   start,patched/add_disk-ms,1,0.5\nstart,patched/add_disk-ms,1,0.7\n";
        let t = table(&parse_csv(csv));
        assert!(
            t.contains("| 1 device(s), median of 2 | 18.5K | 71.0K | 3.84x |"),
            "{t}"
        );
        assert!(
            t.contains("| iodepth 16, rq_affinity=2, median of 1 | 50.0K | 45.0K | 0.90x |"),
            "{t}"
        );
        assert!(
            t.contains("patched (none default): device_add_disk() in START_DEV | 0.60 |")
                || t.contains("| 0.70 | 0.70 | 2 |"),
            "{t}"
        );
    }
}
