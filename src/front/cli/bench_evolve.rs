//! `ppol bench evolve --seeds K --iterations N [--human FILE] [--domain D --tau2-data DIR]`:
//! K seeded offline evolutions, each evaluated (`ppol eval`) on the human dialogues its run held
//! out by task group, so the gain of the search is measured on humans the run never saw.
//!
//! Per run it prints wall and CPU seconds (this process and its sandbox children) and seconds
//! per iteration, the table scores of the human, base, seed and evolved rows, and evolved −
//! seed and evolved − base; then the mean, spread (sample standard deviation) and range of the
//! two gains, the human row, and Dice D1–D4 of every row against the human mean, averaged over
//! the runs. The runs are kept under `--out` (default: a temporary directory, removed at the
//! end) so that `ppol report` can be run on any of them.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use crate::evolve::config::RunConfig;
use crate::evolve::run::{evaluate_run, RunControl};
use crate::evolve::runlog::{EpisodeCounts, EvalRow, EvalTable};
use crate::front::ops::{self, Overrides};

/// Arguments of `ppol bench evolve`.
#[derive(Debug, Args)]
pub struct BenchEvolveArgs {
    /// How many runs (run seeds `first-seed`, `first-seed + 1`, ...).
    #[arg(long, default_value_t = 5, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_BENCH as u64))]
    pub seeds: u64,
    /// Seed of the first run.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1,
          value_parser = super::seed())]
    pub first_seed: u64,
    /// Iterations per run.
    #[arg(long, default_value_t = 30, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_ITERATIONS))]
    pub iterations: u64,
    #[command(flatten)]
    pub inputs: super::world::RunInputs,
    /// Run configuration (TOML) the runs start from; it must be offline (no [llm]).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Keep the runs in this directory (`seed-<s>/`); default: a temporary directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run every seed twice, with the cascade (`[search] cascade`) on and off, and compare
    /// the two: evolved − seed per seed, the mean difference and its standard error, and the
    /// episodes each played.
    #[arg(long)]
    pub compare_cascade: bool,
}

/// One run of the benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRun {
    /// Run seed.
    pub seed: u64,
    /// Iterations the run did.
    pub iterations: u64,
    /// Wall-clock seconds of the evolution (not the evaluation).
    pub wall_s: f64,
    /// CPU seconds of the evolution: this process and its sandbox children.
    pub cpu_s: f64,
    /// Held-out human dialogues the run was evaluated on.
    pub n_heldout: usize,
    /// Whether the run's cascade was on.
    pub cascade: bool,
    /// Episodes the run played (its `run_stopped`).
    pub episodes: EpisodeCounts,
    /// The evaluation table (rows human, base, direct, seed, evolved).
    pub table: EvalTable,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct BenchEvolve {
    /// The runs, in seed order.
    pub runs: Vec<BenchRun>,
    /// evolved − seed (table score), per run.
    pub evolved_minus_seed: Vec<f64>,
    /// evolved − base (table score), per run.
    pub evolved_minus_base: Vec<f64>,
    /// With `--compare-cascade`: the same seeds with the cascade off (`runs` have it on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cascade_off: Option<Box<BenchEvolve>>,
}

fn row<'a>(t: &'a EvalTable, name: &str) -> Option<&'a EvalRow> {
    t.rows
        .iter()
        .find(|r| r.name == name && r.skipped.is_none())
}

fn config(
    args: &BenchEvolveArgs,
    seed: u64,
    out: PathBuf,
    cascade: Option<bool>,
) -> anyhow::Result<RunConfig> {
    let mut o = Overrides::new();
    args.inputs.apply(&mut o)?;
    o.set("search.iterations", args.iterations)?
        .set("search.seed", seed)?
        .set("run.out", &out)?
        .set("run.name", format!("bench-seed-{seed}"))?
        .set_opt("search.cascade", cascade.as_ref())?;
    let cfg = ops::load_config(args.config.as_deref(), &o)?;
    anyhow::ensure!(
        cfg.llm.is_none(),
        "ppol bench evolve measures offline runs: the configuration has an [llm] section"
    );
    Ok(cfg)
}

/// Mean, sample standard deviation, minimum and maximum.
fn stats(xs: &[f64]) -> (f64, f64, f64, f64) {
    let n = xs.len() as f64;
    if xs.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN, f64::NAN);
    }
    let mean = xs.iter().sum::<f64>() / n;
    let sd = if xs.len() > 1 {
        (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, sd, min, max)
}

/// Run the benchmark (the runs one after another, each with every core); with
/// `--compare-cascade`, every seed with the cascade on, then every seed with it off.
pub fn measure(args: &BenchEvolveArgs) -> anyhow::Result<BenchEvolve> {
    anyhow::ensure!(args.seeds >= 1, "'--seeds' must be at least 1");
    anyhow::ensure!(args.iterations >= 1, "'--iterations' must be at least 1");
    if !args.compare_cascade {
        return measure_arm(args, None, "");
    }
    let mut on = measure_arm(args, Some(true), "cascade-on/")?;
    on.cascade_off = Some(Box::new(measure_arm(args, Some(false), "cascade-off/")?));
    Ok(on)
}

/// The runs of every seed, with the cascade set to `cascade` (None: as configured), kept in
/// `sub` under the benchmark's directory.
fn measure_arm(
    args: &BenchEvolveArgs,
    cascade: Option<bool>,
    sub: &str,
) -> anyhow::Result<BenchEvolve> {
    let tmp;
    let root = match &args.out {
        Some(p) => {
            std::fs::create_dir_all(p)
                .map_err(|e| crate::Error::io("creating the benchmark directory", p, e))?;
            p.clone()
        }
        None => {
            tmp = tempfile::tempdir()
                .map_err(|e| crate::Error::io("creating a temporary directory", "<tmp>", e))?;
            tmp.path().to_path_buf()
        }
    };
    let mut runs = Vec::new();
    for seed in args.first_seed..args.first_seed + args.seeds {
        let dir = root.join(format!("{sub}seed-{seed}"));
        anyhow::ensure!(
            !dir.exists(),
            "{} exists: give --out a fresh directory",
            dir.display()
        );
        let cfg = config(args, seed, dir.clone(), cascade)?;
        let cascade = cfg.search.cascade;
        let (cpu0, t0) = (crate::child::cpu_time(true).as_secs_f64(), Instant::now());
        let summary = ops::block_on(ops::evolve(cfg, RunControl::default()))??;
        let (wall_s, cpu_s) = (
            t0.elapsed().as_secs_f64(),
            crate::child::cpu_time(true).as_secs_f64() - cpu0,
        );
        anyhow::ensure!(
            !summary.reason.starts_with("infrastructure"),
            "run seed {seed} stopped early: {} ({})",
            summary.reason,
            dir.display()
        );
        let table = ops::block_on(evaluate_run(&summary.run_dir, None, &[], None, None))??.table;
        let n_heldout = row(&table, "human").map_or(0, |r| r.n_dialogues);
        anyhow::ensure!(
            n_heldout > 0,
            "run seed {seed} held out no human dialogues (fewer than 3 task groups, or \
             run.human_holdout = 0): nothing to evaluate on"
        );
        let episodes = summary.episodes.unwrap_or_default();
        if !args.json {
            eprintln!(
                "seed {seed} (cascade {}): {} iterations in {wall_s:.1} s wall, {cpu_s:.1} s CPU; {}",
                if cascade { "on" } else { "off" },
                summary.iterations,
                episodes.line()
            );
        }
        runs.push(BenchRun {
            seed,
            iterations: summary.iterations,
            wall_s,
            cpu_s,
            n_heldout,
            cascade,
            episodes,
            table,
        });
    }
    let gain = |other: &str| -> Vec<f64> {
        runs.iter()
            .filter_map(|r| Some(row(&r.table, "evolved")?.score - row(&r.table, other)?.score))
            .collect()
    };
    Ok(BenchEvolve {
        evolved_minus_seed: gain("seed"),
        evolved_minus_base: gain("base"),
        runs,
        cascade_off: None,
    })
}

/// The benchmark as text: the runs, and with `--compare-cascade` the runs with the cascade
/// off and the comparison.
pub fn render(b: &BenchEvolve) -> String {
    let Some(off) = &b.cascade_off else {
        return render_arm(b);
    };
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "== cascade on\n{}", render_arm(b));
    let _ = writeln!(s, "== cascade off\n{}", render_arm(off));
    let _ = writeln!(s, "== cascade on vs off\n{}", render_comparison(b, off));
    s
}

/// What a run played in episodes (total, and candidates' full and stopped evaluations).
fn candidate_episodes(e: &EpisodeCounts) -> u64 {
    e.candidates + e.stopped_early
}

/// The cascade's comparison: per seed evolved − seed on and off and episodes played; the mean
/// difference of evolved − seed with the standard error of the paired differences; the ratio of
/// episodes played.
fn render_comparison(on: &BenchEvolve, off: &BenchEvolve) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "seed  evo-seed on  evo-seed off  episodes on  episodes off  ratio  candidates' on/off  stopped"
    );
    let gain = |r: &BenchRun| match (row(&r.table, "evolved"), row(&r.table, "seed")) {
        (Some(e), Some(sd)) => Some(e.score - sd.score),
        _ => None,
    };
    let mut diffs = Vec::new();
    for (a, b) in on.runs.iter().zip(&off.runs) {
        let (ga, gb) = (gain(a), gain(b));
        if let (Some(x), Some(y)) = (ga, gb) {
            diffs.push(x - y);
        }
        let pp = |g: Option<f64>| g.map_or("-".into(), |g| format!("{:+.1}pp", 100.0 * g));
        let _ = writeln!(
            s,
            "{:>4}  {:>11}  {:>12}  {:>11}  {:>12}  {:>5.2}  {:>8} / {:<8}  {:>7}",
            a.seed,
            pp(ga),
            pp(gb),
            a.episodes.total,
            b.episodes.total,
            a.episodes.total as f64 / b.episodes.total.max(1) as f64,
            candidate_episodes(&a.episodes),
            candidate_episodes(&b.episodes),
            a.episodes.n_stopped,
        );
    }
    let (m_on, sd_on, ..) = stats(&on.evolved_minus_seed);
    let (m_off, sd_off, ..) = stats(&off.evolved_minus_seed);
    let (m_d, sd_d, ..) = stats(&diffs);
    let se_d = sd_d / (diffs.len().max(1) as f64).sqrt();
    let _ = writeln!(
        s,
        "evolved - seed: on mean {:+.1} pp (sd {:.1}), off mean {:+.1} pp (sd {:.1}); on - off {:+.1} pp, standard error {:.1} pp (n = {})",
        100.0 * m_on,
        100.0 * sd_on,
        100.0 * m_off,
        100.0 * sd_off,
        100.0 * m_d,
        100.0 * se_d,
        diffs.len()
    );
    let sum = |b: &BenchEvolve, f: &dyn Fn(&EpisodeCounts) -> u64| -> u64 {
        b.runs.iter().map(|r| f(&r.episodes)).sum()
    };
    let (t_on, t_off) = (sum(on, &|e| e.total), sum(off, &|e| e.total));
    let (c_on, c_off) = (sum(on, &candidate_episodes), sum(off, &candidate_episodes));
    let _ = writeln!(
        s,
        "episodes played: on {t_on}, off {t_off} (ratio {:.2}); candidates' episodes: on {c_on}, off {c_off} (ratio {:.2}); validations: on {}, off {}",
        t_on as f64 / t_off.max(1) as f64,
        c_on as f64 / c_off.max(1) as f64,
        sum(on, &|e| e.validations),
        sum(off, &|e| e.validations),
    );
    s
}

/// One arm of the benchmark as text.
fn render_arm(b: &BenchEvolve) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let score =
        |t: &EvalTable, n: &str| row(t, n).map_or("     -".into(), |r| format!("{:6.3}", r.score));
    let _ = writeln!(
        s,
        "seed  iters  wall s   cpu s  s/iter  held-out  human   base    seed  evolved  evo-seed  evo-base  episodes"
    );
    for r in &b.runs {
        let t = &r.table;
        let d = |other: &str| match (row(t, "evolved"), row(t, other)) {
            (Some(e), Some(o)) => format!("{:+7.1}pp", 100.0 * (e.score - o.score)),
            _ => "      -  ".into(),
        };
        let _ = writeln!(
            s,
            "{:>4}  {:>5}  {:>6.1}  {:>6.1}  {:>6.2}  {:>8}  {} {} {}  {}  {}  {}  {:>8}",
            r.seed,
            r.iterations,
            r.wall_s,
            r.cpu_s,
            r.wall_s / r.iterations.max(1) as f64,
            r.n_heldout,
            score(t, "human"),
            score(t, "base"),
            score(t, "seed"),
            score(t, "evolved"),
            d("seed"),
            d("base"),
            r.episodes.total,
        );
    }
    for (name, xs) in [
        ("evolved - seed", &b.evolved_minus_seed),
        ("evolved - base", &b.evolved_minus_base),
    ] {
        let (m, sd, lo, hi) = stats(xs);
        let _ = writeln!(
            s,
            "{name}: mean {:+.1} pp, sd {:.1} pp, min {:+.1} pp, max {:+.1} pp (n = {})",
            100.0 * m,
            100.0 * sd,
            100.0 * lo,
            100.0 * hi,
            xs.len()
        );
    }
    let walls: Vec<f64> = b.runs.iter().map(|r| r.wall_s).collect();
    let cpus: Vec<f64> = b.runs.iter().map(|r| r.cpu_s).collect();
    let per_iter: Vec<f64> = b
        .runs
        .iter()
        .map(|r| r.wall_s / r.iterations.max(1) as f64)
        .collect();
    let _ = writeln!(
        s,
        "time per run: wall mean {:.1} s (max {:.1} s), CPU mean {:.1} s; {:.2} s per iteration",
        stats(&walls).0,
        stats(&walls).3,
        stats(&cpus).0,
        stats(&per_iter).0
    );
    let _ = writeln!(
        s,
        "\nmeans over runs     score  P(human)  coverage     D1     D2     D3     D4  overall"
    );
    for name in ["human", "base", "seed", "evolved"] {
        let rows: Vec<&EvalRow> = b.runs.iter().filter_map(|r| row(&r.table, name)).collect();
        if rows.is_empty() {
            continue;
        }
        let m =
            |f: &dyn Fn(&EvalRow) -> f64| stats(&rows.iter().map(|r| f(r)).collect::<Vec<_>>()).0;
        let _ = writeln!(
            s,
            "{name:<18} {:6.3}    {:6.3}    {:6.3}  {:5.2}  {:5.2}  {:5.2}  {:5.2}    {:5.2}",
            m(&|r| r.score),
            m(&|r| r.human_likeness),
            m(&|r| r.coverage),
            m(&|r| r.dice.D1),
            m(&|r| r.dice.D2),
            m(&|r| r.dice.D3),
            m(&|r| r.dice.D4),
            m(&|r| r.dice.overall),
        );
    }
    s
}

/// Run `ppol bench evolve`.
pub fn run(args: BenchEvolveArgs) -> anyhow::Result<()> {
    let b = measure(&args)?;
    if args.json {
        println!("{}", crate::io::to_json_pretty(&b));
    } else {
        print!("{}", render(&b));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::stats;

    #[test]
    fn stats_are_mean_sample_sd_and_range() {
        let (m, sd, lo, hi) = stats(&[1.0, 2.0, 3.0, 6.0]);
        assert!((m - 3.0).abs() < 1e-12);
        assert!((sd - (14.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!((lo, hi), (1.0, 6.0));
        assert_eq!(stats(&[2.5]).1, 0.0);
    }
}
