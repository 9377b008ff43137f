//! Host prerequisites: check, and on Debian as root install what is missing.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

use crate::progress::{detail, phase};

/// A host requirement and the Debian package that provides it.
struct Need {
    /// What is checked: a command on PATH, or an absolute file path.
    probe: &'static str,
    package: &'static str,
}

const NEEDS: &[Need] = &[
    Need {
        probe: "clang-19",
        package: "clang-19",
    },
    Need {
        probe: "ld.lld-19",
        package: "lld-19",
    },
    Need {
        probe: "llvm-ar-19",
        package: "llvm-19",
    },
    Need {
        probe: "/usr/lib/llvm-19/lib/libclang.so",
        package: "libclang-19-dev",
    },
    Need {
        probe: "flex",
        package: "flex",
    },
    Need {
        probe: "bison",
        package: "bison",
    },
    Need {
        probe: "bc",
        package: "bc",
    },
    Need {
        probe: "/usr/include/libelf.h",
        package: "libelf-dev",
    },
    Need {
        probe: "/usr/include/openssl/ssl.h",
        package: "libssl-dev",
    },
    Need {
        probe: "cpio",
        package: "cpio",
    },
    Need {
        probe: "depmod",
        package: "kmod",
    },
    Need {
        probe: "qemu-system-x86_64",
        package: "qemu-system-x86",
    },
    Need {
        probe: "/bin/busybox",
        package: "busybox-static",
    },
    Need {
        probe: "fio",
        package: "fio",
    },
    Need {
        probe: "gcc",
        package: "gcc",
    },
    Need {
        probe: "make",
        package: "make",
    },
    Need {
        probe: "perl",
        package: "perl",
    },
    Need {
        probe: "dpkg-deb",
        package: "dpkg",
    },
    // lib.mk installs the selftests with rsync.
    Need {
        probe: "rsync",
        package: "rsync",
    },
    // rublk's build: bindgen (libclang, above) reads the host's UAPI headers.
    Need {
        probe: "/usr/include/linux/blkzoned.h",
        package: "linux-libc-dev",
    },
    // test_rublk_zoned.sh: btrfs on a zoned device is what issues zone appends.
    Need {
        probe: "mkfs.btrfs",
        package: "btrfs-progs",
    },
];

pub const LIBCLANG_PATH: &str = "/usr/lib/llvm-19/lib";

fn present(probe: &str) -> bool {
    if probe.starts_with('/') {
        return Path::new(probe).exists();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(probe).is_file()))
        || ["/usr/sbin", "/sbin"]
            .iter()
            .any(|d| Path::new(d).join(probe).is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn is_debian() -> bool {
    Path::new("/etc/debian_version").exists()
}

fn rust_src_present() -> bool {
    let Ok(out) = Command::new("rustc").args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Path::new(&sysroot)
        .join("lib/rustlib/src/rust/library/core")
        .exists()
}

/// Whether a binary is statically linked (has no ELF program interpreter).
pub fn is_static_elf(path: &Path) -> Result<bool> {
    let data = std::fs::read(path)?;
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 {
        bail!("{} is not a 64-bit ELF file", path.display());
    }
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
    for i in 0..phnum {
        let o = phoff + i * phentsize;
        if o + 4 > data.len() {
            bail!("truncated ELF program headers in {}", path.display());
        }
        if u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) == 3 {
            return Ok(false); // PT_INTERP
        }
    }
    Ok(true)
}

/// Checks the host tools; installs missing ones on Debian when root.
pub fn ensure() -> Result<()> {
    phase("checking host prerequisites");
    let mut missing: Vec<&str> = NEEDS
        .iter()
        .filter(|n| !present(n.probe))
        .map(|n| n.package)
        .collect();
    if present("/bin/busybox") && !is_static_elf(Path::new("/bin/busybox")).unwrap_or(false) {
        missing.push("busybox-static");
    }
    missing.dedup();
    let need_rust_src = !rust_src_present();
    let need_bindgen = !present("bindgen");

    if missing.is_empty() && !need_rust_src && !need_bindgen {
        detail("all present");
        return Ok(());
    }
    if !(is_root() && is_debian()) {
        let mut msg = String::from("missing prerequisites:\n");
        if !missing.is_empty() {
            msg += &format!(
                "  apt-get install --no-install-recommends {}\n",
                missing.join(" ")
            );
        }
        if need_rust_src {
            msg += "  rustup component add rust-src\n";
        }
        if need_bindgen {
            msg += "  cargo install bindgen-cli --locked\n";
        }
        msg += "(run as root on Debian and `cargo xtask build-kernel` installs them itself)";
        bail!(msg);
    }
    if !missing.is_empty() {
        phase(format!("installing: {}", missing.join(" ")));
        let install = |update: bool| -> bool {
            if update {
                let _ = Command::new("apt-get").args(["-qq", "update"]).status();
            }
            Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .is_ok_and(|s| s.success())
        };
        if !install(false) && !install(true) {
            bail!("apt-get install {} failed", missing.join(" "));
        }
    }
    if need_rust_src {
        phase("installing rust-src (rustup component add rust-src)");
        run_ok(Command::new("rustup").args(["component", "add", "rust-src"]))?;
    }
    if need_bindgen {
        phase("installing bindgen (cargo install bindgen-cli --locked), takes about a minute");
        run_ok(Command::new("cargo").args(["install", "bindgen-cli", "--locked"]))?;
    }
    let still: Vec<&str> = NEEDS
        .iter()
        .filter(|n| !present(n.probe))
        .map(|n| n.package)
        .collect();
    if !still.is_empty() {
        bail!("still missing after install: {}", still.join(" "));
    }
    Ok(())
}

fn run_ok(c: &mut Command) -> Result<()> {
    let st = c.status().with_context(|| format!("running {c:?}"))?;
    if !st.success() {
        bail!("{c:?} failed: {st}");
    }
    Ok(())
}

/// Parses the first `x.y[.z]` version number in a tool's output.
pub fn parse_version(text: &str) -> Option<Vec<u32>> {
    let re = regex::Regex::new(r"(\d+)\.(\d+)(?:\.(\d+))?").unwrap();
    let c = re.captures(text)?;
    Some(
        (1..=3)
            .map(|i| c.get(i).map_or(0, |m| m.as_str().parse().unwrap_or(0)))
            .collect(),
    )
}

/// Checks tool versions against the tree's scripts/min-tool-version.sh;
/// `rustc` is a flavour's pinned rustc, `None` the one on PATH.
pub fn check_min_versions(tree: &Path, llvm_suffix: &str, rustc: Option<&Path>) -> Result<()> {
    let rustc = rustc.map_or_else(|| "rustc".to_string(), |p| p.display().to_string());
    let tools = [
        ("llvm", format!("clang{llvm_suffix}"), vec!["--version"]),
        ("rustc", rustc, vec!["--version"]),
        ("bindgen", "bindgen".to_string(), vec!["--version"]),
    ];
    let mut bad = Vec::new();
    let mut seen = Vec::new();
    for (name, bin, args) in tools {
        let min = Command::new(tree.join("scripts/min-tool-version.sh"))
            .arg(name)
            .output()?;
        let min = String::from_utf8_lossy(&min.stdout).trim().to_string();
        let out = Command::new(&bin)
            .args(&args)
            .output()
            .with_context(|| format!("running {bin}"))?;
        let have_txt = String::from_utf8_lossy(&out.stdout).to_string();
        let (Some(have), Some(want)) = (parse_version(&have_txt), parse_version(&min)) else {
            bail!("cannot read the version of {bin} ({have_txt:?}) or its minimum ({min:?})");
        };
        let have_s = have
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(".");
        seen.push(format!("{bin} {have_s} (min {min})"));
        if have < want {
            bad.push(format!(
                "{bin} {have_s} is older than the minimum {min} the tree requires"
            ));
        }
    }
    detail(seen.join(", "));
    if !bad.is_empty() {
        bail!(bad.join("\n"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(
            parse_version("rustc 1.95.0 (59807616e 2026-04-14)"),
            Some(vec![1, 95, 0])
        );
        assert_eq!(
            parse_version("Debian clang version 19.1.7 (3~deb12u1)"),
            Some(vec![19, 1, 7])
        );
        assert_eq!(parse_version("0.71"), Some(vec![0, 71, 0]));
        assert!(vec![0, 69, 5] < vec![0, 71, 0]);
    }

    #[test]
    fn static_elf_detection() {
        // The test binary itself is dynamically linked.
        let me = std::env::current_exe().unwrap();
        assert!(!is_static_elf(&me).unwrap());
    }
}
