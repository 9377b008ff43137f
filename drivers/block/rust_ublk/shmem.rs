// SPDX-License-Identifier: GPL-2.0

//! Shared-memory zero copy (`UBLK_F_SHMEM_ZC`): buffers that the server registers with
//! `UBLK_U_CMD_REG_BUF`, in which the data of requests may already lie.
//!
//! A server registers memory that it shares with the processes doing I/O to its device, such as
//! a hugetlbfs file that both map. The driver pins the pages of the buffer and records each run
//! of physically consecutive pages in a maple tree, by page frame number. When the data of a read
//! or a write lies in one registered buffer, whole and in order, the io descriptor says so
//! (`UBLK_IO_F_SHMEM_ZC`) and names the buffer and the offset of the data in it instead of a
//! buffer of the server; the driver copies nothing, and the server reaches the data through its
//! own mapping of the buffer.
//!
//! The table changes with the queue of the disk frozen, so that once `UBLK_U_CMD_UNREG_BUF`
//! returns, no request in flight names the buffer: the commands hold [`UblkDevice::shmem`], which
//! stopping the device also holds while it deletes the disk, so a disk with requests in flight
//! is always there to freeze. While the device has no disk, they hold the device lock instead,
//! so that `UBLK_U_CMD_START_DEV` adds none meanwhile. The pages stay pinned until the buffer is
//! unregistered or the device is released ([`unregister_all`]): requests may name them until
//! then, and no command registers a buffer after that.
//!
//! The lookup runs in `queue_rq`, only while a buffer is registered, and walks the tree under RCU,
//! without its lock: the tree is in RCU mode, and a range that leaves it is freed a grace period
//! later ([`RcuBox`]). The queue freeze, or the absence of a disk, orders a lookup with the
//! changes of the table; RCU keeps a lookup that would race with a change anyway from reading
//! freed memory.

use crate::{
    control::user_buf,
    device::{DeviceState, UblkDevice},
    features::F_SHMEM_ZC,
    queue::{DiskOps, Rq},
    uapi::{self, CtrlCmd},
};
use kernel::{
    alloc::KVVec,
    block::{
        mq::gen_disk::{GenDisk, QueueFreeze},
        ReqOp,
    },
    maple_tree::MapleTreeRcu,
    mm::pinned::PinnedPages,
    page::PAGE_SIZE,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        rcu::{self, RcuBox},
        Arc, MutexGuard,
    },
};

/// Largest buffer that a server may register: the offset of data in a buffer must fit the 32 bits
/// that the io descriptor has for it.
const MAX_BUF_SIZE: u64 = 1 << 32;

/// Highest buffer index: the io descriptor has 16 bits for it.
const MAX_INDEX: usize = u16::MAX as usize;

/// A run of physically consecutive pages of a registered buffer.
#[derive(Clone, Copy)]
pub(crate) struct Range {
    /// Frame number of the first page.
    first: usize,
    /// Frame number of the last page.
    last: usize,
    /// Offset in bytes of the first page in the buffer.
    offset: usize,
    /// Index of the buffer.
    index: u16,
    /// Whether the buffer was registered read-only: the driver does not write to it, so the data
    /// of a read cannot already be there.
    read_only: bool,
}

/// The ranges of the registered buffers of a device, by page frame number. The io path reads it;
/// [`Buffers`] changes it.
#[pin_data]
pub(crate) struct Table {
    #[pin]
    tree: MapleTreeRcu<RcuBox<Range>>,
    /// How many buffers are registered. It changes with the queue frozen, or without a disk, so
    /// a request in flight sees the count of the table it is matched against.
    nr_bufs: Atomic<u32>,
}

/// Creates the table of a device with `UBLK_F_SHMEM_ZC`.
pub(crate) fn new_table() -> Result<Arc<Table>> {
    Arc::pin_init(
        pin_init!(Table {
            tree <- MapleTreeRcu::new(),
            nr_bufs: Atomic::new(0),
        }),
        GFP_KERNEL,
    )
}

/// A registered buffer.
struct Buffer {
    /// Its pages, pinned until it is unregistered.
    _pages: PinnedPages,
    /// The first page frame of each of its ranges in the table.
    ranges: KVec<usize>,
}

/// The registered buffers of a device, by index, under [`UblkDevice::shmem`].
///
/// # Invariants
///
/// The ranges of the buffers are in the device's [`Table`], the table holds no others, and its
/// count is the number of buffers.
pub(crate) struct Buffers {
    /// Up to 65536 entries: not one physically contiguous allocation.
    bufs: KVVec<Option<Buffer>>,
}

impl Buffers {
    /// Returns an empty set of buffers.
    pub(crate) fn new() -> Self {
        // INVARIANT: A new table is empty too.
        Self { bufs: KVVec::new() }
    }

    /// Registers `pages` as the buffer `index` (from [`Buffers::free_index`]), with its ranges
    /// in `table`. On failure, gives the pages back, for the caller to unpin once it released
    /// the queue and the lock.
    fn insert(
        &mut self,
        table: &Table,
        pages: PinnedPages,
        index: usize,
        read_only: bool,
    ) -> Result<(), (Error, PinnedPages)> {
        if index == self.bufs.len() {
            if let Err(e) = self.bufs.reserve(1, GFP_KERNEL) {
                return Err((e.into(), pages));
            }
        }
        let mut ranges = KVec::new();
        if let Err(e) = insert_ranges(table, &pages, index, read_only, &mut ranges) {
            // None of the buffer's ranges stays in the table.
            for first in ranges.iter() {
                table.tree.erase(*first);
            }
            return Err((e, pages));
        }
        let buffer = Some(Buffer {
            _pages: pages,
            ranges,
        });
        // INVARIANT: The ranges of the buffer are in the table, recorded with it, and counted.
        match self.bufs.get_mut(index) {
            Some(slot) => *slot = buffer,
            // `index` is the length of `bufs`, which has room for one more.
            None => {
                if self.bufs.push_within_capacity(buffer).is_err() {
                    // Reserved above: not reached.
                    kernel::warn_on!(true);
                }
            }
        }
        table.nr_bufs.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Returns the lowest free buffer index: `UBLK_U_CMD_REG_BUF` returns to the server the index
    /// that ublk_drv's `ida_alloc_max()` gives.
    fn free_index(&self) -> Result<usize> {
        let index = self
            .bufs
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.bufs.len());
        if index > MAX_INDEX {
            return Err(ENOSPC);
        }
        Ok(index)
    }

    /// Unregisters every buffer: their ranges leave `table`. Returns them, for the caller to unpin
    /// their pages once it released the lock.
    fn remove_all(&mut self, table: &Table) -> KVVec<Option<Buffer>> {
        for buffer in self.bufs.iter().flatten() {
            for first in buffer.ranges.iter() {
                table.tree.erase(*first);
            }
        }
        table.nr_bufs.store(0, Relaxed);
        // INVARIANT: Every buffer's ranges left the table with it (it held no others), the count
        // went to zero, and no buffer is left.
        core::mem::take(&mut self.bufs)
    }

    /// Unregisters the buffer `index`: its ranges leave `table`. Returns it, for the caller to
    /// unpin its pages once it released the queue and the lock.
    fn remove(&mut self, table: &Table, index: usize) -> Result<Buffer> {
        let buffer = self
            .bufs
            .get_mut(index)
            .and_then(Option::take)
            .ok_or(ENOENT)?;
        for first in buffer.ranges.iter() {
            table.tree.erase(*first);
        }
        // INVARIANT: The ranges of the buffer left the table with it, and the count with them.
        table.nr_bufs.fetch_sub(1, Relaxed);
        while matches!(self.bufs.last(), Some(None)) {
            self.bufs.pop();
        }
        Ok(buffer)
    }
}

/// Unregisters every buffer of `dev` and unpins their pages, once the device has no disk any more
/// (a released device): no request is matched against its table.
pub(crate) fn unregister_all(dev: &UblkDevice) {
    let Some(table) = &dev.queues.shmem else {
        return;
    };
    let removed = {
        let mut bufs = dev.shmem.lock();
        // The count changes with the queue frozen, or without a disk (`Table`).
        if kernel::warn_on!(dev.state.lock().disk().is_some()) {
            return;
        }
        bufs.remove_all(table)
    };
    // Their pages are unpinned once the lock is released.
    drop(removed);
}

/// Inserts into `table` the runs of physically consecutive pages of `pages`, the buffer `index`,
/// and records the first page frame of each in `ranges`.
fn insert_ranges(
    table: &Table,
    pages: &PinnedPages,
    index: usize,
    read_only: bool,
    ranges: &mut KVec<usize>,
) -> Result {
    let mut pfns = pages.pfns().enumerate().peekable();
    while let Some((i, first)) = pfns.next() {
        let mut last = first;
        while let Some(&(_, pfn)) = pfns.peek() {
            if pfn != last + 1 {
                break;
            }
            last = pfn;
            pfns.next();
        }
        let range = RcuBox::new(
            Range {
                first,
                last,
                offset: i * PAGE_SIZE,
                // CAST: `index` is at most `MAX_INDEX`.
                index: index as u16,
                read_only,
            },
            GFP_KERNEL,
        )?;
        ranges.push(first, GFP_KERNEL)?;
        // Pages that another buffer has already fail with `EEXIST`, as with ublk_drv: a page
        // belongs to one buffer only, since the data of a request is looked up by its pages.
        if let Err(e) = table.tree.insert_range(first..=last, range, GFP_KERNEL) {
            ranges.pop();
            return Err(e.into());
        }
    }
    Ok(())
}

/// Returns where the data of `rq` lies in a registered buffer, as the address that the io
/// descriptor gives (`ublk_shmem_zc_addr()`): the buffer index in the upper 32 bits, the offset
/// of the data in the buffer in the lower ones. The data must lie in one buffer, whole and in
/// order, and the buffer must be writable for a read.
#[inline]
pub(crate) fn find(table: &Table, rq: &Rq) -> Option<u64> {
    // Changed only with the queue frozen, which orders it with the requests that it lets in, or
    // without a disk.
    if table.nr_bufs.load(Relaxed) == 0 {
        return None;
    }
    find_registered(table, rq)
}

/// [`find`] once buffers are registered. Kept out of line so that
/// [`Served::new`](crate::io::Served::new), which looks for the data of requests of devices with
/// `UBLK_F_SHMEM_ZC` only, stays small enough to be inlined into every dispatch.
#[inline(never)]
fn find_registered(table: &Table, rq: &Rq) -> Option<u64> {
    // Only a write's data may lie in a read-only buffer: a read would write to it. Not a zone
    // append's either; ublk_drv does the same.
    let is_write = rq.op() == ReqOp::Write;
    let rcu = rcu::read_lock();
    // The range of the last page, which the next is likely in too.
    let mut cached: Option<Range> = None;
    // The buffer of the data, and where the data starts in it.
    let mut start: Option<(u16, usize)> = None;
    // Where in the buffer the next piece must be.
    let mut next = 0;
    let whole = rq.for_each_data_frame(|pfn, in_page, len| {
        let range = match cached {
            Some(r) if (r.first..=r.last).contains(&pfn) => r,
            _ => match table.tree.load_rcu(pfn, &rcu) {
                Some(r) => *r,
                None => return false,
            },
        };
        cached = Some(range);
        let at = range.offset + (pfn - range.first) * PAGE_SIZE + in_page;
        match start {
            None if range.read_only && !is_write => return false,
            None => start = Some((range.index, at)),
            Some((index, _)) if index != range.index || at != next => return false,
            Some(_) => {}
        }
        next = at + len;
        true
    });
    let (index, offset) = start?;
    if !whole {
        return None;
    }
    // A buffer is at most `MAX_BUF_SIZE` bytes, so `offset` fits 32 bits.
    let offset = u32::try_from(offset).ok()?;
    Some((u64::from(index) << uapi::SHMEM_ZC_IDX_OFF) | u64::from(offset))
}

/// The argument of `UBLK_U_CMD_REG_BUF`, `struct ublk_shmem_buf_reg`.
struct BufReg {
    addr: u64,
    len: u64,
    flags: u32,
    reserved: u32,
}

impl BufReg {
    /// Reads the argument of `header` from user space: as many bytes as `header.len` says, up to
    /// the size of the structure; the rest is zero, so that a server built against a shorter,
    /// older structure gets the defaults.
    fn read(header: &CtrlCmd) -> Result<Self> {
        let mut raw = [0u8; uapi::SHMEM_BUF_REG_SIZE];
        let len = usize::from(header.len).min(raw.len());
        user_buf(header.addr, len)?
            .reader()
            .read_slice(&mut raw[..len])?;
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&raw[at..at + 8]);
            u64::from_ne_bytes(b)
        };
        let u32_at = |at: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&raw[at..at + 4]);
            u32::from_ne_bytes(b)
        };
        Ok(Self {
            addr: u64_at(0),
            len: u64_at(8),
            flags: u32_at(16),
            reserved: u32_at(20),
        })
    }
}

/// What keeps the requests of a device away from its [`Table`] while a command changes it: the
/// freeze of its disk's queue, or, while it has no disk, the device lock, so that
/// `UBLK_U_CMD_START_DEV` adds none meanwhile. Taken with [`UblkDevice::shmem`] held, which the
/// stop of the device holds while it deletes the disk.
struct Quiet<'a> {
    /// The device lock, while the device has no disk.
    _lock: Option<MutexGuard<'a, DeviceState>>,
    /// The freeze of the disk's queue, taken once the device lock was released: ending the
    /// requests in flight, which the freeze waits for, may need it.
    _freeze: Option<QueueFreeze<'a, DiskOps>>,
}

impl<'a> Quiet<'a> {
    /// `state` is the device lock, `disk` the disk that the device has under it.
    fn new(state: MutexGuard<'a, DeviceState>, disk: Option<&'a GenDisk<DiskOps>>) -> Self {
        match disk {
            Some(disk) => {
                drop(state);
                Quiet {
                    _lock: None,
                    _freeze: Some(disk.freeze_queue()),
                }
            }
            None => Quiet {
                _lock: Some(state),
                _freeze: None,
            },
        }
    }
}

/// `UBLK_U_CMD_REG_BUF`: pins the buffer that the argument names and registers it; returns its
/// index.
pub(crate) fn reg_buf(dev: &UblkDevice, header: &CtrlCmd) -> Result<u32> {
    let table = match &dev.queues.shmem {
        Some(table) if dev.flags & F_SHMEM_ZC != 0 => table,
        _ => return Err(EOPNOTSUPP),
    };
    let reg = BufReg::read(header)?;
    if reg.flags & !uapi::SHMEM_BUF_READ_ONLY != 0 || reg.reserved != 0 {
        return Err(EINVAL);
    }
    let page = PAGE_SIZE as u64;
    if reg.len == 0 || reg.len > MAX_BUF_SIZE || reg.len % page != 0 || reg.addr % page != 0 {
        return Err(EINVAL);
    }
    let read_only = reg.flags & uapi::SHMEM_BUF_READ_ONLY != 0;
    let addr = usize::try_from(reg.addr).map_err(|_| EFAULT)?;
    // CAST: `reg.len` is at most `MAX_BUF_SIZE`.
    let nr_pages = (reg.len / page) as usize;
    // Pinning may sleep and fault: done before the locks are taken and the disk's queue frozen,
    // so that requests do not wait for it.
    let pages = PinnedPages::pin_longterm(addr, nr_pages, !read_only)?;

    let (result, unused) = {
        let mut bufs = dev.shmem.lock();
        let state = dev.state.lock();
        let (disk, released) = (state.disk().cloned(), state.is_released());
        let _quiet = Quiet::new(state, disk.as_deref());
        // A command that looked the device up before it was released registers nothing: the
        // buffers of a released device were unregistered, and nothing would unpin these pages
        // until the device is freed.
        let index = if released {
            Err(ENODEV)
        } else {
            bufs.free_index()
        };
        match index {
            Err(e) => (Err(e), Some(pages)),
            Ok(index) => match bufs.insert(table, pages, index, read_only) {
                // CAST: `index` is at most `MAX_INDEX`.
                Ok(()) => (Ok(index as u32), None),
                Err((e, pages)) => (Err(e), Some(pages)),
            },
        }
    };
    // The pages of a failed registration are unpinned once the queue and the lock are released.
    drop(unused);
    result
}

/// `UBLK_U_CMD_UNREG_BUF`: unregisters the buffer whose index the command's data gives, and
/// unpins its pages.
pub(crate) fn unreg_buf(dev: &UblkDevice, header: &CtrlCmd) -> Result {
    let table = match &dev.queues.shmem {
        Some(table) if dev.flags & F_SHMEM_ZC != 0 => table,
        _ => return Err(EOPNOTSUPP),
    };
    // The index is read as an `int`, as ublk_drv reads it: a negative one is `EINVAL` there too.
    let index = usize::try_from(header.data as i32).map_err(|_| EINVAL)?;
    if index > MAX_INDEX {
        return Err(EINVAL);
    }
    let removed = {
        let mut bufs = dev.shmem.lock();
        let state = dev.state.lock();
        let disk = state.disk().cloned();
        let _quiet = Quiet::new(state, disk.as_deref());
        bufs.remove(table, index)?
    };
    // Its pages are unpinned once the queue and the lock are released.
    drop(removed);
    Ok(())
}
