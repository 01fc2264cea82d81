//! The user that plays a persona's roleplay text ([`TextVoice`]): each mechanic the text states
//! ([`Play`]: word limit, greeting, withheld identifiers, pushback, demands repeated, emotional
//! arc, hedges, typos, trailing off, giving up, ...) with the intensity it states.

use rand::RngExt;

use super::facts::re;
use super::intent::Need;
use super::mechanics::{Arc, Play};
use super::phrases::*;
use super::style::typos;
use super::turns::{Core, Kind, Voice};

/// The voice of a persona text: its mechanics, and the pushbacks and demand repeats it has left.
#[derive(Debug, Clone)]
pub(super) struct TextVoice {
    /// The knobs read from the persona's text.
    play: Play,
    /// Pushbacks, demand repeats still to make.
    pushbacks_left: u32,
    repeats_left: u32,
}

impl TextVoice {
    pub(super) fn new(play: Play) -> Self {
        TextVoice {
            pushbacks_left: play.pushback,
            repeats_left: play.repeat,
            play,
        }
    }

    /// How likely the persona's emotion shows in this message, from its strength and arc.
    fn emotion_now(&self, c: &Core, kind: Kind) -> f64 {
        let k = self.play;
        if k.emotion <= 0.0 || kind == Kind::Closing {
            return 0.0;
        }
        let since = |t: Option<u32>| t.map(|t| c.turns.saturating_sub(t));
        let factor = match k.arc {
            Arc::Steady => 0.45,
            Arc::Start => {
                if c.turns <= 2 {
                    1.0
                } else {
                    0.2
                }
            }
            Arc::Guarded => 0.0, // guarded shows as wariness, not emotion words
            Arc::OnRefusal(n) => {
                if since(c.setback_turn).is_some_and(|d| d < n) {
                    1.0
                } else {
                    0.0
                }
            }
            Arc::Escalate => (0.1 + 0.3 * c.friction as f64).min(1.0),
            Arc::Progress => {
                let stall = since(c.setback_turn).is_some_and(|d| d <= 1);
                let moving = since(c.progress_turn).is_some_and(|d| d <= 1);
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
}

impl Voice for TextVoice {
    /// The opening of a text persona: greeting, a loose or clear statement of the request, with
    /// or without identifiers, shortened under a word limit.
    fn opening(&mut self, c: &mut Core) -> Vec<String> {
        let (s, k) = (c.style, self.play);
        let mut parts = Vec::new();
        c.request_said = true;
        let first = c.details.pop_front().unwrap_or_default();
        let first = c.vary(&first);
        let greet = match k.greeting {
            Some(g) => g,
            None => c.p(if s.long() { 0.7 } else { 0.35 }),
        };
        if greet {
            let g = if s.long() {
                c.pick(GREET_WARM)
            } else if s.terse {
                c.pick(GREET_BARE)
            } else {
                c.pick(GREET_PREFIX)
            };
            parts.push(g.to_string());
        }
        if k.vague_open {
            let obj = c.facts.object_noun();
            parts.push(match c.rng.random_range(0..3u8) {
                0 => format!("something is wrong with {obj}"),
                1 => format!("i have a problem with {obj}"),
                _ => format!("it's about {obj}"),
            });
            c.details.push_front(first);
            return parts;
        }
        let withhold = k.withhold > 0 || k.one_field;
        if k.front_load && !withhold {
            c.front_load(&mut parts, &first);
            return parts;
        }
        let keep_ids = !withhold && c.p(0.5);
        let short = k.max_words.is_some_and(|n| n <= 14);
        let body = if short {
            let clause = c.short_clause(&first, keep_ids, false);
            c.mark_ids(&clause)
        } else if keep_ids {
            c.mark_ids(&first)
        } else {
            c.strip_ids(&first)
        };
        parts.push(body);
        let more = !k.reactive && !k.one_field && !k.clear_request && !short;
        if more && c.p(if s.long() { 0.6 } else { 0.3 }) {
            c.push_detail(&mut parts, keep_ids);
        }
        parts
    }

    /// A text persona's reply to a confirmation question: a doubt, a request to verify or a
    /// question back on the first ask (as its mechanics say), else a yes — one word, restating
    /// the proposal, or in its register. The second ask of the same action is always a yes.
    fn confirm(&mut self, c: &mut Core) -> Vec<String> {
        let (s, k) = (c.style, self.play);
        let first_ask = c.confirm_streak == 1;
        if first_ask && !k.prompt_yes {
            // "once" doubts half of the proposals, "repeatedly" / "every proposal" nearly all
            let doubt = [0.5, 0.5, 0.7, 0.9][k.pushback.min(3) as usize];
            if self.pushbacks_left > 0 && c.p(doubt) {
                self.pushbacks_left -= 1;
                let t = if s.terse {
                    c.pick(DOUBT_TERSE)
                } else {
                    c.pick(&[
                        "are you sure that's right?",
                        "hmm, that doesn't seem right. can you check it again?",
                        "are you certain? i don't think that's what i asked for",
                    ])
                };
                return vec![t.to_string()];
            }
            if k.verify > 0.0 && c.p(k.verify * 0.6) {
                let t = c.pick(&[
                    "before i say yes, can you read the details back to me?",
                    "can you double-check that first?",
                    "how do you know that's the right one?",
                ]);
                return vec![t.to_string()];
            }
            if k.clarify > 0.0 && c.p(k.clarify * 0.5) {
                let t = c.pick(&[
                    "what do you mean?",
                    "wait, what exactly will happen?",
                    "which one do you mean?",
                ]);
                return vec![t.to_string()];
            }
        }
        if c.p(k.one_word) {
            let t = c.pick(&["yes", "yes", "yep", "ok", "sure", "yeah"]);
            return vec![t.to_string()];
        }
        let yes = if s.terse {
            c.pick(YES_TERSE)
        } else if s.long() {
            c.pick(YES_WARM)
        } else if k.no_restate {
            c.pick(&["yes", "yes go ahead", "ok go ahead", "yes please", "sure"])
        } else {
            c.pick(YES_PLAIN)
        };
        let mut parts = vec![yes.to_string()];
        if k.restate > 0.0 && c.p(k.restate) {
            if let Some(what) = proposal(&c.last_agent) {
                let r = if s.long() {
                    format!("So, to be clear, you will {what}.")
                } else {
                    format!("so you'll {what}")
                };
                parts.push(c.mark_ids(&r));
            }
        }
        parts
    }

    /// A text persona's closing: bare without sign-offs, curt after a rough conversation when
    /// it blames or is emotional, else in its register.
    fn closing(&mut self, c: &mut Core, refused: bool) -> Vec<String> {
        let (s, k) = (c.style, self.play);
        let rough =
            c.friction > 0 && (k.blame > 0.3 || (k.emotion >= 0.6 && k.arc != Arc::Guarded));
        let text = if rough && k.blame > 0.3 && c.p(k.blame) {
            if refused {
                c.pick(&[
                    "this is useless. forget it",
                    "unbelievable. terrible service",
                ])
            } else {
                c.pick(NO_ANGRY)
            }
        } else if rough && c.p(k.emotion) {
            c.pick(&[
                "no. that was frustrating",
                "no. finally",
                "no, that's all. that took forever",
            ])
        } else if k.greeting == Some(false) || s.terse {
            c.pick(&[
                "no",
                "nope",
                "no thats all",
                "that's it",
                "no, that's all",
                "no",
            ])
        } else if s.long() {
            if refused {
                c.pick(&[
                    "I see, I understand. Thank you for checking. That will be all for today.",
                    "That is unfortunate, however I understand. Have a nice day.",
                ])
            } else {
                c.pick(&[
                    "No, that will be all. Thank you so much for your help today!",
                    "No, that's everything I needed. Thank you for your patience. Have a wonderful day!",
                ])
            }
        } else {
            c.plain_closing(refused)
        };
        vec![text.to_string()]
    }

    /// A text persona's reaction to a refusal: push back (while it has pushbacks left), pivot
    /// to another option, repeat its demand, a light remark when calm, or accept it.
    fn refusal(&mut self, c: &mut Core) -> Vec<String> {
        let (s, k) = (c.style, self.play);
        if self.pushbacks_left > 0 && !k.accept {
            self.pushbacks_left -= 1;
            let t = if s.terse {
                c.pick(&["are you sure?", "thats not right", "says who?"])
            } else {
                c.pick(&[
                    "are you sure? that doesn't seem right",
                    "that's not right. which rule says that?",
                    "i don't think that's right, can you check again?",
                ])
            };
            return vec![t.to_string()];
        }
        if k.pivot > 0.0 && c.p(k.pivot) {
            let t = if s.terse {
                c.pick(&[
                    "ok what about another option",
                    "how about something else then",
                ])
            } else {
                c.pick(&[
                    "ok, in that case is there another option?",
                    "how about another way to do it instead?",
                    "alright, what other options do i have then?",
                ])
            };
            return vec![t.to_string()];
        }
        if self.repeats_left > 0 {
            self.repeats_left -= 1;
            return vec![c.demand.clone()];
        }
        if k.calm && k.mild && c.p(0.4) {
            let t = c.pick(&["that's a bit annoying, but ok", "hm, that's a shame. ok"]);
            return vec![t.to_string()];
        }
        let t = if s.long() {
            c.pick(ACCEPT_POLICY)
        } else {
            c.pick(ACK_SOFT)
        };
        vec![t.to_string()]
    }

    /// Decorations of a text persona's message, each with the probability its mechanics state.
    fn decorate(&mut self, c: &mut Core, mut parts: Vec<String>, kind: Kind) -> Vec<String> {
        let (s, k) = (c.style, self.play);
        let bare = (kind == Kind::Ack
            && parts.len() == 1
            && parts[0].split_whitespace().count() <= 2)
            || (s.terse && matches!(kind, Kind::Ack | Kind::Confirm | Kind::Closing) && c.p(0.5))
            || parts.iter().all(|p| p.is_empty());
        if bare {
            return parts;
        }
        let stalled = c
            .setback_turn
            .is_some_and(|t| c.turns.saturating_sub(t) <= 1);
        let pe = self.emotion_now(c, kind);
        if pe > 0.0 && c.p(pe) {
            let e = if k.emotion >= 0.75 {
                c.pick(FRUSTRATION)
            } else if k.emotion >= 0.45 {
                c.pick(&[
                    "this is frustrating.",
                    "i'm pretty annoyed about this.",
                    "honestly i'm stressed about it.",
                    "ugh.",
                ])
            } else {
                c.pick(&[
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
            && c.steps_done == 0
            && k.emotion > 0.0
            && c.turns <= 4
            && c.p(k.emotion)
        {
            let g = c.pick(&["hmm ok.", "ok... let's see.", "hm, alright."]);
            parts.insert(0, g.to_string());
        }
        if k.blame > 0.0 && kind != Kind::Confirm && c.p(k.blame * if stalled { 0.8 } else { 0.3 })
        {
            let a = if kind == Kind::Opening {
                c.pick(&[
                    "this is not the first time your company messed this up.",
                    "your system keeps getting this wrong.",
                ])
            } else {
                c.pick(ACCUSATION)
            };
            parts.push(a.to_string());
        }
        if k.commands > 0.0 && stalled && kind != Kind::Closing && c.p(k.commands) {
            let c = c.pick(&["just fix it.", "do it now.", "just do it."]);
            parts.push(c.to_string());
        }
        if self.repeats_left > 0
            && stalled
            && kind != Kind::Closing
            && !parts.iter().any(|p| p.contains(&c.demand))
        {
            self.repeats_left -= 1;
            parts.push(c.demand.clone());
        }
        if k.impatient > 0.0 && kind != Kind::Closing && c.p(k.impatient * 0.5) {
            let t = if s.terse {
                c.pick(IMPATIENT_TERSE)
            } else {
                c.pick(&[
                    "any update?",
                    "how long will this take?",
                    "i need this done soon.",
                    "what is the status?",
                ])
            };
            parts.push(t.to_string());
        }
        if k.verify > 0.0 && matches!(kind, Kind::Ack | Kind::Other) && c.p(k.verify * 0.4) {
            let t = c.pick(&[
                "can you double-check that?",
                "how do you know that's correct?",
                "i read something different online, can you verify?",
            ]);
            parts.push(t.to_string());
        }
        if k.certainty > 0.0 && kind == Kind::Answer && c.p(k.certainty * 0.5) {
            let t = c.pick(&["i'm sure about that.", "that's definitely right."]);
            parts.push(t.to_string());
        }
        if k.hedge > 0.0 && matches!(kind, Kind::Other | Kind::Opening) && c.p(k.hedge * 0.5) {
            let t = if s.terse {
                c.pick(HEDGE_TERSE)
            } else {
                c.pick(HEDGE)
            };
            parts.push(t.to_string());
        }
        if k.long > 0.0 && kind != Kind::Closing && c.p(k.long * 0.85) {
            let t = c.pick(&[
                "I have been a customer for quite a few years now, so I was surprised to have to contact support about this at all.",
                "To give you a bit more background, I have been meaning to sort this out for a while but kept putting it off because of work.",
                "It has been a really busy couple of weeks for me, so I would love to get this resolved today if possible.",
                "I hope that makes sense, I am trying to give you the details you might need.",
            ]);
            parts.push(t.to_string());
        }
        if k.formal > 0.0 && kind != Kind::Closing && c.p(k.formal * 0.85) {
            let t = c.pick(FORMAL_TAILS);
            parts.push(t.to_string());
        }
        let p_polite = k.polite.unwrap_or_else(|| s.p_polite());
        c.polite_tail(&mut parts, p_polite, s.long() || p_polite > 0.6);
        parts
    }

    fn withheld(
        &mut self,
        c: &mut Core,
        needs: &[Need],
        has: &dyn Fn(Need) -> bool,
    ) -> Option<String> {
        let (s, k) = (c.style, self.play);
        let held = needs
            .iter()
            .any(|n| *n != Need::Payment && has(*n) && c.asked[*n as usize] < k.withhold);
        if !held {
            return None;
        }
        let t = if s.terse {
            c.pick(&["why", "do you need that?", "is that needed", "for what?"])
        } else if k.hedge > 0.0 && c.p(k.hedge) {
            c.pick(&[
                "hmm, i'm not sure i have that handy, can't you find it another way?",
                "maybe you can look it up? i don't have it in front of me",
            ])
        } else {
            c.pick(&[
                "do you really need that?",
                "can't you look it up from what i told you?",
                "is that necessary for this?",
                "why do you need that?",
            ])
        };
        Some(t.to_string())
    }

    fn told(&mut self, c: &mut Core) -> bool {
        self.play.already > 0.0 && c.p(self.play.already)
    }

    fn hedged(&mut self, c: &mut Core) -> bool {
        self.play.hedge > 0.0 && c.p(self.play.hedge)
    }

    fn ack_only(&mut self, c: &mut Core) -> bool {
        let p = self.play.ack.max(if c.style.terse { 0.5 } else { 0.0 });
        p > 0.0 && c.p(p) && (c.details.is_empty() || self.play.reactive || c.p(0.6))
    }

    fn ask_back(&mut self, c: &mut Core) -> bool {
        self.play.clarify > 0.0 && c.p(self.play.clarify * 0.6)
    }

    fn lower(&mut self, c: &mut Core) -> bool {
        self.play.lowercase > 0.0 && c.p(self.play.lowercase)
    }

    fn texture(&mut self, c: &mut Core, mut t: String) -> String {
        let k = self.play;
        if k.typos > 0.0 {
            t = typos(&t, k.typos, &mut c.rng);
        }
        if k.punct > 0.0 && c.p(k.punct) {
            t = t.replace(", ", " ");
            t = t.trim_end_matches(['.', '?']).to_string();
        }
        if k.trail > 0.0 && c.p(k.trail * 0.6) {
            t = format!("{}...", t.trim_end_matches(['.', '?', '!', ',']));
        } else if k.exclaim > 0.0 && c.p(k.exclaim * 0.5) {
            t = if c.p(0.3) {
                format!("{} :)", t.trim_end_matches('.'))
            } else {
                format!("{}!", t.trim_end_matches(['.', '!']))
            };
        }
        t
    }

    fn fed_up(&self, c: &Core) -> bool {
        self.play.emotion >= 0.6 && c.friction > 0
    }

    fn give_up(&mut self, c: &mut Core) -> Option<&'static str> {
        let limit = self.play.give_up?;
        if c.friction < limit || c.give_up_checked >= c.friction {
            return None;
        }
        c.give_up_checked = c.friction;
        if !c.p(0.6) {
            return None;
        }
        Some(if self.play.calm || self.play.emotion < 0.45 {
            c.pick(&[
                "ok, i'll leave it there then. bye",
                "alright, i'll sort it out another time",
            ])
        } else {
            c.pick(GIVE_UP)
        })
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
