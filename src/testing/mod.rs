//! Test support: an OpenAI-compatible [`mock_server`] on 127.0.0.1 with scripted replies and
//! fault injection, used by ppol's own tests and by the hidden `ppol mock-server` command.

pub mod mock_server;
