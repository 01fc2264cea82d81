//! LLM configuration: which provider and model answers each [`CallRole`], and the limits of
//! the wrapper ([`super::LlmClient`]) around them.
//!
//! A configuration comes from a TOML file, from a `--llm` command-line value
//! ([`LlmConfig::from_cli_value`]) or is built in code. A complete TOML file:
//!
//! ```toml
//! max_concurrency = 256      # simultaneous calls over all roles (a cap; see below)
//! adaptive_concurrency = true   # per-endpoint limits adapt to the server (AIMD)
//! max_retries = 4            # retries after the first attempt
//! backoff_base_ms = 500      # first retry waits about this long, doubling each time
//! backoff_max_ms = 30000     # cap of one backoff
//! endpoint_wait_s = 60       # how long to wait for an endpoint that refuses connections
//! max_response_bytes = 8388608   # larger response bodies are cut off and fail the attempt
//! cache_dir = ".ppol-cache"  # opt-in response cache (relative to this file)
//!
//! [budget]                   # optional hard caps over the whole run
//! max_usd = 5.0
//! max_tokens = 2000000
//!
//! [default]                  # the model of every role not listed under [roles]
//! provider = "openai"        # "openai" (any OpenAI-compatible endpoint) or "scripted"
//! model = "gpt-4o-mini"      # empty: $PPOL_LLM_MODEL
//! base_url = "http://localhost:8000/v1"   # unset: $OPENAI_BASE_URL, else api.openai.com;
//!                          # a list is replicas of one model: ["http://a:8000/v1", "http://b:8000/v1"]
//! api_key_env = "OPENAI_API_KEY"
//! temperature = 0.7          # used when a request does not set its own
//! max_tokens = 1024          # unset: a per-role default (CallRole::default_max_tokens)
//! timeout_s = 60             # one attempt
//! deadline_s = 150           # one call, retries and waits included (unset: 2.5 × timeout_s)
//! context_window = 8192      # the model's context in tokens (unset: learned from a 400)
//! max_concurrency = 4        # cap of requests in flight to each base URL (unset: no extra cap)
//! stop = ["</answer>"]       # stop sequences sent with every request (unset: none)
//! tool_argument_max_chars = 200   # every string in tool-call arguments at most 200 characters;
//!                          # 0: no bounds; unset: identifier-like arguments only (see below)
//! headers = { "X-Title" = "ppol" }
//!
//! [roles.user-sim]           # field-by-field override of [default] for one role
//! model = "gpt-4o"
//!
//! [roles.mutator]
//! provider = "scripted"
//! script = "mutator-replies.jsonl"
//!
//! [prices."gpt-4o-mini"]     # USD per 1M tokens; unknown models cost 0
//! prompt = 0.15
//! completion = 0.60
//! ```
//!
//! **Concurrency.** Each base URL has its own limit of requests in flight, which adapts to
//! the server by default (see [`super::endpoint`]): it starts at 8, grows while answers come
//! back at a flat latency, and shrinks on 429 / 503, timeouts and rising latency. The
//! `max_concurrency` values cap it: the spec's per base URL, the top-level one over all calls
//! (a call holds its permit through retries and backoff). `max_concurrency = 1` keeps exactly
//! one request in flight, what a llama.cpp server answering one at a time wants;
//! `adaptive_concurrency = false` fixes each limit at its cap.
//!
//! **Replicas.** A `base_url` list names servers of the same model (vLLM or SGLang replicas,
//! several llama.cpp processes): each request goes to the replica with the fewest requests in
//! flight, a replica that fails repeatedly is benched for a while, and the cache and the
//! accounting see one model. The `--llm` form takes them comma-separated:
//! `openai:MODEL@http://a:8000/v1,http://b:8000/v1`.
//!
//! **Bounded tool arguments.** Servers that constrain tool calls with a grammar built from the
//! tool's JSON schema (llama.cpp, llama-cpp-python, vLLM's guided decoding) let a weak model
//! write one string argument until the context window is full; llama-cpp-python 0.3.x even
//! ignores `max_tokens` there, so one such answer holds the server for minutes (SmolLM2-135M
//! wrote one `product_id` of 6,629 tokens, 352 s). The tool schemas ppol sends therefore carry
//! bounds the grammar enforces (`maxLength` on strings, `maxItems` on lists); what the tools
//! accept does not change. `tool_argument_max_chars` picks them ([`ToolArgumentBound`]):
//!
//! * unset (the default): only **identifier-like** strings get a `maxLength` of
//!   [`IDENTIFIER_MAX_CHARS`] (100), and lists of them a `maxItems` of
//!   [`TOOL_ARGUMENT_MAX_ITEMS`]. A string argument is identifier-like when a word of its
//!   property name (split at `_`, `-`, digits and case changes) is one of
//!   [`IDENTIFIER_WORDS`](super::openai::IDENTIFIER_WORDS) — `id`, `ids`, `uuid`, `guid`,
//!   `email(s)`, `code(s)`, `zip`, `postcode`, `date`, `dob`, `time`, `number`, `phone`,
//!   `name` — or when its description gives a one-token example (`such as 'JFK'`,
//!   `e.g. "1008292230"`: quoted, no spaces, at most 40 characters); a list's items take
//!   the list's name and description (`item_ids`). Free text — τ²'s `thought`, `summary`,
//!   `expression`, an address — stays unbounded, so strong models are never cut short, and
//!   strings with an `enum`, a `const` or a `format` are left to the server
//!   ([`is_identifier_like`](super::openai::is_identifier_like)).
//! * `tool_argument_max_chars = N`: every string at most N characters and every list at most
//!   [`TOOL_ARGUMENT_MAX_ITEMS`] items — for a tiny model that also loops in free text. Keep N
//!   small for llama-cpp-python: 0.3.36 turns `maxLength` into nested optional rules, and its
//!   server process crashed (SIGSEGV) on a `maxLength` of 1,024 while 768 worked; `200` (what
//!   `python -m ppol_rs.local_server` prints for SmolLM2-135M) ended the 352-s argument above
//!   in 3 s.
//! * `tool_argument_max_chars = 0`: no bounds, the schemas exactly as the tools define them.
//!
//! Role names are `user-sim`, `agent`, `mutator`, `generator` and `reflection`. Every unknown
//! key is an [`Error::Config`] naming the dotted key (`roles.agent.temprature`).
//!
//! The same keys may sit under an `[llm]` table — the form a run configuration uses
//! (`[llm]`, `[llm.default]`, `[llm.roles.agent]`) — so one file serves `--config` and `--llm`.
//! In that form the other top-level tables belong to the run and are ignored here, except a
//! top-level `[budget]` with `max_usd` / `max_tokens`, which fills the LLM budget where
//! `[llm.budget]` leaves it unset (as a run does); errors then name `llm.`-prefixed keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::CallRole;
use crate::{Error, Result};

mod model;

pub use model::*;

/// Hard caps over the whole run. Once one is reached, new calls fail (budget exhausted);
/// calls already in flight complete.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Maximum spend in USD (priced by `[llm.prices]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub max_usd: Option<f64>,
    /// Maximum prompt + completion tokens (cache hits excluded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Spending limits of a run (`[budget]` of a run configuration, applied to the LLM client's
/// [`Budget`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetSection {
    /// US dollars.
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub max_usd: Option<f64>,
    /// Prompt + completion tokens.
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u64>,
}

impl BudgetSection {
    /// Check the values serde cannot (the error names the key).
    pub fn validate(&self) -> Result<()> {
        if let Some(usd) = self.max_usd {
            crate::limits::positive("budget.max_usd", usd)?;
        }
        if let Some(t) = self.max_tokens {
            crate::limits::at_least("budget.max_tokens", t, 1)?;
        }
        Ok(())
    }
}

/// Price of a model in USD per one million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// USD per 1M prompt tokens.
    #[serde(default)]
    pub prompt: f64,
    /// USD per 1M completion tokens.
    #[serde(default)]
    pub completion: f64,
}

impl Price {
    /// Cost of a call in USD.
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        (prompt_tokens as f64 * self.prompt + completion_tokens as f64 * self.completion) / 1e6
    }
}

/// Limits of the model endpoint ppol offers the simulators it starts (`[llm.serve]`): what any
/// client of it — a slow, broken or hostile one — can hold of ppol's connections, memory and
/// time. Every simulator's call is one request; these bound everything else.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ServeLimits {
    /// Seconds a client has to send a request's headers, from its connection or the end of its
    /// last answer; a connection that sends none in time (idle or slow) is closed. Default 10.
    #[schemars(range(min = MIN_SERVE_TIMEOUT_S, max = MAX_SERVE_TIMEOUT_S))]
    pub header_timeout_s: f64,
    /// Seconds a client has to send a request's body once its headers are in; a slower body is
    /// answered 408 and its connection closed. Default 30.
    #[schemars(range(min = MIN_SERVE_TIMEOUT_S, max = MAX_SERVE_TIMEOUT_S))]
    pub body_timeout_s: f64,
    /// Connections open at once. A new connection past it closes the one idle the longest;
    /// when every connection has a request in progress, new ones wait to be accepted.
    /// Default 1024 (ppol raises its open-file limit to fit).
    #[schemars(range(min = 1, max = MAX_SERVE_CONNECTIONS))]
    pub max_connections: usize,
    /// Largest request body, in bytes (larger: 413, not read). Default 32 MiB.
    #[schemars(range(min = MIN_BODY_BYTES, max = crate::limits::MAX_INPUT_BYTES))]
    pub max_body_bytes: u64,
    /// Request bytes held at once over every request being read or answered (what bounds the
    /// endpoint's memory); a request waits for room before its body is read. Below
    /// `max_body_bytes` it counts as `max_body_bytes` (the largest request always fits).
    /// Default 64 MiB.
    #[schemars(range(min = MIN_BODY_BYTES, max = MAX_BODIES_IN_FLIGHT_BYTES))]
    pub bodies_in_flight_bytes: u64,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            header_timeout_s: 10.0,
            body_timeout_s: 30.0,
            max_connections: 1024,
            max_body_bytes: 32 << 20,
            bodies_in_flight_bytes: 64 << 20,
        }
    }
}

/// Fewest seconds of `[llm.serve] header_timeout_s` and `body_timeout_s`.
pub const MIN_SERVE_TIMEOUT_S: f64 = 0.001;
/// Most seconds of `[llm.serve] header_timeout_s` and `body_timeout_s` (an hour).
pub const MAX_SERVE_TIMEOUT_S: f64 = 3600.0;
/// Most connections of `[llm.serve] max_connections`.
pub const MAX_SERVE_CONNECTIONS: usize = 65_536;
/// Fewest bytes of `[llm.serve] max_body_bytes` and `bodies_in_flight_bytes` (1 KiB).
pub const MIN_BODY_BYTES: u64 = 1024;
/// Most bytes of `[llm.serve] bodies_in_flight_bytes` (16 GiB).
pub const MAX_BODIES_IN_FLIGHT_BYTES: u64 = 16 * crate::limits::MAX_INPUT_BYTES;
/// Fewest bytes of `[llm] max_response_bytes` (1 KiB).
pub const MIN_RESPONSE_BYTES: u64 = 1024;

impl ServeLimits {
    /// Request bytes held at once: `bodies_in_flight_bytes`, raised to `max_body_bytes` when
    /// lower (a request as large as the endpoint takes must fit).
    pub fn effective_bodies_in_flight_bytes(&self) -> u64 {
        self.bodies_in_flight_bytes.max(self.max_body_bytes)
    }

    /// Check the ranges (the error names the key under `prefix`, e.g. `serve`).
    pub fn validate(&self, prefix: &str) -> Result<()> {
        let key = |k: &str| dotted(prefix, k);
        let seconds = |k: &str, v: f64| {
            if v.is_finite() && (MIN_SERVE_TIMEOUT_S..=MAX_SERVE_TIMEOUT_S).contains(&v) {
                Ok(())
            } else {
                Err(Error::config(
                    key(k),
                    format!(
                        "must be between {MIN_SERVE_TIMEOUT_S} and {MAX_SERVE_TIMEOUT_S} seconds, got {}",
                        crate::limits::shown(v)
                    ),
                ))
            }
        };
        seconds("header_timeout_s", self.header_timeout_s)?;
        seconds("body_timeout_s", self.body_timeout_s)?;
        crate::limits::check(
            &key("max_connections"),
            self.max_connections,
            1,
            MAX_SERVE_CONNECTIONS,
        )?;
        crate::limits::check(
            &key("max_body_bytes"),
            self.max_body_bytes,
            MIN_BODY_BYTES,
            crate::limits::MAX_INPUT_BYTES,
        )?;
        crate::limits::check(
            &key("bodies_in_flight_bytes"),
            self.bodies_in_flight_bytes,
            MIN_BODY_BYTES,
            MAX_BODIES_IN_FLIGHT_BYTES,
        )?;
        Ok(())
    }
}

fn default_max_concurrency() -> usize {
    256
}
fn default_adaptive_concurrency() -> bool {
    true
}
fn default_max_retries() -> u32 {
    4
}
fn default_backoff_base_ms() -> u64 {
    500
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_endpoint_wait_s() -> f64 {
    60.0
}
fn default_max_response_bytes() -> u64 {
    8 * 1024 * 1024
}

/// The models of every role, their limits, cache, prices and budget (`[llm]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Maximum simultaneous calls over all roles (≥ 1), retries and backoff included; also the
    /// cap of every endpoint's adaptive limit. Default 256.
    #[serde(default = "default_max_concurrency")]
    #[schemars(range(min = 1, max = crate::limits::MAX_CONCURRENCY))]
    pub max_concurrency: usize,
    /// Whether each endpoint's limit of requests in flight adapts to the server (AIMD on 429/503, timeouts and
    /// latency that stays high; default) or stays fixed at its cap (`max_concurrency`).
    #[serde(default = "default_adaptive_concurrency")]
    pub adaptive_concurrency: bool,
    /// Retries after the first attempt of a call.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Base of the exponential backoff, in milliseconds.
    #[serde(default = "default_backoff_base_ms")]
    pub backoff_base_ms: u64,
    /// Cap of one backoff, in milliseconds. Below `backoff_base_ms` it counts as
    /// `backoff_base_ms` (every backoff is the base).
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// How long, in seconds, calls wait for an endpoint that refuses connections (a server
    /// restarting) before failing; the wait is shared by every call to that endpoint, and
    /// once it has run out later calls fail at once (after one quick connect check) instead
    /// of each spending its own retries.
    #[serde(default = "default_endpoint_wait_s")]
    #[schemars(range(min = 0.0, max = crate::limits::MAX_SECONDS))]
    pub endpoint_wait_s: f64,
    /// Largest response body read from an endpoint, in bytes; a larger (or endless) body
    /// fails the attempt without being retried.
    #[serde(default = "default_max_response_bytes")]
    #[schemars(range(min = MIN_RESPONSE_BYTES, max = crate::limits::MAX_INPUT_BYTES))]
    pub max_response_bytes: u64,
    /// Directory of the opt-in on-disk response cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// Hard caps.
    #[serde(default)]
    pub budget: Budget,
    /// The model of every role not overridden in `[llm.roles.<role>]`.
    #[serde(default)]
    pub default: ModelSpec,
    /// Per-role overrides of `[llm.default]`: `[llm.roles.user-sim]`, `agent`, `mutator`,
    /// `generator`, `reflection`, each changing only the keys it sets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<CallRole, ModelPatch>,
    /// Prices by model name; models not listed cost 0.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
    /// Limits of the model endpoint simulators reach through `$PPOL_LLM_BASE_URL`.
    #[serde(default, skip_serializing_if = "is_default_serve")]
    pub serve: ServeLimits,
}

fn is_default_serve(s: &ServeLimits) -> bool {
    *s == ServeLimits::default()
}

impl Default for LlmConfig {
    /// Wrapper defaults with an `openai` default spec (model from `$PPOL_LLM_MODEL`).
    fn default() -> Self {
        LlmConfig::with_default(ModelSpec::default())
    }
}

const TOP_KEYS: &[&str] = &[
    "max_concurrency",
    "adaptive_concurrency",
    "max_retries",
    "backoff_base_ms",
    "backoff_max_ms",
    "endpoint_wait_s",
    "max_response_bytes",
    "cache_dir",
    "budget",
    "default",
    "roles",
    "prices",
    "serve",
];
const SPEC_KEYS: &[&str] = &[
    "provider",
    "model",
    "base_url",
    "api_key_env",
    "temperature",
    "max_tokens",
    "timeout_s",
    "deadline_s",
    "context_window",
    "max_concurrency",
    "stop",
    "tool_argument_max_chars",
    "structured_output",
    "headers",
    "script",
];
const BUDGET_KEYS: &[&str] = &["max_usd", "max_tokens"];
const PRICE_KEYS: &[&str] = &["prompt", "completion"];
const SERVE_KEYS: &[&str] = &[
    "header_timeout_s",
    "body_timeout_s",
    "max_connections",
    "max_body_bytes",
    "bodies_in_flight_bytes",
];

/// `prefix.key`, or `key` without a prefix.
fn dotted(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn check_keys(table: &toml::Table, prefix: &str, allowed: &[&str], file: &Path) -> Result<()> {
    for key in table.keys() {
        if !allowed.contains(&key.as_str()) {
            let full = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            return Err(Error::config(
                full,
                format!(
                    "unknown key in '{}'; expected one of: {}",
                    file.display(),
                    allowed.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn sub_table<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Table> {
    table.get(key).and_then(|v| v.as_table())
}

/// Reject every key the schema does not know, naming it with its dotted path (under
/// `prefix`, `llm` for the wrapped form).
fn check_unknown_keys(root: &toml::Table, prefix: &str, file: &Path) -> Result<()> {
    check_keys(root, prefix, TOP_KEYS, file)?;
    if let Some(t) = sub_table(root, "budget") {
        check_keys(t, &dotted(prefix, "budget"), BUDGET_KEYS, file)?;
    }
    if let Some(t) = sub_table(root, "default") {
        check_keys(t, &dotted(prefix, "default"), SPEC_KEYS, file)?;
    }
    if let Some(t) = sub_table(root, "serve") {
        check_keys(t, &dotted(prefix, "serve"), SERVE_KEYS, file)?;
    }
    if let Some(roles) = sub_table(root, "roles") {
        let names: Vec<&str> = CallRole::ALL.iter().map(|r| r.as_str()).collect();
        for (role, v) in roles {
            if !names.contains(&role.as_str()) {
                return Err(Error::config(
                    dotted(prefix, &format!("roles.{role}")),
                    format!(
                        "unknown role in '{}'; expected one of: {}",
                        file.display(),
                        names.join(", ")
                    ),
                ));
            }
            if let Some(t) = v.as_table() {
                check_keys(
                    t,
                    &dotted(prefix, &format!("roles.{role}")),
                    SPEC_KEYS,
                    file,
                )?;
            }
        }
    }
    if let Some(prices) = sub_table(root, "prices") {
        for (model, v) in prices {
            if let Some(t) = v.as_table() {
                check_keys(
                    t,
                    &dotted(prefix, &format!("prices.\"{model}\"")),
                    PRICE_KEYS,
                    file,
                )?;
            }
        }
    }
    Ok(())
}

/// A run configuration file seen from the LLM side: its `[llm]` table, its top-level
/// `[budget]` (the run's caps, which a run copies into the LLM budget) and nothing else.
#[derive(Deserialize)]
struct Wrapped {
    llm: LlmConfig,
    #[serde(default)]
    budget: Option<RunBudget>,
}

/// The LLM part of a run's top-level `[budget]` (other keys belong to the run).
#[derive(Deserialize)]
struct RunBudget {
    #[serde(default)]
    max_usd: Option<f64>,
    #[serde(default)]
    max_tokens: Option<u64>,
}

impl LlmConfig {
    /// The cap of one backoff, in milliseconds: `backoff_max_ms`, raised to `backoff_base_ms`
    /// when lower.
    pub fn effective_backoff_max_ms(&self) -> u64 {
        self.backoff_max_ms.max(self.backoff_base_ms)
    }
}

impl LlmConfig {
    /// Wrapper defaults with `spec` for every role.
    pub fn with_default(spec: ModelSpec) -> Self {
        LlmConfig {
            max_concurrency: default_max_concurrency(),
            adaptive_concurrency: default_adaptive_concurrency(),
            max_retries: default_max_retries(),
            backoff_base_ms: default_backoff_base_ms(),
            backoff_max_ms: default_backoff_max_ms(),
            endpoint_wait_s: default_endpoint_wait_s(),
            max_response_bytes: default_max_response_bytes(),
            cache_dir: None,
            budget: Budget::default(),
            default: spec,
            roles: BTreeMap::new(),
            prices: BTreeMap::new(),
            serve: ServeLimits::default(),
        }
    }

    /// Every role on the offline `scripted` provider.
    pub fn scripted(script: Option<PathBuf>) -> Self {
        LlmConfig::with_default(ModelSpec::scripted(script))
    }

    /// Every role on one OpenAI-compatible model.
    pub fn openai(model: impl Into<String>, base_url: Option<String>) -> Self {
        LlmConfig::with_default(ModelSpec::openai(model, base_url))
    }

    /// The resolved spec of one role (default with the role's patch applied).
    pub fn spec(&self, role: CallRole) -> ModelSpec {
        match self.roles.get(&role) {
            Some(patch) => patch.apply(&self.default),
            None => self.default.clone(),
        }
    }

    /// Requests one role can have in flight at most: the client's `max_concurrency`, or the
    /// role's per-URL cap times its replicas when lower.
    pub fn request_capacity(&self, role: CallRole) -> usize {
        let spec = self.spec(role);
        let per_model = spec.max_concurrency.map_or(usize::MAX, |c| {
            c.saturating_mul(spec.resolved_base_urls().len().max(1))
        });
        self.max_concurrency.min(per_model).max(1)
    }

    /// Replace one role's model entirely.
    pub fn set_role(&mut self, role: CallRole, spec: &ModelSpec) {
        self.roles.insert(role, ModelPatch::from_spec(spec));
    }

    /// The price of a model (0 when unknown).
    pub fn price(&self, model: &str) -> Price {
        self.prices.get(model).copied().unwrap_or_default()
    }

    /// Check value ranges; errors name the offending key.
    pub fn validate(&self) -> Result<()> {
        crate::limits::check(
            "max_concurrency",
            self.max_concurrency,
            1,
            crate::limits::MAX_CONCURRENCY,
        )?;
        crate::limits::check_seconds_or_zero("endpoint_wait_s", self.endpoint_wait_s)?;
        crate::limits::check(
            "max_response_bytes",
            self.max_response_bytes,
            MIN_RESPONSE_BYTES,
            crate::limits::MAX_INPUT_BYTES,
        )?;
        if let Some(usd) = self.budget.max_usd {
            if !(usd.is_finite() && usd >= 0.0) {
                return Err(Error::config(
                    "budget.max_usd",
                    format!("must be a non-negative number, got {usd}"),
                ));
            }
        }
        for (model, p) in &self.prices {
            let ok = |x: f64| x.is_finite() && x >= 0.0;
            if !(ok(p.prompt) && ok(p.completion)) {
                return Err(Error::config(
                    format!("prices.\"{model}\""),
                    "prices must be non-negative numbers (USD per 1M tokens)",
                ));
            }
        }
        self.serve.validate("serve")?;
        self.default.validate("default")?;
        for role in self.roles.keys() {
            self.spec(*role)
                .validate(&format!("roles.{}", role.as_str()))?;
        }
        Ok(())
    }

    /// Parse TOML text. `file` is used in error messages and relative `cache_dir` / `script`
    /// paths are resolved against its directory.
    ///
    /// Both the bare form (keys at the top level) and the run-configuration form (under
    /// `[llm]`, see the [module docs](self)) are accepted.
    pub fn from_toml_str(text: &str, file: &Path) -> Result<Self> {
        let toml_error = |e: toml::de::Error| Error::toml(file, text, &e);
        let root: toml::Table = toml::from_str(text).map_err(toml_error)?;
        let wrapped = matches!(root.get("llm"), Some(toml::Value::Table(_)));
        let prefix = if wrapped { "llm" } else { "" };
        let cfg = match &root.get("llm") {
            Some(toml::Value::Table(inner)) => {
                check_unknown_keys(inner, prefix, file)?;
                let w: Wrapped = toml::from_str(text).map_err(toml_error)?;
                let mut cfg = w.llm;
                if let Some(b) = w.budget {
                    cfg.budget.max_usd = cfg.budget.max_usd.or(b.max_usd);
                    cfg.budget.max_tokens = cfg.budget.max_tokens.or(b.max_tokens);
                }
                cfg
            }
            Some(_) => {
                return Err(Error::config(
                    "llm",
                    format!(
                        "in '{}' must be a table ([llm] with [llm.default], [llm.roles.<role>])",
                        file.display()
                    ),
                ))
            }
            None => {
                check_unknown_keys(&root, prefix, file)?;
                toml::from_str::<LlmConfig>(text).map_err(toml_error)?
            }
        };
        let mut cfg = cfg;
        let base = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf);
        if let Some(base) = base {
            let fix = |p: &mut PathBuf| {
                if p.is_relative() {
                    *p = base.join(&*p);
                }
            };
            if let Some(p) = cfg.cache_dir.as_mut() {
                fix(p);
            }
            if let Some(p) = cfg.default.script.as_mut() {
                fix(p);
            }
            for patch in cfg.roles.values_mut() {
                if let Some(p) = patch.script.as_mut() {
                    fix(p);
                }
            }
        }
        cfg.validate().map_err(|e| match e {
            Error::Config { key, message } if wrapped => Error::Config {
                key: dotted(prefix, &key),
                message,
            },
            other => other,
        })?;
        Ok(cfg)
    }

    /// Read a TOML file.
    pub fn from_toml_file(path: &Path) -> Result<Self> {
        let text = crate::io::read_config_text(path)?;
        LlmConfig::from_toml_str(&text, path)
    }

    /// Parse a `--llm` value:
    ///
    /// * `scripted` — every role on the offline scripted provider (hash answers);
    /// * `scripted:FILE.jsonl` — the scripted provider replaying a script;
    /// * `openai:MODEL` or `openai:MODEL@BASE_URL` — every role on one OpenAI-compatible model
    ///   (`openai:@http://...` takes the model from `$PPOL_LLM_MODEL`); replicas of the model
    ///   comma-separated: `openai:MODEL@http://a/v1,http://b/v1`;
    /// * a path to a TOML file (see the [module docs](self)).
    pub fn from_cli_value(value: &str) -> Result<Self> {
        let v = value.trim();
        if v == "scripted" {
            return Ok(LlmConfig::scripted(None));
        }
        if let Some(script) = v.strip_prefix("scripted:") {
            if script.is_empty() {
                return Err(Error::config(
                    "--llm",
                    "'scripted:' needs a script file path",
                ));
            }
            return Ok(LlmConfig::scripted(Some(PathBuf::from(script))));
        }
        if let Some(rest) = v.strip_prefix("openai:") {
            let (model, base) = match rest.rfind("@http") {
                Some(i) => (&rest[..i], Some(rest[i + 1..].to_string())),
                None => (rest, None),
            };
            let mut cfg = LlmConfig::openai(model.trim(), None);
            cfg.default.base_url = base.map(|b| {
                BaseUrl::from(
                    b.split(',')
                        .map(|u| u.trim().to_string())
                        .collect::<Vec<_>>(),
                )
            });
            cfg.validate().map_err(|e| match e {
                Error::Config { message, .. } => Error::config("--llm", message),
                other => other,
            })?;
            return Ok(cfg);
        }
        let path = Path::new(v);
        if path.is_file() {
            return LlmConfig::from_toml_file(path);
        }
        Err(Error::config(
            "--llm",
            format!(
                "'{value}' is not 'scripted', 'scripted:SCRIPT.jsonl', 'openai:MODEL[@BASE_URL]' \
                 or an existing TOML file"
            ),
        ))
    }
}
