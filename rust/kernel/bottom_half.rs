// SPDX-License-Identifier: GPL-2.0

//! Bottom halves of the local processor.
//!
//! Bottom halves (softirqs and tasklets) run when an interrupt returns, when a section of code
//! that disabled them ends, or in `ksoftirqd`. A section with bottom halves disabled is atomic
//! context, and `in_interrupt()` is true in it: code that may be called both from process context
//! and from an interrupt sees it as the latter. The kernel uses that in places to choose a
//! deferred path; for example, the last `fput()` of a file hands the release of the file to a
//! work item instead of the task work of the current task.
//!
//! C header: [`include/linux/bottom_half.h`](srctree/include/linux/bottom_half.h)

use crate::types::NotThreadSafe;

/// A guard that represents that bottom halves are disabled on the local processor.
///
/// Bottom halves raised while it exists run when the outermost such section ends (in
/// `local_bh_enable()`), or when an interrupt returns after that, instead of in `ksoftirqd`:
/// raising a softirq with bottom halves disabled does not wake `ksoftirqd`.
///
/// Functions take a reference to [`LocalBhDisabled`] to require that they run with bottom halves
/// disabled. The guard is neither [`Send`] nor [`Sync`]: it ends the section on the task that
/// began it. Sections nest.
///
/// Code must not sleep while the guard exists, and must not drop it in hard interrupt context
/// or with local interrupts disabled: `local_bh_enable()` may run the pending softirqs there,
/// which it warns about, and lockdep reports.
///
/// # Invariants
///
/// Bottom halves are disabled on the local processor for as long as an object of this type
/// exists: it was created by a call to `local_bh_disable()` on the current task, which its
/// [`Drop`] implementation undoes.
///
/// # Examples
///
/// ```
/// use kernel::bottom_half::{local_bh_disable, LocalBhDisabled};
///
/// fn must_run_with_bottom_halves_disabled(_bh: &LocalBhDisabled) {}
///
/// let bh = local_bh_disable();
/// must_run_with_bottom_halves_disabled(&bh);
/// // Sections nest: this one ends first, and the outer one is still in force.
/// let inner = local_bh_disable();
/// drop(inner);
/// must_run_with_bottom_halves_disabled(&bh);
/// drop(bh);
/// ```
pub struct LocalBhDisabled(NotThreadSafe);

/// Disables bottom halves on the local processor until the returned guard is dropped
/// (`local_bh_disable()`).
#[inline]
#[must_use = "bottom halves are enabled again when the guard is dropped"]
pub fn local_bh_disable() -> LocalBhDisabled {
    // SAFETY: It is always safe to call `local_bh_disable()`; the guard created below undoes it.
    unsafe { bindings::local_bh_disable() };

    // INVARIANT: Bottom halves were disabled above, on the current task.
    LocalBhDisabled(NotThreadSafe)
}

impl Drop for LocalBhDisabled {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: By the type invariants, `local_bh_disable()` was called on this task to create
        // this object, and this undoes exactly that call.
        unsafe { bindings::local_bh_enable() };
    }
}
