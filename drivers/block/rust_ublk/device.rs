// SPDX-License-Identifier: GPL-2.0

//! A ublk device: its configuration, its state, and starting and stopping its disk.

use crate::{
    features::F_NO_AUTO_PART_SCAN,
    io,
    params::{self, Params},
    queue::{self, DiskOps, QueueState, Queues},
    shmem,
    uapi::{self, DevInfo},
};
use kernel::{
    block::mq::{gen_disk::GenDisk, TagSet},
    mm::Mm,
    new_condvar, new_mutex, new_spinlock,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        Arc, CondVar, Mutex, SpinLock,
    },
    task::Pid,
    workqueue::{
        self, impl_has_delayed_work, impl_has_work, new_delayed_work, new_work, DelayedWork, Work,
        WorkItem,
    },
    ModuleMetadata, ModuleRef,
};

/// Where a device is in its life.
///
/// ```text
///              UBLK_U_CMD_START_DEV
///   Added ------------------------------> Live(disk)
///                                          |
///                                          | UBLK_U_CMD_STOP_DEV, UBLK_U_CMD_DEL_DEV,
///                                          | the server closes /dev/ublkcN
///              UBLK_U_CMD_START_DEV        v
///   (a server fetched all io slots) <--- Stopped
/// ```
///
/// `UBLK_U_CMD_GET_DEV_INFO` reports `Live` as `UBLK_S_DEV_LIVE`, the others as
/// `UBLK_S_DEV_DEAD`, as the C driver does for devices without user recovery.
pub(crate) enum Lifecycle {
    /// Added, never started.
    Added,
    /// Started: the disk, `/dev/ublkbN`, exists.
    ///
    /// The partition scan that follows `UBLK_U_CMD_START_DEV` holds a reference to the disk
    /// while it runs; stopping the device cancels or waits for it.
    Live(Arc<GenDisk<DiskOps>>),
    /// Stopped: the disk is gone. A server that fetched every io slot may start it again.
    Stopped,
}

/// Whether a server has `/dev/ublkcN` open (it has a single opener).
pub(crate) enum Server {
    /// No process has `/dev/ublkcN` open.
    Detached,
    /// The process `tgid` has `/dev/ublkcN` open and fetched `nr_fetched` io slots; the device
    /// can start once it fetched all, and `UBLK_U_CMD_START_DEV` must name `tgid`.
    Attached {
        /// The thread group of the server.
        tgid: Pid,
        /// How many io slots it fetched.
        nr_fetched: u32,
    },
}

/// The state of a device that commands change, under [`UblkDevice::state`].
pub(crate) struct DeviceState {
    /// What `UBLK_U_CMD_GET_DEV_INFO` reports, but for its `state`, which `life` gives.
    pub(crate) info: DevInfo,
    /// The parameters set with `UBLK_U_CMD_SET_PARAMS`.
    pub(crate) params: Params,
    /// Where the device is in its life.
    pub(crate) life: Lifecycle,
    /// Who serves the device.
    pub(crate) server: Server,
    /// Keeps the module loaded while the release of `/dev/ublkcN` waits for io_uring to release
    /// the buffers of the server ([`UblkDevice::release`]).
    pub(crate) release_pin: Option<ModuleRef>,
}

impl DeviceState {
    /// Returns the disk, if the device is live.
    pub(crate) fn disk(&self) -> Option<&Arc<GenDisk<DiskOps>>> {
        match &self.life {
            Lifecycle::Live(disk) => Some(disk),
            Lifecycle::Added | Lifecycle::Stopped => None,
        }
    }

    /// Returns the device information, with its state.
    pub(crate) fn info(&self) -> DevInfo {
        let mut info = self.info;
        info.state = match self.life {
            Lifecycle::Live(_) => uapi::S_DEV_LIVE,
            Lifecycle::Added | Lifecycle::Stopped => uapi::S_DEV_DEAD,
        };
        info
    }

    /// Returns how many io slots the server fetched.
    pub(crate) fn nr_fetched(&self) -> u32 {
        match self.server {
            Server::Attached { nr_fetched, .. } => nr_fetched,
            Server::Detached => 0,
        }
    }
}

/// A ublk device.
#[pin_data]
pub(crate) struct UblkDevice {
    /// The device number N of `/dev/ublkcN` and `/dev/ublkbN`.
    pub(crate) id: u32,
    /// The number of queues.
    pub(crate) nr_queues: u16,
    /// The number of io slots of each queue.
    pub(crate) depth: u16,
    /// The feature flags (`UBLK_F_*`) that the device got at `UBLK_U_CMD_ADD_DEV`.
    pub(crate) flags: u64,
    /// The state of the device.
    #[pin]
    pub(crate) state: Mutex<DeviceState>,
    /// The buffers that the server registered with `UBLK_U_CMD_REG_BUF` ([`shmem`]). Held by the
    /// commands that change them, around the freeze of the disk's queue, and by
    /// [`UblkDevice::stop`] while it deletes the disk, as the C driver holds its device mutex
    /// across `del_gendisk()`. Declared after `state`: when the device is freed, a disk still in
    /// `state` is deleted, its requests drained, before the buffers' pages are unpinned.
    #[pin]
    pub(crate) shmem: Mutex<shmem::Buffers>,
    /// The address space that mapped the io descriptors first; the only one that may map them.
    /// Not part of `state`: `mmap` holds the mmap lock, which faults on user memory take, and the
    /// device lock is held across such copies.
    #[pin]
    pub(crate) server_mm: SpinLock<Option<ARef<Mm>>>,
    /// Whether the device is live, as the C driver's `UBLK_S_DEV_LIVE`: from just before its disk
    /// is added until just after it is deleted. Only user copies read it, without the device
    /// lock; `life` is what the rest of the driver goes by.
    live: Atomic<bool>,
    /// Signalled when the server fetched all io slots, and when it closed `/dev/ublkcN`.
    #[pin]
    pub(crate) ready: CondVar,
    /// Reads the partition table once the device is started.
    #[pin]
    scan_work: Work<UblkDevice, SCAN_WORK>,
    /// Finishes the release of `/dev/ublkcN` when registered buffers still hold requests of the
    /// server that closed it ([`UblkDevice::release`]).
    #[pin]
    release_work: DelayedWork<UblkDevice, RELEASE_WORK>,
    /// The tag set of the device's disk.
    pub(crate) tag_set: Arc<TagSet<DiskOps>>,
    /// The queues, with their io slots.
    pub(crate) queues: Arc<Queues>,
}

impl UblkDevice {
    /// Creates the device described by `info`, which was validated by `UBLK_U_CMD_ADD_DEV`.
    pub(crate) fn new(info: DevInfo) -> Result<Arc<Self>> {
        let tag_set = Arc::pin_init(
            queue::new_tag_set(info.nr_hw_queues, info.queue_depth),
            GFP_KERNEL,
        )?;
        let queues = Queues::new(info.nr_hw_queues, info.queue_depth, info.flags)?;
        Arc::pin_init(
            try_pin_init!(Self {
                id: info.dev_id,
                nr_queues: info.nr_hw_queues,
                depth: info.queue_depth,
                flags: info.flags,
                state <- new_mutex!(DeviceState {
                    info,
                    params: Params::new(),
                    life: Lifecycle::Added,
                    server: Server::Detached,
                    release_pin: None,
                }),
                shmem <- new_mutex!(shmem::Buffers::new()),
                server_mm <- new_spinlock!(None),
                live: Atomic::new(false),
                ready <- new_condvar!(),
                scan_work <- new_work!("UblkDevice::scan_work"),
                release_work <- new_delayed_work!("UblkDevice::release_work"),
                tag_set,
                queues,
            }),
            GFP_KERNEL,
        )
    }

    /// Returns the number of queues of the device.
    pub(crate) fn nr_queues(&self) -> u16 {
        self.nr_queues
    }

    /// Returns the number of io slots of the device, over all queues.
    pub(crate) fn nr_ios(&self) -> u32 {
        u32::from(self.nr_queues()) * u32::from(self.depth)
    }

    /// `UBLK_U_CMD_START_DEV`: waits until the server fetched every io slot, then adds the disk
    /// and queues the scan of its partition table, which the server serves once it learns that
    /// the device is started.
    pub(crate) fn start(this: &Arc<Self>, pid: i32) -> Result {
        if pid <= 0 {
            return Err(EINVAL);
        }
        let mut state = this.state.lock();
        if state.params.types() & params::TYPE_BASIC == 0 {
            return Err(EINVAL);
        }
        while state.nr_fetched() < this.nr_ios() && !this.is_stopping() {
            if this.ready.wait_interruptible(&mut state) {
                return Err(EINTR);
            }
        }
        if !matches!(state.server, Server::Attached { tgid, .. } if tgid == pid) {
            return Err(EINVAL);
        }
        if state.disk().is_some() {
            return Err(EEXIST);
        }
        // Stopped while the server stayed: it must close `/dev/ublkcN` before the device can start
        // again, as with the C driver.
        if this.is_stopping() {
            return Err(EBUSY);
        }
        // The server may copy the data of the requests that adding the disk issues.
        this.live.store(true, Relaxed);
        let disk = state
            .params
            .disk_builder()
            .and_then(|builder| {
                builder.build(
                    fmt!("ublkb{}", this.id),
                    this.tag_set.clone(),
                    this.queues.clone(),
                )
            })
            .and_then(|disk| Ok(Arc::new(disk, GFP_KERNEL)?))
            .inspect_err(|_| this.live.store(false, Relaxed))?;
        if this.flags & F_NO_AUTO_PART_SCAN != 0 {
            // User space reads the partition table when it wants to.
            disk.allow_partition_scan();
        } else {
            // Already queued means a scan is pending, which reads the new disk.
            let _ = workqueue::system_percpu().enqueue::<Arc<Self>, SCAN_WORK>(this.clone());
        }
        state.life = Lifecycle::Live(disk);
        state.info.ublksrv_pid = pid;
        Ok(())
    }

    /// Reads the partition table of the disk, if the device is still started.
    ///
    /// This runs after `UBLK_U_CMD_START_DEV` returned, since it needs the server to serve I/O.
    /// A server that goes away meanwhile fails the I/O, so this does not hold up stopping the
    /// device for long.
    pub(crate) fn scan_partitions(&self) {
        // Not under the lock: the scan waits for the server, and other commands must not.
        let disk = self.state.lock().disk().cloned();
        if let Some(disk) = disk {
            if let Err(e) = disk.scan_partitions() {
                let errno = e.to_errno();
                pr_info!("ublkb{}: partition scan failed: {}\n", self.id, errno);
            }
        }
    }

    /// `UBLK_U_CMD_STOP_DEV`: removes the disk and tells the server to exit.
    ///
    /// Requests in flight when the disk goes away are still served; later server commands
    /// complete with `UBLK_IO_RES_ABORT`.
    pub(crate) fn stop(this: &Arc<Self>) {
        // No registered buffer changes while the disk goes away: those changes freeze the queue
        // of the disk whose requests may name the buffers, which is only dropped below.
        let shmem = this.shmem.lock();
        let old_life = {
            let mut state = this.state.lock();
            let life = match state.life {
                Lifecycle::Added => Lifecycle::Added,
                Lifecycle::Live(_) | Lifecycle::Stopped => Lifecycle::Stopped,
            };
            core::mem::replace(&mut state.life, life)
        };
        // A `UBLK_U_CMD_START_DEV` that waits for the server's fetch commands gives up.
        this.ready.notify_all();
        // Not under the device lock, which the scan takes. The scan's I/O is served by the server,
        // or fails if it is gone. Once it is cancelled or done, no one else holds the disk.
        Self::cancel_scan(this);
        // Dropping the disk deletes it, which waits for the requests in flight.
        drop(old_life);
        drop(shmem);
        // Only then, as the C driver does, a server that has `/dev/ublkcN` open is told to exit:
        // `UBLK_U_CMD_STOP_DEV` returns right after, before the server can delete the device
        // itself (libublk servers do on exit), so the tool that stopped it deletes it first.
        // Without a server there is no command to abort, and the next server must be able to
        // fetch. A device started again meanwhile keeps its server.
        let state = this.state.lock();
        if !matches!(state.life, Lifecycle::Live(_)) {
            this.live.store(false, Relaxed);
            if matches!(state.server, Server::Attached { .. }) {
                io::stop_all(this);
            }
        }
    }

    /// Returns whether the device is live (`UBLK_S_DEV_LIVE`), as user copies see it.
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Relaxed)
    }

    /// Returns whether the device was stopped while its server stayed: its queues abort the
    /// server's commands until it closes `/dev/ublkcN`.
    fn is_stopping(&self) -> bool {
        self.queues
            .iter()
            .any(|q| q.state() == QueueState::Stopping)
    }

    /// Cancels the partition scan, or waits for it to end if it runs.
    pub(crate) fn cancel_scan(this: &Arc<Self>) {
        Work::<Self, SCAN_WORK>::cancel_sync(this);
    }

    /// Returns whether the device is started, with a disk.
    pub(crate) fn is_started(&self) -> bool {
        self.state.lock().disk().is_some()
    }

    /// The server closed `/dev/ublkcN`: the requests it was serving fail, the device stops, and
    /// a new server may open it.
    ///
    /// A request whose data is still registered as a buffer of one of the server's rings ends
    /// only once io_uring releases the buffer: possibly when the task that closed the file, which
    /// is in this function, tears the ring down, or never, if the ring outlives the server.
    /// Stopping the device waits for the requests, so, as the C driver does, a work item then
    /// looks again every jiffy until the slots got back every request they lent, and finishes
    /// the release only then, without waiting. Meanwhile it keeps the module loaded, since
    /// io_uring calls back into it, the server stays attached (a new server cannot open
    /// `/dev/ublkcN` yet), and `UBLK_U_CMD_DEL_DEV` waits.
    pub(crate) fn release(this: Arc<Self>) {
        if io::abort_all(&this) {
            this.state.lock().release_pin =
                Some(<crate::RustUblk as ModuleMetadata>::THIS_MODULE.get());
            // A device has one opener, so the work item is not queued already.
            let _ = workqueue::system().enqueue::<Arc<Self>, RELEASE_WORK>(this);
        } else {
            Self::finish_release(&this);
        }
    }

    /// Finishes [`UblkDevice::release`] once the server's requests failed.
    fn finish_release(this: &Arc<Self>) {
        // Without user recovery, a started device dies with its server: its disk goes away, and
        // the device can only be deleted.
        Self::stop(this);
        io::reset_all(this);
        let mm = this.server_mm.lock().take();
        drop(mm);
        this.state.lock().server = Server::Detached;
        this.ready.notify_all();
    }

    /// Returns whether a server has `/dev/ublkcN` open.
    pub(crate) fn has_server(&self) -> bool {
        matches!(self.state.lock().server, Server::Attached { .. })
    }

    /// Waits until the server closed `/dev/ublkcN`.
    pub(crate) fn wait_released(&self) -> Result {
        let mut state = self.state.lock();
        while matches!(state.server, Server::Attached { .. }) {
            if self.ready.wait_interruptible(&mut state) {
                return Err(EINTR);
            }
        }
        Ok(())
    }

    /// Returns the device numbers of the disk, `0:0` if the device is not started.
    pub(crate) fn disk_devt(&self) -> (u32, u32) {
        self.state.lock().disk().map(|d| d.devt()).unwrap_or((0, 0))
    }
}

impl_has_work! {
    impl HasWork<Self, SCAN_WORK> for UblkDevice { self.scan_work }
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self, RELEASE_WORK> for UblkDevice { self.release_work }
}

/// The identity of [`UblkDevice::scan_work`] among the work items of a device.
const SCAN_WORK: u64 = 0;
/// The identity of [`UblkDevice::release_work`] among the work items of a device.
const RELEASE_WORK: u64 = 1;

impl WorkItem<RELEASE_WORK> for UblkDevice {
    type Pointer = Arc<UblkDevice>;

    fn run(this: Arc<UblkDevice>) {
        if io::any_lent(&this) {
            // io_uring still holds requests of the device: look again in a jiffy.
            let _ = workqueue::system().enqueue_delayed::<Arc<Self>, RELEASE_WORK>(this, 1);
            return;
        }
        Self::finish_release(&this);
        let pin = this.state.lock().release_pin.take();
        drop(this);
        // Last: the module may go away once this is dropped.
        drop(pin);
    }
}

impl WorkItem<SCAN_WORK> for UblkDevice {
    type Pointer = Arc<UblkDevice>;

    fn run(this: Arc<UblkDevice>) {
        this.scan_partitions();
    }
}
