// SPDX-License-Identifier: GPL-2.0

//! Userspace block driver (ublk), Rust implementation.
//!
//! A ublk server, a user space process, creates block devices `/dev/ublkbN` and serves their I/O.
//! It talks to the driver with io_uring commands (`IORING_OP_URING_CMD`):
//!
//! - on `/dev/ublk-control`, to add, configure, start, stop and delete devices ([`control`]),
//! - on the per-device `/dev/ublkcN`, to fetch requests and commit their results ([`chardev`]).
//!
//! The UAPI is that of the C driver, `include/uapi/linux/ublk_cmd.h` ([`uapi`]). The driver
//! advertises in `UBLK_U_CMD_GET_FEATURES` and accepts in `UBLK_U_CMD_ADD_DEV` only the features
//! it implements ([`features`]).
//!
//! `/dev/ublkcN` is a misc device named `ublkcN` rather than a character device of a region of
//! its own: user space only opens it by name and reads its device number from
//! `UBLK_PARAM_TYPE_DEVT`, so the difference is not visible to ublk servers.

use kernel::{
    miscdevice::{
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    prelude::*, //
};

mod chardev;
mod control;
mod device;
mod features;
mod io;
mod iodesc;
mod params;
mod queue;
mod uapi;

module! {
    type: RustUblk,
    name: "rust_ublk",
    authors: ["rust ublk"],
    description: "Userspace block driver (Rust implementation)",
    license: "GPL",
}

#[pin_data]
struct RustUblk {
    #[pin]
    control: MiscDeviceRegistration<control::ControlFile>,
}

impl kernel::InPlaceModule for RustUblk {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            control <- MiscDeviceRegistration::register_with_data(
                MiscDeviceOptions {
                    name: c"ublk-control",
                },
                control::Control::new()?,
            ),
        })
    }
}
