//! `cargo xtask profile`: where a selftest boot's time went, from the time
//! stamps in each test's xtrace (`logs/<test>.log.trace`, `+<epoch> cmd`,
//! written by the guest's run.sh through PS4).
//! The time from one traced command to the next goes to the first: the
//! innermost command that was running for commands run in turn, including
//! command substitutions. A test's last command runs until the test ends.
//! A background job (`fio ... &`) gets next to nothing: its time shows as
//! the `wait` for it, or as whatever the test did meanwhile; lines of a
//! background subshell that traces interleave with the test's, so their
//! intervals are approximate. Commands are grouped by program (and
//! subcommand for kublk, rublk, udevadm).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::ktap;
use crate::layout::Layout;
use crate::markdown::{self, Align::*};
use crate::progress::fmt_duration;

#[derive(Clone, Debug, clap::Args)]
pub struct ProfileOpts {
    /// Job directories to read (target/kernel/runs/<id>-selftest-<driver>);
    /// default: the newest selftest boot of each driver.
    pub dirs: Vec<PathBuf>,
    /// How many groups of commands to list.
    #[arg(long, default_value_t = 15)]
    pub top: usize,
    /// Work directory, as for the other commands.
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

/// Seconds per group of commands, and how many times each ran.
#[derive(Default, Debug)]
pub struct Profile {
    pub secs: BTreeMap<String, (f64, usize)>,
    /// From the first to the last time stamp of each trace, summed.
    pub traced: f64,
}

impl Profile {
    /// Adds one test's xtrace; the test ran for `secs` from its first
    /// traced command, if known (else it ends at its last one).
    pub fn add_trace(&mut self, text: &str, secs: Option<f64>) {
        let stamped: Vec<(f64, &str)> = text.lines().filter_map(stamp).collect();
        let (Some(first), Some(last)) = (stamped.first(), stamped.last()) else {
            return;
        };
        let end = secs.map_or(last.0, |s| (first.0 + s).max(last.0));
        let ends = stamped.iter().skip(1).map(|(t, _)| *t).chain([end]);
        for ((t0, cmd), t1) in stamped.iter().zip(ends) {
            let e = self.secs.entry(group(cmd)).or_default();
            e.0 += (t1 - t0).max(0.0);
            e.1 += 1;
        }
        self.traced += end - first.0;
    }

    /// The groups, most time first.
    pub fn ranked(&self) -> Vec<(&str, f64, usize)> {
        let mut v: Vec<(&str, f64, usize)> = self
            .secs
            .iter()
            .map(|(k, (s, n))| (k.as_str(), *s, *n))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }
}

/// `+<epoch>.<us> command` (any number of `+`; a locale may write the
/// decimal point as a comma): the time and the command.
fn stamp(line: &str) -> Option<(f64, &str)> {
    let rest = line.trim_start_matches('+');
    if rest.len() == line.len() {
        return None;
    }
    let (ts, cmd) = rest.split_once(' ')?;
    Some((ts.replace(',', ".").parse().ok()?, cmd))
}

/// The group of a traced command: its program's file name, with the
/// subcommand for the tools whose subcommands differ in cost.
fn group(cmd: &str) -> String {
    let mut words = cmd
        .split_whitespace()
        .skip_while(|w| w.contains('=') && !w.starts_with('='));
    let Some(first) = words.next() else {
        // A bare assignment: what it took was in its command substitution.
        return "(assignment)".into();
    };
    let prog = first.rsplit('/').next().unwrap_or(first);
    match prog {
        "kublk" | "rublk" | "udevadm" => match words.next() {
            Some(sub) => format!("{prog} {sub}"),
            None => prog.into(),
        },
        _ => prog.into(),
    }
}

pub fn run(opts: &ProfileOpts) -> Result<()> {
    let layout = Layout::discover(opts.work_dir.clone())?;
    let dirs = if opts.dirs.is_empty() {
        newest_boots(&layout.runs())
    } else {
        opts.dirs.clone()
    };
    if dirs.is_empty() {
        bail!(
            "no selftest boot in {}: run `cargo xtask selftest` first",
            layout.runs().display()
        );
    }
    for d in &dirs {
        report(d, opts.top)?;
    }
    Ok(())
}

/// The newest `*-selftest-<driver>` job directory of each driver.
fn newest_boots(runs: &Path) -> Vec<PathBuf> {
    ["c", "rust"]
        .iter()
        .filter_map(|d| crate::guest::job::newest(runs, &format!("-selftest-{d}"), "logs"))
        .collect()
}

fn report(dir: &Path, top: usize) -> Result<()> {
    let logs = dir.join("logs");
    let file = dir.join("results.ktap");
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "{}: not a selftest job directory (no results.ktap)",
            dir.display()
        )
    })?;
    let results = ktap::parse(&text);
    // Every test that left a trace, with its time if it reported one (a
    // test that never reported, e.g. the guest died, is profiled too).
    let mut traces: Vec<String> = std::fs::read_dir(&logs)
        .with_context(|| format!("reading {}", logs.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".log.trace").map(str::to_string)
        })
        .collect();
    traces.sort();
    let mut all = Profile::default();
    let mut per_test = Vec::new();
    for name in &traces {
        let secs = results
            .results
            .iter()
            .find(|r| &r.name == name)
            .and_then(|r| r.seconds);
        let text = std::fs::read_to_string(logs.join(format!("{name}.log.trace")))?;
        let mut p = Profile::default();
        p.add_trace(&text, secs);
        if p.secs.is_empty() {
            continue;
        }
        all.add_trace(&text, secs);
        let shown = secs.map_or(format!("{:.1} (no result)", p.traced), |s| {
            format!("{s:.1}")
        });
        per_test.push((name.clone(), p.traced, shown, p));
    }
    let test_secs: f64 = results.results.iter().filter_map(|r| r.seconds).sum();
    println!("## {}", dir.display());
    println!(
        "{} results, {} traces, {} of them time-stamped; test time {} (tests share the guest, so more than its wall time)",
        results.results.len(),
        traces.len(),
        per_test.len(),
        fmt_duration(std::time::Duration::from_secs_f64(test_secs))
    );
    if per_test.is_empty() {
        println!("no time stamps in this boot's traces: it ran before they were added");
        return Ok(());
    }
    println!();
    print!(
        "{}",
        markdown::header_aligned(
            &["commands", "runs", "seconds", "share of traced time"],
            &[Left, Right, Right, Right]
        )
    );
    let ranked = all.ranked();
    for (k, s, n) in ranked.iter().take(top) {
        print!(
            "{}",
            markdown::row(&[
                k.to_string(),
                n.to_string(),
                format!("{s:.1}"),
                format!("{:.1}%", 100.0 * s / all.traced.max(1e-9)),
            ])
        );
    }
    let rest: f64 = ranked.iter().skip(top).map(|(_, s, _)| s).sum();
    print!(
        "{}",
        markdown::row(&[
            format!("(the other {})", ranked.len().saturating_sub(top)),
            String::new(),
            format!("{rest:.1}"),
            format!("{:.1}%", 100.0 * rest / all.traced.max(1e-9)),
        ])
    );
    print!(
        "{}",
        markdown::row(&[
            "**traced, all tests**",
            "",
            &format!("{:.1}", all.traced),
            "100%",
        ])
    );
    println!();
    per_test.sort_by(|a, b| b.1.total_cmp(&a.1));
    print!(
        "{}",
        markdown::header_aligned(
            &["test", "seconds", "where most of it went"],
            &[Left, Right, Left]
        )
    );
    for (name, _, shown, p) in per_test.iter().take(top) {
        let most: Vec<String> = p
            .ranked()
            .iter()
            .take(3)
            .map(|(k, s, n)| format!("{k} {s:.1}s ({n}x)"))
            .collect();
        print!(
            "{}",
            markdown::row(&[name.to_string(), shown.to_string(), most.join(", ")])
        );
    }
    println!();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_goes_to_the_innermost_running_command() {
        let trace = "+ PS4='+${EPOCHREALTIME} '\n\
                     +100.0 _prep_test loop x\n\
                     ++100.5 /usr/bin/kublk add -t loop f\n\
                     +103.0 dev_id=0\n\
                     +103.0 udevadm settle --timeout=20\n\
                     +104.0 fio --name=x\n\
                     +114.0 sleep 1\n\
                     +115.0 /work/k/kublk del -n 0\n\
                     +116.5 _show_result loop_01 0\n";
        let mut p = Profile::default();
        p.add_trace(trace, Some(17.0));
        let r = p.ranked();
        assert_eq!(r[0], ("fio", 10.0, 1));
        assert_eq!(r[1], ("kublk add", 2.5, 1));
        let get = |k: &str| p.secs.get(k).copied();
        assert_eq!(get("kublk del"), Some((1.5, 1)));
        assert_eq!(get("udevadm settle"), Some((1.0, 1)));
        assert_eq!(get("sleep"), Some((1.0, 1)));
        assert_eq!(get("(assignment)"), Some((0.0, 1)));
        assert_eq!(get("_prep_test"), Some((0.5, 1)));
        // The last command runs until the test's end: 100 + 17.
        assert_eq!(get("_show_result"), Some((0.5, 1)));
        assert_eq!(p.traced, 17.0);
        let mut q = Profile::default();
        q.add_trace(trace, None);
        assert_eq!(q.traced, 16.5);
    }

    /// run.sh's PS4 and the parsers of its traces agree: a line as bash
    /// writes it with that PS4 is a stamped line here, and run.sh's
    /// plain_trace strips the same time stamp.
    #[test]
    fn run_sh_ps4_matches_the_parsers() {
        let run_sh = include_str!("../guest/run.sh");
        assert!(
            run_sh.contains(r#""PS4='+\${EPOCHREALTIME} '""#),
            "run.sh no longer sets the PS4 this parser reads"
        );
        assert!(run_sh.contains(r"s/^(\++)[0-9]+[.,][0-9]+ /\1 /"));
        assert_eq!(
            stamp("+1796160126.548551 echo hi"),
            Some((1796160126.548551, "echo hi"))
        );
        assert_eq!(
            stamp("++1796160126,5 echo hi"),
            Some((1796160126.5, "echo hi"))
        );
    }

    #[test]
    fn groups() {
        assert_eq!(group("FOO=1 fio --x"), "fio");
        assert_eq!(group("/a/b/rublk add null"), "rublk add");
        assert_eq!(group("udevadm"), "udevadm");
        assert_eq!(group("x=$(y)"), "(assignment)");
        assert_eq!(stamp("plain line"), None);
        assert_eq!(stamp("+ PS4=x"), None);
        assert_eq!(stamp("+++1.5 a b"), Some((1.5, "a b")));
    }
}
