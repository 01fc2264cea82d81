//! The opt-in, content-addressed on-disk response cache.
//!
//! The key is the SHA-256 of a canonical JSON document (sorted keys, no whitespace) holding
//! the provider name, model, base URL and the effective request *without* its role — so the
//! user simulator and the agent share entries for identical prompts with identical settings
//! (temperature, `max_tokens`, seed, tools; the per-role default `max_tokens` differ). Each entry is one file
//! `DIR/ab/abcdef….json` written atomically; a corrupt or unreadable entry is a miss.
//!
//! A cache returns the same answer for the same request even at temperature > 0: enable it
//! for reproducible re-runs and development, not when sampling diversity is wanted.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::{ChatRequest, ChatResponse};
use crate::{Error, Result};

/// Version of the key material layout; bump to invalidate every entry.
const KEY_VERSION: u32 = 1;

/// Serialize a JSON value with object keys sorted recursively and no whitespace.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&m[k]));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// A directory of cached responses.
#[derive(Debug, Clone)]
pub struct ResponseCache {
    dir: PathBuf,
}

impl ResponseCache {
    /// Open (and create) a cache directory.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating directory", &dir, e))?;
        Ok(ResponseCache { dir })
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of a request sent to `model` at `base_url` through `provider`. The request's
    /// role is not part of the key.
    pub fn key(provider: &str, model: &str, base_url: &str, request: &ChatRequest) -> String {
        ResponseCache::key_shaped(provider, model, base_url, &Value::Null, request)
    }

    /// [`ResponseCache::key`] for a model whose requests are also shaped by its spec
    /// ([`super::ModelSpec::request_shaping`]: stop sequences, bounded tool arguments); a
    /// null `shaping` gives the same key as [`ResponseCache::key`].
    pub fn key_shaped(
        provider: &str,
        model: &str,
        base_url: &str,
        shaping: &Value,
        request: &ChatRequest,
    ) -> String {
        let mut req = serde_json::to_value(request).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut req {
            m.remove("role");
        }
        let mut material = json!({
            "v": KEY_VERSION,
            "provider": provider,
            "model": model,
            "base_url": base_url,
            "request": req,
        });
        if !shaping.is_null() {
            material["shaping"] = shaping.clone();
        }
        crate::io::sha256_hex(canonical_json(&material).as_bytes())
    }

    /// Where the entry of `key` lives.
    pub fn path(&self, key: &str) -> PathBuf {
        let shard = key.get(..2).unwrap_or("00");
        self.dir.join(shard).join(format!("{key}.json"))
    }

    /// The cached response of `key`, marked `cached: true`. Missing, unreadable or corrupt
    /// entries are misses (corrupt ones are logged).
    pub fn get(&self, key: &str) -> Option<ChatResponse> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        let parsed = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("response").cloned())
            .and_then(|r| serde_json::from_value::<ChatResponse>(r).ok());
        match parsed {
            Some(mut r) => {
                r.cached = true;
                Some(r)
            }
            None => {
                tracing::warn!(path = %path.display(), "ignoring corrupt LLM cache entry");
                None
            }
        }
    }

    /// Store a response under `key` (atomically; `cached` is stored as false).
    pub fn put(&self, key: &str, response: &ChatResponse) -> Result<()> {
        let mut stored = response.clone();
        stored.cached = false;
        let doc = json!({ "key": key, "response": stored });
        let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| {
            Error::parse(
                self.path(key),
                "$",
                format!("cannot serialize response: {e}"),
            )
        })?;
        crate::io::write_atomic(&self.path(key), &bytes)
    }

    /// Number of entries on disk.
    pub fn len(&self) -> usize {
        let Ok(shards) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        shards
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| {
                std::fs::read_dir(e.path())
                    .map(|d| {
                        d.flatten()
                            .filter(|f| f.path().extension().is_some_and(|x| x == "json"))
                            .count()
                    })
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
