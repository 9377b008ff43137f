//! Devices that users without CAP_SYS_ADMIN create (UBLK_F_UNPRIVILEGED_DEV),
//! and the isolation between users: the owner's ids are recorded; every
//! control command of such a device names its char device, which the caller
//! must be allowed to read (and write, for a command that changes the
//! device); only the owner and root may open its disk; a request that
//! times out kills its server.
//!
//! Two users take part, OWNER and OTHER (uids 60001 and 60002, no passwd
//! entry needed), in forked children on the control fd root opened. The
//! char device nodes they name are made by root in /tmp (owner and mode as
//! a udev rule would set them), since /dev is not theirs to change.

use anyhow::{bail, Context, Result};
use io_uring::squeue;
use libc::{EACCES, EINVAL, ENOENT, EPERM};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};
use ublk_uapi::*;

use super::ctrl::{basic_params, PathBuf2};
use super::server::{disk_devt, open_disk, Answering, Server};
use super::{case, err, Case, OK};
use crate::chardev::{errno, io_sqe, wait_node};
use crate::child::{self, As};
use crate::ctrl::{hdr, sqe128, with_buf};
use crate::env::{dev_info, Dev, Env, ANY_ID};
use crate::ring::{Got, Ring, PEEK, WAIT};

const OWNER: u32 = 60001;
const OTHER: u32 = 60002;
const UNPRIV: u64 = UBLK_F_UNPRIVILEGED_DEV;

/// The bytes of a plain-old-data UAPI struct.
fn bytes_of<T: Copy>(t: &T) -> Vec<u8> {
    // SAFETY: the UAPI structs are plain old data without padding that
    // matters; their bytes are copied, not interpreted.
    unsafe { std::slice::from_raw_parts((t as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

/// ADD_DEV of a one-queue, one-tag device asking for `flags`, as `who`.
/// A device it creates is deleted after the case.
pub(super) fn add_as(env: &mut Env, who: As, flags: u64) -> Result<(Got, u32)> {
    let fd: RawFd = env.ctrl.fd();
    let (got, id) = child::run(who, move || {
        let mut ring = Ring::<squeue::Entry128>::new()?;
        let mut info = dev_info(1, 1, flags);
        let h = with_buf(hdr(ANY_ID), &mut info);
        let got = ring.run(sqe128(fd, UBLK_U_CMD_ADD_DEV, &h), WAIT)?;
        Ok((got, info.dev_id))
    })?;
    if matches!(got, Got::Res(r) if r >= 0) {
        env.created(id);
    }
    Ok((got, id))
}

/// An unprivileged device of OWNER (setup step).
fn owned(env: &mut Env) -> Result<Dev> {
    match add_as(env, As::User(OWNER), UNPRIV)? {
        (Got::Res(0), id) => {
            let info = info_of(env, id)?;
            if info.flags & UNPRIV == 0 || info.owner_uid != OWNER {
                bail!(
                    "setup: device {id} is not an unprivileged device of {OWNER}: flags {:#x}, \
                     owner {}",
                    info.flags,
                    info.owner_uid
                );
            }
            Ok(Dev { id, info })
        }
        (got, _) => bail!(
            "setup: ADD_DEV of an unprivileged device got {}",
            crate::errno::show(got)
        ),
    }
}

/// The device information of device `id`, as root reads it with
/// GET_DEV_INFO2 through /dev/ublkcN (setup step).
fn info_of(env: &mut Env, id: u32) -> Result<UblksrvCtrlDevInfo> {
    wait_node(id)?;
    let mut b = PathBuf2::new(&format!("/dev/ublkc{id}"));
    let h = b.hdr(id);
    let r = env.ctrl.cmd(UBLK_U_CMD_GET_DEV_INFO2, &h)?;
    if r != 0 {
        bail!("setup: GET_DEV_INFO2 of device {id} as root got {r}");
    }
    Ok(b.info())
}

/// A device node that root made in /tmp, removed on drop.
struct Node(String);

impl Node {
    /// A node of type `kind` (S_IFCHR, S_IFBLK) for `devt`, owned by user
    /// and group `owner`, with permissions `mode`.
    fn new(kind: libc::mode_t, devt: (u32, u32), owner: u32, mode: u32) -> Result<Self> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = format!("/tmp/ublk_badinput.{}.node{n}", std::process::id());
        let c = CString::new(path.clone())?;
        let _ = std::fs::remove_file(&path);
        // SAFETY: `c` is a valid C string; these calls have no other
        // preconditions.
        let ok = unsafe {
            libc::mknod(c.as_ptr(), kind | mode, libc::makedev(devt.0, devt.1)) == 0
                && libc::chown(c.as_ptr(), owner, owner) == 0
                && libc::chmod(c.as_ptr(), mode) == 0
        };
        let node = Node(path);
        if !ok {
            bail!("setup: making {}: errno {}", node.0, errno());
        }
        Ok(node)
    }

    /// A node for the char device of device `id`.
    fn char_dev(id: u32, owner: u32, mode: u32) -> Result<Self> {
        wait_node(id)?;
        let rdev = std::fs::metadata(format!("/dev/ublkc{id}"))
            .context("setup: stat of the char device")?
            .rdev();
        let devt = (libc::major(rdev), libc::minor(rdev));
        Self::new(libc::S_IFCHR, devt, owner, mode)
    }

    /// A node for the disk of device `id`, which everyone may open.
    fn disk(id: u32) -> Result<Self> {
        let devt = disk_devt(id).map_err(|e| anyhow::anyhow!("setup: no disk: {e}"))?;
        Self::new(libc::S_IFBLK, devt, 0, 0o666)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs control command `op` of device `id` as `who`, with a buffer of
/// `path` (NUL-terminated) followed by `payload`; `tweak` may change the
/// header afterwards.
fn cmd_as(
    env: &mut Env,
    who: As,
    op: u32,
    id: u32,
    path: &str,
    payload: &[u8],
    tweak: impl FnOnce(&mut UblksrvCtrlCmd),
) -> Result<Got> {
    let fd: RawFd = env.ctrl.fd();
    let mut buf = format!("{path}\0").into_bytes();
    let path_len = buf.len() as u16;
    buf.extend_from_slice(payload);
    let mut h = hdr(id);
    h.addr = buf.as_mut_ptr() as u64;
    h.len = buf.len() as u16;
    h.dev_path_len = path_len;
    tweak(&mut h);
    let (got, _) = child::run(who, move || {
        // `buf` lives here, in the child, which the header points into.
        let _buf = buf;
        let mut ring = Ring::<squeue::Entry128>::new()?;
        Ok((ring.run(sqe128(fd, op, &h), WAIT)?, ANY_ID))
    })?;
    Ok(got)
}

fn info_payload() -> Vec<u8> {
    bytes_of(&UblksrvCtrlDevInfo::default())
}

/// What a command's buffer holds after the path.
#[derive(Clone, Copy)]
enum Payload {
    None,
    Info,
    Params,
}

impl Payload {
    fn bytes(self) -> Vec<u8> {
        match self {
            Payload::None => Vec::new(),
            Payload::Info => info_payload(),
            Payload::Params => bytes_of(&basic_params()),
        }
    }
}

/// Runs control command `op` as `who` on a new unprivileged device of
/// OWNER, naming a node of its char device that OWNER owns, with
/// permissions `mode`.
fn on_own_node(env: &mut Env, who: As, op: u32, mode: u32, payload: Payload) -> Result<Got> {
    let dev = owned(env)?;
    let node = Node::char_dev(dev.id, OWNER, mode)?;
    cmd_as(env, who, op, dev.id, &node.0, &payload.bytes(), |_| {})
}

/// GET_DEV_INFO as OWNER on a new unprivileged device of OWNER, naming the
/// path that `path` gives for the device's number, or a node of its char
/// device that OWNER owns (mode 0600) if it gives none; `tweak` may change
/// the header afterwards.
fn get_info_as_owner(
    env: &mut Env,
    path: impl FnOnce(u32) -> Option<String>,
    tweak: impl FnOnce(&mut UblksrvCtrlCmd),
) -> Result<Got> {
    let dev = owned(env)?;
    let mut node = None;
    let path = match path(dev.id) {
        Some(p) => p,
        None => node.insert(Node::char_dev(dev.id, OWNER, 0o600)?).0.clone(),
    };
    let got = cmd_as(
        env,
        As::User(OWNER),
        UBLK_U_CMD_GET_DEV_INFO,
        dev.id,
        &path,
        &info_payload(),
        tweak,
    );
    drop(node);
    got
}

fn unpriv_dev_add(env: &mut Env) -> Result<Got> {
    let (got, id) = add_as(env, As::User(OWNER), UNPRIV)?;
    if got == OK {
        let info = info_of(env, id)?;
        if (info.owner_uid, info.owner_gid) != (OWNER, OWNER) || info.flags & UNPRIV == 0 {
            bail!(
                "device {id}: owner {}:{}, flags {:#x}; expected {OWNER}:{OWNER} and \
                 UBLK_F_UNPRIVILEGED_DEV",
                info.owner_uid,
                info.owner_gid,
                info.flags
            );
        }
    }
    Ok(got)
}

fn unpriv_dev_add_loses_user_recovery(env: &mut Env) -> Result<Got> {
    let flags = UNPRIV | UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
    let (got, id) = add_as(env, As::User(OWNER), flags)?;
    if got == OK {
        let info = info_of(env, id)?;
        let recovery = UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
        if info.flags & recovery != 0 {
            bail!("device {id} kept user recovery: flags {:#x}", info.flags);
        }
    }
    Ok(got)
}

fn unpriv_dev_add_zero_copy(env: &mut Env) -> Result<Got> {
    Ok(add_as(env, As::User(OWNER), UNPRIV | UBLK_F_SUPPORT_ZERO_COPY)?.0)
}

fn unpriv_dev_add_auto_buf_reg(env: &mut Env) -> Result<Got> {
    Ok(add_as(env, As::User(OWNER), UNPRIV | UBLK_F_AUTO_BUF_REG)?.0)
}

fn unpriv_add_bad_recovery_flags_without_unpriv(env: &mut Env) -> Result<Got> {
    // EPERM for the missing flag comes before the checks of the others.
    Ok(add_as(env, As::User(OWNER), UBLK_F_USER_RECOVERY_REISSUE)?.0)
}

fn unpriv_dev_add_bad_recovery_flags(env: &mut Env) -> Result<Got> {
    Ok(add_as(env, As::User(OWNER), UNPRIV | UBLK_F_USER_RECOVERY_REISSUE)?.0)
}

fn unpriv_dev_add_quiesce_without_recovery(env: &mut Env) -> Result<Got> {
    Ok(add_as(env, As::User(OWNER), UNPRIV | UBLK_F_QUIESCE)?.0)
}

fn unpriv_dev_add_quiesce_keeps_it(env: &mut Env) -> Result<Got> {
    // QUIESCE is checked against USER_RECOVERY before user recovery is
    // taken away, and stays.
    let flags = UNPRIV | UBLK_F_QUIESCE | UBLK_F_USER_RECOVERY;
    let (got, id) = add_as(env, As::User(OWNER), flags)?;
    if got == OK {
        let info = info_of(env, id)?;
        if info.flags & (UBLK_F_QUIESCE | UBLK_F_USER_RECOVERY) != UBLK_F_QUIESCE {
            bail!("device {id}: flags {:#x}", info.flags);
        }
    }
    Ok(got)
}

fn root_add_unpriv_user_copy(env: &mut Env) -> Result<Got> {
    // Root gets a privileged device whatever it asks for, so the
    // restrictions of unprivileged devices do not apply.
    let (got, id) = add_as(env, As::Same, UNPRIV | UBLK_F_USER_COPY)?;
    if got == OK {
        let info = info_of(env, id)?;
        if info.flags & UNPRIV != 0 || (info.owner_uid, info.owner_gid) != (0, 0) {
            bail!(
                "device {id}: flags {:#x}, owner {}:{}",
                info.flags,
                info.owner_uid,
                info.owner_gid
            );
        }
    }
    Ok(got)
}

fn unpriv_dev_over_ublks_max(env: &mut Env) -> Result<Got> {
    // Both drivers allow 64 unprivileged devices by default (ublks_max).
    for i in 0..64 {
        let (got, _) = add_as(env, As::User(OWNER), UNPRIV)?;
        if got != OK {
            bail!(
                "setup: unprivileged device {i} got {}",
                crate::errno::show(got)
            );
        }
    }
    Ok(add_as(env, As::User(OWNER), UNPRIV)?.0)
}

fn unpriv_dev_root_without_path(env: &mut Env) -> Result<Got> {
    let dev = owned(env)?;
    let mut info = UblksrvCtrlDevInfo::default();
    env.ctrl
        .run(UBLK_U_CMD_GET_DEV_INFO, &with_buf(hdr(dev.id), &mut info))
}

fn unpriv_dev_owner_without_path(env: &mut Env) -> Result<Got> {
    get_info_as_owner(env, |_| None, |h| h.dev_path_len = 0)
}

fn unpriv_dev_path_too_long(env: &mut Env) -> Result<Got> {
    get_info_as_owner(env, |_| Some(format!("/{}", "a".repeat(4096))), |_| {})
}

fn unpriv_dev_len_below_path(env: &mut Env) -> Result<Got> {
    get_info_as_owner(env, |_| None, |h| h.len = h.dev_path_len - 1)
}

fn unpriv_dev_path_missing(env: &mut Env) -> Result<Got> {
    get_info_as_owner(
        env,
        |_| Some(format!("/tmp/ublk_badinput.{}.none", std::process::id())),
        |_| {},
    )
}

fn unpriv_dev_path_not_a_ublk_node(env: &mut Env) -> Result<Got> {
    get_info_as_owner(env, |_| Some("/dev/null".into()), |_| {})
}

fn unpriv_dev_path_of_another_device(env: &mut Env) -> Result<Got> {
    // A node the caller may not access either: the device number is checked
    // first.
    let dev = owned(env)?;
    let other = owned(env)?;
    let node = Node::char_dev(other.id, OWNER, 0o000)?;
    cmd_as(
        env,
        As::User(OWNER),
        UBLK_U_CMD_GET_DEV_INFO,
        dev.id,
        &node.0,
        &info_payload(),
        |_| {},
    )
}

fn unpriv_dev_get_dev_info_owner(env: &mut Env) -> Result<Got> {
    on_own_node(
        env,
        As::User(OWNER),
        UBLK_U_CMD_GET_DEV_INFO,
        0o600,
        Payload::Info,
    )
}

fn unpriv_dev_get_dev_info2_owner(env: &mut Env) -> Result<Got> {
    on_own_node(
        env,
        As::User(OWNER),
        UBLK_U_CMD_GET_DEV_INFO2,
        0o600,
        Payload::Info,
    )
}

fn unpriv_dev_get_dev_info_other(env: &mut Env) -> Result<Got> {
    on_own_node(
        env,
        As::User(OTHER),
        UBLK_U_CMD_GET_DEV_INFO,
        0o600,
        Payload::Info,
    )
}

fn unpriv_dev_get_dev_info_root_node(env: &mut Env) -> Result<Got> {
    // /dev/ublkcN itself belongs to root, mode 0600.
    get_info_as_owner(env, |id| Some(format!("/dev/ublkc{id}")), |_| {})
}

fn unpriv_dev_get_params_read_only_node(env: &mut Env) -> Result<Got> {
    on_own_node(
        env,
        As::User(OWNER),
        UBLK_U_CMD_GET_PARAMS,
        0o400,
        Payload::Params,
    )
}

fn unpriv_dev_set_params_read_only_node(env: &mut Env) -> Result<Got> {
    on_own_node(
        env,
        As::User(OWNER),
        UBLK_U_CMD_SET_PARAMS,
        0o400,
        Payload::Params,
    )
}

fn unpriv_dev_set_params_owner(env: &mut Env) -> Result<Got> {
    on_own_node(
        env,
        As::User(OWNER),
        UBLK_U_CMD_SET_PARAMS,
        0o600,
        Payload::Params,
    )
}

fn unpriv_dev_set_params_other(env: &mut Env) -> Result<Got> {
    on_own_node(
        env,
        As::User(OTHER),
        UBLK_U_CMD_SET_PARAMS,
        0o644,
        Payload::Params,
    )
}

fn unpriv_dev_del_dev_async(env: &mut Env) -> Result<Got> {
    // Not a command that the permission check of unprivileged devices knows.
    on_own_node(
        env,
        As::User(OWNER),
        UBLK_U_CMD_DEL_DEV_ASYNC,
        0o600,
        Payload::None,
    )
}

fn unpriv_dev_del_dev_other(env: &mut Env) -> Result<Got> {
    on_own_node(
        env,
        As::User(OTHER),
        UBLK_U_CMD_DEL_DEV,
        0o600,
        Payload::None,
    )
}

fn unpriv_dev_del_dev_owner(env: &mut Env) -> Result<Got> {
    on_own_node(
        env,
        As::User(OWNER),
        UBLK_U_CMD_DEL_DEV,
        0o600,
        Payload::None,
    )
}

/// Opens the disk of an unprivileged device of OWNER, which root serves,
/// as `who`.
fn open_disk_as(env: &mut Env, who: As) -> Result<Got> {
    let dev = owned(env)?;
    let _server = Answering::start_on(env, dev)?;
    let node = Node::disk(dev.id)?;
    let path = node.0.clone();
    let (got, _) = child::run(who, move || {
        let r = match std::fs::File::open(&path) {
            Ok(_) => 0,
            Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
        };
        Ok((Got::Res(r), ANY_ID))
    })?;
    Ok(got)
}

fn unpriv_dev_open_disk_owner(env: &mut Env) -> Result<Got> {
    open_disk_as(env, As::User(OWNER))
}

fn unpriv_dev_open_disk_other(env: &mut Env) -> Result<Got> {
    open_disk_as(env, As::User(OTHER))
}

fn unpriv_dev_open_disk_root(env: &mut Env) -> Result<Got> {
    open_disk_as(env, As::Same)
}

/// How long the server of an unprivileged device may take to die: its
/// request times out after the default 30 s.
const KILL_WAIT: Duration = Duration::from_secs(60);

/// The server of [`timeout_kills`], a forked process that opens the char
/// device as root, fetches the only tag and never answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Serving {
    /// As root; the request is the partition scan's read.
    Root,
    /// Fetches as OWNER, so that the disk's partitions are not scanned;
    /// the request is a read that the case sends.
    AsOwner,
    /// As root; once the request arrived, a thread that is not the leader
    /// execs `sleep`, which keeps the char device open: the process to kill
    /// has a new leader and a new image.
    ExecAfterRequest,
}

/// The forked server of [`timeout_kills`]: reports on `ready` whether it
/// fetched, then waits to be killed.
fn serve_and_hang(dev: Dev, how: Serving, ready: RawFd) -> ! {
    let fetched = (|| -> Result<Server> {
        let mut s = Server::on(dev)?;
        if how == Serving::AsOwner {
            crate::child::drop_privileges(OWNER)?;
        }
        let fd = s.file.as_raw_fd();
        let addr = s.buf.addr();
        let token = s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 0, addr))?;
        if let Got::Res(r) = s.ring.wait(token, PEEK)? {
            bail!("FETCH_REQ completed with {r}");
        }
        // SAFETY: writing a byte to our pipe.
        unsafe { libc::write(ready, [1u8].as_ptr().cast(), 1) };
        if how == Serving::ExecAfterRequest {
            if s.ring.wait(token, KILL_WAIT)? != OK {
                bail!("no request arrived");
            }
            // SAFETY: clearing FD_CLOEXEC of our own char device fd, so
            // that the new image keeps it open.
            unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
            std::thread::spawn(|| {
                let prog = CString::new("/bin/sleep").unwrap();
                let arg = CString::new("600").unwrap();
                let argv = [prog.as_ptr(), arg.as_ptr(), std::ptr::null()];
                // SAFETY: a NUL-terminated argv of valid C strings.
                unsafe {
                    libc::execv(prog.as_ptr(), argv.as_ptr());
                    libc::_exit(3);
                }
            });
        }
        Ok(s)
    })();
    if fetched.is_err() {
        // SAFETY: telling the parent, then leaving at once.
        unsafe {
            libc::write(ready, [0u8].as_ptr().cast(), 1);
            libc::_exit(1);
        }
    }
    loop {
        // SAFETY: waiting for a signal.
        unsafe { libc::pause() };
    }
}

/// Starts an unprivileged device of OWNER served `how` by a forked process
/// that never answers, and waits for a request of the device to time out:
/// the driver must kill the server. OK if it died of SIGKILL (and a read
/// the case sent failed), queued if it still lived after [`KILL_WAIT`].
fn timeout_kills(env: &mut Env, how: Serving) -> Result<Got> {
    let dev = owned(env)?;
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("setup: pipe2: errno {}", errno());
    }
    // SAFETY: the test runs single-threaded, so the child may allocate; it
    // leaves with _exit, an exec, or a signal, never returning into our
    // code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("setup: fork: errno {}", errno());
    }
    if pid == 0 {
        serve_and_hang(dev, how, fds[1]);
    }
    // SAFETY: fds[0] is the read end we own; fds[1] is the child's.
    let mut rd = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    unsafe { libc::close(fds[1]) };
    let reap = |pid: libc::pid_t| {
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    };
    let mut b = [0u8; 1];
    if std::io::Read::read_exact(&mut rd, &mut b).is_err() || b[0] != 1 {
        reap(pid);
        bail!("setup: the server did not fetch");
    }
    // Root sends the control commands; the child is the server.
    let s = Server {
        ring: Ring::new()?,
        file: std::fs::File::open("/dev/null")?,
        buf: crate::chardev::IoBuf::new(),
        dev,
    };
    let started = s.set_params(env).and_then(|()| s.start(env, pid as u64));
    if !matches!(started, Ok(Got::Res(0))) {
        reap(pid);
        bail!("setup: START_DEV with the child as server: {started:?}");
    }
    let read = (how == Serving::AsOwner).then(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        let id = dev.id;
        std::thread::spawn(move || {
            let r = open_disk(id, std::fs::OpenOptions::new().read(true)).and_then(|mut f| {
                let mut buf = vec![0u8; 4096];
                std::io::Read::read_exact(&mut f, &mut buf)
                    .map_err(|e| -e.raw_os_error().unwrap_or(libc::EIO))
            });
            let _ = tx.send(r);
        });
        rx
    });
    let start = Instant::now();
    let status = loop {
        let mut status = 0;
        // SAFETY: polling our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break status;
        }
        if start.elapsed() > KILL_WAIT {
            reap(pid);
            return Ok(Got::Pending);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL) {
        bail!("the server ended otherwise than by SIGKILL: wait status {status:#x}");
    }
    if let Some(rx) = read {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Err(_)) => {}
            Ok(Ok(())) => bail!("the read of the hung request succeeded"),
            Err(_) => bail!("the read did not end after the server died"),
        }
    }
    Ok(OK)
}

fn unpriv_dev_timeout_kills_server(env: &mut Env) -> Result<Got> {
    timeout_kills(env, Serving::Root)
}

fn unpriv_dev_timeout_kills_unprivileged_server(env: &mut Env) -> Result<Got> {
    timeout_kills(env, Serving::AsOwner)
}

fn unpriv_dev_timeout_kills_server_after_exec(env: &mut Env) -> Result<Got> {
    timeout_kills(env, Serving::ExecAfterRequest)
}

pub const CASES: &[Case] = &[
    case!(unpriv_dev_add, OK, needs = UNPRIV),
    case!(unpriv_dev_add_loses_user_recovery, OK, needs = UNPRIV),
    case!(unpriv_dev_add_zero_copy, err(EINVAL), needs = UNPRIV),
    case!(unpriv_dev_add_auto_buf_reg, err(EINVAL), needs = UNPRIV),
    case!(
        unpriv_add_bad_recovery_flags_without_unpriv,
        err(EPERM),
        needs = UNPRIV
    ),
    case!(
        unpriv_dev_add_bad_recovery_flags,
        err(EINVAL),
        needs = UNPRIV
    ),
    case!(
        unpriv_dev_add_quiesce_without_recovery,
        err(EINVAL),
        needs = UNPRIV
    ),
    case!(unpriv_dev_add_quiesce_keeps_it, OK, needs = UNPRIV),
    case!(root_add_unpriv_user_copy, OK, needs = UNPRIV),
    case!(unpriv_dev_over_ublks_max, err(EACCES), needs = UNPRIV),
    case!(unpriv_dev_root_without_path, err(EINVAL), needs = UNPRIV),
    case!(unpriv_dev_owner_without_path, err(EINVAL), needs = UNPRIV),
    case!(unpriv_dev_path_too_long, err(EINVAL), needs = UNPRIV),
    case!(unpriv_dev_len_below_path, err(EINVAL), needs = UNPRIV),
    case!(unpriv_dev_path_missing, err(ENOENT), needs = UNPRIV),
    case!(unpriv_dev_path_not_a_ublk_node, err(EPERM), needs = UNPRIV),
    case!(
        unpriv_dev_path_of_another_device,
        err(EPERM),
        needs = UNPRIV
    ),
    case!(unpriv_dev_get_dev_info_owner, OK, needs = UNPRIV),
    case!(unpriv_dev_get_dev_info2_owner, OK, needs = UNPRIV),
    case!(unpriv_dev_get_dev_info_other, err(EACCES), needs = UNPRIV),
    case!(
        unpriv_dev_get_dev_info_root_node,
        err(EACCES),
        needs = UNPRIV
    ),
    case!(unpriv_dev_get_params_read_only_node, OK, needs = UNPRIV),
    case!(
        unpriv_dev_set_params_read_only_node,
        err(EACCES),
        needs = UNPRIV
    ),
    case!(unpriv_dev_set_params_owner, OK, needs = UNPRIV),
    case!(unpriv_dev_set_params_other, err(EACCES), needs = UNPRIV),
    case!(unpriv_dev_del_dev_async, err(EINVAL), needs = UNPRIV),
    case!(unpriv_dev_del_dev_other, err(EACCES), needs = UNPRIV),
    case!(unpriv_dev_del_dev_owner, OK, needs = UNPRIV),
    case!(unpriv_dev_open_disk_owner, OK, needs = UNPRIV),
    case!(unpriv_dev_open_disk_other, err(EPERM), needs = UNPRIV),
    case!(unpriv_dev_open_disk_root, OK, needs = UNPRIV),
    case!(unpriv_dev_timeout_kills_server, OK, needs = UNPRIV),
    case!(
        unpriv_dev_timeout_kills_unprivileged_server,
        OK,
        needs = UNPRIV
    ),
    case!(
        unpriv_dev_timeout_kills_server_after_exec,
        OK,
        needs = UNPRIV
    ),
];
