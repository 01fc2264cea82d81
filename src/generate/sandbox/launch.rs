//! Starting a confined process: its home, root layout, seccomp filter, rlimits and channel.

use super::*;

/// Starts confined processes in one [`Mode`].
pub(super) struct Launcher {
    pub(super) cfg: SandboxConfig,
    pub(super) mode: Mode,
    pub(super) home: Arc<SandboxHome>,
    pub(super) layout: Option<Arc<RootLayout>>,
    pub(super) seccomp: Arc<Vec<seccompiler::BpfProgram>>,
}

/// A started process with its channel and (outside the minimal root) its host directory.
pub(super) struct Launched {
    pub(super) child: tokio::process::Child,
    pub(super) sock: std::os::unix::net::UnixStream,
    /// The host run directory (fallback modes); removed when dropped.
    pub(super) dir: Option<tempfile::TempDir>,
}

impl Launcher {
    /// The owner of the run's files: the run uid, or ppol's own.
    pub(super) fn owner(&self, uid: u32) -> u32 {
        if self.mode.drop_uid {
            uid
        } else {
            rustix::process::geteuid().as_raw()
        }
    }

    /// Start `python -s -S -B <script>` confined, with `files` (relative path, contents) in
    /// its directory.
    pub(super) fn spawn(
        &self,
        script: &str,
        files: &[(&str, Arc<[u8]>)],
        uid: u32,
        seed: u64,
    ) -> Result<Launched> {
        let (host, child_end) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| Error::Sandbox(format!("socketpair: {e}")))?;
        let mut cmd = tokio::process::Command::new(&self.cfg.python);
        cmd.arg("-s")
            .arg("-S")
            .arg("-B")
            .arg(script)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("LC_ALL", "C.UTF-8")
            .env("PYTHONHASHSEED", "0")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONIOENCODING", "utf-8")
            .env("MALLOC_ARENA_MAX", "2")
            .env("PPOL_SEED", seed.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let owner = self.owner(uid);
        let (root, dir) = match (&self.layout, self.mode.minimal_root) {
            (Some(layout), true) => {
                let run_files =
                    RunFiles::new(layout, files, owner, self.cfg.max_disk_bytes, MAX_INODES)?;
                cmd.env("HOME", confine::WORK_DIR)
                    .env("TMPDIR", confine::WORK_DIR);
                (Some((layout.clone(), run_files)), None)
            }
            _ => {
                let dir = self.host_dir(files, owner)?;
                cmd.current_dir(dir.path())
                    .env("HOME", dir.path())
                    .env("TMPDIR", dir.path());
                (None, Some(dir))
            }
        };
        let extra = if self.mode.drop_uid {
            0
        } else {
            reaper::count_own_tasks()
        };
        let gid = rustix::process::getegid().as_raw();
        let plan = ChildPlan {
            mode: self.mode,
            parent: rustix::process::getpid(),
            uid,
            uid_map: format!("{owner} {owner} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            sock_fd: std::os::fd::AsRawFd::as_raw_fd(&child_end),
            limits: rlimit_table(&self.cfg, extra)
                .into_iter()
                .map(|(_, r, v)| (r, v))
                .collect(),
            seccomp: self.seccomp.clone(),
            root,
            stop_for_test: confine::test_stop_requested(),
        };
        // SAFETY: `ChildPlan::enter` runs between fork and exec and only makes raw system
        // calls on data prepared above (no allocation, no locks); see `confine`.
        unsafe {
            cmd.pre_exec(move || plan.enter());
        }
        let child = cmd.spawn().map_err(|e| {
            Error::Sandbox(format!("cannot start {}: {e}", self.cfg.python.display()))
        })?;
        drop(child_end);
        Ok(Launched {
            child,
            sock: std::os::unix::net::UnixStream::from(host),
            dir,
        })
    }

    /// A host directory for one run (modes without the minimal root).
    pub(super) fn host_dir(
        &self,
        files: &[(&str, Arc<[u8]>)],
        owner: u32,
    ) -> Result<tempfile::TempDir> {
        let root = self.home.path();
        let dir = tempfile::Builder::new()
            .prefix("run-")
            .tempdir_in(root)
            .map_err(|e| Error::io("creating run directory in", root, e))?;
        for (rel, text) in files {
            let path = dir.path().join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Error::io("creating directory", parent, e))?;
            }
            std::fs::write(&path, text).map_err(|e| Error::io("writing", &path, e))?;
        }
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
                .map_err(|e| Error::io("chmod", dir.path(), e))?;
        }
        if self.mode.drop_uid {
            // Only the run directory itself becomes the run user's; the support files stay ours.
            let id = rustix::process::Uid::from_raw(owner);
            let gid = rustix::process::Gid::from_raw(owner);
            rustix::fs::chown(dir.path(), Some(id), Some(gid))
                .map_err(|e| Error::io("chown", dir.path(), e.into()))?;
        }
        Ok(dir)
    }

    /// Kill everything the run started and wait for the process; returns its exit status.
    /// With `settle`, first give the process a moment to exit by itself (its status is
    /// wanted: the supervisor passes the program's status on a little after the program ends).
    pub(super) async fn reap(
        &self,
        child: &mut tokio::process::Child,
        uid: u32,
        netns: Option<PathBuf>,
        settle: bool,
    ) -> Option<std::process::ExitStatus> {
        let mut settled = None;
        if settle {
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(500), child.wait()).await
            {
                settled = Some(s);
            }
        }
        if let Some(pid) = child.id() {
            // The supervisor's session: the supervisor, the namespace init and the program
            // (unless it moved); the pid namespace dies with its init.
            crate::child::kill_group(pid);
        }
        if self.mode.drop_uid {
            reaper::kill_uid(uid);
        } else if let (false, Some(ns)) = (self.mode.minimal_root, netns) {
            let _ = tokio::task::spawn_blocking(move || reaper::kill_netns(&ns)).await;
        }
        if settled.is_some() {
            return settled;
        }
        match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
            Ok(Ok(s)) => Some(s),
            _ => {
                let _ = child.start_kill();
                None
            }
        }
    }
}

pub(super) fn rlimit_table(
    cfg: &SandboxConfig,
    extra_procs: u64,
) -> Vec<(&'static str, rustix::process::Resource, u64)> {
    use rustix::process::Resource;
    vec![
        ("RLIMIT_CPU", Resource::Cpu, cpu_seconds(cfg)),
        ("RLIMIT_AS", Resource::As, cfg.memory_bytes),
        (
            "RLIMIT_NPROC",
            Resource::Nproc,
            cfg.max_processes + extra_procs,
        ),
        ("RLIMIT_FSIZE", Resource::Fsize, cfg.max_file_bytes),
        (
            "RLIMIT_NOFILE",
            Resource::Nofile,
            cfg.max_open_files.max(210),
        ),
        ("RLIMIT_CORE", Resource::Core, 0),
    ]
}
