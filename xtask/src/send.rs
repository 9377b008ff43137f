//! `cargo xtask prepare-send`: a copy of a series ready for git send-email.
//!
//! Committed patches carry no Signed-off-by or other trailers naming people,
//! except those the named person posted publicly ([`POSTED_TRAILERS`]).
//! This adds the submitter's own sign-off from their git config, To/Cc from
//! the tree's scripts/get_maintainer.pl, and runs checkpatch on the result.
//! A patch by someone else (its From: is not one of our placeholder
//! `@invalid` identities) keeps its author in an in-body From: line.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::layout::{self, Layout};
use crate::pipeline::TreeOpts;
use crate::progress::{detail, phase};
use crate::tree;

#[derive(Clone, Debug, clap::Args)]
pub struct SendOpts {
    /// Where the source and the prepared tree are (prepare-send builds
    /// nothing: no --config, --llvm or -j).
    #[command(flatten)]
    pub tree: TreeOpts,
    /// Series directory under patches/ (e.g. 02-ublk-v2); default: all.
    #[arg(long)]
    pub series: Vec<String>,
    /// Output directory (default target/send).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Trailers that name a person; committed patches must not carry them.
pub const PERSON_TRAILERS: &[&str] = &[
    "Signed-off-by:",
    "Reviewed-by:",
    "Acked-by:",
    "Tested-by:",
    "Co-developed-by:",
    "Reported-by:",
    "Suggested-by:",
];

/// Person trailers that the person named posted publicly, copied exactly
/// from the posting (../shared/reference/): the only ones a committed
/// patch may carry.
pub const POSTED_TRAILERS: &[&str] = &[
    // "[PATCH] ublk: don't use an I/O scheduler by default", linux-block,
    // 2026-10-01, and Ming Lei's reply to it.
    "Signed-off-by: Qiliang Yuan <odys.yuan@gmail.com>",
    "Reviewed-by: Ming Lei <tom.leiming@gmail.com>",
];

/// Lines of a patch that are person trailers (in the message part) not
/// posted publicly by their person.
pub fn person_trailers(patch: &str) -> Vec<String> {
    message_part(patch)
        .lines()
        .filter(|l| PERSON_TRAILERS.iter().any(|t| l.starts_with(t)))
        .filter(|l| !POSTED_TRAILERS.contains(l))
        .map(str::to_string)
        .collect()
}

fn message_part(patch: &str) -> &str {
    match patch.find("\n---\n") {
        Some(i) => &patch[..i],
        None => patch,
    }
}

/// Makes the submitter the sender (`From:`), adds their `Signed-off-by`
/// before the `---` line and To/Cc to the mail headers. A patch whose
/// author is a person, not one of our placeholders (`...@invalid`), keeps
/// that author in a `From:` line at the top of the body.
pub fn decorate(
    patch: &str,
    signoff: Option<&str>,
    to: &[String],
    cc: &[String],
) -> Result<String> {
    let hdr_end = patch.find("\n\n").context("patch has no mail header")?;
    let author = patch[..hdr_end]
        .lines()
        .find_map(|l| l.strip_prefix("From: "))
        .map(str::to_string);
    let in_body_from = match (&author, signoff) {
        (Some(a), Some(me)) if !a.ends_with("@invalid>") && a != me => {
            Some(format!("From: {a}\n\n"))
        }
        _ => None,
    };
    // The submitter sends the patch.
    let mut headers: String = patch[..hdr_end]
        .lines()
        .map(|l| match (l.strip_prefix("From: "), signoff) {
            (Some(_), Some(me)) => format!("From: {me}"),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    if !to.is_empty() {
        headers += &format!("\nTo: {}", to.join(",\n    "));
    }
    if !cc.is_empty() {
        headers += &format!("\nCc: {}", cc.join(",\n    "));
    }
    let mut body = patch[hdr_end..].to_string();
    if let Some(from) = in_body_from {
        if !body.starts_with(&format!("\n\n{from}")) {
            body = format!("\n\n{from}{}", &body[2..]);
        }
    }
    if let Some(s) = signoff {
        let line = format!("Signed-off-by: {s}");
        if !body.contains(&line) {
            let at = body.find("\n---\n").context("patch has no --- separator")?;
            // Trailers form the last paragraph of the message.
            let before = body[..at].trim_end_matches('\n');
            let last_par = before.rsplit("\n\n").next().unwrap_or("");
            let is_trailer_block = last_par
                .lines()
                .all(|l| l.contains(": ") && !l.starts_with(' '));
            let sep = if is_trailer_block { "\n" } else { "\n\n" };
            body = format!("{before}{sep}{line}{}", &body[at..]);
        }
    }
    Ok(headers + &body)
}

fn git_config(repo: &Path, key: &str) -> Option<String> {
    let o = Command::new("git")
        .current_dir(repo)
        .args(["config", key])
        .output()
        .ok()?;
    let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !v.is_empty()).then_some(v)
}

pub fn run(opts: &SendOpts) -> Result<()> {
    let layout = Layout::discover(opts.tree.work_dir.clone())?;
    crate::pipeline::ensure_tree(&layout, &opts.tree)?;
    let (Some(name), Some(email)) = (
        git_config(&layout.repo, "user.name"),
        git_config(&layout.repo, "user.email"),
    ) else {
        bail!("set `git config user.name` and `user.email`: the sign-off added must be the submitter's own");
    };
    let signoff = format!("{name} <{email}>");
    let out_root = opts
        .out
        .clone()
        .unwrap_or_else(|| layout.repo.join("target/send"));
    let patches_dir = layout.repo.join(layout::PATCHES);
    let mut series: Vec<PathBuf> = std::fs::read_dir(&patches_dir)
        .with_context(|| format!("no {}", patches_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter(|p| {
            opts.series.is_empty()
                || opts
                    .series
                    .iter()
                    .any(|s| p.file_name().is_some_and(|n| n == s.as_str()))
        })
        .collect();
    series.sort();
    if series.is_empty() {
        bail!(
            "no series matches {:?} under {}",
            opts.series,
            patches_dir.display()
        );
    }
    let tree_dir = layout.tree();
    for s in series {
        let sname = s.file_name().unwrap().to_string_lossy().to_string();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&s)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "patch"))
            .collect();
        files.sort();
        let real: Vec<&PathBuf> = files.iter().filter(|p| !tree::is_cover_letter(p)).collect();
        let gm = Command::new("./scripts/get_maintainer.pl")
            .current_dir(&tree_dir)
            .args(["--nogit", "--nogit-fallback", "--norolestats"])
            .args(&real)
            .output()
            .context("running scripts/get_maintainer.pl")?;
        let who: Vec<String> = String::from_utf8_lossy(&gm.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        let (to, cc): (Vec<String>, Vec<String>) = who.into_iter().partition(|w| !w.contains('<'));
        let out = out_root.join(&sname);
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out)?;
        phase(format!(
            "{sname}: {} patches → {}",
            files.len(),
            out.display()
        ));
        detail(format!("To: {}", to.join(", ")));
        detail(format!("Cc: {}", cc.join(", ")));
        for f in &files {
            let text = std::fs::read_to_string(f)?;
            let found = person_trailers(&text);
            if !found.is_empty() {
                bail!(
                    "{} carries person trailers {found:?}; committed patches must not",
                    f.display()
                );
            }
            let so = (!tree::is_cover_letter(f)).then_some(signoff.as_str());
            let dst = out.join(f.file_name().unwrap());
            std::fs::write(&dst, decorate(&text, so, &to, &cc)?)?;
            if so.is_some() {
                let cp = Command::new("./scripts/checkpatch.pl")
                    .current_dir(&tree_dir)
                    .args(["--strict", "--terse", "--no-summary"])
                    .arg(&dst)
                    .output()?;
                let msgs = String::from_utf8_lossy(&cp.stdout).to_string();
                let verdict = if msgs.trim().is_empty() {
                    "checkpatch --strict clean".to_string()
                } else {
                    msgs
                };
                detail(format!(
                    "{}: {}",
                    f.file_name().unwrap().to_string_lossy(),
                    verdict.trim()
                ));
            }
        }
        detail(format!(
            "send with: git send-email {}/*.patch",
            out.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "From 123 Mon Sep 17 00:00:00 2001\nFrom: ublk v2 <ublk@invalid>\nSubject: [PATCH v2 1/4] ublk: x\n\nBody line.\n\nFixes: 0123456789ab (\"ublk: y\")\n---\nv1 -> v2: z\n\n drivers/block/ublk_drv.c | 1 +\n";

    #[test]
    fn signoff_joins_trailer_block_and_headers_get_cc() {
        let out = decorate(
            PATCH,
            Some("A B <a@b>"),
            &["list@vger".into()],
            &["M <m@k>".into()],
        )
        .unwrap();
        assert!(out
            .contains("Subject: [PATCH v2 1/4] ublk: x\nTo: list@vger\nCc: M <m@k>\n\nBody line."));
        assert!(out.contains("\nFrom: A B <a@b>\n"), "{out}");
        assert!(out.starts_with("From 123 Mon Sep 17"), "{out}");
        assert!(
            out.contains("Fixes: 0123456789ab (\"ublk: y\")\nSigned-off-by: A B <a@b>\n---\n"),
            "{out}"
        );
        // Idempotent.
        assert_eq!(decorate(&out, Some("A B <a@b>"), &[], &[]).unwrap(), out);
    }

    #[test]
    fn another_authors_patch_keeps_its_author() {
        let p = "From 1 Mon Sep 17 00:00:00 2001\nFrom: Q Y <q@y.com>\nSubject: s\n\nProse.\n\nSigned-off-by: Q Y <q@y.com>\n---\n x | 1 +\n";
        let out = decorate(p, Some("A <a@b>"), &[], &[]).unwrap();
        assert!(
            out.contains("\nFrom: A <a@b>\nSubject: s\n\nFrom: Q Y <q@y.com>\n\nProse.\n"),
            "{out}"
        );
        assert!(
            out.contains("Signed-off-by: Q Y <q@y.com>\nSigned-off-by: A <a@b>\n---\n"),
            "{out}"
        );
        assert_eq!(decorate(&out, Some("A <a@b>"), &[], &[]).unwrap(), out);
        // Our placeholder authors become the submitter.
        let ours = p.replace("From: Q Y <q@y.com>", "From: ublk v3 <ublk@invalid>");
        let out = decorate(&ours, Some("A <a@b>"), &[], &[]).unwrap();
        assert!(!out.contains("ublk@invalid"), "{out}");
    }

    #[test]
    fn signoff_after_prose_gets_blank_line() {
        let p = "Subject: s\n\nJust prose.\n---\n x | 1 +\n";
        let out = decorate(p, Some("A <a@b>"), &[], &[]).unwrap();
        assert!(
            out.contains("Just prose.\n\nSigned-off-by: A <a@b>\n---\n"),
            "{out}"
        );
    }

    #[test]
    fn committed_patches_carry_no_person_trailers() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let series = tree::series(repo).unwrap();
        for p in series {
            let text = std::fs::read_to_string(&p.path).unwrap();
            assert!(
                person_trailers(&text).is_empty(),
                "{}: {:?}",
                p.name,
                person_trailers(&text)
            );
        }
        assert_eq!(person_trailers(PATCH).len(), 0);
        assert_eq!(
            person_trailers("S\n\nSigned-off-by: X <x@y>\n---\n").len(),
            1
        );
        assert_eq!(
            person_trailers(&format!("S\n\n{}\n---\n", POSTED_TRAILERS[0])).len(),
            0
        );
    }
}
