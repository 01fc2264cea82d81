//! # ppol — evolve persona policies for LLM user simulators
//!
//! Simulated users are too cooperative and all alike. ppol measures how human a simulator's
//! dialogues are and evolves *generator programs* that write persona policies making them
//! more human-like and more diverse. A run goes through these steps, each with its type:
//!
//! 1. **Traces** ([`dialogue::Dialogue`], loaded by [`traces`]): real human dialogues and simulator rollouts.
//! 2. **Fingerprints** ([`features::Fingerprint`]): 19 behavioural features of the user turns (D1–D4).
//! 3. **Human reference** ([`reference::HumanReference`]): the human fingerprint cloud and its mean/std.
//! 4. **Discriminator** ([`discriminator::Discriminator`]): a random forest giving P(human) of a dialogue.
//! 5. **Coverage** ([`coverage`]): two-sided Chamfer coverage of the human cloud and Dice D1–D4 alignment.
//! 6. **Score** ([`score::Score`]): λh·P(human) + λb·coverage for any set of simulated dialogues.
//!
#![deny(missing_docs)]

pub mod archive;
pub mod cli;
pub mod config;
pub mod coverage;
pub mod dialogue;
pub mod discriminator;
pub mod episode;
pub mod error;
pub mod evolution;
pub mod export;
pub mod features;
pub mod generator;
pub mod kmeans;
pub mod llm;
pub mod mutation;
pub mod persona;
pub mod program;
#[cfg(feature = "python")]
mod python;
pub mod reference;
pub mod report;
pub mod runlog;
pub mod sandbox;
pub mod score;
pub mod tau2;
pub mod traces;

pub use error::{Error, Result};
