//! The offline scripted backend: an agenda-based user simulator ([`ScriptedUser`]) that plays a
//! τ²-style [`Scenario`](crate::simulate::episode::Scenario) and realises a persona's behaviour axes
//! ([`KNOWN_AXES`]), and a rule-based agent ([`ScriptedAgent`]) that follows the happy path of the
//! task's gold [`Plan`](crate::simulate::episode::Plan). Deterministic given their seeds, network-free and
//! fast (thousands of episodes per second); the default backend of offline runs and tests.
//!
//! # Personas
//!
//! [`ScriptedUser::for_persona`] plays a persona's **roleplay text**: [`mechanics`] reads it
//! against the vocabulary in `fitness/mechanics.toml` (turn-level mechanics such as a word
//! limit, lower case, no greeting, identifiers withheld until asked n times, one field per turn,
//! typos, trailing off, pushback once or repeatedly, demands repeated, an emotional arc with its
//! strength, acknowledgement-only turns, topic pivots, giving up) and the user realises each
//! mechanic with the intensity the text states. Sentences it cannot play are kept in
//! [`ScriptedUser::persona_play`] (and in the episode record). A text that plays no behaviour
//! mechanic falls back to the axis placement below.
//!
//! [`ScriptedUser::new`] takes a persona's `axis_placement` (axis name → on/off):
//!
//! - **no persona** (empty map): the "easy mode" of LLM user simulators — cooperative, polite,
//!   long well-formed sentences, a greeting, the whole request and every identifier up front,
//!   full-sentence acknowledgements and profuse thanks at the end;
//! - **a persona with every axis off** (or only unknown axes): a plain, moderately brief user
//!   that states the gist of its request, answers what it is asked, and volunteers the rest of
//!   its request over time; this is the baseline the axes are measured against;
//! - **axes on** add their behaviour on top of the plain user (see [`KNOWN_AXES`] for the
//!   vocabulary). Names are normalised ([`normalize_axis_name`]: lower case, spaces, hyphens and
//!   punctuation → `_`) and common synonyms are accepted (`concise` → terse, `distrustful` → skeptical,
//!   `angry` / `impatient_angry` → frustrated, `vague` → ambiguous, ...; see [`Axis::parse`]).
//!   Placements are booleans, numbers (≥ 0.5 is on) or strings (`"true"`, `"yes"`, `"on"`,
//!   `"high"`). Unknown names are ignored with one `tracing` warning per name and process.
//!   When axes conflict, `terse` wins on length over `verbose` and `formal`.
//!
//! Axes move the fingerprint features defined in `fitness/ppol-0.1.1.banks`: `terse` lowers words
//! per turn, opening length and politeness and raises short utterances and acknowledgements;
//! `skeptical` raises pushback (and info seeking / certainty); `frustrated` raises emotional and
//! accusatory expressions and repetition (its demand, repeated) and drops politeness;
//! `ambiguous` raises uncertainty and withholds identifiers until asked twice (lower
//! front-loading); `incremental_disclosure` opens with the gist only and reveals one fact per turn;
//! `polite`, `formal`, `verbose`, `acknowledger`, `impatient` (info seeking), `emotional`,
//! `typos` and `lowercase` do what their names say. Identifiers are never altered by typos or
//! case changes.
//!
//! # The agent
//!
//! [`ScriptedAgent`] uses the gold plan as an oracle: it asks what the user needs, authenticates
//! with exactly what the first gold action needs when that is an identification tool (calling it
//! only once every argument value appears in the user's messages, and transferring to a human
//! after four unsuccessful asks), asks once for an order / reservation id the user has not given,
//! calls read-only tools directly, asks about the details (and sometimes the payment method) of
//! each write action, then describes it and waits for a yes (re-explaining once after a no or a
//! doubt, then skipping it), states `communicate_info` verbatim and asks "anything else". With an
//! empty plan it explains that policy does not allow the request.

mod agent;
mod axis_voice;
mod facts;
mod intent;
pub mod mechanics;
mod phrases;
mod style;
mod text_voice;
mod turns;
mod user;

pub use agent::ScriptedAgent;
pub use facts::{first_person, Facts, Topic};
pub use mechanics::{
    read_persona, vocabulary, MechanicInfo, PersonaPlay, PlaySource, PlayedMechanic, Vocabulary,
};
pub use style::{normalize_axis_name, Axis, KNOWN_AXES};
pub use user::ScriptedUser;
