//! rublk (Ming Lei's Rust ublk server) from the crates registry, built once
//! into the download cache with `cargo install --locked --no-default-features`
//! for the harness tests in `xtask/guest/tests/`.
//!
//! Its build needs what the kernel build already needs: libclang (bindgen in
//! `libublk-rs-sys` generates the UAPI bindings at build time) and the
//! kernel UAPI headers of the host (`linux-libc-dev`). io_uring is the pure
//! Rust `io-uring` crate: no liburing. `--no-default-features` drops the
//! OpenCL `vram` target.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use xshell::{cmd, Shell};

use crate::layout::Layout;
use crate::progress::{detail, fmt_duration, phase};

pub const VERSION: &str = "0.2.15";

/// Where `cargo install --root` puts this version.
pub fn root(layout: &Layout) -> PathBuf {
    layout.cache.join(format!("rublk-{VERSION}"))
}

/// The installed binary under an install root.
pub fn binary(root: &Path) -> PathBuf {
    root.join("bin/rublk")
}

/// Builds rublk unless it is already in the cache; returns the binary.
pub fn ensure(layout: &Layout) -> Result<PathBuf> {
    let root = root(layout);
    let bin = binary(&root);
    if bin.is_file() {
        return Ok(bin);
    }
    phase(format!(
        "building rublk {VERSION} (cargo install --locked --no-default-features), a few minutes"
    ));
    let start = Instant::now();
    // A private install root, renamed into place when complete, so that an
    // interrupted or concurrent build never leaves a half-installed tree.
    let tmp = PathBuf::from(format!("{}.tmp{}", root.display(), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let sh = Shell::new()?;
    // Outside this repository: its .cargo/config.toml is not for rublk.
    sh.change_dir(&tmp);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let result = cmd!(
        sh,
        "{cargo} install --locked --no-default-features --version {VERSION} rublk --root {tmp}"
    )
    .env("LIBCLANG_PATH", crate::prereq::LIBCLANG_PATH)
    // Not the xtask's own target directory: cargo install builds in a
    // temporary one and removes it.
    .env_remove("CARGO_TARGET_DIR")
    .run()
    .context("cargo install rublk");
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if !binary(&tmp).is_file() {
        let _ = std::fs::remove_dir_all(&tmp);
        bail!("cargo install rublk succeeded but left no bin/rublk");
    }
    // Someone else may have finished first; theirs is as good as ours.
    if std::fs::rename(&tmp, &root).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if !bin.is_file() {
        bail!("rublk is not at {} after the build", bin.display());
    }
    detail(format!(
        "rublk {VERSION} built in {}: {}",
        fmt_duration(start.elapsed()),
        bin.display()
    ));
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let layout = Layout {
            repo: "/r".into(),
            work: "/w".into(),
            cache: "/c".into(),
        };
        assert_eq!(
            binary(&root(&layout)),
            Path::new("/c/rublk-0.2.15/bin/rublk")
        );
    }
}
