//! The table: every case is a name, the result the C driver gives (read in
//! ublk_drv.c of Linux 7.3.4 and confirmed by running against it), and the
//! probe. A probe sets up what it needs (devices through `Env::add`, which
//! the runner deletes afterwards; fds, rings and mappings as locals, closed
//! when the probe returns) and returns the result of the one operation
//! under test; a failing setup step is an `Err`. A case that needs feature
//! flags the driver does not report in GET_FEATURES is skipped.

use anyhow::Result;

use crate::env::Env;
use crate::ring::Got;

mod add;
mod batch;
mod chardev;
pub mod ctrl;
mod del;
mod fault;
mod getdata;
mod io;
mod live;
mod params;
pub mod server;
mod shmem;
mod start;
mod unpriv;
mod unpriv_dev;
mod usercopy;
mod zerocopy;

pub struct Case {
    pub name: &'static str,
    pub expect: Got,
    pub run: fn(&mut Env) -> Result<Got>,
    /// A known bug of the C driver: what it gives instead of `expect`, and
    /// why. The C driver is held to this, and the bug is named in the
    /// result line, so that a fix in either driver shows.
    pub c_bug: Option<(Got, &'static str)>,
    /// `UBLK_F_*` flags the case needs: it is skipped unless GET_FEATURES
    /// reports all of them.
    pub needs: u64,
}

pub const OK: Got = Got::Res(0);
/// Accepted and queued: no completion until the ring or device goes away.
pub const QUEUED: Got = Got::Pending;

pub const fn err(errno: i32) -> Got {
    Got::Res(-errno)
}

/// A case table entry.
macro_rules! case {
    ($name:ident, $expect:expr) => {
        $crate::cases::Case {
            name: stringify!($name),
            expect: $expect,
            run: $name,
            c_bug: None,
            needs: 0,
        }
    };
    ($name:ident, $expect:expr, needs = $needs:expr) => {
        $crate::cases::Case {
            name: stringify!($name),
            expect: $expect,
            run: $name,
            c_bug: None,
            needs: $needs,
        }
    };
    ($name:ident, $expect:expr, c_bug = ($c_got:expr, $why:expr)) => {
        $crate::cases::Case {
            name: stringify!($name),
            expect: $expect,
            run: $name,
            c_bug: Some(($c_got, $why)),
            needs: 0,
        }
    };
}
pub(crate) use case;

/// Names of the feature flags cases need, for the skip message.
const FEATURE_NAMES: &[(u64, &str)] = &[
    (
        ublk_uapi::UBLK_F_SUPPORT_ZERO_COPY,
        "UBLK_F_SUPPORT_ZERO_COPY",
    ),
    (ublk_uapi::UBLK_F_USER_COPY, "UBLK_F_USER_COPY"),
    (ublk_uapi::UBLK_F_AUTO_BUF_REG, "UBLK_F_AUTO_BUF_REG"),
    (ublk_uapi::UBLK_F_BATCH_IO, "UBLK_F_BATCH_IO"),
    (ublk_uapi::UBLK_F_UPDATE_SIZE, "UBLK_F_UPDATE_SIZE"),
    (ublk_uapi::UBLK_F_SAFE_STOP_DEV, "UBLK_F_SAFE_STOP_DEV"),
    (ublk_uapi::UBLK_F_IO_DESC_SIZE, "UBLK_F_IO_DESC_SIZE"),
    (
        ublk_uapi::UBLK_F_UNPRIVILEGED_DEV,
        "UBLK_F_UNPRIVILEGED_DEV",
    ),
];

/// Why `case` is skipped by a driver that reports `features`, if it is.
pub fn skip_reason(case: &Case, features: u64) -> Option<String> {
    let missing = case.needs & !features;
    if missing == 0 {
        return None;
    }
    let mut names: Vec<String> = FEATURE_NAMES
        .iter()
        .filter(|(f, _)| missing & f != 0)
        .map(|(_, n)| (*n).to_string())
        .collect();
    let unnamed = FEATURE_NAMES.iter().fold(missing, |m, (f, _)| m & !f);
    if unnamed != 0 {
        names.push(format!("{unnamed:#x}"));
    }
    Some(format!("driver lacks {}", names.join(" | ")))
}

pub fn all() -> Vec<&'static Case> {
    [
        add::CASES,
        ctrl::CASES,
        params::CASES,
        unpriv::CASES,
        unpriv_dev::CASES,
        chardev::CASES,
        io::CASES,
        usercopy::CASES,
        getdata::CASES,
        zerocopy::CASES,
        shmem::CASES,
        start::CASES,
        del::CASES,
        fault::CASES,
        batch::CASES,
        live::CASES,
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let all = all();
        let mut names: Vec<&str> = all.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert!(all.len() >= 60, "{} cases", all.len());
    }

    #[test]
    fn skips_for_missing_features() {
        use ublk_uapi::{UBLK_F_BATCH_IO, UBLK_F_USER_COPY};
        let case = Case {
            name: "x",
            expect: OK,
            run: |_| Ok(OK),
            c_bug: None,
            needs: UBLK_F_BATCH_IO | UBLK_F_USER_COPY | 1 << 60,
        };
        assert_eq!(skip_reason(&case, u64::MAX), None);
        assert_eq!(
            skip_reason(&case, UBLK_F_USER_COPY).as_deref(),
            Some("driver lacks UBLK_F_BATCH_IO | 0x1000000000000000")
        );
        let plain = Case { needs: 0, ..case };
        assert_eq!(skip_reason(&plain, 0), None);
    }
}
