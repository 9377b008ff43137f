// SPDX-License-Identifier: GPL-2.0

//! io_uring commands (`IORING_OP_URING_CMD`).
//!
//! User space sends driver-defined commands to a file with io_uring's `IORING_OP_URING_CMD`
//! operation. The driver receives them through the `uring_cmd` file operation and either completes
//! a command right away, by returning its result, or queues it: it returns `-EIOCBQUEUED` and
//! posts the completion later. Which of the two happened is a type here: a handler returns
//! [`Issued`], and only a command that was queued yields the [`Queued`] token that says so.
//!
//! This module models the life of such a command with separate types:
//!
//! - [`IoUringCmd`] is a command while the driver handles its issue. It gives access to the
//!   command payload of the submission queue entry (SQE) and to the command's driver-private area
//!   (the "pdu").
//! - [`QueuedIoUringCmd`] is a command that the driver kept with [`IoUringCmd::queue`] or
//!   [`IoUringCmd::queue_cancelable`]. It is completed exactly once: explicitly with
//!   [`QueuedIoUringCmd::done`], or, if it is dropped, with `-ECANCELED`. It can be moved to the
//!   task that submitted it with [`QueuedIoUringCmd::complete_in_task`].
//! - [`IoUringCmdCancel`] is the view of a queued command that io_uring asks the driver to cancel,
//!   typically because the ring is being torn down.
//! - [`MultishotCmd`] is a queued multishot command (`IORING_URING_CMD_MULTISHOT`): it posts
//!   completions into buffers that user space provides ([`ProvidedBuffer`]), each one keeping the
//!   command alive, until it is completed.
//!
//! io_uring callbacks receive "issue flags" that describe the context they run in, in particular
//! whether the ring lock is held. Completions and some other operations must be passed the flags of
//! the context they are made from. [`IssueFlags`] carries them: it can only be obtained from
//! io_uring, as an argument of a callback, and cannot outlive that callback.
//!
//! # Examples
//!
//! A driver whose commands carry a 32-bit value, and complete with that value: right away for
//! operation code 0, later for the other operation codes.
//!
//! ```
//! use kernel::{
//!     io_uring::{CmdFile, IoUringCmd, IoUringCmdCancel, IssueFlags, Issued, QueuedIoUringCmd},
//!     prelude::*,
//!     sync::SpinLock,
//! };
//!
//! /// The file that the commands are sent to. It handles their cancellation.
//! struct MyFile;
//!
//! impl CmdFile for MyFile {
//!     const HANDLES_CANCEL: bool = true;
//! }
//!
//! /// The `uring_cmd` handler of the driver.
//! fn uring_cmd<'a>(
//!     pending: &SpinLock<KVec<QueuedIoUringCmd>>,
//!     mut cmd: IoUringCmd<'a, MyFile>,
//!     issue_flags: IssueFlags<'a>,
//! ) -> Result<Issued<'a>> {
//!     let value: i32 = cmd.read_cmd()?;
//!     if cmd.cmd_op() == 0 {
//!         return Ok(Issued::Done(value.try_into()?));
//!     }
//!
//!     cmd.write_pdu(&value);
//!     let (cmd, queued) = cmd.queue_cancelable(issue_flags);
//!     // If the command cannot be stored, dropping it completes it with `ECANCELED`.
//!     let _ = pending.lock().push(cmd, GFP_ATOMIC);
//!     Ok(queued.into())
//! }
//!
//! /// The `uring_cmd_cancel` handler of the driver.
//! fn uring_cmd_cancel(
//!     pending: &SpinLock<KVec<QueuedIoUringCmd>>,
//!     cancel: IoUringCmdCancel<'_>,
//!     issue_flags: IssueFlags<'_>,
//! ) {
//!     let mut pending = pending.lock();
//!     let Some(i) = pending.iter().position(|cmd| cancel.refers_to(cmd)) else {
//!         // Already on its way to completion.
//!         return;
//!     };
//!     let Ok(cmd) = pending.remove(i) else {
//!         return;
//!     };
//!     drop(pending);
//!     cmd.done(Err(ECANCELED), issue_flags);
//! }
//!
//! /// Completes the pending commands, from any context.
//! fn complete_pending(pending: &SpinLock<KVec<QueuedIoUringCmd>>) {
//!     while let Some(cmd) = pending.lock().pop() {
//!         cmd.complete_in_task(|cmd, issue_flags| {
//!             let value: i32 = cmd.read_pdu();
//!             cmd.done(Ok(value), issue_flags);
//!         });
//!     }
//! }
//! ```
//!
//! Only commands of files that handle cancellation can be marked as cancelable: io_uring would
//! wait forever for the others when the ring is torn down. This does not build (the check is made
//! when the handler is compiled to code, which kernel doctests do not do, hence `ignore`):
//!
//! ```ignore,compile_fail
//! use kernel::{
//!     io_uring::{CmdFile, IoUringCmd, IssueFlags, Issued},
//!     prelude::*,
//! };
//!
//! struct NoCancel;
//!
//! impl CmdFile for NoCancel {
//!     const HANDLES_CANCEL: bool = false;
//! }
//!
//! fn uring_cmd<'a>(
//!     cmd: IoUringCmd<'a, NoCancel>,
//!     issue_flags: IssueFlags<'a>,
//! ) -> Result<Issued<'a>> {
//!     let (_cmd, queued) = cmd.queue_cancelable(issue_flags);
//!     Ok(queued.into())
//! }
//!
//! // Taking its address makes the compiler build the handler.
//! let _handler: for<'a> fn(IoUringCmd<'a, NoCancel>, IssueFlags<'a>) -> Result<Issued<'a>> =
//!     uring_cmd;
//! ```
//!
//! C header: [`include/linux/io_uring/cmd.h`](srctree/include/linux/io_uring/cmd.h)

use crate::{
    bindings,
    error::{
        code::*,
        to_result,
        Error,
        Result, //
    },
    ffi::{
        c_int,
        c_uint,
        c_void, //
    },
    transmute::{
        AsBytes,
        FromBytes, //
    },
    types::{
        ForeignOwnable,
        NotThreadSafe, //
    },
    uaccess::{
        UserPtr,
        UserSlice, //
    },
};
#[cfg(CONFIG_BLOCK)]
use crate::{block::mq, sync::aref::ARef};
use core::{
    marker::PhantomData,
    mem::ManuallyDrop,
    ptr::NonNull, //
};

/// Size in bytes of the private area (pdu) of a `struct io_uring_cmd`.
const RAW_PDU_SIZE: usize = 32;

/// Offset in the pdu of the data that [`QueuedIoUringCmd::complete_in_task_with`] passes to its
/// callback, and of the issue flags that [`IoUringCmd::issue_in_task`] keeps.
const TW_DATA_OFFSET: usize = RAW_PDU_SIZE - size_of::<*mut c_void>();

/// Offset in the pdu of the buffer group of a multishot command ([`MultishotCmd`]).
const BUF_GROUP_OFFSET: usize = TW_DATA_OFFSET - size_of::<u16>();

/// Size in bytes of the part of the pdu of an io_uring command that drivers use.
///
/// The rest of the pdu holds the buffer group of a multishot command, and the data that
/// [`QueuedIoUringCmd::complete_in_task_with`] passes to its callback.
pub const PDU_SIZE: usize = BUF_GROUP_OFFSET;

/// Size in bytes of the command payload of a 64-byte SQE.
pub const CMD_SIZE: usize = 16;

/// Size in bytes of the command payload of a 128-byte SQE (`IORING_SETUP_SQE128`).
pub const CMD128_SIZE: usize = CMD_SIZE + size_of::<bindings::io_uring_sqe>();

/// Alignment that the command payload of an SQE and the pdu of a command are guaranteed to have.
const PAYLOAD_ALIGN: usize = 8;

const fn issue_flag(flag: bindings::io_uring_cmd_flags) -> u32 {
    // CAST: The issue flags are an `unsigned int` bit mask on the C side. `IO_URING_F_NONBLOCK` is
    // `INT_MIN` because the enum is signed; reinterpreting it gives the intended bit 31.
    flag as u32
}

const F_NONBLOCK: u32 = issue_flag(bindings::io_uring_cmd_flags_IO_URING_F_NONBLOCK);
const F_UNLOCKED: u32 = issue_flag(bindings::io_uring_cmd_flags_IO_URING_F_UNLOCKED);
const F_SQE128: u32 = issue_flag(bindings::io_uring_cmd_flags_IO_URING_F_SQE128);
const F_CQE32: u32 = issue_flag(bindings::io_uring_cmd_flags_IO_URING_F_CQE32);
const F_CANCEL: u32 = issue_flag(bindings::io_uring_cmd_flags_IO_URING_F_CANCEL);
const F_COMPAT: u32 = issue_flag(bindings::io_uring_cmd_flags_IO_URING_F_COMPAT);

/// Returns the context handle of the ring of `cmd` (`io_uring_cmd_ctx_handle()`).
///
/// That is the `ctx` of the `struct io_kiocb` that the command is the start of:
/// `cmd_to_io_kiocb()` is a cast, which `rust/helpers/io_uring.c` checks at build time. It is read
/// here rather than through a call to a C helper, on the path of every command.
///
/// # Safety
///
/// `cmd` must point to a command that io_uring issued and that is not completed.
#[inline]
unsafe fn ctx_handle(cmd: *mut bindings::io_uring_cmd) -> *mut c_void {
    // SAFETY: By the safety requirements, `cmd` is a command in flight, which io_uring allocates
    // as the start of its `struct io_kiocb`. Only the `ctx` field is read, through the raw pointer
    // and without a reference to the `io_kiocb`, whose other fields io_uring writes meanwhile:
    // `ctx` is set when the request is initialized, before the command reaches a driver, and not
    // changed while it is in flight.
    unsafe { (*cmd.cast::<bindings::io_kiocb>()).ctx.cast() }
}

/// Converts the result of a command to the value of its completion queue entry.
fn cqe_res(ret: Result<i32>) -> i32 {
    match ret {
        Ok(res) => res,
        Err(err) => err.to_errno(),
    }
}

/// The issue flags of the io_uring callback that is running.
///
/// io_uring passes issue flags to the callbacks it makes into a driver: the `uring_cmd` file
/// operation and the task work queued with [`QueuedIoUringCmd::complete_in_task`]. They tell the
/// driver about the command (for example [`IssueFlags::is_sqe128`]) and about the context of the
/// call (for example whether the ring lock is held). The same flags must be passed back to io_uring
/// when the callback completes a command or marks it as cancelable, so that io_uring takes the
/// right locking and completion path.
///
/// The flags are only valid during the callback they were passed to, which the lifetime `'a`
/// expresses. They cannot be created by drivers and cannot be sent to another thread.
///
/// # Invariants
///
/// - `bits` are the issue flags that io_uring passed to a callback that is running on this thread
///   for the whole lifetime `'a`, or `IO_URING_CMD_TASK_WORK_ISSUE_FLAGS` if that callback is an
///   io_uring task work callback.
/// - `ctx` is the context handle (`io_uring_cmd_ctx_handle()`) of the command that the callback
///   was made for, recorded when the flags are created: the callback's own command may be
///   completed, flushed to io_uring's request cache and reused before the callback returns
///   (`io_req_post_cqe()` flushes completions), so it is not read again.
#[derive(Clone, Copy)]
pub struct IssueFlags<'a> {
    bits: u32,
    ctx: *mut c_void,
    tw_canceled: bool,
    _p: PhantomData<(&'a (), NotThreadSafe)>,
}

impl<'a> IssueFlags<'a> {
    /// Creates the issue flags of a `uring_cmd` file operation call.
    ///
    /// # Safety
    ///
    /// `cmd` and `bits` must be the arguments of a call to the `uring_cmd` file operation that is
    /// running on this thread for the whole lifetime `'a`.
    #[inline]
    unsafe fn from_uring_cmd(cmd: *mut bindings::io_uring_cmd, bits: c_uint) -> Self {
        // INVARIANT: By the safety requirements, `bits` are the issue flags of a callback that
        // lasts at least `'a`, and `cmd` is the command it was made for.
        Self {
            bits,
            // SAFETY: By the safety requirements, `cmd` is a valid command.
            ctx: unsafe { ctx_handle(cmd) },
            tw_canceled: false,
            _p: PhantomData,
        }
    }

    /// Creates the issue flags of an io_uring task work callback.
    ///
    /// # Safety
    ///
    /// `cmd` must be the command of an io_uring task work callback (`io_req_tw_func_t`) that is
    /// running on this thread for the whole lifetime `'a`, and `tw_canceled` the `cancel` field of
    /// the token that the callback was passed.
    #[inline]
    unsafe fn from_task_work(cmd: *mut bindings::io_uring_cmd, tw_canceled: bool) -> Self {
        // INVARIANT: Task work callbacks run with the ring lock held and their completions are
        // flushed by io_uring, which is what `IO_URING_CMD_TASK_WORK_ISSUE_FLAGS` describes.
        Self {
            bits: bindings::IO_URING_CMD_TASK_WORK_ISSUE_FLAGS,
            // SAFETY: By the safety requirements, `cmd` is a valid command.
            ctx: unsafe { ctx_handle(cmd) },
            tw_canceled,
            _p: PhantomData,
        }
    }

    /// Returns whether the caller must not block (`IO_URING_F_NONBLOCK`).
    ///
    /// A `uring_cmd` handler that would have to sleep can return `EAGAIN`; io_uring then issues
    /// the command again from a context that may block.
    #[inline]
    pub fn is_nonblock(self) -> bool {
        self.bits & F_NONBLOCK != 0
    }

    /// Returns whether the callback runs without the ring lock held (`IO_URING_F_UNLOCKED`).
    ///
    /// This is the case when io_uring issues a command from its worker threads.
    #[inline]
    pub fn is_unlocked(self) -> bool {
        self.bits & F_UNLOCKED != 0
    }

    /// Returns whether the ring uses 128-byte SQEs (`IO_URING_F_SQE128`).
    ///
    /// The command payload then has [`CMD128_SIZE`] bytes instead of [`CMD_SIZE`].
    #[inline]
    pub fn is_sqe128(self) -> bool {
        self.bits & F_SQE128 != 0
    }

    /// Returns whether io_uring is cancelling a command (`IO_URING_F_CANCEL`).
    #[inline]
    fn is_cancel(self) -> bool {
        self.bits & F_CANCEL != 0
    }

    /// Returns whether a task work callback runs only to be cancelled.
    ///
    /// io_uring runs task work in this mode when the task that submitted the command is exiting
    /// or cannot run task work any more. The callback must still complete the command, but should
    /// not do work on behalf of the task, and typically completes the command with an error.
    ///
    /// Always `false` outside task work callbacks.
    #[inline]
    pub fn is_task_work_canceled(self) -> bool {
        self.tw_canceled
    }

    /// Returns the flags to pass to io_uring for an operation on `cmd`.
    ///
    /// Flags that claim the ring lock is held are only valid for commands of the ring that the
    /// callback runs for: using them for a command of another ring would touch that ring's
    /// lock-protected state without its lock. That is a driver bug, which is reported, and the
    /// operation then takes the ring lock itself as it does outside of io_uring callbacks.
    ///
    /// # Safety
    ///
    /// `cmd` must point to a valid command.
    #[inline]
    unsafe fn bits_for(self, cmd: *mut bindings::io_uring_cmd) -> u32 {
        // Unlocked flags fit any ring. The rings are compared even for what looks like the
        // callback's own command: its address may be that of another ring's command by now.
        if self.is_unlocked() {
            return self.bits;
        }
        // SAFETY: By the safety requirements, `cmd` is valid.
        let ctx = unsafe { ctx_handle(cmd) };
        if crate::warn_on!(ctx != self.ctx) {
            F_UNLOCKED
        } else {
            self.bits
        }
    }
}

/// An io_uring command that is being issued to the driver.
///
/// This is the command that the `uring_cmd` file operation receives. The driver reads what user
/// space sent with [`IoUringCmd::cmd_op`] and [`IoUringCmd::read_cmd`], may record up to
/// [`PDU_SIZE`] bytes of its own data in the command with [`IoUringCmd::write_pdu`], and then
/// either returns the result of the command from the file operation or keeps the command with
/// [`IoUringCmd::queue`] to complete it later.
///
/// `F` is the file that the command was sent to (see [`CmdFile`]).
///
/// # Invariants
///
/// - `ptr` points to a valid `struct io_uring_cmd` that io_uring is issuing to the driver, in a
///   `uring_cmd` call that lasts for the whole lifetime `'a`, for a file whose file operations
///   are described by `F`.
/// - The command's SQE (`ptr->sqe`) is valid for reads, with a command payload of
///   [`CMD128_SIZE`] bytes if `sqe128` is true, and of [`CMD_SIZE`] bytes otherwise.
/// - The pdu of the command is initialized, and no one else accesses it during `'a`.
/// - `*queued` is set to `true` when the command is queued, which consumes the object.
pub struct IoUringCmd<'a, F: CmdFile> {
    ptr: NonNull<bindings::io_uring_cmd>,
    sqe128: bool,
    queued: &'a mut bool,
    _file: PhantomData<F>,
}

/// What the commands of a file know about its file operations.
///
/// The abstractions that implement `uring_cmd` file operations implement this trait for the type
/// that stands for the file, which [`IoUringCmd`] carries as a type parameter.
pub trait CmdFile {
    /// Whether the file operations handle the cancellation of queued commands
    /// (`IO_URING_F_CANCEL`, see [`IoUringCmdCancel`]).
    ///
    /// Only then can a command be marked as cancelable ([`IoUringCmd::queue_cancelable`]):
    /// io_uring waits for cancelable commands when it tears a ring down, and without a handler
    /// no one would complete them.
    const HANDLES_CANCEL: bool;

    /// Whether the file operations take multishot commands (`IORING_URING_CMD_MULTISHOT`, see
    /// [`MultishotCmd`]).
    ///
    /// Multishot commands of other files fail with `EINVAL` before they reach the driver.
    const HANDLES_MULTISHOT: bool = false;
}

/// Proof that a `uring_cmd` handler queued its command.
///
/// Only [`IoUringCmd::queue`], [`IoUringCmd::queue_cancelable`] and
/// [`IoUringCmd::issue_in_task`] create it, and the handler returns it (as [`Issued::Queued`]) to
/// tell io_uring that the command is completed later. The lifetime ties it to the `uring_cmd`
/// call of the command.
#[must_use = "a queued command must be reported with `Issued::Queued`"]
pub struct Queued<'a> {
    _p: PhantomData<fn(&'a ()) -> &'a ()>,
}

/// How a `uring_cmd` handler leaves a command that was issued to it.
///
/// A handler returns `Result<Issued<'a>>`: an error completes the command with the negative error
/// code, [`Issued::Done`] with a value.
pub enum Issued<'a> {
    /// The command is complete; the value becomes the `res` field of its completion queue entry.
    ///
    /// Values above `i32::MAX` do not fit there: they are reported as a driver bug, and the
    /// command fails with `EOVERFLOW`.
    Done(u32),
    /// The command was queued, and is completed later.
    Queued(Queued<'a>),
}

impl<'a> From<Queued<'a>> for Issued<'a> {
    #[inline]
    fn from(queued: Queued<'a>) -> Self {
        Issued::Queued(queued)
    }
}

impl<'a, F: CmdFile> IoUringCmd<'a, F> {
    /// Returns the raw `struct io_uring_cmd` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::io_uring_cmd {
        self.ptr.as_ptr()
    }

    /// Returns the operation code of the command (`sqe->cmd_op`).
    #[inline]
    pub fn cmd_op(&self) -> u32 {
        // SAFETY: By the type invariants, `ptr` is valid. io_uring set `cmd_op` before issuing
        // the command and does not change it.
        unsafe { (*self.as_raw()).cmd_op }
    }

    /// Returns whether the command is a multishot command (`IORING_URING_CMD_MULTISHOT`).
    ///
    /// Such a command posts a completion each time the driver has something to report, into a
    /// buffer that user space provided, until the driver completes it (see [`MultishotCmd`]).
    /// Only files whose [`CmdFile::HANDLES_MULTISHOT`] is true receive them.
    #[inline]
    pub fn is_multishot(&self) -> bool {
        // SAFETY: By the type invariants, `ptr` is valid. While the command is issued, only its
        // issuer (this caller) writes its `flags`; `IORING_URING_CMD_MULTISHOT` is set before
        // the issue and never changes.
        unsafe { (*self.as_raw()).flags & bindings::IORING_URING_CMD_MULTISHOT != 0 }
    }

    /// Returns the size of the command payload: [`CMD128_SIZE`] for rings with 128-byte SQEs,
    /// [`CMD_SIZE`] otherwise.
    #[inline]
    fn cmd_size(&self) -> usize {
        if self.sqe128 {
            CMD128_SIZE
        } else {
            CMD_SIZE
        }
    }

    /// Copies the command payload of the SQE into a value of type `T`.
    ///
    /// `T` describes the beginning of the payload, typically a structure that is part of the
    /// driver's UAPI. The payload lives in memory that user space can write to at any time, so it
    /// is read once into the returned value, which the driver then validates and uses.
    ///
    /// Returns [`EINVAL`] if `T` is larger than the payload of this command: [`CMD128_SIZE`] bytes
    /// on rings with 128-byte SQEs ([`IssueFlags::is_sqe128`]), [`CMD_SIZE`] otherwise.
    ///
    /// `T` must not be aligned to more than 8 bytes, which is checked at build time.
    pub fn read_cmd<T: FromBytes>(&self) -> Result<T> {
        const { assert!(align_of::<T>() <= PAYLOAD_ALIGN) };

        if size_of::<T>() > self.cmd_size() {
            return Err(EINVAL);
        }

        // SAFETY: By the type invariants, `ptr` and its SQE are valid.
        let payload = unsafe { bindings::io_uring_sqe_cmd((*self.as_raw()).sqe) };
        // SAFETY:
        // - By the type invariants, the payload is valid for reads of `self.cmd_size()` bytes,
        //   which we checked is enough for a `T`.
        // - The payload starts 48 bytes into an SQE, which is 8-byte aligned, and `T` is aligned to
        //   at most 8 bytes.
        // - Any bit pattern is a valid `T` since `T: FromBytes`.
        // - User space may write to the SQE concurrently, hence the volatile read.
        Ok(unsafe { payload.cast::<T>().read_volatile() })
    }

    /// Writes a value of type `T` to the pdu of the command.
    ///
    /// The driver can use the pdu for data that belongs to the command, for example to find its
    /// own state again when io_uring asks to cancel the command (see [`IoUringCmdCancel`]). The pdu
    /// can only be written while the command is being issued: once it is queued, it is read-only.
    ///
    /// `T` must fit in the [`PDU_SIZE`] bytes of the pdu, which is checked at build time.
    pub fn write_pdu<T: AsBytes>(&mut self, value: &T) {
        const { assert!(size_of::<T>() <= PDU_SIZE) };

        // The type annotation checks at build time that the pdu is a `RAW_PDU_SIZE`-byte array.
        //
        // SAFETY: By the type invariants, `ptr` is valid.
        let pdu: *mut [u8; RAW_PDU_SIZE] = unsafe { &raw mut (*self.as_raw()).pdu };
        // SAFETY:
        // - `value` is valid for reads of `size_of::<T>()` bytes, all initialized since
        //   `T: AsBytes`, so the pdu stays initialized.
        // - `pdu` is valid for writes of `PDU_SIZE` bytes, which are enough for a `T`.
        // - By the type invariants, no one else accesses the pdu during `'a`, and `&mut self`
        //   guarantees that this object does not either, so the two do not overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(value).cast::<u8>(),
                pdu.cast::<u8>(),
                size_of::<T>(),
            )
        };
    }

    /// Keeps the command, to complete it later.
    ///
    /// The returned [`QueuedIoUringCmd`] owns the command from now on, and io_uring is told that
    /// the command is queued (the `uring_cmd` file operation returns `-EIOCBQUEUED`), whatever the
    /// handler returns. The handler returns the [`Queued`] token (as [`Issued::Queued`]); a
    /// handler that returns anything else after queueing its command is reported as buggy.
    pub fn queue(self) -> (QueuedIoUringCmd, Queued<'a>) {
        *self.queued = true;
        // INVARIANT: The command was issued to the driver, and the `uring_cmd` file operation is
        // going to return `-EIOCBQUEUED` because `*self.queued` is now set. The pdu is initialized
        // by the type invariants of `Self`, and writes to it end here since `self` is consumed.
        let cmd = QueuedIoUringCmd { ptr: self.ptr };
        (cmd, Queued { _p: PhantomData })
    }

    /// Keeps the command, to complete it later, and marks it as cancelable.
    ///
    /// This is [`IoUringCmd::queue`] for commands that may wait for a long time: io_uring then
    /// calls the driver to cancel the command (with an [`IoUringCmdCancel`]) when the ring is
    /// torn down or the submitting task exits, until the command is completed.
    ///
    /// Only commands of files that handle cancellation can be cancelable, which is checked at
    /// build time (see [`CmdFile::HANDLES_CANCEL`]).
    pub fn queue_cancelable(self, issue_flags: IssueFlags<'_>) -> (QueuedIoUringCmd, Queued<'a>) {
        const {
            assert!(
                F::HANDLES_CANCEL,
                "commands of files without a cancel handler cannot be cancelable"
            )
        };

        // SAFETY: By the type invariants, `ptr` is valid.
        let bits = unsafe { issue_flags.bits_for(self.as_raw()) };
        // SAFETY: By the type invariants, `ptr` is a valid command that is being issued, so it is
        // not completed. `bits` describe the locking context of the caller correctly for this
        // command's ring. The file of the command handles cancellation, by the check above and
        // the type invariants.
        unsafe { bindings::io_uring_cmd_mark_cancelable(self.as_raw(), bits) };
        self.queue()
    }

    /// Issues the command again from the task that submitted it, if an io_uring worker issues it.
    ///
    /// io_uring issues commands from its worker threads (see [`IssueFlags::is_unlocked`]) when
    /// user space asks for it (`IOSQE_ASYNC`) or when the command could not be issued without
    /// blocking. A driver that keeps per-task state, or that must not take the ring lock in the
    /// order of a worker, calls this first: if `issue_flags` are those of a worker, the command
    /// is queued, and io_uring runs a task work item on the submitting task, which calls the
    /// `uring_cmd` file operation again with the issue flags of task work (and the flags that
    /// describe the command, such as [`IssueFlags::is_sqe128`]). If the task is exiting by then,
    /// the command completes with `ECANCELED` instead. Otherwise the command is given back.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::{
    ///     io_uring::{CmdFile, IoUringCmd, IssueFlags, Issued},
    ///     prelude::*,
    /// };
    ///
    /// fn uring_cmd<'a, F: CmdFile>(
    ///     cmd: IoUringCmd<'a, F>,
    ///     issue_flags: IssueFlags<'a>,
    /// ) -> Result<Issued<'a>> {
    ///     let cmd = match cmd.issue_in_task(issue_flags) {
    ///         Ok(queued) => return Ok(queued.into()),
    ///         Err(cmd) => cmd,
    ///     };
    ///     // Issued by the submitting task, with the ring lock held.
    ///     Ok(Issued::Done(cmd.cmd_op()))
    /// }
    /// ```
    pub fn issue_in_task(self, issue_flags: IssueFlags<'_>) -> Result<Queued<'a>, Self> {
        if !issue_flags.is_unlocked() {
            return Err(self);
        }
        // The task work issues the command with the flags of task work, which say nothing about
        // the command itself; keep those that do in the part of the pdu that drivers do not use.
        let keep = issue_flags.bits & (F_SQE128 | F_CQE32 | F_COMPAT);
        // SAFETY: By the type invariants, `ptr` is valid and no one else accesses its pdu while
        // the command is issued. The bytes past `TW_DATA_OFFSET` are large enough for a `u32`;
        // the write is unaligned.
        unsafe {
            (&raw mut (*self.as_raw()).pdu)
                .cast::<u8>()
                .add(TW_DATA_OFFSET)
                .cast::<u32>()
                .write_unaligned(keep)
        };
        let (cmd, queued) = self.queue();
        let this = ManuallyDrop::new(cmd);
        // SAFETY: `this` is a valid command that is queued and not completed. `this` gives up
        // the responsibility to complete it, which passes to `reissue_trampoline`: it runs
        // exactly once, and completes the command or hands it to the file operation.
        unsafe { bindings::io_uring_cmd_complete_in_task(this.as_raw(), Some(reissue_trampoline)) };
        Ok(queued)
    }

    /// Returns the `addr` field of the command's SQE.
    ///
    /// Some commands carry a value there besides their payload (see [`IoUringCmd::read_cmd`]). It
    /// lives in memory that user space can write to at any time, so it is read once.
    pub fn sqe_addr(&self) -> u64 {
        // SAFETY: By the type invariants, `ptr` and its SQE are valid. User space may write to
        // the SQE concurrently, hence the volatile read of the aligned `u64`.
        unsafe { (&raw const (*(*self.as_raw()).sqe).__bindgen_anon_2.addr).read_volatile() }
    }

    /// Returns the ring that the command was submitted to.
    #[inline]
    pub fn ring(&self) -> RingId {
        // SAFETY: By the type invariants, `ptr` is valid.
        RingId(unsafe { ctx_handle(self.as_raw()) }.addr())
    }

    /// Registers the data of the block request `rq` as the fixed buffer `index` of the command's
    /// ring (`io_buffer_register_request()`), so that the ring's later operations read or write
    /// the request's pages directly.
    ///
    /// The registration takes `rq`: the reference keeps the request from being ended while
    /// io_uring may use its pages, and comes back to the driver through
    /// [`RequestBufferRelease::release`] once io_uring no longer uses the buffer. On failure,
    /// `rq` is dropped before this returns, and `release` is not called: an index outside the
    /// ring's buffer table or one in use fails with the error of io_uring (`EINVAL`, `EBUSY`).
    #[cfg(CONFIG_BLOCK)]
    pub fn register_request_buffer<T, R>(
        &self,
        rq: ARef<mq::Request<T>>,
        index: u32,
        issue_flags: IssueFlags<'_>,
    ) -> Result
    where
        T: mq::Operations,
        R: RequestBufferRelease<T>,
    {
        // SAFETY: By the type invariants, `ptr` is a valid command that is being issued.
        unsafe { register_request::<T, R>(self.as_raw(), rq, index, issue_flags) }
    }

    /// Unregisters the fixed buffer `index` of the command's ring (`io_buffer_unregister()`), one
    /// that a driver registered ([`IoUringCmd::register_request_buffer`]).
    ///
    /// The buffer is released once the ring's operations that use it complete. Fails with
    /// `EINVAL` if the ring has no buffer at `index`, and with `EBUSY` if its buffer there was
    /// registered by user space.
    pub fn unregister_buffer(&self, index: u32, issue_flags: IssueFlags<'_>) -> Result {
        // SAFETY: By the type invariants, `ptr` is valid.
        let bits = unsafe { issue_flags.bits_for(self.as_raw()) };
        // SAFETY: `ptr` is a valid command that is being issued, and `bits` describe the locking
        // context of the caller correctly for its ring.
        to_result(unsafe { bindings::io_buffer_unregister(self.as_raw(), index, bits) })
    }
}

/// Identifies the ring (the io_uring instance) that a command was submitted to, to tell later
/// whether another command came through the same ring.
///
/// It is only compared: a ring that is torn down may give its identity to a new one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RingId(usize);

/// What a driver does once io_uring no longer uses a block request that the driver registered as
/// a fixed buffer ([`IoUringCmd::register_request_buffer`]).
///
/// # Safety
///
/// io_uring calls [`RequestBufferRelease::release`], code of the implementer's module, at any
/// time until every registration made with it was released, possibly long after the command that
/// registered the buffer completed and the file it was sent to was closed: a ring may outlive
/// both. The implementer must keep its module loaded until the last call to `release` returned,
/// for example by holding a reference to the module ([`crate::ThisModule::try_get`]) while
/// registrations remain.
#[cfg(CONFIG_BLOCK)]
pub unsafe trait RequestBufferRelease<T: mq::Operations> {
    /// Called once for each registration: when the buffer was unregistered (by a driver's
    /// command, by user space, or by an update of the ring's buffer table) and the last
    /// operation that used it completed, or when the ring was torn down.
    ///
    /// `rq` is the reference that the registration took. This runs in process context, never in
    /// interrupt or atomic context, with the lock of the ring that last held the buffer: on the
    /// task, the `SQPOLL` thread or the io_uring worker that completed the last operation on the
    /// buffer or unregistered it, or on a kernel worker that tears the ring down. It may run
    /// inside [`IoUringCmd::unregister_buffer`], so callers of that must not hold locks that
    /// this takes; and it must not unregister buffers or complete commands of the ring itself.
    fn release(rq: ARef<mq::Request<T>>);
}

/// The release callback of the buffers of [`register_request`].
///
/// # Safety
///
/// Must only be called by io_uring, once, as the release callback of a buffer that
/// [`register_request`] registered successfully with this callback, and with the `priv` pointer
/// that it was given.
#[cfg(CONFIG_BLOCK)]
unsafe extern "C" fn release_request_buffer<T, R>(priv_: *mut c_void)
where
    T: mq::Operations,
    R: RequestBufferRelease<T>,
{
    // SAFETY: By the safety requirements, `priv_` is the request whose reference
    // `register_request` turned into a raw pointer with `ARef::into_raw`, and this is the only
    // call that takes it back. A `Request<T>` is a transparent wrapper of its `struct request`.
    let rq = unsafe { ARef::from_raw(NonNull::new_unchecked(priv_.cast::<mq::Request<T>>())) };
    R::release(rq);
}

/// Registers the data of `rq` as the fixed buffer `index` of the ring of `cmd`.
///
/// # Safety
///
/// `cmd` must point to a valid command, which is being issued or queued and not completed.
#[cfg(CONFIG_BLOCK)]
unsafe fn register_request<T, R>(
    cmd: *mut bindings::io_uring_cmd,
    rq: ARef<mq::Request<T>>,
    index: u32,
    issue_flags: IssueFlags<'_>,
) -> Result
where
    T: mq::Operations,
    R: RequestBufferRelease<T>,
{
    // SAFETY: By the safety requirements, `cmd` is valid.
    let bits = unsafe { issue_flags.bits_for(cmd) };
    let rq = ARef::into_raw(rq);
    // SAFETY:
    // - By the safety requirements, `cmd` is valid, and `bits` describe the locking context of
    //   the caller correctly for its ring.
    // - `rq` is a valid `struct request` (a `Request<T>` wraps it transparently) that the driver
    //   owns. The reference given up above keeps it from being ended, so its pages stay valid
    //   until io_uring calls the release callback, which takes the reference back.
    // - `release_request_buffer::<T, R>` takes back exactly that reference: io_uring passes it
    //   the request as its `priv` pointer, once.
    let ret = unsafe {
        bindings::io_buffer_register_request(
            cmd,
            rq.as_ptr().cast(),
            Some(release_request_buffer::<T, R>),
            index,
            bits,
        )
    };
    if ret != 0 {
        // SAFETY: The registration failed, so io_uring does not call the release callback: the
        // reference given up above is still ours.
        drop(unsafe { ARef::from_raw(rq) });
    }
    to_result(ret)
}

/// Task work callback of [`IoUringCmd::issue_in_task`]: issues the command to its file again.
///
/// # Safety
///
/// Must only be called by io_uring, as the task work of a command that
/// [`IoUringCmd::issue_in_task`] passed to `io_uring_cmd_complete_in_task()`.
unsafe extern "C" fn reissue_trampoline(tw_req: bindings::io_tw_req, tw: bindings::io_tw_token_t) {
    // SAFETY: By the safety requirements, this is the task work of a command.
    let cmd = unsafe { bindings::io_uring_cmd_from_tw(tw_req) };
    // SAFETY: `issue_in_task` stored the flags that describe the command past the first
    // `TW_DATA_OFFSET` bytes of the pdu of `cmd`, which is valid, and nothing else wrote them
    // since.
    let keep = unsafe {
        (&raw const (*cmd).pdu)
            .cast::<u8>()
            .add(TW_DATA_OFFSET)
            .cast::<u32>()
            .read_unaligned()
    };
    let flags = bindings::IO_URING_CMD_TASK_WORK_ISSUE_FLAGS | keep;
    let ret = if tw.cancel {
        ECANCELED.to_errno()
    } else {
        // SAFETY: The command is valid and holds a reference to its file, whose file operations
        // have a `uring_cmd`, since the command was issued through it. The command is queued, so
        // no one else issues or completes it: calling `uring_cmd` with the flags of this task
        // work is a new issue of the command, as io_uring itself makes one from task work.
        unsafe {
            let uring_cmd = (*(*(*cmd).file).f_op).uring_cmd;
            match uring_cmd {
                Some(uring_cmd) => uring_cmd(cmd, flags),
                None => EOPNOTSUPP.to_errno(),
            }
        }
    };
    if ret != EIOCBQUEUED.to_errno() {
        // SAFETY: The file operation did not queue the command, so this task work still owns it
        // and completes it, with the flags of task work, once.
        unsafe { bindings::io_uring_cmd_done(cmd, ret, flags) };
    }
}

/// Reads the pdu of a command as a value of type `T`.
///
/// # Safety
///
/// `cmd` must point to a valid command whose pdu is initialized and not written concurrently.
unsafe fn read_pdu<T: FromBytes>(cmd: *mut bindings::io_uring_cmd) -> T {
    const { assert!(size_of::<T>() <= PDU_SIZE) };

    // The type annotation checks at build time that the pdu is a `RAW_PDU_SIZE`-byte array.
    //
    // SAFETY: By the safety requirements, `cmd` is valid.
    let pdu: *const [u8; RAW_PDU_SIZE] = unsafe { &raw const (*cmd).pdu };
    // SAFETY:
    // - `pdu` is valid for reads of `PDU_SIZE` bytes, which are enough for a `T`.
    // - By the safety requirements, the bytes are initialized and not written concurrently.
    // - Any bit pattern is a valid `T` since `T: FromBytes`.
    unsafe { pdu.cast::<T>().read_unaligned() }
}

/// An io_uring command that the driver queued and must complete.
///
/// A queued command is obtained with [`IoUringCmd::queue`] and is completed exactly once:
///
/// - with [`QueuedIoUringCmd::done`], from an io_uring callback
///   whose [`IssueFlags`] are passed along;
/// - after [`QueuedIoUringCmd::complete_in_task`], by the task work callback, which receives the
///   command and the issue flags of the task work;
/// - or, if it is dropped, with `-ECANCELED`, from task work.
///
/// A queued command keeps a reference to the file it was sent to, so the file is not released
/// before all its queued commands are completed. Drivers usually queue commands as cancelable
/// ([`IoUringCmd::queue_cancelable`]) so that io_uring can ask them to complete the commands when
/// the ring is torn down.
///
/// The pdu of a queued command is read-only, because io_uring may ask to cancel the command
/// concurrently (see [`IoUringCmdCancel`]).
///
/// # Invariants
///
/// - `ptr` points to a valid `struct io_uring_cmd` that was issued to a driver and queued (its
///   `uring_cmd` file operation returned, or is going to return, `-EIOCBQUEUED`), and that is not
///   completed yet. It stays valid until it is completed, which this object is responsible for.
/// - The first `TW_DATA_OFFSET` bytes of the pdu of the command are initialized and no longer
///   written; for a multishot command, the two bytes at `BUF_GROUP_OFFSET` hold its buffer group.
///   The other bytes of the pdu are only accessed by [`QueuedIoUringCmd::complete_in_task_with`]
///   and its task work callback.
pub struct QueuedIoUringCmd {
    ptr: NonNull<bindings::io_uring_cmd>,
}

// SAFETY: A queued command can be completed from any thread: `done` checks the issue
// flags they are given, and `complete_in_task` may be called from any context.
unsafe impl Send for QueuedIoUringCmd {}

// SAFETY: The `&self` methods only read the command operation code, the pdu and the ring (`ctx` of
// its `io_kiocb`), which are not modified while the command is queued.
unsafe impl Sync for QueuedIoUringCmd {}

impl QueuedIoUringCmd {
    /// Creates a [`QueuedIoUringCmd`] from a raw command.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a queued command that is not completed, whose pdu is initialized and
    /// no longer written, and the caller must own the responsibility to complete it, which is
    /// transferred to the returned object.
    unsafe fn from_raw(ptr: *mut bindings::io_uring_cmd) -> Self {
        // INVARIANT: By the safety requirements.
        Self {
            // SAFETY: By the safety requirements, `ptr` points to a command, so it is not null.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
        }
    }

    /// Returns the raw `struct io_uring_cmd` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::io_uring_cmd {
        self.ptr.as_ptr()
    }

    /// Reads the pdu of the command as a value of type `T`.
    ///
    /// `T` must fit in the [`PDU_SIZE`] bytes of the pdu, which is checked at build time.
    #[inline]
    pub fn read_pdu<T: FromBytes>(&self) -> T {
        // SAFETY: By the type invariants, `ptr` is valid and its pdu initialized and not written.
        unsafe { read_pdu(self.as_raw()) }
    }

    /// Returns whether `self` and `other` were submitted to the same io_uring instance.
    ///
    /// The task work of a command may complete another command with its issue flags only then
    /// (see [`QueuedIoUringCmd::done`]), for example to complete a batch of commands in one task
    /// work.
    #[inline]
    pub fn same_ring(&self, other: &QueuedIoUringCmd) -> bool {
        // SAFETY: By the type invariants, both commands are valid.
        let (this, that) = unsafe { (ctx_handle(self.as_raw()), ctx_handle(other.as_raw())) };
        this == that
    }

    /// Returns the ring that the command was submitted to.
    #[inline]
    pub fn ring(&self) -> RingId {
        // SAFETY: By the type invariants, `ptr` is valid.
        RingId(unsafe { ctx_handle(self.as_raw()) }.addr())
    }

    /// Registers the data of the block request `rq` as the fixed buffer `index` of the command's
    /// ring, as [`IoUringCmd::register_request_buffer`] does, before the command completes.
    ///
    /// `issue_flags` are the flags of the io_uring callback that calls this, which must run for a
    /// command of the same ring, as for [`QueuedIoUringCmd::done`].
    #[cfg(CONFIG_BLOCK)]
    pub fn register_request_buffer<T, R>(
        &self,
        rq: ARef<mq::Request<T>>,
        index: u32,
        issue_flags: IssueFlags<'_>,
    ) -> Result
    where
        T: mq::Operations,
        R: RequestBufferRelease<T>,
    {
        // SAFETY: By the type invariants, `ptr` is a valid command that is queued and not
        // completed.
        unsafe { register_request::<T, R>(self.as_raw(), rq, index, issue_flags) }
    }

    /// Unregisters the fixed buffer `index` of the command's ring, as
    /// [`IoUringCmd::unregister_buffer`] does.
    ///
    /// `issue_flags` are the flags of the io_uring callback that calls this, which must run for a
    /// command of the same ring, as for [`QueuedIoUringCmd::done`].
    pub fn unregister_buffer(&self, index: u32, issue_flags: IssueFlags<'_>) -> Result {
        // SAFETY: By the type invariants, `ptr` is valid.
        let bits = unsafe { issue_flags.bits_for(self.as_raw()) };
        // SAFETY: By the type invariants, `ptr` is a valid command that is not completed, and
        // `bits` describe the locking context of the caller correctly for its ring.
        to_result(unsafe { bindings::io_buffer_unregister(self.as_raw(), index, bits) })
    }

    /// Completes the command with the result `ret`.
    ///
    /// `ret` becomes the `res` field of the completion queue entry: the value for `Ok`, the
    /// negative error code for `Err`.
    ///
    /// `issue_flags` are the flags of the io_uring callback that calls this, which must run for a
    /// command of the same ring ([`QueuedIoUringCmd::same_ring`]). Completions from other
    /// contexts go through [`QueuedIoUringCmd::complete_in_task`].
    #[inline]
    pub fn done(self, ret: Result<i32>, issue_flags: IssueFlags<'_>) {
        // SAFETY: By the type invariants, `ptr` is valid.
        let bits = unsafe { issue_flags.bits_for(self.as_raw()) };
        let this = ManuallyDrop::new(self);
        // SAFETY: By the type invariants, `ptr` is a valid command that is not completed, and
        // `this` gives up the responsibility to complete it, so this is the only completion.
        // `bits` describe the locking context of the caller correctly for this command's ring.
        unsafe { bindings::io_uring_cmd_done(this.as_raw(), cqe_res(ret), bits) };
    }

    /// Runs `callback` in the context of the task that submitted the command.
    ///
    /// io_uring queues a task work item on the submitting task, which calls `callback` with the
    /// command and the issue flags of the task work. The callback then owns the command again and
    /// completes it (possibly after more work), for example with
    /// `cmd.done(ret, issue_flags)`.
    ///
    /// This can be called from any context, including atomic context, and is the way to complete a
    /// command from contexts that are not io_uring callbacks, such as interrupt handlers or work
    /// items.
    ///
    /// `callback` must not capture anything, which is checked at build time: data it needs is
    /// found through the command, for example in its pdu.
    ///
    /// Everything that happens before this call, including what the caller saw other threads
    /// write, happens before the accesses that `callback` makes to memory it reaches by following
    /// the command (pointers and indices read from it or from its pdu): io_uring queues the task
    /// work with a fully ordered exchange, and the task work runner finds the command by reading
    /// the link that the exchange published, so the callback's accesses through the command are
    /// address-dependent on that read, as those of an `rcu_dereference()` reader are. io_uring
    /// relies on the same ordering for the callback that it stores in the request. A callback
    /// that only decides on a value read through the command, and then accesses other memory, is
    /// not ordered by this.
    pub fn complete_in_task<F>(self, callback: F)
    where
        F: FnOnce(QueuedIoUringCmd, IssueFlags<'_>) + Send + 'static,
    {
        const {
            assert!(
                size_of::<F>() == 0,
                "the callback must not capture anything"
            )
        };

        // The trampoline materializes the callback again, from its type.
        core::mem::forget(callback);
        let this = ManuallyDrop::new(self);
        // SAFETY: By the type invariants, `ptr` is a valid command that is not completed. `this`
        // gives up the responsibility to complete it, which passes to the task work callback:
        // `task_work_trampoline` takes it over, and it runs exactly once.
        unsafe {
            bindings::io_uring_cmd_complete_in_task(this.as_raw(), Some(task_work_trampoline::<F>))
        };
    }
}

impl QueuedIoUringCmd {
    /// Runs `callback` with `data` in the context of the task that submitted the command.
    ///
    /// This is [`QueuedIoUringCmd::complete_in_task`] for callbacks that need more than the
    /// command and its pdu: `data` is kept in the command until the task work runs, and the
    /// callback receives it back. A driver typically passes a reference to the object that the
    /// command belongs to, for example an [`Arc`] of its queue.
    ///
    /// `callback` must not capture anything, which is checked at build time.
    ///
    /// The ordering is that of [`QueuedIoUringCmd::complete_in_task`], for what `callback`
    /// reaches by following the command and `data`.
    ///
    /// `data` must not borrow anything (`'static`): the task work may run long after the caller
    /// returned. This does not build (kernel doctests cannot expect a build failure, hence
    /// `ignore`):
    ///
    /// ```ignore,compile_fail
    /// use kernel::{io_uring::QueuedIoUringCmd, prelude::*};
    ///
    /// fn hand_over(cmd: QueuedIoUringCmd) -> Result {
    ///     let value = 42u32;
    ///     // `value` is gone by the time the task work runs.
    ///     let data = KBox::new(&value, GFP_KERNEL)?;
    ///     cmd.complete_in_task_with(data, |cmd, data, issue_flags| {
    ///         cmd.done(Ok(**data as i32), issue_flags)
    ///     });
    ///     Ok(())
    /// }
    /// ```
    ///
    /// [`Arc`]: crate::sync::Arc
    pub fn complete_in_task_with<D, F>(self, data: D, callback: F)
    where
        D: ForeignOwnable + Send + 'static,
        F: FnOnce(QueuedIoUringCmd, D, IssueFlags<'_>) + Send + 'static,
    {
        const {
            assert!(
                size_of::<F>() == 0,
                "the callback must not capture anything"
            )
        };

        // The trampoline materializes the callback again, from its type.
        core::mem::forget(callback);
        let this = ManuallyDrop::new(self);
        let data = data.into_foreign();
        // SAFETY: By the type invariants, `ptr` is valid, and the bytes of the pdu past
        // `TW_DATA_OFFSET` are only accessed by this function and the task work it queues, which
        // runs after this write. They are large enough for a pointer; the write is unaligned.
        unsafe {
            (&raw mut (*this.as_raw()).pdu)
                .cast::<u8>()
                .add(TW_DATA_OFFSET)
                .cast::<*mut c_void>()
                .write_unaligned(data)
        };
        // SAFETY: By the type invariants, `ptr` is a valid command that is not completed. `this`
        // gives up the responsibility to complete it, which passes to the task work callback:
        // `task_work_trampoline_with` takes it over, with `data`, and it runs exactly once.
        unsafe {
            bindings::io_uring_cmd_complete_in_task(
                this.as_raw(),
                Some(task_work_trampoline_with::<D, F>),
            )
        };
    }
}

impl Drop for QueuedIoUringCmd {
    fn drop(&mut self) {
        // INVARIANT: `self` is being dropped, so `this` takes over the responsibility to complete
        // the command.
        let this = QueuedIoUringCmd { ptr: self.ptr };
        this.complete_in_task(|cmd, issue_flags| cmd.done(Err(ECANCELED), issue_flags));
    }
}

/// A queued multishot command (`IORING_URING_CMD_MULTISHOT`).
///
/// User space sends a multishot command to receive many completions for it: each one reports
/// data that the driver wrote into a buffer that user space provided in a buffer group of the
/// ring (`IORING_REGISTER_PBUF_RING`), which the SQE names (`buf_group`, with
/// `IOSQE_BUFFER_SELECT`). The completion queue entries say `IORING_CQE_F_MORE` and which buffer
/// holds the data; the last one, made by [`MultishotCmd::done`], does not.
///
/// A driver gets a [`MultishotCmd`] from a [`QueuedIoUringCmd`] of such a command (see
/// [`MultishotCmd::new`]). It picks a buffer with [`MultishotCmd::select_buffer`], writes into it,
/// and posts it ([`ProvidedBuffer::post`]), from an io_uring callback of the command's ring, as
/// often as it likes. A [`MultishotCmd`] is a [`QueuedIoUringCmd`] otherwise (it dereferences to
/// one), and is completed once, like one.
///
/// # Examples
///
/// A file that reports a counter to a multishot command, one completion per value.
///
/// ```
/// use kernel::{
///     io_uring::{IssueFlags, MultishotCmd},
///     prelude::*,
/// };
///
/// /// Posts `values` to `cmd`, one per completion, as long as user space provides buffers; then
/// /// completes it.
/// fn report(mut cmd: MultishotCmd, values: &[u32], issue_flags: IssueFlags<'_>) {
///     for value in values {
///         // Without a buffer, user space sends the command again once it provides one.
///         let Ok(mut buf) = cmd.select_buffer(issue_flags) else {
///             return cmd.done(Err(ENOBUFS), issue_flags);
///         };
///         if let Err(e) = buf.write(&value.to_ne_bytes()) {
///             drop(buf);
///             return cmd.done(Err(e), issue_flags);
///         }
///         if buf.post().is_err() {
///             return cmd.done(Err(ENOBUFS), issue_flags);
///         }
///     }
///     cmd.done(Ok(0), issue_flags);
/// }
/// ```
///
/// # Invariants
///
/// `cmd` is a multishot command: io_uring made sure that it selects a buffer
/// (`IOSQE_BUFFER_SELECT`), and `dispatch_uring_cmd()` recorded the buffer group that its SQE
/// names at `BUF_GROUP_OFFSET` in its pdu.
pub struct MultishotCmd {
    cmd: QueuedIoUringCmd,
}

impl MultishotCmd {
    /// Returns `cmd` as a multishot command, or gives it back if it is not one (see
    /// [`IoUringCmd::is_multishot`]).
    pub fn new(cmd: QueuedIoUringCmd) -> Result<Self, QueuedIoUringCmd> {
        // SAFETY: By the type invariants of `QueuedIoUringCmd`, `cmd` is valid. Its `flags` are
        // only written by its owner, the caller, and by io_uring under the ring lock for that
        // owner (to mark it cancelable); `IORING_URING_CMD_MULTISHOT` is set before the command is
        // issued and never changes.
        let multishot =
            unsafe { (*cmd.as_raw()).flags } & bindings::IORING_URING_CMD_MULTISHOT != 0;
        if multishot {
            // INVARIANT: io_uring only accepts multishot commands that select a buffer, and only
            // files that handle multishot commands queue them; `dispatch_uring_cmd` recorded
            // their buffer group before the file saw them.
            Ok(Self { cmd })
        } else {
            Err(cmd)
        }
    }

    /// Returns the buffer group that the command selects buffers from.
    #[inline]
    pub fn buffer_group(&self) -> u16 {
        // SAFETY: By the type invariants, the command is valid and its buffer group is at
        // `BUF_GROUP_OFFSET` in its pdu, which is not written while it is queued. The read is
        // unaligned.
        unsafe {
            (&raw const (*self.cmd.as_raw()).pdu)
                .cast::<u8>()
                .add(BUF_GROUP_OFFSET)
                .cast::<u16>()
                .read_unaligned()
        }
    }

    /// Takes a buffer that user space provided in the command's buffer group, to post a
    /// completion with ([`ProvidedBuffer::post`]).
    ///
    /// Fails with `ENOBUFS` if the group has no buffer left or does not exist. A buffer can only
    /// be taken in an io_uring callback of the command's own ring that holds its lock: the
    /// `uring_cmd` file operation issuing a command of that ring from its submitting task, or
    /// task work of the command (see [`MultishotCmd::complete_in_task_with`]); elsewhere this is
    /// a driver bug, reported with a warning, and fails with `EINVAL`.
    ///
    /// The command has one buffer at a time; the buffer lives no longer than the callback.
    pub fn select_buffer<'b>(
        &'b mut self,
        issue_flags: IssueFlags<'b>,
    ) -> Result<ProvidedBuffer<'b>> {
        // The buffer is committed to the command when its completion is posted, which io_uring
        // only does with the ring lock held: select it under that lock, in the same callback.
        if crate::warn_on!(issue_flags.is_unlocked()) {
            return Err(EINVAL);
        }
        // SAFETY: By the type invariants, the command is valid.
        let bits = unsafe { issue_flags.bits_for(self.cmd.as_raw()) };
        if bits & F_UNLOCKED != 0 {
            // `bits_for` reported flags of another ring.
            return Err(EINVAL);
        }
        // A completion reports at most `i32::MAX` bytes; io_uring caps the buffer to what is
        // asked for.
        // CAST: `i32::MAX` fits in `usize`.
        let mut len = i32::MAX as usize;
        // SAFETY: By the type invariants, the command is a valid, queued, multishot command that
        // selects a buffer; `bits` say that the caller holds the lock of its ring.
        let sel = unsafe {
            bindings::io_uring_cmd_buffer_select(
                self.cmd.as_raw(),
                self.buffer_group().into(),
                &mut len,
                bits,
            )
        };
        // INVARIANT: Whatever io_uring selected, in a callback that holds the lock of the
        // command's ring and lasts for `'b`, is not posted or recycled yet; `len` and `addr` are
        // only used once they are known to describe a buffer.
        let mut buf = ProvidedBuffer {
            cmd: &self.cmd,
            sel,
            addr: 0,
            len: 0,
            written: 0,
            bits,
            _p: PhantomData,
        };
        // SAFETY: `io_uring_cmd_buffer_select` returns an error in `val` or a user address in
        // `addr`; they share their bytes, and reading either one reads initialized bytes.
        let val = unsafe { sel.__bindgen_anon_1.val };
        // CAST: `MAX_ERRNO` is 4095.
        if (-(bindings::MAX_ERRNO as isize)..0).contains(&val) {
            // CAST: Checked to be an errno.
            let err = Error::from_errno(val as i32);
            // Dropping `buf` gives back anything that was selected.
            drop(buf);
            return Err(err);
        }
        if val == 0 {
            // No buffer, or one at address 0, which is given back.
            drop(buf);
            return Err(ENOBUFS);
        }
        // CAST: A user address, as `addr` holds it; addresses with the top bit set are valid
        // on some architectures (tagged addresses), which is why only `-MAX_ERRNO..0` is an error.
        buf.addr = val as usize;
        buf.len = len;
        Ok(buf)
    }

    /// Completes the command with the result `ret`, as [`QueuedIoUringCmd::done`] does: the last
    /// completion queue entry of the command, without `IORING_CQE_F_MORE`.
    #[inline]
    pub fn done(self, ret: Result<i32>, issue_flags: IssueFlags<'_>) {
        self.cmd.done(ret, issue_flags);
    }

    /// Gives up the ability to post completions: the command is a plain queued command again.
    #[inline]
    pub fn into_queued(self) -> QueuedIoUringCmd {
        self.cmd
    }

    /// Runs `callback` with `data` in the context of the task that submitted the command, as
    /// [`QueuedIoUringCmd::complete_in_task_with`] does; the callback gets the command back as a
    /// multishot command, and may select buffers and post completions with it.
    ///
    /// `callback` must not capture anything, which is checked at build time.
    pub fn complete_in_task_with<D, F>(self, data: D, callback: F)
    where
        D: ForeignOwnable + Send + 'static,
        F: FnOnce(MultishotCmd, D, IssueFlags<'_>) + Send + 'static,
    {
        const {
            assert!(
                size_of::<F>() == 0,
                "the callback must not capture anything"
            )
        };

        // The closure captures nothing but `callback`, which has no bytes: it has none either.
        self.cmd
            .complete_in_task_with(data, move |cmd, data, issue_flags| {
                // INVARIANT: `cmd` is the command of `self`, a multishot command, given back.
                callback(MultishotCmd { cmd }, data, issue_flags)
            });
    }
}

impl core::ops::Deref for MultishotCmd {
    type Target = QueuedIoUringCmd;

    #[inline]
    fn deref(&self) -> &QueuedIoUringCmd {
        &self.cmd
    }
}

/// Why [`ProvidedBuffer::post`] did not post a completion.
///
/// io_uring could not post it (its completion queue overflowed, or the command can no longer
/// post completions): the command must be completed ([`MultishotCmd::done`]), and what the buffer
/// reported is lost, so the driver reports it again later.
#[derive(Debug)]
pub struct NotPosted;

/// A buffer that user space provided, taken for a completion of a [`MultishotCmd`].
///
/// The driver writes what it reports into the buffer ([`ProvidedBuffer::write`]) and posts it
/// ([`ProvidedBuffer::post`]): the command completes once more, with `IORING_CQE_F_MORE`, the
/// number of bytes written, and the buffer's id. A buffer that is dropped without being posted
/// goes back to its group, unused. (A buffer that is leaked with [`core::mem::forget`] stays
/// selected: the next [`MultishotCmd::select_buffer`] of the command then fails with a warning
/// from io_uring.)
///
/// # Invariants
///
/// - io_uring selected the buffer for `cmd`, a valid multishot command, with the issue flags
///   `bits`, in an io_uring callback that holds the lock of the command's ring and lasts for
///   `'b`; the buffer is neither posted nor recycled yet.
/// - The buffer is the user memory at `addr`, `len` bytes long, of which the first `written`
///   bytes were written.
#[must_use = "a provided buffer goes back to its group unless it is posted"]
pub struct ProvidedBuffer<'b> {
    cmd: &'b QueuedIoUringCmd,
    sel: bindings::io_br_sel,
    addr: usize,
    len: usize,
    written: usize,
    bits: u32,
    _p: PhantomData<IssueFlags<'b>>,
}

impl ProvidedBuffer<'_> {
    /// Returns the size of the buffer in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Returns whether the buffer has no room at all.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Returns how many bytes can still be written.
    #[inline]
    pub fn room(&self) -> usize {
        self.len - self.written
    }

    /// Returns the command that the buffer was taken for, for example to register a fixed
    /// buffer with its ring before the completion is posted.
    #[inline]
    pub fn cmd(&self) -> &QueuedIoUringCmd {
        self.cmd
    }

    /// Appends `data` to what the buffer holds: `EFAULT` if it does not fit in the room left or
    /// the user memory cannot be written, and then nothing counts as written.
    pub fn write(&mut self, data: &[u8]) -> Result {
        if data.len() > self.room() {
            return Err(EFAULT);
        }
        let start = UserPtr::from_addr(self.addr + self.written);
        UserSlice::new(start, data.len())
            .writer()
            .write_slice(data)?;
        self.written += data.len();
        Ok(())
    }

    /// Posts a completion of the command with the bytes written to the buffer: its `res` is their
    /// number, its flags `IORING_CQE_F_MORE`, `IORING_CQE_F_BUFFER` and the buffer's id.
    ///
    /// A buffer with nothing written goes back to its group, and no completion is posted. On
    /// [`NotPosted`], the caller completes the command.
    pub fn post(self) -> Result<(), NotPosted> {
        let mut this = ManuallyDrop::new(self);
        if this.written == 0 {
            this.recycle();
            return Ok(());
        }
        // CAST: `written` is at most the size of a buffer, which fits in `isize`.
        this.sel.__bindgen_anon_1.val = this.written as isize;
        // SAFETY: By the type invariants, the command is valid, `sel` is the selection of a buffer
        // for it, made in the callback that runs, with the flags `bits`, and it was not posted or
        // recycled; `this` is not dropped, so this is the only use of it.
        let needs_completion = unsafe {
            bindings::io_uring_mshot_cmd_post_cqe(this.cmd.as_raw(), &mut this.sel, this.bits)
        };
        if needs_completion {
            Err(NotPosted)
        } else {
            Ok(())
        }
    }

    /// Gives the buffer back to its group, unused.
    fn recycle(&mut self) {
        // Posting nothing recycles the buffer (or does nothing if none was selected). io_uring
        // then always says that the command should be completed, and sets its result to 0; the
        // caller decides when the command completes instead, and its completion sets the result.
        self.sel.__bindgen_anon_1.val = 0;
        // SAFETY: As in `post`: by the type invariants, `sel` selects a buffer for the command in
        // this callback, not posted or recycled yet, and the caller uses it no more.
        let _ = unsafe {
            bindings::io_uring_mshot_cmd_post_cqe(self.cmd.as_raw(), &mut self.sel, self.bits)
        };
    }
}

impl Drop for ProvidedBuffer<'_> {
    fn drop(&mut self) {
        self.recycle();
    }
}

/// Task work callback of [`QueuedIoUringCmd::complete_in_task`].
///
/// # Safety
///
/// Must only be called by io_uring, as the task work of a command that was passed to
/// `io_uring_cmd_complete_in_task()` by [`QueuedIoUringCmd::complete_in_task`] for `F`, after the
/// value of `F` passed to it was forgotten.
unsafe extern "C" fn task_work_trampoline<F>(
    tw_req: bindings::io_tw_req,
    tw: bindings::io_tw_token_t,
) where
    F: FnOnce(QueuedIoUringCmd, IssueFlags<'_>) + Send + 'static,
{
    // SAFETY: By the safety requirements, this is the task work of a command.
    let ptr = unsafe { bindings::io_uring_cmd_from_tw(tw_req) };
    // SAFETY: By the safety requirements, this callback runs for a command that a
    // `QueuedIoUringCmd` handed over to it, so the command is queued and not completed, and its pdu
    // is initialized and no longer written. The task work runs once, so the responsibility to
    // complete the command is taken over once.
    let cmd = unsafe { QueuedIoUringCmd::from_raw(ptr) };
    // SAFETY: This is an io_uring task work callback for `ptr`, which runs until it returns, and
    // `tw.cancel` is the cancel flag of its token.
    let issue_flags = unsafe { IssueFlags::from_task_work(ptr, tw.cancel) };
    // SAFETY: `F` is a zero-sized type, which `complete_in_task` checked at build time, and it is
    // inhabited because `complete_in_task` was passed a value of it. That value was forgotten, so
    // materializing one here does not duplicate it.
    let callback = unsafe { NonNull::<F>::dangling().as_ptr().read() };

    callback(cmd, issue_flags);
}

/// Task work callback of [`QueuedIoUringCmd::complete_in_task_with`].
///
/// # Safety
///
/// Must only be called by io_uring, as the task work of a command that was passed to
/// `io_uring_cmd_complete_in_task()` by [`QueuedIoUringCmd::complete_in_task_with`] for `D` and
/// `F`, after the value of `F` passed to it was forgotten.
unsafe extern "C" fn task_work_trampoline_with<D, F>(
    tw_req: bindings::io_tw_req,
    tw: bindings::io_tw_token_t,
) where
    D: ForeignOwnable + Send + 'static,
    F: FnOnce(QueuedIoUringCmd, D, IssueFlags<'_>) + Send + 'static,
{
    // SAFETY: By the safety requirements, this is the task work of a command.
    let ptr = unsafe { bindings::io_uring_cmd_from_tw(tw_req) };
    // SAFETY: By the safety requirements, `complete_in_task_with` stored the result of
    // `D::into_foreign` past the first `TW_DATA_OFFSET` bytes of the pdu of `ptr`, which is
    // valid, and nothing else accesses these bytes.
    let data = unsafe {
        (&raw const (*ptr).pdu)
            .cast::<u8>()
            .add(TW_DATA_OFFSET)
            .cast::<*mut c_void>()
            .read_unaligned()
    };
    // SAFETY: `data` comes from `D::into_foreign`, and the task work runs once, so it is turned
    // back into a `D` once.
    let data = unsafe { D::from_foreign(data) };
    // SAFETY: By the safety requirements, this callback runs for a command that a
    // `QueuedIoUringCmd` handed over to it, so the command is queued and not completed, and its pdu
    // is initialized and no longer written. The task work runs once, so the responsibility to
    // complete the command is taken over once.
    let cmd = unsafe { QueuedIoUringCmd::from_raw(ptr) };
    // SAFETY: This is an io_uring task work callback for `ptr`, which runs until it returns, and
    // `tw.cancel` is the cancel flag of its token.
    let issue_flags = unsafe { IssueFlags::from_task_work(ptr, tw.cancel) };
    // SAFETY: `F` is a zero-sized type, which `complete_in_task_with` checked at build time, and
    // it is inhabited because `complete_in_task_with` was passed a value of it. That value was
    // forgotten, so materializing one here does not duplicate it.
    let callback = unsafe { NonNull::<F>::dangling().as_ptr().read() };

    callback(cmd, data, issue_flags);
}

/// A queued io_uring command that io_uring asks the driver to cancel.
///
/// io_uring cancels commands that were queued with [`IoUringCmd::queue_cancelable`] when
/// the ring is torn down or the submitting task exits. It does so by calling the driver once for
/// each such command, until the driver completes the command. The driver finds the
/// [`QueuedIoUringCmd`] it kept for the command, for example with the help of the pdu, and
/// completes it with the [`IssueFlags`] of the cancel call.
///
/// This object only gives read access to the command, since a [`QueuedIoUringCmd`] owns it.
/// io_uring guarantees that the command is not completed before the cancel call returns, but the
/// driver must deal with a completion that races with the cancel call on another thread.
///
/// # Invariants
///
/// `ptr` points to a valid `struct io_uring_cmd` that is queued, that io_uring is cancelling in a
/// `uring_cmd` call that lasts for the whole lifetime `'a`, and whose pdu is initialized and no
/// longer written.
pub struct IoUringCmdCancel<'a> {
    ptr: NonNull<bindings::io_uring_cmd>,
    _p: PhantomData<&'a bindings::io_uring_cmd>,
}

impl IoUringCmdCancel<'_> {
    /// Returns the raw `struct io_uring_cmd` pointer.
    #[inline]
    pub fn as_raw(&self) -> *mut bindings::io_uring_cmd {
        self.ptr.as_ptr()
    }

    /// Reads the pdu of the command as a value of type `T`.
    ///
    /// `T` must fit in the [`PDU_SIZE`] bytes of the pdu, which is checked at build time.
    #[inline]
    pub fn read_pdu<T: FromBytes>(&self) -> T {
        // SAFETY: By the type invariants, `ptr` is valid and its pdu initialized and not written.
        unsafe { read_pdu(self.as_raw()) }
    }

    /// Returns whether this is a request to cancel `cmd`.
    #[inline]
    pub fn refers_to(&self, cmd: &QueuedIoUringCmd) -> bool {
        self.ptr == cmd.ptr
    }
}

/// Runs the `uring_cmd` file operation of a driver.
///
/// This is the glue between the `uring_cmd` file operation and the types of this module, for the
/// abstractions that implement file operations:
///
/// - If io_uring cancels a command (`IO_URING_F_CANCEL`), `cancel` is called with the command and
///   the issue flags, and the file operation returns 0 (io_uring ignores the value).
/// - Otherwise, the command is being issued. Its pdu is zeroed, and `issue` is called with the
///   command and the issue flags. If `issue` queued the command, the file operation returns
///   `-EIOCBQUEUED`; otherwise it returns the result of `issue`, which completes the command.
/// - Multishot commands (`IORING_URING_CMD_MULTISHOT`) fail with `EINVAL` without calling `issue`,
///   unless `F` handles them ([`CmdFile::HANDLES_MULTISHOT`]); their buffer group is recorded in
///   the pdu for [`MultishotCmd`].
///
/// # Safety
///
/// `ioucmd` and `issue_flags` must be the arguments of the `uring_cmd` file operation call that
/// calls this function, for a file whose file operations `F` describes, and this function must be
/// called at most once in that call.
pub(crate) unsafe fn dispatch_uring_cmd<F: CmdFile>(
    ioucmd: *mut bindings::io_uring_cmd,
    issue_flags: c_uint,
    issue: impl for<'a> FnOnce(IoUringCmd<'a, F>, IssueFlags<'a>) -> Result<Issued<'a>>,
    cancel: impl FnOnce(IoUringCmdCancel<'_>, IssueFlags<'_>),
) -> c_int {
    // SAFETY: By the safety requirements, these are the arguments of a `uring_cmd` call that lasts
    // until this function returns.
    let flags = unsafe { IssueFlags::from_uring_cmd(ioucmd, issue_flags) };

    // SAFETY: By the safety requirements, `ioucmd` is a valid command.
    let ptr = unsafe { NonNull::new_unchecked(ioucmd) };

    if flags.is_cancel() {
        // INVARIANT: io_uring only cancels commands that were marked as cancelable, which
        // requires a `QueuedIoUringCmd`, so the command is queued and its pdu read-only.
        let cmd = IoUringCmdCancel {
            ptr,
            _p: PhantomData,
        };
        cancel(cmd, flags);
        return 0;
    }

    // SAFETY: `ioucmd` is a valid command. While it is issued, only its issuer (this call) writes
    // its `flags`.
    let multishot = unsafe { (*ioucmd).flags } & bindings::IORING_URING_CMD_MULTISHOT != 0;
    if multishot && !F::HANDLES_MULTISHOT {
        // Multishot commands post several completions, which the driver does not expect.
        return EINVAL.to_errno();
    }

    // The pdu may hold anything when a command is issued; make it hold defined bytes.
    //
    // SAFETY: `ioucmd` is a valid command that is being issued (for the first time, or again by
    // `reissue_trampoline`), which no `QueuedIoUringCmd` owns, so its pdu is ours to write.
    unsafe { (*ioucmd).pdu = [0; RAW_PDU_SIZE] };

    if multishot {
        // io_uring only accepts a multishot command that selects a buffer (`IOSQE_BUFFER_SELECT`),
        // from the group that the SQE names. The SQE is only valid while the command is issued:
        // keep the group where drivers do not write.
        //
        // SAFETY: `ioucmd` and its SQE are valid while the command is issued (io_uring copied the
        // SQE if the command is issued again from task work). User space may write to the SQE
        // concurrently, hence the volatile read.
        let group =
            unsafe { (&raw const (*(*ioucmd).sqe).__bindgen_anon_4.buf_group).read_volatile() };
        // SAFETY: As above, the pdu is ours to write, and `BUF_GROUP_OFFSET` leaves room for a
        // `u16` in it. The write is unaligned.
        unsafe {
            (&raw mut (*ioucmd).pdu)
                .cast::<u8>()
                .add(BUF_GROUP_OFFSET)
                .cast::<u16>()
                .write_unaligned(group)
        };
    }

    let mut queued = false;
    // INVARIANT:
    // - The command is being issued by the `uring_cmd` call that calls this function, which lasts
    //   longer than `cmd`, for a file that `F` describes.
    // - io_uring makes the SQE valid for the duration of the call, with a payload whose size
    //   depends on `IO_URING_F_SQE128`.
    // - The pdu was just initialized, and only `cmd` accesses it until the command is queued.
    let cmd = IoUringCmd {
        ptr,
        sqe128: flags.is_sqe128(),
        queued: &mut queued,
        _file: PhantomData,
    };
    // Keep no borrow of `queued`: the `Queued` token borrows it.
    let ret = issue(cmd, flags).map(|issued| match issued {
        Issued::Done(value) => Some(value),
        Issued::Queued(_) => None,
    });

    if queued {
        // The command belongs to a `QueuedIoUringCmd` now (and may even be completed already), so
        // io_uring must not complete it, whatever the handler returned.
        crate::warn_on!(!matches!(ret, Ok(None)));
        return EIOCBQUEUED.to_errno();
    }

    match ret {
        // A `Queued` token only comes from queueing this command, which did not happen.
        Ok(None) => {
            crate::warn_on!(true);
            EINVAL.to_errno()
        }
        Ok(Some(value)) => match i32::try_from(value) {
            Ok(res) => res,
            Err(_) => {
                crate::warn_on!(true);
                EOVERFLOW.to_errno()
            }
        },
        // `-EIOCBQUEUED` would tell io_uring that someone completes the command later, but the
        // driver did not keep it, so no one could.
        Err(e) if e == EIOCBQUEUED => {
            crate::warn_on!(true);
            EINVAL.to_errno()
        }
        Err(e) => e.to_errno(),
    }
}
