//! τ²'s reward for an episode (its `EvaluationType.ALL`): the product of the components named in
//! the task's `reward_basis` —
//!
//! * **DB** (and ENV_ASSERTION): a fresh environment with the task's initial state replays the gold
//!   actions (errors ignored, as in τ²); the episode's final database must equal it;
//! * **ACTION**: every gold action matches some tool call of the trajectory (name plus the
//!   `compare_args`, or all arguments the call passed, compared with Python equality);
//! * **COMMUNICATE**: every `communicate_info` string occurs, case-insensitively, in some assistant
//!   text with commas removed from the text;
//! * **NL_ASSERTION** needs an LLM judge. ppol does not evaluate it offline: the count is recorded
//!   in [`RewardInfo::nl_assertions_skipped`] and it does not change the reward (τ²'s `ALL` mode
//!   refuses such tasks outright; retail and airline never put it in their basis).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::data::{Action, Domain, RewardType, Task};
use super::Env;
use crate::dialogue::{Role, Turn};
use crate::Result;

/// One gold action and whether the trajectory contains a matching call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionCheck {
    /// The gold action id.
    pub action_id: String,
    /// Tool name.
    pub name: String,
    /// Whether a matching call was made.
    pub matched: bool,
}

/// One `communicate_info` string and whether an assistant message said it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommunicateCheck {
    /// The required string.
    pub info: String,
    /// Whether it was found.
    pub met: bool,
}

/// Reward of one episode with its parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardInfo {
    /// The reward (0 or 1 for retail/airline/demo).
    pub reward: f64,
    /// The components that make up the reward.
    pub reward_basis: Vec<RewardType>,
    /// Whether the final DB equals the gold replay's (`None` when not computed).
    pub db_match: Option<bool>,
    /// Every gold action, matched or not (informational unless ACTION is in the basis).
    pub actions: Vec<ActionCheck>,
    /// Every `communicate_info` check.
    pub communicate: Vec<CommunicateCheck>,
    /// NL assertions not evaluated (no LLM judge offline).
    pub nl_assertions_skipped: usize,
    /// Reward of each component in the basis (`DB`, `ACTION`, `COMMUNICATE`, ...).
    pub breakdown: BTreeMap<String, f64>,
    /// Remarks: gold actions that failed, replay mismatches, skipped parts.
    pub notes: Vec<String>,
}

/// Options of [`evaluate_with`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvalOptions {
    /// The episode ended other than by the agent or user stopping (max turns, error, ...): τ²
    /// gives reward 0 with a note naming the reason.
    pub premature_termination: Option<String>,
}

/// Score an episode: its trajectory (assistant tool calls in [`Turn::tool_calls`], results as
/// [`Role::Tool`] turns) and the environment it ran in, as it was at the end.
pub fn evaluate(
    domain: &Domain,
    task: &Task,
    trajectory: &[Turn],
    final_env: &Env,
) -> Result<RewardInfo> {
    evaluate_with(
        domain,
        task,
        trajectory,
        Some(final_env),
        &EvalOptions::default(),
    )
}

/// Score an episode without its live environment: like τ², rebuild the final state by replaying
/// the trajectory's tool calls on a fresh environment for the task.
pub fn evaluate_replay(domain: &Domain, task: &Task, trajectory: &[Turn]) -> Result<RewardInfo> {
    evaluate_with(domain, task, trajectory, None, &EvalOptions::default())
}

fn tool_calls(trajectory: &[Turn]) -> impl Iterator<Item = &crate::dialogue::ToolCall> {
    trajectory
        .iter()
        .filter(|t| matches!(t.role, Role::Assistant | Role::User))
        .flat_map(|t| t.tool_calls.iter())
}

/// Replay the trajectory's tool calls on `env`; returns notes on results that differ from the
/// recorded tool messages.
fn replay(env: &mut Env, trajectory: &[Turn]) -> Vec<String> {
    let mut recorded: BTreeMap<&str, &str> = BTreeMap::new();
    for t in trajectory.iter().filter(|t| t.role == Role::Tool) {
        if let Some(id) = &t.tool_call_id {
            recorded.insert(id.as_str(), t.content.as_str());
        }
    }
    let mut notes = Vec::new();
    for call in tool_calls(trajectory) {
        let out = env.call(&call.name, &call.arguments);
        if let Some(expected) = recorded.get(call.id.as_str()) {
            if !same_content(&out.content, expected) {
                notes.push(format!(
                    "replayed tool call {} ({}) returned different content than recorded",
                    call.id, call.name
                ));
            }
        }
    }
    notes
}

/// τ²'s comparison of tool contents: as JSON if both parse, else as text.
fn same_content(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<Value>(a),
        serde_json::from_str::<Value>(b),
    ) {
        (Ok(x), Ok(y)) => py_eq(&x, &y),
        _ => a == b,
    }
}

/// Python `==` on JSON-decoded values (`1 == 1.0`, `True == 1`).
pub(crate) fn py_eq(a: &Value, b: &Value) -> bool {
    fn num(v: &Value) -> Option<f64> {
        match v {
            Value::Number(n) => n.as_f64(),
            Value::Bool(b) => Some(*b as i64 as f64),
            _ => None,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Bool(_), Value::Number(_)) | (Value::Number(_), Value::Bool(_)) => num(a) == num(b),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| py_eq(v, w)))
        }
        _ => a == b,
    }
}

/// τ²'s `Action.compare_with_tool_call`.
fn action_matches(action: &Action, name: &str, args: &Value) -> bool {
    if action.name != name {
        return false;
    }
    let empty = Map::new();
    let call_args = args.as_object().unwrap_or(&empty);
    let compare: Vec<&str> = match &action.compare_args {
        Some(c) => c.iter().map(String::as_str).collect(),
        None => call_args.keys().map(String::as_str).collect(),
    };
    if compare.is_empty() {
        return true;
    }
    let pick = |m: &Map<String, Value>| -> Map<String, Value> {
        m.iter()
            .filter(|(k, _)| compare.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    py_eq(
        &Value::Object(pick(call_args)),
        &Value::Object(pick(&action.arguments)),
    )
}

/// Score an episode; `final_env: None` rebuilds the final state by replay (see
/// [`evaluate_replay`]).
pub fn evaluate_with(
    domain: &Domain,
    task: &Task,
    trajectory: &[Turn],
    final_env: Option<&Env>,
    opts: &EvalOptions,
) -> Result<RewardInfo> {
    let mut info = RewardInfo {
        reward: 1.0,
        reward_basis: Vec::new(),
        db_match: None,
        actions: Vec::new(),
        communicate: Vec::new(),
        nl_assertions_skipped: 0,
        breakdown: BTreeMap::new(),
        notes: Vec::new(),
    };
    if let Some(reason) = &opts.premature_termination {
        info.reward = 0.0;
        info.notes.push(format!(
            "Simulation terminated prematurely. Termination reason: {reason}"
        ));
        return Ok(info);
    }
    let Some(criteria) = &task.evaluation_criteria else {
        info.notes.push("No evaluation criteria".into());
        return Ok(info);
    };
    info.reward_basis = criteria.reward_basis.clone();
    let basis = &criteria.reward_basis;

    // DB: gold replay vs. the episode's final state.
    let db_reward = if criteria.actions.is_none() && criteria.env_assertions.is_none() {
        info.db_match = Some(true);
        info.notes
            .push("No expected actions or env assertions".into());
        1.0
    } else {
        let mut gold = domain.env_for_task(task)?;
        for action in task.gold_actions() {
            if action.requestor != "assistant" {
                info.notes.push(format!(
                    "gold action {} ({}) is a user tool call; this domain has no user tools",
                    action.action_id, action.name
                ));
                continue;
            }
            let out = gold.call(&action.name, &Value::Object(action.arguments.clone()));
            if out.error {
                info.notes.push(format!(
                    "gold action {} ({}) failed: {}",
                    action.action_id, action.name, out.content
                ));
            }
        }
        let matched = match final_env {
            Some(env) => gold.same_db(env),
            None => {
                let mut predicted = domain.env_for_task(task)?;
                info.notes.extend(replay(&mut predicted, trajectory));
                gold.same_db(&predicted)
            }
        };
        info.db_match = Some(matched);
        if matched {
            1.0
        } else {
            0.0
        }
    };
    if let Some(asserts) = &criteria.env_assertions {
        if !asserts.is_empty() && basis.contains(&RewardType::EnvAssertion) {
            info.notes.push(format!(
                "{} env assertions not evaluated (not used by retail/airline/demo)",
                asserts.len()
            ));
        }
    }

    // ACTION
    let calls: Vec<_> = tool_calls(trajectory).collect();
    for action in task.gold_actions() {
        let matched = calls
            .iter()
            .any(|c| action_matches(action, &c.name, &c.arguments));
        info.actions.push(ActionCheck {
            action_id: action.action_id.clone(),
            name: action.name.clone(),
            matched,
        });
    }
    let action_reward = if info.actions.iter().all(|a| a.matched) {
        1.0
    } else {
        0.0
    };

    // COMMUNICATE
    let texts: Vec<String> = trajectory
        .iter()
        .filter(|t| t.role == Role::Assistant && !t.content.trim().is_empty())
        .map(|t| t.content.to_lowercase().replace(',', ""))
        .collect();
    for s in task.communicate_info() {
        let needle = s.to_lowercase();
        info.communicate.push(CommunicateCheck {
            info: s.clone(),
            met: texts.iter().any(|t| t.contains(&needle)),
        });
    }
    let communicate_reward = if info.communicate.iter().all(|c| c.met) {
        1.0
    } else {
        0.0
    };

    // NL assertions
    info.nl_assertions_skipped = criteria.nl_assertions.as_ref().map_or(0, Vec::len);
    if basis.contains(&RewardType::NlAssertion) && info.nl_assertions_skipped > 0 {
        info.notes.push(format!(
            "{} NL assertions need an LLM judge and were not evaluated; they do not affect the reward",
            info.nl_assertions_skipped
        ));
    }

    let mut reward = 1.0;
    if basis.contains(&RewardType::Db) || basis.contains(&RewardType::EnvAssertion) {
        info.breakdown.insert("DB".into(), db_reward);
        reward *= db_reward;
    }
    if basis.contains(&RewardType::Action) {
        info.breakdown.insert("ACTION".into(), action_reward);
        reward *= action_reward;
    }
    if basis.contains(&RewardType::Communicate) {
        info.breakdown
            .insert("COMMUNICATE".into(), communicate_reward);
        reward *= communicate_reward;
    }
    info.reward = reward;
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_equality() {
        assert!(py_eq(&json!({"a": 1}), &json!({"a": 1.0})));
        assert!(!py_eq(&json!({"a": 1}), &json!({"a": "1"})));
        assert!(py_eq(&json!([true]), &json!([1])));
    }
}
