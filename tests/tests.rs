//! One integration-test binary (see Cargo.toml `[[test]] integration`).

mod cli;
mod parity;
mod scripted;
mod util;
