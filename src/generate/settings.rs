//! `[sandbox]`: the limits of one generation of an untrusted generator program (time, memory,
//! LLM calls, how many run at once), their defaults and their check. `evolve` reads them from
//! the run configuration; `generate` owns them.

use serde::{Deserialize, Serialize};

use crate::generate::sandbox::{SandboxConfig, MAX_LLM_CALLS};
use crate::limits::{self, check};
use crate::{Error, Result};

/// Sandbox limits for generator programs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSection {
    /// Wall-clock limit of one generation, seconds (at most a day): the program's own time,
    /// not the time it waits on the model (model calls are bounded by `[llm]` and the budget).
    #[schemars(range(max = crate::generate::sandbox::MAX_TIMEOUT_S), extend("exclusiveMinimum" = 0))]
    pub timeout_s: f64,
    /// Address-space limit, MiB.
    #[schemars(range(min = crate::limits::MIN_MEMORY_MB, max = crate::limits::MAX_MEMORY_MB))]
    pub memory_mb: u64,
    /// LLM calls one generation may make.
    #[schemars(range(max = crate::limits::MAX_LLM_CALLS))]
    pub max_llm_calls: usize,
    /// Generations at once (0 = the number of CPUs offline; with an LLM behind `ppol_llm`, 16,
    /// or as many requests as the generator role may have in flight when fewer, or the number
    /// of CPUs when more).
    #[schemars(range(max = crate::limits::MAX_CONCURRENCY))]
    pub concurrency: usize,
}

/// Generations at once by default when an LLM answers `ppol_llm`: such a program spends its
/// time waiting for replies, not on a CPU, so the number of CPUs would leave the endpoint idle
/// (four candidates in flight on two cores ran their 16 generations two at a time).
pub const LLM_SANDBOX_CONCURRENCY: usize = 16;

impl SandboxSection {
    /// The sandbox configuration of this section; `llm_capacity`: when an LLM answers
    /// `ppol_llm`, how many requests the generator role may have in flight (a server that
    /// answers one at a time gains nothing from more programs waiting on it, and their
    /// wall-clock timeouts would run while they wait).
    pub fn sandbox_config(&self, llm_capacity: Option<usize>) -> Result<SandboxConfig> {
        let mut cfg = SandboxConfig {
            timeout: limits::seconds("sandbox.timeout_s", self.timeout_s)?,
            memory_bytes: self.memory_mb << 20,
            max_llm_calls: self.max_llm_calls,
            ..SandboxConfig::default()
        };
        if self.concurrency > 0 {
            cfg.concurrency = self.concurrency;
        } else if let Some(capacity) = llm_capacity {
            cfg.concurrency = cfg.concurrency.max(LLM_SANDBOX_CONCURRENCY.min(capacity));
        }
        Ok(cfg)
    }

    /// Check the values serde cannot (the error names the key).
    pub fn validate(&self) -> Result<()> {
        limits::seconds("sandbox.timeout_s", self.timeout_s)?;
        if self.timeout_s > crate::generate::sandbox::MAX_TIMEOUT_S {
            return Err(Error::config(
                "sandbox.timeout_s",
                format!(
                    "must be at most {} seconds (a day), got {}",
                    crate::generate::sandbox::MAX_TIMEOUT_S,
                    limits::shown(self.timeout_s)
                ),
            ));
        }
        check(
            "sandbox.memory_mb",
            self.memory_mb,
            limits::MIN_MEMORY_MB,
            limits::MAX_MEMORY_MB,
        )?;
        check(
            "sandbox.max_llm_calls",
            self.max_llm_calls,
            0,
            limits::MAX_LLM_CALLS,
        )?;
        check(
            "sandbox.concurrency",
            self.concurrency,
            0,
            limits::MAX_CONCURRENCY,
        )
    }
}

impl Default for SandboxSection {
    fn default() -> Self {
        SandboxSection {
            timeout_s: 120.0,
            memory_mb: 1024,
            max_llm_calls: MAX_LLM_CALLS,
            concurrency: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_wait_on_an_llm_so_more_run_at_once_with_one() {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let s = SandboxSection::default();
        assert_eq!(s.sandbox_config(None).unwrap().concurrency, cpus);
        assert_eq!(
            s.sandbox_config(Some(256)).unwrap().concurrency,
            cpus.max(LLM_SANDBOX_CONCURRENCY)
        );
        // a server answering one request at a time: no more programs than CPUs wait on it
        assert_eq!(s.sandbox_config(Some(1)).unwrap().concurrency, cpus);
        let fixed = SandboxSection {
            concurrency: 3,
            ..SandboxSection::default()
        };
        assert_eq!(fixed.sandbox_config(Some(256)).unwrap().concurrency, 3);
        let nan = SandboxSection {
            timeout_s: f64::NAN,
            ..SandboxSection::default()
        };
        let e = nan.sandbox_config(None).unwrap_err().to_string();
        assert!(e.contains("sandbox.timeout_s"), "{e}");
    }

    #[test]
    fn the_sandbox_and_its_section_agree_on_the_llm_call_limit() {
        assert_eq!(SandboxConfig::default().max_llm_calls, MAX_LLM_CALLS);
        assert_eq!(SandboxSection::default().max_llm_calls, MAX_LLM_CALLS);
    }
}
