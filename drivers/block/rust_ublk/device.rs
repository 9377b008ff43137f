// SPDX-License-Identifier: GPL-2.0

//! A ublk device: its configuration and state.

use crate::{
    params::Params,
    queue::{self, UblkQueue},
    uapi::DevInfo,
};
use kernel::{
    block::mq::TagSet,
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

/// The state of a device that commands change.
pub(crate) struct DeviceState {
    /// What `UBLK_U_CMD_GET_DEV_INFO` reports.
    pub(crate) info: DevInfo,
    /// The parameters set with `UBLK_U_CMD_SET_PARAMS`.
    pub(crate) params: Params,
    /// Whether the device was started; its parameters cannot change any more then.
    pub(crate) used: bool,
    /// Whether `/dev/ublkcN` is open. It has a single opener, the ublk server.
    pub(crate) char_open: bool,
}

/// A ublk device.
#[pin_data]
pub(crate) struct UblkDevice {
    /// The device number N of `/dev/ublkcN` and `/dev/ublkbN`.
    pub(crate) id: u32,
    /// The state of the device.
    #[pin]
    pub(crate) state: Mutex<DeviceState>,
    /// The tag set of the device's disk.
    #[pin]
    pub(crate) tag_set: TagSet<UblkQueue>,
}

impl UblkDevice {
    /// Creates the device described by `info`, which was validated by `UBLK_U_CMD_ADD_DEV`.
    pub(crate) fn new(info: DevInfo) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                id: info.dev_id,
                state <- new_mutex!(DeviceState {
                    info,
                    params: Params::new(),
                    used: false,
                    char_open: false,
                }),
                tag_set <- queue::new_tag_set(info.nr_hw_queues, info.queue_depth),
            }),
            GFP_KERNEL,
        )
    }

    /// Returns the number of queues of the device.
    pub(crate) fn nr_queues(&self) -> u16 {
        self.state.lock().info.nr_hw_queues
    }
}
