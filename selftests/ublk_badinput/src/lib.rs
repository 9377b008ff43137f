//! The pieces of ublk_badinput, as a library: the control device and io
//! rings, the char device, forked children, and the case table. The
//! ublk_fuzz program (selftests/ublk_fuzz) drives the drivers with them.

pub mod batch;
pub mod cases;
pub mod chardev;
pub mod child;
pub mod ctrl;
pub mod env;
pub mod errno;
pub mod ring;
