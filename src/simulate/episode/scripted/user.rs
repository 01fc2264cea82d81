//! The agenda-based scripted user simulator.

use std::collections::VecDeque;

use async_trait::async_trait;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};

use super::agent::{classify_answer, Answer};
use super::facts::{re, Facts};
use super::mechanics::{read_persona, Arc, PersonaPlay, Play, PlaySource};
use super::style::{drop_articles, hard, lowercase, soft, typos, unmark, Style};
use crate::dialogue::{Role, Turn};
use crate::simulate::episode::{Scenario, Termination, UserReply, UserSimulator};
use crate::Result;

/// A piece of information the agent can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Name,
    Zip,
    Email,
    UserId,
    OrderId,
    ReservationId,
    Payment,
}

/// What the agent's last message asks or says, by keyword.
#[derive(Debug, Default)]
struct Intent {
    needs: Vec<Need>,
    confirm: bool,
    anything_else: bool,
    how_help: bool,
    transfer: bool,
    refusal: bool,
    question: bool,
    choice: bool,
}

fn detect(agent: &str) -> Intent {
    let l = agent.to_lowercase();
    let mut needs = Vec::new();
    let user_id = re!(r"user ?id|user-id|username|user name|account id").is_match(&l);
    if re!(r"\b(?:full |first |last |your )?name\b").is_match(&l.replace("user name", "")) {
        needs.push(Need::Name);
    }
    if re!(r"\bzip|postal code|postcode").is_match(&l) {
        needs.push(Need::Zip);
    }
    if re!(r"e-?mail").is_match(&l) {
        needs.push(Need::Email);
    }
    if user_id {
        needs.push(Need::UserId);
    }
    if re!(r"order (?:id|number|#|no)|which order").is_match(&l) {
        needs.push(Need::OrderId);
    }
    if re!(r"reservation (?:id|number|code)|confirmation (?:number|code)|booking (?:reference|code|id|number)|which reservation").is_match(&l) {
        needs.push(Need::ReservationId);
    }
    if re!(r"payment method|how would you like to pay|which card").is_match(&l)
        && !l.contains("(yes/no)")
    {
        needs.push(Need::Payment);
    }
    let strong_confirm = re!(r"\(yes/no\)|proceed|go ahead").is_match(&l);
    Intent {
        confirm: (needs.is_empty() || strong_confirm) && re!(r"\(yes/no\)|shall i (?:proceed|go ahead)|should i (?:proceed|go ahead)|would you like (?:me )?to (?:proceed|go ahead)|do you want (?:me )?to (?:proceed|go ahead)|do you confirm|please confirm|can you confirm|could you confirm|confirm (?:that|this)|is that correct\?").is_match(&l),
        anything_else: l.contains("anything else"),
        how_help: re!(r"how (?:can|may) i (?:help|assist)|what can i (?:do|help)|what do you need help with|tell me what you need|what you need help with|how can i be of").is_match(&l),
        transfer: re!(r"transferring you|transfer you to|transferred to|i will now transfer|i'll transfer").is_match(&l)
            && !re!(r"would you like (?:me )?to transfer|do you want (?:me )?to transfer").is_match(&l),
        refusal: re!(r"unable to|not able to|cannot|can't|can not|not possible|not permitted|does not allow|doesn't allow|against (?:our )?policy").is_match(&l),
        question: l.trim_end().ends_with('?'),
        choice: re!(r"which one would you like|which option|which of (?:these|the) options|options:").is_match(&l),
        needs,
    }
}

/// The kind of turn being rendered (drives which decorations apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Opening,
    Answer,
    Confirm,
    Ack,
    Closing,
    Other,
}

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
    facts: Facts,
    style: Style,
    rng: ChaCha8Rng,
    turns: u32,
    /// Request sentences not yet said.
    details: VecDeque<String>,
    request_said: bool,
    asked: [u32; 7],
    revealed: [bool; 7],
    friction: u32,
    prev_needs: Vec<Need>,
    confirm_streak: u32,
    demand: String,
    give_up_checked: u32,
    /// The knobs read from the persona's text (inert for axis-driven and plain users).
    play: Play,
    /// How this user was driven and what of the persona text it plays.
    record: PersonaPlay,
    /// Pushbacks, demand repeats still to make (text mode).
    pushbacks_left: u32,
    repeats_left: u32,
    /// The user turn of the latest refusal or stall, and of the latest progress.
    setback_turn: Option<u32>,
    progress_turn: Option<u32>,
    /// Actions the agent completed so far.
    steps_done: u32,
    /// The agent's last message.
    last_agent: String,
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
        ScriptedUser {
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
            pushbacks_left: play.pushback,
            repeats_left: play.repeat,
            play,
            record,
            setback_turn: None,
            progress_turn: None,
            steps_done: 0,
            last_agent: String::new(),
        }
    }

    /// How this user is driven (persona text, axes, or none) and, for a text, the mechanics it
    /// plays and the sentences it cannot play.
    pub fn persona_play(&self) -> &PersonaPlay {
        &self.record
    }

    /// The facts this user plays from.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    fn p(&mut self, prob: f64) -> bool {
        self.rng.random_bool(prob.clamp(0.0, 1.0))
    }

    fn pick(&mut self, xs: &[&'static str]) -> &'static str {
        xs[self.rng.random_range(0..xs.len())]
    }

    /// Wrap every identifier the user knows in `text` so transforms keep it verbatim.
    fn mark_ids(&self, text: &str) -> String {
        let f = &self.facts;
        let mut out = text.to_string();
        for id in f
            .order_ids
            .iter()
            .chain(&f.reservation_ids)
            .chain(f.email.iter())
            .chain(f.user_id.iter())
        {
            if out.contains(id.as_str()) {
                out = out.replace(id.as_str(), &hard(id));
            }
        }
        out
    }

    /// Remove the order/reservation ids from a request sentence ("cancel reservation EHGLP3 and
    /// 59XX6W" → "cancel my reservation").
    fn strip_ids(&self, text: &str) -> String {
        let ids = self.facts.object_ids();
        if ids.is_empty() {
            return text.to_string();
        }
        let words: Vec<&str> = text.split(' ').collect();
        let is_id = |w: &str| {
            let core = w.trim_matches(|c: char| !c.is_alphanumeric() && c != '#');
            ids.contains(&core) || ids.contains(&format!("#{core}").as_str())
        };
        let mut out: Vec<String> = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let w = words[i];
            if is_id(w) {
                // drop "IDs"/"number" before it, and "and"/"," joiners after further ids
                while let Some(last) = out.last() {
                    let l = last.to_lowercase();
                    if matches!(
                        l.as_str(),
                        "id" | "ids" | "number" | "numbers" | "#" | "and"
                    ) {
                        out.pop();
                    } else {
                        break;
                    }
                }
                if let Some(last) = out.last_mut() {
                    let l = last.to_lowercase();
                    if matches!(
                        l.as_str(),
                        "order" | "orders" | "reservation" | "reservations"
                    ) {
                        let prev = out.len().checked_sub(2).map(|j| out[j].to_lowercase());
                        if !matches!(prev.as_deref(), Some("my" | "the" | "a" | "an" | "this")) {
                            let noun = out.pop().unwrap_or_default();
                            out.push("my".into());
                            out.push(noun);
                        }
                    }
                }
                let trail: String = w
                    .chars()
                    .rev()
                    .take_while(|c| matches!(c, '.' | ',' | '!' | '?' | ';'))
                    .collect();
                if let Some(last) = out.last_mut() {
                    last.push_str(&trail.chars().rev().collect::<String>());
                }
                i += 1;
                continue;
            }
            out.push(w.to_string());
            i += 1;
        }
        let s = out.join(" ");
        if s.trim().is_empty() {
            format!("I need help with {}.", self.facts.object_noun())
        } else {
            s
        }
    }

    /// Small rephrasings of a request sentence ("I want to" → "I'd like to", ...).
    fn vary(&mut self, s: &str) -> String {
        for lead in ["I want to ", "I would like to "] {
            if let Some(rest) = s.strip_prefix(lead) {
                let alt = if self.style.formal {
                    self.pick(&["I would like to ", "I wish to ", "I need to "])
                } else {
                    self.pick(&[
                        "I want to ",
                        "I'd like to ",
                        "I need to ",
                        "I would like to ",
                    ])
                };
                return format!("{alt}{rest}");
            }
        }
        s.to_string()
    }

    /// The request reduced to a short clause without the lead verb ("exchange mechanical keyboard
    /// for similar one").
    fn short_clause(&mut self, sentence: &str, keep_ids: bool, opening: bool) -> String {
        let s = if keep_ids {
            sentence.to_string()
        } else {
            self.strip_ids(sentence)
        };
        let (clause, verb_led) =
            match re!(r"(?i)\b(?:want|wants|like|need|wish|hoping|trying|have) to (.*)")
                .captures(&s)
            {
                Some(c) => (c[1].to_string(), true),
                None => (s.trim_start_matches("I ").to_string(), false),
            };
        // a text's word limit leaves room for a two-word lead
        let cap = self
            .play
            .max_words
            .map_or(12, |n| (n as usize).saturating_sub(2).clamp(3, 12));
        let mut words: Vec<&str> = Vec::new();
        for w in clause.split_whitespace() {
            let after_id = words
                .last()
                .is_some_and(|p| p.contains(|c: char| c.is_ascii_digit()));
            let lw = w.to_lowercase();
            let stop_here = words.len() >= 3
                && (matches!(
                    lw.as_str(),
                    "but" | "because" | "so" | "since" | "which" | "if" | "as" | "even"
                ) || (lw == "and" && !after_id));
            if stop_here || words.len() >= cap {
                break;
            }
            let cut = w.ends_with([',', ';', '.', ':']);
            words.push(w);
            if cut && words.len() >= 3 {
                break;
            }
        }
        while words.len() > 2
            && matches!(
                words[words.len() - 1]
                    .to_lowercase()
                    .trim_end_matches([',', ';', '.', ':']),
                "in" | "on"
                    | "for"
                    | "to"
                    | "the"
                    | "a"
                    | "an"
                    | "my"
                    | "of"
                    | "with"
                    | "and"
                    | "from"
                    | "at"
                    | "same"
                    | "by"
            )
        {
            words.pop();
        }
        let clause = words.join(" ");
        let clause = clause.trim_end_matches([',', ';', '.', ':']);
        if clause.is_empty() {
            return self.facts.short_request().to_string();
        }
        let lead = match (verb_led, opening) {
            (true, true) => self.pick(&[
                "need to ",
                "want to ",
                "i need to ",
                "i want to ",
                "hi, need to ",
                "need to ",
            ]),
            (true, false) => self.pick(&["need to ", "want to ", ""]),
            (false, true) => self.pick(&["", "hi, ", ""]),
            (false, false) => "",
        };
        format!("{lead}{clause}")
    }

    fn identity_sentences(&mut self) -> Vec<String> {
        let f = self.facts.clone();
        let mut out = Vec::new();
        let zip = f.zip.as_ref().map(|z| {
            let mut z = z.clone();
            for o in &f.other_zips {
                z.push_str(&format!(" (or {o}, my other address)"));
            }
            z
        });
        match (f.full_name(), &zip) {
            (Some(n), Some(z)) => out.push(match self.rng.random_range(0..3u8) {
                0 => format!("My name is {} and my zip code is {}.", soft(&n), hard(z)),
                1 => format!(
                    "For verification, my name is {}, and I live in zip code {}.",
                    soft(&n),
                    hard(z)
                ),
                _ => format!(
                    "You can find my account under the name {} with the zip code {}.",
                    soft(&n),
                    hard(z)
                ),
            }),
            (Some(n), None) => out.push(format!("My name is {}.", soft(&n))),
            (None, Some(z)) => out.push(format!("My zip code is {}.", hard(z))),
            _ => {}
        }
        if let Some(e) = &f.email {
            out.push(format!("My email address is {}.", hard(e)));
        }
        if let Some(u) = &f.user_id {
            out.push(format!("My user ID is {}.", hard(u)));
        }
        out
    }

    // -----------------------------------------------------------------------------------------
    // Turns

    /// The opening of a text persona: greeting, a loose or clear statement of the request, with
    /// or without identifiers, shortened under a word limit.
    fn text_opening(&mut self) -> Vec<String> {
        let (s, k) = (self.style, self.play);
        let mut parts = Vec::new();
        self.request_said = true;
        let first = self.details.pop_front().unwrap_or_default();
        let first = self.vary(&first);
        let greet = match k.greeting {
            Some(g) => g,
            None => self.p(if s.long() { 0.7 } else { 0.35 }),
        };
        if greet {
            let g = if s.long() {
                self.pick(&[
                    "Hello!",
                    "Hi there!",
                    "Hello, I hope you are doing well.",
                    "Hi, good morning!",
                ])
            } else if s.terse {
                self.pick(&["hi", "hey", "hello"])
            } else {
                self.pick(&["hi,", "hello,", "hi there,", "hey,"])
            };
            parts.push(g.to_string());
        }
        if k.vague_open {
            let obj = self.facts.object_noun();
            parts.push(match self.rng.random_range(0..3u8) {
                0 => format!("something is wrong with {obj}"),
                1 => format!("i have a problem with {obj}"),
                _ => format!("it's about {obj}"),
            });
            self.details.push_front(first);
            return parts;
        }
        let withhold = k.withhold > 0 || k.one_field;
        if k.front_load && !withhold {
            parts.push(self.mark_ids(&first));
            while let Some(d) = self.details.pop_front() {
                let d = self.mark_ids(&d);
                parts.push(d);
            }
            parts.extend(self.identity_sentences());
            return parts;
        }
        let keep_ids = !withhold && self.p(0.5);
        let short = k.max_words.is_some_and(|n| n <= 14);
        let body = if short {
            let clause = self.short_clause(&first, keep_ids, false);
            self.mark_ids(&clause)
        } else if keep_ids {
            self.mark_ids(&first)
        } else {
            self.strip_ids(&first)
        };
        parts.push(body);
        let more = !k.reactive && !k.one_field && !k.clear_request && !short;
        if more && self.p(if s.long() { 0.6 } else { 0.3 }) {
            if let Some(d) = self.details.pop_front() {
                parts.push(if keep_ids {
                    self.mark_ids(&d)
                } else {
                    self.strip_ids(&d)
                });
            }
        }
        parts
    }

    fn opening(&mut self) -> Vec<String> {
        if self.play.active {
            return self.text_opening();
        }
        let s = self.style;
        let mut parts = Vec::new();
        self.request_said = true;
        if !s.easy && !s.verbose && !s.formal && self.p(0.08) {
            self.request_said = false;
            parts.push(
                self.pick(&["hi", "hello", "hey there", "hi there"])
                    .to_string(),
            );
            return parts;
        }
        let first = self.details.pop_front().unwrap_or_default();
        let first = self.vary(&first);
        if s.easy || ((s.verbose || s.formal) && !s.terse) {
            let greet = if s.formal {
                self.pick(&["Good day.", "Hello.", "Good afternoon."])
            } else {
                self.pick(&[
                    "Hello!",
                    "Hi there!",
                    "Hello, I hope you are doing well.",
                    "Hi, good morning!",
                    "Hello there!",
                ])
            };
            parts.push(greet.to_string());
            if s.front_loads() {
                parts.push(self.mark_ids(&first));
                while let Some(d) = self.details.pop_front() {
                    let d = self.mark_ids(&d);
                    parts.push(d);
                }
                parts.extend(self.identity_sentences());
                let said = parts.join(" ");
                let f = self.facts.clone();
                for id in f.order_ids.iter().filter(|i| !said.contains(i.as_str())) {
                    parts.push(format!("The order number is {}.", hard(id)));
                }
                for id in f
                    .reservation_ids
                    .iter()
                    .filter(|i| !said.contains(i.as_str()))
                {
                    parts.push(format!("The reservation number is {}.", hard(id)));
                }
            } else {
                parts.push(self.strip_ids(&first));
                if let Some(d) = self.details.pop_front() {
                    parts.push(self.strip_ids(&d));
                }
            }
            if s.easy && self.p(0.6) {
                parts.push(
                    self.pick(&[
                        "Could you please help me with this? Thank you so much in advance!",
                        "I would really appreciate your help with this.",
                        "Thank you for your help!",
                        "Could you please assist me with this?",
                    ])
                    .to_string(),
                );
            }
            return parts;
        }
        if s.incremental && !s.terse {
            let short = self.facts.short_request();
            let greet = self.pick(&["hi, ", "hello, ", "", "hi there, "]);
            parts.push(format!("{greet}I need to {short}."));
            self.details.push_front(first);
            return parts;
        }
        if s.ambiguous && s.terse && self.p(0.6) {
            let obj = self.facts.object_noun();
            parts.push(match self.rng.random_range(0..3u8) {
                0 => format!("problem with {obj} i think"),
                1 => format!("hi need help w {obj} maybe"),
                _ => format!("hmm its about {obj}"),
            });
            self.details.push_front(first);
            return parts;
        }
        if s.ambiguous && self.p(0.6) {
            let obj = self.facts.object_noun();
            let short = self.facts.short_request();
            parts.push(match self.rng.random_range(0..4u8) {
                0 => format!("hi, i have a problem with {obj} i think"),
                1 => format!("hey, um, i need help with something... i want to {short} maybe?"),
                2 => format!("hi, it's about {obj}, not sure how to explain"),
                _ => format!("hello, i think i need to {short}, or something like that"),
            });
            self.details.push_front(first);
            return parts;
        }
        if s.terse {
            let keep = !s.incremental && !s.ambiguous && self.p(0.5);
            let clause = self.short_clause(&first, keep, true);
            parts.push(self.mark_ids(&clause));
            return parts;
        }
        let keep_ids = !s.incremental && !s.ambiguous && self.p(0.5);
        let greet = self.p(0.4);
        let body = if keep_ids {
            self.mark_ids(&first)
        } else {
            self.strip_ids(&first)
        };
        if greet {
            parts.push(
                self.pick(&["hi,", "hello,", "hi there,", "hey,"])
                    .to_string(),
            );
        }
        parts.push(body);
        if !s.incremental && self.p(0.3) {
            if let Some(d) = self.details.pop_front() {
                parts.push(if keep_ids {
                    self.mark_ids(&d)
                } else {
                    self.strip_ids(&d)
                });
            }
        }
        parts
    }

    /// Answer a request for identifiers.
    fn answer(&mut self, needs: &[Need]) -> Vec<String> {
        let s = self.style;
        let f = self.facts.clone();
        let reg = if s.terse {
            0
        } else if s.long() {
            2
        } else {
            1
        };
        for n in needs {
            self.asked[*n as usize] += 1;
        }
        let has = |n: Need| match n {
            Need::Name => f.full_name().is_some(),
            Need::Zip => f.zip.is_some(),
            Need::Email => f.email.is_some(),
            Need::UserId => f.user_id.is_some(),
            Need::OrderId => !f.order_ids.is_empty(),
            Need::ReservationId => !f.reservation_ids.is_empty(),
            Need::Payment => true,
        };
        let first_time = needs
            .iter()
            .any(|n| self.asked[*n as usize] == 1 && has(*n));
        let already = needs.iter().all(|n| self.revealed[*n as usize]) && !needs.is_empty();
        // A frustrated user complains instead of answering, once in a while.
        if s.frustrated && first_time && self.p(0.25) {
            let why = if s.terse {
                self.pick(&["ugh why", "seriously?", "come on"])
            } else {
                self.pick(&[
                    "why do you need that?",
                    "seriously? why is this so complicated.",
                    "ugh, come on.",
                ])
            };
            return vec![why.to_string(), self.demand.clone()];
        }
        // An ambiguous user withholds until asked twice.
        if s.ambiguous && first_time && self.p(0.85) {
            if s.terse {
                let t = self.pick(&["idk", "not sure", "hmm which one", "idk offhand", "maybe?"]);
                return vec![t.to_string()];
            }
            return vec![self
                .pick(&[
                    "hmm, i'm not sure which one you need... it should be under my name i think",
                    "i think it's the account i always use? not sure",
                    "maybe you can look it up? i don't know it offhand",
                    "um, which one do you mean? i have a couple i think",
                ])
                .to_string()];
        }
        // A text persona that withholds identifiers until asked n times stalls the first asks.
        let k = self.play;
        let held = needs
            .iter()
            .any(|n| *n != Need::Payment && has(*n) && self.asked[*n as usize] < k.withhold);
        if k.active && held {
            let t = if s.terse {
                self.pick(&["why", "do you need that?", "is that needed", "for what?"])
            } else if k.hedge > 0.0 && self.p(k.hedge) {
                self.pick(&[
                    "hmm, i'm not sure i have that handy, can't you find it another way?",
                    "maybe you can look it up? i don't have it in front of me",
                ])
            } else {
                self.pick(&[
                    "do you really need that?",
                    "can't you look it up from what i told you?",
                    "is that necessary for this?",
                    "why do you need that?",
                ])
            };
            return vec![t.to_string()];
        }
        let mut give: Vec<Need> = needs.iter().copied().filter(|n| has(*n)).collect();
        if s.incremental && give.len() > 1 {
            // one fact per turn: the first not yet revealed
            let next = give
                .iter()
                .copied()
                .find(|n| !self.revealed[*n as usize])
                .unwrap_or(give[0]);
            give = vec![next];
        }
        let mut parts = Vec::new();
        let told = if k.active {
            already && k.already > 0.0 && self.p(k.already)
        } else {
            already && (s.skeptical || s.frustrated)
        };
        if told {
            parts.push(
                self.pick(&[
                    "i already told you.",
                    "like i said,",
                    "as i said,",
                    "i already gave you that.",
                ])
                .to_string(),
            );
        } else if already && reg == 2 {
            parts.push("Sure, once again:".to_string());
        }
        let name = f.full_name().map(|n| soft(&n)).unwrap_or_default();
        let mut zip = f.zip.as_deref().map(hard).unwrap_or_default();
        for z in &f.other_zips {
            zip.push_str(&format!(" or {}", hard(z)));
        }
        let mut i = 0;
        while i < give.len() {
            let n = give[i];
            i += 1;
            let text = match n {
                Need::Name if give.contains(&Need::Zip) => {
                    give.retain(|x| *x != Need::Zip);
                    match reg {
                        0 => self.pick3([format!("{name} {zip}"), format!("{name}, {zip}"), format!("{name} zip {zip}")]),
                        1 => self.pick3([format!("it's {name}, zip is {zip}"), format!("sure, {name} and zip code {zip}"), format!("my name is {name} and zip {zip}")]),
                        _ => self.pick3([format!("Sure, my name is {name} and my zip code is {zip}."), format!("Of course. My full name is {name}, and my zip code is {zip}."), format!("Certainly! The name on the account is {name}, and the zip code is {zip}.")]),
                    }
                }
                Need::Name => match reg {
                    0 => name.clone(),
                    1 => self.pick3([
                        format!("it's {name}"),
                        format!("my name is {name}"),
                        name.clone(),
                    ]),
                    _ => self.pick3([
                        format!("My name is {name}."),
                        format!("Sure, my full name is {name}."),
                        format!("The account is under the name {name}."),
                    ]),
                },
                Need::Zip => match reg {
                    0 => zip.clone(),
                    1 => self.pick3([
                        format!("zip is {zip}"),
                        format!("it's {zip}"),
                        format!("zip code {zip}"),
                    ]),
                    _ => self.pick3([
                        format!("My zip code is {zip}."),
                        format!("Sure, the zip code is {zip}."),
                        format!("It is {zip}."),
                    ]),
                },
                Need::Email => {
                    let e = hard(f.email.as_deref().unwrap_or_default());
                    match reg {
                        0 => e,
                        1 => {
                            self.pick3([format!("it's {e}"), format!("my email is {e}"), e.clone()])
                        }
                        _ => self.pick3([
                            format!("My email address is {e}."),
                            format!("Sure, it is {e}."),
                            format!("You can use my email address, {e}."),
                        ]),
                    }
                }
                Need::UserId => {
                    let u = hard(f.user_id.as_deref().unwrap_or_default());
                    match reg {
                        0 => u,
                        1 => self.pick3([
                            format!("it's {u}"),
                            format!("my user id is {u}"),
                            u.clone(),
                        ]),
                        _ => self.pick3([
                            format!("My user ID is {u}."),
                            format!("Sure, my user ID is {u}."),
                            format!("Of course, it is {u}."),
                        ]),
                    }
                }
                Need::OrderId | Need::ReservationId => {
                    let ids = if n == Need::OrderId {
                        &f.order_ids
                    } else {
                        &f.reservation_ids
                    };
                    let list = ids
                        .iter()
                        .map(|x| hard(x))
                        .collect::<Vec<_>>()
                        .join(" and ");
                    let what = if n == Need::OrderId {
                        "order number"
                    } else {
                        "reservation number"
                    };
                    match reg {
                        0 => list,
                        1 => self.pick3([
                            format!("it's {list}"),
                            format!("{what} is {list}"),
                            list.clone(),
                        ]),
                        _ => self.pick3([
                            format!("The {what} is {list}."),
                            format!("Sure, it is {list}."),
                            format!("Of course, the {what} is {list}."),
                        ]),
                    }
                }
                Need::Payment => {
                    let hint = f.payment_hints.first().cloned();
                    match (hint, reg) {
                        (Some(h), 0) => h,
                        (Some(h), 1) => format!("use my {h}"),
                        (Some(h), _) => format!("I would like to use my {h}, please."),
                        (None, 0) => "card on file".into(),
                        (None, 1) => "just use the original payment method".into(),
                        (None, _) => "Please use the original payment method on my account.".into(),
                    }
                }
            };
            parts.push(text);
        }
        // What it does not know.
        let missing: Vec<Need> = needs.iter().copied().filter(|n| !has(*n)).collect();
        for n in &missing {
            let what = match n {
                Need::Name => "name",
                Need::Zip => "zip code",
                Need::Email => "email",
                Need::UserId => "user id",
                Need::OrderId => "order number",
                Need::ReservationId => "reservation number",
                Need::Payment => continue,
            };
            parts.push(match reg {
                0 => format!("dont know the {what}"),
                1 => format!("i don't remember my {what}"),
                _ => format!("I'm afraid I don't remember my {what}."),
            });
        }
        if !missing.is_empty() && give.is_empty() && !s.incremental {
            // offer what it has instead, as τ² users do
            let known_already =
                self.revealed[Need::Name as usize] && self.revealed[Need::Zip as usize];
            let alt = if !needs.contains(&Need::Name)
                && !known_already
                && f.full_name().is_some()
                && f.zip.is_some()
            {
                Some(match reg {
                    0 => format!("{name} {zip}"),
                    1 => format!("but i'm {name}, zip {zip}"),
                    _ => format!("However, my name is {name} and my zip code is {zip}."),
                })
            } else if !needs.contains(&Need::UserId)
                && !self.revealed[Need::UserId as usize]
                && f.user_id.is_some()
                && missing
                    .iter()
                    .any(|n| matches!(n, Need::Email | Need::Name | Need::Zip))
            {
                let u = hard(f.user_id.as_deref().unwrap_or_default());
                Some(match reg {
                    0 => u,
                    1 => format!("my user id is {u} though"),
                    _ => format!("However, my user ID is {u}."),
                })
            } else {
                None
            };
            parts.extend(alt);
        }
        let hedged = if k.active {
            k.hedge > 0.0 && self.p(k.hedge)
        } else {
            s.ambiguous && self.p(0.7)
        };
        if hedged && !parts.is_empty() {
            let (pre, post) = [
                ("hmm, ", ""),
                ("", ", i think"),
                ("", " i think?"),
                ("", ", if i remember correctly"),
                ("umm ", "... maybe"),
            ][self.rng.random_range(0..5usize)];
            parts[0] = format!("{pre}{}{post}", parts[0]);
        }
        if parts.is_empty() {
            parts.push(match reg {
                0 => "idk".into(),
                1 => "not sure what you need".into(),
                _ => "I'm not sure what you need from me, could you clarify?".into(),
            });
        }
        self.maybe_detail(&mut parts, 0.5);
        parts
    }

    fn pick3(&mut self, xs: [String; 3]) -> String {
        let i = self.rng.random_range(0..3usize);
        xs.into_iter().nth(i).unwrap_or_default()
    }

    /// Attach the next unsaid request detail.
    fn maybe_detail(&mut self, parts: &mut Vec<String>, prob: f64) {
        let s = self.style;
        if s.incremental
            || self.play.reactive
            || self.details.is_empty()
            || !self.p(if s.terse { prob * 0.4 } else { prob })
        {
            return;
        }
        let Some(d) = self.details.pop_front() else {
            return;
        };
        let body = if s.terse {
            self.short_clause(&d, true, false)
        } else {
            let d = self.vary(&d);
            lower_first(&d)
        };
        let lead = if s.ambiguous {
            self.pick(&["oh and maybe ", "also i think ", "oh, and "])
        } else if s.terse {
            self.pick(&["also ", "and ", ""])
        } else {
            self.pick(&["Also, ", "Oh, and ", "One more thing: "])
        };
        parts.push(self.mark_ids(&format!("{lead}{body}")));
    }

    /// A text persona's reply to a confirmation question: a doubt, a request to verify or a
    /// question back on the first ask (as its mechanics say), else a yes — one word, restating
    /// the proposal, or in its register. The second ask of the same action is always a yes.
    fn text_confirm(&mut self) -> Vec<String> {
        let (s, k) = (self.style, self.play);
        let first_ask = self.confirm_streak == 1;
        if first_ask && !k.prompt_yes {
            // "once" doubts half of the proposals, "repeatedly" / "every proposal" nearly all
            let doubt = [0.5, 0.5, 0.7, 0.9][k.pushback.min(3) as usize];
            if self.pushbacks_left > 0 && self.p(doubt) {
                self.pushbacks_left -= 1;
                let t = if s.terse {
                    self.pick(&[
                        "are you sure?",
                        "are you sure thats right",
                        "hmm are you sure",
                    ])
                } else {
                    self.pick(&[
                        "are you sure that's right?",
                        "hmm, that doesn't seem right. can you check it again?",
                        "are you certain? i don't think that's what i asked for",
                    ])
                };
                return vec![t.to_string()];
            }
            if k.verify > 0.0 && self.p(k.verify * 0.6) {
                let t = self.pick(&[
                    "before i say yes, can you read the details back to me?",
                    "can you double-check that first?",
                    "how do you know that's the right one?",
                ]);
                return vec![t.to_string()];
            }
            if k.clarify > 0.0 && self.p(k.clarify * 0.5) {
                let t = self.pick(&[
                    "what do you mean?",
                    "wait, what exactly will happen?",
                    "which one do you mean?",
                ]);
                return vec![t.to_string()];
            }
        }
        if self.p(k.one_word) {
            let t = self.pick(&["yes", "yes", "yep", "ok", "sure", "yeah"]);
            return vec![t.to_string()];
        }
        let yes = if s.terse {
            self.pick(&["yes", "y", "ok", "yep", "yes go ahead", "sure", "yes pls"])
        } else if s.long() {
            self.pick(&[
                "Yes, that sounds perfect, please go ahead.",
                "Yes, please proceed with that. Thank you for taking care of it.",
                "Yes, that is correct, you can go ahead with it.",
                "Yes, that is exactly what I would like, so you can go ahead.",
            ])
        } else if k.no_restate {
            self.pick(&["yes", "yes go ahead", "ok go ahead", "yes please", "sure"])
        } else {
            self.pick(&[
                "yes please",
                "yes, go ahead",
                "yes that's right, go ahead",
                "ok, please do it",
                "sure, go ahead",
                "yes",
            ])
        };
        let mut parts = vec![yes.to_string()];
        if k.restate > 0.0 && self.p(k.restate) {
            if let Some(what) = proposal(&self.last_agent) {
                let r = if s.long() {
                    format!("So, to be clear, you will {what}.")
                } else {
                    format!("so you'll {what}")
                };
                parts.push(self.mark_ids(&r));
            }
        }
        parts
    }

    fn confirm(&mut self) -> Vec<String> {
        if self.play.active {
            return self.text_confirm();
        }
        let s = self.style;
        let first_ask = self.confirm_streak == 1;
        if first_ask && s.skeptical && s.terse && self.p(0.75) {
            let t = self.pick(&[
                "are you sure?",
                "are you sure thats right",
                "that's not right?",
                "hmm are you sure",
            ]);
            return vec![t.to_string()];
        }
        if first_ask && s.skeptical && self.p(0.75) {
            let obj = if self.facts.airline {
                "reservation"
            } else {
                "order"
            };
            return vec![match self.rng.random_range(0..4u8) {
                0 => "are you sure that's right?".to_string(),
                1 => "hmm that doesn't seem right. can you double check?".to_string(),
                2 => format!("wait, can you verify that's the correct {obj} first?"),
                _ => "are you certain? i want to be sure nothing else changes".to_string(),
            }];
        }
        if first_ask && s.ambiguous && self.p(0.35) {
            return vec![self
                .pick(&[
                    "what do you mean?",
                    "hmm, not sure i understand. what exactly will happen?",
                    "wait, which one do you mean?",
                ])
                .to_string()];
        }
        let text = if s.frustrated && s.terse && !s.polite {
            self.pick(&["fine", "yes", "ok fine", "yes just do it", "yes"])
        } else if s.frustrated && !s.polite {
            self.pick(&[
                "yes. just do it already",
                "fine, yes",
                "yes, finally",
                "yes. go ahead, this is taking forever",
                "yes",
                "ok fine",
                "yes, do it",
            ])
        } else if s.acknowledger && self.p(0.8) {
            self.pick(&["ok", "sure", "yes", "sounds good", "alright", "okay"])
        } else if s.terse {
            self.pick(&[
                "yes",
                "y",
                "ok",
                "k",
                "yep",
                "yes go ahead",
                "sure",
                "yes pls",
            ])
        } else if s.ambiguous && s.terse && self.p(0.5) {
            self.pick(&["yeah i guess", "ok i think", "yes i guess"])
        } else if s.ambiguous && self.p(0.6) {
            self.pick(&[
                "yes i guess",
                "i think so, yes",
                "yeah probably, go ahead",
                "ok i guess that's right",
            ])
        } else if s.skeptical && self.p(0.5) {
            self.pick(&[
                "ok, if you're certain. go ahead",
                "fine, go ahead. i'm absolutely sure that's what i want",
                "ok yes, but i'm definitely going to check it afterwards",
            ])
        } else if s.long() {
            self.pick(&[
                "Yes, that sounds perfect, please go ahead.",
                "Yes, please proceed with that. Thank you for taking care of it.",
                "Yes, that is correct, you can go ahead with it.",
                "Yes, I confirm. That is exactly what I wanted to do.",
                "Yes, that is exactly what I would like, so you can go ahead.",
                "Yes, that all sounds right to me, go ahead and proceed.",
            ])
        } else {
            self.pick(&[
                "yes please",
                "yes, go ahead",
                "yes that's right, go ahead",
                "ok, please do it",
                "sure, go ahead",
                "yes",
            ])
        };
        let mut parts = vec![text.to_string()];
        if s.easy && self.p(0.6) {
            parts.push(
                self.pick(&[
                    "That is exactly what I was hoping for, to be honest.",
                    "I am glad this can be sorted out so easily.",
                    "That makes sense to me and it matches what I had in mind.",
                ])
                .to_string(),
            );
        }
        parts
    }

    /// Pick one of the offered options (the first: the one matching the request).
    fn choose(&mut self) -> Vec<String> {
        let s = self.style;
        let t = if s.frustrated && !s.polite && self.p(0.6) {
            self.pick(&[
                "the first one. whatever",
                "1. just do it",
                "first one obviously",
            ])
        } else if s.terse || (s.acknowledger && self.p(0.5)) {
            self.pick(&[
                "1",
                "first",
                "the first one",
                "1 pls",
                "first one",
                "option 1",
            ])
        } else if s.ambiguous && self.p(0.6) {
            self.pick(&[
                "hmm maybe the first one?",
                "i guess the first one",
                "not sure... the first?",
            ])
        } else if s.skeptical && self.p(0.5) {
            "are those really the only options? the first one then"
        } else if s.long() {
            self.pick(&[
                "I would like the first option, please, since it matches what I asked for.",
                "The first option sounds perfect to me, thank you for finding it.",
                "I will go with option 1, as it is exactly what I was looking for.",
            ])
        } else {
            self.pick(&[
                "the first one",
                "first one please",
                "option 1",
                "the first one sounds good",
            ])
        };
        vec![t.to_string()]
    }

    fn ack(&mut self) -> Vec<String> {
        let s = self.style;
        let ack_only = if self.play.active {
            let p = self.play.ack.max(if s.terse { 0.5 } else { 0.0 });
            p > 0.0 && self.p(p) && (self.details.is_empty() || self.play.reactive || self.p(0.6))
        } else {
            (s.terse || s.acknowledger)
                && (!s.frustrated || self.p(0.5))
                && (self.details.is_empty() || self.p(0.6))
        };
        if ack_only {
            return vec![self
                .pick(&[
                    "ok", "okay", "k", "got it", "alright", "ok", "thanks", "cool",
                ])
                .to_string()];
        }
        let mut parts = Vec::new();
        self.maybe_detail(&mut parts, 0.8);
        if parts.is_empty() && s.frustrated && !s.polite {
            parts.push(
                self.pick(&["ok", "fine", "whatever", "finally", "ok and?"])
                    .to_string(),
            );
        }
        if parts.is_empty() {
            parts.push(
                if s.long() {
                    self.pick(&[
                    "Thank you, I appreciate you looking into this for me. Please take your time.",
                    "That sounds good, I will wait while you check on that for me.",
                    "Great, that is good to hear. Let me know what you find out about it.",
                    "Okay, that makes sense. I will wait for the details while you look into it.",
                ])
                } else {
                    self.pick(&[
                        "ok thanks",
                        "great",
                        "ok",
                        "sounds good",
                        "alright, thank you",
                        "ok cool",
                    ])
                }
                .to_string(),
            );
        }
        parts
    }

    /// A text persona's closing: bare without sign-offs, curt after a rough conversation when
    /// it blames or is emotional, else in its register.
    fn text_closing(&mut self, refused: bool) -> Vec<String> {
        let (s, k) = (self.style, self.play);
        let rough =
            self.friction > 0 && (k.blame > 0.3 || (k.emotion >= 0.6 && k.arc != Arc::Guarded));
        let text = if rough && k.blame > 0.3 && self.p(k.blame) {
            if refused {
                self.pick(&[
                    "this is useless. forget it",
                    "unbelievable. terrible service",
                ])
            } else {
                self.pick(&[
                    "no. this took way too long",
                    "no. worst support ever",
                    "no. that was a waste of time",
                ])
            }
        } else if rough && self.p(k.emotion) {
            self.pick(&[
                "no. that was frustrating",
                "no. finally",
                "no, that's all. that took forever",
            ])
        } else if k.greeting == Some(false) || s.terse {
            self.pick(&[
                "no",
                "nope",
                "no thats all",
                "that's it",
                "no, that's all",
                "no",
            ])
        } else if s.long() {
            if refused {
                self.pick(&[
                    "I see, I understand. Thank you for checking. That will be all for today.",
                    "That is unfortunate, however I understand. Have a nice day.",
                ])
            } else {
                self.pick(&[
                    "No, that will be all. Thank you so much for your help today!",
                    "No, that's everything I needed. Thank you for your patience. Have a wonderful day!",
                ])
            }
        } else if refused {
            self.pick(&[
                "oh ok. no that's it",
                "hm ok, no thanks",
                "ok, that's all then",
            ])
        } else {
            self.pick(&[
                "no that's all, thanks",
                "nope, that's it. thanks",
                "no, thank you",
                "no thanks",
                "that's it, thanks",
            ])
        };
        vec![text.to_string()]
    }

    fn closing(&mut self, refused: bool) -> Vec<String> {
        if self.play.active {
            return self.text_closing(refused);
        }
        let s = self.style;
        let text = if s.frustrated && s.terse {
            if refused {
                self.pick(&["useless", "forget it", "ridiculous"])
            } else {
                self.pick(&["no", "no. finally", "no. took forever", "no"])
            }
        } else if s.frustrated {
            if refused {
                self.pick(&[
                    "this is ridiculous. forget it",
                    "unbelievable. useless",
                    "no. this was a waste of time",
                ])
            } else {
                self.pick(&[
                    "no. this took way too long",
                    "no. that was ridiculous",
                    "no. worst support ever",
                    "no, just do your job faster next time",
                ])
            }
        } else if s.terse || (s.acknowledger && self.p(0.7)) {
            self.pick(&[
                "no",
                "nope",
                "no thx",
                "thats all",
                "no that's it",
                "",
                "no",
                "thanks",
            ])
        } else if refused && s.skeptical {
            "no. i still don't think that's right, but ok"
        } else if s.emotional && self.p(0.6) {
            self.pick(&[
                "no, thank you. i was really worried about this, so i'm relieved",
                "no, that's all. honestly i was so stressed about this",
            ])
        } else if s.long() {
            if refused {
                self.pick(&["I see, I understand. Thank you for checking, I appreciate your time. That will be all for today.", "That is unfortunate, however I understand. Thank you for explaining the policy to me. Have a nice day."])
            } else {
                self.pick(&[
                    "No, that will be all. Thank you so much for your help today, I really appreciate it!",
                    "No, that's everything I needed. Thank you very much for your patience and assistance. Have a wonderful day!",
                    "That is all for today. Thank you again for your excellent help, you have been wonderful!",
                    "No, thank you. You have been extremely helpful, and I appreciate you resolving this so quickly. Have a great day!",
                ])
            }
        } else if refused {
            self.pick(&[
                "oh ok. no that's it",
                "hm ok, no thanks",
                "ok, that's all then",
            ])
        } else {
            self.pick(&[
                "no that's all, thanks",
                "nope, that's it. thanks",
                "no, thank you",
                "no thanks",
                "that's it, thanks",
            ])
        };
        vec![text.to_string()]
    }

    fn restate(&mut self) -> Vec<String> {
        let s = self.style;
        if !self.request_said {
            self.request_said = true;
            let first = self
                .details
                .pop_front()
                .unwrap_or_else(|| self.facts.request[0].clone());
            let first = self.vary(&first);
            return vec![if s.terse {
                let keep = self.p(0.5);
                self.short_clause(&first, keep, true)
            } else if s.incremental || s.ambiguous {
                self.strip_ids(&first)
            } else {
                self.mark_ids(&first)
            }];
        }
        let first = self.facts.request[0].clone();
        let told = if self.play.active {
            self.play.already > 0.0 && self.p(self.play.already)
        } else {
            s.frustrated || s.skeptical
        };
        let lead = if told {
            self.pick(&["like i said, ", "as i said, ", "i already told you, "])
        } else if s.long() {
            "To recap, "
        } else {
            ""
        };
        let body = if s.terse {
            self.short_clause(&first, true, false)
        } else {
            lower_first(&self.mark_ids(&first))
        };
        vec![format!("{lead}{body}")]
    }

    /// Answer an open question about the request: the next unsaid detail, else the request again.
    fn explain(&mut self) -> Vec<String> {
        let s = self.style;
        let mut parts = Vec::new();
        if !self.details.is_empty() {
            let d = self.details.pop_front().unwrap_or_default();
            let body = if s.terse {
                self.short_clause(&d, true, false)
            } else {
                self.vary(&d)
            };
            parts.push(self.mark_ids(&body));
            return parts;
        }
        let n = self.facts.request.len();
        let i = self.rng.random_range(0..n.max(1)).min(n.saturating_sub(1));
        let sentence = self.facts.request.get(i).cloned().unwrap_or_default();
        let body = if s.terse {
            self.short_clause(&sentence, true, false)
        } else {
            let v = self.vary(&sentence);
            lower_first(&self.mark_ids(&v))
        };
        let told = if self.play.active {
            self.play.already > 0.0 && self.p(self.play.already)
        } else {
            s.frustrated || s.skeptical
        };
        let lead = if s.long() && !self.play.no_restate {
            self.pick(&["Of course! ", "Sure, to recap: ", "Certainly. "])
        } else if told {
            self.pick(&["like i said, ", "i already told you, ", "as i said, "])
        } else {
            self.pick(&["", "well, ", "basically "])
        };
        parts.push(format!("{lead}{body}"));
        parts
    }

    /// A text persona's reaction to a refusal: push back (while it has pushbacks left), pivot
    /// to another option, repeat its demand, a light remark when calm, or accept it.
    fn text_refusal(&mut self) -> Vec<String> {
        let (s, k) = (self.style, self.play);
        if self.pushbacks_left > 0 && !k.accept {
            self.pushbacks_left -= 1;
            let t = if s.terse {
                self.pick(&["are you sure?", "thats not right", "says who?"])
            } else {
                self.pick(&[
                    "are you sure? that doesn't seem right",
                    "that's not right. which rule says that?",
                    "i don't think that's right, can you check again?",
                ])
            };
            return vec![t.to_string()];
        }
        if k.pivot > 0.0 && self.p(k.pivot) {
            let t = if s.terse {
                self.pick(&[
                    "ok what about another option",
                    "how about something else then",
                ])
            } else {
                self.pick(&[
                    "ok, in that case is there another option?",
                    "how about another way to do it instead?",
                    "alright, what other options do i have then?",
                ])
            };
            return vec![t.to_string()];
        }
        if self.repeats_left > 0 {
            self.repeats_left -= 1;
            return vec![self.demand.clone()];
        }
        if k.calm && k.mild && self.p(0.4) {
            let t = self.pick(&["that's a bit annoying, but ok", "hm, that's a shame. ok"]);
            return vec![t.to_string()];
        }
        let t = if s.long() {
            self.pick(&[
                "I see, I understand. Thank you for checking on that for me.",
                "That is unfortunate; however, I understand the policy.",
            ])
        } else {
            self.pick(&["oh ok", "hm, ok", "ok i see", "ok"])
        };
        vec![t.to_string()]
    }

    fn refusal(&mut self) -> Vec<String> {
        if self.play.active {
            return self.text_refusal();
        }
        let s = self.style;
        vec![if s.frustrated {
            self.demand.clone()
        } else if s.skeptical {
            self.pick(&[
                "are you sure? that doesn't seem right",
                "that's not right. can you check again?",
            ])
            .to_string()
        } else if s.ambiguous {
            self.pick(&[
                "oh. hmm, i'm not sure what to do then",
                "maybe there's another way? i don't know",
            ])
            .to_string()
        } else if s.long() {
            self.pick(&[
                "I see, I understand. Thank you for checking on that for me.",
                "That is unfortunate; however, I understand the policy.",
            ])
            .to_string()
        } else {
            self.pick(&["oh ok", "hm, ok", "ok i see"]).to_string()
        }]
    }

    // -----------------------------------------------------------------------------------------
    // Style

    /// How likely the persona's emotion shows in this message, from its strength and arc.
    fn emotion_now(&self, kind: Kind) -> f64 {
        let k = self.play;
        if k.emotion <= 0.0 || kind == Kind::Closing {
            return 0.0;
        }
        let since = |t: Option<u32>| t.map(|t| self.turns.saturating_sub(t));
        let factor = match k.arc {
            Arc::Steady => 0.45,
            Arc::Start => {
                if self.turns <= 2 {
                    1.0
                } else {
                    0.2
                }
            }
            Arc::Guarded => 0.0, // guarded shows as wariness, not emotion words
            Arc::OnRefusal(n) => {
                if since(self.setback_turn).is_some_and(|d| d < n) {
                    1.0
                } else {
                    0.0
                }
            }
            Arc::Escalate => (0.1 + 0.3 * self.friction as f64).min(1.0),
            Arc::Progress => {
                let stall = since(self.setback_turn).is_some_and(|d| d <= 1);
                let moving = since(self.progress_turn).is_some_and(|d| d <= 1);
                if stall {
                    0.9
                } else if moving {
                    0.0
                } else {
                    0.2
                }
            }
        };
        k.emotion * factor
    }

    /// Decorations of a text persona's message, each with the probability its mechanics state.
    fn decorate_text(&mut self, mut parts: Vec<String>, kind: Kind) -> Vec<String> {
        let (s, k) = (self.style, self.play);
        let bare =
            (kind == Kind::Ack && parts.len() == 1 && parts[0].split_whitespace().count() <= 2)
                || (s.terse
                    && matches!(kind, Kind::Ack | Kind::Confirm | Kind::Closing)
                    && self.p(0.5))
                || parts.iter().all(|p| p.is_empty());
        if bare {
            return parts;
        }
        let stalled = self
            .setback_turn
            .is_some_and(|t| self.turns.saturating_sub(t) <= 1);
        let pe = self.emotion_now(kind);
        if pe > 0.0 && self.p(pe) {
            let e = if k.emotion >= 0.75 {
                self.pick(&[
                    "this is ridiculous.",
                    "i'm really frustrated right now.",
                    "seriously?",
                    "come on.",
                    "this is taking forever.",
                ])
            } else if k.emotion >= 0.45 {
                self.pick(&[
                    "this is frustrating.",
                    "i'm pretty annoyed about this.",
                    "honestly i'm stressed about it.",
                    "ugh.",
                ])
            } else {
                self.pick(&[
                    "this is a bit annoying.",
                    "i'm a little stressed about this.",
                    "honestly it's a bit frustrating.",
                ])
            };
            if kind == Kind::Opening || stalled {
                parts.insert(0, e.to_string());
            } else {
                parts.push(e.to_string());
            }
        }
        if k.arc == Arc::Guarded
            && self.steps_done == 0
            && k.emotion > 0.0
            && self.turns <= 4
            && self.p(k.emotion)
        {
            let g = self.pick(&["hmm ok.", "ok... let's see.", "hm, alright."]);
            parts.insert(0, g.to_string());
        }
        if k.blame > 0.0
            && kind != Kind::Confirm
            && self.p(k.blame * if stalled { 0.8 } else { 0.3 })
        {
            let a = if kind == Kind::Opening {
                self.pick(&[
                    "this is not the first time your company messed this up.",
                    "your system keeps getting this wrong.",
                ])
            } else {
                self.pick(&[
                    "this is useless.",
                    "terrible service.",
                    "you're not helping.",
                    "this is unacceptable.",
                ])
            };
            parts.push(a.to_string());
        }
        if k.commands > 0.0 && stalled && kind != Kind::Closing && self.p(k.commands) {
            let c = self.pick(&["just fix it.", "do it now.", "just do it."]);
            parts.push(c.to_string());
        }
        if self.repeats_left > 0
            && stalled
            && kind != Kind::Closing
            && !parts.iter().any(|p| p.contains(&self.demand))
        {
            self.repeats_left -= 1;
            parts.push(self.demand.clone());
        }
        if k.impatient > 0.0 && kind != Kind::Closing && self.p(k.impatient * 0.5) {
            let t = if s.terse {
                self.pick(&["any update?", "how long?", "asap pls"])
            } else {
                self.pick(&[
                    "any update?",
                    "how long will this take?",
                    "i need this done soon.",
                    "what is the status?",
                ])
            };
            parts.push(t.to_string());
        }
        if k.verify > 0.0 && matches!(kind, Kind::Ack | Kind::Other) && self.p(k.verify * 0.4) {
            let t = self.pick(&[
                "can you double-check that?",
                "how do you know that's correct?",
                "i read something different online, can you verify?",
            ]);
            parts.push(t.to_string());
        }
        if k.certainty > 0.0 && kind == Kind::Answer && self.p(k.certainty * 0.5) {
            let t = self.pick(&["i'm sure about that.", "that's definitely right."]);
            parts.push(t.to_string());
        }
        if k.hedge > 0.0 && matches!(kind, Kind::Other | Kind::Opening) && self.p(k.hedge * 0.5) {
            let t = if s.terse {
                self.pick(&["i think", "maybe"])
            } else {
                self.pick(&["i think.", "maybe.", "not sure though."])
            };
            parts.push(t.to_string());
        }
        if k.long > 0.0 && kind != Kind::Closing && self.p(k.long * 0.85) {
            let t = self.pick(&[
                "I have been a customer for quite a few years now, so I was surprised to have to contact support about this at all.",
                "To give you a bit more background, I have been meaning to sort this out for a while but kept putting it off because of work.",
                "It has been a really busy couple of weeks for me, so I would love to get this resolved today if possible.",
                "I hope that makes sense, I am trying to give you the details you might need.",
            ]);
            parts.push(t.to_string());
        }
        if k.formal > 0.0 && kind != Kind::Closing && self.p(k.formal * 0.85) {
            let t = self.pick(&[
                "However, I would appreciate a brief confirmation once it is done.",
                "Furthermore, I would like this handled promptly.",
                "Additionally, please let me know if anything further is required.",
            ]);
            parts.push(t.to_string());
        }
        let joined = parts.join(" ").to_lowercase();
        let polite_already =
            re!(r"\b(?:please|pls|thanks?|thank you|thx|ty|appreciate|grateful|sorry)\b")
                .is_match(&joined);
        let p_polite = k.polite.unwrap_or_else(|| s.p_polite());
        if !polite_already && self.p(p_polite) {
            let t = if s.terse {
                self.pick(&["thx", "pls", "ty"])
            } else if s.long() || p_polite > 0.6 {
                self.pick(&[
                    "Thank you so much.",
                    "Thank you!",
                    "I really appreciate your help.",
                    "Thanks in advance.",
                ])
            } else {
                self.pick(&["thanks", "thank you", "please", "thanks!"])
            };
            parts.push(t.to_string());
        }
        parts
    }

    fn decorate(&mut self, mut parts: Vec<String>, kind: Kind) -> Vec<String> {
        if self.play.active {
            return self.decorate_text(parts, kind);
        }
        let s = self.style;
        let bare = (kind == Kind::Ack && (s.terse || s.acknowledger) && !s.frustrated)
            || (s.terse
                && matches!(kind, Kind::Ack | Kind::Confirm | Kind::Closing)
                && self.p(0.5))
            || parts.iter().all(|p| p.is_empty());
        if bare {
            return parts;
        }
        if s.frustrated && s.terse {
            if self.p(0.35) {
                let e = self.pick(&["ugh", "come on", "seriously?", "ugh.", "ridiculous"]);
                parts.insert(0, e.to_string());
            }
            if self.p(0.15) {
                let a = self.pick(&["useless", "terrible", "do your job"]);
                parts.push(a.to_string());
            }
            if kind != Kind::Closing
                && !parts.iter().any(|p| p.contains(&self.demand))
                && self.p(0.65)
            {
                parts.push(self.demand.clone());
            }
        } else if s.frustrated {
            if self.p(0.6) {
                let e = self.pick(&[
                    "ugh.",
                    "this is ridiculous.",
                    "come on.",
                    "i'm so frustrated right now.",
                    "seriously?",
                    "this is taking forever.",
                    "unbelievable.",
                ]);
                parts.insert(0, e.to_string());
            }
            if self.p(0.35) {
                let a = self.pick(&[
                    "you're not helping.",
                    "this is useless.",
                    "terrible service.",
                    "just do your job.",
                    "this is unacceptable.",
                ]);
                parts.push(a.to_string());
            }
            if kind != Kind::Closing
                && !parts.iter().any(|p| p.contains(&self.demand))
                && self.p(0.9)
            {
                parts.push(self.demand.clone());
            }
        }
        if s.emotional && kind != Kind::Closing && self.p(0.55) {
            let e = if s.terse {
                self.pick(&[
                    "so stressed",
                    "really worried",
                    "im upset",
                    "disappointed tbh",
                ])
            } else {
                self.pick(&[
                    "i'm really worried about this.",
                    "honestly i'm pretty stressed about it.",
                    "i was so disappointed when this happened.",
                    "this has me a bit anxious.",
                    "i'm upset about the whole thing, to be honest.",
                ])
            };
            parts.push(e.to_string());
        }
        let said_yes = kind != Kind::Confirm
            || parts
                .first()
                .is_some_and(|p| classify_answer(&unmark(p)) == Answer::Yes);
        if !said_yes {
            // a doubt or a question back stays as it is
        } else if s.skeptical && s.terse && self.p(0.55) {
            let k = match kind {
                Kind::Opening => {
                    self.pick(&["want it verified this time", "and i'm sure about it"])
                }
                Kind::Answer => self.pick(&[
                    "are you sure you need that?",
                    "definitely correct",
                    "are you sure?",
                ]),
                Kind::Ack | Kind::Other => {
                    self.pick(&["are you sure?", "that's not right", "check again"])
                }
                Kind::Closing => self.pick(&["are you sure it went through?", "will check myself"]),
                Kind::Confirm => self.pick(&["i'm sure", "definitely"]),
            };
            parts.push(k.to_string());
        } else if s.skeptical && !s.terse && self.p(0.6) {
            let k = match kind {
                Kind::Opening => self.pick(&["last time i was told it was sorted and that's not true, so i want this verified.", "i'm absolutely sure about the details.", "are you sure you can even do this? last time nobody could."]),
                Kind::Answer => self.pick(&["are you sure you need that?", "are you sure you have the right account?", "that's definitely correct, i checked.", "can you verify it matches what you see?"]),
                Kind::Ack | Kind::Other => self.pick(&["are you sure?", "hmm, that doesn't seem right.", "can you check that again?", "are you sure you're looking at the right one?"]),
                Kind::Closing => self.pick(&["are you sure it actually went through? i'll be checking my account.", "i'm going to verify this myself later.", "are you sure that's everything? ok."]),
                Kind::Confirm => self.pick(&["i'm sure that's what i want.", "and can you confirm nothing else changes?"]),
            };
            parts.push(k.to_string());
        }
        if s.impatient && kind != Kind::Closing && self.p(0.6) {
            let k = if s.terse {
                self.pick(&[
                    "any update?",
                    "when will it be done?",
                    "can you check faster",
                    "asap pls",
                ])
            } else {
                self.pick(&[
                    "any update?",
                    "when will this be done?",
                    "can you check faster please?",
                    "i need this done in the next 10 minutes.",
                    "what is the status?",
                ])
            };
            parts.push(k.to_string());
        }
        if s.ambiguous
            && matches!(kind, Kind::Ack | Kind::Other | Kind::Opening)
            && self.p(if s.terse { 0.3 } else { 0.5 })
        {
            let k = if s.terse {
                self.pick(&["i think", "maybe", "idk"])
            } else {
                self.pick(&[
                    "i think.",
                    "maybe.",
                    "not sure though...",
                    "or something like that, i guess",
                ])
            };
            parts.push(k.to_string());
        }
        if s.verbose && !s.terse && kind != Kind::Closing && self.p(0.85) {
            let k = self.pick(&[
                "I have been a customer for quite a few years now, so I was surprised to have to contact support about this at all.",
                "I just want to make sure everything is handled correctly this time, because I have had a few issues in the past with similar things.",
                "To give you a bit more background, I have been meaning to sort this out for a while but kept putting it off because of work and family.",
                "I hope that makes sense, I am trying to give you all the details you might need so that we do not have to go back and forth too much.",
                "It has been a really busy couple of weeks for me, so I would love to get this resolved today if at all possible.",
            ]);
            parts.push(k.to_string());
        } else if s.easy && kind != Kind::Closing && self.p(0.35) {
            let k = self.pick(&[
                "I hope that all makes sense.",
                "I just want to make sure everything is handled correctly.",
                "Let me know if you need any additional information from me.",
                "I hope this is something you can take care of today.",
            ]);
            parts.push(k.to_string());
        }
        if kind != Kind::Closing && self.p(self.style.p_formal()) {
            let k = self.pick(&[
                "However, I would appreciate a brief confirmation once it is done.",
                "Furthermore, I would like this handled promptly.",
                "Regarding my account, the details above should be sufficient.",
                "Additionally, please let me know if anything further is required.",
                "With regard to my request, accuracy is important to me.",
            ]);
            parts.push(k.to_string());
        }
        let joined = parts.join(" ").to_lowercase();
        let polite_already =
            re!(r"\b(?:please|pls|thanks?|thank you|thx|ty|appreciate|grateful|sorry)\b")
                .is_match(&joined);
        if !polite_already && self.p(self.style.p_polite()) {
            let k = if s.terse {
                self.pick(&["thx", "pls", "ty"])
            } else if s.long() || s.polite {
                self.pick(&[
                    "Thank you so much.",
                    "Thank you!",
                    "I really appreciate your help.",
                    "Thanks in advance.",
                    "Sorry for the trouble, and thank you.",
                    "Thank you for your patience.",
                ])
            } else {
                self.pick(&["thanks", "thank you", "please", "thanks!"])
            };
            parts.push(k.to_string());
        }
        parts
    }

    fn surface(&mut self, parts: &[String]) -> String {
        let s = self.style;
        let parts: Vec<&String> = parts.iter().filter(|p| !p.trim().is_empty()).collect();
        let mut t = String::new();
        for (i, p) in parts.iter().enumerate() {
            t.push_str(p.trim());
            if i + 1 < parts.len() {
                let end = unmark(p);
                if !end.ends_with(['.', '!', '?', ',', ':', ';']) {
                    t.push(if s.terse && self.rng.random_bool(0.5) {
                        ','
                    } else {
                        '.'
                    });
                }
                t.push(' ');
            }
        }
        if s.terse {
            t = drop_articles(&t, &mut self.rng);
            if self.p(0.6) {
                t = t.trim_end_matches('.').to_string();
            }
        }
        let k = self.play;
        let lower = if k.active {
            k.lowercase > 0.0 && self.p(k.lowercase)
        } else {
            s.lowercase
                || (s.terse && self.p(0.75))
                || (s.frustrated && self.p(0.4))
                || (s.typos && self.p(0.3))
        };
        if lower {
            t = lowercase(&t);
        }
        if s.formal {
            for (a, b) in [
                ("I'm ", "I am "),
                ("don't ", "do not "),
                ("that's ", "that is "),
                ("it's ", "it is "),
                ("can't ", "cannot "),
                ("I'd ", "I would "),
                ("I've ", "I have "),
                ("won't ", "will not "),
            ] {
                t = t.replace(a, b);
            }
        }
        if s.typos {
            t = typos(&t, 0.13, &mut self.rng);
        }
        if k.active {
            if k.typos > 0.0 {
                t = typos(&t, k.typos, &mut self.rng);
            }
            if k.punct > 0.0 && self.p(k.punct) {
                t = t.replace(", ", " ");
                t = t.trim_end_matches(['.', '?']).to_string();
            }
            if k.trail > 0.0 && self.p(k.trail * 0.6) {
                t = format!("{}...", t.trim_end_matches(['.', '?', '!', ',']));
            } else if k.exclaim > 0.0 && self.p(k.exclaim * 0.5) {
                t = if self.p(0.3) {
                    format!("{} :)", t.trim_end_matches('.'))
                } else {
                    format!("{}!", t.trim_end_matches(['.', '!']))
                };
            }
        }
        unmark(&t)
    }

    fn finish(&mut self, parts: Vec<String>, kind: Kind) -> String {
        let core = parts.clone();
        let mut parts = self.decorate(parts, kind);
        if let Some(limit) = self.play.max_words {
            // a word limit drops decorations (never the content) until the message fits
            let words = |ps: &[String]| -> usize {
                ps.iter()
                    .map(|p| unmark(p).split_whitespace().count())
                    .sum()
            };
            while words(&parts) > limit as usize {
                let Some(i) = parts.iter().rposition(|p| !core.contains(p)) else {
                    break;
                };
                parts.remove(i);
            }
        }
        let text = self.surface(&parts);
        self.note_revealed(&text);
        text
    }

    fn note_revealed(&mut self, text: &str) {
        let f = &self.facts;
        let l = text.to_lowercase();
        let seen = |x: &Option<String>| x.as_ref().is_some_and(|v| l.contains(&v.to_lowercase()));
        self.revealed[Need::Name as usize] |= seen(&f.last_name);
        self.revealed[Need::Zip as usize] |= seen(&f.zip);
        self.revealed[Need::Email as usize] |= seen(&f.email);
        self.revealed[Need::UserId as usize] |= seen(&f.user_id);
        self.revealed[Need::OrderId as usize] |=
            f.order_ids.iter().any(|i| text.contains(i.as_str()));
        self.revealed[Need::ReservationId as usize] |=
            f.reservation_ids.iter().any(|i| text.contains(i.as_str()));
    }

    fn reply(&mut self, history: &[Turn]) -> UserReply {
        let agent = history
            .iter()
            .rev()
            .find(|t| t.role == Role::Assistant && !t.content.trim().is_empty())
            .map(|t| t.content.as_str())
            .unwrap_or("");
        self.turns += 1;
        let intent = detect(agent);
        let s = self.style;
        self.last_agent = agent.to_string();
        if re!(r"(?i)\b(?:done:|all set|has been (?:completed|cancelled|canceled|updated|booked|processed)|successfully)").is_match(agent) {
            self.steps_done += 1;
            self.progress_turn = Some(self.turns);
        }

        if self.turns > MAX_USER_TURNS {
            let text = self
                .pick(&["sorry, i have to go now.", "i need to go, bye"])
                .to_string();
            return stop(text, Termination::UserStop);
        }
        if intent.transfer {
            let text = if s.long() {
                "Thank you, I will wait for the next agent."
            } else if s.frustrated
                || (self.play.active && self.play.emotion >= 0.6 && self.friction > 0)
            {
                "finally"
            } else {
                self.pick(&["ok", "ok thanks", ""])
            };
            let text = self.surface(&[text.to_string()]);
            return stop(text, Termination::Transfer);
        }
        if self.turns == 1 {
            let parts = self.opening();
            let text = self.finish(parts, Kind::Opening);
            return UserReply { text, stop: None };
        }

        // Friction: the agent asks the same thing again, asks to confirm again, or refuses.
        self.confirm_streak = if intent.confirm {
            self.confirm_streak + 1
        } else {
            0
        };
        let repeated = !intent.needs.is_empty() && intent.needs == self.prev_needs;
        let waiting =
            !intent.question && intent.needs.is_empty() && !intent.anything_else && !intent.confirm;
        if repeated || waiting || self.confirm_streak >= 2 || intent.refusal {
            self.friction += 1;
            self.setback_turn = Some(self.turns);
        }
        self.prev_needs = intent.needs.clone();
        if let Some(limit) = self.play.give_up {
            if self.friction >= limit && self.give_up_checked < self.friction {
                self.give_up_checked = self.friction;
                if self.p(0.6) {
                    let t = if self.play.calm || self.play.emotion < 0.45 {
                        self.pick(&[
                            "ok, i'll leave it there then. bye",
                            "alright, i'll sort it out another time",
                        ])
                    } else {
                        self.pick(&[
                            "forget it. this is useless",
                            "forget it, i'll call instead",
                            "never mind. this is a waste of my time",
                        ])
                    };
                    let text = self.surface(&[t.to_string()]);
                    return stop(text, Termination::UserStop);
                }
            }
        }
        if s.frustrated && self.friction >= 2 && self.give_up_checked < self.friction {
            self.give_up_checked = self.friction;
            if self.p(0.2) {
                let parts = vec![self
                    .pick(&[
                        "forget it. this is useless",
                        "forget it, i'll call instead. terrible service",
                        "never mind. this is a waste of my time",
                    ])
                    .to_string()];
                let text = self.surface(&parts);
                return stop(text, Termination::UserStop);
            }
        }

        if intent.confirm {
            let parts = self.confirm();
            let mut text = self.finish(parts.clone(), Kind::Confirm);
            // A yes must read as a yes to the agent (decorations never turn it into a no).
            let meant_yes = classify_answer(&unmark(&parts[0])) == Answer::Yes;
            if meant_yes && classify_answer(&text) != Answer::Yes {
                text = self.surface(&parts[..1]);
            }
            return UserReply { text, stop: None };
        }
        if intent.choice && !intent.anything_else {
            let parts = self.choose();
            let text = self.finish(parts, Kind::Confirm);
            return UserReply { text, stop: None };
        }
        if !intent.needs.is_empty() && !intent.anything_else {
            let parts = self.answer(&intent.needs);
            let text = self.finish(parts, Kind::Answer);
            return UserReply { text, stop: None };
        }
        if intent.anything_else {
            let parts = self.closing(intent.refusal);
            let text = self.finish(parts, Kind::Closing);
            return stop(text, Termination::UserStop);
        }
        if intent.how_help {
            let parts = self.restate();
            let text = self.finish(parts, Kind::Other);
            return UserReply { text, stop: None };
        }
        if intent.refusal {
            let parts = self.refusal();
            let text = self.finish(parts, Kind::Other);
            return UserReply { text, stop: None };
        }
        if intent.question {
            let ask_back = if self.play.active {
                self.play.clarify > 0.0 && self.p(self.play.clarify * 0.6)
            } else {
                s.ambiguous && self.p(0.35)
            };
            if ask_back {
                let q = self
                    .pick(&[
                        "what do you mean?",
                        "hmm, what exactly do you need?",
                        "not sure i understand",
                    ])
                    .to_string();
                let text = self.finish(vec![q], Kind::Other);
                return UserReply { text, stop: None };
            }
            let parts = self.explain();
            let text = self.finish(parts, Kind::Answer);
            return UserReply { text, stop: None };
        }
        let parts = self.ack();
        let text = self.finish(parts, Kind::Ack);
        UserReply { text, stop: None }
    }
}

fn stop(text: String, why: Termination) -> UserReply {
    UserReply {
        text,
        stop: Some(why),
    }
}

/// What the agent proposes to do ("I will cancel reservation EHGLP3. Shall I proceed?" →
/// "cancel reservation EHGLP3"), for a user restating it.
fn proposal(agent: &str) -> Option<String> {
    let c = re!(r"(?i)\bI (?:will|would|can|'ll)\s+([^.?!]{5,120})").captures(agent)?;
    let what = c[1].trim().trim_end_matches(',').to_string();
    // never echo words that read as a refusal to the agent
    (!re!(r"(?i)\b(?:no|not|don't|cancel(?:led)? nothing|wait|verify|check)\b").is_match(&what))
        .then_some(what)
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) if !s.starts_with("I ") && !s.starts_with("I'") => {
            f.to_lowercase().chain(c).collect()
        }
        _ => s.to_string(),
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
    fn intents_are_detected() {
        let i =
            detect("To locate your account, could you please share your full name and zip code?");
        assert_eq!(i.needs, vec![Need::Name, Need::Zip]);
        assert!(!i.confirm);
        let i = detect("I will cancel order #W1234567. Shall I proceed? (yes/no)");
        assert!(i.confirm);
        let i = detect("Could you confirm your user id?");
        assert!(!i.confirm && i.needs == vec![Need::UserId]);
        let i =
            detect("Done: you will receive an email. Is there anything else I can help you with?");
        assert!(i.anything_else);
        assert!(detect("I'm transferring you to a human agent.").transfer);
        assert!(!detect("Would you like me to transfer you to a human agent?").transfer);
        assert!(detect("Hi! How can I help you today?").how_help);
    }

    #[test]
    fn ids_are_stripped_from_requests() {
        let u = ScriptedUser::new(&scenario(), &Map::new(), 1);
        assert_eq!(
            u.strip_ids(
                "I want to cancel reservations XEHM4B and 59XX6W because my trip was called off."
            ),
            "I want to cancel my reservations because my trip was called off."
        );
        assert_eq!(
            u.strip_ids("Cancel reservation XEHM4B."),
            "Cancel my reservation."
        );
        assert_eq!(u.strip_ids("XEHM4B"), "I need help with my reservation.");
    }

    #[test]
    fn short_clauses_keep_the_gist() {
        let mut u = ScriptedUser::new(&scenario(), &Map::new(), 1);
        let c = u.short_clause(
            "I want to cancel reservations XEHM4B and 59XX6W because my trip was called off.",
            true,
            false,
        );
        assert!(c.ends_with("cancel reservations XEHM4B and 59XX6W"), "{c}");
        let c = u.short_clause("I want a full refund for my ticket.", false, false);
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
                u.turns = 3;
                u.confirm_streak = 1; // the second ask of the same action: always a yes
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
