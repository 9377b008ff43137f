//! The report of a `bench rust-vs-c` run. A cell is a data mode at an
//! iodepth; per cell each round's IOPS and guest CPU time per I/O of both
//! drivers, their per-round Rust/C ratios, the medians and the spread of
//! the ratios; a table with a line per cell; and per data mode and over all
//! cells the median of the cells' ratios and how many are at most (at
//! least) 1.00x.

use std::collections::BTreeMap;

use super::cpu::{self, us};
use super::mode::DataMode;
use super::plan::Plan;
use super::ratio::{failure_mode, Failure};
use super::samples::{by_round, kiops, Samples};
use super::stats::{median, round_ratios, spread, times as x, OverCells, Summary};
use crate::markdown;

/// The section of the guest's samples.
const SECTION: &str = "ratio";

/// What one driver measured in a cell, by round.
struct Runs {
    iops: BTreeMap<u32, f64>,
    /// Guest CPU time per I/O in microseconds.
    cpu_us: BTreeMap<u32, f64>,
}

/// What one cell measured: each driver's runs of rounds 1 to `rounds`.
struct Cell {
    c: Runs,
    rust: Runs,
}

impl Cell {
    fn read(s: &Samples, mode: DataMode, qd: u32, rounds: u32) -> Cell {
        let user_hz = cpu::user_hz(s, SECTION);
        let runs = |drv: &str| {
            let key = mode.sample_key(qd, drv);
            let planned = |m: BTreeMap<u32, f64>| -> BTreeMap<u32, f64> {
                m.into_iter()
                    .filter(|(r, _)| (1..=rounds).contains(r))
                    .collect()
            };
            Runs {
                iops: planned(by_round(s, SECTION, &key)),
                cpu_us: planned(cpu::per_round(s, SECTION, &key, user_hz)),
            }
        };
        Cell {
            c: runs("c"),
            rust: runs("rust"),
        }
    }

    /// The per-round Rust/C IOPS ratios.
    fn iops_ratios(&self) -> Vec<f64> {
        round_ratios(&self.c.iops, &self.rust.iops)
    }

    /// The per-round Rust/C ratios of the CPU time per I/O.
    fn cpu_ratios(&self) -> Vec<f64> {
        round_ratios(&self.c.cpu_us, &self.rust.cpu_us)
    }
}

fn values(m: &BTreeMap<u32, f64>) -> Vec<f64> {
    m.values().copied().collect()
}

fn median_or_dash(v: &[f64], f: fn(f64) -> String) -> String {
    if v.is_empty() {
        "-".to_string()
    } else {
        f(median(&mut v.to_vec()))
    }
}

fn spread_or_dash(v: &[f64]) -> String {
    spread(v).map_or("-".to_string(), |(lo, hi)| format!("{}-{}", x(lo), x(hi)))
}

/// The ratio of `rust` to `c` in one round, or `-`.
fn round_ratio(c: Option<&f64>, rust: Option<&f64>) -> String {
    match (c, rust) {
        (Some(&c), Some(&rust)) if c > 0.0 => x(rust / c),
        _ => "-".to_string(),
    }
}

/// One data mode at one iodepth: IOPS and CPU time per I/O per round, the
/// medians, the median of the per-round Rust/C ratios and their spread
/// (smallest to largest).
pub fn iodepth_table(
    s: &Samples,
    failures: &[Failure],
    mode: DataMode,
    qd: u32,
    rounds: u32,
) -> String {
    let d = Cell::read(s, mode, qd, rounds);
    let iops = |drv: &str, r: u32| {
        let runs = if drv == "c" { &d.c } else { &d.rust };
        runs.iops.get(&r).copied()
    };
    let cell = |drv: &str, r: u32| match iops(drv, r) {
        Some(v) => kiops(v),
        None => match failures.iter().find(|f| f.driver == drv) {
            Some(f) if f.iodepth == qd && f.round == r && failure_mode(f) == mode => {
                "failed".to_string()
            }
            Some(_) => "not run (failed earlier)".to_string(),
            None => "no result".to_string(),
        },
    };
    let cpu = |runs: &Runs, r: u32| runs.cpu_us.get(&r).map_or("-".to_string(), |&v| us(v));
    let what = match mode {
        DataMode::Copy => String::new(),
        m => format!(", {}", m.id()),
    };
    let mut out = markdown::header(&[
        &format!("fio 4k randread, iodepth {qd}, null target{what}"),
        "C (ublk_drv)",
        "Rust (rust_ublk)",
        "Rust/C",
        "C CPU/IO (us)",
        "Rust CPU/IO (us)",
        "Rust/C CPU/IO",
    ]);
    for r in 1..=rounds {
        out += &markdown::row(&[
            format!("round {r}"),
            cell("c", r),
            cell("rust", r),
            round_ratio(d.c.iops.get(&r), d.rust.iops.get(&r)),
            cpu(&d.c, r),
            cpu(&d.rust, r),
            round_ratio(d.c.cpu_us.get(&r), d.rust.cpu_us.get(&r)),
        ]);
    }
    let (iops_ratios, cpu_ratios) = (d.iops_ratios(), d.cpu_ratios());
    out += &markdown::row(&[
        format!(
            "median ({} C, {} Rust, {} ratios)",
            d.c.iops.len(),
            d.rust.iops.len(),
            iops_ratios.len()
        ),
        median_or_dash(&values(&d.c.iops), kiops),
        median_or_dash(&values(&d.rust.iops), kiops),
        median_or_dash(&iops_ratios, x),
        median_or_dash(&values(&d.c.cpu_us), us),
        median_or_dash(&values(&d.rust.cpu_us), us),
        median_or_dash(&cpu_ratios, x),
    ]);
    out += &markdown::row(&[
        "spread of the per-round ratios",
        "",
        "",
        &spread_or_dash(&iops_ratios),
        "",
        "",
        &spread_or_dash(&cpu_ratios),
    ]);
    out
}

/// One line per data mode and iodepth: median IOPS of each driver, the
/// median ratio and its spread; the same for the CPU time per I/O.
pub fn summary(s: &Samples, plan: &Plan) -> String {
    let mut out = markdown::header(&[
        "data mode",
        "iodepth",
        "C median",
        "Rust median",
        "Rust/C median",
        "Rust/C spread",
        "rounds with both",
        "C CPU/IO (us)",
        "Rust CPU/IO (us)",
        "CPU/IO Rust/C median",
        "CPU/IO Rust/C spread",
        "rounds with both CPU/IO",
    ]);
    for &mode in &plan.modes {
        for &qd in &plan.iodepths {
            let d = Cell::read(s, mode, qd, plan.rounds);
            let (iops_ratios, cpu_ratios) = (d.iops_ratios(), d.cpu_ratios());
            out += &markdown::row(&[
                mode.id().to_string(),
                qd.to_string(),
                median_or_dash(&values(&d.c.iops), kiops),
                median_or_dash(&values(&d.rust.iops), kiops),
                median_or_dash(&iops_ratios, x),
                spread_or_dash(&iops_ratios),
                format!("{} of {}", iops_ratios.len(), plan.rounds),
                median_or_dash(&values(&d.c.cpu_us), us),
                median_or_dash(&values(&d.rust.cpu_us), us),
                median_or_dash(&cpu_ratios, x),
                spread_or_dash(&cpu_ratios),
                format!("{} of {}", cpu_ratios.len(), plan.rounds),
            ]);
        }
    }
    out
}

/// `k of n` cells, or `-` without cells.
fn count(o: Option<OverCells>, k: fn(&OverCells) -> usize) -> String {
    o.map_or("-".to_string(), |o| format!("{} of {}", k(&o), o.n))
}

/// Per data mode and over all of them: the median over cells of each
/// cell's median per-round Rust/C ratio, and how many cells are at most
/// 1.00x (CPU time per I/O, IOPS) and at least 1.00x (IOPS).
pub fn over_cells(s: &Samples, plan: &Plan) -> String {
    let mut out = markdown::header(&[
        "data mode",
        "cells",
        "CPU/IO Rust/C, median of cells",
        "CPU/IO cells <= 1.00x",
        "IOPS Rust/C, median of cells",
        "IOPS cells <= 1.00x",
        "IOPS cells >= 1.00x",
    ]);
    let medians = |v: Vec<f64>| Summary::of(&v).map(|s| s.median);
    let mut all = (Vec::new(), Vec::new(), 0);
    let line = |name: &str, cpu: &[f64], iops: &[f64], cells: usize| {
        let (cpu, iops) = (OverCells::of(cpu), OverCells::of(iops));
        markdown::row(&[
            name.to_string(),
            cells.to_string(),
            cpu.map_or("-".to_string(), |o| x(o.median)),
            count(cpu, |o| o.at_most_one),
            iops.map_or("-".to_string(), |o| x(o.median)),
            count(iops, |o| o.at_most_one),
            count(iops, |o| o.at_least_one),
        ])
    };
    for &mode in &plan.modes {
        let (mut cpu, mut iops) = (Vec::new(), Vec::new());
        for &qd in &plan.iodepths {
            let d = Cell::read(s, mode, qd, plan.rounds);
            cpu.extend(medians(d.cpu_ratios()));
            iops.extend(medians(d.iops_ratios()));
        }
        out += &line(mode.id(), &cpu, &iops, plan.iodepths.len());
        all.0.extend(cpu);
        all.1.extend(iops);
        all.2 += plan.iodepths.len();
    }
    out += &line("all", &all.0, &all.1, all.2);
    out
}

/// The whole report: how it was measured (`machine`: `QEMU ..., 2
/// vCPUs`), a table per cell, the table of the cells and the summary over
/// cells.
pub fn markdown(s: &Samples, failures: &[Failure], plan: &Plan, machine: &str) -> String {
    let modes: Vec<&str> = plan.modes.iter().map(|m| m.id()).collect();
    let mut out = format!(
        "Measured with `cargo xtask bench rust-vs-c` in one boot: {machine}; kublk null target, 1 queue, depth 128, data mode {}; fio 4k randread, io_uring, direct, {}s per run; C and Rust driver in turn, C first in odd rounds and Rust first in even ones, each loaded only for its run.\n",
        modes.join(", "),
        plan.runtime
    );
    out += &if plan.runtime >= 2 {
        let window = format!(
            "{} s of each run, from 1 s after the device's first I/O (fio's ramp)",
            plan.runtime - 1
        );
        format!(
            "CPU/IO: guest CPU time per I/O in microseconds, {}; Rust/C: median of the per-round ratios.\n",
            cpu::method(&window)
        )
    } else {
        "CPU/IO: not measured: its window, the run's --runtime - 1 s after fio's 1 s ramp, is empty with --runtime 1.\n".to_string()
    };
    for &mode in &plan.modes {
        for &qd in &plan.iodepths {
            out += "\n";
            out += &iodepth_table(s, failures, mode, qd, plan.rounds);
        }
    }
    out += "\n";
    out += &summary(s, plan);
    out += "\nOver cells (a cell: a data mode at an iodepth; its ratio: the median of its per-round Rust/C ratios):\n\n";
    out += &over_cells(s, plan);
    out
}

#[cfg(test)]
mod tests {
    use super::super::ratio::parse_failures;
    use super::super::samples::parse_csv;
    use super::*;

    /// Fails unless `t` holds every one of `want`.
    fn assert_has(t: &str, want: &[&str]) {
        for w in want {
            assert!(t.contains(w), "{w:?} is not in:\n{t}");
        }
    }

    const CSV: &str = "ratio,qd16/c,1,50000\nratio,qd16/rust,1,40000\n\
                       ratio,qd16/c,2,52000\nratio,qd16/rust,2,39000\n\
                       ratio,qd16/c,3,51000\nratio,qd16/rust,3,41000\n\
                       ratio,qd1/c,1,10000\nratio,qd1/rust,1,12000\n\
                       ratio,qd1/c,2,10000\nratio,qd1/rust,2,9000\n\
                       ratio,qd1/c,3,10000\nratio,qd1/rust,3,10000\n";

    /// CSV with CPU samples at iodepth 16, USER_HZ 100: C 100, 120, 90 us
    /// per I/O; Rust 110, 108, 99 (ratios 1.10, 0.90, 1.10); round 3 of
    /// Rust outside the plan's 3 rounds is left out.
    fn with_cpu() -> String {
        let mut csv = CSV.to_string();
        csv += "ratio,clk_tck,0,100\n";
        for (drv, r, ticks) in [
            ("c", 1, 100),
            ("c", 2, 120),
            ("c", 3, 90),
            ("rust", 1, 110),
            ("rust", 2, 108),
            ("rust", 3, 99),
            ("rust", 4, 500),
        ] {
            csv += &format!("ratio,qd16/{drv}/busy_ticks,{r},{ticks}\nratio,qd16/{drv}/ios,{r},10000\nratio,qd16/{drv}/window_us,{r},2000000\n");
        }
        csv
    }

    #[test]
    fn per_iodepth() {
        let t = iodepth_table(&parse_csv(CSV), &[], DataMode::Copy, 16, 3);
        assert_has(
            &t,
            &[
                "| fio 4k randread, iodepth 16, null target |",
                "| round 1 | 50.0K | 40.0K | 0.80x |",
                "| median (3 C, 3 Rust, 3 ratios) | 51.0K | 40.0K | 0.80x |",
                "| spread of the per-round ratios | | | 0.75x-0.80x |",
            ],
        );
        let t = iodepth_table(&parse_csv(CSV), &[], DataMode::Copy, 1, 3);
        assert_has(
            &t,
            &[
                "| median (3 C, 3 Rust, 3 ratios) | 10.0K | 10.0K | 1.00x |",
                "| 0.90x-1.20x |",
            ],
        );
    }

    #[test]
    fn per_iodepth_cpu() {
        let s = parse_csv(&with_cpu());
        let t = iodepth_table(&s, &[], DataMode::Copy, 16, 3);
        assert_has(
            &t,
            &[
                "| Rust/C | C CPU/IO (us) | Rust CPU/IO (us) | Rust/C CPU/IO |\n",
                "| round 1 | 50.0K | 40.0K | 0.80x | 100.0 | 110.0 | 1.10x |\n",
                "| round 2 | 52.0K | 39.0K | 0.75x | 120.0 | 108.0 | 0.90x |\n",
                "| median (3 C, 3 Rust, 3 ratios) | 51.0K | 40.0K | 0.80x | 100.0 | 108.0 | 1.10x |\n",
                "| spread of the per-round ratios | | | 0.75x-0.80x | | | 0.90x-1.10x |\n",
            ],
        );
        // no CPU samples at iodepth 1
        let t = iodepth_table(&s, &[], DataMode::Copy, 1, 3);
        assert_has(
            &t,
            &[
                "| round 1 | 10.0K | 12.0K | 1.20x | - | - | - |\n",
                "| 0.90x-1.20x | | | - |\n",
            ],
        );
    }

    #[test]
    fn summary_over_iodepths() {
        let plan = Plan::new(&[1, 16, 128], 3, 10).unwrap();
        let t = summary(&parse_csv(CSV), &plan);
        assert_has(
            &t,
            &[
                "| copy | 1 | 10.0K | 10.0K | 1.00x | 0.90x-1.20x | 3 of 3 |",
                "| copy | 16 | 51.0K | 40.0K | 0.80x | 0.75x-0.80x | 3 of 3 |",
                "| copy | 128 | - | - | - | - | 0 of 3 |",
            ],
        );
        let t = summary(&parse_csv(&with_cpu()), &plan);
        assert_has(
            &t,
            &[
                "| copy | 16 | 51.0K | 40.0K | 0.80x | 0.75x-0.80x | 3 of 3 | 100.0 | 108.0 | 1.10x | 0.90x-1.10x | 3 of 3 |\n",
                "| copy | 1 | 10.0K | 10.0K | 1.00x | 0.90x-1.20x | 3 of 3 | - | - | - | - | 0 of 3 |\n",
            ],
        );
    }

    #[test]
    fn summary_over_cells() {
        // copy: CPU ratios 1.10 (qd16); IOPS 1.00 (qd1), 0.80 (qd16).
        // batch at qd16: CPU 0.50 (C 100, Rust 50 us), IOPS 1.20.
        let mut csv = with_cpu();
        csv += "ratio,batch/qd16/c,1,10000\nratio,batch/qd16/rust,1,12000\n\
                ratio,batch/qd16/c/busy_ticks,1,200\nratio,batch/qd16/c/ios,1,20000\n\
                ratio,batch/qd16/rust/busy_ticks,1,100\nratio,batch/qd16/rust/ios,1,20000\n";
        let plan = Plan::new(&[1, 16], 3, 10)
            .unwrap()
            .with_modes(&[DataMode::Copy, DataMode::Batch])
            .unwrap();
        let t = over_cells(&parse_csv(&csv), &plan);
        assert!(
            t.starts_with("| data mode | cells | CPU/IO Rust/C, median of cells | CPU/IO cells <= 1.00x | IOPS Rust/C, median of cells | IOPS cells <= 1.00x | IOPS cells >= 1.00x |\n"),
            "{t}"
        );
        assert_has(
            &t,
            &[
                "| copy | 2 | 1.10x | 0 of 1 | 0.90x | 2 of 2 | 1 of 2 |\n",
                "| batch | 2 | 0.50x | 1 of 1 | 1.20x | 0 of 1 | 1 of 1 |\n",
            ],
        );
        // CPU: 1.10 and 0.50; IOPS: 1.00, 0.80 and 1.20
        assert_has(
            &t,
            &["| all | 4 | 0.80x | 1 of 2 | 1.00x | 2 of 3 | 2 of 3 |\n"],
        );
        let plan = Plan::new(&[128], 3, 10).unwrap();
        let t = over_cells(&parse_csv(&csv), &plan);
        assert_has(&t, &["| copy | 1 | - | - | - | - | - |\n"]);
    }

    #[test]
    fn whole_report() {
        let plan = Plan::new(&[1, 16], 3, 4).unwrap();
        let md = markdown(&parse_csv(&with_cpu()), &[], &plan, "QEMU TCG, 2 vCPUs");
        assert!(
            md.starts_with("Measured with `cargo xtask bench rust-vs-c` in one boot: QEMU TCG, 2 vCPUs; kublk null target, 1 queue, depth 128, data mode copy; fio 4k randread, io_uring, direct, 4s per run;"),
            "{md}"
        );
        assert_has(
            &md,
            &[
                "over 3 s of each run, from 1 s after the device's first I/O (fio's ramp), divided by the I/Os",
            ],
        );
        assert_eq!(md.matches("| fio 4k randread, iodepth ").count(), 2, "{md}");
        assert_has(
            &md,
            &[
                "\n| data mode | iodepth | C median |",
                "\nOver cells ",
                "| all | 2 | 1.10x | 0 of 1 |",
            ],
        );
        let plan = Plan::new(&[1], 1, 1).unwrap();
        let md = markdown(&parse_csv(CSV), &[], &plan, "QEMU KVM, 2 vCPUs");
        assert_has(&md, &["CPU/IO: not measured: its window"]);
    }

    #[test]
    fn with_a_failed_driver() {
        let csv = "ratio,qd1/c,1,50000\nratio,qd1/rust,1,40000\nratio,qd1/c,2,52000\nratio,qd16/c,1,51000\n";
        let failures = parse_failures("rust|1|2|kublk add -t null failed (see the console)\n");
        assert_eq!(
            failures,
            [Failure {
                driver: "rust".into(),
                iodepth: 1,
                round: 2,
                reason: "kublk add -t null failed (see the console)".into(),
            }]
        );
        let s = parse_csv(csv);
        // (iodepth, rounds, what its table holds)
        let want: [(u32, u32, &[&str]); 2] = [
            (
                1,
                2,
                &[
                    "| round 1 | 50.0K | 40.0K | 0.80x |",
                    "| round 2 | 52.0K | failed | - |",
                    "| median (2 C, 1 Rust, 1 ratios) | 51.0K | 40.0K | 0.80x |",
                ],
            ),
            (
                16,
                1,
                &[
                    "| round 1 | 51.0K | not run (failed earlier) | - |",
                    "| spread of the per-round ratios | | | - |",
                ],
            ),
        ];
        for (qd, rounds, lines) in want {
            assert_has(
                &iodepth_table(&s, &failures, DataMode::Copy, qd, rounds),
                lines,
            );
        }
        assert!(parse_failures("rust|x|1|why\nrust|1|why\n").is_empty());
    }

    #[test]
    fn per_data_mode() {
        let csv = "ratio,zero_copy/qd16/c,1,30000\nratio,zero_copy/qd16/rust,1,27000\nratio,qd16/c,1,50000\n";
        let failures = parse_failures("rust|16|1|zero_copy: fio failed\n");
        let s = parse_csv(csv);
        let t = iodepth_table(&s, &failures, DataMode::ZeroCopy, 16, 1);
        assert_has(
            &t,
            &[
                "| fio 4k randread, iodepth 16, null target, zero_copy |",
                "| round 1 | 30.0K | 27.0K | 0.90x |",
            ],
        );
        // The failure was in zero-copy mode: copy mode's Rust run did not
        // happen after it.
        let t = iodepth_table(&s, &failures, DataMode::Copy, 16, 1);
        assert_has(&t, &["| round 1 | 50.0K | not run (failed earlier) | - |"]);
        let plan = Plan::new(&[16], 1, 10)
            .unwrap()
            .with_modes(&[DataMode::Copy, DataMode::ZeroCopy])
            .unwrap();
        let t = summary(&s, &plan);
        assert_has(&t, &["| zero_copy | 16 | 30.0K | 27.0K | 0.90x |"]);
    }
}
