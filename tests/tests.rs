//! One integration-test binary (see Cargo.toml `[[test]] integration`).
mod sandbox;
