//! Running kbuild: configuration, the build with progress lines, headers and
//! module installation, and the "nothing changed" stamp.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::progress::{detail, fmt_duration, phase};

pub mod rust_drv;

/// How to invoke make on the prepared tree.
#[derive(Clone, Debug)]
pub struct Make {
    pub tree: PathBuf,
    /// Value of `LLVM=` (e.g. `-19`).
    pub llvm: String,
    pub jobs: usize,
    /// The flavour's pinned Rust toolchain (`RUSTC=`, `RUSTDOC=`); `None`:
    /// the rustc on PATH.
    pub rust: Option<crate::toolchain::RustToolchain>,
}

impl Make {
    /// The make command for `targets` in the build directory `out`.
    pub fn command(&self, out: &Path, targets: &[&str]) -> Command {
        let mut c = Command::new("make");
        c.current_dir(&self.tree)
            .arg(format!("O={}", out.display()))
            .arg(format!("LLVM={}", self.llvm))
            .arg(format!("-j{}", self.jobs))
            .args(self.rust.iter().flat_map(|t| t.make_vars()))
            .args(targets)
            .env("LIBCLANG_PATH", crate::prereq::LIBCLANG_PATH);
        c
    }

    /// What besides the tree and config decides the build: the LLVM suffix,
    /// and the pinned Rust toolchain if any.
    pub fn toolchain_id(&self) -> String {
        match &self.rust {
            None => self.llvm.clone(),
            Some(t) => format!("{} rust-{}", self.llvm, t.name),
        }
    }

    /// Runs make; output is shown only if it fails.
    pub fn run_quiet(&self, out: &Path, targets: &[&str]) -> Result<()> {
        let o = self
            .command(out, targets)
            .output()
            .context("running make")?;
        if !o.status.success() {
            std::io::stderr().write_all(&o.stdout)?;
            std::io::stderr().write_all(&o.stderr)?;
            bail!("make {} failed ({})", targets.join(" "), o.status);
        }
        Ok(())
    }

    /// Runs make with its output in `log` and a progress line every 20 s;
    /// stderr (warnings, errors) also goes to the terminal as it comes, and
    /// is repeated after the last lines if make fails, so that the errors
    /// are not lost among the progress lines.
    pub fn run_logged(&self, out: &Path, targets: &[&str], log: &Path) -> Result<()> {
        let mut child = self
            .command(out, targets)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running make")?;
        let logf = Arc::new(Mutex::new(std::fs::File::create(log)?));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let err_log = logf.clone();
        let errors = std::thread::spawn(move || -> Vec<String> {
            let mut kept = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                eprintln!("{line}");
                if let Ok(mut f) = err_log.lock() {
                    let _ = writeln!(f, "{line}");
                }
                kept.push(line);
            }
            kept
        });
        let start = Instant::now();
        let mut last = Instant::now();
        let mut steps = 0usize;
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            if let Ok(mut f) = logf.lock() {
                writeln!(f, "{line}")?;
            }
            steps += 1;
            if last.elapsed() >= Duration::from_secs(20) {
                last = Instant::now();
                detail(format!(
                    "{steps} steps, {} elapsed; now: {}",
                    fmt_duration(start.elapsed()),
                    line.trim()
                ));
            }
        }
        let st = child.wait()?;
        let errors = errors.join().unwrap_or_default();
        if !st.success() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(25).collect();
            eprintln!("--- last lines of {} ---", log.display());
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
            let first_error = errors
                .iter()
                .position(|l| l.starts_with("error") || l.contains(": error:"));
            if let Some(i) = first_error {
                eprintln!("--- first error ---");
                for l in errors.iter().skip(i).take(40) {
                    eprintln!("{l}");
                }
            }
            bail!(
                "make {} failed ({st}); full log: {}",
                targets.join(" "),
                log.display()
            );
        }
        detail(format!(
            "make {} done in {}",
            targets.join(" "),
            fmt_duration(start.elapsed())
        ));
        Ok(())
    }
}

/// What a finished build provides.
#[derive(Clone, Debug)]
pub struct Outputs {
    pub out: PathBuf,
    pub bzimage: PathBuf,
    pub release: String,
    /// `INSTALL_MOD_PATH` root; modules are in lib/modules/<release>.
    pub modroot: PathBuf,
    /// The same with the Rust driver as `ublk_drv` ([`rust_drv`]).
    pub modroot_rust: PathBuf,
    /// Exported UAPI headers (`make headers`).
    pub headers: PathBuf,
}

impl Outputs {
    pub fn for_dir(out: &Path) -> Result<Self> {
        let release = std::fs::read_to_string(out.join("include/config/kernel.release"))
            .context("kernel not built yet (no include/config/kernel.release)")?
            .trim()
            .to_string();
        Ok(Outputs {
            out: out.to_path_buf(),
            bzimage: out.join("arch/x86/boot/bzImage"),
            modroot: out.join("modroot"),
            modroot_rust: rust_drv::modroot(out),
            headers: out.join("usr/include"),
            release,
        })
    }

    pub fn modules(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        let dir = self.modroot.join("lib/modules").join(&self.release);
        collect_ko(&dir, &mut v);
        v.sort();
        v
    }
}

pub fn collect_ko(dir: &Path, v: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            collect_ko(&p, v);
        } else if p.extension().is_some_and(|e| e == "ko") {
            v.push(p);
        }
    }
}

/// Builds bzImage, modules, headers and the module install tree, unless the
/// stamp says this exact tree commit and config were already built.
pub fn build(make: &Make, out: &Path, tree_head: &str, config_fp: &str) -> Result<Outputs> {
    let stamp_file = out.join(".xtask-built");
    let stamp = format!("{tree_head} {config_fp} {}\n", make.toolchain_id());
    if std::fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp.as_str())
        && out.join("arch/x86/boot/bzImage").exists()
    {
        phase("kernel build up to date");
        let outputs = Outputs::for_dir(out)?;
        rust_drv::ensure(make, out, &outputs.modroot, &outputs.release, &stamp)?;
        return Ok(outputs);
    }
    let _ = std::fs::remove_file(&stamp_file);
    let rust = make
        .rust
        .as_ref()
        .map(|t| format!(", Rust {}", t.name))
        .unwrap_or_default();
    phase(format!(
        "building bzImage and modules (LLVM={}{rust}, -j{}) in {}",
        make.llvm,
        make.jobs,
        out.display()
    ));
    make.run_logged(out, &["bzImage", "modules"], &out.join("build.log"))?;
    phase("exporting UAPI headers and installing modules");
    make.run_quiet(out, &["headers"])?;
    let outputs = Outputs::for_dir(out)?;
    let moddir = outputs.modroot.join("lib/modules");
    if moddir.exists() {
        std::fs::remove_dir_all(&moddir)?;
    }
    make.run_quiet(
        out,
        &[
            "modules_install",
            &format!("INSTALL_MOD_PATH={}", outputs.modroot.display()),
            "INSTALL_MOD_STRIP=1",
        ],
    )?;
    rust_drv::ensure(make, out, &outputs.modroot, &outputs.release, &stamp)?;
    std::fs::write(stamp_file, stamp)?;
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolchain::RustToolchain;

    fn make(rust: Option<RustToolchain>) -> Make {
        Make {
            tree: "/t".into(),
            llvm: "-19".into(),
            jobs: 2,
            rust,
        }
    }

    fn args(m: &Make) -> Vec<String> {
        m.command(Path::new("/o"), &["bzImage"])
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn default_make_is_unchanged_and_pinned_rust_is_passed() {
        let plain = make(None);
        assert_eq!(args(&plain), ["O=/o", "LLVM=-19", "-j2", "bzImage"]);
        assert_eq!(plain.toolchain_id(), "-19");
        let pinned = make(Some(RustToolchain {
            name: "1.86.0".into(),
            rustc: "/r/rustc".into(),
            rustdoc: "/r/rustdoc".into(),
        }));
        assert_eq!(
            args(&pinned),
            [
                "O=/o",
                "LLVM=-19",
                "-j2",
                "RUSTC=/r/rustc",
                "RUSTDOC=/r/rustdoc",
                "bzImage"
            ]
        );
        assert_eq!(pinned.toolchain_id(), "-19 rust-1.86.0");
    }
}
