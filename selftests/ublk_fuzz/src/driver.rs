//! Loading one ublk driver module at a time: both register
//! /dev/ublk-control, so the other one is unloaded first.

use anyhow::{bail, Context, Result};
use std::process::Command;
use std::time::{Duration, Instant};
use ublk_badinput::ctrl::{self, CONTROL};

/// The drivers a differential run compares: (short name, module).
pub const DRIVERS: [(&str, &str); 2] = [("c", "ublk_drv"), ("rust", "rust_ublk")];

/// The module references an open `/dev/ublkcN` of `module` holds:
/// chrdev_open() takes one for the file's operations and one for the
/// char device itself if it names an owner, which the kernel crate's char
/// devices do (`cdev.owner`) and ublk_drv's does not. Either keeps the
/// module loaded while the file is open.
pub fn refs_per_char_file(module: &str) -> u64 {
    if module == DRIVERS[1].1 {
        2
    } else {
        1
    }
}

pub fn is_loaded(module: &str) -> bool {
    std::fs::read_to_string("/proc/modules")
        .map(|s| s.lines().any(|l| l.split(' ').next() == Some(module)))
        .unwrap_or(false)
}

/// The ublk driver module loaded now, if any.
pub fn loaded() -> Option<&'static str> {
    DRIVERS.iter().map(|(_, m)| *m).find(|m| is_loaded(m))
}

/// Whether `module` can be loaded here (modprobe finds it).
pub fn available(module: &str) -> bool {
    is_loaded(module)
        || Command::new("modprobe")
            .args(["--dry-run", "--ignore-install", module])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
}

pub use ctrl::is_rust_implementation;

fn run(cmd: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("running {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {}: {} {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Unloads every ublk driver but `module` (and `module` too if `fresh`, so
/// that a round starts from a module just loaded: its device numbers and
/// counters as a replay finds them), loads `module` (a test harness may
/// have made a plain `modprobe` of it a no-op) and waits for
/// /dev/ublk-control.
pub fn load(module: &str, fresh: bool) -> Result<()> {
    for (_, m) in DRIVERS {
        if (m != module || fresh) && is_loaded(m) {
            run("rmmod", &[m])?;
        }
    }
    if !is_loaded(module) {
        run("modprobe", &["--ignore-install", module])?;
    }
    let start = Instant::now();
    while !std::path::Path::new(CONTROL).exists() {
        if start.elapsed() > Duration::from_secs(5) {
            bail!("{CONTROL} did not appear after loading {module}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
