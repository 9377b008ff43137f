//! A KTAP v1 parser for the flat results the guest runner prints
//! (Documentation/dev-tools/ktap.rst): `ok|not ok N name [# directive]`.
//! Lines may carry a console or dmesg prefix before the KTAP text; it is
//! stripped the way kunit.py does, by the column where "KTAP version" began.

use regex::Regex;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    Skip,
    Timeout,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TestResult {
    pub number: usize,
    pub name: String,
    pub status: Status,
    /// Directive text after `#` (without SKIP/TIMEOUT keyword).
    pub detail: String,
    pub seconds: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub plan: Option<usize>,
    pub results: Vec<TestResult>,
}

impl Report {
    pub fn count(&self, s: Status) -> usize {
        self.results.iter().filter(|r| r.status == s).count()
    }
}

fn result_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^(ok|not ok) (\d+)(?: -)? ?([^#]*?)\s*(?:#\s*(.*))?$").unwrap())
}

fn seconds(detail: &str) -> Option<f64> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"(?:time=|\()(\d+(?:\.\d+)?)s\)?").unwrap());
    re.captures(detail)?.get(1)?.as_str().parse().ok()
}

/// Parses KTAP text. Unparseable lines are ignored (console noise).
pub fn parse(text: &str) -> Report {
    let mut report = Report::default();
    let mut prefix_len: Option<usize> = None;
    for raw in text.lines() {
        let raw = raw.trim_end_matches('\r');
        if prefix_len.is_none() {
            if let Some(pos) = raw.find("KTAP version ") {
                prefix_len = Some(pos);
                continue;
            }
        }
        let line = match prefix_len {
            Some(p) if raw.len() >= p && raw.is_char_boundary(p) => &raw[p..],
            _ => raw,
        }
        .trim_start();
        if let Some(n) = line.strip_prefix("1..") {
            if let Ok(n) = n.trim().parse() {
                report.plan = Some(n);
            }
            continue;
        }
        if let Some(r) = result_line(line) {
            report.results.push(r);
        }
    }
    report
}

/// Parses one result line, `ok|not ok N name [# directive]`, without
/// leading blanks.
pub fn result_line(line: &str) -> Option<TestResult> {
    let c = result_re().captures(line)?;
    let ok = &c[1] == "ok";
    let directive = c.get(4).map_or("", |m| m.as_str()).trim();
    let (status, detail) = if let Some(rest) = strip_keyword(directive, "SKIP") {
        (Status::Skip, rest)
    } else if let Some(rest) = strip_keyword(directive, "TIMEOUT") {
        (Status::Timeout, rest)
    } else if ok {
        (Status::Pass, directive)
    } else {
        (Status::Fail, directive)
    };
    Some(TestResult {
        number: c[2].parse().unwrap_or(0),
        name: c[3].trim().to_string(),
        status,
        detail: detail.to_string(),
        seconds: seconds(directive),
    })
}

fn strip_keyword<'a>(d: &'a str, kw: &str) -> Option<&'a str> {
    let rest = d.strip_prefix(kw)?;
    (rest.is_empty() || rest.starts_with(' ')).then(|| rest.trim())
}

/// Formats one result line.
pub fn line(r: &TestResult) -> String {
    let (ok, directive) = match r.status {
        Status::Pass => ("ok", r.detail.clone()),
        Status::Fail => ("not ok", r.detail.clone()),
        Status::Skip => ("ok", format!("SKIP {}", r.detail)),
        Status::Timeout => ("not ok", format!("TIMEOUT {}", r.detail)),
    };
    if directive.trim().is_empty() {
        format!("{ok} {} {}", r.number, r.name)
    } else {
        format!("{ok} {} {} # {}", r.number, r.name, directive.trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_output() {
        let text = "\
KTAP version 1
1..5
ok 1 test_null_01 # time=5.2s
ok 2 test_generic_02 # SKIP bpftrace not found (0.5s)
not ok 3 test_generic_06 # exit=1 time=3.1s
not ok 4 test_stress_05 # TIMEOUT 300s
ok 5 - test_loop_01
";
        let r = parse(text);
        assert_eq!(r.plan, Some(5));
        assert_eq!(r.results.len(), 5);
        assert_eq!(r.results[0].status, Status::Pass);
        assert_eq!(r.results[0].seconds, Some(5.2));
        assert_eq!(r.results[1].status, Status::Skip);
        assert_eq!(r.results[1].detail, "bpftrace not found (0.5s)");
        assert_eq!(r.results[1].seconds, Some(0.5));
        assert_eq!(r.results[2].status, Status::Fail);
        assert_eq!(r.results[2].name, "test_generic_06");
        assert_eq!(r.results[3].status, Status::Timeout);
        assert_eq!(r.results[4].name, "test_loop_01");
        assert_eq!((r.count(Status::Pass), r.count(Status::Fail)), (2, 1));
    }

    #[test]
    fn prefixed_lines_and_noise() {
        let text = "\
[    2.000000] random kernel line
[    2.100000] KTAP version 1
[    2.100001] 1..2
[    2.200000] ok 1 a
[    2.300000] xtask: start 2 b
[    2.400000] not ok 2 b # exit=2
";
        let r = parse(text);
        assert_eq!(r.plan, Some(2));
        assert_eq!(
            r.results
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(r.results[1].status, Status::Fail);
    }

    #[test]
    fn skip_keyword_must_be_a_word() {
        let r = parse("ok 1 t # SKIPPED_NOT\n");
        assert_eq!(r.results[0].status, Status::Pass);
    }

    #[test]
    fn roundtrip() {
        let r = TestResult {
            number: 7,
            name: "kernel_log".into(),
            status: Status::Fail,
            detail: "2 splats".into(),
            seconds: None,
        };
        assert_eq!(line(&r), "not ok 7 kernel_log # 2 splats");
        assert_eq!(parse(&line(&r)).results[0], r);
    }
}
