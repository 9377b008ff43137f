// SPDX-License-Identifier: GPL-2.0

//! Paths of the file system tree, looked up by name.
//!
//! C headers: [`include/linux/namei.h`](srctree/include/linux/namei.h),
//! [`include/linux/path.h`](srctree/include/linux/path.h)

use crate::{bindings, error::to_result, prelude::*};
use core::{mem::MaybeUninit, ops::BitOr};

/// Ways to access a file, for [`Path::permission`] (the `MAY_*` mask).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access(u32);

impl Access {
    /// Reading (`MAY_READ`).
    pub const READ: Self = Self(bindings::MAY_READ);
    /// Writing (`MAY_WRITE`).
    pub const WRITE: Self = Self(bindings::MAY_WRITE);
}

impl BitOr for Access {
    type Output = Self;

    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A path that was looked up: a reference to a mount and to a dentry with an inode.
///
/// # Invariants
///
/// `self.0` holds a reference on its mount and its dentry, taken by a successful lookup, and its
/// dentry has an inode.
///
/// # Examples
///
/// ```
/// use kernel::fs::path::{Access, Path};
///
/// // Where a devtmpfs is mounted, `/dev/null` is the character device 1:3.
/// if let Ok(path) = Path::lookup(c"/dev/null") {
///     assert_eq!(path.char_dev(), Some((1, 3)));
/// }
/// assert!(Path::lookup(c"/no/such/file").is_err());
///
/// // Everyone may read and write `/dev/null`.
/// if let Ok(path) = Path::lookup(c"/dev/null") {
///     assert!(path.permission(Access::READ | Access::WRITE).is_ok());
/// }
/// ```
pub struct Path(bindings::path);

impl Path {
    /// Looks up `name` from the caller's current and root directories, following a symbolic
    /// link at the end (`kern_path(name, LOOKUP_FOLLOW)`).
    ///
    /// Fails with the error of the lookup, for example [`ENOENT`] if there is no such file.
    pub fn lookup(name: &CStr) -> Result<Self> {
        let mut path = MaybeUninit::<bindings::path>::uninit();
        // SAFETY: `name` is a NUL-terminated string, and `path` is valid for writes. On success,
        // `kern_path` initializes `path` with references that the caller owns.
        to_result(unsafe {
            bindings::kern_path(
                name.as_char_ptr(),
                bindings::LOOKUP_FOLLOW,
                path.as_mut_ptr(),
            )
        })?;
        // INVARIANT: The lookup succeeded, so `path` holds references, and lookups without
        // `LOOKUP_*` flags that allow negative dentries only succeed with an inode.
        // SAFETY: `kern_path` succeeded, so it initialized `path`.
        Ok(Self(unsafe { path.assume_init() }))
    }

    fn inode(&self) -> *mut bindings::inode {
        // SAFETY: By the type invariants, the dentry is valid while `self` holds it, and it has an
        // inode, which does not change while the dentry is referenced.
        unsafe { (*self.0.dentry).d_inode }
    }

    /// Returns the device number of the character device that the path names, or `None` if it
    /// is not a character device.
    pub fn char_dev(&self) -> Option<(u32, u32)> {
        let inode = self.inode();
        // SAFETY: `inode` is valid while `self` exists; the file type and device number of an
        // inode do not change.
        let (mode, rdev) = unsafe { ((*inode).i_mode, (*inode).i_rdev) };
        if u32::from(mode) & bindings::S_IFMT != bindings::S_IFCHR {
            return None;
        }
        // `MAJOR()` and `MINOR()` of a `dev_t`.
        Some((rdev >> 20, rdev & ((1 << 20) - 1)))
    }

    /// Checks that the caller may access the file that the path names in the ways `access`
    /// says (`inode_permission()`, without the idmapping of the mount): the file's mode and
    /// ACLs against the caller's credentials, and the security modules.
    ///
    /// Fails with [`EACCES`] (or [`EPERM`], or what a security module says) if it may not.
    ///
    /// May sleep: the file system and the security modules may read what they need.
    pub fn permission(&self, access: Access) -> Result {
        // SAFETY: `nop_mnt_idmap` is a static that lives forever, and `self.inode()` is valid
        // while `self` exists.
        to_result(unsafe {
            bindings::inode_permission(
                &raw mut bindings::nop_mnt_idmap,
                self.inode(),
                // CAST: The `MAY_*` bits fit in an `int`.
                access.0 as c_int,
            )
        })
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        // SAFETY: By the type invariants, `self.0` holds the references that `path_put` drops, and
        // they are dropped once, here.
        unsafe { bindings::path_put(&self.0) };
    }
}
