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

use super::schema::StructuredOutput;
use super::CallRole;
use crate::{Error, Result};

/// Longest list a tool-call argument may hold under [`ModelSpec::tool_argument_max_chars`].
pub const TOOL_ARGUMENT_MAX_ITEMS: u32 = 16;

/// Bound of identifier-like tool-call arguments (ids, emails, codes, dates, numbers written
/// as strings) when [`ModelSpec::tool_argument_max_chars`] is unset; free text stays unbounded.
pub const IDENTIFIER_MAX_CHARS: u32 = 100;

/// How the tool schemas sent to a model bound its tool-call arguments
/// ([`ModelSpec::tool_argument_bound`]; see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolArgumentBound {
    /// `tool_argument_max_chars` unset: identifier-like strings get a `maxLength` of this many
    /// characters and lists of them a `maxItems` of [`TOOL_ARGUMENT_MAX_ITEMS`]; free text
    /// (`thought`, `summary`, `reason`, ...) and other lists stay unbounded.
    Identifiers(u32),
    /// `tool_argument_max_chars = N`: every string at most N characters, every list at most
    /// [`TOOL_ARGUMENT_MAX_ITEMS`] items.
    All(u32),
    /// `tool_argument_max_chars = 0`: the schemas as the tools define them.
    Unbounded,
}

/// Default base URL of the `openai` provider when neither the spec nor `$OPENAI_BASE_URL` set one.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Environment variable holding the default base URL.
pub const ENV_BASE_URL: &str = "OPENAI_BASE_URL";
/// Environment variable holding the API key (the default of [`ModelSpec::api_key_env`]).
pub const ENV_API_KEY: &str = "OPENAI_API_KEY";
/// Environment variable holding the default model name.
pub const ENV_MODEL: &str = "PPOL_LLM_MODEL";

/// The base URL of a model: one, or several replicas serving the same model. In TOML a
/// string or a list of strings; it serializes the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum BaseUrl {
    /// One server.
    One(String),
    /// Replicas of one model (requests go to the one with the fewest in flight).
    Replicas(Vec<String>),
}

impl BaseUrl {
    /// The URLs as written (trimmed, without a trailing slash).
    pub fn urls(&self) -> Vec<String> {
        let clean = |u: &String| u.trim().trim_end_matches('/').to_string();
        match self {
            BaseUrl::One(u) => vec![clean(u)],
            BaseUrl::Replicas(us) => us.iter().map(clean).collect(),
        }
    }

    /// Whether no URL is given (an empty string or list).
    pub fn is_empty(&self) -> bool {
        self.urls().iter().all(|u| u.is_empty())
    }
}

impl From<&str> for BaseUrl {
    fn from(u: &str) -> Self {
        BaseUrl::One(u.to_string())
    }
}

impl From<String> for BaseUrl {
    fn from(u: String) -> Self {
        BaseUrl::One(u)
    }
}

impl From<Vec<String>> for BaseUrl {
    fn from(us: Vec<String>) -> Self {
        if us.len() == 1 {
            BaseUrl::One(us.into_iter().next().unwrap_or_default())
        } else {
            BaseUrl::Replicas(us)
        }
    }
}

impl std::fmt::Display for BaseUrl {
    /// The URLs comma-separated (the `--llm` form).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.urls().join(","))
    }
}

impl<'de> Deserialize<'de> for BaseUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = BaseUrl;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a URL string or a list of URL strings (replicas of one model)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<BaseUrl, E> {
                Ok(BaseUrl::One(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<BaseUrl, A::Error> {
                let mut urls = Vec::new();
                while let Some(u) = seq.next_element::<String>()? {
                    urls.push(u);
                }
                Ok(BaseUrl::Replicas(urls))
            }
        }
        d.deserialize_any(V)
    }
}

/// Which implementation answers a role's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp,
    /// OpenRouter, the ppol mock server), through `async-openai`.
    #[default]
    #[serde(rename = "openai")]
    OpenAi,
    /// The deterministic offline provider ([`super::ScriptedModel`]).
    Scripted,
}

impl ProviderKind {
    /// The name used in configuration (`openai`, `scripted`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Scripted => "scripted",
        }
    }
}

fn is_auto(m: &StructuredOutput) -> bool {
    *m == StructuredOutput::Auto
}

fn default_api_key_env() -> String {
    ENV_API_KEY.to_string()
}

fn default_timeout_s() -> f64 {
    60.0
}

/// The model behind one role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Provider name.
    #[serde(default)]
    pub provider: ProviderKind,
    /// Model name sent to the endpoint; empty means `$PPOL_LLM_MODEL` (required for `openai`).
    #[serde(default)]
    pub model: String,
    /// Base URL including the version prefix (`http://localhost:8000/v1`), or a list of
    /// replicas of the same model; `None` means `$OPENAI_BASE_URL` (which may also list
    /// replicas, comma-separated), else [`OPENAI_DEFAULT_BASE_URL`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<BaseUrl>,
    /// Name of the environment variable holding the API key. A missing variable is an error
    /// only for api.openai.com; local servers get an empty key.
    #[serde(default = "default_api_key_env")]
    pub api_key_env: String,
    /// Sampling temperature used when a request does not set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Completion token cap used when a request does not set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Timeout of one attempt, in seconds.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
    /// Deadline of one call in seconds — every attempt, backoff and endpoint wait included.
    /// No attempt starts after it, and an attempt's timeout is cut to what is left. `None`:
    /// 2.5 × [`ModelSpec::timeout_s`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<f64>,
    /// The model's context window in tokens (prompt + completion). Known, it lets the client
    /// trim long histories before sending; `None`: learned from the endpoint's first
    /// context-length error (see [`super::context`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// Cap of the requests in flight to each of this model's base URLs (on top of the global
    /// [`LlmConfig::max_concurrency`]); under it the limit adapts to the server (see
    /// [`LlmConfig::adaptive_concurrency`]). A local server that answers one request at a time
    /// wants 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<usize>,
    /// Stop sequences sent with every request of this model (OpenAI's `stop`; `openai` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Bound of tool-call arguments (see the module docs and [`ToolArgumentBound`]): `N`, the
    /// tool schemas sent to this model give every string a `maxLength` of at most N characters
    /// and every list a `maxItems` of at most [`TOOL_ARGUMENT_MAX_ITEMS`]; `0`, the schemas as
    /// the tools define them; `None` (unset), only identifier-like strings (and lists of them)
    /// are bounded, at [`IDENTIFIER_MAX_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_argument_max_chars: Option<u32>,
    /// How requests with a JSON schema for the answer (structured mutations, persona JSON) are
    /// sent: `auto` (try OpenAI's `json_schema`, then llama-cpp-python's `json_object` with a
    /// schema, then none, and remember what the endpoint took), `json_schema`, `json_object` or
    /// `off` (free-text answers). See [`super::schema`].
    #[serde(default, skip_serializing_if = "is_auto")]
    pub structured_output: StructuredOutput,
    /// Extra HTTP headers sent with every request (`openai` only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// JSONL replies replayed by the `scripted` provider (see [`super::scripted`]); `None`
    /// answers from a hash of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<PathBuf>,
}

impl Default for ModelSpec {
    fn default() -> Self {
        ModelSpec {
            provider: ProviderKind::OpenAi,
            model: String::new(),
            base_url: None,
            api_key_env: default_api_key_env(),
            temperature: None,
            max_tokens: None,
            timeout_s: default_timeout_s(),
            deadline_s: None,
            context_window: None,
            max_concurrency: None,
            stop: Vec::new(),
            tool_argument_max_chars: None,
            structured_output: StructuredOutput::Auto,
            headers: BTreeMap::new(),
            script: None,
        }
    }
}

impl ModelSpec {
    /// The `scripted` provider, replaying `script` if given.
    pub fn scripted(script: Option<PathBuf>) -> Self {
        ModelSpec {
            provider: ProviderKind::Scripted,
            model: "scripted".to_string(),
            script,
            ..ModelSpec::default()
        }
    }

    /// The `openai` provider with a model and an optional base URL.
    pub fn openai(model: impl Into<String>, base_url: Option<String>) -> Self {
        ModelSpec {
            provider: ProviderKind::OpenAi,
            model: model.into(),
            base_url: base_url.map(BaseUrl::One),
            ..ModelSpec::default()
        }
    }

    /// The model name after the `$PPOL_LLM_MODEL` fallback; `key` names the field in errors.
    pub fn resolved_model(&self, key: &str) -> Result<String> {
        if !self.model.trim().is_empty() {
            return Ok(self.model.trim().to_string());
        }
        match std::env::var(ENV_MODEL) {
            Ok(m) if !m.trim().is_empty() => Ok(m.trim().to_string()),
            _ => match self.provider {
                ProviderKind::Scripted => Ok("scripted".to_string()),
                ProviderKind::OpenAi => Err(Error::config(
                    key,
                    format!("no model given and ${ENV_MODEL} is not set"),
                )),
            },
        }
    }

    /// The base URL after the `$OPENAI_BASE_URL` fallback, without a trailing slash (the
    /// first replica's, when there are several).
    pub fn resolved_base_url(&self) -> String {
        self.resolved_base_urls().swap_remove(0)
    }

    /// Every replica's base URL after the `$OPENAI_BASE_URL` fallback (comma-separated
    /// there), without trailing slashes; never empty.
    pub fn resolved_base_urls(&self) -> Vec<String> {
        let urls = match &self.base_url {
            Some(u) if !u.is_empty() => u.urls(),
            _ => match std::env::var(ENV_BASE_URL) {
                Ok(u) if !u.trim().is_empty() => u
                    .split(',')
                    .map(|u| u.trim().trim_end_matches('/').to_string())
                    .filter(|u| !u.is_empty())
                    .collect(),
                _ => Vec::new(),
            },
        };
        if urls.is_empty() {
            vec![OPENAI_DEFAULT_BASE_URL.to_string()]
        } else {
            urls
        }
    }

    /// The same spec for one replica (`base_url` set to `url`).
    pub fn for_replica(&self, url: &str) -> ModelSpec {
        ModelSpec {
            base_url: Some(BaseUrl::One(url.to_string())),
            ..self.clone()
        }
    }

    /// The API key read from [`ModelSpec::api_key_env`]. Missing is an error only for the
    /// official OpenAI endpoint; `key` names the field in errors.
    pub fn resolved_api_key(&self, key: &str) -> Result<String> {
        match std::env::var(&self.api_key_env) {
            Ok(k) => {
                let k = k.trim().to_string();
                if k.chars().any(|c| c.is_control()) {
                    return Err(Error::config(
                        key,
                        format!("${} contains control characters", self.api_key_env),
                    ));
                }
                Ok(k)
            }
            Err(_)
                if self
                    .resolved_base_urls()
                    .iter()
                    .any(|u| u.contains("api.openai.com")) =>
            {
                Err(Error::config(
                    key,
                    format!(
                        "environment variable ${} is not set (needed for {})",
                        self.api_key_env,
                        self.resolved_base_urls().join(", ")
                    ),
                ))
            }
            Err(_) => Ok(String::new()),
        }
    }

    /// How the tool schemas sent to this model bound tool-call arguments.
    pub fn tool_argument_bound(&self) -> ToolArgumentBound {
        match self.tool_argument_max_chars {
            None => ToolArgumentBound::Identifiers(IDENTIFIER_MAX_CHARS),
            Some(0) => ToolArgumentBound::Unbounded,
            Some(n) => ToolArgumentBound::All(n),
        }
    }

    /// What this spec adds to `request` beyond the request itself (stop sequences, bounded
    /// tool arguments) — part of a cached answer's key; null when nothing. A request with tools
    /// under the default bound (identifier-like arguments) names that bound, so answers cached
    /// before it existed (unbounded schemas) are not reused.
    pub fn request_shaping(&self, request: &super::ChatRequest) -> serde_json::Value {
        let mut shaping = serde_json::Map::new();
        if !self.stop.is_empty() || self.tool_argument_max_chars.is_some() {
            shaping.insert("stop".into(), serde_json::json!(self.stop));
            shaping.insert(
                "tool_argument_max_chars".into(),
                serde_json::json!(self.tool_argument_max_chars),
            );
        }
        if self.tool_argument_max_chars.is_none() && !request.tools.is_empty() {
            shaping.insert(
                "tool_arguments".into(),
                serde_json::json!(format!("identifiers<={IDENTIFIER_MAX_CHARS}")),
            );
        }
        if shaping.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::Value::Object(shaping)
        }
    }

    /// The per-attempt timeout.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.timeout_s.max(0.001))
    }

    /// The per-call deadline ([`ModelSpec::deadline_s`], else 2.5 × the attempt timeout).
    pub fn deadline(&self) -> std::time::Duration {
        let secs = self.deadline_s.unwrap_or(self.timeout_s * 2.5);
        std::time::Duration::from_secs_f64(secs.max(0.001))
    }

    fn validate(&self, key: &str) -> Result<()> {
        if !(self.timeout_s.is_finite() && self.timeout_s > 0.0) {
            return Err(Error::config(
                format!("{key}.timeout_s"),
                format!(
                    "must be a positive number of seconds, got {}",
                    self.timeout_s
                ),
            ));
        }
        if let Some(d) = self.deadline_s {
            if !(d.is_finite() && d > 0.0) {
                return Err(Error::config(
                    format!("{key}.deadline_s"),
                    format!("must be a positive number of seconds, got {d}"),
                ));
            }
        }
        if let Some(w) = self.context_window {
            if w < 256 {
                return Err(Error::config(
                    format!("{key}.context_window"),
                    format!("must be at least 256 tokens, got {w}"),
                ));
            }
        }
        if self.max_concurrency == Some(0) {
            return Err(Error::config(
                format!("{key}.max_concurrency"),
                "must be at least 1 (leave it out for no per-endpoint limit)",
            ));
        }
        if let Some(c) = self.max_concurrency {
            crate::limits::check(
                &format!("{key}.max_concurrency"),
                c,
                1,
                crate::limits::MAX_CONCURRENCY,
            )?;
        }
        if let Some(i) = self.stop.iter().position(|s| s.is_empty()) {
            return Err(Error::config(
                format!("{key}.stop"),
                format!(
                    "entry {} is empty; a stop sequence needs at least one character",
                    i + 1
                ),
            ));
        }
        if self.max_tokens == Some(0) {
            return Err(Error::config(
                format!("{key}.max_tokens"),
                "must be at least 1 (leave it out for the role's default)",
            ));
        }
        if let Some(base) = &self.base_url {
            let urls = base.urls();
            let many = matches!(base, BaseUrl::Replicas(_));
            if many && urls.is_empty() {
                return Err(Error::config(
                    format!("{key}.base_url"),
                    "an empty list; give one URL or several replicas",
                ));
            }
            for (i, u) in urls.iter().enumerate() {
                let at = if many {
                    format!("{key}.base_url[{i}]")
                } else {
                    format!("{key}.base_url")
                };
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(Error::config(
                        at,
                        format!("'{u}' is not an http:// or https:// URL"),
                    ));
                }
                if urls[..i].contains(u) {
                    return Err(Error::config(
                        at,
                        format!("'{u}' is listed twice (each replica once)"),
                    ));
                }
            }
        }
        if let Some(t) = self.temperature {
            if !(t.is_finite() && t >= 0.0) {
                return Err(Error::config(
                    format!("{key}.temperature"),
                    format!("must be a non-negative number, got {t}"),
                ));
            }
        }
        for (name, value) in &self.headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(Error::config(
                    format!("{key}.headers"),
                    format!("'{name}' is not a valid HTTP header name"),
                ));
            }
            if reqwest::header::HeaderValue::from_str(value).is_err() {
                return Err(Error::config(
                    format!("{key}.headers.{name}"),
                    "not a valid HTTP header value",
                ));
            }
        }
        if self.api_key_env.trim().is_empty() {
            return Err(Error::config(
                format!("{key}.api_key_env"),
                "must name an environment variable",
            ));
        }
        Ok(())
    }
}

/// A field-by-field override of [`LlmConfig::default`] for one role (`[roles.<role>]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPatch {
    /// See [`ModelSpec::provider`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderKind>,
    /// See [`ModelSpec::model`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// See [`ModelSpec::base_url`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<BaseUrl>,
    /// See [`ModelSpec::api_key_env`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// See [`ModelSpec::temperature`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// See [`ModelSpec::max_tokens`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// See [`ModelSpec::timeout_s`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    /// See [`ModelSpec::deadline_s`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<f64>,
    /// See [`ModelSpec::context_window`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// See [`ModelSpec::max_concurrency`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<usize>,
    /// See [`ModelSpec::stop`] (replaces the default's list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// See [`ModelSpec::tool_argument_max_chars`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_argument_max_chars: Option<u32>,
    /// See [`ModelSpec::structured_output`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<StructuredOutput>,
    /// Extra headers, merged over the default's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// See [`ModelSpec::script`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<PathBuf>,
}

impl ModelPatch {
    /// A patch replacing every field of a spec.
    pub fn from_spec(spec: &ModelSpec) -> Self {
        ModelPatch {
            provider: Some(spec.provider),
            model: Some(spec.model.clone()),
            base_url: spec.base_url.clone(),
            api_key_env: Some(spec.api_key_env.clone()),
            temperature: spec.temperature,
            max_tokens: spec.max_tokens,
            timeout_s: Some(spec.timeout_s),
            deadline_s: spec.deadline_s,
            context_window: spec.context_window,
            max_concurrency: spec.max_concurrency,
            stop: Some(spec.stop.clone()),
            tool_argument_max_chars: spec.tool_argument_max_chars,
            structured_output: Some(spec.structured_output),
            headers: Some(spec.headers.clone()),
            script: spec.script.clone(),
        }
    }

    /// `base` with this patch's fields applied.
    pub fn apply(&self, base: &ModelSpec) -> ModelSpec {
        let mut s = base.clone();
        if let Some(p) = self.provider {
            s.provider = p;
            if p != base.provider && self.model.is_none() {
                // A provider switch does not inherit the other provider's model name.
                s.model = String::new();
            }
        }
        if let Some(m) = &self.model {
            s.model = m.clone();
        }
        if let Some(u) = &self.base_url {
            s.base_url = Some(u.clone());
        }
        if let Some(k) = &self.api_key_env {
            s.api_key_env = k.clone();
        }
        if let Some(t) = self.temperature {
            s.temperature = Some(t);
        }
        if let Some(t) = self.max_tokens {
            s.max_tokens = Some(t);
        }
        if let Some(t) = self.timeout_s {
            s.timeout_s = t;
        }
        if let Some(d) = self.deadline_s {
            s.deadline_s = Some(d);
        }
        if let Some(w) = self.context_window {
            s.context_window = Some(w);
        }
        if let Some(c) = self.max_concurrency {
            s.max_concurrency = Some(c);
        }
        if let Some(stop) = &self.stop {
            s.stop = stop.clone();
        }
        if let Some(n) = self.tool_argument_max_chars {
            s.tool_argument_max_chars = Some(n);
        }
        if let Some(m) = self.structured_output {
            s.structured_output = m;
        }
        if let Some(h) = &self.headers {
            s.headers
                .extend(h.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if let Some(p) = &self.script {
            s.script = Some(p.clone());
        }
        s
    }
}

/// Hard caps over the whole run. Once one is reached, new calls fail with
/// [`Error::BudgetExhausted`]; calls already in flight complete.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Maximum spend in USD (from [`LlmConfig::prices`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_usd: Option<f64>,
    /// Maximum prompt + completion tokens (cache hits excluded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Price of a model in USD per one million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
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

/// The whole LLM configuration. See the [module docs](self) for the TOML form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Maximum simultaneous calls over all roles (≥ 1), retries and backoff included; also the
    /// cap of every endpoint's adaptive limit. Default 256.
    #[serde(default = "default_max_concurrency")]
    pub max_concurrency: usize,
    /// Whether each endpoint's limit of requests in flight adapts to the server (AIMD, see
    /// [`super::endpoint`]; default) or stays fixed at its cap (`max_concurrency`).
    #[serde(default = "default_adaptive_concurrency")]
    pub adaptive_concurrency: bool,
    /// Retries after the first attempt of a call.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Base of the exponential backoff, in milliseconds.
    #[serde(default = "default_backoff_base_ms")]
    pub backoff_base_ms: u64,
    /// Cap of one backoff, in milliseconds.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// How long, in seconds, calls wait for an endpoint that refuses connections (a server
    /// restarting) before failing; the wait is shared by every call to that endpoint, and
    /// once it has run out later calls fail at once (after one quick connect check) instead
    /// of each spending its own retries.
    #[serde(default = "default_endpoint_wait_s")]
    pub endpoint_wait_s: f64,
    /// Largest response body read from an endpoint, in bytes; a larger (or endless) body
    /// fails the attempt without being retried.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
    /// Directory of the opt-in on-disk response cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// Hard caps.
    #[serde(default)]
    pub budget: Budget,
    /// The model of every role not overridden in [`LlmConfig::roles`].
    #[serde(default)]
    pub default: ModelSpec,
    /// Per-role overrides of [`LlmConfig::default`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<CallRole, ModelPatch>,
    /// Prices by model name; models not listed cost 0.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
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
        if !(self.endpoint_wait_s.is_finite() && self.endpoint_wait_s >= 0.0) {
            return Err(Error::config(
                "endpoint_wait_s",
                format!(
                    "must be a non-negative number of seconds, got {}",
                    self.endpoint_wait_s
                ),
            ));
        }
        crate::limits::check(
            "max_response_bytes",
            self.max_response_bytes,
            1024,
            crate::limits::MAX_INPUT_BYTES,
        )?;
        if self.backoff_max_ms < self.backoff_base_ms {
            return Err(Error::config(
                "backoff_max_ms",
                format!(
                    "must be at least backoff_base_ms ({} < {})",
                    self.backoff_max_ms, self.backoff_base_ms
                ),
            ));
        }
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
        let text = crate::io::read_to_string(path)?;
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
