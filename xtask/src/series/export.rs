//! `series export`: the commits of a `series checkout` worktree back into
//! `patches/<series>/` with `git format-patch --zero-commit`, in the
//! series' style (`style.rs`): same numbering, `[PATCH n/N]` subjects,
//! reroll and signature. A file whose text is unchanged but for its
//! `From <commit>` line and header folding is left as it is; files of patches that are gone
//! are removed; the cover letter (`0000-*`) is kept, its `n/N` updated;
//! other files (a README) are left alone. Then the overlay (`overlay.rs`).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use xshell::Shell;

use super::style::{self, Style};
use super::{git, guard, overlay, start_ref};
use crate::layout::{self, Layout};
use crate::tree;

/// What happened to `patches/<series>/`, as file names.
#[derive(Debug, Default)]
pub struct Exported {
    pub count: usize,
    pub written: Vec<String>,
    pub kept: Vec<String>,
    pub removed: Vec<String>,
    pub cover: Option<String>,
    pub overlay: overlay::Synced,
}

/// The `*.patch` files of a series directory, cover letter apart:
/// (cover letter, patches), each as (file name, text), in order.
type Files = (Option<(String, String)>, Vec<(String, String)>);

fn read_series(dir: &Path) -> Result<Files> {
    let mut cover = None;
    let mut patches = Vec::new();
    if !dir.exists() {
        return Ok((cover, patches));
    }
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".patch"))
        .collect();
    names.sort();
    for n in names {
        let text = std::fs::read_to_string(dir.join(&n))?;
        if tree::is_cover_letter(Path::new(&n)) {
            cover = Some((n, text));
        } else {
            patches.push((n, text));
        }
    }
    Ok((cover, patches))
}

/// Runs format-patch for `start..HEAD` into a scratch directory; returns
/// the files as (name in `patches/`, text).
fn format_patch(sh: &Shell, style: &Style, start: &str) -> Result<Vec<(String, String)>> {
    let count: usize = git(sh)
        .args(["rev-list", "--count", &format!("{start}..HEAD")])
        .read()?
        .parse()?;
    if count == 0 {
        bail!("no commits after the series' start {}", &start[..12]);
    }
    let merges = git(sh)
        .args(["rev-list", "--merges", &format!("{start}..HEAD")])
        .read()?;
    if !merges.is_empty() {
        bail!("the series has merge commits; a series is a line of commits");
    }
    let git_dir = git(sh).args(["rev-parse", "--absolute-git-dir"]).read()?;
    let out = Path::new(&git_dir).join("xtask-export");
    let _ = std::fs::remove_dir_all(&out);
    git(sh)
        .args(["format-patch", "-q", "-o"])
        .arg(&out)
        .args(style.format_patch_args(count))
        .arg(format!("{start}..HEAD"))
        .run()?;
    let (_, files) = read_series(&out)?;
    std::fs::remove_dir_all(&out)?;
    if files.len() != count {
        bail!(
            "format-patch wrote {} files for {count} commits",
            files.len()
        );
    }
    Ok(files
        .into_iter()
        .map(|(n, t)| (style.file_name(&n), t))
        .collect())
}

/// The patches of the series after `name`.
fn later_patches(repo: &Path, name: &str) -> Result<Vec<tree::Patch>> {
    Ok(tree::series(repo)?
        .into_iter()
        .filter(|p| p.name.split('/').next().is_some_and(|s| s > name))
        .collect())
}

pub fn run(layout: &Layout, name: &str, dir: &Path, force: bool) -> Result<Exported> {
    let sh = Shell::new()?;
    sh.change_dir(dir);
    let start = git(&sh)
        .args(["rev-parse", "-q", "--verify", &start_ref(name)])
        .read()
        .ok()
        .filter(|s| !s.is_empty())
        .with_context(|| {
            format!(
                "{} is not a checkout of {name} (`cargo xtask series checkout {name} DIR` makes one)",
                dir.display()
            )
        })?;
    let dirty = git(&sh)
        .args(["status", "--porcelain", "--untracked-files=no"])
        .read()?;
    if !dirty.is_empty() {
        bail!(
            "{} has changes that are not committed; commit them (or stash them) first:\n{dirty}",
            dir.display()
        );
    }
    let git_dir = PathBuf::from(git(&sh).args(["rev-parse", "--absolute-git-dir"]).read()?);
    if !force {
        guard::check(&git_dir, &layout.repo, name)?;
    }
    let series_dir = layout.repo.join(layout::PATCHES).join(name);
    let (cover, old) = read_series(&series_dir)?;
    let style = Style::of(&old);
    let new = format_patch(&sh, &style, &start)?;
    let mut out = Exported {
        count: new.len(),
        ..Exported::default()
    };
    std::fs::create_dir_all(&series_dir)?;
    let old: BTreeMap<String, String> = old.into_iter().collect();
    for (n, text) in &new {
        match old.get(n) {
            Some(o) if o == text => {}
            Some(o) if style::keep_existing(o, text) => out.kept.push(n.clone()),
            _ => {
                std::fs::write(series_dir.join(n), text)?;
                out.written.push(n.clone());
            }
        }
    }
    for n in old.keys() {
        if !new.iter().any(|(m, _)| m == n) {
            std::fs::remove_file(series_dir.join(n))?;
            out.removed.push(n.clone());
        }
    }
    if let Some((n, text)) = cover {
        let renumbered = style::renumber_cover(&text, new.len());
        if renumbered != text {
            std::fs::write(series_dir.join(&n), renumbered)?;
            out.cover = Some(n);
        }
    }
    let before = old.values().flat_map(|t| overlay::paths_in(t)).collect();
    let mut later = std::collections::BTreeSet::new();
    for p in later_patches(&layout.repo, name)? {
        later.extend(overlay::paths_in(&std::fs::read_to_string(&p.path)?));
    }
    out.overlay = overlay::sync(layout, dir, &start, before, &later)?;
    guard::record(&git_dir, &guard::snapshot(&layout.repo, name)?)?;
    Ok(out)
}
