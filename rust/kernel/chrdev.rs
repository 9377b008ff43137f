// SPDX-License-Identifier: GPL-2.0

//! Character devices in a region of device numbers of their own, in a device class.
//!
//! Most drivers should use [`crate::miscdevice`]. This module is for a driver whose UAPI is a
//! device class, with device numbers that the driver chooses in a region of its own and reports
//! to user space: each device is a [`Registration`], a `struct device` of the class with its
//! `struct cdev`, whose file operations are those of a [`MiscDevice`] implementation but `open`,
//! which is [`CharDevice::open`].
//!
//! C headers: [`include/linux/cdev.h`](srctree/include/linux/cdev.h),
//! [`include/linux/fs.h`](srctree/include/linux/fs.h),
//! [`include/linux/device/class.h`](srctree/include/linux/device/class.h).

use crate::{
    bindings,
    device::Device,
    error::to_result,
    fs::File,
    miscdevice::{MiscDevice, MiscdeviceVTable},
    module::this_module,
    prelude::*,
    sync::Arc,
    types::{ForeignOwnable, Opaque},
};
use core::{marker::PhantomData, ptr::NonNull};

/// A device number (`dev_t`): a major and a minor number.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct DevT(bindings::dev_t);

impl DevT {
    /// The device number of `major` and `minor`; `minor` is truncated to `MINORBITS` bits, and
    /// `major` to the bits left.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self(major.wrapping_shl(bindings::MINORBITS) | (minor & bindings::MINORMASK))
    }

    /// The major number.
    pub const fn major(self) -> u32 {
        self.0 >> bindings::MINORBITS
    }

    /// The minor number.
    pub const fn minor(self) -> u32 {
        self.0 & bindings::MINORMASK
    }

    /// The `dev_t` value.
    pub const fn as_raw(self) -> bindings::dev_t {
        self.0
    }
}

/// A region of character device numbers with a dynamically allocated major number.
///
/// # Invariants
///
/// The `count` numbers from `first` are registered as a char device region until the region is
/// dropped.
pub struct Region {
    first: DevT,
    count: u32,
}

impl Region {
    /// Allocates a region of `count` minor numbers from 0, named `name` in `/proc/devices`.
    ///
    /// An empty region is `EINVAL`: it could not be given back.
    pub fn alloc(count: u32, name: &'static CStr) -> Result<Self> {
        if count == 0 {
            return Err(EINVAL);
        }
        let mut first: bindings::dev_t = 0;
        // SAFETY: `first` is valid for writes and `name` is a NUL-terminated string that outlives
        // the region.
        to_result(unsafe {
            bindings::alloc_chrdev_region(&mut first, 0, count, name.as_char_ptr())
        })?;
        // INVARIANT: `alloc_chrdev_region` registered `count` numbers from `first`.
        Ok(Self {
            first: DevT(first),
            count,
        })
    }

    /// The major number of the region.
    pub fn major(&self) -> u32 {
        self.first.major()
    }

    /// The device number of `minor`, if the region has it.
    pub fn devt(&self, minor: u32) -> Option<DevT> {
        (minor < self.count).then(|| DevT::new(self.first.major(), self.first.minor() + minor))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: By the type invariants, the numbers are registered as a region.
        unsafe { bindings::unregister_chrdev_region(self.first.as_raw(), self.count) };
    }
}

/// A device class, to be registered with a [`ClassRegistration`].
///
/// Meant for a `static`, so that the class outlives every device of it, whose release may come
/// after the class was unregistered.
///
/// # Examples
///
/// ```
/// use kernel::chrdev::Class;
///
/// static MY_CLASS: Class = Class::new(c"my-class");
/// ```
pub struct Class(bindings::class);

// SAFETY: A class is only read, by the driver core, which takes its own locks.
unsafe impl Sync for Class {}

impl Class {
    /// A class named `name` (`/sys/class/<name>`).
    pub const fn new(name: &'static CStr) -> Self {
        Self(bindings::class {
            name: crate::str::as_char_ptr_in_const_context(name),
            ..pin_init::zeroed()
        })
    }
}

/// A registered device class.
///
/// # Invariants
///
/// `class` is registered until this is dropped.
pub struct ClassRegistration {
    class: &'static Class,
}

impl ClassRegistration {
    /// Registers `class`.
    pub fn new(class: &'static Class) -> Result<Self> {
        // SAFETY: `class` is a valid class that lives forever.
        to_result(unsafe { bindings::class_register(&class.0) })?;
        // INVARIANT: The class was registered above.
        Ok(Self { class })
    }
}

impl Drop for ClassRegistration {
    fn drop(&mut self) {
        // SAFETY: By the type invariants, the class is registered.
        unsafe { bindings::class_unregister(&self.class.0) };
    }
}

/// A character device of a [`Registration`].
///
/// Its file operations are those of its [`MiscDevice`] implementation (whose `open` it need not
/// implement), but `open`.
pub trait CharDevice: MiscDevice {
    /// Called when the device is opened, with the data of its registration.
    ///
    /// The returned pointer is stored as the private data of the file.
    ///
    /// It can be called after the [`Registration`] was dropped, with a file that was looked up
    /// before: a device that must refuse to be opened once it is gone checks its own state.
    fn open(file: &File, data: &Self::RegistrationData) -> Result<Self::Ptr>;
}

/// The `struct device` and the `struct cdev` of a [`Registration`], with its data.
///
/// Freed by the release of `dev`, which `cdev` holds a reference to while it is in use.
#[repr(C)]
struct Inner<T: CharDevice> {
    dev: Opaque<bindings::device>,
    cdev: Opaque<bindings::cdev>,
    data: T::RegistrationData,
}

/// A character device: a device of a class, with a number of a region, and its `/dev` node.
///
/// The data of the registration lives until the device is released: after the registration was
/// dropped, open files of the device keep it.
///
/// # Invariants
///
/// `inner` points to an [`Inner`] whose `dev` is added to the system with `cdev`, and this
/// registration owns a reference to `dev`. `region` has the device number of `dev`, and `class`
/// is the class of `dev`.
pub struct Registration<T: CharDevice> {
    inner: NonNull<Inner<T>>,
    _region: Arc<Region>,
    _class: Arc<ClassRegistration>,
}

// SAFETY: The registration only gives access to `T::RegistrationData`, which is `Send`, and to the
// device, which can be used from any thread.
unsafe impl<T: CharDevice> Send for Registration<T> {}

// SAFETY: The registration only gives access to `T::RegistrationData`, which is `Sync`, and to the
// device, which can be used from any thread.
unsafe impl<T: CharDevice> Sync for Registration<T> {}

impl<T: CharDevice> Registration<T> {
    /// Adds the device `name` of `class`, with minor number `minor` of `region`, below `parent`.
    ///
    /// The region and the class stay registered at least as long as the registration.
    pub fn register(
        region: &Arc<Region>,
        minor: u32,
        class: &Arc<ClassRegistration>,
        parent: Option<&Device>,
        name: &CStr,
        data: T::RegistrationData,
    ) -> Result<Self> {
        let devt = region.devt(minor).ok_or(EINVAL)?;
        let inner = KBox::into_raw(KBox::new(
            Inner::<T> {
                dev: Opaque::zeroed(),
                cdev: Opaque::zeroed(),
                data,
            },
            GFP_KERNEL,
        )?);
        // SAFETY: `inner` is valid, and nobody else has it.
        let (dev, cdev) = unsafe { ((*inner).dev.get(), (*inner).cdev.get()) };
        // SAFETY: `dev` is a zeroed `struct device`, not yet initialized, that nobody else uses.
        // The class lives forever, and `parent` is a valid device, which `device_add()` takes a
        // reference to. The release function frees `inner`, which was allocated above.
        unsafe {
            (*dev).devt = devt.as_raw();
            (*dev).class = &class.class.0;
            (*dev).parent = parent.map_or(core::ptr::null_mut(), Device::as_raw);
            (*dev).release = Some(Self::release_device);
            bindings::device_initialize(dev);
        }
        // From here on, the reference to `dev` owns `inner`: it is freed by dropping it.
        // SAFETY: `dev` is initialized; the format takes one string, `name`.
        let ret = unsafe { bindings::dev_set_name(dev, c"%s".as_char_ptr(), name.as_char_ptr()) };
        if ret == 0 {
            // SAFETY: `cdev` is zeroed, and `VTABLE` lives forever. The cdev holds the module
            // while it is in use, its last put included, which releases `dev`: the release
            // function is code of the module.
            unsafe {
                bindings::cdev_init(cdev, CharDevVTable::<T>::build());
                (*cdev).owner = this_module::<T::OwnerModule>().as_ptr();
            }
            // SAFETY: `cdev` and `dev` are initialized, and `dev` has a name and a device number.
            let ret = unsafe { bindings::cdev_device_add(cdev, dev) };
            if ret == 0 {
                // INVARIANT: `dev` was added with `cdev`, and the reference from
                // `device_initialize()` is ours. `dev` has a number of `region`, in `class`.
                return Ok(Self {
                    // SAFETY: `inner` comes from `KBox::into_raw`, which is never null.
                    inner: unsafe { NonNull::new_unchecked(inner) },
                    _region: region.clone(),
                    _class: class.clone(),
                });
            }
        }
        // SAFETY: The reference from `device_initialize()` is ours; dropping it frees `inner`.
        unsafe { bindings::put_device(dev) };
        Err(Error::from_errno(ret))
    }

    /// The data of the registration.
    pub fn data(&self) -> &T::RegistrationData {
        // SAFETY: By the type invariants, `inner` is valid while we hold our reference to `dev`.
        unsafe { &self.inner.as_ref().data }
    }

    /// The device number.
    pub fn devt(&self) -> DevT {
        // SAFETY: By the type invariants, `inner` is valid, and the device number of `dev` does
        // not change once the device is added.
        DevT(unsafe { (*self.inner.as_ref().dev.get()).devt })
    }

    /// The `struct device` of the character device.
    pub fn device(&self) -> &Device {
        // SAFETY: By the type invariants, `dev` is a valid device, while we hold our reference.
        unsafe { Device::from_raw(self.inner.as_ref().dev.get()) }
    }

    /// Frees the [`Inner`] of `dev` when its last reference is dropped.
    ///
    /// # Safety
    ///
    /// `dev` is the `dev` of an [`Inner<T>`] allocated by [`Registration::register`], whose last
    /// reference was dropped.
    unsafe extern "C" fn release_device(dev: *mut bindings::device) {
        // `dev` is the first field of `Inner<T>`, a `#[repr(C)]` struct, and
        // `Opaque<bindings::device>` has the layout of a `struct device`.
        let inner = dev.cast::<Inner<T>>();
        // SAFETY: The caller guarantees that nobody uses `inner` any more; it was allocated with
        // `KBox`.
        drop(unsafe { KBox::from_raw(inner) });
    }
}

impl<T: CharDevice> Drop for Registration<T> {
    fn drop(&mut self) {
        // SAFETY: By the type invariants, `inner` is valid.
        let (dev, cdev) = unsafe {
            (
                self.inner.as_ref().dev.get(),
                self.inner.as_ref().cdev.get(),
            )
        };
        // SAFETY: By the type invariants, `dev` was added with `cdev` and the reference to `dev`
        // is ours. Open files hold references to `cdev`, which holds one to `dev`.
        unsafe {
            bindings::cdev_device_del(cdev, dev);
            bindings::put_device(dev);
        }
    }
}

/// The file operations of a [`Registration<T>`].
struct CharDevVTable<T: CharDevice>(PhantomData<T>);

impl<T: CharDevice> CharDevVTable<T> {
    /// # Safety
    ///
    /// `inode` and `file` are the inode and the file of a file that is being opened, and the inode
    /// is that of a [`Registration<T>`]'s device.
    unsafe extern "C" fn open(inode: *mut bindings::inode, raw_file: *mut bindings::file) -> c_int {
        // SAFETY: The pointers are valid and for a file being opened.
        let ret = unsafe { bindings::generic_file_open(inode, raw_file) };
        if ret != 0 {
            return ret;
        }
        if T::NONSEEKABLE {
            // It only clears mode bits, and cannot fail.
            //
            // SAFETY: The pointers are valid and for a file being opened, which is not published
            // in any file table yet: nothing else writes its mode.
            unsafe { bindings::nonseekable_open(inode, raw_file) };
        }
        // SAFETY: `chrdev_open()` set the inode's cdev, which is the `cdev` of an `Inner<T>`, and
        // holds a reference to it, hence to its `dev`, across this call: the `Inner<T>` is valid.
        let data = unsafe {
            let cdev = (*inode)
                .__bindgen_anon_5
                .i_cdev
                .cast::<Opaque<bindings::cdev>>();
            &(*crate::container_of!(cdev, Inner<T>, cdev)).data
        };
        // SAFETY:
        // * The underlying file is valid for (much longer than) the duration of `T::open`.
        // * There is no active fdget_pos region on the file on this thread.
        let file = unsafe { File::from_raw_file(raw_file) };
        match <T as CharDevice>::open(file, data) {
            Ok(ptr) => {
                // The other file operations, those of `MiscdeviceVTable<T>`, read the private
                // data as a `T::Ptr`.
                // SAFETY: The open call of a file can access the private data.
                unsafe { (*raw_file).private_data = ptr.into_foreign() };
                0
            }
            Err(err) => err.to_errno(),
        }
    }

    const VTABLE: bindings::file_operations = MiscdeviceVTable::<T>::file_operations(Self::open);

    const fn build() -> &'static bindings::file_operations {
        &Self::VTABLE
    }
}
