//! Recording: what each iteration writes — the archive, the run log's events (a failed
//! mutation, a failed / stopped / evaluated candidate), the batch bests, the validation a new
//! best gets — and the run's first events (`run_started`, `discriminator_trained`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::evolve::archive::program::code_hash;
use crate::evolve::archive::program::Program;
use crate::evolve::context::RunContext;
use crate::evolve::evaluate::program_metrics;
use crate::evolve::evolution::bench::Evaluation;
use crate::evolve::evolution::{Candidate, Evolution, Step};
use crate::evolve::mutation::structural::axis_evidence;
use crate::evolve::mutation::{ChildFailure, FailureKind};
use crate::evolve::rundir::checkpoint::{Proposed, QueuedValidation};
use crate::evolve::rundir::runlog::{self, Event, FailureInfo};
use crate::evolve::schedule::{BatchPlan, Schedule};
use crate::fitness::score::{Scorer, Weights};
use crate::llm::CallRole;
use crate::rng::derive_seed;
use crate::simulate::episode::record::Episode;
use crate::{Error, Result};

impl Evolution {
    /// A failed mutation: recorded against the parent; the iteration is spent.
    pub(super) fn record_mutation_failure(
        &mut self,
        k: u64,
        parent: &Program,
        failure: ChildFailure,
    ) -> Result<Step> {
        let kind = failure.kind.as_str();
        let operator = failure
            .operator
            .clone()
            .unwrap_or_else(|| self.mutator.mode_name().into());
        match &failure.raw_reply {
            Some(raw) => tracing::info!(
                iteration = k,
                operator = operator.as_str(),
                "mutation failed ({kind}): {}\nraw reply (first 2 KB):\n{}",
                crate::io::printable(&failure.message),
                crate::io::printable(raw)
            ),
            None => tracing::info!(
                iteration = k,
                operator = operator.as_str(),
                "mutation failed ({kind}): {}",
                crate::io::printable(&failure.message)
            ),
        }
        self.state
            .archive
            .record_failure(&parent.id, failure.clone());
        self.log.append(Event::CandidateFailed {
            iteration: k,
            program_id: None,
            parent_id: Some(parent.id.0.clone()),
            mutation: operator,
            failure: FailureInfo {
                stage: format!("mutation:{kind}"),
                reason: failure.message.clone(),
                stderr_tail: failure.stderr_tail.clone().unwrap_or_default(),
                raw_reply: failure.raw_reply.clone().unwrap_or_default(),
                prompt_fit: failure.prompt_fit.clone().unwrap_or_default(),
            },
            requeued: false,
        })?;
        self.state.iteration = k;
        self.state.stagnation += 1;
        Ok(Step::Iteration {
            message: format!("iteration {k}: mutation failed ({kind})"),
        })
    }

    /// Record the evaluation of iteration `k`'s candidate.
    pub(super) async fn record(
        &mut self,
        k: u64,
        candidate: Candidate,
        evaluation: Evaluation,
    ) -> Result<Step> {
        let Candidate {
            mut program,
            island,
            bar,
        } = candidate;
        let parent_id = program.parent_id.as_ref().map(|p| p.0.clone());
        match evaluation {
            Evaluation::Infrastructure(why) => {
                self.state.requeues += 1;
                let requeue = self.state.requeues <= self.ctx.cfg.search.max_requeues;
                self.log.append(Event::CandidateFailed {
                    iteration: k,
                    program_id: Some(program.id.0.clone()),
                    parent_id,
                    mutation: program.mutation.kind.as_str().into(),
                    failure: FailureInfo {
                        stage: "infrastructure".into(),
                        reason: why.clone(),
                        ..FailureInfo::default()
                    },
                    requeued: requeue,
                })?;
                if !requeue {
                    return Ok(Step::Stop(format!("infrastructure: {why}")));
                }
                // not an iteration: the same candidate is evaluated again next
                self.state.generation.push_front(Proposed::Candidate {
                    iteration: k,
                    program,
                    island,
                    bar,
                });
                Ok(Step::Requeued {
                    backoff: Duration::from_millis(500 * 2u64.pow(self.state.requeues.min(6))),
                })
            }
            Evaluation::Failed(f) => {
                if let Some(pid) = &program.parent_id {
                    let mut cf = ChildFailure::new(FailureKind::Sandbox, f.reason.clone());
                    cf.stage = Some(f.stage.clone());
                    cf.stderr_tail = (!f.stderr_tail.is_empty()).then(|| f.stderr_tail.clone());
                    cf.angle = program.mutation.angle.clone();
                    self.state.archive.record_failure(pid, cf);
                }
                self.log.append(Event::CandidateFailed {
                    iteration: k,
                    program_id: Some(program.id.0.clone()),
                    parent_id,
                    mutation: program.mutation.kind.as_str().into(),
                    failure: f.clone(),
                    requeued: false,
                })?;
                if self.state.archive.is_empty() {
                    // nothing to evolve from: the run stops, and says why in its log
                    let cost = self.cost();
                    self.log.append(Event::RunStopped {
                        reason: format!("seed_failed: {}: {}", f.stage, f.reason),
                        iterations: self.state.iteration,
                        best_program_id: None,
                        best_metrics: None,
                        best_validation: None,
                        cost,
                        mutations: BTreeMap::new(),
                        new_bests: BTreeMap::new(),
                        episodes: None,
                    })?;
                    return Err(Error::Run {
                        path: self.ctx.dir.path().to_path_buf(),
                        message: format!(
                            "the seed program failed ({}): {}\n{}",
                            f.stage, f.reason, f.stderr_tail
                        ),
                    });
                }
                self.state.requeues = 0;
                self.state.iteration = k;
                self.state.stagnation += 1;
                Ok(Step::Iteration {
                    message: format!("iteration {k}: candidate failed ({})", f.stage),
                })
            }
            Evaluation::Stopped {
                scored: s,
                stage_score,
                bar,
            } => {
                self.state.requeues = 0;
                let key = s.tasks.join(",");
                self.state
                    .stage_scores
                    .entry(key)
                    .or_default()
                    .push(stage_score);
                // an evaluation without a new elite, for early stopping
                self.state.stagnation += 1;
                self.log.append(Event::CandidateStopped {
                    iteration: k,
                    program_id: program.id.0.clone(),
                    parent_id,
                    second_parent_id: program.second_parent_id.as_ref().map(|p| p.0.clone()),
                    island,
                    mutation: program.mutation.kind.as_str().into(),
                    mutation_summary: program.mutation.summary.clone(),
                    epoch: s.plan.epoch,
                    batch_in_epoch: s.plan.batch_in_epoch,
                    tasks: s.tasks.clone(),
                    stage: 1,
                    stage_score,
                    bar,
                    metrics: s.metrics.clone(),
                    personas: s.personas,
                    code_hash: program.code_hash.clone(),
                    code: program.code.clone(),
                    seconds: s.seconds,
                    cost: self.cost(),
                })?;
                self.state.iteration = k;
                let islands = self.ctx.cfg.archive.num_islands;
                if islands > 0 {
                    self.state.archive.maybe_migrate(k / islands as u64);
                }
                Ok(Step::Iteration {
                    message: format!(
                        "iteration {k}: stopped after stage 1 (score {stage_score:.3} < bar {bar:.3})"
                    ),
                })
            }
            Evaluation::Scored(s) => {
                self.state.requeues = 0;
                if let Some(score) = s.stage_score {
                    self.state
                        .stage_scores
                        .entry(s.tasks.join(","))
                        .or_default()
                        .push(score);
                }
                program.metrics = program_metrics(&s.metrics);
                // what its personas say about each axis, for its structural children
                program.metrics.extend(axis_evidence(&s.personas));
                program.reflection = Some(s.reflection.clone());
                self.state
                    .parents
                    .insert(program.id.0.clone(), parent_id.clone());
                let added = self.state.archive.add(program.clone(), island)?;
                self.state.stagnation = if added.new_elite {
                    0
                } else {
                    self.state.stagnation + 1
                };
                self.log.append(Event::CandidateEvaluated {
                    iteration: k,
                    program_id: program.id.0.clone(),
                    parent_id,
                    second_parent_id: program.second_parent_id.as_ref().map(|p| p.0.clone()),
                    island,
                    mutation: program.mutation.kind.as_str().into(),
                    mutation_summary: program.mutation.summary.clone(),
                    prompt_fit: program.mutation.prompt_fit.clone(),
                    epoch: s.plan.epoch,
                    batch_in_epoch: s.plan.batch_in_epoch,
                    tasks: s.tasks.clone(),
                    metrics: s.metrics.clone(),
                    new_elite: added.new_elite,
                    new_best: added.new_best,
                    stage_score: s.stage_score,
                    bar: s.bar,
                    personas: s.personas,
                    reflection: s.reflection,
                    code_hash: program.code_hash.clone(),
                    code: program.code.clone(),
                    seconds: s.seconds,
                    cost: self.cost(),
                })?;
                let final_n = s.plan.n_personas == self.bench.schedule.n_personas;
                self.keep_scored(
                    &program,
                    s.plan.weights(),
                    s.metrics.coverage,
                    final_n.then(|| batch_key(&s.tasks, &s.plan)),
                    &s.fingerprints,
                )?;
                let batch_best = final_n && {
                    let key = batch_key(&s.tasks, &s.plan);
                    let beats = self
                        .state
                        .batch_best
                        .get(&key)
                        .is_none_or(|b| s.metrics.combined > *b);
                    if beats {
                        self.state.batch_best.insert(key, s.metrics.combined);
                    }
                    beats
                };
                if added.new_best || batch_best {
                    let bar = self.validation_bar();
                    if self.ctx.cfg.search.generation_size() > 1 {
                        self.state.validations.push_back(QueuedValidation {
                            iteration: k,
                            generation: self.state.generations,
                            program: program.clone(),
                            train: s.metrics.clone(),
                            bar,
                        });
                        self.spawn_validations();
                    } else {
                        let outcome = self
                            .bench
                            .validate_in_stages(program.id.as_str(), &program.code, bar)
                            .await;
                        self.apply_validation(k, &program, &s.metrics, outcome, bar)?;
                    }
                }
                self.state.iteration = k;
                let islands = self.ctx.cfg.archive.num_islands;
                if islands > 0 {
                    self.state.archive.maybe_migrate(k / islands as u64);
                }
                let m = &s.metrics;
                Ok(Step::Iteration {
                    message: format!(
                        "iteration {k}: combined {:.3} (HL {:.3}, cov {:.3}){}",
                        m.combined,
                        m.human_likeness,
                        m.coverage,
                        if added.new_best { " new best" } else { "" }
                    ),
                })
            }
        }
    }
}

/// The key of a train batch: its tasks, persona count and human-likeness weight.
fn batch_key(tasks: &[String], plan: &BatchPlan) -> String {
    format!(
        "{}|{}|{:.4}",
        tasks.join(","),
        plan.n_personas,
        plan.lambda_h
    )
}

/// The first event of a run: configuration, seeds, models and the hashes of every embedded text.
pub(super) fn run_started(ctx: &RunContext) -> Event {
    let cfg = &ctx.cfg;
    let mut seeds = BTreeMap::from(
        ["archive", "baseline", "val_split", "human_holdout"]
            .map(|part| (part.to_string(), derive_seed(cfg.search.seed, part))),
    );
    seeds.insert("root".to_string(), cfg.search.seed);
    let models: BTreeMap<String, String> = CallRole::ALL
        .iter()
        .map(|r| {
            (
                r.as_str().to_string(),
                ctx.client
                    .as_ref()
                    .map_or("scripted (offline)".into(), |c| c.describe_role(*r)),
            )
        })
        .collect();
    let mut hashes: BTreeMap<String, String> = crate::evolve::mutation::template_hashes()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    // every file the sandbox gives a program (harness, ppol_llm, ppol_personas, the ppol package)
    for (path, text) in crate::generate::sandbox::SUPPORT_FILES {
        hashes.insert((*path).into(), code_hash(text));
    }
    hashes.insert(
        "feature_banks".into(),
        code_hash(cfg.run.feature_set.banks().1),
    );
    hashes.insert("seed_program".into(), code_hash(&ctx.seed_code));
    Event::RunStarted {
        schema_version: runlog::SCHEMA_VERSION,
        ppol_version: env!("CARGO_PKG_VERSION").into(),
        name: cfg.run.name.clone(),
        config: serde_json::to_value(cfg).unwrap_or(Value::Null),
        seeds,
        offline: cfg.offline(),
        models,
        hashes,
        feature_set: cfg.run.feature_set.name().into(),
        domain: ctx.world.domain(),
        world: ctx.world.label(),
        splits: BTreeMap::from([
            ("train".into(), ctx.train.clone()),
            ("val".into(), ctx.val.clone()),
            ("test".into(), ctx.test.clone()),
        ]),
        human: json!({"sources": ctx.human_source, "n_run": ctx.humans.len(), "n_heldout": ctx.humans_heldout.len()}),
    }
}

/// The discriminator's training summary, with the baseline's score on the train tasks.
pub(super) fn discriminator_trained(
    scorer: &Scorer,
    baseline: &[Episode],
    train: &[String],
    schedule: &Schedule,
) -> Event {
    let train: std::collections::BTreeSet<&String> = train.iter().collect();
    let base_train: Vec<Episode> = baseline
        .iter()
        .filter(|e| train.contains(&e.task_id))
        .cloned()
        .collect();
    let weights = Weights::new(schedule.lambda_h, schedule.lambda_b);
    let training = &scorer.discriminator.training;
    Event::DiscriminatorTrained {
        n_human: training.n_human,
        n_baseline: training.n_simulator,
        grouped_auc: training.grouped_auc.as_ref().map(|a| a.mean),
        top_features: training.top_features.clone(),
        baseline: crate::evolve::evaluate::score_episodes(scorer, &base_train, weights, 0),
    }
}
