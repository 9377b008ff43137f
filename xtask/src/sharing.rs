//! Which tests may run side by side in one guest (`cargo xtask selftest
//! --parallel N`). Most ublk selftests only touch their own devices, files and
//! servers (the upstream suite runs them in parallel with `make JOBS=N`),
//! and many spend their time waiting, so sharing the guest's two CPUs
//! shortens the run. The exceptions are listed here, with the reason.

/// How a test shares the guest with the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Beside any other test.
    Any,
    /// With no other test running.
    Alone,
    /// Beside any test but those of the same group.
    Group(&'static str),
}

impl Sharing {
    /// The word the guest runner reads in tests.txt.
    pub fn word(self) -> &'static str {
        match self {
            Sharing::Any => "any",
            Sharing::Alone => "alone",
            Sharing::Group(g) => g,
        }
    }
}

/// Tests that change state other tests see, and why.
const ALONE: &[(&str, &str)] = &[
    ("test_part_03.sh", "unloads the ublk module"),
    (
        "test_kill_recover.sh",
        "unloads and reloads the ublk module between rounds",
    ),
    (
        "test_many_devices.sh",
        "unloads and reloads the ublk module between cycles, deletes every ublk device when it fails, and counts every ublk device node",
    ),
    ("test_batch_04.sh", "kills every fio process"),
    ("test_generic_02.sh", "bpftrace probes every ublk request"),
    ("test_generic_12.sh", "bpftrace probes every ublk request"),
    (
        "test_generic_22.sh",
        "counts every io_uring command sent to io-wq",
    ),
    (
        "test_fuzz_01.sh",
        "unloads and loads both ublk driver modules",
    ),
    (
        "test_badinput_01.sh",
        "expects exact errnos, some of which depend on global counts, and counts the pages pinned in the whole system",
    ),
];

/// Tests that run alone, by name prefix, and why.
const ALONE_PREFIXES: &[(&str, &str)] = &[
    (
        "test_rublk_",
        "checks that no rublk process is left after its device is deleted",
    ),
    (
        "test_recover_",
        // Beside them, integrity_01 lost its device 0 (C driver, this
        // revision's checks): recover_04's cleanup deleted it a second time
        // after integrity_01 had been given the number.
        "deletes its devices from parallel subshells, whose concurrent `sed -i` on the test's \
     device list can leave a deleted number in it, so its cleanup deletes whichever device has \
     that number then",
    ),
    (
        "test_stress_",
        // Beside them, loop_05/loop_08 got EIO and ENXIO on their own
        // /dev/ublkb0, and generic_20 timed out deleting a device; two stress
        // tests at once took stress_04 from 56 s to 261 s.
        "removes devices under a running fio, whose later opens of /dev/ublkbN reach whichever \
     device has that number then, and keeps both CPUs busy",
    ),
];

/// Tests that must not overlap each other: name prefix, group, and why.
const GROUPS: &[(&str, &str, &str)] = &[(
    "test_shmemzc_",
    "hugepages",
    "sets and restores vm.nr_hugepages",
)];

fn group(test: &str) -> Option<&'static (&'static str, &'static str, &'static str)> {
    GROUPS
        .iter()
        .find(|(prefix, _, _)| test.starts_with(prefix))
}

/// How `test` shares the guest.
pub fn of(test: &str) -> Sharing {
    if ALONE.iter().any(|(t, _)| *t == test)
        || ALONE_PREFIXES.iter().any(|(p, _)| test.starts_with(p))
        || test.starts_with("harness_")
    {
        return Sharing::Alone;
    }
    match group(test) {
        Some((_, g, _)) => Sharing::Group(g),
        None => Sharing::Any,
    }
}

/// Why `test` runs alone or in a group, for `--list`.
pub fn reason(test: &str) -> Option<&'static str> {
    if let Some((_, why)) = ALONE.iter().find(|(t, _)| *t == test) {
        return Some(why);
    }
    if let Some((_, why)) = ALONE_PREFIXES.iter().find(|(p, _)| test.starts_with(p)) {
        return Some(why);
    }
    group(test).map(|(_, _, why)| *why)
}

/// The order in which tests that share the guest start: those that run
/// alone first, one after the other, then the others, longest first (by
/// `secs`, the time each took last), so that the longest do not start last
/// and leave the guest's other slot idle at the end of the run.
pub fn order(tests: &[String], secs: impl Fn(&str) -> f64) -> Vec<String> {
    let (mut ordered, mut shared): (Vec<String>, Vec<String>) =
        tests.iter().cloned().partition(|t| of(t) == Sharing::Alone);
    shared.sort_by(|a, b| secs(b).total_cmp(&secs(a)));
    ordered.extend(shared);
    ordered
}

/// The lines of the guest's tests.txt: `<test> <sharing>`.
pub fn tests_txt(tests: &[String]) -> String {
    tests
        .iter()
        .map(|t| format!("{t} {}\n", of(t).word()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(of("test_part_03.sh"), Sharing::Alone);
        assert_eq!(of("test_rublk_null.sh"), Sharing::Alone);
        assert_eq!(of("test_recover_04.sh"), Sharing::Alone);
        assert_eq!(of("test_shmemzc_02.sh"), Sharing::Group("hugepages"));
        assert_eq!(of("test_loop_01.sh"), Sharing::Any);
        assert_eq!(of("test_generic_20.sh"), Sharing::Any);
        assert_eq!(of("test_stress_04.sh"), Sharing::Alone);
        assert_eq!(of("test_many_devices.sh"), Sharing::Alone);
    }

    #[test]
    fn lines() {
        let t = vec!["test_loop_01.sh".to_string(), "test_part_03.sh".into()];
        assert_eq!(
            tests_txt(&t),
            "test_loop_01.sh any\ntest_part_03.sh alone\n"
        );
    }

    #[test]
    fn alone_first_then_longest_first() {
        let t: Vec<String> = ["test_a.sh", "test_part_03.sh", "test_b.sh", "test_c.sh"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let secs = |t: &str| match t {
            "test_a.sh" => 5.0,
            "test_b.sh" => 50.0,
            _ => 20.0,
        };
        assert_eq!(
            order(&t, secs),
            ["test_part_03.sh", "test_b.sh", "test_c.sh", "test_a.sh"]
        );
    }

    #[test]
    fn group_words_are_not_keywords() {
        for (_, g, _) in GROUPS {
            assert!(!["any", "alone"].contains(g));
        }
    }
}
