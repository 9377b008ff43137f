//! Printable results: `0`, `-EINVAL`, `queued`.

use crate::ring::Got;

const NAMES: &[(i32, &str)] = &[
    (libc::EPERM, "EPERM"),
    (libc::ENOENT, "ENOENT"),
    (libc::EINTR, "EINTR"),
    (libc::EIO, "EIO"),
    (libc::ENXIO, "ENXIO"),
    (libc::E2BIG, "E2BIG"),
    (libc::EBADF, "EBADF"),
    (libc::EAGAIN, "EAGAIN"),
    (libc::ENOMEM, "ENOMEM"),
    (libc::EACCES, "EACCES"),
    (libc::EFAULT, "EFAULT"),
    (libc::EBUSY, "EBUSY"),
    (libc::EEXIST, "EEXIST"),
    (libc::ENODEV, "ENODEV"),
    (libc::EINVAL, "EINVAL"),
    (libc::ENOTTY, "ENOTTY"),
    (libc::ENOSPC, "ENOSPC"),
    (libc::ESPIPE, "ESPIPE"),
    (libc::ERANGE, "ERANGE"),
    (libc::ENOSYS, "ENOSYS"),
    (libc::EOPNOTSUPP, "EOPNOTSUPP"),
    (libc::ETIME, "ETIME"),
    (libc::ECANCELED, "ECANCELED"),
];

pub fn show(got: Got) -> String {
    match got {
        Got::Pending => "no completion (queued)".into(),
        Got::Res(r) if r >= 0 => r.to_string(),
        Got::Res(r) => match NAMES.iter().find(|(e, _)| *e == -r) {
            Some((_, n)) => format!("-{n}"),
            None => r.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(show(Got::Res(0)), "0");
        assert_eq!(show(Got::Res(-libc::EINVAL)), "-EINVAL");
        assert_eq!(show(Got::Res(-4095)), "-4095");
        assert_eq!(show(Got::Pending), "no completion (queued)");
    }
}
