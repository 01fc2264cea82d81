//! [`LlmClient`]: the one wrapper every LLM call in ppol goes through.
//!
//! * **Routing** — each [`CallRole`] has its own [`ModelSpec`] and provider; roles with the same
//!   spec share one provider (and its connection pool or script).
//! * **Concurrency** — one global semaphore of `max_concurrency` permits over all roles. A
//!   permit is held for the whole call, retries and backoff included.
//! * **Timeouts and retries** — every attempt has the role's `timeout_s`. Rate limits (429),
//!   server errors (5xx), timeouts, connection errors, unparseable bodies or tool arguments,
//!   empty answers and truncated answers (`finish_reason == "length"` with no text) are retried
//!   up to `max_retries` times with exponential backoff and jitter (`Retry-After` honoured);
//!   each retry is logged with `tracing::warn!` and counted. Other 4xx fail at once.
//! * **Cache** — opt-in ([`super::ResponseCache`]); a hit makes no request, costs nothing and
//!   is marked `cached: true`. Hits are served even when the budget is spent. Providers that
//!   say they are not [cacheable](super::Provider::cacheable) (scripted) bypass it.
//! * **Accounting and budget** — per role: calls, cache hits, attempts, retries, failures,
//!   budget refusals, tokens and USD ([`Accounting`]). Once a [`Budget`] cap is reached, new
//!   calls fail fast with [`Error::BudgetExhausted`]; calls already in flight complete.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use super::{
    llm_error, AttemptError, Budget, CallRole, ChatModel, ChatRequest, ChatResponse, FailureKind,
    LlmConfig, ModelSpec, OpenAiProvider, Provider, ProviderKind, ResponseCache, ScriptedModel,
};
use crate::{Error, Result};

/// Longest wait honoured from a `Retry-After` header.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(120);

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
        Ok(())
    }
}

struct Route {
    provider: Arc<dyn Provider>,
    spec: ModelSpec,
}

struct Inner {
    routes: BTreeMap<CallRole, Route>,
    semaphore: Semaphore,
    max_retries: u32,
    backoff_base: Duration,
    backoff_max: Duration,
    cache: Option<ResponseCache>,
    config: LlmConfig,
    stats: Mutex<BTreeMap<CallRole, RoleAccounting>>,
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
        let mut routes = BTreeMap::new();
        for role in CallRole::ALL {
            let spec = config.spec(role);
            let key = if config.roles.contains_key(&role) {
                format!("roles.{}", role.as_str())
            } else {
                "default".to_string()
            };
            let provider = match self.overrides.get(&role) {
                Some(p) => p.clone(),
                None => {
                    let id = serde_json::to_string(&spec).unwrap_or_default();
                    match shared.get(&id) {
                        Some(p) => p.clone(),
                        None => {
                            let p: Arc<dyn Provider> = match spec.provider {
                                ProviderKind::OpenAi => {
                                    Arc::new(OpenAiProvider::from_spec(&spec, &key)?)
                                }
                                ProviderKind::Scripted => {
                                    Arc::new(ScriptedModel::from_script(spec.script.as_deref())?)
                                }
                            };
                            shared.insert(id, p.clone());
                            p
                        }
                    }
                }
            };
            routes.insert(role, Route { provider, spec });
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
                semaphore: Semaphore::new(config.max_concurrency),
                max_retries: config.max_retries,
                backoff_base: Duration::from_millis(config.backoff_base_ms),
                backoff_max: Duration::from_millis(config.backoff_max_ms),
                cache,
                stats: Mutex::new(stats),
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

    /// The provider behind a role.
    pub fn provider(&self, role: CallRole) -> Arc<dyn Provider> {
        self.inner.routes[&role].provider.clone()
    }

    /// `provider:model@endpoint` of a role.
    pub fn describe_role(&self, role: CallRole) -> String {
        let p = &self.inner.routes[&role].provider;
        match p.name() {
            "openai" => format!("openai:{}@{}", p.model(), p.endpoint()),
            _ => p.endpoint(),
        }
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
                let price = self
                    .inner
                    .config
                    .prices
                    .get(self.inner.routes[&role].provider.model())
                    .or_else(|| self.inner.config.prices.get(&r.model))
                    .copied()
                    .unwrap_or_default();
                s.prompt_tokens += r.usage.prompt_tokens;
                s.completion_tokens += r.usage.completion_tokens;
                s.usd += price.cost(r.usage.prompt_tokens, r.usage.completion_tokens);
                s.latency_s += latency;
            }
        }
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

    /// The request as sent: the role's spec fills temperature and max_tokens when unset.
    fn effective(&self, request: &ChatRequest) -> ChatRequest {
        let spec = &self.inner.routes[&request.role].spec;
        let mut r = request.clone();
        if r.temperature.is_none() {
            r.temperature = spec.temperature;
        }
        if r.max_tokens.is_none() {
            r.max_tokens = spec.max_tokens;
        }
        r
    }

    async fn call(&self, request: &ChatRequest) -> Result<ChatResponse> {
        let role = request.role;
        let route = &self.inner.routes[&role];
        let provider = route.provider.clone();
        let endpoint = provider.endpoint();
        let request = self.effective(request);

        let cache_key = self
            .inner
            .cache
            .as_ref()
            .filter(|_| provider.cacheable())
            .map(|_| ResponseCache::key(provider.name(), provider.model(), &endpoint, &request));
        if let (Some(cache), Some(key)) = (&self.inner.cache, &cache_key) {
            if let Some(hit) = cache.get(key) {
                self.record(role, Outcome::Hit);
                tracing::debug!(role = role.as_str(), %endpoint, "LLM cache hit");
                return Ok(hit);
            }
        }

        if let Some(why) = self.budget_exhausted() {
            self.record(role, Outcome::Refused);
            return Err(Error::BudgetExhausted(format!(
                "{why}; {} call to {endpoint} refused",
                role.as_str()
            )));
        }
        let _permit = self
            .inner
            .semaphore
            .acquire()
            .await
            .map_err(|_| llm_error(&endpoint, role, "client is shut down"))?;
        // A call that waited for a permit is not in flight yet: check again.
        if let Some(why) = self.budget_exhausted() {
            self.record(role, Outcome::Refused);
            return Err(Error::BudgetExhausted(format!(
                "{why}; {} call to {endpoint} refused",
                role.as_str()
            )));
        }

        let timeout = route.spec.timeout();
        let max_retries = self.inner.max_retries;
        let mut retry = 0u32;
        loop {
            self.count_attempt(role, retry > 0);
            let started = Instant::now();
            let result = match tokio::time::timeout(timeout, provider.attempt(&request)).await {
                Ok(r) => r,
                Err(_) => Err(AttemptError::new(
                    FailureKind::Timeout,
                    format!("no answer within {:.3} s", timeout.as_secs_f64()),
                )),
            };
            let error = match result {
                Ok(mut response) => {
                    response.cached = false;
                    self.record(
                        role,
                        Outcome::Answered(&response, started.elapsed().as_secs_f64()),
                    );
                    if let (Some(cache), Some(key)) = (&self.inner.cache, &cache_key) {
                        let (cache, key, r) = (cache.clone(), key.clone(), response.clone());
                        let stored = tokio::task::spawn_blocking(move || cache.put(&key, &r)).await;
                        match stored {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => tracing::warn!("LLM cache write failed: {e}"),
                            Err(e) => tracing::warn!("LLM cache write failed: {e}"),
                        }
                    }
                    return Ok(response);
                }
                Err(e) => e,
            };
            if !error.kind.is_retryable() {
                self.record(role, Outcome::Failed);
                return Err(llm_error(&endpoint, role, format!("{error} (not retried)")));
            }
            if retry >= max_retries {
                self.record(role, Outcome::Failed);
                return Err(llm_error(
                    &endpoint,
                    role,
                    format!(
                        "gave up after {} attempt(s) ({} retries); last error: {error}",
                        retry + 1,
                        retry
                    ),
                ));
            }
            let delay = self.backoff(retry, error.retry_after);
            tracing::warn!(
                role = role.as_str(),
                endpoint = %endpoint,
                attempt = retry + 1,
                max_retries,
                delay_ms = delay.as_millis() as u64,
                "LLM call failed, retrying: {error}"
            );
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }
}

#[async_trait]
impl ChatModel for LlmClient {
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

    /// Route by `request.role`, with cache, budget, concurrency limit, timeout and retries.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        self.call(request).await
    }
}
