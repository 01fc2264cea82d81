//! One integration-test binary (see Cargo.toml `[[test]] integration`).

mod architecture;
mod archive;
mod cli;
mod discriminator;
mod episodes;
mod evolve;
mod interop;
mod llm;
mod mutation;
mod parity;
mod report;
mod sandbox;
mod scripted;
mod tau2;
mod util;
