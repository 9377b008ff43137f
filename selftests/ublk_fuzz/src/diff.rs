//! Comparing two drivers' traces of one seed, and the differences between
//! the drivers that are known and deliberate.

/// A difference the project knows of, with the reason: `matches` gets the
/// operation (the line before `->`, without the step number) and each
/// driver's answer (after `-> `).
pub struct Known {
    pub matches: fn(op: &str, c: &str, rust: &str) -> bool,
    pub why: &'static str,
}

/// Known differences, each with its reason. (The two C driver bugs that
/// were listed here, a batch io device of depth 1 and a short SET_PARAMS,
/// are fixed by patches/08-ublk-fuzz-fixes; their bad-input cases,
/// add_dev_batch_io_depth_1 and set_params_short_after_valid, hold both
/// drivers to the same answer.)
pub const KNOWN: &[Known] = &[Known {
    // README "Known differences a server can see"; no bad-input case
    // (the table has no process that outlives its server's files).
    matches: |op, c, rust| {
        op.starts_with("info")
            && rust.split(' ').any(|w| w == "pid=-1")
            && !c.split(' ').any(|w| w == "pid=-1")
            && ["state=QUIESCED", "state=FAIL_IO"]
                .iter()
                .any(|st| c.split(' ').any(|w| w == *st))
            && without(c, "pid") == without(rust, "pid")
    },
    why: "deliberate: the Rust driver reports no server (pid -1) once the server of a \
              recovering device closed /dev/ublkcN; the C driver reports its process while \
              that process lives (here the fuzzer, whose server thread went away)",
}];

/// `line` without its `key=` word.
fn without(line: &str, key: &str) -> String {
    let prefix = format!("{key}=");
    line.split(' ')
        .filter(|w| !w.starts_with(&prefix))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where two traces first differ.
#[derive(Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub step: usize,
    pub c: String,
    pub rust: String,
}

/// The first step at which the traces differ, if any.
pub fn first_mismatch(c: &[String], rust: &[String]) -> Option<Mismatch> {
    let n = c.len().max(rust.len());
    (0..n).find_map(|i| {
        let (a, b) = (c.get(i), rust.get(i));
        (a != b).then(|| Mismatch {
            step: i,
            c: a.cloned().unwrap_or_else(|| "(trace ended)".into()),
            rust: b.cloned().unwrap_or_else(|| "(trace ended)".into()),
        })
    })
}

fn split(line: &str) -> (&str, &str) {
    line.split_once(" -> ").unwrap_or((line, ""))
}

/// The known difference that explains `m`, if one does: the same
/// operation, answered as the entry says.
pub fn explain(m: &Mismatch, known: &'static [Known]) -> Option<&'static Known> {
    let (c_op, c_got) = split(&m.c);
    let (r_op, r_got) = split(&m.rust);
    if c_op != r_op {
        return None;
    }
    let op = c_op.split_once(": ").map(|(_, o)| o).unwrap_or(c_op);
    known.iter().find(|k| (k.matches)(op, c_got, r_got))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of `key=` in an operation's line, parsed as hex (`0x...`) or
    /// decimal.
    pub fn field(op: &str, key: &str) -> Option<u64> {
        let v = op
            .split(' ')
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))?;
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        }
    }

    fn t(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn finds_the_first_difference() {
        let c = t(&["0: a -> 0", "1: b -> -EINVAL", "2: c -> 0"]);
        let r = t(&["0: a -> 0", "1: b -> -EPERM", "2: x -> 0"]);
        let m = first_mismatch(&c, &r).unwrap();
        assert_eq!(m.step, 1);
        assert_eq!(m.rust, "1: b -> -EPERM");
        assert_eq!(first_mismatch(&c, &c), None);
        let m = first_mismatch(&c, &c[..2]).unwrap();
        assert_eq!((m.step, m.rust.as_str()), (2, "(trace ended)"));
    }

    /// A difference as the C driver's batch io depth 1 bug was.
    const DEPTH_1: &[Known] = &[Known {
        matches: |op, c, rust| {
            op.starts_with("add ")
                && field(op, "d") == Some(1)
                && field(op, "flags").is_some_and(|f| f & ublk_uapi::UBLK_F_BATCH_IO != 0)
                && c == "-EINVAL"
                && rust.starts_with("0 ")
        },
        why: "test",
    }];

    #[test]
    fn explains_only_the_listed_answers() {
        let m = |c: &str, r: &str| Mismatch {
            step: 3,
            c: c.into(),
            rust: r.into(),
        };
        let add = "3: add id=-1 q=1 d=1 mb=4096 flags=0x8080";
        let ok = format!("{add} -> 0 dev_id=0 flags=0x8080");
        assert!(explain(&m(&format!("{add} -> -EINVAL"), &ok), DEPTH_1).is_some());
        assert!(explain(&m(&format!("{add} -> -EPERM"), &ok), DEPTH_1).is_none());
        let d2 = "3: add id=-1 q=1 d=2 mb=4096 flags=0x8080";
        let ok2 = format!("{d2} -> 0 dev_id=0");
        assert!(explain(&m(&format!("{d2} -> -EINVAL"), &ok2), DEPTH_1).is_none());
        let nb = "3: add id=-1 q=1 d=1 mb=4096 flags=0x80";
        let ok3 = format!("{nb} -> 0 dev_id=0");
        assert!(explain(&m(&format!("{nb} -> -EINVAL"), &ok3), DEPTH_1).is_none());
        assert!(explain(&m(&format!("{add} -> -EINVAL"), "3: del 1 -> 0"), DEPTH_1).is_none());
    }

    #[test]
    fn pid_of_a_recovering_device() {
        let m = |c: &str, r: &str| Mismatch {
            step: 3,
            c: format!("3: info 0 -> 0 dev_id=0 state={c} owner=0:0"),
            rust: format!("3: info 0 -> 0 dev_id=0 state={r} owner=0:0"),
        };
        assert!(explain(&m("QUIESCED pid=77", "QUIESCED pid=-1"), KNOWN).is_some());
        assert!(explain(&m("FAIL_IO pid=77", "FAIL_IO pid=-1"), KNOWN).is_some());
        assert!(explain(&m("LIVE pid=77", "LIVE pid=-1"), KNOWN).is_none());
        assert!(explain(&m("QUIESCED pid=77", "DEAD pid=-1"), KNOWN).is_none());
        assert!(explain(&m("QUIESCED pid=-1", "QUIESCED pid=77"), KNOWN).is_none());
    }

    #[test]
    fn fields() {
        let op = "add id=-1 q=1 d=12 flags=0x8080";
        assert_eq!(field(op, "d"), Some(12));
        assert_eq!(field(op, "flags"), Some(0x8080));
        assert_eq!(field(op, "id"), None);
        assert_eq!(field(op, "x"), None);
    }
}
