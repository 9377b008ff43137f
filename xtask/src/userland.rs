//! Userspace for the guest: liburing >= 2.4 in a private sysroot, kublk and
//! the ublk selftests built from the prepared tree, our Rust selftest
//! programs built from this workspace and installed next to kublk, the
//! udev and sfdisk binaries the selftests want (unpacked from Debian packages
//! matching the host's libraries, copied into the guest's writable root at
//! boot), and rublk for the harness tests.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::apt::{self, PrivateApt};
use crate::kbuild::Outputs;
use crate::layout::Layout;
use crate::progress::{detail, phase};
use crate::rublk;

const LIBURING: &str = "liburing-dev";
const LIBURING_SUITE: &str = "trixie";
const SELFTESTS_REL: &str = "tools/testing/selftests/ublk";

/// What the guest needs besides the kernel.
#[derive(Clone, Debug)]
pub struct Userland {
    /// Installed selftests directory (test scripts, kublk, test_common.sh).
    pub selftests: PathBuf,
    /// Root with udev and sfdisk files to copy over the guest's /.
    pub extras: PathBuf,
    /// The rublk binary, or why there is none (its tests then skip).
    pub rublk: Result<PathBuf, String>,
}

/// Parses `2.9-1` style Debian versions into the upstream major/minor.
pub fn upstream_version(v: &str) -> Option<(u32, u32)> {
    let v = v.split(':').next_back()?;
    let mut it = v.split(['.', '-', '+', '~']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn liburing_sysroot(layout: &Layout, apt: &PrivateApt) -> Result<PathBuf> {
    let root = layout.cache.join("sysroot-liburing");
    let lib = root.join("usr/lib/x86_64-linux-gnu/liburing.a");
    if lib.exists() {
        return Ok(root);
    }
    phase(format!(
        "fetching {LIBURING} from {LIBURING_SUITE} into a private sysroot"
    ));
    apt.update(false)?;
    let version = apt.candidate(LIBURING, Some(LIBURING_SUITE))?;
    match upstream_version(&version) {
        Some(v) if v >= (2, 4) => {}
        _ => {
            bail!("{LIBURING} {version} from {LIBURING_SUITE} is older than 2.4, which kublk needs")
        }
    }
    let deb = apt.download(LIBURING, &version, &layout.debs())?;
    let tmp = root.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    apt::unpack(&deb, &tmp)?;
    // Only the static library: link kublk statically against it.
    for so in ["liburing.so", "liburing-ffi.so"] {
        let _ = std::fs::remove_file(tmp.join("usr/lib/x86_64-linux-gnu").join(so));
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::rename(&tmp, &root)?;
    detail(format!("{LIBURING} {version}"));
    Ok(root)
}

/// Debian packages for the guest whose version must match a host library.
const EXTRAS: &[(&str, &str)] = &[("udev", "libsystemd-shared"), ("fdisk", "libfdisk1")];

fn guest_extras(layout: &Layout, apt: &PrivateApt) -> Result<PathBuf> {
    let root = layout.cache.join("guest-extras");
    let mut wanted = Vec::new();
    for (pkg, lib) in EXTRAS {
        let version = match apt::installed_version(lib) {
            Some(v) => v,
            None => bail!(
                "host library package {lib} is not installed; {pkg} for the guest must match it"
            ),
        };
        wanted.push((*pkg, version));
    }
    let id: String = wanted.iter().map(|(p, v)| format!("{p}={v}\n")).collect();
    if std::fs::read_to_string(root.join(".xtask-id"))
        .ok()
        .as_deref()
        == Some(id.as_str())
    {
        return Ok(root);
    }
    phase(format!(
        "fetching guest tools: {}",
        id.trim().replace('\n', " ")
    ));
    apt.update(false)?;
    let tmp = root.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    for (pkg, version) in &wanted {
        let deb = apt.download(pkg, version, &layout.debs())?;
        apt::unpack(&deb, &tmp)?;
    }
    std::fs::write(tmp.join(".xtask-id"), &id)?;
    let _ = std::fs::remove_dir_all(&root);
    std::fs::rename(&tmp, &root)?;
    Ok(root)
}

/// Builds kublk and installs the selftests (make handles staleness).
fn selftests(layout: &Layout, kernel: &Outputs, sysroot: &Path) -> Result<PathBuf> {
    let src = layout.tree().join(SELFTESTS_REL);
    let build = layout.userland().join("build/ublk");
    let install = layout.userland().join("ublk");
    std::fs::create_dir_all(&build)?;
    phase("building kublk and the ublk selftests");
    let khdr = format!("KHDR_INCLUDES=-isystem {}", kernel.headers.display());
    let mk = |target: &str| -> Result<()> {
        let out = Command::new("make")
            .current_dir(&src)
            .arg(target)
            .arg(format!("OUTPUT={}", build.display()))
            .arg(&khdr)
            .arg(format!("INSTALL_PATH={}", install.display()))
            // The Makefile looks for UAPI headers in the source tree's
            // usr/include; ours are in the build directory.
            .env(
                "CFLAGS",
                format!(
                    "-I{}/usr/include -isystem {}",
                    sysroot.display(),
                    kernel.headers.display()
                ),
            )
            .env(
                "LDFLAGS",
                format!("-L{}/usr/lib/x86_64-linux-gnu", sysroot.display()),
            )
            .output()
            .context("running make for the ublk selftests")?;
        if !out.status.success() {
            eprintln!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            bail!("building the ublk selftests failed (make {target})");
        }
        Ok(())
    };
    mk("all")?;
    mk("install")?;
    let kublk = install.join("kublk");
    if !kublk.exists() {
        bail!("selftests install has no kublk at {}", kublk.display());
    }
    Ok(install)
}

/// Rust selftest programs, as (cargo package, binary): built on the host
/// (the guest runs them from the host's root) and installed into the
/// selftests directory, where their wrapper scripts (`selftests/test_*.sh`,
/// listed in the Makefile by a patch) look for them.
pub const RUST_SELFTESTS: &[(&str, &str)] = &[
    ("ublk-badinput", "ublk_badinput"),
    ("ublk-fuzz", "ublk_fuzz"),
    ("ublk-release-race", "ublk_release_race"),
];

/// Builds the [`RUST_SELFTESTS`] (cargo handles staleness) and copies them
/// into `install`.
fn rust_selftests(layout: &Layout, install: &Path) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(t) if t.is_absolute() => t,
        Some(t) => layout.repo.join(t),
        None => layout.repo.join("target"),
    };
    for (pkg, bin) in RUST_SELFTESTS {
        phase(format!("building {bin} (cargo build --release -p {pkg})"));
        let status = Command::new(&cargo)
            .current_dir(&layout.repo)
            .args([
                "build",
                "--release",
                "--quiet",
                "--package",
                pkg,
                "--bin",
                bin,
            ])
            .status()
            .with_context(|| format!("running cargo build for {pkg}"))?;
        if !status.success() {
            bail!("building {pkg} failed ({status})");
        }
        let built = target.join("release").join(bin);
        // A copy, then a rename: a run snapshotting the install directory
        // meanwhile sees the old binary or the new one, never half of one.
        let tmp = install.join(format!(".{bin}.new"));
        std::fs::copy(&built, &tmp)
            .and_then(|_| std::fs::rename(&tmp, install.join(bin)))
            .with_context(|| format!("installing {}", built.display()))?;
    }
    Ok(())
}

pub fn ensure(layout: &Layout, kernel: &Outputs) -> Result<Userland> {
    let apt = PrivateApt::new(&layout.apt())?;
    let sysroot = liburing_sysroot(layout, &apt)?;
    let extras = guest_extras(layout, &apt)?;
    let selftests = selftests(layout, kernel, &sysroot)?;
    rust_selftests(layout, &selftests)?;
    // Not fatal: without rublk only its tests skip, saying why.
    let rublk = rublk::ensure(layout).map_err(|e| {
        let why = format!("rublk {} could not be built: {e:#}", rublk::VERSION);
        phase(format!("warning: {why}"));
        why
    });
    Ok(Userland {
        selftests,
        extras,
        rublk,
    })
}

pub fn summary(u: &Userland) {
    detail(format!("kublk    {}", u.selftests.join("kublk").display()));
    match &u.rublk {
        Ok(p) => detail(format!("rublk    {}", p.display())),
        Err(why) => detail(format!("rublk    none: {why}")),
    }
}

/// The test scripts the selftests Makefile lists (TEST_PROGS), in order.
pub fn test_progs(tree: &Path) -> Result<Vec<String>> {
    let mk = std::fs::read_to_string(tree.join(SELFTESTS_REL).join("Makefile"))?;
    Ok(parse_test_progs(&mk))
}

pub fn parse_test_progs(mk: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in mk.lines() {
        let Some(rest) = line.strip_prefix("TEST_PROGS") else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(rest) = rest.strip_prefix(":=").or_else(|| rest.strip_prefix("+=")) else {
            continue;
        };
        out.extend(rest.split_whitespace().map(str::to_string));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(upstream_version("2.9-1"), Some((2, 9)));
        assert_eq!(upstream_version("2.3-3"), Some((2, 3)));
        assert!(upstream_version("2.3-3").unwrap() < (2, 4));
        assert_eq!(upstream_version("1:2.15-1"), Some((2, 15)));
    }

    #[test]
    fn test_progs_from_makefile() {
        let mk = "TEST_PROGS := test_generic_02.sh\nTEST_PROGS += test_generic_03.sh\n\nTEST_PROGS += a.sh b.sh\nTEST_FILES := settings\n";
        assert_eq!(
            parse_test_progs(mk),
            ["test_generic_02.sh", "test_generic_03.sh", "a.sh", "b.sh"]
        );
    }
}
