//! `cargo xtask fuzz`: the differential fuzzer (`selftests/ublk_fuzz`) at
//! scale. It spends most of a step waiting for the guest (a command that
//! may be queued, a release to finish), so several guests run at once, each
//! from its own range of seeds, until the run has made its steps or its
//! time is up. Every guest loads both drivers in turn (`--driver none`);
//! a guest's rounds are `ublk_fuzz`'s, and so are its failures: a mismatch,
//! a hang, an error, or a splat in the guest's kernel log fails the run.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::guest::job::{self, Driver, Mode};
use crate::guest::{self, Ending, Guest, Limits};
use crate::pipeline::{self, KernelOpts};
use crate::progress::{detail, fmt_duration, phase};
use crate::userland;

/// Guest `k` starts at seed `seed + k * SEED_RANGE`: ranges that a run
/// does not exhaust (a round is a seed, and a guest runs about 10 rounds a
/// minute).
const SEED_RANGE: u64 = 1 << 32;

#[derive(Clone, Debug, clap::Args)]
pub struct FuzzOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
    /// Steps per driver over all guests (each runs its share, checked
    /// between rounds); with --time, whichever comes first.
    #[arg(long, value_name = "N")]
    pub steps: Option<u64>,
    /// Seconds; each guest starts no round after that.
    #[arg(long, value_name = "SECS")]
    pub time: Option<u64>,
    /// Guests at once (each about a third of a host core under TCG,
    /// 3 GiB of memory).
    #[arg(long, default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub guests: u32,
    /// First seed: guest k starts at SEED + k * 2^32 [default: the clock].
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// The first seed of each guest, comma-separated (one per guest, as a
    /// run prints them for going on where it stopped).
    #[arg(long, value_delimiter = ',', value_name = "S1,S2,...")]
    pub seeds: Vec<u64>,
    /// Steps of one round (ublk_fuzz --steps).
    #[arg(long, default_value_t = 150)]
    pub round_steps: u32,
}

/// What a guest has reported so far.
#[derive(Clone, Debug, Default)]
struct Tally {
    rounds: u64,
    steps: [u64; 2],
    next_seed: u64,
    failures: Vec<String>,
    summary: Option<String>,
}

/// Reads one console line of `ublk_fuzz` into `t`.
fn account(t: &mut Tally, line: &str) {
    let l = line.trim();
    if let Some(rest) = l.strip_prefix("# progress: ") {
        // "rounds R steps c X rust Y in Ts, next seed S"
        let w: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| {
            w.get(i)
                .and_then(|s| s.trim_end_matches(',').parse().ok())
                .unwrap_or(0)
        };
        t.rounds = num(1);
        t.steps = [num(4), num(6)];
        t.next_seed = num(w.len().saturating_sub(1));
    } else if let Some(rest) = l.strip_prefix("ok ") {
        // "ok R seed S [# note]": counts rounds between progress lines.
        let w: Vec<&str> = rest.split_whitespace().collect();
        if let (Some(r), Some(s)) = (w.first(), w.get(2)) {
            if let (Ok(r), Ok(s)) = (r.parse::<u64>(), s.parse::<u64>()) {
                t.rounds = t.rounds.max(r);
                t.next_seed = t.next_seed.max(s + 1);
            }
        }
    } else if l.starts_with("not ok ") || l.starts_with("# replay: ") {
        t.failures.push(l.to_string());
    } else if l.starts_with("# ") && l.contains(" rounds in ") {
        t.summary = Some(l.trim_start_matches("# ").to_string());
    }
}

pub fn run(opts: &FuzzOpts) -> Result<bool> {
    if opts.steps.is_none() && opts.time.is_none() {
        bail!("give --steps N (steps per driver, all guests) or --time SECS, or both");
    }
    let guests = opts.guests as usize;
    let seeds: Vec<u64> = if opts.seeds.is_empty() {
        let first = opts.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1)
        });
        (0..guests as u64)
            .map(|k| first.wrapping_add(k * SEED_RANGE))
            .collect()
    } else if opts.seeds.len() != guests {
        bail!(
            "--seeds gives {} seeds for --guests {guests}: one per guest",
            opts.seeds.len()
        );
    } else {
        opts.seeds.clone()
    };
    let layout = pipeline::layout(&opts.kernel)?;
    let kernel = pipeline::ensure_kernel(&layout, &opts.kernel)?;
    let userland = userland::ensure(&layout, &kernel)?;
    let accel = guest::accel::probe();
    phase(format!("QEMU accelerator: {accel}"));
    let share = opts.steps.map(|n| n.div_ceil(guests as u64));
    // A guest's limit: its time, and room for the last round and the boot;
    // without --time, its steps at a slow 5 steps per second.
    let total = match (opts.time, share) {
        (Some(t), _) => Duration::from_secs(t + 900),
        (None, Some(n)) => Duration::from_secs(n / 5 + 900),
        (None, None) => unreachable!("checked above"),
    };
    let tallies: Arc<Mutex<Vec<Tally>>> = Arc::new(Mutex::new(vec![Tally::default(); guests]));
    let start = Instant::now();
    phase(format!(
        "{guests} guests, {} kernel, seeds {}; {}",
        opts.kernel.flavour.name(),
        seeds
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(","),
        match (opts.steps, opts.time) {
            (Some(n), Some(t)) => format!("{n} steps per driver or {t} s"),
            (Some(n), None) => format!("{n} steps per driver"),
            (None, Some(t)) => format!("{t} s"),
            (None, None) => unreachable!(),
        }
    ));
    let mut handles = Vec::new();
    for (k, seed) in seeds.iter().enumerate() {
        let mut args = vec![
            "\"$SELFTESTS\"/ublk_fuzz".to_string(),
            format!("--seed {seed}"),
            format!("--steps {}", opts.round_steps),
        ];
        if let Some(n) = share {
            args.push(format!("--total-steps {n}"));
        }
        if let Some(t) = opts.time {
            args.push(format!("--time {t}"));
        }
        let mode = Mode::Command(args.join(" "));
        let job = job::create(
            &layout,
            &format!("fuzz{k}"),
            &kernel,
            &userland,
            Driver::None,
            &mode,
        )?;
        let (kernel, accel, tallies) = (kernel.clone(), accel.clone(), tallies.clone());
        let limits = Limits {
            total,
            stall: Some(Duration::from_secs(600)),
        };
        handles.push(std::thread::spawn(
            move || -> Result<(PathBuf, Ending, Vec<String>)> {
                let g = Guest {
                    kernel: &kernel,
                    job: &job,
                    accel: &accel,
                    size: guest::Size {
                        cpus: guest::CPUS,
                        memory_mb: guest::MEMORY_MB,
                    },
                };
                let console = job.console();
                let outcome = guest::run_watched(g.command(), &limits, &console, |l| {
                    account(&mut tallies.lock().unwrap()[k], l);
                })?;
                let splats = crate::selftest::boot_splats(&job)
                    .iter()
                    .map(|s| format!("{} during {}: {}", s.kind, s.during, s.line))
                    .collect();
                let status_ok = job.status().as_deref() == Some("0");
                let ending = match outcome.ending {
                    Ending::Exited(_) if !status_ok => {
                        Ending::Exited(job.status().and_then(|s| s.parse().ok()).or(Some(-1)))
                    }
                    Ending::Exited(_) => Ending::Exited(Some(0)),
                    e => e,
                };
                Ok((console, ending, splats))
            },
        ));
        // Guests boot one after the other, not all at once.
        std::thread::sleep(Duration::from_secs(2));
    }
    // Progress while the guests run.
    let mut last = Instant::now();
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(500));
        if last.elapsed() >= Duration::from_secs(60) {
            last = Instant::now();
            let t = tallies.lock().unwrap();
            let steps: u64 = t.iter().map(|t| t.steps[1]).sum();
            let rounds: u64 = t.iter().map(|t| t.rounds).sum();
            let running = handles.iter().filter(|h| !h.is_finished()).count();
            detail(format!(
                "{}: {rounds} rounds, {steps} steps per driver at the last progress lines, {running} guests running",
                fmt_duration(start.elapsed())
            ));
        }
    }
    let mut ok = true;
    let tallies = tallies.lock().unwrap().clone();
    let mut next = Vec::new();
    let mut steps = [0u64; 2];
    for (k, h) in handles.into_iter().enumerate() {
        let t = &tallies[k];
        let (console, ending, splats) = h
            .join()
            .map_err(|_| anyhow::anyhow!("guest {k}: its thread panicked"))?
            .with_context(|| format!("guest {k}"))?;
        steps[0] += t.steps[0];
        steps[1] += t.steps[1];
        next.push(t.next_seed.max(seeds[k]));
        let verdict = match &ending {
            Ending::Exited(Some(0)) if splats.is_empty() => "ok",
            _ => {
                ok = false;
                "FAILED"
            }
        };
        println!(
            "guest {k}: {verdict}: {}; console {}",
            t.summary.as_deref().unwrap_or("no summary line"),
            console.display()
        );
        match &ending {
            Ending::Killed(why) => println!("  killed: {why}"),
            Ending::Exited(Some(0)) => {}
            Ending::Exited(s) => println!("  ublk_fuzz exit status {s:?}"),
        }
        for f in &t.failures {
            println!("  {f}");
        }
        for s in &splats {
            println!("  kernel splat: {s}");
        }
    }
    println!(
        "fuzz: {} in {}: steps per driver c {} rust {}, {}",
        if ok { "PASS" } else { "FAIL" },
        fmt_duration(start.elapsed()),
        steps[0],
        steps[1],
        if ok {
            "no mismatch, no hang, kernel logs clean"
        } else {
            "see the guests above"
        }
    );
    println!(
        "go on from here: cargo xtask fuzz{} --guests {guests} --seeds {} ...",
        match opts.kernel.flavour.name() {
            "default" => String::new(),
            f => format!(" --config {f}"),
        },
        next.iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_reads_progress_rounds_and_failures() {
        let mut t = Tally::default();
        account(&mut t, "ok 1 seed 100");
        account(&mut t, "ok 2 seed 101 # known difference at step 3: x");
        assert_eq!((t.rounds, t.next_seed), (2, 102));
        account(
            &mut t,
            "# progress: rounds 20 steps c 3000 rust 2990 in 61s, next seed 120",
        );
        assert_eq!((t.rounds, t.steps, t.next_seed), (20, [3000, 2990], 120));
        account(&mut t, "not ok 21 seed 120 # step 4: c: -22 / rust: 0");
        account(
            &mut t,
            "# replay: ublk_fuzz --seed 120 --steps 150 --rounds 1",
        );
        assert_eq!(t.failures.len(), 2);
        account(
            &mut t,
            "# 21 rounds in 70.0s: steps per driver c 3000 rust 2990, 0 known differences, FAILED",
        );
        assert!(t.summary.as_deref().unwrap().starts_with("21 rounds"));
    }
}
