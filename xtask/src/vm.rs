//! `cargo xtask vm`: boot the test guest with a ublk driver loaded and run a
//! command (its exit status is passed back) or an interactive shell.

use anyhow::{bail, Result};
use std::io::IsTerminal;
use std::time::Duration;

use crate::guest::job::{self, Driver, Mode};
use crate::guest::{self, Ending, Guest, Limits};
use crate::pipeline::{self, KernelOpts};
use crate::progress::phase;
use crate::userland;

#[derive(Clone, Debug, clap::Args)]
pub struct VmOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
    /// The ublk driver the guest loads: c (the C ublk_drv), rust (the Rust
    /// one, as the module ublk_drv of modroot-rust), or none (both modules
    /// of the kernel's tree can be loaded by hand: ublk_drv, rust_ublk);
    /// default c, because a guest holds one driver at a time and the
    /// upstream one is the reference.
    #[arg(long, value_enum, default_value = "c")]
    pub driver: Driver,
    /// Limit for the command, seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout: u64,
    /// The guest's vCPUs (selftest and bench always boot 2).
    #[arg(long, value_name = "N", default_value_t = guest::CPUS,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub cpus: u32,
    /// The guest's memory, MiB (selftest and bench always boot 3072).
    #[arg(long, value_name = "MIB", default_value_t = guest::MEMORY_MB,
          value_parser = clap::value_parser!(u32).range(512..))]
    pub memory: u32,
    /// Command to run in the guest (after `--`); none: interactive shell.
    #[arg(last = true)]
    pub command: Vec<String>,
}

fn quote(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn run(opts: &VmOpts) -> Result<i32> {
    let layout = pipeline::layout(&opts.kernel)?;
    let kernel = pipeline::ensure_kernel(&layout, &opts.kernel)?;
    let userland = userland::ensure(&layout, &kernel)?;
    let accel = guest::accel::probe();
    phase(format!("QEMU accelerator: {accel}"));
    let mode = if opts.command.is_empty() {
        if !std::io::stdin().is_terminal() {
            bail!("no command given (`cargo xtask vm -- CMD ...`) and stdin is not a terminal for a shell");
        }
        Mode::Shell
    } else {
        Mode::Command(quote(&opts.command))
    };
    let job = job::create(&layout, "vm", &kernel, &userland, opts.driver, &mode)?;
    let g = Guest {
        kernel: &kernel,
        job: &job,
        accel: &accel,
        size: guest::Size {
            cpus: opts.cpus,
            memory_mb: opts.memory,
        },
    };
    if matches!(mode, Mode::Shell) {
        let st = g.command().status()?;
        phase(format!("guest exited ({st})"));
        if let Some(why) = job.not_started() {
            bail!("{why}; console in {}", job.console().display());
        }
        return Ok(job.status().and_then(|s| s.parse().ok()).unwrap_or(1));
    }
    let limits = Limits {
        total: Duration::from_secs(opts.timeout),
        stall: None,
    };
    let outcome = guest::run_watched(g.command(), &limits, &job.console(), |l| println!("{l}"))?;
    let splats = crate::selftest::boot_splats(&job);
    for s in &splats {
        eprintln!(
            "xtask: kernel splat: {} during {}: {}",
            s.kind, s.during, s.line
        );
    }
    if let Ending::Killed(why) = &outcome.ending {
        bail!(
            "guest killed: {why}; console in {}",
            job.console().display()
        );
    }
    if let Some(why) = job.not_started() {
        bail!("{why}; console in {}", job.console().display());
    }
    match job.status() {
        Some(s) => Ok(s.parse().unwrap_or(1)),
        None => bail!(
            "the guest ended before the command finished (panic?); console in {}",
            job.console().display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(quote(&w(&["ls", "-l", "/dev"])), "ls -l /dev");
        assert_eq!(
            quote(&w(&["sh", "-c", "echo $X; exit 3"])),
            "sh -c 'echo $X; exit 3'"
        );
        assert_eq!(quote(&w(&["it's"])), r"'it'\''s'");
    }
}
