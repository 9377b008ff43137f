//! ublk_fuzz: a differential command fuzzer of the ublk UAPI. Each round
//! draws a sequence of control commands, char device operations and io
//! commands from a seed (mutated lengths, ids, flags, parameters, offsets,
//! buffer addresses; commands in the wrong state, from the wrong task,
//! after a close, after the server went away), runs it against the C
//! driver (ublk_drv), then against the Rust driver (rust_ublk), loading
//! each module in turn, and compares the two traces step by step: every
//! step must get the same answer, or one listed in `diff::KNOWN` with its
//! reason. A step that does not complete in its bound is a hang. The
//! module loaded before the run is loaded again after it.
//!
//! Usage: ublk_fuzz [--seed N] [--steps N] [--rounds N] [--time SECS]
//!                  [--total-steps N] [--driver c|rust] [--verbose]
//!
//! Round `r` (from 0) runs seed `N + r`. `--rounds`, `--time` and
//! `--total-steps` (steps per driver) bound the run, whichever ends it
//! first; they are checked between rounds. Every 5 rounds, and at the
//! end, a `# progress` line gives the totals and the next seed: a run
//! started from that seed goes on where this one stopped.
//!
//! `--driver` runs the rounds against one driver only and prints their
//! traces (to read what a seed does). A failing round prints its seed and
//! the command that replays it. Exit: 0 all rounds alike, 1 a mismatch,
//! hang or error, 4 (kselftest skip) when not root or a module is missing.

mod diff;
mod driver;
mod ops;
mod rng;
mod trap;
mod world;

use anyhow::{bail, Context, Result};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::driver::DRIVERS;
use crate::rng::Rng;
use crate::world::World;

const KSFT_PASS: u8 = 0;
const KSFT_FAIL: u8 = 1;
const KSFT_SKIP: u8 = 4;

struct Args {
    seed: u64,
    steps: usize,
    rounds: Option<u64>,
    time: Option<Duration>,
    total_steps: Option<u64>,
    driver: Option<&'static str>,
    verbose: bool,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1),
        steps: 200,
        rounds: None,
        time: None,
        total_steps: None,
        driver: None,
        verbose: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--seed" => a.seed = value("--seed")?.parse().context("--seed")?,
            "--steps" => a.steps = value("--steps")?.parse().context("--steps")?,
            "--rounds" => a.rounds = Some(value("--rounds")?.parse().context("--rounds")?),
            "--time" => {
                a.time = Some(Duration::from_secs(
                    value("--time")?.parse().context("--time")?,
                ))
            }
            "--total-steps" => {
                a.total_steps = Some(value("--total-steps")?.parse().context("--total-steps")?)
            }
            "--driver" => {
                let d = value("--driver")?;
                a.driver = Some(match DRIVERS.iter().find(|(n, _)| *n == d) {
                    Some((_, m)) => m,
                    None => bail!("--driver {d}: expected c or rust"),
                });
            }
            "--verbose" | "-v" => a.verbose = true,
            other => bail!("unknown argument {other:?} (see the usage at the top of main.rs)"),
        }
    }
    if a.steps == 0 {
        bail!("--steps 0: a round needs at least one step");
    }
    if a.rounds.is_none() && a.time.is_none() && a.total_steps.is_none() {
        a.rounds = Some(1);
    }
    Ok(a)
}

/// The trace of one round against the driver loaded now; `Err` with the
/// trace so far if a step hung or failed.
fn round(seed: u64, steps: usize) -> Result<Vec<String>, (Vec<String>, anyhow::Error)> {
    let mut trace = Vec::new();
    let mut w = match World::new() {
        Ok(w) => w,
        Err(e) => return Err((trace, e)),
    };
    let mut rng = Rng::new(seed);
    let mut failed = None;
    for i in 0..steps {
        match ops::step(&mut w, &mut rng) {
            Ok(line) => trace.push(format!("{i}: {line}")),
            Err(e) => {
                failed = Some(e.context(format!("step {i}")));
                break;
            }
        }
    }
    let start = Instant::now();
    let torn = w.teardown();
    ops::account("teardown", start.elapsed());
    match torn {
        Ok(lines) => trace.extend(lines),
        Err(e) if failed.is_none() => failed = Some(e.context("teardown")),
        Err(_) => {}
    }
    match failed {
        None => Ok(trace),
        Some(e) => Err((trace, e)),
    }
}

/// Loads `module` (again, if `fresh`), with retries while the last round's
/// rings go away.
fn load(module: &str, fresh: bool) -> Result<()> {
    let start = Instant::now();
    let _time = Accounted("module load", start);
    loop {
        match driver::load(module, fresh) {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() > Duration::from_secs(15) => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Adds its time, when dropped, to [`ops::time_spent`]'s table.
struct Accounted(&'static str, Instant);

impl Drop for Accounted {
    fn drop(&mut self) {
        ops::account(self.0, self.1.elapsed());
    }
}

fn print_trace(name: &str, trace: &[String]) {
    for l in trace {
        println!("# {name}: {l}");
    }
}

/// Which fuzzer drew a sequence: a hash of its sources (FNV-1a), printed
/// with the seeds, since another version draws other sequences from them.
fn version() -> String {
    const SOURCES: &[&str] = &[
        include_str!("diff.rs"),
        include_str!("driver.rs"),
        include_str!("main.rs"),
        include_str!("ops.rs"),
        include_str!("rng.rs"),
        include_str!("trap.rs"),
        include_str!("world.rs"),
    ];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in SOURCES.iter().flat_map(|s| s.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:012x}", h >> 16)
}

/// The totals so far and the seed a run that goes on from here starts at.
fn progress(a: &Args, t: &Totals, start: Instant) {
    println!(
        "# progress: rounds {} steps c {} rust {} in {:.0}s, next seed {}",
        t.rounds,
        t.steps[0],
        t.steps[1],
        start.elapsed().as_secs_f64(),
        a.seed.wrapping_add(t.rounds)
    );
}

struct Totals {
    rounds: u64,
    steps: [u64; 2],
    known: u64,
}

/// Runs round `seed` against both drivers and compares; Err describes a
/// failure (mismatch, hang, error).
fn differential(a: &Args, seed: u64, t: &mut Totals) -> Result<Option<String>> {
    let mut traces = Vec::new();
    for (k, (name, module)) in DRIVERS.iter().enumerate() {
        load(module, true)?;
        match round(seed, a.steps) {
            Ok(tr) => {
                t.steps[k] += tr.len() as u64;
                if a.verbose {
                    print_trace(name, &tr);
                }
                traces.push(tr);
            }
            Err((tr, e)) => {
                print_trace(name, &tr);
                bail!("{name} driver ({module}): {e:#}");
            }
        }
    }
    let Some(m) = diff::first_mismatch(&traces[0], &traces[1]) else {
        return Ok(None);
    };
    if let Some(k) = diff::explain(&m, diff::KNOWN) {
        t.known += 1;
        return Ok(Some(format!(
            "known difference at step {}: {} (c: {} / rust: {})",
            m.step, k.why, m.c, m.rust
        )));
    }
    for (name, tr) in ["c", "rust"].iter().zip(&traces) {
        print_trace(name, &tr[..(m.step + 1).min(tr.len())]);
    }
    bail!("step {}: c: {} / rust: {}", m.step, m.c, m.rust);
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ublk_fuzz: {e:#}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("# SKIP must run as root (it loads the driver modules)");
        return ExitCode::from(KSFT_SKIP);
    }
    let wanted: Vec<&str> = match a.driver {
        Some(m) => vec![m],
        None => DRIVERS.iter().map(|(_, m)| *m).collect(),
    };
    // A module that modinfo cannot find is not the Rust one: `available` below skips for it.
    if wanted.contains(&DRIVERS[0].1)
        && driver::is_rust_implementation(DRIVERS[0].1).unwrap_or(false)
    {
        println!(
            "# SKIP {} is the Rust implementation in this kernel: no C driver to compare with",
            DRIVERS[0].1
        );
        return ExitCode::from(KSFT_SKIP);
    }
    if let Some(m) = wanted.iter().find(|m| !driver::available(m)) {
        println!("# SKIP module {m} not found (a kernel without it, or it is built in)");
        return ExitCode::from(KSFT_SKIP);
    }
    let before = driver::loaded();
    let start = Instant::now();
    let mut t = Totals {
        rounds: 0,
        steps: [0; 2],
        known: 0,
    };
    let mut bounds = Vec::new();
    if let Some(r) = a.rounds {
        bounds.push(format!("rounds {r}"));
    }
    if let Some(d) = a.time {
        bounds.push(format!("for {}s", d.as_secs()));
    }
    if let Some(n) = a.total_steps {
        bounds.push(format!("total steps {n}"));
    }
    println!(
        "# seed {} steps {} {} (fuzzer {})",
        a.seed,
        a.steps,
        bounds.join(" "),
        version()
    );
    let mut failure = None;
    loop {
        let done = a.rounds.is_some_and(|r| t.rounds >= r)
            || a.time.is_some_and(|d| start.elapsed() >= d)
            || a.total_steps.is_some_and(|n| t.steps[0] >= n);
        if done {
            break;
        }
        if t.rounds > 0 && t.rounds.is_multiple_of(5) {
            progress(&a, &t, start);
        }
        let seed = a.seed.wrapping_add(t.rounds);
        t.rounds += 1;
        let res = match a.driver {
            Some(m) => load(m, true).and_then(|()| match round(seed, a.steps) {
                Ok(tr) => {
                    t.steps[0] += tr.len() as u64;
                    print_trace(m, &tr);
                    Ok(None)
                }
                Err((tr, e)) => {
                    print_trace(m, &tr);
                    Err(e)
                }
            }),
            None => differential(&a, seed, &mut t),
        };
        match res {
            Ok(None) => println!("ok {} seed {seed}", t.rounds),
            Ok(Some(note)) => println!("ok {} seed {seed} # {note}", t.rounds),
            Err(e) => {
                println!("not ok {} seed {seed} # {e:#}", t.rounds);
                println!(
                    "# replay (fuzzer {}): ublk_fuzz --seed {seed} --steps {} --rounds 1{}",
                    version(),
                    a.steps,
                    a.driver
                        .map(|m| format!(
                            " --driver {}",
                            DRIVERS.iter().find(|(_, x)| *x == m).unwrap().0
                        ))
                        .unwrap_or_default()
                );
                failure = Some(e);
                break;
            }
        }
    }
    if failure.is_none() {
        progress(&a, &t, start);
    }
    println!(
        "# where the time went ({}):",
        a.driver.unwrap_or("both drivers")
    );
    for l in ops::time_spent() {
        println!("#   {l}");
    }
    let restored = match before {
        Some(m) => load(m, false)
            .map_err(|e| println!("# could not load {m} again: {e:#}"))
            .is_ok(),
        None => true,
    };
    println!(
        "# {} rounds in {:.1}s: steps per driver c {} rust {}, {} known differences, {}",
        t.rounds,
        start.elapsed().as_secs_f64(),
        t.steps[0],
        t.steps[1],
        t.known,
        if failure.is_some() {
            "FAILED"
        } else {
            "no mismatch"
        }
    );
    if failure.is_none() && restored {
        ExitCode::from(KSFT_PASS)
    } else {
        ExitCode::from(KSFT_FAIL)
    }
}
