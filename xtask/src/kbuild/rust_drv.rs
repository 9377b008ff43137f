//! The Rust driver as the module `ublk_drv`, as a kernel configured with
//! `BLK_DEV_UBLK_IMPL_RUST` ships it, without a second kernel build: the
//! driver's sources built once more as an external module (`make M=`)
//! against the build directory, by `drivers/block/rust_ublk/Makefile` with
//! that configuration given on make's command line, and a
//! module tree of its own (`modroot-rust`) where it replaces both the C
//! `ublk_drv` and `rust_ublk`. The Rust driver's test boots use that tree,
//! so that user space finds the driver by name as it finds the C one.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::Make;
use crate::progress::phase;

/// The external module's directory, in the build directory.
const DIR: &str = "rust-ublk-drv";

/// The module tree with the Rust `ublk_drv`, in the build directory.
pub fn modroot(out: &Path) -> PathBuf {
    out.join("modroot-rust")
}

/// The options that the tree's `drivers/block/rust_ublk/Makefile` sees, on
/// make's command line (which overrides the kernel's configuration): the
/// Rust implementation chosen as `ublk_drv`, so not also `rust_ublk` beside
/// the C driver.
const CHOICE: [&str; 2] = [
    "CONFIG_BLK_DEV_UBLK_DRV_RUST=m",
    "CONFIG_BLK_DEV_UBLK_RUST=",
];

/// The driver's sources and its Makefile in the prepared tree: the external
/// module is built by the same rules as in the tree.
fn sources(tree: &Path) -> Result<Vec<PathBuf>> {
    let dir = tree.join("drivers/block/rust_ublk");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "rs")
                || p.file_name().is_some_and(|n| n == "Makefile")
        })
        .collect();
    v.sort();
    Ok(v)
}

/// Installed modules that the Rust `ublk_drv` replaces, relative to
/// `lib/modules/<release>`.
const REPLACED: [&str; 2] = [
    "kernel/drivers/block/ublk_drv.ko",
    "kernel/drivers/block/rust_ublk",
];

/// Builds the Rust `ublk_drv` and `modroot-rust` from the kernel's module
/// tree `kernel_root`, unless `modroot-rust` holds `stamp` (the kernel
/// build's).
pub fn ensure(
    make: &Make,
    out: &Path,
    kernel_root: &Path,
    release: &str,
    stamp: &str,
) -> Result<()> {
    let root = modroot(out);
    let stamp_file = root.join(".xtask-built");
    if std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp) {
        return Ok(());
    }
    phase("building the Rust driver as ublk_drv (external module) and modroot-rust");
    let dir = out.join(DIR);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    // rustc finds the crate's modules next to the crate root it is given.
    for src in sources(&make.tree)? {
        std::os::unix::fs::symlink(&src, dir.join(src.file_name().unwrap()))?;
    }
    let m = format!("M={}", dir.display());
    make.run_quiet(out, &[&m, CHOICE[0], CHOICE[1], "modules"])?;

    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    // Hard links: the kernel's modules as they are, without a copy.
    let st = Command::new("cp")
        .arg("-al")
        .arg(kernel_root)
        .arg(&root)
        .status()
        .context("running cp")?;
    anyhow::ensure!(
        st.success(),
        "cp -al {} {} failed",
        kernel_root.display(),
        root.display()
    );
    let moddir = root.join("lib/modules").join(release);
    for r in REPLACED {
        let p = moddir.join(r);
        if p.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else if p.exists() {
            std::fs::remove_file(&p)?;
        }
    }
    // Also runs depmod on the new tree.
    make.run_quiet(
        out,
        &[
            &m,
            CHOICE[0],
            CHOICE[1],
            "modules_install",
            &format!("INSTALL_MOD_PATH={}", root.display()),
            "INSTALL_MOD_DIR=extra",
            "INSTALL_MOD_STRIP=1",
        ],
    )?;
    let ko = moddir.join("extra/ublk_drv.ko");
    anyhow::ensure!(ko.exists(), "{} was not installed", ko.display());
    std::fs::write(stamp_file, stamp)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_is_the_rust_ublk_drv_alone() {
        assert_eq!(
            CHOICE,
            [
                "CONFIG_BLK_DEV_UBLK_DRV_RUST=m",
                "CONFIG_BLK_DEV_UBLK_RUST="
            ]
        );
    }

    #[test]
    fn modroot_rust_is_in_the_build_dir() {
        assert_eq!(modroot(Path::new("/o")), Path::new("/o/modroot-rust"));
    }

    #[test]
    fn sources_lists_the_rs_files() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("drivers/block/rust_ublk");
        std::fs::create_dir_all(&d).unwrap();
        for f in ["rust_ublk.rs", "io.rs", "Makefile", "Kconfig"] {
            std::fs::write(d.join(f), "").unwrap();
        }
        let names: Vec<_> = sources(t.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["Makefile", "io.rs", "rust_ublk.rs"]);
    }
}
