//! One integration-test binary (see Cargo.toml `[[test]] integration`).

mod cli;
mod parity;
mod report;
mod util;
