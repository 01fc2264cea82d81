//! The scripted users' vocabulary: the phrase tables both voices draw from when they mean the
//! same thing (a greeting, a terse yes, a polite tail, a frustrated outburst), kept once so the
//! two users cannot drift apart. What only one voice says stays with it.

use super::facts::re;
use super::turns::Core;

impl Core {
    /// End a turn's `parts` with a polite word, with probability `p`, unless they hold one
    /// already: terse users write `thx`, warm ones a whole sentence, others a plain `thanks`.
    pub(super) fn polite_tail(&mut self, parts: &mut Vec<String>, p: f64, warm: bool) {
        let joined = parts.join(" ").to_lowercase();
        let polite_already =
            re!(r"\b(?:please|pls|thanks?|thank you|thx|ty|appreciate|grateful|sorry)\b")
                .is_match(&joined);
        if !polite_already && self.p(p) {
            let tail = if self.style.terse {
                self.pick(THANKS_TERSE)
            } else if warm {
                self.pick(THANKS_WARM)
            } else {
                self.pick(THANKS_PLAIN)
            };
            parts.push(tail.to_string());
        }
    }
}

/// Phrases: greet bare.
pub(super) const GREET_BARE: &[&str] = &["hi", "hello", "hey there", "hi there"];

/// Phrases: greet warm.
pub(super) const GREET_WARM: &[&str] = &[
    "Hello!",
    "Hi there!",
    "Hello, I hope you are doing well.",
    "Hi, good morning!",
    "Hello there!",
];

/// Phrases: greet prefix.
pub(super) const GREET_PREFIX: &[&str] = &["hi,", "hello,", "hi there,", "hey,"];

/// Phrases: doubt terse.
pub(super) const DOUBT_TERSE: &[&str] = &[
    "are you sure?",
    "are you sure thats right",
    "that's not right?",
    "hmm are you sure",
];

/// Phrases: yes terse.
pub(super) const YES_TERSE: &[&str] = &[
    "yes",
    "y",
    "ok",
    "k",
    "yep",
    "yes go ahead",
    "sure",
    "yes pls",
];

/// Phrases: yes warm.
pub(super) const YES_WARM: &[&str] = &[
    "Yes, that sounds perfect, please go ahead.",
    "Yes, please proceed with that. Thank you for taking care of it.",
    "Yes, that is correct, you can go ahead with it.",
    "Yes, I confirm. That is exactly what I wanted to do.",
    "Yes, that is exactly what I would like, so you can go ahead.",
    "Yes, that all sounds right to me, go ahead and proceed.",
];

/// Phrases: yes plain.
pub(super) const YES_PLAIN: &[&str] = &[
    "yes please",
    "yes, go ahead",
    "yes that's right, go ahead",
    "ok, please do it",
    "sure, go ahead",
    "yes",
];

/// Phrases: no angry.
pub(super) const NO_ANGRY: &[&str] = &[
    "no. this took way too long",
    "no. that was ridiculous",
    "no. worst support ever",
    "no, just do your job faster next time",
    "no. that was a waste of time",
];

/// Phrases: accept policy.
pub(super) const ACCEPT_POLICY: &[&str] = &[
    "I see, I understand. Thank you for checking on that for me.",
    "That is unfortunate; however, I understand the policy.",
];

/// Phrases: ack soft.
pub(super) const ACK_SOFT: &[&str] = &["oh ok", "hm, ok", "ok i see", "ok"];

/// Phrases: frustration.
pub(super) const FRUSTRATION: &[&str] = &[
    "ugh.",
    "this is ridiculous.",
    "come on.",
    "i'm so frustrated right now.",
    "seriously?",
    "this is taking forever.",
    "unbelievable.",
    "i'm really frustrated right now.",
];

/// Phrases: accusation.
pub(super) const ACCUSATION: &[&str] = &[
    "you're not helping.",
    "this is useless.",
    "terrible service.",
    "just do your job.",
    "this is unacceptable.",
];

/// Phrases: impatient terse.
pub(super) const IMPATIENT_TERSE: &[&str] = &[
    "any update?",
    "when will it be done?",
    "can you check faster",
    "asap pls",
    "how long?",
];

/// Phrases: hedge terse.
pub(super) const HEDGE_TERSE: &[&str] = &["i think", "maybe", "idk"];

/// Phrases: hedge.
pub(super) const HEDGE: &[&str] = &[
    "i think.",
    "maybe.",
    "not sure though...",
    "or something like that, i guess",
];

/// Phrases: formal tails.
pub(super) const FORMAL_TAILS: &[&str] = &[
    "However, I would appreciate a brief confirmation once it is done.",
    "Furthermore, I would like this handled promptly.",
    "Regarding my account, the details above should be sufficient.",
    "Additionally, please let me know if anything further is required.",
    "With regard to my request, accuracy is important to me.",
];

/// Phrases: thanks terse.
pub(super) const THANKS_TERSE: &[&str] = &["thx", "pls", "ty"];

/// Phrases: thanks warm.
pub(super) const THANKS_WARM: &[&str] = &[
    "Thank you so much.",
    "Thank you!",
    "I really appreciate your help.",
    "Thanks in advance.",
    "Sorry for the trouble, and thank you.",
    "Thank you for your patience.",
];

/// Phrases: thanks plain.
pub(super) const THANKS_PLAIN: &[&str] = &["thanks", "thank you", "please", "thanks!"];

/// Phrases: give up.
pub(super) const GIVE_UP: &[&str] = &[
    "forget it. this is useless",
    "forget it, i'll call instead. terrible service",
    "never mind. this is a waste of my time",
];
