//! The Ray executor of `external:` and `tau2:` worlds (`[world] executor = "ray"`): the world's
//! simulator processes run in the actors of a Ray cluster instead of on this machine.
//!
//! Ray has no Rust API, so ppol speaks to it through one Python process: the bridge,
//! `python/ppol_rs/ray_world.py`, shipped in the binary and handed to the interpreter in its
//! environment (`python -c`), with a spec file in a private temporary directory (the
//! simulator's command, protocol and environment, the `[world.ray]` settings) that the bridge
//! removes once read, so nothing is left on disk however ppol ends. To ppol the bridge is one
//! protocol-version-2 simulator process in an ordinary [`Pool`](super::external::Pool) (its `max_in_flight` the room of all its
//! actors); the bridge connects to the cluster, starts `[world.ray] actors` actors spread over
//! its nodes, each running the world's own simulator command (protocol 1 or 2; for `tau2:`, τ²'s
//! runner, whose text reaches the actors in its environment variable and is run by the
//! worker's Python), and routes episodes to
//! free actors, retrying those whose actor, worker or node died (`[world.ray] retries`). The seed
//! of an episode stays the one its caller derived from (task, persona, trial), so a
//! deterministic simulator gives the same episodes with either executor. Each episode records
//! where it was played in `meta.ray` (`node`, `node_ip`, `actor`, `pid`, `retries`).
//!
//! The bridge's interpreter is `[world] python`, else `$PPOL_RAY_PYTHON`, else `python3`; it
//! needs `ray` (`pip install 'ray[default]'`), not ppol-rs. The run's model is offered to the
//! simulators on the workers by a [`ModelEndpoint`] listening on `[world.ray] advertise`, behind
//! the run's bearer token.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::external::{ExternalWorld, PoolOptions};
use super::{TaskList, World, WorldDeps};
use crate::llm::serve::ModelEndpoint;
use crate::{Error, Result};

/// The environment variable that carries the bridge's source to the interpreter
/// ([`super::python_from_env`]; its spec file is removed by the bridge once read).
const BRIDGE_SOURCE_VAR: &str = "PPOL_RAY_WORLD_SOURCE";

/// The bridge's source, shipped in the binary.
pub const BRIDGE_SOURCE: &str = include_str!("../../../python/ppol_rs/ray_world.py");

/// Environment variable naming the bridge's interpreter when `[world] python` is not set.
pub const PYTHON_ENV_VAR: &str = "PPOL_RAY_PYTHON";

/// The install command named by every message about a missing or mismatched Ray.
pub const INSTALL: &str = "pip install 'ray[default]'";

/// Largest `[world.ray] actors`.
pub const MAX_ACTORS: usize = 256;
/// Largest `[world.ray] retries`.
pub const MAX_RETRIES: u32 = 10;
/// Smallest `[world.ray] num_cpus`: Ray refuses resource quantities below 0.0001.
pub const MIN_NUM_CPUS: f64 = 0.0001;
/// Largest `[world.ray] num_cpus` (CPUs one actor reserves).
pub const MAX_NUM_CPUS: f64 = 1024.0;

/// Where the processes of an `external:` or `tau2:` world run.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    /// On this machine, `[world] processes` of them.
    #[default]
    Local,
    /// In the actors of a Ray cluster (`[world.ray]`).
    Ray,
}

/// Where a finished run's simulators are played this time (`ppol eval` / `ppol resume
/// --executor`, `--ray-address`; Python `executor=`, `ray_address=`): over the run's own
/// `[world] executor` and `[world.ray] address`, so that a run whose cluster is gone can be
/// evaluated or resumed on another one, or on this machine, without editing its
/// `config.toml`. Episodes do not depend on where they are played.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The executor (None: the run's).
    pub executor: Option<Executor>,
    /// The Ray cluster's address (None: the run's); given alone, it also means the Ray
    /// executor.
    pub ray_address: Option<String>,
}

impl Placement {
    /// From an executor's name (`local`, `ray`) and a Ray address, as flags and Python
    /// arguments give them.
    pub fn from_names(executor: Option<&str>, ray_address: Option<&str>) -> crate::Result<Self> {
        Ok(Placement {
            executor: executor.map(parse_executor).transpose()?,
            ray_address: ray_address.map(str::to_string),
        })
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.executor.is_none() && self.ray_address.is_none()
    }

    /// Apply it to a run's world settings (`world`); the caller validates the result.
    pub fn apply(&self, world: &mut super::WorldSettings) -> crate::Result<()> {
        if let Some(a) = &self.ray_address {
            if self.executor == Some(Executor::Local) {
                return Err(crate::Error::config(
                    "ray_address",
                    "is the address of a Ray cluster: it goes with executor \"ray\", not \
                     \"local\"",
                ));
            }
            world.ray.address = a.clone();
            world.executor = Executor::Ray;
        }
        if let Some(e) = self.executor {
            world.executor = e;
        }
        Ok(())
    }
}

/// Parse an executor name (`local`, `ray`), for flags and Python arguments.
pub fn parse_executor(s: &str) -> crate::Result<Executor> {
    match s.trim() {
        "local" => Ok(Executor::Local),
        "ray" => Ok(Executor::Ray),
        other => Err(crate::Error::config(
            "executor",
            format!("must be \"local\" or \"ray\", got {other:?}"),
        )),
    }
}

/// The `[world.ray]` section: the Ray executor's settings (used with `[world] executor =
/// "ray"`). Every default is here.
///
/// ```toml
/// [world]
/// executor = "ray"
/// python = "/opt/venv/bin/python"   # has `ray[default]`, the cluster's version
///
/// [world.ray]
/// address = "auto"                  # or "HEAD:6379", or "ray://HEAD:10001"
/// actors = 32                       # simulator processes across the cluster
/// num_cpus = 1.0                    # CPUs each reserves
/// advertise = "10.0.0.5"            # where the workers reach ppol's model endpoint
/// runtime_env = { working_dir = ".", pip = ["my-sim==1.2"] }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RaySettings {
    /// The cluster: "auto" (the one $RAY_ADDRESS names, else the one `ray start --head`
    /// started on this machine), "HOST:PORT" of its head (GCS port, 6379 by default) or
    /// "ray://HOST:10001" (Ray Client).
    pub address: String,
    /// Simulator processes across the cluster: one Ray actor each, spread over the nodes
    /// (SPREAD scheduling).
    #[schemars(range(min = 1, max = MAX_ACTORS))]
    pub actors: usize,
    /// CPUs each actor reserves on its node (Ray's num_cpus; fractions allowed).
    #[schemars(range(min = MIN_NUM_CPUS, max = MAX_NUM_CPUS))]
    pub num_cpus: f64,
    /// Host name or address (optionally HOST:PORT) the workers reach ppol's model endpoint by;
    /// it listens there: on the address, or on the address a host name resolves to (a name
    /// that does not resolve, or dotted numbers that are no address, are refused — never all
    /// interfaces by a typo), behind the run's token. The default, loopback, serves a cluster
    /// on this machine only.
    pub advertise: String,
    /// Ray runtime_env of the actors: how the simulator reaches the workers (working_dir,
    /// py_modules, pip, env_vars, ...); with a working_dir the command runs there, else in
    /// ppol's working directory when the node has it. Checked before anything starts: a
    /// field Ray does not know is refused, env_vars must be strings, a local working_dir
    /// must be a directory (or a .zip) here.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub runtime_env: Option<toml::Table>,
    /// Times an episode whose actor, worker process, simulator process or node died is played
    /// again on another actor before it is recorded as failed (each attempt is recorded).
    #[schemars(range(max = MAX_RETRIES))]
    pub retries: u32,
    /// Seconds to connect to the cluster and place the actors (also a replacement's).
    #[schemars(range(max = crate::limits::MAX_SECONDS), extend("exclusiveMinimum" = 0))]
    pub start_timeout_s: f64,
}

impl Default for RaySettings {
    fn default() -> Self {
        RaySettings {
            address: "auto".into(),
            actors: 4,
            num_cpus: 1.0,
            advertise: "127.0.0.1".into(),
            runtime_env: None,
            retries: 2,
            start_timeout_s: 120.0,
        }
    }
}

impl RaySettings {
    /// Check the values (the errors name the key).
    pub fn validate(&self) -> Result<()> {
        let a = self.address.trim();
        let host_port = a.strip_prefix("ray://").unwrap_or(a);
        let ok = a == "auto"
            || host_port
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            return Err(Error::config(
                "world.ray.address",
                format!(
                    "expected \"auto\", \"HOST:PORT\" (the head's GCS port) or \
                     \"ray://HOST:10001\", got '{}'",
                    self.address
                ),
            ));
        }
        if !(1..=MAX_ACTORS).contains(&self.actors) {
            return Err(Error::config(
                "world.ray.actors",
                format!("must be in 1..={MAX_ACTORS}, got {}", self.actors),
            ));
        }
        if !(self.num_cpus.is_finite() && (MIN_NUM_CPUS..=MAX_NUM_CPUS).contains(&self.num_cpus)) {
            return Err(Error::config(
                "world.ray.num_cpus",
                format!(
                    "must be in [{MIN_NUM_CPUS}, {MAX_NUM_CPUS}] (Ray counts resources in steps \
                     of 0.0001), got {}",
                    crate::limits::shown(self.num_cpus)
                ),
            ));
        }
        advertised(&self.advertise)?;
        if self.retries > MAX_RETRIES {
            return Err(Error::config(
                "world.ray.retries",
                format!("must be in 0..={MAX_RETRIES}, got {}", self.retries),
            ));
        }
        // bounded like every other duration: 1e300 is a finite number no `Duration` holds
        crate::limits::check_seconds("world.ray.start_timeout_s", self.start_timeout_s)?;
        if let Some(env) = &self.runtime_env {
            serde_json::to_value(env).map_err(|e| {
                Error::config("world.ray.runtime_env", format!("not representable: {e}"))
            })?;
            check_runtime_env(env)?;
        }
        Ok(())
    }
}

/// The fields of a Ray runtime_env (`ray.runtime_env.RuntimeEnv.known_fields` and its
/// constructor's arguments, Ray 2.x).
pub const RUNTIME_ENV_FIELDS: &[&str] = &[
    "working_dir",
    "py_modules",
    "py_executable",
    "excludes",
    "pip",
    "uv",
    "conda",
    "container",
    "image_uri",
    "env_vars",
    "config",
    "worker_process_setup_hook",
    "java_jars",
    "nsight",
    "rocprof_sys",
    "mpi",
];

/// What Ray would refuse (or ignore) in `[world.ray] runtime_env`, said before anything starts
/// and naming the field: an unknown field, `env_vars` that are not strings, and a local
/// `working_dir` that is not a directory (or a `.zip`) here.
fn check_runtime_env(env: &toml::Table) -> Result<()> {
    for (k, v) in env {
        let key = format!("world.ray.runtime_env.{k}");
        if !RUNTIME_ENV_FIELDS.contains(&k.as_str()) && !k.starts_with('_') {
            return Err(Error::config(
                key,
                format!(
                    "is not a field of a Ray runtime_env (known: {})",
                    RUNTIME_ENV_FIELDS.join(", ")
                ),
            ));
        }
        match k.as_str() {
            "env_vars" => {
                let Some(t) = v.as_table() else {
                    return Err(Error::config(key, "must be a table of NAME = \"value\""));
                };
                if let Some((name, _)) = t.iter().find(|(_, v)| !v.is_str()) {
                    return Err(Error::config(
                        format!("{key}.{name}"),
                        "must be a string (Ray passes environment variables as text): quote it",
                    ));
                }
            }
            "working_dir" => {
                let Some(dir) = v.as_str() else {
                    return Err(Error::config(key, "must be a path or a URI (a string)"));
                };
                // a URI (s3://, gs://, https://) is Ray's to fetch; a local path is checked here
                if !dir.contains("://") {
                    let p = std::path::Path::new(dir);
                    let zip = p.extension().is_some_and(|e| e == "zip") && p.is_file();
                    if !p.is_dir() && !zip {
                        return Err(Error::config(
                            key,
                            format!(
                                "'{dir}' is not a directory here (nor a .zip): Ray uploads it \
                                 from this machine (a relative path is from ppol's working \
                                 directory)"
                            ),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `advertise` as (the address to listen on, the host to name in the base URL).
fn advertised(advertise: &str) -> Result<(SocketAddr, String)> {
    let a = advertise.trim();
    let bad = |why: &str| {
        Error::config(
            "world.ray.advertise",
            format!("{why}: expected a host name or address, optionally HOST:PORT, got '{a}'"),
        )
    };
    if a.is_empty() || a.contains(char::is_whitespace) || a.contains('/') {
        return Err(bad("not a host"));
    }
    // [v6]:port, v6, host:port, host
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (h, tail) = rest.split_once(']').ok_or_else(|| bad("an unclosed ["))?;
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| bad("a bad port"))?,
            None if tail.is_empty() => 0,
            None => return Err(bad("text after ]")),
        };
        (h.to_string(), port)
    } else if a.parse::<IpAddr>().is_ok() {
        (a.to_string(), 0)
    } else if let Some((h, p)) = a.rsplit_once(':') {
        (
            h.to_string(),
            p.parse::<u16>().map_err(|_| bad("a bad port"))?,
        )
    } else {
        (a.to_string(), 0)
    };
    let bind_ip = match host.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) if host == "localhost" => IpAddr::from([127, 0, 0, 1]),
        // dotted numbers that are no IPv4 address (256.1.1.1): a typo, not a host name
        Err(_) if host.chars().all(|c| c.is_ascii_digit() || c == '.') => {
            return Err(bad("not an IPv4 address"));
        }
        // a name is resolved, and the endpoint listens on what it names — never on every
        // interface because of a name (a typo would expose the run's model to the network)
        Err(_) => resolve(&host).map_err(|why| bad(&why))?,
    };
    Ok((SocketAddr::new(bind_ip, port), host))
}

/// The first address `host` resolves to (IPv4 first).
fn resolve(host: &str) -> std::result::Result<IpAddr, String> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("'{host}' does not resolve ({e})"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(|a| a.ip())
        .ok_or_else(|| format!("'{host}' resolves to no address"))
}

/// The bridge's interpreter.
pub fn python(configured: Option<&PathBuf>) -> PathBuf {
    configured
        .cloned()
        .or_else(|| std::env::var_os(PYTHON_ENV_VAR).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// What the actors run: the world's own simulator.
pub struct Simulator {
    /// The world's pool options as the local executor would use them (command, protocol,
    /// environment, label, timeouts).
    pub opts: PoolOptions,
    /// Run the command's first word as the worker's own Python (`tau2:`'s runner).
    pub worker_python: bool,
}

/// Open a world whose simulator runs in Ray actors.
pub async fn open(
    sim: Simulator,
    deps: &WorldDeps,
    tasks: Option<TaskList>,
    split_seed: u64,
) -> Result<Arc<dyn World>> {
    let settings = &deps.settings;
    let ray = &settings.ray;
    ray.validate()?;
    let inner = sim.opts;
    let dir = tempfile::Builder::new()
        .prefix("ppol-ray-")
        .tempdir()
        .map_err(|e| Error::io("creating", Path::new("a temporary directory"), e))?;
    let mut sim_env: Vec<(String, String)> = inner.env.clone();
    let endpoint = match &deps.model {
        Some(m) => {
            let (bind, host) = advertised(&ray.advertise)?;
            let ep = ModelEndpoint::start_at(m.clone(), bind, Some(&host))
                .await
                .map_err(|e| {
                    Error::config(
                        "world.ray.advertise",
                        format!("ppol's model endpoint cannot listen on {bind}: {e}"),
                    )
                })?;
            sim_env.extend(ep.env());
            Some(ep)
        }
        None => None,
    };
    let runtime_env = ray
        .runtime_env
        .as_ref()
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| Error::config("world.ray.runtime_env", e.to_string()))?;
    let use_working_dir = ray
        .runtime_env
        .as_ref()
        .is_some_and(|t| t.contains_key("working_dir"));
    let cwd = std::env::current_dir().ok();
    let spec = json!({
        "address": ray.address.trim(),
        "actors": ray.actors,
        "num_cpus": ray.num_cpus,
        "retries": ray.retries,
        "start_timeout_s": ray.start_timeout_s,
        "episode_timeout_s": settings.episode_timeout_s,
        "max_in_flight": settings.max_in_flight,
        "runtime_env": runtime_env,
        "simulator": {
            "argv": inner.argv,
            "protocol": inner.protocol,
            "env": sim_env
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect::<serde_json::Map<_, _>>(),
            "worker_python": sim.worker_python,
            "cwd": cwd,
            "use_working_dir": use_working_dir,
            "ppol": env!("CARGO_PKG_VERSION"),
        },
    });
    let spec_path = dir.path().join("spec.json");
    crate::io::write_atomic(&spec_path, spec.to_string().as_bytes())?;
    let py = python(settings.python.as_ref());
    // One bridge request covers every attempt of an episode and the replacement of its actors.
    let per_attempt = inner.timeout.as_secs_f64() + 5.0;
    let timeout = per_attempt * f64::from(ray.retries + 1) + ray.start_timeout_s + 30.0;
    let opts = PoolOptions {
        argv: vec![
            py.to_string_lossy().into_owned(),
            "-c".into(),
            super::python_from_env(BRIDGE_SOURCE_VAR, "ray_world.py"),
            "--spec".into(),
            spec_path.to_string_lossy().into_owned(),
            "--remove-spec".into(),
        ],
        processes: 1,
        protocol: 2,
        timeout: crate::limits::duration(timeout),
        max_in_flight: super::MAX_IN_FLIGHT,
        env: vec![(BRIDGE_SOURCE_VAR.into(), BRIDGE_SOURCE.into())],
        label: inner.label.clone(),
        model: deps
            .model
            .as_ref()
            .map(|m| super::external::model_names(m.as_ref())),
        // the bridge's stderr gathers the actors' simulators' (Ray forwards it to the driver)
        stderr_shown: super::external::MAX_STDERR_SHOWN.saturating_mul(ray.actors.max(1)),
    };
    let world = ExternalWorld::open(opts, tasks, None, split_seed, settings.test_fraction)
        .await
        .map_err(|e| start_error(e, &py))?;
    Ok(super::keep(world, Box::new((endpoint, dir))))
}

/// A start-up failure of the bridge as the configuration error it is: the bridge names the
/// key (`world.python`, `world.ray.address`, ...) before a colon.
fn start_error(e: Error, py: &Path) -> Error {
    let Error::Environment { message, .. } = &e else {
        return e;
    };
    if let Some(rest) = message.split_once("cannot start: ").map(|(_, r)| r) {
        if let Some((key, why)) = rest.split_once(": ") {
            if key.starts_with("world.") || key == "run.world" {
                return Error::config(key, why.to_string());
            }
        }
    }
    if message.contains("cannot start the simulator") {
        return Error::config(
            "world.python",
            format!(
                "{message}: the Ray executor runs its bridge with [world] python, else \
                 ${PYTHON_ENV_VAR}, else python3 ({}); it needs Ray: `{INSTALL}`",
                py.display()
            ),
        );
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue43_item4_runtime_env_fields_are_checked_naming_the_field() {
        let with = |text: &str| RaySettings {
            runtime_env: Some(toml::from_str(text).unwrap()),
            ..RaySettings::default()
        };
        let err = |text: &str| with(text).validate().unwrap_err().to_string();
        let dir = tempfile::tempdir().unwrap();
        assert!(with(&format!(
            "working_dir = '{}'\npip = ['x==1']\nenv_vars = {{ A = '1' }}",
            dir.path().display()
        ))
        .validate()
        .is_ok());
        assert!(with("working_dir = 's3://bucket/code.zip'")
            .validate()
            .is_ok());
        let e = err("workdir = '.'");
        assert!(
            e.contains("world.ray.runtime_env.workdir") && e.contains("working_dir"),
            "{e}"
        );
        let e = err("working_dir = '/no/such/dir'");
        assert!(
            e.contains("world.ray.runtime_env.working_dir") && e.contains("not a directory"),
            "{e}"
        );
        let e = err("env_vars = { N = 3 }");
        assert!(e.contains("world.ray.runtime_env.env_vars.N"), "{e}");
    }

    #[test]
    fn settings_are_checked_by_key() {
        assert!(RaySettings::default().validate().is_ok());
        for (key, s) in [
            (
                "world.ray.address",
                RaySettings {
                    address: "head".into(),
                    ..Default::default()
                },
            ),
            (
                "world.ray.address",
                RaySettings {
                    address: "ray://:10001".into(),
                    ..Default::default()
                },
            ),
            (
                "world.ray.actors",
                RaySettings {
                    actors: 0,
                    ..Default::default()
                },
            ),
            (
                "world.ray.num_cpus",
                RaySettings {
                    num_cpus: f64::NAN,
                    ..Default::default()
                },
            ),
            (
                "world.ray.advertise",
                RaySettings {
                    advertise: "a b".into(),
                    ..Default::default()
                },
            ),
            (
                "world.ray.retries",
                RaySettings {
                    retries: 11,
                    ..Default::default()
                },
            ),
        ] {
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        for good in [
            "auto",
            "127.0.0.1:6379",
            "head.local:6379",
            "ray://10.0.0.1:10001",
        ] {
            let s = RaySettings {
                address: good.into(),
                ..Default::default()
            };
            assert!(s.validate().is_ok(), "{good}");
        }
    }

    #[test]
    fn advertise_names_where_to_listen_and_what_to_tell_the_workers() {
        let (bind, host) = advertised("127.0.0.1").unwrap();
        assert_eq!(
            (bind.to_string(), host.as_str()),
            ("127.0.0.1:0".into(), "127.0.0.1")
        );
        let (bind, host) = advertised("10.1.2.3:8123").unwrap();
        assert_eq!(
            (bind.to_string(), host.as_str()),
            ("10.1.2.3:8123".into(), "10.1.2.3")
        );
        // a name listens where it resolves, never on every interface
        let (bind, host) = advertised("localhost").unwrap();
        assert_eq!(
            (bind.to_string(), host.as_str()),
            ("127.0.0.1:0".into(), "localhost")
        );
        // Issue "Reliability 4", item 3: a non-address is refused, not bound to 0.0.0.0
        let e = advertised("256.1.1.1").unwrap_err().to_string();
        assert!(
            e.contains("world.ray.advertise") && e.contains("not an IPv4"),
            "{e}"
        );
        let e = advertised("no-such-host.invalid").unwrap_err().to_string();
        assert!(e.contains("does not resolve"), "{e}");
        let (bind, _) = advertised("localhost:9000").unwrap();
        assert_eq!(bind.to_string(), "127.0.0.1:9000");
        let (bind, host) = advertised("[::1]:9000").unwrap();
        assert_eq!(
            (bind.to_string(), host.as_str()),
            ("[::1]:9000".into(), "::1")
        );
        assert!(advertised("host:port").is_err());
        assert!(advertised("").is_err());
    }

    #[test]
    fn start_failures_name_the_key() {
        let e = start_error(
            Error::Environment {
                domain: "external:x".into(),
                message: "the simulator cannot start: world.ray.address: cannot reach it".into(),
            },
            Path::new("python3"),
        );
        assert_eq!(
            e.to_string(),
            "invalid configuration 'world.ray.address': cannot reach it"
        );
        let e = start_error(
            Error::Environment {
                domain: "external:x".into(),
                message: "cannot start the simulator \"/nope/python\": No such file".into(),
            },
            Path::new("/nope/python"),
        );
        let text = e.to_string();
        assert!(
            text.contains("'world.python'") && text.contains(INSTALL),
            "{text}"
        );
    }
}
