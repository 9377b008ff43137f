//! What the repository held of a series when it was checked out: the files
//! of `patches/<series>/` and the overlay files its patches touch, by
//! content hash, in the worktree's git directory. `series export` refuses
//! to overwrite them when they changed since (another change to the series
//! or to the driver, committed or not), unless told to.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::overlay;
use crate::layout;

/// The record's file in the worktree's git directory.
const RECORD: &str = "xtask-series-inputs";

/// Repository path → SHA-256 of its content.
type Snapshot = BTreeMap<String, String>;

fn hash(p: &Path) -> Option<String> {
    std::fs::read(p)
        .ok()
        .map(|b| format!("{:x}", Sha256::digest(b)))
}

/// The series' files in `repo` now: every file of `patches/<series>/`, and
/// each overlay file the repository carries for a path its patches touch.
pub fn snapshot(repo: &Path, series: &str) -> Result<Snapshot> {
    let dir = Path::new(layout::PATCHES).join(series);
    let mut out = Snapshot::new();
    let Ok(entries) = std::fs::read_dir(repo.join(&dir)) else {
        return Ok(out);
    };
    let mut touched = std::collections::BTreeSet::new();
    for e in entries {
        let p = e?.path();
        if !p.is_file() {
            continue;
        }
        let rel = dir.join(p.file_name().unwrap_or_default());
        if let Some(h) = hash(&p) {
            out.insert(rel.display().to_string(), h);
        }
        if p.extension().is_some_and(|x| x == "patch") {
            touched.extend(overlay::paths_in(&std::fs::read_to_string(&p)?));
        }
    }
    for path in touched {
        let Some(rel) = layout::overlay_source(&path) else {
            continue;
        };
        if let Some(h) = hash(&repo.join(&rel)) {
            out.insert(rel.display().to_string(), h);
        }
    }
    Ok(out)
}

/// Records `snap` for the worktree whose git directory is `git_dir`.
pub fn record(git_dir: &Path, snap: &Snapshot) -> Result<()> {
    let text: String = snap.iter().map(|(p, h)| format!("{h} {p}\n")).collect();
    let file = git_dir.join(RECORD);
    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))
}

fn recorded(git_dir: &Path) -> Option<Snapshot> {
    let text = std::fs::read_to_string(git_dir.join(RECORD)).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(h, p)| (p.to_string(), h.to_string()))
            .collect(),
    )
}

/// The paths that differ between two snapshots (changed, added, removed).
pub fn changed(then: &Snapshot, now: &Snapshot) -> Vec<PathBuf> {
    let paths: std::collections::BTreeSet<&String> = then.keys().chain(now.keys()).collect();
    paths
        .into_iter()
        .filter(|p| then.get(*p) != now.get(*p))
        .map(PathBuf::from)
        .collect()
}

/// Fails when the series' files in `repo` changed since the checkout whose
/// git directory is `git_dir` recorded them.
pub fn check(git_dir: &Path, repo: &Path, series: &str) -> Result<()> {
    let Some(then) = recorded(git_dir) else {
        return Ok(());
    };
    let diff = changed(&then, &snapshot(repo, series)?);
    if !diff.is_empty() {
        let list: Vec<String> = diff.iter().map(|p| p.display().to_string()).collect();
        bail!(
            "since the checkout, the repository's copy of these files changed, and export would overwrite them: {}; \
             bring the change into the worktree (or check the series out again), or export with --force",
            list.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_between_snapshots() {
        let s = |v: &[(&str, &str)]| -> Snapshot {
            v.iter()
                .map(|(p, h)| (p.to_string(), h.to_string()))
                .collect()
        };
        let then = s(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let now = s(&[("a", "1"), ("b", "9"), ("d", "4")]);
        assert_eq!(
            changed(&then, &now),
            ["b", "c", "d"].map(PathBuf::from).to_vec()
        );
        assert!(changed(&then, &then).is_empty());
    }
}
