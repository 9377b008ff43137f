//! Why the failed tests failed, in a few lines at the end of a run: CI shows
//! only the tail of what a run prints, and the logs stay on its machine.

use std::path::Path;

/// Words that mark a line of a test's log as saying what went wrong.
const MARKERS: &[&str] = &[
    "not ok",
    "FAIL",
    "fail",
    "error",
    "Error",
    "mismatch",
    "timed out",
    "isn't",
];

/// At most this many lines per failed test.
const PER_TEST: usize = 5;

/// At most this many failed tests get a digest: the first to fail say most,
/// the later ones often fail because of them.
const TESTS: usize = 8;

/// The line the guest's runner appends to the log of a failed test: what
/// was left in the guest then.
const LEFT_BEHIND: &str = "xtask: left behind: ";

/// The lines of `log` that say why the test failed: the last [`PER_TEST`]
/// lines that carry a marker, or else its last lines, each cut to 200
/// characters; then what the failure left behind, if the runner said.
pub fn why(log: &str) -> Vec<String> {
    let left = log.lines().rev().find(|l| l.starts_with(LEFT_BEHIND));
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with(LEFT_BEHIND))
        .collect();
    let marked: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| MARKERS.iter().any(|m| l.contains(m)))
        .collect();
    let pick = if marked.is_empty() { &lines } else { &marked };
    pick[pick.len().saturating_sub(PER_TEST)..]
        .iter()
        .chain(left.as_ref())
        .map(|l| l.chars().take(200).collect())
        .collect()
}

/// At most this many kernel messages per failed test.
const KERNEL_LINES: usize = 3;

/// The kernel log lines with which the guest's runner marks a test's start
/// and end (`xtask: start <test>`, `xtask: end <test> rc=<n>`), and the
/// line every upstream test logs at its start and end.
const START: &str = "xtask: start ";
const END: &str = "xtask: end ";
const SUITE_MARK: &str = "ublk selftest: ";

/// The test that a marker line of the kernel log names, if it is one: its
/// last word but the exit code, as [`crate::splat::scan`] reads the markers.
fn marked<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let rest = crate::splat::strip_time(line).strip_prefix(marker)?;
    rest.split_whitespace().rfind(|w| !w.starts_with("rc="))
}

/// What the kernel log `dmesg` says about the time `test` ran: the tests
/// that ran beside it (whose start or end falls between its own, or that
/// ran across it), and its last [`KERNEL_LINES`] messages other than the
/// runner's and the suite's markers (which may come from a test beside it).
fn window(dmesg: &str, test: &str) -> (Vec<String>, Vec<String>) {
    let lines: Vec<&str> = dmesg.lines().collect();
    let at = |marker: &str, t: &str| lines.iter().position(|l| marked(l, marker) == Some(t));
    let Some(start) = at(START, test) else {
        return (Vec::new(), Vec::new());
    };
    let end = at(END, test).unwrap_or(lines.len());
    let mut beside = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(other) = marked(l, START).filter(|&o| o != test) else {
            continue;
        };
        let other_end = lines[i..]
            .iter()
            .position(|l| marked(l, END) == Some(other))
            .map_or(lines.len(), |p| i + p);
        if i < end && other_end > start {
            beside.push(other.to_string());
        }
    }
    let said: Vec<String> = lines[start..end]
        .iter()
        .filter(|l| !l.contains("xtask: ") && !l.contains(SUITE_MARK) && !l.trim().is_empty())
        .map(|l| l.chars().take(200).collect())
        .collect();
    let kernel = said[said.len().saturating_sub(KERNEL_LINES)..].to_vec();
    (beside, kernel)
}

/// The digest lines (`# why <test>: <line>`) of the failed tests `failed`
/// (bare test names, in the order they ran) whose logs are in
/// `<job>/logs/<test>.log`; `shown` is how each is named in the report.
/// Each says, after the log's lines, which tests ran beside it and what the
/// kernel said meanwhile (`<job>/dmesg.txt`): a test that fails only in
/// company was often disturbed by its company.
pub fn lines(job: &Path, failed: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    let dmesg = std::fs::read(job.join("dmesg.txt")).unwrap_or_default();
    let dmesg = String::from_utf8_lossy(&dmesg);
    for (test, shown) in failed.iter().take(TESTS) {
        let bytes = std::fs::read(job.join("logs").join(format!("{test}.log"))).unwrap_or_default();
        for l in why(&String::from_utf8_lossy(&bytes)) {
            out.push(format!("# why {shown}: {l}"));
        }
        let (beside, kernel) = window(&dmesg, test);
        if !beside.is_empty() {
            out.push(format!("# why {shown}: ran beside {}", beside.join(", ")));
        }
        for l in kernel {
            out.push(format!("# why {shown}: kernel: {l}"));
        }
    }
    if failed.len() > TESTS {
        out.push(format!(
            "# why: {} more failed tests, see their logs",
            failed.len() - TESTS
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_lines_win() {
        let log = "ok 1 a\nnot ok 2 b # expected -EINVAL, got 0\nok 3 c\n# 2 passed\n";
        assert_eq!(why(log), vec!["not ok 2 b # expected -EINVAL, got 0"]);
    }

    #[test]
    fn last_lines_without_markers() {
        let log = "one\ntwo\n\nthree\nfour\nfive\nsix\n";
        assert_eq!(why(log), vec!["two", "three", "four", "five", "six"]);
    }

    #[test]
    fn at_most_per_test() {
        let log = "FAIL 1\nFAIL 2\nFAIL 3\nFAIL 4\nFAIL 5\nFAIL 6\n";
        assert_eq!(
            why(log),
            vec!["FAIL 2", "FAIL 3", "FAIL 4", "FAIL 5", "FAIL 6"]
        );
    }

    #[test]
    fn left_behind_comes_last_and_takes_no_slot() {
        let log = "FAIL 1\nFAIL 2\nFAIL 3\nxtask: left behind: devices: none; processes: none\n";
        assert_eq!(
            why(log),
            vec![
                "FAIL 1",
                "FAIL 2",
                "FAIL 3",
                "xtask: left behind: devices: none; processes: none"
            ]
        );
    }

    const DMESG: &str = "\
[ 1.0] xtask: start test_a.sh
[ 1.1] ublk selftest: a starting at 2026-12-07 06:56:28
[ 2.0] xtask: start test_b.sh
[ 2.5] blk_print_req_error: 1 callbacks suppressed
[ 2.6] I/O error, dev ublkb0, sector 0 op 0x0:(READ)
[ 3.0] xtask: end test_a.sh rc=0
[ 3.5] xtask: start test_c.sh
[ 4.0] xtask: end test_b.sh rc=1
[ 5.0] xtask: end test_c.sh rc=0
[ 6.0] xtask: start test_d.sh
[ 7.0] xtask: end test_d.sh rc=0
";

    #[test]
    fn window_names_company_and_kernel_lines() {
        let (beside, kernel) = window(DMESG, "test_b.sh");
        assert_eq!(beside, vec!["test_a.sh", "test_c.sh"]);
        assert_eq!(
            kernel,
            vec![
                "[ 2.5] blk_print_req_error: 1 callbacks suppressed",
                "[ 2.6] I/O error, dev ublkb0, sector 0 op 0x0:(READ)"
            ]
        );
    }

    #[test]
    fn window_of_a_test_that_ran_alone_or_never() {
        assert_eq!(window(DMESG, "test_d.sh"), (vec![], vec![]));
        assert_eq!(window(DMESG, "test_x.sh"), (vec![], vec![]));
        // a test with no end (the guest died) ran beside all that started after it
        let cut = &DMESG[..DMESG.find("[ 4.0]").unwrap()];
        assert_eq!(window(cut, "test_b.sh").0, vec!["test_a.sh", "test_c.sh"]);
    }

    #[test]
    fn missing_log_says_nothing() {
        let out = lines(
            Path::new("/nonexistent"),
            &[("t.sh".into(), "rust/t.sh".into())],
        );
        assert!(out.is_empty());
    }
}
