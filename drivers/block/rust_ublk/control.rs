// SPDX-License-Identifier: GPL-2.0

//! `/dev/ublk-control` and its commands.
//!
//! The control device only takes io_uring commands on rings with 128-byte SQEs, whose payload is
//! a `struct ublksrv_ctrl_cmd`. The ioctl-encoded operation codes (`UBLK_U_CMD_*`) are accepted,
//! and the legacy ones (`UBLK_CMD_*`) with `CONFIG_BLKDEV_UBLK_LEGACY_OPCODES` (an option of
//! `BLK_DEV_UBLK`: `rust_ublk` built without it refuses them); commands are told apart by their
//! number. Errors are those of ublk_drv, which tools and servers written against it tell failures
//! apart by.

use crate::{
    chardev::{self, CharDev},
    device::UblkDevice,
    features::*,
    params,
    release::Releases,
    shmem,
    uapi::{self, CtrlCmd, DevInfo},
    unpriv::{self, Owner},
};
use kernel::{
    chrdev::{self, ClassRegistration, Region},
    cpu::{nr_cpu_ids, CpuId},
    cred::{capable, Capability},
    device::Device,
    fs::File,
    io_uring::{IoUringCmd, IssueFlags, Issued},
    miscdevice::{MiscCmdFile, MiscDevice, MiscDeviceRegistration},
    new_mutex,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{aref::ARef, Arc, ArcBorrow, Mutex},
    uaccess::{UserPtr, UserSlice},
};

/// Number of device numbers (`UBLK_MAX_UBLKS`): the minor numbers of the region of `/dev/ublkcN`,
/// whose minor number is `N`.
const MAX_UBLKS: u32 = 1 << kernel::bindings::MINORBITS;

/// A device known to the control device.
///
/// A deleted device keeps its number, and commands still find it, until its server has closed
/// `/dev/ublkcN` and it was released: a second `UBLK_U_CMD_DEL_DEV` of a privileged device (ublk
/// servers delete their device when they exit,
/// racing with the tool that deleted it) succeeds, and `UBLK_U_CMD_ADD_DEV` cannot reuse the number
/// while the old server may still issue commands.
struct Entry {
    dev: Arc<UblkDevice>,
    /// `/dev/ublkcN`; `None` once the device is deleted.
    char_dev: Option<chrdev::Registration<CharDev>>,
}

impl Entry {
    /// Returns whether the device is deleted, its server gone and its `/dev/ublkcN` freed: its
    /// number is free.
    fn is_released(&self) -> bool {
        self.char_dev.is_none() && self.dev.is_released()
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // A device that goes away with the module is stopped first, as `UBLK_U_CMD_DEL_DEV`
        // stops it: requests that a device with user recovery put aside for a new server fail
        // instead of holding up the deletion of its disk forever, and its partition scan, which
        // may wait for one of them, is cancelled (`stop` cancels it; a device never started
        // has one neither). The end of its server's release is not queued: it keeps the module
        // loaded.
        UblkDevice::stop(&self.dev);
        UblkDevice::cancel_scan(&self.dev);
    }
}

/// The state of the control device: the devices, by number, and what their `/dev/ublkcN` are
/// made in.
#[pin_data]
pub(crate) struct Control {
    #[pin]
    devices: Mutex<RBTree<u32, Entry>>,
    /// The device numbers of `/dev/ublkcN`, `ublk-char` in `/proc/devices`: minor `N` is device
    /// `N`'s.
    pub(crate) region: Arc<Region>,
    /// The class of `/dev/ublkcN`.
    pub(crate) class: Arc<ClassRegistration>,
    /// The device of `/dev/ublk-control`, the parent of `/dev/ublkcN`; set by the first open,
    /// under the lock, before any command can add a device.
    #[pin]
    parent: Mutex<Option<ARef<Device>>>,
    /// The work items that finish the release of a `/dev/ublkcN`, once io_uring gave back the
    /// requests it held (see [`UblkDevice::release`]). Each device holds it too; this reference
    /// goes with the module, whose exit waits for the work items to return.
    releases: Arc<Releases>,
}

impl Control {
    /// Creates the state of the control device, once the module parameters are found valid:
    /// registers the region of device numbers and `class`.
    pub(crate) fn new(class: &'static chrdev::Class) -> Result<Arc<Self>> {
        check_module_parameters()?;
        let region = Arc::new(Region::alloc(MAX_UBLKS, c"ublk-char")?, GFP_KERNEL)?;
        let class = Arc::new(ClassRegistration::new(class)?, GFP_KERNEL)?;
        let releases = Releases::new()?;
        Arc::pin_init(
            pin_init!(Self {
                devices <- new_mutex!(RBTree::new()),
                region,
                class,
                parent <- new_mutex!(None),
                releases,
            }),
            GFP_KERNEL,
        )
    }

    /// Returns the parent of `/dev/ublkcN`, the device of `/dev/ublk-control`: known to every
    /// command, which comes through an open file.
    pub(crate) fn parent(&self) -> Option<ARef<Device>> {
        self.parent.lock().clone()
    }

    /// Deletes every device, for the module's removal: their `/dev/ublkcN` are removed before
    /// their parent, `/dev/ublk-control`, and the class.
    ///
    /// Waits for the release of each `/dev/ublkcN`, whose release function is the module's. No
    /// file of a device is open (each holds the module), so the release is immediate, but with
    /// `CONFIG_DEBUG_KOBJECT_RELEASE`, which delays it: then the rest of the release (dropping
    /// the registration's reference to the device, freeing it) may still run after the wait,
    /// the window of any release that puts its module's last reference. Then waits for the work
    /// item that looks at releases waiting for io_uring to return ([`Releases::stop`]).
    pub(crate) fn remove_all(&self) {
        let mut devices = core::mem::take(&mut *self.devices.lock());
        // Dropped without the lock, as when the control device goes.
        while let Some(first) = devices.cursor_front_mut() {
            let (_, entry) = first.remove_current().1.to_key_value();
            let dev = entry.dev.clone();
            drop(entry);
            let _ = dev.wait_released(false);
        }
        self.releases.stop();
    }

    /// Returns device `id`, unless its number is free.
    fn device(&self, id: u32) -> Option<Arc<UblkDevice>> {
        let mut devices = self.devices.lock();
        release(&mut devices, id);
        devices.get(&id).map(|e| e.dev.clone())
    }

    /// Returns the device number of `/dev/ublkcN` of `dev`, if it has one: not once it was
    /// deleted (its number may belong to another device by then).
    pub(crate) fn char_devt(&self, dev: &UblkDevice) -> Option<(u32, u32)> {
        self.devices
            .lock()
            .get(&dev.id)
            .filter(|e| core::ptr::eq(&*e.dev, dev))
            .and_then(|e| e.char_dev.as_ref())
            .map(|c| (c.devt().major(), c.devt().minor()))
    }
}

/// Frees the number of device `id` if the device is deleted and its server gone.
///
/// Called with the table locked, which is how numbers are handed out: once a caller saw the number
/// free, no command can find the old device by it. The entry holds no `/dev/ublkcN` and its
/// device is stopped, so dropping it here waits for nothing that needs this lock.
fn release(devices: &mut RBTree<u32, Entry>, id: u32) {
    if devices.get(&id).is_some_and(Entry::is_released) {
        drop(devices.remove(&id));
    }
}

/// The file operations of `/dev/ublk-control`.
pub(crate) struct ControlFile;

#[vtable]
impl MiscDevice for ControlFile {
    type Ptr = Arc<Control>;
    type RegistrationData = Arc<Control>;

    // Commands come through io_uring only: the file is not seekable, so `pread`, `pwrite` and
    // `lseek` fail with `ESPIPE`, as user space knows from ublk_drv.
    const NONSEEKABLE: bool = true;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Arc<Control>> {
        // Commands only come through an open file: the parent is known before the first
        // `UBLK_U_CMD_ADD_DEV`. Opens that race with the first wait for it on the lock; later
        // ones find it set.
        let mut parent = misc.data().parent.lock();
        if parent.is_none() {
            *parent = Some(ARef::from(misc.device()));
        }
        drop(parent);
        Ok(misc.data().clone())
    }

    fn uring_cmd<'a>(
        ctl: ArcBorrow<'_, Control>,
        cmd: IoUringCmd<'a, MiscCmdFile<Self>>,
        issue_flags: IssueFlags<'a>,
    ) -> Result<Issued<'a>> {
        handle(&ctl, &cmd, issue_flags).map(Issued::Done)
    }
}

/// Returns whether a command may sleep, and must thus not run where io_uring forbids blocking:
/// all but `UBLK_U_CMD_GET_FEATURES`. ublk_drv answers `UBLK_U_CMD_GET_DEV_INFO`,
/// `UBLK_U_CMD_GET_DEV_INFO2` and `UBLK_U_CMD_GET_QUEUE_AFFINITY` at once too, without a lock;
/// here they take the table's lock and the device's, which `UBLK_U_CMD_START_DEV` of a zoned
/// device holds while the server reports the zones: issued where io_uring forbids blocking,
/// under the ring lock of a server thread, they would keep that thread from delivering the
/// report, and wait for it.
fn may_sleep(op: u32) -> bool {
    uapi::ioc_nr(op) != uapi::CMD_GET_FEATURES
}

/// Returns a user space buffer of `len` bytes at `addr`.
pub(crate) fn user_buf(addr: u64, len: usize) -> Result<UserSlice> {
    let addr = usize::try_from(addr).map_err(|_| EFAULT)?;
    Ok(UserSlice::new(UserPtr::from_addr(addr), len))
}

/// Carries out a control command; returns the result it completes with.
fn handle(
    ctl: &Control,
    cmd: &IoUringCmd<'_, MiscCmdFile<ControlFile>>,
    issue_flags: IssueFlags<'_>,
) -> Result<u32> {
    let op = cmd.cmd_op();

    if may_sleep(op) && issue_flags.is_nonblock() {
        return Err(EAGAIN);
    }
    if !issue_flags.is_sqe128() {
        return Err(EINVAL);
    }

    let header = CtrlCmd::parse(&cmd.read_cmd::<[u8; uapi::CTRL_CMD_SIZE]>()?);

    // Legacy operation codes are the bare command numbers.
    if !uapi::is_ublk_op(op) {
        return Err(EOPNOTSUPP);
    }

    if op == uapi::U_CMD_GET_FEATURES {
        return get_features(&header).map(|()| 0);
    }

    let nr = uapi::ioc_nr(op);
    if nr == uapi::CMD_ADD_DEV {
        return add_dev(ctl, &header).map(|()| 0);
    }

    let dev = ctl.device(header.dev_id).ok_or(ENODEV)?;
    let header = unpriv::check_command(ctl, &dev, nr, header)?;

    if nr == uapi::CMD_REG_BUF {
        return shmem::reg_buf(&dev, &header);
    }
    match nr {
        // The path in front of the buffer of `UBLK_U_CMD_GET_DEV_INFO2` was checked and taken off.
        uapi::CMD_GET_DEV_INFO | uapi::CMD_GET_DEV_INFO2 => get_dev_info(&dev, &header),
        uapi::CMD_DEL_DEV => del_dev(ctl, &dev, true),
        uapi::CMD_DEL_DEV_ASYNC => del_dev(ctl, &dev, false),
        uapi::CMD_START_DEV => UblkDevice::start(&dev, header.data as i32),
        uapi::CMD_START_USER_RECOVERY => dev.start_recovery(),
        uapi::CMD_END_USER_RECOVERY => dev.end_recovery(header.data as i32),
        uapi::CMD_QUIESCE_DEV => UblkDevice::quiesce(&dev, header.data),
        uapi::CMD_UPDATE_SIZE => dev.update_size(header.data),
        uapi::CMD_TRY_STOP_DEV => UblkDevice::try_stop(&dev),
        uapi::CMD_STOP_DEV => {
            UblkDevice::stop(&dev);
            Ok(())
        }
        uapi::CMD_GET_QUEUE_AFFINITY => get_queue_affinity(&dev, &header),
        uapi::CMD_SET_PARAMS => set_params(&dev, &header),
        uapi::CMD_GET_PARAMS => get_params(ctl, &dev, &header),
        uapi::CMD_UNREG_BUF => shmem::unreg_buf(&dev, &header),
        _ => Err(EOPNOTSUPP),
    }
    .map(|()| 0)
}

/// `UBLK_U_CMD_GET_FEATURES`: reports the features the driver implements.
fn get_features(header: &CtrlCmd) -> Result {
    if usize::from(header.len) != uapi::FEATURES_LEN || header.addr == 0 {
        return Err(EINVAL);
    }
    user_buf(header.addr, uapi::FEATURES_LEN)?
        .writer()
        .write_slice(&F_ALL.to_ne_bytes())
}

/// Validates the flags and io descriptor size that user space asked for, before the flags that
/// the driver does not implement are cleared: an invalid combination fails even if clearing
/// would have made it valid, as it does with ublk_drv (`ublk_ctrl_add_dev()`).
fn check_requested_flags(info: &DevInfo) -> Result {
    let flags = info.flags;

    match flags & F_ALL_RECOVERY_FLAGS {
        0 => {}
        f if f == F_USER_RECOVERY
            || f == F_USER_RECOVERY | F_USER_RECOVERY_REISSUE
            || f == F_USER_RECOVERY | F_USER_RECOVERY_FAIL_IO => {}
        _ => return Err(EINVAL),
    }
    if flags & F_QUIESCE != 0 && flags & F_USER_RECOVERY == 0 {
        return Err(EINVAL);
    }
    // An unprivileged device gets no user recovery (cleared by the caller), nor any data path
    // where the server handles kernel buffers.
    if flags & F_UNPRIVILEGED_DEV != 0
        && flags & (F_USER_COPY | F_SUPPORT_ZERO_COPY | F_AUTO_BUF_REG) != 0
    {
        return Err(EINVAL);
    }
    if flags & F_INTEGRITY != 0 && flags & F_USER_COPY == 0 {
        return Err(EINVAL);
    }
    if flags & F_IO_DESC_SIZE != 0 {
        let size = usize::from(info.io_desc_size);
        if size < uapi::IO_DESC_SIZE || size % 8 != 0 || info.io_desc_size > MAX_IO_DESC_SIZE {
            return Err(EINVAL);
        }
    }
    Ok(())
}

/// `UBLK_U_CMD_ADD_DEV`: creates a device and its `/dev/ublkcN`.
fn add_dev(ctl: &Control, header: &CtrlCmd) -> Result {
    if usize::from(header.len) < uapi::DEV_INFO_SIZE || header.addr == 0 {
        return Err(EINVAL);
    }
    if header.queue_id != u16::MAX {
        return Err(EINVAL);
    }

    let ubuf = user_buf(header.addr, uapi::DEV_INFO_SIZE)?;
    let (mut reader, mut writer) = ubuf.reader_writer();
    let mut bytes = [0u8; uapi::DEV_INFO_SIZE];
    reader.read_slice(&mut bytes)?;
    let mut info = DevInfo::parse(&bytes);

    if info.queue_depth == 0
        || info.queue_depth > uapi::MAX_QUEUE_DEPTH
        || info.nr_hw_queues == 0
        || info.nr_hw_queues > uapi::MAX_NR_QUEUES
    {
        return Err(EINVAL);
    }

    // A privileged caller gets a privileged device whatever it asks for; others must ask for an
    // unprivileged one (`EPERM`). ublk_drv does the same; tools written against it expect it.
    if capable(Capability::SYS_ADMIN) {
        info.flags &= !F_UNPRIVILEGED_DEV;
    } else if info.flags & F_UNPRIVILEGED_DEV == 0 {
        return Err(EPERM);
    }
    check_requested_flags(&info)?;
    if info.flags & F_UNPRIVILEGED_DEV != 0 {
        // Its requests would wait for a new server, which the owner may never start.
        info.flags &= !(F_USER_RECOVERY | F_USER_RECOVERY_REISSUE);
    }

    if header.dev_id != info.dev_id {
        return Err(EINVAL);
    }
    if header.dev_id != u32::MAX && header.dev_id >= MAX_UBLKS {
        return Err(EINVAL);
    }

    // The device gets what it will really have: only the supported flags, io descriptors of the
    // size asked for with `UBLK_F_IO_DESC_SIZE` (checked above) or else the default, at most one
    // queue per CPU, whole pages of I/O buffer.
    info.flags = (info.flags & F_ALL) | F_ALWAYS;
    if info.flags & F_NO_GET_DATA != 0 {
        info.flags &= !F_NEED_GET_DATA;
    }
    if info.flags & F_BATCH_IO != 0 {
        info.flags &= !F_NOT_WITH_BATCH_IO;
    }
    if info.flags & F_IO_DESC_SIZE == 0 {
        info.io_desc_size = uapi::IO_DESC_SIZE as u16;
    }
    info.state = uapi::S_DEV_DEAD;
    info.ublksrv_pid = -1;
    let owner = Owner::current();
    info.owner_uid = owner.uid;
    info.owner_gid = owner.gid;
    let nr_cpus = u16::try_from(nr_cpu_ids()).unwrap_or(u16::MAX);
    info.nr_hw_queues = info.nr_hw_queues.min(nr_cpus);
    info.max_io_buf_bytes &= !(kernel::page::PAGE_SIZE as u32 - 1);

    let mut devices = ctl.devices.lock();
    if info.flags & F_UNPRIVILEGED_DEV != 0 && unprivileged_devices(&devices) >= ublks_max() {
        return Err(EACCES);
    }
    let id = if header.dev_id == u32::MAX {
        // The lowest free number.
        let mut id = 0;
        loop {
            release(&mut devices, id);
            if devices.get(&id).is_none() {
                break;
            }
            id += 1;
        }
        if id >= MAX_UBLKS {
            return Err(ENOSPC);
        }
        id
    } else {
        release(&mut devices, header.dev_id);
        if devices.get(&header.dev_id).is_some() {
            return Err(EEXIST);
        }
        header.dev_id
    };
    info.dev_id = id;

    // The commit of a zone append says where its data landed in `addr`, which only user copy
    // and zero copy leave free. Checked once the number is found, so that a number that is
    // taken or a lack of numbers fails first, with the errno that ublk_drv gives.
    if info.flags & F_ZONED != 0
        && (!cfg!(CONFIG_BLK_DEV_ZONED) || info.flags & (F_USER_COPY | F_SUPPORT_ZERO_COPY) == 0)
    {
        return Err(EINVAL);
    }

    let dev = UblkDevice::new(info, ctl.releases.clone())?;
    writer.write_slice(&info.to_bytes())?;
    // The table's node is allocated before `/dev/ublkcN` appears: once a server may open it,
    // the device is in the table, where `UBLK_U_CMD_DEL_DEV` finds it.
    let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
    let char_dev = Some(chardev::register(ctl, dev.clone())?);
    devices.insert(node.into_node(id, Entry { dev, char_dev }));
    Ok(())
}

/// Returns how many unprivileged devices there may be (the module parameter `ublks_max`).
fn ublks_max() -> u32 {
    crate::module_parameters::ublks_max.value()
}

/// Checks the module parameters, which are set at load time only: at most as many unprivileged
/// devices as there are device numbers, since a higher limit could never be reached.
fn check_module_parameters() -> Result {
    if ublks_max() > MAX_UBLKS {
        pr_err!("ublks_max {} is above {}\n", ublks_max(), MAX_UBLKS);
        return Err(EINVAL);
    }
    Ok(())
}

/// Returns how many unprivileged devices there are, not counting deleted ones whose server did
/// not close `/dev/ublkcN` yet: the count that the `ublks_max` module parameter bounds.
fn unprivileged_devices(devices: &RBTree<u32, Entry>) -> u32 {
    let n = devices
        .values()
        .filter(|e| e.char_dev.is_some() && e.dev.flags & F_UNPRIVILEGED_DEV != 0)
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `UBLK_U_CMD_DEL_DEV` (`wait`) and `UBLK_U_CMD_DEL_DEV_ASYNC`: deletes a device.
///
/// Stops the device and removes `/dev/ublkcN`. The device number stays taken until the server
/// closed `/dev/ublkcN` and it was released; `UBLK_U_CMD_DEL_DEV` waits for that, so that the
/// number is free when it returns. Deleting a deleted device succeeds: a server deletes its device
/// when it exits, and may race with the tool that deleted it (see `Entry`).
fn del_dev(ctl: &Control, dev: &Arc<UblkDevice>, wait: bool) -> Result {
    // From now on no server attaches (`open` refuses a deleted device under the device lock), and
    // no `UBLK_U_CMD_START_DEV` makes the device live again, which the stop below could not undo:
    // one that waits for a server gives up.
    dev.state.lock().mark_deleted();
    dev.ready.notify_all();
    UblkDevice::stop(dev);
    {
        let mut devices = ctl.devices.lock();
        let char_dev = devices
            .get_mut(&dev.id)
            .filter(|e| Arc::ptr_eq(&e.dev, dev))
            .and_then(|e| e.char_dev.take());
        // The device is marked deleted: a lookup that sees the entry without `/dev/ublkcN` knows
        // that no server can still attach (an `open` that took the device lock first attached its
        // server, which the lookup sees). Removed under the table lock, so that a new device
        // cannot take the number, hence the minor number, before the old one is removed.
        drop(char_dev);
    }
    if wait {
        dev.wait_released(true)?;
    }
    // A device that took the number since is not released, and stays.
    release(&mut ctl.devices.lock(), dev.id);
    Ok(())
}

fn copy_dev_info(dev: &UblkDevice, addr: u64, len: u16) -> Result {
    if usize::from(len) < uapi::DEV_INFO_SIZE || addr == 0 {
        return Err(EINVAL);
    }
    let info = dev.state.lock().info();
    user_buf(addr, uapi::DEV_INFO_SIZE)?
        .writer()
        .write_slice(&info.to_bytes())
}

/// `UBLK_U_CMD_GET_DEV_INFO`: reports the device information.
fn get_dev_info(dev: &UblkDevice, header: &CtrlCmd) -> Result {
    copy_dev_info(dev, header.addr, header.len)
}

/// `UBLK_U_CMD_GET_QUEUE_AFFINITY`: reports the CPUs that submit I/O to a queue, as a CPU mask
/// of `header.len` bytes.
fn get_queue_affinity(dev: &UblkDevice, header: &CtrlCmd) -> Result {
    let len = usize::from(header.len);
    if len * 8 < nr_cpu_ids() as usize || len % size_of::<u64>() != 0 || header.addr == 0 {
        return Err(EINVAL);
    }
    if header.data >= u64::from(dev.nr_queues()) {
        return Err(EINVAL);
    }
    let queue = header.data as u32;

    let mut words = KVec::from_elem(0u64, len / size_of::<u64>(), GFP_KERNEL)?;
    for cpu in (0..nr_cpu_ids()).filter_map(CpuId::from_u32) {
        if dev.tag_set.hw_queue_of_cpu(cpu) == queue {
            let i = cpu.as_u32() as usize;
            words[i / 64] |= 1 << (i % 64);
        }
    }
    let mut bytes = KVec::with_capacity(len, GFP_KERNEL)?;
    for w in words.iter() {
        bytes.extend_from_slice(&w.to_ne_bytes(), GFP_KERNEL)?;
    }
    user_buf(header.addr, len)?.writer().write_slice(&bytes)
}

/// Reads the `struct ublk_params_header` at the start of the buffer of a parameter command and
/// returns the number of bytes of parameters to copy.
fn params_len(header: &CtrlCmd, set: bool) -> Result<usize> {
    if usize::from(header.len) <= params::HEADER_SIZE || header.addr == 0 {
        return Err(EINVAL);
    }
    let mut ph = [0u8; params::HEADER_SIZE];
    user_buf(header.addr, ph.len())?
        .reader()
        .read_slice(&mut ph)?;
    let len = params::header_len(&ph);
    if len > u32::from(header.len) || len == 0 || (set && params::header_types(&ph) == 0) {
        return Err(EINVAL);
    }
    Ok((len as usize).min(uapi::PARAMS_SIZE))
}

/// `UBLK_U_CMD_SET_PARAMS`: sets the parameters of a device that was not started yet.
fn set_params(dev: &UblkDevice, header: &CtrlCmd) -> Result {
    let len = params_len(header, true)?;
    // Read before taking the device lock, which is not held across copies from or to user
    // memory: a fault there may sleep on the mmap lock for as long as another thread of the
    // server holds it.
    let mut bytes = [0u8; uapi::PARAMS_SIZE];
    let read = user_buf(header.addr, len)?
        .reader()
        .read_slice(&mut bytes[..len]);
    let mut state = dev.state.lock();
    if state.disk().is_some() {
        return Err(EACCES);
    }
    if let Err(e) = read {
        state.params.clear();
        return Err(e);
    }
    let max_io_buf_bytes = state.info.max_io_buf_bytes;
    state.params.set(&bytes[..len], max_io_buf_bytes, dev.flags)
}

/// `UBLK_U_CMD_GET_PARAMS`: reports the parameters, with the device numbers.
fn get_params(ctl: &Control, dev: &UblkDevice, header: &CtrlCmd) -> Result {
    let len = params_len(header, false)?;
    // The number that `/dev/ublkcN` has, or had once the device is deleted: minor `N`.
    let char_devt = ctl
        .region
        .devt(dev.id)
        .map_or((0, 0), |d| (d.major(), d.minor()));
    let disk_devt = dev.disk_devt();
    let params = dev.state.lock().params.with_devt(char_devt, disk_devt);
    user_buf(header.addr, len)?
        .writer()
        .write_slice(&params.as_bytes()[..len])
}
