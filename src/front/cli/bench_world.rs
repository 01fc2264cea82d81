//! `ppol bench world`: throughput of an external world. A simulator that takes a fixed time per
//! episode plays N episodes in P processes; the wall time is compared with the ideal
//! ceil(N / P) × one episode (end to end from the first request, process starts included).

use std::time::Instant;

use clap::Args;

use crate::front::ops::{self, EpisodesRequest, WorldChoice};
use crate::simulate::world::{WorldSettings, WorldSpec};

/// Arguments of `ppol bench world`.
#[derive(Debug, Args)]
pub struct BenchWorldArgs {
    /// Episodes, 1 to 100,000 (one episodes request's limit).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_EPISODES))]
    pub episodes: usize,
    /// Simulator processes (`world.processes`, 1 to 64); repeat to compare.
    #[arg(long, default_values_t = [1usize, 4, 8], allow_negative_numbers = true,
          value_parser = super::count(1, crate::simulate::world::MAX_PROCESSES))]
    pub processes: Vec<usize>,
    /// Milliseconds the simulator takes per episode, 0 to 60,000.
    #[arg(long, default_value_t = 200, allow_negative_numbers = true,
          value_parser = super::count(0u64, 60_000))]
    pub episode_ms: u64,
    /// Python interpreter of the built-in test simulator.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// A version-1 simulator (standard library only) that sleeps `ms` per episode.
const SLEEPER: &str = "import json,sys,time\nfor line in sys.stdin:\n    r=json.loads(line)\n    if r['type']=='shutdown': break\n    time.sleep(float(sys.argv[1])/1000)\n    print(json.dumps({'type':'dialogue','id':r['id'],'conversation':[{'role':'assistant','content':'hi'},{'role':'user','content':'hello there'}]}),flush=True)\n";

/// Run `ppol bench world`.
pub fn run(args: BenchWorldArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.episodes >= 1, "--episodes must be at least 1");
    let dir = tempfile::tempdir()?;
    let tasks = dir.path().join("tasks.jsonl");
    let lines: String = (0..args.episodes)
        .map(|i| format!("{{\"task_id\": \"t{i}\", \"context\": \"task {i}\"}}\n"))
        .collect();
    std::fs::write(&tasks, lines)?;
    let mut rows = Vec::new();
    for &p in &args.processes {
        let settings = WorldSettings {
            task_file: Some(tasks.clone()),
            processes: p,
            ..Default::default()
        };
        settings.validate()?;
        let request = EpisodesRequest {
            world: WorldChoice {
                spec: WorldSpec::External(vec![
                    args.python.clone(),
                    "-c".into(),
                    SLEEPER.into(),
                    args.episode_ms.to_string(),
                ]),
                settings,
                tau2_data: None,
            },
            tasks: "all".into(),
            personas: None,
            trials: 1,
            llm: None,
            max_turns: None,
            max_tool_rounds: None,
            user_temperature: None,
            seed: 0,
            concurrency: EpisodesRequest::CONCURRENCY,
            output: None,
        };
        let started = Instant::now();
        let report = ops::block_on(ops::episodes(request, &|_, _| {}))??;
        let wall = started.elapsed().as_secs_f64();
        anyhow::ensure!(
            report.failed() == 0,
            "{} episodes failed: {:?}",
            report.failed(),
            report.failures_by_reason()
        );
        let ideal = args.episodes.div_ceil(p) as f64 * args.episode_ms as f64 / 1000.0;
        rows.push(serde_json::json!({
            "processes": p, "episodes": args.episodes, "episode_ms": args.episode_ms,
            "wall_s": wall, "ideal_s": ideal, "ratio": wall / ideal,
        }));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("external world: {} episodes of {} ms each (wall time from the first request, process starts included)", args.episodes, args.episode_ms);
        println!("processes   wall s   ideal s   wall / ideal");
        for r in &rows {
            println!(
                "{:>9} {:>8.2} {:>9.2} {:>14.2}",
                r["processes"],
                r["wall_s"].as_f64().unwrap_or(0.0),
                r["ideal_s"].as_f64().unwrap_or(0.0),
                r["ratio"].as_f64().unwrap_or(0.0)
            );
        }
    }
    Ok(())
}
