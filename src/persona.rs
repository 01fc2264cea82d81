//! A persona policy: the natural-language overlay injected into a user simulator, with the
//! structured axis placement it was generated from.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One persona policy for one task, as written by `ppol generate` and read by `ppol episodes --personas`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Persona {
    /// The task it was generated for (absent for free-text contexts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Snake-case name, unique within the task.
    pub persona_id: String,
    /// Two or three sentences about the person.
    #[serde(default)]
    pub description: String,
    /// Behaviour axis -> on/off, in the generator's axis order.
    #[serde(default)]
    pub axis_placement: Map<String, Value>,
    /// The roleplay text given to the simulator.
    pub text: String,
    /// Why this placement (one sentence), when the generator gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Where the generator program says the persona came from, when it says: a short label
    /// such as `model-json` (the model's JSON answer, used as is), `repaired` (read from a
    /// malformed or prose answer by the program's repair) or `fallback` (composed by the
    /// program without a usable answer). See `generate::generator`'s contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl Persona {
    /// Axis names whose placement is `true`.
    pub fn active_axes(&self) -> Vec<&str> {
        self.axis_placement
            .iter()
            .filter(|(_, v)| v.as_bool() == Some(true))
            .map(|(k, _)| k.as_str())
            .collect()
    }
}

/// The heading and framing of the injected block (reference ppol 0.1.1 semantics, spec §8).
const INJECTION_HEAD: &str = "## YOUR BEHAVIORAL STYLE FOR THIS CONVERSATION

In addition to your role and task above, you must embody the following behavioral persona for the entire conversation. This persona governs HOW you communicate, not WHAT you want: your goals, preferences and private information remain exactly as already given.";

const INJECTION_TAIL: &str = "Apply this style consistently throughout the conversation. Reveal information only as appropriate for this persona and let emotions surface naturally over time. Keep exactly the same goal and task. Never break character and never mention these instructions. Aim for a natural conversation, as a real human would have it.";

/// Append the persona block to a user simulator's system prompt. An empty (or whitespace-only)
/// persona leaves the prompt unchanged, as the reference's callers do.
pub fn inject(base_prompt: &str, persona_text: &str) -> String {
    if persona_text.trim().is_empty() {
        return base_prompt.to_string();
    }
    format!("{}\n\n{}", base_prompt.trim(), persona_block(persona_text))
}

/// The ready-to-paste block for a persona (`ppol generate --format prompt`).
pub fn persona_block(persona_text: &str) -> String {
    format!(
        "{INJECTION_HEAD}\n\n---\n{}\n--- \n\n{INJECTION_TAIL}",
        persona_text.trim()
    )
    .trim()
    .to_string()
}

/// Read persona records (JSON Lines, as `ppol generate` writes them) in bounded memory (see
/// [`crate::io::read_jsonl`]), naming file and line on errors. The one persona-file reader.
pub fn read_jsonl(path: &std::path::Path) -> crate::Result<Vec<Persona>> {
    crate::io::read_jsonl(path, "a persona record {\"persona_id\", \"text\", ...}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_persona_leaves_prompt_alone() {
        assert_eq!(inject("base  ", "  \n"), "base  ");
    }

    #[test]
    fn block_is_appended_after_blank_line() {
        let p = inject("You are a customer.\n", "Type in lowercase.");
        assert!(p.starts_with("You are a customer.\n\n## YOUR BEHAVIORAL STYLE"));
        assert!(p.contains("---\nType in lowercase.\n--- \n"));
    }
}
