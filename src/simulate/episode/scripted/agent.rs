//! The rule-based offline agent: follows the happy path of the task's gold [`Plan`].

use async_trait::async_trait;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use super::facts::re;
use crate::dialogue::{Role, ToolCall, Turn};
use crate::simulate::episode::{AgentReply, AgentSimulator, Plan, PlannedAction, ToolEnv};
use crate::Result;

/// How a user answered a yes/no question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Agreement ("yes", "ok", "go ahead", ...).
    Yes,
    /// Refusal, doubt or a question back ("no", "are you sure", "what do you mean").
    No,
    /// Neither.
    Unclear,
}

/// Classify a user's reply to a confirmation question.
pub(crate) fn classify_answer(text: &str) -> Answer {
    let no = re!(
        r"(?i)\b(?:no|nope|nah|not yet|don'?t|do not|wait|hold on|hang on|stop|are you (?:sure|certain)|not sure|doesn'?t (?:seem|sound|look) right|not right|what do you mean|what exactly|double[- ]?check|verify|why|confused)\b"
    );
    let yes = re!(
        r"(?i)\b(?:y|yes|yeah|yea|yep|yup|ya|sure|ok|okay|k|kk|go ahead|proceed|please do|do it|confirm(?:ed)?|correct|that's right|thats right|sounds (?:good|great|perfect)|fine|alright|all right|perfect|absolutely|definitely|of course|right)\b"
    );
    if no.is_match(text) {
        Answer::No
    } else if yes.is_match(text) {
        Answer::Yes
    } else {
        Answer::Unclear
    }
}

/// Tools that identify the user (the first gold action, when it is one of these, is gated on
/// the user having said every argument value).
fn is_identification(name: &str) -> bool {
    matches!(
        name,
        "find_user_id_by_email" | "find_user_id_by_name_zip" | "get_user_details"
    ) || name.starts_with("find_user")
        || name.starts_with("authenticate")
        || name.starts_with("verify_user")
}

const TRANSFER_TOOL: &str = "transfer_to_human_agents";
/// Asks for identification before the agent gives up and transfers.
const MAX_AUTH_ASKS: u32 = 4;

/// The state of the conversation from the agent's side.
#[derive(Debug, Clone, PartialEq)]
enum Waiting {
    Nothing,
    /// Asked for the user's request.
    Request,
    /// Asked (n times) for identification.
    Auth,
    /// Asked for an order/reservation id before action `usize`.
    Id,
    /// Asked to confirm the write action at this index, n times.
    Confirm(usize, u32),
    /// Asked "anything else", n times.
    Closing(u32),
    /// Transferred: nothing more to do.
    Gone,
}

/// A τ²-style rule-based agent that follows the task's gold plan (an oracle of the happy path):
/// asks what the user needs, authenticates with exactly the identification the first gold action
/// needs (calling it only once every argument value appears in the user's messages, transferring
/// to a human after four failed asks), calls read-only tools directly, describes each write
/// action and waits for a yes (re-explaining once after a no or a doubt, then skipping it), states
/// every `communicate_info` string verbatim and finally asks whether there is anything else.
///
/// With an empty plan it explains that policy does not allow the request. Its text is polite
/// and formal; deterministic given `(plan, seed)` and the conversation.
#[derive(Debug, Clone)]
pub struct ScriptedAgent {
    plan: Plan,
    rng: ChaCha8Rng,
    auth_needed: bool,
    auth_done: bool,
    auth_asks: u32,
    next: usize,
    waiting: Waiting,
    order_id_asked: bool,
    reservation_id_asked: bool,
    info_said: bool,
    calls: u32,
    request_asks: u32,
    /// Per action: asked about its details (bit 0), the payment method (bit 1), offered
    /// options (bit 2).
    asked: Vec<u8>,
}

impl ScriptedAgent {
    /// An agent for this plan; `seed` varies its phrasing.
    pub fn new(plan: &Plan, seed: u64) -> Self {
        let auth_needed = plan.actions.first().is_some_and(|a| {
            is_identification(&a.name) && arg_values(&a.arguments).iter().any(|v| !v.is_empty())
        });
        ScriptedAgent {
            plan: plan.clone(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0xA6E7_5C21_9D3B_0F11),
            auth_needed,
            auth_done: false,
            auth_asks: 0,
            next: 0,
            waiting: Waiting::Nothing,
            order_id_asked: false,
            reservation_id_asked: false,
            info_said: false,
            calls: 0,
            request_asks: 0,
            asked: vec![0; plan.actions.len()],
        }
    }

    fn pick(&mut self, xs: &[&'static str]) -> &'static str {
        xs[self.rng.random_range(0..xs.len())]
    }

    fn call(
        &mut self,
        env: &mut dyn ToolEnv,
        name: &str,
        args: &Value,
        turns: &mut Vec<Turn>,
    ) -> bool {
        self.calls += 1;
        let id = format!("call_{}", self.calls);
        let outcome = env.call(name, args);
        turns.push(Turn {
            role: Role::Assistant,
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: id.clone(),
                name: name.to_string(),
                arguments: args.clone(),
            }],
            tool_call_id: None,
        });
        turns.push(Turn {
            role: Role::Tool,
            content: outcome.content,
            tool_calls: Vec::new(),
            tool_call_id: Some(id),
        });
        !outcome.error
    }

    fn transfer(
        &mut self,
        env: &mut dyn ToolEnv,
        mut turns: Vec<Turn>,
        mut say: Vec<String>,
    ) -> AgentReply {
        if env.tools().iter().any(|t| t.name == TRANSFER_TOOL) {
            let args = json!({"summary": "The customer could not be authenticated or needs help beyond this agent."});
            self.call(env, TRANSFER_TOOL, &args, &mut turns);
        }
        say.push(
            self.pick(&[
                "I'm transferring you to a human agent who can assist you further. Please hold on.",
                "I will now transfer you to a human agent. Thank you for your patience.",
                "Let me transfer you to one of our human agents, who will be able to help you further.",
            ])
            .to_string(),
        );
        self.waiting = Waiting::Gone;
        finish(turns, say, true)
    }

    /// Opening words reacting to the user's last message (doubt, confusion, impatience, anger).
    fn reaction(&mut self, last: &str) -> Option<String> {
        let l = last.to_lowercase();
        let doubt = re!(
            r"are you (?:sure|certain)|doesn'?t (?:seem|sound|look) right|not right|double[- ]?check|verify|i'?m (?:sure|certain|positive)"
        );
        let confusion = re!(
            r"what do you mean|not sure i understand|don'?t understand|what exactly|confused|\bhuh\b"
        );
        let hurry = re!(r"any update|how long|when will|hurry|faster|taking (?:forever|so long)");
        let upset = re!(
            r"ugh|ridiculous|frustrat|useless|terrible|unacceptable|do your job|come on|upset|worried|stressed|annoy"
        );
        if doubt.is_match(&l) {
            Some(self.pick(&[
                "I understand your concern. I have double-checked the details in our system, and they are correct.",
                "Yes, I am certain. I have verified this against your account records.",
                "I completely understand wanting to be sure. I have checked the details carefully and they match your account.",
            ]).to_string())
        } else if confusion.is_match(&l) {
            Some(
                self.pick(&[
                    "Let me rephrase.",
                    "Apologies for being unclear; let me explain.",
                    "Of course, let me clarify.",
                ])
                .to_string(),
            )
        } else if hurry.is_match(&l) {
            Some(
                self.pick(&[
                    "Thank you for your patience; this will only take a moment.",
                    "I am working on it right now and will be as quick as possible.",
                ])
                .to_string(),
            )
        } else if upset.is_match(&l) {
            Some(
                self.pick(&[
                    "I'm sorry for the frustration, and I appreciate your patience.",
                    "I understand this is frustrating, and I'm here to help.",
                    "I apologize for the inconvenience.",
                ])
                .to_string(),
            )
        } else {
            None
        }
    }

    fn auth_ask(&mut self, action: &PlannedAction, user_text: &str) -> String {
        let needs = needed_fields(&action.arguments);
        let missing: Vec<&str> = needs
            .iter()
            .filter(|(_, v)| !user_text.contains(&v.to_lowercase()))
            .map(|(label, _)| *label)
            .collect();
        let all: Vec<&str> = dedup(needs.iter().map(|(l, _)| *l).collect());
        let missing = dedup(missing);
        let first = self.auth_asks == 0;
        self.auth_asks += 1;
        if first || missing.len() == all.len() {
            let what = join_labels(&all);
            if first {
                format!(
                    "{} {}",
                    self.pick(&["I'd be happy to help with that.", "Certainly, I can help you with that.", "Sure, I can help with that."]),
                    match self.rng.random_range(0..3u8) {
                        0 => format!("First, I need to verify your identity. Could you please provide your {what}?"),
                        1 => format!("To locate your account, could you please share your {what}?"),
                        _ => format!("Before we proceed, may I have your {what} to authenticate your account?"),
                    }
                )
            } else {
                match self.rng.random_range(0..3u8) {
                    0 => format!("I'm sorry, but I still need your {what} to locate your account. Could you please provide it?"),
                    1 => format!("To continue, I will need your {what}. Could you share that with me?"),
                    _ => format!("I wasn't able to find that information in your message. Could you please tell me your {what}?"),
                }
            }
        } else {
            let what = join_labels(&missing);
            match self.rng.random_range(0..2u8) {
                0 => format!("Thank you. Could you also provide your {what}?"),
                _ => format!("Thanks. I still need your {what} to find your account."),
            }
        }
    }

    fn step(&mut self, history: &[Turn], env: &mut dyn ToolEnv) -> AgentReply {
        let user_msgs: Vec<&str> = history
            .iter()
            .filter(|t| t.role == Role::User && !t.content.is_empty())
            .map(|t| t.content.as_str())
            .collect();
        let last = user_msgs.last().copied().unwrap_or("");
        let user_text = user_msgs.join("\n").to_lowercase();
        let mut turns = Vec::new();
        let mut say: Vec<String> = Vec::new();

        if self.waiting == Waiting::Gone {
            say.push(
                "You are being transferred to a human agent; they will be with you shortly.".into(),
            );
            return finish(turns, say, true);
        }
        if let Some(r) = self.reaction(last) {
            say.push(r);
        }

        // (1) The request.
        // Anything beyond a bare greeting counts as a request.
        let greeting = re!(
            r"(?i)^\W*(?:hi|hello|hey|hiya|good (?:morning|afternoon|evening|day))(?:\W+there)?\W*$"
        );
        let stated = user_msgs.iter().any(|m| !greeting.is_match(m.trim()));
        if !stated && self.request_asks < 3 {
            self.request_asks += 1;
            self.waiting = Waiting::Request;
            say.push(
                self.pick(&[
                    "Hello! How can I help you today?",
                    "Thank you for reaching out. What can I help you with today?",
                    "Could you please tell me what you need help with?",
                ])
                .to_string(),
            );
            return finish(turns, say, false);
        }

        let mut did_read = false;
        // (2) Authentication.
        if self.auth_needed && !self.auth_done {
            let action = self.plan.actions[0].clone();
            let ready = arg_values(&action.arguments)
                .iter()
                .all(|v| user_text.contains(&v.to_lowercase()));
            if ready {
                self.call(env, &action.name, &action.arguments, &mut turns);
                self.auth_done = true;
                did_read = true;
                self.next = 1;
                self.waiting = Waiting::Nothing;
                if self.next < self.plan.actions.len() && self.rng.random_bool(0.4) {
                    say.push(self.pick(&[
                        "Thank you, I have located your account. Let me pull up the details; one moment please.",
                        "Thanks, your identity is verified. I'm now looking into your request.",
                        "Thank you for verifying your account. I will review the details now.",
                    ]).to_string());
                    return finish(turns, say, false);
                }
            } else if self.auth_asks >= MAX_AUTH_ASKS {
                say.clear();
                say.push("I'm sorry, but I was unable to verify your identity.".into());
                return self.transfer(env, turns, say);
            } else {
                let ask = self.auth_ask(&action, &user_text);
                say.push(ask);
                self.waiting = Waiting::Auth;
                return finish(turns, say, false);
            }
        }

        // (3) The plan.
        while self.next < self.plan.actions.len() {
            let idx = self.next;
            let action = self.plan.actions[idx].clone();
            if action.name == TRANSFER_TOOL {
                self.call(env, &action.name, &action.arguments, &mut turns);
                say.push("I'm transferring you to a human agent who can help you with this. Please hold on.".into());
                self.waiting = Waiting::Gone;
                return finish(turns, say, true);
            }
            if self.waiting != Waiting::Id {
                if let Some(ask) = self.id_ask(&action.arguments, &user_text) {
                    say.push(ask);
                    self.waiting = Waiting::Id;
                    return finish(turns, say, false);
                }
            }
            if env.is_read_only(&action.name) {
                self.call(env, &action.name, &action.arguments, &mut turns);
                did_read = true;
                self.next += 1;
                self.waiting = Waiting::Nothing;
                continue;
            }
            // A write action needs an explicit yes.
            match self.waiting {
                Waiting::Confirm(i, n) if i == idx => match classify_answer(last) {
                    Answer::Yes => {
                        let ok = self.call(env, &action.name, &action.arguments, &mut turns);
                        say.push(if ok {
                            format!("{} {}.", self.pick(&["Done:", "All set:", "That has been completed:"]), done_phrase(&action))
                        } else {
                            "I'm sorry, the system returned an error for that action; I have noted it and will continue with the rest of your request.".into()
                        });
                        self.next += 1;
                        self.waiting = Waiting::Nothing;
                        continue;
                    }
                    _ if n >= 2 => {
                        say.push(format!("Understood, I will not {}.", describe(&action)));
                        self.next += 1;
                        self.waiting = Waiting::Nothing;
                        continue;
                    }
                    _ => {
                        say.push(format!(
                            "{} I will {}. {}",
                            self.pick(&[
                                "To be clear,",
                                "Just to explain,",
                                "Let me explain once more:"
                            ]),
                            describe(&action),
                            self.pick(&[
                                "Would you like me to proceed? (yes/no)",
                                "Shall I go ahead with this? (yes/no)",
                                "Do you confirm? (yes/no)"
                            ])
                        ));
                        self.waiting = Waiting::Confirm(idx, n + 1);
                        return finish(turns, say, false);
                    }
                },
                _ => {
                    if self.asked[idx] & 1 == 0 {
                        self.asked[idx] |= 1;
                        if let Some(q) = self.detail_question(&action) {
                            if did_read {
                                say.push(
                                    self.pick(&[
                                        "I have reviewed the details.",
                                        "I have checked the details in our system.",
                                    ])
                                    .to_string(),
                                );
                            }
                            say.push(q);
                            return finish(turns, say, false);
                        }
                    }
                    let pays = ["payment_method_id", "payment_id", "payment_methods"]
                        .iter()
                        .any(|k| action.arguments.get(*k).is_some());
                    if self.asked[idx] & 4 == 0 {
                        self.asked[idx] |= 4;
                        if let Some(q) = self.options_question(&action) {
                            say.push(q);
                            return finish(turns, say, false);
                        }
                    }
                    if pays && self.asked[idx] & 2 == 0 {
                        self.asked[idx] |= 2;
                        if self.rng.random_bool(0.5) {
                            say.push(self.pick(&["Which payment method would you like to use for this?", "How would you like to pay for any difference? Please tell me the payment method."]).to_string());
                            return finish(turns, say, false);
                        }
                    }
                    if did_read {
                        say.push(
                            self.pick(&[
                                "I have reviewed the details.",
                                "I have checked the details in our system.",
                                "I have looked into this.",
                            ])
                            .to_string(),
                        );
                    }
                    say.push(format!(
                        "{} {}. {}",
                        self.pick(&[
                            "Here is what I will do: I will",
                            "Based on your request, I will",
                            "I can",
                            "To summarise, I will"
                        ]),
                        describe(&action),
                        self.pick(&[
                            "Shall I proceed? (yes/no)",
                            "Would you like me to proceed? (yes/no)",
                            "Do you confirm this action? (yes/no)"
                        ])
                    ));
                    self.waiting = Waiting::Confirm(idx, 1);
                    return finish(turns, say, false);
                }
            }
        }

        // (4) Communicate, (5) close.
        if self.plan.actions.is_empty() && !matches!(self.waiting, Waiting::Closing(_)) {
            say.push(
                self.pick(&[
                    "I'm sorry, but per our policy I'm not able to help with that request.",
                    "I apologize, but I'm unable to do that under our policy.",
                    "Unfortunately, our policy does not allow me to make that change.",
                ])
                .to_string(),
            );
        } else if did_read && self.plan.communicate_info.is_empty() {
            say.push(
                self.pick(&[
                    "I have reviewed the details of your request.",
                    "I have checked everything in our system.",
                ])
                .to_string(),
            );
        }
        let infos: Vec<&str> = self
            .plan
            .communicate_info
            .iter()
            .map(String::as_str)
            .filter(|i| !i.trim().is_empty())
            .collect();
        if !self.info_said && !infos.is_empty() {
            self.info_said = true;
            let info = infos.join("; ");
            say.push(format!(
                "{} {info}.",
                self.pick(&[
                    "Here is the information you asked for:",
                    "According to our records:",
                    "The answer is:"
                ])
            ));
        }
        let n = match self.waiting {
            Waiting::Closing(n) => n,
            _ => 0,
        };
        self.waiting = Waiting::Closing(n + 1);
        if n >= 2 {
            say.push("Thank you for contacting us. Have a great day!".into());
        } else {
            say.push(
                self.pick(&[
                    "Is there anything else I can help you with?",
                    "Is there anything else I can help you with today?",
                    "Is there anything else I can assist you with?",
                ])
                .to_string(),
            );
        }
        finish(turns, say, false)
    }

    /// Sometimes, options to choose from before a write action that picks new items or flights
    /// (the gold choice is always option 1).
    fn options_question(&mut self, a: &PlannedAction) -> Option<String> {
        let (gold, other) = match a.name.as_str() {
            "exchange_delivered_order_items" | "modify_pending_order_items" => (
                format!(
                    "item {}",
                    a.arguments
                        .get("new_item_ids")
                        .map(prose)
                        .unwrap_or_default()
                ),
                "another variant of the same product",
            ),
            "update_reservation_flights" | "book_reservation" => (
                format!(
                    "flight {}",
                    a.arguments.get("flights").map(prose).unwrap_or_default()
                ),
                "a later flight with one stop",
            ),
            _ => return None,
        };
        if !self.rng.random_bool(0.7) {
            return None;
        }
        Some(format!(
            "I found these options: 1) {gold}; 2) {other}. {}",
            self.pick(&["Which one would you like?", "Which option do you prefer?"])
        ))
    }

    /// A question about what exactly the user wants before a write action.
    fn detail_question(&mut self, a: &PlannedAction) -> Option<String> {
        let q: &[&'static str] = match a.name.as_str() {
            "exchange_delivered_order_items" | "modify_pending_order_items" => &[
                "Which item would you like to exchange, and what would you like instead?",
                "Could you tell me which item you want to change and which option you would like instead?",
            ],
            "return_delivered_order_items" => &["Which item would you like to return, and may I ask why?", "Could you tell me which item you would like to return?"],
            "cancel_pending_order" | "cancel_reservation" => &["May I ask the reason for the cancellation?", "Could you tell me why you would like to cancel?"],
            "update_reservation_flights" => &["Which flights would you like instead? Please share the dates and any preferences.", "What would you like to change about the flights?"],
            "book_reservation" => &["Could you tell me the origin, destination, travel dates and cabin you would like?"],
            "update_reservation_baggages" => &["How many checked bags would you like in total?"],
            "modify_pending_order_address" | "modify_user_address" => &["What is the new address you would like to use?"],
            _ => return None,
        };
        Some(self.pick(q).to_string())
    }

    /// Ask once per dialogue for an order / reservation id the next action needs and the user
    /// has not mentioned.
    fn id_ask(&mut self, args: &Value, user_text: &str) -> Option<String> {
        let get = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_lowercase);
        if let Some(id) = get("order_id") {
            let mentioned = user_text.contains(&id) || re!(r"#?w\d{7}").is_match(user_text);
            if !self.order_id_asked && !mentioned {
                self.order_id_asked = true;
                return Some(self.pick(&[
                    "Could you please provide the order ID for the order in question? It starts with #W.",
                    "Which order is this about? Please share the order number (for example #W0000000).",
                ]).to_string());
            }
        }
        if let Some(id) = get("reservation_id") {
            if !self.reservation_id_asked && !user_text.contains(&id) {
                self.reservation_id_asked = true;
                return Some(self.pick(&[
                    "Could you please provide the reservation ID for the booking in question?",
                    "Which reservation is this about? Please share the six-character reservation number.",
                ]).to_string());
            }
        }
        None
    }
}

#[async_trait]
impl AgentSimulator for ScriptedAgent {
    async fn respond(&mut self, history: &[Turn], env: &mut dyn ToolEnv) -> Result<AgentReply> {
        Ok(self.step(history, env))
    }
}

fn finish(mut turns: Vec<Turn>, say: Vec<String>, transferred: bool) -> AgentReply {
    let text = if say.is_empty() {
        "How else can I help you?".to_string()
    } else {
        say.join(" ")
    };
    turns.push(Turn::new(Role::Assistant, text));
    AgentReply { turns, transferred }
}

/// String forms of an argument object's scalar values (nested values flattened).
fn arg_values(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Number(n) => out.push(n.to_string()),
            Value::Bool(_) | Value::Null => {}
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
        }
    }
    walk(v, &mut out);
    out
}

/// `(label, value)` of an identification call's arguments.
fn needed_fields(args: &Value) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Value::Object(o) = args {
        for (k, v) in o {
            let label = match k.as_str() {
                "first_name" | "last_name" | "name" => "full name",
                "zip" | "zip_code" | "postal_code" => "zip code",
                "email" => "email address",
                "user_id" => "user ID",
                _ => "account details",
            };
            for val in arg_values(v) {
                out.push((label, val));
            }
        }
    }
    out
}

fn dedup(v: Vec<&str>) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

fn join_labels(v: &[&str]) -> String {
    match v {
        [] => "account details".into(),
        [a] => a.to_string(),
        [a, b] => format!("{a} and {b}"),
        _ => format!("{} and {}", v[..v.len() - 1].join(", "), v[v.len() - 1]),
    }
}

/// A value in prose: strings as is, arrays joined, flight objects as "HAT005 on 2024-05-20".
fn prose(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Null => "none".into(),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(prose).collect();
            join_labels(&items.iter().map(String::as_str).collect::<Vec<_>>())
        }
        Value::Object(o) => {
            if let (Some(f), Some(d)) = (o.get("flight_number"), o.get("date")) {
                format!("{} on {}", prose(f), prose(d))
            } else if let (Some(f), Some(l)) = (o.get("first_name"), o.get("last_name")) {
                format!("{} {}", prose(f), prose(l))
            } else if let Some(p) = o.get("payment_id") {
                prose(p)
            } else {
                o.iter()
                    .map(|(k, v)| format!("{} {}", k.replace('_', " "), prose(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        }
    }
}

/// One clause describing a write action ("cancel order #W1234567").
fn describe(a: &PlannedAction) -> String {
    let g = |k: &str| a.arguments.get(k).map(prose).unwrap_or_default();
    match a.name.as_str() {
        "cancel_pending_order" => format!("cancel order {} (reason: {})", g("order_id"), g("reason")),
        "return_delivered_order_items" => format!("return the items {} from order {}, with the refund going to {}", g("item_ids"), g("order_id"), g("payment_method_id")),
        "exchange_delivered_order_items" => format!("exchange the items {} in order {} for the items {}, settling any price difference with {}", g("item_ids"), g("order_id"), g("new_item_ids"), g("payment_method_id")),
        "modify_pending_order_items" => format!("change the items {} in order {} to the items {}, using {} for any price difference", g("item_ids"), g("order_id"), g("new_item_ids"), g("payment_method_id")),
        "modify_pending_order_address" => format!("change the shipping address of order {} to {}, {}, {}, {} {}, {}", g("order_id"), g("address1"), g("address2"), g("city"), g("state"), g("zip"), g("country")),
        "modify_user_address" => format!("update the address on your account to {}, {}, {}, {} {}, {}", g("address1"), g("address2"), g("city"), g("state"), g("zip"), g("country")),
        "modify_pending_order_payment" => format!("change the payment method of order {} to {}", g("order_id"), g("payment_method_id")),
        "cancel_reservation" => format!("cancel reservation {}", g("reservation_id")),
        "update_reservation_flights" => format!("change the flights of reservation {} to {} in {} class, charging any difference to {}", g("reservation_id"), g("flights"), g("cabin"), g("payment_id")),
        "update_reservation_baggages" => format!("update reservation {} to {} checked bags ({} paid), charged to {}", g("reservation_id"), g("total_baggages"), g("nonfree_baggages"), g("payment_id")),
        "update_reservation_passengers" => format!("update the passengers of reservation {} to {}", g("reservation_id"), g("passengers")),
        "book_reservation" => format!("book a {} {} trip from {} to {} on {} for {}, paid with {}", g("flight_type").replace('_', "-"), g("cabin"), g("origin"), g("destination"), g("flights"), g("passengers"), g("payment_methods")),
        "send_certificate" => format!("issue a travel certificate of ${} to account {}", g("amount"), g("user_id")),
        other => {
            let args = match &a.arguments {
                Value::Object(o) if !o.is_empty() => format!(" with {}", o.iter().map(|(k, v)| format!("{} {}", k.replace('_', " "), prose(v))).collect::<Vec<_>>().join(", ")),
                _ => String::new(),
            };
            format!("{}{args}", other.replace('_', " "))
        }
    }
}

/// What was done, for the confirmation after a write action.
fn done_phrase(a: &PlannedAction) -> String {
    match a.name.as_str() {
        "cancel_pending_order" | "cancel_reservation" => "the cancellation has been processed".into(),
        "return_delivered_order_items" => "the return has been requested, and you will receive an email with the return instructions".into(),
        "exchange_delivered_order_items" => "the exchange has been requested, and you will receive an email with the instructions".into(),
        "book_reservation" => "your new reservation has been booked".into(),
        "send_certificate" => "the certificate has been issued to your account".into(),
        _ => "the change has been applied".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_classified() {
        for y in [
            "yes",
            "Yes, that sounds perfect, please go ahead.",
            "k",
            "ok",
            "sure go ahead",
            "yes. just do it already",
            "yes i guess",
            "fine",
        ] {
            assert_eq!(classify_answer(y), Answer::Yes, "{y}");
        }
        for n in [
            "no",
            "are you sure?",
            "hmm that doesn't seem right. can you double check?",
            "what do you mean?",
            "wait",
        ] {
            assert_eq!(classify_answer(n), Answer::No, "{n}");
        }
        assert_eq!(classify_answer("hello there"), Answer::Unclear);
    }

    #[test]
    fn describes_actions_in_prose() {
        let a = PlannedAction {
            name: "update_reservation_flights".into(),
            arguments: json!({"reservation_id": "XEHM4B", "cabin": "economy", "flights": [{"flight_number": "HAT005", "date": "2024-05-20"}], "payment_id": "credit_card_1"}),
        };
        assert_eq!(describe(&a), "change the flights of reservation XEHM4B to HAT005 on 2024-05-20 in economy class, charging any difference to credit_card_1");
        let b = PlannedAction {
            name: "mystery_tool".into(),
            arguments: Value::Null,
        };
        assert_eq!(describe(&b), "mystery tool");
    }
}
