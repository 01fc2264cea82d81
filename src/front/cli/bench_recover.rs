//! `ppol bench recover`: does the search find a population it is known to be able to find?
//!
//! A *planted population* is a world plus a hidden mixture of persona texts (kinds of users with
//! weights, `fitness/planted.toml` or `--mixtures FILE`). The world's own user plays the mixture
//! to make "humans" at any count: `--train-humans` on the world's train tasks, which the search
//! sees (`run.human`, nothing held out), and `--test-humans` others on its test tasks, which
//! only the audit sees. Because some persona population reproduces the humans exactly, the
//! audit's AUC of the evolved program against the test humans says how much of the way the
//! search went: 0.5 is all of it.
//!
//! For every mixture, objective (`--objectives`, default both) and run seed it runs an offline
//! evolution and `ppol eval` against the test humans, and prints the audit's forest and
//! logistic AUC of the plain simulator (base), the seed program and the evolved program with
//! their 95% intervals; then per mixture and objective the means over seeds and how many runs
//! ended below their seed. The runs are kept under `--out` (default: a temporary directory).

use std::path::{Path, PathBuf};

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::evolve::run::{evaluate_run, RunControl};
use crate::fitness::audit::AucInterval;
use crate::fitness::settings::Objective;
use crate::front::ops::{self, EpisodesInput, Overrides};
use crate::persona::Persona;

/// The shipped planted mixtures.
pub const PLANTED: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/fitness/planted.toml"));

/// Arguments of `ppol bench recover`.
#[derive(Debug, Args)]
pub struct BenchRecoverArgs {
    /// Runs per mixture and objective (run seeds `first-seed`, `first-seed + 1`, ...).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_BENCH as u64))]
    pub seeds: u64,
    /// Seed of the first run.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1,
          value_parser = super::seed())]
    pub first_seed: u64,
    /// Iterations per run.
    #[arg(long, default_value_t = 20, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_ITERATIONS))]
    pub iterations: u64,
    /// Planted humans the search sees (on the world's train tasks; rounded up to a whole
    /// number per task).
    #[arg(long, default_value_t = 72, allow_negative_numbers = true,
          value_parser = super::count(10, crate::limits::MAX_EPISODES as u64))]
    pub train_humans: u64,
    /// Planted humans only the audit sees (on the world's test tasks).
    #[arg(long, default_value_t = 128, allow_negative_numbers = true,
          value_parser = super::count(10, crate::limits::MAX_EPISODES as u64))]
    pub test_humans: u64,
    /// Mixtures (TOML, the format of the shipped `fitness/planted.toml`); default: the shipped ones.
    #[arg(long)]
    pub mixtures: Option<PathBuf>,
    /// Only these mixtures (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Objectives compared side by side (comma-separated: paper, population).
    #[arg(long, value_delimiter = ',', default_value = "paper,population")]
    pub objectives: Vec<String>,
    /// Built-in world: demo, retail, airline (an alias of --world).
    #[arg(long)]
    pub domain: Option<String>,
    /// τ² data directory of retail/airline.
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    #[command(flatten)]
    pub world: super::world::WorldFlags,
    /// Run configuration (TOML) the runs start from; it must be offline (no [llm]).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Keep the humans and runs in this directory; default: a temporary directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The mixtures file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MixturesFile {
    version: u32,
    mixture: Vec<Mixture>,
}

/// One planted mixture.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mixture {
    /// Name.
    pub name: String,
    /// One line about it.
    #[serde(default)]
    pub summary: String,
    /// Its kinds of users.
    pub kind: Vec<Kind>,
}

/// A kind of user in a mixture.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kind {
    /// Relative weight (> 0).
    pub weight: f64,
    /// The roleplay text its users play.
    pub text: String,
}

/// Read and check a mixtures file (`what`: its name in errors).
pub fn parse_mixtures(text: &str, what: &str) -> anyhow::Result<Vec<Mixture>> {
    let file: MixturesFile =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{what}: {}", e.to_string().trim()))?;
    anyhow::ensure!(
        file.version == 1,
        "{what}: version {} (this ppol reads version 1)",
        file.version
    );
    anyhow::ensure!(!file.mixture.is_empty(), "{what}: no [[mixture]]");
    for (i, m) in file.mixture.iter().enumerate() {
        anyhow::ensure!(
            !m.kind.is_empty(),
            "{what}: mixture[{i}] '{}' has no [[mixture.kind]]",
            m.name
        );
        for (j, k) in m.kind.iter().enumerate() {
            anyhow::ensure!(
                k.weight.is_finite() && k.weight > 0.0,
                "{what}: mixture[{i}].kind[{j}].weight must be a positive number (is {})",
                k.weight
            );
            anyhow::ensure!(
                !k.text.trim().is_empty(),
                "{what}: mixture[{i}].kind[{j}].text is empty"
            );
        }
    }
    Ok(file.mixture)
}

/// `n` personas of the mixture, its kinds apportioned by weight (largest remainder, ties to
/// the earlier kind).
pub fn personas(m: &Mixture, n: usize) -> Vec<Persona> {
    let total: f64 = m.kind.iter().map(|k| k.weight).sum();
    let quotas: Vec<f64> = m.kind.iter().map(|k| n as f64 * k.weight / total).collect();
    let mut counts: Vec<usize> = quotas.iter().map(|q| q.floor() as usize).collect();
    let mut order: Vec<usize> = (0..quotas.len()).collect();
    order.sort_by(|&a, &b| {
        (quotas[b] - counts[b] as f64).total_cmp(&(quotas[a] - counts[a] as f64))
    });
    for &j in order.iter().take(n - counts.iter().sum::<usize>()) {
        counts[j] += 1;
    }
    let mut out = Vec::new();
    for (j, (k, c)) in m.kind.iter().zip(counts).enumerate() {
        for i in 0..c {
            out.push(Persona {
                task_id: None,
                persona_id: format!("planted_kind{j}_{i}"),
                description: format!("planted kind {j} of mixture {}", m.name),
                axis_placement: Default::default(),
                text: k.text.clone(),
                reasoning: None,
                source: Some("planted".into()),
            });
        }
    }
    out
}

/// One run of the benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct RecoverRun {
    /// Mixture.
    pub mixture: String,
    /// Objective.
    pub objective: String,
    /// Run seed.
    pub seed: u64,
    /// Iterations the run did.
    pub iterations: u64,
    /// Wall-clock seconds of the evolution.
    pub wall_s: f64,
    /// Audit of base, seed, evolved: (forest, logistic) AUC with intervals.
    pub audit: Vec<(String, Option<AucInterval>, Option<AucInterval>)>,
    /// The control (test humans against themselves in halves).
    pub control: Option<(Option<AucInterval>, Option<AucInterval>)>,
    /// The run directory.
    pub dir: PathBuf,
    /// What the population objective costs per candidate: (milliseconds to score the best
    /// program's episodes, milliseconds of wall time per candidate evaluation of the run).
    pub objective_ms: Option<(f64, f64)>,
}

impl RecoverRun {
    fn auc(&self, row: &str, forest: bool) -> Option<f64> {
        let (_, f, l) = self.audit.iter().find(|(n, ..)| n == row)?;
        Some(if forest {
            f.as_ref()?.auc
        } else {
            l.as_ref()?.auc
        })
    }
}

/// The planted humans of a mixture: (train file, train count, test file, test count).
struct Planted {
    train: PathBuf,
    n_train: usize,
    test: PathBuf,
    n_test: usize,
}

fn world_overrides(args: &BenchRecoverArgs) -> anyhow::Result<Overrides> {
    let mut o = Overrides::new();
    o.flag("--domain", "run.domain", args.domain.as_ref())?
        .flag("--tau2-data", "run.tau2_data", args.tau2_data.as_ref())?;
    args.world.apply(&mut o)?;
    Ok(o)
}

/// Play `count` planted humans (rounded up to whole personas per task) on `split`'s tasks.
fn plant_split(
    args: &BenchRecoverArgs,
    m: &Mixture,
    split: &str,
    count: usize,
    seed: u64,
    out: &Path,
) -> anyhow::Result<usize> {
    let mut input = EpisodesInput {
        config: args.config.clone(),
        overrides: world_overrides(args)?,
        tasks: split.into(),
        personas: None,
        trials: 1,
        llm: None,
        seed,
        concurrency: ops::EpisodesRequest::CONCURRENCY,
        output: Some(out.to_path_buf()),
        ..EpisodesInput::default()
    };
    let probe = EpisodesInput {
        config: args.config.clone(),
        overrides: world_overrides(args)?,
        tasks: split.into(),
        trials: 1,
        seed,
        concurrency: 1,
        ..EpisodesInput::default()
    };
    let n_tasks = ops::block_on(ops::selected_tasks(&probe.resolve()?))??.len();
    anyhow::ensure!(
        n_tasks > 0,
        "the world has no tasks in split '{split}': a planted population needs train and test tasks"
    );
    input.personas = Some(personas(m, count.div_ceil(n_tasks).max(1)));
    let report = ops::block_on(ops::episodes(input.resolve()?, &|_| {}))??;
    let failed = report
        .episodes
        .iter()
        .filter(|e| e.status != crate::simulate::episode::record::EpisodeStatus::Ok)
        .count();
    anyhow::ensure!(
        failed == 0,
        "planting mixture '{}' on split '{split}': {failed} of {} episodes failed ({})",
        m.name,
        report.episodes.len(),
        out.display()
    );
    Ok(report.episodes.len())
}

fn plant(args: &BenchRecoverArgs, m: &Mixture, dir: &Path) -> anyhow::Result<Planted> {
    std::fs::create_dir_all(dir).map_err(|e| crate::Error::io("creating directory", dir, e))?;
    let (train, test) = (
        dir.join("humans-train.jsonl"),
        dir.join("humans-test.jsonl"),
    );
    let n_train = plant_split(
        args,
        m,
        "train",
        args.train_humans as usize,
        0x7472_6169,
        &train,
    )?;
    let n_test = plant_split(
        args,
        m,
        "test",
        args.test_humans as usize,
        0x7465_7374,
        &test,
    )?;
    Ok(Planted {
        train,
        n_train,
        test,
        n_test,
    })
}

fn objective(name: &str) -> anyhow::Result<Objective> {
    match name.trim() {
        "paper" => Ok(Objective::Paper),
        "population" => Ok(Objective::Population),
        other => anyhow::bail!("--objectives: unknown objective '{other}' (paper, population)"),
    }
}

fn run_one(
    args: &BenchRecoverArgs,
    m: &Mixture,
    planted: &Planted,
    obj: Objective,
    seed: u64,
    dir: PathBuf,
) -> anyhow::Result<RecoverRun> {
    anyhow::ensure!(
        !dir.exists(),
        "{} exists: give --out a fresh directory",
        dir.display()
    );
    let mut o = world_overrides(args)?;
    o.set("run.human", [&planted.train])?
        .set("run.human_holdout", 0.0)?
        .set("fitness.objective", obj.name())?
        .set("search.iterations", args.iterations)?
        .set("search.seed", seed)?
        .set("run.out", &dir)?
        .set(
            "run.name",
            format!("recover-{}-{}-{seed}", m.name, obj.name()),
        )?;
    let cfg = ops::load_config(args.config.as_deref(), &o)?;
    anyhow::ensure!(
        cfg.llm.is_none(),
        "ppol bench recover measures offline runs: the configuration has an [llm] section"
    );
    let t0 = std::time::Instant::now();
    let summary = ops::block_on(ops::evolve(cfg, RunControl::default()))??;
    let wall_s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(
        !summary.reason.starts_with("infrastructure"),
        "run {} stopped early: {}",
        dir.display(),
        summary.reason
    );
    let report = ops::block_on(evaluate_run(
        &summary.run_dir,
        None,
        std::slice::from_ref(&planted.test),
        None,
        None,
    ))??;
    let audit = report
        .table
        .rows
        .iter()
        .filter(|r| ["base", "seed", "evolved"].contains(&r.name.as_str()))
        .map(|r| {
            let a = r.audit.as_ref();
            (
                r.name.clone(),
                a.and_then(|a| a.random_forest),
                a.and_then(|a| a.logistic),
            )
        })
        .collect();
    let control = report
        .table
        .rows
        .iter()
        .find(|r| r.name == "human")
        .and_then(|r| r.audit.as_ref())
        .map(|c| (c.random_forest, c.logistic));
    let evaluations = summary
        .episodes
        .as_ref()
        .map_or(0, |e| e.n_candidates + e.n_stopped)
        .max(1);
    let objective_ms =
        objective_cost(&summary.run_dir).map(|ms| (ms, 1000.0 * wall_s / evaluations as f64));
    Ok(RecoverRun {
        objective_ms,
        mixture: m.name.clone(),
        objective: obj.name().into(),
        seed,
        iterations: summary.iterations,
        wall_s,
        audit,
        control,
        dir,
    })
}

/// Milliseconds the population objective takes to score the run's best program's episodes
/// against the run's search humans (the median of 5), or None when they cannot be read.
fn objective_cost(dir: &Path) -> Option<f64> {
    let reference =
        crate::fitness::reference::HumanReference::load(&dir.join("human_ref.json")).ok()?;
    let episodes =
        crate::simulate::episode::record::load_episodes(&dir.join("best/episodes.jsonl")).ok()?;
    let test = crate::fitness::population::PopulationTest::new(&reference).ok()?;
    let points: Vec<(String, crate::fitness::features::Fingerprint)> = episodes
        .iter()
        .map(|e| {
            (
                e.task_id.clone(),
                crate::fitness::features::fingerprint(&e.to_dialogue(), reference.feature_set),
            )
        })
        .collect();
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(test.measure(&points));
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    Some(times[2])
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRecover {
    /// The mixtures measured, with their planted counts (train, test).
    pub mixtures: Vec<(Mixture, usize, usize)>,
    /// Every run.
    pub runs: Vec<RecoverRun>,
}

/// Run every mixture × objective × seed.
pub fn measure(args: &BenchRecoverArgs) -> anyhow::Result<BenchRecover> {
    let mut mixtures = match &args.mixtures {
        Some(p) => parse_mixtures(&crate::io::read_to_string(p)?, &p.display().to_string())?,
        None => parse_mixtures(PLANTED, "fitness/planted.toml")?,
    };
    if !args.only.is_empty() {
        for name in &args.only {
            anyhow::ensure!(
                mixtures.iter().any(|m| &m.name == name),
                "--only: no mixture '{name}' (there are: {})",
                mixtures
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        mixtures.retain(|m| args.only.contains(&m.name));
    }
    let objectives: Vec<Objective> = args
        .objectives
        .iter()
        .map(|o| objective(o))
        .collect::<anyhow::Result<_>>()?;
    let tmp;
    let root = match &args.out {
        Some(p) => p.clone(),
        None => {
            tmp = tempfile::tempdir()
                .map_err(|e| crate::Error::io("creating a temporary directory", "<tmp>", e))?;
            tmp.path().to_path_buf()
        }
    };
    let mut out = BenchRecover {
        mixtures: Vec::new(),
        runs: Vec::new(),
    };
    for m in &mixtures {
        let dir = root.join(crate::evolve::heldout::file_safe(&m.name));
        let planted = plant(args, m, &dir)?;
        if !args.json {
            eprintln!(
                "mixture {}: {} planted humans on train tasks for the search, {} on test tasks for the audit",
                m.name, planted.n_train, planted.n_test
            );
        }
        for &obj in &objectives {
            for seed in args.first_seed..args.first_seed + args.seeds {
                let run_dir = dir.join(format!("{}-seed-{seed}", obj.name()));
                let r = run_one(args, m, &planted, obj, seed, run_dir)?;
                if !args.json {
                    eprintln!("{}", run_line(&r));
                }
                out.runs.push(r);
            }
        }
        out.mixtures
            .push((m.clone(), planted.n_train, planted.n_test));
    }
    Ok(out)
}

fn cell(i: Option<&AucInterval>) -> String {
    i.map_or("       -          ".into(), |i| i.to_string())
}

fn run_line(r: &RecoverRun) -> String {
    let row = |name: &str| {
        r.audit
            .iter()
            .find(|(n, ..)| n == name)
            .map_or(format!("{:>38}", "-"), |(_, f, l)| {
                format!("{} {}", cell(f.as_ref()), cell(l.as_ref()))
            })
    };
    format!(
        "{:<16} {:<10} {:>4}  {:>5.1}  base {}  seed {}  evolved {}",
        r.mixture,
        r.objective,
        r.seed,
        r.wall_s,
        row("base"),
        row("seed"),
        row("evolved")
    )
}

/// The result as text: every run (forest then logistic AUC per row), then per mixture and
/// objective the means over seeds and the runs whose evolved program is below its seed.
pub fn render(b: &BenchRecover) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "audit AUC against the planted test humans (0.5 = indistinguishable; forest [95%] then logistic [95%])"
    );
    let _ = writeln!(
        s,
        "{:<16} {:<10} {:>4}  {:>5}  per row",
        "mixture", "objective", "seed", "wall"
    );
    for r in &b.runs {
        let _ = writeln!(s, "{}", run_line(r));
    }
    let _ = writeln!(
        s,
        "\nmeans over seeds          forest: base   seed  evolved  below seed   logistic: base   seed  evolved  below seed"
    );
    for (m, n_train, n_test) in &b.mixtures {
        let objectives: Vec<&str> = {
            let mut v: Vec<&str> = Vec::new();
            for r in b.runs.iter().filter(|r| r.mixture == m.name) {
                if !v.contains(&r.objective.as_str()) {
                    v.push(&r.objective);
                }
            }
            v
        };
        for o in objectives {
            let runs: Vec<&RecoverRun> = b
                .runs
                .iter()
                .filter(|r| r.mixture == m.name && r.objective == o)
                .collect();
            let mean = |row: &str, forest: bool| {
                let v: Vec<f64> = runs.iter().filter_map(|r| r.auc(row, forest)).collect();
                if v.is_empty() {
                    "     -".to_string()
                } else {
                    format!("{:6.3}", v.iter().sum::<f64>() / v.len() as f64)
                }
            };
            let below = |forest: bool| {
                let n = runs
                    .iter()
                    .filter(
                        |r| match (r.auc("evolved", forest), r.auc("seed", forest)) {
                            (Some(e), Some(sd)) => e < sd,
                            _ => false,
                        },
                    )
                    .count();
                format!("{n}/{}", runs.len())
            };
            let _ = writeln!(
                s,
                "{:<14} {:<10} {} {} {}  {:>10}         {} {} {}  {:>10}",
                m.name,
                o,
                mean("base", true),
                mean("seed", true),
                mean("evolved", true),
                below(true),
                mean("base", false),
                mean("seed", false),
                mean("evolved", false),
                below(false),
            );
        }
        let _ = writeln!(
            s,
            "  {}: {} ({} train humans, {} test humans)",
            m.name, m.summary, n_train, n_test
        );
    }
    let costs: Vec<(f64, f64)> = b
        .runs
        .iter()
        .filter(|r| r.objective == "population")
        .filter_map(|r| r.objective_ms)
        .collect();
    if !costs.is_empty() {
        let n = costs.len() as f64;
        let (obj, eval) = (
            costs.iter().map(|c| c.0).sum::<f64>() / n,
            costs.iter().map(|c| c.1).sum::<f64>() / n,
        );
        let _ = writeln!(
            s,
            "population objective: {obj:.1} ms to score a program's episodes, against {eval:.0} ms of the run's wall time per candidate evaluated ({:.1}%; mean over {} runs)",
            100.0 * obj / eval,
            costs.len()
        );
    }
    s
}

/// Run `ppol bench recover`.
pub fn run(args: BenchRecoverArgs) -> anyhow::Result<()> {
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
    use super::*;

    #[test]
    fn the_shipped_mixtures_parse_and_apportion_by_weight() {
        let ms = parse_mixtures(PLANTED, "planted").unwrap();
        assert!(ms.len() >= 3);
        let p = personas(&ms[0], 10);
        assert_eq!(p.len(), 10);
        let kind0 = p
            .iter()
            .filter(|p| p.persona_id.starts_with("planted_kind0_"))
            .count();
        assert_eq!(kind0, 5, "weights 5:3:2 of 10");
    }

    #[test]
    fn a_bad_weight_names_its_key() {
        let text = "version = 1\n[[mixture]]\nname = \"x\"\n[[mixture.kind]]\nweight = 0\ntext = \"Be brief.\"\n";
        let e = parse_mixtures(text, "m.toml").unwrap_err().to_string();
        assert!(e.contains("mixture[0].kind[0].weight"), "{e}");
    }
}
