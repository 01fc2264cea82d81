//! One integration-test binary (see Cargo.toml `[[test]] integration`).

mod archive;
mod cli;
mod parity;
mod util;
