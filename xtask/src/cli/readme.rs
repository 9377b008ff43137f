//! The READMEs' `cargo xtask` commands parse: those in code blocks, and
//! those in inline code spans of the text (`` `cargo xtask check` ``).
//! The READMEs are read when the tests run: they change on their own.

use clap::error::ErrorKind;
use clap::Parser;

use super::Cli;

/// A markdown text split into the lines of its code blocks (fenced, or
/// indented by four spaces or a tab; continuation lines joined) and its
/// other lines (`prose`, one string, code block lines left out).
struct Split {
    code: Vec<String>,
    prose: String,
}

fn split(markdown: &str) -> Split {
    let mut code = Vec::new();
    let mut prose = String::new();
    let mut fence: Option<&str> = None;
    let mut pending = String::new();
    for line in markdown.lines() {
        let t = line.trim_start();
        if let Some(f) = fence {
            if t.starts_with(f) {
                fence = None;
                continue;
            }
        } else if let Some(f) = ["```", "~~~"].into_iter().find(|f| t.starts_with(f)) {
            fence = Some(f);
            continue;
        } else if !(line.starts_with("    ") || line.starts_with('\t')) && pending.is_empty() {
            prose.push_str(line);
            prose.push('\n');
            continue;
        }
        pending.push_str(t);
        match pending.strip_suffix('\\') {
            Some(head) => pending = format!("{head} "),
            None => code.push(std::mem::take(&mut pending)),
        }
    }
    Split { code, prose }
}

/// The inline code spans of `prose` that start with `cargo xtask`, blanks
/// (line breaks included) collapsed, and the brackets of optional parts
/// (`[--rounds 5]`) removed: a synopsis parses like the command it shows.
fn inline_commands(prose: &str) -> Vec<String> {
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|span| {
            span.replace(['[', ']'], " ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|span| span.starts_with("cargo xtask"))
        .collect()
}

/// The words after `cargo xtask` of each command that a line of code
/// runs (`a && b`, `a | b`, `$ ` prompts, `VAR=x` prefixes, `# `
/// comments); shell quotes are removed.
fn xtask_commands(line: &str) -> Vec<Vec<String>> {
    let line = line.split(" # ").next().unwrap_or_default();
    line.split(['&', '|', ';'])
        .filter_map(|part| {
            let words = shell_words(part.trim().trim_start_matches("$ "));
            let start = words.iter().position(|w| !w.contains('='))?;
            let rest = &words[start..];
            (rest.len() >= 2 && rest[0] == "cargo" && rest[1] == "xtask")
                .then(|| rest[2..].to_vec())
        })
        .collect()
}

/// Splits on blanks outside single or double quotes.
fn shell_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// Whether `args` (the words after `cargo xtask`) parse. `names_a_command`:
/// a command group without its subcommand (`cargo xtask series`, as text
/// names it) is accepted too.
fn parses(args: &[String], names_a_command: bool) -> Result<(), clap::Error> {
    let argv = std::iter::once("cargo xtask".to_string()).chain(args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(_) => Ok(()),
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Ok(()),
            ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                if names_a_command =>
            {
                Ok(())
            }
            _ => Err(e),
        },
    }
}

#[test]
fn commands_are_found_in_markdown() {
    let md = "text `cargo xtask nope` and `cargo\nxtask vm [--cpus 4]`, `ls`\n\n    cargo xtask vm -- sh -c 'a b'\n\n```sh\n$ XTASK_NO_KVM=1 cargo xtask selftest \\\n   --quick # smoke\ncargo test && cargo xtask check `x`\n```\ncargo xtask outside\n";
    let s = split(md);
    let cmds: Vec<Vec<String>> = s.code.iter().flat_map(|l| xtask_commands(l)).collect();
    assert_eq!(
        cmds,
        [
            vec!["vm", "--", "sh", "-c", "a b"],
            vec!["selftest", "--quick"],
            vec!["check", "`x`"],
        ]
    );
    assert_eq!(
        inline_commands(&s.prose),
        ["cargo xtask nope", "cargo xtask vm --cpus 4"]
    );
}

#[test]
fn what_parses() {
    let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert!(parses(&words("selftest --driver rust"), false).is_ok());
    assert!(parses(&words("selftest --help"), false).is_ok());
    assert!(parses(&words("selftest --driver go"), false).is_err());
    assert!(parses(&words("nope"), true).is_err());
    assert!(parses(&words("series"), false).is_err());
    assert!(parses(&words("series"), true).is_ok());
}

/// Every `cargo xtask` command of the READMEs parses: each line of their
/// code blocks, and each inline code span of their text.
#[test]
fn readme_commands_parse() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (mut blocks, mut inline) = (0, 0);
    for file in ["README.md", "xtask/README.md"] {
        let text = std::fs::read_to_string(repo.join(file)).unwrap();
        let s = split(&text);
        for line in &s.code {
            for args in xtask_commands(line) {
                blocks += 1;
                if let Err(e) = parses(&args, false) {
                    panic!("{file}: `{line}` does not parse:\n{e}");
                }
            }
        }
        for span in inline_commands(&s.prose) {
            inline += 1;
            for args in xtask_commands(&span) {
                if let Err(e) = parses(&args, true) {
                    panic!("{file}: `{span}` does not parse:\n{e}");
                }
            }
        }
    }
    assert!(
        blocks > 0,
        "no `cargo xtask` command in the READMEs' code blocks"
    );
    assert!(inline > 0, "no `cargo xtask` command in the READMEs' text");
}

/// Every source file of xtask is named in xtask/README.md's module table
/// (`` `name.rs` ``), so that a new module comes with its line there.
#[test]
fn module_table_names_every_source_file() {
    let xtask = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(xtask.join("README.md")).unwrap();
    let start = text.find("| module | job |").expect("the module table");
    let table = &text[start..];
    let table = &table[..table.find("\n\n").unwrap_or(table.len())];
    let mut dirs = vec![xtask.join("src")];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                seen += 1;
                let name = path.file_name().unwrap().to_string_lossy();
                assert!(
                    table.contains(&format!("`{name}`")),
                    "{} is not in xtask/README.md's module table",
                    path.display()
                );
            }
        }
    }
    assert!(seen > 10, "only {seen} source files found");
}
