//! Phase lines with elapsed time, so long steps show they are alive.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// Formats a duration as `1m02s` or `4.2s`.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 60.0 {
        format!("{}m{:02}s", s as u64 / 60, s as u64 % 60)
    } else {
        format!("{s:.1}s")
    }
}

/// Prints a phase line: `[ 1m02s] message`.
pub fn phase(msg: impl std::fmt::Display) {
    eprintln!("[{:>6}] {msg}", fmt_duration(start().elapsed()));
}

/// Prints an indented detail line belonging to the current phase.
pub fn detail(msg: impl std::fmt::Display) {
    eprintln!("         {msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(fmt_duration(Duration::from_millis(4200)), "4.2s");
        assert_eq!(fmt_duration(Duration::from_secs(62)), "1m02s");
    }
}
