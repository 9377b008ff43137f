// SPDX-License-Identifier: GPL-2.0

//! A ublk device: its configuration, its state, and starting and stopping its disk.

use crate::{
    features::F_SUPPORT_RQ_AFFINITY,
    io,
    params::{self, Params},
    queue::{self, Queues, UblkQueue},
    uapi::{self, DevInfo},
};
use kernel::{
    block::mq::{gen_disk::GenDisk, TagSet},
    new_condvar, new_mutex, new_spinlock,
    prelude::*,
    sync::{Arc, CondVar, Mutex, SpinLock},
    task::Pid,
};

/// The state of a device that commands change.
pub(crate) struct DeviceState {
    /// What `UBLK_U_CMD_GET_DEV_INFO` reports.
    pub(crate) info: DevInfo,
    /// The parameters set with `UBLK_U_CMD_SET_PARAMS`.
    pub(crate) params: Params,
    /// Whether `/dev/ublkcN` is open. It has a single opener, the ublk server.
    pub(crate) char_open: bool,
    /// How many io slots the server fetched; the device can start once it fetched all.
    pub(crate) nr_fetched: u32,
    /// The disk, `/dev/ublkbN`, while the device is started.
    ///
    /// The partition scan that follows `UBLK_U_CMD_START_DEV` holds a reference too; the disk is
    /// deleted when the last one goes.
    pub(crate) disk: Option<Arc<GenDisk<UblkQueue>>>,
    /// The process that has `/dev/ublkcN` open: the server, which `UBLK_U_CMD_START_DEV` names.
    pub(crate) server_tgid: Option<Pid>,
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
    /// The state of the device.
    #[pin]
    pub(crate) state: Mutex<DeviceState>,
    /// The address space that mapped the io descriptors first; the only one that may map them.
    /// Only compared, never dereferenced. Not part of `state`: `mmap` holds the mmap lock, which
    /// faults on user memory take, and the device lock is held across such copies.
    #[pin]
    pub(crate) server_mm: SpinLock<Option<usize>>,
    /// Signalled when the server fetched all io slots, and when it closed `/dev/ublkcN`.
    #[pin]
    pub(crate) ready: CondVar,
    /// The tag set of the device's disk.
    pub(crate) tag_set: Arc<TagSet<UblkQueue>>,
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
        let rq_affinity = info.flags & F_SUPPORT_RQ_AFFINITY != 0;
        let queues = Queues::new(info.nr_hw_queues, info.queue_depth, rq_affinity)?;
        Arc::pin_init(
            try_pin_init!(Self {
                id: info.dev_id,
                nr_queues: info.nr_hw_queues,
                depth: info.queue_depth,
                state <- new_mutex!(DeviceState {
                    info,
                    params: Params::new(),
                    char_open: false,
                    nr_fetched: 0,
                    disk: None,
                    server_tgid: None,
                }),
                server_mm <- new_spinlock!(None),
                ready <- new_condvar!(),
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

    /// `UBLK_U_CMD_START_DEV`: waits until the server fetched every io slot, then adds the disk.
    pub(crate) fn start(&self, pid: i32) -> Result {
        if pid <= 0 {
            return Err(EINVAL);
        }
        let mut state = self.state.lock();
        if state.params.types() & params::TYPE_BASIC == 0 {
            return Err(EINVAL);
        }
        while state.nr_fetched < self.nr_ios() {
            if self.ready.wait_interruptible(&mut state) {
                return Err(EINTR);
            }
        }
        if state.server_tgid != Some(pid) {
            return Err(EINVAL);
        }
        if state.disk.is_some() {
            return Err(EEXIST);
        }
        let disk = state.params.disk_builder()?.build(
            fmt!("ublkb{}", self.id),
            self.tag_set.clone(),
            self.queues.clone(),
        )?;
        state.disk = Some(Arc::new(disk, GFP_KERNEL)?);
        state.info.state = uapi::S_DEV_LIVE;
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
        let disk = self.state.lock().disk.clone();
        if let Some(disk) = disk {
            if let Err(e) = disk.scan_partitions() {
                pr_info!("ublkb{}: partition scan failed: {:?}\n", self.id, e);
            }
        }
    }

    /// `UBLK_U_CMD_STOP_DEV`: removes the disk and tells the server to exit.
    ///
    /// Requests in flight when the disk goes away are still served; later server commands
    /// complete with `UBLK_IO_RES_ABORT`.
    pub(crate) fn stop(&self) {
        let mut state = self.state.lock();
        // Dropping the disk deletes it, which waits for the requests in flight; if the partition
        // scan still runs, the scan deletes it when it ends, which the abort below hastens.
        drop(state.disk.take());
        state.info.state = uapi::S_DEV_DEAD;
        io::stop_all(self);
    }

    /// Returns whether the device is started, with a disk.
    pub(crate) fn is_started(&self) -> bool {
        self.state.lock().disk.is_some()
    }

    /// Waits until the server closed `/dev/ublkcN`.
    pub(crate) fn wait_released(&self) -> Result {
        let mut state = self.state.lock();
        while state.char_open {
            if self.ready.wait_interruptible(&mut state) {
                return Err(EINTR);
            }
        }
        Ok(())
    }

    /// Returns the device numbers of the disk, `0:0` if the device is not started.
    pub(crate) fn disk_devt(&self) -> (u32, u32) {
        self.state
            .lock()
            .disk
            .as_ref()
            .map(|d| d.devt())
            .unwrap_or((0, 0))
    }
}
