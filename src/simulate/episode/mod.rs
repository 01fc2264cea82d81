//! Episodes: a user simulator talking to an agent that acts on a tool environment, τ²'s
//! half-duplex protocol. This module holds the interfaces shared by the LLM-backed and the
//! offline scripted simulators, and the runner.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dialogue::Turn;
use crate::llm::ToolSpec;
use crate::simulate::episode::record::Episode;
use crate::Result;

pub mod llm;
pub mod record;
pub mod runner;
pub mod scripted;

/// What the simulated user knows about its task (τ²'s `user_scenario.instructions`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// Task id.
    pub task_id: String,
    /// Domain name.
    pub domain: String,
    /// Why the user contacts the agent (second person: "You want to ...").
    pub reason_for_call: String,
    /// Facts the user knows ("You are Yusuf Rossi in zip code 19122.").
    pub known_info: String,
    /// Facts the user does not know ("You do not remember your email address.").
    pub unknown_info: String,
    /// How to behave / extra instructions.
    pub task_instructions: String,
    /// The whole scenario as the LLM user simulator sees it.
    pub text: String,
}

/// One action of the gold plan (τ² `evaluation_criteria.actions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedAction {
    /// Tool name.
    pub name: String,
    /// Tool arguments.
    pub arguments: Value,
}

/// What the rule-based offline agent knows: the task's gold actions and the facts it must
/// communicate. (The offline agent is an oracle of the happy path; the user side is what ppol
/// studies, and the oracle keeps task success tied to the user's behaviour.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Gold actions in order.
    pub actions: Vec<PlannedAction>,
    /// Strings the agent must say (τ² `communicate_info`).
    pub communicate_info: Vec<String>,
}

/// The result of one tool call (τ²'s tool-message content and error flag).
pub use crate::simulate::tau2::ToolOutcome;

/// A tool environment the agent acts on.
pub trait ToolEnv: Send {
    /// The tools offered to the agent.
    fn tools(&self) -> Vec<ToolSpec>;
    /// Call one tool. Unknown tools and bad arguments are errors in the outcome, never panics.
    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutcome;
    /// Whether a tool only reads state (the offline agent asks no confirmation before those).
    fn is_read_only(&self, name: &str) -> bool;
}

/// Why an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    /// The user said `###STOP###`.
    UserStop,
    /// The user said `###TRANSFER###` or the agent transferred to a human.
    Transfer,
    /// The user said `###OUT-OF-SCOPE###`.
    OutOfScope,
    /// The turn limit was reached.
    MaxTurns,
    /// The episode failed (infrastructure error); see the episode's `error`.
    Error,
}

/// What the user simulator says next.
#[derive(Debug, Clone, PartialEq)]
pub struct UserReply {
    /// The message text, stop tokens removed (may be empty when the user only stops).
    pub text: String,
    /// Set when this message ends the conversation.
    pub stop: Option<Termination>,
}

/// A simulated user.
#[async_trait]
pub trait UserSimulator: Send {
    /// The next user message given the conversation so far (from the agent's point of view:
    /// `user` turns are this simulator's own past messages, `assistant` turns the agent's).
    /// Tool traffic in `history` must be ignored (the user does not see it).
    async fn respond(&mut self, history: &[Turn]) -> Result<UserReply>;

    /// Notes on what happened since the last call (retries, fallbacks), for the episode
    /// record. The default has none.
    fn take_notes(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// User turns kept although they speak as the agent (after the simulator's own retry),
    /// so far. The default is 0.
    fn role_confusion(&self) -> u32 {
        0
    }
}

/// An agent acting on a tool environment.
#[async_trait]
pub trait AgentSimulator: Send {
    /// The agent's reaction to the conversation so far: zero or more assistant turns with tool
    /// calls, each followed by its tool-result turn, ending with one assistant text message to
    /// the user. Returns those turns and whether the agent transferred the user to a human.
    async fn respond(&mut self, history: &[Turn], env: &mut dyn ToolEnv) -> Result<AgentReply>;

    /// Notes on what happened since the last call (invalid tool calls answered with an error,
    /// fallbacks), for the episode record. The default has none.
    fn take_notes(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// What the agent did in one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentReply {
    /// Assistant (with tool calls), tool and final assistant turns, in order.
    pub turns: Vec<Turn>,
    /// The agent transferred the user to a human agent (ends the episode).
    pub transferred: bool,
}

/// Plays episodes.
#[async_trait]
pub trait EpisodeRunner: Send + Sync {
    /// One episode of `task_id` with `persona` (None = the plain simulator). Never panics; an
    /// infrastructure failure is an episode with status `failed`.
    async fn run(
        &self,
        task_id: &str,
        persona: Option<&crate::persona::Persona>,
        trial: u32,
        seed: u64,
    ) -> Episode;
}

/// Stop tokens of τ²'s user simulator.
pub const STOP_TOKENS: [(&str, Termination); 3] = [
    ("###STOP###", Termination::UserStop),
    ("###TRANSFER###", Termination::Transfer),
    ("###OUT-OF-SCOPE###", Termination::OutOfScope),
];

/// Split a raw user message into text and stop reason (the first stop token found ends the
/// conversation; all tokens are removed from the text).
pub fn parse_user_message(raw: &str) -> UserReply {
    let mut stop = None;
    let mut text = raw.to_string();
    for (tok, why) in STOP_TOKENS {
        if text.contains(tok) {
            stop.get_or_insert(why);
            text = text.replace(tok, "");
        }
    }
    UserReply {
        text: text.trim().to_string(),
        stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_tokens_are_removed() {
        let r = parse_user_message("thanks, bye ###STOP###");
        assert_eq!(r.text, "thanks, bye");
        assert_eq!(r.stop, Some(Termination::UserStop));
        assert_eq!(parse_user_message("hi").stop, None);
        assert_eq!(parse_user_message("###TRANSFER###").text, "");
    }
}
