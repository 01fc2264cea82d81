//! Stage 3 — **generate**: running untrusted generator programs in the [`sandbox`] and turning
//! their output into validated personas ([`generator`]); the `[sandbox]` settings of a run
//! ([`settings`]).
//!
//! Depends on the floor and on earlier stages.

pub mod generator;
pub mod sandbox;
pub mod settings;
