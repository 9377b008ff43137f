//! Command line.

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

use crate::pipeline::{self, KernelOpts};
use crate::selftest::SelftestOpts;
use crate::vm::VmOpts;

/// The environment variables every command reads.
const ENVIRONMENT: &str = "\
Environment:
  UBLK_XTASK_WORK   the work directory (prepared tree, builds, runs) [default: target/kernel]
  UBLK_XTASK_CACHE  the download cache (apt state, the source package, rublk) [default: $XDG_CACHE_HOME/ublk-xtask, ~/.cache/ublk-xtask]
  XTASK_NO_KVM      set (to anything): boot QEMU with TCG even where KVM works";

/// What the commands that boot a guest read (also in [`ENVIRONMENT`]).
const GUEST: &str = "\
Environment:
  XTASK_NO_KVM  set (to anything): boot QEMU with TCG even where KVM works
                (KVM is used only when the CPU lists vmx/svm and KVM_CREATE_VM succeeds)";

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Build and test the ublk drivers on Linux 7.3",
    after_help = ENVIRONMENT
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Fetch Linux 7.3, prepare the tree (overlay + patches/), configure and build;
    /// build the guest's userspace (kublk, selftests, rublk).
    BuildKernel(KernelOpts),
    /// Boot the kernel in QEMU and run the ublk selftests (KTAP output).
    #[command(after_help = GUEST)]
    Selftest(SelftestOpts),
    /// Boot the test guest with a ublk driver loaded; run a command or a shell.
    #[command(after_help = GUEST)]
    Vm(VmOpts),
    /// Run the differential fuzzer (selftests/ublk_fuzz) in several guests
    /// at once, for a number of steps or a time; prints the seeds that go
    /// on where the run stopped.
    #[command(after_help = GUEST)]
    Fuzz(crate::fuzz::FuzzOpts),
    /// Measure the drivers, one boot per subcommand: the C series' claims
    /// (cover), Rust against C (rust-vs-c), the driver matrix (matrix);
    /// `report` reprints cover's tables from an earlier run, no boot.
    #[command(after_help = GUEST)]
    Bench(crate::bench::BenchOpts),
    /// Where a selftest boot's time went, from its tests' time-stamped traces.
    Profile(crate::profile::ProfileOpts),
    /// Copy a patch series for sending: your sign-off, To/Cc, checkpatch.
    PrepareSend(crate::send::SendOpts),
    /// Static checks, each with a verdict: checkpatch --strict of every patch,
    /// rustfmtcheck and CLIPPY=1 of the kernel's Rust, cargo fmt and clippy,
    /// shellcheck of the guest scripts, docutils on the reST documentation;
    /// builds the kernel first if it is stale.
    ///
    /// The kernel checks (rustfmtcheck, CLIPPY=1) need the prepared tree
    /// and its configured, built kernel: like build-kernel, `check` first
    /// builds what is stale. On a fresh checkout, or after a change to the
    /// patches, configs or overlay, that is a kernel build: a full one the
    /// first time (a fresh `build-kernel` took 16 to 20 minutes on the
    /// 2-core development machine).
    Check(crate::check::CheckOpts),
    /// The results page (xtask/results/README.md) from the committed
    /// baselines and benchmark reports; builds nothing.
    Results(crate::results::ResultsOpts),
    /// A patch series as git commits: `checkout` makes a worktree with one
    /// commit per patch, `export` writes them back into patches/ and the
    /// files they touched into the overlay.
    Series(crate::series::SeriesOpts),
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::BuildKernel(opts) => {
            let layout = pipeline::layout(&opts)?;
            let out = pipeline::ensure_kernel(&layout, &opts)?;
            // And what the guest runs, so that `selftest` finds it built.
            let userland = crate::userland::ensure(&layout, &out)?;
            pipeline::summary(&out);
            crate::userland::summary(&userland);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Selftest(opts) => Ok(if crate::selftest::run(&opts)? {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }),
        Cmd::Fuzz(opts) => Ok(if crate::fuzz::run(&opts)? {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }),
        Cmd::Bench(opts) => {
            crate::bench::run(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Profile(opts) => {
            crate::profile::run(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::PrepareSend(opts) => {
            crate::send::run(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check(opts) => Ok(if crate::check::run(&opts)? {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }),
        Cmd::Series(opts) => {
            crate::series::run(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Results(opts) => {
            crate::results::run(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Vm(opts) => {
            let code = crate::vm::run(&opts)?;
            Ok(ExitCode::from(
                u8::try_from(code.clamp(0, 255)).unwrap_or(1),
            ))
        }
    }
}

#[cfg(test)]
mod readme;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
