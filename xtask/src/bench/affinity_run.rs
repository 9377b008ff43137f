//! `bench affinity`: UBLK_F_SUPPORT_RQ_AFFINITY with a ublk server whose
//! CPU is the bottleneck, in one boot with alternating rounds. Prints the
//! estimate before the boot and a line per cell during it; writes the
//! markdown report, the CSV and the SVG plot into a new directory under
//! target/bench/ (`affinity-latest` points at it) and prints the report.

use anyhow::{bail, Result};
use std::time::{Instant, SystemTime};

use super::affinity::{AffinityOpts, Plan};
use super::affinity_report::{self, RunInfo};
use super::{affinity_plot, outdir, Env};
use crate::guest::job::Driver;
use crate::guest::{self, Accel};
use crate::progress::{detail, fmt_duration, phase};

const REPORT: &str = "affinity.md";
const CSV: &str = "affinity.csv";
const PLOT: &str = "affinity.svg";
const SAMPLES: &str = "samples.csv";

/// The time left after a progress line `bench: cell <k>/<N> ...` that came
/// `elapsed` after the first line of the guest.
fn time_left(line: &str, elapsed: std::time::Duration) -> Option<std::time::Duration> {
    let rest = line.strip_prefix("bench: cell ")?;
    let (k, rest) = rest.split_once('/')?;
    let n = rest.split_whitespace().next()?;
    let (k, n): (u32, u32) = (k.parse().ok()?, n.parse().ok()?);
    crate::eta::time_left(elapsed, f64::from(k), f64::from(n.checked_sub(k)?))
}

pub fn run(env: &Env, opts: &AffinityOpts) -> Result<()> {
    let started = Instant::now();
    let plan = Plan::new(opts)?;
    phase(format!(
        "benchmark boot (UBLK_F_SUPPORT_RQ_AFFINITY, CPU-bound server: {} vCPUs, server on CPU {}; \
         {} rounds, {} s per fio run)",
        plan.cpus,
        plan.cpus - 1,
        plan.rounds(),
        plan.runtime()
    ));
    phase(format!("estimate: {}", plan.estimate_text(&env.accel)));
    let mut clocksource = "unknown".to_string();
    let size = guest::Size {
        cpus: plan.cpus,
        memory_mb: guest::MEMORY_MB,
    };
    let mut first: Option<Instant> = None;
    let job = super::boot_sized(
        env,
        Driver::C,
        plan.guest_vars(&opts.flag_option),
        plan.limit(&env.accel),
        size,
        |l| {
            let since = first.get_or_insert_with(Instant::now).elapsed();
            if let Some(cs) = l
                .strip_prefix("bench: rqa: clocksource ")
                .and_then(|r| r.split(',').next())
            {
                clocksource = cs.to_string();
            }
            match time_left(l, since) {
                Some(left) => detail(format!(
                    "{l} [{} in, about {} left]",
                    fmt_duration(started.elapsed()),
                    fmt_duration(left)
                )),
                None => detail(l),
            }
        },
    )?;
    if let Some(start) = first {
        let spent = start.elapsed();
        detail(format!(
            "the cells took {} in all: {:.1} s per cell run, {} s of it fio",
            fmt_duration(spent),
            spent.as_secs_f64() / f64::from(plan.total_runs()),
            plan.runtime()
        ));
    }

    let samples = super::read_samples(&job)?;
    let failures: Vec<String> = std::fs::read_to_string(job.dir.join("rqa-failures.txt"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    let stats = affinity_report::collect(&samples, &plan);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (stamp, date) = outdir::utc(now);
    let info = RunInfo {
        machine: format!("QEMU {}, {} vCPUs", env.accel, plan.cpus),
        date: date.clone(),
        clocksource,
    };
    let report = affinity_report::markdown(&stats, &plan, &info, &failures, PLOT);
    let title = format!(
        "UBLK_F_SUPPORT_RQ_AFFINITY, CPU-bound ublk server: fio 4k randread, {} rounds of {} s, QEMU {} ({} vCPUs), {date}",
        plan.rounds(),
        plan.runtime(),
        match env.accel {
            Accel::Kvm => "KVM",
            Accel::Tcg { .. } => "TCG",
        },
        plan.cpus
    );
    let svg = affinity_plot::svg(&stats, &plan, &title)?;

    let saved = outdir::save(
        &env.layout.bench_results(),
        "affinity",
        &stamp,
        &[
            (REPORT, &report),
            (CSV, &affinity_report::csv(&stats, &plan)),
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
    if !failures.is_empty() || job.status().as_deref() != Some("0") {
        bail!(
            "{} failure(s), guest status {:?}; console and logs: {}",
            failures.len(),
            job.status(),
            job.dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn progress() {
        let l = "bench: cell 7/28 1 0 2 96 0 iops=1000";
        assert_eq!(
            time_left(l, Duration::from_secs(70)),
            Some(Duration::from_secs(210))
        );
        assert_eq!(
            time_left("bench: rqa: clocksource tsc", Duration::ZERO),
            None
        );
        assert_eq!(time_left("bench: cell 9/8 x", Duration::ZERO), None);
    }
}
