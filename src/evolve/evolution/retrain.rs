//! Retraining the discriminator during a run (`[fitness] retrain_every = K`), so the search
//! cannot settle on one forest's quirks: every K iterations (at the first generation boundary
//! after them, so runs stay the same for any parallelism), the forest is fitted again on the
//! humans against the baseline *and* the dialogues of the archive's best programs (their
//! `fitness.retrain_elites` best, by fitness), and everything scored with the old forest is
//! rescored with the new one so scores stay comparable: every archived program (cells, best
//! and elite archive rebuilt, [`Archive::rescore`](crate::evolve::archive::Archive::rescore)),
//! the batch bests (from every candidate scored so far), and the run's best (train and
//! validation). The cascade's stage-1 references start afresh (no bar until a batch is scored
//! again) and so does the validations' bar.
//!
//! What a rescoring needs is kept as the run goes: each scored candidate's fingerprints
//! (`retrain/fp-<id>.json`) and those of the run's best's validation (`retrain/val-<id>.json`),
//! written when recorded and named in the checkpoint ([`Retraining`]), so a run killed at any
//! point and resumed rescores from the same files and reaches the same state. Each retrained
//! forest is saved as `retrain/discriminator-<n>.json`; a resumed run loads the one its
//! checkpoint names (checked by its SHA-256). A retraining that was done but not committed is
//! done again by the resumed run, from the same data, with the same result. The per-axis
//! evidence a program carries for its structural children keeps the P(human) it was scored
//! with.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::evolve::archive::program::Program;
use crate::evolve::evaluate::{program_metrics, rank};
use crate::evolve::evolution::bench::final_weights;
use crate::evolve::evolution::Evolution;
use crate::evolve::rundir::checkpoint::Retraining;
use crate::evolve::rundir::runlog::{EvalMetrics, Event};
use crate::fitness::discriminator::Discriminator;
use crate::fitness::features::FEATURE_NAMES;
use crate::fitness::score::{human_rows, Scorer, Weights};
use crate::{Error, Result};

/// The directory of a run's retraining files.
const DIR: &str = "retrain";

/// What rescoring one evaluation needs: its fingerprints, the weights it was combined with,
/// and its train batch's key when it was scored at the final persona count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Kept {
    /// The program.
    pub(super) program_id: String,
    /// The weights of its combined score before ranking (the curriculum's for a train batch).
    pub(super) lambda_h: f64,
    /// The coverage weight.
    pub(super) lambda_b: f64,
    /// Its coverage (which a retraining leaves as it is).
    pub(super) coverage: f64,
    /// Its batch's key, for the batch bests (train evaluations at the final N).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) batch_key: Option<String>,
    /// Task and fingerprint of each scored episode.
    pub(super) rows: Vec<(String, Vec<f64>)>,
}

impl Kept {
    /// Mean P(human) of its episodes under `d` (pooled, as the scorer computes it).
    fn human_likeness(&self, d: &Discriminator) -> f64 {
        let rows: Vec<Vec<f64>> = self.rows.iter().map(|(_, f)| f.clone()).collect();
        if rows.is_empty() {
            return 0.0;
        }
        let p = d.p_human(&rows);
        p.iter().sum::<f64>() / p.len() as f64
    }
}

fn path(ctx_dir: &crate::evolve::rundir::RunDir, name: &str) -> PathBuf {
    ctx_dir.join(DIR).join(name)
}

fn write_kept(dir: &crate::evolve::rundir::RunDir, name: &str, kept: &Kept) -> Result<()> {
    let d = dir.join(DIR);
    std::fs::create_dir_all(&d).map_err(|e| Error::io("creating directory", &d, e))?;
    crate::io::write_atomic(&d.join(name), crate::io::to_json(kept).as_bytes())
}

fn read_kept(dir: &crate::evolve::rundir::RunDir, name: &str) -> Result<Kept> {
    let p = path(dir, name);
    let text = crate::io::read_to_string(&p)?;
    serde_json::from_str(&text).map_err(|e| {
        Error::parse(
            &p,
            "$",
            format!("not a kept evaluation of this run ({e}): the run cannot be rescored"),
        )
    })
}

impl Evolution {
    /// Whether this run retrains its discriminator.
    pub(super) fn retrains(&self) -> bool {
        self.ctx.cfg.fitness.retrain_every > 0
    }

    /// Keep what rescoring a scored candidate needs (a run that retrains only).
    pub(super) fn keep_scored(
        &mut self,
        program: &Program,
        plan_weights: Weights,
        coverage: f64,
        batch_key: Option<String>,
        rows: &[(String, Vec<f64>)],
    ) -> Result<()> {
        if !self.retrains() {
            return Ok(());
        }
        let id = program.id.0.clone();
        let kept = Kept {
            program_id: id.clone(),
            lambda_h: plan_weights.lambda_h,
            lambda_b: plan_weights.lambda_b,
            coverage,
            batch_key,
            rows: rows.to_vec(),
        };
        write_kept(&self.ctx.dir, &format!("fp-{id}.json"), &kept)?;
        self.state.retraining.scored.push(id);
        Ok(())
    }

    /// Keep the fingerprints of the validation that made `program_id` the run's best.
    pub(super) fn keep_best_validation(
        &mut self,
        program_id: &str,
        metrics: &EvalMetrics,
        rows: &[(String, Vec<f64>)],
    ) -> Result<()> {
        if !self.retrains() {
            return Ok(());
        }
        let kept = Kept {
            program_id: program_id.to_string(),
            lambda_h: metrics.lambda_h,
            lambda_b: metrics.lambda_b,
            coverage: metrics.coverage,
            batch_key: None,
            rows: rows.to_vec(),
        };
        write_kept(&self.ctx.dir, &format!("val-{program_id}.json"), &kept)?;
        self.state.retraining.best_validation = Some(program_id.to_string());
        Ok(())
    }

    /// The discriminator a resumed run's checkpoint names, when it retrained (None: the run's
    /// first, `discriminator.json`).
    pub(super) fn retrained_discriminator(
        dir: &crate::evolve::rundir::RunDir,
        r: &Retraining,
    ) -> Result<Option<Discriminator>> {
        if r.count == 0 {
            return Ok(None);
        }
        let p = path(dir, &format!("discriminator-{}.json", r.count));
        let text = crate::io::read_to_string(&p)?;
        let sha = crate::io::sha256_hex(text.as_bytes());
        if sha != r.sha256 {
            return Err(Error::Run {
                path: dir.path().to_path_buf(),
                message: format!(
                    "{} is not the discriminator the checkpoint names (SHA-256 {sha}, expected \
                     {}): the run cannot be resumed as it was",
                    p.display(),
                    r.sha256
                ),
            });
        }
        Discriminator::from_json(&text, &p).map(Some)
    }

    /// Retrain when K iterations have passed since the last time (at a generation boundary:
    /// the caller proposes the next generation after this). `Ok(false)`: a stop request came
    /// while the queued validations were applied first.
    pub(super) async fn maybe_retrain(&mut self) -> Result<bool> {
        let every = self.ctx.cfg.fitness.retrain_every;
        if every == 0
            || self.state.archive.is_empty()
            || self.state.iteration < self.state.retraining.at_iteration + every
        {
            return Ok(true);
        }
        // validations scored by the old forest are applied before it goes
        if !self.apply_validations(None).await? {
            return Ok(false);
        }
        self.retrain()?;
        let n = self.state.retraining.count as usize;
        if self.control.pause_point("retrained") == Some(n) {
            crate::evolve::context::pause_for_kill(&format!("retrained:{n}")).await;
        }
        Ok(true)
    }

    /// Retrain on the humans against the baseline and the elites' dialogues, then rescore.
    fn retrain(&mut self) -> Result<()> {
        let cfg = &self.ctx.cfg;
        let dir = self.ctx.dir.clone();
        // the elites: the archive's best programs (migrant copies count once)
        let mut elites: Vec<String> = Vec::new();
        for p in self.state.archive.elite_archive() {
            let root = p.migrated_from.as_ref().unwrap_or(&p.id).0.clone();
            if !elites.contains(&root) {
                elites.push(root);
            }
            if elites.len() >= cfg.fitness.retrain_elites {
                break;
            }
        }
        let scored: BTreeMap<String, Kept> = self
            .state
            .retraining
            .scored
            .iter()
            .map(|id| Ok((id.clone(), read_kept(&dir, &format!("fp-{id}.json"))?)))
            .collect::<Result<_>>()?;
        let mut sim: Vec<Vec<f64>> = Vec::new();
        let mut sim_groups: Vec<String> = Vec::new();
        for (task, f) in self.baseline_rows.iter() {
            sim.push(f.clone());
            sim_groups.push(task.clone());
        }
        for e in &elites {
            let kept = scored.get(e).ok_or_else(|| Error::Run {
                path: dir.path().to_path_buf(),
                message: format!("elite {e} has no kept fingerprints: the run cannot retrain"),
            })?;
            for (task, f) in &kept.rows {
                sim.push(f.clone());
                sim_groups.push(task.clone());
            }
        }
        let old = self.bench.scorer.clone();
        let (human, human_groups) = human_rows(&old.reference);
        let names: Vec<String> = FEATURE_NAMES.iter().map(|s| s.to_string()).collect();
        let disc = Discriminator::train(
            &human,
            &human_groups,
            &sim,
            &sim_groups,
            &names,
            old.reference.feature_set.name(),
            &cfg.fitness.discriminator,
            cfg.fitness.folds,
        )?;
        let count = self.state.retraining.count + 1;
        let file = format!("{DIR}/discriminator-{count}.json");
        let json = disc.to_json();
        let d = dir.join(DIR);
        std::fs::create_dir_all(&d).map_err(|e| Error::io("creating directory", &d, e))?;
        crate::io::write_atomic(&dir.join(&file), json.as_bytes())?;

        // rescore everything the old forest scored
        let select_by = cfg.fitness.select_by;
        let fixed = final_weights(cfg);
        let train_metrics = |kept: &Kept, before: &EvalMetrics| -> EvalMetrics {
            let hl = kept.human_likeness(&disc);
            let plan = Weights::new(kept.lambda_h, kept.lambda_b);
            let mut m = EvalMetrics {
                combined: plan.combine(hl, kept.coverage),
                coverage: kept.coverage,
                combined_ramp: None,
                human_likeness: hl,
                lambda_h: plan.lambda_h,
                lambda_b: plan.lambda_b,
                ..before.clone()
            };
            rank(&mut m, select_by, fixed);
            m
        };
        let best_before = self.best_in_archive();
        self.state.archive.rescore(|p| {
            let root = p.migrated_from.as_ref().unwrap_or(&p.id).0.as_str();
            let kept = scored.get(root)?;
            let before = EvalMetrics {
                success_rate: p.metric("success_rate").unwrap_or(0.0),
                ..EvalMetrics::default()
            };
            Some(program_metrics(&train_metrics(kept, &before)))
        })?;
        let mut batch_best: BTreeMap<String, f64> = BTreeMap::new();
        for kept in self
            .state
            .retraining
            .scored
            .iter()
            .filter_map(|id| scored.get(id))
        {
            let Some(key) = &kept.batch_key else { continue };
            let m = train_metrics(kept, &EvalMetrics::default());
            let b = batch_best.entry(key.clone()).or_insert(f64::NEG_INFINITY);
            if m.combined > *b {
                *b = m.combined;
            }
        }
        self.state.batch_best = batch_best;
        self.state.stage_scores.clear();
        self.state.best_stage_score = None;
        let validation_before = self.best_validation_score();
        if let Some(best) = self.state.best.as_mut() {
            if let Some(kept) = scored.get(&best.program_id) {
                best.train = train_metrics(kept, &best.train);
            }
            let val = self.state.retraining.best_validation.as_deref();
            if let (Some(v), Some(id)) = (best.validation.as_mut(), val) {
                if id == best.program_id {
                    let kept = read_kept(&dir, &format!("val-{id}.json"))?;
                    let hl = kept.human_likeness(&disc);
                    v.human_likeness = hl;
                    v.combined = Weights::new(v.lambda_h, v.lambda_b).combine(hl, v.coverage);
                }
            }
            dir.write_best_program(best)?;
        }
        let validation_after = self.best_validation_score();
        let training = &disc.training;
        let event = Event::DiscriminatorRetrained {
            iteration: self.state.iteration,
            count,
            n_human: training.n_human,
            n_simulator: training.n_simulator,
            elites: elites.clone(),
            grouped_auc: training.grouped_auc.as_ref().map(|a| a.mean),
            top_features: training.top_features.clone(),
            best_before,
            best_after: self.best_in_archive(),
            validation_before,
            validation_after,
            rescored: self.state.archive.len(),
            file,
        };
        self.log.append(event)?;
        self.state.retraining.count = count;
        self.state.retraining.at_iteration = self.state.iteration;
        self.state.retraining.sha256 = crate::io::sha256_hex(json.as_bytes());
        self.bench.scorer = Arc::new(Scorer {
            reference: old.reference.clone(),
            cloud: old.cloud.clone(),
            discriminator: disc,
            population: old.population.clone(),
        });
        self.say(format!(
            "discriminator retrained ({count}): {} elites' dialogues added; archive rescored",
            elites.len()
        ));
        Ok(())
    }

    /// The validation score of the run's best, when it has one.
    fn best_validation_score(&self) -> Option<f64> {
        let best = self.state.best.as_ref()?;
        best.validation.as_ref().map(|v| v.combined)
    }

    /// The archive's best program and its fitness.
    fn best_in_archive(&self) -> Option<(String, f64)> {
        let b = self.state.archive.best()?;
        Some((b.id.0.clone(), self.state.archive.fitness(b)?))
    }
}
