//! The user that plays a persona's behaviour axes ([`AxisVoice`]; see
//! [`KNOWN_AXES`](super::KNOWN_AXES)), the "easy mode" user of no persona, and the plain user of
//! a persona with every axis off. Everything it does follows from its [`Style`](super::style::Style).

use rand::RngExt;

use super::agent::{classify_answer, Answer};
use super::intent::Need;
use super::phrases::*;
use super::style::{hard, unmark};
use super::turns::{Core, Kind, Voice};

/// The voice of an axis placement (or of no persona): stateless, all in the [`Core`]'s style.
#[derive(Debug, Clone, Copy)]
pub(super) struct AxisVoice;

impl Voice for AxisVoice {
    fn opening(&mut self, c: &mut Core) -> Vec<String> {
        let s = c.style;
        let mut parts = Vec::new();
        c.request_said = true;
        if !s.easy && !s.verbose && !s.formal && c.p(0.08) {
            c.request_said = false;
            parts.push(c.pick(GREET_BARE).to_string());
            return parts;
        }
        let first = c.details.pop_front().unwrap_or_default();
        let first = c.vary(&first);
        if s.easy || ((s.verbose || s.formal) && !s.terse) {
            let greet = if s.formal {
                c.pick(&["Good day.", "Hello.", "Good afternoon."])
            } else {
                c.pick(GREET_WARM)
            };
            parts.push(greet.to_string());
            if s.front_loads() {
                c.front_load(&mut parts, &first);
                let said = parts.join(" ");
                let f = c.facts.clone();
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
                parts.push(c.strip_ids(&first));
                if let Some(d) = c.details.pop_front() {
                    parts.push(c.strip_ids(&d));
                }
            }
            if s.easy && c.p(0.6) {
                parts.push(
                    c.pick(&[
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
            let short = c.facts.short_request();
            let greet = c.pick(&["hi, ", "hello, ", "", "hi there, "]);
            parts.push(format!("{greet}I need to {short}."));
            c.details.push_front(first);
            return parts;
        }
        if s.ambiguous && s.terse && c.p(0.6) {
            let obj = c.facts.object_noun();
            parts.push(match c.rng.random_range(0..3u8) {
                0 => format!("problem with {obj} i think"),
                1 => format!("hi need help w {obj} maybe"),
                _ => format!("hmm its about {obj}"),
            });
            c.details.push_front(first);
            return parts;
        }
        if s.ambiguous && c.p(0.6) {
            let obj = c.facts.object_noun();
            let short = c.facts.short_request();
            parts.push(match c.rng.random_range(0..4u8) {
                0 => format!("hi, i have a problem with {obj} i think"),
                1 => format!("hey, um, i need help with something... i want to {short} maybe?"),
                2 => format!("hi, it's about {obj}, not sure how to explain"),
                _ => format!("hello, i think i need to {short}, or something like that"),
            });
            c.details.push_front(first);
            return parts;
        }
        if s.terse {
            let keep = !s.incremental && !s.ambiguous && c.p(0.5);
            let clause = c.short_clause(&first, keep, true);
            parts.push(c.mark_ids(&clause));
            return parts;
        }
        let keep_ids = !s.incremental && !s.ambiguous && c.p(0.5);
        let greet = c.p(0.4);
        let body = if keep_ids {
            c.mark_ids(&first)
        } else {
            c.strip_ids(&first)
        };
        if greet {
            parts.push(c.pick(GREET_PREFIX).to_string());
        }
        parts.push(body);
        if !s.incremental && c.p(0.3) {
            c.push_detail(&mut parts, keep_ids);
        }
        parts
    }

    fn confirm(&mut self, c: &mut Core) -> Vec<String> {
        let s = c.style;
        let first_ask = c.confirm_streak == 1;
        if first_ask && s.skeptical && s.terse && c.p(0.75) {
            let t = c.pick(DOUBT_TERSE);
            return vec![t.to_string()];
        }
        if first_ask && s.skeptical && c.p(0.75) {
            let obj = if c.facts.airline {
                "reservation"
            } else {
                "order"
            };
            return vec![match c.rng.random_range(0..4u8) {
                0 => "are you sure that's right?".to_string(),
                1 => "hmm that doesn't seem right. can you double check?".to_string(),
                2 => format!("wait, can you verify that's the correct {obj} first?"),
                _ => "are you certain? i want to be sure nothing else changes".to_string(),
            }];
        }
        if first_ask && s.ambiguous && c.p(0.35) {
            return vec![c
                .pick(&[
                    "what do you mean?",
                    "hmm, not sure i understand. what exactly will happen?",
                    "wait, which one do you mean?",
                ])
                .to_string()];
        }
        let text = if s.frustrated && s.terse && !s.polite {
            c.pick(&["fine", "yes", "ok fine", "yes just do it", "yes"])
        } else if s.frustrated && !s.polite {
            c.pick(&[
                "yes. just do it already",
                "fine, yes",
                "yes, finally",
                "yes. go ahead, this is taking forever",
                "yes",
                "ok fine",
                "yes, do it",
            ])
        } else if s.acknowledger && c.p(0.8) {
            c.pick(&["ok", "sure", "yes", "sounds good", "alright", "okay"])
        } else if s.terse {
            c.pick(YES_TERSE)
        } else if s.ambiguous && s.terse && c.p(0.5) {
            c.pick(&["yeah i guess", "ok i think", "yes i guess"])
        } else if s.ambiguous && c.p(0.6) {
            c.pick(&[
                "yes i guess",
                "i think so, yes",
                "yeah probably, go ahead",
                "ok i guess that's right",
            ])
        } else if s.skeptical && c.p(0.5) {
            c.pick(&[
                "ok, if you're certain. go ahead",
                "fine, go ahead. i'm absolutely sure that's what i want",
                "ok yes, but i'm definitely going to check it afterwards",
            ])
        } else if s.long() {
            c.pick(YES_WARM)
        } else {
            c.pick(YES_PLAIN)
        };
        let mut parts = vec![text.to_string()];
        if s.easy && c.p(0.6) {
            parts.push(
                c.pick(&[
                    "That is exactly what I was hoping for, to be honest.",
                    "I am glad this can be sorted out so easily.",
                    "That makes sense to me and it matches what I had in mind.",
                ])
                .to_string(),
            );
        }
        parts
    }

    fn closing(&mut self, c: &mut Core, refused: bool) -> Vec<String> {
        let s = c.style;
        let text = if s.frustrated && s.terse {
            if refused {
                c.pick(&["useless", "forget it", "ridiculous"])
            } else {
                c.pick(&["no", "no. finally", "no. took forever", "no"])
            }
        } else if s.frustrated {
            if refused {
                c.pick(&[
                    "this is ridiculous. forget it",
                    "unbelievable. useless",
                    "no. this was a waste of time",
                ])
            } else {
                c.pick(NO_ANGRY)
            }
        } else if s.terse || (s.acknowledger && c.p(0.7)) {
            c.pick(&[
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
        } else if s.emotional && c.p(0.6) {
            c.pick(&[
                "no, thank you. i was really worried about this, so i'm relieved",
                "no, that's all. honestly i was so stressed about this",
            ])
        } else if s.long() {
            if refused {
                c.pick(&["I see, I understand. Thank you for checking, I appreciate your time. That will be all for today.", "That is unfortunate, however I understand. Thank you for explaining the policy to me. Have a nice day."])
            } else {
                c.pick(&[
                    "No, that will be all. Thank you so much for your help today, I really appreciate it!",
                    "No, that's everything I needed. Thank you very much for your patience and assistance. Have a wonderful day!",
                    "That is all for today. Thank you again for your excellent help, you have been wonderful!",
                    "No, thank you. You have been extremely helpful, and I appreciate you resolving this so quickly. Have a great day!",
                ])
            }
        } else {
            c.plain_closing(refused)
        };
        vec![text.to_string()]
    }

    fn refusal(&mut self, c: &mut Core) -> Vec<String> {
        let s = c.style;
        vec![if s.frustrated {
            c.demand.clone()
        } else if s.skeptical {
            c.pick(&[
                "are you sure? that doesn't seem right",
                "that's not right. can you check again?",
            ])
            .to_string()
        } else if s.ambiguous {
            c.pick(&[
                "oh. hmm, i'm not sure what to do then",
                "maybe there's another way? i don't know",
            ])
            .to_string()
        } else if s.long() {
            c.pick(ACCEPT_POLICY).to_string()
        } else {
            c.pick(ACK_SOFT).to_string()
        }]
    }

    fn decorate(&mut self, c: &mut Core, mut parts: Vec<String>, kind: Kind) -> Vec<String> {
        let s = c.style;
        let bare = (kind == Kind::Ack && (s.terse || s.acknowledger) && !s.frustrated)
            || (s.terse && matches!(kind, Kind::Ack | Kind::Confirm | Kind::Closing) && c.p(0.5))
            || parts.iter().all(|p| p.is_empty());
        if bare {
            return parts;
        }
        if s.frustrated && s.terse {
            if c.p(0.35) {
                let e = c.pick(&["ugh", "come on", "seriously?", "ugh.", "ridiculous"]);
                parts.insert(0, e.to_string());
            }
            if c.p(0.15) {
                let a = c.pick(&["useless", "terrible", "do your job"]);
                parts.push(a.to_string());
            }
            if kind != Kind::Closing && !parts.iter().any(|p| p.contains(&c.demand)) && c.p(0.65) {
                parts.push(c.demand.clone());
            }
        } else if s.frustrated {
            if c.p(0.6) {
                let e = c.pick(FRUSTRATION);
                parts.insert(0, e.to_string());
            }
            if c.p(0.35) {
                let a = c.pick(ACCUSATION);
                parts.push(a.to_string());
            }
            if kind != Kind::Closing && !parts.iter().any(|p| p.contains(&c.demand)) && c.p(0.9) {
                parts.push(c.demand.clone());
            }
        }
        if s.emotional && kind != Kind::Closing && c.p(0.55) {
            let e = if s.terse {
                c.pick(&[
                    "so stressed",
                    "really worried",
                    "im upset",
                    "disappointed tbh",
                ])
            } else {
                c.pick(&[
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
        } else if s.skeptical && s.terse && c.p(0.55) {
            let k = match kind {
                Kind::Opening => c.pick(&["want it verified this time", "and i'm sure about it"]),
                Kind::Answer => c.pick(&[
                    "are you sure you need that?",
                    "definitely correct",
                    "are you sure?",
                ]),
                Kind::Ack | Kind::Other => {
                    c.pick(&["are you sure?", "that's not right", "check again"])
                }
                Kind::Closing => c.pick(&["are you sure it went through?", "will check myself"]),
                Kind::Confirm => c.pick(&["i'm sure", "definitely"]),
            };
            parts.push(k.to_string());
        } else if s.skeptical && !s.terse && c.p(0.6) {
            let k = match kind {
                Kind::Opening => c.pick(&["last time i was told it was sorted and that's not true, so i want this verified.", "i'm absolutely sure about the details.", "are you sure you can even do this? last time nobody could."]),
                Kind::Answer => c.pick(&["are you sure you need that?", "are you sure you have the right account?", "that's definitely correct, i checked.", "can you verify it matches what you see?"]),
                Kind::Ack | Kind::Other => c.pick(&["are you sure?", "hmm, that doesn't seem right.", "can you check that again?", "are you sure you're looking at the right one?"]),
                Kind::Closing => c.pick(&["are you sure it actually went through? i'll be checking my account.", "i'm going to verify this myself later.", "are you sure that's everything? ok."]),
                Kind::Confirm => c.pick(&["i'm sure that's what i want.", "and can you confirm nothing else changes?"]),
            };
            parts.push(k.to_string());
        }
        if s.impatient && kind != Kind::Closing && c.p(0.6) {
            let k = if s.terse {
                c.pick(IMPATIENT_TERSE)
            } else {
                c.pick(&[
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
            && c.p(if s.terse { 0.3 } else { 0.5 })
        {
            let k = if s.terse {
                c.pick(HEDGE_TERSE)
            } else {
                c.pick(HEDGE)
            };
            parts.push(k.to_string());
        }
        if s.verbose && !s.terse && kind != Kind::Closing && c.p(0.85) {
            let k = c.pick(&[
                "I have been a customer for quite a few years now, so I was surprised to have to contact support about this at all.",
                "I just want to make sure everything is handled correctly this time, because I have had a few issues in the past with similar things.",
                "To give you a bit more background, I have been meaning to sort this out for a while but kept putting it off because of work and family.",
                "I hope that makes sense, I am trying to give you all the details you might need so that we do not have to go back and forth too much.",
                "It has been a really busy couple of weeks for me, so I would love to get this resolved today if at all possible.",
            ]);
            parts.push(k.to_string());
        } else if s.easy && kind != Kind::Closing && c.p(0.35) {
            let k = c.pick(&[
                "I hope that all makes sense.",
                "I just want to make sure everything is handled correctly.",
                "Let me know if you need any additional information from me.",
                "I hope this is something you can take care of today.",
            ]);
            parts.push(k.to_string());
        }
        if kind != Kind::Closing && c.p(c.style.p_formal()) {
            let k = c.pick(FORMAL_TAILS);
            parts.push(k.to_string());
        }
        let warm = s.long() || s.polite;
        c.polite_tail(&mut parts, c.style.p_polite(), warm);
        parts
    }

    fn withheld(
        &mut self,
        _c: &mut Core,
        _needs: &[Need],
        _has: &dyn Fn(Need) -> bool,
    ) -> Option<String> {
        None
    }

    fn told(&mut self, c: &mut Core) -> bool {
        c.style.frustrated || c.style.skeptical
    }

    fn hedged(&mut self, c: &mut Core) -> bool {
        c.style.ambiguous && c.p(0.7)
    }

    fn ack_only(&mut self, c: &mut Core) -> bool {
        let s = c.style;
        (s.terse || s.acknowledger)
            && (!s.frustrated || c.p(0.5))
            && (c.details.is_empty() || c.p(0.6))
    }

    fn ask_back(&mut self, c: &mut Core) -> bool {
        c.style.ambiguous && c.p(0.35)
    }

    fn lower(&mut self, c: &mut Core) -> bool {
        let s = c.style;
        s.lowercase || (s.terse && c.p(0.75)) || (s.frustrated && c.p(0.4)) || (s.typos && c.p(0.3))
    }

    fn texture(&mut self, _c: &mut Core, t: String) -> String {
        t
    }

    fn fed_up(&self, _c: &Core) -> bool {
        false
    }

    /// A frustrated user, after the second friction, gives up now and then.
    fn give_up(&mut self, c: &mut Core) -> Option<&'static str> {
        if !(c.style.frustrated && c.friction >= 2 && c.give_up_checked < c.friction) {
            return None;
        }
        c.give_up_checked = c.friction;
        if !c.p(0.2) {
            return None;
        }
        Some(c.pick(GIVE_UP))
    }
}
