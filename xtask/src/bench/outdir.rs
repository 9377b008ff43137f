//! Where a `bench matrix` or `bench affinity` run leaves its report: a new
//! directory `<name>-<UTC time>` under the results directory (`matrix`,
//! `affinity`), and the symlink `<name>-latest` beside it pointing at the
//! newest.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Days since 1970-01-01 as (year, month, day), proleptic Gregorian.
fn civil(days: i64) -> (i64, u32, u32) {
    // Shift to eras of 400 years starting on 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// UTC time of `secs` since the epoch: (`20261201-173005` for directory
/// names, `2026-12-01 17:30 UTC` for reports).
pub fn utc(secs: u64) -> (String, String) {
    let secs = secs as i64;
    let (y, mo, d) = civil(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    let (h, mi, s) = (t / 3600, t / 60 % 60, t % 60);
    (
        format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}"),
        format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02} UTC"),
    )
}

/// Creates `base/<name>-<stamp>` (with a suffix if it exists).
pub fn create_named(base: &Path, name: &str, stamp: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(base).with_context(|| format!("creating {}", base.display()))?;
    let mut dir = base.join(format!("{name}-{stamp}"));
    let mut n = 1;
    while dir.exists() {
        n += 1;
        dir = base.join(format!("{name}-{stamp}.{n}"));
    }
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Points `base/<link>` at `dir` (a relative link, so the tree can move);
/// returns the link.
pub fn point_named(base: &Path, link: &str, dir: &Path) -> Result<PathBuf> {
    let link = base.join(link);
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(&link)
            .with_context(|| format!("removing the old {}", link.display()))?;
    }
    let target = dir
        .file_name()
        .context("results directory without a name")?;
    std::os::unix::fs::symlink(target, &link)
        .with_context(|| format!("linking {}", link.display()))?;
    Ok(link)
}

/// A run's results, written: their directory and the link to it.
pub struct Saved {
    pub dir: PathBuf,
    pub latest: PathBuf,
}

/// Writes the results of a `<name>` run: a new `base/<name>-<stamp>` with
/// `files` (file name, text) and the guest's samples copied from `samples`
/// as `samples_name`, and `base/<name>-latest` pointing at it.
pub fn save(
    base: &Path,
    name: &str,
    stamp: &str,
    files: &[(&str, &str)],
    samples: &Path,
    samples_name: &str,
) -> Result<Saved> {
    let dir = create_named(base, name, stamp)?;
    for (file, text) in files {
        let path = dir.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    std::fs::copy(samples, dir.join(samples_name))
        .with_context(|| format!("copying the guest's {}", samples.display()))?;
    let latest = point_named(base, &format!("{name}-latest"), &dir)?;
    Ok(Saved { dir, latest })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(59), (1970, 3, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(-1), (1969, 12, 31));
        // 2026-12-01 17:30:05 UTC
        assert_eq!(
            utc(1_796_146_205),
            (
                "20261201-173005".to_string(),
                "2026-12-01 17:30 UTC".to_string()
            )
        );
    }

    #[test]
    fn dirs_and_latest() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("bench");
        let a = create_named(&base, "matrix", "20261201-173005").unwrap();
        let b = create_named(&base, "matrix", "20261201-173005").unwrap();
        assert_eq!(a.file_name().unwrap(), "matrix-20261201-173005");
        assert_eq!(b.file_name().unwrap(), "matrix-20261201-173005.2");
        std::fs::write(a.join("matrix.md"), "a").unwrap();
        std::fs::write(b.join("matrix.md"), "b").unwrap();
        let l = point_named(&base, "matrix-latest", &a).unwrap();
        assert_eq!(std::fs::read_to_string(l.join("matrix.md")).unwrap(), "a");
        point_named(&base, "matrix-latest", &b).unwrap();
        assert_eq!(std::fs::read_to_string(l.join("matrix.md")).unwrap(), "b");
        assert_eq!(
            std::fs::read_link(&l).unwrap(),
            PathBuf::from("matrix-20261201-173005.2")
        );
    }

    #[test]
    fn save_writes_files_samples_and_link() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("bench");
        let samples = tmp.path().join("bench.csv");
        std::fs::write(&samples, "s").unwrap();
        let saved = save(
            &base,
            "affinity",
            "20261201-173005",
            &[("affinity.md", "report"), ("affinity.csv", "csv")],
            &samples,
            "samples.csv",
        )
        .unwrap();
        assert_eq!(saved.dir.file_name().unwrap(), "affinity-20261201-173005");
        assert_eq!(saved.latest, base.join("affinity-latest"));
        let read = |f: &str| std::fs::read_to_string(saved.latest.join(f)).unwrap();
        assert_eq!(read("affinity.md"), "report");
        assert_eq!(read("affinity.csv"), "csv");
        assert_eq!(read("samples.csv"), "s");
        assert!(save(&base, "x", "1", &[], &tmp.path().join("none"), "s.csv").is_err());
    }
}
