//! Batch io commands (`UBLK_F_BATCH_IO`): the 16-byte `struct ublk_batch_io`
//! command area, the element buffers of PREP_IO_CMDS and COMMIT_IO_CMDS,
//! and the SQEs, including the multishot FETCH_IO_CMDS that selects a
//! provided buffer.

use io_uring::{opcode, squeue, types};
use std::os::fd::RawFd;
use ublk_uapi::{
    UblkBatchIo, UblkElemHeader, UBLK_BATCH_F_HAS_BUF_ADDR, UBLK_BATCH_F_HAS_ZONE_LBA,
    UBLK_U_IO_FETCH_IO_CMDS,
};

/// `IORING_URING_CMD_MULTISHOT` (`sqe->uring_cmd_flags`).
pub const URING_CMD_MULTISHOT: u32 = 1 << 1;

/// Offsets in a 64-byte SQE (`struct io_uring_sqe`).
const SQE_URING_CMD_FLAGS: usize = 28;
const SQE_BUF_GROUP: usize = 40;

/// One element of a PREP or COMMIT buffer; which of `buf_addr` and
/// `zone_lba` are written depends on the command's flags.
#[derive(Clone, Copy, Debug, Default)]
pub struct Elem {
    pub tag: u16,
    pub buf_index: u16,
    pub result: i32,
    pub buf_addr: u64,
    pub zone_lba: u64,
}

impl Elem {
    pub fn new(tag: u16, buf_addr: u64) -> Self {
        Elem {
            tag,
            buf_addr,
            ..Default::default()
        }
    }
}

/// The element size that `flags` asks for (`ublk_check_batch_cmd_flags()`):
/// the 8-byte header, then 8 bytes each for the buffer address and the
/// zone LBA.
pub const fn elem_bytes(flags: u16) -> u8 {
    let mut n = std::mem::size_of::<UblkElemHeader>() as u8;
    if flags & UBLK_BATCH_F_HAS_BUF_ADDR != 0 {
        n += 8;
    }
    if flags & UBLK_BATCH_F_HAS_ZONE_LBA != 0 {
        n += 8;
    }
    n
}

/// The element buffer for `elems` under `flags`: per element the header,
/// then `buf_addr` if HAS_BUF_ADDR, then `zone_lba` if HAS_ZONE_LBA.
pub fn encode(flags: u16, elems: &[Elem]) -> Vec<u8> {
    let mut out = Vec::with_capacity(elems.len() * usize::from(elem_bytes(flags)));
    for e in elems {
        out.extend_from_slice(&e.tag.to_ne_bytes());
        out.extend_from_slice(&e.buf_index.to_ne_bytes());
        out.extend_from_slice(&e.result.to_ne_bytes());
        if flags & UBLK_BATCH_F_HAS_BUF_ADDR != 0 {
            out.extend_from_slice(&e.buf_addr.to_ne_bytes());
        }
        if flags & UBLK_BATCH_F_HAS_ZONE_LBA != 0 {
            out.extend_from_slice(&e.zone_lba.to_ne_bytes());
        }
    }
    out
}

/// A header for `nr_elem` elements of the size `flags` asks for.
pub fn header(q_id: u16, flags: u16, nr_elem: u16) -> UblkBatchIo {
    UblkBatchIo {
        q_id,
        flags,
        nr_elem,
        elem_bytes: elem_bytes(flags),
        ..Default::default()
    }
}

/// The 16-byte command area holding `b`.
pub fn cmd16(b: &UblkBatchIo) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0..2].copy_from_slice(&b.q_id.to_ne_bytes());
    out[2..4].copy_from_slice(&b.flags.to_ne_bytes());
    out[4..6].copy_from_slice(&b.nr_elem.to_ne_bytes());
    out[6] = b.elem_bytes;
    out[7] = b.reserved;
    out[8..16].copy_from_slice(&b.reserved2.to_ne_bytes());
    out
}

/// A PREP_IO_CMDS or COMMIT_IO_CMDS SQE on the char device `fd`, its
/// element buffer at `addr`.
pub fn batch_sqe(fd: RawFd, op: u32, b: &UblkBatchIo, addr: u64) -> squeue::Entry {
    opcode::UringCmd16::new(types::Fd(fd), op)
        .cmd(cmd16(b))
        .addr(Some(addr))
        .build()
}

/// A FETCH_IO_CMDS SQE: with `multishot`, `IORING_URING_CMD_MULTISHOT` and
/// `IOSQE_BUFFER_SELECT` of buffer group `group` (io_uring takes neither
/// without the other); without, plain, so that the driver sees it.
pub fn fetch_sqe(fd: RawFd, b: &UblkBatchIo, group: u16, multishot: bool) -> squeue::Entry {
    let sqe = opcode::UringCmd16::new(types::Fd(fd), UBLK_U_IO_FETCH_IO_CMDS)
        .cmd(cmd16(b))
        .build();
    if !multishot {
        return sqe;
    }
    // The crate sets a buffer index only with IORING_URING_CMD_FIXED,
    // which io_uring refuses together with MULTISHOT: write the two fields.
    let mut raw = to_bytes(sqe.flags(squeue::Flags::BUFFER_SELECT));
    raw[SQE_URING_CMD_FLAGS..SQE_URING_CMD_FLAGS + 4]
        .copy_from_slice(&URING_CMD_MULTISHOT.to_ne_bytes());
    raw[SQE_BUF_GROUP..SQE_BUF_GROUP + 2].copy_from_slice(&group.to_ne_bytes());
    from_bytes(raw)
}

fn to_bytes(sqe: squeue::Entry) -> [u8; 64] {
    // SAFETY: `squeue::Entry` is `repr(C)` around `struct io_uring_sqe`, 64
    // bytes of integers without padding, all written by the builder.
    unsafe { std::mem::transmute::<squeue::Entry, [u8; 64]>(sqe) }
}

fn from_bytes(raw: [u8; 64]) -> squeue::Entry {
    // SAFETY: as in `to_bytes`; every bit pattern is a valid SQE value.
    unsafe { std::mem::transmute::<[u8; 64], squeue::Entry>(raw) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ublk_uapi::UBLK_BATCH_F_AUTO_BUF_REG_FALLBACK;

    #[test]
    fn element_sizes() {
        assert_eq!(elem_bytes(0), 8);
        assert_eq!(elem_bytes(UBLK_BATCH_F_HAS_BUF_ADDR), 16);
        assert_eq!(
            elem_bytes(UBLK_BATCH_F_HAS_BUF_ADDR | UBLK_BATCH_F_HAS_ZONE_LBA),
            24
        );
        assert_eq!(elem_bytes(UBLK_BATCH_F_AUTO_BUF_REG_FALLBACK), 8);
    }

    #[test]
    fn element_layout() {
        let e = Elem {
            tag: 3,
            buf_index: 4,
            result: -5,
            buf_addr: 0x1122,
            zone_lba: 0x3344,
        };
        let flags = UBLK_BATCH_F_HAS_BUF_ADDR | UBLK_BATCH_F_HAS_ZONE_LBA;
        let b = encode(flags, &[e, e]);
        assert_eq!(b.len(), 48);
        assert_eq!(&b[0..4], &[3, 0, 4, 0]);
        assert_eq!(i32::from_ne_bytes(b[4..8].try_into().unwrap()), -5);
        assert_eq!(u64::from_ne_bytes(b[8..16].try_into().unwrap()), 0x1122);
        assert_eq!(u64::from_ne_bytes(b[16..24].try_into().unwrap()), 0x3344);
        assert_eq!(b[24], 3);
        assert_eq!(encode(0, &[e]).len(), 8);
    }

    #[test]
    fn command_area_layout() {
        let mut b = header(1, UBLK_BATCH_F_HAS_BUF_ADDR, 7);
        b.reserved2 = 9;
        let c = cmd16(&b);
        assert_eq!(&c[0..8], &[1, 0, 2, 0, 7, 0, 16, 0]);
        assert_eq!(c[8], 9);
        assert_eq!(std::mem::size_of::<UblkBatchIo>(), 16);
    }

    #[test]
    fn fetch_sqe_layout() {
        let b = UblkBatchIo {
            elem_bytes: 2,
            ..Default::default()
        };
        let raw = to_bytes(fetch_sqe(5, &b, 0x0102, true));
        assert_eq!(raw[0], opcode::UringCmd16::CODE);
        assert_eq!(raw[1], 1 << 5, "IOSQE_BUFFER_SELECT");
        assert_eq!(i32::from_ne_bytes(raw[4..8].try_into().unwrap()), 5);
        let op = u32::from_ne_bytes(raw[8..12].try_into().unwrap());
        assert_eq!(op, UBLK_U_IO_FETCH_IO_CMDS);
        let flags = u32::from_ne_bytes(raw[28..32].try_into().unwrap());
        assert_eq!(flags, URING_CMD_MULTISHOT);
        assert_eq!(&raw[40..42], &0x0102u16.to_ne_bytes());
        assert_eq!(raw[48 + 6], 2);
        let plain = to_bytes(fetch_sqe(5, &b, 0x0102, false));
        assert_eq!(plain[1], 0);
        assert_eq!(&plain[28..32], &[0; 4]);
        assert_eq!(&plain[40..42], &[0; 2]);
    }

    #[test]
    fn batch_sqe_addr() {
        let raw = to_bytes(batch_sqe(3, 0x1234, &header(0, 0, 1), 0xabcd));
        assert_eq!(u64::from_ne_bytes(raw[16..24].try_into().unwrap()), 0xabcd);
        assert_eq!(&raw[28..32], &[0; 4]);
    }
}
