//! Test support, behind the cargo feature `testing`: an OpenAI-compatible `mock_server` on
//! 127.0.0.1 with scripted replies and fault injection, used by ppol's own tests (`cargo test`
//! turns the feature on), the Python test build (`maturin develop --features testing`) and
//! the hidden `ppol mock-server` command. A build without the feature has no mock server.

#[cfg(feature = "testing")]
pub mod mock_server;
