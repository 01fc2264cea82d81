//! Mutator prompts: the system message, the diff prompt and the full-rewrite prompt.
//!
//! The texts are Markdown templates embedded at build time (`src/mutation/templates/*.md`)
//! with `{placeholder}`s filled by a small strict formatter ([`fill_template`]): an unknown
//! placeholder or a stray brace is an error, never an empty string, and substituted values
//! are not re-scanned (program code full of braces is safe). `{{` and `}}` are literal braces.
//!
//! Each prompt shows the parent's fitness, feature coordinates and metrics, its reflection,
//! the recent failed children of this parent, previous attempts, inspirations (top and
//! diverse programs, code clipped), the full parent program, and one **mutation angle**
//! sampled with a seed from [`MUTATION_ANGLES`]. When the prompt exceeds
//! [`PromptConfig::max_prompt_chars`], inspirations lose their code first, then disappear,
//! then previous attempts, then the reflection and failures are shortened; the parent program
//! is never cut. [`PromptBuilder::for_context`] lowers that cap to what a model's context
//! window holds once the system message and room for the answer are set aside, and says so.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{head, tail, ChildFailure};
use crate::dialogue::{Role, Turn};
use crate::evolve::archive::program::Program;
use crate::evolve::archive::{Inspiration, InspirationKind};
use crate::llm::context::TOKENS_PER_MESSAGE;
use crate::llm::{CallRole, ChatRequest, ContextBudget};
use crate::{Error, Result};

/// The system message template.
pub const SYSTEM_TEMPLATE: &str = include_str!("templates/system.md");
/// The diff (SEARCH/REPLACE) user prompt template.
pub const DIFF_TEMPLATE: &str = include_str!("templates/diff_user.md");
/// The full-rewrite user prompt template.
pub const REWRITE_TEMPLATE: &str = include_str!("templates/rewrite_user.md");
/// The structured-edit user prompt template (answers constrained to a JSON schema, see
/// [`super::edits`]).
pub const EDITS_TEMPLATE: &str = include_str!("templates/edits_user.md");

/// Placeholders the user templates may use (`targets`: the structured-edit template only).
pub const PLACEHOLDERS: [&str; 13] = [
    "targets",
    "fitness_metric",
    "fitness",
    "feature_coords",
    "feature_names",
    "metrics",
    "reflection",
    "failures",
    "history",
    "inspirations",
    "program",
    "angle",
    "progress",
];

/// One focus for a mutation round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MutationAngle {
    /// Short stable id, recorded in [`crate::evolve::archive::program::MutationInfo::angle`].
    pub id: &'static str,
    /// The instruction shown to the mutator.
    pub text: &'static str,
}

/// The five angles of the reference (`use_template_stochasticity`), reworded; the fifth states
/// that the harness enforces exactly N personas.
pub const MUTATION_ANGLES: [MutationAngle; 5] = [
    MutationAngle {
        id: "axes",
        text: "Edit DIVERSITY_AXES freely: add behaviours real users in this domain show that the current axes miss and that are orthogonal to them, sharpen vague definitions and playbooks, merge or drop axes that overlap.",
    },
    MutationAngle {
        id: "population-prompt",
        text: "Edit the population prompt so that the personas differ more in style (register, length, patience, literacy, mood) and their axis placements stay psychologically coherent.",
    },
    MutationAngle {
        id: "roleplay",
        text: "Rewrite the roleplay expansion so the simulator types the way people do in this domain: natural message length and typos, reactions to the agent's mistakes, pushback, and information revealed gradually rather than all at once.",
    },
    MutationAngle {
        id: "structure",
        text: "Make a structural change to the program logic, for example different roleplay prompts for different behaviour mixes, or branching on the task context.",
    },
    MutationAngle {
        id: "new-approach",
        text: "Try a substantially different approach, for example generating more candidate personas than needed and then pruning or ranking them for diversity. The program must still return exactly N personas: the harness rejects any other count.",
    },
];

/// The angle drawn for a seed (uniform over [`MUTATION_ANGLES`]).
pub fn sample_angle(seed: u64) -> &'static MutationAngle {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    &MUTATION_ANGLES[rng.random_range(0..MUTATION_ANGLES.len())]
}

/// SHA-256 of each embedded template and of the angle texts.
pub(crate) fn template_hashes() -> BTreeMap<&'static str, String> {
    let hash = crate::evolve::archive::program::code_hash;
    let angles: String = MUTATION_ANGLES
        .iter()
        .map(|a| format!("{}\t{}\n", a.id, a.text))
        .collect();
    BTreeMap::from([
        ("system.md", hash(SYSTEM_TEMPLATE)),
        ("diff_user.md", hash(DIFF_TEMPLATE)),
        ("rewrite_user.md", hash(REWRITE_TEMPLATE)),
        ("edits_user.md", hash(EDITS_TEMPLATE)),
        ("mutation_angles", hash(&angles)),
    ])
}

/// Fill `{name}` placeholders of `template` from `values` in one pass. `{{`/`}}` are literal
/// braces. A placeholder without a value, or an unmatched brace, is an error naming the
/// template (`name`) and the placeholder.
pub fn fill_template(
    name: &str,
    template: &str,
    values: &BTreeMap<&str, String>,
) -> Result<String> {
    let mut out = String::with_capacity(template.len() * 2);
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let c = rest.as_bytes()[i];
        let after = &rest[i + 1..];
        if c == b'}' {
            if let Some(r) = after.strip_prefix('}') {
                out.push('}');
                rest = r;
                continue;
            }
            return Err(Error::config(
                format!("template {name}"),
                "unmatched '}' (write '}}' for a literal brace)",
            ));
        }
        if let Some(r) = after.strip_prefix('{') {
            out.push('{');
            rest = r;
            continue;
        }
        let end = after.find('}').ok_or_else(|| {
            Error::config(
                format!("template {name}"),
                "unclosed '{' (write '{{' for a literal brace)",
            )
        })?;
        let key = &after[..end];
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        {
            return Err(Error::config(
                format!("template {name}"),
                format!("'{{{key}}}' is not a placeholder (write '{{{{' for a literal brace)"),
            ));
        }
        let value = values.get(key).ok_or_else(|| {
            Error::config(
                format!("template {name}"),
                format!("no value for placeholder '{{{key}}}'"),
            )
        })?;
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Prompt settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PromptConfig {
    /// Sampling temperature of mutator calls. Default 1.0 (reference).
    pub temperature: f32,
    /// Completion token cap of mutator calls. Default 8192 (reference).
    pub max_tokens: u32,
    /// Soft cap on the user prompt, in characters (the parent program is never cut). Default 60,000.
    pub max_prompt_chars: usize,
    /// Code characters shown per inspiration (head and tail kept). Default 4,000.
    pub inspiration_code_chars: usize,
    /// Characters of the parent's reflection shown. Default 6,000.
    pub reflection_chars: usize,
    /// Characters of a failure's stderr tail shown. Default 800.
    pub stderr_tail_chars: usize,
    /// Most recent failures shown. Default 5.
    pub max_failures: usize,
    /// Most recent previous attempts shown. Default 5.
    pub max_previous_attempts: usize,
    /// Fitness metric key. Default `combined`.
    pub fitness_metric: String,
    /// Descriptor metric keys (as in the archive). Default `["human_likeness", "coverage"]`.
    pub feature_dimensions: Vec<String>,
}

impl Default for PromptConfig {
    fn default() -> Self {
        PromptConfig {
            temperature: 1.0,
            max_tokens: 8192,
            max_prompt_chars: 60_000,
            inspiration_code_chars: 4_000,
            reflection_chars: 6_000,
            stderr_tail_chars: 800,
            max_failures: 5,
            max_previous_attempts: 5,
            fitness_metric: "combined".to_string(),
            feature_dimensions: vec!["human_likeness".to_string(), "coverage".to_string()],
        }
    }
}

impl PromptConfig {
    /// Take the fitness metric and descriptor names from an archive configuration.
    pub fn for_archive(archive: &crate::evolve::archive::ArchiveConfig) -> Self {
        PromptConfig {
            fitness_metric: archive.fitness_metric.clone(),
            feature_dimensions: archive.feature_dimensions.clone(),
            ..PromptConfig::default()
        }
    }

    /// Check the settings; the error names the key.
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && (0.0..=2.0).contains(&self.temperature)) {
            return Err(Error::config("mutation.temperature", "must be in [0, 2]"));
        }
        if self.max_tokens == 0 {
            return Err(Error::config("mutation.max_tokens", "must be at least 1"));
        }
        if self.max_prompt_chars < 1_000 {
            return Err(Error::config(
                "mutation.max_prompt_chars",
                "must be at least 1000",
            ));
        }
        if self.fitness_metric.trim().is_empty() {
            return Err(Error::config("archive.fitness_metric", "empty metric name"));
        }
        Ok(())
    }
}

/// Everything a mutation prompt is built from.
#[derive(Debug, Clone, Copy)]
pub struct MutationContext<'a> {
    /// The program to mutate (its metrics, descriptors and reflection are shown).
    pub parent: &'a Program,
    /// Top and diverse programs from [`crate::evolve::archive::Archive::inspirations`].
    pub inspirations: &'a [Inspiration],
    /// Earlier evaluated attempts (e.g. this parent's recent children), oldest first.
    pub previous_attempts: &'a [Program],
    /// Recent failed children of this parent, oldest first
    /// ([`crate::evolve::archive::Archive::recent_failures`]).
    pub failures: &'a [ChildFailure],
    /// Iterations since the run's best fitness last improved (0 = it just improved). From
    /// [`STALL_ITERATIONS`] on, the prompt asks for a structural change.
    pub stagnation: u64,
}

/// Tokens a prompt fitted by [`PromptBuilder::for_context`] leaves for the answer: a quarter of
/// the window, at least 256, at most the configured `max_tokens`.
pub fn completion_reserve(window: u32, max_tokens: u32) -> u32 {
    (window / 4).max(256).min(max_tokens)
}

/// Iterations without a new best after which the prompt asks for structural changes.
pub const STALL_ITERATIONS: u64 = 5;

/// A built mutator request.
#[derive(Debug, Clone, PartialEq)]
pub struct MutationPrompt {
    /// The request to send (role [`CallRole::Mutator`]).
    pub request: ChatRequest,
    /// The angle drawn for this round.
    pub angle: &'static MutationAngle,
    /// Characters of the user prompt.
    pub prompt_chars: usize,
    /// What was shortened or dropped to fit [`PromptConfig::max_prompt_chars`] (empty if nothing).
    pub reductions: Vec<String>,
}

/// Builds mutator requests. Cheap to clone; holds only the configuration.
#[derive(Debug, Clone)]
pub struct PromptBuilder {
    cfg: PromptConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detail {
    Full,
    DiverseWithoutCode,
    NoInspirationCode,
    NoInspirations,
    NoHistory,
    Minimal,
}

const LEVELS: [(Detail, &str); 6] = [
    (Detail::Full, ""),
    (Detail::DiverseWithoutCode, "code of diverse inspirations"),
    (Detail::NoInspirationCode, "code of top inspirations"),
    (Detail::NoInspirations, "inspirations"),
    (Detail::NoHistory, "previous attempts"),
    (Detail::Minimal, "reflection and failures shortened"),
];

fn fmt_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.4}")
    } else {
        v.to_string()
    }
}

/// Code in a ```` ```python ```` fence, lengthened when the code itself holds a run of
/// backticks (generator prompts often ask for ```` ```json ```` answers).
fn fenced_python(code: &str) -> String {
    let longest = code.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}python\n{code}\n{fence}")
}

/// Keep the head and the tail of a long program, marking the cut.
fn clip_code(code: &str, max_chars: usize) -> String {
    if code.chars().count() <= max_chars {
        return code.trim_end().to_string();
    }
    let lines: Vec<&str> = code.lines().collect();
    let (mut h, mut t) = (Vec::new(), Vec::new());
    let (mut used, budget_head) = (0usize, max_chars * 3 / 5);
    let mut i = 0;
    while i < lines.len() && used + lines[i].len() < budget_head {
        used += lines[i].len() + 1;
        h.push(lines[i]);
        i += 1;
    }
    let mut j = lines.len();
    while j > i && used + lines[j - 1].len() < max_chars {
        used += lines[j - 1].len() + 1;
        t.push(lines[j - 1]);
        j -= 1;
    }
    t.reverse();
    format!(
        "{}\n# … {} lines omitted …\n{}",
        h.join("\n"),
        j - i,
        t.join("\n")
    )
}

impl PromptBuilder {
    /// A builder; fails on an invalid configuration.
    pub fn new(cfg: PromptConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(PromptBuilder { cfg })
    }

    /// The configuration.
    pub fn config(&self) -> &PromptConfig {
        &self.cfg
    }

    /// The system message.
    pub fn system_message(&self) -> Result<String> {
        fill_template("system.md", SYSTEM_TEMPLATE, &BTreeMap::new())
    }

    /// This builder with its prompt cap lowered to what `budget`'s context window holds, and a
    /// note saying so; unchanged (and no note) when the window is unknown or large enough.
    ///
    /// The answer keeps [`completion_reserve`] tokens; the system message and the chat
    /// template's per-message overhead come off the rest, which is converted to characters with
    /// the model's measured characters-per-token ratio less 5% (the estimate must err low).
    pub fn for_context(
        &self,
        budget: Option<ContextBudget>,
    ) -> Result<(PromptBuilder, Option<String>)> {
        let Some(b) = budget else {
            return Ok((self.clone(), None));
        };
        let system = self.system_message()?.chars().count() as f64;
        let reserve = completion_reserve(b.window, self.cfg.max_tokens);
        let prompt_tokens = b.window.saturating_sub(reserve + 2 * TOKENS_PER_MESSAGE);
        let chars =
            (f64::from(prompt_tokens) * b.chars_per_token * 0.95 - system).max(0.0) as usize;
        if chars >= self.cfg.max_prompt_chars {
            return Ok((self.clone(), None));
        }
        let note = format!(
            "context window {} tokens: user prompt capped at {chars} characters \
             (~{:.1} characters/token, {reserve} tokens kept for the answer)",
            b.window, b.chars_per_token
        );
        let mut cfg = self.cfg.clone();
        cfg.max_prompt_chars = chars;
        Ok((PromptBuilder { cfg }, Some(note)))
    }

    /// A SEARCH/REPLACE diff request for `ctx`, with the angle drawn from `seed`.
    pub fn diff_request(&self, ctx: &MutationContext<'_>, seed: u64) -> Result<MutationPrompt> {
        self.build("diff_user.md", DIFF_TEMPLATE, ctx, seed)
    }

    /// A full-rewrite request for `ctx` (used when diffs keep failing), angle drawn from `seed`.
    /// Parse the answer with [`crate::evolve::mutation::extract_full_program`].
    pub fn rewrite_request(&self, ctx: &MutationContext<'_>, seed: u64) -> Result<MutationPrompt> {
        self.build("rewrite_user.md", REWRITE_TEMPLATE, ctx, seed)
    }

    /// A structured-edit request for `ctx`: the parent's editable `targets`
    /// ([`super::edits::targets_text`]) and the answer's JSON `schema`
    /// ([`super::edits::edit_schema`]), set as the request's response schema. The angle is
    /// drawn from `seed` among those a data edit can follow (axes, population, roleplay).
    pub fn edit_request(
        &self,
        ctx: &MutationContext<'_>,
        seed: u64,
        targets: &str,
        schema: serde_json::Value,
    ) -> Result<MutationPrompt> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let angle = &MUTATION_ANGLES[rng.random_range(0..3)];
        let mut prompt =
            self.build_with("edits_user.md", EDITS_TEMPLATE, ctx, angle, Some(targets))?;
        prompt.request.response_schema = Some(crate::llm::ResponseSchema {
            name: "program_edits".into(),
            schema,
        });
        Ok(prompt)
    }

    fn build(
        &self,
        name: &str,
        template: &str,
        ctx: &MutationContext<'_>,
        seed: u64,
    ) -> Result<MutationPrompt> {
        self.build_with(name, template, ctx, sample_angle(seed), None)
    }

    fn build_with(
        &self,
        name: &str,
        template: &str,
        ctx: &MutationContext<'_>,
        angle: &'static MutationAngle,
        targets: Option<&str>,
    ) -> Result<MutationPrompt> {
        let system = self.system_message()?;
        let mut reductions = Vec::new();
        let mut user = String::new();
        for (level, what) in LEVELS {
            let mut values = self.values(ctx, angle, level);
            if let Some(t) = targets {
                values.insert("targets", t.to_string());
            }
            user = fill_template(name, template, &values)?;
            if !what.is_empty() {
                reductions.push(what.to_string());
            }
            if user.chars().count() <= self.cfg.max_prompt_chars {
                break;
            }
        }
        if user.chars().count() > self.cfg.max_prompt_chars {
            reductions.push("still over max_prompt_chars (the parent program is never cut)".into());
        }
        let prompt_chars = user.chars().count();
        let mut request = ChatRequest::new(
            CallRole::Mutator,
            vec![Turn::new(Role::System, system), Turn::new(Role::User, user)],
        );
        request.temperature = Some(self.cfg.temperature);
        request.max_tokens = Some(self.cfg.max_tokens);
        Ok(MutationPrompt {
            request,
            angle,
            prompt_chars,
            reductions,
        })
    }

    fn metric_line(&self, p: &Program) -> String {
        let mut parts = vec![format!(
            "{} {}",
            self.cfg.fitness_metric,
            p.metrics
                .get(&self.cfg.fitness_metric)
                .map_or("n/a".to_string(), |v| fmt_num(*v))
        )];
        for d in &self.cfg.feature_dimensions {
            if let Some(v) = p.metrics.get(d) {
                parts.push(format!("{d} {}", fmt_num(*v)));
            }
        }
        parts.join(", ")
    }

    fn values(
        &self,
        ctx: &MutationContext<'_>,
        angle: &MutationAngle,
        level: Detail,
    ) -> BTreeMap<&'static str, String> {
        let cfg = &self.cfg;
        let p = ctx.parent;
        let parent_fitness = p.metrics.get(&cfg.fitness_metric).copied();
        let mut v = BTreeMap::new();
        v.insert("fitness_metric", cfg.fitness_metric.clone());
        v.insert(
            "fitness",
            parent_fitness.map_or("not evaluated".to_string(), fmt_num),
        );
        let coords: Vec<String> = cfg
            .feature_dimensions
            .iter()
            .map(|d| {
                format!(
                    "{d} = {}",
                    p.metrics.get(d).map_or("n/a".to_string(), |x| fmt_num(*x))
                )
            })
            .collect();
        v.insert("feature_coords", coords.join(", "));
        v.insert("feature_names", cfg.feature_dimensions.join(" and "));
        v.insert(
            "metrics",
            if p.metrics.is_empty() {
                "No metrics recorded.".to_string()
            } else {
                p.metrics
                    .iter()
                    .map(|(k, x)| format!("- {k}: {}", fmt_num(*x)))
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        );
        let minimal = level == Detail::Minimal;
        let refl_chars = if minimal {
            cfg.reflection_chars.min(1_000)
        } else {
            cfg.reflection_chars
        };
        v.insert(
            "reflection",
            match p.reflection.as_deref().map(str::trim) {
                Some(r) if !r.is_empty() => head(r, refl_chars),
                _ => "No reflection is available for this program.".to_string(),
            },
        );
        let max_fail = if minimal {
            cfg.max_failures.min(2)
        } else {
            cfg.max_failures
        };
        v.insert("failures", self.failures(ctx.failures, max_fail));
        v.insert(
            "history",
            if matches!(level, Detail::NoHistory | Detail::Minimal) {
                "(omitted to fit the prompt size)".to_string()
            } else {
                self.history(ctx.previous_attempts, parent_fitness)
            },
        );
        v.insert("inspirations", self.inspirations(ctx.inspirations, level));
        v.insert("program", fenced_python(p.code.trim_end()));
        v.insert("angle", angle.text.to_string());
        v.insert(
            "progress",
            if ctx.stagnation >= STALL_ITERATIONS {
                format!(
                    "The best score has not improved for {} iterations: prefer a structural change (program logic, how personas are chosen or expanded) over rewording.",
                    ctx.stagnation
                )
            } else {
                "The search is still finding improvements.".to_string()
            },
        );
        v
    }

    fn failures(&self, failures: &[ChildFailure], max: usize) -> String {
        if failures.is_empty() {
            return "None recorded.".to_string();
        }
        let shown = &failures[failures.len().saturating_sub(max)..];
        let mut s = String::from("Avoid repeating these:\n");
        for f in shown {
            let _ = write!(s, "\n- **{}**", f.kind.as_str());
            if let Some(stage) = &f.stage {
                let _ = write!(s, " at stage `{stage}`");
            }
            if let Some(a) = &f.angle {
                let _ = write!(s, " (angle: {a})");
            }
            if let Some(sum) = f.summary.as_deref().filter(|x| !x.trim().is_empty()) {
                let _ = write!(s, "; the attempt: {}", head(sum.trim(), 300));
            }
            let msg = head(f.message.trim(), 1_000).replace('\n', "\n  ");
            let _ = write!(s, "\n  {msg}");
            if let Some(t) = f.stderr_tail.as_deref().filter(|x| !x.trim().is_empty()) {
                let _ = write!(
                    s,
                    "\n  stderr (end):\n  ```\n  {}\n  ```",
                    tail(t.trim(), self.cfg.stderr_tail_chars).replace('\n', "\n  ")
                );
            }
        }
        s
    }

    fn history(&self, attempts: &[Program], parent_fitness: Option<f64>) -> String {
        if attempts.is_empty() {
            return "None yet.".to_string();
        }
        let shown = &attempts[attempts
            .len()
            .saturating_sub(self.cfg.max_previous_attempts)..];
        let mut s = String::new();
        for (k, a) in shown.iter().enumerate() {
            let fit = a.metrics.get(&self.cfg.fitness_metric).copied();
            let delta = match (fit, parent_fitness) {
                (Some(f), Some(p)) => format!(" ({:+.4} vs the current program)", f - p),
                _ => String::new(),
            };
            let _ = write!(
                s,
                "{}- Attempt {} ({}{}): {}{}",
                if k > 0 { "\n" } else { "" },
                k + 1,
                a.mutation.kind,
                a.mutation
                    .angle
                    .as_deref()
                    .map_or(String::new(), |x| format!(", angle {x}")),
                self.metric_line(a),
                delta
            );
            if !a.mutation.summary.trim().is_empty() {
                let _ = write!(s, "\n  Change: {}", head(a.mutation.summary.trim(), 400));
            }
        }
        s
    }

    fn inspirations(&self, ins: &[Inspiration], level: Detail) -> String {
        if ins.is_empty()
            || !matches!(
                level,
                Detail::Full | Detail::DiverseWithoutCode | Detail::NoInspirationCode
            )
        {
            return if ins.is_empty() {
                "None yet.".to_string()
            } else {
                "(omitted to fit the prompt size)".to_string()
            };
        }
        let mut s = String::new();
        let (mut top, mut div) = (0, 0);
        for (k, i) in ins.iter().enumerate() {
            let (label, n, with_code) = match i.kind {
                InspirationKind::Top => {
                    top += 1;
                    (
                        "Top program",
                        top,
                        level == Detail::Full || level == Detail::DiverseWithoutCode,
                    )
                }
                InspirationKind::Diverse => {
                    div += 1;
                    ("Diverse program", div, level == Detail::Full)
                }
            };
            let _ = write!(
                s,
                "{}#### {label} {n}: {}\n\n{}",
                if k > 0 { "\n\n" } else { "" },
                self.metric_line(&i.program),
                if i.program.mutation.summary.trim().is_empty() {
                    String::new()
                } else {
                    format!(
                        "Made by: {}\n\n",
                        head(i.program.mutation.summary.trim(), 300)
                    )
                }
            );
            if with_code {
                s.push_str(&fenced_python(&clip_code(
                    &i.program.code,
                    self.cfg.inspiration_code_chars,
                )));
            } else {
                s.push_str("(code omitted to fit the prompt size)");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_is_capped_only_by_a_window_that_needs_it() {
        let b = PromptBuilder::new(PromptConfig::default()).unwrap();
        let (same, note) = b.for_context(None).unwrap();
        assert_eq!((same.cfg.max_prompt_chars, note), (60_000, None));
        let large = ContextBudget {
            window: 128_000,
            chars_per_token: 4.0,
        };
        assert_eq!(b.for_context(Some(large)).unwrap().1, None);
        let small = ContextBudget {
            window: 4096,
            chars_per_token: 3.0,
        };
        let (capped, note) = b.for_context(Some(small)).unwrap();
        let system = b.system_message().unwrap().chars().count();
        // prompt + system + overhead in tokens, plus the answer's reserve, within the window
        let tokens = (capped.cfg.max_prompt_chars + system) as f64 / 3.0;
        assert!(tokens + 1024.0 + 12.0 <= 4096.0, "{tokens}");
        assert!(
            capped.cfg.max_prompt_chars > 6_000,
            "{}",
            capped.cfg.max_prompt_chars
        );
        assert!(note
            .unwrap()
            .starts_with("context window 4096 tokens: user prompt capped at"));
        assert_eq!(completion_reserve(4096, 8192), 1024);
        assert_eq!(completion_reserve(512, 8192), 256);
        assert_eq!(completion_reserve(128_000, 2048), 2048);
    }

    #[test]
    fn formatter_is_strict_and_single_pass() {
        let v = BTreeMap::from([("a", "{b}".to_string())]);
        assert_eq!(fill_template("t", "x {a} {{y}}", &v).unwrap(), "x {b} {y}");
        assert!(fill_template("t", "{nope}", &v)
            .unwrap_err()
            .to_string()
            .contains("nope"));
        assert!(fill_template("t", "{ a }", &v).is_err());
        assert!(fill_template("t", "a }", &v).is_err());
        assert!(fill_template("t", "{a", &v).is_err());
    }

    #[test]
    fn fences_outgrow_backticks_in_code() {
        assert_eq!(fenced_python("x = 1"), "```python\nx = 1\n```");
        assert_eq!(
            fenced_python("P = '''```json\n[]\n```'''"),
            "````python\nP = '''```json\n[]\n```'''\n````"
        );
    }

    #[test]
    fn clip_keeps_head_and_tail() {
        let code: String = (0..200).map(|i| format!("line_{i} = {i}\n")).collect();
        let c = clip_code(&code, 500);
        assert!(c.starts_with("line_0 = 0"));
        assert!(c.ends_with("line_199 = 199"));
        assert!(c.contains("lines omitted"));
        assert!(c.len() < 600);
    }

    #[test]
    fn angles_are_seeded_and_all_reachable() {
        assert_eq!(sample_angle(3).id, sample_angle(3).id);
        let ids: std::collections::BTreeSet<_> = (0..200).map(|s| sample_angle(s).id).collect();
        assert_eq!(ids.len(), 5);
    }
}
