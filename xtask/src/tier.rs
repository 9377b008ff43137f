//! `cargo xtask selftest --ci`: what CI runs, and why it fits its budget.
//!
//! Once the Rust driver passes what the C driver passes, the whole suite
//! costs as much per driver, and a fresh build plus two whole halves no
//! longer fit CI's 90 minutes on a slow machine. The Rust driver is what
//! this repository develops; the C driver only changes when what it is
//! built and tested from changes. So `--ci` boots the Rust driver first
//! with every test, then the C driver with:
//!
//! - our own tests (selftests/, the harness tests) whose file, or a file
//!   their directory's tests share, changed since the baseline
//!   ([`ours_changed`]): they are kept out of the stamp, as they change
//!   most;
//! - one upstream test per family ([`C_SMOKE`]);
//! - every test that did not pass against the Rust driver in this run
//!   (skipped for a missing feature, or failed), and every test that the
//!   C driver skipped in the recorded baseline: no test goes unrun, and
//!   none counts as covered by a run in which it only skipped;
//!
//! and reports each test it leaves out as skipped against the C driver,
//! saying why. The C driver runs the whole suite instead whenever the
//! [`stamp`] of its inputs differs from the one a passing whole run
//! recorded in xtask/times/ (`--save-baseline`). With one driver, `--ci`
//! runs its whole suite.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

use crate::ktap::{self, Status, TestResult};

/// The upstream tests the C driver runs under `--ci` when its stamp is
/// unchanged: one per family of the suite, the quickest that exercises it.
pub const C_SMOKE: &[&str] = &[
    "test_batch_02.sh",
    "test_generic_03.sh",
    "test_integrity_01.sh",
    "test_loop_02.sh",
    "test_null_01.sh",
    "test_params_01.sh",
    "test_part_02.sh",
    "test_recover_04.sh",
    "test_shmemzc_01.sh",
    "test_stress_07.sh",
    "test_stripe_02.sh",
];

/// Paths of the prepared tree whose changes cannot change how the C
/// driver builds or behaves: the Rust code, its sample, the in-tree Rust
/// null driver, documentation.
pub const NOT_C: &[&str] = &[
    "rust/",
    "drivers/block/rust_ublk/",
    "drivers/block/rnull/",
    "samples/rust/",
    "Documentation/",
    "MAINTAINERS",
];

/// Where our own selftests land in the prepared tree; they run against
/// the C driver under `--ci` anyway, so they stay out of the stamp.
pub const SELFTESTS: &str = "tools/testing/selftests/ublk";

/// The file in xtask/times/ that holds the recorded stamp.
pub const STAMP_FILE: &str = "c-driver.stamp";

/// The file in xtask/times/ that holds, per directory of our tests, the
/// hash its files had in the recorded baseline (`<sha256> <dir>`).
pub const OURS_FILE: &str = "c-ours.sha256";

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

/// What the stamp covers, for messages.
pub const STAMP_COVERS: &str = "the base kernel tree, every file our patches and overlay change outside the Rust code and our own tests, the flavour and its config fragments";

/// The stamp of the C driver's inputs: SHA-256 over the tree of the
/// pristine base, the object id of every file that the prepared tree
/// `tree` (HEAD) changes from it, but those under [`NOT_C`] and our own
/// tests `ours` (bare names under [`SELFTESTS`]), the kernel flavour, and
/// its config fragments (not the final .config: what the toolchain
/// detects, e.g. the `RUSTC_HAS_*` options of an unpinned rustc, would
/// change it from machine to machine; the build checks that every
/// fragment option survives). Object ids are content hashes: the same on
/// every machine.
pub fn stamp(tree: &Path, ours: &[String], flavour: &str, fragments: &[PathBuf]) -> Result<String> {
    let sh = Shell::new()?;
    sh.change_dir(tree);
    let spec = "base^{tree}";
    let base = cmd!(sh, "git rev-parse {spec}")
        .quiet()
        .read()
        .with_context(|| format!("no base in the prepared tree {}", tree.display()))?;
    let raw = cmd!(sh, "git diff --raw --no-abbrev --no-renames base HEAD")
        .quiet()
        .read()?;
    let mut h = Sha256::new();
    h.update(format!("base {base}\n"));
    for (path, id) in changed(&raw) {
        if counts(path, ours) {
            h.update(format!("{path} {id}\n"));
        }
    }
    h.update(format!("flavour {flavour}\n"));
    for f in fragments {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let name = f.file_name().unwrap_or_default().to_string_lossy();
        h.update(format!("fragment {name}\n"));
        for l in config_lines(&text) {
            h.update(format!("{l}\n"));
        }
    }
    Ok(format!("{:x}", h.finalize()))
}

/// `(path, new object id)` of each line of `git diff --raw --no-abbrev`.
fn changed(raw: &str) -> impl Iterator<Item = (&str, &str)> {
    raw.lines().filter_map(|l| {
        let (meta, path) = l.split_once('\t')?;
        let id = meta.split_whitespace().nth(3)?;
        Some((path, id))
    })
}

/// Whether a change to `path` can change the C driver or its tests.
fn counts(path: &str, ours: &[String]) -> bool {
    if NOT_C.iter().any(|p| path.starts_with(p)) {
        return false;
    }
    match path
        .strip_prefix(SELFTESTS)
        .and_then(|t| t.strip_prefix('/'))
    {
        Some(t) => !ours.iter().any(|o| o == t),
        None => true,
    }
}

/// The lines of a config fragment that say what is built: no comments,
/// no blank lines, no tool versions.
fn config_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.contains("VERSION"))
}

/// The stamp recorded in `times` (xtask/times/), if any.
pub fn recorded(times: &Path) -> Result<Option<String>> {
    let file = times.join(STAMP_FILE);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Ok(None);
    };
    let s = text.trim();
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!(
            "{} holds {s:?}, not a SHA-256 in hex: record it again with `cargo xtask selftest --save-baseline`",
            file.display()
        );
    }
    Ok(Some(s.to_string()))
}

/// The tests the C driver skipped in the recorded baseline (`times`).
pub fn recorded_c_skips(times: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(times.join("selftest-c.ktap")).unwrap_or_default();
    ktap::parse(&text)
        .results
        .into_iter()
        .filter(|r| r.status == Status::Skip)
        .map(|r| r.name)
        .collect()
}

/// Checks that every [`C_SMOKE`] test is in the suite `all`.
pub fn check_smoke(all: &[String]) -> Result<()> {
    let missing: Vec<&str> = C_SMOKE
        .iter()
        .copied()
        .filter(|t| !all.iter().any(|a| a == t))
        .collect();
    if !missing.is_empty() {
        bail!(
            "tier.rs C_SMOKE names tests that are not in the suite: {}",
            missing.join(", ")
        );
    }
    Ok(())
}

/// The tests of `suite` that did not pass in `rust` (the Rust boot's
/// results, bare names): skipped, failed, or not reported.
pub fn not_passed(suite: &[String], rust: &[TestResult]) -> Vec<String> {
    suite
        .iter()
        .filter(|t| {
            rust.iter()
                .find(|r| &r.name == *t)
                .is_none_or(|r| r.status != Status::Pass)
        })
        .cloned()
        .collect()
}

/// Why a test of the suite runs against the C driver under `--ci`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// One of ours.
    Ours,
    /// One per family.
    Smoke,
    /// The C driver skipped it in the recorded baseline.
    SkippedOnC,
    /// It did not pass against the Rust driver in this run.
    NotPassedOnRust,
}

/// The C driver's share of `suite` under `--ci` with an unchanged stamp:
/// each test it runs, with the first reason; in `suite`'s order.
pub fn c_share(
    suite: &[String],
    ours: &BTreeSet<String>,
    c_skips: &BTreeSet<String>,
    rust: &[TestResult],
) -> Vec<(String, Why)> {
    let missed = not_passed(suite, rust);
    suite
        .iter()
        .filter_map(|t| {
            let why = if ours.contains(t) {
                Why::Ours
            } else if C_SMOKE.contains(&t.as_str()) {
                Why::Smoke
            } else if c_skips.contains(t) {
                Why::SkippedOnC
            } else if missed.contains(t) {
                Why::NotPassedOnRust
            } else {
                return None;
            };
            Some((t.clone(), why))
        })
        .collect()
}

/// Whether the C driver runs the whole suite under `--ci`, and why: the
/// run's driver choice (`both`), the stamp of this tree and the recorded
/// one. `None`: it runs its share.
pub fn whole_c_suite(both: bool, now: &str, recorded: Option<&str>) -> Option<String> {
    if !both {
        return Some("one driver runs its whole suite".into());
    }
    match recorded {
        None => Some(format!(
            "no stamp recorded in xtask/times/{STAMP_FILE}: run `cargo xtask selftest --save-baseline` and commit xtask/times/"
        )),
        Some(r) if r != now => Some(format!(
            "the C driver's inputs changed since the recorded stamp ({now} now, {} recorded): record it again with a passing `cargo xtask selftest --save-baseline` and commit xtask/times/",
            short(r)
        )),
        Some(_) => None,
    }
}

/// The first 12 hex digits of a stamp.
pub fn short(stamp: &str) -> &str {
    stamp.get(..12).unwrap_or(stamp)
}

/// `--save-baseline`: each boot's results (driver name, results.ktap)
/// become the baseline of test times in `times`; with the C driver's, the
/// stamp of its inputs and `ours`, the hashes of our tests
/// ([`ours_hashes`]) as they were when the run started.
pub fn save_baseline(
    times: &Path,
    boots: &[(&str, PathBuf)],
    stamp: Option<&str>,
    ours: &str,
) -> Result<()> {
    std::fs::create_dir_all(times).with_context(|| format!("creating {}", times.display()))?;
    for (driver, results) in boots {
        let to = times.join(format!("selftest-{driver}.ktap"));
        std::fs::copy(results, &to)
            .with_context(|| format!("copying {} to {}", results.display(), to.display()))?;
        println!("# --save-baseline: {}", to.display());
        if let (&"c", Some(stamp)) = (driver, stamp) {
            let file = times.join(STAMP_FILE);
            std::fs::write(&file, format!("{stamp}\n"))
                .with_context(|| format!("writing {}", file.display()))?;
            println!(
                "# --save-baseline: C driver stamp {} in {}",
                short(stamp),
                file.display()
            );
            let file = times.join(OURS_FILE);
            std::fs::write(&file, ours).with_context(|| format!("writing {}", file.display()))?;
            println!("# --save-baseline: our tests' hashes in {}", file.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn result(name: &str, status: Status) -> TestResult {
        TestResult {
            number: 0,
            name: name.into(),
            status,
            detail: String::new(),
            seconds: Some(1.0),
        }
    }

    #[test]
    fn c_share_keeps_ours_smoke_c_skips_and_what_rust_did_not_pass() {
        let suite = names(&[
            "test_generic_02.sh",
            "test_generic_03.sh",
            "test_generic_08.sh",
            "test_generic_09.sh",
            "test_generic_18.sh",
            "test_loop_06.sh",
            "test_stress_03.sh",
        ]);
        let ours: BTreeSet<String> = ["test_generic_18.sh".to_string()].into();
        let c_skips: BTreeSet<String> = ["test_generic_02.sh".to_string()].into();
        let rust = [
            result("test_generic_02.sh", Status::Pass),
            result("test_generic_03.sh", Status::Pass),
            result("test_generic_08.sh", Status::Skip),
            result("test_generic_09.sh", Status::Pass),
            result("test_generic_18.sh", Status::Pass),
            result("test_loop_06.sh", Status::Fail),
            // test_stress_03.sh: no result (the guest died before it).
        ];
        let share = c_share(&suite, &ours, &c_skips, &rust);
        let expect = [
            ("test_generic_02.sh", Why::SkippedOnC),
            ("test_generic_03.sh", Why::Smoke),
            ("test_generic_08.sh", Why::NotPassedOnRust),
            ("test_generic_18.sh", Why::Ours),
            ("test_loop_06.sh", Why::NotPassedOnRust),
            ("test_stress_03.sh", Why::NotPassedOnRust),
        ];
        assert_eq!(
            share,
            expect
                .iter()
                .map(|(t, w)| (t.to_string(), *w))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn whole_suite_unless_both_drivers_and_the_stamp_matches() {
        let s = "a".repeat(64);
        assert!(whole_c_suite(false, &s, Some(&s)).is_some());
        assert!(whole_c_suite(true, &s, None)
            .unwrap()
            .contains("no stamp recorded"));
        let other = "b".repeat(64);
        let why = whole_c_suite(true, &s, Some(&other)).unwrap();
        assert!(
            why.contains("aaaaaaaaaaaa now, bbbbbbbbbbbb recorded"),
            "{why}"
        );
        assert_eq!(whole_c_suite(true, &s, Some(&s)), None);
    }

    #[test]
    fn smoke_names_must_exist() {
        let mut all: Vec<String> = names(C_SMOKE);
        assert!(check_smoke(&all).is_ok());
        all.retain(|t| t != "test_loop_02.sh");
        let e = check_smoke(&all).unwrap_err().to_string();
        assert!(e.contains("test_loop_02.sh"), "{e}");
    }

    #[test]
    fn what_counts_for_the_stamp() {
        let ours = names(&["test_generic_18.sh"]);
        assert!(counts("drivers/block/ublk_drv.c", &ours));
        assert!(counts("drivers/block/Kconfig", &ours));
        assert!(counts("tools/testing/selftests/ublk/kublk.c", &ours));
        assert!(counts(
            "tools/testing/selftests/ublk/test_part_01.sh",
            &ours
        ));
        assert!(!counts(
            "tools/testing/selftests/ublk/test_generic_18.sh",
            &ours
        ));
        assert!(!counts("rust/kernel/block/mq.rs", &ours));
        assert!(!counts("drivers/block/rust_ublk/io.rs", &ours));
        assert!(!counts("MAINTAINERS", &ours));
        let raw = ":100644 100644 1111111111111111111111111111111111111111 2222222222222222222222222222222222222222 M\tdrivers/block/ublk_drv.c\n";
        assert_eq!(
            changed(raw).collect::<Vec<_>>(),
            [(
                "drivers/block/ublk_drv.c",
                "2222222222222222222222222222222222222222"
            )]
        );
        let cfg = "# comment\nCONFIG_A=y\n\nCONFIG_CLANG_VERSION=190107\n";
        assert_eq!(config_lines(cfg).collect::<Vec<_>>(), ["CONFIG_A=y"]);
    }

    fn git(dir: &Path, args: &[&str]) {
        let sh = Shell::new().unwrap();
        sh.change_dir(dir);
        cmd!(
            sh,
            "git -c user.name=t -c user.email=t@invalid -c commit.gpgsign=false {args...}"
        )
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}"));
    }

    #[test]
    fn stamp_follows_the_c_driver_inputs_only() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("linux");
        let write = |p: &str, text: &str| {
            let f = tree.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        };
        for p in [
            "drivers/block/ublk_drv.c",
            "rust/kernel/lib.rs",
            "tools/testing/selftests/ublk/test_generic_18.sh",
            "tools/testing/selftests/ublk/kublk.c",
            "mm/filemap.c",
        ] {
            write(p, "x\n");
        }
        let config = d.path().join("ublk.config");
        std::fs::write(&config, "CONFIG_BLK_DEV_UBLK=m\n# a comment\n").unwrap();
        git(&tree, &["init", "-q"]);
        let commit = |msg: &str| {
            git(&tree, &["add", "-A"]);
            git(&tree, &["commit", "-q", "-m", msg]);
        };
        commit("base");
        git(&tree, &["tag", "base"]);
        let ours = names(&["test_generic_18.sh"]);
        let frags = [config.clone()];
        let st = || stamp(&tree, &ours, "default", &frags).unwrap();
        let s0 = st();
        for (p, moved) in [
            ("rust/kernel/lib.rs", false),
            ("tools/testing/selftests/ublk/test_generic_18.sh", false),
            ("drivers/block/ublk_drv.c", true),
            ("tools/testing/selftests/ublk/kublk.c", true),
            ("mm/filemap.c", true),
        ] {
            let before = st();
            write(p, &format!("{p} changed\n"));
            commit(p);
            assert_eq!(st() != before, moved, "{p}");
        }
        assert_ne!(st(), s0);
        let s1 = st();
        std::fs::write(&config, "CONFIG_BLK_DEV_UBLK=m\n# another comment\n").unwrap();
        assert_eq!(st(), s1, "a comment is not an input");
        std::fs::write(&config, "CONFIG_BLK_DEV_UBLK=y\n").unwrap();
        assert_ne!(st(), s1, "a config option is");
        assert_ne!(stamp(&tree, &ours, "debug", &frags).unwrap(), st());
    }

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

    #[test]
    fn recorded_stamp_must_be_a_sha256() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(recorded(d.path()).unwrap(), None);
        std::fs::write(d.path().join(STAMP_FILE), "abc\n").unwrap();
        assert!(recorded(d.path()).is_err());
        let s = "0123456789abcdef".repeat(4);
        std::fs::write(d.path().join(STAMP_FILE), format!("{s}\n")).unwrap();
        assert_eq!(recorded(d.path()).unwrap(), Some(s));
    }
}
