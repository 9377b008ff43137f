//! `cargo xtask results`: the page xtask/results/README.md, written from
//! the committed results: each test's time in the baselines of
//! xtask/times/ and links to the benchmark reports of xtask/results/. It
//! reads files and `git log`; it builds nothing.

use anyhow::{Context, Result};
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use xshell::{cmd, Shell};

use crate::ktap::{self, Status};
use crate::markdown;

/// The page, relative to the repository's top directory.
pub const PAGE: &str = "xtask/results/README.md";

/// The baselines, one column each: (column title, path).
const BASELINES: &[(&str, &str)] = &[
    ("C driver", "xtask/times/selftest-c.ktap"),
    ("Rust driver", "xtask/times/selftest-rust.ktap"),
];

/// A committed benchmark report the page links to.
struct Report {
    /// Its directory: every file under it belongs to the report, and the
    /// commit shown is the last one that changed the directory.
    dir: &'static str,
    /// The file the page links to, relative to `dir`.
    link: &'static str,
    /// What it is: markdown, the rest of the page's bullet (wrapped
    /// lines indented by two spaces), without the commit.
    what: &'static str,
}

/// The committed benchmark reports, in the page's order. Every committed
/// file under xtask/results/ but the page is under one of their
/// directories (a unit test checks it).
const REPORTS: &[Report] = &[
    Report {
        dir: "xtask/results/bench-matrix",
        link: "matrix.md",
        what: "`cargo xtask bench matrix --driver c,rust --rounds 7`,\n  \
               C against Rust ublk (IOPS, CPU time per I/O, their Rust/C ratios\n  \
               per cell and over the cells), with its CSV, samples and plot",
    },
    Report {
        dir: "xtask/results/rust-vs-c",
        link: "modes.md",
        what: "`cargo xtask bench rust-vs-c --modes ...`,\n  \
               the Rust driver's IOPS and guest CPU time per I/O against the\n  \
               C driver's, per data mode and iodepth and over the cells of a mode",
    },
    Report {
        dir: "xtask/results/perf-profile",
        link: "README.md",
        what: "`cargo xtask vm --driver none\n  \
               -- bash \"$PWD\"/xtask/guest/perf_drivers.sh` (the guest needs an absolute path), where each driver's CPU time\n  \
               goes",
    },
    Report {
        dir: "xtask/results/bench-affinity",
        link: "affinity.md",
        what: "`cargo xtask bench affinity`,\n  \
               UBLK_F_SUPPORT_RQ_AFFINITY off and on with a CPU-bound ublk server\n  \
               (IOPS, latency, CPU per I/O, the cost crossover), with its CSV,\n  \
               samples and plot",
    },
    Report {
        dir: "xtask/results/bench-matrix-inline-helpers",
        link: "README.md",
        what: "`cargo xtask bench matrix --config inline-helpers\n  \
               --driver c,rust` and the perf profile of that kernel: the C helpers\n  \
               inlined into the Rust code (CONFIG_RUST_INLINE_HELPERS, rustc 1.86.0),\n  \
               against the default kernel's",
    },
    Report {
        dir: "xtask/results/bench-matrix-91",
        link: "matrix.md",
        what: "`cargo xtask bench matrix --driver c,rust --rounds 5`,\n  \
               the same matrix again, Rust series patches 1-91, another boot:\n  \
               how far one boot's over-cells ratios move",
    },
    Report {
        dir: "xtask/results/rust-vs-c-106",
        link: "modes.md",
        what: "`cargo xtask bench rust-vs-c --modes ... --rounds 5`,\n  \
               per data mode again on Rust series patches 1-106, 5 rounds of 10 s",
    },
    Report {
        dir: "xtask/results/rust-vs-c-107",
        link: "modes.md",
        what: "`cargo xtask bench rust-vs-c --modes ... --rounds 4`,\n  \
               per data mode on Rust series patches 1-107, the two drivers' order\n  \
               alternating round by round",
    },
    Report {
        dir: "xtask/results/rust-vs-c-107-inline-helpers",
        link: "modes.md",
        what: "`cargo xtask bench rust-vs-c --config inline-helpers --modes ...\n  \
               --rounds 3`, the same driver with CONFIG_RUST_INLINE_HELPERS (rustc\n  \
               1.86.0): the share of the gap that is helper calls",
    },
    Report {
        dir: "xtask/results/rust-vs-c-112",
        link: "modes.md",
        what: "`cargo xtask bench rust-vs-c --modes ... --rounds 4` on Rust series\n  \
               patches 1-112 (a dispatched slot handed over to the task work, fewer\n  \
               helper calls)",
    },
    Report {
        dir: "xtask/results/rust-vs-c-116-inline-helpers",
        link: "modes.md",
        what: "`cargo xtask bench rust-vs-c --config inline-helpers --modes ...\n  \
               --rounds 4` on Rust series patches 1-116: what the driver's own code\n  \
               costs once the helpers are inlined",
    },
    Report {
        dir: "xtask/results/rust-vs-c-119",
        link: "modes.md",
        what: "`cargo xtask bench rust-vs-c --modes ... --rounds 4` on Rust series\n  \
               patches 1-119 (requests lent by address, no reference of the slot's own)",
    },
    Report {
        dir: "xtask/results/c-driver-fixes",
        link: "README.md",
        what: "the upstream fixes of ublk_drv.c, each read against the Rust driver\n  \
               (whether it could have the bug, with the file:line that rules it out)\n  \
               and the test that reaches it",
    },
    Report {
        dir: "xtask/results/kill-soak",
        link: "README.md",
        what: "`test_kill_recover.sh` with KILL_ROUNDS=2 KILL_CYCLES=36: 504 kills\n  \
               of the server per driver, every data mode with reissue and with\n  \
               FAIL_IO",
    },
    Report {
        dir: "xtask/results/fuzz-scale",
        link: "README.md",
        what: "`cargo xtask fuzz`, the differential fuzzer in several guests at once:\n  \
               its runs at scale on the default and the debug kernel, and what they found",
    },
    Report {
        dir: "xtask/results/many-devices",
        link: "README.md",
        what: "`test_many_devices.sh` with 256 devices: every data mode and recovery kind\n  \
               at once under fio, servers killed and recovered, devices added and deleted",
    },
];

#[derive(clap::Args, Debug)]
pub struct ResultsOpts {
    /// Write the page to xtask/results/README.md instead of printing it.
    #[arg(long)]
    write: bool,
}

/// One baseline as the page shows it.
struct Column {
    title: String,
    path: String,
    /// `<hash> <date>` of the commit that last changed the file.
    commit: String,
    /// The KTAP text.
    ktap: String,
}

pub fn run(opts: &ResultsOpts) -> Result<()> {
    let repo = crate::layout::Layout::discover(None)?.repo;
    let sh = Shell::new()?;
    sh.change_dir(&repo);
    let columns = BASELINES
        .iter()
        .map(|&(title, path)| {
            Ok(Column {
                title: title.to_string(),
                path: path.to_string(),
                commit: last_commit(&sh, path)?,
                ktap: std::fs::read_to_string(repo.join(path))
                    .with_context(|| format!("reading {path}"))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let reports = REPORTS
        .iter()
        .map(|r| Ok((r, last_commit(&sh, r.dir)?)))
        .collect::<Result<Vec<_>>>()?;
    let text = page(&columns, &reports);
    if opts.write {
        let out = repo.join(PAGE);
        std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
        eprintln!("results: wrote {PAGE}");
    } else {
        print!("{text}");
    }
    Ok(())
}

/// `<hash> <date>` of the last commit that changed `path`.
fn last_commit(sh: &Shell, path: &str) -> Result<String> {
    let format = "--format=%h %ad";
    let out = cmd!(sh, "git log -1 {format} --date=short -- {path}")
        .read()
        .with_context(|| format!("git log of {path}"))?;
    let out = out.trim();
    Ok(if out.is_empty() {
        "not committed".to_string()
    } else {
        out.to_string()
    })
}

/// The cell of each test of one baseline, and (passed, failed, skipped).
fn cells(ktap_text: &str) -> (BTreeMap<String, String>, [usize; 3]) {
    static TIME: OnceLock<Regex> = OnceLock::new();
    let time = TIME.get_or_init(|| Regex::new(r"time=([\d.]+s)").unwrap());
    let mut cells = BTreeMap::new();
    let mut counts = [0; 3];
    for r in ktap::parse(ktap_text).results {
        let t = time.captures(&r.detail).map(|c| c[1].to_string());
        let cell = match r.status {
            Status::Pass => {
                counts[0] += 1;
                t.unwrap_or_else(|| "pass".to_string())
            }
            Status::Fail | Status::Timeout => {
                counts[1] += 1;
                format!("FAIL {}", t.unwrap_or_default())
            }
            Status::Skip => {
                counts[2] += 1;
                format!("skip: {}", r.detail)
            }
        };
        cells.insert(r.name, cell);
    }
    (cells, counts)
}

/// The page, from the baselines and the benchmark reports with the commit
/// of each.
fn page(columns: &[Column], reports: &[(&Report, String)]) -> String {
    let mut s = String::new();
    s.push_str(
        "# Results\n\n\
         Generated by `cargo xtask results --write` from the committed files\n\
         named below; do not edit it by hand.\n\n\
         ## Selftests: time of each test\n\n\
         QEMU TCG, 2 vCPUs, two tests at a time (`--parallel 2`), on a 2-core\n\
         machine: wall time of each test, with another test beside most of them.\n\
         Each column is a baseline written by `cargo xtask selftest --save-baseline`\n\
         (the whole suite against one driver; `-`: the test was not in that run).\n\n",
    );
    let mut tables = Vec::new();
    for c in columns {
        let (cells, [p, f, k]) = cells(&c.ktap);
        s.push_str(&format!(
            "- {}: `{}`, commit {}: {p} passed, {f} failed, {k} skipped.\n",
            c.title, c.path, c.commit
        ));
        tables.push(cells);
    }
    let titles: Vec<&str> = std::iter::once("test")
        .chain(columns.iter().map(|c| c.title.as_str()))
        .collect();
    s.push('\n');
    s += &markdown::header(&titles);
    let names: BTreeSet<&String> = tables.iter().flat_map(|t| t.keys()).collect();
    for name in names {
        let cells: Vec<&str> = std::iter::once(name.as_str())
            .chain(
                tables
                    .iter()
                    .map(|t| t.get(name).map_or("-", String::as_str)),
            )
            .collect();
        s += &markdown::row(&cells);
    }
    s.push_str("\n## Benchmarks\n\n");
    for (r, commit) in reports {
        let dir = r.dir.strip_prefix("xtask/results/").unwrap_or(r.dir);
        s.push_str(&format!(
            "- [{dir}/{link}]({dir}/{link}): {what}; commit {commit}.\n",
            link = r.link,
            what = r.what
        ));
    }
    s.push_str(
        "\nThe reports measure the default kernel (`--config default`) unless they say\n\
         otherwise. `--config inline-helpers` builds a kernel whose Rust code has the C\n\
         helpers of `rust/helpers/` inlined (CONFIG_RUST_INLINE_HELPERS, with rustc\n\
         1.86.0, whose LLVM 19 is clang-19's): the same commands with that option\n\
         measure what the helper calls cost the Rust driver.\n\
         \nEach report says how it was measured. Under TCG only ratios measured in one\n\
         boot mean anything.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(title: &str, path: &str, ktap: &str) -> Column {
        Column {
            title: title.to_string(),
            path: path.to_string(),
            commit: "abc1234 2026-12-01".to_string(),
            ktap: ktap.to_string(),
        }
    }

    #[test]
    fn page_of_two_small_baselines() {
        let c = column(
            "C driver",
            "c.ktap",
            "KTAP version 1\n1..3\n\
             ok 1 test_b.sh # SKIP bpftrace not installed (0.7s)\n\
             ok 2 test_a.sh # time=2.5s\n\
             not ok 3 test_c.sh # time=9.0s\n",
        );
        let rust = column(
            "Rust driver",
            "rust.ktap",
            "KTAP version 1\n1..1\nok 1 test_a.sh # time=1.5s\n",
        );
        let reports = [
            (&REPORTS[0], "m1 2026-12-02".to_string()),
            (&REPORTS[2], "p1 2026-12-03".to_string()),
        ];
        let text = page(&[c, rust], &reports);
        let expected = "\
- C driver: `c.ktap`, commit abc1234 2026-12-01: 1 passed, 1 failed, 1 skipped.
- Rust driver: `rust.ktap`, commit abc1234 2026-12-01: 1 passed, 0 failed, 0 skipped.

| test | C driver | Rust driver |
|---|---|---|
| test_a.sh | 2.5s | 1.5s |
| test_b.sh | skip: bpftrace not installed (0.7s) | - |
| test_c.sh | FAIL 9.0s | - |
";
        assert!(text.starts_with("# Results\n\nGenerated by `cargo xtask results --write`"));
        assert!(text.contains(expected), "{text}");
        assert!(text.contains("with its CSV, samples and plot; commit m1 2026-12-02.\n"));
        assert!(text.contains("\n  goes; commit p1 2026-12-03.\n"));
        assert!(text.ends_with("boot mean anything.\n"));
        assert!(text.contains("`--config inline-helpers` builds a kernel"));
    }

    /// Every committed file under xtask/results/ (but the page) belongs to
    /// a report of [`REPORTS`], and every report's link is committed: a
    /// new report must be added to the page's inputs.
    #[test]
    fn reports_cover_the_committed_results() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = std::process::Command::new("git")
            .current_dir(&repo)
            .args(["ls-files", "--", "xtask/results"])
            .output()
            .expect("git ls-files");
        assert!(out.status.success(), "git ls-files failed");
        let files: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        assert!(files.iter().any(|f| f == PAGE), "{PAGE} is not committed");
        for f in files.iter().filter(|f| *f != PAGE) {
            assert!(
                REPORTS
                    .iter()
                    .any(|r| f.starts_with(&format!("{}/", r.dir))),
                "{f} is under no report of REPORTS in xtask/src/results.rs: add it"
            );
        }
        for r in REPORTS {
            let link = format!("{}/{}", r.dir, r.link);
            assert!(
                files.contains(&link),
                "{link} (in REPORTS) is not committed"
            );
        }
    }
}
