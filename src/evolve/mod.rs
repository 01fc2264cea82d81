//! Stage 4 — **evolve**: the evolutionary search over generator programs. The run's
//! configuration ([`config`], [`schedule`]), programs and their archive ([`program`],
//! [`archive`]), how children are made ([`mutation`]), how a candidate is evaluated
//! ([`evaluate`]), the loop with its run directory ([`run`], [`runlog`]) and the held-out
//! comparison of `ppol eval` ([`compare`]).
//!
//! Depends on the floor and on every earlier stage.

pub mod archive;
pub mod compare;
pub mod config;
pub mod evaluate;
pub mod mutation;
pub mod program;
pub mod run;
pub mod runlog;
pub mod schedule;
