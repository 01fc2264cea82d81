//! Extraction of the best program's sections as plain data: its lineage (with counts of
//! candidates by mutation kind and of failures by stage), sample personas, sample dialogues,
//! and the mechanics the offline user played.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::files::RunFiles;
use super::log_view::{Evaluated, Failed, LogView};
use super::{N_SAMPLE_DIALOGUES, N_SAMPLE_PERSONAS};
use crate::dialogue::Role;
use crate::evolve::rundir::summary::{lineage_from_log, RunOverview};
use crate::simulate::episode::record::{Episode, EpisodeStatus};
use crate::simulate::episode::STOP_TOKENS;

/// Unplayed sentences listed in the mechanics section.
const N_UNPLAYED: usize = 15;

/// A program of the lineage, with the evaluation that created it.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// Program id.
    pub program_id: String,
    /// Its first `candidate_evaluated` (None when the log has none).
    pub evaluated: Option<StepEvaluation>,
}

/// The evaluation that created a program.
#[derive(Debug, Clone, Serialize)]
pub struct StepEvaluation {
    /// Mutation kind.
    pub mutation: String,
    /// Iteration.
    pub iteration: u64,
    /// Combined train score.
    pub combined: f64,
    /// Human-likeness.
    pub human_likeness: f64,
    /// Coverage.
    pub coverage: f64,
    /// The mutation's summary.
    pub summary: String,
}

/// Candidates of one mutation kind.
#[derive(Debug, Clone, Serialize)]
pub struct KindCount {
    /// Mutation kind.
    pub mutation: String,
    /// Evaluated.
    pub evaluated: usize,
    /// Failed.
    pub failed: usize,
    /// New bests.
    pub new_best: usize,
}

/// Failures at one stage, with the latest.
#[derive(Debug, Clone, Serialize)]
pub struct StageCount {
    /// Stage.
    pub stage: String,
    /// Failures.
    pub count: usize,
    /// Of which requeued.
    pub requeued: usize,
    /// Iteration of the latest.
    pub iteration: u64,
    /// Its program.
    pub program_id: Option<String>,
    /// Its reason.
    pub reason: String,
    /// How its mutator prompt was cut to fit.
    pub prompt_fit: String,
    /// The model's raw reply.
    pub raw_reply: String,
}

/// The lineage section.
#[derive(Debug, Clone, Serialize)]
pub struct Lineage {
    /// From the seed to the best.
    pub chain: Vec<Step>,
    /// Steps.
    pub n_steps: usize,
    /// Where the chain comes from.
    pub source: String,
    /// Whether `best/program.json` is missing (the chain is the log's parent ids).
    pub reconstructed: bool,
    /// `best/program.py`.
    pub source_code: Option<String>,
    /// Its lines.
    pub source_lines: usize,
    /// Candidates by mutation kind.
    pub kinds: Vec<KindCount>,
    /// Failures by stage.
    pub stages: Vec<StageCount>,
}

impl Lineage {
    pub(crate) fn build(files: &RunFiles, view: &LogView, overview: &RunOverview) -> Lineage {
        let best_id = overview.best.as_ref().map(|b| b.program_id.as_str());
        // the first evaluation of each program is the one that created it
        let mut first: HashMap<&str, &Evaluated> = HashMap::new();
        for e in &view.evaluated {
            first.entry(e.program_id).or_insert(e);
        }
        let (chain, source): (Vec<String>, &str) = match &files.best_program {
            Some(b) if !b.lineage.is_empty() => (b.lineage.clone(), "best/program.json"),
            _ => (
                lineage_from_log(&files.log, best_id),
                "parent ids in log.jsonl",
            ),
        };
        let chain: Vec<Step> = chain
            .into_iter()
            .map(|id| Step {
                evaluated: first.get(id.as_str()).map(|e| StepEvaluation {
                    mutation: e.mutation.to_string(),
                    iteration: e.iteration,
                    combined: e.metrics.combined,
                    human_likeness: e.metrics.human_likeness,
                    coverage: e.metrics.coverage,
                    summary: e.summary.to_string(),
                }),
                program_id: id,
            })
            .collect();
        // counts by mutation kind and failures by stage
        let mut kinds: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
        for e in &view.evaluated {
            let k = kinds.entry(e.mutation).or_default();
            k[0] += 1;
            k[2] += usize::from(e.new_best);
        }
        for f in &view.failed {
            kinds.entry(f.mutation).or_default()[1] += 1;
        }
        let mut stages: BTreeMap<&str, (usize, usize, &Failed)> = BTreeMap::new();
        for f in &view.failed {
            let s = stages.entry(f.stage).or_insert((0, 0, f));
            s.0 += 1;
            s.1 += usize::from(f.requeued);
            s.2 = f;
        }
        Lineage {
            n_steps: chain.len(),
            chain,
            source: source.into(),
            reconstructed: files.best_program.is_none(),
            source_lines: files
                .best_source
                .as_deref()
                .map_or(0, |s| s.lines().count()),
            source_code: files.best_source.clone(),
            kinds: kinds
                .into_iter()
                .map(|(k, [evaluated, failed, new_best])| KindCount {
                    mutation: k.into(),
                    evaluated,
                    failed,
                    new_best,
                })
                .collect(),
            stages: stages
                .into_iter()
                .map(|(stage, (count, requeued, last))| StageCount {
                    stage: stage.into(),
                    count,
                    requeued,
                    iteration: last.iteration,
                    program_id: last.program_id.map(str::to_string),
                    reason: last.reason.into(),
                    prompt_fit: last.prompt_fit.into(),
                    raw_reply: last.raw_reply.into(),
                })
                .collect(),
        }
    }
}

/// One persona card.
#[derive(Debug, Clone, Serialize)]
pub struct PersonaCard {
    /// Persona id.
    pub persona_id: String,
    /// Its task (`–` when none).
    pub task_id: String,
    /// Its active axes.
    pub axes: Vec<String>,
    /// Its one-line description.
    pub description: String,
    /// Its text.
    pub text: String,
    /// Why the generator wrote it.
    pub reasoning: Option<String>,
}

/// The sample personas.
#[derive(Debug, Clone, Serialize)]
pub struct Personas {
    /// Why there are none.
    pub notice: Option<String>,
    /// Shown.
    pub n_shown: usize,
    /// Written.
    pub n_total: usize,
    /// The first [`N_SAMPLE_PERSONAS`].
    pub cards: Vec<PersonaCard>,
}

impl Personas {
    pub(crate) fn build(files: &RunFiles) -> Personas {
        let none = |why: &str| Personas {
            notice: Some(why.into()),
            n_shown: 0,
            n_total: 0,
            cards: Vec::new(),
        };
        match &files.best_personas {
            None => none("best/personas.jsonl not found."),
            Some(ps) if ps.is_empty() => none("best/personas.jsonl is empty."),
            Some(ps) => Personas {
                notice: None,
                n_shown: ps.len().min(N_SAMPLE_PERSONAS),
                n_total: ps.len(),
                cards: ps
                    .iter()
                    .take(N_SAMPLE_PERSONAS)
                    .map(|p| PersonaCard {
                        persona_id: p.persona_id.clone(),
                        task_id: p.task_id.as_deref().unwrap_or("–").into(),
                        axes: p.active_axes().iter().map(|a| a.to_string()).collect(),
                        description: p.description.clone(),
                        text: p.text.clone(),
                        reasoning: p.reasoning.clone(),
                    })
                    .collect(),
            },
        }
    }
}

/// One piece of a dialogue.
#[derive(Debug, Clone, Serialize)]
pub struct TurnItem {
    /// `message` (user or assistant), `tool_call`, or `aside` (tool or system message).
    pub kind: &'static str,
    /// Role.
    pub role: &'static str,
    /// Tool name (`tool_call`), tool call id (`aside`).
    pub name: Option<String>,
    /// Text, or the call's arguments.
    pub text: String,
}

/// One sample dialogue.
#[derive(Debug, Clone, Serialize)]
pub struct DialogueView {
    /// Episode id.
    pub id: String,
    /// Task.
    pub task_id: String,
    /// Persona.
    pub persona_id: String,
    /// How it ended.
    pub termination: String,
    /// Reward.
    pub reward: Option<f64>,
    /// Error.
    pub error: Option<String>,
    /// Its turns.
    pub turns: Vec<TurnItem>,
}

/// The sample dialogues.
#[derive(Debug, Clone, Serialize)]
pub struct Dialogues {
    /// Why there are none.
    pub notice: Option<String>,
    /// Episodes.
    pub n_episodes: usize,
    /// Successful ones.
    pub n_success: usize,
    /// Whether any episode carries a reward (none: the world gives none, "no reward").
    pub rewarded: bool,
    /// Failed ones.
    pub n_failed: usize,
    /// The sample.
    pub dialogues: Vec<DialogueView>,
}

/// Pick up to `n` episodes that ran to an end, one per persona first, then any.
fn sample_episodes(eps: &[Episode], n: usize) -> Vec<&Episode> {
    let mut out: Vec<&Episode> = Vec::new();
    for e in eps.iter().filter(|e| e.status == EpisodeStatus::Ok) {
        if out.len() < n && !out.iter().any(|o| o.persona_id == e.persona_id) {
            out.push(e);
        }
    }
    for e in eps {
        if out.len() >= n {
            break;
        }
        if !out.iter().any(|o| std::ptr::eq(*o, e)) {
            out.push(e);
        }
    }
    out
}

fn dialogue(e: &Episode) -> DialogueView {
    let mut turns = Vec::new();
    for t in &e.conversation {
        match t.role {
            Role::User | Role::Assistant => {
                // the protocol's stop markers end the episode (its termination says how);
                // they are not part of what the user said
                let text = without_stop_markers(&t.content);
                if !text.is_empty() || (t.content.is_empty() && t.tool_calls.is_empty()) {
                    turns.push(TurnItem {
                        kind: "message",
                        role: t.role.as_str(),
                        name: None,
                        text,
                    });
                }
                for c in &t.tool_calls {
                    turns.push(TurnItem {
                        kind: "tool_call",
                        role: t.role.as_str(),
                        name: Some(c.name.clone()),
                        text: serde_json::to_string_pretty(&c.arguments).unwrap_or_default(),
                    });
                }
            }
            Role::Tool | Role::System => turns.push(TurnItem {
                kind: "aside",
                role: t.role.as_str(),
                name: t.tool_call_id.clone(),
                text: t.content.clone(),
            }),
        }
    }
    DialogueView {
        id: e.id.clone(),
        task_id: e.task_id.clone(),
        persona_id: e.persona_id.clone(),
        termination: serde_json::to_value(e.termination)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        reward: e.reward,
        error: e.error.clone(),
        turns,
    }
}

/// A message as shown: τ²'s stop markers (`###STOP###`, `###TRANSFER###`,
/// `###OUT-OF-SCOPE###`) removed.
fn without_stop_markers(text: &str) -> String {
    let mut out = text.to_string();
    for (marker, _) in STOP_TOKENS {
        out = out.replace(marker, "");
    }
    if out.len() == text.len() {
        out
    } else {
        out.trim_end().to_string()
    }
}

impl Dialogues {
    pub(crate) fn build(files: &RunFiles) -> Dialogues {
        let none = |why: &str| Dialogues {
            notice: Some(why.into()),
            n_episodes: 0,
            n_success: 0,
            rewarded: false,
            n_failed: 0,
            dialogues: Vec::new(),
        };
        match &files.best_episodes {
            None => none("best/episodes.jsonl not found."),
            Some(eps) if eps.is_empty() => none("best/episodes.jsonl is empty."),
            Some(eps) => Dialogues {
                notice: None,
                n_episodes: eps.len(),
                n_success: eps.iter().filter(|e| e.success()).count(),
                rewarded: eps.iter().any(|e| e.reward.is_some()),
                n_failed: eps
                    .iter()
                    .filter(|e| e.status == EpisodeStatus::Failed)
                    .count(),
                dialogues: sample_episodes(eps, N_SAMPLE_DIALOGUES)
                    .into_iter()
                    .map(dialogue)
                    .collect(),
            },
        }
    }
}

/// A mechanic the offline user played.
#[derive(Debug, Clone, Serialize)]
pub struct Played {
    /// Mechanic id.
    pub id: String,
    /// Its dimension.
    pub dimension: String,
    /// What the user does.
    pub summary: String,
    /// Episodes that played it.
    pub episodes: usize,
    /// Their percentage of the episodes.
    pub share: f64,
}

/// A persona sentence the offline user could not play.
#[derive(Debug, Clone, Serialize)]
pub struct Unplayed {
    /// The sentence.
    pub sentence: String,
    /// Episodes whose persona had it.
    pub episodes: usize,
}

/// What the offline user played.
#[derive(Debug, Clone, Serialize)]
pub struct Mechanics {
    /// Why there is nothing to show.
    pub notice: Option<String>,
    /// Episodes that record how their persona was played.
    pub n_plays: usize,
    /// Driven by the persona's text.
    pub n_text: usize,
    /// Driven by the axis placement.
    pub n_axes: usize,
    /// With no persona.
    pub n_unplaced: usize,
    /// Mechanics played, most played first.
    pub played: Vec<Played>,
    /// Mechanics of the vocabulary never played.
    pub never: Vec<String>,
    /// Distinct unplayed sentences.
    pub n_unplayed: usize,
    /// Their occurrences.
    pub n_unplayed_occurrences: usize,
    /// Shown.
    pub n_unplayed_shown: usize,
    /// The most frequent.
    pub unplayed: Vec<Unplayed>,
}

impl Mechanics {
    pub(crate) fn build(files: &RunFiles) -> Mechanics {
        use crate::simulate::episode::scripted::{vocabulary, PlaySource};
        let none = |why: &str| Mechanics {
            notice: Some(why.into()),
            n_plays: 0,
            n_text: 0,
            n_axes: 0,
            n_unplaced: 0,
            played: Vec::new(),
            never: Vec::new(),
            n_unplayed: 0,
            n_unplayed_occurrences: 0,
            n_unplayed_shown: 0,
            unplayed: Vec::new(),
        };
        let Some(eps) = &files.best_episodes else {
            return none("best/episodes.jsonl not found.");
        };
        let plays: Vec<_> = eps.iter().filter_map(|e| e.persona_play.as_ref()).collect();
        if plays.is_empty() {
            return none(
                "No episode records how its persona was played: the episodes were played by an LLM (or written by an older ppol). Mechanics apply to the offline scripted user only.",
            );
        }
        let n_text = plays
            .iter()
            .filter(|p| p.source == PlaySource::Text)
            .count();
        let n_axes = plays
            .iter()
            .filter(|p| p.source == PlaySource::Axes)
            .count();
        // episodes per mechanic (each counted once per episode)
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &plays {
            for id in p.mechanic_ids() {
                *per.entry(id).or_default() += 1;
            }
        }
        let vocab = vocabulary();
        let mut rows: Vec<(&str, usize)> = per.iter().map(|(k, v)| (*k, *v)).collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let played = rows
            .iter()
            .map(|(id, n)| {
                let info = vocab.get(id);
                Played {
                    id: id.to_string(),
                    dimension: info.map_or("", |i| i.dimension.as_str()).into(),
                    summary: info.map_or("", |i| i.summary.as_str()).into(),
                    episodes: *n,
                    share: 100.0 * *n as f64 / plays.len() as f64,
                }
            })
            .collect();
        let never = vocab
            .mechanics()
            .filter(|m| !m.framing && !per.contains_key(m.id.as_str()))
            .map(|m| m.id.clone())
            .collect();
        // unplayed sentences, most frequent first
        let mut unplayed: HashMap<&str, usize> = HashMap::new();
        for p in &plays {
            for u in &p.unplayed {
                *unplayed.entry(u.as_str()).or_default() += 1;
            }
        }
        let mut un: Vec<(&str, usize)> = unplayed.into_iter().collect();
        un.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        Mechanics {
            notice: None,
            n_plays: plays.len(),
            n_text,
            n_axes,
            n_unplaced: plays.len() - n_text - n_axes,
            played,
            never,
            n_unplayed: un.len(),
            n_unplayed_occurrences: un.iter().map(|u| u.1).sum(),
            n_unplayed_shown: un.len().min(N_UNPLAYED),
            unplayed: un
                .iter()
                .take(N_UNPLAYED)
                .map(|(s, n)| Unplayed {
                    sentence: s.to_string(),
                    episodes: *n,
                })
                .collect(),
        }
    }
}
