//! Child processes that die with ppol. ppol starts two kinds of untrusted processes, the
//! sandbox's generator programs (`generate::sandbox`) and the simulators of `external:` and
//! `tau2:` worlds (`simulate::world::external`); neither may outlive the run, whatever it forks.
//! Both start under a small supervisor, a fork of ppol that never execs, built from the pieces
//! here:
//!
//! - [`tie_to_parent`]: a session of its own (nothing of it is in ppol's process group or gets
//!   the terminal's signals) and a parent-death signal, so the supervisor ends when ppol does,
//!   `kill -9` included;
//! - [`pid_namespace_chain`] (generator programs, which run in a root and a `/tmp` of their
//!   own): supervisor → pid 1 of a new pid namespace → the program. When that init dies, the
//!   kernel kills every process of the namespace: daemons that left with `setsid` or a double
//!   fork included;
//! - [`Supervisor`] (simulators, which share the host's filesystem, where a pid namespace
//!   would give every one of them pid 2 and clash on pid-named files): the supervisor is a
//!   child subreaper (`PR_SET_CHILD_SUBREAPER`), so whatever the program forks and orphans is
//!   re-parented to it, and it kills that whole tree ([`kill_descendants`]) when the program
//!   ends, when ppol asks ([`Supervisor::stop`], `SIGTERM`) and when ppol dies (its
//!   parent-death signal, `SIGTERM` too, received even after `kill -9` of ppol).
//!
//! Everything that runs in a child runs between `fork` and `exec` of a multi-threaded process:
//! raw system calls only, on data prepared before the fork (no allocation, no locks).

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{Mode as FileMode, OFlags};
use rustix::process::{Pid, Signal, WaitOptions};

/// A raw error as an [`io::Error`] (keeps the errno).
pub fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// A step of a child: its error as an [`io::Error`] with the errno (what `pre_exec` reports).
pub fn step<T>(r: rustix::io::Result<T>) -> io::Result<T> {
    r.map_err(errno)
}

/// `fork` as a raw `clone(SIGCHLD)`: no `atfork` handlers, no libc locks (for a child of a
/// multi-threaded process, which forks again). `Ok(None)` in the new child.
pub fn fork_raw() -> io::Result<Option<Pid>> {
    // SAFETY: a plain `clone` with only `SIGCHLD` behaves like `fork`: the child gets a
    // copy-on-write copy of this (single-threaded) process and continues from this call on the
    // same stack. Both sides only make raw system calls afterwards, so glibc's stale thread
    // state in the child is never consulted.
    let r = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) };
    match r {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        pid => Ok(Pid::from_raw(pid as i32)),
    }
}

/// Leave at once with `code`, without running exit handlers.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` is async-signal-safe and does not return.
    unsafe { libc::_exit(code) }
}

/// Close every descriptor in `lo..=hi`.
pub fn close_range(lo: u32, hi: u32) {
    if lo > hi {
        return;
    }
    // SAFETY: `close_range` only closes descriptors; nothing in this process uses them again.
    // Without close_range (Linux < 5.9) the copies stay open until this process exits.
    unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0) };
}

/// Write `data` to `path` (opened with `flags`, created with `mode`) with raw calls.
pub fn write_file(path: &CStr, data: &[u8], flags: OFlags, mode: FileMode) -> io::Result<()> {
    let fd = step(rustix::fs::open(
        path,
        flags | OFlags::WRONLY | OFlags::CLOEXEC,
        mode,
    ))?;
    let mut rest = data;
    while !rest.is_empty() {
        match rustix::io::write(&fd, rest) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::EIO)),
            Ok(k) => rest = &rest[k..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(errno(e)),
        }
    }
    Ok(())
}

/// Wait for `pid` and return the exit code to pass on: its code, or 128 + the signal.
pub fn wait_for(pid: Pid) -> i32 {
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Ok(Some((_, status))) => return encode(status),
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return 127,
        }
    }
}

/// A wait status as an exit code: the code, or 128 + the signal.
pub fn encode(status: rustix::process::WaitStatus) -> i32 {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        _ => 127,
    }
}

/// The signal encoded in a supervisor's exit code (`128 + n`), if any.
pub fn decoded_signal(code: i32) -> Option<i32> {
    (129..128 + 65).contains(&code).then(|| code - 128)
}

/// SIGKILL to a process group (a group that is already gone is fine).
pub fn kill_group(pgid: u32) {
    if let Some(pid) = Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    }
}

/// In a child just forked from ppol (`parent`): drop ppol's private descriptors, start a
/// session of its own, and arrange to get `death` when ppol dies (exiting at once when it
/// already has).
pub fn tie_to_parent(parent: Pid, death: Signal) -> io::Result<()> {
    // First of all: a supervisor never execs, so ppol's private descriptors (the run lock)
    // would otherwise live on in it after ppol is gone.
    crate::child::close_private_fds();
    step(rustix::process::setsid())?;
    step(rustix::process::set_parent_process_death_signal(Some(
        death,
    )))?;
    if rustix::process::getppid() != Some(parent) {
        // ppol died between the fork and the line above: do not outlive it.
        exit_now(1);
    }
    Ok(())
}

/// In a supervisor that has just unshared a pid namespace: fork the namespace's init, which
/// runs `init_setup` and forks the program. Returns only in the program (to exec it); the
/// supervisor waits for the init and exits with its status, the init reaps every orphan of the
/// namespace and exits with the program's status (its code, or 128 + the signal). The init
/// dies with the supervisor, and the program with the init; when the init dies the kernel kills
/// everything left in the namespace.
pub fn pid_namespace_chain(init_setup: &dyn Fn() -> io::Result<()>) -> io::Result<()> {
    // The init checks through this pipe that the supervisor is still alive once its death
    // signal is armed (it cannot use getppid: its parent is outside its pid namespace).
    let (alive_r, alive_w) = step(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC))?;
    match fork_raw()? {
        None => {
            drop(alive_w);
            step(rustix::process::set_parent_process_death_signal(Some(
                Signal::KILL,
            )))?;
            let mut fds = [PollFd::new(&alive_r, PollFlags::IN)];
            let zero = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            if rustix::event::poll(&mut fds, Some(&zero)).is_ok()
                && fds[0].revents().contains(PollFlags::HUP)
            {
                exit_now(1);
            }
            drop(alive_r);
            init_setup()?;
            namespace_init()
        }
        Some(init) => {
            drop(alive_r);
            let keep = alive_w.as_fd().as_raw_fd() as u32;
            close_range(0, keep.saturating_sub(1));
            close_range(keep + 1, u32::MAX);
            exit_now(wait_for(init));
        }
    }
}

/// In the init (pid 1): fork the program, then reap every orphan until the program exits.
fn namespace_init() -> io::Result<()> {
    match fork_raw()? {
        None => {
            step(rustix::process::set_parent_process_death_signal(Some(
                Signal::KILL,
            )))?;
            if rustix::process::getppid().map(|p| p.as_raw_pid()) != Some(1) {
                exit_now(1);
            }
            Ok(())
        }
        Some(program) => {
            close_range(0, u32::MAX);
            loop {
                match rustix::process::waitpid(None, WaitOptions::empty()) {
                    Ok(Some((pid, status))) if pid == program => exit_now(encode(status)),
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(_) => exit_now(127),
                }
            }
        }
    }
}

/// The supervisor of one simulator process, prepared before the fork; [`Supervisor::enter`]
/// is the body of its `pre_exec` (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Supervisor {
    parent: Pid,
}

impl Default for Supervisor {
    fn default() -> Self {
        Supervisor::new()
    }
}

impl Supervisor {
    /// A supervisor for a child of this process.
    pub fn new() -> Supervisor {
        Supervisor {
            parent: rustix::process::getpid(),
        }
    }

    /// The body of `pre_exec`: returns in the process that is to exec the program; the
    /// supervisor never returns (it exits with the program's status: its code, or 128 + the
    /// signal).
    pub fn enter(&self) -> io::Result<()> {
        self.subreaper()
    }

    /// Ask the supervisor `pid` to kill its program's whole tree and leave.
    pub fn stop(pid: u32) {
        if let Some(p) = Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(p, Signal::TERM);
        }
    }

    fn subreaper(&self) -> io::Result<()> {
        let waited = waited_signals();
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigprocmask with valid set pointers; async-signal-safe.
        if unsafe { libc::sigprocmask(libc::SIG_BLOCK, &waited, old.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Blocked, the death signal waits for `watch` (ppol's handlers, inherited by this fork,
        // never run here).
        tie_to_parent(self.parent, Signal::TERM)?;
        let me = rustix::process::getpid();
        step(rustix::process::set_child_subreaper(Some(me)))?;
        not_dumpable()?;
        match fork_raw()? {
            None => {
                let mut none = MaybeUninit::<libc::sigset_t>::uninit();
                // SAFETY: sigemptyset initialises the set; sigprocmask gets valid pointers.
                unsafe {
                    libc::sigemptyset(none.as_mut_ptr());
                    libc::sigprocmask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut());
                }
                step(rustix::process::set_parent_process_death_signal(Some(
                    Signal::KILL,
                )))?;
                if rustix::process::getppid() != Some(me) {
                    exit_now(1);
                }
                Ok(())
            }
            Some(program) => {
                close_range(0, u32::MAX);
                exit_now(watch(program, &waited, me));
            }
        }
    }
}

/// Supervisors and namespace inits are copies of ppol (its memory, command line and
/// environment): not dumpable, their `/proc` entries are root's.
fn not_dumpable() -> io::Result<()> {
    step(rustix::process::set_dumpable_behavior(
        rustix::process::DumpableBehavior::NotDumpable,
    ))
}

/// The signals a subreaper supervisor waits for: ppol's stop and death (`SIGTERM`), `SIGINT`,
/// `SIGHUP`, and its children's changes (`SIGCHLD`).
fn waited_signals() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set, sigaddset adds valid signal numbers to it.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(set.as_mut_ptr(), s);
        }
        set.assume_init()
    }
}

/// The subreaper's loop: until the program exits (then its status) or a stop signal comes
/// (then 128 + the signal), after which the program's whole tree is killed.
fn watch(program: Pid, waited: &libc::sigset_t, me: Pid) -> i32 {
    let tick = libc::timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    loop {
        // SAFETY: sigtimedwait with a valid set and timeout; async-signal-safe.
        let sig = unsafe { libc::sigtimedwait(waited, std::ptr::null_mut(), &tick) };
        if matches!(sig, libc::SIGTERM | libc::SIGINT | libc::SIGHUP) {
            kill_descendants(me);
            return 128 + sig;
        }
        loop {
            match rustix::process::waitpid(None, WaitOptions::NOHANG) {
                Ok(Some((pid, status))) if pid == program => {
                    let code = encode(status);
                    kill_descendants(me);
                    return code;
                }
                Ok(Some(_)) | Err(rustix::io::Errno::INTR) => {}
                Ok(None) => break,
                Err(_) => return 127,
            }
        }
    }
}

/// In a child subreaper (`me`): SIGKILL every child, reap, and again (the children of a killed
/// process are re-parented to `me`), until no child is left or 5 s have passed.
pub fn kill_descendants(me: Pid) {
    let started = monotonic_ms();
    loop {
        signal_children(me);
        loop {
            match rustix::process::waitpid(None, WaitOptions::NOHANG) {
                Ok(Some(_)) | Err(rustix::io::Errno::INTR) => {}
                Ok(None) => break,
                Err(_) => return, // ECHILD: nothing is left
            }
        }
        if monotonic_ms().saturating_sub(started) > 5_000 {
            return;
        }
        let pause = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 2_000_000,
        };
        let _ = rustix::thread::nanosleep(&pause);
    }
}

fn monotonic_ms() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the time into `t`; async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// SIGKILL every process whose parent is `me`, found in `/proc` with raw calls.
fn signal_children(me: Pid) {
    let Ok(dir) = rustix::fs::open(
        c"/proc",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        FileMode::empty(),
    ) else {
        return;
    };
    let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
    let mut entries = rustix::fs::RawDir::new(&dir, &mut buf);
    while let Some(Ok(entry)) = entries.next() {
        let name = entry.file_name().to_bytes();
        let Some(pid) = parse_pid(name) else {
            continue;
        };
        if parent_of(name) == Some(me.as_raw_pid()) {
            if let Some(p) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, Signal::KILL);
            }
        }
    }
}

fn parse_pid(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 10 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    name.iter()
        .try_fold(0i64, |n, &d| Some(n * 10 + (d - b'0') as i64))
        .and_then(|n| i32::try_from(n).ok())
}

/// The parent pid of `/proc/<pid>` (field 4 of its `stat`), read with raw calls.
fn parent_of(pid: &[u8]) -> Option<i32> {
    let mut path = [0u8; 32];
    let parts: [&[u8]; 3] = [b"/proc/", pid, b"/stat\0"];
    let mut at = 0;
    for p in parts {
        path.get_mut(at..at + p.len())?.copy_from_slice(p);
        at += p.len();
    }
    let path = CStr::from_bytes_with_nul(&path[..at]).ok()?;
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, FileMode::empty()).ok()?;
    let mut stat = [0u8; 512];
    let n = rustix::io::read(&fd, &mut stat).ok()?;
    ppid_of_stat(&stat[..n])
}

/// Field 4 of a `stat` line: after the command name's last `)`, the state, then the parent.
fn ppid_of_stat(stat: &[u8]) -> Option<i32> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let _state = fields.next()?;
    parse_pid(fields.next()?)
}

// --- process hygiene: descriptors no forked child keeps, and CPU time ---

/// Descriptors no forked child may keep (see [`PrivateFile`]); -1 marks a free slot. Atomics,
/// so a child can read them between `fork` and `exec` without taking a lock.
static PRIVATE_FDS: [std::sync::atomic::AtomicI32; MAX_PRIVATE_FDS] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; MAX_PRIVATE_FDS];

/// How many [`PrivateFile`]s a process may hold at once.
pub const MAX_PRIVATE_FDS: usize = 64;

/// A file whose descriptor no forked child keeps: every child ppol forks calls
/// [`close_private_fds`] first. `O_CLOEXEC` covers children that exec at once; this covers the
/// forks that never exec (the sandbox's supervisor and namespace init) and the moments before
/// an exec. It is for descriptors whose lifetime means something to other processes — the run
/// lock's `flock` lasts as long as any copy of its descriptor — so that when the process dies,
/// what it held dies with it.
#[derive(Debug)]
pub struct PrivateFile {
    file: std::fs::File,
}

impl PrivateFile {
    /// Make `file`'s descriptor private. Fails when [`MAX_PRIVATE_FDS`] are in use.
    pub fn new(file: std::fs::File, path: &std::path::Path) -> crate::Result<PrivateFile> {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::Ordering;
        let fd = file.as_raw_fd();
        for slot in &PRIVATE_FDS {
            if slot
                .compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Ok(PrivateFile { file });
            }
        }
        Err(crate::Error::io(
            "opening",
            path,
            std::io::Error::other(format!(
                "this process already holds {MAX_PRIVATE_FDS} run locks"
            )),
        ))
    }

    /// The file.
    pub fn file(&self) -> &std::fs::File {
        &self.file
    }
}

impl Drop for PrivateFile {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::Ordering;
        let fd = self.file.as_raw_fd();
        for slot in &PRIVATE_FDS {
            if slot
                .compare_exchange(fd, -1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                break;
            }
        }
        // the descriptor itself is closed when `file` drops, after this
    }
}

/// Close the descriptors of every [`PrivateFile`] of the parent, in a child just forked. Only
/// atomic loads and `close`: safe between `fork` and `exec` of a multi-threaded process.
pub fn close_private_fds() {
    use std::sync::atomic::Ordering;
    for slot in &PRIVATE_FDS {
        let fd = slot.load(Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: close(2) of a descriptor this (forked) process never uses again; it is
            // async-signal-safe.
            unsafe { libc::close(fd) };
        }
    }
}

/// CPU time (user + system) this process has used so far; with `children`, also that of its
/// waited-for children. Zero when the system does not say.
pub fn cpu_time(children: bool) -> std::time::Duration {
    use std::time::Duration;
    fn of(who: libc::c_int) -> Duration {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a `rusage` into the pointer it is given, which points to
        // memory of that type owned by this frame; `who` is RUSAGE_SELF or RUSAGE_CHILDREN.
        let usage = unsafe {
            if libc::getrusage(who, usage.as_mut_ptr()) != 0 {
                return Duration::ZERO;
            }
            usage.assume_init()
        };
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
        tv(usage.ru_utime) + tv(usage.ru_stime)
    }
    let mut t = of(libc::RUSAGE_SELF);
    if children {
        t += of(libc::RUSAGE_CHILDREN);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_their_parent() {
        assert_eq!(ppid_of_stat(b"42 (sim) S 7 42 42 0 -1"), Some(7));
        // a command name with spaces and parentheses
        assert_eq!(ppid_of_stat(b"42 (a) b (c)) R 1234 1 1"), Some(1234));
        assert_eq!(ppid_of_stat(b"garbage"), None);
        assert_eq!(parse_pid(b"123"), Some(123));
        assert_eq!(parse_pid(b"self"), None);
        assert_eq!(parse_pid(b"99999999999"), None);
        let me = std::process::id().to_string();
        assert_eq!(
            parent_of(me.as_bytes()),
            Some(rustix::process::getppid().unwrap().as_raw_pid())
        );
    }
}
