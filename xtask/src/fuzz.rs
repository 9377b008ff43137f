//! `cargo xtask fuzz`: the differential fuzzer (`selftests/ublk_fuzz`) at
//! scale. It spends most of a step waiting for the guest (a command that
//! may be queued, a release to finish), so several guests run at once, each
//! from its own range of seeds, until the run has made its steps or its
//! time is up. Every guest loads both drivers in turn (`--driver none`);
//! a guest's rounds are `ublk_fuzz`'s, and so are its failures: a mismatch,
//! a hang, an error, or a splat in the guest's kernel log fails the run.

use anyhow::{bail, Result};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::guest::job::{self, Driver, Mode};
use crate::guest::{self, Ending, Guest, Limits};
use crate::pipeline::{self, KernelOpts};
use crate::progress::{detail, fmt_duration, phase};
use crate::userland;

/// Guest `k` starts at seed `seed + k * SEED_RANGE`: ranges that a run
/// does not exhaust (a round is a seed, and a guest runs about 20 rounds a
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
    /// Guests at once (3 GiB of memory each; under TCG a 2-core host
    /// carries three or four).
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
    /// The seed of the round after the last that passed.
    next_seed: Option<u64>,
    /// The seed of the round that failed, if one did.
    failed_seed: Option<u64>,
    /// `not ok`, `# replay`, `# SKIP` and `# could not load` lines.
    failures: Vec<String>,
    summary: Option<String>,
}

/// The words of `line` after `prefix` if it is one of ublk_fuzz's lines
/// (a kernel message may have cut into it on the console).
fn words<'a>(line: &'a str, prefix: &str) -> Option<Vec<&'a str>> {
    line.trim()
        .strip_prefix(prefix)
        .map(|r| r.split_whitespace().collect())
}

fn num(w: &[&str], i: usize) -> Option<u64> {
    w.get(i)?.trim_end_matches([',', 's']).parse().ok()
}

/// Reads one console line of `ublk_fuzz` into `t`; a line that does not
/// parse whole changes nothing.
fn account(t: &mut Tally, line: &str) {
    let l = line.trim();
    if let Some(w) = words(l, "# progress: ") {
        // "rounds R steps c X rust Y in Ts, next seed S"
        if let (Some(r), Some(c), Some(rust), Some(s), true) = (
            num(&w, 1),
            num(&w, 4),
            num(&w, 6),
            num(&w, 11),
            w.len() == 12,
        ) {
            t.rounds = r;
            t.steps = [c, rust];
            t.next_seed = Some(s);
        }
    } else if let Some(w) = words(l, "ok ") {
        // "ok R seed S [# note]": rounds between progress lines.
        if let (Some(r), Some(s), Some(&"seed")) = (num(&w, 0), num(&w, 2), w.get(1)) {
            t.rounds = r;
            t.next_seed = Some(s.wrapping_add(1));
        }
    } else if let Some(w) = words(l, "not ok ") {
        if let (Some(s), Some(&"seed")) = (num(&w, 2), w.get(1)) {
            t.failed_seed = Some(s);
        }
        t.failures.push(l.to_string());
    } else if ["# replay", "# SKIP", "# could not load"]
        .iter()
        .any(|p| l.starts_with(p))
    {
        t.failures.push(l.to_string());
    } else if let Some(w) = words(l, "# ") {
        // "# R rounds in Ts: steps per driver c X rust Y, ..."
        if w.get(1) == Some(&"rounds") && w.get(2) == Some(&"in") {
            if let (Some(c), Some(rust)) = (num(&w, 8), num(&w, 10)) {
                t.steps = [c, rust];
            }
            t.summary = Some(l.trim_start_matches("# ").to_string());
        }
    }
}

/// A guest's end: its console, how it ended, the kernel's splats, or the
/// error that kept it from running.
type GuestEnd = Result<(PathBuf, Ending, Option<String>, Vec<String>)>;

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
    // A guest's limit: with --time, that time and room for the last round
    // and the boot; else none but a stall (the guest prints a line a round,
    // a few seconds apart): its pace depends on the host, the guests and
    // the kernel, and a slow guest is no failure.
    let total = match opts.time {
        Some(t) => Duration::from_secs(t + 900),
        None => Duration::from_secs(7 * 24 * 3600),
    };
    let tallies: Arc<Mutex<Vec<Tally>>> = Arc::new(Mutex::new(vec![Tally::default(); guests]));
    phase(format!(
        "{guests} guest{}, {} kernel, seeds {}; {}",
        if guests == 1 { "" } else { "s" },
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
            (None, None) => unreachable!("checked above"),
        }
    ));
    // Every job directory first: a failure to make one starts no guest.
    let mut jobs = Vec::new();
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
        jobs.push(job::create(
            &layout,
            &format!("fuzz{k}"),
            &kernel,
            &userland,
            Driver::None,
            &mode,
        )?);
    }
    let start = Instant::now();
    let mut handles = Vec::new();
    for (k, job) in jobs.into_iter().enumerate() {
        let (kernel, accel, tallies) = (kernel.clone(), accel.clone(), tallies.clone());
        let limits = Limits {
            total,
            stall: Some(Duration::from_secs(600)),
        };
        handles.push(std::thread::spawn(move || -> GuestEnd {
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
                let mut t = tallies.lock().unwrap_or_else(|e| e.into_inner());
                account(&mut t[k], l);
            })?;
            let splats = crate::selftest::boot_splats(&job)
                .iter()
                .map(|s| format!("{} during {}: {}", s.kind, s.during, s.line))
                .collect();
            let ending = match outcome.ending {
                Ending::Exited(_) => Ending::Exited(Some(
                    job.status().and_then(|s| s.parse().ok()).unwrap_or(-1),
                )),
                e => e,
            };
            Ok((
                console,
                ending,
                job.not_started().map(str::to_string),
                splats,
            ))
        }));
        // Guests boot one after the other, not all at once.
        std::thread::sleep(Duration::from_secs(2));
    }
    // Progress while the guests run.
    let mut last = Instant::now();
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(500));
        if last.elapsed() >= Duration::from_secs(60) {
            last = Instant::now();
            let t = tallies.lock().unwrap_or_else(|e| e.into_inner());
            let steps: u64 = t.iter().map(|t| t.steps[1]).sum();
            let rounds: u64 = t.iter().map(|t| t.rounds).sum();
            let running = handles.iter().filter(|h| !h.is_finished()).count();
            detail(format!(
                "{}: {rounds} rounds, {steps} steps per driver at the last progress lines, {running} of {guests} guests running",
                fmt_duration(start.elapsed())
            ));
        }
    }
    let mut ok = true;
    let tallies = tallies.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut next = Vec::new();
    let mut steps = [0u64; 2];
    for (k, h) in handles.into_iter().enumerate() {
        let t = &tallies[k];
        steps[0] += t.steps[0];
        steps[1] += t.steps[1];
        // A failed round is not run again: its replay command is printed.
        next.push(match (t.failed_seed, t.next_seed) {
            (Some(f), _) => f.wrapping_add(1),
            (None, Some(n)) => n,
            (None, None) => seeds[k],
        });
        let end = h
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("its thread panicked")));
        let (console, ending, not_started, splats) = match end {
            Ok(e) => e,
            Err(e) => {
                ok = false;
                println!("guest {k}: FAILED: the harness: {e:#}");
                continue;
            }
        };
        let passed = ending == Ending::Exited(Some(0))
            && splats.is_empty()
            && t.failures.is_empty()
            && t.summary.is_some();
        ok &= passed;
        println!(
            "guest {k}: {}: {}; console {}",
            if passed { "ok" } else { "FAILED" },
            t.summary.as_deref().unwrap_or("no summary line"),
            console.display()
        );
        if let Some(why) = not_started {
            println!("  {why}");
        }
        match &ending {
            Ending::Killed(why) => println!("  killed: {why}"),
            Ending::Exited(Some(0)) => {}
            Ending::Exited(s) => println!("  ublk_fuzz exit status {}", s.unwrap_or(-1)),
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
        "go on from here (a failed round's seed is left out): cargo xtask fuzz{} --guests {guests} --seeds {} ...",
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
        assert_eq!((t.rounds, t.next_seed), (2, Some(102)));
        account(
            &mut t,
            "# progress: rounds 20 steps c 3000 rust 2990 in 61s, next seed 120",
        );
        assert_eq!(
            (t.rounds, t.steps, t.next_seed),
            (20, [3000, 2990], Some(120))
        );
        account(&mut t, "not ok 21 seed 120 # step 4: c: -22 / rust: 0");
        account(
            &mut t,
            "# replay (fuzzer 0123456789ab): ublk_fuzz --seed 120 --steps 150 --rounds 1",
        );
        assert_eq!((t.failures.len(), t.failed_seed), (2, Some(120)));
        account(
            &mut t,
            "# 21 rounds in 70.0s: steps per driver c 3150 rust 3140, 0 known differences, FAILED",
        );
        assert!(t.summary.as_deref().unwrap().starts_with("21 rounds"));
        assert_eq!(t.steps, [3150, 3140]);
    }

    #[test]
    fn a_cut_line_changes_nothing() {
        let mut t = Tally::default();
        account(
            &mut t,
            "# progress: rounds 20 steps c 3000 rust 2990 in 61s, next seed 120",
        );
        account(&mut t, "# progress: rounds 25 steps c 37[   12.3] ublk: x");
        account(&mut t, "ok 26 se[  1.0] y");
        assert_eq!(
            (t.rounds, t.steps, t.next_seed),
            (20, [3000, 2990], Some(120))
        );
        account(&mut t, "ok 18446744073709551615 seed 18446744073709551615");
        assert_eq!(t.next_seed, Some(0));
    }

    #[test]
    fn skips_are_failures() {
        let mut t = Tally::default();
        account(&mut t, "# SKIP module rust_ublk not found");
        assert_eq!(t.failures.len(), 1);
    }
}
