//! What a scripted user knows: identifiers and facts pulled out of a τ²-style [`Scenario`]
//! (second-person text), what it does not know, and a first-person paraphrase of its request.

use crate::simulate::episode::Scenario;

/// A lazily compiled, process-wide regex.
macro_rules! re {
    ($pat:expr) => {{
        static RE: ::std::sync::OnceLock<::regex::Regex> = ::std::sync::OnceLock::new();
        RE.get_or_init(|| $crate::simulate::episode::scripted::facts::compile_builtin($pat))
    }};
}
pub(crate) use re;

/// Compile one of this module's built-in patterns (valid by construction; see the unit tests).
pub(crate) fn compile_builtin(pattern: &str) -> regex::Regex {
    regex::Regex::new(pattern).expect("built-in regex is valid")
}

/// What the request is about, coarsely (drives short and vague phrasings of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Topic {
    /// Cancel an order or a reservation.
    Cancel,
    /// Return items.
    Return,
    /// Exchange items.
    Exchange,
    /// A refund or compensation.
    Refund,
    /// Change or update something (flights, address, items, payment, passengers, bags).
    Change,
    /// Book a new flight.
    Book,
    /// A question (status, baggage allowance, information).
    Question,
    /// Nothing recognisable.
    #[default]
    Other,
}

/// Facts a scripted user may reveal, extracted from a [`Scenario`].
///
/// Everything is optional: odd or empty scenarios give empty facts, never errors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// First name ("You are Yusuf Rossi" → `Yusuf`), else derived from a `first_last_1234` user id.
    pub first_name: Option<String>,
    /// Last name.
    pub last_name: Option<String>,
    /// Five-digit zip code.
    pub zip: Option<String>,
    /// Other zip codes the scenario mentions (an old address, ...).
    pub other_zips: Vec<String>,
    /// Email address (absent when `unknown_info` says the user does not remember it).
    pub email: Option<String>,
    /// User id (`snake_case_1234`).
    pub user_id: Option<String>,
    /// Retail order ids, `#W` + 7 digits, in order of appearance.
    pub order_ids: Vec<String>,
    /// Airline reservation ids (six upper-case alphanumerics), in order of appearance.
    pub reservation_ids: Vec<String>,
    /// Payment hints ("credit card ending in 7447", "gift card", "certificate").
    pub payment_hints: Vec<String>,
    /// Places: `from X to Y` routes and cities mentioned in the request.
    pub places: Vec<String>,
    /// The request, in the first person, one sentence per element (ids verbatim).
    pub request: Vec<String>,
    /// What the request is about.
    pub topic: Topic,
    /// Whether the scenario is about airline reservations (else orders).
    pub airline: bool,
}

impl Facts {
    /// Extract the facts of a scenario.
    pub fn from_scenario(s: &Scenario) -> Facts {
        let known = clean(&s.known_info);
        let reason = clean(&s.reason_for_call);
        let instr = clean(&s.task_instructions);
        let whole = clean(&s.text);
        let unknown = s.unknown_info.to_lowercase();
        // Where identifiers may be found, most specific first.
        let sources = [
            known.as_str(),
            reason.as_str(),
            instr.as_str(),
            whole.as_str(),
        ];
        let mut f = Facts::default();

        for src in sources {
            if f.first_name.is_some() {
                break;
            }
            for c in re!(r"\b(?:[Yy]ou are|[Yy]our (?:full )?name is|[Mm]y name is|[Nn]ame:|called|named)\s+([A-Z][a-zA-Z'-]+)\s+([A-Z][a-zA-Z'-]+)").captures_iter(src) {
                let (first, last) = (&c[1], &c[2]);
                if !STOP_NAMES.contains(&first) && !STOP_NAMES.contains(&last) {
                    f.first_name = Some(first.to_string());
                    f.last_name = Some(last.to_string());
                    break;
                }
            }
        }
        for src in sources {
            if f.user_id.is_some() {
                break;
            }
            f.user_id = re!(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)*_\d{3,5}\b")
                .find_iter(src)
                .map(|m| m.as_str())
                .find(|id| !PAYMENT_PREFIXES.iter().any(|p| id.starts_with(p)))
                .map(str::to_string);
        }
        if f.first_name.is_none() {
            if let Some(id) = &f.user_id {
                let parts: Vec<&str> = id.split('_').collect();
                if parts.len() >= 3
                    && parts[..2]
                        .iter()
                        .all(|p| p.chars().all(|c| c.is_ascii_alphabetic()))
                {
                    f.first_name = Some(capitalise(parts[0]));
                    f.last_name = Some(capitalise(parts[1]));
                }
            }
        }
        for src in sources {
            if f.zip.is_some() {
                break;
            }
            f.zip = re!(r"(?i)\b(?:zip\s*(?:code)?|postal code|live[sd]? in|living in)\s*(?:is|of|:)?\s*(\d{5})\b")
                .captures(src)
                .map(|c| c[1].to_string());
        }
        for c in re!(r"(?:^|[^\w#-])(\d{5})(?:[^\w-]|$)").captures_iter(&known) {
            let z = c[1].to_string();
            if f.zip.is_none() {
                f.zip = Some(z);
            } else if f.zip.as_ref() != Some(&z) {
                push_unique(&mut f.other_zips, z);
            }
        }
        for src in sources {
            if f.email.is_some() {
                break;
            }
            f.email = re!(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
                .find(src)
                .map(|m| m.as_str().to_string());
        }
        for src in [&known, &reason, &instr] {
            for m in re!(r"#?\bW\d{7}\b").find_iter(src) {
                let id = format!("#{}", m.as_str().trim_start_matches('#'));
                push_unique(&mut f.order_ids, id);
            }
            for sentence in sentences(src) {
                let context =
                    re!(r"(?i)reservation|confirmation|booking|trip|flight").is_match(&sentence);
                for m in re!(r"\b[A-Z0-9]{6}\b").find_iter(&sentence) {
                    let id = m.as_str();
                    let digits = id.chars().filter(char::is_ascii_digit).count();
                    let flight_no = re!(r"^HAT\d{3}$").is_match(id);
                    if digits == id.len() || flight_no || (digits == 0 && !context) {
                        continue;
                    }
                    push_unique(&mut f.reservation_ids, id.to_string());
                }
            }
        }
        for src in [&reason, &known, &instr] {
            for m in re!(r"(?i)\b(?:(?:credit|debit|gift) card|paypal|travel certificates?|certificates?|visa|mastercard)\b(?:[^.]{0,20}?\bending (?:in|with) \d{4})?|\b\d{4} card\b").find_iter(src) {
                push_unique(&mut f.payment_hints, m.as_str().to_lowercase());
            }
            for c in re!(r"\bfrom ([A-Z][a-z]+(?: [A-Z][a-z]+)?|[A-Z]{3}) to ([A-Z][a-z]+(?: [A-Z][a-z]+)?|[A-Z]{3})\b").captures_iter(src) {
                push_unique(&mut f.places, c[1].to_string());
                push_unique(&mut f.places, c[2].to_string());
            }
        }

        // What the user does not know overrides what the text seems to say.
        let forgets = |what: &str| {
            unknown.contains(what)
                && re!(r"(?i)\b(?:not|n't|never|forgot|forget|no idea|unknown|lost)\b")
                    .is_match(&unknown)
        };
        if forgets("email") {
            f.email = None;
        }
        if forgets("user id") || forgets("user_id") || forgets("username") {
            f.user_id = None;
        }
        if forgets("zip") {
            f.zip = None;
            f.other_zips.clear();
        }
        if forgets("order id") || forgets("order number") {
            f.order_ids.clear();
        }
        if forgets("reservation id")
            || forgets("reservation number")
            || forgets("confirmation number")
        {
            f.reservation_ids.clear();
        }

        let lower = format!("{reason} {instr}").to_lowercase();
        f.airline = s.domain.eq_ignore_ascii_case("airline")
            || (!s.domain.eq_ignore_ascii_case("retail")
                && re!(r"\b(?:flight|reservation|airport|baggage)").is_match(&lower))
            || !f.reservation_ids.is_empty() && f.order_ids.is_empty();
        f.topic = topic_of(&reason.to_lowercase());

        let mut request: Vec<String> = sentences(&reason)
            .into_iter()
            .filter(|s| !is_meta_instruction(s))
            .map(|s| first_person(&imperative_to_wish(&s)))
            .filter(|s| !s.is_empty())
            .collect();
        if request.is_empty() {
            if let Some(first) = sentences(&reason).into_iter().next() {
                request.push(first_person(&first));
            }
        }
        if request.is_empty() {
            request.push(if f.airline {
                "I need some help with a reservation.".to_string()
            } else {
                "I need some help with an order.".to_string()
            });
        }
        f.request = request;
        f
    }

    /// "First Last", when known.
    pub fn full_name(&self) -> Option<String> {
        match (&self.first_name, &self.last_name) {
            (Some(a), Some(b)) => Some(format!("{a} {b}")),
            (Some(a), None) => Some(a.clone()),
            _ => None,
        }
    }

    /// The ids the request is about (orders, then reservations).
    pub fn object_ids(&self) -> Vec<&str> {
        self.order_ids
            .iter()
            .chain(self.reservation_ids.iter())
            .map(String::as_str)
            .collect()
    }

    /// A short verb phrase for the request ("cancel my reservation", "return some items").
    pub fn short_request(&self) -> &'static str {
        match (self.topic, self.airline) {
            (Topic::Cancel, true) => "cancel my reservation",
            (Topic::Cancel, false) => "cancel my order",
            (Topic::Return, _) => "return some items",
            (Topic::Exchange, _) => "exchange some items",
            (Topic::Refund, true) => "get compensation for my flight",
            (Topic::Refund, false) => "get a refund",
            (Topic::Change, true) => "change my reservation",
            (Topic::Change, false) => "change my order",
            (Topic::Book, _) => "book a flight",
            (Topic::Question, true) => "get some info about my reservation",
            (Topic::Question, false) => "get some info about my order",
            (Topic::Other, true) => "sort out my reservation",
            (Topic::Other, false) => "sort out my order",
        }
    }

    /// What the request is about, as a noun phrase ("my reservation", "my order").
    pub fn object_noun(&self) -> &'static str {
        if self.airline {
            "my reservation"
        } else {
            "my order"
        }
    }
}

const STOP_NAMES: &[&str] = &[
    "Gold", "Silver", "Regular", "Platinum", "Basic", "Economy", "Business", "The", "A", "An",
    "You", "Your", "Not", "Very", "In",
];

const PAYMENT_PREFIXES: &[&str] = &[
    "credit_card_",
    "gift_card_",
    "paypal_",
    "certificate_",
    "debit_card_",
];

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn push_unique(v: &mut Vec<String>, x: String) {
    if !v.contains(&x) {
        v.push(x);
    }
}

/// Whitespace-collapsed text without markdown emphasis or surrounding quotes.
fn clean(s: &str) -> String {
    let s = s.replace(['*', '`', '"', '\u{201c}', '\u{201d}'], "");
    let s = s.replace(['\u{2019}', '\u{2018}'], "'");
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Split text into sentences at `.`, `!` or `?` followed by whitespace (or the end).
pub(crate) fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        cur.push(c);
        let end =
            matches!(c, '.' | '!' | '?') && chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        if end {
            let t = cur.trim();
            if t.len() > 1 {
                out.push(t.to_string());
            }
            cur.clear();
        }
    }
    let t = cur.trim();
    if !t.is_empty() && t != "." {
        let mut t = t.to_string();
        if !t.ends_with(['.', '!', '?']) {
            t.push('.');
        }
        out.push(t);
    }
    out
}

/// Sentences of `reason_for_call` that are instructions to the role-player rather than things a
/// customer would say ("If the agent asks ...", "make up a story", "test the agent").
fn is_meta_instruction(s: &str) -> bool {
    let l = s.to_lowercase();
    l.starts_with("if ")
        || l.starts_with("when the agent")
        || l.contains("the agent")
        || l.contains("make up")
        || l.contains("not allowed")
        || l.contains("pretend")
        || l.contains("to test")
        || l.contains("mention")
        || l.contains("###")
        || l.contains("instruction")
}

/// "First, try to book a flight" → "You want to book a flight" (instructions to the role-player
/// phrased as imperatives).
fn imperative_to_wish(s: &str) -> String {
    match re!(r"^(?i:(?:first|then|next|also),?\s+)?(?i:try to|ask to|ask the agent to|request to)\s+(.*)$").captures(s) {
        Some(c) => format!("You want to {}", &c[1]),
        None => s.to_string(),
    }
}

fn topic_of(l: &str) -> Topic {
    let has = |w: &str| l.contains(w);
    if has("exchange") {
        Topic::Exchange
    } else if has("return") && !has("return flight") {
        Topic::Return
    } else if has("cancel") {
        Topic::Cancel
    } else if has("compensation") || has("refund") || has("reimburse") {
        Topic::Refund
    } else if has("book") {
        Topic::Book
    } else if has("change")
        || has("modify")
        || has("update")
        || has("upgrade")
        || has("add ")
        || has("remove")
        || has("switch")
    {
        Topic::Change
    } else if has("know")
        || has("figure out")
        || has("how many")
        || has("check")
        || has("status")
        || has("?")
    {
        Topic::Question
    } else {
        Topic::Other
    }
}

/// Words after which "you" is an object ("told you" → "told me"), otherwise it is a subject.
const OBJECT_PRECEDERS: &[&str] = &[
    "to",
    "for",
    "with",
    "at",
    "from",
    "by",
    "about",
    "tell",
    "told",
    "tells",
    "give",
    "gave",
    "given",
    "gives",
    "help",
    "helps",
    "helped",
    "call",
    "called",
    "ask",
    "asks",
    "asked",
    "offer",
    "offers",
    "offered",
    "let",
    "lets",
    "send",
    "sends",
    "sent",
    "charge",
    "charged",
    "contact",
    "contacted",
    "approved",
    "allow",
    "allows",
    "allowed",
    "get",
    "gets",
    "cost",
    "costs",
    "owe",
    "owes",
    "thank",
    "remind",
    "reminded",
    "inform",
    "informed",
    "notify",
    "notified",
    "than",
    "like",
    "assist",
    "assisted",
    "email",
    "emailed",
    "issue",
    "issued",
    "refund",
    "refunded",
    "provide",
    "provided",
    "show",
    "shows",
    "showed",
    "pay",
    "paid",
    "on",
    "into",
    "before",
    "after",
    "make",
    "makes",
    "made",
    "want",
    "wants",
    "need",
    "needs",
    "suit",
    "suits",
    "fits",
    "fit",
    "bother",
    "bothers",
    "upset",
    "upsets",
    "annoy",
    "annoys",
    "of",
];

/// Paraphrase second-person scenario text in the first person: "You want to cancel your order
/// #W1234567" → "I want to cancel my order #W1234567". Identifiers are kept verbatim; "you" after
/// a verb or preposition becomes "me".
pub fn first_person(text: &str) -> String {
    let text = clean(text);
    let mut out = String::with_capacity(text.len() + 8);
    let mut prev_word = String::new();
    let mut sentence_start = true;
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < text.len() {
        let rest = &text[i..];
        let c = rest.chars().next().unwrap_or(' ');
        let at_word_start = c.is_alphabetic() && (i == 0 || !is_word_byte(bytes[i - 1]));
        if at_word_start {
            let end = rest
                .char_indices()
                .find(|(_, ch)| !(ch.is_alphanumeric() || *ch == '\'' || *ch == '_'))
                .map(|(j, _)| j)
                .unwrap_or(rest.len());
            let word = &rest[..end];
            let lw = word.to_lowercase();
            let cap = word.chars().next().is_some_and(char::is_uppercase);
            let after = rest[end..].trim_start();
            let next_word: String = after
                .chars()
                .take_while(|ch| ch.is_alphabetic() || *ch == '\'')
                .collect::<String>()
                .to_lowercase();
            let mut consumed = end;
            let replacement: Option<String> = match lw.as_str() {
                "you" => {
                    let object = !sentence_start
                        && OBJECT_PRECEDERS.contains(&prev_word.as_str())
                        && !matches!(
                            next_word.as_str(),
                            "are"
                                | "were"
                                | "have"
                                | "had"
                                | "want"
                                | "wish"
                                | "need"
                                | "will"
                                | "would"
                                | "can"
                                | "could"
                                | "do"
                                | "don't"
                                | "did"
                                | "didn't"
                                | "think"
                                | "prefer"
                                | "received"
                                | "live"
                        );
                    if object {
                        Some("me".into())
                    } else {
                        match next_word.as_str() {
                            "are" | "were" | "aren't" | "weren't" => {
                                consumed =
                                    end + (rest[end..].len() - after.len()) + next_word.len();
                                Some(
                                    match next_word.as_str() {
                                        "are" => "I am",
                                        "were" => "I was",
                                        "aren't" => "I'm not",
                                        _ => "I wasn't",
                                    }
                                    .into(),
                                )
                            }
                            _ => Some("I".into()),
                        }
                    }
                }
                "you're" => Some("I'm".into()),
                "you've" => Some("I've".into()),
                "you'll" => Some("I'll".into()),
                "you'd" => Some("I'd".into()),
                "your" => Some(if cap { "My" } else { "my" }.into()),
                "yours" => Some(if cap { "Mine" } else { "mine" }.into()),
                "yourself" => Some(if cap { "Myself" } else { "myself" }.into()),
                "wish" if next_word == "to" => Some("would like".into()),
                _ => None,
            };
            match replacement {
                Some(r) => out.push_str(&r),
                None => out.push_str(word),
            }
            prev_word = lw;
            sentence_start = false;
            i += consumed;
            continue;
        }
        out.push(c);
        if matches!(c, '.' | '!' | '?') {
            sentence_start = true;
        }
        i += c.len_utf8();
    }
    out.trim().to_string()
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'\'' || b >= 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(reason: &str, known: &str, unknown: &str) -> Scenario {
        Scenario {
            task_id: "t".into(),
            domain: "retail".into(),
            reason_for_call: reason.into(),
            known_info: known.into(),
            unknown_info: unknown.into(),
            task_instructions: String::new(),
            text: String::new(),
        }
    }

    #[test]
    fn extracts_retail_facts() {
        let f = Facts::from_scenario(&scenario(
            "You received your order #W2378156 and wish to exchange the keyboard.",
            "You are Yusuf Rossi in zip code 19122.",
            "You do not remember your email address.",
        ));
        assert_eq!(f.full_name().as_deref(), Some("Yusuf Rossi"));
        assert_eq!(f.zip.as_deref(), Some("19122"));
        assert_eq!(f.order_ids, vec!["#W2378156"]);
        assert_eq!(f.email, None);
        assert_eq!(f.topic, Topic::Exchange);
        assert_eq!(
            f.request[0],
            "I received my order #W2378156 and would like to exchange the keyboard."
        );
    }

    #[test]
    fn forgotten_email_is_never_known() {
        let f = Facts::from_scenario(&scenario(
            "You want to return a lamp.",
            "Your name is Daiki Sanchez, and you live in 46236, your email is daiki1@example.com.",
            "You do not remember your email address.",
        ));
        assert_eq!(f.email, None);
        assert_eq!(f.zip.as_deref(), Some("46236"));
        let g = Facts::from_scenario(&scenario(
            "You want to return a lamp.",
            "Your name is Daiki Sanchez, and you live in 46236, your email is daiki1@example.com.",
            "",
        ));
        assert_eq!(g.email.as_deref(), Some("daiki1@example.com"));
    }

    #[test]
    fn extracts_airline_facts_and_name_from_user_id() {
        let mut s = scenario(
            "You want to cancel reservation EHGLP3. The flight HAT045 was fine.",
            "Your user id is mei_kovacs_8020.",
            "",
        );
        s.domain = "airline".into();
        let f = Facts::from_scenario(&s);
        assert_eq!(f.user_id.as_deref(), Some("mei_kovacs_8020"));
        assert_eq!(f.full_name().as_deref(), Some("Mei Kovacs"));
        assert_eq!(f.reservation_ids, vec!["EHGLP3"]);
        assert!(f.airline);
        assert_eq!(f.topic, Topic::Cancel);
    }

    #[test]
    fn first_person_swaps_pronouns() {
        assert_eq!(
            first_person("You are upset. The agent told you that your bag is lost, and you want to know why."),
            "I am upset. The agent told me that my bag is lost, and I want to know why."
        );
        assert_eq!(
            first_person("You're sure you'd like it."),
            "I'm sure I'd like it."
        );
        assert_eq!(first_person(""), "");
    }

    #[test]
    fn empty_scenario_gives_a_generic_request() {
        let f = Facts::from_scenario(&Scenario::default());
        assert_eq!(f.request.len(), 1);
        assert!(f.object_ids().is_empty());
    }
}
