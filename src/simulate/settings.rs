//! `[episodes]`: which simulator plays, how long an episode may run (user turns, an agent's
//! tool rounds), the user simulator's temperature and the baseline's trials, with their
//! defaults and their check. `ppol episodes` and `ppol_rs.episodes()` read the same section
//! (from `--config` / `config=`), so a default exists once.

use serde::{Deserialize, Serialize};

use crate::limits::{self, check};
use crate::simulate::episode::llm::DEFAULT_MAX_TOOL_ROUNDS;
use crate::Result;

/// Episodes in flight at once by default (`[episodes] concurrency`, `ppol episodes
/// --concurrency`).
pub const DEFAULT_CONCURRENCY: usize = 256;

/// Which simulator plays episodes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EpisodesSection {
    /// auto | scripted | llm.
    pub backend: EpisodeBackend,
    /// User turns per training episode.
    #[schemars(range(min = 1, max = crate::limits::MAX_TURNS))]
    pub max_turns: usize,
    /// User turns per validation / eval episode.
    #[schemars(range(min = 1, max = crate::limits::MAX_TURNS))]
    pub val_max_turns: usize,
    /// Persona-free episodes per task for the baseline the discriminator is trained on.
    #[schemars(range(min = 1, max = crate::limits::MAX_TRIALS))]
    pub baseline_trials: u32,
    /// Tasks the baseline plays at most: with more train and validation tasks than this, a
    /// seeded sample of them (a discriminator needs hundreds of dialogues, not one per task
    /// of a 10^5-task file). Lowered, when needed, to 100,000 episodes: at most 100,000 /
    /// `baseline_trials` tasks.
    #[schemars(range(min = 1, max = crate::limits::MAX_EPISODES))]
    pub baseline_max_tasks: usize,
    /// Episodes in flight at once in every batch a run plays (the baseline, candidates,
    /// validations, `ppol eval`); the world and the LLM client bound their own work inside.
    #[schemars(range(min = 1, max = crate::limits::MAX_CONCURRENCY))]
    pub concurrency: usize,
    /// User-simulator temperature (LLM backend).
    #[schemars(range(min = 0.0, max = crate::limits::MAX_TEMPERATURE))]
    pub user_temperature: f32,
    /// Rounds of tool calls an LLM agent may make before it must answer the user (a weak
    /// model can call tools forever; each round is a request).
    #[schemars(range(min = 1, max = crate::limits::MAX_TURNS))]
    pub max_tool_rounds: usize,
}

impl Default for EpisodesSection {
    fn default() -> Self {
        EpisodesSection {
            backend: EpisodeBackend::Auto,
            max_turns: 20,
            val_max_turns: 30,
            baseline_trials: 3,
            baseline_max_tasks: 200,
            concurrency: DEFAULT_CONCURRENCY,
            user_temperature: 0.0,
            max_tool_rounds: DEFAULT_MAX_TOOL_ROUNDS,
        }
    }
}

impl EpisodesSection {
    /// Tasks the baseline plays at most: `baseline_max_tasks`, lowered so that the baseline
    /// (these tasks × `baseline_trials`) stays within [`limits::MAX_EPISODES`].
    pub fn baseline_task_cap(&self) -> usize {
        let trials = self.baseline_trials.max(1) as usize;
        self.baseline_max_tasks
            .min(limits::MAX_EPISODES / trials)
            .max(1)
    }

    /// Check the values serde cannot (the error names the key).
    pub fn validate(&self) -> Result<()> {
        check("episodes.max_turns", self.max_turns, 1, limits::MAX_TURNS)?;
        check(
            "episodes.val_max_turns",
            self.val_max_turns,
            1,
            limits::MAX_TURNS,
        )?;
        check(
            "episodes.max_tool_rounds",
            self.max_tool_rounds,
            1,
            limits::MAX_TURNS,
        )?;
        check(
            "episodes.baseline_max_tasks",
            self.baseline_max_tasks,
            1,
            limits::MAX_EPISODES,
        )?;
        check(
            "episodes.concurrency",
            self.concurrency,
            1,
            limits::MAX_CONCURRENCY,
        )?;
        check(
            "episodes.baseline_trials",
            self.baseline_trials,
            1,
            limits::MAX_TRIALS,
        )?;
        limits::temperature("episodes.user_temperature", self.user_temperature)
    }
}
