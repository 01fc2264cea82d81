//! A candidate generator program and its lineage: the unit the evolution [`Archive`] stores.
//!
//! A [`Program`] is the Python source of a persona generator plus everything the evolution
//! loop learned about it: where it came from ([`Program::parent_id`], [`MutationInfo`]), when
//! ([`Program::generation`], [`Program::iteration_found`]), how it scored
//! ([`Program::metrics`]) and what the reflection step said about it
//! ([`Program::reflection`]). The archive fills in [`Program::descriptors`],
//! [`Program::island`] and [`Program::created_seq`] when the program is added.
//!
//! [`Archive`]: crate::evolve::archive::Archive

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Identifier of a program, unique within a run (and an archive).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProgramId(pub String);

impl ProgramId {
    /// Wrap any string.
    pub fn new(id: impl Into<String>) -> Self {
        ProgramId(id.into())
    }

    /// A readable id derived from the iteration and the code: `it00042-1a2b3c4d`.
    /// Deterministic, so a resumed run names its programs exactly as an uninterrupted one.
    pub fn derive(iteration: u64, code_hash: &str) -> Self {
        let short: String = code_hash.chars().take(8).collect();
        ProgramId(format!("it{iteration:05}-{short}"))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProgramId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ProgramId {
    fn from(s: &str) -> Self {
        ProgramId(s.to_string())
    }
}

impl From<String> for ProgramId {
    fn from(s: String) -> Self {
        ProgramId(s)
    }
}

/// How a program was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MutationKind {
    /// A seed program given at the start of the run.
    Seed,
    /// An LLM SEARCH/REPLACE diff applied to the parent.
    Diff,
    /// An LLM full rewrite of the parent.
    Rewrite,
    /// LLM edits of the parent's literal data, answered as JSON constrained to a schema of
    /// the parent's own editable targets (see [`crate::evolve::mutation::edits`]).
    Structured,
    /// An offline structural (AST literal) mutation of the parent.
    Structural,
    /// An offline crossover of the parent with a second parent.
    Crossover,
}

impl MutationKind {
    /// Kebab-case name (`seed`, `diff`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            MutationKind::Seed => "seed",
            MutationKind::Diff => "diff",
            MutationKind::Rewrite => "rewrite",
            MutationKind::Structured => "structured",
            MutationKind::Structural => "structural",
            MutationKind::Crossover => "crossover",
        }
    }
}

impl fmt::Display for MutationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What mutation produced a program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutationInfo {
    /// The operator family.
    pub kind: MutationKind,
    /// The mutation angle id given to the LLM (see [`crate::evolve::mutation::MUTATION_ANGLES`]), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub angle: Option<String>,
    /// How the mutator prompt was cut to fit the model's context window (see
    /// [`crate::evolve::mutation::PromptBuilder::for_context`]), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_fit: Option<String>,
    /// One line on what changed (the LLM's stated reasoning, or the structural operator summary).
    #[serde(default)]
    pub summary: String,
}

impl MutationInfo {
    /// What a record that does not say how its program was made reads as: the seed's kind,
    /// with a summary saying it was not recorded.
    pub fn unrecorded() -> Self {
        MutationInfo {
            summary: "not recorded".to_string(),
            ..MutationInfo::seed()
        }
    }

    /// Mutation info for a seed program.
    pub fn seed() -> Self {
        MutationInfo {
            kind: MutationKind::Seed,
            angle: None,
            prompt_fit: None,
            summary: "seed program".to_string(),
        }
    }

    /// Mutation info of the given kind with a summary and no angle.
    pub fn new(kind: MutationKind, summary: impl Into<String>) -> Self {
        MutationInfo {
            kind,
            angle: None,
            prompt_fit: None,
            summary: summary.into(),
        }
    }
}

/// One candidate generator program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// Unique id.
    pub id: ProgramId,
    /// Python source.
    pub code: String,
    /// The parent it was mutated from (`None` for seeds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<ProgramId>,
    /// The second parent of a crossover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_parent_id: Option<ProgramId>,
    /// For a migrant copy, the program it was copied from (set by the archive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated_from: Option<ProgramId>,
    /// The island it lives on (set by [`crate::evolve::archive::Archive::add`]).
    #[serde(default)]
    pub island: usize,
    /// Number of mutations between this program and its seed (parent's generation + 1).
    #[serde(default)]
    pub generation: u32,
    /// The evolution iteration that produced it (0 for seeds).
    #[serde(default)]
    pub iteration_found: u64,
    /// Evaluation metrics (`combined`, `human_likeness`, `coverage`, ...).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Feature-descriptor values in the order of the archive's `feature_dimensions`
    /// (set by the archive from [`Program::metrics`] when the program is added).
    #[serde(default)]
    pub descriptors: Vec<f64>,
    /// The reflection on this program's evaluation, shown when it becomes a parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection: Option<String>,
    /// How it was made.
    pub mutation: MutationInfo,
    /// SHA-256 of [`Program::code`], lowercase hex.
    pub code_hash: String,
    /// Insertion order within the archive (set by the archive; used to break ties deterministically).
    #[serde(default)]
    pub created_seq: u64,
}

impl Program {
    /// A new program with the given id, code and mutation info; every other field empty.
    /// The code hash is computed here.
    pub fn new(id: impl Into<ProgramId>, code: impl Into<String>, mutation: MutationInfo) -> Self {
        let code = code.into();
        Program {
            id: id.into(),
            code_hash: code_hash(&code),
            code,
            parent_id: None,
            second_parent_id: None,
            migrated_from: None,
            island: 0,
            generation: 0,
            iteration_found: 0,
            metrics: BTreeMap::new(),
            descriptors: Vec::new(),
            reflection: None,
            mutation,
            created_seq: 0,
        }
    }

    /// A seed program (generation 0, iteration 0).
    pub fn seed(id: impl Into<ProgramId>, code: impl Into<String>) -> Self {
        Program::new(id, code, MutationInfo::seed())
    }

    /// A child of `parent` found at `iteration`: parent id, island and generation + 1 are set.
    pub fn child(
        parent: &Program,
        id: impl Into<ProgramId>,
        code: impl Into<String>,
        iteration: u64,
        mutation: MutationInfo,
    ) -> Self {
        let mut p = Program::new(id, code, mutation);
        p.parent_id = Some(parent.id.clone());
        p.island = parent.island;
        p.generation = parent.generation + 1;
        p.iteration_found = iteration;
        p
    }

    /// The value of a metric, if present and finite.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).copied().filter(|v| v.is_finite())
    }

    /// Builder-style: set the metrics.
    pub fn with_metrics<I, K>(mut self, metrics: I) -> Self
    where
        I: IntoIterator<Item = (K, f64)>,
        K: Into<String>,
    {
        self.metrics = metrics.into_iter().map(|(k, v)| (k.into(), v)).collect();
        self
    }
}

/// SHA-256 of a program's source, lowercase hex.
pub fn code_hash(code: &str) -> String {
    crate::io::sha256_hex(code.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            code_hash(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let p = Program::seed("s0", "x = 1\n");
        assert_eq!(p.code_hash, code_hash("x = 1\n"));
        assert_eq!(p.mutation.kind, MutationKind::Seed);
    }

    #[test]
    fn child_inherits_lineage() {
        let mut parent = Program::seed("s0", "x = 1\n");
        parent.island = 3;
        parent.generation = 4;
        let c = Program::child(
            &parent,
            "c1",
            "x = 2\n",
            7,
            MutationInfo::new(MutationKind::Diff, "x=2"),
        );
        assert_eq!(c.parent_id, Some(ProgramId::from("s0")));
        assert_eq!((c.island, c.generation, c.iteration_found), (3, 5, 7));
        assert_eq!(
            ProgramId::derive(42, &c.code_hash).as_str().len(),
            7 + 1 + 8
        );
    }

    #[test]
    fn serde_round_trip() {
        let p = Program::seed("s0", "x = 1\n").with_metrics([("combined", 0.5)]);
        let s = serde_json::to_string(&p).unwrap();
        let q: Program = serde_json::from_str(&s).unwrap();
        assert_eq!(p, q);
    }
}

/// The stage at which a child of a parent failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The diff could not be applied (see `mutation::DiffError`).
    DiffNotApplied,
    /// A rewrite answer held no program.
    NoProgram,
    /// A diff answer could not be read as SEARCH/REPLACE blocks (none, unterminated, empty).
    Unparsable,
    /// The call to the mutator model failed (after the client's retries).
    MutatorCall,
    /// The program does not compile.
    Syntax,
    /// The program failed in the sandbox (import, interface, timeout, bad output, ...).
    Sandbox,
    /// Evaluation failed (episodes, scoring).
    Evaluation,
}

impl FailureKind {
    /// Kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::DiffNotApplied => "diff-not-applied",
            FailureKind::NoProgram => "no-program",
            FailureKind::Unparsable => "unparsable",
            FailureKind::MutatorCall => "mutator-call",
            FailureKind::Syntax => "syntax",
            FailureKind::Sandbox => "sandbox",
            FailureKind::Evaluation => "evaluation",
        }
    }
}

/// A failed child of a parent, shown to the mutator so it does not repeat the mistake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildFailure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The sandbox or evaluation stage (`import`, `interface`, `generate`, `validate`, ...), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The error message (the diff error's text, the syntax error, the sandbox's reason).
    pub message: String,
    /// The end of the program's stderr, if any (clipped when shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// The mutation angle that was tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub angle: Option<String>,
    /// What the attempt tried to do (the mutator's stated reasoning), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The operator that made the attempt (`diff`, `rewrite`, `structural`, `crossover`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// The first [`RAW_REPLY_BYTES`] of the mutator's answer when it could not be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_reply: Option<String>,
    /// How the mutator prompt was cut to fit the model's context window, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_fit: Option<String>,
}

/// How much of a model's unusable answer is kept with its failure (log, report, `-v`).
pub const RAW_REPLY_BYTES: usize = 2048;

/// The first `RAW_REPLY_BYTES` of `text`, cut on a character boundary.
pub fn raw_reply(text: &str) -> String {
    let mut end = text.len().min(RAW_REPLY_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

impl ChildFailure {
    /// A failure with just a kind and a message.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        ChildFailure {
            kind,
            stage: None,
            message: message.into(),
            stderr_tail: None,
            angle: None,
            summary: None,
            operator: None,
            raw_reply: None,
            prompt_fit: None,
        }
    }
}
