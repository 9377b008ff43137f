//! How a series' files look, read from the files it has, so that
//! `series export` writes them the same way: the number of the first file,
//! `[PATCH]` or `[PATCH n/N]`, a `vN` reroll, the signature; the file names
//! `git format-patch` gives for them; the cover letter's `[PATCH 00/N]`.

use regex::Regex;

/// A series' look. `Default` is a new series': numbered from 1 when it has
/// more than one patch, `[PATCH]`, git's own signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Style {
    /// Number of the first (non-cover) file: `0002-...` starts at 2.
    pub start: u32,
    /// `[PATCH n/N]`; `None` (new series): when there is more than one patch.
    pub numbered: Option<bool>,
    /// The prefix inside the brackets without the reroll and numbers:
    /// `PATCH`, `RFC PATCH`.
    pub prefix: String,
    /// `2` for `[PATCH v2 ...]` (format-patch `-v2`).
    pub reroll: Option<String>,
    /// The line after `-- ` at the end of each patch (git's version when
    /// the patch was made).
    pub signature: Option<String>,
}

impl Default for Style {
    fn default() -> Self {
        Style {
            start: 1,
            numbered: None,
            prefix: "PATCH".into(),
            reroll: None,
            signature: None,
        }
    }
}

/// The `Subject:` line of a patch (its first line only).
fn subject(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("Subject: "))
}

/// `NNNN` of a patch file name `NNNN-*.patch`.
pub fn number(name: &str) -> Option<u32> {
    let (n, _) = name.split_once('-')?;
    (n.len() == 4 && name.ends_with(".patch"))
        .then(|| n.parse().ok())
        .flatten()
}

impl Style {
    /// The style of a series from its patch files (name, text), cover
    /// letter (`0000-*`) excluded, in order.
    pub fn of(patches: &[(String, String)]) -> Style {
        let mut style = Style::default();
        let Some((name, text)) = patches.first() else {
            return style;
        };
        style.start = number(name).unwrap_or(1);
        let bracket = subject(text)
            .and_then(|s| s.strip_prefix('['))
            .and_then(|s| s.split_once(']'))
            .map(|(b, _)| b)
            .unwrap_or("PATCH");
        let mut words: Vec<&str> = bracket.split_whitespace().collect();
        let numbered = words.last().is_some_and(|w| is_n_of_total(w));
        if numbered {
            words.pop();
        }
        if let Some(v) = words.last().and_then(|w| w.strip_prefix('v')) {
            if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) {
                style.reroll = Some(v.to_string());
                words.pop();
            }
        }
        style.numbered = Some(numbered);
        if !words.is_empty() {
            style.prefix = words.join(" ");
        }
        style.signature = signature(text);
        style
    }

    /// The `git format-patch` options that write patches in this style
    /// (`count`: how many patches the series has now).
    pub fn format_patch_args(&self, count: usize) -> Vec<String> {
        let mut a = vec![
            "--zero-commit".to_string(),
            "--notes".into(),
            format!("--start-number={}", self.start),
            if self.numbered.unwrap_or(count > 1) {
                "--numbered".into()
            } else {
                "--no-numbered".into()
            },
            format!("--subject-prefix={}", self.prefix),
        ];
        if let Some(v) = &self.reroll {
            a.push(format!("--reroll-count={v}"));
        }
        if let Some(s) = &self.signature {
            a.push(format!("--signature={s}"));
        }
        a
    }

    /// The name a file that format-patch wrote gets in `patches/`: without
    /// the `vN-` that `--reroll-count` puts in front.
    pub fn file_name(&self, written: &str) -> String {
        self.reroll
            .as_ref()
            .and_then(|v| written.strip_prefix(&format!("v{v}-")))
            .unwrap_or(written)
            .to_string()
    }
}

fn is_n_of_total(w: &str) -> bool {
    w.split_once('/').is_some_and(|(n, t)| {
        !n.is_empty()
            && !t.is_empty()
            && n.chars().all(|c| c.is_ascii_digit())
            && t.chars().all(|c| c.is_ascii_digit())
    })
}

/// The signature of a patch: the line after its last `-- ` line.
fn signature(text: &str) -> Option<String> {
    let at = text.rfind("\n-- \n")? + 5;
    text[at..].lines().next().map(str::to_string)
}

/// The cover letter with its subject's `n/N` made `0/total`, padded as
/// format-patch pads the patches' numbers (`00/77`).
pub fn renumber_cover(text: &str, total: usize) -> String {
    let re = Regex::new(r"(?m)^(Subject: \[[^\]\n]*?)\b\d+/\d+\]").unwrap();
    let width = total.to_string().len();
    re.replace(text, |c: &regex::Captures| {
        format!("{}{:0width$}/{total}]", &c[1], 0)
    })
    .into_owned()
}

/// Whether to keep an existing file rather than write the new text: when
/// they differ only in the first line (`From <commit>`: the commit a patch
/// came from, upstream's or one made before `--zero-commit`) and in how
/// long headers are folded (a subject renumbered by hand after
/// format-patch folded it).
pub fn keep_existing(old: &str, new: &str) -> bool {
    old.starts_with("From ") && canonical(old).is_some() && canonical(old) == canonical(new)
}

/// The text without its first line, headers unfolded.
fn canonical(text: &str) -> Option<String> {
    let (_, rest) = text.split_once('\n')?;
    let (headers, body) = rest.split_once("\n\n")?;
    let unfolded = headers.replace("\n ", " ").replace("\n\t", "\t");
    Some(format!("{unfolded}\n\n{body}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(subject: &str) -> String {
        format!("From 0 Mon Sep 17 00:00:00 2001\nFrom: a <a@invalid>\nSubject: {subject}\n\nBody.\n---\n x | 1 +\n\ndiff --git a/x b/x\n-- \n2.47.3\n\n")
    }

    #[test]
    fn style_of_existing_series() {
        let s = Style::of(&[(
            "0001-ublk-x.patch".into(),
            patch("[PATCH v2 01/12] ublk: x"),
        )]);
        assert_eq!(
            s,
            Style {
                start: 1,
                numbered: Some(true),
                prefix: "PATCH".into(),
                reroll: Some("2".into()),
                signature: Some("2.47.3".into()),
            }
        );
        let s = Style::of(&[("0002-a.patch".into(), patch("[PATCH] selftests: x"))]);
        assert_eq!((s.start, s.numbered, s.reroll), (2, Some(false), None));
        let s = Style::of(&[("0001-a.patch".into(), patch("[RFC PATCH 1/2] a"))]);
        assert_eq!((s.prefix.as_str(), s.numbered), ("RFC PATCH", Some(true)));
        assert_eq!(Style::of(&[]), Style::default());
    }

    #[test]
    fn format_patch_args_follow_the_style() {
        let s = Style {
            reroll: Some("2".into()),
            signature: Some("2.47.3".into()),
            ..Style::default()
        };
        assert_eq!(
            s.format_patch_args(12),
            [
                "--zero-commit",
                "--notes",
                "--start-number=1",
                "--numbered",
                "--subject-prefix=PATCH",
                "--reroll-count=2",
                "--signature=2.47.3"
            ]
        );
        // A new series is numbered when it has more than one patch.
        assert!(Style::default()
            .format_patch_args(1)
            .contains(&"--no-numbered".to_string()));
        let unnumbered = Style {
            numbered: Some(false),
            start: 2,
            ..Style::default()
        };
        let a = unnumbered.format_patch_args(3);
        assert!(a.contains(&"--no-numbered".to_string()));
        assert!(a.contains(&"--start-number=2".to_string()));
    }

    #[test]
    fn file_names() {
        let v2 = Style {
            reroll: Some("2".into()),
            ..Style::default()
        };
        assert_eq!(v2.file_name("v2-0001-ublk-x.patch"), "0001-ublk-x.patch");
        assert_eq!(
            Style::default().file_name("0001-ublk-x.patch"),
            "0001-ublk-x.patch"
        );
        assert_eq!(number("0042-rust-x.patch"), Some(42));
        assert_eq!(number("0000-cover-letter.patch"), Some(0));
        assert_eq!(number("README.md"), None);
        assert_eq!(number("v2-0001-x.patch"), None);
    }

    #[test]
    fn cover_letter_is_renumbered() {
        let c = "From 0 Mon\nSubject: [PATCH 00/77] rust: block\n\nSee [PATCH 01/77].\n";
        assert_eq!(
            renumber_cover(c, 78),
            "From 0 Mon\nSubject: [PATCH 00/78] rust: block\n\nSee [PATCH 01/77].\n"
        );
        assert!(renumber_cover("Subject: [PATCH 0/3] x\n", 10).contains("[PATCH 00/10] x"));
        assert!(renumber_cover("Subject: [PATCH v2 00/12] x\n", 9).contains("[PATCH v2 0/9] x"));
        let unnumbered = "Subject: [PATCH] x\n";
        assert_eq!(renumber_cover(unnumbered, 3), unnumbered);
    }

    #[test]
    fn only_the_from_line_and_folding_may_differ_for_a_file_to_be_kept() {
        let new = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nSubject: s\n\nrest\n";
        let old = "From 2b8ee88f18d410cfcda0380ad45a0b67b11dec03 Mon Sep 17 00:00:00 2001\nSubject: s\n\nrest\n";
        assert!(keep_existing(old, new));
        assert!(!keep_existing(old, &new.replace("rest", "other")));
        assert!(!keep_existing("", new));
        let folded = "From 0 Mon\nSubject: [PATCH 74/77] block: change a phase only\n through its transitions\n\nBody\n through.\n";
        let refolded = "From 0 Mon\nSubject: [PATCH 74/77] block: change a phase only through its\n transitions\n\nBody\n through.\n";
        assert!(keep_existing(refolded, folded));
        // Folding counts in the headers only.
        assert!(!keep_existing(
            refolded,
            &folded.replace("Body\n through", "Body through")
        ));
    }
}
