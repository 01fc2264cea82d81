//! What both scripted users share: the conversation state ([`Core`]: facts, style, random
//! stream, what was asked, revealed and said), the phrasing helpers (identifiers kept verbatim,
//! request sentences stripped or shortened), the turns both play alike (answering for
//! identifiers, choosing, acknowledging, restating, explaining), and rendering a message
//! (decorations, word limit, surface form). Where the two users differ, [`Core`] asks the
//! [`Voice`] it plays: [`AxisVoice`](super::axis_voice::AxisVoice) for axis placements and
//! plain users, [`TextVoice`](super::text_voice::TextVoice) for a persona's roleplay text.

use std::collections::VecDeque;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::facts::{re, Facts};
use super::intent::Need;
use super::style::{drop_articles, hard, lowercase, soft, typos, unmark, Style};

/// The kind of turn being rendered (drives which decorations apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Opening,
    Answer,
    Confirm,
    Ack,
    Closing,
    Other,
}

/// Where the axis-driven and the text-persona users differ: their own turns (opening,
/// confirming, closing, reacting to a refusal), their decorations, and the few choices inside
/// the shared turns. Each method draws from `c.rng` exactly as the user it belongs to.
pub(super) trait Voice {
    /// The first message.
    fn opening(&mut self, c: &mut Core) -> Vec<String>;
    /// The reply to a yes/no confirmation question.
    fn confirm(&mut self, c: &mut Core) -> Vec<String>;
    /// The reply to "anything else?" (the user then stops).
    fn closing(&mut self, c: &mut Core, refused: bool) -> Vec<String>;
    /// The reaction to a refusal.
    fn refusal(&mut self, c: &mut Core) -> Vec<String>;
    /// The decorations of a message of this `kind` around its content `parts`.
    fn decorate(&mut self, c: &mut Core, parts: Vec<String>, kind: Kind) -> Vec<String>;
    /// A stall instead of giving identifiers the agent asked for (`has`: the user knows it).
    fn withheld(
        &mut self,
        c: &mut Core,
        needs: &[Need],
        has: &dyn Fn(Need) -> bool,
    ) -> Option<String>;
    /// Whether a repeated answer starts with "like i said".
    fn told(&mut self, c: &mut Core) -> bool;
    /// Whether an answer is hedged.
    fn hedged(&mut self, c: &mut Core) -> bool;
    /// Whether a turn that only informs gets an acknowledgement only.
    fn ack_only(&mut self, c: &mut Core) -> bool;
    /// Whether an open question gets a question back.
    fn ask_back(&mut self, c: &mut Core) -> bool;
    /// Whether a message is lower-cased.
    fn lower(&mut self, c: &mut Core) -> bool;
    /// The last touches of a message's surface (typos, punctuation, trailing off).
    fn texture(&mut self, c: &mut Core, t: String) -> String;
    /// Whether the user is fed up when transferred.
    fn fed_up(&self, c: &Core) -> bool;
    /// The words of giving up after friction, when the user gives up now.
    fn give_up(&mut self, c: &mut Core) -> Option<&'static str>;
}

/// The state of a scripted user's conversation, and the turns both users play alike.
#[derive(Debug, Clone)]
pub(super) struct Core {
    pub facts: Facts,
    pub style: Style,
    pub rng: ChaCha8Rng,
    pub turns: u32,
    /// Request sentences not yet said.
    pub details: VecDeque<String>,
    pub request_said: bool,
    pub asked: [u32; 7],
    pub revealed: [bool; 7],
    pub friction: u32,
    pub prev_needs: Vec<Need>,
    pub confirm_streak: u32,
    pub demand: String,
    pub give_up_checked: u32,
    /// A persona text's word limit per message (none for axis-driven and plain users).
    pub max_words: Option<u32>,
    /// A persona text that never volunteers request details.
    pub reactive: bool,
    /// A persona text that replies without restating the agent.
    pub no_restate: bool,
    /// The user turn of the latest refusal or stall, and of the latest progress.
    pub setback_turn: Option<u32>,
    pub progress_turn: Option<u32>,
    /// Actions the agent completed so far.
    pub steps_done: u32,
    /// The agent's last message.
    pub last_agent: String,
}

impl Core {
    pub(super) fn p(&mut self, prob: f64) -> bool {
        self.rng.random_bool(prob.clamp(0.0, 1.0))
    }

    pub(super) fn pick(&mut self, xs: &[&'static str]) -> &'static str {
        xs[self.rng.random_range(0..xs.len())]
    }

    /// Say everything at once: the request with its identifiers, every detail left, and who
    /// the user is.
    pub(super) fn front_load(&mut self, parts: &mut Vec<String>, first: &str) {
        parts.push(self.mark_ids(first));
        while let Some(d) = self.details.pop_front() {
            let d = self.mark_ids(&d);
            parts.push(d);
        }
        parts.extend(self.identity_sentences());
    }

    /// Add the next unsaid detail, with its identifiers or without.
    pub(super) fn push_detail(&mut self, parts: &mut Vec<String>, keep_ids: bool) {
        if let Some(d) = self.details.pop_front() {
            parts.push(if keep_ids {
                self.mark_ids(&d)
            } else {
                self.strip_ids(&d)
            });
        }
    }

    /// The closing both users end on when nothing in their style says otherwise: resigned after
    /// a refusal, else a short thanks.
    pub(super) fn plain_closing(&mut self, refused: bool) -> &'static str {
        if refused {
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
        }
    }

    /// Wrap every identifier the user knows in `text` so transforms keep it verbatim.
    pub(super) fn mark_ids(&self, text: &str) -> String {
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
    pub(super) fn strip_ids(&self, text: &str) -> String {
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
    pub(super) fn vary(&mut self, s: &str) -> String {
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
    pub(super) fn short_clause(&mut self, sentence: &str, keep_ids: bool, opening: bool) -> String {
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

    pub(super) fn identity_sentences(&mut self) -> Vec<String> {
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

    /// Answer a request for identifiers.
    pub(super) fn answer(&mut self, v: &mut dyn Voice, needs: &[Need]) -> Vec<String> {
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
        if let Some(t) = v.withheld(self, needs, &has) {
            return vec![t];
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
        let told = already && v.told(self);
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
        let hedged = v.hedged(self);
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

    pub(super) fn pick3(&mut self, xs: [String; 3]) -> String {
        let i = self.rng.random_range(0..3usize);
        xs.into_iter().nth(i).unwrap_or_default()
    }

    /// Attach the next unsaid request detail.
    pub(super) fn maybe_detail(&mut self, parts: &mut Vec<String>, prob: f64) {
        let s = self.style;
        if s.incremental
            || self.reactive
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

    /// Pick one of the offered options (the first: the one matching the request).
    pub(super) fn choose(&mut self) -> Vec<String> {
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

    pub(super) fn ack(&mut self, v: &mut dyn Voice) -> Vec<String> {
        let s = self.style;
        if v.ack_only(self) {
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

    pub(super) fn restate(&mut self, v: &mut dyn Voice) -> Vec<String> {
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
        let told = v.told(self);
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
    pub(super) fn explain(&mut self, v: &mut dyn Voice) -> Vec<String> {
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
        let told = v.told(self);
        let lead = if s.long() && !self.no_restate {
            self.pick(&["Of course! ", "Sure, to recap: ", "Certainly. "])
        } else if told {
            self.pick(&["like i said, ", "i already told you, ", "as i said, "])
        } else {
            self.pick(&["", "well, ", "basically "])
        };
        parts.push(format!("{lead}{body}"));
        parts
    }

    pub(super) fn surface(&mut self, v: &mut dyn Voice, parts: &[String]) -> String {
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
        if v.lower(self) {
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
        let t = v.texture(self, t);
        unmark(&t)
    }

    pub(super) fn finish(&mut self, v: &mut dyn Voice, parts: Vec<String>, kind: Kind) -> String {
        let core = parts.clone();
        let mut parts = v.decorate(self, parts, kind);
        if let Some(limit) = self.max_words {
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
        let text = self.surface(v, &parts);
        self.note_revealed(&text);
        text
    }

    pub(super) fn note_revealed(&mut self, text: &str) {
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
}

pub(super) fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) if !s.starts_with("I ") && !s.starts_with("I'") => {
            f.to_lowercase().chain(c).collect()
        }
        _ => s.to_string(),
    }
}
