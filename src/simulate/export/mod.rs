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
//!   templates — `{"messages", "tools"}` with `arguments` a JSON object and `tools` the list of
//!   schemas, both as `apply_chat_template(messages, tools=tools)` takes them, loadable with
//!   `datasets.load_dataset("json", data_files=...)`: `datasets` 5 reads the mixed shapes back
//!   exactly (its `Json` type); `datasets` 4 merges the keys of every tool's arguments and
//!   schema into one Arrow struct padded with nulls, which TRL's `SFTTrainer` strips
//!   (`remove_none_values`) and a direct caller must strip too (see the README);
//! * `llamafactory`: LLaMA-Factory's ShareGPT tool-calling layout — `{"conversations",
//!   "system", "tools"}`, each message `{"from", "value"}` with `from` one of `human`, `gpt`,
//!   `function_call`, `observation`, described by a `dataset_info.json` entry
//!   ([`llamafactory_dataset_entry`], merged into an existing file by [`merge_dataset_info`]).
//!   LLaMA-Factory's converter (`SharegptDatasetConverter`) drops a conversation unless
//!   `human` / `observation` sit at the odd positions and `gpt` / `function_call` at the even
//!   ones, ending on the agent. So: the agent's opening lines before the user's first message
//!   (the fixed greeting) are dropped; the calls of one agent turn are one `function_call`
//!   (`{"name", "arguments"}` with `arguments` an object, or a JSON list of them for several
//!   calls, which LLaMA-Factory's `FunctionFormatter` reads as parallel calls) and their
//!   results one `observation` (in call order; several joined by
//!   [`LLAMAFACTORY_RESULT_SEPARATOR`], as LLaMA-Factory's own `openai` converter joins
//!   consecutive tool messages); an agent text written beside tool calls has no place in a
//!   `function_call` (its value must be the calls' JSON) and is dropped and counted
//!   ([`SftRecord::dropped_texts`]); `tools` is a JSON string of `{"name", "description",
//!   "parameters"}` schemas. An episode whose turns still break the alternation (two user
//!   turns in a row, a tool call without its result, ...) is [`Unexported::Unfit`]: the
//!   export skips it and says why.
//!
//! Layouts are versioned ([`FORMAT_VERSION`]); [`sft_record_versioned`] still writes version 1.
//! Every row's length is estimated ([`row_tokens`]) so the export can say where a trainer's
//! cutoff falls.
//!
//! In `openai`, `hf` and `llamafactory`, turns after the agent's last message (the user's
//! goodbye) are dropped: they teach the agent nothing. Tool-call ids are kept when they are
//! unique within the episode, else renumbered `call_1`, `call_2`, ... with the results
//! following them.

use std::collections::BTreeSet;

use serde_json::{json, Value};

pub mod calls;
pub mod types;

pub use calls::{prepare, BadCall, BadCallKind, BadCalls, Prepared, RAW_ARGUMENTS_KEY};
pub use types::{one_type_per_path, Conversion, ConversionRule};

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
    /// LLaMA-Factory ShareGPT rows (with a `dataset_info.json` entry).
    Llamafactory,
}

impl SftFormat {
    /// Every format, by name.
    pub const ALL: [SftFormat; 4] = [
        SftFormat::Ppol,
        SftFormat::Openai,
        SftFormat::Hf,
        SftFormat::Llamafactory,
    ];

    /// The name used on the command line and in Python.
    pub fn name(self) -> &'static str {
        match self {
            SftFormat::Ppol => "ppol",
            SftFormat::Openai => "openai",
            SftFormat::Hf => "hf",
            SftFormat::Llamafactory => "llamafactory",
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
                    format!("unknown export format '{s}'; use ppol, openai, hf or llamafactory"),
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

/// Why an episode was not exported (the export skips it and says why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unexported {
    /// The episode's turns do not fit together (a tool result that answers no call, a call
    /// left without its result, no agent message): skipped in every format
    /// ([`calls::check_turns`]).
    Malformed(String),
    /// The agent's bad calls leave nothing to train on under the export's [`BadCalls`] policy.
    BadCall(String),
    /// The episode is well formed but the format cannot hold it (LLaMA-Factory's turn
    /// alternation).
    Unfit(String),
}

impl Unexported {
    /// The reason.
    pub fn reason(&self) -> &str {
        match self {
            Unexported::Malformed(why) | Unexported::BadCall(why) | Unexported::Unfit(why) => why,
        }
    }
}

impl std::fmt::Display for Unexported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

/// One exported record.
#[derive(Debug, Clone, PartialEq)]
pub struct SftRecord {
    /// The record in the format asked for.
    pub record: Value,
    /// Agent texts written beside tool calls that the format has no place for (dropped; only
    /// `llamafactory` drops any).
    pub dropped_texts: usize,
}

/// One record of `episode` in `format`, in the default layout, with bad calls handled the
/// default way ([`prepare`], [`BadCalls::Cut`]). The error is why the episode is skipped:
/// [`Unexported::Malformed`] (a tool result that answers no call, ...), [`Unexported::BadCall`]
/// or [`Unexported::Unfit`] (the format cannot hold it).
pub fn sft_record_as(
    format: SftFormat,
    episode: &Episode,
    system_prompt: &str,
    tools: &[ToolSpec],
) -> Result<SftRecord, Unexported> {
    sft_record_versioned(format, FORMAT_VERSION, episode, system_prompt, tools)
}

/// The layout version every format is written in by default ([`sft_record_versioned`]).
/// Version 2: an `openai` assistant message with tool calls carries `content: ""` (version 1
/// left the key out, which chat templates that concatenate `content`, SmolLM2's among them,
/// refuse), and `hf`'s `tools` is a list of schema objects, as `apply_chat_template(tools=...)`
/// and TRL take it (version 1 wrote one JSON string). `ppol` and `llamafactory` are the same
/// in both.
pub const FORMAT_VERSION: u32 = 2;

/// The layout versions [`sft_record_versioned`] writes.
pub const FORMAT_VERSIONS: [u32; 2] = [1, 2];

/// [`sft_record_as`] in layout `version` (one of [`FORMAT_VERSIONS`]; see [`FORMAT_VERSION`]).
pub fn sft_record_versioned(
    format: SftFormat,
    version: u32,
    episode: &Episode,
    system_prompt: &str,
    tools: &[ToolSpec],
) -> Result<SftRecord, Unexported> {
    let prepared = prepare(episode, tools, BadCalls::default())?;
    sft_record_of(format, version, &prepared, system_prompt, tools)
}

/// The record of an episode [`prepare`]d for export, in `format` and layout `version`. Agent
/// turns kept as context only ([`Prepared::context_only`]) carry `"weight": 0` in `ppol`,
/// `openai` and `hf`.
pub fn sft_record_of(
    format: SftFormat,
    version: u32,
    prepared: &Prepared,
    system_prompt: &str,
    tools: &[ToolSpec],
) -> Result<SftRecord, Unexported> {
    let (episode, context_only) = (&prepared.episode, &prepared.context_only);
    let record = match format {
        SftFormat::Ppol => ppol_record(episode, context_only, system_prompt, tools),
        SftFormat::Openai | SftFormat::Hf => {
            toolkit_record(format, version, episode, context_only, system_prompt, tools)
                .map_err(Unexported::Malformed)?
        }
        SftFormat::Llamafactory => return llamafactory_record(episode, system_prompt, tools),
    };
    Ok(SftRecord {
        record,
        dropped_texts: 0,
    })
}

/// `"weight": 0` on an agent message kept as context only.
fn weigh(m: &mut serde_json::Map<String, Value>, context_only: bool) {
    if context_only {
        m.insert("weight".into(), 0.into());
    }
}

fn toolkit_record(
    format: SftFormat,
    version: u32,
    episode: &Episode,
    context_only: &BTreeSet<usize>,
    system_prompt: &str,
    tools: &[ToolSpec],
) -> Result<Value, String> {
    let conv = &episode.conversation;
    let last_assistant = conv.iter().rposition(|t| t.role == Role::Assistant);
    let Some(last) = last_assistant else {
        return Err(NO_AGENT_MESSAGE.to_string());
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
    for (i, t) in turns.iter().enumerate() {
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
                // an empty text is "" (not left out, not null): valid OpenAI and what templates
                // that concatenate `content` need
                if !t.content.is_empty() || format == SftFormat::Hf || version >= 2 {
                    m.insert("content".into(), t.content.clone().into());
                }
                m.insert("tool_calls".into(), calls.into());
                weigh(&mut m, context_only.contains(&i));
                messages.push(Value::Object(m));
            }
            Role::Tool => {
                let pos = match &t.tool_call_id {
                    Some(id) => pending.iter().position(|(orig, _, _)| orig == id),
                    None => (!pending.is_empty()).then_some(0),
                };
                let Some(pos) = pos else {
                    return Err(calls::orphan_result(t.tool_call_id.as_deref()));
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
        // version 1 wrote the schemas as one JSON string, which chat templates cannot take
        SftFormat::Hf if version < 2 => json!({
            "messages": messages,
            "tools": Value::Array(schemas).to_string(),
        }),
        SftFormat::Hf => json!({"messages": messages, "tools": schemas}),
        _ => json!({
            "messages": messages,
            "tools": schemas,
            "parallel_tool_calls": parallel,
        }),
    })
}

/// How the results of several calls made in one agent turn are joined into one LLaMA-Factory
/// `observation` (the separator LLaMA-Factory's `openai` converter puts between consecutive
/// tool messages; the `<tool_response>` tags close and reopen inside the templates that wrap
/// an observation in them).
pub const LLAMAFACTORY_RESULT_SEPARATOR: &str = "\n</tool_response>\n<tool_response>\n";

/// A ShareGPT message being built: the agent's calls and their results (filled in as they
/// arrive, in call order) are kept apart until the row is written.
enum LfMessage {
    Human(String),
    Gpt(String),
    Call(Vec<Value>),
    Observation(Vec<Option<String>>),
}

impl LfMessage {
    /// Whether LLaMA-Factory wants it at an odd position (1-based): `human` / `observation`.
    fn odd(&self) -> bool {
        matches!(self, LfMessage::Human(_) | LfMessage::Observation(_))
    }
}

/// Whether the last message is an observation still missing a result.
fn open_results(messages: &[LfMessage]) -> bool {
    matches!(messages.last(), Some(LfMessage::Observation(r)) if r.iter().any(Option::is_none))
}

fn llamafactory_record(
    episode: &Episode,
    system_prompt: &str,
    tools: &[ToolSpec],
) -> Result<SftRecord, Unexported> {
    let conv = &episode.conversation;
    let Some(last) = conv.iter().rposition(|t| t.role == Role::Assistant) else {
        return Err(Unexported::Malformed(NO_AGENT_MESSAGE.to_string()));
    };
    // the agent's opening lines (the greeting) come before anything they could answer
    let start = conv[..=last]
        .iter()
        .position(|t| {
            !(t.role == Role::System || t.role == Role::Assistant && t.tool_calls.is_empty())
        })
        .unwrap_or(last + 1);
    let unfit = |why: &str| Err(Unexported::Unfit(why.to_string()));
    let no_result = calls::NO_RESULT;
    let mut messages: Vec<LfMessage> = Vec::new();
    // (call id as written, slot in the last observation)
    let mut pending: Vec<(String, usize)> = Vec::new();
    let mut dropped_texts = 0;
    for t in &conv[start..=last] {
        if t.role != Role::Tool && t.role != Role::System && open_results(&messages) {
            return unfit(no_result);
        }
        match t.role {
            Role::System => continue,
            Role::User => messages.push(LfMessage::Human(t.content.clone())),
            Role::Assistant if t.tool_calls.is_empty() => {
                messages.push(LfMessage::Gpt(t.content.clone()))
            }
            Role::Assistant => {
                dropped_texts += usize::from(!t.content.trim().is_empty());
                pending = t
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(slot, c)| (c.id.clone(), slot))
                    .collect();
                messages.push(LfMessage::Call(
                    t.tool_calls
                        .iter()
                        .map(|c| json!({"name": c.name, "arguments": c.arguments}))
                        .collect(),
                ));
                messages.push(LfMessage::Observation(vec![None; t.tool_calls.len()]));
            }
            Role::Tool => {
                let pos = match &t.tool_call_id {
                    Some(id) => pending.iter().position(|(orig, _)| orig == id),
                    None => (!pending.is_empty()).then_some(0),
                };
                let Some(pos) = pos else {
                    return Err(Unexported::Malformed(calls::orphan_result(
                        t.tool_call_id.as_deref(),
                    )));
                };
                let (_, slot) = pending.remove(pos);
                if let Some(LfMessage::Observation(results)) = messages.last_mut() {
                    results[slot] = Some(t.content.clone());
                }
            }
        }
    }
    // the last agent turn's results come after it: the row ends on the calls
    if matches!(messages.last(), Some(LfMessage::Observation(r)) if r.iter().all(Option::is_none)) {
        messages.pop();
    }
    if open_results(&messages) {
        return unfit(no_result);
    }
    if messages.is_empty() {
        return unfit("no agent message after the user's first");
    }
    for (i, m) in messages.iter().enumerate() {
        if m.odd() == (i % 2 == 0) {
            continue;
        }
        return unfit(match (i.checked_sub(1).map(|p| &messages[p]), m) {
            (None, _) => "the agent called tools before the user spoke",
            (Some(LfMessage::Observation(_)), _) => {
                "the user spoke before the agent answered the tool results"
            }
            (Some(_), LfMessage::Human(_) | LfMessage::Observation(_)) => {
                "the user spoke twice in a row"
            }
            (Some(_), _) => "the agent spoke twice in a row",
        });
    }
    if messages.len() % 2 != 0 {
        return unfit("the conversation does not end with the agent");
    }
    let conversations: Vec<Value> = messages
        .into_iter()
        .map(|m| {
            let (from, value) = match m {
                LfMessage::Human(v) => ("human", v),
                LfMessage::Gpt(v) => ("gpt", v),
                LfMessage::Call(mut calls) => (
                    "function_call",
                    if calls.len() == 1 {
                        calls.remove(0).to_string()
                    } else {
                        Value::Array(calls).to_string()
                    },
                ),
                LfMessage::Observation(results) => (
                    "observation",
                    results
                        .into_iter()
                        .map(|r| r.expect("every result arrived"))
                        .collect::<Vec<_>>()
                        .join(LLAMAFACTORY_RESULT_SEPARATOR),
                ),
            };
            json!({"from": from, "value": value})
        })
        .collect();
    let schemas: Vec<Value> = tools
        .iter()
        .map(|t| {
            // LLaMA-Factory's tool prompts read `parameters.properties` unconditionally
            let mut parameters = match &t.parameters {
                Value::Object(p) => p.clone(),
                _ => serde_json::Map::from_iter([("type".to_string(), json!("object"))]),
            };
            parameters.entry("properties").or_insert_with(|| json!({}));
            json!({"name": t.name, "description": t.description, "parameters": parameters})
        })
        .collect();
    Ok(SftRecord {
        record: json!({
            "conversations": conversations,
            "system": system_prompt,
            "tools": Value::Array(schemas).to_string(),
        }),
        dropped_texts,
    })
}

/// The `dataset_info.json` entry that describes a `llamafactory` export written to
/// `file_name` (relative to the `dataset_info.json` directory, LLaMA-Factory's `dataset_dir`).
/// Every column and tag is spelled out: LLaMA-Factory resets the ones an entry's `columns` /
/// `tags` leave out.
pub fn llamafactory_dataset_entry(file_name: &str) -> Value {
    json!({
        "file_name": file_name,
        "formatting": "sharegpt",
        "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
        "tags": {
            "role_tag": "from",
            "content_tag": "value",
            "user_tag": "human",
            "assistant_tag": "gpt",
            "observation_tag": "observation",
            "function_tag": "function_call",
            "system_tag": "system",
        },
    })
}

/// Add `entries` (name → entry) to the `dataset_info.json` contents `existing` (`None` when
/// there is no file yet), keeping every other dataset and the order of the file. An entry
/// replaces one of the same name only when both describe the same `file_name` (a re-export).
/// The error is (where in the file, what is wrong).
pub fn merge_dataset_info(
    existing: Option<&str>,
    entries: &[(String, Value)],
) -> Result<String, (String, String)> {
    let mut info = match existing {
        None => serde_json::Map::new(),
        Some(text) if text.trim().is_empty() => serde_json::Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                return Err((
                    "top level".to_string(),
                    "not a JSON object of datasets".to_string(),
                ))
            }
            Err(e) => {
                return Err((
                    format!("line {}, column {}", e.line(), e.column()),
                    e.to_string(),
                ))
            }
        },
    };
    for (name, entry) in entries {
        if let Some(old) = info.get(name) {
            if old.get("file_name") != entry.get("file_name") {
                return Err((
                    format!("dataset '{name}'"),
                    format!(
                        "already describes {}; pick another name (--dataset-name)",
                        old.get("file_name")
                            .and_then(Value::as_str)
                            .map_or("another dataset".to_string(), |f| format!("'{f}'"))
                    ),
                ));
            }
        }
        info.insert(name.clone(), entry.clone());
    }
    let mut text = crate::io::to_json_pretty(&Value::Object(info));
    text.push('\n');
    Ok(text)
}

/// The reason an episode without an agent message is skipped.
const NO_AGENT_MESSAGE: &str = "no agent message to train on";

/// One fine-tuning record `{"messages": [...], "tools": [...], "metadata": {...}}` (the `ppol`
/// format) of the episode's conversation as it is.
pub fn sft_record(episode: &Episode, system_prompt: &str, tools: &[ToolSpec]) -> Value {
    ppol_record(episode, &BTreeSet::new(), system_prompt, tools)
}

fn ppol_record(
    episode: &Episode,
    context_only: &BTreeSet<usize>,
    system_prompt: &str,
    tools: &[ToolSpec],
) -> Value {
    let mut messages = vec![json!({"role": "system", "content": system_prompt})];
    for (i, t) in episode.conversation.iter().enumerate() {
        let mut m = match t.role {
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
        if let Value::Object(m) = &mut m {
            weigh(m, context_only.contains(&i));
        }
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

/// Estimated token lengths of one exported row, in the parts a chat template lays out in
/// order: the system prompt, the tool schemas (which tool-aware templates put into or after
/// the system turn), then the dialogue (every other message, with its tool calls, plus a few
/// tokens of role markup per message). A trainer's cutoff below [`RowTokens::start`] trains on
/// the prompt only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RowTokens {
    /// The system prompt.
    pub system: usize,
    /// The tool schemas as the record holds them (JSON).
    pub tools: usize,
    /// Everything after them.
    pub dialogue: usize,
}

impl RowTokens {
    /// Where the dialogue starts: the system prompt and the tool schemas.
    pub fn start(&self) -> usize {
        self.system + self.tools
    }

    /// The whole row.
    pub fn total(&self) -> usize {
        self.system + self.tools + self.dialogue
    }
}

/// Tokens of role markup a chat template puts around each message (`<|im_start|>user\n` ...
/// `<|im_end|>\n` in ChatML).
pub const MESSAGE_MARKUP_TOKENS: usize = 5;

/// How far [`estimate_tokens`] was measured to be from SmolLM2's tokenizer (a 49k-token
/// byte-level BPE, like most small open models'), on τ² retail rows: the policy, the tool
/// schemas and the dialogues each land within this share of the real count.
pub const ESTIMATE_TOLERANCE: f64 = 0.10;

/// An estimate of the tokens a byte-level BPE tokenizer (GPT-2 family: SmolLM2, Llama 3, Qwen)
/// makes of `text`, without its vocabulary: the text is cut as those tokenizers pre-tokenize it
/// (words with their leading space, single digits, runs of punctuation, runs of whitespace),
/// then a word counts a token per 8 letters, a punctuation run one per 3 characters, a digit
/// or a whitespace run one. See [`ESTIMATE_TOLERANCE`].
pub fn estimate_tokens(text: &str) -> usize {
    static PIECES: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = PIECES.get_or_init(|| {
        regex::Regex::new(r"'(?:s|t|re|ve|m|ll|d)| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+")
            .expect("a valid pattern")
    });
    re.find_iter(text)
        .map(|m| {
            let p = m.as_str();
            let n = p.trim_start_matches(' ').chars().count();
            if p.trim().is_empty() {
                1 // a run of spaces or newlines
            } else if p.trim_start().starts_with(|c: char| c.is_alphabetic()) {
                n.div_ceil(WORD_CHARS)
            } else if p.chars().all(|c| c.is_numeric()) {
                1
            } else {
                n.div_ceil(PUNCT_CHARS)
            }
        })
        .sum()
}

// Fitted to SmolLM2's tokenizer on τ² retail rows (a policy, 15 tool schemas, 63 calls and
// their results): the policy 1,651 estimated / 1,613 real, the schemas 2,807 / 2,763, the
// dialogue parts within 3%; airline and demo rows within 11% per part.
/// Letters per token of a word piece ([`estimate_tokens`]).
const WORD_CHARS: usize = 8;
/// Characters per token of a punctuation run.
const PUNCT_CHARS: usize = 3;

/// The estimated token lengths of `record`, a row of `format` ([`RowTokens`]).
pub fn row_tokens(format: SftFormat, record: &Value) -> RowTokens {
    let text = |v: &Value| match v {
        Value::String(s) => estimate_tokens(s),
        Value::Null => 0,
        other => estimate_tokens(&other.to_string()),
    };
    let mut row = RowTokens {
        tools: match record.get("tools") {
            Some(Value::Array(a)) if a.is_empty() => 0,
            Some(t) => text(t),
            None => 0,
        },
        ..RowTokens::default()
    };
    if format == SftFormat::Llamafactory {
        row.system = record.get("system").map_or(0, text);
        for m in record["conversations"].as_array().into_iter().flatten() {
            row.dialogue += MESSAGE_MARKUP_TOKENS + text(&m["value"]);
        }
        return row;
    }
    for m in record["messages"].as_array().into_iter().flatten() {
        let mut n = MESSAGE_MARKUP_TOKENS + m.get("content").map_or(0, text);
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            n += text(&c["function"]["name"]) + text(&c["function"]["arguments"]) + 4;
        }
        if m["role"] == "system" {
            row.system += n;
        } else {
            row.dialogue += n;
        }
    }
    row
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

/// The unit pass^k counts trials of: a task of a domain played by a persona.
fn pass_unit(e: &Episode) -> String {
    format!("{}\u{1f}{}\u{1f}{}", e.domain, e.task_id, e.persona_id)
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
                let mut per: std::collections::BTreeMap<String, usize> = Default::default();
                for e in &eps {
                    *per.entry(pass_unit(e)).or_default() += 1;
                }
                per.values().copied().max().unwrap_or(1)
            };
            ClusterSummary {
                personas: personas.len(),
                episodes: eps.len(),
                success_rate: eps.iter().filter(|e| e.success()).count() as f64 / eps.len() as f64,
                pass_hat_k: crate::simulate::episode::record::pass_hat_k_by(
                    &eps, pass_unit, max_trials,
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
    let h = crate::rng::derive_seed(seed, persona_id);
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
        let r = sft_record_as(SftFormat::Openai, &e, "policy", &[tool()])
            .unwrap()
            .record;
        let m = r["messages"].as_array().unwrap();
        assert_eq!(m.last().unwrap()["content"], "Both found.");
        assert_eq!(r["parallel_tool_calls"], true);
        // "c" is used twice: every call is renumbered, results follow their call
        assert_eq!(m[3]["tool_calls"][0]["id"], "call_1");
        assert_eq!(
            m[3]["tool_calls"][1]["function"]["arguments"],
            "{\"id\":\"W2\"}"
        );
        assert_eq!(
            m[3]["content"], "",
            "an empty text next to tool calls is \"\""
        );
        let v1 = sft_record_versioned(SftFormat::Openai, 1, &e, "policy", &[tool()])
            .unwrap()
            .record;
        assert!(
            v1["messages"][3].get("content").is_none(),
            "layout 1 leaves the empty content out"
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
        let h = sft_record_as(SftFormat::Hf, &e, "policy", &[tool()])
            .unwrap()
            .record;
        let hm = h["messages"].as_array().unwrap();
        assert_eq!(
            hm[3]["tool_calls"][0]["function"]["arguments"],
            json!({"id": "W1"})
        );
        assert_eq!(
            (hm[4]["name"].as_str(), hm[3]["content"].as_str()),
            (Some("find"), Some(""))
        );
        assert_eq!(h["tools"][0]["function"]["name"], "find");
        let h1 = sft_record_versioned(SftFormat::Hf, 1, &e, "policy", &[tool()])
            .unwrap()
            .record;
        let tools: Value = serde_json::from_str(h1["tools"].as_str().unwrap()).unwrap();
        assert_eq!(
            tools, h["tools"],
            "layout 1: the same schemas as one JSON string"
        );
    }

    #[test]
    fn token_estimates_follow_the_pieces_of_a_byte_level_bpe() {
        // words of up to 8 letters are one token, with their leading space
        assert_eq!(estimate_tokens("Cancel the order"), 3);
        // a longer word is one per 8 letters; digits one each; punctuation one per 3
        assert_eq!(estimate_tokens("internationalisation"), 3);
        assert_eq!(estimate_tokens("#W2378156"), 1 + 1 + 7);
        // `{"` `a` `":` ` ` `1` `}`
        assert_eq!(estimate_tokens("{\"a\": 1}"), 6);
        assert_eq!(estimate_tokens("a\n\n  b"), 3);
        assert_eq!(estimate_tokens(""), 0);
        let e = episode(json!([
            {"role": "user", "content": "find W1"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c", "name": "find", "arguments": {"id": "W1"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
            {"role": "assistant", "content": "Found."},
        ]));
        let policy = "Be kind. ".repeat(100);
        for format in [SftFormat::Openai, SftFormat::Hf, SftFormat::Llamafactory] {
            let r = sft_record_as(format, &e, &policy, &[tool()])
                .unwrap()
                .record;
            let t = row_tokens(format, &r);
            // the policy: 3 tokens (" Be", " kind", ".") a repeat, plus the space run and markup
            assert!((300..=320).contains(&t.system), "{format}: {t:?}");
            assert!(t.tools > 5 && t.dialogue > 10, "{format}: {t:?}");
            assert_eq!(t.start(), t.system + t.tools);
        }
    }

    #[test]
    fn a_result_without_its_call_is_refused() {
        let e = episode(json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "zz", "content": "?"},
            {"role": "assistant", "content": "Hello."},
        ]));
        let err = sft_record_as(SftFormat::Hf, &e, "p", &[]).unwrap_err();
        assert!(
            matches!(&err, Unexported::Malformed(why) if why.contains("call 'zz'")),
            "{err}"
        );
        let silent = episode(json!([{"role": "user", "content": "hi"}]));
        assert!(sft_record_as(SftFormat::Openai, &silent, "p", &[]).is_err());
        assert_eq!(SftFormat::parse("OpenAI").unwrap(), SftFormat::Openai);
        assert!(SftFormat::parse("jsonl")
            .unwrap_err()
            .to_string()
            .contains("ppol, openai, hf or llamafactory"));
    }

    #[test]
    fn llamafactory_rows_may_end_on_a_call_but_never_open_with_one() {
        let call = |id: &str| {
            json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": id, "name": "find", "arguments": {"id": "W1"}}]})
        };
        // cut by the turn limit after a call: the row ends on the function_call
        let cut = episode(json!([
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "find W1"},
            call("c"),
            {"role": "tool", "tool_call_id": "c", "content": "W1 ok"},
        ]));
        let r = sft_record_as(SftFormat::Llamafactory, &cut, "p", &[tool()]).unwrap();
        let conv = r.record["conversations"].as_array().unwrap();
        assert_eq!(conv.len(), 2);
        assert_eq!(conv[1]["from"], "function_call");
        assert_eq!(r.dropped_texts, 0);
        // a tool schema without properties gets an empty object (LLaMA-Factory reads it)
        let tools: Value = serde_json::from_str(r.record["tools"].as_str().unwrap()).unwrap();
        assert_eq!(tools[0]["parameters"]["properties"], json!({}));
        let early = episode(json!([
            call("c"),
            {"role": "tool", "tool_call_id": "c", "content": "W1 ok"},
            {"role": "user", "content": "hm?"},
            {"role": "assistant", "content": "Found W1."},
        ]));
        assert_eq!(
            sft_record_as(SftFormat::Llamafactory, &early, "p", &[]).unwrap_err(),
            Unexported::Unfit("the agent called tools before the user spoke".into())
        );
        let stray = episode(json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "zz", "content": "?"},
            {"role": "assistant", "content": "Hello."},
        ]));
        assert!(matches!(
            sft_record_as(SftFormat::Llamafactory, &stray, "p", &[]),
            Err(Unexported::Malformed(why)) if why.contains("call 'zz'")
        ));
        assert_eq!(
            merge_dataset_info(Some("[1]"), &[]).unwrap_err().1,
            "not a JSON object of datasets"
        );
    }
}
