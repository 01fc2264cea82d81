//! Proposing a generation: the re-queued programs and the seed first, else children of
//! parents sampled from the archive (half of them from the run's validated best), made by the
//! [`Mutator`](crate::evolve::mutation::Mutator) concurrently.

use crate::evolve::archive::program::{code_hash, Program, ProgramId};
use crate::evolve::evolution::Evolution;
use crate::evolve::rundir::checkpoint::Proposed;
use crate::rng::mix;
use crate::Result;

/// What a generation's proposal needs before its mutation runs.
enum Pick {
    /// Ready to evaluate (the seed, or a re-queued program).
    Ready(Proposed),
    /// A child of `parent` to make.
    Child {
        iteration: u64,
        island: usize,
        parent: Program,
        inspirations: Vec<crate::evolve::archive::Inspiration>,
        bar: Option<f64>,
    },
}

/// Share (in 1/10,000) of children bred from the best-validated program rather than from the
/// archive's draw.
const VALIDATED_PARENT_SHARE: u64 = 5_000;

impl Evolution {
    /// Propose the next generation (after retraining the discriminator when it is due): the
    /// re-queued programs and the seed first, else
    /// `search.generation_size` children (fewer when the run has fewer iterations left), their
    /// parents sampled in iteration order from the archive as it stands, their mutations made
    /// concurrently.
    pub(super) async fn fill_generation(&mut self) -> Result<bool> {
        if !self.maybe_retrain().await? {
            return Ok(false);
        }
        if !self.apply_validations(Some(self.state.generations)).await? {
            return Ok(false);
        }
        self.state.generations += 1;
        let k0 = self.state.iteration + 1;
        let left = self
            .ctx
            .cfg
            .search
            .iterations
            .saturating_sub(self.state.iteration)
            .max(1);
        let size = (self.ctx.cfg.search.generation_size() as u64).min(left);
        let state = &mut self.state;
        let mut picks = Vec::new();
        for k in k0..k0 + size {
            if let Some(program) = state.pending.pop_front() {
                let island = program.island;
                picks.push(Pick::Ready(Proposed::Candidate {
                    iteration: k,
                    program,
                    island,
                    bar: None,
                }));
                continue;
            }
            if state.archive.is_empty() {
                // the seed is evaluated alone: nothing can be bred before it is in the archive
                if !picks.is_empty() {
                    break;
                }
                let code = &self.ctx.seed_code;
                let mut program =
                    Program::seed(ProgramId::derive(k, &code_hash(code)), code.clone());
                program.iteration_found = k;
                picks.push(Pick::Ready(Proposed::Candidate {
                    iteration: k,
                    program,
                    island: 0,
                    bar: None,
                }));
                break;
            }
            let island = state.archive.next_island();
            let sampled = state.archive.sample_parent(island)?.program;
            let seed = mix(self.ctx.cfg.search.seed, k);
            // Train scores are batch-noisy; the program that validates best is the reliable
            // improvement, so half of the children are bred from it (on every island's batch).
            let validated = state
                .best
                .as_ref()
                .filter(|b| b.validation.is_some())
                .filter(|_| (mix(seed, 0x7661_6c69) % 10_000) < VALIDATED_PARENT_SHARE)
                .and_then(|b| state.archive.get(&ProgramId(b.program_id.clone())).cloned());
            let parent = validated.unwrap_or(sampled);
            let inspirations = state.archive.inspirations(&parent, island)?;
            let bar = self.bench.cascade_bar(state, k);
            picks.push(Pick::Child {
                iteration: k,
                island,
                parent,
                inspirations,
                bar,
            });
        }
        let (archive, mutator, stagnation) = (&state.archive, &self.mutator, state.stagnation);
        let root = self.ctx.cfg.search.seed;
        let label = format!("generation {}: proposals", state.generations);
        let report = self
            .control
            .batch_reporter(k0 - 1, self.ctx.cfg.search.iterations, false);
        let made: Vec<Result<Proposed>> = crate::simulate::batch::join_reporting(
            &label,
            "made",
            picks
                .into_iter()
                .map(|pick| async move {
                    match pick {
                        Pick::Ready(p) => Ok(p),
                        Pick::Child {
                            iteration,
                            island,
                            parent,
                            inspirations,
                            bar,
                        } => {
                            let seed = mix(root, iteration);
                            let made = mutator
                                .propose(archive, &parent, &inspirations, stagnation, seed)
                                .await?;
                            Ok(match made {
                                Ok(child) => {
                                    let id = ProgramId::derive(iteration, &code_hash(&child.code));
                                    let mut program = Program::child(
                                        &parent,
                                        id,
                                        child.code,
                                        iteration,
                                        child.mutation,
                                    );
                                    program.second_parent_id = child.second_parent;
                                    program.island = island;
                                    Proposed::Candidate {
                                        iteration,
                                        program,
                                        island,
                                        bar,
                                    }
                                }
                                Err(failure) => Proposed::MutationFailed {
                                    iteration,
                                    parent,
                                    failure,
                                },
                            })
                        }
                    }
                })
                .collect(),
            Some(&report),
        )
        .await;
        for p in made {
            self.state.generation.push_back(p?);
        }
        Ok(true)
    }
}
