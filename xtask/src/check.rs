//! `cargo xtask check`: the static checks a change passes before it is
//! committed or sent, each with a verdict line.
//!
//! - checkpatch: `scripts/checkpatch.pl --strict` over every patch of
//!   `patches/` but cover letters, but for what needs the sender or
//!   upstream's history ([`CHECKPATCH_IGNORE`]);
//! - rustfmtcheck: the kernel's `make rustfmtcheck` over the prepared tree;
//! - clippy (kernel): a `CLIPPY=1` build of the kernel crate, rust_ublk and
//!   rnull;
//! - cargo fmt and cargo clippy (`-D warnings`) of this workspace;
//! - shellcheck (`-S warning`) of the guest scripts and our selftests;
//! - reST: every `.rst` under `Documentation/` parsed by docutils, warnings
//!   fatal (the kernel's Sphinx build is not set up here).
//!
//! The kernel checks need the prepared tree and its configured build
//! directory: the kernel is built first if it is stale (`build-kernel`).

use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::pipeline::{self, KernelOpts};
use crate::progress::{detail, phase};
use crate::tree;

#[derive(clap::Args, Debug)]
pub struct CheckOpts {
    #[command(flatten)]
    pub kernel: KernelOpts,
}

/// The outcome of one check.
enum Verdict {
    Ok,
    Fail(String),
    Skipped(String),
}

/// Runs every check and prints a verdict line for each; returns whether
/// none failed (a skipped check does not pass: it is said so).
pub fn run(opts: &CheckOpts) -> Result<bool> {
    let layout = pipeline::layout(&opts.kernel)?;
    let out = pipeline::ensure_kernel(&layout, &opts.kernel)?;
    let tree_dir = layout.tree();
    let kmake = pipeline::make(&layout, &opts.kernel)?;
    let make = |targets: &[&str]| kmake.command(&out.out, targets);
    let checks: Vec<(&str, Verdict)> = vec![
        ("checkpatch --strict", checkpatch(&layout.repo, &tree_dir)?),
        ("rustfmtcheck", command(make(&["rustfmtcheck"]), "Diff in")?),
        (
            "clippy (kernel, CLIPPY=1)",
            command(
                make(&[
                    "CLIPPY=1",
                    "drivers/block/rust_ublk/rust_ublk.o",
                    "drivers/block/rnull/",
                ]),
                "warning:",
            )?,
        ),
        (
            "cargo fmt --check",
            command(cargo(&layout.repo, &["fmt", "--all", "--check"]), "Diff in")?,
        ),
        (
            "cargo clippy -D warnings",
            command(
                cargo(
                    &layout.repo,
                    &[
                        "clippy",
                        "--workspace",
                        "--all-targets",
                        "--",
                        "-D",
                        "warnings",
                    ],
                ),
                "warning:",
            )?,
        ),
        ("shellcheck -S warning", shellcheck(&layout.repo)?),
        ("reST (docutils)", rest(&layout.repo)?),
    ];
    let mut ok = true;
    for (name, verdict) in checks {
        match verdict {
            Verdict::Ok => phase(format!("check {name}: ok")),
            Verdict::Skipped(why) => {
                ok = false;
                phase(format!("check {name}: skipped: {why}"));
            }
            Verdict::Fail(what) => {
                ok = false;
                phase(format!("check {name}: FAILED"));
                for l in what.lines().take(40) {
                    detail(l);
                }
            }
        }
    }
    Ok(ok)
}

fn cargo(repo: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(repo).args(args);
    c
}

/// Runs `c`: it fails if it exits non-zero or if its output has a line
/// containing `bad` (tools that report without failing).
fn command(mut c: Command, bad: &str) -> Result<Verdict> {
    let o = c.output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let flagged: Vec<&str> = text.lines().filter(|l| l.contains(bad)).collect();
    Ok(if o.status.success() && flagged.is_empty() {
        Verdict::Ok
    } else if flagged.is_empty() {
        Verdict::Fail(tail(&text, 40))
    } else {
        Verdict::Fail(flagged.join("\n"))
    })
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What checkpatch cannot judge here, and why:
/// - `MISSING_SIGN_OFF`: `prepare-send` adds the sender's Signed-off-by;
/// - `UNKNOWN_COMMIT_ID`: the prepared tree has no upstream history to
///   look a Fixes: or cited commit up in;
/// - `FILE_PATH_CHANGES`: "does MAINTAINERS need updating?" for every new
///   file; the entries that cover them (UBLK USERSPACE BLOCK DRIVER for
///   the selftests, RUST for rust/, the Rust ublk driver's own entry that
///   the series adds) are checked by reading, not here.
const CHECKPATCH_IGNORE: &str = "MISSING_SIGN_OFF,UNKNOWN_COMMIT_ID,FILE_PATH_CHANGES";

/// checkpatch --strict over every patch that is not a cover letter.
fn checkpatch(repo: &Path, tree_dir: &Path) -> Result<Verdict> {
    let mut found = String::new();
    for p in tree::series(repo)? {
        if tree::is_cover_letter(&p.path) {
            continue;
        }
        let o = Command::new("./scripts/checkpatch.pl")
            .current_dir(tree_dir)
            .args(["--strict", "--terse", "--no-summary"])
            .args(["--ignore", CHECKPATCH_IGNORE])
            .arg(&p.path)
            .output()?;
        // Its stderr carries only the tools it could not run (spdxcheck
        // without python3-ply), not findings.
        let msgs = String::from_utf8_lossy(&o.stdout);
        for l in msgs.lines().filter(|l| !l.trim().is_empty()) {
            found.push_str(&format!("{}: {l}\n", p.name));
        }
    }
    Ok(if found.is_empty() {
        Verdict::Ok
    } else {
        Verdict::Fail(found)
    })
}

/// The shell scripts that run in the guest or are our selftests.
fn shell_scripts(repo: &Path) -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for dir in ["xtask/guest", "xtask/guest/tests", "selftests"] {
        for e in std::fs::read_dir(repo.join(dir))? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "sh") {
                v.push(p);
            }
        }
    }
    v.sort();
    Ok(v)
}

fn shellcheck(repo: &Path) -> Result<Verdict> {
    if Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_err()
    {
        return Ok(Verdict::Skipped(
            "shellcheck is not installed (apt-get install shellcheck)".into(),
        ));
    }
    let mut c = Command::new("shellcheck");
    c.current_dir(repo)
        .args(["-S", "warning"])
        .args(shell_scripts(repo)?);
    command(c, "SC")
}

/// The Python program that parses one reST file with docutils and fails
/// on a warning or worse.
const DOCUTILS_CHECK: &str = "import docutils.core, sys; \
docutils.core.publish_doctree(open(sys.argv[1]).read(), source_path=sys.argv[1], \
settings_overrides={'report_level': 2, 'halt_level': 2})";

/// The `.rst` files under `Documentation/` of the repository, sorted.
fn rst_files(repo: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut dirs = vec![repo.join("Documentation")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let path = e?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rst") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Parses every reST file of the repository with docutils.
fn rest(repo: &Path) -> Result<Verdict> {
    let has_docutils = Command::new("python3")
        .args(["-c", "import docutils"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_docutils {
        return Ok(Verdict::Skipped(
            "python3 docutils is not installed (apt-get install python3-docutils)".into(),
        ));
    }
    let mut failed = Vec::new();
    for f in rst_files(repo)? {
        let o = Command::new("python3")
            .args(["-c", DOCUTILS_CHECK])
            .arg(&f)
            .output()?;
        if !o.status.success() {
            failed.push(format!(
                "{}: {}",
                f.display(),
                tail(&String::from_utf8_lossy(&o.stderr), 3)
            ));
        }
    }
    Ok(if failed.is_empty() {
        Verdict::Ok
    } else {
        Verdict::Fail(failed.join("\n"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rst_files_include_the_driver_doc() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let v = rst_files(repo).unwrap();
        assert!(v
            .iter()
            .any(|p| p.ends_with("Documentation/block/rust_ublk.rst")));
    }

    #[test]
    fn shell_scripts_are_found_and_sorted() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let v = shell_scripts(repo).unwrap();
        assert!(v.iter().any(|p| p.ends_with("xtask/guest/run.sh")));
        assert!(v.iter().any(|p| p.ends_with("selftests/test_part_04.sh")));
        assert!(v.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
