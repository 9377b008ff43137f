//! The KUnit suites that a kernel runs at boot (the kernel crate's
//! doctests on the debug kernel, `CONFIG_RUST_KERNEL_DOCTESTS`): one
//! `kunit` result per boot, from the suites' summary lines in its log.

use crate::ktap::{self, Status, TestResult};

/// What the suites of one boot reported.
#[derive(Debug, Default, PartialEq)]
struct Suites {
    /// `(suite, pass, fail, skip, total)` per summary line.
    summaries: Vec<(String, u64, u64, u64, u64)>,
    /// Names of the cases reported `not ok`.
    failed: Vec<String>,
    /// Suites that started (`# Subtest:`) and reported no result yet.
    unfinished: Vec<String>,
    /// Suites that reported their result (`ok N suite`, not indented).
    finished: u64,
}

/// Drops the `[   1.234567] ` stamp that the kernel log puts before a line.
fn unstamped(line: &str) -> &str {
    match (line.starts_with('['), line.find("] ")) {
        (true, Some(end)) => &line[end + 2..],
        _ => line,
    }
}

/// Parses `# <suite>: pass:P fail:F skip:S total:T`.
fn summary(line: &str) -> Option<(String, u64, u64, u64, u64)> {
    let rest = line.trim_start().strip_prefix("# ")?;
    let (suite, counts) = rest.split_once(": pass:")?;
    // `# Totals:` sums the suites of one run; each suite has its own line.
    if suite.contains(' ') || suite == "Totals" {
        return None;
    }
    let mut nums = [0u64; 4];
    let mut parts = counts.split(' ');
    nums[0] = parts.next()?.parse().ok()?;
    for (i, key) in ["fail:", "skip:", "total:"].iter().enumerate() {
        nums[i + 1] = parts.next()?.strip_prefix(key)?.parse().ok()?;
    }
    Some((suite.to_string(), nums[0], nums[1], nums[2], nums[3]))
}

fn scan(log: &str) -> Suites {
    let mut s = Suites::default();
    for line in log.lines().map(unstamped) {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("# Subtest: ") {
            s.unfinished.push(name.trim().to_string());
        } else if let Some(sum) = summary(line) {
            s.summaries.push(sum);
        } else if let Some(r) = ktap::result_line(trimmed) {
            // A case (indented), or a suite's own result (not indented; a
            // suite of one case prints no summary line).
            if !line.starts_with(' ') {
                s.unfinished.retain(|n| *n != r.name);
                s.finished += 1;
            }
            if r.status == Status::Fail && !s.failed.contains(&r.name) {
                s.failed.push(r.name);
            }
        }
    }
    s
}

/// The `kunit` result of a boot whose log is `log`; `None` if no KUnit
/// suite ran in it (a kernel without KUnit).
pub(super) fn boot_result(log: &str, prefix: &str) -> Option<TestResult> {
    let s = scan(log);
    if s.summaries.is_empty() && s.unfinished.is_empty() && s.finished == 0 {
        return None;
    }
    let counts: Vec<String> = s
        .summaries
        .iter()
        .map(|(n, p, f, sk, t)| format!("{n}: pass:{p} fail:{f} skip:{sk} total:{t}"))
        .collect();
    let fails: u64 = s.summaries.iter().map(|x| x.2).sum();
    let suites = format!("{} suites ok", s.finished);
    let (status, detail) = if fails > 0 || !s.failed.is_empty() {
        (
            Status::Fail,
            format!("{}; failed: {}", counts.join(", "), s.failed.join(" ")),
        )
    } else if !s.unfinished.is_empty() {
        (
            Status::Fail,
            format!("no result from {}", s.unfinished.join(" ")),
        )
    } else if counts.is_empty() {
        (Status::Pass, suites)
    } else {
        (Status::Pass, format!("{suites}; {}", counts.join(", ")))
    };
    Some(TestResult {
        number: 0,
        name: format!("{prefix}kunit"),
        status,
        detail,
        seconds: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSING: &str = "\
[    2.000001] KTAP version 1
[    2.000002] 1..1
[    2.000003]     KTAP version 1
[    2.000004]     # Subtest: rust_doctests_kernel
[    2.000005]     1..2
[    2.000006]     ok 1 rust_doctest_kernel_workqueue_rs_4
[    2.000007]     ok 2 rust_doctest_kernel_task_rs_9
[    2.000008] # rust_doctests_kernel: pass:2 fail:0 skip:0 total:2
[    2.000009] # Totals: pass:2 fail:0 skip:0 total:2
[    2.000010] ok 1 rust_doctests_kernel
";

    #[test]
    fn passing_suite_passes() {
        let r = boot_result(PASSING, "").unwrap();
        assert_eq!(r.status, Status::Pass);
        assert_eq!(r.name, "kunit");
        assert_eq!(
            r.detail,
            "1 suites ok; rust_doctests_kernel: pass:2 fail:0 skip:0 total:2"
        );
    }

    /// A suite of one case prints no summary line, only its result.
    const ONE_CASE: &str = "\
[   36.316722]     # Subtest: rust_kernel_fmt
[   36.316884]     # speed: normal
[   36.317565]     1..1
[   36.358698]     ok 1 test_ptr_formatting
[   36.359077] ok 1 rust_kernel_fmt
";

    #[test]
    fn suite_of_one_case_passes_on_its_result() {
        let r = boot_result(ONE_CASE, "").unwrap();
        assert_eq!(r.status, Status::Pass, "{}", r.detail);
        let log = ONE_CASE
            .replace("    ok 1 test_ptr", "    not ok 1 test_ptr")
            .replace("] ok 1 rust_kernel_fmt", "] not ok 1 rust_kernel_fmt");
        let r = boot_result(&log, "").unwrap();
        assert_eq!(r.status, Status::Fail);
        assert!(r.detail.contains("test_ptr_formatting"), "{}", r.detail);
    }

    #[test]
    fn failing_case_fails_and_is_named() {
        let log = PASSING
            .replace(
                "    ok 2 rust_doctest_kernel_task_rs_9",
                "    not ok 2 rust_doctest_kernel_task_rs_9",
            )
            .replace(
                "pass:2 fail:0 skip:0 total:2\n[    2.000009]",
                "pass:1 fail:1 skip:0 total:2\n[    2.000009]",
            )
            .replace(
                "] ok 1 rust_doctests_kernel",
                "] not ok 1 rust_doctests_kernel",
            );
        let r = boot_result(&log, "rust/").unwrap();
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.name, "rust/kunit");
        assert!(
            r.detail.contains("failed: rust_doctest_kernel_task_rs_9"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn suite_without_summary_fails() {
        let log: String = PASSING.lines().take(6).map(|l| format!("{l}\n")).collect();
        let r = boot_result(&log, "").unwrap();
        assert_eq!(r.status, Status::Fail);
        assert!(r.detail.contains("rust_doctests_kernel"));
    }

    #[test]
    fn no_kunit_no_result() {
        assert!(boot_result("[    1.0] Linux version 7.3.4\n", "").is_none());
    }
}
