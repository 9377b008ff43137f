//! Choosing the QEMU accelerator: KVM only when it really works. A present
//! /dev/kvm is not enough (on these machines it exists, but the CPU has no
//! vmx/svm), so the probe checks the CPU flags and creates a VM.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg { reason: String },
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Accel::Kvm => write!(f, "KVM"),
            Accel::Tcg { reason } => write!(f, "TCG (software emulation: {reason})"),
        }
    }
}

const KVM_GET_API_VERSION: libc::c_ulong = 0xAE00;
const KVM_CREATE_VM: libc::c_ulong = 0xAE01;
const KVM_API_VERSION: i32 = 12;

/// Whether /proc/cpuinfo text lists hardware virtualisation.
pub fn cpu_has_virt(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
}

pub fn probe() -> Accel {
    if std::env::var_os("XTASK_NO_KVM").is_some() {
        return Accel::Tcg {
            reason: "XTASK_NO_KVM is set".into(),
        };
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if !cpu_has_virt(&cpuinfo) {
        return Accel::Tcg {
            reason: "no vmx/svm in /proc/cpuinfo".into(),
        };
    }
    let kvm = match OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(f) => f,
        Err(e) => {
            return Accel::Tcg {
                reason: format!("cannot open /dev/kvm: {e}"),
            }
        }
    };
    // SAFETY: KVM_GET_API_VERSION takes no argument and only returns an int.
    let version = unsafe { libc::ioctl(kvm.as_raw_fd(), KVM_GET_API_VERSION, 0) };
    if version != KVM_API_VERSION {
        return Accel::Tcg {
            reason: format!("KVM API version {version}"),
        };
    }
    // SAFETY: KVM_CREATE_VM with machine type 0 returns a new fd or -1.
    let vm = unsafe { libc::ioctl(kvm.as_raw_fd(), KVM_CREATE_VM, 0) };
    if vm < 0 {
        let e = std::io::Error::last_os_error();
        return Accel::Tcg {
            reason: format!("KVM_CREATE_VM failed: {e}"),
        };
    }
    // SAFETY: vm is a file descriptor we own and close once.
    unsafe { libc::close(vm) };
    Accel::Kvm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_flags() {
        assert!(cpu_has_virt("processor: 0\nflags\t\t: fpu vme vmx sse\n"));
        assert!(cpu_has_virt("flags : fpu svm\n"));
        assert!(!cpu_has_virt("flags : fpu vme sse4_2 hypervisor\n"));
        assert!(!cpu_has_virt("model name: vmx-like\n"));
    }
}
