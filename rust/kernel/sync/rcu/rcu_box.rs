// SPDX-License-Identifier: GPL-2.0

//! A box whose value is freed only once an RCU grace period has passed.

use crate::{
    alloc::{AllocError, Flags, KBox},
    bindings,
    ffi::c_void,
    sync::rcu::ForeignOwnableRcu,
    types::{ForeignOwnable, Opaque},
};
use core::{marker::PhantomData, ops::Deref, ptr::NonNull};

/// What an [`RcuBox`] allocates: the head that `kvfree_call_rcu()` queues, and the value.
///
/// The head comes first: `kvfree_call_rcu()` finds the allocation from a head less than 4096
/// bytes into it.
#[repr(C)]
struct RcuBoxInner<T> {
    head: Opaque<bindings::kvfree_rcu_head>,
    value: T,
}

/// A heap allocation, like [`KBox`], that is freed one RCU grace period after the box is dropped
/// (`kvfree_call_rcu()`).
///
/// A reader in an RCU read-side critical section ([`Guard`]) may thus keep a shared reference to
/// the value, found through an RCU-protected pointer that a container holds, until it leaves that
/// section, while the container drops the box ([`ForeignOwnableRcu`]). For the same reason the
/// value is never reachable mutably. It has no destructor, which the constructor checks at build
/// time: `kvfree_call_rcu()` frees the memory after the grace period without calling back into
/// Rust, and a destructor run at the drop itself could take things from under the readers.
///
/// # Invariants
///
/// `ptr` points to an `RcuBoxInner<T>` allocated with [`KBox`], whose `value` is initialized, and
/// which only this box frees.
///
/// # Examples
///
/// ```
/// use kernel::sync::rcu::RcuBox;
///
/// let b = RcuBox::new(42u64, GFP_KERNEL)?;
/// assert_eq!(*b, 42);
/// // Freed one grace period from now.
/// drop(b);
/// # Ok::<(), Error>(())
/// ```
///
/// [`Guard`]: super::Guard
pub struct RcuBox<T> {
    ptr: NonNull<RcuBoxInner<T>>,
    // The box owns a `T`; the head of the allocation is not part of it (and not pinned: the box
    // moves freely, as a `KBox` does).
    _p: PhantomData<T>,
}

// SAFETY: The box owns its value, which it only hands out by shared reference; the memory is freed
// by the RCU core on another CPU, and nothing of `T` runs then (it has no destructor). Readers
// under RCU on other threads may still hold shared references to the value when the box moves,
// so it may move to another thread if the value may, and be shared between threads.
unsafe impl<T: Send + Sync> Send for RcuBox<T> {}

// SAFETY: A shared box only gives shared references to the value.
unsafe impl<T: Sync> Sync for RcuBox<T> {}

impl<T> RcuBox<T> {
    /// Allocates a box with `flags` and moves `value` into it.
    pub fn new(value: T, flags: Flags) -> Result<Self, AllocError> {
        crate::const_assert!(
            !core::mem::needs_drop::<T>(),
            "the value of an RcuBox is freed without running a destructor"
        );
        let inner = KBox::new(
            RcuBoxInner {
                // `kvfree_call_rcu()` initializes it.
                head: Opaque::uninit(),
                value,
            },
            flags,
        )?;
        // INVARIANT: The value was just moved into a `KBox` allocation, which only this box
        // frees.
        Ok(Self {
            ptr: NonNull::from(KBox::leak(inner)),
            _p: PhantomData,
        })
    }
}

impl<T> Deref for RcuBox<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: By the type invariants, `ptr` is valid and its value is initialized; the box only
        // hands out shared references.
        unsafe { &(*self.ptr.as_ptr()).value }
    }
}

impl<T> Drop for RcuBox<T> {
    fn drop(&mut self) {
        let ptr = self.ptr.as_ptr();
        // SAFETY: By the type invariants, `ptr` is a `KBox` allocation (kmalloc memory, which
        // `kvfree()` frees) that only this box frees, once: the RCU core frees it after a grace
        // period, through the head at offset 0 of the allocation, which nothing else uses. With
        // a head, `kvfree_call_rcu()` may be called in any context but NMI, which Rust code does
        // not run in. `T` has no destructor
        // (checked in `new`), so freeing the memory is all that dropping the value takes.
        unsafe { bindings::kvfree_call_rcu((*ptr).head.get(), ptr.cast()) };
    }
}

// SAFETY: `into_foreign` returns the pointer of the allocation, which is aligned to
// `RcuBoxInner<T>` and at least to what kmalloc aligns to, and `from_foreign` takes it back. The
// borrows give shared references only, for as long as the caller says the box lives.
unsafe impl<T: 'static> ForeignOwnable for RcuBox<T> {
    const FOREIGN_ALIGN: usize = <KBox<RcuBoxInner<T>> as ForeignOwnable>::FOREIGN_ALIGN;

    type Borrowed<'a> = &'a T;
    // A reader under RCU may hold a shared reference at any time: never a mutable one.
    type BorrowedMut<'a> = &'a T;

    fn into_foreign(self) -> *mut c_void {
        let ptr = self.ptr.as_ptr();
        core::mem::forget(self);
        ptr.cast()
    }

    unsafe fn from_foreign(ptr: *mut c_void) -> Self {
        // INVARIANT: By the safety requirements, `ptr` comes from `into_foreign`, which gave up
        // the box that owned it.
        Self {
            // SAFETY: By the safety requirements, `ptr` comes from `into_foreign`: not null.
            ptr: unsafe { NonNull::new_unchecked(ptr.cast()) },
            _p: PhantomData,
        }
    }

    unsafe fn borrow<'a>(ptr: *mut c_void) -> &'a T {
        // SAFETY: By the safety requirements, `ptr` comes from `into_foreign` and the box is not
        // dropped for `'a`.
        unsafe { &(*ptr.cast::<RcuBoxInner<T>>()).value }
    }

    unsafe fn borrow_mut<'a>(ptr: *mut c_void) -> &'a T {
        // SAFETY: As for `borrow`; the reference is shared.
        unsafe { Self::borrow(ptr) }
    }
}

// SAFETY: The allocation of a dropped box is freed only after a grace period, and nothing else
// of the value runs at the drop (it has no destructor): a reference to the value obtained in a
// read-side critical section that began before the box was dropped stays valid until that
// section ends.
unsafe impl<T: 'static> ForeignOwnableRcu for RcuBox<T> {
    unsafe fn rcu_borrow<'a>(ptr: *mut c_void) -> &'a T {
        // SAFETY: By the safety requirements, `ptr` comes from `into_foreign`, and the box was
        // not dropped before the read-side critical section that outlives `'a` began: its memory
        // is freed after that section ends, at the earliest.
        unsafe { &(*ptr.cast::<RcuBoxInner<T>>()).value }
    }
}
