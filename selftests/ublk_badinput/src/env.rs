//! What every case gets: the control device, and a list of the devices the
//! case created, which the runner deletes after the case (whatever happened).

use anyhow::{bail, Result};
use ublk_uapi::{UblksrvCtrlDevInfo, UBLK_U_CMD_ADD_DEV};

use crate::ctrl::{hdr, with_buf, Ctrl};

/// The largest I/O a test device takes (kublk's default, 512 KiB).
pub const MAX_IO_BUF_BYTES: u32 = 512 << 10;

/// `dev_id` that asks the driver to pick a free id.
pub const ANY_ID: u32 = u32::MAX;

/// A device id no test creates (below the C driver's limit of 1 << 20).
pub const ABSENT_ID: u32 = 1_000_000;

/// The device info an ADD_DEV case starts from: one queue, depth 2, copy
/// mode (flags 0), any id.
pub fn dev_info(nr_hw_queues: u16, queue_depth: u16, flags: u64) -> UblksrvCtrlDevInfo {
    UblksrvCtrlDevInfo {
        nr_hw_queues,
        queue_depth,
        max_io_buf_bytes: MAX_IO_BUF_BYTES,
        dev_id: ANY_ID,
        flags,
        ..Default::default()
    }
}

/// A device added for a case.
#[derive(Clone, Copy, Debug)]
pub struct Dev {
    pub id: u32,
    pub info: UblksrvCtrlDevInfo,
}

pub struct Env {
    pub ctrl: Ctrl,
    created: Vec<u32>,
}

impl Env {
    pub fn new(ctrl: Ctrl) -> Self {
        Env {
            ctrl,
            created: Vec::new(),
        }
    }

    /// Records a device to delete after the case (also for ADD_DEV probes
    /// that should have failed but did not).
    pub fn created(&mut self, id: u32) {
        if id != ANY_ID && !self.created.contains(&id) {
            self.created.push(id);
        }
    }

    /// Adds a device that the case needs; failure is a setup error.
    pub fn add(&mut self, nr_hw_queues: u16, queue_depth: u16, flags: u64) -> Result<Dev> {
        let mut info = dev_info(nr_hw_queues, queue_depth, flags);
        let h = with_buf(hdr(ANY_ID), &mut info);
        let r = self.ctrl.cmd(UBLK_U_CMD_ADD_DEV, &h)?;
        if r < 0 {
            bail!(
                "setup: ADD_DEV failed: {}",
                crate::errno::show(crate::ring::Got::Res(r))
            );
        }
        self.created(info.dev_id);
        Ok(Dev {
            id: info.dev_id,
            info,
        })
    }

    /// Deletes every device the case created; returns what went wrong.
    pub fn cleanup(&mut self) -> Vec<String> {
        let mut errs = Vec::new();
        for id in std::mem::take(&mut self.created) {
            if let Err(e) = self.ctrl.del(id) {
                errs.push(format!("{e:#}"));
            }
        }
        errs
    }
}
