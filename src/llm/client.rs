//! [`LlmClient`]: the one wrapper every LLM call in ppol goes through.
//!
//! * **Routing** — each [`CallRole`] has its own [`ModelSpec`] and provider; roles with the same
//!   spec share one provider (and its connection pool or script).
//! * **Concurrency** — each base URL has its own limit of requests in flight
//!   ([`super::endpoint`]), adaptive by default: it grows while the server answers at a flat
//!   latency and shrinks on 429 / 503, timeouts and rising latency, under a cap (the smallest
//!   `max_concurrency` of the specs using it and the top-level `max_concurrency`). The
//!   top-level `max_concurrency` is also one limit over all calls (a permit is held for the
//!   whole call, retries and backoff included). Both serve waiting calls in the order their
//!   work started ([`super::endpoint::first_come`]: an episode's calls before those of
//!   episodes started after it), not in arrival order, so that with fewer slots than episodes
//!   the first episodes finish first. [`LlmClient::endpoint_stats`] and
//!   [`Accounting::endpoints`] report the limits reached. One client serves any number of
//!   concurrent callers (episodes, candidates): clone it and they share every limit.
//! * **Replicas** — a role whose `base_url` lists several servers sends each attempt to the
//!   replica with the fewest requests in flight (a retry prefers another one); a replica that
//!   refuses connections, or fails three times in a row (5xx, broken connections), is benched
//!   for a while. Cache keys, context windows and accounting are per model, not per replica;
//!   errors name the replica that failed.
//! * **Bounded requests** — a request without `max_tokens` gets the role's spec value, else
//!   the role's default ([`CallRole::default_max_tokens`]). When the model's context window
//!   is known (`context_window`, or learned from a context-length error) the history is
//!   trimmed to fit ([`super::context`]) and the answer carries a note saying so.
//! * **Timeouts, deadline and retries** — every attempt has the role's `timeout_s`, and the
//!   whole call the role's deadline (`deadline_s`, default 2.5 × `timeout_s`): no attempt
//!   starts after it and an attempt's timeout is cut to what is left. Both measure the
//!   server's time: the attempt timeout starts when the request is sent, and time spent
//!   waiting for a free request slot in ppol's own queue does not count towards the
//!   deadline. Rate limits (429),
//!   server errors (5xx), timeouts, broken connections, unparseable bodies, empty answers and
//!   truncated answers (`finish_reason == "length"` with no text) are retried up to
//!   `max_retries` times with exponential backoff and jitter (`Retry-After` honoured); each
//!   retry is logged with `tracing::warn!` and counted. A retry after a failure of the content
//!   (empty, truncated, garbage, timeout) changes the seed and raises the temperature
//!   (0.4, 0.7, 1.0), since an identical request at temperature 0 fails the same way again.
//!   A refused connection is not retried but waited out (bounded by `endpoint_wait_s` and the
//!   deadline, shared by all callers of the endpoint). A context-length error is answered by
//!   trimming and resending (at most three times per call). Other 4xx fail at once.
//! * **Cache** — opt-in ([`super::ResponseCache`]); a hit makes no request, costs nothing and
//!   is marked `cached: true`. Hits are served even when the budget is spent. Providers that
//!   say they are not [cacheable](super::Provider::cacheable) (scripted) bypass it.
//! * **Accounting and budget** — per role: calls, cache hits, attempts, retries, failures,
//!   budget refusals, tokens and USD ([`Accounting`]). Once a [`Budget`] cap is reached, new
//!   calls fail fast with [`Error::BudgetExhausted`]; calls already in flight complete.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::context::{self, Calibration};
use super::endpoint::{Endpoint, EndpointStats};
use super::{
    llm_error, Budget, CallRole, ChatModel, ChatRequest, ChatResponse, ContextBudget, LlmConfig,
    ModelSpec, OpenAiProvider, Provider, ProviderKind, ResponseCache, ScriptedModel,
};
use crate::{Error, Result};

mod attempts;
pub mod budget;

/// Longest wait honoured from a `Retry-After` header.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(120);

/// Temperatures of the retries after a failure of the content (first, second, third and later).
const RETRY_TEMPERATURES: [f32; 3] = [0.4, 0.7, 1.0];

/// Resends after a context-length error within one call.
const MAX_CONTEXT_RESENDS: u32 = 3;

/// Times one call goes on after waiting for an unreachable endpoint.
const MAX_RECONNECTS: u32 = 5;

/// What is known about one model's context at one endpoint.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    /// Learned from a context-length error.
    learned: Option<u32>,
    /// Characters per token.
    calibration: Calibration,
}

/// Counters of one role (or of all roles, in [`Accounting::total`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleAccounting {
    /// Calls made (every `chat()` invocation: answered, cached, failed or refused).
    pub calls: u64,
    /// Calls answered from the cache (no request, no cost).
    pub cache_hits: u64,
    /// Requests sent to the provider (first attempts and retries).
    pub attempts: u64,
    /// Retries (attempts after a retryable failure).
    pub retries: u64,
    /// Calls that ended in an error after their retries.
    pub failures: u64,
    /// Calls refused because the budget was spent.
    pub budget_refusals: u64,
    /// Prompt tokens of answered, uncached calls.
    pub prompt_tokens: u64,
    /// Completion tokens of answered, uncached calls.
    pub completion_tokens: u64,
    /// Cost in USD of answered, uncached calls.
    pub usd: f64,
    /// Wall-clock seconds spent in successful provider attempts (latency sum).
    pub latency_s: f64,
}

impl RoleAccounting {
    /// Add another set of counters to this one.
    pub fn add(&mut self, o: &RoleAccounting) {
        self.calls += o.calls;
        self.cache_hits += o.cache_hits;
        self.attempts += o.attempts;
        self.retries += o.retries;
        self.failures += o.failures;
        self.budget_refusals += o.budget_refusals;
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
        self.usd += o.usd;
        self.latency_s += o.latency_s;
    }

    /// Prompt plus completion tokens.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// A snapshot of the client's accounting, for the run log and reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Accounting {
    /// Per role (roles without calls are included with zeros).
    pub roles: BTreeMap<CallRole, RoleAccounting>,
    /// Sum over roles.
    pub total: RoleAccounting,
    /// The configured caps.
    pub budget: Budget,
    /// Why new calls are refused, once a cap is reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_exhausted: Option<String>,
    /// Which model answers each role (`openai:gpt-4o-mini@https://...`).
    pub models: BTreeMap<CallRole, String>,
    /// The concurrency reached at each HTTP endpoint (replica): final limit, maximum,
    /// decreases ([`LlmClient::endpoint_stats`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointStats>,
}

impl Accounting {
    /// Add another snapshot (e.g. from another process) to this one. Budget and models are
    /// kept from `self`.
    pub fn merge(&mut self, other: &Accounting) {
        for (role, acc) in &other.roles {
            self.roles.entry(*role).or_default().add(acc);
        }
        self.total.add(&other.total);
    }
}

impl std::fmt::Display for RoleAccounting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} calls ({} cached), {} retries, {} failures, {} refused, {}+{} tokens, ${:.4}",
            self.calls,
            self.cache_hits,
            self.retries,
            self.failures,
            self.budget_refusals,
            self.prompt_tokens,
            self.completion_tokens,
            self.usd
        )
    }
}

impl std::fmt::Display for Accounting {
    /// One line per role with calls, then the total.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (role, acc) in &self.roles {
            if acc.calls > 0 {
                writeln!(f, "{:<10} {acc}", role.as_str())?;
            }
        }
        write!(f, "{:<10} {}", "total", self.total)?;
        if let Some(why) = &self.budget_exhausted {
            write!(f, " — {why}")?;
        }
        for e in &self.endpoints {
            write!(f, "\n{:<10} {e}", "endpoint")?;
        }
        Ok(())
    }
}

/// One server of a role's model.
struct Replica {
    provider: Arc<dyn Provider>,
    endpoint: Arc<Endpoint>,
}

struct Route {
    /// The servers of the role's model (one, or replicas), never empty.
    replicas: Vec<Replica>,
    spec: ModelSpec,
    /// The model's endpoint as cache keys and descriptions name it: the replicas' URLs,
    /// comma-separated (one URL: that URL).
    group: String,
    /// Key of this model's [`Window`] (`group|model`).
    window_key: String,
    /// Rotates the choice among equally loaded replicas.
    next: std::sync::atomic::AtomicUsize,
}

impl Route {
    fn provider(&self) -> &Arc<dyn Provider> {
        &self.replicas[0].provider
    }
}

struct Inner {
    routes: BTreeMap<CallRole, Route>,
    semaphore: super::endpoint::Line,
    max_retries: u32,
    backoff_base: Duration,
    backoff_max: Duration,
    endpoint_wait: Duration,
    cache: Option<ResponseCache>,
    config: LlmConfig,
    stats: Mutex<BTreeMap<CallRole, RoleAccounting>>,
    /// What the calls in flight have reserved of the budget ([`budget`]).
    held: Mutex<budget::Held>,
    /// Woken when a reservation is given back (calls waiting for room).
    settled: tokio::sync::Notify,
    /// Set when a call's worst case did not fit with nothing in flight: the budget is spent
    /// for calls of that size, and new calls stop (the reason).
    spent_for: Mutex<Option<String>>,
    windows: Mutex<BTreeMap<String, Window>>,
}

/// The LLM wrapper. Cheap to clone (all clones share limits, cache and accounting).
/// See the [module docs](self).
#[derive(Clone)]
pub struct LlmClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("models", &self.describe())
            .field("max_concurrency", &self.inner.config.max_concurrency)
            .finish_non_exhaustive()
    }
}

/// Builds an [`LlmClient`], optionally with custom providers for some roles.
pub struct LlmClientBuilder {
    config: LlmConfig,
    overrides: BTreeMap<CallRole, Arc<dyn Provider>>,
}

impl LlmClientBuilder {
    /// Answer `role` with `provider` instead of the configured one (the role's spec still
    /// supplies timeout, temperature and max_tokens).
    pub fn provider(mut self, role: CallRole, provider: Arc<dyn Provider>) -> Self {
        self.overrides.insert(role, provider);
        self
    }

    /// Validate the configuration and create the providers.
    pub fn build(self) -> Result<LlmClient> {
        let config = self.config;
        config.validate()?;
        let mut shared: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        let mut endpoints: BTreeMap<String, Arc<Endpoint>> = BTreeMap::new();
        let mut routes = BTreeMap::new();
        for role in CallRole::ALL {
            let spec = config.spec(role);
            let key = if config.roles.contains_key(&role) {
                format!("roles.{}", role.as_str())
            } else {
                "default".to_string()
            };
            // One spec per replica (the same spec when there is one server).
            let replica_specs: Vec<ModelSpec> = match spec.provider {
                ProviderKind::OpenAi if !self.overrides.contains_key(&role) => {
                    let urls = spec.resolved_base_urls();
                    if urls.len() == 1 {
                        vec![spec.clone()]
                    } else {
                        urls.iter().map(|u| spec.for_replica(u)).collect()
                    }
                }
                _ => vec![spec.clone()],
            };
            let cap = spec
                .max_concurrency
                .map_or(config.max_concurrency, |m| m.min(config.max_concurrency));
            let mut replicas = Vec::with_capacity(replica_specs.len());
            for rspec in &replica_specs {
                let provider = match self.overrides.get(&role) {
                    Some(p) => p.clone(),
                    None => {
                        let id = serde_json::to_string(rspec).unwrap_or_default();
                        match shared.get(&id) {
                            Some(p) => p.clone(),
                            None => {
                                let p: Arc<dyn Provider> = match rspec.provider {
                                    ProviderKind::OpenAi => {
                                        Arc::new(OpenAiProvider::from_spec_capped(
                                            rspec,
                                            &key,
                                            config.max_response_bytes,
                                        )?)
                                    }
                                    ProviderKind::Scripted => Arc::new(ScriptedModel::from_script(
                                        rspec.script.as_deref(),
                                    )?),
                                };
                                shared.insert(id, p.clone());
                                p
                            }
                        }
                    }
                };
                let url = provider.endpoint();
                let endpoint = endpoints
                    .entry(url.clone())
                    .or_insert_with(|| {
                        Arc::new(Endpoint::with_mode(
                            &url,
                            Some(cap),
                            config.adaptive_concurrency,
                        ))
                    })
                    .clone();
                endpoint.limit_to(Some(cap));
                replicas.push(Replica { provider, endpoint });
            }
            let group = replicas
                .iter()
                .map(|r| r.provider.endpoint())
                .collect::<Vec<_>>()
                .join(",");
            let window_key = format!("{group}|{}", replicas[0].provider.model());
            routes.insert(
                role,
                Route {
                    replicas,
                    spec,
                    group,
                    window_key,
                    next: std::sync::atomic::AtomicUsize::new(0),
                },
            );
        }
        let cache = match &config.cache_dir {
            Some(dir) => Some(ResponseCache::new(dir)?),
            None => None,
        };
        let stats = CallRole::ALL
            .iter()
            .map(|r| (*r, RoleAccounting::default()))
            .collect();
        Ok(LlmClient {
            inner: Arc::new(Inner {
                routes,
                semaphore: super::endpoint::Line::new(config.max_concurrency),
                max_retries: config.max_retries,
                backoff_base: Duration::from_millis(config.backoff_base_ms),
                backoff_max: Duration::from_millis(config.effective_backoff_max_ms()),
                endpoint_wait: crate::limits::duration(config.endpoint_wait_s),
                cache,
                stats: Mutex::new(stats),
                held: Mutex::new(budget::Held::default()),
                settled: tokio::sync::Notify::new(),
                spent_for: Mutex::new(None),
                windows: Mutex::new(BTreeMap::new()),
                config,
            }),
        })
    }
}

/// What one call ended with, for the accounting update.
enum Outcome<'a> {
    Hit,
    Refused,
    Answered(&'a ChatResponse, f64),
    Failed,
}

impl LlmClient {
    /// A builder starting from a configuration.
    pub fn builder(config: LlmConfig) -> LlmClientBuilder {
        LlmClientBuilder {
            config,
            overrides: BTreeMap::new(),
        }
    }

    /// A client for a configuration (validated; providers created; API keys read from the
    /// environment). Needs no runtime; calls need a tokio runtime.
    pub fn from_config(config: &LlmConfig) -> Result<Self> {
        LlmClient::builder(config.clone()).build()
    }

    /// A client for a `--llm` value (see [`LlmConfig::from_cli_value`]).
    pub fn from_cli_value(value: &str) -> Result<Self> {
        LlmClient::from_config(&LlmConfig::from_cli_value(value)?)
    }

    /// The configuration in use.
    pub fn config(&self) -> &LlmConfig {
        &self.inner.config
    }

    /// The resolved spec of a role.
    pub fn spec(&self, role: CallRole) -> &ModelSpec {
        &self.inner.routes[&role].spec
    }

    /// The provider behind a role (the first replica's, when there are several).
    pub fn provider(&self, role: CallRole) -> Arc<dyn Provider> {
        self.inner.routes[&role].provider().clone()
    }

    /// The base URLs behind a role (several: replicas of its model).
    pub fn replicas(&self, role: CallRole) -> Vec<String> {
        self.inner.routes[&role]
            .replicas
            .iter()
            .map(|r| r.endpoint.url().to_string())
            .collect()
    }

    /// `provider:model@endpoint` of a role (replicas comma-separated), printable: a model name
    /// (from a config or `$PPOL_LLM_MODEL`) with control or bidi characters shows them escaped.
    pub fn describe_role(&self, role: CallRole) -> String {
        let route = &self.inner.routes[&role];
        let p = route.provider();
        let text = match p.name() {
            "openai" => format!("openai:{}@{}", p.model(), route.group),
            _ => p.endpoint(),
        };
        crate::io::printable(&text).into_owned()
    }

    /// The concurrency reached at each HTTP endpoint (every replica once, in role order): the
    /// limit now, the highest, how often it went down. Cheap; callers may poll it.
    pub fn endpoint_stats(&self) -> Vec<EndpointStats> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for route in self.inner.routes.values() {
            for r in &route.replicas {
                let url = r.endpoint.url();
                if url.starts_with("http") && seen.insert(url.to_string()) {
                    out.push(r.endpoint.stats());
                }
            }
        }
        out
    }

    /// The response cache, if enabled.
    pub fn cache(&self) -> Option<&ResponseCache> {
        self.inner.cache.as_ref()
    }

    /// A snapshot of the accounting.
    pub fn accounting(&self) -> Accounting {
        let roles = self.lock_stats().clone();
        let mut total = RoleAccounting::default();
        for r in roles.values() {
            total.add(r);
        }
        let budget_exhausted = self.exhausted_by(&total);
        Accounting {
            roles,
            total,
            budget: self.inner.config.budget,
            budget_exhausted,
            models: CallRole::ALL
                .iter()
                .map(|r| (*r, self.describe_role(*r)))
                .collect(),
            endpoints: self.endpoint_stats(),
        }
    }

    /// Count what earlier processes of the same run spent (their per-role accounting, e.g. from
    /// the run's checkpoint or cost ledger) as if this client had made those calls: the
    /// accounting then reports the run's totals and the budget caps apply to them, not to this
    /// process alone. Call it once, before the first call.
    pub fn add_prior(&self, prior: &BTreeMap<CallRole, RoleAccounting>) {
        let mut stats = self.lock_stats();
        for (role, acc) in prior {
            stats.entry(*role).or_default().add(acc);
        }
    }

    /// Why new calls are refused, if a budget cap is reached.
    pub fn budget_exhausted(&self) -> Option<String> {
        let stats = self.lock_stats();
        let mut total = RoleAccounting::default();
        for r in stats.values() {
            total.add(r);
        }
        drop(stats);
        self.exhausted_by(&total)
    }

    fn lock_stats(&self) -> std::sync::MutexGuard<'_, BTreeMap<CallRole, RoleAccounting>> {
        self.inner.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn exhausted_by(&self, total: &RoleAccounting) -> Option<String> {
        if let Some(why) = self.spent_for() {
            return Some(why);
        }
        let budget = &self.inner.config.budget;
        if let Some(max) = budget.max_usd {
            if total.usd >= max {
                return Some(format!(
                    "USD budget of ${max:.4} reached (${:.4} spent)",
                    total.usd
                ));
            }
        }
        if let Some(max) = budget.max_tokens {
            if total.tokens() >= max {
                return Some(format!(
                    "token budget of {max} reached ({} tokens used)",
                    total.tokens()
                ));
            }
        }
        None
    }

    fn record(&self, role: CallRole, outcome: Outcome<'_>) {
        let mut stats = self.lock_stats();
        let s = stats.entry(role).or_default();
        s.calls += 1;
        match outcome {
            Outcome::Hit => s.cache_hits += 1,
            Outcome::Refused => s.budget_refusals += 1,
            Outcome::Failed => s.failures += 1,
            Outcome::Answered(r, latency) => {
                let price = self.price_of(role, Some(&r.model));
                s.prompt_tokens += r.usage.prompt_tokens;
                s.completion_tokens += r.usage.completion_tokens;
                s.usd += price.cost(r.usage.prompt_tokens, r.usage.completion_tokens);
                s.latency_s += latency;
            }
        }
    }

    /// The price of `role`'s model (else of the model an answer names).
    fn price_of(&self, role: CallRole, answered_by: Option<&str>) -> super::config::Price {
        let prices = &self.inner.config.prices;
        prices
            .get(self.inner.routes[&role].provider().model())
            .or_else(|| answered_by.and_then(|m| prices.get(m)))
            .copied()
            .unwrap_or_default()
    }

    fn count_attempt(&self, role: CallRole, retry: bool) {
        let mut stats = self.lock_stats();
        let s = stats.entry(role).or_default();
        s.attempts += 1;
        if retry {
            s.retries += 1;
        }
    }

    /// The delay before retry number `retry` (0-based): `base · 2^retry` capped at the
    /// maximum, with jitter in [½, 1] of that, and at least the server's `Retry-After`.
    pub fn backoff(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .inner
            .backoff_base
            .saturating_mul(2u32.saturating_pow(retry.min(20)))
            .min(self.inner.backoff_max);
        let ms = exp.as_millis() as u64;
        let jittered = if ms >= 2 {
            Duration::from_millis(rand::random_range(ms / 2..=ms))
        } else {
            exp
        };
        match retry_after {
            Some(ra) => jittered.max(ra.min(RETRY_AFTER_CAP)),
            None => jittered,
        }
    }

    /// The request as sent: the role's spec fills temperature and max_tokens when unset, and
    /// the role's default caps the completion when neither does; an
    /// [`external`](ChatRequest::external) caller's max_tokens is clamped to that cap.
    pub fn effective(&self, request: &ChatRequest) -> ChatRequest {
        let spec = &self.inner.routes[&request.role].spec;
        let mut r = request.clone();
        if r.temperature.is_none() {
            r.temperature = spec.temperature;
        }
        let cap = spec
            .max_tokens
            .unwrap_or_else(|| request.role.default_max_tokens());
        r.max_tokens = match r.max_tokens {
            None => Some(cap),
            Some(asked) if r.external => Some(asked.min(cap)),
            asked => asked,
        };
        r
    }

    /// The context window used for a role: its `context_window`, else one learned from the
    /// endpoint's context-length error, else unknown.
    pub fn context_window(&self, role: CallRole) -> Option<u32> {
        let route = &self.inner.routes[&role];
        route
            .spec
            .context_window
            .or_else(|| self.window(&route.window_key).learned)
    }

    fn window(&self, key: &str) -> Window {
        self.inner
            .windows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or_default()
    }

    fn update_window(&self, key: &str, f: impl FnOnce(&mut Window)) {
        let mut w = self.inner.windows.lock().unwrap_or_else(|e| e.into_inner());
        f(w.entry(key.to_string()).or_default());
    }

    /// `request` trimmed to the role's context window, when one is known.
    fn fit(
        &self,
        role: CallRole,
        request: &ChatRequest,
    ) -> std::result::Result<(ChatRequest, Option<String>), String> {
        let route = &self.inner.routes[&role];
        let Some(window) = self.context_window(role) else {
            return Ok((request.clone(), None));
        };
        let w = self.window(&route.window_key);
        match context::fit(request, window, &w.calibration, role.default_max_tokens()) {
            Ok(f) if f.changed() => {
                let note = f.note();
                tracing::info!(role = role.as_str(), "{note}");
                Ok((f.request, Some(note)))
            }
            Ok(f) => Ok((f.request, None)),
            Err(e) => Err(e.to_string()),
        }
    }

    /// One call: the cache, the budget (checked again once a permit is had), then the
    /// attempts ([`LlmClient::attempts`]); an answer is stored in the cache.
    async fn call(&self, request: &ChatRequest) -> Result<ChatResponse> {
        let role = request.role;
        let route = &self.inner.routes[&role];
        let request = self.effective(request);
        let cache_key = self.cache_key(route, &request);
        if let Some(hit) = self.cache_hit(role, &route.group, cache_key.as_deref()) {
            return Ok(hit);
        }
        self.refuse_when_exhausted(role, &route.group)?;
        let _permit = self.inner.semaphore.permit().await;
        // A call that waited for a permit is not in flight yet: check again.
        self.refuse_when_exhausted(role, &route.group)?;
        let response = self.attempts(route, request).await?;
        if let Some(key) = cache_key {
            self.cache_put(key, &response).await;
        }
        Ok(response)
    }

    /// The cache key of `request` (sent to the model's endpoint, all replicas), when there
    /// is a cache and the provider's answers may be cached.
    fn cache_key(&self, route: &Route, request: &ChatRequest) -> Option<String> {
        let provider = route.provider();
        self.inner
            .cache
            .as_ref()
            .filter(|_| provider.cacheable())
            .map(|_| {
                ResponseCache::key_shaped(
                    provider.name(),
                    provider.model(),
                    &route.group,
                    &route.spec.request_shaping(request),
                    request,
                )
            })
    }

    /// The cached answer under `key`, counted as a cache hit.
    fn cache_hit(&self, role: CallRole, endpoint: &str, key: Option<&str>) -> Option<ChatResponse> {
        let hit = self.inner.cache.as_ref()?.get(key?)?;
        self.record(role, Outcome::Hit);
        tracing::debug!(role = role.as_str(), %endpoint, "LLM cache hit");
        Some(hit)
    }

    /// Store an answer in the cache (a failure to write is logged, not an error).
    async fn cache_put(&self, key: String, response: &ChatResponse) {
        let Some(cache) = &self.inner.cache else {
            return;
        };
        let (cache, r) = (cache.clone(), response.clone());
        let stored = tokio::task::spawn_blocking(move || cache.put(&key, &r)).await;
        match stored {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("LLM cache write failed: {e}"),
            Err(e) => tracing::warn!("LLM cache write failed: {e}"),
        }
    }

    /// Refuse the call (counted) when the budget is spent.
    fn refuse_when_exhausted(&self, role: CallRole, endpoint: &str) -> Result<()> {
        match self.budget_exhausted() {
            Some(why) => Err(self.refuse(role, endpoint, why)),
            None => Ok(()),
        }
    }

    /// A call refused (counted) because the budget is spent (`why`).
    fn refuse(&self, role: CallRole, endpoint: &str, why: String) -> Error {
        self.record(role, Outcome::Refused);
        Error::BudgetExhausted(format!(
            "{why}; {} call to {endpoint} refused",
            role.as_str()
        ))
    }

    /// A failed call (counted), with what went wrong.
    fn fail(&self, role: CallRole, endpoint: &str, message: String) -> Error {
        self.record(role, Outcome::Failed);
        llm_error(endpoint, role, message)
    }
}

#[async_trait]
impl ChatModel for LlmClient {
    fn serve_limits(&self) -> super::ServeLimits {
        self.config().serve
    }

    fn describe_for(&self, role: CallRole) -> String {
        self.describe_role(role)
    }

    fn describe(&self) -> String {
        let first = self.describe_role(CallRole::ALL[0]);
        if CallRole::ALL
            .iter()
            .all(|r| self.describe_role(*r) == first)
        {
            return first;
        }
        CallRole::ALL
            .iter()
            .map(|r| format!("{}={}", r.as_str(), self.describe_role(*r)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn schema_support(&self, role: CallRole) -> Option<bool> {
        // replicas serve one model: the first that learned speaks for all
        self.inner
            .routes
            .get(&role)?
            .replicas
            .iter()
            .find_map(|r| r.provider.schema_support())
    }

    fn context_budget(&self, role: CallRole) -> Option<ContextBudget> {
        let window = self.context_window(role)?;
        let key = &self.inner.routes[&role].window_key;
        Some(ContextBudget {
            window,
            chars_per_token: self.window(key).calibration.chars_per_token,
        })
    }

    /// Route by `request.role`, with cache, budget, concurrency limit, timeout and retries.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        self.call(request).await
    }
}

/// What to change when a request that offers tools gets no answer in time and not every
/// tool-call argument is bounded (the default bounds identifier-like ones only): llama-cpp-python's function-calling format ignores `max_tokens`
/// on a tool call, and a weak model writes one argument until the context is full.
fn unbounded_tools_hint(request: &ChatRequest, spec: &ModelSpec) -> String {
    let what = match spec.tool_argument_bound() {
        super::config::ToolArgumentBound::All(_) => return String::new(),
        _ if request.tools.is_empty() => return String::new(),
        super::config::ToolArgumentBound::Identifiers(_) => {
            "only identifier-like arguments are bounded by default"
        }
        super::config::ToolArgumentBound::Unbounded => "tool_argument_max_chars = 0 bounds none",
    };
    let role = request.role.as_str();
    format!(
        "; a request with tools that does not end is often a server that ignores max_tokens on \
         tool calls (llama-cpp-python) while the model writes a free-text argument ({what}): \
         bound the arguments with tool_argument_max_chars (and stop) under [llm.roles.{role}]"
    )
}
