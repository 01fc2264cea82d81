//! # ppol — evolve persona policies for LLM user simulators
//!
//! Simulated users are too cooperative and all alike. ppol measures how human a simulator's
//! dialogues are and evolves *generator programs* that write persona policies making them
//! more human-like and more diverse. The crate is laid out as the data path, one folder per
//! stage; each stage uses only the stages before it and the shared floor
//! (see `ARCHITECTURE.md`, enforced by `tests/architecture.rs`):
//!
//! 1. [`fitness`] — traces ([`dialogue::Dialogue`], loaded by [`fitness::traces`]) →
//!    fingerprints ([`fitness::features::Fingerprint`], 19 behavioural features D1–D4) → the
//!    human reference ([`fitness::reference::HumanReference`]) → the discriminator
//!    ([`fitness::discriminator::Discriminator`], P(human)) → Chamfer coverage and Dice
//!    ([`fitness::coverage`]) → one score ([`fitness::score::Scorer`]).
//! 2. [`simulate`] — episodes: a user simulator (scripted or LLM) with a persona talks to an
//!    agent acting on a τ² environment ([`simulate::episode`], [`simulate::tau2`]).
//! 3. [`generate`] — generator programs run in the [`generate::sandbox`] and write personas.
//! 4. [`evolve`] — the search: archive, mutation, candidate evaluation, the run directory.
//! 5. [`report`] — the self-contained HTML report, read from a run directory only.
//! 6. [`front`] — the operations layer ([`front::ops`]) and its two adapters, the command line
//!    and the Python binding.
//!
//! The floor every stage may use: [`error`], [`io`], [`child`] (processes that die with ppol), [`limits`] (the bound of every count and
//! size), [`hub`] (`hf://` paths), [`rng`],
//! [`shipped`], [`dialogue`], [`persona`] and [`llm`] (one client for every OpenAI-compatible
//! endpoint).
#![deny(missing_docs)]

pub mod child;
pub mod dialogue;
pub mod error;
pub mod hub;
pub mod io;
pub mod limits;
pub mod llm;
pub mod persona;
pub mod rng;
pub mod shipped;

pub mod evolve;
pub mod fitness;
pub mod front;
pub mod generate;
pub mod report;
pub mod simulate;

pub mod testing;

pub use error::{Error, Result};
