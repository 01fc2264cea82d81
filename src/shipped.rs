//! Files shipped inside the binary and the wheel: the seed generator programs, the demo
//! traces (invented dialogues, see `fitness/demo/README.md`) and the audit's judge prompt.
//! One table, used by the run, the command line and Python (`ppol_rs.seed_program`,
//! `ppol_rs.demo_traces`).

macro_rules! shipped_file {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/", $path))
    };
}

/// The offline seed program (no LLM).
pub const OFFLINE_SEED: &str = shipped_file!("seeds/offline_templates.py");
/// The offline seed of the population objective: kinds of users in proportions (no LLM).
pub const OFFLINE_POPULATION_SEED: &str = shipped_file!("seeds/offline_population.py");
/// The two-stage LLM seed program (the reference's generator, in our words).
pub const LLM_SEED: &str = shipped_file!("seeds/two_stage_llm.py");
/// The direct-prompt baseline (DP personas).
pub const DIRECT_SEED: &str = shipped_file!("seeds/direct_prompt.py");
/// Demo human traces.
pub const DEMO_HUMANS: &str = shipped_file!("fitness/demo/human.jsonl");
/// Demo plain-simulator traces.
pub const DEMO_BASELINE: &str = shipped_file!("fitness/demo/baseline.jsonl");
/// Demo candidate traces.
pub const DEMO_CANDIDATES: &str = shipped_file!("fitness/demo/candidates.jsonl");
/// The audit's LLM-judge prompt (`{user_a}`, `{user_b}`; a user may give their own).
pub const JUDGE_PROMPT: &str = shipped_file!("fitness/judge_prompt.md");

/// Every shipped file by its path relative to the repository.
pub const FILES: &[(&str, &str)] = &[
    ("seeds/offline_templates.py", OFFLINE_SEED),
    ("seeds/offline_population.py", OFFLINE_POPULATION_SEED),
    ("seeds/two_stage_llm.py", LLM_SEED),
    ("seeds/direct_prompt.py", DIRECT_SEED),
    ("demo/human.jsonl", DEMO_HUMANS),
    ("demo/baseline.jsonl", DEMO_BASELINE),
    ("demo/candidates.jsonl", DEMO_CANDIDATES),
    ("fitness/judge_prompt.md", JUDGE_PROMPT),
];

/// A shipped file by name (see [`FILES`]).
pub fn get(name: &str) -> crate::Result<&'static str> {
    FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            crate::Error::config(
                "shipped",
                format!(
                    "no shipped file '{name}' (expected one of: {})",
                    FILES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                ),
            )
        })
}
