//! One integration-test binary (see Cargo.toml `[[test]] integration`).

mod archive;
mod cli;
mod mutation;
mod parity;
mod util;
