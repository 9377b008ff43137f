//! ublk userspace API (`include/uapi/linux/ublk_cmd.h`, Linux 7.3.4) for Rust.
//!
//! * Every `#define` of the header is a `pub const` with the same name (see
//!   [`consts`] for the choice of Rust types), plus the project-specific
//!   [`UBLK_F_SUPPORT_RQ_AFFINITY`].
//! * Every `struct` is a `#[repr(C)]` Rust struct with a CamelCase name
//!   (`struct ublksrv_ctrl_cmd` → [`UblksrvCtrlCmd`], `struct ublk_params` →
//!   [`UblkParams`], ...) and verbatim field names; see [`types`] for how the
//!   anonymous unions are represented.
//! * The header's `static inline` helpers are `const fn`s with the same names.
//! * ioctl-encoded opcodes (`UBLK_U_*`) are computed with the `const fn`
//!   helpers of [`ioctl`].
//!
//! The integration test `tests/header_layout.rs` compiles a C program against
//! the real header and checks every constant, struct size, alignment, field
//! offset and field type against this crate.

#![no_std]
#![warn(missing_debug_implementations)]

pub mod consts;
pub mod ioctl;
pub mod types;

pub use consts::*;
pub use types::*;
