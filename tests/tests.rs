//! One integration-test binary (see Cargo.toml `[[test]] integration`).

mod architecture;
mod archive;
mod bounds;
mod cli;
mod discriminator;
mod episodes;
mod evolve;
mod export;
mod hub;
mod interop;
mod llm;
mod mutation;
mod parity;
mod regression;
mod report;
mod restart;
mod sandbox;
mod scripted;
mod study;
mod tau2;
mod throughput;
mod traces;
mod util;
