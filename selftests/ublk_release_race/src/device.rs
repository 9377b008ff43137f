//! The test's device: added (copy mode, [`DEPTH`] tags per queue), its
//! char device opened and its descriptors mapped, served by the thread of
//! [`crate::server`], started, and at the end stopped and deleted.

use anyhow::{bail, Context, Result};
use io_uring::squeue;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use ublk_badinput::chardev::{self, desc_area, open_setup, Mapping};
use ublk_badinput::ctrl::{hdr, sqe128, with_buf, Ctrl};
use ublk_badinput::env::{Env, MAX_IO_BUF_BYTES};
use ublk_badinput::errno::show;
use ublk_badinput::ring::{Got, Ring};
use ublk_uapi::{
    UblksrvIoDesc, UBLK_MAX_QUEUE_DEPTH, UBLK_U_CMD_SET_PARAMS, UBLK_U_CMD_START_DEV,
    UBLK_U_CMD_STOP_DEV,
};

use crate::server::{self, Msg, Setup, Shared, DEPTH};

/// The disk's size in sectors: 32 MiB, past the AIO read's sector.
pub const DEV_SECTORS: u64 = 32 << 11;

/// How long START_DEV may take (it does not wait for the partition scan,
/// which a work item runs, but TCG is slow).
const START_WAIT: Duration = Duration::from_secs(20);

pub struct Device {
    pub env: Env,
    pub id: u32,
    pub queues: u16,
    pub flags: u64,
    pub shared: Arc<Shared>,
    pub tx: Sender<Msg>,
    pub rx: Receiver<Msg>,
    server: Option<JoinHandle<Result<()>>>,
    /// Closed after the server thread ended (it uses them until then).
    file: Option<File>,
    descs: Vec<Mapping>,
}

impl Device {
    /// Adds a device of `queues` queues that asks for `flags` (and must get
    /// them), opens its char device, maps its descriptors and starts the
    /// server thread, which fetches every tag. A device added but not
    /// served is deleted again.
    pub fn add(queues: u16, flags: u64) -> Result<Self> {
        let mut env = Env::new(Ctrl::open()?);
        let dev = env.add(queues, DEPTH, flags)?;
        let served = if dev.info.flags & flags != flags {
            Err(anyhow::anyhow!(
                "ADD_DEV: the device lacks flags {:#x} that it asked for",
                flags & !dev.info.flags
            ))
        } else {
            open_and_map(dev.id, queues)
        };
        let (file, descs) = match served {
            Ok(x) => x,
            Err(e) => {
                for err in env.cleanup() {
                    println!("# cleanup after a failed setup: {err}");
                }
                return Err(e);
            }
        };
        let shared = Arc::new(Shared::new());
        let (tx, rx) = channel();
        let setup = Setup {
            fd: file.as_raw_fd(),
            queues,
            descs: descs.iter().map(|m| m.addr() as usize).collect(),
            bufs: (0..usize::from(queues) * usize::from(DEPTH))
                .map(|_| vec![0u8; MAX_IO_BUF_BYTES as usize])
                .collect(),
            shared: shared.clone(),
            tx: tx.clone(),
        };
        let report = tx.clone();
        let server = std::thread::Builder::new()
            .name("ublk-server".into())
            .spawn(move || {
                let r = server::run(setup);
                if let Err(e) = &r {
                    let why = format!("the server thread ends: {e:#}");
                    let _ = report.send(Msg::Server(server::Event::Error(why)));
                }
                r
            })
            .context("spawning the server thread")?;
        Ok(Device {
            env,
            id: dev.id,
            queues,
            flags: dev.info.flags,
            shared,
            tx,
            rx,
            server: Some(server),
            file: Some(file),
            descs,
        })
    }

    /// SET_PARAMS (a [`DEV_SECTORS`] disk, 512-byte sectors) and START_DEV.
    pub fn start(&mut self) -> Result<()> {
        let mut p = ublk_badinput::cases::ctrl::basic_params();
        p.basic.dev_sectors = DEV_SECTORS;
        let r = self
            .env
            .ctrl
            .cmd(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(self.id), &mut p))?;
        if r != 0 {
            bail!("SET_PARAMS failed: {}", show(Got::Res(r)));
        }
        let mut h = hdr(self.id);
        h.data[0] = std::process::id() as u64;
        // A ring of its own: START_DEV waits for the server's fetches.
        let mut ring = Ring::<squeue::Entry128>::new()?;
        match ring.run(
            sqe128(self.env.ctrl.fd(), UBLK_U_CMD_START_DEV, &h),
            START_WAIT,
        )? {
            Got::Res(0) => Ok(()),
            Got::Pending => bail!("START_DEV did not complete in {START_WAIT:?}"),
            got => bail!("START_DEV failed: {}", show(got)),
        }
    }

    /// Whether the server thread is still running.
    pub fn server_running(&self) -> bool {
        self.server.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops and deletes the device: STOP_DEV, the server thread's end
    /// (bounded), the char device closed, DEL_DEV, the disk gone from
    /// sysfs. Returns what went wrong.
    pub fn teardown(&mut self) -> Vec<String> {
        let mut errs = Vec::new();
        // A read still held would keep STOP_DEV (del_gendisk() waits for
        // the requests in flight) from completing.
        self.shared.release.store(true, SeqCst);
        let start = Instant::now();
        while self.shared.holding.load(SeqCst)
            && self.server_running()
            && start.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        match self.env.ctrl.cmd(UBLK_U_CMD_STOP_DEV, &hdr(self.id)) {
            Ok(0) => {}
            Ok(r) => errs.push(format!("STOP_DEV failed: {}", show(Got::Res(r)))),
            Err(e) => errs.push(format!("STOP_DEV: {e:#}")),
        }
        self.shared.stop.store(true, SeqCst);
        let start = Instant::now();
        while self.server_running() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        match self.server.take() {
            Some(t) if t.is_finished() => match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errs.push(format!("server thread: {e:#}")),
                Err(_) => errs.push("the server thread panicked".into()),
            },
            Some(t) => {
                errs.push(
                    "the server thread did not end within 10 s of STOP_DEV; the device is left behind"
                        .into(),
                );
                // It still uses the char device, the mappings and its
                // buffers: keep them.
                std::mem::forget(t);
                std::mem::forget(self.file.take());
                std::mem::forget(std::mem::take(&mut self.descs));
                return errs;
            }
            None => {}
        }
        self.descs.clear();
        drop(self.file.take());
        errs.extend(self.env.cleanup());
        let sys = format!("/sys/block/ublkb{}", self.id);
        let start = Instant::now();
        while std::path::Path::new(&sys).exists() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if std::path::Path::new(&sys).exists() {
            errs.push(format!("{sys} still exists 5 s after DEL_DEV"));
        }
        errs
    }
}

/// Opens `/dev/ublkc<id>` and maps the descriptors of each of its `queues`
/// queues, as a server does.
fn open_and_map(id: u32, queues: u16) -> Result<(File, Vec<Mapping>)> {
    let file = open_setup(id)?;
    let size = desc_area(usize::from(DEPTH), std::mem::size_of::<UblksrvIoDesc>());
    // Queue q's descriptors are at q times the area of the largest queue.
    let stride = desc_area(
        UBLK_MAX_QUEUE_DEPTH as usize,
        std::mem::size_of::<UblksrvIoDesc>(),
    );
    let mut descs = Vec::new();
    for q in 0..queues {
        let off = (usize::from(q) * stride) as i64;
        let m = chardev::mmap(
            file.as_raw_fd(),
            size,
            libc::PROT_READ,
            libc::MAP_SHARED,
            off,
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "mmap of the descriptors of queue {q}: {}",
                show(Got::Res(e))
            )
        })?;
        descs.push(m);
    }
    Ok((file, descs))
}
