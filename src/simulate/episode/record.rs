//! The episode record written as one JSONL line per episode, and pass^k.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::scripted::PersonaPlay;
use super::{AgentSimulator, Termination, ToolEnv, UserSimulator};
use crate::dialogue::{Dialogue, Role, Turn};
use crate::persona::Persona;
use crate::Result;

/// The agent's opening line (τ²'s orchestrator starts every conversation with it).
pub const AGENT_GREETING: &str = "Hi! How can I help you today?";

/// Whether an episode ran to an end or failed on infrastructure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeStatus {
    /// The conversation ran to an end (any termination but `error`).
    Ok,
    /// It failed; `error` says why. Failed episodes are kept in the output and counted.
    Failed,
}

/// One episode, as written by `ppol episodes` (loadable as a dialogue by every trace reader:
/// `id`, `task_id`, `domain` and `conversation` are the dialogue; the rest goes to `meta`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    /// `<task>:<persona>:<trial>`.
    pub id: String,
    /// Task id.
    pub task_id: String,
    /// Domain.
    pub domain: String,
    /// The full trajectory: user, assistant (with tool calls) and tool turns.
    pub conversation: Vec<Turn>,
    /// Persona id (`none` for the plain simulator).
    pub persona_id: String,
    /// Persona text injected into the user simulator (empty for none).
    #[serde(default)]
    pub persona: String,
    /// Persona axis placement, when the persona had one.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub axis_placement: serde_json::Map<String, Value>,
    /// Trial number (0-based).
    pub trial: u32,
    /// Seed of this episode.
    pub seed: u64,
    /// Why it ended.
    pub termination: Termination,
    /// τ² reward (None when it could not be computed, e.g. failed episodes).
    pub reward: Option<f64>,
    /// Reward breakdown.
    #[serde(default)]
    pub reward_info: Value,
    /// ok | failed.
    pub status: EpisodeStatus,
    /// The failure reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Backend (`scripted` or a model description).
    pub backend: String,
    /// Token and cost use of this episode per role.
    #[serde(default)]
    pub usage: Value,
    /// Offline (scripted) episodes: how the user was driven (text mechanics, axes or none), the
    /// mechanics it played and the persona sentences it could not play.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona_play: Option<PersonaPlay>,
    /// User turns that spoke as the agent even after the simulator asked again (kept in the
    /// conversation). Non-zero flags the episode: fitness and reports can exclude or count it
    /// ([`Episode::role_confused`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub role_confusion: u32,
    /// What happened on the way that a reader should know: history trimmed to the context
    /// window, tool calls recovered from text or answered with an error, retries with another
    /// seed, fallbacks of the agent, replies that spoke as the agent. Empty for a plain episode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What the agent saw (its system prompt and tools), when the world that played the
    /// episode reported it (external simulators; `ppol export sft` uses it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentView>,
    /// The simulator's own metadata of the episode (external worlds), kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// The τ² domain directory the episode was played from (built-in retail/airline), so that
    /// `ppol export sft` finds the policy and tools the agent saw without `--tau2-data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tau2_data: Option<std::path::PathBuf>,
}

impl Episode {
    /// The record of an episode that failed or was not played, with the reason.
    pub fn failed(
        task_id: &str,
        persona: Option<&Persona>,
        trial: u32,
        seed: u64,
        domain: &str,
        backend: &str,
        why: String,
    ) -> Episode {
        Episode {
            id: episode_id(task_id, persona, trial),
            task_id: task_id.into(),
            domain: domain.into(),
            conversation: vec![],
            persona_id: persona.map_or("none".into(), |p| p.persona_id.clone()),
            persona: persona.map(|p| p.text.clone()).unwrap_or_default(),
            axis_placement: persona
                .map(|p| p.axis_placement.clone())
                .unwrap_or_default(),
            trial,
            seed,
            termination: Termination::Error,
            reward: None,
            reward_info: Value::Null,
            status: EpisodeStatus::Failed,
            error: Some(why),
            backend: backend.into(),
            usage: Value::Null,
            persona_play: None,
            role_confusion: 0,
            notes: Vec::new(),
            agent: None,
            meta: None,
            tau2_data: None,
        }
    }
}

/// What the agent saw in one task, for training-data export: its system prompt and tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentView {
    /// The agent's system prompt.
    pub system_prompt: String,
    /// The tools offered to the agent (none for a tool-less agent).
    #[serde(default)]
    pub tools: Vec<crate::llm::ToolSpec>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Episode {
    /// Whether a user turn spoke as the agent even after a retry (see `role_confusion`).
    pub fn role_confused(&self) -> bool {
        self.role_confusion > 0
    }

    /// Success = reward ≥ 1 (τ²'s convention).
    pub fn success(&self) -> bool {
        self.reward.is_some_and(|r| r >= 1.0 - 1e-9)
    }

    /// As a dialogue (for fingerprints and scoring).
    pub fn to_dialogue(&self) -> Dialogue {
        let mut d = Dialogue::new(self.id.clone(), self.conversation.clone());
        d.task_id = Some(self.task_id.clone());
        d.domain = Some(self.domain.clone());
        d.meta
            .insert("persona_id".into(), Value::String(self.persona_id.clone()));
        d
    }
}

/// Play one conversation: the agent greets, then user and agent alternate until a stop token,
/// a transfer, or `max_turns` user turns.
pub async fn run_dialogue(
    user: &mut dyn UserSimulator,
    agent: &mut dyn AgentSimulator,
    env: &mut dyn ToolEnv,
    max_turns: usize,
) -> (Vec<Turn>, Termination, Option<String>) {
    let mut history = vec![Turn::new(Role::Assistant, AGENT_GREETING)];
    for _ in 0..max_turns {
        let reply = match user.respond(&history).await {
            Ok(r) => r,
            Err(e) => return (history, Termination::Error, Some(e.to_string())),
        };
        if !reply.text.is_empty() {
            history.push(Turn::new(Role::User, reply.text));
        }
        if let Some(stop) = reply.stop {
            return (history, stop, None);
        }
        match agent.respond(&history, env).await {
            Ok(a) => {
                history.extend(a.turns);
                if a.transferred {
                    return (history, Termination::Transfer, None);
                }
            }
            Err(e) => return (history, Termination::Error, Some(e.to_string())),
        }
    }
    (history, Termination::MaxTurns, None)
}

/// pass^k for k = 1..=max_k: the mean over tasks of C(c, k)/C(n, k), where a task has n trials
/// and c successes (τ²'s definition). Failed episodes count as trials without success.
pub fn pass_hat_k(episodes: &[Episode], max_k: usize) -> BTreeMap<usize, f64> {
    pass_hat_k_by(episodes, |e| e.task_id.clone(), max_k)
}

/// pass^k with trials grouped by `unit` (e.g. task and persona): the mean over units of
/// C(c, k)/C(n, k).
pub fn pass_hat_k_by(
    episodes: &[Episode],
    unit: impl Fn(&Episode) -> String,
    max_k: usize,
) -> BTreeMap<usize, f64> {
    let mut per_task: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for e in episodes {
        let s = per_task.entry(unit(e)).or_default();
        s.0 += 1;
        s.1 += usize::from(e.success());
    }
    let mut out = BTreeMap::new();
    for k in 1..=max_k {
        let vals: Vec<f64> = per_task
            .values()
            .filter(|(n, _)| *n >= k)
            .map(|(n, c)| binom(*c, k) / binom(*n, k))
            .collect();
        if !vals.is_empty() {
            out.insert(k, vals.iter().sum::<f64>() / vals.len() as f64);
        }
    }
    out
}

fn binom(n: usize, k: usize) -> f64 {
    if k > n {
        return 0.0;
    }
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (k - i) as f64)
}

/// Load episodes from a JSONL file written by `ppol episodes`.
pub fn load_episodes(path: &std::path::Path) -> Result<Vec<Episode>> {
    let text = crate::io::read_to_string(path)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                crate::Error::parse(
                    path,
                    format!("line {}", i + 1),
                    format!("not an episode record: {e}"),
                )
            })
        })
        .collect()
}

/// `<task>:<persona>:<trial>`.
pub fn episode_id(task_id: &str, persona: Option<&Persona>, trial: u32) -> String {
    format!(
        "{task_id}:{}:{trial}",
        persona.map_or("none", |p| p.persona_id.as_str())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(task: &str, reward: f64) -> Episode {
        Episode {
            id: task.into(),
            task_id: task.into(),
            domain: "d".into(),
            conversation: vec![],
            persona_id: "none".into(),
            persona: String::new(),
            axis_placement: Default::default(),
            trial: 0,
            seed: 0,
            termination: Termination::UserStop,
            reward: Some(reward),
            reward_info: Value::Null,
            status: EpisodeStatus::Ok,
            error: None,
            backend: "scripted".into(),
            usage: Value::Null,
            persona_play: None,
            role_confusion: 0,
            notes: Vec::new(),
            agent: None,
            meta: None,
            tau2_data: None,
        }
    }

    #[test]
    fn pass_hat_k_matches_tau2_definition() {
        // task a: 2/3 successes, task b: 3/3
        let eps = vec![
            ep("a", 1.0),
            ep("a", 0.0),
            ep("a", 1.0),
            ep("b", 1.0),
            ep("b", 1.0),
            ep("b", 1.0),
        ];
        let p = pass_hat_k(&eps, 3);
        assert!((p[&1] - (2.0 / 3.0 + 1.0) / 2.0).abs() < 1e-12);
        assert!((p[&2] - (1.0 / 3.0 + 1.0) / 2.0).abs() < 1e-12);
        assert!((p[&3] - 0.5).abs() < 1e-12);
    }

    #[test]
    fn episode_line_loads_as_a_dialogue() {
        let mut e = ep("t1", 1.0);
        e.conversation = vec![Turn::new(Role::User, "hi")];
        let line = serde_json::to_string(&e).unwrap();
        let ds = crate::fitness::traces::parse(
            &line,
            std::path::Path::new("e.jsonl"),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(ds[0].task_id.as_deref(), Some("t1"));
        assert_eq!(ds[0].meta["status"], "ok");
        assert_eq!(ds[0].meta["persona_id"], "none");
    }
}
