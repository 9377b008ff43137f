//! Batch io (`UBLK_F_BATCH_IO`): the server prepares tags with
//! `UBLK_U_IO_PREP_IO_CMDS`, gets the tags of new requests through a
//! multishot `UBLK_U_IO_FETCH_IO_CMDS` that writes them into a provided
//! buffer, and commits many with one `UBLK_U_IO_COMMIT_IO_CMDS`; PREP and
//! COMMIT carry an array of elements at `sqe->addr`. The legacy per-tag
//! commands are refused but for the buffer (un)registration of zero copy.
//! Every case is skipped by a driver that does not report the feature.
//!
//! Results read in drivers/block/ublk_drv.c of Linux 7.3.4; line numbers
//! are in that file.

use anyhow::{bail, Result};
use libc::{E2BIG, EBUSY, EFAULT, EINVAL, EOPNOTSUPP};
use std::os::fd::AsRawFd;
use ublk_uapi::*;

use super::server::Server;
use super::{case, err, Case, OK, QUEUED};
use crate::batch::{batch_sqe, elem_bytes, encode, fetch_sqe, header, Elem};
use crate::chardev::{self, Mapping};
use crate::ctrl::{hdr, with_buf};
use crate::env::Env;
use crate::errno::show;
use crate::ring::{Got, PEEK, WAIT};

/// Tags of the queue (one queue) of every device here.
const DEPTH: u16 = 2;
/// Copy mode: every element carries the address of the server's buffer.
const COPY: u16 = UBLK_BATCH_F_HAS_BUF_ADDR;
/// The buffer group FETCH_IO_CMDS selects from.
const GROUP: u16 = 1;

const BATCH: u64 = UBLK_F_BATCH_IO;

/// A batch device with `flags` (copy mode if 0) and its char device open.
fn server(env: &mut Env, flags: u64) -> Result<Server> {
    Server::with_flags(env, DEPTH, BATCH | flags)
}

/// Sends PREP or COMMIT with header `b` and the element buffer at `addr`.
fn send(s: &mut Server, op: u32, b: &UblkBatchIo, addr: u64) -> Result<Got> {
    let fd = s.file.as_raw_fd();
    s.ring.run(batch_sqe(fd, op, b, addr), WAIT)
}

/// [`send`] of the element buffer `buf`. A command that did not complete
/// may still read it, so it is leaked then.
fn send_buf(s: &mut Server, op: u32, b: &UblkBatchIo, buf: Vec<u8>) -> Result<Got> {
    let got = send(s, op, b, buf.as_ptr() as u64);
    if !matches!(got, Ok(Got::Res(_))) {
        std::mem::forget(buf);
    }
    got
}

/// Copy-mode elements for `tags`, every one pointing at the server's buffer.
fn copy_elems(s: &mut Server, tags: &[u16]) -> Vec<Elem> {
    let addr = s.buf.addr();
    tags.iter().map(|&t| Elem::new(t, addr)).collect()
}

/// PREP of `tags` in copy mode.
fn prep(s: &mut Server, tags: &[u16]) -> Result<Got> {
    let elems = copy_elems(s, tags);
    let buf = encode(COPY, &elems);
    send_buf(
        s,
        UBLK_U_IO_PREP_IO_CMDS,
        &header(0, COPY, tags.len() as u16),
        buf,
    )
}

/// A setup step that must get `want`.
fn expect(got: Got, want: Got, what: &str) -> Result<()> {
    if got != want {
        bail!("setup: {what} got {}, not {}", show(got), show(want));
    }
    Ok(())
}

/// One unreadable page: an element buffer address that faults.
fn unreadable() -> Result<Mapping> {
    let len = chardev::page_size();
    chardev::mmap(
        -1,
        len,
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        0,
    )
    .map_err(|e| anyhow::anyhow!("setup: mmap: {}", show(Got::Res(e))))
}

/// `op` on a device with `dev_flags`, of three elements (tags 0, 1, 0:
/// room for any `nr_elem` up to DEPTH + 1) laid out as `elem_flags` asks,
/// with the header for one such element changed by `edit`.
fn with_header(
    env: &mut Env,
    op: u32,
    dev_flags: u64,
    elem_flags: u16,
    edit: impl FnOnce(&mut UblkBatchIo),
) -> Result<Got> {
    let mut s = server(env, dev_flags)?;
    let elems = copy_elems(&mut s, &[0, 1, 0]);
    let buf = encode(elem_flags, &elems);
    let mut b = header(0, elem_flags, 1);
    edit(&mut b);
    if usize::from(b.nr_elem) * usize::from(b.elem_bytes) > buf.len() {
        bail!("setup: the header names more bytes than the element buffer has");
    }
    send_buf(&mut s, op, &b, buf)
}

// --- PREP_IO_CMDS: header checks, in the order of ublk_check_batch_cmd()
// (l.4110: q_id l.4114, nr_elem E2BIG l.4118, ZONE_LBA l.4121, BUF_ADDR
// l.4125, FALLBACK l.4129) and ublk_check_batch_cmd_flags() (l.4091:
// unknown flag l.4095, FALLBACK with BUF_ADDR l.4100, elem_bytes l.4105).
// The elements are ones the PREP would take had the header passed (but
// for the third of nr_elem's, tag 0 again), so that a missing check shows
// as 0 rather than as another EINVAL.

fn batch_prep_queue_out_of_range(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_PREP_IO_CMDS, 0, COPY, |b| b.q_id = 1)
}

fn batch_prep_nr_elem_above_depth(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_PREP_IO_CMDS, 0, COPY, |b| {
        b.nr_elem = DEPTH + 1
    })
}

fn batch_prep_zone_lba_on_plain_device(env: &mut Env) -> Result<Got> {
    let flags = COPY | UBLK_BATCH_F_HAS_ZONE_LBA;
    with_header(env, UBLK_U_IO_PREP_IO_CMDS, 0, flags, |_| {})
}

fn batch_prep_buf_addr_with_user_copy(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_PREP_IO_CMDS, UBLK_F_USER_COPY, COPY, |_| {})
}

/// On a user-copy device, whose 8-byte elements PREP would take.
fn batch_prep_fallback_without_auto_buf_reg(env: &mut Env) -> Result<Got> {
    let flags = UBLK_BATCH_F_AUTO_BUF_REG_FALLBACK;
    with_header(env, UBLK_U_IO_PREP_IO_CMDS, UBLK_F_USER_COPY, flags, |_| {})
}

fn batch_prep_unknown_flag(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_PREP_IO_CMDS, 0, COPY, |b| b.flags |= 1 << 3)
}

/// On an auto-buf-reg device (so that FALLBACK passes l.4129), FALLBACK
/// with BUF_ADDR: the BUF_ADDR check of l.4125 (auto-buf-reg is not copy
/// mode) refuses it before the combination check of l.4100, which no
/// header can reach.
fn batch_prep_fallback_with_buf_addr(env: &mut Env) -> Result<Got> {
    let flags = COPY | UBLK_BATCH_F_AUTO_BUF_REG_FALLBACK;
    with_header(
        env,
        UBLK_U_IO_PREP_IO_CMDS,
        UBLK_F_AUTO_BUF_REG,
        flags,
        |_| {},
    )
}

/// Elements of 24 bytes where the flags ask for 16: the one element the
/// header names would still read right.
fn batch_prep_elem_bytes_wrong(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_PREP_IO_CMDS, 0, COPY, |b| {
        b.elem_bytes = elem_bytes(COPY) + 8
    })
}

// --- PREP_IO_CMDS: the element buffer, ublk_handle_batch_prep_cmd()
// (l.3982): vmemdup_user() of nr_elem * elem_bytes (l.3994, EFAULT; zero
// bytes copy nothing and the walk does nothing: 0).

fn batch_prep_bad_addr(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    let bad = unreadable()?;
    send(
        &mut s,
        UBLK_U_IO_PREP_IO_CMDS,
        &header(0, COPY, 1),
        bad.addr() as u64,
    )
}

fn batch_prep_nr_elem_zero(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_PREP_IO_CMDS, 0, COPY, |b| b.nr_elem = 0)
}

// --- PREP_IO_CMDS: per element, in order: tag (__ublk_walk_cmd_buf()
// l.3871), copy mode without an address (ublk_check_fetch_buf() l.3502:
// batch devices never keep NEED_GET_DATA), then __ublk_fetch() (l.3511):
// every queue ready EBUSY (l.3519), tag already prepped EINVAL (l.3522).

fn batch_prep_tag_out_of_range(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    prep(&mut s, &[DEPTH])
}

fn batch_prep_buf_addr_zero(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    let buf = encode(COPY, &[Elem::new(0, 0)]);
    send_buf(&mut s, UBLK_U_IO_PREP_IO_CMDS, &header(0, COPY, 1), buf)
}

fn batch_prep_same_tag_twice(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    expect(prep(&mut s, &[0])?, OK, "PREP of tag 0")?;
    prep(&mut s, &[0])
}

fn batch_prep_when_all_tags_prepped(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    expect(prep(&mut s, &[0, 1])?, OK, "PREP of every tag")?;
    prep(&mut s, &[0])
}

/// The first tag 1 makes the device ready, so the second one is refused
/// for that (EBUSY, l.3519), not as a tag prepped twice.
fn batch_prep_duplicate_tag_completing_queue(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    expect(prep(&mut s, &[0])?, OK, "PREP of tag 0")?;
    prep(&mut s, &[1, 1])
}

// --- PREP_IO_CMDS: a failing element after others reverts them
// (ublk_batch_revert_prep_cmd() l.4003 -> ublk_batch_unprep_io() l.3913:
// the tag is free again, a queue that was ready is not any more, l.3925),
// so that the tags can be prepped again and the device started.

fn batch_prep_again_after_reverted_prep(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    expect(
        prep(&mut s, &[0, DEPTH])?,
        err(EINVAL),
        "PREP of [0, bad tag]",
    )?;
    prep(&mut s, &[0, 1])
}

fn batch_start_dev_after_reverted_prep(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    expect(
        prep(&mut s, &[0, DEPTH])?,
        err(EINVAL),
        "PREP of [0, bad tag]",
    )?;
    expect(prep(&mut s, &[0, 1])?, OK, "PREP of every tag")?;
    s.set_params(env)?;
    s.start(env, std::process::id() as u64)
}

fn batch_start_dev_after_revert_of_ready_queue(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    expect(prep(&mut s, &[0])?, OK, "PREP of tag 0")?;
    expect(prep(&mut s, &[1, 1])?, err(EBUSY), "PREP of [1, 1]")?;
    expect(prep(&mut s, &[1])?, OK, "PREP of tag 1 after the revert")?;
    s.set_params(env)?;
    s.start(env, std::process::id() as u64)
}

// --- COMMIT_IO_CMDS, ublk_handle_batch_commit_cmd() (l.4070): the same
// header checks (l.4110); elements read in chunks (l.3901, EFAULT); per
// element the tag (l.3871), the server must own it (l.4013, EBUSY), a
// buffer address in copy mode (l.4017). The result is the bytes of the
// elements handled before the first error, or that error if none was
// (l.4088).

fn batch_commit_queue_out_of_range(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_COMMIT_IO_CMDS, 0, COPY, |b| b.q_id = 1)
}

fn batch_commit_nr_elem_above_depth(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_COMMIT_IO_CMDS, 0, COPY, |b| {
        b.nr_elem = DEPTH + 1
    })
}

fn batch_commit_elem_bytes_wrong(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_COMMIT_IO_CMDS, 0, COPY, |b| {
        b.elem_bytes = elem_bytes(COPY) + 8
    })
}

fn batch_commit_bad_addr(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    expect(prep(&mut s, &[0])?, OK, "PREP of tag 0")?;
    let bad = unreadable()?;
    send(
        &mut s,
        UBLK_U_IO_COMMIT_IO_CMDS,
        &header(0, COPY, 1),
        bad.addr() as u64,
    )
}

fn batch_commit_nr_elem_zero(env: &mut Env) -> Result<Got> {
    with_header(env, UBLK_U_IO_COMMIT_IO_CMDS, 0, COPY, |b| b.nr_elem = 0)
}

/// COMMIT of `elems` in copy mode.
fn commit(s: &mut Server, elems: &[Elem]) -> Result<Got> {
    let buf = encode(COPY, elems);
    send_buf(
        s,
        UBLK_U_IO_COMMIT_IO_CMDS,
        &header(0, COPY, elems.len() as u16),
        buf,
    )
}

fn batch_commit_tag_out_of_range(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    expect(prep(&mut s, &[0])?, OK, "PREP of tag 0")?;
    let elems = copy_elems(&mut s, &[DEPTH]);
    commit(&mut s, &elems)
}

fn batch_commit_never_prepped(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    let elems = copy_elems(&mut s, &[0]);
    commit(&mut s, &elems)
}

fn batch_commit_prepped_tag_without_request(env: &mut Env) -> Result<Got> {
    let mut s = server(env, 0)?;
    expect(prep(&mut s, &[0])?, OK, "PREP of tag 0")?;
    let elems = copy_elems(&mut s, &[0]);
    commit(&mut s, &elems)
}

/// The header of the FETCH_IO_CMDS of these cases: tags are 2 bytes.
fn fetch_header() -> UblkBatchIo {
    UblkBatchIo {
        nr_elem: DEPTH,
        elem_bytes: 2,
        ..Default::default()
    }
}

/// A started copy-mode batch device whose server got the tag of the
/// device's first request, a read (the partition scan's), through
/// FETCH_IO_CMDS, and holds it. Dropping it fails the request.
struct Served {
    s: Server,
    _descs: Mapping,
    tag: u16,
    bytes: u32,
}

impl Served {
    fn new(env: &mut Env) -> Result<Self> {
        let mut s = server(env, 0)?;
        let fd = s.file.as_raw_fd();
        let descs = chardev::map_descs_setup(fd, usize::from(DEPTH))?;
        expect(prep(&mut s, &[0, 1])?, OK, "PREP of every tag")?;
        s.ring.provide_buffer(GROUP, chardev::page_size())?;
        let token = s.ring.submit(fetch_sqe(fd, &fetch_header(), GROUP, true))?;
        s.set_params(env)?;
        expect(s.start(env, std::process::id() as u64)?, OK, "START_DEV")?;
        match s.ring.wait(token, WAIT)? {
            Got::Res(n) if n >= 2 => {}
            got => bail!("setup: FETCH_IO_CMDS delivered no tag: {}", show(got)),
        }
        let tag = s.ring.provided_u16s(GROUP, 1)?[0];
        if tag >= DEPTH {
            bail!("setup: FETCH_IO_CMDS delivered tag {tag}");
        }
        // SAFETY: the mapping holds the descriptors of every tag; the driver
        // wrote this one before it posted the tag.
        let desc = unsafe {
            std::ptr::read_volatile(descs.addr().cast::<UblksrvIoDesc>().add(usize::from(tag)))
        };
        if desc.op() != UBLK_IO_OP_READ || desc.nr_sectors == 0 {
            bail!(
                "setup: the first request is op {} of {} sectors, not a read",
                desc.op(),
                desc.nr_sectors
            );
        }
        Ok(Served {
            s,
            _descs: descs,
            tag,
            bytes: desc.nr_sectors << 9,
        })
    }

    /// The element that completes the held read in full (its data: the
    /// zeroes of the server's buffer).
    fn done(&mut self) -> Elem {
        Elem {
            tag: self.tag,
            result: self.bytes as i32,
            buf_addr: self.s.buf.addr(),
            ..Default::default()
        }
    }
}

/// A COMMIT of [the held read, a bad tag]: the read is committed, the
/// second element fails, and the result is the bytes of one element.
fn batch_commit_second_element_fails(env: &mut Env) -> Result<Got> {
    let mut h = Served::new(env)?;
    let done = h.done();
    let bad = Elem { tag: DEPTH, ..done };
    commit(&mut h.s, &[done, bad])
}

fn batch_commit_served_tag_without_buf_addr(env: &mut Env) -> Result<Got> {
    let mut h = Served::new(env)?;
    let elem = Elem {
        buf_addr: 0,
        ..h.done()
    };
    commit(&mut h.s, &[elem])
}

// --- FETCH_IO_CMDS, ublk_validate_batch_fetch_cmd() (l.4202): q_id
// (l.4206), IORING_URING_CMD_MULTISHOT (l.4209), elem_bytes 2 (l.4212),
// flags 0 (l.4215); then it is queued (ublk_batch_attach() l.4135) until
// a request comes. io_uring itself refuses MULTISHOT without
// IOSQE_BUFFER_SELECT and the reverse (io_uring/uring_cmd.c:205), so the
// driver's own check is only reached with neither.

/// FETCH_IO_CMDS on a fresh copy-mode device whose ring has a buffer in
/// group GROUP, with the header changed by `edit`.
fn fetch(env: &mut Env, multishot: bool, edit: impl FnOnce(&mut UblkBatchIo)) -> Result<Got> {
    let mut s = server(env, 0)?;
    s.ring.provide_buffer(GROUP, chardev::page_size())?;
    let mut b = fetch_header();
    edit(&mut b);
    let fd = s.file.as_raw_fd();
    s.ring.run(fetch_sqe(fd, &b, GROUP, multishot), PEEK)
}

fn batch_fetch_io_cmds_ok(env: &mut Env) -> Result<Got> {
    fetch(env, true, |_| {})
}

fn batch_fetch_io_cmds_without_multishot(env: &mut Env) -> Result<Got> {
    fetch(env, false, |_| {})
}

fn batch_fetch_io_cmds_elem_bytes_not_2(env: &mut Env) -> Result<Got> {
    fetch(env, true, |b| b.elem_bytes = 8)
}

fn batch_fetch_io_cmds_flags_set(env: &mut Env) -> Result<Got> {
    fetch(env, true, |b| b.flags = UBLK_BATCH_F_HAS_BUF_ADDR)
}

fn batch_fetch_io_cmds_queue_out_of_range(env: &mut Env) -> Result<Got> {
    fetch(env, true, |b| b.q_id = 1)
}

// --- Per-tag commands on a batch device, ublk_handle_non_batch_cmd()
// (l.4221): UNREGISTER_IO_BUF first (l.4233; without zero copy EINVAL,
// l.3489), then q_id (l.4236), tag (l.4239), and anything but
// REGISTER_IO_BUF is EOPNOTSUPP (l.4242).

/// A per-tag command on a batch device with `flags`: buffer index 0 for
/// (UN)REGISTER_IO_BUF, whose ring has a buffer table with zero copy; the
/// server's buffer for the others.
fn per_tag(env: &mut Env, flags: u64, op: u32, q_id: u16, tag: u16) -> Result<Got> {
    let mut s = server(env, flags)?;
    if flags & UBLK_F_SUPPORT_ZERO_COPY != 0 {
        s.ring.register_sparse_buffers(4)?;
    }
    let addr = if op == UBLK_U_IO_REGISTER_IO_BUF || op == UBLK_U_IO_UNREGISTER_IO_BUF {
        0
    } else {
        s.buf.addr()
    };
    s.cmd(op, q_id, tag, addr)
}

fn batch_fetch_req(env: &mut Env) -> Result<Got> {
    per_tag(env, 0, UBLK_U_IO_FETCH_REQ, 0, 0)
}

fn batch_fetch_req_queue_out_of_range(env: &mut Env) -> Result<Got> {
    per_tag(env, 0, UBLK_U_IO_FETCH_REQ, 1, 0)
}

fn batch_commit_and_fetch_req(env: &mut Env) -> Result<Got> {
    per_tag(env, 0, UBLK_U_IO_COMMIT_AND_FETCH_REQ, 0, 0)
}

fn batch_need_get_data(env: &mut Env) -> Result<Got> {
    per_tag(env, 0, UBLK_U_IO_NEED_GET_DATA, 0, 0)
}

fn batch_unregister_io_buf_without_zero_copy(env: &mut Env) -> Result<Got> {
    per_tag(env, 0, UBLK_U_IO_UNREGISTER_IO_BUF, 0, 0)
}

fn batch_register_io_buf_queue_out_of_range(env: &mut Env) -> Result<Got> {
    per_tag(
        env,
        UBLK_F_SUPPORT_ZERO_COPY,
        UBLK_U_IO_REGISTER_IO_BUF,
        1,
        0,
    )
}

fn batch_register_io_buf_tag_out_of_range(env: &mut Env) -> Result<Got> {
    per_tag(
        env,
        UBLK_F_SUPPORT_ZERO_COPY,
        UBLK_U_IO_REGISTER_IO_BUF,
        0,
        DEPTH,
    )
}

// --- ADD_DEV, ublk_ctrl_add_dev() (l.4937): a batch device never has
// UBLK_F_PER_IO_DAEMON (l.5090) nor UBLK_F_NEED_GET_DATA (l.5099).

/// The result is 1 if GET_DEV_INFO shows UBLK_F_PER_IO_DAEMON, plus 2 if
/// it shows UBLK_F_NEED_GET_DATA.
fn batch_add_dev_clears_per_io_daemon_and_need_get_data(env: &mut Env) -> Result<Got> {
    let dev = env.add(
        1,
        DEPTH,
        BATCH | UBLK_F_PER_IO_DAEMON | UBLK_F_NEED_GET_DATA,
    )?;
    let mut info = UblksrvCtrlDevInfo::default();
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_GET_DEV_INFO, &with_buf(hdr(dev.id), &mut info))?;
    expect(Got::Res(r), OK, "GET_DEV_INFO")?;
    if info.flags & BATCH == 0 {
        bail!("setup: the device lacks UBLK_F_BATCH_IO");
    }
    Ok(Got::Res(
        i32::from(info.flags & UBLK_F_PER_IO_DAEMON != 0)
            | i32::from(info.flags & UBLK_F_NEED_GET_DATA != 0) << 1,
    ))
}

/// One element's bytes in copy mode: what a COMMIT returns when its
/// second element fails.
const ONE_COPY_ELEM: Got = Got::Res(elem_bytes(COPY) as i32);

const ZC: u64 = BATCH | UBLK_F_SUPPORT_ZERO_COPY;

pub const CASES: &[Case] = &[
    case!(batch_prep_queue_out_of_range, err(EINVAL), needs = BATCH),
    case!(batch_prep_nr_elem_above_depth, err(E2BIG), needs = BATCH),
    case!(
        batch_prep_zone_lba_on_plain_device,
        err(EINVAL),
        needs = BATCH
    ),
    case!(
        batch_prep_buf_addr_with_user_copy,
        err(EINVAL),
        needs = BATCH | UBLK_F_USER_COPY
    ),
    case!(
        batch_prep_fallback_without_auto_buf_reg,
        err(EINVAL),
        needs = BATCH | UBLK_F_USER_COPY
    ),
    case!(batch_prep_unknown_flag, err(EINVAL), needs = BATCH),
    case!(
        batch_prep_fallback_with_buf_addr,
        err(EINVAL),
        needs = BATCH | UBLK_F_AUTO_BUF_REG
    ),
    case!(batch_prep_elem_bytes_wrong, err(EINVAL), needs = BATCH),
    case!(batch_prep_bad_addr, err(EFAULT), needs = BATCH),
    case!(batch_prep_nr_elem_zero, OK, needs = BATCH),
    case!(batch_prep_tag_out_of_range, err(EINVAL), needs = BATCH),
    case!(batch_prep_buf_addr_zero, err(EINVAL), needs = BATCH),
    case!(batch_prep_same_tag_twice, err(EINVAL), needs = BATCH),
    case!(batch_prep_when_all_tags_prepped, err(EBUSY), needs = BATCH),
    case!(
        batch_prep_duplicate_tag_completing_queue,
        err(EBUSY),
        needs = BATCH
    ),
    case!(batch_prep_again_after_reverted_prep, OK, needs = BATCH),
    case!(batch_start_dev_after_reverted_prep, OK, needs = BATCH),
    case!(
        batch_start_dev_after_revert_of_ready_queue,
        OK,
        needs = BATCH
    ),
    case!(batch_commit_queue_out_of_range, err(EINVAL), needs = BATCH),
    case!(batch_commit_nr_elem_above_depth, err(E2BIG), needs = BATCH),
    case!(batch_commit_elem_bytes_wrong, err(EINVAL), needs = BATCH),
    case!(batch_commit_bad_addr, err(EFAULT), needs = BATCH),
    case!(batch_commit_nr_elem_zero, OK, needs = BATCH),
    case!(batch_commit_tag_out_of_range, err(EINVAL), needs = BATCH),
    case!(batch_commit_never_prepped, err(EBUSY), needs = BATCH),
    case!(
        batch_commit_prepped_tag_without_request,
        err(EBUSY),
        needs = BATCH
    ),
    case!(
        batch_commit_second_element_fails,
        ONE_COPY_ELEM,
        needs = BATCH
    ),
    case!(
        batch_commit_served_tag_without_buf_addr,
        err(EINVAL),
        needs = BATCH
    ),
    case!(batch_fetch_io_cmds_ok, QUEUED, needs = BATCH),
    case!(
        batch_fetch_io_cmds_without_multishot,
        err(EINVAL),
        needs = BATCH
    ),
    case!(
        batch_fetch_io_cmds_elem_bytes_not_2,
        err(EINVAL),
        needs = BATCH
    ),
    case!(batch_fetch_io_cmds_flags_set, err(EINVAL), needs = BATCH),
    case!(
        batch_fetch_io_cmds_queue_out_of_range,
        err(EINVAL),
        needs = BATCH
    ),
    case!(batch_fetch_req, err(EOPNOTSUPP), needs = BATCH),
    case!(
        batch_fetch_req_queue_out_of_range,
        err(EINVAL),
        needs = BATCH
    ),
    case!(batch_commit_and_fetch_req, err(EOPNOTSUPP), needs = BATCH),
    case!(batch_need_get_data, err(EOPNOTSUPP), needs = BATCH),
    case!(
        batch_unregister_io_buf_without_zero_copy,
        err(EINVAL),
        needs = BATCH
    ),
    case!(
        batch_register_io_buf_queue_out_of_range,
        err(EINVAL),
        needs = ZC
    ),
    case!(
        batch_register_io_buf_tag_out_of_range,
        err(EINVAL),
        needs = ZC
    ),
    case!(
        batch_add_dev_clears_per_io_daemon_and_need_get_data,
        OK,
        needs = BATCH
    ),
];
