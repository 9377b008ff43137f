//! `cargo xtask series`: change a patch series as git commits, once.
//! `series checkout` makes a git worktree with one commit per patch
//! (`checkout.rs`); after editing, rebasing or adding commits there,
//! `series export` writes the series back into `patches/` and the overlay
//! copies of the files it touched into the repository (`export.rs`,
//! `overlay.rs`), unless the repository's copy changed since the checkout
//! (`guard.rs`). A patch file is read by `mail.rs`; how a series' files
//! are named and numbered is `style.rs`.

mod checkout;
mod export;
mod guard;
mod mail;
mod overlay;
mod style;

use anyhow::Result;
use std::path::{Path, PathBuf};

use crate::layout::Layout;
use crate::progress::{detail, phase};

#[derive(Clone, Debug, clap::Args)]
pub struct SeriesOpts {
    #[command(subcommand)]
    pub cmd: SeriesCmd,
    /// Work directory of the prepared tree (default target/kernel, or
    /// $UBLK_XTASK_WORK).
    #[arg(long, value_name = "DIR", global = true)]
    pub work_dir: Option<PathBuf>,
}

#[derive(Clone, Debug, clap::Subcommand)]
pub enum SeriesCmd {
    /// A git worktree of the prepared tree: `base`, the earlier series,
    /// then one commit per patch of SERIES (needs a prepared tree: run
    /// build-kernel or `selftest --list` once).
    Checkout {
        /// A directory under patches/, e.g. 03-rust-ublk.
        series: String,
        /// The worktree to make [default: target/series/SERIES].
        dir: Option<PathBuf>,
    },
    /// Write the worktree's commits back into patches/SERIES (format-patch
    /// --zero-commit, numbered as before) and copy the files they touched
    /// into the repository's overlay.
    Export {
        /// The series' directory under patches/, e.g. 03-rust-ublk (the
        /// one `series checkout` was given).
        series: String,
        /// The worktree `series checkout` made [default: target/series/SERIES].
        dir: Option<PathBuf>,
        /// Write even if patches/SERIES or the overlay files its patches
        /// touch changed in the repository since the checkout.
        #[arg(long)]
        force: bool,
    },
}

/// Git with no user or system configuration (format-patch's output must
/// not depend on who runs it) and a fixed identity for the notes.
fn git(sh: &xshell::Shell) -> xshell::Cmd<'_> {
    xshell::cmd!(
        sh,
        "git -c user.name=ublk-xtask -c user.email=xtask@invalid -c advice.detachedHead=false"
    )
    .env("GIT_CONFIG_GLOBAL", "/dev/null")
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .quiet()
}

/// The worktree's own ref holding the commit the series starts on.
fn start_ref(series: &str) -> String {
    format!("refs/worktree/xtask-series/{series}")
}

fn default_dir(layout: &Layout, series: &str) -> PathBuf {
    layout.repo.join("target/series").join(series)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    Ok(if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    })
}

pub fn run(opts: &SeriesOpts) -> Result<()> {
    let layout = Layout::discover(opts.work_dir.clone())?;
    match &opts.cmd {
        SeriesCmd::Checkout { series, dir } => {
            let dir = match dir {
                Some(d) => absolute(d)?,
                None => default_dir(&layout, series),
            };
            let c = checkout::run(&layout, series, &dir)?;
            phase(format!(
                "{series}: {} commits on branch {} in {}",
                c.count,
                c.branch,
                c.dir.display()
            ));
            detail(format!(
                "the series is {}..{} (`git log refs/worktree/xtask-series/{series}..`)",
                &c.start[..12],
                &c.head[..12]
            ));
            detail(
                "add a new file with `git add -f`: the Debian source's .gitignore ignores every new path",
            );
            detail(format!(
                "change it there (commit, rebase -i), then: cargo xtask series export {series}{}",
                if dir == default_dir(&layout, series) {
                    String::new()
                } else {
                    format!(" {}", dir.display())
                }
            ));
        }
        SeriesCmd::Export { series, dir, force } => {
            let dir = match dir {
                Some(d) => absolute(d)?,
                None => default_dir(&layout, series),
            };
            let e = export::run(&layout, series, &dir, *force)?;
            report(series, &e);
        }
    }
    Ok(())
}

fn report(series: &str, e: &export::Exported) {
    let unchanged = e.count - e.written.len() - e.kept.len();
    phase(format!(
        "patches/{series}: {} patches, {} written, {unchanged} unchanged, {} removed",
        e.count,
        e.written.len(),
        e.removed.len()
    ));
    for n in &e.written {
        detail(format!("wrote    {n}"));
    }
    for n in &e.kept {
        detail(format!(
            "kept     {n} (differs only in its From <commit> line or header folding)"
        ));
    }
    for n in &e.removed {
        detail(format!("removed  {n}"));
    }
    if let Some(n) = &e.cover {
        detail(format!("renumbered {n}; its text is yours to update"));
    }
    let o = &e.overlay;
    phase(format!(
        "overlay: {} updated, {} added, {} removed",
        o.updated.len(),
        o.added.len(),
        o.removed.len()
    ));
    for (what, list) in [
        ("updated", &o.updated),
        ("added  ", &o.added),
        ("removed", &o.removed),
    ] {
        for p in list {
            detail(format!("{what}  {}", p.display()));
        }
    }
    for p in &o.later {
        detail(format!(
            "left     {}: a later series changes it too, and the overlay holds its version",
            p.display()
        ));
    }
    for p in &o.not_carried {
        detail(format!(
            "not in the overlay: {} (created by the series, lives in its patch)",
            p.display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(dir: &Path, script: &str) -> String {
        let out = Command::new("sh")
            .current_dir(dir)
            .args(["-ec", script])
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    const ID: &str = "git -c user.name=t -c user.email=t@invalid";

    /// A kernel tree with `base`, and a repository with two series made by
    /// format-patch: 01-a (one patch, `[PATCH]`), 02-b (a cover letter
    /// and two `[PATCH v2 n/2]` patches, one with notes, one with a
    /// changelog after its own `---`), and the overlay copy of the file
    /// 02-b creates.
    fn fixture() -> (tempfile::TempDir, Layout) {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        let tree = d.path().join("work/linux");
        std::fs::create_dir_all(tree.join("drivers/block")).unwrap();
        std::fs::write(tree.join("drivers/block/ublk_drv.c"), "int x;\n").unwrap();
        sh(
            &tree,
            &format!("git init -q && git add -A && {ID} commit -qm base && git tag base"),
        );
        sh(
            &tree,
            &format!(
                "git checkout -q -b s && echo 'int y;' >> drivers/block/ublk_drv.c \
                 && {ID} commit -qam 'ublk: y' -m 'Why y.' \
                 && mkdir -p ../../repo/patches/01-a \
                 && git format-patch -q --zero-commit -o ../../repo/patches/01-a base \
                 && mkdir -p drivers/block/rust_x && printf 'a\\n' > drivers/block/rust_x/a.rs \
                 && git add -A && {ID} commit -qm 'block: rust_x: add a' -m 'Because.' \
                 && {ID} notes add -m 'v2: new.' \
                 && printf 'b\\n' >> drivers/block/rust_x/a.rs \
                 && {ID} commit -qam 'block: rust_x: b, with a subject long enough to be folded by git format-patch' \
                    -m 'Body.' -m '---' -m 'v1: was c.' \
                 && mkdir -p ../../repo/patches/02-b \
                 && git format-patch -q --zero-commit --notes -v2 --cover-letter -o ../../repo/patches/02-b HEAD~2 \
                 && cd ../../repo/patches/02-b && for f in v2-*; do mv $f ${{f#v2-}}; done \
                 && mkdir -p ../../drivers/block/rust_x && cp ../../../work/linux/drivers/block/rust_x/a.rs ../../drivers/block/rust_x/"
            ),
        );
        let layout = Layout {
            repo,
            work: d.path().join("work"),
            cache: d.path().join("cache"),
        };
        (d, layout)
    }

    fn snapshot(dir: &Path) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                (n, std::fs::read_to_string(e.path()).unwrap())
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn checkout_then_export_reproduces_the_series() {
        let (d, layout) = fixture();
        let dir = d.path().join("wt");
        let before = snapshot(&layout.repo.join("patches/02-b"));
        assert_eq!(before.len(), 3, "{before:?}");
        let c = checkout::run(&layout, "02-b", &dir).unwrap();
        assert_eq!(c.count, 2);
        assert_eq!(
            sh(&dir, "git log --format=%an%x09%cn%x09%s base..HEAD"),
            "t\tt\tblock: rust_x: b, with a subject long enough to be folded by git format-patch\n\
             t\tt\tblock: rust_x: add a\nt\tt\tublk: y\n"
        );
        let e = export::run(&layout, "02-b", &dir, false).unwrap();
        assert!(
            e.written.is_empty() && e.kept.is_empty() && e.removed.is_empty(),
            "{e:?}"
        );
        assert_eq!(snapshot(&layout.repo.join("patches/02-b")), before);
        assert_eq!(e.overlay, overlay::Synced::default());
        // The earlier series round-trips too.
        let before = snapshot(&layout.repo.join("patches/01-a"));
        let dir_a = d.path().join("wt-a");
        checkout::run(&layout, "01-a", &dir_a).unwrap();
        export::run(&layout, "01-a", &dir_a, false).unwrap();
        assert_eq!(snapshot(&layout.repo.join("patches/01-a")), before);
    }

    #[test]
    fn a_new_commit_is_a_new_numbered_patch_and_reaches_the_overlay() {
        let (d, layout) = fixture();
        let dir = d.path().join("wt");
        checkout::run(&layout, "02-b", &dir).unwrap();
        sh(
            &dir,
            &format!(
                "printf 'c\\n' >> drivers/block/rust_x/a.rs && printf 'n\\n' > drivers/block/rust_x/new.rs \
                 && git add -A && {ID} commit -qm 'block: rust_x: c'"
            ),
        );
        // Uncommitted changes are refused.
        std::fs::write(dir.join("drivers/block/rust_x/a.rs"), "dirty\n").unwrap();
        assert!(export::run(&layout, "02-b", &dir, false).is_err());
        sh(&dir, "git checkout -q -- drivers");
        let e = export::run(&layout, "02-b", &dir, false).unwrap();
        assert_eq!(e.count, 3);
        assert_eq!(
            e.written,
            [
                "0001-block-rust_x-add-a.patch",
                "0002-block-rust_x-b-with-a-subject-long-enough-to-be-f.patch",
                "0003-block-rust_x-c.patch"
            ]
        );
        assert_eq!(e.cover.as_deref(), Some("0000-cover-letter.patch"));
        let series = layout.repo.join("patches/02-b");
        let cover = std::fs::read_to_string(series.join("0000-cover-letter.patch")).unwrap();
        assert!(
            cover.contains("Subject: [PATCH v2 0/3] *** SUBJECT HERE ***"),
            "{cover}"
        );
        let third = std::fs::read_to_string(series.join("0003-block-rust_x-c.patch")).unwrap();
        assert!(
            third.contains("Subject: [PATCH v2 3/3] block: rust_x: c\n"),
            "{third}"
        );
        assert!(third.starts_with("From 0000000000000000000000000000000000000000 "));
        assert_eq!(
            std::fs::read_to_string(layout.repo.join("drivers/block/rust_x/a.rs")).unwrap(),
            "a\nb\nc\n"
        );
        assert_eq!(
            e.overlay.updated,
            [PathBuf::from("drivers/block/rust_x/a.rs")]
        );
        assert_eq!(
            e.overlay.added,
            [PathBuf::from("drivers/block/rust_x/new.rs")]
        );
        // And back: dropping the commit removes its patch and the new file.
        sh(&dir, "git reset -q --hard HEAD~1");
        let e = export::run(&layout, "02-b", &dir, false).unwrap();
        assert_eq!(e.removed, ["0003-block-rust_x-c.patch"]);
        assert_eq!(
            e.overlay.removed,
            [PathBuf::from("drivers/block/rust_x/new.rs")]
        );
        assert_eq!(
            e.overlay.updated,
            [PathBuf::from("drivers/block/rust_x/a.rs")]
        );
    }

    #[test]
    fn a_file_a_later_series_changes_is_left_to_it() {
        let (d, layout) = fixture();
        let later = layout.repo.join("patches/03-c");
        std::fs::create_dir_all(&later).unwrap();
        std::fs::write(
            later.join("0001-c.patch"),
            "Subject: [PATCH] c\n\n---\ndiff --git a/drivers/block/rust_x/a.rs b/drivers/block/rust_x/a.rs\n\
             --- a/drivers/block/rust_x/a.rs\n+++ b/drivers/block/rust_x/a.rs\n@@ -1 +1 @@\n",
        )
        .unwrap();
        let dir = d.path().join("wt");
        checkout::run(&layout, "02-b", &dir).unwrap();
        sh(
            &dir,
            &format!("echo z >> drivers/block/rust_x/a.rs && {ID} commit -qam z"),
        );
        let e = export::run(&layout, "02-b", &dir, false).unwrap();
        assert_eq!(
            e.overlay.later,
            [PathBuf::from("drivers/block/rust_x/a.rs")]
        );
        assert!(e.overlay.updated.is_empty());
        assert_eq!(
            std::fs::read_to_string(layout.repo.join("drivers/block/rust_x/a.rs")).unwrap(),
            "a\nb\n"
        );
    }

    #[test]
    fn export_does_not_overwrite_what_changed_in_the_repository_since_the_checkout() {
        let (d, layout) = fixture();
        let dir = d.path().join("wt");
        checkout::run(&layout, "02-b", &dir).unwrap();
        let mine = layout.repo.join("drivers/block/rust_x/a.rs");
        std::fs::write(&mine, "someone else's edit\n").unwrap();
        let e = export::run(&layout, "02-b", &dir, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("drivers/block/rust_x/a.rs"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&mine).unwrap(),
            "someone else's edit\n"
        );
        std::fs::write(&mine, "a\nb\n").unwrap();
        let added = layout.repo.join("patches/02-b/0003-x.patch");
        std::fs::write(&added, "a patch committed meanwhile\n").unwrap();
        let e = export::run(&layout, "02-b", &dir, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("patches/02-b/0003-x.patch"), "{e}");
        let e = export::run(&layout, "02-b", &dir, true).unwrap();
        assert_eq!(e.removed, ["0003-x.patch"]);
        // What export wrote is the new record.
        export::run(&layout, "02-b", &dir, false).unwrap();
    }

    #[test]
    fn export_needs_a_checkout_of_that_series() {
        let (d, layout) = fixture();
        let dir = d.path().join("wt");
        checkout::run(&layout, "02-b", &dir).unwrap();
        let e = export::run(&layout, "01-a", &dir, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a checkout of 01-a"), "{e}");
        assert!(checkout::run(&layout, "02-b", &dir).is_err());
        let e = checkout::run(&layout, "02-b", &d.path().join("wt2"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("series/02-b is checked out in"), "{e}");
        let e = checkout::run(&layout, "03-none", &d.path().join("x"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no series 03-none"), "{e}");
    }
}
