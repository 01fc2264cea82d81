//! The agenda-based scripted user simulator ([`ScriptedUser`]): reads the agent's last message
//! and picks the turn to play. The two users it can be — a persona's behaviour axes
//! ([`AxisVoice`]) or a persona's roleplay text ([`TextVoice`]) — are chosen once, when it is
//! built; the turns both play alike are in [`turns`](super::turns).

use async_trait::async_trait;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};

use super::agent::{classify_answer, Answer};
use super::axis_voice::AxisVoice;
use super::facts::{re, Facts};
use super::intent::detect;
use super::mechanics::{read_persona, PersonaPlay, Play, PlaySource};
use super::style::{unmark, Style};
use super::text_voice::TextVoice;
use super::turns::{Core, Kind, Voice};
use crate::dialogue::{Role, Turn};
use crate::simulate::episode::{Scenario, Termination, UserReply, UserSimulator};
use crate::Result;

/// A deterministic, agenda-based user simulator playing a τ²-style [`Scenario`] with a persona's
/// behaviour axes (see [`KNOWN_AXES`](super::KNOWN_AXES)).
///
/// It reads the agent's last message (greeting, requests for name/zip, email, user id, order or
/// reservation id, a yes/no confirmation, "anything else", a transfer, a refusal), answers from the
/// scenario's [`Facts`], states its request, confirms actions, and ends with a stop
/// ([`Termination::UserStop`], or [`Termination::Transfer`] when transferred). Stop tokens never
/// appear in the text; they are reported in [`UserReply::stop`].
///
/// With no persona (empty axes) it is the "easy mode" user of LLM simulators: cooperative, polite,
/// long well-formed sentences, greeting, the whole request and every identifier in the opening.
/// A persona with every axis off is a plain, moderately brief user who answers what is asked.
/// Axes combine; when they conflict, `terse` wins over `verbose`/`formal` on length.
#[derive(Debug, Clone)]
pub struct ScriptedUser {
    core: Core,
    /// Which of the two users this is.
    voice: Driver,
    /// How this user was driven and what of the persona text it plays.
    record: PersonaPlay,
}

/// The user a [`ScriptedUser`] plays, chosen when it is built.
#[derive(Debug, Clone)]
enum Driver {
    /// A persona's behaviour axes, or no persona.
    Axes(AxisVoice),
    /// A persona's roleplay text that plays at least one behaviour mechanic.
    Text(Box<TextVoice>),
}

impl Driver {
    fn get(&mut self) -> &mut dyn Voice {
        match self {
            Driver::Axes(v) => v,
            Driver::Text(v) => v.as_mut(),
        }
    }
}

/// After this many user turns the user leaves.
const MAX_USER_TURNS: u32 = 24;

impl ScriptedUser {
    /// A user for `scenario` with a persona's `axis_placement` (axis → bool; empty = no persona,
    /// "easy mode") and no roleplay text. Unknown axis names are ignored (one warning per name
    /// per process). Deterministic given `(scenario, axes, seed)`.
    pub fn new(scenario: &Scenario, axes: &Map<String, Value>, seed: u64) -> Self {
        let record = PersonaPlay {
            source: if axes.is_empty() {
                PlaySource::None
            } else {
                PlaySource::Axes
            },
            ..PersonaPlay::default()
        };
        Self::build(
            scenario,
            Style::from_axes(axes),
            Play::default(),
            record,
            seed,
        )
    }

    /// A user for `scenario` playing a persona: the mechanics its roleplay `text` states (see
    /// [`read_persona`]: word limits, lower case, withheld identifiers, pushback, emotional
    /// arcs, ... with their intensities), or, when the text plays no behaviour mechanic, its
    /// `axis_placement` as in [`ScriptedUser::new`]. What was played and which sentences could
    /// not be are in [`ScriptedUser::persona_play`]. Deterministic given its inputs.
    pub fn for_persona(
        scenario: &Scenario,
        axes: &Map<String, Value>,
        text: &str,
        seed: u64,
    ) -> Self {
        if text.trim().is_empty() {
            return Self::new(scenario, axes, seed);
        }
        let mut record = read_persona(text, scenario);
        let play = Play::from_reading(&record);
        if play.active {
            return Self::build(scenario, Style::from_play(&play), play, record, seed);
        }
        record.source = if axes.is_empty() {
            PlaySource::None
        } else {
            PlaySource::Axes
        };
        Self::build(
            scenario,
            Style::from_axes(axes),
            Play::default(),
            record,
            seed,
        )
    }

    /// The user of `style`: a text persona's when `play` is active (read from a text), else an
    /// axis-driven or plain one.
    fn build(
        scenario: &Scenario,
        style: Style,
        play: Play,
        record: PersonaPlay,
        seed: u64,
    ) -> Self {
        let facts = Facts::from_scenario(scenario);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let demand_tail = ["", "", ", that's all", ". that's it"][rng.random_range(0..4usize)];
        let demand = if style.terse {
            format!("just {}", facts.short_request())
        } else {
            format!("i just want to {}{demand_tail}.", facts.short_request())
        };
        let core = Core {
            details: facts.request.iter().cloned().collect(),
            facts,
            style,
            rng,
            turns: 0,
            request_said: false,
            asked: [0; 7],
            revealed: [false; 7],
            friction: 0,
            prev_needs: Vec::new(),
            confirm_streak: 0,
            demand,
            give_up_checked: 0,
            max_words: play.max_words,
            reactive: play.reactive,
            no_restate: play.no_restate,
            setback_turn: None,
            progress_turn: None,
            steps_done: 0,
            last_agent: String::new(),
        };
        let voice = if play.active {
            Driver::Text(Box::new(TextVoice::new(play)))
        } else {
            Driver::Axes(AxisVoice)
        };
        ScriptedUser {
            core,
            voice,
            record,
        }
    }

    /// How this user is driven (persona text, axes, or none) and, for a text, the mechanics it
    /// plays and the sentences it cannot play.
    pub fn persona_play(&self) -> &PersonaPlay {
        &self.record
    }

    /// The facts this user plays from.
    pub fn facts(&self) -> &Facts {
        &self.core.facts
    }

    fn reply(&mut self, history: &[Turn]) -> UserReply {
        let c = &mut self.core;
        let v = self.voice.get();
        let agent = history
            .iter()
            .rev()
            .find(|t| t.role == Role::Assistant && !t.content.trim().is_empty())
            .map(|t| t.content.as_str())
            .unwrap_or("");
        c.turns += 1;
        let intent = detect(agent);
        let s = c.style;
        c.last_agent = agent.to_string();
        if re!(r"(?i)\b(?:done:|all set|has been (?:completed|cancelled|canceled|updated|booked|processed)|successfully)").is_match(agent) {
            c.steps_done += 1;
            c.progress_turn = Some(c.turns);
        }

        if c.turns > MAX_USER_TURNS {
            let text = c
                .pick(&["sorry, i have to go now.", "i need to go, bye"])
                .to_string();
            return stop(text, Termination::UserStop);
        }
        if intent.transfer {
            let text = if s.long() {
                "Thank you, I will wait for the next agent."
            } else if s.frustrated || v.fed_up(c) {
                "finally"
            } else {
                c.pick(&["ok", "ok thanks", ""])
            };
            let text = c.surface(v, &[text.to_string()]);
            return stop(text, Termination::Transfer);
        }
        if c.turns == 1 {
            let parts = v.opening(c);
            let text = c.finish(v, parts, Kind::Opening);
            return UserReply { text, stop: None };
        }

        // Friction: the agent asks the same thing again, asks to confirm again, or refuses.
        c.confirm_streak = if intent.confirm {
            c.confirm_streak + 1
        } else {
            0
        };
        let repeated = !intent.needs.is_empty() && intent.needs == c.prev_needs;
        let waiting =
            !intent.question && intent.needs.is_empty() && !intent.anything_else && !intent.confirm;
        if repeated || waiting || c.confirm_streak >= 2 || intent.refusal {
            c.friction += 1;
            c.setback_turn = Some(c.turns);
        }
        c.prev_needs = intent.needs.clone();
        if let Some(t) = v.give_up(c) {
            let text = c.surface(v, &[t.to_string()]);
            return stop(text, Termination::UserStop);
        }

        if intent.confirm {
            let parts = v.confirm(c);
            let mut text = c.finish(v, parts.clone(), Kind::Confirm);
            // A yes must read as a yes to the agent (decorations never turn it into a no).
            let meant_yes = classify_answer(&unmark(&parts[0])) == Answer::Yes;
            if meant_yes && classify_answer(&text) != Answer::Yes {
                text = c.surface(v, &parts[..1]);
            }
            return UserReply { text, stop: None };
        }
        if intent.choice && !intent.anything_else {
            let parts = c.choose();
            let text = c.finish(v, parts, Kind::Confirm);
            return UserReply { text, stop: None };
        }
        if !intent.needs.is_empty() && !intent.anything_else {
            let parts = c.answer(v, &intent.needs);
            let text = c.finish(v, parts, Kind::Answer);
            return UserReply { text, stop: None };
        }
        if intent.anything_else {
            let parts = v.closing(c, intent.refusal);
            let text = c.finish(v, parts, Kind::Closing);
            return stop(text, Termination::UserStop);
        }
        if intent.how_help {
            let parts = c.restate(v);
            let text = c.finish(v, parts, Kind::Other);
            return UserReply { text, stop: None };
        }
        if intent.refusal {
            let parts = v.refusal(c);
            let text = c.finish(v, parts, Kind::Other);
            return UserReply { text, stop: None };
        }
        if intent.question {
            let ask_back = v.ask_back(c);
            if ask_back {
                let q = c
                    .pick(&[
                        "what do you mean?",
                        "hmm, what exactly do you need?",
                        "not sure i understand",
                    ])
                    .to_string();
                let text = c.finish(v, vec![q], Kind::Other);
                return UserReply { text, stop: None };
            }
            let parts = c.explain(v);
            let text = c.finish(v, parts, Kind::Answer);
            return UserReply { text, stop: None };
        }
        let parts = c.ack(v);
        let text = c.finish(v, parts, Kind::Ack);
        UserReply { text, stop: None }
    }
}

fn stop(text: String, why: Termination) -> UserReply {
    UserReply {
        text,
        stop: Some(why),
    }
}

#[async_trait]
impl UserSimulator for ScriptedUser {
    async fn respond(&mut self, history: &[Turn]) -> Result<UserReply> {
        Ok(self.reply(history))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        Scenario {
            task_id: "t".into(),
            domain: "airline".into(),
            reason_for_call: "You want to cancel reservations XEHM4B and 59XX6W because your trip was called off.".into(),
            known_info: "Your user id is daiki_muller_1116.".into(),
            unknown_info: String::new(),
            task_instructions: String::new(),
            text: String::new(),
        }
    }

    #[test]
    fn ids_are_stripped_from_requests() {
        let u = ScriptedUser::new(&scenario(), &Map::new(), 1);
        assert_eq!(
            u.core.strip_ids(
                "I want to cancel reservations XEHM4B and 59XX6W because my trip was called off."
            ),
            "I want to cancel my reservations because my trip was called off."
        );
        assert_eq!(
            u.core.strip_ids("Cancel reservation XEHM4B."),
            "Cancel my reservation."
        );
        assert_eq!(
            u.core.strip_ids("XEHM4B"),
            "I need help with my reservation."
        );
    }

    #[test]
    fn short_clauses_keep_the_gist() {
        let mut u = ScriptedUser::new(&scenario(), &Map::new(), 1);
        let c = u.core.short_clause(
            "I want to cancel reservations XEHM4B and 59XX6W because my trip was called off.",
            true,
            false,
        );
        assert!(c.ends_with("cancel reservations XEHM4B and 59XX6W"), "{c}");
        let c = u
            .core
            .short_clause("I want a full refund for my ticket.", false, false);
        assert_eq!(c, "want a full refund for my ticket");
    }

    #[test]
    fn confirmations_read_as_yes() {
        let combos: Vec<Vec<&str>> = vec![
            vec![],
            vec!["terse"],
            vec!["frustrated"],
            vec!["ambiguous"],
            vec!["skeptical"],
            vec!["acknowledger", "typos"],
            vec![
                "terse",
                "frustrated",
                "ambiguous",
                "skeptical",
                "impatient",
                "emotional",
                "typos",
            ],
        ];
        let history = vec![Turn::new(
            Role::Assistant,
            "I will cancel reservation XEHM4B. Shall I proceed? (yes/no)",
        )];
        for combo in combos {
            let axes: Map<String, Value> = combo
                .iter()
                .map(|a| (a.to_string(), Value::Bool(true)))
                .collect();
            for seed in 0..200 {
                let mut u = ScriptedUser::new(&scenario(), &axes, seed);
                u.core.turns = 3;
                u.core.confirm_streak = 1; // the second ask of the same action: always a yes
                let r = u.reply(&history);
                assert_eq!(
                    classify_answer(&r.text),
                    Answer::Yes,
                    "{combo:?} seed {seed}: {}",
                    r.text
                );
            }
        }
    }
}
