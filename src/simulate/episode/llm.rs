//! LLM-backed user simulator and agent (any [`ChatModel`]).

use std::sync::Arc;

use async_trait::async_trait;

use super::{
    parse_user_message, AgentReply, AgentSimulator, Scenario, ToolEnv, UserReply, UserSimulator,
};
use crate::dialogue::{Role, Turn};
use crate::llm::{CallRole, ChatModel, ChatRequest};
use crate::persona;
use crate::{Error, Result};

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
        }
    }
}

#[async_trait]
impl UserSimulator for LlmUser {
    async fn respond(&mut self, history: &[Turn]) -> Result<UserReply> {
        let mut messages = vec![Turn::new(Role::System, self.system.clone())];
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
        let resp = self.model.chat(&req).await?;
        let reply = parse_user_message(&resp.message.content);
        if reply.text.is_empty() && reply.stop.is_none() {
            return Err(Error::Llm {
                endpoint: self.model.describe(),
                role: CallRole::UserSim.as_str().into(),
                message: "the user simulator returned an empty message".into(),
            });
        }
        Ok(reply)
    }
}

/// An agent backed by an LLM with the domain tools as function tools.
pub struct LlmAgent {
    model: Arc<dyn ChatModel>,
    system: String,
    temperature: Option<f32>,
    seed: Option<u64>,
    /// Tool-call rounds allowed before the agent must answer the user.
    pub max_tool_rounds: usize,
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
            max_tool_rounds: 12,
        }
    }
}

/// Names of tools that hand the user over to a human.
pub fn is_transfer_tool(name: &str) -> bool {
    name.starts_with("transfer_to_human")
}

#[async_trait]
impl AgentSimulator for LlmAgent {
    async fn respond(&mut self, history: &[Turn], env: &mut dyn ToolEnv) -> Result<AgentReply> {
        let tools = env.tools();
        let mut out: Vec<Turn> = Vec::new();
        let mut transferred = false;
        for _ in 0..=self.max_tool_rounds {
            let mut messages = vec![Turn::new(Role::System, self.system.clone())];
            messages.extend(history.iter().cloned());
            messages.extend(out.iter().cloned());
            let mut req = ChatRequest::new(CallRole::Agent, messages);
            req.tools = tools.clone();
            req.temperature = self.temperature;
            req.seed = self.seed;
            let resp = self.model.chat(&req).await?;
            let msg = resp.message;
            if msg.tool_calls.is_empty() {
                if msg.content.trim().is_empty() {
                    return Err(Error::Llm {
                        endpoint: self.model.describe(),
                        role: CallRole::Agent.as_str().into(),
                        message: "the agent returned neither text nor tool calls".into(),
                    });
                }
                out.push(Turn::new(Role::Assistant, msg.content));
                return Ok(AgentReply {
                    turns: out,
                    transferred,
                });
            }
            let calls = msg.tool_calls.clone();
            out.push(Turn {
                role: Role::Assistant,
                content: msg.content,
                tool_calls: calls.clone(),
                tool_call_id: None,
            });
            for (i, call) in calls.iter().enumerate() {
                let outcome = env.call(&call.name, &call.arguments);
                transferred |= is_transfer_tool(&call.name) && !outcome.error;
                let id = if call.id.is_empty() {
                    format!("call_{}_{i}", out.len())
                } else {
                    call.id.clone()
                };
                out.push(Turn {
                    role: Role::Tool,
                    content: outcome.content,
                    tool_calls: vec![],
                    tool_call_id: Some(id),
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
        out.push(Turn::new(
            Role::Assistant,
            "I'm sorry, I could not complete that. Could you tell me more about what you need?",
        ));
        Ok(AgentReply {
            turns: out,
            transferred,
        })
    }
}
