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

/// The digest lines (`# why <test>: <line>`) of the failed tests `failed`
/// (bare test names, in the order they ran) whose logs are in
/// `<job>/logs/<test>.log`; `shown` is how each is named in the report.
pub fn lines(job: &Path, failed: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (test, shown) in failed.iter().take(TESTS) {
        let bytes = std::fs::read(job.join("logs").join(format!("{test}.log"))).unwrap_or_default();
        for l in why(&String::from_utf8_lossy(&bytes)) {
            out.push(format!("# why {shown}: {l}"));
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

    #[test]
    fn missing_log_says_nothing() {
        let out = lines(
            Path::new("/nonexistent"),
            &[("t.sh".into(), "rust/t.sh".into())],
        );
        assert!(out.is_empty());
    }
}
