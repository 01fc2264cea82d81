//! What this machine allows: the interpreter is resolved once, then each confinement mode is
//! tried in turn (most confined first) with a probe program that reports what it can see and
//! do. The first mode whose every requested protection is *verified* is used, and the report
//! line says which one and why the others were left.
//!
//! Order: (1) minimal root + pid/network namespaces + run uid (or a user namespace when the
//! host is not root) + seccomp; (2) network namespace + run uid + seccomp, no filesystem
//! confinement; (3) run uid + seccomp; (4) nothing but the resource limits.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncReadExt;

use super::confine::{self, Mode, RootLayout};
use super::reaper::SandboxHome;
use super::{
    rlimit_table, uid_block, Confinement, Launcher, SandboxConfig, SandboxReport, MAX_SLOTS,
};
use crate::{Error, Result};

/// The interpreter, resolved to its real executable, and the directories it loads from.
#[derive(Debug, Deserialize)]
struct Interpreter {
    exe: PathBuf,
    version: String,
    dirs: Vec<PathBuf>,
}

const RESOLVE_PY: &str = r#"
import json, os, sys, sysconfig
dirs = [p for p in sys.path if p and os.path.isdir(p)]
if sysconfig.get_config_var("Py_ENABLE_SHARED"):
    dirs.append(sysconfig.get_config_var("LIBDIR") or "")
print(json.dumps({"exe": os.path.realpath(sys.executable), "version": sys.version.split()[0], "dirs": [d for d in dirs if d]}))
"#;

async fn resolve_python(python: &Path) -> Result<Interpreter> {
    let out = tokio::process::Command::new(python)
        .args(["-s", "-S", "-c", RESOLVE_PY])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| Error::Sandbox(format!("cannot run '{}': {e}", python.display())))?;
    if !out.status.success() {
        return Err(Error::Sandbox(format!(
            "'{}' failed: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        Error::Sandbox(format!(
            "'{}' is not a usable Python 3 ({e}): {}",
            python.display(),
            String::from_utf8_lossy(&out.stdout).trim()
        ))
    })
}

/// What the probe program saw.
#[derive(Debug, Deserialize)]
struct Seen {
    uid: u32,
    pid: u32,
    version: String,
    cwd: String,
    net: String,
    socket: String,
    memfd: String,
    seccomp: String,
    marker: bool,
    host_pid: bool,
    here: String,
    disk: u64,
}

fn probe_program(marker: &Path) -> String {
    format!(
        r#"
import errno, json, os, socket, sys
MARKER = {marker:?}
HOST_PID = {pid}
def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))
out = {{"uid": os.getuid(), "pid": os.getpid(), "version": sys.version.split()[0], "cwd": os.getcwd()}}
try:
    out["net"] = os.readlink("/proc/self/ns/net")
except OSError as e:
    out["net"] = "error:" + err(e)
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    out["socket"] = "ok"
except OSError as e:
    out["socket"] = err(e)
try:
    os.close(os.memfd_create("probe"))
    out["memfd"] = "ok"
except OSError as e:
    out["memfd"] = err(e)
try:
    with open("/proc/self/status") as f:
        out["seccomp"] = [l.split()[1] for l in f if l.startswith("Seccomp:")][0]
except Exception:
    out["seccomp"] = "?"
out["marker"] = os.path.exists(MARKER)
out["host_pid"] = os.path.exists("/proc/%d" % HOST_PID)
try:
    with open("here.txt", "w") as f:
        f.write("ok")
    with open("here.txt") as f:
        out["here"] = f.read()
except OSError as e:
    out["here"] = err(e)
try:
    v = os.statvfs(".")
    out["disk"] = v.f_blocks * v.f_frsize
except OSError:
    out["disk"] = 0
print(json.dumps(out))
"#,
        marker = marker.display().to_string(),
        pid = std::process::id()
    )
}

/// Run the probe under `launcher`'s mode.
async fn probe(launcher: &Launcher, uid: u32, marker: &Path) -> Result<Seen> {
    let text: Arc<[u8]> = Arc::from(probe_program(marker).into_bytes());
    let mut launched = launcher.spawn("probe.py", &[("probe.py", text)], uid, 0)?;
    let mut stdout = launched.child.stdout.take();
    let mut stderr = launched.child.stderr.take();
    let read = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.take(1 << 20).read_to_end(&mut out).await;
        }
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(1 << 16).read_to_end(&mut err).await;
        }
        (out, err)
    };
    let (out, err) = match tokio::time::timeout(Duration::from_secs(30), read).await {
        Ok(v) => v,
        Err(_) => {
            launcher.reap(&mut launched.child, uid, None, false).await;
            return Err(Error::Sandbox("probe timed out".into()));
        }
    };
    let status = launcher.reap(&mut launched.child, uid, None, true).await;
    let ok = status.is_some_and(|s| s.success());
    if !ok {
        return Err(Error::Sandbox(format!(
            "probe failed ({}): {}",
            status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "no status".into()),
            String::from_utf8_lossy(&err).trim()
        )));
    }
    serde_json::from_slice(&out).map_err(|e| {
        Error::Sandbox(format!(
            "probe printed garbage ({e}): {}",
            String::from_utf8_lossy(&out).trim()
        ))
    })
}

/// Why `seen` does not prove what `mode` claims (None: everything verified).
fn unverified(mode: Mode, seen: &Seen, host_net: &str) -> Option<String> {
    if seen.here != "ok" {
        return Some(format!(
            "the probe could not write its directory ({})",
            seen.here
        ));
    }
    if mode.netns && (seen.net.is_empty() || seen.net.starts_with("error") || seen.net == host_net)
    {
        return Some(format!("network namespace not in force ({})", seen.net));
    }
    if mode.seccomp && (seen.socket != "EPERM" || seen.memfd != "EPERM" || seen.seccomp != "2") {
        return Some(format!(
            "seccomp filter not in force (socket: {}, memfd_create: {}, Seccomp: {})",
            seen.socket, seen.memfd, seen.seccomp
        ));
    }
    if mode.minimal_root
        && (seen.marker || seen.cwd != confine::WORK_DIR || seen.pid != 2 || seen.host_pid)
    {
        return Some(format!(
            "minimal root not in force (host file visible: {}, cwd {}, pid {}, host pid visible: {})",
            seen.marker, seen.cwd, seen.pid, seen.host_pid
        ));
    }
    None
}

/// Pick the most confined mode this machine supports for `cfg`.
pub(super) async fn choose(mut cfg: SandboxConfig) -> Result<(Launcher, SandboxReport, u32)> {
    cfg.concurrency = cfg.concurrency.clamp(1, MAX_SLOTS as usize);
    cfg.llm_parallel = cfg.llm_parallel.max(1);
    let interp = resolve_python(&cfg.python).await?;
    cfg.python = interp.exe.clone();
    let root = rustix::process::geteuid().is_root();
    let work_root = cfg.work_root.clone().unwrap_or_else(std::env::temp_dir);
    let home = Arc::new(SandboxHome::create(&work_root)?);
    let mut notes = Vec::new();
    let seccomp = if cfg.seccomp {
        match confine::seccomp_programs() {
            Ok(p) => p,
            Err(e) => {
                notes.push(format!("no seccomp filter: {e}"));
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    let seccomp = Arc::new(seccomp);
    let layout = if cfg.readonly_root {
        match RootLayout::new(&home.mountpoint(), &cfg.python, &interp.dirs) {
            Ok(l) => Some(Arc::new(l)),
            Err(e) => {
                notes.push(format!("no minimal root: {e}"));
                None
            }
        }
    } else {
        None
    };
    let full = Mode {
        minimal_root: layout.is_some(),
        netns: cfg.isolate_network,
        userns: !root && (cfg.isolate_network || layout.is_some()),
        drop_uid: root && cfg.drop_privileges,
        seccomp: cfg.seccomp && !seccomp.is_empty(),
    };
    let mut candidates = vec![full];
    for next in [
        Mode {
            minimal_root: false,
            userns: !root && full.netns,
            ..full
        },
        Mode {
            minimal_root: false,
            netns: false,
            userns: false,
            ..full
        },
        Mode {
            minimal_root: false,
            netns: false,
            userns: false,
            drop_uid: false,
            seccomp: false,
        },
    ] {
        if !candidates.contains(&next) {
            candidates.push(next);
        }
    }
    let uid_base = uid_block();
    let host_net = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let marker = home.path().join(".ppol-owner");
    let mut chosen = None;
    let mut left = Vec::new();
    for mode in candidates {
        let mut pythons = vec![cfg.python.clone()];
        let system = PathBuf::from("/usr/bin/python3");
        if mode.drop_uid && !mode.minimal_root && system.exists() && !pythons.contains(&system) {
            // Without the minimal root the run uid may not reach an interpreter under /root.
            pythons.push(system);
        }
        for py in pythons {
            let launcher = Launcher {
                cfg: SandboxConfig {
                    python: py.clone(),
                    ..cfg.clone()
                },
                mode,
                home: home.clone(),
                layout: layout.clone(),
                seccomp: seccomp.clone(),
            };
            match probe(&launcher, uid_base, &marker).await {
                Ok(seen) => match unverified(mode, &seen, &host_net) {
                    None => {
                        if py != cfg.python {
                            notes.push(format!(
                                "{} is not usable by the unprivileged run uid; using {}",
                                cfg.python.display(),
                                py.display()
                            ));
                        }
                        chosen = Some((launcher, seen));
                        break;
                    }
                    Some(why) => left.push(format!("{}: {why}", describe(mode))),
                },
                Err(e) => {
                    tracing::debug!(?mode, python = %py.display(), "sandbox probe failed: {e}");
                    left.push(format!("{}: {e}", describe(mode)));
                }
            }
        }
        if chosen.is_some() {
            break;
        }
    }
    let Some((launcher, seen)) = chosen else {
        return Err(Error::Sandbox(format!(
            "cannot run {} even without protections: {}",
            cfg.python.display(),
            left.join("; ")
        )));
    };
    let mode = launcher.mode;
    if mode != full {
        for l in left {
            notes.push(format!("unavailable: {l}"));
        }
    }
    if !mode.minimal_root {
        notes.push(
            "the program can read every world-readable file of the host (no minimal root)".into(),
        );
    }
    if !root {
        notes.push(
            "host is not root: programs run as the host user; RLIMIT_NPROC counts all of its processes"
                .into(),
        );
    }
    let report = SandboxReport {
        python: launcher.cfg.python.clone(),
        python_version: if seen.version.is_empty() {
            interp.version.clone()
        } else {
            seen.version.clone()
        },
        confinement: if mode.minimal_root {
            Confinement::MinimalRoot
        } else {
            Confinement::None
        },
        visible: if mode.minimal_root {
            layout
                .as_ref()
                .map(|l| l.visible.clone())
                .unwrap_or_default()
        } else {
            Vec::new()
        },
        work_dir_bytes: mode.minimal_root.then_some(seen.disk),
        pid_namespace: mode.minimal_root,
        namespaces: mode.netns,
        user_namespace: mode.userns,
        readonly_root: mode.minimal_root,
        seccomp: mode.seccomp,
        uid: (mode.drop_uid && seen.uid != 0).then_some(seen.uid),
        rlimits: rlimit_table(&launcher.cfg, 0)
            .into_iter()
            .map(|(n, _, v)| (n.to_string(), v))
            .collect(),
        notes,
    };
    Ok((launcher, report, uid_base))
}

fn describe(mode: Mode) -> String {
    let mut parts = Vec::new();
    if mode.minimal_root {
        parts.push("minimal root");
    }
    if mode.netns {
        parts.push("network namespace");
    }
    if mode.userns {
        parts.push("user namespace");
    }
    if mode.drop_uid {
        parts.push("run uid");
    }
    if mode.seccomp {
        parts.push("seccomp");
    }
    if parts.is_empty() {
        "no protections".into()
    } else {
        parts.join(" + ")
    }
}
