//! The reflection attached to every evaluated program and shown when it becomes a parent: a
//! computed critique (the score's terms, the most and least human personas and the features
//! on which they sit furthest from humans), followed, with an LLM and `mutation.reflection`
//! on, by the reflection model's critique of sample dialogues.

use crate::dialogue::{Role, Turn};
use crate::evolve::rundir::runlog::EvalMetrics;
use crate::fitness::features::Fingerprint;
use crate::fitness::score::Scorer;
use crate::llm::{CallRole, ChatModel, ChatRequest};
use crate::persona::Persona;
use crate::simulate::episode::record::Episode;

/// Characters of the reflection model's answer kept.
const MAX_REFLECTION_CHARS: usize = 10_000;

/// What one evaluation produced, as reflection reads it (all in episode order).
pub struct Evidence<'a> {
    /// The personas.
    pub personas: &'a [Persona],
    /// Their episodes.
    pub episodes: &'a [Episode],
    /// P(human) per episode (None for failed ones).
    pub p_human: &'a [Option<f64>],
    /// Fingerprints per episode (None for failed ones).
    pub fingerprints: &'a [Option<Fingerprint>],
    /// The metrics of the evaluation.
    pub metrics: &'a EvalMetrics,
    /// The task context the generator saw (first task of the batch).
    pub context: &'a str,
}

/// The reflection on an evaluation: the computed critique, plus the model's when `model` is
/// given. A failed or empty model answer leaves the computed critique alone (reflection never
/// fails an evaluation).
pub async fn reflect(
    scorer: &Scorer,
    evidence: &Evidence<'_>,
    model: Option<&dyn ChatModel>,
) -> String {
    let computed = computed(scorer, evidence);
    let Some(model) = model else {
        return computed;
    };
    match model.chat(&request(&computed, evidence)).await {
        Ok(r) if !r.message.content.trim().is_empty() => format!(
            "{computed}\n{}",
            r.message
                .content
                .chars()
                .take(MAX_REFLECTION_CHARS)
                .collect::<String>()
        ),
        _ => computed,
    }
}

/// (persona index, P(human)) of the scored personas, most human first.
fn rank_by_p_human(p_human: &[Option<f64>]) -> Vec<(usize, f64)> {
    let mut ranked: Vec<(usize, f64)> = p_human
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.map(|p| (i, p)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked
}

/// The computed critique attached to every program (and given to the reflection LLM).
pub fn computed(scorer: &Scorer, evidence: &Evidence<'_>) -> String {
    let (personas, fps, m) = (evidence.personas, evidence.fingerprints, evidence.metrics);
    let ranked = rank_by_p_human(evidence.p_human);
    let mut s = format!(
        "combined {:.4} = {:.2}·human_likeness {:.4} + {:.2}·coverage {:.4}; success rate {:.2}; {} episodes ({} failed).\n",
        m.combined, m.lambda_h, m.human_likeness, m.lambda_b, m.coverage, m.success_rate, m.n_episodes, m.n_failed_episodes
    );
    let describe = |label: &str, i: usize, p: f64| -> String {
        let persona = &personas[i];
        let gaps = fps[i]
            .map(|f| scorer.feature_gaps(&f, 4))
            .unwrap_or_default();
        format!(
            "{label}: persona '{}' (axes: {}) P(human) {:.3}; furthest from humans: {}\n",
            persona.persona_id,
            persona.active_axes().join(", "),
            p,
            gaps.iter()
                .map(|(n, z)| format!("{n} {z:+.1}σ"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    if let (Some(best), Some(worst)) = (ranked.first(), ranked.last()) {
        s.push_str(&describe("most human", best.0, best.1));
        s.push_str(&describe("least human", worst.0, worst.1));
    }
    s
}

/// The reflection prompt (the reference's §7.4 content, in our words).
pub fn request(computed: &str, evidence: &Evidence<'_>) -> ChatRequest {
    let (personas, episodes, p_human) = (evidence.personas, evidence.episodes, evidence.p_human);
    let ranked = rank_by_p_human(p_human);
    let picks: Vec<usize> = ranked
        .iter()
        .take(2)
        .chain(ranked.iter().rev().take(2))
        .map(|(i, _)| *i)
        .collect();
    let mut samples = String::new();
    for i in picks {
        let e = &episodes[i];
        let text: String = personas[i].text.chars().take(1200).collect();
        let mut excerpt = String::new();
        for t in e
            .conversation
            .iter()
            .filter(|t| matches!(t.role, Role::User | Role::Assistant) && !t.content.is_empty())
            .take(20)
        {
            let c: String = t.content.chars().take(250).collect();
            excerpt.push_str(&format!("{}: {}\n", t.role.as_str(), c));
        }
        let excerpt: String = excerpt.chars().take(2400).collect();
        samples.push_str(&format!(
            "\n### Sample (P(human) {:.3})\nPersona:\n{text}\nDialogue excerpt:\n{excerpt}\n",
            p_human[i].unwrap_or(0.0)
        ));
    }
    let ctx: String = evidence.context.chars().take(2200).collect();
    let prompt = format!(
        "You review a generator of persona policies for a simulated customer. Write a reflection of at most 300 words:\n\
         how the personas' behaviour led to these metrics; strengths; specific failures (drifting from the persona, \
         unnatural role-play where people would type briefly, too much cooperation with no friction or typos); why some \
         dialogues look human to the discriminator and others do not; which combinations of behaviours help or conflict; \
         which patterns to adopt and which to avoid. Do not mention sample numbers, labels or customer names.\n\n\
         ## Metrics and feature gaps\n{computed}\n## Task context\n{ctx}\n{samples}"
    );
    let mut r = ChatRequest::new(CallRole::Reflection, vec![Turn::new(Role::User, prompt)]);
    r.temperature = Some(0.25);
    // No max_tokens of its own: the reflection role's (`[llm.roles.reflection]` or
    // `[llm.default]` max_tokens), else its default of 2,000 (the reference's value).
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_leaves_its_cap_to_the_reflection_role() {
        let metrics = EvalMetrics::default();
        let evidence = Evidence {
            personas: &[],
            episodes: &[],
            p_human: &[],
            fingerprints: &[],
            metrics: &metrics,
            context: "A customer of an airline.",
        };
        let r = request("combined 0.5", &evidence);
        assert_eq!(r.role, CallRole::Reflection);
        assert_eq!(r.temperature, Some(0.25));
        // `[llm.roles.reflection] max_tokens` must be able to cap it (the request used to
        // carry 2,000 of its own, which beat the configuration)
        assert_eq!(r.max_tokens, None);
        assert_eq!(CallRole::Reflection.default_max_tokens(), 2000);
    }
}
