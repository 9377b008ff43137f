//! Markdown tables: the one place their syntax is written. A table is its
//! [`header`] (or [`header_aligned`]) followed by one [`row`] per line.

/// How the cells of a column align.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// The title line and the delimiter line of a table whose columns all
/// align left: `| a | b |\n|---|---|\n`.
pub fn header<S: AsRef<str>>(titles: &[S]) -> String {
    header_aligned(titles, &vec![Align::Left; titles.len()])
}

/// The title line and the delimiter line, with the alignment of each
/// column (`---` left, `---:` right); `align` has one entry per title.
pub fn header_aligned<S: AsRef<str>>(titles: &[S], align: &[Align]) -> String {
    assert_eq!(titles.len(), align.len(), "one alignment per column");
    let mut out = row(titles);
    for a in align {
        out += match a {
            Align::Left => "|---",
            Align::Right => "|---:",
        };
    }
    out + "|\n"
}

/// One line of cells, `| a | b |\n`; an empty cell is `| |`.
pub fn row<S: AsRef<str>>(cells: &[S]) -> String {
    let mut out = String::from("|");
    for c in cells {
        let c = c.as_ref();
        if !c.is_empty() {
            out.push(' ');
            out += c;
        }
        out += " |";
    }
    out + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lines() {
        assert_eq!(header(&["a", "b c"]), "| a | b c |\n|---|---|\n");
        assert_eq!(
            header_aligned(&["x", "n"], &[Align::Left, Align::Right]),
            "| x | n |\n|---|---:|\n"
        );
        assert_eq!(row(&["1", "", "2.5"]), "| 1 | | 2.5 |\n");
        assert_eq!(row(&[String::from("s"), 3.to_string()]), "| s | 3 |\n");
    }
}
