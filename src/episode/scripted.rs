//! The offline scripted backend: an agenda-based user simulator and a rule-based agent.
