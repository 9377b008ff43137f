//! Fetching Debian packages without touching the system's apt configuration.
//!
//! A private apt state directory gets a source list derived from the mirror
//! the machine's own apt sources already name, plus the suites this project
//! needs (trixie for liburing >= 2.4, trixie-backports for linux-source-7.3).
//! No host name is written in this repository: the mirror is read from
//! /etc/apt at run time.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use xshell::{cmd, Shell};

/// Suites added on top of the system's own entries.
pub const EXTRA_SUITES: &[&str] = &["trixie", "trixie-backports"];
const DEFAULT_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// One `deb` source entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub uri: String,
    pub suite: String,
    pub components: Vec<String>,
    pub signed_by: Option<String>,
}

impl Entry {
    fn line(&self) -> String {
        let key = self.signed_by.as_deref().unwrap_or(DEFAULT_KEYRING);
        format!(
            "deb [signed-by={key}] {} {} {}",
            self.uri,
            self.suite,
            self.components.join(" ")
        )
    }
}

/// Parses a one-line-style sources.list.
pub fn parse_list(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(rest) = line.strip_prefix("deb ") else {
            continue;
        };
        let mut rest = rest.trim();
        let mut signed_by = None;
        if let Some(opts) = rest.strip_prefix('[') {
            let Some((opts, after)) = opts.split_once(']') else {
                continue;
            };
            for o in opts.split_whitespace() {
                if let Some(k) = o.strip_prefix("signed-by=") {
                    signed_by = Some(k.to_string());
                }
            }
            rest = after.trim();
        }
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        out.push(Entry {
            uri: uri.to_string(),
            suite: suite.to_string(),
            components: words.map(str::to_string).collect(),
            signed_by,
        });
    }
    out
}

/// Parses a deb822-style `.sources` file.
pub fn parse_deb822(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let mut fields = std::collections::HashMap::new();
        for line in stanza.lines() {
            if line.starts_with('#') {
                continue;
            }
            if let Some((k, v)) = line.split_once(':') {
                fields.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let get = |k: &str| fields.get(k).map(String::as_str).unwrap_or("");
        if !get("types").split_whitespace().any(|t| t == "deb")
            || get("enabled").eq_ignore_ascii_case("no")
        {
            continue;
        }
        let components: Vec<String> = get("components")
            .split_whitespace()
            .map(Into::into)
            .collect();
        let signed_by = fields
            .get("signed-by")
            .filter(|s| s.starts_with('/'))
            .cloned();
        for uri in get("uris").split_whitespace() {
            for suite in get("suites").split_whitespace() {
                out.push(Entry {
                    uri: uri.to_string(),
                    suite: suite.to_string(),
                    components: components.clone(),
                    signed_by: signed_by.clone(),
                });
            }
        }
    }
    out
}

/// Reads the system's apt source entries.
pub fn system_entries() -> Result<Vec<Entry>> {
    let mut entries = Vec::new();
    let main = Path::new("/etc/apt/sources.list");
    if main.exists() {
        entries.extend(parse_list(&std::fs::read_to_string(main)?));
    }
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            match p.extension().and_then(|e| e.to_str()) {
                Some("list") => entries.extend(parse_list(&text)),
                Some("sources") => entries.extend(parse_deb822(&text)),
                _ => {}
            }
        }
    }
    Ok(entries)
}

/// The private source list: the system's Debian entries plus the extra suites
/// on the mirror that serves the system's main Debian suite.
pub fn private_entries(system: &[Entry]) -> Result<Vec<Entry>> {
    let debian: Vec<&Entry> = system
        .iter()
        .filter(|e| e.components.iter().any(|c| c == "main"))
        .collect();
    let main = debian
        .iter()
        .find(|e| !e.suite.contains('-') && !e.uri.contains("security"))
        .context("no Debian main archive entry found in /etc/apt sources")?;
    let mut out: Vec<Entry> = debian.iter().map(|e| (*e).clone()).collect();
    for suite in EXTRA_SUITES {
        if !out.iter().any(|e| e.uri == main.uri && e.suite == *suite) {
            out.push(Entry {
                uri: main.uri.clone(),
                suite: suite.to_string(),
                components: vec!["main".into()],
                signed_by: main.signed_by.clone(),
            });
        }
    }
    Ok(out)
}

/// A private apt configuration rooted in a cache directory.
pub struct PrivateApt {
    dir: PathBuf,
}

impl PrivateApt {
    pub fn new(dir: &Path) -> Result<Self> {
        for d in ["lists/partial", "cache/archives/partial"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        let entries = private_entries(&system_entries()?)?;
        let text: String = entries.iter().map(|e| e.line() + "\n").collect();
        let list = dir.join("sources.list");
        if std::fs::read_to_string(&list).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(&list, text)?;
            // New sources: force a refresh of the lists.
            let _ = std::fs::remove_file(dir.join("lists/.updated"));
        }
        Ok(PrivateApt {
            dir: dir.to_path_buf(),
        })
    }

    fn opts(&self) -> Vec<String> {
        let d = self.dir.display();
        vec![
            format!("-oDir::Etc::SourceList={d}/sources.list"),
            "-oDir::Etc::SourceParts=/dev/null".into(),
            format!("-oDir::State::Lists={d}/lists"),
            format!("-oDir::Cache={d}/cache"),
            "-oDebug::NoLocking=1".into(),
            "-oAPT::Sandbox::User=root".into(),
            "-qq".into(),
        ]
    }

    /// Refreshes the package lists if they are missing or older than a day.
    pub fn update(&self, force: bool) -> Result<()> {
        let stamp = self.dir.join("lists/.updated");
        let fresh = std::fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < Duration::from_secs(24 * 3600));
        if fresh && !force {
            return Ok(());
        }
        let sh = Shell::new()?;
        let opts = self.opts();
        cmd!(sh, "apt-get {opts...} update")
            .run()
            .context("apt-get update (private state) failed")?;
        std::fs::write(stamp, "")?;
        Ok(())
    }

    /// The version apt would pick for `spec` (`pkg`, `pkg/suite`).
    pub fn candidate(&self, pkg: &str, suite: Option<&str>) -> Result<String> {
        let sh = Shell::new()?;
        let opts = self.opts();
        let out = cmd!(sh, "apt-cache {opts...} madison {pkg}").read()?;
        // "pkg | version | uri suite/main amd64 Packages"
        let mut best: Option<String> = None;
        for line in out.lines() {
            let cols: Vec<&str> = line.split('|').map(str::trim).collect();
            if cols.len() < 3 || cols[0] != pkg {
                continue;
            }
            let in_suite = suite.is_none_or(|s| {
                cols[2]
                    .split_whitespace()
                    .nth(1)
                    .is_some_and(|sc| sc.split('/').next() == Some(s))
            });
            if in_suite && best.is_none() {
                best = Some(cols[1].to_string());
            }
        }
        best.with_context(|| {
            format!("package {pkg} not found in the private apt lists (suite {suite:?})")
        })
    }

    /// Downloads `pkg=version` into `dest` unless already there; returns the path.
    pub fn download(&self, pkg: &str, version: &str, dest: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dest)?;
        let file_version = version.replace(':', "%3a");
        let prefix = format!("{pkg}_{file_version}_");
        let find = || -> Option<PathBuf> {
            std::fs::read_dir(dest)
                .ok()?
                .filter_map(|e| e.ok())
                .find_map(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    (n.starts_with(&prefix) && n.ends_with(".deb")).then(|| e.path())
                })
        };
        if let Some(p) = find() {
            return Ok(p);
        }
        let sh = Shell::new()?;
        sh.change_dir(dest);
        let opts = self.opts();
        let spec = format!("{pkg}={version}");
        cmd!(sh, "apt-get {opts...} download {spec}")
            .run()
            .with_context(|| format!("apt-get download {spec} failed"))?;
        match find() {
            Some(p) => Ok(p),
            None => bail!(
                "apt-get download {spec} produced no {prefix}*.deb in {}",
                dest.display()
            ),
        }
    }
}

/// Unpacks a .deb into `dir` (like `dpkg -x`).
pub fn unpack(deb: &Path, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let sh = Shell::new()?;
    cmd!(sh, "dpkg-deb -x {deb} {dir}").run()?;
    Ok(())
}

/// Version of an installed Debian package, if installed.
pub fn installed_version(pkg: &str) -> Option<String> {
    let out = std::process::Command::new("dpkg-query")
        .args(["-W", "-f=${Status}|${Version}", pkg])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    let (status, version) = s.split_once('|')?;
    (out.status.success() && status.ends_with(" installed")).then(|| version.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEB822: &str = "Types: deb\n# snapshot comment\nURIs: http://mirror.example/debian\n\
Suites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/k.gpg\n\n\
Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\
Components: main\nSigned-By: /usr/share/keyrings/k.gpg\n\n\
Types: deb-src\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n";

    #[test]
    fn deb822_entries() {
        let e = parse_deb822(DEB822);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].suite, "bookworm");
        assert_eq!(e[1].suite, "bookworm-updates");
        assert_eq!(e[2].uri, "http://mirror.example/debian-security");
        assert_eq!(e[0].signed_by.as_deref(), Some("/usr/share/keyrings/k.gpg"));
    }

    #[test]
    fn one_line_entries() {
        let e = parse_list(
            "deb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main contrib\n\
             # deb http://commented/ x main\ndeb-src http://m.example/debian bookworm main\n",
        );
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].components, ["main", "contrib"]);
        assert_eq!(e[0].signed_by.as_deref(), Some("/k.gpg"));
    }

    #[test]
    fn private_list_adds_suites_on_main_mirror() {
        let p = private_entries(&parse_deb822(DEB822)).unwrap();
        let extra: Vec<_> = p
            .iter()
            .filter(|e| EXTRA_SUITES.contains(&e.suite.as_str()))
            .collect();
        assert_eq!(extra.len(), 2);
        assert!(extra
            .iter()
            .all(|e| e.uri == "http://mirror.example/debian"));
        assert!(p[0]
            .line()
            .starts_with("deb [signed-by=/usr/share/keyrings/k.gpg] "));
    }

    #[test]
    fn no_debian_entry_is_an_error() {
        assert!(private_entries(&[]).is_err());
    }
}
