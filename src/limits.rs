//! Upper bounds on every count and size ppol accepts, in one place. A value beyond one is one
//! clear error naming the flag or configuration key (exit 2 on the command line, `ConfigError`
//! or `ParseError` in Python), never a run that grows until the machine stops it. The command
//! line checks its flags against these constants as it parses them; the operations layer and
//! [`RunConfig::validate`](crate::evolve::config::RunConfig::validate) check them again, so a
//! Python call meets the same bounds.
//!
//! | what | flags and keys | bound |
//! |---|---|---|
//! | one input file (traces, personas, tasks, answers, configurations) | — | [`MAX_INPUT_BYTES`] (1 GiB) |
//! | one line of a line-based input (JSONL, text traces) | — | [`MAX_LINE_BYTES`] (64 MiB) |
//!
//! Other bounds live with what they bound: a generator program's output and personas
//! (`generate::sandbox`), an LLM answer (`max_response_bytes`), the archive (`[archive]`).

use crate::{Error, Result};

/// The most ppol reads of one input file: trace files (a whole JSON document included),
/// persona and task files, answer files, configurations. A larger file is refused before it is
/// read.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// The most ppol reads of one line of a line-based input (JSON Lines, `USER:`/`ASSISTANT:`
/// text). A longer line is an error naming the file and the line, found while reading: a stream
/// without line breaks is read no further than this.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// Check that a count is in `min..=max`; the error names `key` (a flag, an argument or a
/// configuration key).
pub fn check<T>(key: &str, value: T, min: T, max: T) -> Result<()>
where
    T: PartialOrd + std::fmt::Display,
{
    match in_range(&value, &min, &max) {
        Ok(()) => Ok(()),
        Err(why) => Err(Error::config(key, why)),
    }
}

/// Why `value` is not in `min..=max` (the message of [`check`] and of the command line's
/// parsers).
pub fn in_range<T>(value: &T, min: &T, max: &T) -> std::result::Result<(), String>
where
    T: PartialOrd + std::fmt::Display,
{
    if value < min {
        Err(format!("must be at least {min}, got {value}"))
    } else if value > max {
        Err(format!("must be at most {max} (ppol's limit), got {value}"))
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
