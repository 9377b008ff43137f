//! After `series export`: the repository's overlay copies of the files the
//! series touched, made equal to the worktree's. Only files new to the
//! kernel (not in `base`) are overlay files; a file the series deleted
//! leaves the overlay; a file the series creates is added where the overlay
//! mirrors the series (`layout::OVERLAY_MIRRORED`), else named.

use anyhow::Result;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use xshell::Shell;

use super::git;
use crate::layout::{self, Layout};

/// What happened to the overlay, as repository paths.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    pub updated: Vec<PathBuf>,
    pub added: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
    /// Created by the series, not carried in the overlay (kernel-tree paths).
    pub not_carried: Vec<PathBuf>,
    /// Also changed by a later series, whose version the overlay must hold:
    /// left alone (repository paths).
    pub later: Vec<PathBuf>,
}

/// Whether the repository carries a file the series creates at `rel`.
fn mirrored(rel: &Path) -> bool {
    layout::OVERLAY_MIRRORED.iter().any(|d| rel.starts_with(d))
}

fn mode(p: &Path) -> Option<u32> {
    std::fs::metadata(p)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

/// Copies `src` over `dst` if content or mode differ; says whether it did.
fn copy_if_changed(src: &Path, dst: &Path) -> Result<bool> {
    if std::fs::read(src)? == std::fs::read(dst).unwrap_or_default() && mode(src) == mode(dst) {
        return Ok(false);
    }
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(src, dst)?;
    Ok(true)
}

/// The kernel-tree paths a patch's diff names (`--- a/P`, `+++ b/P`).
pub fn paths_in(patch: &str) -> BTreeSet<PathBuf> {
    let mut in_header = false;
    let mut out = BTreeSet::new();
    for l in patch.lines() {
        if l.starts_with("diff --git ") {
            in_header = true;
        } else if l.starts_with("@@") {
            in_header = false;
        } else if let Some(p) = l
            .strip_prefix("--- a/")
            .or(l.strip_prefix("+++ b/"))
            .filter(|_| in_header)
        {
            out.insert(PathBuf::from(p));
        }
    }
    out
}

/// Brings the overlay in `layout.repo` to the worktree `dir`'s files among
/// those changed between `start` and HEAD or named by the series' patches
/// before the export (`before`: a dropped commit's files count too), except
/// those a later series changes (`later`).
pub fn sync(
    layout: &Layout,
    dir: &Path,
    start: &str,
    before: BTreeSet<PathBuf>,
    later: &BTreeSet<PathBuf>,
) -> Result<Synced> {
    let sh = Shell::new()?;
    sh.change_dir(dir);
    let mut touched = before;
    touched.extend(
        git(&sh)
            .args(["diff", "--name-only", "--no-renames", start, "HEAD"])
            .read()?
            .lines()
            .map(PathBuf::from),
    );
    let mut out = Synced::default();
    for path in touched {
        let upstream = git(&sh)
            .args(["cat-file", "-e"])
            .arg(format!("base:{}", path.display()))
            .ignore_stderr()
            .run()
            .is_ok();
        let Some(rel) = layout::overlay_source(&path).filter(|_| !upstream) else {
            continue;
        };
        if later.contains(&path) {
            out.later.push(rel);
            continue;
        }
        let (src, dst) = (dir.join(&path), layout.repo.join(&rel));
        match (src.is_file(), dst.is_file()) {
            (true, true) => {
                if copy_if_changed(&src, &dst)? {
                    out.updated.push(rel);
                }
            }
            (true, false) if mirrored(&rel) => {
                copy_if_changed(&src, &dst)?;
                out.added.push(rel);
            }
            (true, false) => out.not_carried.push(path),
            (false, true) => {
                std::fs::remove_file(&dst)?;
                out.removed.push(rel);
            }
            (false, false) => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_a_patch() {
        let p = "Subject: x\n\n---\n a | 1 +\n\ndiff --git a/a.rs b/a.rs\n--- a/a.rs\n+++ b/a.rs\n@@ -1 +1 @@\n--- a/not-a-header\n\
                 diff --git a/n.rs b/n.rs\nnew file mode 100644\n--- /dev/null\n+++ b/n.rs\n";
        let got: Vec<PathBuf> = paths_in(p).into_iter().collect();
        assert_eq!(got, [PathBuf::from("a.rs"), PathBuf::from("n.rs")]);
    }
}
