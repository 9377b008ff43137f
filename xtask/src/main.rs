//! `cargo xtask`: build and test the ublk drivers (C and Rust) on Linux 7.3.
//!
//! Subcommands:
//! - `build-kernel`: fetch the kernel source, prepare a git tree with this
//!   repository's overlay files and `patches/` applied, configure and build it.
//! - `selftest`: build what is stale, boot the kernel in QEMU and run the
//!   upstream ublk selftests plus ours, reporting KTAP.
//! - `vm`: boot the same guest with a ublk driver loaded and run a command.
//! - `bench`: measure the drivers; `profile`: where a selftest boot's time
//!   went; `prepare-send`: a series as it would be mailed; `check`: the
//!   static checks (checkpatch, rustfmt, clippy, shellcheck, reST); `results`:
//!   the page of committed results (xtask/results/README.md); `series`: a
//!   patch series as git commits in a worktree, and back into `patches/`.

mod apt;
mod bench;
mod check;
mod cli;
mod digest;
mod eta;
mod fuzz;
mod guest;
mod kbuild;
mod kconfig;
mod ktap;
mod layout;
mod markdown;
mod pipeline;
mod prereq;
mod profile;
mod progress;
mod results;
mod rublk;
mod selftest;
mod send;
mod series;
mod sharing;
mod source;
mod splat;
mod tier;
mod toolchain;
mod tree;
mod userland;
mod vm;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    match cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
