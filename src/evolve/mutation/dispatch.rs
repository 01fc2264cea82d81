//! Which operator makes the next child, and making it: the one place the evolution loop asks
//! for a child program.
//!
//! [`Mutator::propose`] first [chooses](Mutator::choose) an [`Operator`] for the parent, then
//! applies it:
//!
//! - with an LLM: a **structured** edit of the parent's literal data, answered as JSON
//!   constrained to a schema of the parent's own targets ([`super::edits`]), where the
//!   mutator's endpoint constrains answers (`[mutation] edit_format`, learned per endpoint),
//!   else a SEARCH/REPLACE **diff** of the parent; a full **rewrite** once the parent's
//!   children failed `mutation.rewrite_after_failures` (K) times in a row; and a **structural**
//!   edit (as offline) once K more failed, so a weak mutator never stalls a run — a child that
//!   is evaluated resets the chain to diffs;
//! - offline: a **crossover** with an inspiration (probability `mutation.crossover_rate`, when
//!   an inspiration other than the parent exists), else a **structural** edit of the program's
//!   literal data. A child whose code the archive already holds would waste its evaluation: a
//!   crossover that rebuilds an archived program is replaced by a structural edit, and a
//!   structural edit is retried with other seeds (up to three in all).
//!
//! The answer is a [`Child`] or a [`ChildFailure`] (a diff that did not apply, no program in a
//! rewrite, a syntax error, a failed mutator call): failures are data, recorded against the
//! parent by the caller and shown to the mutator next time. Only a broken machine (a blocking
//! task that could not be joined) is an `Err`.

use std::sync::Arc;

use crate::evolve::archive::program::{
    code_hash, raw_reply, MutationInfo, MutationKind, Program, ProgramId,
};
use crate::evolve::archive::{Archive, ArchiveConfig, Inspiration};
use crate::evolve::config::{EditFormat, MutationMode, MutationSection};
use crate::evolve::mutation::diff::{apply_diff, check_python_syntax, extract_full_program};
use crate::evolve::mutation::prompt::{MutationContext, PromptBuilder, PromptConfig};
use crate::evolve::mutation::structural::{
    crossover, structural_mutate_with, AxisVocab, MechanicPhrases, StructuralOptions,
    AXIS_EFFECT_PREFIX,
};
use crate::evolve::mutation::{
    edits, failure_from_diff_error, head, ChildFailure, FailureKind, PYTHON,
};
use crate::llm::{CallRole, ChatModel};
use crate::rng::mix;
use crate::{Error, Result};

/// Previous children of the parent shown to the LLM mutator.
const PREVIOUS_ATTEMPTS: usize = 4;

/// Offline edits tried before a child that duplicates an archived program is accepted.
const OFFLINE_ATTEMPTS: u64 = 3;

/// A child program, ready to be evaluated.
#[derive(Debug, Clone, PartialEq)]
pub struct Child {
    /// Its source.
    pub code: String,
    /// How it was made.
    pub mutation: MutationInfo,
    /// The other parent of a crossover.
    pub second_parent: Option<ProgramId>,
}

/// A mutation operator, as chosen for one parent.
#[derive(Debug, Clone, PartialEq)]
pub enum Operator {
    /// LLM edits of the parent's literal data, as schema-constrained JSON.
    Structured,
    /// An LLM SEARCH/REPLACE diff of the parent.
    Diff,
    /// An LLM full rewrite of the parent.
    Rewrite,
    /// An offline edit of the parent's literal data.
    Structural,
    /// An offline crossover of the parent with another program.
    Crossover {
        /// The other parent.
        other: Box<Program>,
    },
}

/// How children are made in a run.
pub struct Mutator {
    /// The LLM that writes diffs and rewrites (None: structural mutation).
    model: Option<Arc<dyn ChatModel>>,
    builder: PromptBuilder,
    vocabulary: Vec<AxisVocab>,
    structural: StructuralOptions,
    crossover_rate: f64,
    rewrite_after_failures: usize,
    edit_format: EditFormat,
    /// Structured answers that were not JSON although the endpoint was asked to constrain
    /// them: from [`UNFOLLOWED_SCHEMA_LIMIT`] on, `auto` goes back to text diffs.
    unfollowed_schema: std::sync::atomic::AtomicU32,
}

/// Structured answers that ignored their schema after which `edit_format = "auto"` stops
/// asking for structured edits (an endpoint that accepts `response_format` and ignores it).
pub const UNFOLLOWED_SCHEMA_LIMIT: u32 = 2;

impl Mutator {
    /// The mutator of a run: `mode` resolved against the LLM (`auto` is LLM diffs with a model,
    /// structural without). `llm` without a model is a configuration error, as are prompt
    /// settings out of range (errors name the `[mutation]` or `[archive]` key).
    pub fn new(
        cfg: &MutationSection,
        archive: &ArchiveConfig,
        model: Option<Arc<dyn ChatModel>>,
    ) -> Result<Self> {
        let model = if uses_llm(cfg.mode, model.is_some())? {
            model
        } else {
            None
        };
        Ok(Mutator {
            model,
            builder: PromptBuilder::new(prompt_config(cfg, archive))?,
            vocabulary: axis_vocabulary(),
            structural: offline_ops(),
            crossover_rate: cfg.crossover_rate,
            rewrite_after_failures: cfg.rewrite_after_failures,
            edit_format: cfg.edit_format,
            unfollowed_schema: std::sync::atomic::AtomicU32::new(0),
        })
    }

    /// Whether the next LLM edit is structured: `structured` always, `diff` never, `auto`
    /// unless the mutator's endpoint is known not to constrain answers (configured, or
    /// learned from a refusal) or its answers ignored the schema
    /// [`UNFOLLOWED_SCHEMA_LIMIT`] times.
    pub fn structured_edits(&self) -> bool {
        match self.edit_format {
            EditFormat::Structured => true,
            EditFormat::Diff => false,
            EditFormat::Auto => {
                let Some(model) = &self.model else {
                    return false;
                };
                model.schema_support(CallRole::Mutator) != Some(false)
                    && self
                        .unfollowed_schema
                        .load(std::sync::atomic::Ordering::Relaxed)
                        < UNFOLLOWED_SCHEMA_LIMIT
            }
        }
    }

    /// The checks of [`Mutator::new`] without building it, for a run that will have a model
    /// or not (`with_model`): lets a run refuse bad settings before it creates anything.
    pub fn check(cfg: &MutationSection, archive: &ArchiveConfig, with_model: bool) -> Result<()> {
        uses_llm(cfg.mode, with_model)?;
        prompt_config(cfg, archive).validate()
    }

    /// Whether children come from the LLM.
    pub fn uses_llm(&self) -> bool {
        self.model.is_some()
    }

    /// The name a failed mutation is logged under: `structured` or `diff` with an LLM, else
    /// `structural`.
    pub fn mode_name(&self) -> &'static str {
        if !self.uses_llm() {
            "structural"
        } else if self.structured_edits() {
            "structured"
        } else {
            "diff"
        }
    }

    /// The operator for `parent` (deterministic given the archive and `seed`).
    pub fn choose(
        &self,
        archive: &Archive,
        parent: &Program,
        inspirations: &[Inspiration],
        seed: u64,
    ) -> Operator {
        if self.uses_llm() {
            let failed = archive.consecutive_failures(&parent.id);
            let k = self.rewrite_after_failures;
            return if failed < k {
                if self.structured_edits() {
                    Operator::Structured
                } else {
                    Operator::Diff
                }
            } else if failed < k + k.max(1) {
                Operator::Rewrite
            } else {
                Operator::Structural
            };
        }
        let other = inspirations.iter().find(|i| i.program.id != parent.id);
        match other {
            Some(o) if unit(mix(seed, 7)) < self.crossover_rate => Operator::Crossover {
                other: Box::new(o.program.clone()),
            },
            _ => Operator::Structural,
        }
    }

    /// Make a child of `parent` (`stagnation`: evaluations since the best last improved, shown
    /// to the LLM; `seed`: the iteration's seed).
    pub async fn propose(
        &self,
        archive: &Archive,
        parent: &Program,
        inspirations: &[Inspiration],
        stagnation: u64,
        seed: u64,
    ) -> Result<std::result::Result<Child, ChildFailure>> {
        match self.choose(archive, parent, inspirations, seed) {
            Operator::Structured => {
                self.structured_child(archive, parent, inspirations, stagnation, seed)
                    .await
            }
            op @ (Operator::Diff | Operator::Rewrite) => Ok(self
                .llm_child(
                    if op == Operator::Rewrite {
                        LlmOp::Rewrite
                    } else {
                        LlmOp::Diff
                    },
                    archive,
                    parent,
                    inspirations,
                    stagnation,
                    seed,
                )
                .await),
            Operator::Structural => self.structural_child(archive, parent, seed).await,
            Operator::Crossover { other } => {
                let (code, other_code) = (parent.code.clone(), other.code.clone());
                let child = offline_child(MutationKind::Crossover, Some(other.id), move || {
                    crossover(&code, &other_code, seed)
                })
                .await?;
                match child {
                    // a crossover that rebuilds a program already evaluated (common: the
                    // inspiration is the parent's own parent) would waste the evaluation
                    Ok(c) if archive.find_code(&code_hash(&c.code)).is_some() => {
                        self.structural_child(archive, parent, mix(seed, 0x0064_7570))
                            .await
                    }
                    other => Ok(other),
                }
            }
        }
    }

    /// An offline structural edit of `parent` whose code the archive does not hold yet (up to
    /// [`OFFLINE_ATTEMPTS`] seeds; the last child is kept even if it is a duplicate).
    async fn structural_child(
        &self,
        archive: &Archive,
        parent: &Program,
        seed: u64,
    ) -> Result<std::result::Result<Child, ChildFailure>> {
        let mut last = None;
        for attempt in 0..OFFLINE_ATTEMPTS {
            let s = if attempt == 0 {
                seed
            } else {
                mix(seed, attempt)
            };
            let (mut opts, vocabulary, code) = (
                self.structural.clone(),
                self.vocabulary.clone(),
                parent.code.clone(),
            );
            opts.axis_evidence = parent
                .metrics
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(AXIS_EFFECT_PREFIX)?.to_string(), *v)))
                .collect();
            let child = offline_child(MutationKind::Structural, None, move || {
                structural_mutate_with(&opts, &code, &vocabulary, s)
            })
            .await?;
            match &child {
                Ok(c) if archive.find_code(&code_hash(&c.code)).is_some() => last = Some(child),
                _ => return Ok(child),
            }
        }
        Ok(last.expect("at least one attempt"))
    }

    /// A structured edit of `parent`, or a diff when the parent has no editable literal data.
    async fn structured_child(
        &self,
        archive: &Archive,
        parent: &Program,
        inspirations: &[Inspiration],
        stagnation: u64,
        seed: u64,
    ) -> Result<std::result::Result<Child, ChildFailure>> {
        let code = parent.code.clone();
        let targets = tokio::task::spawn_blocking(move || {
            edits::edit_targets(PYTHON, &code, EDIT_SCRIPT_TIMEOUT)
        })
        .await
        .map_err(|e| Error::Sandbox(format!("mutation task failed: {e}")))?;
        let op = match targets {
            Ok(t) if !t.is_empty() => LlmOp::Structured(t),
            Ok(_) => LlmOp::Diff,
            Err(e) => {
                tracing::warn!(parent = %parent.id, "no editable data found ({e}); a text diff instead");
                LlmOp::Diff
            }
        };
        Ok(self
            .llm_child(op, archive, parent, inspirations, stagnation, seed)
            .await)
    }

    async fn llm_child(
        &self,
        op: LlmOp,
        archive: &Archive,
        parent: &Program,
        inspirations: &[Inspiration],
        stagnation: u64,
        seed: u64,
    ) -> std::result::Result<Child, ChildFailure> {
        let model = self
            .model
            .as_ref()
            .expect("an LLM operator implies a model");
        let previous: Vec<Program> = archive
            .recent_children(&parent.id, PREVIOUS_ATTEMPTS)
            .into_iter()
            .cloned()
            .collect();
        let failures = archive.recent_failures(&parent.id);
        let ctx = MutationContext {
            parent,
            inspirations,
            previous_attempts: &previous,
            failures: &failures,
            stagnation,
        };
        let prompt_failed =
            |e: Error| ChildFailure::new(FailureKind::NoProgram, format!("prompt: {e}"));
        let (builder, window_note) = self
            .builder
            .for_context(model.context_budget(CallRole::Mutator))
            .map_err(prompt_failed)?;
        let prompt = match &op {
            LlmOp::Rewrite => builder.rewrite_request(&ctx, seed),
            LlmOp::Diff => builder.diff_request(&ctx, seed),
            LlmOp::Structured(targets) => match edits::edit_schema(targets) {
                Some(schema) => {
                    builder.edit_request(&ctx, seed, &edits::targets_text(targets), schema)
                }
                None => builder.diff_request(&ctx, seed),
            },
        }
        .map_err(prompt_failed)?;
        let prompt_fit = window_note.map(|note| {
            if prompt.reductions.is_empty() {
                format!("{note}; nothing had to be left out")
            } else {
                format!("{note}; left out: {}", prompt.reductions.join(", "))
            }
        });
        if let Some(fit) = &prompt_fit {
            tracing::info!(parent = %parent.id, "mutator prompt: {fit}");
        }
        let structured = prompt.request.response_schema.is_some();
        let angle = prompt.angle.id.to_string();
        let (operator, kind) = match (&op, structured) {
            (LlmOp::Rewrite, _) => ("rewrite", MutationKind::Rewrite),
            (_, true) => ("structured", MutationKind::Structured),
            (_, false) => ("diff", MutationKind::Diff),
        };
        let with_angle = |mut f: ChildFailure| {
            f.angle = Some(angle.clone());
            f.operator = Some(operator.into());
            f.prompt_fit = prompt_fit.clone();
            f
        };
        let response = model.chat(&prompt.request).await.map_err(|e| {
            with_angle(ChildFailure::new(
                FailureKind::MutatorCall,
                format!("mutator call failed: {e}"),
            ))
        })?;
        let answer = response.message.content;
        let with_reply = |f: ChildFailure| ChildFailure {
            raw_reply: Some(raw_reply(&answer)),
            ..with_angle(f)
        };
        let (code, summary) = if structured {
            let constrained = !matches!(
                response.schema_mode,
                None | Some(crate::llm::SchemaMode::Unconstrained)
            );
            let cut = response.finish_reason.as_deref() == Some("length");
            // off the async runtime: an answer is up to `llm.max_response_bytes` (8 MiB)
            let text = answer.clone();
            let parsed = tokio::task::spawn_blocking(move || edits::parse_answer(&text))
                .await
                .unwrap_or_else(|e| Err(format!("reading the answer failed: {e}")));
            let value = match parsed {
                Ok(v) => v,
                Err(why) => {
                    // an answer cut off by the completion cap says nothing of the schema
                    if constrained && !cut {
                        let n = self
                            .unfollowed_schema
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                            + 1;
                        if n == UNFOLLOWED_SCHEMA_LIMIT && self.edit_format == EditFormat::Auto {
                            tracing::warn!(
                                "the mutator's endpoint took the answer schema but answered {n} \
                                 times outside it; text diffs from now on"
                            );
                        }
                    }
                    let how = if cut {
                        "(cut off at the completion cap, max_tokens, before one edit was whole)"
                    } else if constrained {
                        "although the endpoint was asked to constrain it"
                    } else {
                        "(the endpoint does not constrain answers)"
                    };
                    return Err(with_reply(ChildFailure::new(
                        FailureKind::Unparsable,
                        format!("the structured answer is unusable {how}: {why}"),
                    )));
                }
            };
            let (parent_code, edits_value) = (parent.code.clone(), value["edits"].clone());
            let applied = tokio::task::spawn_blocking(move || {
                edits::apply_edits(PYTHON, &parent_code, &edits_value, EDIT_SCRIPT_TIMEOUT)
            })
            .await
            .map_err(|e| {
                with_reply(ChildFailure::new(
                    FailureKind::DiffNotApplied,
                    format!("mutation task failed: {e}"),
                ))
            })?
            .map_err(|why| with_reply(ChildFailure::new(FailureKind::DiffNotApplied, why)))?;
            let idea = value["idea"].as_str().unwrap_or("").trim();
            let mut summary = if idea.is_empty() {
                applied.done.join("; ")
            } else {
                format!("{}: {}", head(idea, 160), applied.done.join("; "))
            };
            if !applied.skipped.is_empty() {
                summary.push_str(&format!(" (skipped: {})", applied.skipped.join("; ")));
            }
            if value["cut_off"] == serde_json::Value::Bool(true) {
                summary.push_str(" (answer cut off at max_tokens: the unfinished edit left out)");
            }
            (applied.code, summary.chars().take(400).collect())
        } else {
            let code = if op == LlmOp::Rewrite {
                extract_full_program(&answer)
            } else {
                apply_diff(&parent.code, &answer).map(|a| a.code)
            }
            .map_err(|e| with_reply(failure_from_diff_error(&e)))?;
            match check_python_syntax(&code) {
                Ok(Ok(())) => {}
                Ok(Err(msg)) => {
                    return Err(with_reply(ChildFailure::new(FailureKind::Syntax, msg)))
                }
                Err(e) => {
                    return Err(with_reply(ChildFailure::new(
                        FailureKind::Syntax,
                        format!("could not check syntax: {e}"),
                    )))
                }
            }
            (code, summary_line(&answer))
        };
        let mut mutation = MutationInfo::new(kind, summary);
        mutation.angle = Some(angle);
        mutation.prompt_fit = prompt_fit;
        Ok(Child {
            code,
            mutation,
            second_parent: None,
        })
    }
}

/// Which LLM operator makes a child.
#[derive(Debug, Clone, PartialEq)]
enum LlmOp {
    /// Structured edits of these targets.
    Structured(Vec<edits::EditTarget>),
    Diff,
    Rewrite,
}

/// Wall-clock limit of the edit script (listing targets, applying edits).
const EDIT_SCRIPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Whether `mode` makes children with the LLM, given whether there is one.
fn uses_llm(mode: MutationMode, has_model: bool) -> Result<bool> {
    match (mode, has_model) {
        (MutationMode::Structural, _) | (MutationMode::Auto, false) => Ok(false),
        (MutationMode::Auto | MutationMode::Llm, true) => Ok(true),
        (MutationMode::Llm, false) => Err(Error::config(
            "mutation.mode",
            "'llm' needs an [llm] section or --llm",
        )),
    }
}

fn prompt_config(cfg: &MutationSection, archive: &ArchiveConfig) -> PromptConfig {
    PromptConfig {
        temperature: cfg.temperature,
        // the run resolves the mutator role's cap into `cfg` (`Evolution::start`)
        max_tokens: cfg.completion_cap(None),
        ..PromptConfig::for_archive(archive)
    }
}

/// Run an offline operator (a Python child process) off the async threads.
async fn offline_child(
    kind: MutationKind,
    second_parent: Option<ProgramId>,
    op: impl FnOnce() -> std::result::Result<(String, String), String> + Send + 'static,
) -> Result<std::result::Result<Child, ChildFailure>> {
    let made = tokio::task::spawn_blocking(op)
        .await
        .map_err(|e| Error::Sandbox(format!("mutation task failed: {e}")))?;
    Ok(match made {
        Ok((code, summary)) => Ok(Child {
            code,
            mutation: MutationInfo::new(kind, summary),
            second_parent,
        }),
        Err(msg) => Err(ChildFailure {
            operator: Some(kind.as_str().into()),
            ..ChildFailure::new(FailureKind::Syntax, msg)
        }),
    })
}

/// A draw in [0, 1) from a seed (4 decimal places).
fn unit(seed: u64) -> f64 {
    (seed % 10_000) as f64 / 10_000.0
}

/// The mutator's stated intent: the first line of its answer that is not a marker or a fence.
fn summary_line(answer: &str) -> String {
    answer
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("<<<<<<<") && !l.starts_with("```"))
        .unwrap_or("")
        .chars()
        .take(200)
        .collect()
}

/// The behaviour axes the scripted simulator realises, as the structural operator's vocabulary.
fn axis_vocabulary() -> Vec<AxisVocab> {
    crate::simulate::episode::scripted::KNOWN_AXES
        .iter()
        .map(|(name, def)| AxisVocab {
            name: name.to_string(),
            definition: def.to_string(),
            on: format!("Clearly show this in how you write: {def}."),
            off: format!("Do not behave like this: {def}."),
        })
        .collect()
}

/// Operators of offline structural mutation. The scripted user plays the persona text's
/// mechanics (see `fitness/mechanics.toml`), so edits of the instruction sentences —
/// vocabulary mechanics added, intensities tuned, fragments moved — are what changes its
/// behaviour; axis edits and number perturbations change which sentences personas get.
///
/// The weights follow what the children of 5 airline runs × 30 iterations did to their
/// parent's score (`ppol bench evolve`, before this tuning): dropping an axis helped (mean
/// +6 pp, 6 of 8 children better), adding one hurt (−12 pp), perturbing the golden-ratio steps
/// hurt (−6 pp). `steer-axis` uses the parent's own per-axis evidence; in those runs the
/// placements of one axis (terse) decided most of the gap (P(human) +0.4 to +0.55 with it on).
fn offline_ops() -> StructuralOptions {
    StructuralOptions {
        op_weights: [
            ("add-axis", 0.3),
            ("drop-axis", 2.5),
            ("edit-axis", 0.5),
            ("perturb", 1.0),
            ("fragment", 1.5),
            ("add-mechanic", 3.0),
            ("tune-mechanic", 2.0),
            ("steer-axis", 3.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        mechanics: MechanicPhrases::vocabulary(),
        ..StructuralOptions::default()
    }
}
