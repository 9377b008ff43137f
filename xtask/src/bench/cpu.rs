//! Guest CPU time per I/O, as `bench matrix` and `bench rust-vs-c` measure
//! it (guest/bench_cpu.sh): the non-idle ticks of /proc/stat over a window
//! of a fio run divided by the I/Os the device completed in it. Here: the
//! value of each round from the samples, and how the reports describe it.

use std::collections::BTreeMap;

use super::samples::{by_round, Samples};

/// USER_HZ when the guest recorded none.
const DEFAULT_USER_HZ: f64 = 100.0;

/// Guest CPU time per I/O in microseconds: `busy_ticks` of 1/`user_hz` s
/// (USER_HZ, /proc/stat's unit) over `ios` completed I/Os. None if
/// nothing completed.
pub fn cpu_us_per_io(busy_ticks: f64, user_hz: f64, ios: f64) -> Option<f64> {
    (user_hz > 0.0 && ios > 0.0).then(|| busy_ticks * 1e6 / user_hz / ios)
}

/// The guest's USER_HZ, recorded in `section` as `clk_tck` (round 0).
pub fn user_hz(s: &Samples, section: &str) -> f64 {
    by_round(s, section, "clk_tck")
        .values()
        .next()
        .copied()
        .unwrap_or(DEFAULT_USER_HZ)
}

/// The CPU time per I/O of each round of the runs whose samples are
/// `<key>/busy_ticks` and `<key>/ios` in `section`; rounds without both
/// (the window did not lie inside the run) or without I/Os are left out.
pub fn per_round(s: &Samples, section: &str, key: &str, user_hz: f64) -> BTreeMap<u32, f64> {
    let ticks = by_round(s, section, &format!("{key}/busy_ticks"));
    let ios = by_round(s, section, &format!("{key}/ios"));
    ticks
        .iter()
        .filter_map(|(r, &t)| Some((*r, cpu_us_per_io(t, user_hz, *ios.get(r)?)?)))
        .collect()
}

/// Microseconds per I/O as the tables write them: `66.7`.
pub fn us(v: f64) -> String {
    format!("{v:.1}")
}

/// How the reports say it was measured: the guest's non-idle CPU time over
/// `window` (e.g. `the last 3 s of each run`), per completed I/O.
pub fn method(window: &str) -> String {
    format!(
        "non-idle guest CPU time (user+nice+system+irq+softirq+steal of /proc/stat, all \
         vCPUs) over {window}, divided by the I/Os the device completed in that time \
         (/sys/block/*/stat)"
    )
}

#[cfg(test)]
mod tests {
    use super::super::samples::parse_csv;
    use super::*;

    #[test]
    fn cpu_time() {
        assert_eq!(cpu_us_per_io(300.0, 100.0, 40000.0), Some(75.0));
        assert_eq!(cpu_us_per_io(300.0, 100.0, 0.0), None);
        assert_eq!(cpu_us_per_io(300.0, 0.0, 10.0), None);
        assert_eq!(us(66.666), "66.7");
    }

    #[test]
    fn rounds() {
        // USER_HZ 250: a tick is 4 ms; round 2 has no I/O count, round 3
        // no I/O, round 4 only the I/O count.
        let s = parse_csv(
            "ratio,clk_tck,0,250\n\
             ratio,qd16/c/busy_ticks,1,100\nratio,qd16/c/ios,1,8000\n\
             ratio,qd16/c/busy_ticks,2,100\n\
             ratio,qd16/c/busy_ticks,3,100\nratio,qd16/c/ios,3,0\n\
             ratio,qd16/c/ios,4,10\nratio,qd16/c,1,50000\n",
        );
        let hz = user_hz(&s, "ratio");
        assert_eq!(hz, 250.0);
        // 100 ticks of 4 ms = 0.4 s over 8000 I/Os
        assert_eq!(
            per_round(&s, "ratio", "qd16/c", hz),
            BTreeMap::from([(1, 50.0)])
        );
        assert!(per_round(&s, "ratio", "qd1/c", hz).is_empty());
        assert_eq!(user_hz(&s, "matrix"), 100.0, "none recorded");
    }

    #[test]
    fn described() {
        assert_eq!(
            method("the last 3 s of each run"),
            "non-idle guest CPU time (user+nice+system+irq+softirq+steal of /proc/stat, all vCPUs) \
             over the last 3 s of each run, divided by the I/Os the device completed in that time \
             (/sys/block/*/stat)"
        );
    }
}
