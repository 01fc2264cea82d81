//! `ppol bench fingerprint TRACES [--repeat N]`: fingerprinting throughput, side by side with the
//! reference Python package when it is installed, so the ratio comes from one run on one machine.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Subcommand};

use crate::fitness::features::{fingerprint, fingerprint_many, FeatureSet};
use crate::fitness::traces::{self, LoadOptions};

/// `ppol bench ...`
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Fingerprints per second (all cores, one core, and the reference package if importable).
    Fingerprint {
        /// Trace files.
        #[arg(required = true)]
        traces: Vec<PathBuf>,
        /// How many passes over the dialogues per measurement.
        #[arg(long, default_value_t = 20)]
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
    },
    /// Offline evolutions over several run seeds, scored on the human dialogues each run held
    /// out: evolved − seed, evolved − base, Dice D1–D4, seconds per iteration.
    Evolve(super::bench_evolve::BenchEvolveArgs),
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

/// Run `ppol bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let (traces, repeat, feature_set, reference_python, no_reference) = match args.command {
        BenchCommand::Evolve(a) => return super::bench_evolve::run(a),
        BenchCommand::Fingerprint {
            traces,
            repeat,
            feature_set,
            reference_python,
            no_reference,
        } => (traces, repeat, feature_set, reference_python, no_reference),
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
    println!("ppol (rayon, all cores): {par:>12.0} dialogues/s");
    println!("ppol (one core):         {single:>12.0} dialogues/s");
    if no_reference || feature_set != FeatureSet::Ppol011 {
        return Ok(());
    }
    match reference_rate(&ds, repeat.min(5), &reference_python) {
        Ok((ref_rate, ref_features)) => {
            let max_diff = ours
                .iter()
                .zip(&ref_features)
                .flat_map(|(a, b)| a.0.iter().zip(b.0.iter()).map(|(x, y)| (x - y).abs()))
                .fold(0.0f64, f64::max);
            println!("reference ppol 0.1.1:    {ref_rate:>12.0} dialogues/s  ({reference_python})");
            println!("speed-up: {:.0}x (all cores), {:.0}x (one core); max |difference| of features: {max_diff:.3e}", par / ref_rate, single / ref_rate);
        }
        Err(why) => println!("reference ppol 0.1.1: not measured ({why})"),
    }
    Ok(())
}

fn reference_rate(
    ds: &[crate::dialogue::Dialogue],
    repeat: usize,
    python: &str,
) -> Result<(f64, Vec<crate::fitness::features::Fingerprint>), String> {
    let mut tmp = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    {
        use std::io::Write;
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
        .map(|f| {
            crate::fitness::features::Fingerprint::from_map(
                f.as_object().unwrap_or(&Default::default()),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((rate, feats))
}
