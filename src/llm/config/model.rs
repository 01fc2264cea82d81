//! The model of one role: its provider ([`ProviderKind`]), endpoint ([`BaseUrl`], replicas
//! included), sampling and time limits, the bounds its tool schemas carry
//! ([`ToolArgumentBound`]) — [`ModelSpec`] — and the field-by-field override of it for one
//! role ([`ModelPatch`]). The file format is in the docs of [`super`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::llm::schema::StructuredOutput;
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp,
    /// OpenRouter, the ppol mock server), through `async-openai`.
    #[default]
    #[serde(rename = "openai")]
    OpenAi,
    /// The deterministic offline provider (canned text or replies replayed from a script; a
    /// test double).
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

/// The smallest context window a model may declare (`context_window`), in tokens.
pub const MIN_CONTEXT_WINDOW: u32 = 256;

fn default_timeout_s() -> f64 {
    60.0
}

/// The model behind one role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// replicas, comma-separated), else OpenAI's own API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<BaseUrl>,
    /// Name of the environment variable holding the API key. A missing variable is an error
    /// only for api.openai.com; local servers get an empty key.
    #[serde(default = "default_api_key_env")]
    pub api_key_env: String,
    /// Sampling temperature used when a request does not set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = f32::MAX))]
    pub temperature: Option<f32>,
    /// Completion token cap used when a request does not set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// Timeout of one attempt, in seconds.
    #[serde(default = "default_timeout_s")]
    #[schemars(range(max = crate::limits::MAX_SECONDS), extend("exclusiveMinimum" = 0))]
    pub timeout_s: f64,
    /// Deadline of one call in seconds — every attempt, backoff and endpoint wait included.
    /// No attempt starts after it, and an attempt's timeout is cut to what is left. `None`:
    /// 2.5 × `timeout_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = crate::limits::MAX_SECONDS), extend("exclusiveMinimum" = 0))]
    pub deadline_s: Option<f64>,
    /// The model's context window in tokens (prompt + completion). Known, it lets the client
    /// trim long histories before sending; `None`: learned from the endpoint's first
    /// context-length error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_CONTEXT_WINDOW))]
    pub context_window: Option<u32>,
    /// Cap of the requests in flight to each of this model's base URLs (on top of the global
    /// `[llm] max_concurrency`); under it the limit adapts to the server (see
    /// `[llm] adaptive_concurrency`). A local server that answers one request at a time
    /// wants 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_CONCURRENCY))]
    pub max_concurrency: Option<usize>,
    /// Stop sequences sent with every request of this model (OpenAI's `stop`; `openai` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Bound of tool-call arguments: `N`, the tool schemas sent to this model give every
    /// string a `maxLength` of at most N characters and every list a `maxItems` of at most 16;
    /// `0`, the schemas as the tools define them; unset, only identifier-like strings (and lists
    /// of them) are bounded, at 100 characters. A model that writes endless arguments (a
    /// server that ignores max_tokens on tool calls) is held to them by the server's grammar.
    pub tool_argument_max_chars: Option<u32>,
    /// How requests with a JSON schema for the answer (structured mutations, persona JSON) are
    /// sent: `auto` (try OpenAI's `json_schema`, then llama-cpp-python's `json_object` with a
    /// schema, then none, and remember what the endpoint took), `json_schema`, `json_object` or
    /// `off` (free-text answers).
    #[serde(default, skip_serializing_if = "is_auto")]
    pub structured_output: StructuredOutput,
    /// Extra HTTP headers sent with every request (`openai` only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// JSONL replies replayed by the `scripted` provider ; unset,
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
    pub fn request_shaping(&self, request: &crate::llm::ChatRequest) -> serde_json::Value {
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
        crate::limits::duration(self.timeout_s.max(0.001))
    }

    /// The per-call deadline ([`ModelSpec::deadline_s`], else 2.5 × the attempt timeout).
    pub fn deadline(&self) -> std::time::Duration {
        let secs = self.deadline_s.unwrap_or(self.timeout_s * 2.5);
        crate::limits::duration(secs.max(0.001))
    }

    /// Check the spec's values; errors name `key` (`default`, `roles.agent`).
    pub(super) fn validate(&self, key: &str) -> Result<()> {
        crate::limits::check_seconds(&format!("{key}.timeout_s"), self.timeout_s)?;
        if let Some(d) = self.deadline_s {
            crate::limits::check_seconds(&format!("{key}.deadline_s"), d)?;
        }
        if let Some(w) = self.context_window {
            if w < MIN_CONTEXT_WINDOW {
                return Err(Error::config(
                    format!("{key}.context_window"),
                    format!("must be at least {MIN_CONTEXT_WINDOW} tokens, got {w}"),
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

/// A field-by-field override of `[llm.default]` for one role (`[llm.roles.<role>]`): each key it
/// sets replaces the default's, the others stay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPatch {
    /// The role's provider (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderKind>,
    /// The role's model (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The role's base_url (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<BaseUrl>,
    /// The role's api_key_env (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The role's temperature (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = f32::MAX))]
    pub temperature: Option<f32>,
    /// The role's max_tokens (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// The role's timeout_s (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = crate::limits::MAX_SECONDS), extend("exclusiveMinimum" = 0))]
    pub timeout_s: Option<f64>,
    /// The role's deadline_s (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = crate::limits::MAX_SECONDS), extend("exclusiveMinimum" = 0))]
    pub deadline_s: Option<f64>,
    /// The role's context_window (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_CONTEXT_WINDOW))]
    pub context_window: Option<u32>,
    /// The role's max_concurrency (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::MAX_CONCURRENCY))]
    pub max_concurrency: Option<usize>,
    /// The role's stop (replaces `[llm.default]`'s list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// The role's tool_argument_max_chars (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_argument_max_chars: Option<u32>,
    /// The role's structured_output (default: `[llm.default]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<StructuredOutput>,
    /// Extra headers, merged over the default's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// The role's script (default: `[llm.default]`'s).
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
