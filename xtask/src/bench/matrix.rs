//! What a `bench matrix` run measures and in which order: the cells (driver x
//! rw x iodepth x queues), the order of the cells in each round, the plan
//! handed to the guest and the time estimate printed before the boot.

use anyhow::{bail, Result};
use std::time::Duration;

use super::plan;
use crate::guest::{self, Accel};

/// A block driver of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum BlkDriver {
    /// The C ublk driver (`ublk_drv`), kublk's null target.
    C,
    /// The Rust ublk driver (`rust_ublk`), kublk's null target.
    Rust,
    /// The in-kernel C null block driver (`null_blk`): the ceiling.
    #[value(name = "null_blk")]
    NullBlk,
    /// The in-kernel Rust null block driver (`rnull_mod`): the ceiling.
    Rnull,
}

impl BlkDriver {
    pub const ALL: [BlkDriver; 4] = [
        BlkDriver::C,
        BlkDriver::Rust,
        BlkDriver::NullBlk,
        BlkDriver::Rnull,
    ];

    /// The name the guest script, the samples and the CSV use.
    pub fn id(self) -> &'static str {
        match self {
            BlkDriver::C => "c",
            BlkDriver::Rust => "rust",
            BlkDriver::NullBlk => "null_blk",
            BlkDriver::Rnull => "rnull",
        }
    }

    /// The name in tables and the plot.
    pub fn label(self) -> &'static str {
        match self {
            BlkDriver::C => "C ublk",
            BlkDriver::Rust => "Rust ublk",
            BlkDriver::NullBlk => "null_blk",
            BlkDriver::Rnull => "rnull",
        }
    }

    pub fn from_id(id: &str) -> Option<BlkDriver> {
        BlkDriver::ALL.into_iter().find(|d| d.id() == id)
    }

    /// The most hardware queues the driver can be given. rnull in 7.3
    /// builds its tag set with one hardware queue (`TagSet::new(1, 256, 1,
    /// ..)` in drivers/block/rnull/rnull.rs) and its configfs has no queue
    /// attribute.
    pub fn max_queues(self) -> u32 {
        match self {
            BlkDriver::Rnull => 1,
            _ => guest::CPUS,
        }
    }

    fn is_ublk(self) -> bool {
        matches!(self, BlkDriver::C | BlkDriver::Rust)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rw {
    RandRead,
    RandWrite,
}

impl Rw {
    pub const ALL: [Rw; 2] = [Rw::RandRead, Rw::RandWrite];

    /// fio's name, also used in the samples and the CSV.
    pub fn id(self) -> &'static str {
        match self {
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
        }
    }

    pub fn from_id(id: &str) -> Option<Rw> {
        Rw::ALL.into_iter().find(|r| r.id() == id)
    }
}

/// One configuration measured once per round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cell {
    pub driver: BlkDriver,
    pub rw: Rw,
    pub iodepth: u32,
    pub queues: u32,
}

impl Cell {
    /// The config part of the cell's samples: `c/randread/qd16/q1`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/qd{}/q{}",
            self.driver.id(),
            self.rw.id(),
            self.iodepth,
            self.queues
        )
    }

    /// The cell as the guest reads it: `round:driver:rw:iodepth:queues`.
    fn token(&self, round: u32) -> String {
        format!(
            "{round}:{}:{}:{}:{}",
            self.driver.id(),
            self.rw.id(),
            self.iodepth,
            self.queues
        )
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Iodepths, rounds and seconds per fio run.
    pub base: plan::Plan,
    pub drivers: Vec<BlkDriver>,
    pub queues: Vec<u32>,
    /// Every cell measured, in the order of the first round.
    pub cells: Vec<Cell>,
    /// Cells the drivers cannot be set up for (rnull with 2 queues): listed
    /// in the output, never run.
    pub unsupported: Vec<Cell>,
}

/// Guest seconds spent outside the fio runs, besides the boot
/// ([`plan::boot_seconds`]). Rough values under TCG, from the module load /
/// `kublk add` / delete / unload of `bench rust-vs-c` (about 8 s per run);
/// `matrix_run` prints what the run really took, to correct them.
struct Overhead {
    /// Per cell: fio's start and exit, the wait for the first I/O, the
    /// samples.
    cell: u64,
    /// Per round and ublk driver: load, one `kublk add` per queue count,
    /// udev, delete, unload.
    ublk_block: u64,
    /// Per round and in-kernel driver: load, configfs devices, unload.
    kernel_block: u64,
}

fn overhead(accel: &Accel) -> Overhead {
    match accel {
        Accel::Kvm => Overhead {
            cell: 1,
            ublk_block: 3,
            kernel_block: 1,
        },
        Accel::Tcg { .. } => Overhead {
            cell: 3,
            ublk_block: 10,
            kernel_block: 3,
        },
    }
}

impl Plan {
    pub fn new(
        drivers: &[BlkDriver],
        iodepths: &[u32],
        queues: &[u32],
        rounds: u32,
        runtime: u32,
    ) -> Result<Plan> {
        let base = plan::Plan::new(iodepths, rounds, runtime)?;
        if runtime < 2 {
            bail!("--runtime: at least 2 seconds for `bench matrix` (the CPU time is measured over the run's last runtime - 1 s)");
        }
        if drivers.is_empty() {
            bail!("--driver: give at least one driver");
        }
        for (i, d) in drivers.iter().enumerate() {
            if drivers[..i].contains(d) {
                bail!("--driver: {} is listed twice", d.id());
            }
        }
        if queues.is_empty() {
            bail!("--queues: give at least one queue count");
        }
        for (i, &q) in queues.iter().enumerate() {
            if q == 0 || q > guest::CPUS {
                bail!(
                    "--queues: {q} is not in 1..={} (the guest's CPUs)",
                    guest::CPUS
                );
            }
            if queues[..i].contains(&q) {
                bail!("--queues: {q} is listed twice");
            }
        }
        let mut cells = Vec::new();
        let mut unsupported = Vec::new();
        for &driver in drivers {
            for rw in Rw::ALL {
                for &q in queues {
                    for &qd in iodepths {
                        let cell = Cell {
                            driver,
                            rw,
                            iodepth: qd,
                            queues: q,
                        };
                        if q <= driver.max_queues() {
                            cells.push(cell);
                        } else {
                            unsupported.push(cell);
                        }
                    }
                }
            }
        }
        if cells.is_empty() {
            bail!("nothing to measure: no driver supports the queue counts given");
        }
        Ok(Plan {
            base,
            drivers: drivers.to_vec(),
            queues: queues.to_vec(),
            cells,
            unsupported,
        })
    }

    pub fn rounds(&self) -> u32 {
        self.base.rounds
    }

    pub fn runtime(&self) -> u32 {
        self.base.runtime
    }

    /// The drivers in the order round `round` (1-based) runs them: the list
    /// rotated by one per round, so that each driver takes each place in
    /// turn and a drift over the boot does not favour one of them.
    pub fn driver_order(&self, round: u32) -> Vec<BlkDriver> {
        let mut d = self.drivers.clone();
        let n = d.len();
        d.rotate_left((round.saturating_sub(1) as usize) % n);
        d
    }

    /// Every cell of round `round`, in the order it runs them: one block per
    /// driver (its module is loaded only for its block), in
    /// [`Plan::driver_order`]; inside a block the cells in plan order, or
    /// reversed in even rounds.
    pub fn round_order(&self, round: u32) -> Vec<Cell> {
        let mut out = Vec::with_capacity(self.cells.len());
        for d in self.driver_order(round) {
            let mut block: Vec<Cell> = self
                .cells
                .iter()
                .filter(|c| c.driver == d)
                .copied()
                .collect();
            if round.is_multiple_of(2) {
                block.reverse();
            }
            out.extend(block);
        }
        out
    }

    /// The whole run: (round, cell) in the order the guest runs them.
    pub fn schedule(&self) -> Vec<(u32, Cell)> {
        (1..=self.rounds())
            .flat_map(|r| self.round_order(r).into_iter().map(move |c| (r, c)))
            .collect()
    }

    /// Cell runs of the whole boot.
    pub fn total_runs(&self) -> u32 {
        self.cells.len() as u32 * self.rounds()
    }

    /// Expected length of the benchmark boot.
    pub fn estimate(&self, accel: &Accel) -> Duration {
        let o = overhead(accel);
        let cells = u64::from(self.total_runs()) * (u64::from(self.runtime()) + o.cell);
        let blocks = u64::from(self.rounds()) * self.block_secs(&o);
        Duration::from_secs(plan::boot_seconds(accel) + cells + blocks)
    }

    /// Expected time per cell run once the guest is up, the driver loads
    /// included: what the run's own figure printed afterwards compares to.
    pub fn per_run_estimate(&self, accel: &Accel) -> Duration {
        let boot = Duration::from_secs(plan::boot_seconds(accel));
        (self.estimate(accel) - boot) / self.total_runs().max(1)
    }

    /// Seconds per round spent loading and unloading drivers.
    fn block_secs(&self, o: &Overhead) -> u64 {
        self.drivers
            .iter()
            .map(|d| {
                if d.is_ublk() {
                    o.ublk_block
                } else {
                    o.kernel_block
                }
            })
            .sum()
    }

    /// How the estimate is made up, for the line printed before the boot.
    pub fn estimate_text(&self, accel: &Accel) -> String {
        let o = overhead(accel);
        format!(
            "{} cells x {} rounds x ({} s fio + ~{} s around it) + {} rounds x ~{} s loading and unloading {} drivers + ~{} s boot = about {}",
            self.cells.len(),
            self.rounds(),
            self.runtime(),
            o.cell,
            self.rounds(),
            self.block_secs(&o),
            self.drivers.len(),
            plan::boot_seconds(accel),
            crate::progress::fmt_duration(self.estimate(accel))
        )
    }

    /// The watchdog's limit for the whole boot: generous, it only bounds a
    /// wedged guest (every guest step has its own timeout).
    pub fn limit(&self, accel: &Accel) -> Duration {
        (self.estimate(accel) * 2 + Duration::from_secs(600)).max(Duration::from_secs(1800))
    }

    /// The job.env variables for bench.sh's `matrix` section.
    pub fn guest_vars(&self) -> Vec<(String, String)> {
        let tokens: Vec<String> = self.schedule().iter().map(|(r, c)| c.token(*r)).collect();
        [
            ("SECTIONS", "matrix".to_string()),
            ("ROUNDS", self.rounds().to_string()),
            ("RUNTIME", self.runtime().to_string()),
            ("MATRIX_JOBS", guest::CPUS.to_string()),
            ("MATRIX_PLAN", tokens.join(" ")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn tcg() -> Accel {
        Accel::Tcg {
            reason: "test".into(),
        }
    }

    fn default_plan() -> Plan {
        Plan::new(&BlkDriver::ALL, &[1, 16, 128], &[1, 2], 5, 4).unwrap()
    }

    #[test]
    fn cells() {
        let p = default_plan();
        // 3 drivers x 2 rw x 2 queue counts x 3 iodepths, rnull 1 queue only
        assert_eq!(p.cells.len(), 3 * 12 + 6);
        assert_eq!(p.unsupported.len(), 6);
        assert!(p
            .unsupported
            .iter()
            .all(|c| c.driver == BlkDriver::Rnull && c.queues == 2));
        assert_eq!(p.cells[0].key(), "c/randread/qd1/q1");
        assert_eq!(p.cells[3].key(), "c/randread/qd1/q2");
        assert_eq!(p.total_runs(), 42 * 5);
        assert_eq!(BlkDriver::from_id("null_blk"), Some(BlkDriver::NullBlk));
        assert_eq!(Rw::from_id("randwrite"), Some(Rw::RandWrite));
        assert_eq!(BlkDriver::from_id("nvme"), None);
    }

    #[test]
    fn checks() {
        let all = BlkDriver::ALL;
        assert!(Plan::new(&all, &[1], &[1], 1, 2).is_ok());
        assert!(Plan::new(&all, &[1], &[1], 1, 1).is_err(), "runtime < 2");
        assert!(Plan::new(&all, &[1], &[1], 0, 4).is_err());
        assert!(Plan::new(&all, &[], &[1], 5, 4).is_err());
        assert!(Plan::new(&[], &[1], &[1], 5, 4).is_err());
        assert!(Plan::new(&[BlkDriver::C, BlkDriver::C], &[1], &[1], 5, 4).is_err());
        assert!(Plan::new(&all, &[1], &[], 5, 4).is_err());
        assert!(Plan::new(&all, &[1], &[0], 5, 4).is_err());
        assert!(Plan::new(&all, &[1], &[3], 5, 4).is_err());
        assert!(Plan::new(&all, &[1], &[1, 1], 5, 4).is_err());
        assert!(
            Plan::new(&[BlkDriver::Rnull], &[1], &[2], 5, 4).is_err(),
            "nothing measurable"
        );
    }

    #[test]
    fn every_round_runs_every_cell_once_in_driver_blocks() {
        let p = default_plan();
        for r in 1..=5 {
            let order = p.round_order(r);
            let mut sorted = order.clone();
            sorted.sort();
            let mut want = p.cells.clone();
            want.sort();
            assert_eq!(sorted, want, "round {r}");
            // one contiguous block per driver
            let mut blocks: Vec<BlkDriver> = order.iter().map(|c| c.driver).collect();
            blocks.dedup();
            assert_eq!(blocks, p.driver_order(r), "round {r}");
        }
        let s = p.schedule();
        assert_eq!(s.len(), 210);
        assert_eq!(s[0], (1, p.cells[0]));
        assert_eq!(s[209].0, 5);
    }

    #[test]
    fn drivers_rotate_and_blocks_alternate() {
        let p = default_plan();
        use BlkDriver::*;
        assert_eq!(p.driver_order(1), [C, Rust, NullBlk, Rnull]);
        assert_eq!(p.driver_order(2), [Rust, NullBlk, Rnull, C]);
        assert_eq!(p.driver_order(5), [C, Rust, NullBlk, Rnull]);
        // over 4 rounds every driver takes every place once
        let mut places: HashMap<(BlkDriver, usize), u32> = HashMap::new();
        for r in 1..=4 {
            for (i, d) in p.driver_order(r).into_iter().enumerate() {
                *places.entry((d, i)).or_default() += 1;
            }
        }
        assert_eq!(places.len(), 16);
        assert!(places.values().all(|&n| n == 1));
        // odd rounds run a block in plan order, even rounds reversed
        let c1: Vec<Cell> = p
            .round_order(1)
            .into_iter()
            .filter(|c| c.driver == C)
            .collect();
        let mut c2: Vec<Cell> = p
            .round_order(2)
            .into_iter()
            .filter(|c| c.driver == C)
            .collect();
        c2.reverse();
        assert_eq!(c1, c2);
        assert_eq!(c1[0].key(), "c/randread/qd1/q1");
    }

    #[test]
    fn estimate() {
        let p = default_plan();
        // 40 s boot + 210 runs of (4 + 3) s + 5 rounds x (10 + 10 + 3 + 3) s
        let secs = 40 + 210 * 7 + 5 * 26;
        assert_eq!(p.estimate(&tcg()), Duration::from_secs(secs));
        assert!(secs < 30 * 60, "the default matrix stays under 30 minutes");
        assert_eq!(
            p.estimate_text(&tcg()),
            "42 cells x 5 rounds x (4 s fio + ~3 s around it) + 5 rounds x ~26 s loading and unloading 4 drivers + ~40 s boot = about 27m20s"
        );
        assert_eq!(p.limit(&tcg()), Duration::from_secs(2 * secs + 600));
        assert_eq!(
            p.per_run_estimate(&tcg()),
            Duration::from_secs(210 * 7 + 5 * 26) / 210
        );
        assert_eq!(
            p.estimate(&Accel::Kvm),
            Duration::from_secs(15 + 210 * 5 + 5 * 8)
        );
    }

    #[test]
    fn vars() {
        let p = Plan::new(&[BlkDriver::Rust, BlkDriver::Rnull], &[16], &[1, 2], 2, 3).unwrap();
        let vars: HashMap<String, String> = p.guest_vars().into_iter().collect();
        assert_eq!(vars["SECTIONS"], "matrix");
        assert_eq!(vars["RUNTIME"], "3");
        assert_eq!(vars["MATRIX_JOBS"], "2");
        assert_eq!(
            vars["MATRIX_PLAN"],
            "1:rust:randread:16:1 1:rust:randread:16:2 1:rust:randwrite:16:1 1:rust:randwrite:16:2 \
             1:rnull:randread:16:1 1:rnull:randwrite:16:1 \
             2:rnull:randwrite:16:1 2:rnull:randread:16:1 \
             2:rust:randwrite:16:2 2:rust:randwrite:16:1 2:rust:randread:16:2 2:rust:randread:16:1"
        );
    }
}
