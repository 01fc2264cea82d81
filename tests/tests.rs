//! One integration-test binary (see Cargo.toml `[[test]] integration`).

mod cli;
mod discriminator;
mod parity;
mod util;
