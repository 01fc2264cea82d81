//! Offline structural mutation and crossover of a program's literal data, without an LLM.
//!
//! The work is done by `generators/mutate_ast.py` (embedded as [`SCRIPT`]), run with
//! `python3 -I -S -X utf8` in a scrubbed environment with a timeout. It parses the program
//! with `ast` — the program is untrusted input and is **never executed** — finds the
//! module-level assignments whose value is a literal, edits only the source segments of the
//! chosen elements (comments and all other code stay byte for byte), re-parses and compiles
//! the result, and answers with the new code and a one-line summary.
//!
//! # Operators ([`structural_mutate`], one to three per call)
//!
//! | operator | target | effect |
//! |---|---|---|
//! | add axis | `DIVERSITY_AXES` | append an axis from the vocabulary that the list lacks |
//! | drop axis | `DIVERSITY_AXES` | remove one axis (at least one is kept) |
//! | edit axis | `DIVERSITY_AXES` | swap in the vocabulary's phrasing of a definition or on/off playbook |
//! | perturb | any number in a literal (dicts of weights, scalars) | multiply by `exp(N(0, 0.3))`, rounded to 3 decimals; clipped to [0, 1] when the number is a probability (a float in [0, 1] whose numeric siblings are all in [0, 1]); integers stay integers ≥ 1 |
//! | fragments | any list of strings | duplicate, drop (≥ 1 kept), swap two, or recombine the leading sentences of one with the trailing sentences of another (cut only between whole sentences, so persona text stays grammatical; one-sentence fragments are not cut) |
//! | add mechanic | a list of instruction sentences (`MECHANICS…` first) | append a canonical sentence of a mechanic of the offline user's vocabulary ([`StructuralOptions::mechanics`], from `fitness/mechanics.toml`) that the list does not hold yet |
//! | steer axis | a dict of axis probabilities (`PLACEMENT_WEIGHTS`) | move one axis's probability toward the state whose personas were more human in the parent's own evaluation ([`StructuralOptions::axis_evidence`], [`axis_evidence`]), all the way (half of the time) or by 40–100 % of the distance; an axis is chosen with probability ∝ its effect² |
//! | add kind | a program made of kinds of users (a `MECHANICS…` dict whose entries hold only a `"true"` playbook, as `seeds/offline_population.py`) | a new axis of two to four mechanics of the vocabulary (one canonical sentence each), its playbook in that dict and an entry in every dict of axis weights; other programs never draw it |
//! | tune mechanic | an instruction sentence | move one intensity one or two steps along its scale: rarely < sometimes < often < usually < always, once < twice < repeatedly, slightly < plain < very, or scale a word limit ("under twelve words") by `exp(N(0, 0.35))` |
//!
//! Every edited text is checked as text: a recombined fragment is made only of whole sentences
//! of its parents, and a sentence an LLM writes into a list of instruction sentences (the
//! structured edits' `set` and `add`) starts with a capital, ends with a sentence's punctuation
//! and repeats no word twice in a row (small slips are repaired, not the edit lost).
//!
//! [`crossover`] takes, for each literal defined in both parents, the second parent's value
//! with probability ½ (key by key for dicts of numbers) and merges `DIVERSITY_AXES` by union
//! or intersection of the axis names (½ each), each common axis coming from either parent.
//!
//! # JSON protocol of the script
//!
//! Request on stdin: `{"op": "mutate", "code", "vocabulary": [{"name", "definition", "on",
//! "off"}], "seed"}` or `{"op": "crossover", "code", "code_b", "seed"}`. Answer on stdout:
//! `{"ok": true, "code", "summary", "edits": [..]}` or `{"ok": false, "error"}`. The same
//! request always gives the same answer (`random.Random(seed)`).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

/// One mutant: the new code and its summary, or why no mutant could be made.
pub type Mutant = Result<(String, String), String>;

/// Per-seed mutants, or a failure to run the script at all.
pub type BatchResult = Result<Vec<Mutant>, String>;

/// The embedded structural mutation script (`generators/mutate_ast.py`).
pub const SCRIPT: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/generators/mutate_ast.py"
));

/// One known behaviour axis that structural mutation may add or rephrase (the offline
/// simulator's axes, passed by the caller).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AxisVocab {
    /// Axis name (`behavior` in `DIVERSITY_AXES`), e.g. `typos`.
    pub name: String,
    /// What the behaviour is.
    pub definition: String,
    /// Playbook when the axis is on (`presence.true`).
    pub on: String,
    /// Playbook when the axis is off (`presence.false`).
    pub off: String,
}

/// How to run the script.
#[derive(Debug, Clone, PartialEq)]
pub struct StructuralOptions {
    /// Python interpreter. Default `python3`.
    pub python: String,
    /// Wall-clock limit per call. Default 20 s.
    pub timeout: Duration,
    /// Relative weights of the mutation operators by name (`add-axis`, `drop-axis`,
    /// `edit-axis`, `perturb`, `fragment`, `add-mechanic`, `tune-mechanic`, `steer-axis`, `add-kind`); absent names keep
    /// their defaults, 0 disables one.
    pub op_weights: std::collections::BTreeMap<String, f64>,
    /// The mechanics `add-mechanic` draws from (id and canonical sentences); empty disables it.
    pub mechanics: Vec<MechanicPhrases>,
    /// Per axis, the parent's evidence for `steer-axis` ([`axis_evidence`]): mean P(human) of
    /// its personas with the axis on minus with it off. Empty disables the operator.
    pub axis_evidence: std::collections::BTreeMap<String, f64>,
}

/// Prefix of the [`axis_evidence`] entries in a program's metrics.
pub const AXIS_EFFECT_PREFIX: &str = "axis_effect:";

/// What an evaluation says about each behaviour axis: mean P(human) of the personas with the
/// axis on minus that of the personas with it off (an axis counts as off for a persona that
/// has it placed `false` or not at all). Only axes with at least two scored personas on each
/// side get an entry, keyed `axis_effect:<axis>` ([`AXIS_EFFECT_PREFIX`]), so it can be
/// stored with the program's metrics and steer its children (`steer-axis`). The personas are
/// the run's own train personas and the P(human) the run's discriminator: no held-out human
/// reaches it.
pub fn axis_evidence(
    personas: &[crate::evolve::rundir::runlog::PersonaOutcome],
) -> std::collections::BTreeMap<String, f64> {
    let scored: Vec<(&[String], f64)> = personas
        .iter()
        .filter_map(|p| Some((p.axes.as_slice(), p.p_human?)))
        .filter(|(_, p)| p.is_finite())
        .collect();
    let names: std::collections::BTreeSet<&String> =
        scored.iter().flat_map(|(axes, _)| axes.iter()).collect();
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    names
        .into_iter()
        .filter_map(|name| {
            let (on, off): (Vec<_>, Vec<_>) =
                scored.iter().partition(|(axes, _)| axes.contains(name));
            let on: Vec<f64> = on.into_iter().map(|(_, p)| p).collect();
            let off: Vec<f64> = off.into_iter().map(|(_, p)| p).collect();
            (on.len() >= 2 && off.len() >= 2).then(|| {
                (
                    format!("{AXIS_EFFECT_PREFIX}{name}"),
                    mean(&on) - mean(&off),
                )
            })
        })
        .collect()
}

/// A mechanic of the offline user's vocabulary and its canonical sentences.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MechanicPhrases {
    /// Mechanic id (`word_limit`, `pushback`, ...).
    pub id: String,
    /// Sentences that play it.
    pub phrases: Vec<String>,
}

impl MechanicPhrases {
    /// The behaviour mechanics of the embedded vocabulary (`fitness/mechanics.toml`; framing
    /// sentences, which every user plays anyway, are left out).
    pub fn vocabulary() -> Vec<MechanicPhrases> {
        crate::simulate::episode::scripted::vocabulary()
            .mechanics()
            .filter(|m| !m.framing && !m.phrases.is_empty())
            .map(|m| MechanicPhrases {
                id: m.id.clone(),
                phrases: m.phrases.clone(),
            })
            .collect()
    }
}

impl Default for StructuralOptions {
    fn default() -> Self {
        StructuralOptions {
            python: super::PYTHON.to_string(),
            timeout: Duration::from_secs(20),
            op_weights: Default::default(),
            mechanics: Vec::new(),
            axis_evidence: Default::default(),
        }
    }
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    results: Option<Vec<Answer>>,
    ok: bool,
    #[serde(default)]
    code: String,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    error: String,
}

fn call_raw(opts: &StructuralOptions, request: serde_json::Value) -> Result<Answer, String> {
    let input = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
    let out =
        super::run_python(&opts.python, SCRIPT, &input, opts.timeout).map_err(|e| e.to_string())?;
    let answer: Answer = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "structural mutation script failed ({}): {}; stderr: {}",
            out.status,
            e,
            super::tail(&String::from_utf8_lossy(&out.stderr), 600)
        )
    })?;
    Ok(answer)
}

impl Answer {
    fn into_result(self) -> Result<(String, String), String> {
        if self.ok {
            Ok((self.code, self.summary))
        } else {
            Err(self.error)
        }
    }
}

fn call(opts: &StructuralOptions, request: serde_json::Value) -> Result<(String, String), String> {
    call_raw(opts, request)?.into_result()
}

/// Mutate the literal data of `code` (see the [module docs](self)); deterministic per `seed`.
/// Returns the new code and a summary such as `added axis 'typos'; weight
/// PLACEMENT_WEIGHTS['terse'] 0.5→0.62`, or why nothing could be done.
pub fn structural_mutate(
    code: &str,
    vocabulary: &[AxisVocab],
    seed: u64,
) -> Result<(String, String), String> {
    structural_mutate_with(&StructuralOptions::default(), code, vocabulary, seed)
}

/// [`structural_mutate`] with explicit options.
pub fn structural_mutate_with(
    opts: &StructuralOptions,
    code: &str,
    vocabulary: &[AxisVocab],
    seed: u64,
) -> Result<(String, String), String> {
    call(
        opts,
        json!({"op": "mutate", "code": code, "vocabulary": vocabulary, "seed": seed,
               "op_weights": opts.op_weights, "mechanics": opts.mechanics,
               "axis_evidence": opts.axis_evidence}),
    )
}

/// [`structural_mutate`] for several seeds in one Python process (much cheaper than one call
/// per seed). Element `i` equals `structural_mutate(code, vocabulary, seeds[i])`; the outer
/// error is a failure to run the script at all.
pub fn structural_mutate_batch(
    opts: &StructuralOptions,
    code: &str,
    vocabulary: &[AxisVocab],
    seeds: &[u64],
) -> BatchResult {
    batch(
        opts,
        json!({"op": "mutate", "code": code, "vocabulary": vocabulary, "seeds": seeds,
               "op_weights": opts.op_weights, "mechanics": opts.mechanics,
               "axis_evidence": opts.axis_evidence}),
        seeds.len(),
    )
}

/// [`crossover`] for several seeds in one Python process; element `i` equals
/// `crossover(code_a, code_b, seeds[i])`.
pub fn crossover_batch(
    opts: &StructuralOptions,
    code_a: &str,
    code_b: &str,
    seeds: &[u64],
) -> BatchResult {
    batch(
        opts,
        json!({"op": "crossover", "code": code_a, "code_b": code_b, "seeds": seeds}),
        seeds.len(),
    )
}

fn batch(opts: &StructuralOptions, request: serde_json::Value, n: usize) -> BatchResult {
    let answer = call_raw(opts, request)?;
    match answer.results {
        Some(r) if r.len() == n => Ok(r.into_iter().map(Answer::into_result).collect()),
        _ if !answer.ok => Err(answer.error),
        _ => Err("structural mutation script returned no per-seed results".to_string()),
    }
}

/// Cross `code_a` with `code_b`: the child is `code_a` with some of `code_b`'s literal values
/// (see the [module docs](self)); deterministic per `seed`. Returns the child and a summary.
pub fn crossover(code_a: &str, code_b: &str, seed: u64) -> Result<(String, String), String> {
    crossover_with(&StructuralOptions::default(), code_a, code_b, seed)
}

/// [`crossover`] with explicit options.
pub fn crossover_with(
    opts: &StructuralOptions,
    code_a: &str,
    code_b: &str,
    seed: u64,
) -> Result<(String, String), String> {
    call(
        opts,
        json!({"op": "crossover", "code": code_a, "code_b": code_b, "seed": seed}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_unparsable_and_literal_free_programs() {
        let e = structural_mutate("def f(:\n", &[], 1).unwrap_err();
        assert!(e.contains("does not parse"), "{e}");
        let e = structural_mutate("def f():\n    return 1\n", &[], 1).unwrap_err();
        assert!(e.contains("no mutable literal data"), "{e}");
    }

    #[test]
    fn never_executes_the_program() {
        let code = "import os\nos.system('touch /tmp/ppol_should_not_exist')\nX = 0.5\n";
        let (new, summary) = structural_mutate(code, &[], 3).unwrap();
        assert!(summary.starts_with("weight X 0.5→"), "{summary}");
        assert!(new.starts_with("import os\nos.system("));
        assert!(!std::path::Path::new("/tmp/ppol_should_not_exist").exists());
    }
}
