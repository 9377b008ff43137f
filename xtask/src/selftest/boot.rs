//! One guest boot of a run: the context every boot shares, the echo of
//! its result lines with the time left, the verdict on what it left
//! behind, and the harness self-checks (boots that must fail).

use anyhow::Result;
use std::path::Path;
use std::time::{Duration, Instant};

use super::HARNESS_PANIC;
use crate::eta::Eta;
use crate::guest::job::{self, Driver, Job, Mode};
use crate::guest::Guest;
use crate::guest::{self, Accel, Ending, Limits, Outcome};
use crate::kbuild::Outputs;
use crate::ktap::{self, Status, TestResult};
use crate::layout::Layout;
use crate::progress::{detail, fmt_duration};
use crate::splat::{self, Splat};
use crate::userland::Userland;

/// What one boot left behind, judged.
pub struct Boot {
    pub status: Option<String>,
    pub ending: Ending,
    pub splats: Vec<Splat>,
}

impl Boot {
    pub fn failed(&self) -> bool {
        self.status.as_deref() != Some("0")
            || !self.splats.is_empty()
            || matches!(self.ending, Ending::Killed(_))
    }
}

/// Splats from the guest's dmesg file and its console (the console also has
/// what was printed after the last dmesg write, e.g. a panic).
pub fn boot_splats(job: &Job) -> Vec<Splat> {
    let mut all = Vec::new();
    for p in [job.dmesg(), job.console()] {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for s in splat::scan(&text) {
            if !all.iter().any(|a: &Splat| a.line == s.line) {
                all.push(s);
            }
        }
    }
    all
}

pub(super) fn judge(job: &Job, outcome: &Outcome) -> Boot {
    Boot {
        status: job.status(),
        ending: outcome.ending.clone(),
        splats: boot_splats(job),
    }
}

/// What every boot of a run shares.
pub(super) struct Ctx<'a> {
    pub layout: &'a Layout,
    pub kernel: &'a Outputs,
    pub userland: &'a Userland,
    pub accel: &'a Accel,
}

/// Echoes a boot's result lines, each with the estimate of the time left.
pub(super) struct Echo<'a> {
    /// Prefix of this boot's tests in the estimate (`c/`).
    pub prefix: String,
    pub eta: &'a mut Eta,
    /// When the guest was started.
    pub boot_start: Instant,
}

impl Ctx<'_> {
    pub fn boot(
        &self,
        name: &str,
        driver: Driver,
        mode: &Mode,
        limits: &Limits,
        mut echo: Option<Echo>,
    ) -> Result<(Job, Outcome)> {
        let job = job::create(self.layout, name, self.kernel, self.userland, driver, mode)?;
        let g = Guest {
            kernel: self.kernel,
            job: &job,
            accel: self.accel,
            size: guest::Size::default(),
        };
        let outcome = guest::run_watched(g.command(), limits, &job.console(), |line| {
            let l = line.trim_start();
            let Some(echo) = echo.as_mut() else {
                return;
            };
            if l.starts_with("xtask: driver") {
                detail(format!("{name}: {l}"));
            }
            let Some(r) = ktap::parse(l).results.pop() else {
                return;
            };
            let test = format!("{}{}", echo.prefix, r.name);
            match echo.eta.finished(&test, echo.boot_start.elapsed()) {
                Some(left) => detail(format!("{name}: {l}  [~{} left]", fmt_duration(left))),
                None => detail(format!("{name}: {l}")),
            }
        })?;
        Ok((job, outcome))
    }
}

/// Runs one harness self-check: a boot that must be reported as failed with
/// a splat of `kind`.
pub(super) fn harness_check(ctx: &Ctx, name: &str) -> Result<TestResult> {
    let (command, kind) = match name {
        HARNESS_PANIC => ("echo c > /proc/sysrq-trigger; sleep 60", "panic"),
        _ => (
            "modprobe lkdtm && echo WARNING > /sys/kernel/debug/provoke-crash/DIRECT",
            "WARNING",
        ),
    };
    let start = Instant::now();
    let limits = Limits {
        total: Duration::from_secs(240),
        stall: None,
    };
    let mode = Mode::Command(command.into());
    let (job, outcome) = ctx.boot(name, Driver::None, &mode, &limits, None)?;
    let boot = judge(&job, &outcome);
    let found = boot.splats.iter().any(|s| s.kind == kind);
    let ok = boot.failed() && found;
    let secs = start.elapsed().as_secs_f64();
    let detail = if ok {
        format!("time={secs:.1}s")
    } else {
        format!(
            "injected {kind} not reported (splats: {:?}, status {:?}, {:?}); console {}",
            boot.splats.iter().map(|s| s.kind).collect::<Vec<_>>(),
            boot.status,
            boot.ending,
            job.console().display()
        )
    };
    Ok(TestResult {
        number: 0,
        name: name.into(),
        status: if ok { Status::Pass } else { Status::Fail },
        detail,
        seconds: Some(secs),
    })
}

/// The longest timeout that a harness test in `dir` declares for itself
/// (a `# xtask-timeout: N` line, which the guest's runner honours when it
/// is longer than the per-test timeout), 0 if none does.
pub(super) fn own_timeout(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| l.strip_prefix("# xtask-timeout: ")?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_timeouts_of_harness_tests() {
        let dir = std::env::temp_dir().join(format!("xtask-own-timeout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(own_timeout(&dir), 0);
        std::fs::write(dir.join("test_a.sh"), "#!/bin/bash\n# xtask-timeout: 600\n").unwrap();
        std::fs::write(
            dir.join("test_b.sh"),
            "# xtask-timeout: 450\n# xtask-timeout: x\n",
        )
        .unwrap();
        assert_eq!(own_timeout(&dir), 600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn boot_verdict() {
        let b = Boot {
            status: Some("0".into()),
            ending: Ending::Exited(Some(0)),
            splats: vec![],
        };
        assert!(!b.failed());
        let b = Boot {
            status: None,
            ending: Ending::Exited(Some(0)),
            splats: vec![],
        };
        assert!(b.failed());
    }
}
