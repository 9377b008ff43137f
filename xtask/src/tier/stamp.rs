//! The stamp of the C driver's inputs: when it differs from the recorded
//! one, `--ci` runs the C driver's whole suite.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::tests::names;

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
}
