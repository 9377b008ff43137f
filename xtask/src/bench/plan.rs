//! What a `bench rust-vs-c` run measures, and how long it takes: the iodepth
//! list, the estimate printed before the boot and the time left after each
//! round's progress line.

use anyhow::{bail, Result};
use std::time::Duration;

use super::mode::DataMode;
use crate::guest::Accel;

/// The largest iodepth accepted (fio's own limit is far above; this only
/// catches typos).
const MAX_IODEPTH: u32 = 4096;

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The data modes, each measured at every iodepth (copy mode alone
    /// unless [`Plan::with_modes`] says otherwise).
    pub modes: Vec<DataMode>,
    pub iodepths: Vec<u32>,
    pub rounds: u32,
    /// Seconds per fio run.
    pub runtime: u32,
}

/// Guest seconds from QEMU's start to the first fio run of a benchmark
/// boot, shared by `bench rust-vs-c` and `bench matrix`. A rough value (a
/// selftest boot reaches its first test in about 15 s of guest time under
/// TCG), to be corrected from a real run.
pub fn boot_seconds(accel: &Accel) -> u64 {
    match accel {
        Accel::Kvm => 15,
        Accel::Tcg { .. } => 40,
    }
}

/// Guest seconds per fio run besides `--runtime`: the module load,
/// `kublk add`, udev settle, fio's 1 s ramp, delete and unload. Rough
/// values, like [`boot_seconds`].
fn per_run_seconds(accel: &Accel) -> u64 {
    match accel {
        Accel::Kvm => 3,
        Accel::Tcg { .. } => 8,
    }
}

impl Plan {
    pub fn new(iodepths: &[u32], rounds: u32, runtime: u32) -> Result<Plan> {
        if iodepths.is_empty() {
            bail!("--iodepth: give at least one iodepth");
        }
        for (i, &qd) in iodepths.iter().enumerate() {
            if qd == 0 || qd > MAX_IODEPTH {
                bail!("--iodepth: {qd} is not in 1..={MAX_IODEPTH}");
            }
            if iodepths[..i].contains(&qd) {
                bail!("--iodepth: {qd} is listed twice");
            }
        }
        if rounds == 0 {
            bail!("--rounds: at least 1");
        }
        if runtime == 0 {
            bail!("--runtime: at least 1 second");
        }
        Ok(Plan {
            modes: vec![DataMode::Copy],
            iodepths: iodepths.to_vec(),
            rounds,
            runtime,
        })
    }

    /// The same plan for the data modes `modes`.
    pub fn with_modes(mut self, modes: &[DataMode]) -> Result<Plan> {
        if modes.is_empty() {
            bail!("--modes: give at least one data mode");
        }
        for (i, m) in modes.iter().enumerate() {
            if modes[..i].contains(m) {
                bail!("--modes: {} is listed twice", m.id());
            }
        }
        self.modes = modes.to_vec();
        Ok(self)
    }

    /// Rounds of the whole run (each one C run and one Rust run).
    pub fn total_rounds(&self) -> u32 {
        (self.modes.len() * self.iodepths.len()) as u32 * self.rounds
    }

    /// Expected length of the benchmark boot.
    pub fn estimate(&self, accel: &Accel) -> Duration {
        let runs = u64::from(self.total_rounds()) * 2;
        let per_run = u64::from(self.runtime) + per_run_seconds(accel);
        Duration::from_secs(boot_seconds(accel) + runs * per_run)
    }

    /// The watchdog's limit for the whole boot: generous, it only bounds a
    /// wedged guest (every guest step has its own timeout).
    pub fn limit(&self, accel: &Accel) -> Duration {
        (self.estimate(accel) * 2 + Duration::from_secs(600)).max(Duration::from_secs(1800))
    }

    /// The job.env variables for bench.sh.
    pub fn guest_vars(&self) -> Vec<(String, String)> {
        let qds: Vec<String> = self.iodepths.iter().map(u32::to_string).collect();
        let modes: Vec<&str> = self.modes.iter().map(|m| m.id()).collect();
        [
            ("SECTIONS", "ratio".to_string()),
            ("MODES", modes.join(" ")),
            ("ROUNDS", self.rounds.to_string()),
            ("RUNTIME", self.runtime.to_string()),
            ("IODEPTHS", qds.join(" ")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// The time left after a progress line `bench: [k/N] ...` that came
/// `elapsed` after the first round started: the mean round so far times
/// the rounds still to run. None for other lines.
pub fn time_left(line: &str, elapsed: Duration) -> Option<Duration> {
    let rest = line.strip_prefix("bench: [")?;
    let (k, rest) = rest.split_once('/')?;
    let (n, _) = rest.split_once(']')?;
    let (k, n): (u32, u32) = (k.parse().ok()?, n.parse().ok()?);
    if k > n {
        return None;
    }
    crate::eta::time_left(elapsed, k.into(), (n - k).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcg() -> Accel {
        Accel::Tcg {
            reason: "test".into(),
        }
    }

    #[test]
    fn checks() {
        assert!(Plan::new(&[1, 16, 128], 5, 10).is_ok());
        assert!(Plan::new(&[], 5, 10).is_err());
        assert!(Plan::new(&[0], 5, 10).is_err());
        assert!(Plan::new(&[16, 16], 5, 10).is_err());
        assert!(Plan::new(&[16], 0, 10).is_err());
        assert!(Plan::new(&[16], 1, 0).is_err());
    }

    #[test]
    fn estimate_and_vars() {
        let p = Plan::new(&[1, 16, 128], 5, 10).unwrap();
        assert_eq!(p.total_rounds(), 15);
        // 40 s boot + 30 runs of 10 s fio + 8 s around it
        assert_eq!(p.estimate(&tcg()), Duration::from_secs(40 + 30 * 18));
        assert_eq!(p.limit(&tcg()), Duration::from_secs(1800));
        assert_eq!(p.estimate(&Accel::Kvm), Duration::from_secs(15 + 30 * 13));
        let vars = p.guest_vars();
        assert!(vars.contains(&("IODEPTHS".into(), "1 16 128".into())));
        assert!(vars.contains(&("ROUNDS".into(), "5".into())));
        assert!(vars.contains(&("SECTIONS".into(), "ratio".into())));
        assert!(vars.contains(&("MODES".into(), "copy".into())));
        let p = p.with_modes(&[DataMode::Copy, DataMode::UserCopy]).unwrap();
        assert_eq!(p.total_rounds(), 30);
        assert!(p
            .guest_vars()
            .contains(&("MODES".into(), "copy user_copy".into())));
        let p = Plan::new(&[16], 5, 10).unwrap();
        assert!(p.clone().with_modes(&[]).is_err());
        assert!(p.with_modes(&[DataMode::AutoZc, DataMode::AutoZc]).is_err());
    }

    #[test]
    fn progress() {
        let l = "bench: [3/15] iodepth 1, round 3/5: C 1000 IOPS, Rust 990 IOPS";
        assert_eq!(
            time_left(l, Duration::from_secs(60)),
            Some(Duration::from_secs(240))
        );
        assert_eq!(
            time_left("bench: [15/15] x", Duration::from_secs(9)),
            Some(Duration::ZERO)
        );
        assert_eq!(time_left("bench: sections: ratio", Duration::ZERO), None);
        assert_eq!(time_left("bench: [0/15] x", Duration::ZERO), None);
    }
}
