//! A job directory: what one guest boot runs and where it leaves results.
//! The host writes job.env, the test list or command, the guest script and
//! the initramfs; the guest writes results.ktap, logs/, dmesg.txt and status.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

use crate::kbuild::Outputs;
use crate::layout::Layout;
use crate::userland::Userland;

/// Which ublk driver owns /dev/ublk-control during the boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Driver {
    C,
    Rust,
    /// Load no ublk driver (harness self-checks).
    None,
}

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::C => "c",
            Driver::Rust => "rust",
            Driver::None => "none",
        }
    }

    /// The driver's module: the Rust driver is `ublk_drv` of
    /// `modroot-rust`, as a distribution ships it, but in a benchmark
    /// (`bench`), which loads both drivers in turn in one boot, it is
    /// `rust_ublk`, the Rust driver beside the C `ublk_drv`.
    pub fn module(self, bench: bool) -> Option<&'static str> {
        match self {
            Driver::C => Some("ublk_drv"),
            Driver::Rust if bench => Some("rust_ublk"),
            Driver::Rust => Some("ublk_drv"),
            Driver::None => None,
        }
    }

    /// The module tree that holds [`Driver::module`].
    pub fn modroot(self, bench: bool, kernel: &Outputs) -> PathBuf {
        match self {
            Driver::Rust if !bench => kernel.modroot_rust.clone(),
            _ => kernel.modroot.clone(),
        }
    }
}

pub enum Mode {
    Selftest {
        tests: Vec<String>,
        test_timeout_s: u64,
        /// How many tests may run at once.
        jobs: u32,
    },
    Command(String),
    Shell,
    /// `bench.sh` with these extra variables in job.env.
    Bench(Vec<(String, String)>),
}

pub struct Job {
    pub dir: PathBuf,
    pub initramfs: PathBuf,
    /// Host directories the guest must see even below the paths it mounts
    /// over (/tmp, /run, /dev): the work directory, the cache, the
    /// repository.
    pub keep: Vec<PathBuf>,
}

impl Job {
    pub fn results(&self) -> PathBuf {
        self.dir.join("results.ktap")
    }
    pub fn dmesg(&self) -> PathBuf {
        self.dir.join("dmesg.txt")
    }
    pub fn console(&self) -> PathBuf {
        self.dir.join("console.log")
    }
    /// Exit status the guest recorded, if it got that far.
    pub fn status(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("status"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// Why the guest never ran its job, if its status says so (guest/run.sh
    /// writes these words instead of an exit status).
    pub fn not_started(&self) -> Option<&'static str> {
        match self.status()?.as_str() {
            "setup-failed" => Some("the guest's setup failed"),
            "driver-load-failed" => Some("the ublk driver did not load"),
            _ => None,
        }
    }
}

/// Copies the directory `from` to `to`, recursively (files keep their mode).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type()?.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Creates a fresh job directory under `layout.runs()`.
pub fn create(
    layout: &Layout,
    name: &str,
    kernel: &Outputs,
    userland: &Userland,
    driver: Driver,
    mode: &Mode,
) -> Result<Job> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut dir = layout.runs().join(format!("{stamp}-{name}"));
    let mut n = 1;
    while dir.exists() {
        n += 1;
        dir = layout.runs().join(format!("{stamp}-{name}.{n}"));
    }
    std::fs::create_dir_all(&dir)?;
    let bench = matches!(mode, Mode::Bench(_));
    let moddir = driver
        .modroot(bench, kernel)
        .join("lib/modules")
        .join(&kernel.release);
    let mut jobs = 1;
    let (mode_name, timeout) = match mode {
        Mode::Selftest {
            tests,
            test_timeout_s,
            jobs: j,
        } => {
            std::fs::write(dir.join("tests.txt"), crate::sharing::tests_txt(tests))?;
            jobs = *j;
            ("selftest", *test_timeout_s)
        }
        Mode::Command(c) => {
            std::fs::write(dir.join("command.sh"), format!("{c}\n"))?;
            ("command", 0)
        }
        Mode::Shell => ("shell", 0),
        Mode::Bench(_) => {
            for script in [
                "bench.sh",
                "bench_cpu.sh",
                "bench_matrix.sh",
                "bench_affinity.sh",
            ] {
                std::fs::copy(layout.guest_script(script), dir.join(script))?;
            }
            ("bench", 0)
        }
    };
    // The harness tests and their helpers, as they are now.
    let harness = dir.join("harness-tests");
    std::fs::create_dir_all(&harness)?;
    if let Ok(rd) = std::fs::read_dir(layout.harness_tests()) {
        for e in rd.filter_map(|e| e.ok()) {
            if e.path().is_file() {
                std::fs::copy(e.path(), harness.join(e.file_name()))?;
            }
        }
    }
    // The installed selftests (kublk, the upstream scripts, ublk_badinput,
    // ublk_fuzz), as they are now: a build during the run (it installs
    // again) must not change what this run executes.
    let selftests = dir.join("selftests");
    copy_tree(&userland.selftests, &selftests)
        .with_context(|| format!("copying {}", userland.selftests.display()))?;
    let (rublk, rublk_missing) = match &userland.rublk {
        Ok(p) => (p.display().to_string(), String::new()),
        Err(why) => (String::new(), why.clone()),
    };
    let mut env = vec![
        ("MODE", mode_name.to_string()),
        ("DRIVER", driver.name().to_string()),
        (
            "RUST_MODULE",
            Driver::Rust.module(bench).unwrap_or_default().to_string(),
        ),
        ("MODDIR", moddir.display().to_string()),
        ("SELFTESTS", selftests.display().to_string()),
        ("EXTRAS", userland.extras.display().to_string()),
        ("TEST_TIMEOUT", timeout.to_string()),
        ("JOBS", jobs.to_string()),
        ("HARNESS_TESTS", harness.display().to_string()),
        ("RUBLK", rublk),
        ("RUBLK_MISSING", rublk_missing),
    ];
    if let Mode::Bench(vars) = mode {
        env.extend(vars.iter().map(|(k, v)| (k.as_str(), v.clone())));
    }
    let text: String = env
        .iter()
        .map(|(k, v)| format!("{k}={}\n", shell_quote(v)))
        .collect();
    std::fs::write(dir.join("job.env"), text)?;
    std::fs::copy(layout.guest_script("run.sh"), dir.join("guest-run.sh"))?;
    let initramfs = super::write_initramfs(&dir, &layout.guest_script("init.sh"))?;
    let keep = vec![
        layout.work.clone(),
        layout.cache.clone(),
        layout.repo.clone(),
    ];
    for p in keep.iter().chain([&dir]) {
        check_cmdline_path(p)?;
    }
    Ok(Job {
        dir,
        initramfs,
        keep,
    })
}

/// The guest learns host paths from the kernel command line, which splits
/// at whitespace; `xtask.keep=` lists paths separated by colons.
fn check_cmdline_path(p: &Path) -> Result<()> {
    let s = p.to_str().ok_or_else(|| {
        anyhow::anyhow!(
            "{}: the guest needs this path but it is not UTF-8",
            p.display()
        )
    })?;
    if let Some(c) = s.chars().find(|c| c.is_whitespace() || *c == ':') {
        anyhow::bail!(
            "{s}: the guest cannot be told this path (it contains {c:?}); \
             move the checkout or set --work-dir / UBLK_XTASK_CACHE to a path without it"
        );
    }
    Ok(())
}

/// The newest job directory in `runs` whose name ends with `suffix` (e.g.
/// `-selftest-c`) and that holds `file`, if any.
pub fn newest(runs: &Path, suffix: &str, file: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(runs)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|d| d.to_string_lossy().ends_with(suffix) && d.join(file).exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// Newest job directories beyond `keep` are left; older ones are removed.
pub fn prune(runs: &Path, keep: usize) {
    let Ok(rd) = std::fs::read_dir(runs) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let n = dirs.len();
    for d in dirs.into_iter().take(n.saturating_sub(keep)) {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_paths() {
        assert!(check_cmdline_path(Path::new("/tmp/ublk-rust/target")).is_ok());
        let e = check_cmdline_path(Path::new("/tmp/my checkout")).unwrap_err();
        assert!(e.to_string().contains("/tmp/my checkout"), "{e}");
        assert!(check_cmdline_path(Path::new("/tmp/a:b")).is_err());
    }

    #[test]
    fn selftests_are_copied_with_their_mode() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let from = d.path().join("ublk");
        std::fs::create_dir_all(from.join("trace")).unwrap();
        std::fs::write(from.join("kublk"), "bin").unwrap();
        std::fs::set_permissions(from.join("kublk"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(from.join("trace/seq_io.bt"), "bt").unwrap();
        let to = d.path().join("job/selftests");
        copy_tree(&from, &to).unwrap();
        // Later changes to the installed tree do not reach the copy.
        std::fs::write(from.join("kublk"), "rebuilt").unwrap();
        assert_eq!(std::fs::read_to_string(to.join("kublk")).unwrap(), "bin");
        let mode = std::fs::metadata(to.join("kublk"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_to_string(to.join("trace/seq_io.bt")).unwrap(),
            "bt"
        );
    }

    #[test]
    fn the_rust_driver_is_ublk_drv_of_modroot_rust_but_in_benchmarks() {
        let k = Outputs {
            out: "/o".into(),
            bzimage: "/o/bzImage".into(),
            release: "7.3.4+".into(),
            modroot: "/o/modroot".into(),
            modroot_rust: "/o/modroot-rust".into(),
            headers: "/o/usr/include".into(),
        };
        assert_eq!(Driver::Rust.module(false), Some("ublk_drv"));
        assert_eq!(
            Driver::Rust.modroot(false, &k),
            Path::new("/o/modroot-rust")
        );
        assert_eq!(Driver::Rust.module(true), Some("rust_ublk"));
        assert_eq!(Driver::Rust.modroot(true, &k), Path::new("/o/modroot"));
        for bench in [false, true] {
            assert_eq!(Driver::C.module(bench), Some("ublk_drv"));
            assert_eq!(Driver::C.modroot(bench, &k), Path::new("/o/modroot"));
            assert_eq!(Driver::None.modroot(bench, &k), Path::new("/o/modroot"));
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
