//! The results of a `bench matrix` run: per cell the IOPS of each round and
//! the guest CPU time per I/O (from the guest's samples), their medians and
//! spreads, written as a markdown report and as a CSV.

use std::collections::BTreeMap;

use super::cpu;
use super::matrix::{BlkDriver, Cell, Plan, Rw};
use super::samples::{by_round, kiops, Samples};
use super::stats::{round_ratios, times, OverCells, Summary};
use crate::markdown;

/// The section of the guest's samples.
const SECTION: &str = "matrix";

/// A driver that failed in one run (matrix-failures.txt).
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub driver: String,
    pub round: u32,
    /// `rw/qd<iodepth>/q<queues>`, or `setup` / `unload`.
    pub what: String,
    pub reason: String,
}

/// Parses matrix-failures.txt: `driver|round|what|reason` lines.
pub fn parse_failures(text: &str) -> Vec<Failure> {
    super::samples::failure_lines(text)
        .filter_map(|[driver, round, what, reason]| {
            Some(Failure {
                driver: driver.to_string(),
                round: round.parse().ok()?,
                what: what.to_string(),
                reason: reason.to_string(),
            })
        })
        .collect()
}

/// What one cell measured, by round.
#[derive(Clone, Debug, PartialEq)]
pub struct CellStats {
    pub cell: Cell,
    pub iops: BTreeMap<u32, f64>,
    pub cpu_us: BTreeMap<u32, f64>,
    /// Hardware queues the guest saw in sysfs for the cell's device.
    pub hw_queues: Option<u32>,
    /// The cell's driver failed at some point of the run.
    pub driver_failed: bool,
}

impl CellStats {
    pub fn iops_summary(&self) -> Option<Summary> {
        Summary::of(self.iops.values())
    }
    pub fn cpu_summary(&self) -> Option<Summary> {
        Summary::of(self.cpu_us.values())
    }
}

/// The cells of the plan with what the guest recorded for them, in plan
/// order.
pub fn collect(s: &Samples, plan: &Plan, failures: &[Failure]) -> Vec<CellStats> {
    let rounds = |config: &str| by_round(s, SECTION, config);
    let user_hz = cpu::user_hz(s, SECTION);
    plan.cells
        .iter()
        .map(|&cell| {
            let key = cell.key();
            let iops = rounds(&format!("{key}/iops"));
            let cpu_us = cpu::per_round(s, SECTION, &key, user_hz);
            let hw_queues = rounds(&format!("hwq/{}/q{}", cell.driver.id(), cell.queues))
                .values()
                .next()
                .map(|&v| v as u32);
            CellStats {
                cell,
                iops,
                cpu_us,
                hw_queues,
                driver_failed: failures.iter().any(|f| f.driver == cell.driver.id()),
            }
        })
        .collect()
}

/// The median of the per-round Rust/C IOPS ratios of a row (rounds where
/// both ran), with their smallest and largest.
fn rust_c_ratio(c: Option<&CellStats>, rust: Option<&CellStats>) -> Option<(f64, f64, f64)> {
    ratio_of(c, rust, |s| &s.iops)
}

/// The Rust/C ratio of a cell's guest CPU time per I/O: the median of the
/// per-round ratios, and their spread.
fn rust_c_cpu_ratio(c: Option<&CellStats>, rust: Option<&CellStats>) -> Option<(f64, f64, f64)> {
    ratio_of(c, rust, |s| &s.cpu_us)
}

/// The median and spread of the per-round Rust/C ratios of what `of`
/// picks from a cell's rounds.
fn ratio_of(
    c: Option<&CellStats>,
    rust: Option<&CellStats>,
    of: fn(&CellStats) -> &BTreeMap<u32, f64>,
) -> Option<(f64, f64, f64)> {
    let s = Summary::of(&round_ratios(of(c?), of(rust?)))?;
    Some((s.median, s.min, s.max))
}

fn ratio_text(r: Option<(f64, f64, f64)>) -> String {
    match r {
        Some((m, lo, hi)) => format!("{} ({}-{})", times(m), times(lo), times(hi)),
        None => "-".to_string(),
    }
}

/// Over the cells that both ublk drivers ran: the Rust/C ratios of CPU
/// per I/O and of IOPS (each cell's the median of its per-round ratios).
fn over_cells(stats: &[CellStats], plan: &Plan) -> (Option<OverCells>, Option<OverCells>) {
    let (mut cpu, mut iops) = (Vec::new(), Vec::new());
    for (rw, q, qd) in rows(plan) {
        let (c, r) = (
            find(stats, BlkDriver::C, rw, q, qd),
            find(stats, BlkDriver::Rust, rw, q, qd),
        );
        if let Some((m, _, _)) = rust_c_cpu_ratio(c, r) {
            cpu.push(m);
        }
        if let Some((m, _, _)) = rust_c_ratio(c, r) {
            iops.push(m);
        }
    }
    (OverCells::of(&cpu), OverCells::of(&iops))
}

/// The summary line of the Rust/C ratios over the cells.
fn over_cells_text(cpu: Option<OverCells>, iops: Option<OverCells>) -> String {
    let part = |what: &str, o: Option<OverCells>, at: &str, k: fn(&OverCells) -> usize| match o {
        Some(o) => format!(
            "{what} Rust/C median {}, {} of {} cells {at} 1.00x",
            times(o.median),
            k(&o),
            o.n
        ),
        None => format!("{what} Rust/C: no cell with both drivers"),
    };
    format!(
        "Over the cells: {}; {}.",
        part("CPU per I/O", cpu, "at most", |o| o.at_most_one),
        part("IOPS", iops, "at least", |o| o.at_least_one)
    )
}

/// How the run was made, for the report's header.
pub struct RunInfo {
    /// `QEMU TCG (...), 2 vCPUs`.
    pub machine: String,
    /// When it ran (UTC).
    pub date: String,
}

/// The rows of the tables: (rw, queues, iodepth) in plan order.
fn rows(plan: &Plan) -> Vec<(Rw, u32, u32)> {
    let mut rows = Vec::new();
    for rw in Rw::ALL {
        for &q in &plan.queues {
            for &qd in &plan.base.iodepths {
                rows.push((rw, q, qd));
            }
        }
    }
    rows
}

/// The titles of the columns of both tables: the row's cell, then a
/// column per driver.
fn table_titles(drivers: &[BlkDriver]) -> Vec<String> {
    let mut titles: Vec<String> = ["rw", "queues", "iodepth"].map(String::from).into();
    titles.extend(drivers.iter().map(|d| d.label().to_string()));
    titles
}

fn find(stats: &[CellStats], d: BlkDriver, rw: Rw, q: u32, qd: u32) -> Option<&CellStats> {
    stats.iter().find(|s| {
        s.cell.driver == d && s.cell.rw == rw && s.cell.queues == q && s.cell.iodepth == qd
    })
}

/// The text of a table cell without a value.
fn missing(stats: Option<&CellStats>) -> &'static str {
    match stats {
        None => "n/a*",
        Some(s) if s.driver_failed => "failed",
        Some(_) => "-",
    }
}

fn iops_text(s: Option<&CellStats>, rounds: u32) -> String {
    match s.and_then(|s| s.iops_summary()) {
        Some(v) => {
            let partial = if v.n < rounds as usize {
                format!(", {} of {rounds} rounds", v.n)
            } else {
                String::new()
            };
            format!(
                "{} ({}-{}{partial})",
                kiops(v.median),
                kiops(v.min),
                kiops(v.max)
            )
        }
        None => missing(s).to_string(),
    }
}

fn cpu_text(s: Option<&CellStats>) -> String {
    match s.and_then(|s| s.cpu_summary()) {
        Some(v) => cpu::us(v.median),
        None => missing(s).to_string(),
    }
}

/// The markdown report: how it was measured, the IOPS table, the CPU table
/// and the notes. `plot` is the file name of the SVG beside it.
pub fn markdown(
    stats: &[CellStats],
    plan: &Plan,
    info: &RunInfo,
    failures: &[Failure],
    plot: &str,
) -> String {
    let rounds = plan.rounds();
    let runtime = plan.runtime();
    let drivers = &plan.drivers;
    let both_ublk = drivers.contains(&BlkDriver::C) && drivers.contains(&BlkDriver::Rust);
    let mut out = String::new();
    out += "## ublk drivers against the in-kernel null drivers\n\n";
    out += &format!(
        "Measured with `cargo xtask bench matrix` in one boot on {}, {}; {rounds} rounds.\n\n",
        info.machine, info.date,
    );
    let lines = [
        format!(
            "fio per cell: 4k `rw`, ioengine=io_uring, direct=1, {} jobs (one per vCPU), `iodepth` per job, \
             {runtime} s time-based; the same job for every driver, only the device differs.",
            crate::guest::CPUS
        ),
        "C ublk (`ublk_drv`) and Rust ublk (`rust_ublk`): kublk's null target, `-q` queues, depth 128; \
         one of the two modules loaded at a time."
            .to_string(),
        "null_blk (queue_mode=2, irqmode=0, hw_queue_depth=128, submit_queues=`queues`, poll_queues=0) \
         and rnull (irqmode 0): complete in the kernel, the ceiling. Scheduler `none` on every device."
            .to_string(),
        "Order: each round runs every cell once, one block per driver (its module loaded only for its \
         block); the driver order rotates by one each round, and a block's cells run in reverse order \
         every other round."
            .to_string(),
        "IOPS: fio's, median over the rounds (smallest-largest). Rust/C: the median of the per-round \
         ratios of the two ublk drivers (smallest-largest)."
            .to_string(),
        format!(
            "CPU per I/O: {}; median over the rounds.",
            cpu::method(&format!("the last {} s of each run", runtime - 1))
        ),
    ];
    for l in lines {
        out += &format!("- {l}\n");
    }
    out += "\n";
    out += &format!("![IOPS and CPU time per I/O]({plot})\n\n");

    out += &format!("### IOPS, median (smallest-largest) of {rounds} rounds\n\n");
    let mut titles = table_titles(drivers);
    if both_ublk {
        titles.push("Rust/C".to_string());
    }
    out += &markdown::header(&titles);
    for (rw, q, qd) in rows(plan) {
        let mut cells = vec![rw.id().to_string(), q.to_string(), qd.to_string()];
        for &d in drivers {
            cells.push(iops_text(find(stats, d, rw, q, qd), rounds));
        }
        if both_ublk {
            let r = rust_c_ratio(
                find(stats, BlkDriver::C, rw, q, qd),
                find(stats, BlkDriver::Rust, rw, q, qd),
            );
            cells.push(ratio_text(r));
        }
        out += &markdown::row(&cells);
    }

    out += &format!("\n### Guest CPU time per I/O in microseconds, median of {rounds} rounds\n\n");
    let mut titles = table_titles(drivers);
    if both_ublk {
        titles.push("Rust/C".to_string());
    }
    out += &markdown::header(&titles);
    for (rw, q, qd) in rows(plan) {
        let mut cells = vec![rw.id().to_string(), q.to_string(), qd.to_string()];
        for &d in drivers {
            cells.push(cpu_text(find(stats, d, rw, q, qd)));
        }
        if both_ublk {
            cells.push(ratio_text(rust_c_cpu_ratio(
                find(stats, BlkDriver::C, rw, q, qd),
                find(stats, BlkDriver::Rust, rw, q, qd),
            )));
        }
        out += &markdown::row(&cells);
    }
    if both_ublk {
        let (cpu, iops) = over_cells(stats, plan);
        out += &format!(
            "\n{} (Rust/C of a cell: the median of its per-round ratios, smallest-largest.)\n",
            over_cells_text(cpu, iops)
        );
    }

    let notes = notes(stats, plan, failures);
    if !notes.is_empty() {
        out += "\n";
        for n in notes {
            out += &format!("- {n}\n");
        }
    }
    out
}

/// What a reader must know besides the numbers: cells not run, queue
/// counts that differ from the plan, failures.
fn notes(stats: &[CellStats], plan: &Plan, failures: &[Failure]) -> Vec<String> {
    let mut notes = Vec::new();
    if plan
        .unsupported
        .iter()
        .any(|c| c.driver == BlkDriver::Rnull)
    {
        notes.push(
            "n/a*: rnull in Linux 7.3 has one hardware queue (`TagSet::new(1, 256, 1, ..)` in \
             drivers/block/rnull/rnull.rs: 1 queue, 256 tags; its configfs has no queue setting), \
             so its cells with more queues are not run."
                .to_string(),
        );
    }
    for s in stats {
        if let Some(seen) = s.hw_queues {
            if seen != s.cell.queues {
                notes.push(format!(
                    "{} with {} queue(s): the guest saw {seen} hardware queue(s) in /sys/block/*/mq.",
                    s.cell.driver.label(),
                    s.cell.queues
                ));
            }
        }
    }
    notes.dedup();
    if stats
        .iter()
        .any(|s| !s.iops.is_empty() && s.cpu_us.is_empty())
    {
        notes.push("CPU per I/O `-`: the run ended before its measuring window did, or the device's I/O count did not move.".to_string());
    }
    for f in failures {
        notes.push(format!(
            "{} failed in round {} ({}): {}",
            BlkDriver::from_id(&f.driver).map_or(f.driver.as_str(), |d| d.label()),
            f.round,
            f.what,
            f.reason
        ));
    }
    notes
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or(String::new(), |v| format!("{v:.digits$}"))
}

/// One row per cell, the unsupported ones included.
pub fn csv(stats: &[CellStats], plan: &Plan) -> String {
    let mut out = String::from(
        "driver,rw,queues,iodepth,rounds,iops_median,iops_min,iops_max,cpu_us_per_io_median,cpu_us_per_io_min,cpu_us_per_io_max,hw_queues_seen,note\n",
    );
    for s in stats {
        let c = s.cell;
        let i = s.iops_summary();
        let p = s.cpu_summary();
        let note = if i.is_none() && s.driver_failed {
            "failed"
        } else {
            ""
        };
        out += &format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{note}\n",
            c.driver.id(),
            c.rw.id(),
            c.queues,
            c.iodepth,
            i.map_or(0, |i| i.n),
            opt(i.map(|i| i.median), 0),
            opt(i.map(|i| i.min), 0),
            opt(i.map(|i| i.max), 0),
            opt(p.map(|p| p.median), 2),
            opt(p.map(|p| p.min), 2),
            opt(p.map(|p| p.max), 2),
            s.hw_queues.map_or(String::new(), |q| q.to_string()),
        );
    }
    for c in &plan.unsupported {
        out += &format!(
            "{},{},{},{},0,,,,,,,,not run: {} has at most {} hardware queue(s)\n",
            c.driver.id(),
            c.rw.id(),
            c.queues,
            c.iodepth,
            c.driver.label(),
            c.driver.max_queues()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::samples::parse_csv;
    use super::*;

    fn plan() -> Plan {
        Plan::new(&BlkDriver::ALL, &[1, 16], &[1, 2], 3, 4).unwrap()
    }

    /// Three rounds of c/randread/qd1/q1, two of rust, one of null_blk at
    /// 2 queues; USER_HZ 100.
    const SAMPLES: &str = "matrix,clk_tck,0,100\n\
        matrix,c/randread/qd1/q1/iops,1,10000\nmatrix,c/randread/qd1/q1/busy_ticks,1,200\nmatrix,c/randread/qd1/q1/ios,1,30000\n\
        matrix,c/randread/qd1/q1/iops,2,12000\nmatrix,c/randread/qd1/q1/busy_ticks,2,150\nmatrix,c/randread/qd1/q1/ios,2,30000\n\
        matrix,c/randread/qd1/q1/iops,3,11000\nmatrix,c/randread/qd1/q1/busy_ticks,3,300\nmatrix,c/randread/qd1/q1/ios,3,30000\n\
        matrix,rust/randread/qd1/q1/iops,1,9000\nmatrix,rust/randread/qd1/q1/iops,3,13200\n\
        matrix,null_blk/randread/qd1/q2/iops,2,150000\nmatrix,hwq/null_blk/q2,2,2\nmatrix,hwq/c/q1,1,1\n";

    fn stats(failures: &[Failure]) -> Vec<CellStats> {
        collect(&parse_csv(SAMPLES), &plan(), failures)
    }

    #[test]
    fn summaries() {
        let s = stats(&[]);
        assert_eq!(s.len(), plan().cells.len());
        let c = &s[0];
        assert_eq!(c.cell.key(), "c/randread/qd1/q1");
        assert_eq!(
            c.iops_summary(),
            Some(Summary {
                median: 11000.0,
                min: 10000.0,
                max: 12000.0,
                n: 3
            })
        );
        // 200, 150 and 300 ticks of 10 ms over 30000 I/Os
        let p = c.cpu_summary().unwrap();
        assert_eq!((p.n, p.min, p.max), (3, 50.0, 100.0));
        assert!((p.median - 66.666).abs() < 0.01, "{p:?}");
        assert_eq!(c.hw_queues, Some(1));
        assert_eq!(Summary::of(&[]), None);
        let r = s
            .iter()
            .find(|s| s.cell.key() == "rust/randread/qd1/q1")
            .unwrap();
        assert!(r.cpu_us.is_empty());
        assert_eq!(r.iops_summary().unwrap().median, 11100.0);
        // ratios of rounds 1 and 3: 0.9 and 1.2
        let (m, lo, hi) = rust_c_ratio(Some(c), Some(r)).unwrap();
        assert!((m - 1.05).abs() < 1e-9 && lo == 0.9 && (hi - 1.2).abs() < 1e-9);
    }

    #[test]
    fn cpu_ratios_over_cells() {
        // Rust's CPU per I/O in rounds 1 and 2: 40 and 75 us against C's 66.7 and 50.
        let samples = format!(
            "{SAMPLES}matrix,rust/randread/qd1/q1/busy_ticks,1,120\nmatrix,rust/randread/qd1/q1/ios,1,30000\n\
             matrix,rust/randread/qd1/q1/busy_ticks,2,225\nmatrix,rust/randread/qd1/q1/ios,2,30000\n"
        );
        let p = plan();
        let s = collect(&parse_csv(&samples), &p, &[]);
        let find_key = |k: &str| s.iter().find(|s| s.cell.key() == k);
        let (m, lo, hi) = rust_c_cpu_ratio(
            find_key("c/randread/qd1/q1"),
            find_key("rust/randread/qd1/q1"),
        )
        .unwrap();
        // rounds 1 and 2: 40/66.7 = 0.6 and 75/50 = 1.5
        assert!(
            (lo - 0.6).abs() < 1e-9 && (hi - 1.5).abs() < 1e-9,
            "{lo} {hi}"
        );
        assert!((m - 1.05).abs() < 1e-9, "{m}");
        let (cpu, iops) = over_cells(&s, &p);
        assert_eq!(
            over_cells_text(cpu, iops),
            "Over the cells: CPU per I/O Rust/C median 1.05x, 0 of 1 cells at most 1.00x; \
             IOPS Rust/C median 1.05x, 1 of 1 cells at least 1.00x."
        );
        assert_eq!(ratio_text(Some((0.996, 0.5, 2.0))), "1.00x (0.50x-2.00x)");
        assert_eq!(ratio_text(None), "-");
    }

    #[test]
    fn failures() {
        let f = parse_failures("rust|2|randwrite/qd16/q2|fio failed (exit 1)\nbad\nc|x|setup|y\n");
        assert_eq!(
            f,
            [Failure {
                driver: "rust".into(),
                round: 2,
                what: "randwrite/qd16/q2".into(),
                reason: "fio failed (exit 1)".into()
            }]
        );
    }

    #[test]
    fn markdown_tables() {
        let f = parse_failures("rnull|1|setup|modprobe rnull_mod failed\n");
        let info = RunInfo {
            machine: "QEMU TCG, 2 vCPUs".into(),
            date: "2026-12-01 17:00 UTC".into(),
        };
        let md = markdown(&stats(&f), &plan(), &info, &f, "matrix.svg");
        assert!(
            md.contains("on QEMU TCG, 2 vCPUs, 2026-12-01 17:00 UTC; 3 rounds.\n\n- fio per cell: 4k `rw`, ioengine=io_uring, direct=1, 2 jobs (one per vCPU), `iodepth` per job, 4 s time-based;"),
            "{md}"
        );
        assert!(md.contains("over the last 3 s of each run"), "{md}");
        assert!(
            md.contains("![IOPS and CPU time per I/O](matrix.svg)"),
            "{md}"
        );
        assert!(
            md.contains("| rw | queues | iodepth | C ublk | Rust ublk | null_blk | rnull | Rust/C |\n|---|---|---|---|---|---|---|---|\n"),
            "{md}"
        );
        assert!(
            md.contains("| randread | 1 | 1 | 11.0K (10.0K-12.0K) | 11.1K (9.0K-13.2K, 2 of 3 rounds) | - | failed | 1.05x (0.90x-1.20x) |\n"),
            "{md}"
        );
        assert!(
            md.contains(
                "| randread | 2 | 1 | - | - | 150.0K (150.0K-150.0K, 1 of 3 rounds) | n/a* | - |\n"
            ),
            "{md}"
        );
        assert!(
            md.contains("| randread | 1 | 1 | 66.7 | - | - | failed | - |\n"),
            "{md}"
        );
        assert!(
            md.contains("- n/a*: rnull in Linux 7.3 has one hardware queue"),
            "{md}"
        );
        assert!(
            md.contains("- rnull failed in round 1 (setup): modprobe rnull_mod failed\n"),
            "{md}"
        );
        assert!(md.contains("- CPU per I/O `-`:"), "{md}");
        // Rust's IOPS in rounds 1 and 3, no CPU samples: one cell with an IOPS ratio.
        assert!(
            md.contains("\nOver the cells: CPU per I/O Rust/C: no cell with both drivers; IOPS Rust/C median 1.05x, 1 of 1 cells at least 1.00x."),
            "{md}"
        );
        // rows: 2 rw x 2 queue counts x 2 iodepths, in both tables
        assert_eq!(md.matches("| randwrite |").count(), 8, "{md}");
    }

    #[test]
    fn queue_mismatch_note() {
        let samples = "matrix,hwq/null_blk/q1,1,2\nmatrix,null_blk/randread/qd1/q1/iops,1,5\n";
        let p = plan();
        let s = collect(&parse_csv(samples), &p, &[]);
        let n = notes(&s, &p, &[]);
        assert_eq!(
            n.iter()
                .filter(|n| n.contains("null_blk with 1 queue(s): the guest saw 2"))
                .count(),
            1,
            "{n:?}"
        );
    }

    #[test]
    fn csv_rows() {
        let p = plan();
        let f = parse_failures("rnull|1|setup|why\n");
        let text = csv(&stats(&f), &p);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "driver,rw,queues,iodepth,rounds,iops_median,iops_min,iops_max,cpu_us_per_io_median,cpu_us_per_io_min,cpu_us_per_io_max,hw_queues_seen,note");
        assert_eq!(
            lines[1],
            "c,randread,1,1,3,11000,10000,12000,66.67,50.00,100.00,1,"
        );
        assert!(lines.contains(&"rust,randread,1,1,2,11100,9000,13200,,,,,"));
        assert!(lines.contains(&"null_blk,randread,2,1,1,150000,150000,150000,,,,2,"));
        assert!(lines.contains(&"rnull,randread,1,1,0,,,,,,,,failed"));
        assert!(lines.contains(
            &"rnull,randwrite,2,16,0,,,,,,,,not run: rnull has at most 1 hardware queue(s)"
        ));
        // header + every cell + the unsupported ones
        assert_eq!(lines.len(), 1 + p.cells.len() + p.unsupported.len());
        assert!(lines.iter().all(|l| l.split(',').count() == 13), "{text}");
    }
}
