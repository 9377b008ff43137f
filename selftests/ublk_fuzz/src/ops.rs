//! One step: an operation drawn from the seed (weights below), its fields
//! drawn and mutated, run against the driver, and written down as a trace
//! line: what was sent, `->`, what came back (and, on success, what the
//! driver reported). An operation that the fuzzer's state rules out
//! (see `world.rs`) is not drawn again in that step: `None`.

use anyhow::{Context, Result};
use std::os::fd::AsRawFd;
use std::time::Duration;
use ublk_badinput::cases::ctrl::basic_params;
use ublk_badinput::cases::server::{Answering, Server};
use ublk_badinput::chardev::{self, io_sqe_result, IoBuf};
use ublk_badinput::ctrl::{hdr, sqe128};
use ublk_badinput::env::{Dev, ABSENT_ID, ANY_ID, MAX_IO_BUF_BYTES};
use ublk_badinput::errno::show;
use ublk_badinput::ring::{Got, Ring, PEEK};
use ublk_uapi::*;

use crate::rng::Rng;
use crate::trap::Trap;
use crate::world::{state_name, FDev, Padded, World, MAX_DEVS};

/// Most control commands left waiting at once (see [`waiting_ctrl`]).
const MAX_WAITING: usize = 4;

/// How long an io command may take to complete before it counts as
/// queued. Both drivers answer an io command while io_uring_enter()
/// submits it, or from task work that the submitting task runs as soon as
/// it waits, unless it was sent with `IOSQE_ASYNC` (see [`io`]); none goes
/// to io-wq by itself, whose worker the TCG guest may not schedule for a
/// while (the control commands that may wait, START_DEV and
/// END_USER_RECOVERY, keep [`PEEK`]). The fuzzer spends most of its time
/// in these waits: a shorter one runs more steps per second.
const IO_PEEK: Duration = Duration::from_millis(50);

#[derive(Clone, Copy, Debug)]
enum Op {
    Add,
    Del,
    DelAsync,
    Info,
    Info2,
    SetParams,
    GetParams,
    Affinity,
    Features,
    Start,
    Stop,
    TryStop,
    StartRecovery,
    EndRecovery,
    UpdateSize,
    Quiesce,
    UnknownCtrl,
    OpenChar,
    CloseChar,
    Mmap,
    Io,
    LiveIo,
    GoLive,
    KillServer,
    FileCall,
}

const OPS: &[(Op, u64)] = &[
    (Op::Add, 10),
    (Op::Del, 5),
    (Op::DelAsync, 2),
    (Op::Info, 5),
    (Op::Info2, 3),
    (Op::SetParams, 12),
    (Op::GetParams, 4),
    (Op::Affinity, 3),
    (Op::Features, 2),
    (Op::Start, 4),
    (Op::Stop, 4),
    (Op::TryStop, 3),
    (Op::StartRecovery, 3),
    (Op::EndRecovery, 2),
    (Op::UpdateSize, 3),
    (Op::Quiesce, 2),
    (Op::UnknownCtrl, 2),
    (Op::OpenChar, 8),
    (Op::CloseChar, 3),
    (Op::Mmap, 4),
    (Op::Io, 20),
    (Op::LiveIo, 3),
    (Op::GoLive, 5),
    (Op::KillServer, 3),
    (Op::FileCall, 3),
];

/// Every feature flag of the UAPI, each drawn on its own at ADD_DEV.
const FLAGS: &[u64] = &[
    UBLK_F_SUPPORT_ZERO_COPY,
    UBLK_F_URING_CMD_COMP_IN_TASK,
    UBLK_F_NEED_GET_DATA,
    UBLK_F_USER_RECOVERY,
    UBLK_F_USER_RECOVERY_REISSUE,
    UBLK_F_UNPRIVILEGED_DEV,
    UBLK_F_CMD_IOCTL_ENCODE,
    UBLK_F_USER_COPY,
    UBLK_F_ZONED,
    UBLK_F_USER_RECOVERY_FAIL_IO,
    UBLK_F_UPDATE_SIZE,
    UBLK_F_AUTO_BUF_REG,
    UBLK_F_QUIESCE,
    UBLK_F_PER_IO_DAEMON,
    UBLK_F_BUF_REG_OFF_DAEMON,
    UBLK_F_BATCH_IO,
    UBLK_F_INTEGRITY,
    UBLK_F_SAFE_STOP_DEV,
    UBLK_F_NO_AUTO_PART_SCAN,
    UBLK_F_SHMEM_ZC,
    UBLK_F_IO_DESC_SIZE,
    UBLK_F_SUPPORT_RQ_AFFINITY,
];

/// Where a run's time went: per operation, the steps and their time.
static TIME_SPENT: std::sync::Mutex<Vec<(String, u64, Duration)>> =
    std::sync::Mutex::new(Vec::new());

/// Adds a step of `what` that took `d` to [`time_spent`]'s table.
pub fn account(what: &str, d: Duration) {
    let mut t = TIME_SPENT.lock().unwrap_or_else(|e| e.into_inner());
    match t.iter_mut().find(|(n, _, _)| n == what) {
        Some(e) => {
            e.1 += 1;
            e.2 += d;
        }
        None => t.push((what.to_string(), 1, d)),
    }
}

/// The table of [`account`]: each operation's steps, total and mean
/// time, most time first.
pub fn time_spent() -> Vec<String> {
    let mut t = TIME_SPENT.lock().unwrap_or_else(|e| e.into_inner()).clone();
    t.sort_by_key(|e| std::cmp::Reverse(e.2));
    t.iter()
        .map(|(n, c, d)| {
            format!(
                "{n:<18} {c:>7} times {:>8.1}s {:>7.1}ms each",
                d.as_secs_f64(),
                d.as_secs_f64() * 1000.0 / *c as f64
            )
        })
        .collect()
}

/// Draws and runs one step; the trace line.
pub fn step(w: &mut World, rng: &mut Rng) -> Result<String> {
    let weights: Vec<u64> = OPS.iter().map(|(_, wt)| *wt).collect();
    loop {
        let op = OPS[rng.weighted(&weights)].0;
        let start = std::time::Instant::now();
        // A failure names the operation that was drawn: a step that
        // fails has no trace line of its own.
        if let Some(line) = run(w, rng, op).with_context(|| format!("{op:?}"))? {
            account(&format!("{op:?}"), start.elapsed());
            return Ok(line);
        }
    }
}

fn run(w: &mut World, rng: &mut Rng, op: Op) -> Result<Option<String>> {
    match op {
        Op::Add => add(w, rng),
        Op::Del => del(w, rng, false),
        Op::DelAsync => del(w, rng, true),
        Op::Info => info(w, rng, false),
        Op::Info2 => info(w, rng, true),
        Op::SetParams => set_params(w, rng),
        Op::GetParams => get_params(w, rng),
        Op::Affinity => affinity(w, rng),
        Op::Features => features(w, rng),
        Op::Start => waiting_ctrl(w, rng, UBLK_U_CMD_START_DEV, "start"),
        Op::EndRecovery => waiting_ctrl(w, rng, UBLK_U_CMD_END_USER_RECOVERY, "end_recovery"),
        Op::Stop => simple_ctrl(w, rng, UBLK_U_CMD_STOP_DEV, "stop", &[0]),
        Op::TryStop => simple_ctrl(w, rng, UBLK_U_CMD_TRY_STOP_DEV, "try_stop", &[0]),
        Op::StartRecovery => simple_ctrl(
            w,
            rng,
            UBLK_U_CMD_START_USER_RECOVERY,
            "start_recovery",
            &[0],
        ),
        Op::UpdateSize => simple_ctrl(
            w,
            rng,
            UBLK_U_CMD_UPDATE_SIZE,
            "update_size",
            &[0, 1, 4096, u64::MAX],
        ),
        Op::Quiesce => simple_ctrl(w, rng, UBLK_U_CMD_QUIESCE_DEV, "quiesce", &[0, 1000]),
        Op::UnknownCtrl => unknown_ctrl(w, rng),
        Op::OpenChar => open_char(w, rng),
        Op::CloseChar => close_char(w, rng),
        Op::Mmap => mmap(w, rng),
        Op::Io => io(w, rng),
        Op::FileCall => file_call(w, rng),
        Op::LiveIo => live_io(w, rng),
        Op::GoLive => go_live(w, rng),
        Op::KillServer => kill_server(w, rng),
    }
}

/// The device a command targets: mostly one of the fuzzer's, sometimes an
/// id that may not exist. (id, index in `w.devs`).
fn target(w: &World, rng: &mut Rng) -> (u32, Option<usize>) {
    if !w.devs.is_empty() && rng.chance(85) {
        let i = rng.below(w.devs.len() as u64) as usize;
        return (w.devs[i].id, Some(i));
    }
    let id = rng.pick(&[0, 1, 2, 3, ABSENT_ID, ANY_ID, 1 << 20]);
    (id, w.index(id))
}

/// One of the fuzzer's devices that `ok` accepts.
fn own_dev(w: &World, rng: &mut Rng, ok: impl Fn(&FDev) -> bool) -> Option<usize> {
    let fit: Vec<usize> = (0..w.devs.len()).filter(|i| ok(&w.devs[*i])).collect();
    if fit.is_empty() {
        None
    } else {
        Some(fit[rng.below(fit.len() as u64) as usize])
    }
}

/// Sometimes breaks a field of a control command's header: one that the
/// command does not use, or the address of its buffer. Returns what it
/// did, for the trace.
fn mutate_hdr(rng: &mut Rng, h: &mut UblksrvCtrlCmd, trap: &Trap) -> String {
    if !rng.chance(8) {
        return String::new();
    }
    match rng.below(4) {
        0 => {
            h.queue_id = rng.pick(&[0, 1, 0x7fff]);
            format!(" queue_id={}", h.queue_id)
        }
        1 => {
            h.dev_path_len = rng.pick(&[1, 64, 4096]);
            format!(" dev_path_len={}", h.dev_path_len)
        }
        2 => {
            h.reserved = 1;
            " reserved=1".into()
        }
        _ => {
            // None, not a user address, or memory the command cannot use
            // whole (it fails with EFAULT there).
            let (addr, name) = rng.pick(&[
                (0, "0"),
                (1, "1"),
                (trap.read_only(), "read-only"),
                (trap.no_access(), "no-access"),
                (trap.overrun(), "overrun"),
            ]);
            h.addr = addr;
            format!(" addr={name}")
        }
    }
}

/// Runs a control command that must complete at once: queued is a hang.
fn run_now(w: &mut World, op: u32, h: &UblksrvCtrlCmd, desc: &str) -> Result<Got> {
    let got = w.env.ctrl.run(op, h)?;
    if got == Got::Pending {
        anyhow::bail!("{desc}: no completion (queued): a hang");
    }
    Ok(got)
}

fn bytes_of<T>(v: &mut T) -> (u64, u16) {
    (v as *mut T as u64, std::mem::size_of::<T>() as u16)
}

fn add(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    if w.devs.len() >= MAX_DEVS {
        return Ok(None);
    }
    let mut flags = 0;
    for f in FLAGS {
        if rng.chance(12) {
            flags |= f;
        }
    }
    if rng.chance(3) {
        flags |= rng.pick(&[1u64 << 22, 1 << 40]);
    }
    let mut info = Padded::<UblksrvCtrlDevInfo>::default();
    // More queues than the guest has CPUs (the drivers make as many as
    // there are), the most tags, and one past them.
    info.v.nr_hw_queues = rng.pick(&[1, 1, 1, 1, 2, 0, 4097, 3, 4, 64]);
    info.v.queue_depth = rng.pick(&[1, 1, 1, 2, 4, 0, 4097, 3, 128, 4095, 4096]);
    info.v.max_io_buf_bytes = rng.pick(&[MAX_IO_BUF_BYTES, MAX_IO_BUF_BYTES, 4096, 0, 1 << 30]);
    info.v.dev_id = rng.pick(&[ANY_ID, ANY_ID, ANY_ID, 0, 3, ABSENT_ID, 1 << 20]);
    info.v.flags = flags;
    // ublk_drv's io descriptor area is one allocation of contiguous pages
    // (the Rust driver's is virtually contiguous): at the deepest queues
    // (more than 256 tags) only the default descriptors, whose area both
    // drivers always get (at most 96 KiB for 4096 tags), so
    // that whether a large one is found does not decide the answer.
    info.v.io_desc_size = if info.v.queue_depth > 256 {
        rng.pick(&[0, 24])
    } else {
        rng.pick(&[0, 24, 64, 256, 20, 260])
    };
    let mut h = hdr(info.v.dev_id);
    (h.addr, h.len) = bytes_of(&mut info.v);
    let mut desc = format!(
        "add id={} q={} d={} mb={} flags={:#x} desc={}",
        info.v.dev_id as i32,
        info.v.nr_hw_queues,
        info.v.queue_depth,
        info.v.max_io_buf_bytes,
        flags,
        info.v.io_desc_size
    );
    // What the driver owns (the server's pid, the state, the owner) and
    // what it keeps for the server (`ublksrv_flags`, the reserved fields):
    // ADD_DEV's answer and GET_DEV_INFO show what became of them.
    if rng.chance(10) {
        let me = std::process::id() as i32;
        let (pid, name) = rng.pick(&[(me, "self"), (1, "1"), (-5, "-5")]);
        info.v.ublksrv_pid = pid;
        desc += &format!(" pid={name}");
    }
    if rng.chance(8) {
        info.v.ublksrv_flags = 0x5a5a_0000_0000_a5a5;
        info.v.pad1 = 7;
        info.v.reserved1 = 0x1111;
        info.v.reserved2 = u64::MAX;
        info.v.state = UBLK_S_DEV_LIVE;
        info.v.owner_uid = 1234;
        info.v.owner_gid = 5678;
        desc += " junk";
    }
    if rng.chance(8) {
        h.len = rng.pick(&[0, 32, 63, 65, 128]);
        desc += &format!(" len={}", h.len);
    }
    desc += &mutate_hdr(rng, &mut h, &w.trap);
    let got = run_now(w, UBLK_U_CMD_ADD_DEV, &h, &desc)?;
    let mut line = format!("{desc} -> {}", show(got));
    if got == Got::Res(0) {
        let i = info.v;
        line += &format!(
            " dev_id={} q={} d={} mb={} flags={:#x} state={} desc={} pid={} owner={}:{}{}",
            i.dev_id,
            i.nr_hw_queues,
            i.queue_depth,
            i.max_io_buf_bytes,
            i.flags,
            state_name(i.state),
            i.io_desc_size,
            i.ublksrv_pid,
            i.owner_uid,
            i.owner_gid,
            kept_for_server(&i)
        );
        w.devs.push(FDev::new(i));
    }
    Ok(Some(line))
}

fn del(w: &mut World, rng: &mut Rng, async_: bool) -> Result<Option<String>> {
    let (id, i) = target(w, rng);
    let mut held = false;
    if let Some(i) = i {
        let d = &mut w.devs[i];
        held = d.server.is_some() || d.live.is_some() || d.waiting();
        d.release();
    }
    let mut h = hdr(id);
    let mut desc = format!("{} {}", if async_ { "del_async" } else { "del" }, id as i32);
    desc += &mutate_hdr(rng, &mut h, &w.trap);
    let op = if async_ {
        UBLK_U_CMD_DEL_DEV_ASYNC
    } else {
        UBLK_U_CMD_DEL_DEV
    };
    let got = w.env.ctrl.run(op, &h)?;
    if got == Got::Pending {
        anyhow::bail!("{desc}: no completion (queued): a hang");
    }
    if got == Got::Res(0) {
        if let Some(i) = i {
            w.devs.remove(i);
        }
        if async_ {
            w.settle_gone(id)?;
        }
    } else if held {
        // The device stays, and what was let go of is released later.
        w.settle_refs();
    }
    Ok(Some(format!("{desc} -> {}", show(got))))
}

fn info(w: &mut World, rng: &mut Rng, v2: bool) -> Result<Option<String>> {
    let (id, _) = target(w, rng);
    let mut info = Padded::<UblksrvCtrlDevInfo>::default();
    let mut h = hdr(id);
    (h.addr, h.len) = bytes_of(&mut info.v);
    let name = if v2 { "info2" } else { "info" };
    let mut desc = format!("{name} {}", id as i32);
    if rng.chance(15) {
        h.len = rng.pick(&[0, 63, 80]);
        desc += &format!(" len={}", h.len);
    }
    desc += &mutate_hdr(rng, &mut h, &w.trap);
    let op = if v2 {
        UBLK_U_CMD_GET_DEV_INFO2
    } else {
        UBLK_U_CMD_GET_DEV_INFO
    };
    let got = run_now(w, op, &h, &desc)?;
    let mut line = format!("{desc} -> {}", show(got));
    if got == Got::Res(0) {
        let i = info.v;
        line += &format!(
            " dev_id={} q={} d={} state={} mb={} flags={:#x} pid={} owner={}:{} desc={}",
            i.dev_id,
            i.nr_hw_queues,
            i.queue_depth,
            state_name(i.state),
            i.max_io_buf_bytes,
            i.flags,
            i.ublksrv_pid,
            i.owner_uid,
            i.owner_gid,
            i.io_desc_size
        );
        line += &kept_for_server(&i);
    }
    Ok(Some(line))
}

/// The fields of a device's info that the driver does not use, as the
/// trace shows them: nothing if they are all 0.
fn kept_for_server(i: &UblksrvCtrlDevInfo) -> String {
    if i.ublksrv_flags == 0 && i.pad1 == 0 && i.reserved1 == 0 && i.reserved2 == 0 {
        return String::new();
    }
    format!(
        " ublksrv_flags={:#x} pad1={} reserved={:#x}/{:#x}",
        i.ublksrv_flags, i.pad1, i.reserved1, i.reserved2
    )
}

fn set_params(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let (id, _) = target(w, rng);
    let mut p = Padded::<UblkParams> {
        v: basic_params(),
        pad: [0; 32],
    };
    let mut desc = format!("set_params {}", id as i32);
    if rng.chance(15) {
        p.v.types = 0;
        desc += " types=0";
    }
    for (t, name) in [
        (UBLK_PARAM_TYPE_DISCARD, "discard"),
        (UBLK_PARAM_TYPE_DEVT, "devt"),
        (UBLK_PARAM_TYPE_ZONED, "zoned"),
        (UBLK_PARAM_TYPE_DMA_ALIGN, "dma"),
        (UBLK_PARAM_TYPE_SEGMENT, "segment"),
        (UBLK_PARAM_TYPE_INTEGRITY, "integrity"),
    ] {
        if rng.chance(15) {
            p.v.types |= t;
            desc += &format!(" +{name}");
        }
    }
    if rng.chance(2) {
        p.v.types |= 1 << 10;
        desc += " +type10";
    }
    let v = &mut p.v;
    v.discard.discard_granularity = rng.pick(&[4096, 512, 0, 3]);
    v.discard.max_discard_sectors = rng.pick(&[8, 0, u32::MAX]);
    v.discard.max_discard_segments = rng.pick(&[1, 0, 256]);
    v.zoned.max_open_zones = rng.pick(&[0, 1, 100]);
    v.zoned.max_active_zones = rng.pick(&[0, 1, 100]);
    v.zoned.max_zone_append_sectors = rng.pick(&[1024, 8, 0]);
    v.dma.alignment = rng.pick(&[511, 4095, 0, 3]);
    v.seg.seg_boundary_mask = rng.pick(&[4095, 0xffff_ffff, 0, 3]);
    v.seg.max_segment_size = rng.pick(&[65536, 4096, 0, 511]);
    v.seg.max_segments = rng.pick(&[128, 1, 0]);
    v.integrity.metadata_size = rng.pick(&[8, 0, 64]);
    v.integrity.interval_exp = rng.pick(&[9, 12, 3]);
    v.integrity.csum_type = rng.pick(&[0, 1, 2, 3, 9]);
    v.integrity.tag_size = rng.pick(&[0, 2, 8]);
    v.integrity.pi_offset = rng.pick(&[0, 8]);
    desc += &format!(
        " discard={}/{}/{} zoned={}/{}/{} dma={} seg={:#x}/{}/{} integrity={}/{}/{}/{}/{}",
        v.discard.discard_granularity,
        v.discard.max_discard_sectors,
        v.discard.max_discard_segments,
        v.zoned.max_open_zones,
        v.zoned.max_active_zones,
        v.zoned.max_zone_append_sectors,
        v.dma.alignment,
        v.seg.seg_boundary_mask,
        v.seg.max_segment_size,
        v.seg.max_segments,
        v.integrity.metadata_size,
        v.integrity.interval_exp,
        v.integrity.csum_type,
        v.integrity.tag_size,
        v.integrity.pi_offset
    );
    if rng.chance(5) {
        // Every basic field at once: mostly within what a device can have
        // (so that the later checks are reached), now and then anything
        // its type holds.
        let wide = rng.chance(25);
        let b = &mut v.basic;
        let mut shift = |lo: u64, hi: u64| {
            if wide {
                rng.next() as u8
            } else {
                (lo + rng.below(hi - lo + 1)) as u8
            }
        };
        b.logical_bs_shift = shift(9, 12);
        b.physical_bs_shift = shift(9, 16);
        b.io_opt_shift = shift(9, 20);
        b.io_min_shift = shift(9, 16);
        b.attrs = rng.next() as u32;
        b.max_sectors = rng.next() as u32;
        b.chunk_sectors = if wide {
            rng.next() as u32
        } else {
            1 << rng.below(12)
        };
        b.dev_sectors = rng.next();
        b.virt_boundary_mask = if wide { rng.next() } else { 4095 };
        desc += if wide { " random" } else { " random-valid" };
    }
    if rng.chance(40) {
        let b = &mut v.basic;
        match rng.below(9) {
            0 => b.logical_bs_shift = rng.pick(&[8, 12, 13, 17]),
            1 => b.physical_bs_shift = rng.pick(&[8, 9, 17]),
            2 => b.io_opt_shift = rng.pick(&[8, 30]),
            3 => b.io_min_shift = rng.pick(&[8, 12, 30]),
            4 => b.max_sectors = rng.pick(&[0, 1, 8, u32::MAX]),
            5 => b.chunk_sectors = rng.pick(&[8, 3, 1 << 20]),
            6 => b.dev_sectors = rng.pick(&[0, 1, u64::MAX]),
            7 => b.virt_boundary_mask = rng.pick(&[4095, 4096, 1]),
            _ => b.attrs = rng.pick(&[1, 0xff]),
        }
        desc += &format!(
            " basic={}/{}/{}/{}/{}/{}/{}/{:#x}/{:#x}",
            b.logical_bs_shift,
            b.physical_bs_shift,
            b.io_opt_shift,
            b.io_min_shift,
            b.max_sectors,
            b.chunk_sectors,
            b.dev_sectors,
            b.virt_boundary_mask,
            b.attrs
        );
    }
    if rng.chance(10) {
        p.v.len = rng.pick(&params_lengths());
        desc += &format!(" plen={}", p.v.len);
    }
    let mut h = hdr(id);
    (h.addr, h.len) = bytes_of(&mut p.v);
    if rng.chance(8) {
        h.len = rng.pick(&[0, 7, 8, h.len + 64]);
        desc += &format!(" len={}", h.len);
    }
    desc += &mutate_hdr(rng, &mut h, &w.trap);
    let got = run_now(w, UBLK_U_CMD_SET_PARAMS, &h, &desc)?;
    Ok(Some(format!("{desc} -> {}", show(got))))
}

/// Lengths of `struct ublk_params` a command may give: none, the header
/// alone, inside the basic parameters, at the start of each member after
/// the basic ones (where the one before it ends, but for padding) and one
/// byte past it, the whole and more.
fn params_lengths() -> Vec<u32> {
    use std::mem::{offset_of, size_of};
    // 112: the size of syzkaller's description of the parameters, which
    // ends inside the DMA alignment member (at 108, 8 bytes long).
    let mut v = vec![0, 8, 24, 112];
    for end in [
        offset_of!(UblkParams, discard),
        offset_of!(UblkParams, devt),
        offset_of!(UblkParams, zoned),
        offset_of!(UblkParams, dma),
        offset_of!(UblkParams, seg),
        offset_of!(UblkParams, integrity),
        size_of::<UblkParams>(),
    ] {
        v.extend([end as u32, end as u32 + 1]);
    }
    v.push(size_of::<UblkParams>() as u32 + 8);
    v
}

fn get_params(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let (id, _) = target(w, rng);
    let mut p = Padded::<UblkParams>::default();
    let size = std::mem::size_of::<UblkParams>() as u32;
    p.v.len = if rng.chance(50) {
        size
    } else {
        rng.pick(&params_lengths())
    };
    let mut h = hdr(id);
    (h.addr, h.len) = bytes_of(&mut p.v);
    let mut desc = format!("get_params {} plen={}", id as i32, p.v.len);
    if rng.chance(8) {
        h.len = rng.pick(&[0, 7]);
        desc += &format!(" len={}", h.len);
    }
    desc += &mutate_hdr(rng, &mut h, &w.trap);
    let got = run_now(w, UBLK_U_CMD_GET_PARAMS, &h, &desc)?;
    let mut line = format!("{desc} -> {}", show(got));
    if got == Got::Res(0) {
        line += &format!(
            " len={} types={:#x} sectors={} lbs={} max={}",
            p.v.len,
            p.v.types,
            p.v.basic.dev_sectors,
            p.v.basic.logical_bs_shift,
            p.v.basic.max_sectors
        );
    }
    Ok(Some(line))
}

fn affinity(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let (id, i) = target(w, rng);
    let nrq = i.map(|i| w.devs[i].nr_queues()).unwrap_or(1);
    let mut mask = Padded::<[u64; 4]>::default();
    let mut h = hdr(id);
    // The queue is data[0]; queue_id is the header's, unused here.
    h.data[0] = rng.pick(&[0, 0, 1, u64::from(nrq), u64::MAX]);
    h.addr = &mut mask.v as *mut _ as u64;
    h.len = rng.pick(&[8, 8, 32, 0, 4]);
    let mut desc = format!(
        "affinity {} q={} len={}",
        id as i32, h.data[0] as i64, h.len
    );
    desc += &mutate_hdr(rng, &mut h, &w.trap);
    let got = run_now(w, UBLK_U_CMD_GET_QUEUE_AFFINITY, &h, &desc)?;
    let mut line = format!("{desc} -> {}", show(got));
    if got == Got::Res(0) {
        line += &format!(" mask={:#x}", mask.v[0]);
    }
    Ok(Some(line))
}

fn features(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let mut f = Padded::<u64>::default();
    let mut h = hdr(rng.pick(&[0, 0, ABSENT_ID]));
    h.addr = &mut f.v as *mut _ as u64;
    h.len = rng.pick(&[8, 8, 0, 4, 16]);
    let mut desc = format!("features id={} len={}", h.dev_id, h.len);
    desc += &mutate_hdr(rng, &mut h, &w.trap);
    let got = run_now(w, UBLK_U_CMD_GET_FEATURES, &h, &desc)?;
    let mut line = format!("{desc} -> {}", show(got));
    if got == Got::Res(0) {
        line += &format!(" features={:#x}", f.v);
    }
    Ok(Some(line))
}

/// START_DEV or END_USER_RECOVERY: they wait for the server's FETCHes,
/// so they run on a ring of their own, which the device keeps while the
/// command waits. Not drawn where every tag may be fetched: the command
/// would go on and the disk's I/O would reach tags nobody answers.
fn waiting_ctrl(w: &mut World, rng: &mut Rng, op: u32, cmd: &str) -> Result<Option<String>> {
    // A waiting command holds one of the io_uring workers of this task, of
    // which there are four per CPU for commands like these (io-wq's
    // bounded work): with all of them waiting, the next control command
    // would wait for a worker, on either driver (seed 36100098 of an
    // earlier fuzzer: eight waiting on two CPUs, then a START_USER_RECOVERY
    // that never ran). A few are enough to test waiting.
    if w.devs.iter().map(|d| d.waiters.len()).sum::<usize>() >= MAX_WAITING {
        return Ok(None);
    }
    let (id, i) = target(w, rng);
    if let Some(i) = i {
        if w.devs[i].maybe_all_fetched() && w.devs[i].live.is_none() {
            return Ok(None);
        }
    }
    let mut h = hdr(id);
    // The pid is an int in data[0]'s low 32 bits: -1, 0, and this process
    // with bits above them set.
    let me = u64::from(std::process::id());
    let (pid, name) = rng.pick(&[
        (me, "self"),
        (me, "self"),
        (me, "self"),
        (0, "0"),
        (1, "1"),
        (0xffff_ffff, "0xffffffff"),
        (1 << 32, "2^32"),
        ((1 << 32) | me, "2^32+self"),
    ]);
    h.data[0] = pid;
    let mut desc = format!("{cmd} {} pid={name}", id as i32);
    desc += &mutate_hdr(rng, &mut h, &w.trap);
    let mut ring = Ring::<io_uring::squeue::Entry128>::new()?;
    let got = ring.run(sqe128(w.env.ctrl.fd(), op, &h), PEEK)?;
    if got == Got::Pending {
        match i {
            Some(i) => w.devs[i].waiters.push(ring),
            None => anyhow::bail!("{desc}: queued on a device the fuzzer does not know"),
        }
    }
    Ok(Some(format!("{desc} -> {}", show(got))))
}

/// A control command whose argument is `data[0]`, drawn from `data`.
fn simple_ctrl(
    w: &mut World,
    rng: &mut Rng,
    op: u32,
    name: &str,
    data: &[u64],
) -> Result<Option<String>> {
    let (id, i) = target(w, rng);
    let mut h = hdr(id);
    h.data[0] = rng.pick(data);
    let mut desc = format!("{name} {} data={}", id as i32, h.data[0] as i64);
    desc += &mutate_hdr(rng, &mut h, &w.trap);
    let live = i.is_some_and(|i| w.devs[i].live.is_some());
    let mut got = w.env.ctrl.run(op, &h)?;
    // udev's probes open a started disk for a moment (after START_DEV,
    // after a size change): TRY_STOP_DEV answers EBUSY until they end.
    let start = std::time::Instant::now();
    while live && op == UBLK_U_CMD_TRY_STOP_DEV && got == Got::Res(-libc::EBUSY) {
        if start.elapsed() > crate::world::SETTLE {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        got = w.env.ctrl.run(op, &h)?;
    }
    if got == Got::Pending {
        anyhow::bail!("{desc}: no completion (queued): a hang");
    }
    let mut line = format!("{desc} -> {}", show(got));
    // Stopping or quiescing a started device ends its server's commands:
    // wait for the state to settle before the next step reads it. A size
    // change makes udev probe the disk again: wait for it to let go.
    if got == Got::Res(0) {
        if let Some(i) = i {
            if w.devs[i].live.is_some() && op == UBLK_U_CMD_QUIESCE_DEV {
                // A quiesced device leaves LIVE once its server, whose
                // commands ended with UBLK_IO_RES_ABORT, closes its char
                // device: a server does that, as kublk exits.
                w.devs[i].io_waiters.clear();
                w.devs[i].live = None;
                w.settle_refs();
                line += &format!(" then {}", w.settle_not_live(id)?);
            } else if w.devs[i].live.is_some() && op != UBLK_U_CMD_UPDATE_SIZE {
                line += &format!(" then {}", w.settle_not_live(id)?);
            }
        }
        w.settle_refs();
    }
    Ok(Some(line))
}

fn unknown_ctrl(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let (id, _) = target(w, rng);
    let mut f = Padded::<u64>::default();
    let mut h = hdr(id);
    h.addr = &mut f.v as *mut _ as u64;
    h.len = 8;
    // Unused numbers, ioctl-encoded or not, and GET_FEATURES by its old
    // plain number.
    let op = rng.pick(&[
        UBLK_U_CMD_GET_FEATURES & !0xff | 0x1a,
        UBLK_U_CMD_GET_FEATURES & !0xff | 0x3f,
        0x1f,
        0x13,
    ]);
    let desc = format!("ctrl_op {op:#x} {}", id as i32);
    let got = run_now(w, op, &h, &desc)?;
    Ok(Some(format!("{desc} -> {}", show(got))))
}

/// A file syscall, as syzkaller's generic ones reach the ublk descriptors:
/// read, write, pread, pwrite (at the start of the file, or where user copy
/// begins, which names queue 0, tag 0), lseek or an ioctl (neither driver
/// has one),
/// on /dev/ublk-control or on the char device of a device that the fuzzer
/// serves itself (not a started one, whose I/O a thread answers at times
/// that the two drivers do not share).
fn file_call(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let dev = own_dev(w, rng, |d| d.server.is_some()).filter(|_| rng.chance(50));
    let (fd, name) = match dev {
        Some(i) => {
            let d = &w.devs[i];
            let fd = d.server.as_ref().map(|s| s.file.as_raw_fd()).unwrap_or(-1);
            (fd, format!("ublkc{}", d.id))
        }
        None => (w.env.ctrl.fd(), "ublk-control".to_string()),
    };
    let mut buf = [0u8; 512];
    let off = file_offset(w, dev, rng);
    let (what, ret) = match rng.below(6) {
        // SAFETY: reading into, or writing from, a local buffer of that size.
        0 => ("read", unsafe {
            libc::read(fd, buf.as_mut_ptr().cast(), buf.len())
        }),
        // SAFETY: as above.
        1 => ("write", unsafe {
            libc::write(fd, buf.as_ptr().cast(), buf.len())
        }),
        // SAFETY: as above.
        2 => ("pread", unsafe {
            libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off)
        }),
        // SAFETY: as above.
        3 => ("pwrite", unsafe {
            libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off)
        }),
        // SAFETY: a plain syscall on a descriptor of ours.
        4 => ("lseek", unsafe { libc::lseek(fd, off, libc::SEEK_SET) }
            as isize),
        // SAFETY: the command's argument is 32 bytes, which the local buffer has room for.
        _ => (
            "ioctl",
            unsafe { libc::ioctl(fd, UBLK_U_CMD_GET_FEATURES as _, buf.as_mut_ptr()) } as isize,
        ),
    };
    let got = chardev::syscall_result(ret);
    let at = match what {
        "pread" | "pwrite" | "lseek" => format!(" off={off:#x}"),
        _ => String::new(),
    };
    Ok(Some(format!("{what} {name}{at} -> {}", show(got))))
}

/// Where a file syscall reads or writes: the start of the file, or a
/// user-copy position (a queue, a tag of it and an offset in its buffer,
/// sometimes in the integrity data), each in range or just past it.
fn file_offset(w: &World, dev: Option<usize>, rng: &mut Rng) -> libc::off_t {
    if rng.chance(30) {
        return 0;
    }
    let (nrq, depth) = dev
        .map(|i| (w.devs[i].nr_queues(), w.devs[i].depth()))
        .unwrap_or((1, 1));
    let q = u64::from(rng.pick(&[0, 0, 1, nrq]));
    let tag = u64::from(rng.pick(&[0, 0, depth.saturating_sub(1), depth]));
    let within = rng.pick(&[0u64, 0, 512, 4096]);
    let mut pos = UBLKSRV_IO_BUF_OFFSET + (q << UBLK_QID_OFF) + (tag << UBLK_TAG_OFF) + within;
    if rng.chance(10) {
        pos |= UBLKSRV_IO_INTEGRITY_FLAG;
    }
    pos as libc::off_t
}

fn open_char(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let Some(i) = own_dev(w, rng, |_| true) else {
        return Ok(None);
    };
    let id = w.devs[i].id;
    let held = w.devs[i].server.is_some() || w.devs[i].live.is_some();
    // Neither driver looks at how its char device was opened; the file
    // syscalls on it do (mmap wants it readable, a write writable).
    let (flags, how) = rng.pick(&[
        (libc::O_RDWR, ""),
        (libc::O_RDWR, ""),
        (libc::O_RDWR, ""),
        (libc::O_RDONLY, " rdonly"),
        (libc::O_WRONLY, " wronly"),
        (libc::O_RDWR | libc::O_NONBLOCK, " nonblock"),
    ]);
    let got = if held {
        match chardev::open_flags(id, flags) {
            Ok(_) => Got::Res(0),
            Err(e) => Got::Res(e),
        }
    } else {
        match w.open_when_free(id, flags) {
            Ok(f) => {
                w.attach(i, f)?;
                Got::Res(0)
            }
            Err(e) => Got::Res(e),
        }
    };
    let what = if held { "second open" } else { "open" };
    Ok(Some(format!("{what} ublkc{id}{how} -> {}", show(got))))
}

fn close_char(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let Some(i) = own_dev(w, rng, |d| d.server.is_some()) else {
        return Ok(None);
    };
    let id = w.devs[i].id;
    w.devs[i].server = None;
    w.devs[i].fetched.clear();
    w.devs[i].prepped = false;
    w.settle_refs();
    Ok(Some(format!("close ublkc{id}")))
}

fn mmap(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let Some(i) = own_dev(w, rng, |d| d.server.is_some()) else {
        return Ok(None);
    };
    let d = &w.devs[i];
    let fd = d.server.as_ref().map(|s| s.file.as_raw_fd()).unwrap_or(-1);
    let size = usize::from(d.info.io_desc_size);
    let area = chardev::desc_area(d.depth() as usize, size);
    let page = chardev::page_size();
    let q1 = chardev::desc_area(UBLK_MAX_QUEUE_DEPTH as usize, size) as i64;
    let off = rng.pick(&[0, 0, page as i64, q1, UBLKSRV_IO_BUF_OFFSET as i64, 1]);
    let len = rng.pick(&[area, area, page, area + page, 1 << 20]);
    let (prot, pname) = rng.pick(&[
        (libc::PROT_READ, "r"),
        (libc::PROT_READ, "r"),
        (libc::PROT_READ | libc::PROT_WRITE, "rw"),
    ]);
    let (flags, fname) = rng.pick(&[
        (libc::MAP_SHARED, "shared"),
        (libc::MAP_SHARED, "shared"),
        (libc::MAP_PRIVATE, "private"),
        (libc::MAP_SHARED | libc::MAP_POPULATE, "shared+populate"),
    ]);
    let got = match chardev::mmap(fd, len, prot, flags, off) {
        Ok(_m) => Got::Res(0),
        Err(e) => Got::Res(e),
    };
    Ok(Some(format!(
        "mmap ublkc{} off={off:#x} len={len} {pname} {fname} -> {}",
        d.id,
        show(got)
    )))
}

/// io commands on the fuzzer's own would-be server of a device.
fn io(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let Some(i) = own_dev(w, rng, |d| d.server.is_some()) else {
        return Ok(None);
    };
    let (op, name) = rng.pick(&[
        (UBLK_U_IO_FETCH_REQ, "fetch"),
        (UBLK_U_IO_FETCH_REQ, "fetch"),
        (UBLK_U_IO_FETCH_REQ, "fetch"),
        (UBLK_U_IO_COMMIT_AND_FETCH_REQ, "commit"),
        (UBLK_U_IO_COMMIT_AND_FETCH_REQ, "commit"),
        (UBLK_U_IO_NEED_GET_DATA, "need_get_data"),
        (UBLK_U_IO_REGISTER_IO_BUF, "register_buf"),
        (UBLK_U_IO_UNREGISTER_IO_BUF, "unregister_buf"),
        (UBLK_IO_FETCH_REQ, "fetch(plain)"),
        (UBLK_U_IO_FETCH_REQ & !0xff | 0x2f, "io_op_0x2f"),
        (UBLK_U_IO_PREP_IO_CMDS, "prep_io_cmds"),
        (UBLK_U_IO_COMMIT_IO_CMDS, "commit_io_cmds"),
        (UBLK_U_IO_FETCH_IO_CMDS, "fetch_io_cmds"),
    ]);
    let d = &w.devs[i];
    let (nrq, depth) = (d.nr_queues(), d.depth());
    let q = rng.pick(&[0, 0, 0, 1, nrq, u16::MAX]);
    let tag = rng.pick(&[0, 0, 1, depth.saturating_sub(1), depth, u16::MAX]);
    let addr_kind = rng.pick(&[0u8, 0, 1, 2, 3]);
    let result = rng.pick(&[0, 512, -libc::EIO, 1]);
    let fetch = op == UBLK_U_IO_FETCH_REQ || op == UBLK_IO_FETCH_REQ;
    let is_new = q < nrq && tag < depth && !d.fetched.contains(&(q, tag));
    let is_prep = op == UBLK_U_IO_PREP_IO_CMDS;
    // The FETCH (or batch PREP) that may complete the set while a START_DEV
    // or END_USER_RECOVERY waits would let it go on: not drawn.
    if d.waiting()
        && ((fetch && is_new && d.fetched.len() + 1 >= nrq as usize * depth as usize) || is_prep)
    {
        return Ok(None);
    }
    let server = w.devs[i].server.as_mut().expect("own_dev checked");
    let buf = server.buf.addr();
    let addr = match addr_kind {
        0 => buf,
        1 => 0,
        2 => buf + 1,
        _ => 0xdead_0000_0000,
    };
    let fd = server.file.as_raw_fd();
    let mut sqe = io_sqe_result(fd, op, q, tag, addr, result);
    // Now and then from an io_uring worker (`IOSQE_ASYNC`): ublk_drv issues
    // the command again from the submitting task's task work, or, on a
    // batch io device, in the worker itself; the Rust driver always from
    // task work. Either way it completes only after the guest scheduled the
    // worker, at no time the fuzzer knows, so that a command that may be
    // queued cannot tell queued from late: drawn only for commands that
    // complete (not a FETCH of a tag not fetched yet, nor the batch fetch),
    // whose answer is then waited for as long as a control command's.
    let may_queue = (fetch && is_new) || op == UBLK_U_IO_FETCH_IO_CMDS;
    let (wait, async_) = if !may_queue && rng.chance(10) {
        sqe = sqe.flags(io_uring::squeue::Flags::ASYNC);
        (crate::world::SETTLE, " async")
    } else {
        (IO_PEEK, "")
    };
    let got = server.ring.run(sqe, wait)?;
    let d = &mut w.devs[i];
    if fetch && got == Got::Pending && q < nrq && tag < depth {
        d.fetched.insert((q, tag));
    }
    if is_prep && got == Got::Res(0) {
        d.prepped = true;
    }
    let a = ["buf", "0", "buf+1", "bad"][addr_kind as usize];
    Ok(Some(format!(
        "{name} ublkc{} q={q} tag={tag} addr={a} res={result}{async_} -> {}",
        d.id,
        show(got)
    )))
}

/// io commands on a started device from this thread, which is not the
/// task that fetched its tag.
fn live_io(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let Some(i) = own_dev(w, rng, |d| d.live.is_some()) else {
        return Ok(None);
    };
    let (op, name) = rng.pick(&[
        (UBLK_U_IO_FETCH_REQ, "fetch"),
        (UBLK_U_IO_COMMIT_AND_FETCH_REQ, "commit"),
    ]);
    let tag = rng.pick(&[0, 1]);
    let d = &mut w.devs[i];
    let live = d.live.as_mut().expect("own_dev checked");
    let fd = live.s.file.as_raw_fd();
    let buf = live.s.buf.addr();
    let mut ring = Ring::<io_uring::squeue::Entry>::new()?;
    let got = ring.run(io_sqe_result(fd, op, 0, tag, buf, 0), IO_PEEK)?;
    if got == Got::Pending {
        d.io_waiters.push(ring);
    }
    Ok(Some(format!(
        "{name} ublkc{} from another task tag={tag} -> {}",
        d.id,
        show(got)
    )))
}

/// Starts a one-tag copy-mode device with a thread that answers its I/O.
fn go_live(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let Some(i) = own_dev(w, rng, |d| d.answerable()) else {
        return Ok(None);
    };
    let dev = Dev {
        id: w.devs[i].id,
        info: w.devs[i].info,
    };
    let started = match w.open_when_free(dev.id, libc::O_RDWR) {
        Ok(file) => {
            let server = Server {
                ring: Ring::new()?,
                file,
                buf: IoBuf::new(),
                dev,
            };
            Answering::start_server(&mut w.env, server).map_err(|e| format!("{e:#}"))
        }
        Err(e) => Err(format!("open: {}", show(Got::Res(e)))),
    };
    let got = match started {
        Ok(a) => {
            w.devs[i].live = Some(a);
            "0".to_string()
        }
        Err(e) => {
            w.settle_refs();
            e
        }
    };
    let mut line = format!("start with a server ublkc{} -> {got}", dev.id);
    if w.devs[i].live.is_some() {
        // The partition scan is over, and udev's probes let go of the new
        // disk.
        w.settle_scan(dev.id, dev.info.flags)?;
        w.settle_refs();
        line += &format!(
            " state={}",
            match w.state(dev.id)? {
                Ok(s) => state_name(s),
                Err(r) => show(Got::Res(r)),
            }
        );
    }
    Ok(Some(line))
}

/// The answering server of a started device goes away (its commands
/// cancelled, its char device closed), as a crashed server would.
fn kill_server(w: &mut World, rng: &mut Rng) -> Result<Option<String>> {
    let Some(i) = own_dev(w, rng, |d| d.live.is_some()) else {
        return Ok(None);
    };
    let id = w.devs[i].id;
    w.devs[i].io_waiters.clear();
    w.devs[i].live = None;
    w.settle_refs();
    let state = w.settle_not_live(id)?;
    Ok(Some(format!("server of ublkc{id} exits -> {state}")))
}
