//! `series checkout`: a git worktree of the prepared tree's repository with
//! `base`, then one commit per patch of every series before the one asked
//! for and of that series. Each commit is its patch's: author, date, message
//! (with any changelog after the author's own `---`), and its `Notes:` as a
//! git note; the committer is the author, so the same patches give the same
//! commits. The series' first parent is kept in the worktree's own ref
//! `refs/worktree/xtask-series/<series>`, which `series export` reads.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::Shell;

use super::{git, guard, mail, start_ref};
use crate::layout::Layout;
use crate::progress::{detail, phase};
use crate::tree::{self, Patch};

/// The patches of the series before `name`, and those of `name`.
pub fn patches(repo: &Path, name: &str) -> Result<(Vec<Patch>, Vec<Patch>)> {
    let all = tree::series(repo)?;
    let of = |p: &Patch| p.name.split('/').next().unwrap_or_default().to_string();
    let (mut before, mut this) = (Vec::new(), Vec::new());
    for p in all {
        match of(&p).as_str().cmp(name) {
            std::cmp::Ordering::Less => before.push(p),
            std::cmp::Ordering::Equal => this.push(p),
            std::cmp::Ordering::Greater => {}
        }
    }
    if this.is_empty() {
        bail!(
            "no series {name} with patches under {}",
            repo.join(crate::layout::PATCHES).display()
        );
    }
    Ok((before, this))
}

/// Commits one patch on top of `parent` in the scratch index; returns the
/// commit.
fn commit(sh: &Shell, scratch: &Path, parent: &str, p: &Patch) -> Result<String> {
    let text = std::fs::read_to_string(&p.path)?;
    let diff = scratch.join("diff");
    let info = tree::mailinfo(git(sh), scratch, text.as_bytes())
        .with_context(|| format!("{}: not a mail-format patch", p.name))?;
    let field = |k: &str| info.field(k);
    let body = mail::body(&text).with_context(|| format!("{}: not format-patch output", p.name))?;
    if git(sh)
        .args(["apply", "--cached", "--whitespace=nowarn"])
        .arg(&diff)
        .run()
        .is_err()
    {
        bail!(
            "patch {} does not apply on top of the previous ones",
            p.name
        );
    }
    let tree = git(sh).args(["write-tree"]).read()?;
    let (name, email, date) = (field("Author:"), field("Email:"), field("Date:"));
    let message = mail::commit_message(&field("Subject:"), &body.message);
    let _env = [
        ("GIT_AUTHOR_NAME", &name),
        ("GIT_AUTHOR_EMAIL", &email),
        ("GIT_AUTHOR_DATE", &date),
        ("GIT_COMMITTER_NAME", &name),
        ("GIT_COMMITTER_EMAIL", &email),
        ("GIT_COMMITTER_DATE", &date),
    ]
    .map(|(k, v)| sh.push_env(k, v));
    let id = git(sh)
        .args(["commit-tree", &tree, "-p", parent])
        .stdin(message.as_bytes())
        .read()?;
    if let Some(notes) = body.notes {
        let file = scratch.join("notes");
        std::fs::write(&file, notes)?;
        git(sh)
            .args(["notes", "add", "-f", "-F"])
            .arg(&file)
            .arg(&id)
            .run()?;
    }
    Ok(id)
}

/// Commits `patches` on top of `parent` (no work tree is touched); returns
/// the last commit.
fn commit_all(sh: &Shell, git_dir: &Path, parent: &str, patches: &[Patch]) -> Result<String> {
    let index = git_dir.join("xtask-series-index");
    let scratch = git_dir.join("xtask-series-mail");
    std::fs::create_dir_all(&scratch)?;
    let _ = std::fs::remove_file(&index);
    let _env = sh.push_env("GIT_INDEX_FILE", &index);
    git(sh).args(["read-tree", parent]).run()?;
    let mut head = parent.to_string();
    for p in patches {
        head = commit(sh, &scratch, &head, p)?;
    }
    let _ = std::fs::remove_file(&index);
    Ok(head)
}

/// The worktree that has `branch` checked out, if one has.
fn checked_out(sh: &Shell, branch: &str) -> Result<Option<String>> {
    let list = git(sh).args(["worktree", "list", "--porcelain"]).read()?;
    Ok(worktree_of(&list, branch))
}

/// In `git worktree list --porcelain` output, the worktree on `branch`.
fn worktree_of(porcelain: &str, branch: &str) -> Option<String> {
    let want = format!("branch refs/heads/{branch}");
    porcelain.split("\n\n").find_map(|entry| {
        let path = entry.lines().find_map(|l| l.strip_prefix("worktree "))?;
        entry.lines().any(|l| l == want).then(|| path.to_string())
    })
}

/// What `checkout` made.
pub struct Checkout {
    pub dir: PathBuf,
    pub branch: String,
    pub start: String,
    pub head: String,
    pub count: usize,
}

pub fn run(layout: &Layout, name: &str, dir: &Path) -> Result<Checkout> {
    let repo_dir = layout.tree();
    if !repo_dir.join(".git").exists() {
        bail!(
            "no prepared tree at {}: run `cargo xtask build-kernel` (or `cargo xtask selftest --list`) first",
            repo_dir.display()
        );
    }
    if dir.exists() {
        bail!(
            "{} exists; give another directory or remove it",
            dir.display()
        );
    }
    let (before, this) = patches(&layout.repo, name)?;
    let sh = Shell::new()?;
    sh.change_dir(&repo_dir);
    let base = git(&sh).args(["rev-parse", "base^{commit}"]).read()?;
    let branch = format!("series/{name}");
    if let Some(other) = checked_out(&sh, &branch)? {
        bail!(
            "branch {branch} is checked out in {other}: export it, then `git worktree remove {other}` (or give that worktree to `series export`)"
        );
    }
    phase(format!(
        "committing {} patches of earlier series, then {} of {name}",
        before.len(),
        this.len()
    ));
    let git_dir = repo_dir.join(".git");
    let start = commit_all(&sh, &git_dir, &base, &before)?;
    let head = commit_all(&sh, &git_dir, &start, &this)?;
    // Amend and rebase carry the notes (a changelog below `---`) along.
    git(&sh)
        .args(["config", "notes.rewriteRef", "refs/notes/commits"])
        .run()?;
    phase(format!("checking out {} (branch {branch})", dir.display()));
    git(&sh)
        .args(["worktree", "add", "-q", "-B", &branch])
        .arg(dir)
        .arg(&head)
        .run()?;
    let wt = Shell::new()?;
    wt.change_dir(dir);
    git(&wt)
        .args(["update-ref", &start_ref(name), &start])
        .run()?;
    let wt_git_dir = git(&wt).args(["rev-parse", "--absolute-git-dir"]).read()?;
    guard::record(
        Path::new(&wt_git_dir),
        &guard::snapshot(&layout.repo, name)?,
    )?;
    detail(format!("{name}: {}..{}", &start[..12], &head[..12]));
    Ok(Checkout {
        dir: dir.to_path_buf(),
        branch,
        start,
        head,
        count: this.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worktree_on_a_branch() {
        let list = "worktree /k/linux\nHEAD 1\nbranch refs/heads/prepared\n\n\
                    worktree /tmp/wt\nHEAD 2\nbranch refs/heads/series/03-rust-ublk\n\n\
                    worktree /tmp/d\nHEAD 3\ndetached\n";
        assert_eq!(
            worktree_of(list, "series/03-rust-ublk").as_deref(),
            Some("/tmp/wt")
        );
        assert_eq!(worktree_of(list, "series/02-ublk-v2"), None);
        assert_eq!(worktree_of(list, "series/03"), None);
    }
}
