//! The table: every case is a name, the result the C driver gives (read in
//! ublk_drv.c of Linux 7.3.4 and confirmed by running against it), and the
//! probe. A probe sets up what it needs (devices through `Env::add`, which
//! the runner deletes afterwards; fds, rings and mappings as locals, closed
//! when the probe returns) and returns the result of the one operation
//! under test; a failing setup step is an `Err`.

use anyhow::Result;

use crate::env::Env;
use crate::ring::Got;

mod add;
mod chardev;
mod ctrl;
mod del;
mod fault;
mod getdata;
mod io;
mod params;
mod server;
mod shmem;
mod start;
mod unpriv;
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
        }
    };
    ($name:ident, $expect:expr, c_bug = ($c_got:expr, $why:expr)) => {
        $crate::cases::Case {
            name: stringify!($name),
            expect: $expect,
            run: $name,
            c_bug: Some(($c_got, $why)),
        }
    };
}
pub(crate) use case;

pub fn all() -> Vec<&'static Case> {
    [
        add::CASES,
        ctrl::CASES,
        params::CASES,
        unpriv::CASES,
        chardev::CASES,
        io::CASES,
        usercopy::CASES,
        getdata::CASES,
        zerocopy::CASES,
        shmem::CASES,
        start::CASES,
        del::CASES,
        fault::CASES,
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
}
