//! A patch as `git format-patch` writes it, split into what its commit
//! holds: the message and the notes. The message keeps any text the author
//! put after a `---` line of their own (a changelog `format-patch` then
//! prints before its own `---`); the notes are `--notes`' `Notes:` block.
//! Headers (author, date, subject) are read by `git mailinfo`, which knows
//! their encodings; this reads only the body.

use anyhow::{bail, Context, Result};

/// The parts of a patch's body that `git apply` does not keep.
#[derive(Debug, PartialEq, Eq)]
pub struct Body {
    /// Everything between the mail headers and format-patch's `---` line:
    /// the commit message without its subject line.
    pub message: String,
    /// The text of the `Notes:` block, unindented, if there is one.
    pub notes: Option<String>,
}

/// Splits a patch file's text (headers, body, `---`, notes, diffstat,
/// diff) into the message body and the notes.
pub fn body(patch: &str) -> Result<Body> {
    let start = patch
        .find("\n\n")
        .context("no blank line after the headers")?
        + 2;
    let rest = &patch[start..];
    let diff = if rest.starts_with("diff --git ") {
        0
    } else {
        rest.find("\ndiff --git ").context("no `diff --git` line")? + 1
    };
    let mut lines: Vec<&str> = rest[..diff].split_inclusive('\n').collect();
    // The blank line before the diff, then the diffstat (its lines start
    // with a space: files, summary, `create mode`).
    if lines.last() == Some(&"\n") {
        lines.pop();
    }
    while lines.last().is_some_and(|l| l.starts_with(' ')) {
        lines.pop();
    }
    let notes = notes(&mut lines);
    if lines.last() == Some(&"---\n") {
        lines.pop();
    } else if lines.contains(&"---\n") {
        // Text written by hand after format-patch's `---` (not a `Notes:`
        // block): it stays, as a changelog after the message's own `---`,
        // which format-patch prints with a second `---` below it.
        while lines.last() == Some(&"\n") {
            lines.pop();
        }
    } else {
        bail!("no `---` line before the diffstat");
    }
    Ok(Body {
        message: lines.concat(),
        notes,
    })
}

/// Takes a trailing `\nNotes:\n    ...\n\n` block off `lines` (which end
/// where the diffstat began) and returns its text.
fn notes(lines: &mut Vec<&str>) -> Option<String> {
    let mut i = lines.len();
    while i > 0 && (lines[i - 1] == "\n" || lines[i - 1].starts_with("    ")) {
        i -= 1;
    }
    if i < 3 || lines[i - 1] != "Notes:\n" || lines[i - 2] != "\n" || lines[i - 3] != "---\n" {
        return None;
    }
    let mut text: Vec<&str> = lines[i..]
        .iter()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect();
    while text.last() == Some(&"\n") {
        text.pop();
    }
    lines.truncate(i - 2);
    Some(text.concat())
}

/// The commit message of a patch: its subject (as `git mailinfo -b` gives
/// it) and the body's message part.
pub fn commit_message(subject: &str, body: &str) -> String {
    if body.is_empty() {
        format!("{subject}\n")
    } else {
        format!("{subject}\n\n{body}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: a <a@invalid>\nDate: Tue, 1 Dec 2026 17:32:24 +0000\nSubject: [PATCH 01/77] rust: x\n\n";
    const STAT: &str = " a.c | 1 +\n 1 file changed, 1 insertion(+)\n create mode 100644 a.c\n\ndiff --git a/a.c b/a.c\n";

    #[test]
    fn plain_patch() {
        let p = format!("{HEAD}Body.\n\nMore.\n---\n{STAT}+x\n-- \n2.47.3\n\n");
        let b = body(&p).unwrap();
        assert_eq!(b.message, "Body.\n\nMore.\n");
        assert_eq!(b.notes, None);
        assert_eq!(
            commit_message("rust: x", &b.message),
            "rust: x\n\nBody.\n\nMore.\n"
        );
    }

    #[test]
    fn changelog_after_the_authors_own_dashes_stays_in_the_message() {
        let p = format!("{HEAD}Body.\n---\nv1: new.\n---\n{STAT}");
        assert_eq!(body(&p).unwrap().message, "Body.\n---\nv1: new.\n");
    }

    #[test]
    fn notes_block_is_taken_out() {
        let p = format!("{HEAD}Body.\n---\n\nNotes:\n    v2: new. v1 had\n\n    more.\n\n{STAT}");
        let b = body(&p).unwrap();
        assert_eq!(b.message, "Body.\n");
        assert_eq!(b.notes.as_deref(), Some("v2: new. v1 had\n\nmore.\n"));
    }

    #[test]
    fn text_written_after_format_patchs_dashes_is_kept() {
        let p = format!("{HEAD}Body.\n---\nUpstream commit 2b8e.\n\n{STAT}");
        assert_eq!(
            body(&p).unwrap().message,
            "Body.\n---\nUpstream commit 2b8e.\n"
        );
    }

    #[test]
    fn empty_body() {
        let p = format!("{HEAD}---\n{STAT}");
        let b = body(&p).unwrap();
        assert_eq!(b.message, "");
        assert_eq!(commit_message("s", &b.message), "s\n");
    }

    #[test]
    fn not_format_patch_output_is_refused() {
        assert!(body(&format!("{HEAD}Body.\n{STAT}")).is_err());
        assert!(body(&format!("{HEAD}Body.\n---\n a | 1 +\n")).is_err());
        assert!(body("no headers").is_err());
    }
}
