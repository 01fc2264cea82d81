//! Stage 6 — **front ends**: the command line ([`cli`]) and the Python binding (`python`,
//! behind the `python` feature), both thin adapters over the operations layer ([`ops`]).

pub mod cli;
pub mod ops;
#[cfg(feature = "python")]
mod python;
