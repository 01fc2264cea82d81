//! Stage 4 — **evolve**: the evolutionary search over generator programs.
//!
//! The folders follow the data path of a run:
//!
//! - What a run is: its configuration ([`config`], [`config_text`], the curriculum
//!   [`schedule`], the checks only a run can make [`check`]) and what it is built from
//!   ([`context`]).
//! - The loop: [`evolution`] — the [`evolution::Evolution`] state machine with `step()` and
//!   `commit()`, split by job (proposing, evaluating, recording, validating, stop rules) — and
//!   the entry points of `ppol evolve` / `ppol resume` ([`run`]).
//! - How a candidate is judged: generate → play → score on a batch of tasks ([`evaluate`]),
//!   shared by the loop and `ppol eval`.
//! - What it searches: programs in an islands × MAP-Elites archive ([`archive`], with
//!   [`archive::program`]).
//! - How children are made: the mutation operators, their dispatch and the reflection fed back
//!   to the mutator ([`mutation`], with [`mutation::reflection`]).
//! - What stays on disk: the run directory ([`rundir`]) with its run log
//!   ([`rundir::runlog`]), cost ledger ([`rundir::ledger`]) and checkpoint
//!   ([`rundir::checkpoint`]).
//! - `ppol eval`: the held-out evaluation ([`heldout`]: the table built by
//!   [`heldout::table`], audited against the held-out humans by [`heldout::audit`], read with
//!   evolved − seed and rendered by [`heldout::text`]).
//!
//! Depends on the floor and on every earlier stage.

pub mod archive;
pub mod check;
pub mod config;
pub mod config_text;
pub mod context;
pub mod evaluate;
pub mod evolution;
pub mod heldout;
pub mod mutation;
pub mod run;
pub mod rundir;
pub mod schedule;

// The run directory's files and the archive's programs, at the paths the later stages (report,
// front ends) and the integration tests name them by.
pub use archive::program;
pub use rundir::{ledger, runlog};
