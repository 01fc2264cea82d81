//! The offline scripted backend: an agenda-based user simulator ([`ScriptedUser`]) that plays a
//! τ²-style [`Scenario`](crate::episode::Scenario) and realises a persona's behaviour axes
//! ([`KNOWN_AXES`]), and a rule-based agent ([`ScriptedAgent`]) that follows the happy path of the
//! task's gold [`Plan`](crate::episode::Plan). Deterministic given their seeds, network-free and
//! fast; the default backend of offline runs and tests.
//!
//! Axes move the fingerprint features defined in `fitness/ppol-0.1.1.banks`:
//! `terse` lowers words per turn, opening length and politeness and raises short utterances and
//! acknowledgements; `skeptical` raises pushback (and info seeking / certainty); `frustrated`
//! raises emotional and accusatory expressions and repetition and lowers politeness;
//! `ambiguous` raises uncertainty and delays identifiers (lower front-loading); `polite`,
//! `formal`, `verbose`, `acknowledger`, `impatient`, `emotional`, `incremental_disclosure`,
//! `typos` and `lowercase` do what their names say (see [`KNOWN_AXES`]).

mod agent;
mod facts;
mod style;
mod user;

pub use agent::ScriptedAgent;
pub use facts::{first_person, Facts, Topic};
pub use style::{normalize_axis_name, Axis, KNOWN_AXES};
pub use user::ScriptedUser;
