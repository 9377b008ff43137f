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
    /// Measure the drivers, one run per subcommand: the C series' claims
    /// (cover), Rust against C (rust-vs-c), the driver matrix (matrix).
    #[command(after_help = GUEST)]
    Bench(crate::bench::BenchOpts),
    /// Where a selftest boot's time went, from its tests' time-stamped traces.
    Profile(crate::profile::ProfileOpts),
    /// Copy a patch series for sending: your sign-off, To/Cc, checkpatch.
    PrepareSend(crate::send::SendOpts),
    /// Static checks, each with a verdict: checkpatch --strict of every patch,
    /// rustfmtcheck and CLIPPY=1 of the kernel's Rust, cargo fmt and clippy,
    /// shellcheck of the guest scripts.
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
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The lines of the code blocks of `markdown` (fenced, or indented by
    /// four spaces or a tab), continuation lines joined.
    fn code_lines(markdown: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut fence: Option<&str> = None;
        let mut pending = String::new();
        for line in markdown.lines() {
            let t = line.trim_start();
            if let Some(f) = fence {
                if t.starts_with(f) {
                    fence = None;
                    continue;
                }
            } else if let Some(f) = ["```", "~~~"].into_iter().find(|f| t.starts_with(f)) {
                fence = Some(f);
                continue;
            } else if !(line.starts_with("    ") || line.starts_with('\t')) && pending.is_empty() {
                continue;
            }
            pending.push_str(t);
            match pending.strip_suffix('\\') {
                Some(head) => pending = format!("{head} "),
                None => out.push(std::mem::take(&mut pending)),
            }
        }
        out
    }

    /// The words after `cargo xtask` of each command that a line of code
    /// runs (`a && b`, `a | b`, `$ ` prompts, `VAR=x` prefixes, `# `
    /// comments); shell quotes are removed.
    fn xtask_commands(line: &str) -> Vec<Vec<String>> {
        let line = line.split(" # ").next().unwrap_or_default();
        line.split(['&', '|', ';'])
            .filter_map(|part| {
                let words = shell_words(part.trim().trim_start_matches("$ "));
                let start = words.iter().position(|w| !w.contains('='))?;
                let rest = &words[start..];
                (rest.len() >= 2 && rest[0] == "cargo" && rest[1] == "xtask")
                    .then(|| rest[2..].to_vec())
            })
            .collect()
    }

    /// Splits on blanks outside single or double quotes.
    fn shell_words(s: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word: Option<String> = None;
        let mut quote: Option<char> = None;
        for c in s.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => word.get_or_insert_with(String::new).push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    word.get_or_insert_with(String::new);
                }
                (None, c) if c.is_whitespace() => words.extend(word.take()),
                (None, c) => word.get_or_insert_with(String::new).push(c),
            }
        }
        words.extend(word);
        words
    }

    #[test]
    fn commands_are_found_in_markdown() {
        let md = "text `cargo xtask nope`\n\n    cargo xtask vm -- sh -c 'a b'\n\n```sh\n$ XTASK_NO_KVM=1 cargo xtask selftest \\\n   --quick # smoke\ncargo test && cargo xtask check\n```\ncargo xtask outside\n";
        let cmds: Vec<Vec<String>> = code_lines(md)
            .iter()
            .flat_map(|l| xtask_commands(l))
            .collect();
        assert_eq!(
            cmds,
            [
                vec!["vm", "--", "sh", "-c", "a b"],
                vec!["selftest", "--quick"],
                vec!["check"],
            ]
        );
    }

    /// Every `cargo xtask` command line in the code blocks of the READMEs
    /// parses (read when the test runs: the READMEs change on their own).
    #[test]
    fn readme_commands_parse() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut seen = 0;
        for file in ["README.md", "xtask/README.md"] {
            let text = std::fs::read_to_string(repo.join(file)).unwrap();
            for line in code_lines(&text) {
                for args in xtask_commands(&line) {
                    seen += 1;
                    let argv = std::iter::once("cargo xtask".to_string()).chain(args);
                    if let Err(e) = Cli::try_parse_from(argv) {
                        use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
                        if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                            panic!("{file}: `{line}` does not parse:\n{e}");
                        }
                    }
                }
            }
        }
        assert!(
            seen > 0,
            "no `cargo xtask` command in the READMEs' code blocks"
        );
    }
}
