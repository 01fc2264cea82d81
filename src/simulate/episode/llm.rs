//! LLM-backed user simulator and agent (any [`ChatModel`]).
//!
//! Both survive weak models and the servers that host them, and say what they did in notes
//! that end up on the episode record:
//!
//! * **The user speaking as the agent.** Small models slip into the assistant's voice ("as a
//!   customer service representative, I don't have the ability..."). [`speaks_as_agent`] is a
//!   cheap check on the text (phrases of the agent's voice, after the identity-confusion bank
//!   in `fitness/v2.banks`); such a reply is asked for once more with another seed, a higher
//!   temperature and a reminder of the role. If the second reply does the same it is kept and
//!   counted ([`UserSimulator::role_confusion`], the record's `role_confusion`), so that
//!   fitness and reports can exclude or count those episodes.
//! * **Invalid tool calls.** A call whose arguments are not a JSON object is answered with a
//!   tool error (`Error: ...`, as τ²'s environment answers bad calls) and the agent may try
//!   again; the episode goes on.
//! * **Agents that cannot stop calling tools, or answer with nothing.** An identical call
//!   repeated within one turn, an empty answer or the round limit ends the tool loop, and the
//!   agent is asked once more *without* tools, for a message to the user (llama-cpp-python's
//!   function-calling format, for one, can only produce tool calls or an empty message); a
//!   canned apology is the last resort. Each case leaves a note.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use regex::Regex;
use serde_json::Value;

use super::{
    parse_user_message, AgentReply, AgentSimulator, Scenario, ToolEnv, UserReply, UserSimulator,
};
use crate::dialogue::{Role, ToolCall, Turn};
use crate::llm::{CallRole, ChatModel, ChatRequest};
use crate::persona;
use crate::{Error, Result};

/// Phrases of the agent's voice that a customer does not use. One is enough.
static AGENT_VOICE: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"\bas an? (?:customer (?:service|support|care) )?(?:representative|agent|assistant|ai(?: language model)?)\b",
        r"\bi(?:'m| am) (?:an? )?(?:ai|virtual assistant|language model|customer (?:service|support) (?:representative|agent))\b",
        r"\bhow (?:may|can|could) i (?:help|assist) you\b",
        r"\bis there anything (?:else |further )?(?:that )?i (?:can|could|may) (?:help|assist|do)\b",
        r"\bthank you for (?:contacting|reaching out|calling|choosing|your patience)\b",
        r"\bour records (?:show|indicate|reflect)\b",
        r"\bi(?:'ll| will) (?:look into|check on|check|look up) (?:that|this|it) for you\b",
        r"\bi(?:'d|'ll| would| will) be (?:happy|glad|delighted) to (?:help|assist)\b",
        r"\b(?:help|assist) you with your (?:order|account|reservation|booking|business|request|inquiry)\b",
        r"\bi (?:don't|do not) have (?:the ability|access to (?:your|customer|the system|personal))",
        r"\b(?:please|kindly) (?:provide|share|confirm) (?:me with )?your (?:order|user|email|name|zip|account|reservation|booking)",
        r"\bcan you (?:please )?(?:provide|confirm|share) your (?:order|user|email|full name|zip|account|reservation|booking)",
        r"\bi(?: have|'ve) (?:gone ahead and|processed|submitted|escalated) ",
        r"\bunfortunately,? (?:as per|per) (?:our|company|store) policy\b",
    ]
    .iter()
    .map(|p| Regex::new(&format!("(?i){p}")).expect("agent-voice regex"))
    .collect()
});

/// The phrase of `text` that speaks as the customer-service agent, if any (a cheap check used
/// on user-simulator replies; see the [module docs](self)).
pub fn speaks_as_agent(text: &str) -> Option<String> {
    AGENT_VOICE
        .iter()
        .find_map(|re| re.find(text).map(|m| m.as_str().to_string()))
}

/// Appended to the user simulator's system prompt when it is asked again after speaking as
/// the agent.
pub const ROLE_REMINDER: &str = "\n\nRemember: you are the customer writing to customer service, not the agent. Write only the customer's next message.";

/// ppol's own wording of the user-simulator guidelines, used when τ²'s
/// `simulation_guidelines.md` is not available from the τ² data.
pub const DEFAULT_USER_GUIDELINES: &str = "# How to play the customer
You are a customer contacting a customer service agent. Play the scenario below as a real person would.

- Write one message at a time and keep the conversation flowing naturally.
- Follow the scenario instructions strictly.
- Never invent information the scenario does not give you; anything not in it is unknown to you.
- Do not copy the instructions word for word; say things in your own words.
- Share information progressively: give details when the agent asks for them.

## Ending the conversation
- Keep going until the task is done.
- When the goal of the scenario is reached, write '###STOP###' to end the conversation.
- If you are transferred to another agent, write '###TRANSFER###'.
- If the scenario does not give you what you need to continue, write '###OUT-OF-SCOPE###'.";

/// The system prompt of the user simulator: guidelines, the scenario and, when the persona is
/// non-empty, the injected persona block (reference semantics).
pub fn user_system_prompt(guidelines: &str, scenario: &Scenario, persona_text: &str) -> String {
    let base = format!(
        "{}\n\n<scenario>\n{}\n</scenario>",
        guidelines.trim(),
        scenario.text.trim()
    );
    persona::inject(&base, persona_text)
}

/// The agent's system prompt: instructions and the domain policy.
pub fn agent_system_prompt(policy: &str) -> String {
    format!(
        "<instructions>\nYou are a customer service agent. Help the user as the <policy> below allows.\n\
         In each turn, either send a message to the user or make tool calls, not both.\n\
         Be helpful, follow the policy exactly, and produce valid JSON for tool arguments.\n</instructions>\n\
         <policy>\n{}\n</policy>",
        policy.trim()
    )
}

/// A user simulator backed by an LLM. The conversation is shown to the model with roles
/// flipped (the agent's messages as `user`, its own as `assistant`); tool traffic is hidden.
pub struct LlmUser {
    model: Arc<dyn ChatModel>,
    system: String,
    temperature: Option<f32>,
    seed: Option<u64>,
    notes: Vec<String>,
    role_confusion: u32,
}

impl LlmUser {
    /// A user simulator with the given system prompt (see [`user_system_prompt`]).
    pub fn new(
        model: Arc<dyn ChatModel>,
        system: String,
        temperature: Option<f32>,
        seed: Option<u64>,
    ) -> Self {
        LlmUser {
            model,
            system,
            temperature,
            seed,
            notes: Vec::new(),
            role_confusion: 0,
        }
    }

    fn request(&self, history: &[Turn], system: String) -> ChatRequest {
        let mut messages = vec![Turn::new(Role::System, system)];
        for t in history {
            match t.role {
                Role::Assistant if !t.content.is_empty() => {
                    messages.push(Turn::new(Role::User, t.content.clone()))
                }
                Role::User => messages.push(Turn::new(Role::Assistant, t.content.clone())),
                _ => {}
            }
        }
        let mut req = ChatRequest::new(CallRole::UserSim, messages);
        req.temperature = self.temperature;
        req.seed = self.seed;
        req
    }
}

#[async_trait]
impl UserSimulator for LlmUser {
    async fn respond(&mut self, history: &[Turn]) -> Result<UserReply> {
        let turn = history.iter().filter(|t| t.role == Role::User).count() + 1;
        let req = self.request(history, self.system.clone());
        let resp = self.model.chat(&req).await?;
        let mut reply = parse_user_message(&resp.message.content);
        if let Some(phrase) = speaks_as_agent(&reply.text) {
            // Once more, with another seed, more temperature and a reminder of the role.
            let mut again = self.request(history, format!("{}{ROLE_REMINDER}", self.system));
            again.seed = self.seed.map(|s| s.wrapping_add(7919));
            again.temperature = Some(self.temperature.unwrap_or(0.0).max(0.7));
            let second = parse_user_message(&self.model.chat(&again).await?.message.content);
            match speaks_as_agent(&second.text) {
                Some(phrase2) => {
                    self.role_confusion += 1;
                    self.notes.push(format!(
                        "user turn {turn} spoke as the agent twice (\"{phrase}\", then \
                         \"{phrase2}\"); the second reply was kept and the episode flagged \
                         (role_confusion)"
                    ));
                }
                None => self.notes.push(format!(
                    "user turn {turn} spoke as the agent (\"{phrase}\"); asked again once"
                )),
            }
            reply = second;
        }
        if reply.text.is_empty() && reply.stop.is_none() {
            return Err(Error::Llm {
                endpoint: self.model.describe_for(CallRole::UserSim),
                role: CallRole::UserSim.as_str().into(),
                message: "the user simulator returned an empty message".into(),
            });
        }
        Ok(reply)
    }

    fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn role_confusion(&self) -> u32 {
        self.role_confusion
    }
}

/// Tool-call rounds an agent may make before it must answer the user, by default.
pub const DEFAULT_MAX_TOOL_ROUNDS: usize = 12;

/// An agent backed by an LLM with the domain tools as function tools.
pub struct LlmAgent {
    model: Arc<dyn ChatModel>,
    system: String,
    temperature: Option<f32>,
    seed: Option<u64>,
    /// Tool-call rounds allowed before the agent must answer the user.
    pub max_tool_rounds: usize,
    notes: Vec<String>,
}

impl LlmAgent {
    /// An agent with the given system prompt (see [`agent_system_prompt`]).
    pub fn new(
        model: Arc<dyn ChatModel>,
        system: String,
        temperature: Option<f32>,
        seed: Option<u64>,
    ) -> Self {
        LlmAgent {
            model,
            system,
            temperature,
            seed,
            max_tool_rounds: DEFAULT_MAX_TOOL_ROUNDS,
            notes: Vec::new(),
        }
    }

    /// Ask for a message to the user without offering tools: the conversation's text turns,
    /// with this turn's tool results summarised in the system prompt.
    async fn say_without_tools(&mut self, history: &[Turn], out: &[Turn]) -> Result<String> {
        let results: Vec<String> = out
            .iter()
            .filter(|t| t.role == Role::Tool)
            .map(|t| {
                let name = out
                    .iter()
                    .flat_map(|a| a.tool_calls.iter())
                    .find(|c| Some(&c.id) == t.tool_call_id.as_ref())
                    .map_or("tool", |c| c.name.as_str());
                let text: String = t.content.chars().take(1500).collect();
                format!("{name}: {text}")
            })
            .collect();
        let mut system = self.system.clone();
        if !results.is_empty() {
            system.push_str("\n\n<tool_results>\n");
            system.push_str(&results.join("\n"));
            system.push_str("\n</tool_results>");
        }
        system.push_str(
            "\n\nTools are not available for this reply: answer the user now in plain text.",
        );
        let mut messages = vec![Turn::new(Role::System, system)];
        for t in history.iter().chain(out) {
            if matches!(t.role, Role::User | Role::Assistant) && !t.content.trim().is_empty() {
                messages.push(Turn::new(t.role, t.content.clone()));
            }
        }
        let mut req = ChatRequest::new(CallRole::Agent, messages);
        req.temperature = self.temperature;
        req.seed = self.seed;
        req.accept_empty = true;
        let resp = self.model.chat(&req).await?;
        Ok(resp.message.content.trim().to_string())
    }
}

/// Names of tools that hand the user over to a human.
pub fn is_transfer_tool(name: &str) -> bool {
    name.starts_with("transfer_to_human")
}

/// The tool answer to a call whose arguments are not a JSON object (τ²'s `Error: ...` form).
pub fn invalid_arguments_error(call: &ToolCall) -> String {
    let raw = match &call.arguments {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let detail = match serde_json::from_str::<Value>(&raw) {
        Err(e) => format!("not valid JSON: {e}"),
        Ok(v) => format!("a JSON {} instead of an object", json_kind(&v)),
    };
    let excerpt: String = raw.chars().take(200).collect();
    format!(
        "Error: the arguments of {} are {detail}: {excerpt}. Call the tool again with a JSON object of arguments.",
        call.name
    )
}

/// The JSON kind of `v` (`"null"`, `"boolean"`, `"number"`, `"string"`, `"array"`, `"object"`).
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Why the tool loop ended without a message to the user.
enum Stuck {
    Empty,
    Repeated(String),
    Rounds,
}

#[async_trait]
impl AgentSimulator for LlmAgent {
    async fn respond(&mut self, history: &[Turn], env: &mut dyn ToolEnv) -> Result<AgentReply> {
        let tools = env.tools();
        let mut out: Vec<Turn> = Vec::new();
        let mut transferred = false;
        let mut ids: BTreeSet<String> = history
            .iter()
            .flat_map(|t| t.tool_calls.iter().map(|c| c.id.clone()))
            .collect();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut stuck = Stuck::Rounds;
        for _ in 0..=self.max_tool_rounds {
            let mut messages = vec![Turn::new(Role::System, self.system.clone())];
            messages.extend(history.iter().cloned());
            messages.extend(out.iter().cloned());
            let mut req = ChatRequest::new(CallRole::Agent, messages);
            req.tools = tools.clone();
            req.temperature = self.temperature;
            req.seed = self.seed;
            req.accept_empty = true;
            let msg = self.model.chat(&req).await?.message;
            if msg.tool_calls.is_empty() {
                if msg.content.trim().is_empty() {
                    stuck = Stuck::Empty;
                    break;
                }
                out.push(Turn::new(Role::Assistant, msg.content));
                return Ok(AgentReply {
                    turns: out,
                    transferred,
                });
            }
            let signatures: Vec<String> = msg
                .tool_calls
                .iter()
                .map(|c| format!("{}({})", c.name, c.arguments))
                .collect();
            if signatures.iter().all(|s| seen.contains(s)) {
                stuck = Stuck::Repeated(signatures.join(", "));
                break;
            }
            seen.extend(signatures);
            let turn_no = history.len() + out.len();
            let calls: Vec<ToolCall> = msg
                .tool_calls
                .into_iter()
                .enumerate()
                .map(|(i, mut c)| {
                    if c.id.is_empty() || ids.contains(&c.id) {
                        c.id = format!("call_{turn_no}_{i}");
                    }
                    ids.insert(c.id.clone());
                    c
                })
                .collect();
            out.push(Turn {
                role: Role::Assistant,
                content: msg.content,
                tool_calls: calls.clone(),
                tool_call_id: None,
            });
            for call in &calls {
                let content = if call.arguments.is_object() || call.arguments.is_null() {
                    let outcome = env.call(&call.name, &call.arguments);
                    transferred |= is_transfer_tool(&call.name) && !outcome.error;
                    outcome.content
                } else {
                    self.notes.push(format!(
                        "the agent called {} with arguments that are not a JSON object; \
                         answered with a tool error",
                        call.name
                    ));
                    invalid_arguments_error(call)
                };
                out.push(Turn {
                    role: Role::Tool,
                    content,
                    tool_calls: vec![],
                    tool_call_id: Some(call.id.clone()),
                });
            }
            if transferred {
                out.push(Turn::new(
                    Role::Assistant,
                    "I'm transferring you to a human agent now. Please hold on.",
                ));
                return Ok(AgentReply {
                    turns: out,
                    transferred,
                });
            }
        }
        let why = match &stuck {
            Stuck::Empty => "the agent answered with neither text nor tool calls".to_string(),
            Stuck::Repeated(calls) => format!("the agent repeated the identical call {calls}"),
            Stuck::Rounds => format!(
                "the agent made {} rounds of tool calls without answering",
                self.max_tool_rounds + 1
            ),
        };
        let text = self.say_without_tools(history, &out).await?;
        if text.is_empty() {
            self.notes.push(format!(
                "{why}; asked again without tools, it still wrote nothing: a canned reply was sent"
            ));
            out.push(Turn::new(
                Role::Assistant,
                "I'm sorry, I could not complete that. Could you tell me more about what you need?",
            ));
        } else {
            self.notes.push(format!(
                "{why}; asked again without tools for its message to the user"
            ));
            out.push(Turn::new(Role::Assistant, text));
        }
        Ok(AgentReply {
            turns: out,
            transferred,
        })
    }

    fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_voice_is_caught_and_customer_voice_is_not() {
        for agent in [
            "As a customer service representative, I don't have the ability to access your order.",
            "Hello! How can I assist you today?",
            "Is there anything else I can help you with?",
            "Thank you for contacting us. Our records show the order shipped.",
            "I'd be happy to help. Could you please provide your order number?",
            "Can you please confirm your email address?",
            "I'm an AI language model and cannot do that.",
            "I'll look into that for you.",
            "I'm sorry for any confusion. I'll be happy to assist you with your business.",
        ] {
            assert!(speaks_as_agent(agent).is_some(), "missed: {agent}");
        }
        for customer in [
            "Hi, I want to return the shoes from order #W2378156.",
            "I don't have access to my email right now, sorry.",
            "can you confirm my order went through??",
            "Let me check my wallet... it's the Visa ending in 1234.",
            "As a customer I expect better than this.",
            "Thanks, that's all. ###STOP###",
            "How can I change the address on my order?",
        ] {
            assert_eq!(speaks_as_agent(customer), None, "false alarm: {customer}");
        }
    }

    #[test]
    fn invalid_arguments_get_a_tau2_style_error() {
        let call = ToolCall {
            id: "c1".into(),
            name: "get_order_details".into(),
            arguments: Value::String("{\"order_id\": \"#W1\"".into()),
        };
        let e = invalid_arguments_error(&call);
        assert!(
            e.starts_with("Error: the arguments of get_order_details are not valid JSON"),
            "{e}"
        );
        assert!(e.contains("Call the tool again"), "{e}");
        let call = ToolCall {
            arguments: Value::String("[1, 2]".into()),
            ..call
        };
        assert!(invalid_arguments_error(&call).contains("a JSON array instead of an object"));
    }
}
