//! Kernel configuration: tinyconfig + the fragments in xtask/configs, then
//! olddefconfig, then a check that every requested option survived.

use anyhow::{bail, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::kbuild::Make;
use crate::progress::{detail, phase};

/// Requested value of one option: `Some("y")`, `Some("0x10")`, or `None` for
/// `# CONFIG_X is not set`.
pub type Wanted = BTreeMap<String, Option<String>>;

/// Parses config text (fragment or .config); later lines win.
pub fn parse(text: &str) -> Wanted {
    let mut out = Wanted::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("# ") {
            if let Some(name) = rest.strip_suffix(" is not set") {
                if name.starts_with("CONFIG_") {
                    out.insert(name.to_string(), None);
                }
            }
        } else if let Some((k, v)) = line.split_once('=') {
            if k.starts_with("CONFIG_") {
                let v = if v == "n" { None } else { Some(v.to_string()) };
                out.insert(k.to_string(), v);
            }
        }
    }
    out
}

/// One option that did not end up as requested.
#[derive(Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub option: String,
    pub wanted: Option<String>,
    pub got: Option<String>,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "n".into());
        write!(
            f,
            "{}: wanted {}, got {}",
            self.option,
            show(&self.wanted),
            show(&self.got)
        )
    }
}

/// Every requested option that the final config does not have.
pub fn verify(wanted: &Wanted, config: &str) -> Vec<Mismatch> {
    let have = parse(config);
    wanted
        .iter()
        .filter_map(|(k, w)| {
            let got = have.get(k).cloned().flatten();
            (got != *w).then(|| Mismatch {
                option: k.clone(),
                wanted: w.clone(),
                got,
            })
        })
        .collect()
}

/// Writes `O/.config` from the fragments unless it is already current.
/// Returns the fingerprint of the inputs (part of the build stamp).
pub fn configure(make: &Make, out: &Path, fragments: &[PathBuf]) -> Result<String> {
    let mut h = Sha256::new();
    let mut wanted = Wanted::new();
    for f in fragments {
        let text = std::fs::read_to_string(f)?;
        h.update(&text);
        wanted.extend(parse(&text));
    }
    if let Some(t) = &make.rust {
        // The toolchain decides options (RUSTC_LLVM_VERSION and what
        // depends on it); the default flavour's fingerprint is unchanged.
        h.update(format!("rust {}\n", t.name));
    }
    let fp = format!("{:x}", h.finalize());
    let stamp = out.join(".xtask-config");
    let config = out.join(".config");
    if config.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(fp.as_str()) {
        return Ok(fp);
    }
    phase(format!(
        "configuring: tinyconfig + {}",
        fragments
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy())
            .collect::<Vec<_>>()
            .join(" + ")
    ));
    // Generate in a scratch directory and copy only if different, so an
    // unchanged result does not touch O/.config.
    let scratch = out.with_extension("kconfig");
    std::fs::create_dir_all(&scratch)?;
    make.run_quiet(&scratch, &["tinyconfig"])?;
    let mut merged = std::fs::read_to_string(scratch.join(".config"))?;
    for f in fragments {
        merged.push('\n');
        merged.push_str(&std::fs::read_to_string(f)?);
    }
    std::fs::write(scratch.join(".config"), merged)?;
    make.run_quiet(&scratch, &["olddefconfig"])?;
    let result = std::fs::read_to_string(scratch.join(".config"))?;
    let bad = verify(&wanted, &result);
    if !bad.is_empty() {
        bail!(
            "these options did not survive olddefconfig (missing dependency or renamed?):\n  {}{}",
            bad.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n  "),
            hint(&bad, &result)
        );
    }
    detail(format!("{} requested options verified", wanted.len()));
    std::fs::create_dir_all(out)?;
    if std::fs::read_to_string(&config).ok().as_deref() != Some(result.as_str()) {
        std::fs::write(&config, &result)?;
    }
    std::fs::write(stamp, &fp)?;
    Ok(fp)
}

/// Why a dropped option is known to drop: CONFIG_RUST_INLINE_HELPERS needs
/// rustc's LLVM major to equal clang's.
fn hint(bad: &[Mismatch], config: &str) -> String {
    if !bad.iter().any(|m| m.option == "CONFIG_RUST_INLINE_HELPERS") {
        return String::new();
    }
    let have = parse(config);
    let get = |k: &str| {
        have.get(k)
            .cloned()
            .flatten()
            .unwrap_or_else(|| "unset".into())
    };
    format!(
        "\nCONFIG_RUST_INLINE_HELPERS needs RUSTC_CLANG_LLVM_COMPATIBLE: rustc's LLVM \
         major (CONFIG_RUSTC_LLVM_MAJOR_VERSION={}) must be clang's \
         (CONFIG_CLANG_VERSION={}); RUSTC_CLANG_LLVM_COMPATIBLE={}",
        get("CONFIG_RUSTC_LLVM_MAJOR_VERSION"),
        get("CONFIG_CLANG_VERSION"),
        get("CONFIG_RUSTC_CLANG_LLVM_COMPATIBLE"),
    )
}

/// After the build: every requested option is still in `O/.config` (the
/// build's syncconfig re-evaluates the config with the build's toolchain).
pub fn verify_built(out: &Path, fragments: &[PathBuf]) -> Result<()> {
    let mut wanted = Wanted::new();
    for f in fragments {
        wanted.extend(parse(&std::fs::read_to_string(f)?));
    }
    let config = std::fs::read_to_string(out.join(".config"))?;
    let bad = verify(&wanted, &config);
    if !bad.is_empty() {
        bail!(
            "the built kernel's {} lost requested options:\n  {}{}",
            out.join(".config").display(),
            bad.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n  "),
            hint(&bad, &config)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_reports_dropped_and_changed() {
        let wanted = parse(
            "CONFIG_A=y\nCONFIG_B=m\n# CONFIG_C is not set\nCONFIG_D=20\nCONFIG_E=y\nCONFIG_E=n\n",
        );
        let config = "CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=y\nCONFIG_D=20\n# CONFIG_E is not set\n";
        let bad = verify(&wanted, config);
        assert_eq!(
            bad,
            vec![
                Mismatch {
                    option: "CONFIG_B".into(),
                    wanted: Some("m".into()),
                    got: Some("y".into())
                },
                Mismatch {
                    option: "CONFIG_C".into(),
                    wanted: None,
                    got: Some("y".into())
                },
            ]
        );
        assert_eq!(bad[0].to_string(), "CONFIG_B: wanted m, got y");
    }

    #[test]
    fn missing_option_is_reported() {
        let bad = verify(&parse("CONFIG_PROC_SYSCTL=y"), "CONFIG_SYSCTL=y\n");
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].to_string(), "CONFIG_PROC_SYSCTL: wanted y, got n");
    }

    #[test]
    fn repo_fragments_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let base = parse(&std::fs::read_to_string(dir.join("ublk.config")).unwrap());
        assert_eq!(base.get("CONFIG_BLK_DEV_UBLK"), Some(&Some("m".into())));
        assert_eq!(base.get("CONFIG_ACPI"), Some(&Some("y".into())));
        let debug = parse(&std::fs::read_to_string(dir.join("debug.config")).unwrap());
        assert_eq!(debug.get("CONFIG_KASAN"), Some(&Some("y".into())));
        let inline = parse(&std::fs::read_to_string(dir.join("inline-helpers.config")).unwrap());
        assert_eq!(
            inline.get("CONFIG_RUST_INLINE_HELPERS"),
            Some(&Some("y".into()))
        );
        assert_eq!(inline.get("CONFIG_EXPERT"), Some(&Some("y".into())));
    }

    #[test]
    fn dropped_inline_helpers_names_the_llvm_versions() {
        let wanted = parse("CONFIG_EXPERT=y\nCONFIG_RUST_INLINE_HELPERS=y\n");
        let config = "CONFIG_EXPERT=y\nCONFIG_CLANG_VERSION=190107\n\
                      CONFIG_RUSTC_LLVM_MAJOR_VERSION=22\n";
        let bad = verify(&wanted, config);
        assert_eq!(bad.len(), 1);
        let h = hint(&bad, config);
        assert!(h.contains("CONFIG_RUSTC_LLVM_MAJOR_VERSION=22"), "{h}");
        assert!(h.contains("CONFIG_CLANG_VERSION=190107"), "{h}");
        assert!(h.contains("RUSTC_CLANG_LLVM_COMPATIBLE=unset"), "{h}");
        let other = verify(&parse("CONFIG_A=y"), "");
        assert_eq!(hint(&other, config), "");
    }

    #[test]
    fn verify_built_reads_the_output_config() {
        let dir = tempfile::tempdir().unwrap();
        let frag = dir.path().join("f.config");
        std::fs::write(&frag, "CONFIG_RUST_INLINE_HELPERS=y\n").unwrap();
        std::fs::write(dir.path().join(".config"), "CONFIG_RUST_INLINE_HELPERS=y\n").unwrap();
        verify_built(dir.path(), std::slice::from_ref(&frag)).unwrap();
        std::fs::write(dir.path().join(".config"), "CONFIG_RUST=y\n").unwrap();
        let e = verify_built(dir.path(), &[frag]).unwrap_err().to_string();
        assert!(
            e.contains("CONFIG_RUST_INLINE_HELPERS: wanted y, got n"),
            "{e}"
        );
        assert!(e.contains("RUSTC_CLANG_LLVM_COMPATIBLE"), "{e}");
    }
}
