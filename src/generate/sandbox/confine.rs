//! Confinement of one run: namespaces, the minimal root, resource limits, the run uid and the
//! seccomp filter.
//!
//! [`ChildPlan::enter`] runs in the child between `fork` and `exec` of a multi-threaded
//! process, so it only makes raw system calls (through `rustix`, `seccompiler` and a few
//! `libc` calls) on data prepared before the fork: no allocation, no locks, no `std::fs`.
//!
//! With the full confinement ([`Mode::minimal_root`]) one run is a chain of three processes:
//!
//! ```text
//! ppol ── S (supervisor: new session; unshares the namespaces; waits for I; exits like I)
//!          └─ I (pid 1 of the run's pid namespace: builds the minimal root, pivots into it,
//!             │  reaps orphans, exits with P's status: its code, or 128 + the signal)
//!             └─ P (drops the uid, sets the rlimits and seccomp, execs `python3 harness.py`)
//! ```
//!
//! S dies with ppol (`PR_SET_PDEATHSIG`), I dies with S, and when I (the namespace's init)
//! dies the kernel kills every process of the namespace, including daemons that left the
//! process group with `setsid`. The minimal root is a `tmpfs` holding read-only bind mounts
//! of the interpreter and the system libraries, a few device nodes, a fresh `/proc` of the
//! run's pid namespace and a size-capped `tmpfs` as the run directory `/work` (`/tmp` is a
//! directory of it): nothing else of the host is visible, and nothing the program writes
//! outlives the namespace.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode as FileMode, OFlags};
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};
use rustix::process::{Pid, Resource, Rlimit, Signal};
use rustix::thread::UnshareFlags;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use crate::child::{errno, pid_namespace_chain, step, tie_to_parent, write_file};
use crate::{Error, Result};

/// Directory of the run inside the minimal root.
pub(crate) const WORK_DIR: &str = "/work";

/// How runs are confined; chosen by the probe from the configuration and what the kernel allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mode {
    /// Mount, pid, IPC and UTS namespaces with the minimal root (implies a fresh `/proc`).
    pub minimal_root: bool,
    /// A private network namespace.
    pub netns: bool,
    /// A user namespace is needed for the other namespaces (the host is not root).
    pub userns: bool,
    /// The program runs under its own unprivileged uid (host is root).
    pub drop_uid: bool,
    /// The seccomp filter is installed.
    pub seccomp: bool,
}

impl Mode {
    fn unshare_flags(&self) -> UnshareFlags {
        let mut f = UnshareFlags::empty();
        if self.userns {
            f |= UnshareFlags::NEWUSER;
        }
        if self.netns {
            f |= UnshareFlags::NEWNET;
        }
        if self.minimal_root {
            f |= UnshareFlags::NEWNS
                | UnshareFlags::NEWPID
                | UnshareFlags::NEWIPC
                | UnshareFlags::NEWUTS;
        }
        f
    }
}

/// One read-only bind mount of the minimal root.
#[derive(Debug)]
struct Bind {
    source: CString,
    /// Mount point: the host mount point of the new root + the path inside it.
    target: CString,
    /// Flags of the read-only remount (keeps the source's locked flags).
    flags: MountFlags,
}

/// The part of the minimal root that is the same for every run of a sandbox.
#[derive(Debug)]
pub(crate) struct RootLayout {
    /// Host directory the new root is mounted on (inside the run's private mount namespace).
    mountpoint: CString,
    /// Directories to create in the new root (absolute host-side paths, parents first).
    dirs: Vec<CString>,
    /// Empty files to create as mount points of file binds.
    files: Vec<CString>,
    /// Symbolic links (content, path).
    symlinks: Vec<(CString, CString)>,
    binds: Vec<Bind>,
    proc_dir: CString,
    work_dir: CString,
    tmp_src: CString,
    tmp_dir: CString,
    /// What is visible, for the report: paths inside the new root.
    pub visible: Vec<PathBuf>,
}

/// Paths whose lack would break the interpreter: the system library directories.
const LIB_DIRS: &[&str] = &[
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libx32",
];
/// Device nodes bound into `/dev`.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::Sandbox(format!("path with a NUL byte: {}", p.display())))
}

fn under(root: &Path, inside: &Path) -> PathBuf {
    root.join(inside.strip_prefix("/").unwrap_or(inside))
}

impl RootLayout {
    /// Plan the minimal root mounted on `mountpoint`: the system library directories, the
    /// interpreter `python` and the directories it loads from (`python_dirs`), device nodes.
    pub fn new(mountpoint: &Path, python: &Path, python_dirs: &[PathBuf]) -> Result<RootLayout> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut files: Vec<PathBuf> = Vec::new();
        let mut symlinks = Vec::new();
        let mut binds: Vec<(PathBuf, bool)> = Vec::new(); // (path, is_dir)
        let covered = |binds: &[(PathBuf, bool)], p: &Path| {
            binds.iter().any(|(b, is_dir)| *is_dir && p.starts_with(b))
        };
        for d in LIB_DIRS.iter().map(Path::new) {
            match std::fs::symlink_metadata(d) {
                Ok(md) if md.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(d) {
                        symlinks.push((target, d.to_path_buf()));
                    }
                }
                Ok(md) if md.is_dir() => binds.push((d.to_path_buf(), true)),
                _ => {}
            }
        }
        let mut wanted: Vec<PathBuf> = python_dirs
            .iter()
            .filter_map(|d| std::fs::canonicalize(d).ok())
            .filter(|d| d.is_dir())
            .collect();
        wanted.sort();
        wanted.dedup();
        for d in wanted {
            // A library directory reached through a symlink (`/lib` → `usr/lib`) is covered
            // by its canonical form.
            if !covered(&binds, &d) {
                binds.push((d, true));
            }
        }
        let exe = std::fs::canonicalize(python).map_err(|e| Error::io("resolving", python, e))?;
        if !covered(&binds, &exe) {
            binds.push((exe.clone(), false));
        }
        if python != exe && !covered(&binds, python) && python.is_absolute() {
            // The interpreter is started by the path ppol resolved; keep that path working.
            binds.push((python.to_path_buf(), false));
        }
        for d in DEVICES.iter().map(Path::new) {
            if d.exists() {
                binds.push((d.to_path_buf(), false));
            }
        }
        let push_dir = |dirs: &mut Vec<PathBuf>, p: &Path| {
            let mut acc = PathBuf::from("/");
            for c in p.components().skip(1) {
                acc.push(c);
                if !dirs.contains(&acc) {
                    dirs.push(acc.clone());
                }
            }
        };
        for (p, is_dir) in &binds {
            if *is_dir {
                push_dir(&mut dirs, p);
            } else {
                if let Some(parent) = p.parent() {
                    push_dir(&mut dirs, parent);
                }
                files.push(p.clone());
            }
        }
        for (_, link) in &symlinks {
            if let Some(parent) = link.parent() {
                push_dir(&mut dirs, parent);
            }
        }
        for d in ["/proc", WORK_DIR, "/tmp", "/dev"] {
            push_dir(&mut dirs, Path::new(d));
        }
        let visible: Vec<PathBuf> = binds.iter().map(|(p, _)| p.clone()).collect();
        let mut bind_list = Vec::new();
        for (p, is_dir) in &binds {
            let device = p.starts_with("/dev");
            let mut flags = MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID;
            if !device {
                flags |= MountFlags::NODEV;
            }
            // A remount must keep the flags the kernel locked on the source (user namespaces).
            if let Ok(vfs) = rustix::fs::statvfs(p.as_path()) {
                use rustix::fs::StatVfsMountFlags as F;
                if vfs.f_flag.contains(F::NOEXEC) {
                    flags |= MountFlags::NOEXEC;
                }
                if vfs.f_flag.contains(F::NODEV) {
                    flags |= MountFlags::NODEV;
                }
                if vfs.f_flag.contains(F::NOATIME) {
                    flags |= MountFlags::NOATIME;
                }
                if vfs.f_flag.contains(F::NODIRATIME) {
                    flags |= MountFlags::NODIRATIME;
                }
                if vfs.f_flag.contains(F::RELATIME) {
                    flags |= MountFlags::RELATIME;
                }
            }
            let _ = is_dir;
            bind_list.push(Bind {
                source: cpath(p)?,
                target: cpath(&under(mountpoint, p))?,
                flags,
            });
        }
        Ok(RootLayout {
            mountpoint: cpath(mountpoint)?,
            dirs: dirs
                .iter()
                .map(|d| cpath(&under(mountpoint, d)))
                .collect::<Result<_>>()?,
            files: files
                .iter()
                .map(|f| cpath(&under(mountpoint, f)))
                .collect::<Result<_>>()?,
            symlinks: symlinks
                .iter()
                .map(|(t, l)| Ok((cpath(t)?, cpath(&under(mountpoint, l))?)))
                .collect::<Result<_>>()?,
            binds: bind_list,
            proc_dir: cpath(&under(mountpoint, Path::new("/proc")))?,
            work_dir: cpath(&under(mountpoint, Path::new(WORK_DIR)))?,
            tmp_src: cpath(&under(mountpoint, Path::new("/work/.tmp")))?,
            tmp_dir: cpath(&under(mountpoint, Path::new("/tmp")))?,
            visible,
        })
    }
}

/// Files written into the run directory before the program starts (inside the minimal root).
#[derive(Debug)]
pub(crate) struct RunFiles {
    /// `tmpfs` options of `/work` (size, inodes, owner).
    work_data: CString,
    /// Sub-directories to create (absolute host-side paths).
    dirs: Vec<CString>,
    /// (absolute host-side path, contents).
    files: Vec<(CString, Arc<[u8]>)>,
}

impl RunFiles {
    /// The support files and the program for one run in `layout`, `/work` owned by `uid` and
    /// capped at `max_bytes` and `max_inodes`.
    pub fn new(
        layout: &RootLayout,
        files: &[(&str, Arc<[u8]>)],
        uid: u32,
        max_bytes: u64,
        max_inodes: u64,
    ) -> Result<RunFiles> {
        let work = PathBuf::from(std::ffi::OsStr::from_bytes(layout.work_dir.as_bytes()));
        let mut dirs = Vec::new();
        let mut out = Vec::new();
        for (rel, text) in files {
            let path = work.join(rel);
            let mut parent = path.parent();
            let mut chain = Vec::new();
            while let Some(p) = parent {
                if p == work {
                    break;
                }
                chain.push(p.to_path_buf());
                parent = p.parent();
            }
            for d in chain.into_iter().rev() {
                let c = cpath(&d)?;
                if !dirs.contains(&c) {
                    dirs.push(c);
                }
            }
            out.push((cpath(&path)?, text.clone()));
        }
        let work_data = CString::new(format!(
            "size={max_bytes},nr_inodes={max_inodes},mode=0700,uid={uid},gid={uid}"
        ))
        .expect("no NUL in numbers");
        Ok(RunFiles {
            work_data,
            dirs,
            files: out,
        })
    }
}

/// Everything the child needs, prepared before `fork`.
pub(crate) struct ChildPlan {
    pub mode: Mode,
    /// ppol's pid: the expected parent of the supervisor.
    pub parent: Pid,
    /// The run uid (with [`Mode::drop_uid`]).
    pub uid: u32,
    /// `uid_map` / `gid_map` lines for the user namespace (the host ids mapped to themselves).
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
    /// The child's end of the protocol socket, installed as fd 3.
    pub sock_fd: RawFd,
    pub limits: Vec<(Resource, u64)>,
    pub seccomp: Arc<Vec<BpfProgram>>,
    pub root: Option<(Arc<RootLayout>, RunFiles)>,
    /// Test hook ([`TEST_STOP_ENV`]): the child stops itself (SIGSTOP) once it has dropped the
    /// descriptors no child may keep, so a test can look at what it holds.
    pub stop_for_test: bool,
}

/// Set (to anything) in ppol's environment, every sandbox child stops itself right after its
/// fork-time cleanup, where its descriptors can be inspected; it still dies with ppol. For
/// tests only.
pub(crate) const TEST_STOP_ENV: &str = "PPOL_TEST_STOP_SANDBOX_CHILD";

/// Whether [`TEST_STOP_ENV`] is set (read once).
pub(crate) fn test_stop_requested() -> bool {
    static REQUESTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REQUESTED.get_or_init(|| std::env::var_os(TEST_STOP_ENV).is_some())
}

fn mkdir(path: &CStr, mode: u32) -> io::Result<()> {
    match rustix::fs::mkdir(path, FileMode::from_raw_mode(mode)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(errno(e)),
    }
}

impl ChildPlan {
    /// The body of `pre_exec`. Returns in the process that is to exec the interpreter;
    /// the supervisor and the namespace init never return.
    pub fn enter(&self) -> io::Result<()> {
        // S and I never exec: ppol's private descriptors are closed first (see `child`).
        tie_to_parent(self.parent, Signal::KILL)?;
        if self.stop_for_test {
            let _ = rustix::process::kill_process(rustix::process::getpid(), Signal::STOP);
        }
        let flags = self.mode.unshare_flags();
        if !flags.is_empty() {
            // SAFETY: this process is single-threaded (a fresh fork) and unshares neither its
            // file table nor its filesystem attributes from a thread that still shares them.
            step(unsafe { rustix::thread::unshare_unsafe(flags) })?;
        }
        if self.mode.userns {
            write_file(
                c"/proc/self/setgroups",
                b"deny",
                OFlags::empty(),
                FileMode::empty(),
            )?;
            write_file(
                c"/proc/self/uid_map",
                &self.uid_map,
                OFlags::empty(),
                FileMode::empty(),
            )?;
            write_file(
                c"/proc/self/gid_map",
                &self.gid_map,
                OFlags::empty(),
                FileMode::empty(),
            )?;
        }
        // The supervisor and the namespace init are copies of ppol (its memory, command line
        // and environment): not dumpable, their /proc entries are root's and, with
        // `hidepid=invisible`, not even listed to the program.
        step(rustix::process::set_dumpable_behavior(
            rustix::process::DumpableBehavior::NotDumpable,
        ))?;
        match &self.root {
            Some((layout, files)) => self.supervise(layout, files),
            None => self.lock_down(),
        }
    }

    /// In S: the pid namespace's init builds the root, and P is locked down.
    fn supervise(&self, layout: &RootLayout, files: &RunFiles) -> io::Result<()> {
        pid_namespace_chain(&|| self.build_root(layout, files))?;
        self.lock_down()
    }

    fn build_root(&self, layout: &RootLayout, files: &RunFiles) -> io::Result<()> {
        step(rustix::mount::mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        ))?;
        step(rustix::mount::mount(
            c"ppol-root",
            layout.mountpoint.as_c_str(),
            c"tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(c"size=1m,nr_inodes=4096,mode=0755"),
        ))?;
        for d in &layout.dirs {
            mkdir(d, 0o755)?;
        }
        for f in &layout.files {
            write_file(
                f,
                b"",
                OFlags::CREATE | OFlags::TRUNC,
                FileMode::from_raw_mode(0o644),
            )?;
        }
        for (content, link) in &layout.symlinks {
            step(rustix::fs::symlink(content.as_c_str(), link.as_c_str()))?;
        }
        for b in &layout.binds {
            step(rustix::mount::mount_bind(
                b.source.as_c_str(),
                b.target.as_c_str(),
            ))?;
            step(rustix::mount::mount_remount(
                b.target.as_c_str(),
                b.flags,
                c"",
            ))?;
        }
        step(rustix::mount::mount(
            c"ppol-work",
            layout.work_dir.as_c_str(),
            c"tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(files.work_data.as_c_str()),
        ))?;
        for d in &files.dirs {
            mkdir(d, 0o755)?;
        }
        for (path, text) in &files.files {
            write_file(
                path,
                text,
                OFlags::CREATE | OFlags::EXCL,
                FileMode::from_raw_mode(0o644),
            )?;
        }
        mkdir(&layout.tmp_src, 0o700)?;
        if self.mode.drop_uid {
            let id = rustix::process::Uid::from_raw(self.uid);
            let gid = rustix::process::Gid::from_raw(self.uid);
            step(rustix::fs::chown(
                layout.tmp_src.as_c_str(),
                Some(id),
                Some(gid),
            ))?;
        }
        step(rustix::mount::mount_bind(
            layout.tmp_src.as_c_str(),
            layout.tmp_dir.as_c_str(),
        ))?;
        // A /proc of the run's own pid namespace that lists only the program's own processes
        // and has no system-wide files when the kernel can (`subset=pid`, `hidepid=invisible`:
        // Linux 5.8), else a plain one.
        let proc_flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
        if rustix::mount::mount(
            c"proc",
            layout.proc_dir.as_c_str(),
            c"proc",
            proc_flags,
            Some(c"subset=pid,hidepid=invisible"),
        )
        .is_err()
        {
            step(rustix::mount::mount(
                c"proc",
                layout.proc_dir.as_c_str(),
                c"proc",
                proc_flags,
                None::<&CStr>,
            ))?;
        }
        step(rustix::process::chdir(layout.mountpoint.as_c_str()))?;
        step(rustix::process::pivot_root(c".", c"."))?;
        step(rustix::mount::unmount(c".", UnmountFlags::DETACH))?;
        step(rustix::process::chdir(c"/"))?;
        step(rustix::mount::mount_remount(
            c"/",
            MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
            c"",
        ))?;
        step(rustix::process::chdir(c"/work"))
    }

    /// In P: limits, uid, seccomp, the protocol descriptor. Returns to exec the interpreter.
    fn lock_down(&self) -> io::Result<()> {
        for &(res, v) in &self.limits {
            let max = if res == Resource::Cpu { v + 1 } else { v };
            step(rustix::process::setrlimit(
                res,
                Rlimit {
                    current: Some(v),
                    maximum: Some(max),
                },
            ))?;
        }
        if self.mode.drop_uid {
            step(rustix::thread::set_thread_groups(&[]))?;
            step(rustix::thread::set_thread_gid(
                rustix::process::Gid::from_raw(self.uid),
            ))?;
            step(rustix::thread::set_thread_uid(
                rustix::process::Uid::from_raw(self.uid),
            ))?;
        }
        step(rustix::thread::set_no_new_privs(true))?;
        if self.mode.seccomp {
            for prog in self.seccomp.iter() {
                seccompiler::apply_filter(prog).map_err(|e| match e {
                    seccompiler::Error::Seccomp(e) | seccompiler::Error::Prctl(e) => e,
                    _ => io::Error::from_raw_os_error(libc::EINVAL),
                })?;
            }
        }
        // SAFETY: fcntl and dup2 on descriptor numbers only: the protocol socket becomes
        // descriptor 3 without close-on-exec (a descriptor 3 inherited by accident is replaced).
        let installed = unsafe {
            if self.sock_fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(self.sock_fd, 3) == 3
            }
        };
        if !installed {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// System calls a generator has no use for. They fail with `EPERM`.
#[cfg(target_arch = "x86_64")]
const DENIED_ARCH: &[i64] = &[
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_modify_ldt,
    libc::SYS_uselib,
    libc::SYS_lookup_dcookie,
];
#[cfg(not(target_arch = "x86_64"))]
const DENIED_ARCH: &[i64] = &[];

const DENIED: &[i64] = &[
    // Sockets: the protocol socket is inherited; nothing may create another one (no network,
    // no path-named or abstract unix sockets of the host).
    libc::SYS_socket,
    // Namespaces, mounts and root changes (e.g. `unshare(CLONE_NEWUSER)` to gain capabilities).
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    // Other processes' memory.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_process_madvise,
    libc::SYS_kcmp,
    // Kernel interfaces with a history of exploits.
    libc::SYS_bpf,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Memory that RLIMIT_AS does not see.
    libc::SYS_memfd_create,
    libc::SYS_memfd_secret,
    // Administration.
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_syslog,
    libc::SYS_fanotify_init,
    libc::SYS_vhangup,
    libc::SYS_personality,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
];

/// Namespace flags refused to `clone`.
const CLONE_NS_FLAGS: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME
];

/// Terminal ioctls that inject input or talk to the console.
#[allow(clippy::unnecessary_cast)] // the ioctl request type differs between libc targets
const DENIED_IOCTLS: &[u64] = &[libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

/// x32 system calls carry this bit; the kernel may not support them, but the filter must not
/// let a denied call through under its x32 number.
#[cfg(target_arch = "x86_64")]
const X32_BIT: i64 = 0x4000_0000;

/// The seccomp programs installed in every run, in order:
/// 1. every call in [`DENIED`], `clone` with a namespace flag and the terminal-injection
///    ioctls fail with `EPERM` (and on x86_64 the same calls under their x32 numbers, plus the
///    x32-only range);
/// 2. `clone3` fails with `ENOSYS` (its flags live in memory a filter cannot read), so libc
///    falls back to `clone`, which filter 1 checks.
///
/// Any other architecture than the native one (e.g. `int 0x80` i386 calls) kills the process.
pub(crate) fn seccomp_programs() -> Result<Vec<BpfProgram>> {
    let arch: seccompiler::TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| Error::Sandbox(format!("seccomp: {e}")))?;
    let cond = |arg, op, v| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, v)
            .map_err(|e| Error::Sandbox(format!("seccomp rule: {e}")))
    };
    let rule = |c: Vec<SeccompCondition>| {
        SeccompRule::new(c).map_err(|e| Error::Sandbox(format!("seccomp rule: {e}")))
    };
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> = Default::default();
    for &nr in DENIED.iter().chain(DENIED_ARCH) {
        rules.insert(nr, Vec::new());
    }
    let mut clone_rules = Vec::new();
    for &f in CLONE_NS_FLAGS {
        clone_rules.push(rule(vec![cond(0, SeccompCmpOp::MaskedEq(f), f)?])?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let mut ioctl_rules = Vec::new();
    for &req in DENIED_IOCTLS {
        ioctl_rules.push(rule(vec![SeccompCondition::new(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            req,
        )
        .map_err(|e| Error::Sandbox(format!("seccomp rule: {e}")))?])?);
    }
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    #[cfg(target_arch = "x86_64")]
    {
        let native: Vec<i64> = rules.keys().copied().collect();
        for nr in native {
            rules.insert(nr | X32_BIT, Vec::new());
        }
        // x32-specific entries (512..=547: compat ioctl, ptrace, process_vm_*, ...).
        for nr in 512..=547 {
            rules.insert(nr | X32_BIT, Vec::new());
        }
    }
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| Error::Sandbox(format!("seccomp filter: {e}")))?;
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| Error::Sandbox(format!("seccomp filter: {e}")))?;
    let mut out = Vec::new();
    for f in [deny, clone3] {
        out.push(
            BpfProgram::try_from(f).map_err(|e| Error::Sandbox(format!("seccomp compile: {e}")))?,
        );
    }
    Ok(out)
}
