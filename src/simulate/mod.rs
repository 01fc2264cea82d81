//! Stage 2 — **simulate**: episodes of a user simulator talking to an agent that acts on a τ²
//! tool environment ([`tau2`], [`episode`]), and their export as training data ([`export`]);
//! the `[episodes]` settings of a run ([`settings`]).
//!
//! Depends on the floor and on [`crate::fitness`].

pub mod batch;
pub mod episode;
pub mod export;
pub mod settings;
pub mod tau2;
pub mod world;
