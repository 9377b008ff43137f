//! What a `bench affinity` run measures and in which order: the cells
//! (UBLK_F_SUPPORT_RQ_AFFINITY off/on x rq_affinity x iodepth x the
//! server's CPU cost per I/O), the order of each round, the plan handed to
//! the guest and the time estimate printed before the boot.

use anyhow::{bail, Result};
use std::time::Duration;

use super::plan;
use crate::guest::Accel;

/// `cargo xtask bench affinity`.
#[derive(Clone, Debug, clap::Args)]
pub struct AffinityOpts {
    #[command(flatten)]
    pub kernel: crate::pipeline::KernelOpts,
    /// The guest's vCPUs: the server runs on the last one, fio (one job
    /// per CPU) on the others.
    #[arg(long, default_value_t = crate::guest::CPUS)]
    pub cpus: u32,
    /// Rounds: every cell once per round, alternating inside each round.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Seconds per fio run.
    #[arg(long, alias = "seconds", default_value_t = 4)]
    pub runtime: u32,
    /// The fio iodepths (per job) of the main table, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,96")]
    pub iodepth: Vec<u32>,
    /// The queue/rq_affinity values of the main table, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    pub rq_affinity: Vec<u32>,
    /// The server's CPU cost per I/O in the main table, in ns (kublk null
    /// --busy_ns: a busy-wait of that much wall-clock time per I/O).
    #[arg(long, default_value_t = 20_000)]
    pub cost_ns: u32,
    /// The costs of the crossover sweep, ns, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,2000,5000,10000,20000,40000"
    )]
    pub sweep_ns: Vec<u32>,
    /// The rq_affinity of the crossover sweep.
    #[arg(long, default_value_t = 2)]
    pub sweep_rq_affinity: u32,
    /// The iodepth of the crossover sweep.
    #[arg(long, default_value_t = 96)]
    pub sweep_iodepth: u32,
    /// kublk option that requests UBLK_F_SUPPORT_RQ_AFFINITY.
    #[arg(long, default_value = "--rq_affinity", allow_hyphen_values = true)]
    pub flag_option: String,
}

/// One configuration measured once per round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cell {
    pub cost_ns: u32,
    pub iodepth: u32,
    pub rqa: u32,
    /// The device has UBLK_F_SUPPORT_RQ_AFFINITY.
    pub flag: bool,
}

impl Cell {
    /// The config part of the cell's samples: `on/rqa2/qd96/cost20000`.
    pub fn key(&self) -> String {
        format!(
            "{}/rqa{}/qd{}/cost{}",
            if self.flag { "on" } else { "off" },
            self.rqa,
            self.iodepth,
            self.cost_ns
        )
    }

    /// The same cell with the flag set to `flag`.
    pub fn with_flag(self, flag: bool) -> Cell {
        Cell { flag, ..self }
    }

    /// The cell as the guest reads it: `round:flag:rqa:iodepth:cost_ns`.
    fn token(&self, round: u32) -> String {
        format!(
            "{round}:{}:{}:{}:{}",
            u8::from(self.flag),
            self.rqa,
            self.iodepth,
            self.cost_ns
        )
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Iodepths (of the main table), rounds and seconds per fio run.
    pub base: plan::Plan,
    pub cpus: u32,
    pub rqas: Vec<u32>,
    pub cost_ns: u32,
    pub sweep_ns: Vec<u32>,
    pub sweep_rqa: u32,
    pub sweep_iodepth: u32,
    /// Every cell, flag off then on, in the order of the first round.
    pub cells: Vec<Cell>,
}

/// Guest seconds besides the fio runs and the boot (`affinity_run` prints
/// what a run really took, to correct them). TCG: the default run of
/// 2026-12-06 took 12m45s of guest time for 140 cell runs of 4 s and 12
/// devices, about 1.4 s per cell run besides fio, the devices included.
fn overhead(accel: &Accel) -> (u64, u64) {
    // (per cell: fio start and exit, the wait for the first I/O; per
    // device: kublk add, pinning, udev)
    match accel {
        Accel::Kvm => (1, 2),
        Accel::Tcg { .. } => (1, 3),
    }
}

fn check_list(what: &str, v: &[u32], max: u32) -> Result<()> {
    if v.is_empty() {
        bail!("{what}: give at least one value");
    }
    for (i, x) in v.iter().enumerate() {
        if *x > max {
            bail!("{what}: {x} is not in 0..={max}");
        }
        if v[..i].contains(x) {
            bail!("{what}: {x} is listed twice");
        }
    }
    Ok(())
}

impl Plan {
    pub fn new(o: &AffinityOpts) -> Result<Plan> {
        let base = plan::Plan::new(&o.iodepth, o.rounds, o.runtime)?;
        if o.runtime < 2 {
            bail!("--runtime: at least 2 seconds (the CPU time is measured over the run's last runtime - 1 s)");
        }
        if o.cpus < 2 {
            bail!("--cpus: at least 2 (one for the server, the others for fio)");
        }
        check_list("--rq-affinity", &o.rq_affinity, 2)?;
        check_list("--sweep-ns", &o.sweep_ns, 10_000_000)?;
        if o.cost_ns > 10_000_000 {
            bail!("--cost-ns: at most 10 ms");
        }
        if o.sweep_rq_affinity > 2 {
            bail!("--sweep-rq-affinity: 0, 1 or 2");
        }
        plan::Plan::new(&[o.sweep_iodepth], 1, 1)?;
        let mut cells = Vec::new();
        let mut push = |c: Cell| {
            if !cells.contains(&c) {
                cells.push(c);
                cells.push(c.with_flag(true));
            }
        };
        for &qd in &o.iodepth {
            for &rqa in &o.rq_affinity {
                push(Cell {
                    cost_ns: o.cost_ns,
                    iodepth: qd,
                    rqa,
                    flag: false,
                });
            }
        }
        for &cost_ns in &o.sweep_ns {
            push(Cell {
                cost_ns,
                iodepth: o.sweep_iodepth,
                rqa: o.sweep_rq_affinity,
                flag: false,
            });
        }
        Ok(Plan {
            base,
            cpus: o.cpus,
            rqas: o.rq_affinity.clone(),
            cost_ns: o.cost_ns,
            sweep_ns: o.sweep_ns.clone(),
            sweep_rqa: o.sweep_rq_affinity,
            sweep_iodepth: o.sweep_iodepth,
            cells,
        })
    }

    /// The flag-off cell of the main table at `iodepth` and `rqa`.
    pub fn main_cell(&self, iodepth: u32, rqa: u32) -> Cell {
        Cell {
            cost_ns: self.cost_ns,
            iodepth,
            rqa,
            flag: false,
        }
    }

    /// The flag-off cell of the cost sweep at `cost_ns`.
    pub fn sweep_cell(&self, cost_ns: u32) -> Cell {
        Cell {
            cost_ns,
            iodepth: self.sweep_iodepth,
            rqa: self.sweep_rqa,
            flag: false,
        }
    }

    pub fn rounds(&self) -> u32 {
        self.base.rounds
    }

    pub fn runtime(&self) -> u32 {
        self.base.runtime
    }

    /// The cells of round `round` (1-based) in the order it runs them:
    /// plan order in odd rounds, reversed in even ones, so that flag off
    /// and on take turns going first and a drift over the boot favours
    /// neither.
    pub fn round_order(&self, round: u32) -> Vec<Cell> {
        let mut v = self.cells.clone();
        if round.is_multiple_of(2) {
            v.reverse();
        }
        v
    }

    /// The whole run: (round, cell) in the order the guest runs them.
    pub fn schedule(&self) -> Vec<(u32, Cell)> {
        (1..=self.rounds())
            .flat_map(|r| self.round_order(r).into_iter().map(move |c| (r, c)))
            .collect()
    }

    pub fn total_runs(&self) -> u32 {
        self.cells.len() as u32 * self.rounds()
    }

    /// Devices the guest adds: one per (flag, cost).
    fn devices(&self) -> u64 {
        let mut d: Vec<(bool, u32)> = self.cells.iter().map(|c| (c.flag, c.cost_ns)).collect();
        d.sort();
        d.dedup();
        d.len() as u64
    }

    /// Expected length of the benchmark boot.
    pub fn estimate(&self, accel: &Accel) -> Duration {
        let (cell, dev) = overhead(accel);
        let runs = u64::from(self.total_runs()) * (u64::from(self.runtime()) + cell);
        Duration::from_secs(plan::boot_seconds(accel) + runs + self.devices() * dev)
    }

    /// How the estimate is made up, for the line printed before the boot.
    pub fn estimate_text(&self, accel: &Accel) -> String {
        let (cell, dev) = overhead(accel);
        format!(
            "{} cells x {} rounds x ({} s fio + ~{cell} s around it) + {} devices x ~{dev} s + ~{} s boot = about {}",
            self.cells.len(),
            self.rounds(),
            self.runtime(),
            self.devices(),
            plan::boot_seconds(accel),
            crate::progress::fmt_duration(self.estimate(accel))
        )
    }

    /// The watchdog's limit for the whole boot: it only bounds a wedged
    /// guest (every guest step has its own timeout).
    pub fn limit(&self, accel: &Accel) -> Duration {
        (self.estimate(accel) * 2 + Duration::from_secs(600)).max(Duration::from_secs(1800))
    }

    /// The job.env variables for bench.sh's `rqa` section.
    pub fn guest_vars(&self, flag_option: &str) -> Vec<(String, String)> {
        let tokens: Vec<String> = self.schedule().iter().map(|(r, c)| c.token(*r)).collect();
        let fio_cpus = if self.cpus == 2 {
            "0".to_string()
        } else {
            format!("0-{}", self.cpus - 2)
        };
        [
            ("SECTIONS", "rqa".to_string()),
            ("ROUNDS", self.rounds().to_string()),
            ("RUNTIME", self.runtime().to_string()),
            ("FLAG_OPT", flag_option.to_string()),
            ("RQA_SERVER_CPU", (self.cpus - 1).to_string()),
            ("RQA_FIO_CPUS", fio_cpus),
            ("RQA_JOBS", (self.cpus - 1).to_string()),
            ("RQA_PLAN", tokens.join(" ")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::HashMap;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        o: AffinityOpts,
    }

    pub fn opts(args: &[&str]) -> AffinityOpts {
        Cli::try_parse_from(std::iter::once("affinity").chain(args.iter().copied()))
            .unwrap()
            .o
    }

    fn tcg() -> Accel {
        Accel::Tcg {
            reason: "test".into(),
        }
    }

    #[test]
    fn default_cells() {
        let p = Plan::new(&opts(&[])).unwrap();
        // 3 iodepths x 3 rq_affinity + 6 sweep costs, one of them (20000
        // at rqa 2, qd 96) in the main table; each flag off and on
        assert_eq!(p.cells.len(), 2 * (9 + 5));
        assert_eq!(p.cells[0].key(), "off/rqa0/qd1/cost20000");
        assert_eq!(p.cells[1].key(), "on/rqa0/qd1/cost20000");
        assert_eq!(p.cells[18].key(), "off/rqa2/qd96/cost0");
        assert_eq!(p.devices(), 2 * 6);
        let secs = 40 + 28 * 5 * 5 + 12 * 3;
        assert_eq!(p.estimate(&tcg()), Duration::from_secs(secs));
        assert!(secs < 30 * 60, "the default run stays under 30 minutes");
    }

    #[test]
    fn checks() {
        assert!(Plan::new(&opts(&["--cpus", "1"])).is_err());
        assert!(Plan::new(&opts(&["--rq-affinity", "3"])).is_err());
        assert!(Plan::new(&opts(&["--rq-affinity", "1,1"])).is_err());
        assert!(Plan::new(&opts(&["--runtime", "1"])).is_err());
        assert!(Plan::new(&opts(&["--sweep-iodepth", "0"])).is_err());
        assert!(Plan::new(&opts(&["--seconds", "8"])).is_ok());
    }

    #[test]
    fn rounds_alternate() {
        let p = Plan::new(&opts(&[
            "--iodepth",
            "16",
            "--rq-affinity",
            "2",
            "--sweep-ns",
            "0",
        ]))
        .unwrap();
        let s: Vec<String> = p.schedule().iter().map(|(r, c)| c.token(*r)).collect();
        assert_eq!(s.len(), 4 * 5);
        assert_eq!(
            s[0..4],
            [
                "1:0:2:16:20000",
                "1:1:2:16:20000",
                "1:0:2:96:0",
                "1:1:2:96:0"
            ]
        );
        assert_eq!(
            s[4..8],
            [
                "2:1:2:96:0",
                "2:0:2:96:0",
                "2:1:2:16:20000",
                "2:0:2:16:20000"
            ]
        );
    }

    #[test]
    fn vars() {
        let p = Plan::new(&opts(&["--cpus", "4", "--rounds", "1"])).unwrap();
        let v: HashMap<String, String> = p.guest_vars("--rq_affinity").into_iter().collect();
        assert_eq!(v["SECTIONS"], "rqa");
        assert_eq!(v["RQA_SERVER_CPU"], "3");
        assert_eq!(v["RQA_FIO_CPUS"], "0-2");
        assert_eq!(v["RQA_JOBS"], "3");
        assert_eq!(v["FLAG_OPT"], "--rq_affinity");
        assert!(v["RQA_PLAN"].starts_with("1:0:0:1:20000 1:1:0:1:20000 "));
        let p = Plan::new(&opts(&[])).unwrap();
        let v: HashMap<String, String> = p.guest_vars("--rq_affinity").into_iter().collect();
        assert_eq!(v["RQA_FIO_CPUS"], "0");
    }
}
