//! Booting the test guest in QEMU.
//!
//! The guest is our own QEMU line rather than virtme-ng: the kernel gets a
//! tiny busybox initramfs (see init.sh) that mounts the host's / over
//! virtio-9p read-only under a tmpfs overlay, plus a writable 9p share for
//! the job directory. That keeps what virtme-ng offers (the host's binaries
//! in the guest, no image to build) while removing the parts that failed in
//! the hand-run: no kernel command line limit for the test list, no exit
//! status through virtio-serial, no Python dependency, and the harness owns
//! the console, every timeout and the kill.

pub mod accel;
pub mod initramfs;
pub mod job;
mod process;

pub use accel::Accel;
pub use process::{die_with_parent, run_watched, Ending, Limits, Outcome};

use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::kbuild::Outputs;

/// What to boot: a kernel, and the job directory it runs.
pub struct Guest<'a> {
    pub kernel: &'a Outputs,
    pub job: &'a job::Job,
    pub accel: &'a Accel,
    pub size: Size,
}

/// vCPUs and memory of every guest but a `vm --cpus/--memory` one (the
/// selftest times and the benchmark plans assume them).
pub const CPUS: u32 = 2;
pub const MEMORY_MB: u32 = 3072;

/// A guest's vCPUs and memory.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    pub cpus: u32,
    pub memory_mb: u32,
}

impl Default for Size {
    fn default() -> Size {
        Size {
            cpus: CPUS,
            memory_mb: MEMORY_MB,
        }
    }
}

impl Guest<'_> {
    pub fn command(&self) -> Command {
        let mut c = Command::new("qemu-system-x86_64");
        die_with_parent(&mut c);
        c.args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ]);
        match self.accel {
            Accel::Kvm => c.args(["-accel", "kvm", "-cpu", "host"]),
            Accel::Tcg { .. } => c.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
        };
        c.arg("-smp").arg(self.size.cpus.to_string());
        c.arg("-m").arg(format!("{}M", self.size.memory_mb));
        c.arg("-kernel").arg(&self.kernel.bzimage);
        c.arg("-initrd").arg(&self.job.initramfs);
        let append = [
            "console=ttyS0".to_string(),
            "loglevel=5".into(),
            "panic=-1".into(),
            "rdinit=/init".into(),
            format!("xtask.job={}", self.job.dir.display()),
            format!("xtask.keep={}", keep_arg(&self.job.keep)),
        ];
        c.arg("-append").arg(append.join(" "));
        c.args(["-serial", "stdio"]);
        c.arg("-virtfs")
            .arg("local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap");
        c.arg("-virtfs").arg(format!(
            "local,path={},mount_tag=job,security_model=none,multidevs=remap",
            self.job.dir.display()
        ));
        c
    }
}

/// The value of `xtask.keep=`: paths joined by colons (job::create checked
/// that none holds a colon or whitespace).
fn keep_arg(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// Writes the initramfs for the guest into `dir` and returns its path.
pub fn write_initramfs(dir: &Path, init_script: &Path) -> Result<PathBuf> {
    let img = initramfs::build(Path::new("/bin/busybox"), init_script)?;
    let path = dir.join("initramfs.cpio");
    std::fs::write(&path, img)?;
    Ok(path)
}
