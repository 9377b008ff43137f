//! The hashes of our own tests: per test, its file and the files the
//! tests of its directory share, so that `--ci` runs against the C driver
//! only those of ours that changed since the recorded baseline.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::times::OURS_FILE;

/// The files under `dir` that git tracks (relative paths), if it is in
/// a git work tree: a stray file a developer left there must not count.
fn tracked(dir: &Path) -> Option<Vec<String>> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["ls-files", "-z", "."])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

/// Every file under `dir` as (relative path, path), in path order: those
/// git tracks if `dir` is in a git work tree, else all of them.
fn dir_files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for e in rd {
            let p = e?.path();
            if p.is_dir() {
                walk(&p, root, out)?;
            } else {
                let rel = p
                    .strip_prefix(root)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, p));
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    match tracked(dir) {
        Some(list) => files.extend(list.into_iter().map(|rel| {
            let p = dir.join(&rel);
            (rel, p)
        })),
        None => walk(dir, dir, &mut files)?,
    }
    files.sort();
    Ok(files)
}

/// SHA-256 over `files` (relative path and content, in the given order).
fn files_hash<'a>(files: impl IntoIterator<Item = &'a (String, PathBuf)>) -> Result<String> {
    let mut h = Sha256::new();
    for (rel, p) in files {
        let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        h.update(format!("{rel} {}\n", bytes.len()));
        h.update(&bytes);
    }
    Ok(format!("{:x}", h.finalize()))
}

/// Whether `rel`, a path relative to a directory of our tests, is a test
/// (a `test_*.sh` at its top); the other files are what its tests share.
fn is_test(rel: &str) -> bool {
    !rel.contains('/') && rel.starts_with("test_") && rel.ends_with(".sh")
}

/// Each test of `dir` (see [`is_test`]) with the SHA-256 of what it runs:
/// its own file and every file of `dir` that is not a test (a library, a
/// Rust program), in path order.
pub fn test_hashes(dir: &Path) -> Result<Vec<(String, String)>> {
    let files = dir_files(dir)?;
    let mut out = Vec::new();
    for test in files.iter().filter(|(rel, _)| is_test(rel)) {
        let inputs = files.iter().filter(|f| !is_test(&f.0) || f.0 == test.0);
        out.push((test.0.clone(), files_hash(inputs)?));
    }
    Ok(out)
}

/// The lines of [`OURS_FILE`] for `dirs` (name, path), in their order: one
/// `<sha256> <name>/<test>` per test.
pub fn ours_hashes(dirs: &[(&str, PathBuf)]) -> Result<String> {
    let mut out = String::new();
    for (name, dir) in dirs {
        for (test, hash) in test_hashes(dir)? {
            out += &format!("{hash} {name}/{test}\n");
        }
    }
    Ok(out)
}

/// Our tests in `dirs` (bare names) whose file, or a file that the tests of
/// their directory share, differs from the recorded baseline in `times`
/// (all of them if none is recorded).
pub fn ours_changed(times: &Path, dirs: &[(&str, PathBuf)]) -> Result<BTreeSet<String>> {
    let recorded = std::fs::read_to_string(times.join(OURS_FILE)).unwrap_or_default();
    let recorded: BTreeSet<&str> = recorded.lines().collect();
    let mut changed = BTreeSet::new();
    for (name, dir) in dirs {
        for (test, hash) in test_hashes(dir)? {
            if !recorded.contains(format!("{hash} {name}/{test}").as_str()) {
                changed.insert(test);
            }
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_run_on_c_only_when_they_or_what_they_share_changed() {
        let d = tempfile::tempdir().unwrap();
        let (a, b, times) = (d.path().join("a"), d.path().join("b"), d.path().join("t"));
        for dir in [&a, &b, &times] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(a.join("test_x.sh"), "x").unwrap();
        std::fs::write(a.join("test_y.sh"), "y").unwrap();
        std::fs::write(b.join("test_z.sh"), "z").unwrap();
        std::fs::create_dir_all(b.join("sub")).unwrap();
        std::fs::write(b.join("sub/lib.rs"), "l").unwrap();
        // Not a test, but shared: in a subdirectory.
        std::fs::write(b.join("sub/test_w.sh"), "w").unwrap();
        let dirs = [("selftests", a.clone()), ("harness", b.clone())];
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            ours_changed(&times, &dirs).unwrap(),
            set(&["test_x.sh", "test_y.sh", "test_z.sh"]),
            "nothing recorded"
        );
        std::fs::write(times.join(OURS_FILE), ours_hashes(&dirs).unwrap()).unwrap();
        assert!(ours_changed(&times, &dirs).unwrap().is_empty());
        std::fs::write(a.join("test_x.sh"), "x2").unwrap();
        assert_eq!(ours_changed(&times, &dirs).unwrap(), set(&["test_x.sh"]));
        std::fs::write(a.join("test_x.sh"), "x").unwrap();
        std::fs::write(b.join("sub/test_w.sh"), "w2").unwrap();
        assert_eq!(ours_changed(&times, &dirs).unwrap(), set(&["test_z.sh"]));
        std::fs::write(b.join("sub/test_w.sh"), "w").unwrap();
        std::fs::write(a.join("lib.sh"), "new shared file").unwrap();
        assert_eq!(
            ours_changed(&times, &dirs).unwrap(),
            set(&["test_x.sh", "test_y.sh"])
        );
        // A baseline recorded per directory (the old format) matches no test.
        std::fs::write(times.join(OURS_FILE), "0123 selftests\n4567 harness\n").unwrap();
        assert_eq!(ours_changed(&times, &dirs).unwrap().len(), 3);
    }
}
