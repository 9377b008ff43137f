//! A minimal initramfs (newc cpio): a static busybox, /dev/console and the
//! init script. Written directly, no cpio(1) needed.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn new() -> Self {
        Cpio {
            buf: Vec::new(),
            ino: 1,
        }
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let namesize = name.len() + 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            namesize as u32,
            0,
        ];
        self.ino += 1;
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            write!(self.buf, "{f:08x}").unwrap();
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.buf
    }
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;

/// Builds the initramfs image bytes.
pub fn build(busybox: &Path, init_script: &Path) -> Result<Vec<u8>> {
    let busybox =
        std::fs::read(busybox).with_context(|| format!("reading {}", busybox.display()))?;
    let init =
        std::fs::read(init_script).with_context(|| format!("reading {}", init_script.display()))?;
    let mut c = Cpio::new();
    for d in ["bin", "dev", "proc", "sys"] {
        c.entry(d, S_IFDIR | 0o755, (0, 0), &[]);
    }
    c.entry("dev/console", S_IFCHR | 0o600, (5, 1), &[]);
    c.entry("bin/busybox", S_IFREG | 0o755, (0, 0), &busybox);
    c.entry("init", S_IFREG | 0o755, (0, 0), &init);
    Ok(c.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_layout() {
        let mut c = Cpio::new();
        c.entry("init", S_IFREG | 0o755, (0, 0), b"#!x\n");
        let b = c.finish();
        assert_eq!(&b[..6], b"070701");
        // Header (110 bytes) + "init\0" padded to 4 → data at 116.
        assert_eq!(&b[110..114], b"init");
        assert_eq!(&b[116..120], b"#!x\n");
        assert_eq!(b.len() % 4, 0);
        let s = String::from_utf8_lossy(&b);
        assert!(s.contains("TRAILER!!!"));
        // mode field (2nd) of the first entry.
        assert_eq!(&b[14..22], b"000081ed");
    }
}
