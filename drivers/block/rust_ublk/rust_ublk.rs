// SPDX-License-Identifier: GPL-2.0

//! Userspace block driver (ublk), Rust implementation.
//!
//! A ublk server, a user space process, creates block devices `/dev/ublkbN` and serves their I/O.
//! It talks to the driver with io_uring commands (`IORING_OP_URING_CMD`):
//!
//! - on `/dev/ublk-control`, to add, configure, start, stop and delete devices ([`control`]),
//! - on the per-device `/dev/ublkcN`, to fetch requests and commit their results ([`chardev`]).
//!
//! The UAPI is that of ublk_drv, `include/uapi/linux/ublk_cmd.h` ([`uapi`]), so that its servers
//! and tools work unchanged. The driver
//! advertises in `UBLK_U_CMD_GET_FEATURES` and accepts in `UBLK_U_CMD_ADD_DEV` only the features
//! it implements ([`features`]).
//!
//! `/dev/ublkcN` is the character device `ublkcN` of class `ublk-char`, with minor number `N` in a
//! region of its own (`ublk-char` in `/proc/devices`), below `/dev/ublk-control`: user space
//! lists `/sys/class/ublk-char` to find the devices, reads the device number from
//! `UBLK_PARAM_TYPE_DEVT`, and the permission check of unprivileged devices compares the path
//! it is given with that number.
//!
//! # State
//!
//! - A device ([`device::UblkDevice`]) has a [`device::Lifecycle`] (added, live with a disk,
//!   quiesced or failing I/O while a device with user recovery waits for a new server, stopped)
//!   and a [`device::Server`] (detached, or attached with the count of fetched io slots), both
//!   under the device lock.
//! - Each queue ([`queue::Queue`]) has a [`queue::QueueState`] (serving, dead, stopping, failing
//!   I/O), an atomic, and its io slots ([`slot`]): idle, holding the server's fetch command, or
//!   owning a request that is on its way to the server or that the server serves. A slot has no
//!   lock: a context holds it by moving its atomic phase to "held" ([`slot::Slot::hold`]), and
//!   nobody waits for a held slot. A slot lends its request to user copies and registered
//!   buffers, and keeps a request that ended while lent parked until the last of them gives it
//!   back. [`io`] says who owns a slot and its request when.
//! - With user recovery, a request that no server takes is put aside on the queue's requeue list
//!   without a kick ([`queue::NoServer`]), in the RCU read-side critical section in which the
//!   queue's state was read (blk-mq's `queue_rq`, or [`slot::Held::without_server`]). Whoever
//!   changes the state so that such requests must move (`UBLK_U_CMD_END_USER_RECOVERY`, stopping
//!   the device) changes it, then waits for an RCU grace period ([`queue::sync_shelving`]), then
//!   kicks the list: no request put aside under the old state is missed.
//!
//! # Locks
//!
//! From outermost to innermost; a lock is only taken while holding the ones above it:
//!
//! 1. The ring lock (`uring_lock`) of the io_uring that issues a command inline. Io commands that
//!    io_uring issues from its workers, without it, are issued again from task work of the server
//!    thread, with it ([`chardev`]), so that the device lock is only ever taken under it. No
//!    control command but `UBLK_U_CMD_GET_FEATURES`, which takes no lock, runs under it: the
//!    others are issued from io_uring's workers ([`control`]).
//! 2. `Control::devices` (mutex): the table of devices. `UBLK_U_CMD_ADD_DEV` holds it while it
//!    creates the device, copies the device information to user space (the mmap lock, on a
//!    fault) and adds `/dev/ublkcN`; `UBLK_U_CMD_DEL_DEV` removes it under it. Lookups take the
//!    device lock under it, to free the number of a deleted device whose server has gone, and so
//!    may the release of a removed `/dev/ublkcN` ([`chardev::CharDevData`]), which records itself
//!    under the device lock, and then, if that released the device, unregisters its
//!    shared-memory buffers under the buffers' lock (4) and unpins their pages.
//!    - `Control::parent` (mutex): the device of `/dev/ublk-control`, taken under the table lock
//!      by `UBLK_U_CMD_ADD_DEV`, or alone by `open` of `/dev/ublk-control`; innermost.
//! 3. No lock of the driver core is held around `open` of `/dev/ublkcN`, which may come after the
//!    device was deleted: `open` refuses a deleted device under the device lock.
//! 4. `UblkDevice::shmem` (mutex): the shared-memory buffers of the server ([`shmem`]).
//!    `UBLK_U_CMD_REG_BUF` and `UBLK_U_CMD_UNREG_BUF` freeze the disk's queue under it, which
//!    waits for the requests in flight (ending them takes none of these locks; requests put
//!    aside for a new server are failed by a stop before it takes this lock);
//!    `UBLK_U_CMD_STOP_DEV` (and whatever stops the device) deletes the disk under it. A device
//!    that is released unregisters its buffers under it, without a disk to freeze.
//! 5. `UblkDevice::state` (mutex): lifecycle, server, parameters. Taken by control commands,
//!    `open`/`release` of `/dev/ublkcN` and `UBLK_U_IO_FETCH_REQ`. `UBLK_U_CMD_START_DEV` adds the
//!    disk under it, and so waits under it for the server to report the zones of a zoned disk:
//!    what the server's exit goes through until its requests failed (the cancellation of its
//!    commands, the release of `/dev/ublkcN` up to [`teardown::abort_all`]) does not take it.
//!    Not held across copies from or to user memory, nor while the disk is deleted or frozen, or
//!    the partition scan, which takes it, is waited for.
//!    - `UblkDevice::canceled` and `UblkDevice::release_pin` (mutexes): whether the server's
//!      commands were cancelled, and the module reference of a release's work item.
//!      Taken under the device lock or alone (the cancellation, the release); innermost but for
//!      the queues' states that a cancellation sets under `canceled`.
//! 6. `UblkDevice::server_mm` (spinlock): the address space of the server. Taken by `mmap`, under
//!    the mmap lock.
//! 7. [`batch::EventQueue`] (spinlock, one per queue of a device with `UBLK_F_BATCH_IO`): the tags
//!    of the requests that wait for the server's fetch commands, and those commands. A tag goes in
//!    once its io slot is queued and let go, so no io slot is held under it; innermost: nothing
//!    is completed, handed to task work or copied under it.
//! 8. The server of an unprivileged device ([`unpriv::Unprivileged`], spinlock): the process that
//!    a request that timed out kills. Taken under the device lock by `open` and `release` of
//!    `/dev/ublkcN`, or alone by blk-mq's timeout work; innermost: the process is signalled, and
//!    references to tasks are put, after it is dropped.
//! 9. `Queue::lost` (spinlock, one per queue): the reads whose completion the fault injection
//!    dropped, until their timer expires or the server goes away. Taken alone, by the end of such
//!    a read, the timeout work and the teardown; innermost: the requests it gives out are failed
//!    after it is dropped.
//! 10. `Releases::waiting` (mutex, one per module): the devices whose release waits for io_uring
//!     to give back requests ([`release`]). Taken alone, by a release's work item and by the work
//!     item that looks at the devices; innermost: under it the slots' lending counts are read
//!     and work items queued.
//!
//! An io slot ([`slot::Slot`]) is not a lock, and nothing waits for it: its holders (blk-mq's
//! `queue_rq`, the server's commands and their task work, cancellation and teardown) may take
//! lock 7 and sleep while they hold it (user memory is copied, buffers are registered);
//! commands are completed, requests ended and task references put after the slot is let go, but
//! for the dispatched slots of a batch: `queue_rqs` keeps them held for the task work that
//! delivers the batch, which completes each slot's command once it let go of that slot while the
//! next ones are still held. That is no deadlock, since no context waits for a held slot.

use kernel::{
    chrdev,
    miscdevice::{
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    prelude::*, //
};

mod batch;
mod chardev;
mod cmd;
mod commit;
mod control;
mod copy;
mod device;
mod dispatch;
mod features;
mod io;
mod iodesc;
mod params;
mod queue;
mod release;
mod shmem;
mod slot;
mod teardown;
mod uapi;
mod unpriv;
mod usercopy;
mod zerocopy;
mod zoned;

/// Declares the module, named `$name`.
macro_rules! ublk_module {
    ($name:tt) => {
        module! {
            type: RustUblk,
            name: $name,
            authors: ["rust ublk"],
            description: "Userspace block driver (Rust implementation)",
            license: "GPL",
            params: {
                ublks_max: u32 {
                    default: 64,
                    description:
                        "max number of unprivileged ublk devices allowed to add(default: 64)",
                    perm: 0o444,
                },
            },
        }
    };
}

// The module is `ublk_drv` when the Rust implementation is chosen for `CONFIG_BLK_DEV_UBLK` (the
// Makefile sets the cfg), and `rust_ublk` beside the C `ublk_drv` otherwise.
#[cfg(ublk_module_ublk_drv)]
ublk_module!("ublk_drv");
#[cfg(not(ublk_module_ublk_drv))]
ublk_module!("rust_ublk");

/// The class of `/dev/ublkcN`: `/sys/class/ublk-char`.
static UBLK_CHAR_CLASS: chrdev::Class = chrdev::Class::new(c"ublk-char");

#[pin_data(PinnedDrop)]
struct RustUblk {
    #[pin]
    control: MiscDeviceRegistration<control::ControlFile>,
}

#[pinned_drop]
impl PinnedDrop for RustUblk {
    fn drop(self: Pin<&mut Self>) {
        // `/dev/ublkcN` are children of `/dev/ublk-control`: removed first.
        self.control.data().remove_all();
    }
}

impl kernel::InPlaceModule for RustUblk {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            control <- MiscDeviceRegistration::register_with_data(
                MiscDeviceOptions {
                    name: c"ublk-control",
                },
                control::Control::new(&UBLK_CHAR_CLASS)?,
            ),
        })
    }
}
