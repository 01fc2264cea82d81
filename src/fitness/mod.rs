//! Stage 1 — **fitness**: what makes a dialogue human-like. Traces are loaded
//! ([`traces`]), fingerprinted ([`features`]), summarised as the human reference
//! ([`reference`](mod@reference)), covered by a persona set ([`coverage`], with [`kmeans`] centroids),
//! separated from simulator dialogues by a [`discriminator`], and scored in one place
//! ([`score::Scorer`]; with the [`population`] objective, by a classifier two-sample test per
//! candidate); the `[fitness]` settings of a run ([`settings`]). The [`audit`] checks
//! human-likeness independently of the run's discriminator: fresh classifiers, cross-validated
//! by task, with intervals (and an optional LLM judge).
//!
//! Depends only on the shared floor (`dialogue`, `persona`, `error`, `io`, `seed`).

pub mod audit;
pub mod coverage;
pub mod discriminator;
pub mod features;
pub mod geometry;
pub mod kmeans;
pub mod population;
pub mod reference;
pub mod score;
pub mod settings;
pub mod traces;
