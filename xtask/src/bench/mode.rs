//! The data modes that `bench rust-vs-c` can measure: how the data of each
//! request travels between the driver and kublk's null target.

/// A ublk data mode, as kublk selects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DataMode {
    /// The driver copies the data to and from kublk's buffers (no option).
    Copy,
    /// kublk copies the data itself with pread/pwrite on /dev/ublkcN (`-u`).
    #[value(name = "user_copy")]
    UserCopy,
    /// kublk registers each request's pages as an io_uring buffer (`-z`).
    #[value(name = "zero_copy")]
    ZeroCopy,
    /// The driver registers each request's pages before kublk learns
    /// about it (`--auto_zc`).
    #[value(name = "auto_zc")]
    AutoZc,
    /// kublk hands requests over in batches (`UBLK_F_BATCH_IO`, `-b`),
    /// with the driver copying the data.
    Batch,
}

impl DataMode {
    /// The name that the guest script, the samples and the tables use.
    pub fn id(self) -> &'static str {
        match self {
            DataMode::Copy => "copy",
            DataMode::UserCopy => "user_copy",
            DataMode::ZeroCopy => "zero_copy",
            DataMode::AutoZc => "auto_zc",
            DataMode::Batch => "batch",
        }
    }

    /// The key of a sample of this mode at `iodepth` for `driver`: copy
    /// mode keeps the key of the runs from before modes were measured.
    pub fn sample_key(self, iodepth: u32, driver: &str) -> String {
        match self {
            DataMode::Copy => format!("qd{iodepth}/{driver}"),
            _ => format!("{}/qd{iodepth}/{driver}", self.id()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(DataMode::Copy.sample_key(16, "c"), "qd16/c");
        assert_eq!(
            DataMode::ZeroCopy.sample_key(16, "rust"),
            "zero_copy/qd16/rust"
        );
    }
}
