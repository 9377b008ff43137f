//! A pinned Rust toolchain for flavours whose rustc must use the same LLVM
//! major as clang (`inline-helpers`): installed with rustup when missing,
//! checked against clang, and passed to make as `RUSTC=`/`RUSTDOC=`.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

use crate::progress::{detail, phase};

/// The Rust toolchain of the `inline-helpers` flavour. CONFIG_RUST_INLINE_HELPERS
/// links clang's bitcode of rust/helpers/ into rustc's, which needs rustc's
/// LLVM to have clang's major version (Kconfig's RUSTC_CLANG_LLVM_COMPATIBLE).
/// Debian 12's clang-19 is LLVM 19.1.7; rustc 1.86.0 is the last release on
/// LLVM 19 (also 19.1.7) and is above the kernel's minimum rustc (1.85.0).
/// The default rustc (1.95, LLVM 22) cannot enable the option.
pub const INLINE_HELPERS_RUST: &str = "1.86.0";

/// A resolved toolchain: its rustup name and the binaries make gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RustToolchain {
    pub name: String,
    pub rustc: PathBuf,
    pub rustdoc: PathBuf,
}

impl RustToolchain {
    /// make's variables that select this toolchain.
    pub fn make_vars(&self) -> [String; 2] {
        [
            format!("RUSTC={}", self.rustc.display()),
            format!("RUSTDOC={}", self.rustdoc.display()),
        ]
    }
}

/// The rustup command that installs `version` as the kernel build needs it.
fn install_args(version: &str) -> [&str; 6] {
    [
        "toolchain",
        "install",
        version,
        "--profile",
        "minimal",
        "--component=rust-src",
    ]
}

/// Whether `rustup component list --installed` output lists rust-src.
fn has_rust_src(installed: &str) -> bool {
    installed.lines().any(|l| l.trim() == "rust-src")
}

/// Makes sure rustup has toolchain `version` with rust-src (installing it
/// if not) and returns the paths of its rustc and rustdoc.
pub fn ensure(version: &str) -> Result<RustToolchain> {
    let sh = Shell::new()?;
    let installed = cmd!(
        sh,
        "rustup component list --toolchain {version} --installed"
    )
    .quiet()
    .ignore_stderr()
    .read()
    .unwrap_or_default();
    if !has_rust_src(&installed) {
        phase(format!(
            "installing Rust {version} with rust-src (rustc's LLVM must match clang's)"
        ));
        let args = install_args(version);
        detail(format!("rustup {}", args.join(" ")));
        cmd!(sh, "rustup {args...}").run().with_context(|| {
            format!(
                "could not install Rust {version} (`rustup {}`): the inline-helpers \
                 flavour needs this exact toolchain, whose LLVM matches clang's",
                args.join(" ")
            )
        })?;
    }
    let which = |bin: &str| -> Result<PathBuf> {
        let p = cmd!(sh, "rustup which --toolchain {version} {bin}")
            .quiet()
            .read()
            .with_context(|| format!("finding {bin} of Rust {version} (rustup which)"))?;
        Ok(PathBuf::from(p.trim()))
    };
    Ok(RustToolchain {
        name: version.to_string(),
        rustc: which("rustc")?,
        rustdoc: which("rustdoc")?,
    })
}

/// The LLVM major version from `rustc -vV` output (`LLVM version: 19.1.7`).
fn rustc_llvm_major(verbose_version: &str) -> Option<u32> {
    verbose_version
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))
        .and_then(|v| v.trim().split('.').next()?.parse().ok())
}

/// The major version from `clang --version` output.
fn clang_major(version: &str) -> Option<u32> {
    let first = version.lines().next()?;
    let rest = first.split("clang version ").nth(1)?;
    rest.split('.').next()?.trim().parse().ok()
}

/// Checks that the LLVM majors of rustc and clang agree, from their
/// `rustc -vV` and `clang --version` outputs.
fn compare_llvm(rustc_vv: &str, clang_v: &str) -> Result<u32> {
    let (Some(r), Some(c)) = (rustc_llvm_major(rustc_vv), clang_major(clang_v)) else {
        bail!("cannot read the LLVM versions of rustc ({rustc_vv:?}) and clang ({clang_v:?})");
    };
    if r != c {
        bail!(
            "rustc uses LLVM {r} but clang is LLVM {c}: CONFIG_RUST_INLINE_HELPERS needs \
             the same major (pin a rustc on LLVM {c} in INLINE_HELPERS_RUST, \
             xtask/src/toolchain.rs)"
        );
    }
    Ok(r)
}

/// Runs `rustc -vV` and `clang --version` and checks their LLVM majors agree.
pub fn check_llvm_match(rustc: &Path, clang: &str) -> Result<()> {
    let sh = Shell::new()?;
    let rv = cmd!(sh, "{rustc} -vV").quiet().read()?;
    let cv = cmd!(sh, "{clang} --version").quiet().read()?;
    let major =
        compare_llvm(&rv, &cv).with_context(|| format!("{} against {clang}", rustc.display()))?;
    detail(format!(
        "rustc {} and {clang}: both LLVM {major}",
        rustc.display()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUSTC_186: &str = "rustc 1.86.0 (05f9846f8 2025-03-31)\nbinary: rustc\n\
        host: x86_64-unknown-linux-gnu\nrelease: 1.86.0\nLLVM version: 19.1.7\n";
    const RUSTC_195: &str = "rustc 1.95.0 (59807616e 2026-04-14)\nrelease: 1.95.0\n\
        LLVM version: 22.1.2\n";
    const CLANG_19: &str = "Debian clang version 19.1.7 (3~deb12u1)\n\
        Target: x86_64-pc-linux-gnu\nThread model: posix\n";

    #[test]
    fn llvm_versions_parse() {
        assert_eq!(rustc_llvm_major(RUSTC_186), Some(19));
        assert_eq!(rustc_llvm_major(RUSTC_195), Some(22));
        assert_eq!(rustc_llvm_major("rustc 1.0.0\n"), None);
        assert_eq!(clang_major(CLANG_19), Some(19));
        assert_eq!(clang_major("clang version 22.1.0 (git)\n"), Some(22));
        assert_eq!(clang_major("gcc (Debian 12.2.0-14) 12.2.0\n"), None);
    }

    #[test]
    fn llvm_mismatch_is_an_error_naming_both() {
        assert_eq!(compare_llvm(RUSTC_186, CLANG_19).unwrap(), 19);
        let e = compare_llvm(RUSTC_195, CLANG_19).unwrap_err().to_string();
        assert!(
            e.contains("LLVM 22") && e.contains("clang is LLVM 19"),
            "{e}"
        );
        assert!(compare_llvm("", CLANG_19).is_err());
    }

    #[test]
    fn rust_src_detection_and_install_command() {
        assert!(has_rust_src(
            "cargo-x86_64-unknown-linux-gnu\nrust-src\nrustc-x86_64-unknown-linux-gnu\n"
        ));
        assert!(!has_rust_src("rust-std-x86_64-unknown-linux-gnu\n"));
        assert_eq!(
            install_args(INLINE_HELPERS_RUST).join(" "),
            "toolchain install 1.86.0 --profile minimal --component=rust-src"
        );
    }

    #[test]
    fn make_vars_name_both_binaries() {
        let t = RustToolchain {
            name: "1.86.0".into(),
            rustc: "/r/bin/rustc".into(),
            rustdoc: "/r/bin/rustdoc".into(),
        };
        assert_eq!(
            t.make_vars(),
            ["RUSTC=/r/bin/rustc", "RUSTDOC=/r/bin/rustdoc"]
        );
    }
}
