//! Agent-hardening data: episodes as chat fine-tuning records from the agent's point of view
//! (system = the agent's prompt, user = the simulated user, assistant = the agent with its tool
//! calls, tool = tool results), in the format a training toolkit reads ([`SftFormat`]):
//!
//! * `ppol` (default): `{"messages", "tools", "metadata"}` — OpenAI-style messages plus the
//!   episode's ids, reward and persona, for filtering before training;
//! * `openai`: OpenAI chat fine-tuning JSONL — `{"messages", "tools", "parallel_tool_calls"}`
//!   and nothing else (the fine-tuning validator rejects unknown keys); assistant turns carry
//!   `tool_calls` (`arguments` a JSON string), tool results are `tool` messages answering a
//!   call id;
//! * `hf`: the conversational tool-calling layout of TRL's `SFTTrainer` and transformers' chat
//!   templates — `{"messages", "tools"}` with `arguments` a JSON object and `tools` a JSON
//!   string of the schemas (TRL's preferred form: Arrow would otherwise merge the schemas of
//!   different tools into one struct padded with nulls), loadable with
//!   `datasets.load_dataset("json", data_files=...)`.
//!
//! In `openai` and `hf`, turns after the agent's last message (the user's goodbye) are dropped:
//! they teach the agent nothing. Tool-call ids are kept when they are unique within the
//! episode, else renumbered `call_1`, `call_2`, ... with the results following them.

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

/// A training export format (`ppol export sft --format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SftFormat {
    /// ppol's own records with metadata (the default).
    #[default]
    Ppol,
    /// OpenAI chat fine-tuning JSONL.
    Openai,
    /// TRL / transformers conversational tool-calling rows.
    Hf,
}

impl SftFormat {
    /// Every format, by name.
    pub const ALL: [SftFormat; 3] = [SftFormat::Ppol, SftFormat::Openai, SftFormat::Hf];

    /// The name used on the command line and in Python.
    pub fn name(self) -> &'static str {
        match self {
            SftFormat::Ppol => "ppol",
            SftFormat::Openai => "openai",
            SftFormat::Hf => "hf",
        }
    }

    /// Parse a format name; the error lists the accepted ones.
    pub fn parse(s: &str) -> crate::Result<SftFormat> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                crate::Error::config(
                    "--format",
                    format!("unknown export format '{s}'; use ppol, openai or hf"),
                )
            })
    }
}

impl std::fmt::Display for SftFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SftFormat {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        SftFormat::parse(s)
    }
}

/// One record of `episode` in `format`. The error (a tool result that answers no call) names
/// the episode.
pub fn sft_record_as(
    format: SftFormat,
    episode: &Episode,
    system_prompt: &str,
    tools: &[ToolSpec],
) -> Result<Value, String> {
    match format {
        SftFormat::Ppol => Ok(sft_record(episode, system_prompt, tools)),
        SftFormat::Openai | SftFormat::Hf => toolkit_record(format, episode, system_prompt, tools),
    }
}

fn toolkit_record(
    format: SftFormat,
    episode: &Episode,
    system_prompt: &str,
    tools: &[ToolSpec],
) -> Result<Value, String> {
    let conv = &episode.conversation;
    let last_assistant = conv.iter().rposition(|t| t.role == Role::Assistant);
    let Some(last) = last_assistant else {
        return Err("no agent message to train on".to_string());
    };
    let turns = &conv[..=last];
    let ids: Vec<&str> = turns
        .iter()
        .flat_map(|t| t.tool_calls.iter().map(|c| c.id.as_str()))
        .collect();
    let unique = ids.iter().all(|i| !i.is_empty())
        && ids.len() == ids.iter().collect::<std::collections::HashSet<_>>().len();
    let mut n_calls = 0usize;
    // call id as written -> (id in the export, tool name), for the results that follow
    let mut pending: std::collections::VecDeque<(String, String, String)> = Default::default();
    let mut parallel = false;
    let mut messages = vec![json!({"role": "system", "content": system_prompt})];
    for t in turns {
        match t.role {
            Role::System => continue,
            Role::User => messages.push(json!({"role": "user", "content": t.content})),
            Role::Assistant if t.tool_calls.is_empty() => {
                messages.push(json!({"role": "assistant", "content": t.content}))
            }
            Role::Assistant => {
                parallel |= t.tool_calls.len() > 1;
                let calls: Vec<Value> = t
                    .tool_calls
                    .iter()
                    .map(|c| {
                        n_calls += 1;
                        let id = if unique {
                            c.id.clone()
                        } else {
                            format!("call_{n_calls}")
                        };
                        pending.push_back((c.id.clone(), id.clone(), c.name.clone()));
                        let arguments = match format {
                            SftFormat::Hf => c.arguments.clone(),
                            _ => Value::String(c.arguments.to_string()),
                        };
                        json!({"id": id, "type": "function",
                               "function": {"name": c.name, "arguments": arguments}})
                    })
                    .collect();
                let mut m = serde_json::Map::new();
                m.insert("role".into(), "assistant".into());
                if !t.content.is_empty() || format == SftFormat::Hf {
                    m.insert("content".into(), t.content.clone().into());
                }
                m.insert("tool_calls".into(), calls.into());
                messages.push(Value::Object(m));
            }
            Role::Tool => {
                let pos = match &t.tool_call_id {
                    Some(id) => pending.iter().position(|(orig, _, _)| orig == id),
                    None => (!pending.is_empty()).then_some(0),
                };
                let Some(pos) = pos else {
                    return Err(format!(
                        "a tool result answers {} that no earlier agent turn made",
                        t.tool_call_id
                            .as_deref()
                            .map_or("a call".to_string(), |i| format!("call '{i}'"))
                    ));
                };
                let (_, id, name) = pending.remove(pos).expect("position is in range");
                messages.push(match format {
                    SftFormat::Hf => json!({"role": "tool", "tool_call_id": id, "name": name,
                                            "content": t.content}),
                    _ => json!({"role": "tool", "tool_call_id": id, "content": t.content}),
                });
            }
        }
    }
    let schemas: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            })
        })
        .collect();
    Ok(match format {
        SftFormat::Hf => json!({
            "messages": messages,
            "tools": Value::Array(schemas).to_string(),
        }),
        _ => json!({
            "messages": messages,
            "tools": schemas,
            "parallel_tool_calls": parallel,
        }),
    })
}

/// One fine-tuning record `{"messages": [...], "tools": [...], "metadata": {...}}` (the `ppol`
/// format).
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

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(conversation: Value) -> Episode {
        serde_json::from_value(json!({
            "id": "t1:p1:0", "task_id": "t1", "domain": "demo", "persona_id": "p1",
            "conversation": conversation, "trial": 0, "seed": 1, "termination": "user_stop",
            "reward": 1.0, "status": "ok", "backend": "scripted",
        }))
        .expect("an episode")
    }

    fn tool() -> ToolSpec {
        serde_json::from_value(
            json!({"name": "find", "description": "Find.", "parameters": {"type": "object"}}),
        )
        .expect("a tool")
    }

    #[test]
    fn repeated_call_ids_are_renumbered_and_the_goodbye_is_dropped() {
        let e = episode(json!([
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "find W1 and W2"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c", "name": "find", "arguments": {"id": "W1"}},
                {"id": "d", "name": "find", "arguments": {"id": "W2"}}]},
            {"role": "tool", "tool_call_id": "d", "content": "W2 ok"},
            {"role": "tool", "tool_call_id": "c", "content": "W1 ok"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c", "name": "find", "arguments": {"id": "W3"}}]},
            {"role": "tool", "content": "W3 ok"},
            {"role": "assistant", "content": "Both found."},
            {"role": "user", "content": "thanks bye"},
        ]));
        let r = sft_record_as(SftFormat::Openai, &e, "policy", &[tool()]).unwrap();
        let m = r["messages"].as_array().unwrap();
        assert_eq!(m.last().unwrap()["content"], "Both found.");
        assert_eq!(r["parallel_tool_calls"], true);
        // "c" is used twice: every call is renumbered, results follow their call
        assert_eq!(m[3]["tool_calls"][0]["id"], "call_1");
        assert_eq!(
            m[3]["tool_calls"][1]["function"]["arguments"],
            "{\"id\":\"W2\"}"
        );
        assert!(
            m[3].get("content").is_none(),
            "no empty content next to tool calls"
        );
        assert_eq!(
            (m[4]["tool_call_id"].as_str(), m[4]["content"].as_str()),
            (Some("call_2"), Some("W2 ok"))
        );
        assert_eq!(m[5]["tool_call_id"], "call_1");
        assert_eq!(
            (m[7]["tool_call_id"].as_str(), m[7]["content"].as_str()),
            (Some("call_3"), Some("W3 ok"))
        );
        assert!(r.get("metadata").is_none());
        let h = sft_record_as(SftFormat::Hf, &e, "policy", &[tool()]).unwrap();
        let hm = h["messages"].as_array().unwrap();
        assert_eq!(
            hm[3]["tool_calls"][0]["function"]["arguments"],
            json!({"id": "W1"})
        );
        assert_eq!(
            (hm[4]["name"].as_str(), hm[3]["content"].as_str()),
            (Some("find"), Some(""))
        );
        let tools: Value = serde_json::from_str(h["tools"].as_str().unwrap()).unwrap();
        assert_eq!(tools[0]["function"]["name"], "find");
    }

    #[test]
    fn a_result_without_its_call_is_refused() {
        let e = episode(json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "zz", "content": "?"},
            {"role": "assistant", "content": "Hello."},
        ]));
        let err = sft_record_as(SftFormat::Hf, &e, "p", &[]).unwrap_err();
        assert!(err.contains("call 'zz'"), "{err}");
        let silent = episode(json!([{"role": "user", "content": "hi"}]));
        assert!(sft_record_as(SftFormat::Openai, &silent, "p", &[]).is_err());
        assert_eq!(SftFormat::parse("OpenAI").unwrap(), SftFormat::Openai);
        assert!(SftFormat::parse("jsonl")
            .unwrap_err()
            .to_string()
            .contains("ppol, openai or hf"));
    }
}
