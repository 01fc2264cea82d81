//! `ppol bench fingerprint TRACES [--repeat N]`: fingerprinting speed, side by side with the
//! reference Python package when it is installed, so the ratios come from one run on one machine.
//! Two figures: the kernel (fingerprints of dialogues already in memory) and end to end (a
//! `ppol fingerprint FILE -o OUT` process against a `python -c` process doing the same with the
//! reference package, from process start to the JSONL file written).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};

use crate::dialogue::Dialogue;
use crate::fitness::features::{fingerprint, fingerprint_many, FeatureSet, Fingerprint};
use crate::fitness::traces::{self, LoadOptions};

/// `ppol bench ...`
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// Benchmarks (parsed once per process: the size of the largest variant does not matter).
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
pub enum BenchCommand {
    /// Fingerprints per second (all cores, one core, and the reference package if importable).
    Fingerprint {
        /// Trace files.
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// How many passes over the dialogues per measurement.
        #[arg(long, default_value_t = 20, allow_negative_numbers = true,
              value_parser = super::count(1, crate::limits::MAX_BENCH))]
        repeat: usize,
        /// Feature set.
        #[arg(long, default_value = "ppol-0.1.1")]
        feature_set: FeatureSet,
        /// Python interpreter that has the reference package `ppol` 0.1.1 (`pip install --no-deps ppol==0.1.1 numpy`).
        /// Default: `python3`; the comparison is skipped when it cannot import `ppol.fingerprinting`.
        #[arg(long, default_value = "python3")]
        reference_python: String,
        /// Skip the reference comparison.
        #[arg(long)]
        no_reference: bool,
        /// End to end: the dialogues are repeated into one JSONL file of at least this many.
        #[arg(long, default_value_t = 3000, allow_negative_numbers = true,
              value_parser = super::count(1, crate::limits::MAX_BENCH))]
        end_to_end_dialogues: usize,
        /// End to end: runs of each process; the fastest counts.
        #[arg(long, default_value_t = 3, allow_negative_numbers = true,
              value_parser = super::count(1, crate::limits::MAX_BENCH))]
        end_to_end_runs: usize,
    },
    /// How well ppol drives an LLM endpoint, against the mock server (needs a build with
    /// `--features testing`): evaluation time as a multiple of one episode, CPU per call,
    /// the concurrency it settles at under 429s.
    Llm(super::bench_llm::BenchLlmArgs),
    /// Offline evolutions over several run seeds, scored on the human dialogues each run held
    /// out: evolved − seed, evolved − base, Dice D1–D4, seconds per iteration.
    Evolve(super::bench_evolve::BenchEvolveArgs),
    /// A planted population: a world's own user plays a hidden persona mixture to make humans
    /// (train tasks for the search, test tasks for the audit); offline runs per objective and
    /// seed, and the audit's AUC of base, seed and evolved against the test humans.
    Recover(super::bench_recover::BenchRecoverArgs),
    /// Can the world's user produce what the humans do: per feature of both sets, the range it
    /// reaches across personas against the humans' range.
    Reach(super::bench_reach::BenchReachArgs),
    /// Episodes per second of an external world: N episodes of a fixed length in P simulator
    /// processes against the ideal ceil(N / P) x one episode.
    World(super::bench_world::BenchWorldArgs),
}

/// The reference timing script: loads `ppol/fingerprinting.py` without importing the heavy
/// package `__init__`, fingerprints every dialogue `repeat` times, prints dialogues/s and the
/// fingerprints of the first pass (to check identical output).
const REFERENCE_SCRIPT: &str = r#"
import importlib.util, json, os, sys, time
spec = importlib.util.find_spec("ppol")
if spec is None or not spec.submodule_search_locations:
    sys.exit(3)
path = os.path.join(list(spec.submodule_search_locations)[0], "fingerprinting.py")
s = importlib.util.spec_from_file_location("ppol_ref_fingerprinting", path)
m = importlib.util.module_from_spec(s); sys.modules[s.name] = m; s.loader.exec_module(m)
convs = [json.loads(l)["conversation"] for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
repeat = int(sys.argv[2])
ex = m.BehavioralFingerprintExtractor()
first = [ex.compute_fingerprint(c).to_dict() for c in convs]
t = time.perf_counter()
for _ in range(repeat):
    for c in convs:
        ex.compute_fingerprint(c)
dt = time.perf_counter() - t
print(json.dumps({"per_s": len(convs) * repeat / dt, "features": first}))
"#;

/// The reference end to end, what `ppol fingerprint FILE -o OUT` does: read the JSONL file,
/// fingerprint every dialogue with `ppol.fingerprinting`, write one JSONL line per dialogue.
const REFERENCE_END_TO_END: &str = r#"
import importlib.util, json, os, sys
spec = importlib.util.find_spec("ppol")
if spec is None or not spec.submodule_search_locations:
    sys.exit(3)
path = os.path.join(list(spec.submodule_search_locations)[0], "fingerprinting.py")
s = importlib.util.spec_from_file_location("ppol_ref_fingerprinting", path)
m = importlib.util.module_from_spec(s); sys.modules[s.name] = m; s.loader.exec_module(m)
with open(sys.argv[1], encoding="utf-8") as f:
    rows = [json.loads(l) for l in f if l.strip()]
ex = m.BehavioralFingerprintExtractor()
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for r in rows:
        fp = ex.compute_fingerprint(r["conversation"])
        out.write(json.dumps({"id": r.get("id"), "task_id": r.get("task_id"), "features": fp.to_dict()}) + "\n")
"#;

/// Run `ppol bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let (
        traces,
        repeat,
        feature_set,
        reference_python,
        no_reference,
        end_to_end_dialogues,
        end_to_end_runs,
    ) = match args.command {
        BenchCommand::Llm(a) => return super::bench_llm::run(a),
        BenchCommand::Evolve(a) => return super::bench_evolve::run(a),
        BenchCommand::Recover(a) => return super::bench_recover::run(a),
        BenchCommand::Reach(a) => return super::bench_reach::run(a),
        BenchCommand::World(a) => return super::bench_world::run(a),
        BenchCommand::Fingerprint {
            traces,
            repeat,
            feature_set,
            reference_python,
            no_reference,
            end_to_end_dialogues,
            end_to_end_runs,
        } => (
            traces,
            repeat,
            feature_set,
            reference_python,
            no_reference,
            end_to_end_dialogues,
            end_to_end_runs,
        ),
    };
    let ds = traces::load_many(&traces, &LoadOptions::default())?;
    anyhow::ensure!(!ds.is_empty(), "no dialogues in the given traces");
    let repeat = repeat.max(1);
    let n_turns: usize = ds.iter().map(|d| d.n_user_turns()).sum();
    // warm up (compiles the banks)
    let ours = fingerprint_many(&ds, feature_set);

    let t = Instant::now();
    for _ in 0..repeat {
        std::hint::black_box(fingerprint_many(&ds, feature_set));
    }
    let par = (ds.len() * repeat) as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    for _ in 0..repeat {
        for d in &ds {
            std::hint::black_box(fingerprint(d, feature_set));
        }
    }
    let single = (ds.len() * repeat) as f64 / t.elapsed().as_secs_f64();

    println!(
        "dialogues: {}  user turns: {}  repeat: {}  feature set: {}  threads: {}",
        ds.len(),
        n_turns,
        repeat,
        feature_set,
        rayon::current_num_threads()
    );
    println!("kernel: fingerprints of dialogues already in memory (no process start, no I/O)");
    println!("ppol (rayon, all cores): {par:>12.0} dialogues/s");
    println!("ppol (one core):         {single:>12.0} dialogues/s");
    let compare = !no_reference && feature_set == FeatureSet::Ppol011;
    if compare {
        kernel_reference(&ds, &ours, repeat, &reference_python, par, single);
    }
    end_to_end(
        &ds,
        feature_set,
        end_to_end_dialogues.max(1),
        end_to_end_runs.max(1),
        compare.then_some(reference_python.as_str()),
    )
}

fn kernel_reference(
    ds: &[Dialogue],
    ours: &[Fingerprint],
    repeat: usize,
    reference_python: &str,
    par: f64,
    single: f64,
) {
    match reference_rate(ds, repeat.min(5), reference_python) {
        Ok((ref_rate, ref_features)) => {
            let max_diff = ours
                .iter()
                .zip(&ref_features)
                .flat_map(|(a, b)| a.0.iter().zip(b.0.iter()).map(|(x, y)| (x - y).abs()))
                .fold(0.0f64, f64::max);
            println!("reference ppol 0.1.1:    {ref_rate:>12.0} dialogues/s  ({reference_python})");
            println!("speed-up (kernel): {:.0}x (all cores), {:.0}x (one core); max |difference| of features: {max_diff:.3e}", par / ref_rate, single / ref_rate);
        }
        Err(why) => println!("reference ppol 0.1.1: not measured ({why})"),
    }
}

/// The end-to-end comparison: the dialogues repeated into one JSONL file of at least `min_dialogues`,
/// then `ppol fingerprint FILE -o OUT` (this binary, a child process) and, when `reference` is
/// given, `python -c REFERENCE_END_TO_END FILE OUT`, each run `runs` times, the fastest kept.
fn end_to_end(
    ds: &[Dialogue],
    feature_set: FeatureSet,
    min_dialogues: usize,
    runs: usize,
    reference: Option<&str>,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("traces.jsonl");
    let n = write_repeated(ds, min_dialogues, &input)?;
    let bytes = std::fs::metadata(&input)?.len();
    println!(
        "end to end: process start -> {n} dialogues read from one JSONL file ({:.1} MB, the input repeated) -> fingerprints -> JSONL file written; fastest of {runs} runs",
        bytes as f64 / 1e6
    );
    let exe = match ppol_binary() {
        Ok(exe) => exe,
        Err(why) => {
            println!("ppol fingerprint:        not measured ({why})");
            return Ok(());
        }
    };
    let ours_out = dir.path().join("ppol.features.jsonl");
    let ours = fastest(runs, || {
        let mut cmd = Command::new(&exe);
        cmd.arg("fingerprint")
            .arg("--feature-set")
            .arg(feature_set.name())
            .arg(&input)
            .arg("-o")
            .arg(&ours_out);
        run_child(cmd, "ppol fingerprint")
    })?;
    let per_s = |t: Duration| n as f64 / t.as_secs_f64();
    println!(
        "ppol fingerprint:        {:>9.3} s  {:>12.0} dialogues/s  ({} threads)",
        ours.as_secs_f64(),
        per_s(ours),
        rayon::current_num_threads()
    );
    let Some(python) = reference else {
        return Ok(());
    };
    let ref_out = dir.path().join("reference.features.jsonl");
    let theirs = fastest(runs, || {
        let mut cmd = Command::new(python);
        cmd.arg("-c")
            .arg(REFERENCE_END_TO_END)
            .arg(&input)
            .arg(&ref_out);
        run_child(cmd, python)
    });
    let theirs = match theirs {
        Ok(t) => t,
        Err(why) => {
            println!("reference ppol 0.1.1:    not measured ({why:#})");
            return Ok(());
        }
    };
    println!(
        "reference ppol 0.1.1:    {:>9.3} s  {:>12.0} dialogues/s  (one thread, {python})",
        theirs.as_secs_f64(),
        per_s(theirs)
    );
    let max_diff = max_difference(&ours_out, &ref_out)?;
    println!(
        "speed-up (end to end): {:.0}x; max |difference| of features between the two output files: {max_diff:.3e}",
        theirs.as_secs_f64() / ours.as_secs_f64()
    );
    Ok(())
}

/// Write `ds` as JSONL (one object per dialogue: id, task_id, domain, conversation and the
/// metadata keys, as the loader reads them back) repeated until there are at least
/// `min_dialogues` lines; returns the number of lines.
fn write_repeated(ds: &[Dialogue], min_dialogues: usize, path: &Path) -> anyhow::Result<usize> {
    // every copy but the first gets its own ids (`id#2`, ...): a file may not repeat an id
    let line = |d: &Dialogue, copy: usize| -> anyhow::Result<Vec<u8>> {
        let mut obj = serde_json::Map::new();
        let id = match copy {
            0 => d.id.clone(),
            k => format!("{}#{}", d.id, k + 1),
        };
        obj.insert("id".into(), id.into());
        if let Some(t) = &d.task_id {
            obj.insert("task_id".into(), t.clone().into());
        }
        if let Some(dom) = &d.domain {
            obj.insert("domain".into(), dom.clone().into());
        }
        obj.insert("conversation".into(), serde_json::to_value(&d.turns)?);
        for (k, v) in &d.meta {
            obj.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let mut line = serde_json::to_vec(&obj)?;
        line.push(b'\n');
        Ok(line)
    };
    let copies = min_dialogues.div_ceil(ds.len());
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    for copy in 0..copies {
        for d in ds {
            w.write_all(&line(d, copy)?)?;
        }
    }
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(copies * ds.len())
}

/// This process's executable when it is the `ppol` binary (not, say, Python running the
/// binding's `cli()`).
fn ppol_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    match exe.file_stem().and_then(|s| s.to_str()) {
        Some(stem) if stem.starts_with("ppol") => Ok(exe),
        _ => Err(format!(
            "{} is not the ppol binary; run `ppol bench` from the command line",
            exe.display()
        )),
    }
}

/// Run `cmd` to completion; its wall time from spawn to exit.
fn run_child(mut cmd: Command, what: &str) -> anyhow::Result<Duration> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run {what}: {e}"))?;
    let elapsed = t.elapsed();
    if out.status.code() == Some(3) {
        anyhow::bail!("{what} cannot find the package 'ppol'; install it with `pip install --no-deps ppol==0.1.1 numpy`");
    }
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        anyhow::bail!(
            "{what} failed ({}): {}",
            out.status,
            err.lines().last().unwrap_or("")
        );
    }
    Ok(elapsed)
}

fn fastest(
    runs: usize,
    mut run: impl FnMut() -> anyhow::Result<Duration>,
) -> anyhow::Result<Duration> {
    let mut best = run()?;
    for _ in 1..runs {
        best = best.min(run()?);
    }
    Ok(best)
}

/// Largest |difference| between the features of two fingerprint JSONL files, line by line
/// (an error when the numbers of lines differ).
fn max_difference(a: &Path, b: &Path) -> anyhow::Result<f64> {
    let read = |p: &Path| -> anyhow::Result<Vec<Fingerprint>> {
        let rows: Vec<serde_json::Value> = crate::io::read_jsonl(p, "a fingerprint row")?;
        rows.iter()
            .enumerate()
            .map(|(i, r)| {
                let map = r["features"].as_object().ok_or_else(|| {
                    anyhow::anyhow!("{}: line {}: no 'features' object", p.display(), i + 1)
                })?;
                Fingerprint::from_map(map)
                    .map_err(|e| anyhow::anyhow!("{}: line {}: {e}", p.display(), i + 1))
            })
            .collect()
    };
    let (fa, fb) = (read(a)?, read(b)?);
    anyhow::ensure!(
        fa.len() == fb.len(),
        "{} has {} fingerprints, {} has {}",
        a.display(),
        fa.len(),
        b.display(),
        fb.len()
    );
    Ok(fa
        .iter()
        .zip(&fb)
        .flat_map(|(x, y)| x.0.iter().zip(y.0.iter()).map(|(p, q)| (p - q).abs()))
        .fold(0.0f64, f64::max))
}

fn reference_rate(
    ds: &[Dialogue],
    repeat: usize,
    python: &str,
) -> Result<(f64, Vec<Fingerprint>), String> {
    let mut tmp = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    {
        for d in ds {
            let conv: Vec<_> = d
                .turns
                .iter()
                .map(|t| serde_json::json!({"role": t.role.as_str(), "content": t.content}))
                .collect();
            writeln!(tmp, "{}", serde_json::json!({ "conversation": conv }))
                .map_err(|e| e.to_string())?;
        }
    }
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(REFERENCE_SCRIPT)
        .arg(tmp.path())
        .arg(repeat.to_string())
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if out.status.code() == Some(3) {
        return Err(format!("{python} cannot find the package 'ppol'; install it with `pip install --no-deps ppol==0.1.1 numpy`"));
    }
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "reference failed: {}",
            err.lines().last().unwrap_or("")
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    let rate = v["per_s"].as_f64().ok_or("no rate")?;
    let feats = v["features"]
        .as_array()
        .ok_or("no features")?
        .iter()
        .map(|f| Fingerprint::from_map(f.as_object().unwrap_or(&Default::default())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((rate, feats))
}
