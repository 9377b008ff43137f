//! Where things live: the repository, the prepared kernel tree, build
//! directories, the download cache, and how repository files map into the
//! kernel tree. This is the one place that mapping is written down.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// How a top-level directory of this repository lands in the kernel tree.
/// Files under these directories are new files; changes to files that exist
/// upstream live only in `patches/`.
pub const OVERLAY: &[(&str, &str)] = &[
    ("drivers", "drivers"),
    ("rust", "rust"),
    ("Documentation", "Documentation"),
    ("selftests", "tools/testing/selftests/ublk"),
];

/// Repository paths under an overlay directory that stay out of the kernel
/// tree: host-side programs that the harness builds itself (the Rust
/// selftest crates; see `userland::rust_selftests`).
pub const OVERLAY_SKIP: &[&str] = &[
    "selftests/ublk_badinput",
    "selftests/ublk_fuzz",
    "selftests/ublk_release_race",
];

/// Overlay directories that mirror what the series create under them:
/// `cargo xtask series export` copies a file a series creates there into
/// the repository. `selftests/` carries only the tests the harness adds, so
/// a selftest that a series creates stays in its patch.
pub const OVERLAY_MIRRORED: &[&str] = &["drivers", "rust", "Documentation"];

/// Directory of patch series, applied in lexicographic order of series
/// directories and then of files; cover letters are not applied.
pub const PATCHES: &str = "patches";

/// Kernel config fragments kept with the xtask.
pub const CONFIGS: &str = "xtask/configs";

#[derive(Clone, Debug)]
pub struct Layout {
    /// Root of this repository.
    pub repo: PathBuf,
    /// Work directory: prepared tree and build outputs (default `target/kernel`).
    pub work: PathBuf,
    /// Download cache, shared between clones (default `~/.cache/ublk-xtask`).
    pub cache: PathBuf,
}

impl Layout {
    pub fn discover(work_dir: Option<PathBuf>) -> Result<Self> {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .context("xtask has no parent directory")?
            .to_path_buf();
        let work = match work_dir.or_else(|| std::env::var_os("UBLK_XTASK_WORK").map(Into::into)) {
            Some(w) => absolute(&w)?,
            None => repo.join("target/kernel"),
        };
        let cache = match std::env::var_os("UBLK_XTASK_CACHE") {
            Some(c) => PathBuf::from(c),
            None => {
                let base = std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                    .unwrap_or_else(|| repo.join("target"));
                base.join("ublk-xtask")
            }
        };
        Ok(Layout { repo, work, cache })
    }

    /// The prepared kernel tree (a git repository).
    pub fn tree(&self) -> PathBuf {
        self.work.join("linux")
    }

    /// Kernel build output directory (`O=`) for a config flavour.
    pub fn build_dir(&self, flavour: &str) -> PathBuf {
        self.work.join(format!("build-{flavour}"))
    }

    /// Downloaded .deb files.
    pub fn debs(&self) -> PathBuf {
        self.cache.join("debs")
    }

    /// Private apt state (lists, cache, sources list).
    pub fn apt(&self) -> PathBuf {
        self.cache.join("apt")
    }

    /// Userspace built for the guest (kublk, selftests, sysroots).
    pub fn userland(&self) -> PathBuf {
        self.work.join("userland")
    }

    /// Per-run results directories.
    pub fn runs(&self) -> PathBuf {
        self.work.join("runs")
    }

    /// Reports of `cargo xtask bench matrix` (one directory per run).
    pub fn bench_results(&self) -> PathBuf {
        self.repo.join("target/bench")
    }

    pub fn config_fragment(&self, name: &str) -> PathBuf {
        self.repo.join(CONFIGS).join(format!("{name}.config"))
    }

    pub fn guest_script(&self, name: &str) -> PathBuf {
        self.repo.join("xtask/guest").join(name)
    }

    /// The per-test times committed with the repo (`selftest-<driver>.ktap`),
    /// for the test order and the estimate where no earlier run of this
    /// checkout has a test: a fresh clone, as CI's.
    pub fn baseline_times(&self) -> PathBuf {
        self.repo.join("xtask/times")
    }

    /// The harness's own guest tests (not upstream selftests): every
    /// `test_*.sh` here is a test, other files are their helpers.
    pub fn harness_tests(&self) -> PathBuf {
        self.repo.join("xtask/guest/tests")
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(p))
    }
}

/// Maps a repository-relative path to its path in the kernel tree, if it is
/// under one of the overlay directories.
pub fn overlay_target(rel: &Path) -> Option<PathBuf> {
    let mut comps = rel.components();
    let top = comps.next()?.as_os_str().to_str()?;
    let rest = comps.as_path();
    if rest.as_os_str().is_empty() || OVERLAY_SKIP.iter().any(|s| rel.starts_with(s)) {
        return None;
    }
    OVERLAY
        .iter()
        .find(|(src, _)| *src == top)
        .map(|(_, dst)| Path::new(dst).join(rest))
}

/// Maps a kernel-tree path back to the repository path that carries it in
/// the overlay, if it is under one of the overlay directories (the inverse
/// of [`overlay_target`]).
pub fn overlay_source(tree_rel: &Path) -> Option<PathBuf> {
    OVERLAY.iter().find_map(|(src, dst)| {
        let rest = tree_rel.strip_prefix(dst).ok()?;
        if rest.as_os_str().is_empty() {
            return None;
        }
        let rel = Path::new(src).join(rest);
        (overlay_target(&rel).as_deref() == Some(tree_rel)).then_some(rel)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_mapping() {
        assert_eq!(
            overlay_target(Path::new("selftests/test_generic_18.sh")).unwrap(),
            Path::new("tools/testing/selftests/ublk/test_generic_18.sh")
        );
        assert_eq!(
            overlay_target(Path::new("drivers/block/rust_ublk/ublk.rs")).unwrap(),
            Path::new("drivers/block/rust_ublk/ublk.rs")
        );
        assert!(overlay_target(Path::new("xtask/src/main.rs")).is_none());
        assert!(overlay_target(Path::new("selftests")).is_none());
        assert!(overlay_target(Path::new("selftests/ublk_badinput/src/main.rs")).is_none());
        assert!(overlay_target(Path::new("selftests/ublk_release_race/Cargo.toml")).is_none());
        assert_eq!(
            overlay_target(Path::new("selftests/test_badinput_01.sh")).unwrap(),
            Path::new("tools/testing/selftests/ublk/test_badinput_01.sh")
        );
    }

    #[test]
    fn overlay_source_inverts_the_mapping() {
        for tree in [
            "tools/testing/selftests/ublk/test_generic_18.sh",
            "drivers/block/rust_ublk/ublk.rs",
            "Documentation/block/rust_ublk.rst",
        ] {
            let src = overlay_source(Path::new(tree)).unwrap();
            assert_eq!(overlay_target(&src).unwrap(), Path::new(tree));
        }
        assert_eq!(
            overlay_source(Path::new("tools/testing/selftests/ublk/kublk.c")).unwrap(),
            Path::new("selftests/kublk.c")
        );
        assert!(overlay_source(Path::new("block/blk-mq.c")).is_none());
        assert!(overlay_source(Path::new("tools/testing/selftests/ublk")).is_none());
        assert!(overlay_source(Path::new("tools/testing/selftests/ublk/ublk_fuzz/x.rs")).is_none());
    }
}
