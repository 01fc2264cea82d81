//! `ppol bench world`: throughput of an external world's executor. A simulator that takes a
//! fixed time T per episode plays N episodes on K processes (`--executor local`, K =
//! `world.processes`) or K Ray actors (`--executor ray`, K = `world.ray.actors`); the time to
//! play them (all N requested at once, once the world is open) is compared with the ideal
//! ceil(N / K) × T. The time to open the world (start the processes, or connect to the cluster
//! and place the actors) is reported beside it.
//!
//! With `--executor ray` and no `--ray-address`, the bench starts a Ray cluster of its own for
//! the measurement (`--ray-nodes` nodes of `--ray-node-cpus` CPUs, every one on 127.0.0.1,
//! with `--python`, which needs `ray[default]`) and stops it at the end.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use crate::front::ops;
use crate::simulate::batch;
use crate::simulate::episode::runner::Backend;
use crate::simulate::world::{self, Executor, RaySettings, WorldDeps, WorldSettings, WorldSpec};

/// Arguments of `ppol bench world`.
#[derive(Debug, Args)]
pub struct BenchWorldArgs {
    /// Episodes, 1 to 100,000 (one episodes request's limit).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_EPISODES))]
    pub episodes: usize,
    /// local: simulator processes on this machine; ray: Ray actors across the cluster.
    #[arg(long, default_value = "local", value_name = "local|ray")]
    pub executor: String,
    /// Simulator processes (`world.processes`, 1 to 64) or Ray actors (`world.ray.actors`, 1 to
    /// 256); repeat to compare (default: 1 4 8 local, 4 8 ray).
    #[arg(long, value_name = "K", allow_negative_numbers = true,
          value_parser = super::count(1, crate::simulate::world::ray::MAX_ACTORS))]
    pub processes: Vec<usize>,
    /// Milliseconds the simulator takes per episode, 0 to 60,000.
    #[arg(long, default_value_t = 200, allow_negative_numbers = true,
          value_parser = super::count(0u64, 60_000))]
    pub episode_ms: u64,
    /// Python interpreter of the built-in test simulator (with --executor ray, of the bridge
    /// and of the cluster the bench starts: it needs ray[default]).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// --executor ray: an existing cluster (auto, HOST:PORT, ray://HOST:10001); without it the
    /// bench starts one on 127.0.0.1 for the measurement.
    #[arg(long, value_name = "ADDRESS")]
    pub ray_address: Option<String>,
    /// Nodes of the cluster the bench starts, 1 to 16.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true,
          value_parser = super::count(1usize, 16))]
    pub ray_nodes: usize,
    /// Logical CPUs of each node of the cluster the bench starts (default: room for the
    /// largest K, one CPU per actor), 1 to 1,024.
    #[arg(long, allow_negative_numbers = true, value_parser = super::count(1usize, 1024))]
    pub ray_node_cpus: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// A version-1 simulator (standard library only) that sleeps `ms` per episode.
const SLEEPER: &str = "import json,sys,time\nfor line in sys.stdin:\n    r=json.loads(line)\n    if r['type']=='shutdown': break\n    time.sleep(float(sys.argv[1])/1000)\n    print(json.dumps({'type':'dialogue','id':r['id'],'conversation':[{'role':'assistant','content':'hi'},{'role':'user','content':'hello there'}]}),flush=True)\n";

/// A Ray cluster on 127.0.0.1 (argv: nodes, CPUs per node): prints `{"address": ...}` once
/// every node is up, and shuts the cluster down when its stdin closes.
pub const LOCAL_CLUSTER: &str = r#"import json, os, sys
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep every address on loopback
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
from ray.cluster_utils import Cluster
nodes, cpus = int(sys.argv[1]), float(sys.argv[2])
node = dict(num_cpus=cpus, node_ip_address="127.0.0.1", object_store_memory=80 << 20)
cluster = Cluster(initialize_head=True, head_node_args=dict(node, include_dashboard=False))
for _ in range(nodes - 1):
    cluster.add_node(**node)
import ray
ray.init(address=cluster.address, logging_level="WARNING")
cluster.wait_for_nodes()
ray.shutdown()
print(json.dumps({"address": cluster.address}), flush=True)
sys.stdin.read()
cluster.shutdown()
"#;

/// A cluster started for the bench; it stops when dropped (its stdin closes).
struct LocalCluster {
    child: std::process::Child,
    address: String,
}

impl LocalCluster {
    fn start(python: &str, nodes: usize, cpus: usize) -> anyhow::Result<LocalCluster> {
        let mut child = std::process::Command::new(python)
            .args(["-c", LOCAL_CLUSTER, &nodes.to_string(), &cpus.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {python}: {e}"))?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .ok();
        let address = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v["address"].as_str().map(str::to_string));
        match address {
            Some(address) => Ok(LocalCluster { child, address }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!(
                    "{python} could not start a Ray cluster (it needs `{}`; or give \
                     --ray-address of a running one)",
                    world::ray::INSTALL
                )
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        if self.child.wait().is_err() {
            let _ = self.child.kill();
        }
    }
}

/// Run `ppol bench world`.
pub fn run(args: BenchWorldArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.episodes >= 1, "--episodes must be at least 1");
    let executor = match args.executor.as_str() {
        "local" => Executor::Local,
        "ray" => Executor::Ray,
        other => anyhow::bail!("--executor must be local or ray, got '{other}'"),
    };
    let ks = if !args.processes.is_empty() {
        args.processes.clone()
    } else if executor == Executor::Ray {
        vec![4, 8]
    } else {
        vec![1, 4, 8]
    };
    let dir = tempfile::tempdir()?;
    let tasks = dir.path().join("tasks.jsonl");
    let lines: String = (0..args.episodes)
        .map(|i| format!("{{\"task_id\": \"t{i}\", \"context\": \"task {i}\"}}\n"))
        .collect();
    std::fs::write(&tasks, lines)?;
    let cluster = match (executor, &args.ray_address) {
        (Executor::Ray, None) => {
            let max_k = ks.iter().copied().max().unwrap_or(1);
            let nodes = args.ray_nodes.max(1);
            let cpus = args.ray_node_cpus.unwrap_or(max_k.div_ceil(nodes));
            Some(LocalCluster::start(&args.python, nodes, cpus)?)
        }
        _ => None,
    };
    let address = cluster
        .as_ref()
        .map(|c| c.address.clone())
        .or(args.ray_address.clone())
        .unwrap_or_else(|| "auto".into());
    let mut rows = Vec::new();
    for &k in &ks {
        let settings = WorldSettings {
            task_file: Some(tasks.clone()),
            processes: k.min(world::MAX_PROCESSES),
            executor,
            python: (executor == Executor::Ray).then(|| PathBuf::from(&args.python)),
            ray: RaySettings {
                address: address.clone(),
                actors: k,
                ..Default::default()
            },
            ..Default::default()
        };
        settings.validate()?;
        let (open_s, play_s, nodes) = ops::block_on(measure(&args, settings))??;
        let ideal = args.episodes.div_ceil(k) as f64 * args.episode_ms as f64 / 1000.0;
        rows.push(serde_json::json!({
            "executor": args.executor, "k": k, "episodes": args.episodes,
            "episode_ms": args.episode_ms, "open_s": open_s, "play_s": play_s,
            "ideal_s": ideal, "ratio": play_s / ideal, "nodes": nodes,
        }));
    }
    drop(cluster);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "{} executor: {} episodes of {} ms each (play: all requested at once, once the world \
             is open; open: starting the processes, or connecting to the cluster and placing the \
             actors)",
            args.executor, args.episodes, args.episode_ms
        );
        println!("        K   open s   play s   ideal s   play / ideal   nodes used");
        for r in &rows {
            println!(
                "{:>9} {:>8.2} {:>8.2} {:>9.2} {:>14.2} {:>12}",
                r["k"].as_u64().unwrap_or(0),
                r["open_s"].as_f64().unwrap_or(0.0),
                r["play_s"].as_f64().unwrap_or(0.0),
                r["ideal_s"].as_f64().unwrap_or(0.0),
                r["ratio"].as_f64().unwrap_or(0.0),
                r["nodes"].as_u64().unwrap_or(0)
            );
        }
    }
    Ok(())
}

/// Open the world (timed), play every task once at the same time (timed); the nodes used
/// (Ray: distinct `meta.ray.node`; local: 1).
async fn measure(
    args: &BenchWorldArgs,
    settings: WorldSettings,
) -> anyhow::Result<(f64, f64, usize)> {
    let spec = WorldSpec::External(vec![
        args.python.clone(),
        "-c".into(),
        SLEEPER.into(),
        args.episode_ms.to_string(),
    ]);
    let deps = WorldDeps {
        settings,
        tau2_data: None,
        backend: Backend::Scripted,
        model: None,
        max_tool_rounds: 1,
        seed: 0,
    };
    let started = Instant::now();
    let w = world::open(&spec, deps).await?;
    let open_s = started.elapsed().as_secs_f64();
    let runner = w.runner(3);
    let jobs: Vec<batch::Job> = (w.tasks().all().iter().enumerate())
        .map(|(i, t)| batch::Job {
            task_id: t.task_id.clone(),
            persona: None,
            trial: 0,
            seed: i as u64,
        })
        .collect();
    let (backend, domain) = (w.backend(), w.domain());
    let started = Instant::now();
    let played = batch::Batch::new("bench", &jobs)
        .play(batch::Player {
            runner: runner.as_ref(),
            backend: &backend,
            domain: &domain,
        })
        .await;
    let play_s = started.elapsed().as_secs_f64();
    w.shutdown().await;
    let episodes: Vec<_> = played?.episodes.into_iter().flatten().collect();
    let failed: Vec<_> = episodes.iter().filter_map(|e| e.error.clone()).collect();
    anyhow::ensure!(
        failed.is_empty(),
        "{} episodes failed, e.g. {}",
        failed.len(),
        failed[0]
    );
    let nodes: std::collections::BTreeSet<String> = episodes
        .iter()
        .filter_map(|e| e.meta.as_ref()?.get("ray")?.get("node")?.as_str())
        .map(str::to_string)
        .collect();
    Ok((open_s, play_s, nodes.len().max(1)))
}
