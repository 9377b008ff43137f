//! Finds kernel splats in a kernel log: WARN, BUG, Oops, KASAN, UBSAN,
//! KFENCE, lockdep reports, hung tasks, soft lockups, RCU stalls and panics.
//! Each report is attributed to the test that was running (from the
//! `xtask: start <test>` markers the guest writes to /dev/kmsg).

use regex::Regex;
use std::sync::OnceLock;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Splat {
    /// What kind of report (e.g. "WARNING", "hung task").
    pub kind: &'static str,
    /// The first line of the report, without the timestamp.
    pub line: String,
    /// 1-based line number in the log.
    pub lineno: usize,
    /// Test running when it happened, or "boot".
    pub during: String,
}

const PATTERNS: &[(&str, &str)] = &[
    ("KASAN", r"BUG: KASAN:|KASAN: "),
    ("KFENCE", r"BUG: KFENCE:"),
    ("UBSAN", r"UBSAN:"),
    (
        "lockdep",
        r"possible (circular|recursive) locking|inconsistent lock state|possible irq lock inversion|suspicious RCU usage|lockdep is turned off|bad unlock balance",
    ),
    (
        "hung task",
        r"INFO: task .* blocked for more than \d+ seconds",
    ),
    (
        "RCU stall",
        r"rcu: INFO: .*detected stall|rcu_\w+ (self-)?detected stall|detected stalls on CPUs",
    ),
    (
        "soft lockup",
        r"BUG: soft lockup|watchdog: BUG:|hard LOCKUP",
    ),
    ("panic", r"Kernel panic - not syncing"),
    ("Oops", r"\bOops\b|general protection fault|kernel BUG at"),
    ("BUG", r"\bBUG:"),
    ("WARNING", r"\bWARNING:"),
    ("call trace", r"^\s*Call Trace:"),
];

fn patterns() -> &'static Vec<(&'static str, Regex)> {
    static P: OnceLock<Vec<(&'static str, Regex)>> = OnceLock::new();
    P.get_or_init(|| {
        PATTERNS
            .iter()
            .map(|(k, p)| (*k, Regex::new(p).unwrap()))
            .collect()
    })
}

/// Strips a `[  12.345678] ` printk timestamp or a raw `12.345678 ` prefix.
pub(crate) fn strip_time(line: &str) -> &str {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"^\s*(\[\s*\d+\.\d+\]|\d+\.\d+)\s?").unwrap());
    match re.find(line) {
        Some(m) => &line[m.end()..],
        None => line,
    }
}

/// Lines within this distance of a report belong to it (a call trace after
/// a WARNING is not a second splat).
const SAME_REPORT_LINES: usize = 60;

pub fn scan(log: &str) -> Vec<Splat> {
    let mut out: Vec<Splat> = Vec::new();
    let mut during = "boot".to_string();
    let mut last_report: Option<usize> = None;
    for (i, raw) in log.lines().enumerate() {
        let line = strip_time(raw);
        if let Some(rest) = line.strip_prefix("xtask: start ") {
            during = rest.split_whitespace().last().unwrap_or(rest).to_string();
            last_report = None;
            continue;
        }
        if line.starts_with("xtask: end ") {
            during = format!("after {during}");
            continue;
        }
        let Some((kind, _)) = patterns().iter().find(|(_, re)| re.is_match(line)) else {
            continue;
        };
        let continues = last_report.is_some_and(|l| i - l < SAME_REPORT_LINES);
        // A report's own follow-up lines (call trace, "---[ end trace") or a
        // secondary header within the same report are not new splats.
        if continues && matches!(*kind, "call trace" | "WARNING" | "BUG" | "lockdep") {
            continue;
        }
        last_report = Some(i);
        out.push(Splat {
            kind,
            line: line.trim().to_string(),
            lineno: i + 1,
            during: during.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_log_with_io_errors_has_no_splats() {
        let log = "\
[    1.000000] ublk_drv: loading
[    5.000000] xtask: start test_generic_06.sh
[    6.000000] I/O error, dev ublkb0, sector 0 op 0x1:(WRITE) flags 0x8800 phys_seg 1 prio class 0
[    6.100000] Buffer I/O error on dev ublkb0, logical block 0, async page read
[    7.000000] xtask: end test_generic_06.sh rc=0
";
        assert!(scan(log).is_empty());
    }

    #[test]
    fn warn_with_trace_is_one_splat_attributed_to_test() {
        let log = "\
[    5.000000] xtask: start test_null_01.sh
[    5.100000] ------------[ cut here ]------------
[    5.100001] WARNING: CPU: 1 PID: 230 at drivers/block/ublk_drv.c:1234 ublk_ch_release+0x10/0x20 [ublk_drv]
[    5.100002] Modules linked in: ublk_drv
[    5.100003] RIP: 0010:ublk_ch_release+0x10/0x20 [ublk_drv]
[    5.100004] Call Trace:
[    5.100005]  <TASK>
[    5.100006]  __fput+0x100/0x2b0
[    5.100007]  </TASK>
[    5.100008] ---[ end trace 0000000000000000 ]---
";
        let s = scan(log);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].kind, "WARNING");
        assert_eq!(s[0].during, "test_null_01.sh");
        assert_eq!(s[0].lineno, 3);
    }

    #[test]
    fn each_kind_is_found() {
        let cases = [
            (
                "BUG: kernel NULL pointer dereference, address: 0000000000000008",
                "BUG",
            ),
            (
                "BUG: KASAN: slab-use-after-free in ublk_commit_completion+0x1/0x2",
                "KASAN",
            ),
            (
                "UBSAN: array-index-out-of-bounds in drivers/block/ublk_drv.c:99:1",
                "UBSAN",
            ),
            (
                "WARNING: possible circular locking dependency detected",
                "lockdep",
            ),
            (
                "INFO: task kworker/0:1:12 blocked for more than 120 seconds.",
                "hung task",
            ),
            (
                "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
                "RCU stall",
            ),
            (
                "watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [fio:200]",
                "soft lockup",
            ),
            (
                "Oops: general protection fault, probably for non-canonical address",
                "Oops",
            ),
            ("Kernel panic - not syncing: sysrq triggered crash", "panic"),
            ("BUG: KFENCE: use-after-free read in foo+0x1/0x2", "KFENCE"),
        ];
        for (line, kind) in cases {
            let s = scan(&format!("[    1.0] {line}\n"));
            assert_eq!(s.len(), 1, "{line}");
            assert_eq!(s[0].kind, kind, "{line}");
            assert_eq!(s[0].during, "boot");
        }
    }

    // Real kernel output captured from the test guest (7.3.4, lkdtm and
    // sysrq), see xtask/fixtures/.
    #[test]
    fn real_warn() {
        let s = scan(include_str!("../fixtures/warn-lkdtm-dmesg.txt"));
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].kind, "WARNING");
        assert_eq!(s[0].during, "command");
        assert!(s[0].line.contains("lkdtm_WARNING"));
    }

    #[test]
    fn real_panic_on_console() {
        let s = scan(include_str!("../fixtures/panic-sysrq-console.txt"));
        assert!(s.iter().any(|s| s.kind == "panic"), "{s:?}");
    }

    #[test]
    fn real_oops_and_bug() {
        let s = scan(include_str!("../fixtures/oops-bug-lkdtm-dmesg.txt"));
        let kinds: Vec<&str> = s.iter().map(|s| s.kind).collect();
        assert!(kinds.contains(&"BUG"), "{kinds:?}");
        assert!(s.iter().any(|s| s.line.contains("kernel BUG at")), "{s:?}");
        assert!(s.iter().all(|s| s.during == "command"));
    }

    #[test]
    fn separate_reports_are_counted() {
        let mut log =
            String::from("[1.0] xtask: start a\n[1.1] WARNING: CPU: 0 PID: 1 at x.c:1 f+0x0/0x1\n");
        for _ in 0..70 {
            log.push_str("[1.2] noise\n");
        }
        log.push_str("[2.0] xtask: start b\n[2.1] BUG: sleeping function called from invalid context at y.c:2\n");
        let s = scan(&log);
        assert_eq!(
            s.iter().map(|s| s.during.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
