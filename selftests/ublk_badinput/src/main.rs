//! ublk_badinput: runs a table of bad-input cases against whichever ublk
//! driver owns /dev/ublk-control and checks that each gets the result the C
//! driver gives. One KTAP line per case; exit 0 if all match, 1 if any does
//! not, 4 (kselftest skip) without /dev/ublk-control or root.
//!
//! Usage: ublk_badinput [--list] [SUBSTRING...]

use std::process::ExitCode;
use std::time::Instant;

use ublk_badinput::ctrl::{Ctrl, CONTROL};
use ublk_badinput::env::Env;
use ublk_badinput::errno::show;
use ublk_badinput::{cases, ring};

const KSFT_PASS: u8 = 0;
const KSFT_FAIL: u8 = 1;
const KSFT_SKIP: u8 = 4;

/// A case passes if the probe got what the C driver gives and every device
/// it created could be deleted.
fn verdict(
    expect: ring::Got,
    got: anyhow::Result<ring::Got>,
    leftovers: &[String],
) -> Result<(), String> {
    let v = match got {
        Ok(g) if g == expect => Ok(()),
        Ok(g) => Err(format!("expected {}, got {}", show(expect), show(g))),
        Err(e) => Err(format!("{e:#}")),
    };
    match (v, leftovers.is_empty()) {
        (v, true) => v,
        (Ok(()), false) => Err(format!("cleanup: {}", leftovers.join("; "))),
        (Err(e), false) => Err(format!("{e}; cleanup: {}", leftovers.join("; "))),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = args.iter().any(|a| a == "--list");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let selected: Vec<&cases::Case> = cases::all()
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f.as_str())))
        .collect();
    if list {
        for c in &selected {
            println!("{} {}", c.name, show(c.expect));
        }
        return ExitCode::from(KSFT_PASS);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("# SKIP must run as root");
        return ExitCode::from(KSFT_SKIP);
    }
    if !std::path::Path::new(CONTROL).exists() {
        println!("# SKIP {CONTROL} does not exist (no ublk driver loaded)");
        return ExitCode::from(KSFT_SKIP);
    }
    let mut ctrl = match Ctrl::open() {
        Ok(c) => c,
        Err(e) => {
            println!("# {e:#}");
            return ExitCode::from(KSFT_FAIL);
        }
    };
    // Cases that need a feature the driver lacks are skipped.
    let features = ctrl.features().unwrap_or_else(|e| {
        println!("# {e:#}: cases that need a feature are skipped");
        0
    });
    // The C driver is held to the known bugs the table names.
    let c_driver = match ublk_badinput::ctrl::is_c_driver() {
        Ok(c) => c,
        Err(e) => {
            println!("# {e:#}: cannot tell which ublk driver is loaded");
            return ExitCode::from(KSFT_FAIL);
        }
    };
    let mut env = Env::new(ctrl);
    let start = Instant::now();
    println!("KTAP version 1");
    println!("1..{}", selected.len());
    let mut failed = 0;
    let mut skipped = 0;
    for (i, case) in selected.iter().enumerate() {
        let n = i + 1;
        if let Some(why) = cases::skip_reason(case, features) {
            skipped += 1;
            println!("ok {n} {} # SKIP {why}", case.name);
            continue;
        }
        let got = (case.run)(&mut env);
        let leftovers = env.cleanup();
        let (expect, bug) = match case.c_bug {
            Some((c_got, why)) if c_driver => (c_got, Some(why)),
            _ => (case.expect, None),
        };
        let verdict = verdict(expect, got, &leftovers);
        match verdict {
            Ok(()) => match bug {
                Some(why) => println!("ok {n} {} # known C driver bug: {why}", case.name),
                None => println!("ok {n} {}", case.name),
            },
            Err(why) => {
                failed += 1;
                println!("not ok {n} {} # {why}", case.name);
            }
        }
    }
    println!(
        "# {} passed, {failed} failed, {skipped} skipped in {:.1}s",
        selected.len() - failed - skipped,
        start.elapsed().as_secs_f64()
    );
    if failed == 0 {
        ExitCode::from(KSFT_PASS)
    } else {
        ExitCode::from(KSFT_FAIL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ublk_badinput::ring::Got;

    #[test]
    fn verdicts() {
        let einval = Got::Res(-libc::EINVAL);
        assert_eq!(verdict(einval, Ok(einval), &[]), Ok(()));
        assert_eq!(
            verdict(einval, Ok(Got::Res(-libc::ENODEV)), &[]),
            Err("expected -EINVAL, got -ENODEV".into())
        );
        assert_eq!(
            verdict(Got::Pending, Ok(Got::Res(0)), &[]),
            Err("expected no completion (queued), got 0".into())
        );
        assert_eq!(
            verdict(einval, Err(anyhow::anyhow!("setup: x")), &["y".into()]),
            Err("setup: x; cleanup: y".into())
        );
        assert_eq!(
            verdict(einval, Ok(einval), &["y".into()]),
            Err("cleanup: y".into())
        );
    }
}
