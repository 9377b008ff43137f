//! What a baseline records in xtask/times/ for `--ci`: the C driver's
//! stamp, our tests' hashes, and the per-test results (`--save-baseline`).

use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::short;
use crate::ktap::{self, Status};

/// The file in xtask/times/ that holds the recorded stamp.
pub const STAMP_FILE: &str = "c-driver.stamp";

/// The file in xtask/times/ that holds, per directory of our tests, the
/// hash its files had in the recorded baseline (`<sha256> <dir>`).
pub const OURS_FILE: &str = "c-ours.sha256";

/// The stamp recorded in `times` (xtask/times/), if any.
pub fn recorded(times: &Path) -> Result<Option<String>> {
    let file = times.join(STAMP_FILE);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Ok(None);
    };
    let s = text.trim();
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!(
            "{} holds {s:?}, not a SHA-256 in hex: record it again with `cargo xtask selftest --save-baseline`",
            file.display()
        );
    }
    Ok(Some(s.to_string()))
}

/// The tests the C driver skipped in the recorded baseline (`times`).
pub fn recorded_c_skips(times: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(times.join("selftest-c.ktap")).unwrap_or_default();
    ktap::parse(&text)
        .results
        .into_iter()
        .filter(|r| r.status == Status::Skip)
        .map(|r| r.name)
        .collect()
}

/// `--save-baseline`: each boot's results (driver name, results.ktap)
/// become the baseline of test times in `times`; with the C driver's, the
/// stamp of its inputs and `ours`, the hashes of our tests
/// ([`ours_hashes`]) as they were when the run started.
pub fn save_baseline(
    times: &Path,
    boots: &[(&str, PathBuf)],
    stamp: Option<&str>,
    ours: &str,
) -> Result<()> {
    std::fs::create_dir_all(times).with_context(|| format!("creating {}", times.display()))?;
    for (driver, results) in boots {
        let to = times.join(format!("selftest-{driver}.ktap"));
        std::fs::copy(results, &to)
            .with_context(|| format!("copying {} to {}", results.display(), to.display()))?;
        println!("# --save-baseline: {}", to.display());
        if let (&"c", Some(stamp)) = (driver, stamp) {
            let file = times.join(STAMP_FILE);
            std::fs::write(&file, format!("{stamp}\n"))
                .with_context(|| format!("writing {}", file.display()))?;
            println!(
                "# --save-baseline: C driver stamp {} in {}",
                short(stamp),
                file.display()
            );
            let file = times.join(OURS_FILE);
            std::fs::write(&file, ours).with_context(|| format!("writing {}", file.display()))?;
            println!("# --save-baseline: our tests' hashes in {}", file.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_stamp_must_be_a_sha256() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(recorded(d.path()).unwrap(), None);
        std::fs::write(d.path().join(STAMP_FILE), "abc\n").unwrap();
        assert!(recorded(d.path()).is_err());
        let s = "0123456789abcdef".repeat(4);
        std::fs::write(d.path().join(STAMP_FILE), format!("{s}\n")).unwrap();
        assert_eq!(recorded(d.path()).unwrap(), Some(s));
    }
}
