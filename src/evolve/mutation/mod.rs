//! Mutation operators for generator programs, and which one makes the next child.
//!
//! - [`dispatch`]: the [`Mutator`] of a run — chooses the operator for a parent (LLM diff,
//!   LLM rewrite, offline structural edit or crossover) and makes the child, or a recorded
//!   [`ChildFailure`].
//! - [`edits`]: structured LLM edits — JSON constrained to a schema of the parent's own
//!   editable literal data, applied through Python's `ast` (the default where the mutator's
//!   endpoint constrains answers).
//! - [`diff`]: the LLM SEARCH/REPLACE protocol (parse, apply, errors as data), full-rewrite
//!   extraction and the Python syntax check.
//! - [`prompt`]: the mutator's system message and the diff / rewrite prompts, built from
//!   Markdown templates (embedded, hashed for the run log) and returned as [`ChatRequest`]s
//!   with [`CallRole::Mutator`]. The caller makes the call.
//! - [`structural`]: offline mutation and crossover of a program's literal data
//!   (`DIVERSITY_AXES`, weights, template fragments) through Python's `ast`, no LLM.
//! - [`reflection`]: the critique attached to every evaluated program and shown to the
//!   mutator when that program becomes a parent.
//!
//! Failures of children (a diff that did not apply, a program that does not compile, a
//! sandbox failure) are recorded by the caller as [`ChildFailure`]s and shown to the mutator
//! the next time the same parent is mutated, so it stops repeating them.
//!
//! # One LLM mutation, as the evolution loop drives it
//!
//! ```no_run
//! use ppol::evolve::archive::{Archive, ArchiveConfig};
//! use ppol::evolve::mutation::{
//!     apply_diff, check_python_syntax, ChildFailure, FailureKind, MutationContext,
//!     PromptBuilder, PromptConfig,
//! };
//! # fn answer_of(_: &ppol::llm::ChatRequest) -> String { String::new() }
//! # fn main() -> ppol::Result<()> {
//! let mut archive = Archive::new(ArchiveConfig::default(), 42)?;
//! // ... seed programs added ...
//! let builder = PromptBuilder::new(PromptConfig::for_archive(archive.config()))?;
//! let island = archive.next_island();
//! let parent = archive.sample_parent(island)?.program;
//! let inspirations = archive.inspirations(&parent, island)?;
//! let failures = archive.recent_failures(&parent.id);
//! let attempts: Vec<_> = archive.recent_children(&parent.id, 5).into_iter().cloned().collect();
//! let ctx = MutationContext {
//!     parent: &parent,
//!     inspirations: &inspirations,
//!     previous_attempts: &attempts,
//!     failures: &failures,
//!     stagnation: 0,
//! };
//! let prompt = if archive.consecutive_failures(&parent.id) >= 3 {
//!     builder.rewrite_request(&ctx, 7)? // parse with extract_full_program
//! } else {
//!     builder.diff_request(&ctx, 7)?
//! };
//! let answer = answer_of(&prompt.request); // the loop calls its ChatModel here
//! match apply_diff(&parent.code, &answer) {
//!     Err(e) => archive.record_failure(&parent.id, ppol::evolve::mutation::failure_from_diff_error(&e)),
//!     Ok(applied) => match check_python_syntax(&applied.code)? {
//!         Err(msg) => archive.record_failure(&parent.id, ChildFailure::new(FailureKind::Syntax, msg)),
//!         Ok(()) => { /* evaluate in the sandbox, then archive.add(child, island) */ }
//!     },
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The Python helpers ([`check_python_syntax`], [`structural_mutate`], [`crossover`]) block for
//! a child process (~0.1 s); from async code, call them inside `tokio::task::spawn_blocking`.
//!
//! [`ChatRequest`]: crate::llm::ChatRequest
//! [`CallRole::Mutator`]: crate::llm::CallRole::Mutator

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod diff;
pub mod dispatch;
pub mod edits;
pub mod prompt;
pub mod reflection;
pub mod structural;

pub use diff::{
    apply_blocks, apply_diff, check_python_syntax, extract_full_program, parse_diff, AppliedDiff,
    DiffBlock, DiffError,
};
pub use dispatch::{Child, Mutator, Operator};
pub use prompt::{
    completion_reserve, sample_angle, MutationAngle, MutationContext, MutationPrompt,
    PromptBuilder, PromptConfig, MUTATION_ANGLES,
};
pub use structural::{
    crossover, crossover_batch, crossover_with, structural_mutate, structural_mutate_batch,
    structural_mutate_with, AxisVocab, MechanicPhrases, StructuralOptions,
};

/// The Python interpreter used for syntax checks and structural mutation.
pub(crate) const PYTHON: &str = "python3";

pub use crate::evolve::archive::program::{ChildFailure, FailureKind};

/// A child failure from a [`DiffError`] (kind [`FailureKind::NoProgram`] for
/// [`DiffError::NoProgram`], else [`FailureKind::DiffNotApplied`]).
pub fn failure_from_diff_error(e: &DiffError) -> ChildFailure {
    let kind = match e {
        DiffError::NoProgram => FailureKind::NoProgram,
        DiffError::NoBlocks | DiffError::Unterminated { .. } | DiffError::EmptySearch { .. } => {
            FailureKind::Unparsable
        }
        _ => FailureKind::DiffNotApplied,
    };
    ChildFailure::new(kind, e.to_string())
}

/// SHA-256 (hex) of every embedded prompt template, of the mutation angles, and of the
/// structural mutation script, keyed by name, for the run log: a run can tell exactly which
/// prompt texts produced its programs.
pub fn template_hashes() -> BTreeMap<&'static str, String> {
    let mut m = prompt::template_hashes();
    m.insert(
        "mutate_ast.py",
        crate::evolve::archive::program::code_hash(structural::SCRIPT),
    );
    m
}

/// The last `max` characters of `s` (on a char boundary), with a leading `…` when clipped.
pub(crate) fn tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        s.to_string()
    } else {
        format!("…{}", s.chars().skip(n - max).collect::<String>())
    }
}

/// The first `max` characters of `s`, with a trailing `…` when clipped.
pub(crate) fn head(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

/// Run `python -I -S -X utf8 -c script` with `stdin`, a scrubbed environment (only `PATH` and
/// a UTF-8 locale) and a wall-clock timeout (the child is killed when it expires).
pub(crate) fn run_python(
    python: &str,
    script: &str,
    stdin: &[u8],
    timeout: Duration,
) -> crate::Result<Output> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut child = Command::new(python)
        .args(["-I", "-S", "-X", "utf8", "-c", script])
        .env_clear()
        .env("PATH", path)
        .env("LC_ALL", "C.UTF-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| crate::Error::Sandbox(format!("cannot start '{python}': {e}")))?;
    let mut sin = child.stdin.take().expect("piped stdin");
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        // A child that exits early closes the pipe; that is reported through its status.
        let _ = sin.write_all(&input);
    });
    let mut sout = child.stdout.take().expect("piped stdout");
    let mut serr = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = sout.read_to_end(&mut b);
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = serr.read_to_end(&mut b);
        b
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = writer.join();
                let _ = out_reader.join();
                let _ = err_reader.join();
                return Err(crate::Error::Sandbox(format!(
                    "'{python}' did not finish within {:?}",
                    timeout
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                return Err(crate::Error::Sandbox(format!(
                    "waiting for '{python}': {e}"
                )))
            }
        }
    };
    let _ = writer.join();
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_helpers() {
        assert_eq!(tail("abcdef", 3), "…def");
        assert_eq!(head("abcdef", 3), "abc…");
        assert_eq!(head("ab", 3), "ab");
    }

    #[test]
    fn python_runner_times_out_and_reports() {
        let out = run_python(
            PYTHON,
            "import sys; print(sys.stdin.read().upper())",
            b"hi",
            Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "HI");
        let e =
            run_python(PYTHON, "while True: pass", b"", Duration::from_millis(300)).unwrap_err();
        assert!(e.to_string().contains("did not finish"), "{e}");
        assert!(run_python("/nonexistent/python", "", b"", Duration::from_secs(1)).is_err());
    }
}
