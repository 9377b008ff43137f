// SPDX-License-Identifier: GPL-2.0

//! Zoned devices (`UBLK_F_ZONED`): zone operations in the io descriptors, and zone reports that
//! the driver asks the server for with requests it sends its own queue.
//!
//! The server answers a report (`UBLK_IO_OP_REPORT_ZONES`) with an array of `struct blk_zone`
//! in the request's data, which it writes with user copy or through a registered buffer; a zone
//! of length 0 ends the array early. It answers a zone append (`UBLK_IO_OP_ZONE_APPEND`) with the
//! sector where the data landed in the `addr` of its commit (`zone_append_lba`).

use crate::{io::Served, queue::RqResult, uapi};
use kernel::{block::ReqOp, prelude::*, sync::atomic::Relaxed};

impl RqResult {
    /// Marks the request that carries this data as a report of `nr_zones` zones from `sector`
    /// on, or, with 0 zones, as not a report any more.
    #[cfg(CONFIG_BLK_DEV_ZONED)]
    fn mark_report(&self, sector: u64, nr_zones: u32) {
        self.report_sector.store(sector, Relaxed);
        self.report_zones.store(nr_zones, Relaxed);
    }

    /// Returns the first sector and the number of zones of the report that the request is, if
    /// the driver sent it to report zones.
    fn report(&self) -> Option<(u64, u32)> {
        match self.report_zones.load(Relaxed) {
            0 => None,
            n => Some((self.report_sector.load(Relaxed), n)),
        }
    }
}

/// Returns the io operation, the number of sectors (of zones, for a report) and the first sector
/// with which the io descriptor describes `rq`, a zone operation or a report of a zoned device's
/// queue (`ublk_setup_iod_zoned()`); `None` for any other request, which fails.
pub(crate) fn describe(zoned: bool, rq: &Served) -> Option<(u32, u32, u64)> {
    if !zoned {
        return None;
    }
    let op = match rq.op() {
        ReqOp::ZoneOpen => uapi::IO_OP_ZONE_OPEN,
        ReqOp::ZoneClose => uapi::IO_OP_ZONE_CLOSE,
        ReqOp::ZoneFinish => uapi::IO_OP_ZONE_FINISH,
        ReqOp::ZoneReset => uapi::IO_OP_ZONE_RESET,
        ReqOp::ZoneResetAll => uapi::IO_OP_ZONE_RESET_ALL,
        ReqOp::ZoneAppend => uapi::IO_OP_ZONE_APPEND,
        // Only the driver sends such requests to its queue, to report zones.
        ReqOp::DrvIn => {
            let (sector, nr_zones) = rq.data_ref().report()?;
            return Some((uapi::IO_OP_REPORT_ZONES, nr_zones, sector));
        }
        _ => return None,
    };
    Some((op, rq.nr_sectors(), rq.sector()))
}

/// Returns whether requests of `op` have data that goes to or comes from the server: reads,
/// writes, and on zoned devices zone appends and reports.
pub(crate) fn has_data(op: ReqOp) -> bool {
    matches!(
        op,
        ReqOp::Read | ReqOp::Write | ReqOp::ZoneAppend | ReqOp::DrvIn
    )
}

/// Returns whether the data of requests of `op` goes to the server (a write, a zone append), as
/// opposed to coming from it (a read, a report).
pub(crate) fn to_server(op: ReqOp) -> bool {
    matches!(op, ReqOp::Write | ReqOp::ZoneAppend)
}

/// The `report_zones` operation (`ublk_report_zones()`): asks the server for at most `nr_zones`
/// zones from `sector` on, in as many requests as the queue's largest request needs, and passes
/// them on.
///
/// Each zone gets its index in the whole report ([`ZoneReport::report`]), as the callers of the
/// block layer expect. A server may answer a request with fewer zones than asked (a zone of length
/// 0 ends its answer): the next request asks from the zone after the last one it gave; an answer
/// without any zone ends the report. (`ublk_drv.c` of 7.3.4 gave each zone its index in its
/// request, and sent the same request again for ever after an answer without any zone.)
///
/// [`ZoneReport::report`]: kernel::block::mq::zoned::ZoneReport::report
#[cfg(CONFIG_BLK_DEV_ZONED)]
pub(crate) fn report(
    report: &mut kernel::block::mq::zoned::ZoneReport<'_, crate::queue::DiskOps>,
    mut sector: u64,
    nr_zones: u32,
) -> Result {
    use kernel::{
        alloc::flags::__GFP_NOWARN,
        block::{mq::zoned::Zone, SECTOR_SHIFT},
    };

    let zone_sectors = report.zone_sectors();
    if !zone_sectors.is_power_of_two() {
        return Err(EINVAL);
    }
    let first_zone = sector >> zone_sectors.trailing_zeros();
    let left = u64::from(report.disk_nr_zones()).saturating_sub(first_zone);
    // CAST: At most `nr_zones`, a `u32`.
    let nr_zones = left.min(u64::from(nr_zones)) as u32;
    if nr_zones == 0 {
        return Ok(());
    }

    // As large as the zones asked for, but no larger than a request; smaller if memory is short.
    let max_bytes = (report.max_hw_sectors() as usize) << SECTOR_SHIFT;
    let mut len = (nr_zones as usize)
        .saturating_mul(Zone::SIZE)
        .min(max_bytes);
    let mut buf = loop {
        if len < Zone::SIZE {
            return Err(ENOMEM);
        }
        match KVVec::from_elem(0u8, len, GFP_KERNEL | __GFP_NOWARN) {
            Ok(buf) => break buf,
            Err(_) => len /= 2,
        }
    };
    // CAST: At most `nr_zones`, a `u32`.
    let per_request = (len / Zone::SIZE) as u32;

    let mut done = 0;
    while done < nr_zones {
        let asked = per_request.min(nr_zones - done);
        let len = asked as usize * Zone::SIZE;
        buf[..len].fill(0);
        {
            let mut rq = report.alloc_drv_in()?;
            rq.data_ref().mark_report(sector, asked);
            let ret = rq.execute(&mut buf, len);
            rq.data_ref().mark_report(0, 0);
            ret?;
        }
        let mut got = 0;
        for chunk in buf[..len].chunks_exact(Zone::SIZE) {
            let mut zone = Zone::from_bytes(chunk.try_into().map_err(|_| EINVAL)?);
            if zone.is_empty() {
                break;
            }
            report.report(&mut zone)?;
            done += 1;
            got += 1;
            sector += u64::from(zone_sectors);
        }
        if got == 0 {
            break;
        }
    }
    Ok(())
}
