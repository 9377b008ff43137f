//! The measurements of the C series' cover letter (scheduler default,
//! rq_affinity, START_DEV time), printed as a markdown table.

use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::samples::{kiops, Samples};
use super::stats::{median, percentile, spread};
use super::Env;
use crate::guest::job::Driver;
use crate::kbuild::Outputs;
use crate::layout::Layout;
use crate::markdown;
use crate::pipeline::KernelOpts;
use crate::progress::{detail, phase};

/// `cargo xtask bench cover`.
#[derive(Clone, Debug, clap::Args)]
pub struct CoverOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
    #[command(flatten)]
    pub repeat: super::Repeat,
    /// Devices added per round for the START_DEV measurement.
    #[arg(long, default_value_t = 64)]
    pub devices: u32,
    /// kublk option that requests UBLK_F_SUPPORT_RQ_AFFINITY.
    #[arg(long, default_value = "--rq_affinity", allow_hyphen_values = true)]
    pub flag_option: String,
}

pub fn run(env: &Env, opts: &CoverOpts) -> Result<()> {
    let (rounds, runtime) = (opts.repeat.rounds, opts.repeat.runtime);
    // The START_DEV section needs the unpatched module; the boot starts
    // with the patched ublk_drv loaded.
    let base = base_module(&env.layout, &env.kernel, &opts.kernel)?;
    let sections = "sched affinity start";
    let vars = vec![
        ("SECTIONS".to_string(), sections.to_string()),
        ("BASE_MODULE".to_string(), base.display().to_string()),
        ("FLAG_OPT".to_string(), opts.flag_option.clone()),
        ("ROUNDS".to_string(), rounds.to_string()),
        ("RUNTIME".to_string(), runtime.to_string()),
        ("NDEV".to_string(), opts.devices.to_string()),
    ];
    phase(format!(
        "benchmark boot ({sections}; {rounds} rounds, {runtime}s per fio run)"
    ));
    let job = super::boot(env, Driver::C, vars, Duration::from_secs(3 * 3600), |l| {
        detail(l)
    })?;
    let samples = super::read_samples(&job)?;
    println!(
        "Measured with `cargo xtask bench` in one boot: QEMU {}, 2 vCPUs; ublk null target, 1 queue, depth 128.",
        env.accel
    );
    println!();
    print!("{}", table(&samples));
    println!();
    println!("raw samples: {}", job.dir.join("bench.csv").display());
    Ok(())
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

/// The per-round values (the first sample of each round).
fn per_round(rounds: &BTreeMap<u32, Vec<f64>>) -> BTreeMap<u32, f64> {
    rounds
        .iter()
        .filter_map(|(r, v)| v.first().map(|x| (*r, *x)))
        .collect()
}

/// `median (smallest-largest)` of `v`, each value written by `f`.
fn cell(v: &[f64], f: impl Fn(f64) -> String) -> String {
    let mut m = v.to_vec();
    match spread(v) {
        Some((lo, hi)) => format!("{} ({}-{})", f(median(&mut m)), f(lo), f(hi)),
        None => "-".into(),
    }
}

/// The per-round ratios `b / a`, over the rounds both have.
fn ratios(a: &BTreeMap<u32, f64>, b: &BTreeMap<u32, f64>) -> Vec<f64> {
    a.iter()
        .filter_map(|(r, x)| b.get(r).map(|y| y / x))
        .collect()
}

fn times(x: f64) -> String {
    format!("{x:.2}x")
}

fn us(x: f64) -> String {
    format!("{x:.1}")
}

/// The row of two configurations' IOPS, `a` then `b`, and of their
/// per-round ratio b/a; `label` is given how many rounds `a` had.
fn iops_row(
    label: impl Fn(usize) -> String,
    a: &BTreeMap<u32, Vec<f64>>,
    b: &BTreeMap<u32, Vec<f64>>,
) -> String {
    let (a, b) = (per_round(a), per_round(b));
    let av: Vec<f64> = a.values().copied().collect();
    let bv: Vec<f64> = b.values().copied().collect();
    markdown::row(&[
        label(av.len()),
        cell(&av, kiops),
        cell(&bv, kiops),
        cell(&ratios(&a, &b), times),
    ])
}

pub fn table(s: &Samples) -> String {
    let mut out = String::new();
    let get = |sec: &str, cfg: &str| s.get(sec).and_then(|m| m.get(cfg));
    out +=
        "IOPS and ratios: median over rounds (smallest-largest); a ratio is taken per round.\n\n";
    out += &markdown::header(&[
        "scheduler (fio 4k randread, iodepth 16)",
        "mq-deadline",
        "none",
        "none/mq-deadline",
    ]);
    for devs in ["1dev", "4dev"] {
        if let (Some(a), Some(b)) = (
            get("sched", &format!("mq-deadline/{devs}")),
            get("sched", &format!("none/{devs}")),
        ) {
            out += &iops_row(|n| format!("{} device(s), {n} rounds", &devs[..1]), a, b);
        }
    }
    out += "\n";
    out += &markdown::header(&[
        "rq_affinity (fio on CPU 0, server on CPU 1)",
        "IOPS without flag",
        "IOPS with UBLK_F_SUPPORT_RQ_AFFINITY",
        "with/without",
    ]);
    let mut cpu = String::new();
    for qd in [16, 96] {
        for rqa in 0..3 {
            let cfg = |f: &str| format!("qd{qd}/rqa{rqa}/{f}");
            if let (Some(a), Some(b)) = (
                get("affinity", &cfg("without")),
                get("affinity", &cfg("with")),
            ) {
                out += &iops_row(
                    |n| format!("iodepth {qd}, rq_affinity={rqa}, {n} rounds"),
                    a,
                    b,
                );
            }
            let us_of = |f: &str, cpu: &str| -> String {
                get("affinity_cpu", &format!("qd{qd}/rqa{rqa}/{f}/{cpu}"))
                    .map(|m| cell(&per_round(m).into_values().collect::<Vec<_>>(), us))
                    .unwrap_or_else(|| "-".into())
            };
            if get("affinity_cpu", &cfg("without/server")).is_some() {
                cpu += &markdown::row(&[
                    format!("iodepth {qd}, rq_affinity={rqa}"),
                    us_of("without", "server"),
                    us_of("with", "server"),
                    us_of("without", "submit"),
                    us_of("with", "submit"),
                ]);
            }
        }
    }
    if !cpu.is_empty() {
        out += "\n";
        out += &markdown::header(&[
            "system + irq + softirq time per READ, us (/proc/stat)",
            "server CPU 1, without flag",
            "server CPU 1, with flag",
            "submitting CPU 0, without flag",
            "submitting CPU 0, with flag",
        ]);
        out += &cpu;
    }
    out += "\n";
    out += &markdown::header(&["device start, per device (ms)", "p50", "p99", "samples"]);
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
                out += &markdown::row(&[
                    name.to_string(),
                    format!("{p50:.2}"),
                    format!("{p99:.2}"),
                    n.to_string(),
                ]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::samples::parse_csv;
    use super::*;

    #[test]
    fn table_from_csv() {
        let csv = "sched,mq-deadline/1dev,1,18000\nsched,none/1dev,1,72000\nsched,mq-deadline/1dev,2,19000\nsched,none/1dev,2,70000\n\
                   affinity,qd16/rqa2/without,1,50000\naffinity,qd16/rqa2/with,1,45000\n\
                   affinity_cpu,qd16/rqa2/without/server,1,12.5\naffinity_cpu,qd16/rqa2/with/server,1,6.25\n\
                   affinity_cpu,qd16/rqa2/without/submit,1,3\naffinity_cpu,qd16/rqa2/with/submit,1,9\n\
                   start,patched/add_disk-ms,1,0.5\nstart,patched/add_disk-ms,1,0.7\n";
        let t = table(&parse_csv(csv));
        assert!(
            t.contains("| 1 device(s), 2 rounds | 18.5K (18.0K-19.0K) | 71.0K (70.0K-72.0K) | 3.84x (3.68x-4.00x) |"),
            "{t}"
        );
        assert!(
            t.contains("| iodepth 16, rq_affinity=2, 1 rounds | 50.0K (50.0K-50.0K) | 45.0K (45.0K-45.0K) | 0.90x (0.90x-0.90x) |"),
            "{t}"
        );
        assert!(
            t.contains("| iodepth 16, rq_affinity=2 | 12.5 (12.5-12.5) | 6.2 (6.2-6.2) | 3.0 (3.0-3.0) | 9.0 (9.0-9.0) |"),
            "{t}"
        );
        assert!(
            t.contains("patched (none default): device_add_disk() in START_DEV | 0.60 |")
                || t.contains("| 0.70 | 0.70 | 2 |"),
            "{t}"
        );
    }
}
