//! Stage 4 — **evolve**: the evolutionary search over generator programs.
//!
//! - What a run is: its configuration ([`config`], [`schedule`]), what it is built from
//!   ([`context`]) and its directory ([`rundir`], with the run log [`runlog`]).
//! - What it searches: programs ([`program`]) in an islands × MAP-Elites archive
//!   ([`archive`]), children made by the mutation operators and their dispatch ([`mutation`]).
//! - How a candidate is judged: evaluation on a batch of tasks ([`evaluate`]) and the
//!   reflection fed back to the mutator ([`reflection`]).
//! - The loop: [`evolution::Evolution`], a state machine with `step()` and `commit()`, and the
//!   entry points of `ppol evolve` / `ppol resume` ([`run`]).
//! - `ppol eval`: the held-out comparison ([`eval`], table built by [`compare`]).
//!
//! Depends on the floor and on every earlier stage.

pub mod archive;
pub mod compare;
pub mod config;
pub mod config_text;
pub mod context;
pub mod eval;
pub mod evaluate;
pub mod evolution;
pub mod ledger;
pub mod mutation;
pub mod program;
pub mod reflection;
pub mod run;
pub mod rundir;
pub mod runlog;
pub mod schedule;
pub mod summary;
