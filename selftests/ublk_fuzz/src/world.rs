//! What the fuzzer holds of the driver: the devices it added, and of each
//! its open char device (a would-be server on this thread), the tags it
//! fetched, commands it left waiting, and a started device whose I/O a
//! thread answers. Those decide which operations a step may draw, so that
//! a sequence does the same on two drivers that answer alike.
//!
//! Nothing here may depend on timing: an operation whose effect lands
//! later (a deleted device's id, a killed server's device state) is
//! followed by a bounded wait for that effect, an open of a device the
//! fuzzer does not hold is retried while the last close's release is
//! pending, and an operation whose outcome would depend on a race is not
//! drawn (e.g. the FETCH that would let a waiting START_DEV go on while
//! nobody answers the new disk's I/O). A wait that runs out is a hang: the
//! round fails. What shows when a closed char device is released, and when
//! udev lets go of a started disk, is the driver module's reference count
//! ([`World::settle_refs`]); the partition scan, which holds no reference,
//! is waited for with BLKRRPART ([`World::settle_scan`]).

use anyhow::{bail, Result};
use io_uring::squeue;
use std::collections::BTreeSet;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use ublk_badinput::cases::server::{open_disk, Answering, Server};
use ublk_badinput::chardev::{self, IoBuf};
use ublk_badinput::ctrl::{hdr, with_buf, Ctrl};
use ublk_badinput::env::{dev_info, Dev, Env};
use ublk_badinput::errno::show;
use ublk_badinput::ring::{Got, Ring};
use ublk_uapi::*;

use crate::trap::Trap;

/// Most devices a round holds at once.
pub const MAX_DEVS: usize = 4;
/// How long a settling wait (a release, a removal, a state change) may take.
pub const SETTLE: Duration = Duration::from_secs(10);
/// How long [`World::settle_refs`] waits for the module's references to
/// go: a release and udev's probe take well under a second here.
pub const REFS_SETTLE: Duration = Duration::from_secs(3);

/// Flags a device must not have for [`Answering`] to serve it (copy mode,
/// plain FETCH/COMMIT, no zone or integrity parameters).
const NOT_ANSWERABLE: u64 = UBLK_F_SUPPORT_ZERO_COPY
    | UBLK_F_USER_COPY
    | UBLK_F_AUTO_BUF_REG
    | UBLK_F_BATCH_IO
    | UBLK_F_ZONED
    | UBLK_F_NEED_GET_DATA
    | UBLK_F_INTEGRITY
    | UBLK_F_UNPRIVILEGED_DEV;

pub struct FDev {
    pub id: u32,
    pub info: UblksrvCtrlDevInfo,
    /// The char device, opened by this thread, and its io ring.
    pub server: Option<Server>,
    /// (queue, tag) of the FETCH_REQs the driver queued on `server`.
    pub fetched: BTreeSet<(u16, u16)>,
    /// A batch PREP_IO_CMDS was accepted: the tags it prepared are unknown.
    pub prepped: bool,
    /// Rings holding commands that wait (START_DEV, END_USER_RECOVERY, io
    /// commands on a started device); dropped before the device is deleted.
    pub waiters: Vec<Ring<squeue::Entry128>>,
    pub io_waiters: Vec<Ring<squeue::Entry>>,
    /// Started, its I/O answered by a thread.
    pub live: Option<Answering>,
}

impl FDev {
    pub fn new(info: UblksrvCtrlDevInfo) -> Self {
        FDev {
            id: info.dev_id,
            info,
            server: None,
            fetched: BTreeSet::new(),
            prepped: false,
            waiters: Vec::new(),
            io_waiters: Vec::new(),
            live: None,
        }
    }

    pub fn nr_queues(&self) -> u16 {
        self.info.nr_hw_queues
    }

    pub fn depth(&self) -> u16 {
        self.info.queue_depth
    }

    /// Whether every tag may be fetched: a START_DEV or END_USER_RECOVERY
    /// would then go on, and the disk's I/O would reach tags nobody answers.
    pub fn maybe_all_fetched(&self) -> bool {
        self.prepped || self.fetched.len() >= self.nr_queues() as usize * self.depth() as usize
    }

    pub fn waiting(&self) -> bool {
        !self.waiters.is_empty() || !self.io_waiters.is_empty()
    }

    pub fn answerable(&self) -> bool {
        self.nr_queues() == 1
            && self.depth() == 1
            && self.info.flags & NOT_ANSWERABLE == 0
            && self.server.is_none()
            && self.live.is_none()
            && !self.waiting()
    }

    /// Lets go of everything held on the device: waiting commands, the
    /// answering thread, the char device.
    pub fn release(&mut self) {
        self.waiters.clear();
        self.io_waiters.clear();
        self.live = None;
        self.server = None;
        self.fetched.clear();
        self.prepped = false;
    }
}

pub struct World {
    pub env: Env,
    pub devs: Vec<FDev>,
    /// Dropped last: commands may have been given its addresses.
    pub trap: Trap,
}

impl World {
    pub fn new() -> Result<Self> {
        Ok(World {
            env: Env::new(Ctrl::open()?),
            devs: Vec::new(),
            trap: Trap::new()?,
        })
    }

    pub fn index(&self, id: u32) -> Option<usize> {
        self.devs.iter().position(|d| d.id == id)
    }

    /// The device's state as GET_DEV_INFO reports it, or the errno.
    pub fn state(&mut self, id: u32) -> Result<Result<u16, i32>> {
        let mut info = Padded::<UblksrvCtrlDevInfo>::default();
        let mut h = hdr(id);
        h.addr = &mut info as *mut _ as u64;
        h.len = std::mem::size_of::<UblksrvCtrlDevInfo>() as u16;
        match self.env.ctrl.run(UBLK_U_CMD_GET_DEV_INFO, &h)? {
            Got::Res(0) => Ok(Ok(info.v.state)),
            Got::Res(r) => Ok(Err(r)),
            Got::Pending => bail!("GET_DEV_INFO of device {id} did not complete"),
        }
    }

    /// Waits until every reference to the driver module but the fuzzer's
    /// own files is gone: a closed char device's release (io_uring's exit
    /// work cancels the commands that hold the file, then the release runs
    /// and, in the C driver, its work item, which holds a module reference
    /// until it is done) and the openers of a started disk (udev's probes,
    /// the partition scan), each of which holds one. What those reset or
    /// hold (the fetched tags, the server, an opener) decides how START_DEV,
    /// END_USER_RECOVERY, START_USER_RECOVERY and TRY_STOP_DEV answer.
    /// Polls `/sys/module/<driver>/refcnt` down to the references of the
    /// files the fuzzer holds (the control device's, each open char
    /// device's: [`crate::driver::refs_per_char_file`]); after
    /// [`REFS_SETTLE`] it goes on (an opener that stays, e.g. udev reading a
    /// quiesced disk after UPDATE_SIZE, is then part of the state both
    /// drivers see).
    pub fn settle_refs(&self) {
        let Some(module) = crate::driver::loaded() else {
            return;
        };
        let held = 1 + crate::driver::refs_per_char_file(module)
            * self
                .devs
                .iter()
                .filter(|d| d.server.is_some() || d.live.is_some())
                .count() as u64;
        let path = format!("/sys/module/{module}/refcnt");
        let start = Instant::now();
        while start.elapsed() < REFS_SETTLE {
            match std::fs::read_to_string(&path).map(|s| s.trim().parse::<u64>()) {
                Ok(Ok(n)) if n > held => std::thread::sleep(Duration::from_millis(10)),
                _ => return,
            }
        }
        // Shown in the table of where the time went: many of them mean that
        // the count of references per file is wrong.
        crate::ops::account("refs wait ran out", start.elapsed());
    }

    /// Waits until the partition scan that UBLK_U_CMD_START_DEV queued on
    /// the started device `id` is over; `flags` are the device's.
    ///
    /// Both drivers scan in a work item that first allows the scan (clears
    /// `GD_SUPPRESS_PART_SCAN`), then reads the partition table holding the
    /// disk's `open_mutex`, without opening the disk: the module's reference
    /// count does not show it. A scan whose reads are still queued when the
    /// server goes away (QUIESCE_DEV, or the exit of a server with user
    /// recovery) waits for a new server, and so does the C driver's
    /// TRY_STOP_DEV, which takes `open_mutex` to count the disk's openers
    /// (until END_USER_RECOVERY, or a STOP_DEV or DEL_DEV, which fail the
    /// reads); the Rust driver's does not take it. That would be a race: the
    /// start waits for the scan instead. BLKRRPART answers EINVAL until the
    /// work item allowed the scan; then it scans itself, after the work
    /// item's scan, since opening the disk takes `open_mutex`.
    pub fn settle_scan(&self, id: u32, flags: u64) -> Result<()> {
        // _IO(0x12, 95)
        const BLKRRPART: libc::c_ulong = 0x125f;

        if flags & UBLK_F_NO_AUTO_PART_SCAN != 0 {
            return Ok(());
        }
        let start = Instant::now();
        loop {
            let disk = std::fs::OpenOptions::new().read(true).clone();
            let file = match open_disk(id, &disk) {
                Ok(f) => f,
                // No disk (any more): no scan to wait for.
                Err(_) => return Ok(()),
            };
            // SAFETY: BLKRRPART takes no argument; `file` is an open block
            // device.
            let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKRRPART as _) };
            if r == 0 || chardev::errno() != libc::EINVAL {
                return Ok(());
            }
            if start.elapsed() > SETTLE {
                bail!("ublkb{id}: the partition scan did not start within {SETTLE:?} of START_DEV: a hang");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Opens the char device of `id`, which the fuzzer does not hold, with
    /// open(2)'s `flags`: retries while it is busy, since both drivers
    /// release it in a work item after the last close. EBUSY for [`SETTLE`]
    /// is the answer.
    pub fn open_when_free(&mut self, id: u32, flags: i32) -> Result<std::fs::File, i32> {
        let start = Instant::now();
        loop {
            match chardev::open_flags(id, flags) {
                Err(e) if e == -libc::EBUSY && start.elapsed() < SETTLE => {}
                r => return r,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the number of device `id`, whose deletion was accepted,
    /// is free again: an ADD_DEV of that number succeeds (and the device it
    /// creates is deleted) or fails otherwise than EEXIST. The C driver
    /// frees the number when the device's last reference goes, which a
    /// cancelled command may hold for a while after DEL_DEV_ASYNC returned
    /// and GET_DEV_INFO answers ENODEV.
    pub fn settle_gone(&mut self, id: u32) -> Result<()> {
        let start = Instant::now();
        loop {
            let mut info = dev_info(1, 1, 0);
            info.dev_id = id;
            let got = self
                .env
                .ctrl
                .run(UBLK_U_CMD_ADD_DEV, &with_buf(hdr(id), &mut info))?;
            match got {
                Got::Res(0) => {
                    let del = self.env.ctrl.run(UBLK_U_CMD_DEL_DEV, &hdr(id))?;
                    if del != Got::Res(0) {
                        bail!("deleting the probe device {id}: {}", show(del));
                    }
                    return Ok(());
                }
                Got::Res(r) if r == -libc::EEXIST => {}
                _ => return Ok(()),
            }
            if start.elapsed() > SETTLE {
                bail!("the number of device {id} is still taken {SETTLE:?} after its deletion was accepted");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until device `id` leaves the LIVE state, returns the state.
    /// Still LIVE after [`SETTLE`] is a hang.
    pub fn settle_not_live(&mut self, id: u32) -> Result<String> {
        let start = Instant::now();
        loop {
            match self.state(id)? {
                Ok(UBLK_S_DEV_LIVE) if start.elapsed() < SETTLE => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(UBLK_S_DEV_LIVE) => {
                    bail!("device {id} still LIVE {SETTLE:?} after its server went away or it was stopped")
                }
                Ok(s) => return Ok(state_name(s)),
                Err(r) => return Ok(show(Got::Res(r))),
            }
        }
    }

    /// Deletes every device (after letting go of it); one trace line each.
    pub fn teardown(&mut self) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        while let Some(mut d) = self.devs.pop() {
            d.release();
            let got = self.env.ctrl.run(UBLK_U_CMD_DEL_DEV, &hdr(d.id))?;
            if got == Got::Pending {
                bail!("DEL_DEV of device {} did not complete", d.id);
            }
            lines.push(format!("teardown: del {} -> {}", d.id, show(got)));
        }
        Ok(lines)
    }

    /// A would-be server of device `i` on this thread, its char device open.
    pub fn attach(&mut self, i: usize, file: std::fs::File) -> Result<()> {
        let d = &mut self.devs[i];
        d.server = Some(Server {
            ring: Ring::new()?,
            file,
            buf: IoBuf::new(),
            dev: Dev {
                id: d.id,
                info: d.info,
            },
        });
        d.fetched.clear();
        d.prepped = false;
        Ok(())
    }
}

/// A value with room behind it, for a driver that writes more than the
/// value's size.
#[repr(C)]
#[derive(Default)]
pub struct Padded<T: Default> {
    pub v: T,
    pub pad: [u64; 32],
}

pub fn state_name(s: u16) -> String {
    match s {
        UBLK_S_DEV_DEAD => "DEAD".into(),
        UBLK_S_DEV_LIVE => "LIVE".into(),
        UBLK_S_DEV_QUIESCED => "QUIESCED".into(),
        UBLK_S_DEV_FAIL_IO => "FAIL_IO".into(),
        s => format!("state {s}"),
    }
}
