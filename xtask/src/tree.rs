//! The prepared tree: `base` + the `patches/` series (one commit per patch) +
//! one commit with this repository's overlay files.
//!
//! The target commit is built with plumbing in a scratch index, then the work
//! tree is moved to it with `git reset --hard`, which rewrites only files that
//! differ: unchanged files keep their mtimes, so kbuild rebuilds only what a
//! change touched. Re-running with no change is a no-op.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

use crate::layout::{self, Layout};
use crate::progress::{detail, phase};

/// A patch to apply, in order.
#[derive(Clone, Debug)]
pub struct Patch {
    pub path: PathBuf,
    /// `series/file` for messages.
    pub name: String,
}

/// Lists the patches: series directories in order, files in order, cover
/// letters (`0000-*`) left out.
pub fn series(repo: &Path) -> Result<Vec<Patch>> {
    let dir = repo.join(layout::PATCHES);
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    let mut series: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    series.sort();
    for s in series {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&s)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "patch"))
            .filter(|p| !is_cover_letter(p))
            .collect();
        files.sort();
        for f in files {
            let name = format!(
                "{}/{}",
                s.file_name().unwrap().to_string_lossy(),
                f.file_name().unwrap().to_string_lossy()
            );
            out.push(Patch { path: f, name });
        }
    }
    Ok(out)
}

pub fn is_cover_letter(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("0000-"))
}

/// Lists overlay files as (repository path, tree-relative path).
pub fn overlay_files(repo: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
    let mut out = Vec::new();
    for (src, _) in layout::OVERLAY {
        let root = repo.join(src);
        if root.exists() {
            walk(&root, &mut |p| {
                let rel = p.strip_prefix(repo).unwrap();
                if let Some(dst) = layout::overlay_target(rel) {
                    out.push((p.to_path_buf(), dst));
                }
            })?;
        }
    }
    out.sort();
    Ok(out)
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            walk(&p, f)?;
        } else if p.is_file() {
            f(&p);
        }
    }
    Ok(())
}

fn fingerprint(base: &str, patches: &[Patch], overlay: &[(PathBuf, PathBuf)]) -> Result<String> {
    let mut h = Sha256::new();
    h.update(b"xtask-tree-v1\0");
    h.update(base.as_bytes());
    for p in patches {
        h.update(p.name.as_bytes());
        h.update(std::fs::read(&p.path)?);
    }
    for (src, dst) in overlay {
        h.update(dst.to_string_lossy().as_bytes());
        h.update([is_executable(src) as u8]);
        h.update(std::fs::read(src)?);
    }
    Ok(format!("{:x}", h.finalize()))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

fn git(sh: &Shell) -> xshell::Cmd<'_> {
    cmd!(
        sh,
        "git -c user.name=ublk-xtask -c user.email=xtask@invalid"
    )
    .quiet()
}

/// What `git mailinfo -b` read from a patch mail: its header lines
/// (`Author:`, `Email:`, `Subject:`, `Date:`). It wrote the message to
/// `scratch/msg` and the diff to `scratch/diff`.
pub struct MailInfo(String);

impl MailInfo {
    /// The value of a field (`"Subject:"`), or "" when there is none.
    pub fn field(&self, key: &str) -> String {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
            .unwrap_or_default()
    }
}

/// Runs `git mailinfo -b` (`git`: the git command to run it with) on a
/// patch mail.
pub fn mailinfo(git: xshell::Cmd<'_>, scratch: &Path, mail: &[u8]) -> Result<MailInfo> {
    Ok(MailInfo(
        git.args(["mailinfo", "-b"])
            .arg(scratch.join("msg"))
            .arg(scratch.join("diff"))
            .stdin(mail)
            .read()?,
    ))
}

/// Result of preparing the tree.
pub struct Prepared {
    pub head: String,
}

/// Brings the prepared tree to base + patches + overlay.
pub fn prepare(layout: &Layout) -> Result<Prepared> {
    let tree = layout.tree();
    let sh = Shell::new()?;
    sh.change_dir(&tree);
    let base = git(&sh).args(["rev-parse", "base^{commit}"]).read()?;
    let patches = series(&layout.repo)?;
    let overlay = overlay_files(&layout.repo)?;
    let fp = fingerprint(&base, &patches, &overlay)?;
    let fp_file = tree.join(".git/xtask-fingerprint");
    let head = git(&sh).args(["rev-parse", "HEAD"]).read()?;
    let recorded = std::fs::read_to_string(&fp_file).unwrap_or_default();
    let clean = git(&sh).args(["diff", "--quiet", "HEAD"]).run().is_ok();
    if recorded.trim() == format!("{fp} {head}") && clean {
        phase(format!(
            "prepared tree up to date ({} patches, {} overlay files)",
            patches.len(),
            overlay.len()
        ));
        return Ok(Prepared { head });
    }
    if !clean {
        detail("prepared tree has local changes to tracked files; they are discarded");
    }
    phase(format!(
        "preparing tree: base + {} patches + {} overlay files",
        patches.len(),
        overlay.len()
    ));
    let index = tree.join(".git/xtask-index");
    let _ = std::fs::remove_file(&index);
    let _env = sh.push_env("GIT_INDEX_FILE", &index);
    git(&sh).args(["read-tree", "base"]).run()?;
    let mut parent = base.clone();
    let scratch = tree.join(".git/xtask-mail");
    std::fs::create_dir_all(&scratch)?;
    for p in &patches {
        let (msg, diff) = (scratch.join("msg"), scratch.join("diff"));
        let mail = std::fs::read(&p.path)?;
        let info = mailinfo(git(&sh), &scratch, &mail)
            .with_context(|| format!("{}: not a mail-format patch", p.name))?;
        let field = |k: &str| info.field(k);
        let subject = field("Subject:");
        let body = std::fs::read_to_string(&msg)?;
        let message = format!("{subject}\n\n{body}");
        if git(&sh)
            .args(["apply", "--cached", "--whitespace=nowarn"])
            .arg(&diff)
            .run()
            .is_err()
        {
            bail!(
                "patch {} does not apply on top of the previous ones (base {})",
                p.name,
                &base[..12]
            );
        }
        let treeid = git(&sh).args(["write-tree"]).read()?;
        let (author, email, date) = (field("Author:"), field("Email:"), field("Date:"));
        let _a = sh.push_env(
            "GIT_AUTHOR_NAME",
            if author.is_empty() {
                "unknown"
            } else {
                &author
            },
        );
        let _e = sh.push_env(
            "GIT_AUTHOR_EMAIL",
            if email.is_empty() {
                "unknown@invalid"
            } else {
                &email
            },
        );
        let _d = (!date.is_empty()).then(|| sh.push_env("GIT_AUTHOR_DATE", &date));
        parent = git(&sh)
            .args(["commit-tree", &treeid, "-p", &parent, "-m", &message])
            .read()?;
        detail(format!("applied {}", p.name));
    }
    // Overlay: new files only; a file a patch also creates must be identical.
    let base_has = |rel: &Path| -> bool {
        git(&sh)
            .args(["cat-file", "-e"])
            .arg(format!("base:{}", rel.display()))
            .ignore_stderr()
            .run()
            .is_ok()
    };
    for (src, dst) in &overlay {
        if base_has(dst) {
            bail!(
                "{} would replace the upstream file {}; change upstream files through patches/",
                src.strip_prefix(&layout.repo).unwrap().display(),
                dst.display()
            );
        }
        let blob = git(&sh).args(["hash-object", "-w"]).arg(src).read()?;
        let existing = git(&sh).args(["ls-files", "-s", "--"]).arg(dst).read()?;
        if let Some(have) = existing.split_whitespace().nth(1) {
            if have != blob {
                bail!(
                    "{} differs from the file a patch in patches/ creates at {}; keep them identical \
                     (`cargo xtask series checkout`, then `series export`, changes both at once)",
                    src.strip_prefix(&layout.repo).unwrap().display(),
                    dst.display()
                );
            }
        }
        let mode = if is_executable(src) {
            "100755"
        } else {
            "100644"
        };
        git(&sh)
            .args(["update-index", "--add", "--cacheinfo"])
            .arg(format!("{mode},{blob},{}", dst.display()))
            .run()?;
    }
    let treeid = git(&sh).args(["write-tree"]).read()?;
    let parent_tree = git(&sh)
        .args(["rev-parse", &format!("{parent}^{{tree}}")])
        .read()?;
    if treeid != parent_tree {
        parent = git(&sh)
            .args([
                "commit-tree",
                &treeid,
                "-p",
                &parent,
                "-m",
                "xtask: overlay of the repository's new files",
            ])
            .read()?;
    }
    drop(_env);
    let _ = std::fs::remove_file(&index);
    git(&sh)
        .args(["update-ref", "refs/heads/prepared", &parent])
        .run()?;
    git(&sh)
        .args(["symbolic-ref", "HEAD", "refs/heads/prepared"])
        .run()?;
    git(&sh).args(["reset", "-q", "--hard", &parent]).run()?;
    std::fs::write(&fp_file, format!("{fp} {parent}\n"))?;
    detail(format!("HEAD {}", &parent[..12]));
    Ok(Prepared { head: parent })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cover_letters_are_not_applied() {
        assert!(is_cover_letter(Path::new(
            "patches/02-x/0000-cover-letter.patch"
        )));
        assert!(!is_cover_letter(Path::new(
            "patches/02-x/0001-ublk-foo.patch"
        )));
    }

    #[test]
    fn series_order() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("patches");
        for f in [
            "02-b/0002-y.patch",
            "02-b/0001-x.patch",
            "01-a/0001-z.patch",
            "02-b/0000-cover-letter.patch",
        ] {
            let path = p.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        let names: Vec<String> = series(d.path())
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(
            names,
            [
                "01-a/0001-z.patch",
                "02-b/0001-x.patch",
                "02-b/0002-y.patch"
            ]
        );
    }
}

#[cfg(test)]
mod prepare_tests {
    use super::*;
    use std::process::Command;

    fn sh(dir: &Path, script: &str) {
        let st = Command::new("sh")
            .current_dir(dir)
            .args(["-ec", script])
            .status()
            .unwrap();
        assert!(st.success(), "{script}");
    }

    /// A fake kernel tree with a `base` tag and a repo with patches/overlay.
    fn fixture() -> (tempfile::TempDir, Layout) {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        let work = d.path().join("work");
        let tree = work.join("linux");
        std::fs::create_dir_all(tree.join("drivers/block")).unwrap();
        std::fs::create_dir_all(repo.join("selftests")).unwrap();
        std::fs::write(tree.join("drivers/block/ublk_drv.c"), "int x;\n").unwrap();
        sh(
            &tree,
            "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm base && git tag base",
        );
        // A patch made the way format-patch makes them, with a new file.
        sh(
            &tree,
            "git checkout -q -b tmp && echo 'int y;' >> drivers/block/ublk_drv.c && mkdir -p tools/testing/selftests/ublk \
             && printf 'new\\n' > tools/testing/selftests/ublk/test_new.sh && git add -A \
             && git -c user.name=t -c user.email=t@t commit -qm 'ublk: y' \
             && mkdir -p ../../repo/patches/01-s && git format-patch -q -o ../../repo/patches/01-s base \
             && git checkout -q --detach base && git branch -q -D tmp",
        );
        let layout = Layout {
            repo,
            work,
            cache: d.path().join("cache"),
        };
        (d, layout)
    }

    #[test]
    fn applies_patches_and_overlay_then_is_a_no_op() {
        let (_d, layout) = fixture();
        std::fs::write(layout.repo.join("selftests/test_new.sh"), "new\n").unwrap();
        std::fs::write(layout.repo.join("selftests/test_ours.sh"), "ours\n").unwrap();
        let first = prepare(&layout).unwrap();
        let tree = layout.tree();
        assert_eq!(
            std::fs::read_to_string(tree.join("drivers/block/ublk_drv.c")).unwrap(),
            "int x;\nint y;\n"
        );
        assert!(tree
            .join("tools/testing/selftests/ublk/test_ours.sh")
            .exists());
        let untouched = std::fs::metadata(tree.join("drivers/block/ublk_drv.c"))
            .unwrap()
            .modified()
            .unwrap();
        let second = prepare(&layout).unwrap();
        assert_eq!(first.head, second.head);
        // Changing one overlay file rewrites only that file.
        std::fs::write(layout.repo.join("selftests/test_ours.sh"), "ours v2\n").unwrap();
        prepare(&layout).unwrap();
        assert_eq!(
            std::fs::read_to_string(tree.join("tools/testing/selftests/ublk/test_ours.sh"))
                .unwrap(),
            "ours v2\n"
        );
        let after = std::fs::metadata(tree.join("drivers/block/ublk_drv.c"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(untouched, after);
    }

    #[test]
    fn overlay_differing_from_patch_is_refused() {
        let (_d, layout) = fixture();
        std::fs::write(layout.repo.join("selftests/test_new.sh"), "different\n").unwrap();
        let e = prepare(&layout).err().unwrap().to_string();
        assert!(e.contains("differs from the file a patch"), "{e}");
    }

    #[test]
    fn overlay_shadowing_upstream_is_refused() {
        let (_d, layout) = fixture();
        std::fs::create_dir_all(layout.repo.join("drivers/block")).unwrap();
        std::fs::write(layout.repo.join("drivers/block/ublk_drv.c"), "mine\n").unwrap();
        let e = prepare(&layout).err().unwrap().to_string();
        assert!(e.contains("would replace the upstream file"), "{e}");
    }
}
