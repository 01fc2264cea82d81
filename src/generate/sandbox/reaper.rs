//! What a run leaves behind, and how it is removed: processes (by uid, network namespace or
//! process group) and the sandbox's host directory (removed on drop, and swept at the next
//! start when ppol was killed before it could remove it).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::{Error, Result};

/// Prefix of a sandbox's host directory: `ppol-gen-<pid>-<random>`.
pub(crate) const DIR_PREFIX: &str = "ppol-gen-";
/// The file naming the owner of a sandbox directory: `<pid> <start time in clock ticks>`.
const OWNER_FILE: &str = ".ppol-owner";

/// Kill every process owned by `uid`, including descendants that escaped the process group
/// with `setsid`. A short-lived helper becomes `uid` and calls `kill(-1, SIGKILL)`, which the
/// kernel applies to every process of that uid at once (a fork racing with it fails because
/// its parent has a fatal signal pending).
pub(crate) fn kill_uid(uid: u32) {
    // SAFETY: the child only makes async-signal-safe calls (close, setgroups, setgid, setuid, kill)
    // and leaves with `_exit`; the parent only waits for it.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            crate::child::close_private_fds();
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                libc::_exit(1);
            }
            libc::kill(-1, libc::SIGKILL);
            libc::_exit(0);
        }
        if pid > 0 {
            let mut status = 0;
            while libc::waitpid(pid, &mut status, 0) < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
            }
        }
    }
}

/// Killed processes count against `RLIMIT_NPROC` until they are reaped: wait (briefly) until
/// the uid owns nothing, so the next run in its slot starts with a clean count.
pub(crate) async fn wait_uid_gone(uid: u32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let busy = tokio::task::spawn_blocking(move || uid_has_processes(uid))
            .await
            .unwrap_or(false);
        if !busy {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tracing::warn!(
        uid,
        "processes of a sandbox uid still alive 2 s after SIGKILL"
    );
}

/// Kill every process (other than ppol itself) whose network namespace is `ns` — the run's
/// private namespace — a few rounds, to catch forks racing with the sweep. Used when runs
/// have neither a pid namespace nor a uid of their own.
pub(crate) fn kill_netns(ns: &Path) {
    let me = std::process::id();
    for _ in 0..3 {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        let mut found = false;
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid != me && std::fs::read_link(e.path().join("ns/net")).is_ok_and(|l| l == ns) {
                found = true;
                if let Some(p) = Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(p, Signal::KILL);
                }
            }
        }
        if !found {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn uid_has_processes(uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .is_some_and(|s| s.parse::<u32>().is_ok())
            && std::fs::metadata(e.path()).is_ok_and(|md| md.uid() == uid)
    })
}

/// Tasks (threads) of the current user, for `RLIMIT_NPROC` without a uid of the run's own.
pub(crate) fn count_own_tasks() -> u64 {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0u64;
    for e in entries.flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|s| s.parse::<u32>().is_ok())
        {
            if let Ok(md) = std::fs::metadata(e.path()) {
                if md.uid() == me {
                    n += std::fs::read_dir(e.path().join("task"))
                        .map(|d| d.count() as u64)
                        .unwrap_or(1);
                }
            }
        }
    }
    n
}

/// Start time of process `pid` (field 22 of `/proc/<pid>/stat`, clock ticks since boot):
/// with the pid it identifies a process even after the pid is reused.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The sandbox's host directory: `<work_root>/ppol-gen-<pid>-XXXXXX/` holding the owner file,
/// the mount point of the minimal root (`root/`), probe files, and the per-run directories of
/// the fallback modes. Removed when dropped.
#[derive(Debug)]
pub(crate) struct SandboxHome {
    dir: tempfile::TempDir,
}

impl SandboxHome {
    /// Sweep stale directories under `root`, then create this sandbox's directory.
    pub fn create(root: &Path) -> Result<SandboxHome> {
        std::fs::create_dir_all(root).map_err(|e| Error::io("creating directory", root, e))?;
        let swept = sweep_stale(root);
        if swept > 0 {
            tracing::info!(
                swept,
                root = %root.display(),
                "removed sandbox directories of ppol processes that no longer exist"
            );
        }
        let me = std::process::id();
        let dir = tempfile::Builder::new()
            .prefix(&format!("{DIR_PREFIX}{me}-"))
            .tempdir_in(root)
            .map_err(|e| Error::io("creating sandbox directory in", root, e))?;
        let owner = dir.path().join(OWNER_FILE);
        let start = start_time(me).unwrap_or(0);
        std::fs::write(&owner, format!("{me} {start}\n"))
            .map_err(|e| Error::io("writing", &owner, e))?;
        {
            use std::os::unix::fs::PermissionsExt;
            // Traversable by the run uids (fallback run directories live below), listable by
            // nobody else.
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
                .map_err(|e| Error::io("chmod", dir.path(), e))?;
        }
        let mount = dir.path().join("root");
        std::fs::create_dir(&mount).map_err(|e| Error::io("creating directory", &mount, e))?;
        Ok(SandboxHome { dir })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The mount point of the minimal root.
    pub fn mountpoint(&self) -> PathBuf {
        self.dir.path().join("root")
    }
}

/// Remove every `ppol-gen-<pid>-*` directory under `root` whose owner file names a process
/// that no longer exists (pid gone, or reused by a process with another start time). A
/// directory without a well-formed owner file, or not owned by us, is never touched.
/// Returns how many were removed.
pub(crate) fn sweep_stale(root: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let path = e.path();
        // Only real directories of ours (symlink_metadata: a symlink is not followed).
        let Ok(md) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !md.is_dir() || md.uid() != me {
            continue;
        }
        let Ok(owner) = std::fs::read_to_string(path.join(OWNER_FILE)) else {
            continue;
        };
        let mut it = owner.split_whitespace();
        let (Some(Ok(opid)), Some(Ok(ostart))) = (
            it.next().map(str::parse::<u32>),
            it.next().map(str::parse::<u64>),
        ) else {
            continue;
        };
        if opid != pid {
            continue;
        }
        let alive = start_time(pid).is_some_and(|s| s == ostart || ostart == 0);
        if !alive && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}
