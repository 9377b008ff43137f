//! One case: a device of ours, the AIO read held, BLKRRPART, and the held
//! read committed when the rescan's read of sector 0 reaches the server.

use anyhow::{bail, Context, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};
use ublk_badinput::cases::server::{disk_devt, open_disk};
use ublk_badinput::errno::show;
use ublk_badinput::ring::Got;
use ublk_uapi::ioctl::io;

use crate::aio::{self, Report};
use crate::device::Device;
use crate::proc;
use crate::server::{Event, Msg, AIO_SECTOR};

/// `BLKRRPART`: `_IO(0x12, 95)`.
const BLKRRPART: u32 = io(0x12, 95);
/// `BLKFLSBUF`: `_IO(0x12, 97)`.
const BLKFLSBUF: u32 = io(0x12, 97);

/// How long BLKRRPART may take before the test calls it a hang.
pub const RESCAN_WAIT: Duration = Duration::from_secs(30);

/// What a case is.
pub struct Spec {
    pub name: &'static str,
    pub flags: u64,
    pub queues: u16,
    /// Pin the server thread and the AIO child to one CPU whose queue maps
    /// no other CPU, so that blk_mq_complete_request_remote() leaves the
    /// completion to the server's context.
    pub pin: bool,
}

/// How a case ended.
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
    /// BLKRRPART or the server never came back: the device (its id here)
    /// and the threads are left as they are, nothing more can be done in
    /// this process.
    Hung(String, u32),
}

/// Prints a progress line.
macro_rules! step {
    ($($a:tt)*) => { println!("# {}", format!($($a)*)) };
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn ioctl(f: &File, req: u32) -> i32 {
    // SAFETY: BLKRRPART and BLKFLSBUF take no argument.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), req as _, 0) };
    if r < 0 {
        -errno()
    } else {
        r
    }
}

fn errstr(r: i32) -> String {
    show(Got::Res(r))
}

/// Runs the case. The process must be single-threaded (the AIO child is
/// forked first); it is not once this returns.
pub fn run(spec: &Spec) -> Outcome {
    let offset = AIO_SECTOR << 9;
    let mut child = match aio::Child::spawn(offset) {
        Ok(c) => c,
        Err(e) => return Outcome::Fail(format!("{e:#}")),
    };
    let mut dev = match Device::add(spec.queues, spec.flags) {
        Ok(d) => d,
        Err(e) => return Outcome::Fail(format!("setup: {e:#}")),
    };
    step!(
        "ublk device {} added: {} queue(s) of {} tags, copy mode, flags {:#x}",
        dev.id,
        dev.queues,
        crate::server::DEPTH,
        dev.flags
    );
    let out = match body(spec, &mut dev, &mut child) {
        Ok(o) => o,
        Err(e) => Outcome::Fail(format!("{e:#}")),
    };
    if let Outcome::Hung(..) = out {
        // Nothing is torn down: the server thread is stuck in the kernel,
        // and the device cannot be deleted while it is.
        std::mem::forget(dev);
        std::mem::forget(child);
        return out;
    }
    let errs = dev.teardown();
    child.let_go();
    if !child.reap(Duration::from_secs(5)) {
        step!("the AIO child {} has not exited", child.pid());
    }
    match (out, errs.is_empty()) {
        (Outcome::Pass, true) => {
            step!("ublkb{} stopped and deleted", dev.id);
            Outcome::Pass
        }
        (Outcome::Pass, false) => Outcome::Fail(format!("teardown: {}", errs.join("; "))),
        (o, true) => o,
        (Outcome::Fail(m), false) => Outcome::Fail(format!("{m}; teardown: {}", errs.join("; "))),
        (o, false) => {
            step!("teardown: {}", errs.join("; "));
            o
        }
    }
}

/// Waits until udev has handled the new disk and no request reached the
/// server for a second: START_DEV's partition scan (a work item) and
/// udev's probes are over.
fn settle(dev: &Device) -> Result<()> {
    if let Ok(st) = std::process::Command::new("udevadm")
        .args(["settle", "--timeout=10"])
        .status()
    {
        if !st.success() {
            step!("udevadm settle: {st}; waiting for the device to go quiet anyway");
        }
    }
    let start = Instant::now();
    loop {
        match dev.shared.quiet_for() {
            Some(q) if q >= Duration::from_secs(1) => {
                step!(
                    "{} requests served since START_DEV, none for {:.1} s: the partition scan and udev are done",
                    dev.shared.requests.load(SeqCst),
                    q.as_secs_f64()
                );
                return Ok(());
            }
            None if start.elapsed() > Duration::from_secs(5) => {
                step!("no request reached the server in 5 s since START_DEV (no partition scan?)");
                return Ok(());
            }
            _ => {}
        }
        if start.elapsed() > Duration::from_secs(20) {
            bail!(
                "the device did not go quiet in 20 s ({} requests)",
                dev.shared.requests.load(SeqCst)
            );
        }
        if !dev.server_running() {
            bail!("the server thread ended");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A CPU to pin to: the one CPU of a queue that maps exactly one CPU.
fn pick_cpu(dev: &Device) -> Option<(u16, usize)> {
    for q in 0..dev.queues {
        let path = format!("/sys/block/ublkb{}/mq/{q}/cpu_list", dev.id);
        let list = std::fs::read_to_string(&path).ok()?;
        if let Some([cpu]) = proc::parse_cpu_list(&list).as_deref() {
            return Some((q, *cpu));
        }
    }
    None
}

/// Waits for the next message of the server or the rescan thread, up to
/// `deadline`; prints the server's events as they come.
fn next_msg(dev: &Device, deadline: Instant) -> Option<Msg> {
    let left = deadline.saturating_duration_since(Instant::now());
    match dev.rx.recv_timeout(left) {
        Ok(m) => {
            if let Msg::Server(e) = &m {
                say(e);
            }
            Some(m)
        }
        Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
    }
}

fn say(e: &Event) {
    match e {
        Event::Held { q, tag } => step!(
            "server: holds the AIO read (queue {q} tag {tag}, sector {AIO_SECTOR}), not committed"
        ),
        Event::Trigger { q, tag, rescan } => step!(
            "server: READ of sector 0 on queue {q} tag {tag} while the AIO read is held; BLKRRPART {rescan}"
        ),
        Event::Releasing { why } => step!(
            "server: commits the held AIO read first ({why}), in an io_uring_enter() of its own"
        ),
        Event::Released { took } => step!(
            "server: the commit of the held AIO read returned after {:.1} ms; now serves the rest",
            took.as_secs_f64() * 1000.0
        ),
        Event::Error(m) => step!("server: error: {m}"),
    }
}

/// What the server did with the held read, from its events.
#[derive(Default)]
struct Seen {
    held: bool,
    trigger: bool,
    releasing: Option<&'static str>,
    released: bool,
}

impl Seen {
    fn note(&mut self, m: &Msg) {
        match m {
            Msg::Server(Event::Held { .. }) => self.held = true,
            Msg::Server(Event::Trigger { .. }) => self.trigger = true,
            Msg::Server(Event::Releasing { why }) => self.releasing = Some(why),
            Msg::Server(Event::Released { .. }) => self.released = true,
            _ => {}
        }
    }
}

fn body(spec: &Spec, dev: &mut Device, child: &mut aio::Child) -> Result<Outcome> {
    dev.start()?;
    let (major, minor) = disk_devt(dev.id)
        .map_err(|e| anyhow::anyhow!("no /sys/block/ublkb{}/dev: {}", dev.id, errstr(e)))?;
    step!("START_DEV done: ublkb{} is {major}:{minor}", dev.id);

    let mut cpu = None;
    if spec.pin {
        match pick_cpu(dev) {
            Some((q, c)) => {
                // START_DEV waited for the server thread's fetches: it runs.
                let tid = dev.shared.tid.load(SeqCst);
                if tid == 0 {
                    bail!("the server thread has no id after START_DEV");
                }
                proc::pin(tid, c)?;
                step!(
                    "queue {q} maps CPU {c} alone: the server thread and the AIO child run on CPU {c}, \
                     so blk_mq_complete_request_remote() leaves the AIO read's completion to the server's context"
                );
                cpu = Some(c);
            }
            None => {
                return Ok(Outcome::Skip(
                    "no queue maps exactly one CPU: the inline fallback of \
                     blk_mq_complete_request_remote() cannot be reached here"
                        .into(),
                ))
            }
        }
    }

    settle(dev)?;

    // Arm, then let the child read and close.
    dev.shared.armed.store(true, SeqCst);
    child.go(dev.id, cpu)?;
    step!(
        "armed; AIO child {} reads 4096 bytes at {} with O_DIRECT, then closes the disk",
        child.pid(),
        AIO_SECTOR << 9
    );
    let mut seen = Seen::default();
    let deadline = Instant::now() + Duration::from_secs(15);
    match child.report(Duration::from_secs(15))? {
        Some(Report::Submitted) => {}
        Some(Report::Failed(stage, e)) if stage == aio::Stage::Setup && e == -libc::ENOSYS => {
            return Ok(Outcome::Skip(
                "io_setup: ENOSYS: a kernel without AIO (CONFIG_AIO)".into(),
            ))
        }
        Some(Report::Failed(stage, e)) => {
            bail!("AIO child: {} failed: {}", stage.what(), errstr(e))
        }
        Some(r) => bail!("AIO child: unexpected report {r:?}"),
        None => bail!("the AIO child did not report its submission in 15 s"),
    }
    step!("AIO child: io_submit() done and the disk closed: the AIO request holds the file's last reference");
    while !seen.held {
        match next_msg(dev, deadline) {
            Some(m) => seen.note(&m),
            None => bail!("the AIO read did not reach the server in 15 s"),
        }
    }

    // The rescan, with the page cache dropped so that it reads through
    // the server.
    let disk = open_disk(dev.id, std::fs::OpenOptions::new().read(true))
        .map_err(|e| anyhow::anyhow!("open of ublkb{}: {}", dev.id, errstr(e)))?;
    let r = ioctl(&disk, BLKFLSBUF);
    if r != 0 {
        bail!("ioctl(BLKFLSBUF) failed: {}", errstr(r));
    }
    step!("BLKFLSBUF done; BLKRRPART in a thread of its own (the rescan holds disk->open_mutex while it reads)");
    dev.shared.rescan.store(true, SeqCst);
    let tx = dev.tx.clone();
    let shared = dev.shared.clone();
    let rescan_disk = disk.try_clone().context("dup of the disk's descriptor")?;
    std::thread::Builder::new()
        .name("blkrrpart".into())
        .spawn(move || {
            shared.rescan_tid.store(proc::gettid(), SeqCst);
            let r = ioctl(&rescan_disk, BLKRRPART);
            let _ = tx.send(Msg::Rescan(r));
            drop(rescan_disk);
        })
        .context("spawning the BLKRRPART thread")?;

    let deadline = Instant::now() + RESCAN_WAIT;
    let rescan = loop {
        match next_msg(dev, deadline) {
            Some(Msg::Rescan(r)) => break r,
            Some(m) => seen.note(&m),
            None => {
                // Not even a close: nothing may wait for the disk here.
                std::mem::forget(disk);
                return Ok(hung(dev, &seen, child));
            }
        }
    };
    step!("BLKRRPART returned {}", errstr(rescan));
    drop(disk);
    // Whatever the server reported before BLKRRPART returned.
    while let Ok(m) = dev.rx.try_recv() {
        if let Msg::Server(e) = &m {
            say(e);
        }
        seen.note(&m);
    }

    if !seen.trigger {
        // The held read must not stay held: the child and teardown wait.
        dev.shared.release.store(true, SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !seen.released {
            match next_msg(dev, deadline) {
                Some(m) => seen.note(&m),
                None => break,
            }
        }
        let msg = format!(
            "BLKRRPART returned {} before its read of sector 0 reached the server while the AIO read \
             was held: the race was not reached (is partition scanning allowed on the disk? did \
             the rescan read from the page cache?)",
            errstr(rescan)
        );
        return Ok(Outcome::Fail(msg));
    }
    if rescan != 0 {
        return Ok(Outcome::Fail(format!(
            "BLKRRPART failed: {} (the rescan read sector 0 through the server)",
            errstr(rescan)
        )));
    }
    if !seen.released {
        bail!("BLKRRPART returned, but the server never reported the commit of the held AIO read");
    }
    match child.report(Duration::from_secs(15))? {
        Some(Report::Done(n)) if n == aio::READ_LEN as i64 => {
            step!("AIO child: the read completed with {n} bytes");
        }
        Some(Report::Done(n)) => {
            return Ok(Outcome::Fail(format!(
                "the AIO read completed with {n}, not {}",
                aio::READ_LEN
            )))
        }
        Some(Report::NoEvent) => {
            return Ok(Outcome::Fail(
                "the AIO read got no completion event although the server committed it".into(),
            ))
        }
        Some(Report::Failed(stage, e)) => {
            return Ok(Outcome::Fail(format!(
                "AIO child: {} failed: {}",
                stage.what(),
                errstr(e)
            )))
        }
        Some(r) => bail!("AIO child: unexpected report {r:?}"),
        None => bail!("the AIO child did not report its read's completion in 15 s"),
    }
    // udev may look at the disk after the rescan: let it finish first.
    let _ = std::process::Command::new("udevadm")
        .args(["settle", "--timeout=10"])
        .status();
    Ok(Outcome::Pass)
}

/// BLKRRPART did not return in time: says what each thread is doing.
fn hung(dev: &Device, seen: &Seen, child: &aio::Child) -> Outcome {
    let server = dev.shared.tid.load(SeqCst);
    let rescan = dev.shared.rescan_tid.load(SeqCst);
    step!(
        "BLKRRPART did not return within {} s; what the threads do:",
        RESCAN_WAIT.as_secs()
    );
    let mut server_in_release = false;
    let mut rescan_in_scan = false;
    for (who, tid) in [("server", server), ("BLKRRPART", rescan)] {
        step!("{who} {}", proc::thread_line(tid));
        match proc::thread_stack(tid) {
            Ok(frames) => {
                for f in &frames {
                    step!("    {f}");
                }
                let has = |s: &str| frames.iter().any(|f| f.contains(s));
                if who == "server" {
                    server_in_release = has("bdev_release") || has("blkdev_release");
                } else {
                    rescan_in_scan = has("bdev_disk_changed") || has("disk_scan_partitions");
                }
            }
            Err(why) => step!("    no stack: {why}"),
        }
    }
    if let Ok(Some(r)) = child.report(Duration::from_millis(200)) {
        step!("AIO child: {r:?}");
    }
    let what = match (seen.releasing, seen.released) {
        _ if !dev.server_running() => {
            "the server thread ended (an error, see above) before it served the rescan's read"
                .to_string()
        }
        (Some(_), false) => {
            let detail = if server_in_release {
                "; its stack shows the file's release (bdev_release), which waits for disk->open_mutex"
            } else {
                ""
            };
            format!(
                "the server thread never came back from its commit of the held AIO read{detail}: the \
                 read's completion dropped the AIO file's last reference with bottom halves \
                 enabled, so blkdev_release() ran as the server's task work and waits for \
                 disk->open_mutex, which the rescan{} holds while it waits for its read of sector \
                 0, which only that server can serve (deadlock)",
                if rescan_in_scan {
                    " (in bdev_disk_changed)"
                } else {
                    ""
                }
            )
        }
        (Some(_), true) => {
            "the server committed the held AIO read and came back, but the rescan still did not end"
                .to_string()
        }
        (None, _) if seen.trigger => {
            "the server saw the rescan's read but did not commit".to_string()
        }
        (None, _) => "no READ of sector 0 reached the server while BLKRRPART ran".to_string(),
    };
    step!(
        "ublkb{} is left behind: it cannot be stopped or deleted while its server thread is stuck in the kernel",
        dev.id
    );
    Outcome::Hung(
        format!(
            "BLKRRPART did not return within {} s: {what}",
            RESCAN_WAIT.as_secs()
        ),
        dev.id,
    )
}
