//! The results of a `bench affinity` run: per cell and round the IOPS, the
//! completion latency and the CPU time per I/O (from the guest's samples);
//! flag on against flag off per round; the crossover of the cost sweep;
//! written as a markdown report and a CSV.

use std::collections::BTreeMap;

use super::affinity::{Cell, Plan};
use super::cpu::cpu_us_per_io;
use super::samples::{kiops, Samples};
use super::stats::Summary;
use crate::markdown;

/// The section of the guest's samples.
const SECTION: &str = "rqa";

/// What one cell measured, by round.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellStats {
    pub iops: BTreeMap<u32, f64>,
    pub p50_us: BTreeMap<u32, f64>,
    pub p99_us: BTreeMap<u32, f64>,
    /// Non-idle time of the server's CPU per I/O.
    pub server_us: BTreeMap<u32, f64>,
    /// System + irq + softirq time of the server's CPU per I/O.
    pub server_sys_us: BTreeMap<u32, f64>,
    /// Non-idle time of all CPUs per I/O.
    pub total_us: BTreeMap<u32, f64>,
}

/// The stats of every cell of the plan.
pub type Stats = BTreeMap<Cell, CellStats>;

/// One measure of a cell, by round.
pub type Pick = fn(&CellStats) -> &BTreeMap<u32, f64>;

pub fn collect(s: &Samples, plan: &Plan) -> Stats {
    let rounds = |config: &str| super::samples::by_round(s, SECTION, config);
    let hz = rounds("clk_tck").values().next().copied().unwrap_or(100.0);
    plan.cells
        .iter()
        .map(|&cell| {
            let key = cell.key();
            let ios = rounds(&format!("{key}/ios"));
            let per_io = |what: &str| -> BTreeMap<u32, f64> {
                rounds(&format!("{key}/{what}"))
                    .iter()
                    .filter_map(|(r, &t)| Some((*r, cpu_us_per_io(t, hz, *ios.get(r)?)?)))
                    .collect()
            };
            let stats = CellStats {
                iops: rounds(&format!("{key}/iops")),
                p50_us: rounds(&format!("{key}/p50_us")),
                p99_us: rounds(&format!("{key}/p99_us")),
                server_us: per_io("server_ticks"),
                server_sys_us: per_io("server_sys_ticks"),
                total_us: per_io("busy_ticks"),
            };
            (cell, stats)
        })
        .collect()
}

fn summary(v: &BTreeMap<u32, f64>) -> Option<Summary> {
    Summary::of(v.values())
}

/// The per-round ratios on/off of `pick`, over the rounds both have.
pub fn ratio(stats: &Stats, cell: Cell, pick: Pick) -> Option<Summary> {
    let off = pick(stats.get(&cell.with_flag(false))?);
    let on = pick(stats.get(&cell.with_flag(true))?);
    let r: Vec<f64> = off
        .iter()
        .filter(|(_, &v)| v > 0.0)
        .filter_map(|(k, &v)| Some(on.get(k)? / v))
        .collect();
    Summary::of(&r)
}

fn iops_of(s: &CellStats) -> &BTreeMap<u32, f64> {
    &s.iops
}

/// `median (smallest-largest)` with `f`, or `-`.
fn spread_text(s: Option<Summary>, f: impl Fn(f64) -> String) -> String {
    match s {
        Some(s) => format!("{} ({}-{})", f(s.median), f(s.min), f(s.max)),
        None => "-".to_string(),
    }
}

fn median_text(s: Option<Summary>, digits: usize) -> String {
    s.map_or("-".to_string(), |s| format!("{:.digits$}", s.median))
}

fn times(x: f64) -> String {
    format!("{x:.2}x")
}

/// The cost sweep's crossover: the smallest cost from which the median
/// on/off IOPS ratio is above 1 at that cost and every larger one.
pub fn crossover(stats: &Stats, plan: &Plan) -> Option<u32> {
    let mut costs = plan.sweep_ns.clone();
    costs.sort();
    let pays: Vec<(u32, bool)> = costs
        .iter()
        .map(|&c| {
            let r = ratio(stats, plan.sweep_cell(c), iops_of);
            (c, r.is_some_and(|r| r.median > 1.0))
        })
        .collect();
    let last_loss = pays.iter().rposition(|(_, p)| !p);
    match last_loss {
        None => pays.first().map(|(c, _)| *c),
        Some(i) => pays.get(i + 1).map(|(c, _)| *c),
    }
}

/// How the run was made, for the report's header.
pub struct RunInfo {
    /// `QEMU TCG (...), 2 vCPUs`.
    pub machine: String,
    pub date: String,
    /// The guest's clocksource, from the console.
    pub clocksource: String,
}

fn us_cost(ns: u32) -> String {
    let us = f64::from(ns) / 1000.0;
    format!("{} us", super::plot::trim(us))
}

/// The markdown report. `plot` is the file name of the SVG beside it.
pub fn markdown(
    stats: &Stats,
    plan: &Plan,
    info: &RunInfo,
    failures: &[String],
    plot: &str,
) -> String {
    let rounds = plan.rounds();
    let runtime = plan.runtime();
    let server = plan.cpus - 1;
    let mut out = String::new();
    out += "## UBLK_F_SUPPORT_RQ_AFFINITY with a ublk server whose CPU is the bottleneck\n\n";
    out += &format!(
        "Measured with `cargo xtask bench affinity` in one boot on {}, {}; {rounds} rounds; guest clocksource {}.\n\n",
        info.machine, info.date, info.clocksource
    );
    let fio_cpus = if server == 1 {
        "CPU 0".to_string()
    } else {
        format!("CPUs 0-{}", server - 1)
    };
    let lines = [
        format!(
            "Server: kublk's null target, 1 queue, depth 128, `--busy_ns N` (a busy-wait of N ns on \
             CLOCK_MONOTONIC per I/O in the server thread), every thread pinned to CPU {server}; \
             C driver (`ublk_drv`) with the series; scheduler `none`."
        ),
        format!(
            "fio: 4k randread, io_uring, direct, {} job(s) on {fio_cpus} (one per CPU), `iodepth` per job, \
             {runtime} s time-based.",
            plan.cpus - 1
        ),
        "flag: the device was added with `--rq_affinity` (UBLK_F_SUPPORT_RQ_AFFINITY: every completion \
         through blk_mq_complete_request()) or without; `rqa`: /sys/block/ublkbN/queue/rq_affinity."
            .to_string(),
        "Order: each round runs every cell once, flag off and on of a configuration next to each \
         other; every other round runs them in reverse order."
            .to_string(),
        "IOPS and latency: fio's (completion latency, clat, percentiles of the whole run, group \
         reporting); median over the rounds (smallest-largest). on/off: the median of the per-round \
         ratios (smallest-largest)."
            .to_string(),
        format!(
            "CPU per I/O: non-idle time (user+nice+system+irq+softirq+steal of /proc/stat) over the last \
             {} s of each run divided by the READs the device completed then: of the server's CPU \
             (`server`, its system+irq+softirq part `server sys`) and of all CPUs (`total`); median \
             over the rounds.",
            runtime - 1
        ),
    ];
    for l in lines {
        out += &format!("- {l}\n");
    }
    out += "\n";
    out += &format!("![IOPS, CPU per I/O and the cost sweep]({plot})\n\n");

    out += &format!(
        "### Server cost {} per I/O: IOPS and completion latency\n\n",
        us_cost(plan.cost_ns)
    );
    out += &markdown::header(&[
        "iodepth",
        "rqa",
        "IOPS off",
        "IOPS on",
        "on/off",
        "p50 us off",
        "p50 us on",
        "p99 us off",
        "p99 us on",
    ]);
    for &qd in &plan.base.iodepths {
        for &rqa in &plan.rqas {
            let cell = plan.main_cell(qd, rqa);
            let (off, on) = (stats.get(&cell), stats.get(&cell.with_flag(true)));
            let get = |s: Option<&CellStats>, pick: Pick| s.and_then(|s| summary(pick(s)));
            out += &markdown::row(&[
                qd.to_string(),
                rqa.to_string(),
                spread_text(get(off, iops_of), kiops),
                spread_text(get(on, iops_of), kiops),
                spread_text(ratio(stats, cell, iops_of), times),
                median_text(get(off, |s| &s.p50_us), 0),
                median_text(get(on, |s| &s.p50_us), 0),
                median_text(get(off, |s| &s.p99_us), 0),
                median_text(get(on, |s| &s.p99_us), 0),
            ]);
        }
    }

    out += &format!(
        "\n### Server cost {} per I/O: CPU time per I/O in microseconds, median\n\n",
        us_cost(plan.cost_ns)
    );
    out += &markdown::header(&[
        "iodepth",
        "rqa",
        "server off",
        "server on",
        "server sys off",
        "server sys on",
        "total off",
        "total on",
    ]);
    for &qd in &plan.base.iodepths {
        for &rqa in &plan.rqas {
            let cell = plan.main_cell(qd, rqa);
            let mut row = vec![qd.to_string(), rqa.to_string()];
            row.extend(cpu_cells(stats, cell));
            out += &markdown::row(&row);
        }
    }

    out += &format!(
        "\n### The crossover: server cost per I/O swept at iodepth {}, rq_affinity {}\n\n",
        plan.sweep_iodepth, plan.sweep_rqa
    );
    out += &markdown::header(&[
        "server cost",
        "IOPS off",
        "IOPS on",
        "on/off",
        "server off",
        "server on",
        "server sys off",
        "server sys on",
        "total off",
        "total on",
    ]);
    for &c in &plan.sweep_ns {
        let cell = plan.sweep_cell(c);
        let get = |f: bool| stats.get(&cell.with_flag(f)).and_then(|s| summary(&s.iops));
        let mut row = vec![
            us_cost(c),
            spread_text(get(false), kiops),
            spread_text(get(true), kiops),
            spread_text(ratio(stats, cell, iops_of), times),
        ];
        row.extend(cpu_cells(stats, cell));
        out += &markdown::row(&row);
    }
    out += "\n";
    out += &crossover_text(stats, plan);
    out += "\n";
    if !failures.is_empty() {
        out += "\nFailures:\n\n";
        for f in failures {
            out += &format!("- {f}\n");
        }
    }
    out
}

/// The CPU columns of a row: server, server sys and total, each off and
/// on.
fn cpu_cells(stats: &Stats, cell: Cell) -> Vec<String> {
    let mut cells = Vec::new();
    let picks: [Pick; 3] = [|s| &s.server_us, |s| &s.server_sys_us, |s| &s.total_us];
    for pick in picks {
        for f in [false, true] {
            let s = stats.get(&cell.with_flag(f)).and_then(|s| summary(pick(s)));
            cells.push(median_text(s, 1));
        }
    }
    cells
}

/// The sentence under the sweep: from which cost the flag pays and what it
/// costs below.
pub fn crossover_text(stats: &Stats, plan: &Plan) -> String {
    let mut costs = plan.sweep_ns.clone();
    costs.sort();
    let ratio_at = |c: u32| ratio(stats, plan.sweep_cell(c), iops_of);
    let below = |limit: u32| -> Vec<String> {
        costs
            .iter()
            .filter(|&&c| c < limit)
            .filter_map(|&c| Some(format!("{} at {}", times(ratio_at(c)?.median), us_cost(c))))
            .collect()
    };
    match crossover(stats, plan) {
        Some(c) => {
            let b = below(c);
            let mut t = format!(
                "Crossover: with rq_affinity {} at iodepth {}, the flag gives more IOPS (median of the \
                 per-round ratios above 1.00x) from a server cost of {} per I/O on, at every larger \
                 cost swept.",
                plan.sweep_rqa,
                plan.sweep_iodepth,
                us_cost(c)
            );
            if !b.is_empty() {
                t += &format!(" Below it, on/off: {}.", b.join(", "));
            }
            t + "\n"
        }
        None => format!(
            "Crossover: none within the sweep: with rq_affinity {} at iodepth {}, the flag does not \
             give more IOPS at the largest cost swept ({}); on/off: {}.\n",
            plan.sweep_rqa,
            plan.sweep_iodepth,
            costs.last().map_or("-".to_string(), |&c| us_cost(c)),
            below(u32::MAX).join(", ")
        ),
    }
}

fn opt(s: Option<Summary>, f: impl Fn(&Summary) -> f64, digits: usize) -> String {
    s.map_or(String::new(), |s| format!("{:.digits$}", f(&s)))
}

/// One row per cell: for each measure its median, smallest and largest
/// over the rounds; on the flag-on rows the per-round on/off IOPS ratio
/// too.
pub fn csv(stats: &Stats, plan: &Plan) -> String {
    let measures: [(&str, Pick, usize); 6] = [
        ("iops", iops_of, 0),
        ("p50_us", |s| &s.p50_us, 0),
        ("p99_us", |s| &s.p99_us, 0),
        ("server_cpu_us_per_io", |s| &s.server_us, 2),
        ("server_sys_us_per_io", |s| &s.server_sys_us, 2),
        ("total_cpu_us_per_io", |s| &s.total_us, 2),
    ];
    let mut head = vec!["flag,rq_affinity,iodepth,cost_ns,rounds".to_string()];
    let names = measures.iter().map(|m| m.0).chain(["on_off_iops_ratio"]);
    for name in names {
        head.push(format!("{name}_median,{name}_min,{name}_max"));
    }
    let mut out = head.join(",") + "\n";
    let three = |s: Option<Summary>, d: usize| -> String {
        [
            opt(s, |s| s.median, d),
            opt(s, |s| s.min, d),
            opt(s, |s| s.max, d),
        ]
        .join(",")
    };
    for cell in &plan.cells {
        let Some(s) = stats.get(cell) else { continue };
        let mut row = vec![
            (if cell.flag { "on" } else { "off" }).to_string(),
            cell.rqa.to_string(),
            cell.iodepth.to_string(),
            cell.cost_ns.to_string(),
            summary(&s.iops).map_or(0, |s| s.n).to_string(),
        ];
        for (_, pick, d) in measures {
            row.push(three(summary(pick(s)), d));
        }
        let r = cell.flag.then(|| ratio(stats, *cell, iops_of)).flatten();
        row.push(three(r, 3));
        out += &(row.join(",") + "\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::affinity::tests::opts;
    use super::super::samples::parse_csv;
    use super::*;

    /// Samples where the flag's IOPS are `gain(cost)` times the others'.
    fn samples(plan: &Plan, gain: impl Fn(u32) -> f64) -> Samples {
        let mut csv = String::from("rqa,clk_tck,0,100\n");
        for c in &plan.cells {
            for r in 1..=2u32 {
                let k = c.key();
                let base = 10_000.0 + 1000.0 * f64::from(r);
                let iops = if c.flag { base * gain(c.cost_ns) } else { base };
                csv += &format!("rqa,{k}/iops,{r},{iops}\n");
                csv += &format!("rqa,{k}/p50_us,{r},100\nrqa,{k}/p99_us,{r},300\n");
                csv += &format!("rqa,{k}/busy_ticks,{r},200\nrqa,{k}/server_ticks,{r},100\n");
                csv += &format!("rqa,{k}/server_sys_ticks,{r},40\nrqa,{k}/ios,{r},20000\n");
            }
        }
        parse_csv(&csv)
    }

    #[test]
    fn report() {
        let plan = Plan::new(&opts(&["--rounds", "2"])).unwrap();
        let s = collect(
            &samples(&plan, |c| if c >= 10_000 { 1.1 } else { 0.9 }),
            &plan,
        );
        assert_eq!(crossover(&s, &plan), Some(10_000));
        let cell = plan.cells[0];
        assert_eq!(s[&cell].server_us[&1], 50.0);
        assert_eq!(s[&cell].total_us[&2], 100.0);
        let info = RunInfo {
            machine: "QEMU TCG, 2 vCPUs".into(),
            date: "2026-12-06 15:00 UTC".into(),
            clocksource: "tsc".into(),
        };
        let md = markdown(&s, &plan, &info, &[], "affinity.svg");
        assert!(
            md.contains("| 96 | 2 | 11.5K (11.0K-12.0K) | 12.7K (12.1K-13.2K) | 1.10x (1.10x-1.10x) | 100 | 100 | 300 | 300 |"),
            "{md}"
        );
        assert!(
            md.contains("| 16 | 1 | 50.0 | 50.0 | 20.0 | 20.0 | 100.0 | 100.0 |"),
            "{md}"
        );
        assert!(
            md.contains("| 5 us | 11.5K (11.0K-12.0K) | 10.3K (9.9K-10.8K) | 0.90x (0.90x-0.90x) | 50.0 | 50.0 | 20.0 | 20.0 | 100.0 | 100.0 |"),
            "{md}"
        );
        assert!(
            md.contains("from a server cost of 10 us per I/O on, at every larger cost swept. Below it, on/off: 0.90x at 0 us, 0.90x at 2 us, 0.90x at 5 us."),
            "{md}"
        );
        let csv = csv(&s, &plan);
        assert_eq!(csv.lines().count(), 1 + plan.cells.len());
        assert!(
            csv.starts_with(
                "flag,rq_affinity,iodepth,cost_ns,rounds,iops_median,iops_min,iops_max,"
            ),
            "{csv}"
        );
        assert!(
            csv.contains("\non,2,96,20000,2,12650,12100,13200,100,100,100,300,300,300,50.00,50.00,50.00,20.00,20.00,20.00,100.00,100.00,100.00,1.100,1.100,1.100\n"),
            "{csv}"
        );
        assert!(csv.lines().nth(1).unwrap().ends_with(",,,"), "{csv}");
        // a loss at the largest cost: no crossover
        let s = collect(
            &samples(&plan, |c| if c == 40_000 { 0.9 } else { 1.1 }),
            &plan,
        );
        assert_eq!(crossover(&s, &plan), None);
        assert!(crossover_text(&s, &plan).starts_with("Crossover: none within the sweep"));
        // gains everywhere: from the smallest cost
        let s = collect(&samples(&plan, |_| 1.2), &plan);
        assert_eq!(crossover(&s, &plan), Some(0));
    }
}
