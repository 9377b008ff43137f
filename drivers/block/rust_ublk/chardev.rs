// SPDX-License-Identifier: GPL-2.0

//! `/dev/ublkcN`, the device through which the ublk server serves the I/O of a device.
//!
//! It is a misc device named `ublkcN`, registered with the device it belongs to. Only one
//! process, the ublk server, can have it open at a time.

use crate::device::UblkDevice;
use kernel::{
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceRegistration},
    prelude::*,
    str::CString,
    sync::Arc,
};

/// The file operations of `/dev/ublkcN`.
pub(crate) struct CharDev;

/// Registers `/dev/ublkcN` for `dev`.
pub(crate) fn register(dev: Arc<UblkDevice>) -> Result<Pin<KBox<MiscDeviceRegistration<CharDev>>>> {
    let name = CString::try_from_fmt(fmt!("ublkc{}", dev.id))?;
    KBox::pin_init(
        MiscDeviceRegistration::register_with_name(name, dev),
        GFP_KERNEL,
    )
}

#[vtable]
impl MiscDevice for CharDev {
    type Ptr = Arc<UblkDevice>;
    type RegistrationData = Arc<UblkDevice>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Arc<UblkDevice>> {
        let dev = misc.data();
        let mut state = dev.state.lock();
        if state.char_open {
            return Err(EBUSY);
        }
        state.char_open = true;
        drop(state);
        Ok(dev.clone())
    }

    fn release(dev: Arc<UblkDevice>, _file: &File) {
        dev.state.lock().char_open = false;
    }
}
