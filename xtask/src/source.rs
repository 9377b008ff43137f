//! The pristine kernel source: Debian's linux-source-7.3 package by default,
//! or a tree given with `--kernel-src`, imported as the `base` commit of the
//! prepared tree.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

use crate::apt::{self, PrivateApt};
use crate::layout::Layout;
use crate::progress::{detail, phase};

pub const PACKAGE: &str = "linux-source-7.3";
pub const SUITE: &str = "trixie-backports";
const MIN: (u32, u32) = (7, 3);

/// Where the pristine source comes from.
#[derive(Clone, Debug)]
pub enum Origin {
    Debian,
    Dir(PathBuf),
}

/// `VERSION.PATCHLEVEL.SUBLEVEL` of a kernel tree, read from its Makefile.
pub fn kernel_version(tree: &Path) -> Result<(u32, u32, u32)> {
    let mk = std::fs::read_to_string(tree.join("Makefile"))
        .with_context(|| format!("{} is not a kernel tree (no Makefile)", tree.display()))?;
    parse_makefile_version(&mk)
        .with_context(|| format!("no version in {}/Makefile", tree.display()))
}

pub fn parse_makefile_version(mk: &str) -> Option<(u32, u32, u32)> {
    let get = |k: &str| -> Option<u32> {
        mk.lines().find_map(|l| {
            l.strip_prefix(k)?
                .trim_start()
                .strip_prefix('=')
                .map(|v| v.trim().parse().ok())
        })?
    };
    Some((get("VERSION")?, get("PATCHLEVEL")?, get("SUBLEVEL")?))
}

fn check_version(v: (u32, u32, u32), what: &str) -> Result<()> {
    if (v.0, v.1) < MIN {
        bail!(
            "{what} is Linux {}.{}.{}; this project needs {}.{} or newer",
            v.0,
            v.1,
            v.2,
            MIN.0,
            MIN.1
        );
    }
    Ok(())
}

fn git(sh: &Shell) -> xshell::Cmd<'_> {
    cmd!(
        sh,
        "git -c user.name=ublk-xtask -c user.email=xtask@invalid -c advice.detachedHead=false"
    )
}

/// Makes sure the prepared tree exists with a `base` tag holding the pristine
/// source from `origin`. Returns a one-line description of the base.
pub fn ensure_base(layout: &Layout, origin: &Origin) -> Result<String> {
    let tree = layout.tree();
    let identity = match origin {
        Origin::Debian => None,
        Origin::Dir(d) => Some(format!("dir:{}", d.canonicalize()?.display())),
    };
    let id_file = tree.join(".git/xtask-base");
    if tree.join(".git").exists() {
        let have = std::fs::read_to_string(&id_file).unwrap_or_default();
        let matches = match &identity {
            None => have.starts_with("debian:"),
            Some(id) => have.trim() == id,
        };
        let sh = Shell::new()?;
        sh.change_dir(&tree);
        if matches
            && git(&sh)
                .args(["rev-parse", "-q", "--verify", "refs/tags/base"])
                .quiet()
                .ignore_stdout()
                .run()
                .is_ok()
        {
            let v = kernel_version(&tree)?;
            return Ok(format!("{} (Linux {}.{}.{})", have.trim(), v.0, v.1, v.2));
        }
        phase(format!(
            "prepared tree {} has another base; re-importing",
            tree.display()
        ));
        std::fs::remove_dir_all(&tree)?;
    }
    let staging = layout.work.join("linux.import");
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    std::fs::create_dir_all(&staging)?;
    let sh = Shell::new()?;
    let id = match origin {
        Origin::Debian => {
            let apt = PrivateApt::new(&layout.apt())?;
            phase(format!(
                "fetching {PACKAGE} from {SUITE} (private apt state in {})",
                layout.apt().display()
            ));
            apt.update(false)?;
            let version = match apt.candidate(PACKAGE, Some(SUITE)) {
                Ok(v) => v,
                Err(_) => {
                    apt.update(true)?;
                    apt.candidate(PACKAGE, Some(SUITE))?
                }
            };
            let deb = apt.download(PACKAGE, &version, &layout.debs())?;
            detail(format!("{}", deb.display()));
            let unpacked = layout.work.join("linux-source.deb.d");
            if unpacked.exists() {
                std::fs::remove_dir_all(&unpacked)?;
            }
            apt::unpack(&deb, &unpacked)?;
            let tarball = unpacked.join(format!("usr/src/{PACKAGE}.tar.xz"));
            phase(format!("unpacking {}", tarball.display()));
            cmd!(sh, "tar -xJf {tarball} -C {staging} --strip-components=1").run()?;
            std::fs::remove_dir_all(&unpacked)?;
            format!("debian:{PACKAGE}={version}")
        }
        Origin::Dir(dir) => {
            check_version(kernel_version(dir)?, &dir.display().to_string())?;
            phase(format!("copying {} (left untouched)", dir.display()));
            cmd!(sh, "cp -a --reflink=auto {dir}/. {staging}/").run()?;
            let _ = std::fs::remove_dir_all(staging.join(".git"));
            identity.clone().unwrap()
        }
    };
    let v = kernel_version(&staging)?;
    check_version(v, &id)?;
    phase(format!(
        "kernel source is Linux {}.{}.{} ({id})",
        v.0, v.1, v.2
    ));
    phase("recording the pristine source as commit `base`");
    sh.change_dir(&staging);
    git(&sh).args(["init", "-q"]).run()?;
    // -f: Debian's top-level .gitignore ignores everything.
    git(&sh).args(["add", "-Af"]).run()?;
    let msg = format!("Linux {}.{}.{} ({id})", v.0, v.1, v.2);
    git(&sh).args(["commit", "-q", "-m", &msg]).run()?;
    git(&sh).args(["tag", "base"]).run()?;
    std::fs::write(staging.join(".git/xtask-base"), &id)?;
    std::fs::rename(&staging, &tree)?;
    Ok(format!("{id} (Linux {}.{}.{})", v.0, v.1, v.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makefile_version() {
        let mk = "# SPDX\nVERSION = 7\nPATCHLEVEL = 3\nSUBLEVEL = 4\nEXTRAVERSION =\n";
        assert_eq!(parse_makefile_version(mk), Some((7, 3, 4)));
        assert!(check_version((7, 2, 9), "x").is_err());
        assert!(check_version((7, 3, 0), "x").is_ok());
        assert!(check_version((8, 0, 0), "x").is_ok());
    }
}
