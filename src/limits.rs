//! Upper bounds on every count and size ppol accepts, in one place. A value beyond one is one
//! clear error naming the flag or configuration key (exit 2 on the command line, `ConfigError`
//! or `ParseError` in Python), never a run that grows until the machine stops it. The command
//! line checks its flags against these constants as it parses them; the operations layer and
//! [`RunConfig::validate`](crate::evolve::config::RunConfig::validate) check them again, so a
//! Python call meets the same bounds. The checks every settings section shares (a count in
//! its range, seconds, shares, temperatures) are here too. The run configuration's JSON Schema
//! (`ppol config schema`) names the same constants in its fields' ranges
//! (`#[schemars(range(max = crate::limits::MAX_ITERATIONS))]`), so the schema and the check
//! share one source.
//!
//! | what | flags and keys | bound |
//! |---|---|---|
//! | one input file (traces, personas, tasks, answers, configurations) | — | [`MAX_INPUT_BYTES`] (1 GiB) |
//! | one line of a line-based input (JSONL, text traces) | — | [`MAX_LINE_BYTES`] (64 MiB) |
//! | a configuration (TOML), a system prompt (`world.system_prompt_file`), whatever kind of file | `--config`, `--system-prompt-file` | [`MAX_TEXT_FILE_BYTES`] (16 MiB) |
//! | a generator program; a judge prompt (regular files only: a FIFO or a device is refused unread) | `--program`, `search.seed_program`, a run's `best/program.py`; `--judge-prompt`, `fitness.judge_prompt` | [`MAX_PROGRAM_BYTES`] (4 MiB); [`MAX_PROMPT_BYTES`] (1 MiB) |
//! | a run directory's own files (`config.toml`, `checkpoint.json`, `best/`) | — | regular files only; `config.toml` [`MAX_TEXT_FILE_BYTES`] |
//! | trials per (task, persona) | `episodes --trials`, `episodes.baseline_trials` | 1 ..= [`MAX_TRIALS`] (1,000) |
//! | episodes of one request (tasks × personas × trials) | `ppol episodes` | [`MAX_EPISODES`] (100,000) |
//! | personas per task | `generate -n`, `eval --n`, `fitness.n_personas`, `fitness.n_personas_schedule` | 1 ..= [`MAX_PERSONAS`] (1,000) |
//! | personas of one request (tasks × personas per task) | `ppol generate` | [`MAX_EPISODES`] (100,000) |
//! | k-means centroids | `score --clusters`, `fitness.n_clusters` | 0 ..= [`MAX_CLUSTERS`] (1,000) |
//! | user turns per episode; tool-call rounds per agent turn | `--max-turns`, `--max-tool-rounds`, `episodes.max_turns`, `episodes.val_max_turns`, `episodes.max_tool_rounds` | 1 ..= [`MAX_TURNS`] (1,000) |
//! | episodes, programs or requests in flight | `episodes --concurrency`, `generate --concurrency`, `sandbox.concurrency`, `llm.max_concurrency` | ..= [`MAX_CONCURRENCY`] (4,096) |
//! | candidates in flight; children per generation | `--parallel-candidates`, `--generation-size`, `search.*` | 1 ..= [`MAX_PARALLEL_CANDIDATES`] (64); ..= [`MAX_GENERATION`] (1,024) |
//! | LLM calls per generation | `--max-llm-calls`, `sandbox.max_llm_calls` | ..= [`MAX_LLM_CALLS`] (100,000) |
//! | a generator program's memory | `sandbox.memory_mb` | 64 ..= [`MAX_MEMORY_MB`] (1 TiB) |
//! | iterations; evaluations or failures before a stop | `--iterations`, `search.iterations`, `search.early_stop_evaluations`, `search.max_requeues`, `mutation.rewrite_after_failures` | ..= [`MAX_ITERATIONS`] (1,000,000) |
//! | train tasks per evaluation | `fitness.batch_size` | 1 ..= [`MAX_BATCH`] (10,000) |
//! | the discriminator: trees, depth, folds | `--trees`, `--max-depth`, `--folds`, `fitness.discriminator.n_trees`, `.max_depth`, `fitness.folds` | 1 ..= [`MAX_TREES`] (10,000); ..= [`MAX_DEPTH`] (1,000); 2 ..= [`MAX_FOLDS`] (100) |
//! | the archive: islands; programs per island and elites; inspirations | `archive.num_islands`; `archive.population_size`, `archive.archive_size`; `archive.num_top_programs`, `archive.num_diverse_programs` | 1 ..= [`MAX_ISLANDS`] (1,000); 1 ..= [`MAX_POPULATION`] (100,000); ..= [`MAX_INSPIRATIONS`] (100) |
//! | an audit: bootstrap resamples; judge pairs per condition; folds | `audit --bootstrap`, `fitness.audit_bootstrap`; `--judge-pairs`, `fitness.judge_pairs`; `audit --folds` | 1 ..= [`MAX_BOOTSTRAP`] (100,000); ..= [`MAX_JUDGE_PAIRS`] (10,000); 2 ..= [`MAX_FOLDS`] (100) |
//! | retraining the discriminator during a run | `fitness.retrain_every`, `fitness.retrain_elites` | ..= [`MAX_ITERATIONS`]; ..= [`MAX_POPULATION`] |
//! | a study: dialogues per condition; attention checks | `study make --per-condition`, `--attention-checks` | ..= [`MAX_STUDY_ITEMS`] (100,000); ..= [`MAX_ATTENTION_CHECKS`] (100) |
//! | dialogues per side of an audit | `ppol audit` | [`MAX_AUDIT_DIALOGUES`] (20,000: a larger side is a seeded sample, said) |
//! | an LLM answer | `llm.max_response_bytes` | 1 KiB ..= [`MAX_INPUT_BYTES`] (1 GiB) |
//! | a benchmark | `bench ... --repeat`, `--end-to-end-dialogues`, `--seeds`, ... | ..= [`MAX_BENCH`] (1,000,000) |
//! | every duration: timeouts, deadlines, waits, a run's wall clock | `--episode-timeout-s`, `world.episode_timeout_s`, `llm.*.timeout_s`, `llm.*.deadline_s`, `llm.endpoint_wait_s`, `search.max_wall_clock_s`, `sandbox.timeout_s` (at most a day), `generate --timeout` | above 0 ..= [`MAX_SECONDS`] (a year) |
//! | an episode a simulator answers (`external:`, `tau2:`): one answer; one turn; turns | — | [`MAX_EPISODE_BYTES`] (16 MiB); [`MAX_TURN_BYTES`] (1 MiB); user turns cut at `max_turns`, all turns at [`MAX_EPISODE_TURNS`] (20,000) |
//!
//! Bounds of what a generator program returns (output bytes, personas, text) live with the
//! sandbox and the validation of its result (`generate`).

use crate::{Error, Result};

/// The most ppol reads of one input file: trace files (a whole JSON document included),
/// persona and task files, answer files, configurations. A larger file is refused before it is
/// read.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// The most ppol reads of one line of a line-based input (JSON Lines, `USER:`/`ASSISTANT:`
/// text). A longer line is an error naming the file and the line, found while reading: a stream
/// without line breaks is read no further than this.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// Trials per (task, persona) of one episodes request.
pub const MAX_TRIALS: u32 = 1_000;

/// Episodes one request may plan (tasks × personas × trials), and personas one generate
/// request may ask for (tasks × personas per task): every record is kept in memory until the
/// output is written.
pub const MAX_EPISODES: usize = 100_000;

/// Personas per task a generator program is asked for.
pub const MAX_PERSONAS: usize = 1_000;

/// K-means centroids replacing the human cloud.
pub const MAX_CLUSTERS: usize = 1_000;

/// User turns per episode, and tool-call rounds per agent turn.
pub const MAX_TURNS: usize = 1_000;

/// Episodes in flight at once, generator programs at once, requests in flight per endpoint.
pub const MAX_CONCURRENCY: usize = 4_096;

/// Candidates evaluated at once.
pub const MAX_PARALLEL_CANDIDATES: usize = 64;

/// Children proposed from one state of the archive.
pub const MAX_GENERATION: usize = 1_024;

/// LLM calls one generation may make.
pub const MAX_LLM_CALLS: usize = 100_000;

/// A generator program's address-space limit, MiB (1 TiB).
pub const MAX_MEMORY_MB: u64 = 1 << 20;

/// The smallest address-space limit of a generator program, MiB (`sandbox.memory_mb`).
pub const MIN_MEMORY_MB: u64 = 64;

/// Iterations of a run; evaluations without a new elite, re-queues and failed children
/// before the run (or the parent) changes course.
pub const MAX_ITERATIONS: u64 = 1_000_000;

/// Train tasks per evaluation.
pub const MAX_BATCH: usize = 10_000;

/// Trees of the discriminator's forest.
pub const MAX_TREES: usize = 10_000;

/// Depth of a discriminator tree.
pub const MAX_DEPTH: usize = 1_000;

/// Folds of the grouped held-out AUC.
pub const MAX_FOLDS: usize = 100;

/// Bootstrap resamples of an audit's interval.
pub const MAX_BOOTSTRAP: usize = 100_000;

/// Pairs per condition shown to the audit's LLM judge.
pub const MAX_JUDGE_PAIRS: usize = 10_000;

/// Islands of the archive.
pub const MAX_ISLANDS: usize = 1_000;

/// Programs per island, and elites of the archive.
pub const MAX_POPULATION: usize = 100_000;

/// Programs shown to the mutator as inspirations, of each kind.
pub const MAX_INSPIRATIONS: usize = 100;

/// Bins per MAP-Elites descriptor (`archive.feature_bins`).
pub const MAX_BINS: usize = 1_000;

/// The highest sampling temperature (`mutation.temperature`, `episodes.user_temperature`).
pub const MAX_TEMPERATURE: f32 = 2.0;

/// Dialogues per condition of a study.
pub const MAX_STUDY_ITEMS: usize = 100_000;

/// Attention-check items of a study.
pub const MAX_ATTENTION_CHECKS: usize = 100;

/// Repetitions, dialogues, runs and tasks of a benchmark.
pub const MAX_BENCH: usize = 1_000_000;

/// The longest duration a setting may give (a timeout, a deadline, a wait, a run's wall
/// clock): one year, in seconds. Longer is refused naming the key rather than converted (a
/// `Duration` of 1e300 seconds does not exist).
pub const MAX_SECONDS: f64 = 365.0 * 86_400.0;

/// Bytes of one turn (its content and tool calls) of an episode a simulator answers.
pub const MAX_TURN_BYTES: usize = 1 << 20;

/// Bytes of one episode as a simulator answers it (one protocol line, dialogue and extras).
pub const MAX_EPISODE_BYTES: usize = 16 << 20;

/// Turns of every role kept from one episode a simulator answers (user turns are cut at the
/// episode's `max_turns` first).
pub const MAX_EPISODE_TURNS: usize = 20 * MAX_TURNS;

/// The most ppol reads of a small text input: a configuration (TOML), a system prompt. A device
/// or a FIFO is read no further.
pub const MAX_TEXT_FILE_BYTES: u64 = 16 << 20;

/// The largest generator program ppol reads (`--program`, a seed program, a run's
/// `best/program.py`): 4 MiB, a thousand times the seeds.
pub const MAX_PROGRAM_BYTES: u64 = 4 << 20;

/// Dialogues per side of an audit (`ppol audit`, `ppol_rs.audit`): a larger side is a seeded
/// sample of this many, said in the report.
pub const MAX_AUDIT_DIALOGUES: usize = 20_000;

/// The largest judge prompt (`--judge-prompt`, `fitness.judge_prompt`): 1 MiB, sent once per
/// pair.
pub const MAX_PROMPT_BYTES: u64 = 1 << 20;

/// Check that a count is in `min..=max`; the error names `key` (a flag, an argument or a
/// configuration key).
pub fn check<T>(key: &str, value: T, min: T, max: T) -> Result<()>
where
    T: PartialOrd + std::fmt::Display,
{
    match in_range(&value, &min, &max) {
        Ok(()) => Ok(()),
        Err(why) => Err(Error::config(key, format!("{why}, got {value}"))),
    }
}

/// Why `value` is not in `min..=max` (the message of [`check`] and of the command line's
/// parsers).
pub fn in_range<T>(value: &T, min: &T, max: &T) -> std::result::Result<(), String>
where
    T: PartialOrd + std::fmt::Display,
{
    if value < min {
        Err(format!("must be at least {min}"))
    } else if value > max {
        Err(format!("must be at most {max} (ppol's limit)"))
    } else {
        Ok(())
    }
}

/// A byte count for messages: `64 MiB`, `1 GiB`, `1500 bytes`.
pub fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// A duration in seconds from a configuration value or flag: finite, above 0 and at most
/// [`MAX_SECONDS`], else an error naming `key` (never a panic: `Duration::from_secs_f64`
/// panics on NaN, a negative value or one too large for a `Duration`).
pub fn seconds(key: &str, value: f64) -> Result<std::time::Duration> {
    check_seconds(key, value)?;
    Ok(duration(value))
}

/// Check a number of seconds as [`seconds`] does.
pub fn check_seconds(key: &str, value: f64) -> Result<()> {
    if value.is_finite() && value > 0.0 && value <= MAX_SECONDS {
        Ok(())
    } else {
        Err(Error::config(key, seconds_message(value)))
    }
}

/// Check a number of seconds that may also be 0 (a wait that can be turned off): finite, at
/// least 0 and at most [`MAX_SECONDS`], else an error naming `key`.
pub fn check_seconds_or_zero(key: &str, value: f64) -> Result<()> {
    if value == 0.0 {
        Ok(())
    } else {
        check_seconds(key, value).map_err(|_| {
            Error::config(
                key,
                format!(
                    "must be 0 or a number of seconds up to {MAX_SECONDS} (a year), got {}",
                    shown(value)
                ),
            )
        })
    }
}

/// A number as an error shows it: as written for everyday magnitudes, in scientific notation
/// for huge or tiny ones (`1e300` is not printed as 301 digits).
pub fn shown(value: f64) -> String {
    let a = value.abs();
    if value.is_finite() && a != 0.0 && !(1e-6..1e15).contains(&a) {
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

/// Why `value` is not a duration [`check_seconds`] accepts.
pub fn seconds_message(value: f64) -> String {
    format!(
        "must be a number of seconds above 0 and at most {MAX_SECONDS} (a year), got {}",
        shown(value)
    )
}

/// Seconds as a `Duration`, for values already checked: clamped to 0 ..= [`MAX_SECONDS`] (NaN
/// is 0), so that no value panics.
pub fn duration(secs: f64) -> std::time::Duration {
    let s = if secs.is_nan() {
        0.0
    } else {
        secs.clamp(0.0, MAX_SECONDS)
    };
    std::time::Duration::from_secs_f64(s)
}

/// A finite number above 0, else an error naming `key`.
pub fn positive(key: &str, value: f64) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(Error::config(
            key,
            format!("must be a positive number, got {}", shown(value)),
        ))
    }
}

/// A share in [0, 1] (`closed`) or [0, 1), else an error naming `key`.
pub fn fraction(key: &str, value: f64, closed: bool) -> Result<()> {
    let ok = value.is_finite() && value >= 0.0 && if closed { value <= 1.0 } else { value < 1.0 };
    if ok {
        Ok(())
    } else {
        let range = if closed { "[0, 1]" } else { "[0, 1)" };
        Err(Error::config(
            key,
            format!("must be in {range}, got {}", shown(value)),
        ))
    }
}

/// At least `min` (no upper bound), else an error naming `key`.
pub fn at_least<T: PartialOrd + std::fmt::Display>(key: &str, value: T, min: T) -> Result<()> {
    if value >= min {
        Ok(())
    } else {
        Err(Error::config(
            key,
            format!("must be at least {min}, got {value}"),
        ))
    }
}

/// A sampling temperature in [0, [`MAX_TEMPERATURE`]], else an error naming `key`.
pub fn temperature(key: &str, value: f32) -> Result<()> {
    if value.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&value) {
        Ok(())
    } else {
        Err(Error::config(
            key,
            format!(
                "must be in [0, {MAX_TEMPERATURE}], got {}",
                shown(f64::from(value))
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_numbers_are_shown_in_scientific_notation() {
        assert_eq!(shown(1e300), "1e300");
        assert_eq!(shown(0.5), "0.5");
        assert_eq!(shown(-3.0), "-3");
        let e = fraction("archive.migration_rate", 1e300, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("got 1e300") && e.len() < 200, "{e}");
    }

    #[test]
    fn checks_name_the_key_and_the_bound() {
        assert!(check("trials", 3u32, 1, 1000).is_ok());
        let e = check("trials", 0u32, 1, 1000).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid configuration 'trials': must be at least 1, got 0"
        );
        let e = check("fitness.n_personas", 1_000_000_000usize, 1, 1000)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid configuration 'fitness.n_personas': must be at most 1000 (ppol's limit), got 1000000000"
        );
        assert_eq!(bytes(MAX_LINE_BYTES as u64), "64 MiB");
        assert_eq!(bytes(MAX_INPUT_BYTES), "1 GiB");
        assert_eq!(bytes(1500), "1500 bytes");
    }

    #[test]
    fn issue34_item5_durations_are_bounded_and_never_panic() {
        for bad in [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1e300,
            MAX_SECONDS * 1.001,
        ] {
            let e = seconds("world.episode_timeout_s", bad)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("world.episode_timeout_s") && e.contains("a year"),
                "{e}"
            );
        }
        assert_eq!(seconds("k", 1.5).unwrap().as_millis(), 1500);
        assert_eq!(duration(1e300).as_secs_f64(), MAX_SECONDS);
        assert_eq!(duration(f64::NAN), std::time::Duration::ZERO);
        assert_eq!(duration(-3.0), std::time::Duration::ZERO);
    }
}
