//! Agent-hardening data: episodes as OpenAI-style chat fine-tuning records, from the agent's
//! point of view (system = the agent's prompt, user = the simulated user, assistant = the agent
//! with its tool calls, tool = tool results).

use serde_json::{json, Value};

use crate::dialogue::Role;
use crate::llm::ToolSpec;
use crate::simulate::episode::record::{Episode, EpisodeStatus};

/// Which episodes to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Only episodes with reward ≥ 1.
    Successful,
    /// Every episode that ran to an end (failed episodes are never exported).
    All,
}

/// One fine-tuning record `{"messages": [...], "tools": [...], "metadata": {...}}`.
pub fn sft_record(episode: &Episode, system_prompt: &str, tools: &[ToolSpec]) -> Value {
    let mut messages = vec![json!({"role": "system", "content": system_prompt})];
    for t in &episode.conversation {
        let m = match t.role {
            Role::User => json!({"role": "user", "content": t.content}),
            Role::Assistant if !t.tool_calls.is_empty() => json!({
                "role": "assistant",
                "content": if t.content.is_empty() { Value::Null } else { Value::String(t.content.clone()) },
                "tool_calls": t.tool_calls.iter().map(|c| json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments.to_string()},
                })).collect::<Vec<_>>(),
            }),
            Role::Assistant => json!({"role": "assistant", "content": t.content}),
            Role::Tool => {
                json!({"role": "tool", "tool_call_id": t.tool_call_id, "content": t.content})
            }
            Role::System => continue,
        };
        messages.push(m);
    }
    json!({
        "messages": messages,
        "tools": tools.iter().map(|t| json!({
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        })).collect::<Vec<_>>(),
        "metadata": {
            "episode_id": episode.id,
            "task_id": episode.task_id,
            "domain": episode.domain,
            "persona_id": episode.persona_id,
            "reward": episode.reward,
            "trial": episode.trial,
        },
    })
}

/// Whether an episode is selected for export.
pub fn selected(e: &Episode, sel: Selection) -> bool {
    e.status == EpisodeStatus::Ok
        && match sel {
            Selection::Successful => e.success(),
            Selection::All => true,
        }
}

/// A persona cluster: the set of a persona's active axes (`none` for the plain simulator).
pub fn persona_cluster(e: &Episode) -> String {
    let mut on: Vec<&str> = e
        .axis_placement
        .iter()
        .filter(|(_, v)| v.as_bool() == Some(true))
        .map(|(k, _)| k.as_str())
        .collect();
    on.sort_unstable();
    if on.is_empty() {
        if e.persona_id == "none" {
            "none".into()
        } else {
            "no-axes".into()
        }
    } else {
        on.join("+")
    }
}

/// Success and pass^k of one persona cluster.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClusterSummary {
    /// Cluster name (active axes joined by `+`).
    pub cluster: String,
    /// Distinct personas.
    pub personas: usize,
    /// Episodes (failed ones included, as unsuccessful).
    pub episodes: usize,
    /// Share of episodes with reward ≥ 1.
    pub success_rate: f64,
    /// pass^k over (task, persona) units, k = 1..=trials.
    pub pass_hat_k: std::collections::BTreeMap<usize, f64>,
}

/// Per-cluster summaries, clusters sorted by name.
pub fn cluster_summaries(episodes: &[Episode]) -> Vec<ClusterSummary> {
    let mut groups: std::collections::BTreeMap<String, Vec<Episode>> = Default::default();
    for e in episodes {
        groups
            .entry(persona_cluster(e))
            .or_default()
            .push(e.clone());
    }
    groups
        .into_iter()
        .map(|(cluster, eps)| {
            let personas: std::collections::BTreeSet<&str> =
                eps.iter().map(|e| e.persona_id.as_str()).collect();
            let max_trials = {
                let mut per: std::collections::BTreeMap<(String, String), usize> =
                    Default::default();
                for e in &eps {
                    *per.entry((e.task_id.clone(), e.persona_id.clone()))
                        .or_default() += 1;
                }
                per.values().copied().max().unwrap_or(1)
            };
            ClusterSummary {
                personas: personas.len(),
                episodes: eps.len(),
                success_rate: eps.iter().filter(|e| e.success()).count() as f64 / eps.len() as f64,
                pass_hat_k: crate::simulate::episode::record::pass_hat_k_by(
                    &eps,
                    |e| format!("{}\u{1f}{}", e.task_id, e.persona_id),
                    max_trials,
                ),
                cluster,
            }
        })
        .collect()
}

/// Whether a persona is held out: a stable hash of its id below `fraction` (the plain
/// simulator `none` is never held out). All episodes of a persona fall on the same side.
pub fn held_out(persona_id: &str, fraction: f64, seed: u64) -> bool {
    if persona_id == "none" || fraction <= 0.0 {
        return false;
    }
    let h = crate::seed::derive_seed(seed, persona_id);
    ((h >> 11) as f64 / (1u64 << 53) as f64) < fraction
}
