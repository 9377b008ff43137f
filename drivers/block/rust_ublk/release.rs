// SPDX-License-Identifier: GPL-2.0

//! The work items that finish the releases of `/dev/ublkcN`, and the releases that wait for
//! io_uring to give back requests.
//!
//! A request whose data a ring registered as a buffer ends only once io_uring releases the
//! buffer: possibly long after the server closed `/dev/ublkcN`, or never, if the ring outlives the
//! server. The release of the device waits for that ([`UblkDevice::release`]), but not in a worker
//! of its own: the module's queue runs a bounded number of work items at once (its `max_active`,
//! 1024 by default), so enough devices whose buffers do not come back would take every worker,
//! and the releases of all other devices would wait behind them. A release that finds requests
//! still lent puts its device on a list and returns; one work item looks at the devices of the
//! list, at growing intervals, and queues the release work item again of each device that got all
//! its requests back.

use crate::{
    device::{UblkDevice, RELEASE_WORK},
    teardown,
};
use kernel::{
    list::{List, ListArc},
    new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, Mutex},
    time::{msecs_to_jiffies, Jiffies},
    warn_on,
    workqueue::{impl_has_work, new_work, OwnedQueue, Work, WorkItem},
};

/// The releases of the module's devices: the queue that their work items run on, and the devices
/// whose release waits for io_uring to give back requests.
///
/// The module's state and every device hold a reference. The work items on the queue never drop
/// the last one, which would destroy the queue from one of its own work items: a device's release
/// drops its reference while it holds the module, whose state holds another one, and the module's
/// exit waits for the polling work item with [`Releases::stop`] before its state goes.
#[pin_data]
pub(crate) struct Releases {
    /// An unbound queue of the module's own: destroyed with the module's state, which waits for
    /// the work items on it to have returned.
    queue: OwnedQueue,
    /// The devices whose release waits.
    #[pin]
    waiting: Mutex<Waiting>,
    /// The polling work item sleeps on it between two looks, interruptibly, so that a wait that
    /// may last forever does not count as load (a worker gets no signal); signalled when a device
    /// starts to wait.
    #[pin]
    pause: CondVar,
    /// Looks at the devices of `waiting` until none is left.
    #[pin]
    poll_work: Work<Releases>,
}

/// The devices whose release waits for io_uring to give back requests.
struct Waiting {
    /// Each holds its release's module reference ([`UblkDevice::release`]) until its release work
    /// item runs again.
    devices: List<UblkDevice>,
    /// Whether `poll_work` is queued, or runs and will look at `devices` again; it is cleared by
    /// the work item's last look, which found no device left.
    polling: bool,
    /// Whether a device started to wait since the polling work item last looked: the next look
    /// comes one tick after it, whatever the intervals had grown to.
    added: bool,
}

impl Releases {
    /// Allocates the queue of the module's release work items.
    pub(crate) fn new() -> Result<Arc<Self>> {
        let queue = OwnedQueue::new_unbound(c"rust_ublk_release")?;
        Arc::pin_init(
            pin_init!(Self {
                queue,
                waiting <- new_mutex!(Waiting {
                    devices: List::new(),
                    polling: false,
                    added: false,
                }),
                pause <- new_condvar!(),
                poll_work <- new_work!("Releases::poll_work"),
            }),
            GFP_KERNEL,
        )
    }

    /// Queues the release work item of `dev`.
    pub(crate) fn queue_release(&self, dev: Arc<UblkDevice>) {
        // A device has one server, whose release queues its work item once, and the list gives
        // it back only once that work item returned: it is not queued. (If it were, the reference
        // given back is not the last one: the queued work item holds another.)
        warn_on!(self
            .queue
            .enqueue::<Arc<UblkDevice>, RELEASE_WORK>(dev)
            .is_err());
    }

    /// Makes the release of `dev` wait until io_uring gave back every request that its slots
    /// lent, and queues its work item again then.
    pub(crate) fn wait_given_back(self: &Arc<Self>, dev: Arc<UblkDevice>) {
        let dev = match ListArc::try_from_arc(dev) {
            Ok(dev) => dev,
            // Only the device's release work item puts it on the list, and the device is not on
            // the list while that work item runs. If it were, it is looked at from there, and the
            // reference dropped here is not its last one: the list holds another.
            Err(dev) => {
                pr_warn!("device {} waits for io_uring twice\n", dev.id);
                warn_on!(true);
                return;
            }
        };
        let mut waiting = self.waiting.lock();
        waiting.devices.push_back(dev);
        if waiting.polling {
            waiting.added = true;
            self.pause.notify_one();
        } else {
            waiting.polling = true;
            // Not queued: `polling` was false, which the work item's last look sets.
            warn_on!(self.queue.enqueue::<Arc<Self>, 0>(self.clone()).is_err());
        }
    }

    /// Waits for the polling work item to have returned, for the module's exit. No release waits
    /// any more then (each holds a reference to the module), so it is not queued, nor queued
    /// again.
    pub(crate) fn stop(self: &Arc<Self>) {
        warn_on!(Work::<Self>::cancel_sync(self));
        warn_on!(!self.waiting.lock().devices.is_empty());
    }
}

impl_has_work! {
    impl HasWork<Self> for Releases { self.poll_work }
}

impl WorkItem for Releases {
    type Pointer = Arc<Releases>;

    fn run(this: Arc<Releases>) {
        // The first look after a tick, then intervals that double up to a tenth of a second;
        // again from a tick once a device starts to wait.
        let most: Jiffies = msecs_to_jiffies(100).max(1);
        let mut wait: Jiffies = 1;
        loop {
            let mut waiting = this.waiting.lock();
            // A device that joined during the last look, whose signal found no sleeper, is
            // looked at without a wait.
            if !waiting.added {
                let _ = this.pause.wait_interruptible_timeout(&mut waiting, wait);
            }
            let added = core::mem::take(&mut waiting.added);
            // Looked at without the lock, which the releases that start to wait meanwhile take:
            // they add their devices to the list, which the ones still lent join again below.
            let mut look = core::mem::take(&mut waiting.devices);
            drop(waiting);
            let mut lent = List::new();
            while let Some(dev) = look.pop_front() {
                if teardown::any_lent(&dev) {
                    lent.push_back(dev);
                } else {
                    this.queue_release(dev.into_arc());
                }
            }
            let mut waiting = this.waiting.lock();
            waiting.devices.push_all_back(&mut lent);
            if waiting.devices.is_empty() {
                waiting.polling = false;
                return;
            }
            wait = if added {
                1
            } else {
                wait.saturating_mul(2).min(most)
            };
        }
    }
}
