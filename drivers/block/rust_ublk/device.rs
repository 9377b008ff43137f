// SPDX-License-Identifier: GPL-2.0

//! A ublk device: its configuration, its state, and starting and stopping its disk.

use crate::{
    features::{
        F_AUTO_BUF_REG, F_NO_AUTO_PART_SCAN, F_QUIESCE, F_SUPPORT_ZERO_COPY, F_USER_RECOVERY,
    },
    params::{self, Params},
    queue::{self, DiskOps, Queue, QueueState, Queues},
    release::Releases,
    shmem, teardown,
    uapi::{self, DevInfo},
    unpriv::Owner,
};
use kernel::{
    block::mq::{gen_disk::GenDisk, TagSet},
    cred::{capable, Capability},
    current,
    list::{impl_list_arc_safe, impl_list_item, AtomicTracker, ListLinks, TryNewListArc},
    mm::Mm,
    new_condvar, new_mutex, new_spinlock,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        rcu, Arc, CondVar, Mutex, MutexGuard, SpinLock,
    },
    task::Pid,
    time::{delay::fsleep, Delta},
    warn_on,
    workqueue::{self, impl_has_work, new_work, Work, WorkItem},
    ModuleMetadata, ModuleRef,
};

/// Where a device is in its life.
///
/// ```text
///              UBLK_U_CMD_START_DEV               the server closes /dev/ublkcN
///   Added ------------------------------> Live(disk) -----------------------> Quiesced(disk)
///                                          |   ^     with user recovery       FailIo(disk)
///                                          |   |                                   |
///                                          |   '-- UBLK_U_CMD_END_USER_RECOVERY ---+
///                                          |                                       |
///                                          | UBLK_U_CMD_STOP_DEV, UBLK_U_CMD_DEL_DEV,
///                                          | the server closes /dev/ublkcN (no recovery)
///              UBLK_U_CMD_START_DEV        v                                       |
///   (a server fetched all io slots) <--- Stopped <---------------------------------+
/// ```
///
/// `UBLK_U_CMD_GET_DEV_INFO` reports `Live` as `UBLK_S_DEV_LIVE`, `Quiesced` as
/// `UBLK_S_DEV_QUIESCED`, `FailIo` as `UBLK_S_DEV_FAIL_IO`, the others as `UBLK_S_DEV_DEAD`.
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
    /// The server of a started device with `UBLK_F_USER_RECOVERY` went away: the disk stays, and
    /// its requests wait for a new server, which `UBLK_U_CMD_END_USER_RECOVERY` makes live.
    Quiesced(Arc<GenDisk<DiskOps>>),
    /// As `Quiesced`, with `UBLK_F_USER_RECOVERY_FAIL_IO`: requests fail meanwhile.
    FailIo(Arc<GenDisk<DiskOps>>),
}

/// Whether a server has `/dev/ublkcN` open (it has a single opener).
pub(crate) enum Server {
    /// No process has `/dev/ublkcN` open.
    Detached,
    /// The process `tgid` opened `/dev/ublkcN`, and `nr_fetched` io slots were fetched through
    /// it, by that process or another one that shares the file; the device can start once all
    /// are, and `UBLK_U_CMD_START_DEV` must name the process that opened it, in the pid namespace
    /// of its caller: servers written against ublk_drv name that one.
    Attached {
        /// The thread group that opened `/dev/ublkcN`, numbered in the initial pid namespace.
        tgid: Pid,
        /// How many io slots it fetched.
        nr_fetched: u32,
        /// Whether every process that fetched io slots had `CAP_SYS_ADMIN`; if not, the
        /// partitions of the disk are not scanned, as with ublk_drv: the kernel reads no
        /// partition table that an untrusted server serves.
        trusted: bool,
    },
}

/// The state of a device that commands change, under [`UblkDevice::state`].
pub(crate) struct DeviceState {
    /// What `UBLK_U_CMD_GET_DEV_INFO` reports, but for its `state`, which `life` gives, and for
    /// its `ublksrv_pid`, which is kept as the initial pid namespace numbers the server
    /// ([`DeviceState::info`] gives it as the caller sees it).
    pub(crate) info: DevInfo,
    /// The parameters set with `UBLK_U_CMD_SET_PARAMS`.
    pub(crate) params: Params,
    /// Where the device is in its life.
    pub(crate) life: Lifecycle,
    /// Who serves the device.
    server: Server,
    /// How many io slots of each queue the server fetched: a queue whose requests wait for a
    /// new server (user recovery) is served again once it has them all.
    pub(crate) queue_fetched: KVec<u16>,
    /// Whether [`UblkDevice::stop`] is deleting the disk, which the release of `/dev/ublkcN`
    /// waits for before it looks at the device's life.
    pub(crate) deleting: bool,
    /// How many [`UblkDevice::stop`] run: `UBLK_U_CMD_START_DEV` waits until none does, so that
    /// it neither adds a disk while the old one is deleted nor makes live a device being stopped.
    stopping: u32,
    /// Whether the device was deleted (`UBLK_U_CMD_DEL_DEV`): `/dev/ublkcN` cannot be opened any
    /// more.
    deleted: bool,
    /// Whether `/dev/ublkcN` was removed and released: the last file of it was closed, and its
    /// char device and `struct device` are freed ([`crate::chardev::CharDevData`]).
    pub(crate) char_dev_released: bool,
}

impl DeviceState {
    /// Returns the disk, if the device has one: live, or waiting for a new server.
    pub(crate) fn disk(&self) -> Option<&Arc<GenDisk<DiskOps>>> {
        match &self.life {
            Lifecycle::Live(disk) | Lifecycle::Quiesced(disk) | Lifecycle::FailIo(disk) => {
                Some(disk)
            }
            Lifecycle::Added | Lifecycle::Stopped => None,
        }
    }

    /// Returns the device information, with its state, as the calling task sees it: the server's
    /// pid as the caller's pid namespace numbers it, or -1 if the server is gone or not seen from
    /// there (`info` keeps it numbered in the initial pid namespace).
    pub(crate) fn info(&self) -> DevInfo {
        let mut info = self.info;
        if info.ublksrv_pid > 0 {
            info.ublksrv_pid = current!()
                .global_tgid_to_vnr(info.ublksrv_pid)
                .unwrap_or(-1);
        }
        info.state = match self.life {
            Lifecycle::Live(_) => uapi::S_DEV_LIVE,
            Lifecycle::Quiesced(_) => uapi::S_DEV_QUIESCED,
            Lifecycle::FailIo(_) => uapi::S_DEV_FAIL_IO,
            Lifecycle::Added | Lifecycle::Stopped => uapi::S_DEV_DEAD,
        };
        info
    }

    /// Checks that the server may fetch one more io slot, `pending` slots besides those it
    /// fetched already: `EBUSY` once it would have fetched them all.
    pub(crate) fn may_fetch(&self, dev: &UblkDevice, pending: u32) -> Result {
        match self.server {
            // Fetching is over once every io slot was fetched.
            Server::Attached { nr_fetched, .. } if nr_fetched + pending >= dev.nr_ios() => {
                Err(EBUSY)
            }
            Server::Attached { .. } => Ok(()),
            // A command keeps `/dev/ublkcN` open, so the server is attached.
            Server::Detached => Err(EINVAL),
        }
    }

    /// Counts `n` io slots of `queue`, queue `q_id` of `dev`, that the current process fetched:
    /// it is the server from now on (see [`Server::Attached`]). Once the server has all the slots
    /// of the queue, the queue is served again if it waited for a new server, unless the server
    /// is going away already (`ublk_mark_io_ready()`); once it has every slot of the device,
    /// `UBLK_U_CMD_START_DEV` and `UBLK_U_CMD_END_USER_RECOVERY` go ahead.
    pub(crate) fn count_fetched(&mut self, dev: &UblkDevice, queue: &Queue, q_id: u16, n: u16) {
        let Server::Attached {
            nr_fetched,
            trusted,
            ..
        } = &mut self.server
        else {
            // The callers checked with `may_fetch`, under the same lock.
            warn_on!(true);
            return;
        };
        *nr_fetched += u32::from(n);
        // The disk's partitions are not scanned once a process without `CAP_SYS_ADMIN` fetched.
        *trusted = *trusted && capable(Capability::SYS_ADMIN);
        let all = *nr_fetched == dev.nr_ios();
        if let Some(fetched) = self.queue_fetched.get_mut(usize::from(q_id)) {
            // A slot is fetched once per server, so this stays within the depth.
            *fetched = fetched.saturating_add(n);
            if *fetched >= dev.depth {
                // Under the lock with which a cancellation fails the queues: a queue is not
                // served again once the server's commands are being cancelled.
                let canceled = dev.canceled.lock();
                if !*canceled {
                    queue.serve_again();
                }
            }
        }
        if all {
            dev.ready.notify_all();
        }
    }

    /// The current process opened `/dev/ublkcN`: it is the server from now on. `EBUSY` if a
    /// server has it open already (one opener at a time), `ENXIO` if the device was deleted
    /// (deleted devices are not served any more, even if a file of theirs was looked up before
    /// the deletion).
    pub(crate) fn attach_server(&mut self) -> Result {
        if matches!(self.server, Server::Attached { .. }) {
            return Err(EBUSY);
        }
        if self.deleted {
            return Err(ENXIO);
        }
        self.server = Server::Attached {
            tgid: current!().tgid(),
            nr_fetched: 0,
            trusted: true,
        };
        Ok(())
    }

    /// Forgets the server and the io slots it fetched.
    fn detach_server(&mut self) {
        self.server = Server::Detached;
        for fetched in self.queue_fetched.iter_mut() {
            *fetched = 0;
        }
    }

    /// Returns whether the device is released: its server is gone and its removed `/dev/ublkcN`
    /// is freed, so that its number can go to another device.
    pub(crate) fn is_released(&self) -> bool {
        self.char_dev_released && matches!(self.server, Server::Detached)
    }

    /// The device is deleted: no server attaches from now on, and it is never started again.
    pub(crate) fn mark_deleted(&mut self) {
        self.deleted = true;
    }

    /// Returns how many io slots the server fetched.
    pub(crate) fn nr_fetched(&self) -> u32 {
        match self.server {
            Server::Attached { nr_fetched, .. } => nr_fetched,
            Server::Detached => 0,
        }
    }

    /// Returns the thread group of the server that fetched the io slots, numbered in the initial
    /// pid namespace, if `pid`, which the caller numbers in its own pid namespace, names it
    /// (`ublk_validate_user_pid()`): the server and the process that controls the device may live
    /// in different pid namespaces.
    pub(crate) fn server_named(&self, pid: Pid) -> Option<Pid> {
        match self.server {
            Server::Attached { tgid, .. } => {
                (Some(tgid) == current!().vnr_to_global_nr(pid)).then_some(tgid)
            }
            Server::Detached => None,
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
    /// The size in bytes of each io descriptor in the server's mapping (`UBLK_F_IO_DESC_SIZE`).
    pub(crate) io_desc_size: u16,
    /// The state of the device.
    #[pin]
    pub(crate) state: Mutex<DeviceState>,
    /// The buffers that the server registered with `UBLK_U_CMD_REG_BUF` ([`shmem`]). Held by the
    /// commands that change them, around the freeze of the disk's queue, and by
    /// [`UblkDevice::stop`] while it deletes the disk, so that these commands always find the disk
    /// to freeze while it has requests in flight, and by the release of the device, which
    /// unregisters them all ([`shmem::unregister_all`]). Declared after `state`: when the device
    /// is freed, a disk still in `state` is deleted, its requests drained, before the buffers'
    /// pages are unpinned.
    #[pin]
    pub(crate) shmem: Mutex<shmem::Buffers>,
    /// Whether io_uring cancelled a command of the server, or `UBLK_U_CMD_QUIESCE_DEV` quiesced it:
    /// its queues are not served again until the next server. Not part of `state`: the cancellation
    /// of the server's commands, which sets it, must not wait for the device lock, which
    /// `UBLK_U_CMD_START_DEV` holds while a zoned disk reads its zones from the server.
    #[pin]
    pub(crate) canceled: Mutex<bool>,
    /// The module reference that the release of `/dev/ublkcN` leaves for its work item, which
    /// keeps the module loaded until it returned, also while the release waits for io_uring to
    /// give back requests ([`UblkDevice::release`]). Not part of `state`, for the same reason as
    /// `canceled`.
    #[pin]
    release_pin: Mutex<Option<ModuleRef>>,
    /// The address space that mapped the io descriptors first; the only one that may map them.
    /// Not part of `state`: `mmap` holds the mmap lock, which faults on user memory take, and the
    /// device lock is held across such copies.
    #[pin]
    pub(crate) server_mm: SpinLock<Option<ARef<Mm>>>,
    /// Whether the device is live (`UBLK_S_DEV_LIVE`): from just before its disk is added until
    /// just after it is deleted. Only user copies read it, without the device lock; `life` is what
    /// the rest of the driver goes by.
    live: Atomic<bool>,
    /// Signalled when the server fetched all io slots, and when it closed `/dev/ublkcN`.
    #[pin]
    pub(crate) ready: CondVar,
    /// Reads the partition table once the device is started.
    #[pin]
    scan_work: Work<UblkDevice, SCAN_WORK>,
    /// Finishes the release of `/dev/ublkcN` ([`UblkDevice::release`]).
    #[pin]
    release_work: Work<UblkDevice, RELEASE_WORK>,
    /// The module's releases: the queue that `release_work` runs on, and the devices whose
    /// release waits for io_uring to give back requests.
    releases: Arc<Releases>,
    /// Links the device into the list of [`Releases`] while its release waits.
    #[pin]
    waiting_links: ListLinks,
    /// Whether the device is on that list.
    #[pin]
    waiting_tracker: AtomicTracker,
    /// The tag set of the device's disk.
    pub(crate) tag_set: Arc<TagSet<DiskOps>>,
    /// The queues, with their io slots.
    pub(crate) queues: Arc<Queues>,
}

impl UblkDevice {
    /// Creates the device described by `info`, which was validated by `UBLK_U_CMD_ADD_DEV`.
    pub(crate) fn new(info: DevInfo, releases: Arc<Releases>) -> Result<Arc<Self>> {
        let tag_set = Arc::pin_init(
            queue::new_tag_set(info.nr_hw_queues, info.queue_depth),
            GFP_KERNEL,
        )?;
        let owner = Owner {
            uid: info.owner_uid,
            gid: info.owner_gid,
        };
        let queues = Queues::new(
            info.nr_hw_queues,
            info.queue_depth,
            info.io_desc_size,
            info.flags,
            owner,
        )?;
        let queue_fetched = KVec::from_elem(0, info.nr_hw_queues.into(), GFP_KERNEL)?;
        Arc::pin_init(
            try_pin_init!(Self {
                id: info.dev_id,
                nr_queues: info.nr_hw_queues,
                depth: info.queue_depth,
                flags: info.flags,
                io_desc_size: info.io_desc_size,
                state <- new_mutex!(DeviceState {
                    info,
                    params: Params::new(),
                    life: Lifecycle::Added,
                    server: Server::Detached,
                    queue_fetched,
                    deleting: false,
                    stopping: 0,
                    deleted: false,
                    char_dev_released: false,
                }),
                shmem <- new_mutex!(shmem::Buffers::new()),
                canceled <- new_mutex!(false),
                release_pin <- new_mutex!(None),
                server_mm <- new_spinlock!(None),
                live: Atomic::new(false),
                ready <- new_condvar!(),
                scan_work <- new_work!("UblkDevice::scan_work"),
                release_work <- new_work!("UblkDevice::release_work"),
                releases,
                waiting_links <- ListLinks::new(),
                waiting_tracker <- AtomicTracker::new(),
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
    /// the device is started. `ENODEV` if io_uring cancelled a fetch command of the server
    /// meanwhile: the device can then be deleted, or started by a new server once this one closed
    /// `/dev/ublkcN`.
    pub(crate) fn start(this: &Arc<Self>, pid: i32) -> Result {
        if pid <= 0 {
            return Err(EINVAL);
        }
        let mut state = this.state.lock();
        if state.params.types() & params::TYPE_BASIC == 0 {
            return Err(EINVAL);
        }
        while (state.nr_fetched() < this.nr_ios() || state.stopping > 0)
            && !this.is_stopping()
            && !state.deleted
        {
            if this.ready.wait_interruptible(&mut state) {
                return Err(EINTR);
            }
        }
        // A deleted device is never started: no server can attach to it any more (ublk_drv would
        // wait for one until interrupted).
        if state.deleted && matches!(state.server, Server::Detached) {
            return Err(ENODEV);
        }
        let Some(tgid) = state.server_named(pid) else {
            return Err(EINVAL);
        };
        if state.disk().is_some() {
            return Err(EEXIST);
        }
        // Stopped while the server stayed: it must close `/dev/ublkcN` before the device can start
        // again, since its queues abort the server's commands until then. ublk_drv refuses the
        // start with `EBUSY` too.
        if this.is_stopping() {
            return Err(EBUSY);
        }
        // Nor by its server, which the stop that the deletion runs tells to exit.
        if state.deleted {
            return Err(ENODEV);
        }
        // A fetch command that io_uring cancelled (its ring went, or its task exec'd) left its io
        // slot without a command, and no one may fetch that slot before the next server: the
        // queues are not served again until then, so every request of the disk would fail, or
        // wait for that server with the partition scan holding the disk's `open_mutex`.
        if *this.canceled.lock() {
            return Err(ENODEV);
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
        if matches!(state.server, Server::Attached { trusted: false, .. }) {
            // A server that may not be trusted could make a scan wait for ever holding the
            // disk's `open_mutex`: partitions are never scanned.
        } else if this.flags & F_NO_AUTO_PART_SCAN != 0 {
            // User space reads the partition table when it wants to.
            disk.allow_partition_scan();
        } else {
            // Already queued means a scan is pending, which reads the new disk.
            let _ = workqueue::system_percpu().enqueue::<Arc<Self>, SCAN_WORK>(this.clone());
        }
        state.life = Lifecycle::Live(disk);
        state.info.ublksrv_pid = tgid;
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
        // Requests that wait for a new server (user recovery) would hold up the deletion of the
        // disk, and a freeze of its queue by `UBLK_U_CMD_REG_BUF` under `shmem`: they fail now,
        // and so do later ones (`ublk_force_abort_dev()`), before this waits for anything. This
        // comes before the partition scan is cancelled, whose read may be one of them.
        let shelved = {
            let state = this.state.lock();
            match state.disk() {
                Some(disk) if this.queues.iter().any(|q| q.recovery.requeues()) => {
                    for queue in this.queues.iter() {
                        queue.set_state(QueueState::Stopping);
                    }
                    queue::sync_shelving();
                    disk.kick_requeue_list();
                    true
                }
                _ => false,
            }
        };
        // No registered buffer changes while the disk goes away: those changes freeze the queue
        // of the disk whose requests may name the buffers, which is only dropped below.
        let shmem = this.shmem.lock();
        let old_life = {
            let mut state = this.state.lock();
            let life = match state.life {
                Lifecycle::Added => Lifecycle::Added,
                Lifecycle::Live(_)
                | Lifecycle::Quiesced(_)
                | Lifecycle::FailIo(_)
                | Lifecycle::Stopped => Lifecycle::Stopped,
            };
            let old_life = core::mem::replace(&mut state.life, life);
            state.stopping += 1;
            if matches!(
                old_life,
                Lifecycle::Live(_) | Lifecycle::Quiesced(_) | Lifecycle::FailIo(_)
            ) {
                state.deleting = true;
                // A stopped device has no server to report, whether or not its process still
                // runs: `UBLK_U_CMD_GET_DEV_INFO` gives -1, as ublk_drv's `ublk_detach_disk()`
                // sets it.
                state.info.ublksrv_pid = -1;
            }
            old_life
        };
        // A `UBLK_U_CMD_START_DEV` or `UBLK_U_CMD_END_USER_RECOVERY` that waits for the server's
        // fetch commands gives up.
        this.ready.notify_all();
        let had_disk = !matches!(old_life, Lifecycle::Added | Lifecycle::Stopped);
        // Not under the device lock, which the scan takes. The scan's I/O is served by the server,
        // or fails if it is gone. Once it is cancelled or done, no one else holds the disk.
        Self::cancel_scan(this);
        // Dropping the disk deletes it, which waits for the requests in flight.
        drop(old_life);
        drop(shmem);
        // Only then a server that has `/dev/ublkcN` open is told to exit: `UBLK_U_CMD_STOP_DEV`
        // returns right after, before the server can delete the device itself (libublk servers do
        // on exit), so the tool that stopped it deletes it first. Without a server there is no
        // command to abort, and the next server must be able to fetch. In the same hold as the
        // end of the stop, which a `UBLK_U_CMD_START_DEV` waits for: it then finds the queues
        // stopping (`EBUSY`) or waits for a new server's fetches. So the device is not live here
        // (`UBLK_U_CMD_END_USER_RECOVERY` refuses a stopped device too); checked all the same.
        let mut state = this.state.lock();
        state.stopping -= 1;
        if had_disk {
            state.deleting = false;
        }
        this.ready.notify_all();
        if !matches!(state.life, Lifecycle::Live(_)) {
            this.live.store(false, Relaxed);
            if matches!(state.server, Server::Attached { .. }) {
                teardown::stop_all(this);
            } else if shelved {
                for queue in this.queues.iter() {
                    queue.set_state(QueueState::Serving);
                }
            }
        }
    }

    /// `UBLK_U_CMD_QUIESCE_DEV`: makes the server of a live device go away without losing its
    /// requests, as if it had been killed, so that a new one can take over
    /// (`ublk_ctrl_quiesce_dev()`).
    ///
    /// New requests wait from now on; the server's waiting commands complete with
    /// `UBLK_IO_RES_ABORT`, and so do those it sends from then on; once it closed `/dev/ublkcN`,
    /// the device is quiesced (`UBLK_S_DEV_QUIESCED`).
    ///
    /// It does not wait for each queue to have a fetch command that waits for a request (every
    /// command of the server gets `UBLK_IO_RES_ABORT`, at once or at its next commit), so a
    /// timeout that runs out does not fail it with `EBUSY` as with ublk_drv, whose server would
    /// not be told otherwise. What it keeps of that wait are the answers that come without
    /// waiting: `EINTR` on a pending signal, and `EBUSY` for a timeout of no time (without batch
    /// io), after which requests wait until the server goes away.
    pub(crate) fn quiesce(this: &Arc<Self>, timeout_ms: u64) -> Result {
        if this.flags & F_QUIESCE == 0 {
            return Err(EOPNOTSUPP);
        }
        // 0 means no limit, and the value is truncated to an `unsigned int`, so that a multiple of
        // 2^32 is no time at all: ublk_drv truncates it so, and tools get the same timeout.
        // CAST: The truncation.
        let timeout_ms = if timeout_ms == 0 {
            u32::MAX
        } else {
            timeout_ms as u32
        };
        {
            let state = this.state.lock();
            match state.life {
                Lifecycle::Added | Lifecycle::Stopped => return Err(ENODEV),
                Lifecycle::Quiesced(_) | Lifecycle::FailIo(_) => return Ok(()),
                Lifecycle::Live(_) => {}
            }
            *this.canceled.lock() = true;
            teardown::start_cancel(this);
        }
        // The server learns through its commands that it must go: each gets `UBLK_IO_RES_ABORT`,
        // those that wait now below, the others at their next commit, since the queues are no
        // longer served. So nothing is waited for, but the answers that need no wait (see above).
        if this.queues.iter().all(|q| q.events.is_none()) {
            if current!().signal_pending() {
                return Err(EINTR);
            }
            if timeout_ms == 0 {
                return Err(EBUSY);
            }
        }
        teardown::abort_commands(this);
        Ok(())
    }

    /// `UBLK_U_CMD_START_USER_RECOVERY`: checks that a new server may take over the device
    /// (`ublk_ctrl_start_recovery()`). It changes nothing: a new server opens `/dev/ublkcN` and
    /// fetches the io slots, then sends `UBLK_U_CMD_END_USER_RECOVERY`.
    pub(crate) fn start_recovery(&self) -> Result {
        let state = self.state.lock();
        if self.flags & F_USER_RECOVERY == 0 {
            return Err(EINVAL);
        }
        if matches!(state.server, Server::Attached { .. })
            || !matches!(state.life, Lifecycle::Quiesced(_) | Lifecycle::FailIo(_))
        {
            return Err(EBUSY);
        }
        Ok(())
    }

    /// `UBLK_U_CMD_END_USER_RECOVERY`: once the new server `pid` fetched every io slot, the device
    /// is live again, and the requests that waited for it go to it (`ublk_ctrl_end_recovery()`).
    /// `ENODEV` if io_uring cancelled a fetch command of the new server meanwhile: the device can
    /// then be deleted, or recovered again once that server closed `/dev/ublkcN`.
    pub(crate) fn end_recovery(&self, pid: i32) -> Result {
        let mut state = self.state.lock();
        while state.nr_fetched() < self.nr_ios() && !self.is_stopping() {
            if self.ready.wait_interruptible(&mut state) {
                return Err(EINTR);
            }
        }
        let Some(tgid) = state.server_named(pid) else {
            return Err(EINVAL);
        };
        if self.flags & F_USER_RECOVERY == 0 {
            return Err(EINVAL);
        }
        let disk = match &state.life {
            Lifecycle::Quiesced(disk) | Lifecycle::FailIo(disk) => disk.clone(),
            _ => return Err(EBUSY),
        };
        // A fetch command of the new server that io_uring cancelled: its queues are not served
        // again until the next server (see `UblkDevice::start`).
        if *self.canceled.lock() {
            return Err(ENODEV);
        }
        state.life = Lifecycle::Live(disk.clone());
        state.info.ublksrv_pid = tgid;
        // Every queue is served since the server fetched its io slots; a request put aside under
        // an older state is on the requeue list once this returns.
        queue::sync_shelving();
        disk.kick_requeue_list();
        Ok(())
    }

    /// `UBLK_U_CMD_UPDATE_SIZE`: the device now has `sectors` sectors (`ublk_ctrl_set_size()`).
    ///
    /// Any started device takes it, with or without `UBLK_F_UPDATE_SIZE`, and the size is not
    /// checked; `UBLK_U_CMD_GET_PARAMS` reports it from then on. ublk_drv does the same; tools
    /// written against it expect it.
    pub(crate) fn update_size(&self, sectors: u64) -> Result {
        let mut state = self.state.lock();
        let disk = state.disk().cloned().ok_or(ENODEV)?;
        state.params.set_dev_sectors(sectors);
        disk.set_capacity_and_notify(sectors);
        Ok(())
    }

    /// `UBLK_U_CMD_TRY_STOP_DEV`: stops the device as `UBLK_U_CMD_STOP_DEV` does, unless its disk
    /// is open (`EBUSY`) (`UBLK_F_SAFE_STOP_DEV`, `ublk_ctrl_try_stop_dev()`).
    ///
    /// Unlike with ublk_drv, the disk may be opened between the check and the stop (ublk_drv
    /// refuses opens by tasks without `CAP_SYS_ADMIN` from the check on, and reads the count under
    /// the disk's mutex); the stop then waits for the I/O of that opener, as
    /// `UBLK_U_CMD_STOP_DEV` would.
    pub(crate) fn try_stop(this: &Arc<Self>) -> Result {
        // Not the disk's mutex, which a partition scan holds across its reads, that may wait for
        // a new server: a snapshot is enough, as an open may follow the check anyway. And no
        // reference to the disk: the stop deletes it by dropping the last one.
        let openers = this.state.lock().disk().ok_or(ENODEV)?.openers();
        if openers > 0 {
            return Err(EBUSY);
        }
        Self::stop(this);
        Ok(())
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

    /// The server closed `/dev/ublkcN`: the requests it was serving fail, the device stops, and
    /// a new server may open it.
    ///
    /// Here, requests only start to fail or to wait for a new server; the rest runs in a work
    /// item of the driver's own queue, one per device. The last reference to the file of a
    /// server that was killed is dropped by io_uring's ring exit work, a kernel thread, so that
    /// the file is released by the one work item that finishes every such file of the system,
    /// one after the other; and the rest waits for grace periods and, without user recovery,
    /// deletes the disk, whose deletion may wait for I/O that only the release of another dead
    /// server's device would fail (a file system on one device with its journal on another).
    ///
    /// A request whose data is still registered as a buffer of one of the server's rings ends
    /// only once io_uring releases the buffer: possibly when the task that closed the file tears
    /// the ring down, or never, if the ring outlives the server. Stopping the device waits for
    /// the requests, so the release is finished only once the slots got every request they lent
    /// back. Until then the device waits on the list of [`Releases`], which queues the work item
    /// again then, so that a release that waits takes no worker. Meanwhile the device keeps the
    /// module loaded, since io_uring calls back into it, the server stays attached (a new server
    /// cannot open `/dev/ublkcN` yet), and `UBLK_U_CMD_DEL_DEV` waits.
    ///
    /// The callback through which io_uring gives back the last of them may still be running
    /// when the slots have them all back, in the module's code ([`crate::zerocopy::BufRelease`]).
    /// Before the module's reference goes, one grace period of RCU Tasks makes sure that it
    /// returned: from the give-back on it does not sleep. A device that registers no buffers has
    /// no such callback.
    pub(crate) fn release(this: Arc<Self>) {
        // From now on requests fail, or wait for a new server.
        teardown::start_cancel(&this);
        // The file being released holds a reference to the module (its `owner`), so the module
        // is not going away and this does not fail.
        let pin = <crate::RustUblk as ModuleMetadata>::THIS_MODULE.try_get();
        if warn_on!(pin.is_none()) {
            // Finished here then, in the file's release, which the module outlives: without a
            // reference, the work item could not keep the module loaded while it waits.
            while teardown::any_lent(&this) {
                fsleep(Delta::from_millis(10));
            }
            Self::finish_given_back(&this);
            return;
        }
        // The work item of the server before has taken its own pin: the server detached only in
        // its last steps, and this file could only be opened after that.
        *this.release_pin.lock() = pin;
        let releases = this.releases.clone();
        // A device has one opener, so the work item is neither queued nor waiting already.
        releases.queue_release(this);
    }

    /// The rest of [`UblkDevice::release`], in its work item: finishes the release once io_uring
    /// gave back every request that a slot lent, or makes it wait for that on the list of
    /// [`Releases`].
    fn release_once_given_back(this: Arc<Self>) {
        if teardown::any_lent(&this) {
            // The device keeps the module reference of its release until the work item runs
            // again, which finishes the release and puts it: not before this run returned, since
            // a work item is not reentrant (queued while it runs, it is queued to the pool where
            // it runs, behind itself), so this returns into the module's code, and drops its
            // reference to `releases`, while the module is held.
            let releases = this.releases.clone();
            releases.wait_given_back(this);
            return;
        }
        // This run's pin, taken before the server detaches: once it did, a new server may open
        // `/dev/ublkcN`, and its release leaves a pin for the run it queues.
        let pin = this.release_pin.lock().take();
        Self::finish_given_back(&this);
        drop(this);
        // Last: the module may go away once this is dropped. Its exit destroys the queue that
        // this runs on, which waits for this function to have returned.
        drop(pin);
    }

    /// Finishes the release once io_uring gave back every request that a slot lent.
    fn finish_given_back(this: &Arc<Self>) {
        // The callback that gave the last request back may still be running, in the module's
        // code: it does not sleep from there on (see `zerocopy::BufRelease`), so no task is in it
        // any more once every task switched context voluntarily.
        if this.flags & (F_SUPPORT_ZERO_COPY | F_AUTO_BUF_REG) != 0 {
            rcu::synchronize_rcu_tasks();
        }
        Self::finish_release(this);
    }

    /// Finishes [`UblkDevice::release`] once no buffer holds a request of the server any more:
    /// its requests fail, or wait for a new server, and a new server may open `/dev/ublkcN`.
    fn finish_release(this: &Arc<Self>) {
        teardown::abort_all(this);
        if this.flags & F_USER_RECOVERY == 0 {
            // Without user recovery, a started device dies with its server: its disk goes away,
            // and the device can only be deleted.
            Self::stop(this);
        }
        // The address space is put after the device lock is dropped.
        let mm = this.server_mm.lock().take();
        let released = {
            // One hold: whoever sees the device quiesced sees the server gone, and may start the
            // recovery at once.
            let mut state = this.state.lock();
            let serving = if this.flags & F_USER_RECOVERY == 0 {
                true
            } else {
                Self::wait_for_server(this, &mut state)
            };
            teardown::reset_all(this, serving);
            state.detach_server();
            if let Some(u) = &this.queues.unprivileged {
                u.clear_server();
            }
            *this.canceled.lock() = false;
            state.is_released()
        };
        drop(mm);
        // The server of a deleted device went after its removed `/dev/ublkcN` was released: in
        // the work item, which may run after the file released the char device. Before the
        // wake-up, as above.
        if released {
            this.unregister_buffers();
        }
        this.ready.notify_all();
    }

    /// The server of a device with user recovery went away: a started device keeps its disk and
    /// waits for a new server, its requests put aside or failing meanwhile. Returns whether the
    /// queues are served (the device has no disk).
    fn wait_for_server(this: &Self, state: &mut MutexGuard<'_, DeviceState>) -> bool {
        // A stop that deletes the disk: the device is stopped once it is done. The deletion waits
        // for nothing that this holds: the server's requests failed already.
        while state.deleting {
            this.ready.wait(state);
        }
        let life = core::mem::replace(&mut state.life, Lifecycle::Stopped);
        state.life = match life {
            Lifecycle::Live(disk) | Lifecycle::Quiesced(disk)
                if this.queues.iter().any(|q| q.recovery.requeues()) =>
            {
                Lifecycle::Quiesced(disk)
            }
            Lifecycle::Live(disk) | Lifecycle::FailIo(disk) => {
                // Also after a new server that served some queues went away.
                for queue in this.queues.iter() {
                    queue.fail_io();
                }
                Lifecycle::FailIo(disk)
            }
            other => other,
        };
        // `UBLK_U_CMD_GET_DEV_INFO` reports no server (-1) once it is gone, as ublk_drv does once
        // the server's process has exited.
        state.info.ublksrv_pid = -1;
        state.disk().is_none()
    }

    /// Returns whether the device is released: its server is gone and its removed `/dev/ublkcN`
    /// is freed, so that its number can go to another device.
    pub(crate) fn is_released(&self) -> bool {
        self.state.lock().is_released()
    }

    /// Waits until the device is released (see [`UblkDevice::is_released`]), once its
    /// `/dev/ublkcN` was removed. Interruptible if `interruptible` (a command), not otherwise
    /// (the module's removal, when no file of the device is open any more).
    pub(crate) fn wait_released(&self, interruptible: bool) -> Result {
        let mut state = self.state.lock();
        while !state.is_released() {
            if !interruptible {
                self.ready.wait(&mut state);
            } else if self.ready.wait_interruptible(&mut state) {
                return Err(EINTR);
            }
        }
        Ok(())
    }

    /// Records that the removed `/dev/ublkcN` of the device was released.
    pub(crate) fn record_char_dev_release(&self) {
        let released = {
            let mut state = self.state.lock();
            state.char_dev_released = true;
            state.is_released()
        };
        // Before the wake-up: `UBLK_U_CMD_DEL_DEV` returns once the pages are unpinned.
        if released {
            self.unregister_buffers();
        }
        self.ready.notify_all();
    }

    /// Unregisters the buffers of `UBLK_U_CMD_REG_BUF` of a device that was just released (see
    /// [`UblkDevice::is_released`]) and unpins their pages: nothing uses them any more, since the
    /// device has no disk, and its server is gone. Its number, and the rest of its memory, go
    /// once a command looks the number up, or the module is removed ([`crate::control`]); the
    /// pinned pages, possibly most of a dead server's memory, do not wait for that.
    fn unregister_buffers(&self) {
        shmem::unregister_all(self);
    }

    /// Returns the device numbers of the disk, `0:0` if the device is not started.
    pub(crate) fn disk_devt(&self) -> (u32, u32) {
        self.state.lock().disk().map(|d| d.devt()).unwrap_or((0, 0))
    }
}

impl_has_work! {
    impl HasWork<Self, SCAN_WORK> for UblkDevice { self.scan_work }
}

impl_has_work! {
    impl HasWork<Self, RELEASE_WORK> for UblkDevice { self.release_work }
}

impl_list_arc_safe! {
    impl ListArcSafe<0> for UblkDevice { tracked_by waiting_tracker: AtomicTracker; }
}

impl_list_item! {
    impl ListItem<0> for UblkDevice { using ListLinks { self.waiting_links }; }
}

/// The identity of [`UblkDevice::scan_work`] among the work items of a device.
const SCAN_WORK: u64 = 0;
/// The identity of [`UblkDevice::release_work`] among the work items of a device.
pub(crate) const RELEASE_WORK: u64 = 1;

impl WorkItem<RELEASE_WORK> for UblkDevice {
    type Pointer = Arc<UblkDevice>;

    fn run(this: Arc<UblkDevice>) {
        Self::release_once_given_back(this);
    }
}

impl WorkItem<SCAN_WORK> for UblkDevice {
    type Pointer = Arc<UblkDevice>;

    fn run(this: Arc<UblkDevice>) {
        this.scan_partitions();
    }
}
