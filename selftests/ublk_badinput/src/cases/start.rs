//! Device state around START_DEV: the pid must be the server's, a device
//! starts once, its parameters are fixed once started, no FETCH_REQ is
//! taken once every tag is fetched, and a zoned device's server may go away
//! while START_DEV reads its zones, answer it with no zone (the report
//! ends) or with fewer zones than asked (the driver asks for the rest).

use anyhow::{bail, Result};
use io_uring::squeue;
use libc::{EACCES, EBUSY, EEXIST, EINVAL, EIO, ENODEV};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};
use ublk_uapi::*;

use super::ctrl::basic_params;
use super::server::Server;
use super::{case, err, usercopy, Case, OK};
use crate::chardev::{io_sqe, io_sqe_result, map_descs_setup};
use crate::ctrl::{hdr, sqe128, with_buf, Ctrl};
use crate::env::{Dev, Env};
use crate::errno::show;
use crate::ring::{Got, Ring, PEEK, WAIT};

fn start_dev_pid_not_server(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.fetch(0)?;
    s.set_params(env)?;
    // pid 1 is init, not the process that opened /dev/ublkcN.
    s.start(env, 1)
}

/// START_DEV names the process that opened /dev/ublkcN, whichever process
/// fetches its tags: here a child, which inherited the char device, fetches
/// the one tag on a ring of its own (ublk_drv compares the pid with the
/// tgid of the opener).
fn start_dev_names_opener_when_child_fetches(env: &mut Env) -> Result<Got> {
    with_tag_fetched_by_child(env, |env, s, _| s.start(env, std::process::id() as u64))
}

/// As above, naming the child that fetched the tag: not the server.
fn start_dev_names_child_that_fetched(env: &mut Env) -> Result<Got> {
    with_tag_fetched_by_child(env, |env, s, child| s.start(env, child as u64))
}

/// Opens a one-tag device's char device with parameters set, lets a forked
/// child fetch its tag on a ring of its own, and runs `f` with the child's
/// pid while the child waits; kills the child after.
fn with_tag_fetched_by_child(
    env: &mut Env,
    f: impl FnOnce(&mut Env, &Server, libc::pid_t) -> Result<Got>,
) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.set_params(env)?;
    let (from_rd, from_wr) = pipe()?;
    // SAFETY: the cases run on one thread, so the child may allocate; it
    // leaves with _exit or a signal, never returning into this code or its
    // destructors.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("setup: fork: errno {}", crate::chardev::errno());
    }
    if pid == 0 {
        drop(from_rd);
        let fetched = fetch_on_own_ring(&mut s, 0);
        let b = if fetched { b"1" } else { b"0" };
        // SAFETY: writing a local byte to our pipe; then waiting, with the
        // fetch queued, for the parent's SIGKILL.
        unsafe {
            libc::write(from_wr.as_raw_fd(), b.as_ptr().cast(), 1);
            loop {
                libc::pause();
            }
        }
    }
    drop(from_wr);
    let mut b = [0u8];
    let fetched = read_within(&from_rd, &mut b) && b[0] == b'1';
    let got = if fetched {
        f(env, &s, pid)
    } else {
        Err(anyhow::anyhow!("setup: the child did not fetch the tag"))
    };
    let mut status = 0;
    // SAFETY: killing and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, &mut status, 0);
    }
    got
}

/// A server process whose fetch command io_uring cancelled (here the process
/// execs, which cancels its io_uring commands) leaves its tag without a
/// command, and no one may fetch that tag again before the next server: once
/// the other tags
/// are fetched, START_DEV fails with ENODEV instead of adding a disk whose
/// requests of that tag no one could serve (what "ublk: refuse to go live
/// over canceled io commands", in review for ublk_drv, makes it answer).
fn start_dev_after_fetch_cancelled(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 2)?;
    s.set_params(env)?;
    fetch_in_child_that_execs(&mut s, 0)?;
    s.fetch(1)?;
    s.start(env, std::process::id() as u64)
}

/// As above for END_USER_RECOVERY: the new server of a recovering device
/// loses a fetch command the same way, and the device stays quiesced.
fn end_recovery_after_fetch_cancelled(env: &mut Env) -> Result<Got> {
    let mut old = Server::with_flags(env, 2, UBLK_F_USER_RECOVERY)?;
    old.start_setup(env)?;
    let dev = old.dev;
    // The old server goes: the device is quiesced once its char device is
    // released.
    drop(old);
    wait_for_state(env, dev, UBLK_S_DEV_QUIESCED)?;
    // ublk_drv shows QUIESCED a moment before its release lets
    // START_USER_RECOVERY in (EBUSY until then).
    let start = Instant::now();
    loop {
        match env.ctrl.run(UBLK_U_CMD_START_USER_RECOVERY, &hdr(dev.id))? {
            Got::Res(0) => break,
            Got::Res(r) if r == -EBUSY && start.elapsed() < ANSWER_WAIT => {
                std::thread::sleep(Duration::from_millis(20))
            }
            got => bail!("setup: START_USER_RECOVERY got {}", show(got)),
        }
    }
    let mut s = Server::on(dev)?;
    fetch_in_child_that_execs(&mut s, 0)?;
    s.fetch(1)?;
    let mut h = hdr(dev.id);
    h.data[0] = std::process::id() as u64;
    // It waits for the fetches, on a ring of its own, as START_DEV does.
    let mut ring = Ring::<squeue::Entry128>::new()?;
    ring.run(
        sqe128(env.ctrl.fd(), UBLK_U_CMD_END_USER_RECOVERY, &h),
        WAIT,
    )
}

/// Waits up to [`ANSWER_WAIT`] for GET_DEV_INFO to report `state`.
fn wait_for_state(env: &mut Env, dev: Dev, state: u16) -> Result<()> {
    let start = Instant::now();
    loop {
        let info = dev_info(env, dev)?;
        if info.state == state {
            return Ok(());
        }
        if start.elapsed() > ANSWER_WAIT {
            bail!(
                "setup: device state {}, not {state}, after {ANSWER_WAIT:?}",
                info.state
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// In a forked child: fetches `tag` on a ring of the child's own, on the
/// char device it inherited (the parent's ring stays the parent's).
/// Whether that worked; a panic counts as no.
fn fetch_on_own_ring(s: &mut Server, tag: u16) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Ring::new().is_ok_and(|ring| {
            s.ring = ring;
            s.fetch(tag).is_ok()
        })
    }))
    .unwrap_or(false)
}

/// Lets a forked child, which inherited the char device, fetch `tag` on a
/// ring of its own and exec `/bin/true`: the exec cancels the child's
/// io_uring commands, and waits for them, before the new program runs (an
/// exit would leave the cancel to the ring's release, later). Returns once
/// the child is reaped.
fn fetch_in_child_that_execs(s: &mut Server, tag: u16) -> Result<()> {
    // SAFETY: the cases run on one thread, so the child may allocate; it
    // leaves with _exit, never returning into this code or its destructors.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("setup: fork: errno {}", crate::chardev::errno());
    }
    if pid == 0 {
        let fetched = fetch_on_own_ring(s, tag);
        if fetched {
            let prog = c"/bin/true";
            let argv = [prog.as_ptr(), std::ptr::null()];
            // SAFETY: a NUL-terminated path and argument vector of static
            // strings; on success this does not return.
            unsafe { libc::execv(prog.as_ptr(), argv.as_ptr()) };
        }
        // SAFETY: leaving at once, running no destructor.
        unsafe { libc::_exit(if fetched { 2 } else { 1 }) }
    }
    let mut status = 0;
    // SAFETY: reaping our own child, which exits on its own.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        bail!("setup: waitpid: errno {}", crate::chardev::errno());
    }
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => {}
        (true, 1) => bail!("setup: the child could not fetch tag {tag}"),
        (true, 2) => bail!("setup: the child could not exec /bin/true"),
        _ => bail!("setup: the child that fetched tag {tag} ended with wait status {status:#x}"),
    }
    Ok(())
}

/// The server runs in a pid namespace of its own, and START_DEV comes from
/// the parent namespace, naming the server by the number that namespace
/// gives it: the driver must translate that number before it compares it
/// with the server (ublk_drv compares `pid_nr(find_vpid(pid))` with the
/// global tgid of the server). GET_DEV_INFO then reports the server as each
/// reader's namespace numbers it: the parent's number here, 1 in the
/// server's own namespace.
fn start_dev_server_in_child_pid_namespace(env: &mut Env) -> Result<Got> {
    with_server_in_new_pid_ns(env, |env, dev, server| {
        match start_dev(env, dev, server.pid)? {
            Got::Res(0) => {}
            got => return Ok(got),
        }
        let seen = server_pid_in_info(env, dev)?;
        if seen != server.pid {
            bail!(
                "GET_DEV_INFO in the parent's pid namespace: ublksrv_pid {seen}, not {}",
                server.pid
            );
        }
        let seen = server.pid_in_its_own_info()?;
        if seen != 1 {
            bail!("GET_DEV_INFO in the server's pid namespace: ublksrv_pid {seen}, not 1");
        }
        Ok(Got::Res(0))
    })
}

/// As above, but START_DEV names the number the server has in its own pid
/// namespace (1), which is init in the caller's: not the server.
fn start_dev_server_own_pid_from_parent_namespace(env: &mut Env) -> Result<Got> {
    with_server_in_new_pid_ns(env, |env, dev, _| start_dev(env, dev, 1))
}

/// The server runs in the caller's pid namespace, and GET_DEV_INFO comes
/// from a child pid namespace, which cannot see it: the driver reports no
/// server (-1), as ublk_drv does (`task_tgid_vnr()` is 0 there).
fn get_dev_info_from_pid_namespace_without_server(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.start_setup(env)?;
    let seen = server_pid_in_info(env, s.dev)?;
    if seen != std::process::id() as i32 {
        bail!("GET_DEV_INFO in the server's pid namespace: ublksrv_pid {seen}, not ours");
    }
    let seen = pid_in_info_from_new_pid_ns(s.dev)?;
    if seen != -1 {
        bail!("GET_DEV_INFO in a child pid namespace: ublksrv_pid {seen}, not -1");
    }
    Ok(Got::Res(0))
}

/// The `ublksrv_pid` that GET_DEV_INFO of `dev` reports to a process that
/// is the first of a new pid namespace (`i32::MIN` if the command failed).
fn pid_in_info_from_new_pid_ns(dev: Dev) -> Result<i32> {
    let (from_rd, from_wr) = pipe()?;
    let pid = fork_into_new_pid_ns()?;
    if pid == 0 {
        drop(from_rd);
        let seen = std::panic::catch_unwind(|| {
            Ctrl::open()
                .and_then(|ctrl| server_pid_in_info(&mut Env::new(ctrl), dev))
                .unwrap_or(i32::MIN)
        })
        .unwrap_or(i32::MIN);
        let b = seen.to_ne_bytes();
        // SAFETY: writing a local buffer to our pipe, then leaving at once,
        // running no destructor.
        unsafe {
            libc::write(from_wr.as_raw_fd(), b.as_ptr().cast(), b.len());
            libc::_exit(0)
        }
    }
    drop(from_wr);
    let mut b = [0u8; 4];
    let answered = read_within(&from_rd, &mut b);
    let mut status = 0;
    // SAFETY: reaping our own child, which exits once it answered (killed
    // first in case it did not).
    unsafe {
        if !answered {
            libc::kill(pid, libc::SIGKILL);
        }
        libc::waitpid(pid, &mut status, 0);
    }
    if !answered {
        bail!("the reader in the new pid namespace did not answer within {ANSWER_WAIT:?}");
    }
    Ok(i32::from_ne_bytes(b))
}

/// START_DEV of `dev`, naming `pid` as the server, on a ring of its own.
fn start_dev(env: &Env, dev: Dev, pid: libc::pid_t) -> Result<Got> {
    let mut h = hdr(dev.id);
    h.data[0] = pid as u64;
    let mut ring = Ring::<squeue::Entry128>::new()?;
    ring.run(sqe128(env.ctrl.fd(), UBLK_U_CMD_START_DEV, &h), WAIT)
}

/// The `ublksrv_pid` that GET_DEV_INFO of `dev` reports on `ctrl`.
fn server_pid_in_info(env: &mut Env, dev: Dev) -> Result<i32> {
    Ok(dev_info(env, dev)?.ublksrv_pid)
}

/// What GET_DEV_INFO reports of `dev`.
fn dev_info(env: &mut Env, dev: Dev) -> Result<UblksrvCtrlDevInfo> {
    let mut info = UblksrvCtrlDevInfo::default();
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_GET_DEV_INFO, &with_buf(hdr(dev.id), &mut info))?;
    if r != 0 {
        bail!("GET_DEV_INFO failed: {}", show(Got::Res(r)));
    }
    Ok(info)
}

/// The server of a device, the first process of a pid namespace of its own:
/// it fetched the device's one tag, and answers requests of its parent.
struct NsServer {
    pid: libc::pid_t,
    /// Where the server says what it did.
    from: OwnedFd,
    /// Where the server is asked; its end lets the server go.
    to: OwnedFd,
}

impl NsServer {
    /// Asks the server for GET_DEV_INFO's `ublksrv_pid`, as it sees it.
    fn pid_in_its_own_info(&self) -> Result<i32> {
        // SAFETY: writing a local byte to our pipe.
        unsafe { libc::write(self.to.as_raw_fd(), b"i".as_ptr().cast(), 1) };
        let mut b = [0u8; 4];
        if !read_within(&self.from, &mut b) {
            bail!("the server did not answer within {ANSWER_WAIT:?}");
        }
        Ok(i32::from_ne_bytes(b))
    }
}

impl Drop for NsServer {
    fn drop(&mut self) {
        let mut status = 0;
        // SAFETY: killing and reaping our own child (which may be waiting
        // for a command that never completes); the pipes close after.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// How long the server in its own pid namespace may take to answer.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// Reads `buf.len()` bytes (at most a pipe's atomic write) from `fd`, if
/// they come within [`ANSWER_WAIT`].
fn read_within(fd: &OwnedFd, buf: &mut [u8]) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polling one descriptor we own, then reading into `buf`.
    unsafe {
        libc::poll(&mut pfd, 1, ANSWER_WAIT.as_millis() as libc::c_int) == 1
            && libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) == buf.len() as isize
    }
}

/// Adds a one-tag device with basic parameters whose server is the first
/// process of a new pid namespace, and runs `f` once it fetched the tag.
fn with_server_in_new_pid_ns(
    env: &mut Env,
    f: impl FnOnce(&mut Env, Dev, &NsServer) -> Result<Got>,
) -> Result<Got> {
    let dev = env.add(1, 1, 0)?;
    let mut p = basic_params();
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(dev.id), &mut p))?;
    if r != 0 {
        bail!("setup: SET_PARAMS failed: {}", show(Got::Res(r)));
    }
    let (from_rd, from_wr) = pipe()?;
    let (to_rd, to_wr) = pipe()?;
    let pid = fork_into_new_pid_ns()?;
    if pid == 0 {
        // The parent's ends, which the child must not keep open: it would
        // never see the end of `to`.
        drop(from_rd);
        drop(to_wr);
        serve_in_new_pid_ns(dev, from_wr, to_rd);
    }
    drop(from_wr);
    drop(to_rd);
    let server = NsServer {
        pid,
        from: from_rd,
        to: to_wr,
    };
    if !read_within(&server.from, &mut [0u8]) {
        bail!("setup: the server in the new pid namespace did not fetch");
    }
    f(env, dev, &server)
}

/// The child of [`with_server_in_new_pid_ns`]: opens /dev/ublkcN and
/// fetches the tag, says so on `to_parent`, answers the requests of
/// `from_parent` until its other end closes, and exits.
fn serve_in_new_pid_ns(dev: Dev, to_parent: OwnedFd, from_parent: OwnedFd) -> ! {
    let (to, from) = (to_parent.as_raw_fd(), from_parent.as_raw_fd());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Ok(mut s) = Server::on(dev) else {
            return;
        };
        if s.fetch(0).is_err() {
            return;
        }
        // SAFETY: writing a local byte to our pipe.
        unsafe { libc::write(to, b"1".as_ptr().cast(), 1) };
        let mut b = 0u8;
        // SAFETY: reading one byte into a local.
        while unsafe { libc::read(from, (&mut b as *mut u8).cast(), 1) } == 1 {
            let pid = Ctrl::open()
                .and_then(|ctrl| server_pid_in_info(&mut Env::new(ctrl), dev))
                .unwrap_or(i32::MIN);
            let b = pid.to_ne_bytes();
            // SAFETY: writing a local buffer to our pipe.
            unsafe { libc::write(to, b.as_ptr().cast(), b.len()) };
        }
        // The server's ring and char device close as the process exits.
        std::mem::forget(s);
    }));
    // SAFETY: leaving at once, running no destructor.
    unsafe { libc::_exit(0) }
}

/// Forks a child that is the first process of a new pid namespace: returns
/// its pid in the parent, 0 in the child, which must leave with `_exit`.
fn fork_into_new_pid_ns() -> Result<libc::pid_t> {
    // The cases run on one thread (as `child::run` requires too), so the
    // child is a copy of a single-threaded process.
    // SAFETY: a raw clone without a new stack is a fork (x86-64 argument
    // order); the caller's child leaves with _exit, never returning into
    // the caller's code or its destructors.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWPID | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        bail!(
            "setup: clone(CLONE_NEWPID): errno {}",
            crate::chardev::errno()
        );
    }
    // CAST: a pid.
    Ok(pid as libc::pid_t)
}

/// A pipe: (read end, write end), both close-on-exec.
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("setup: pipe2: errno {}", crate::chardev::errno());
    }
    // SAFETY: pipe2 returned two new descriptors, each owned once here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn start_dev_twice(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.start_setup(env)?;
    s.start(env, std::process::id() as u64)
}

fn set_params_on_started_device(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.start_setup(env)?;
    let mut p = basic_params();
    env.ctrl
        .run(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(s.dev.id), &mut p))
}

fn fetch_on_started_device(env: &mut Env) -> Result<Got> {
    let mut s = Server::new(env, 1)?;
    s.start_setup(env)?;
    let addr = s.buf.addr();
    s.cmd(UBLK_U_IO_FETCH_REQ, 0, 0, addr)
}

/// Sets zoned parameters (zones of 256 sectors) on `s`'s device and sends
/// START_DEV on a ring of its own: START_DEV reads the zones through the
/// server before it completes.
fn start_zoned(env: &mut Env, s: &Server) -> Result<(Ring<squeue::Entry128>, u64)> {
    let mut p = basic_params();
    p.types |= UBLK_PARAM_TYPE_ZONED;
    p.basic.chunk_sectors = 256;
    p.zoned.max_zone_append_sectors = 64;
    let r = env
        .ctrl
        .cmd(UBLK_U_CMD_SET_PARAMS, &with_buf(hdr(s.dev.id), &mut p))?;
    if r != 0 {
        bail!(
            "setup: SET_PARAMS of zoned parameters failed: {}",
            show(Got::Res(r))
        );
    }
    let mut h = hdr(s.dev.id);
    h.data[0] = std::process::id() as u64;
    let mut ctrl = Ring::<squeue::Entry128>::new()?;
    let start = ctrl.submit(sqe128(env.ctrl.fd(), UBLK_U_CMD_START_DEV, &h))?;
    Ok((ctrl, start))
}

/// Zones of a zoned device of [`start_zoned`]'s parameters.
const NR_ZONES: u32 = 2048 / 256;

/// A sequential, empty zone of 256 sectors at `start`, as `struct blk_zone`.
fn empty_zone(start: u64) -> [u8; 64] {
    let mut z = [0u8; 64];
    z[0..8].copy_from_slice(&start.to_ne_bytes()); // start
    z[8..16].copy_from_slice(&256u64.to_ne_bytes()); // len
    z[16..24].copy_from_slice(&start.to_ne_bytes()); // wp
    z[24] = 2; // type: BLK_ZONE_TYPE_SEQWRITE_REQ
    z[25] = 1; // cond: BLK_ZONE_COND_EMPTY
    z[32..40].copy_from_slice(&256u64.to_ne_bytes()); // capacity
    z
}

/// Serves START_DEV's reading of the zones of a zoned (user copy) device:
/// each report request gets the zones `answer` gives for its descriptor
/// (copied with pwrite; the driver zeroed the rest of the buffer, so fewer
/// than asked ends the answer), until START_DEV completes. More than `max`
/// report requests fails the case: the driver asked again for zones it was
/// answered (a driver that does so with a server that answers no zone asks
/// for ever, and START_DEV never completes).
fn serve_start_reports(
    env: &mut Env,
    max: u32,
    answer: impl Fn(&UblksrvIoDesc) -> Vec<[u8; 64]>,
) -> Result<Got> {
    let mut s = Server::with_flags(env, 2, UBLK_F_ZONED | UBLK_F_USER_COPY)?;
    let fd = s.file.as_raw_fd();
    let descs = map_descs_setup(fd, 2)?;
    // With user copy, commands name no buffer.
    let mut fetches = [
        s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 0, 0))?,
        s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 1, 0))?,
    ];
    let (mut ctrl, start) = start_zoned(env, &s)?;
    let deadline = Instant::now() + WAIT;
    let mut reports = 0;
    loop {
        if let got @ Got::Res(_) = ctrl.wait(start, Duration::ZERO)? {
            return Ok(got);
        }
        for (tag, fetch) in (0u16..).zip(fetches.iter_mut()) {
            match s.ring.wait(*fetch, Duration::from_millis(20))? {
                Got::Pending => continue,
                Got::Res(0) => {}
                got => bail!("a fetch of tag {tag} completed with {}", show(got)),
            }
            // SAFETY: the mapping holds the descriptors of both tags, which
            // the driver wrote before it completed the fetch.
            let desc = unsafe {
                std::ptr::read_volatile(descs.addr().cast::<UblksrvIoDesc>().add(usize::from(tag)))
            };
            if desc.op() != UBLK_IO_OP_REPORT_ZONES {
                // The disk was added: the partition scan's or udev's read,
                // left unanswered (the server's exit fails it) while
                // START_DEV completes.
                return ctrl.wait(start, WAIT);
            }
            reports += 1;
            if reports > max {
                bail!(
                    "the driver sent {reports} report requests, more than the {max} \
                     that the answers needed: it asked again for zones it was answered"
                );
            }
            let zones = answer(&desc).concat();
            // SAFETY: `zones` is valid for reads of its length.
            let r = unsafe {
                libc::pwrite(
                    fd,
                    zones.as_ptr().cast(),
                    zones.len(),
                    usercopy::pos(0, tag, 0),
                )
            };
            if r != zones.len() as isize {
                bail!("the pwrite of {} bytes of zones gave {r}", zones.len());
            }
            let sqe = io_sqe_result(
                fd,
                UBLK_U_IO_COMMIT_AND_FETCH_REQ,
                0,
                tag,
                0,
                zones.len() as i32,
            );
            *fetch = s.ring.submit(sqe)?;
        }
        if Instant::now() >= deadline {
            bail!(
                "START_DEV did not complete within {WAIT:?} ({reports} report requests answered)"
            );
        }
    }
}

/// A zoned device (user copy) whose server answers START_DEV's zone report
/// with no zone (nothing copied): START_DEV fails with ENODEV, the block
/// layer's "no zones reported", after that one request. An answer without
/// any zone ends the report: the C driver of 7.3.4 asked again from the same
/// sector for as long as the server answered, and START_DEV never completed
/// (patches/09).
fn start_dev_zoned_report_answered_empty(env: &mut Env) -> Result<Got> {
    serve_start_reports(env, 1, |_| Vec::new())
}

/// A zoned device (user copy) whose server answers each report request with
/// one zone, fewer than asked, as the UAPI allows ("to report fewer zones
/// than requested, zero the last entry"): the driver asks again from the
/// next zone, and START_DEV succeeds after one request per zone.
fn start_dev_zoned_report_one_zone_per_request(env: &mut Env) -> Result<Got> {
    serve_start_reports(env, NR_ZONES, |d| vec![empty_zone(d.start_sector)])
}

/// A zoned device (user copy) whose server goes away while it holds the
/// zone report that START_DEV's reading of the zones sent it: START_DEV
/// fails with the report's error, and the device can be deleted (the case's
/// cleanup). A driver that held a lock across the report that the server's
/// exit needs would hang here.
fn start_dev_zoned_server_exits_during_report(env: &mut Env) -> Result<Got> {
    // Two tags: the report takes one, the other's fetch stays queued, so that
    // the server's exit cancels a command before it releases the char device.
    let mut s = Server::with_flags(env, 2, UBLK_F_ZONED | UBLK_F_USER_COPY)?;
    let fd = s.file.as_raw_fd();
    // With user copy, commands name no buffer.
    let fetches = [
        s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 0, 0))?,
        s.ring.submit(io_sqe(fd, UBLK_U_IO_FETCH_REQ, 0, 1, 0))?,
    ];
    let (mut ctrl, start) = start_zoned(env, &s)?;
    // The report reaches the server through one of its fetches.
    let deadline = Instant::now() + WAIT;
    'report: loop {
        for &fetch in &fetches {
            match s.ring.wait(fetch, PEEK)? {
                Got::Res(0) => break 'report,
                Got::Pending => {}
                got => bail!("setup: a fetch completed with {}", show(got)),
            }
        }
        if Instant::now() >= deadline {
            bail!("setup: no request reached the server");
        }
    }
    // The server goes away: its ring, then its char device.
    drop(s);
    ctrl.wait(start, WAIT)
}

pub const CASES: &[Case] = &[
    case!(start_dev_pid_not_server, err(EINVAL)),
    case!(start_dev_server_in_child_pid_namespace, OK),
    case!(start_dev_server_own_pid_from_parent_namespace, err(EINVAL)),
    case!(get_dev_info_from_pid_namespace_without_server, OK),
    case!(start_dev_names_opener_when_child_fetches, OK),
    case!(start_dev_names_child_that_fetched, err(EINVAL)),
    case!(
        start_dev_after_fetch_cancelled,
        err(ENODEV),
        c_bug = (
            OK,
            "7.3.4 goes live over the cancelled fetch command, on queues that fail or set aside every request"
        )
    ),
    case!(
        end_recovery_after_fetch_cancelled,
        err(ENODEV),
        c_bug = (
            OK,
            "7.3.4 goes live over the cancelled fetch command, on queues that fail or set aside every request"
        )
    ),
    case!(start_dev_twice, err(EEXIST)),
    case!(set_params_on_started_device, err(EACCES)),
    case!(fetch_on_started_device, err(EBUSY)),
    case!(start_dev_zoned_server_exits_during_report, err(EIO)),
    case!(start_dev_zoned_report_answered_empty, err(ENODEV)),
    case!(start_dev_zoned_report_one_zone_per_request, OK),
];
