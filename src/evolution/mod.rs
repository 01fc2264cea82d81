//! The evolution loop (`ppol evolve`): programs are mutated, run in the sandbox to write personas
//! for a batch of train tasks, the personas are played in episodes, and the episodes are scored
//! against the human traces; the archive keeps the elites.

pub mod compare;
pub mod evaluate;
pub mod run;
pub mod schedule;
