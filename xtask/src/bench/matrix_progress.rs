//! The progress of a `bench matrix` boot: the guest's line after each cell
//! (`bench: cell k/N round driver rw iodepth queues result`) turned into
//! the line printed on the host, with the time spent and the time left.

use std::time::Duration;

use super::cpu::cpu_us_per_io;
use super::matrix::{BlkDriver, Rw};
use super::samples::kiops;
use crate::progress::fmt_duration;

/// What became of one cell run.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Measured {
        iops: f64,
        /// Guest CPU time per I/O, if the guest could measure it.
        cpu_us: Option<f64>,
    },
    Failed,
    /// Its driver failed earlier.
    Skipped,
}

/// One guest progress line.
#[derive(Clone, Debug, PartialEq)]
pub struct CellLine {
    /// Cell runs done, this one included, and of the whole boot.
    pub done: u32,
    pub total: u32,
    pub round: u32,
    pub driver: BlkDriver,
    pub rw: Rw,
    pub iodepth: u32,
    pub queues: u32,
    pub outcome: Outcome,
}

/// Parses `bench: cell 7/210 1 c randread 16 1 iops=12345 busy_ticks=250
/// ios=40000 user_hz=100` (or `failed` / `skipped` as the result). None for
/// other lines.
pub fn parse(line: &str) -> Option<CellLine> {
    let rest = line.strip_prefix("bench: cell ")?;
    let mut f = rest.split_whitespace();
    let (done, total) = f.next()?.split_once('/')?;
    let (done, total): (u32, u32) = (done.parse().ok()?, total.parse().ok()?);
    let round = f.next()?.parse().ok()?;
    let driver = BlkDriver::from_id(f.next()?)?;
    let rw = Rw::from_id(f.next()?)?;
    let iodepth = f.next()?.parse().ok()?;
    let queues = f.next()?.parse().ok()?;
    let result: Vec<&str> = f.collect();
    let outcome = match result.first().copied()? {
        "failed" => Outcome::Failed,
        "skipped" => Outcome::Skipped,
        _ => {
            let get = |k: &str| -> Option<f64> {
                result
                    .iter()
                    .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                    .and_then(|v| v.parse().ok())
            };
            let cpu_us = match (get("busy_ticks"), get("user_hz"), get("ios")) {
                (Some(t), Some(hz), Some(ios)) => cpu_us_per_io(t, hz, ios),
                _ => None,
            };
            Outcome::Measured {
                iops: get("iops")?,
                cpu_us,
            }
        }
    };
    if done == 0 || done > total {
        return None;
    }
    Some(CellLine {
        done,
        total,
        round,
        driver,
        rw,
        iodepth,
        queues,
        outcome,
    })
}

/// The time left after `l`, `elapsed` after the first cell started: the
/// mean cell run so far times the runs still to go.
pub fn time_left(l: &CellLine, elapsed: Duration) -> Duration {
    // `parse` returns no line with `done` 0.
    crate::eta::time_left(elapsed, l.done.into(), (l.total - l.done).into()).unwrap_or_default()
}

/// The host's progress line: round r/R, cell k/M (of the round), the cell,
/// its result, the time since the command started and the time left.
pub fn format(l: &CellLine, rounds: u32, since_start: Duration, left: Duration) -> String {
    let per_round = (l.total / rounds.max(1)).max(1);
    let k = (l.done - 1) % per_round + 1;
    let result = match &l.outcome {
        Outcome::Measured { iops, cpu_us } => {
            let cpu = cpu_us.map_or("CPU per I/O not measured".to_string(), |c| {
                format!("{c:.1} us CPU per I/O")
            });
            format!("{} IOPS, {cpu}", kiops(*iops))
        }
        Outcome::Failed => "FAILED (see matrix-failures.txt)".to_string(),
        Outcome::Skipped => "skipped (the driver failed earlier)".to_string(),
    };
    format!(
        "round {}/{rounds}, cell {k}/{per_round}: {} {} iodepth {} {} queue{}: {result} [{} elapsed, ~{} left]",
        l.round,
        l.driver.label(),
        l.rw.id(),
        l.iodepth,
        l.queues,
        if l.queues == 1 { "" } else { "s" },
        fmt_duration(since_start),
        fmt_duration(left)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str =
        "bench: cell 44/210 2 rust randwrite 16 2 iops=12345 busy_ticks=300 ios=40000 user_hz=100";

    #[test]
    fn parses() {
        let l = parse(LINE).unwrap();
        assert_eq!((l.done, l.total, l.round), (44, 210, 2));
        assert_eq!((l.driver, l.rw), (BlkDriver::Rust, Rw::RandWrite));
        assert_eq!((l.iodepth, l.queues), (16, 2));
        // 300 ticks of 10 ms over 40000 I/Os
        assert_eq!(
            l.outcome,
            Outcome::Measured {
                iops: 12345.0,
                cpu_us: Some(75.0)
            }
        );
        let l = parse("bench: cell 3/210 1 null_blk randread 1 1 iops=900").unwrap();
        assert_eq!(
            l.outcome,
            Outcome::Measured {
                iops: 900.0,
                cpu_us: None
            }
        );
        let l = parse("bench: cell 5/210 1 c randread 1 1 failed").unwrap();
        assert_eq!(l.outcome, Outcome::Failed);
        let l = parse("bench: cell 6/210 1 c randread 1 2 skipped").unwrap();
        assert_eq!(l.outcome, Outcome::Skipped);
        assert_eq!(parse("bench: sections: matrix"), None);
        assert_eq!(parse("bench: cell 0/210 1 c randread 1 1 failed"), None);
        assert_eq!(parse("bench: cell 5/210 1 nvme randread 1 1 failed"), None);
        assert_eq!(parse("bench: cell 5/210 1 c randread 1 1"), None);
        assert_eq!(parse("bench: cell 5/210 1 c randread 1 1 iops=x"), None);
    }

    #[test]
    fn progress_line() {
        let l = parse(LINE).unwrap();
        // 44 runs in 440 s: 10 s each, 166 to go
        let left = time_left(&l, Duration::from_secs(440));
        assert_eq!(left, Duration::from_secs(1660));
        assert_eq!(
            format(&l, 5, Duration::from_secs(480), left),
            "round 2/5, cell 2/42: Rust ublk randwrite iodepth 16 2 queues: 12.3K IOPS, 75.0 us CPU per I/O [8m00s elapsed, ~27m40s left]"
        );
        let l = parse("bench: cell 42/210 1 rnull randread 128 1 failed").unwrap();
        assert_eq!(
            format(&l, 5, Duration::from_secs(5), Duration::ZERO),
            "round 1/5, cell 42/42: rnull randread iodepth 128 1 queue: FAILED (see matrix-failures.txt) [5.0s elapsed, ~0.0s left]"
        );
    }
}
