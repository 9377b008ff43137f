//! `const fn` equivalents of the kernel's `_IOC()` / `_IO()` / `_IOR()` /
//! `_IOW()` / `_IOWR()` ioctl number encoding.
//!
//! The default is the asm-generic layout used by x86, x86_64, arm, aarch64,
//! riscv, loongarch, s390, ...:
//!
//! | bits  | field |
//! |-------|-------|
//! | 0-7   | nr    |
//! | 8-15  | type  |
//! | 16-29 | size  |
//! | 30-31 | dir   |
//!
//! powerpc, mips and sparc use a 13-bit size field, a 3-bit direction field
//! and different direction values; that variant is selected with `cfg`.

#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "mips32r6",
    target_arch = "mips64r6",
    target_arch = "sparc",
    target_arch = "sparc64",
)))]
mod arch {
    pub const IOC_SIZEBITS: u32 = 14;
    pub const IOC_DIRBITS: u32 = 2;
    pub const IOC_NONE: u32 = 0;
    pub const IOC_WRITE: u32 = 1;
    pub const IOC_READ: u32 = 2;
}

#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "mips32r6",
    target_arch = "mips64r6",
    target_arch = "sparc",
    target_arch = "sparc64",
))]
mod arch {
    pub const IOC_SIZEBITS: u32 = 13;
    pub const IOC_DIRBITS: u32 = 3;
    pub const IOC_NONE: u32 = 1;
    pub const IOC_WRITE: u32 = 4;
    pub const IOC_READ: u32 = 2;
}

pub use arch::{IOC_DIRBITS, IOC_NONE, IOC_READ, IOC_SIZEBITS, IOC_WRITE};

/// Width of the command number field.
pub const IOC_NRBITS: u32 = 8;
/// Width of the type ("magic") field.
pub const IOC_TYPEBITS: u32 = 8;

/// Bit position of the command number field.
pub const IOC_NRSHIFT: u32 = 0;
/// Bit position of the type field.
pub const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
/// Bit position of the argument size field.
pub const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
/// Bit position of the direction field.
pub const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;

/// Type ("magic") byte used by every ublk ioctl-encoded command.
pub const UBLK_IOC_TYPE: u8 = b'u';

/// Encodes an ioctl number from its direction, type, number and argument size
/// (`_IOC()`).
///
/// Panics (at compile time when used in a `const`) if a field does not fit.
pub const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    assert!(dir < (1 << IOC_DIRBITS), "ioctl direction out of range");
    assert!(size < (1 << IOC_SIZEBITS), "ioctl argument size too large");
    (dir << IOC_DIRSHIFT)
        | ((ty as u32) << IOC_TYPESHIFT)
        | ((nr as u32) << IOC_NRSHIFT)
        | ((size as u32) << IOC_SIZESHIFT)
}

/// `_IO()`: command without argument.
pub const fn io(ty: u8, nr: u8) -> u32 {
    ioc(IOC_NONE, ty, nr, 0)
}

/// `_IOR()`: the kernel writes an argument of `size` bytes back to userspace.
pub const fn ior(ty: u8, nr: u8, size: usize) -> u32 {
    ioc(IOC_READ, ty, nr, size)
}

/// `_IOW()`: userspace passes an argument of `size` bytes to the kernel.
pub const fn iow(ty: u8, nr: u8, size: usize) -> u32 {
    ioc(IOC_WRITE, ty, nr, size)
}

/// `_IOWR()`: argument of `size` bytes travels in both directions.
pub const fn iowr(ty: u8, nr: u8, size: usize) -> u32 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, size)
}

/// Extracts the direction field of an encoded ioctl number (`_IOC_DIR()`).
pub const fn ioc_dir(cmd: u32) -> u32 {
    (cmd >> IOC_DIRSHIFT) & ((1 << IOC_DIRBITS) - 1)
}

/// Extracts the type field of an encoded ioctl number (`_IOC_TYPE()`).
pub const fn ioc_type(cmd: u32) -> u8 {
    ((cmd >> IOC_TYPESHIFT) & ((1 << IOC_TYPEBITS) - 1)) as u8
}

/// Extracts the command number of an encoded ioctl number (`_IOC_NR()`).
///
/// For ublk commands this is the legacy opcode (e.g. `UBLK_CMD_ADD_DEV`).
pub const fn ioc_nr(cmd: u32) -> u8 {
    ((cmd >> IOC_NRSHIFT) & ((1 << IOC_NRBITS) - 1)) as u8
}

/// Extracts the argument size of an encoded ioctl number (`_IOC_SIZE()`).
pub const fn ioc_size(cmd: u32) -> usize {
    ((cmd >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let cmd = iowr(UBLK_IOC_TYPE, 0x04, 32);
        assert_eq!(ioc_dir(cmd), IOC_READ | IOC_WRITE);
        assert_eq!(ioc_type(cmd), b'u');
        assert_eq!(ioc_nr(cmd), 0x04);
        assert_eq!(ioc_size(cmd), 32);
        assert_eq!(ioc_dir(io(b'u', 1)), IOC_NONE);
        assert_eq!(ioc_dir(iow(b'u', 1, 8)), IOC_WRITE);
        assert_eq!(ioc_dir(ior(b'u', 1, 8)), IOC_READ);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn known_x86_64_values() {
        // _IOWR('u', 0x04, 32-byte struct) and _IOR('u', 0x02, 32-byte struct)
        assert_eq!(iowr(b'u', 0x04, 32), 0xc020_7504);
        assert_eq!(ior(b'u', 0x02, 32), 0x8020_7502);
    }
}
