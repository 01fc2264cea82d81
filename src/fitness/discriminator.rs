//! The discriminator: a random forest that tells human dialogues (label 1) from simulator
//! dialogues (label 0) by their behavioural fingerprints, and gives P(human) of new ones.
//!
//! It follows the reference's scikit-learn settings
//! (`RandomForestClassifier(n_estimators=200, max_depth=12, max_features="sqrt",
//! class_weight="balanced", random_state=42)`, see [`ForestParams::default`]) with a forest of
//! our own ([`RandomForest`]): smartcore 0.7 has no class weights and one-hot leaves with a
//! hard-vote forest, linfa-trees 0.8 has no forest and nested-box trees, so neither gives the
//! reference's weighted leaf fractions, a flat JSON layout or batched parallel inference
//! (details at the top of `src/discriminator/forest.rs`). Unlike the reference it
//! measures a **grouped** held-out AUC (no task on both sides of a fold, [`group_kfold`]),
//! stores it in the [`TrainingReport`], and saves as plain JSON — never a pickle.
//!
//! ```
//! use ppol::fitness::discriminator::{Discriminator, ForestParams};
//! let human: Vec<Vec<f64>> = (0..20).map(|i| vec![1.0 + i as f64 * 0.01, 0.5]).collect();
//! let sim: Vec<Vec<f64>> = (0..20).map(|i| vec![0.0 + i as f64 * 0.01, 0.5]).collect();
//! let groups: Vec<String> = (0..20).map(|i| format!("task-{}", i % 5)).collect();
//! let names = vec!["a".to_string(), "b".to_string()];
//! let params = ForestParams { n_trees: 10, ..ForestParams::default() };
//! let d = Discriminator::train(&human, &groups, &sim, &groups, &names, "demo", &params, 5)?;
//! assert!(d.training.grouped_auc.as_ref().unwrap().mean > 0.9);
//! let p = d.p_human(&[vec![1.05, 0.5], vec![0.05, 0.5]]);
//! assert!(p[0] > 0.5 && p[1] < 0.5);
//! # Ok::<(), ppol::Error>(())
//! ```

mod forest;

use std::collections::BTreeMap;
use std::path::Path;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

pub use forest::{RandomForest, Tree};

use crate::{Error, Result};

/// Version of the saved discriminator JSON layout; [`Discriminator::load`] refuses others.
pub const FORMAT_VERSION: u32 = 1;

/// How many features are tried at each split.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum MaxFeatures {
    /// `max(1, floor(sqrt(n_features)))` — 4 of 19 (the reference's setting, the default).
    #[default]
    Sqrt,
    /// Every feature.
    All,
    /// A fixed number, `1..=n_features`.
    Count(usize),
    /// A fraction in `(0, 1]`: `max(1, floor(f · n_features))`.
    Fraction(f64),
}

impl MaxFeatures {
    /// The number of features to try for data with `n_features` columns.
    ///
    /// # Errors
    /// [`Error::Config`] (key `max_features`) for a count outside `1..=n_features` or a
    /// fraction outside `(0, 1]`.
    pub fn resolve(&self, n_features: usize) -> Result<usize> {
        match *self {
            MaxFeatures::Sqrt => Ok(n_features.isqrt().max(1)),
            MaxFeatures::All => Ok(n_features),
            MaxFeatures::Count(c) if (1..=n_features).contains(&c) => Ok(c),
            MaxFeatures::Count(c) => Err(Error::config(
                "max_features",
                format!("{c} features per split, but the data has {n_features}"),
            )),
            MaxFeatures::Fraction(f) if f > 0.0 && f <= 1.0 => {
                Ok(((f * n_features as f64) as usize).max(1))
            }
            MaxFeatures::Fraction(f) => Err(Error::config(
                "max_features",
                format!("fraction {f} is not in (0, 1]"),
            )),
        }
    }
}

impl std::fmt::Display for MaxFeatures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxFeatures::Sqrt => f.write_str("sqrt"),
            MaxFeatures::All => f.write_str("all"),
            MaxFeatures::Count(c) => write!(f, "{c}"),
            MaxFeatures::Fraction(x) => write!(f, "{x:?}"),
        }
    }
}

/// Why a `max_features` string could not be parsed. Its message is only the reason, so
/// callers can prefix the flag or key name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("expected 'sqrt', 'all', a positive integer or a fraction in (0, 1], found '{0}'")]
pub struct ParseMaxFeaturesError(String);

impl From<ParseMaxFeaturesError> for Error {
    fn from(e: ParseMaxFeaturesError) -> Self {
        Error::config("max_features", e.to_string())
    }
}

impl std::str::FromStr for MaxFeatures {
    type Err = ParseMaxFeaturesError;

    /// `"sqrt"`, `"all"`, an integer (`"4"` → `Count(4)`) or a float (`"0.5"` → `Fraction`).
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let t = s.trim();
        let err = || ParseMaxFeaturesError(s.to_string());
        match t.to_ascii_lowercase().as_str() {
            "sqrt" => return Ok(MaxFeatures::Sqrt),
            "all" => return Ok(MaxFeatures::All),
            _ => {}
        }
        if let Ok(c) = t.parse::<usize>() {
            return if c >= 1 {
                Ok(MaxFeatures::Count(c))
            } else {
                Err(err())
            };
        }
        match t.parse::<f64>() {
            Ok(f) if f > 0.0 && f <= 1.0 => Ok(MaxFeatures::Fraction(f)),
            _ => Err(err()),
        }
    }
}

impl Serialize for MaxFeatures {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            MaxFeatures::Sqrt => s.serialize_str("sqrt"),
            MaxFeatures::All => s.serialize_str("all"),
            MaxFeatures::Count(c) => s.serialize_u64(c as u64),
            MaxFeatures::Fraction(f) => s.serialize_f64(f),
        }
    }
}

impl schemars::JsonSchema for MaxFeatures {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MaxFeatures".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Features tried at each split: \"sqrt\" (the reference's), \"all\", a count (at least 1) or a fraction in (0, 1].",
            "anyOf": [
                {"type": "string", "enum": ["sqrt", "all"]},
                {"type": "integer", "minimum": 1},
                {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
            ]
        })
    }
}

impl<'de> Deserialize<'de> for MaxFeatures {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Int(u64),
            Float(f64),
            Str(String),
        }
        use serde::de::Error as _;
        match Repr::deserialize(d)? {
            Repr::Int(0) => Err(D::Error::custom("max_features must be at least 1")),
            Repr::Int(c) => Ok(MaxFeatures::Count(c as usize)),
            Repr::Float(f) if f > 0.0 && f <= 1.0 => Ok(MaxFeatures::Fraction(f)),
            Repr::Float(f) => Err(D::Error::custom(format!(
                "max_features fraction {f} is not in (0, 1]"
            ))),
            Repr::Str(s) => s.parse().map_err(D::Error::custom),
        }
    }
}

/// Random-forest settings. [`Default`] is the reference's scikit-learn configuration.
/// Deserialises with every field optional (missing ones take the default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct ForestParams {
    /// Number of trees (200).
    #[schemars(range(min = 1, max = crate::limits::MAX_TREES))]
    pub n_trees: usize,
    /// Maximum depth of a tree (12); without one (`ppol discriminator train --max-depth 0`)
    /// trees grow until their leaves are pure.
    #[schemars(range(min = 1, max = crate::limits::MAX_DEPTH))]
    pub max_depth: Option<usize>,
    /// Features tried per split (`sqrt`).
    pub max_features: MaxFeatures,
    /// Balanced class weights `n / (2 · n_class)` (true).
    pub balanced: bool,
    /// A node with fewer distinct samples is a leaf (2).
    #[schemars(range(min = 2))]
    pub min_samples_split: usize,
    /// Each child of a split keeps at least this many distinct samples (1).
    #[schemars(range(min = 1))]
    pub min_samples_leaf: usize,
    /// Each tree sees a bootstrap sample of the rows (true).
    pub bootstrap: bool,
    /// Random seed (42).
    pub seed: u64,
}

impl Default for ForestParams {
    fn default() -> Self {
        ForestParams {
            n_trees: 200,
            max_depth: Some(12),
            max_features: MaxFeatures::Sqrt,
            balanced: true,
            min_samples_split: 2,
            min_samples_leaf: 1,
            bootstrap: true,
            seed: 42,
        }
    }
}

/// Area under the ROC curve of `scores` for the positive class (`labels[i] == true`), by the
/// Mann–Whitney U statistic with average ranks for tied scores (so a tie between a positive
/// and a negative counts one half). `None` if either class is absent.
///
/// # Panics
/// If `scores` and `labels` differ in length.
pub fn roc_auc(scores: &[f64], labels: &[bool]) -> Option<f64> {
    assert_eq!(
        scores.len(),
        labels.len(),
        "roc_auc: {} scores but {} labels",
        scores.len(),
        labels.len()
    );
    let n_pos = labels.iter().filter(|&&l| l).count();
    let n_neg = labels.len() - n_pos;
    if n_pos == 0 || n_neg == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let mut rank_sum_pos = 0.0;
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && scores[order[j]] == scores[order[i]] {
            j += 1;
        }
        // Positions i..j (0-based) share the average 1-based rank.
        let avg_rank = (i + 1 + j) as f64 / 2.0;
        let pos_in_tie = order[i..j].iter().filter(|&&k| labels[k]).count();
        rank_sum_pos += avg_rank * pos_in_tie as f64;
        i = j;
    }
    let (p, n) = (n_pos as f64, n_neg as f64);
    Some((rank_sum_pos - p * (p + 1.0) / 2.0) / (p * n))
}

/// Grouped k-fold split: returns `(train, test)` index lists (ascending) such that no group
/// is on both sides. Like scikit-learn's `GroupKFold`, groups are taken largest first and
/// each goes to the fold with the fewest samples so far (the first such fold on ties), which
/// balances fold sizes. `seed` only shuffles the order of equally large groups beforehand.
///
/// `k` is capped at the number of distinct groups; with `k < 2` or fewer than two groups there
/// is no split and the result is empty. Every fold's test set is non-empty.
pub fn group_kfold(groups: &[String], k: usize, seed: u64) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut sizes: BTreeMap<&str, usize> = BTreeMap::new();
    for g in groups {
        *sizes.entry(g.as_str()).or_default() += 1;
    }
    let k = k.min(sizes.len());
    if k < 2 {
        return Vec::new();
    }
    let mut order: Vec<(&str, usize)> = sizes.into_iter().collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    order.sort_by_key(|g| std::cmp::Reverse(g.1)); // stable: shuffled order among equal sizes
    let mut fold_sizes = vec![0usize; k];
    let mut fold_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (g, n) in order {
        let lightest = (0..k).min_by_key(|&f| (fold_sizes[f], f)).unwrap_or(0);
        fold_sizes[lightest] += n;
        fold_of.insert(g, lightest);
    }
    (0..k)
        .map(|f| {
            let (test, train): (Vec<usize>, Vec<usize>) =
                (0..groups.len()).partition(|&i| fold_of[groups[i].as_str()] == f);
            (train, test)
        })
        .collect()
}

/// Grouped k-fold held-out AUC measured before the final fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOutAuc {
    /// Mean of the usable folds' AUCs.
    pub mean: f64,
    /// AUC of each usable fold (folds whose train or test side lacked a class are skipped).
    pub folds: Vec<f64>,
    /// Number of folds requested after capping at the number of groups.
    pub k: usize,
    /// Number of distinct groups (tasks).
    pub n_groups: usize,
}

/// How a discriminator was trained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingReport {
    /// Human rows (label 1).
    pub n_human: usize,
    /// Simulator rows (label 0).
    pub n_simulator: usize,
    /// Forest settings.
    pub params: ForestParams,
    /// Grouped held-out AUC; `None` when fewer than two folds were usable.
    pub grouped_auc: Option<HeldOutAuc>,
    /// The most important features (mean decrease in impurity), largest first (at most 12,
    /// as the reference prints).
    pub top_features: Vec<(String, f64)>,
    /// When it was trained, RFC 3339 UTC (`2026-11-23T07:21:20Z`).
    pub created_at: String,
    /// Layout version of the saved file ([`FORMAT_VERSION`]).
    pub format_version: u32,
}

/// A trained human-vs-simulator discriminator with its provenance. Saved as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Discriminator {
    /// Feature-set version the fingerprints were computed with (e.g. `ppol-0.1.1`).
    pub feature_set: String,
    /// Column names, in order.
    pub feature_names: Vec<String>,
    /// Training metadata.
    pub training: TrainingReport,
    /// The fitted forest (P(class 1) = P(human)).
    pub forest: RandomForest,
}

/// Check one class's rows: count, length and finiteness. `what` names the class.
fn validate_rows(what: &str, rows: &[Vec<f64>], groups: &[String], names: &[String]) -> Result<()> {
    let origin = format!("<{what} fingerprints>");
    if rows.len() != groups.len() {
        return Err(Error::parse(
            &origin,
            "groups",
            format!("{} rows but {} group ids", rows.len(), groups.len()),
        ));
    }
    for (i, row) in rows.iter().enumerate() {
        if row.len() != names.len() {
            return Err(Error::parse(
                &origin,
                format!("row {i}"),
                format!(
                    "expected {} features ({}), found {}",
                    names.len(),
                    names.join(", "),
                    row.len()
                ),
            ));
        }
        if let Some(j) = row.iter().position(|v| !v.is_finite()) {
            return Err(Error::parse(
                &origin,
                format!("row {i} (group '{}'), feature '{}'", groups[i], names[j]),
                format!("non-finite value {}", row[j]),
            ));
        }
    }
    Ok(())
}

impl Discriminator {
    /// Train on human (label 1) and simulator (label 0) fingerprints.
    ///
    /// Groups are task ids; a group string shared by both classes is one group. First a
    /// grouped held-out AUC is measured: `k = min(folds, n_groups)` folds from
    /// [`group_kfold`] (seeded with `params.seed`), each fitting a forest on the other folds;
    /// folds whose train or test side lacks a class are skipped, and with fewer than two
    /// usable folds the AUC is `None`. Then the forest is fitted on all rows.
    ///
    /// # Errors
    /// [`Error::Insufficient`] if a class has no rows; [`Error::Parse`] naming the row for a
    /// wrong row length, a non-finite value or a group list of the wrong length;
    /// [`Error::Config`] for invalid parameters.
    #[allow(clippy::too_many_arguments)]
    pub fn train(
        human: &[Vec<f64>],
        human_groups: &[String],
        simulator: &[Vec<f64>],
        simulator_groups: &[String],
        feature_names: &[String],
        feature_set: &str,
        params: &ForestParams,
        folds: usize,
    ) -> Result<Self> {
        if feature_names.is_empty() {
            return Err(Error::config("feature_names", "no features"));
        }
        validate_rows("human", human, human_groups, feature_names)?;
        validate_rows("simulator", simulator, simulator_groups, feature_names)?;
        if human.is_empty() || simulator.is_empty() {
            return Err(Error::Insufficient(format!(
                "the discriminator needs both human and simulator dialogues; got {} human and {} simulator",
                human.len(),
                simulator.len()
            )));
        }
        params.max_features.resolve(feature_names.len())?;

        let x: Vec<Vec<f64>> = human.iter().chain(simulator).cloned().collect();
        let y: Vec<bool> = (0..x.len()).map(|i| i < human.len()).collect();
        let groups: Vec<String> = human_groups
            .iter()
            .chain(simulator_groups)
            .cloned()
            .collect();

        let grouped_auc = grouped_auc(&x, &y, &groups, params, folds)?;
        match &grouped_auc {
            Some(a) => tracing::info!(
                mean = a.mean,
                folds = a.folds.len(),
                n_groups = a.n_groups,
                "discriminator grouped held-out AUC"
            ),
            None => tracing::warn!(
                "discriminator: too few groups with both classes for a grouped held-out AUC"
            ),
        }

        let forest = RandomForest::fit(&x, &y, params)?;
        let mut ranked: Vec<(String, f64)> = feature_names
            .iter()
            .cloned()
            .zip(forest.feature_importances())
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        ranked.truncate(12);

        Ok(Discriminator {
            feature_set: feature_set.to_string(),
            feature_names: feature_names.to_vec(),
            training: TrainingReport {
                n_human: human.len(),
                n_simulator: simulator.len(),
                params: params.clone(),
                grouped_auc,
                top_features: ranked,
                created_at: crate::io::now_rfc3339(),
                format_version: FORMAT_VERSION,
            },
            forest,
        })
    }

    /// P(human) of each row (batched and parallel).
    ///
    /// # Panics
    /// If a row's length differs from `feature_names.len()`.
    pub fn p_human(&self, x: &[Vec<f64>]) -> Vec<f64> {
        self.forest.predict_proba(x)
    }

    /// The JSON text written by [`Discriminator::save`]: objects indented, arrays on one line,
    /// one tree per line.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, json_layout::Layout::new());
        // Serialising plain data into a Vec cannot fail.
        self.serialize(&mut ser)
            .expect("discriminator serialises to JSON");
        out.push(b'\n');
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }

    /// Parse the JSON text of a saved discriminator; `path` is only used in error messages.
    ///
    /// # Errors
    /// [`Error::Parse`] naming `path` for invalid JSON, a missing or different
    /// `training.format_version`, or a structurally invalid forest.
    pub fn from_json(text: &str, path: &Path) -> Result<Self> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            Error::parse(
                path,
                format!("line {}, column {}", e.line(), e.column()),
                format!("not valid JSON: {e}"),
            )
        })?;
        match value.pointer("/training/format_version") {
            Some(v) if v.as_u64() == Some(FORMAT_VERSION as u64) => {}
            Some(v) => {
                return Err(Error::parse(
                    path,
                    "training.format_version",
                    format!(
                        "discriminator format version {v}, but this ppol reads version {FORMAT_VERSION}; retrain it with `ppol discriminator train`"
                    ),
                ))
            }
            None => {
                return Err(Error::parse(
                    path,
                    "training.format_version",
                    "missing: this is not a saved ppol discriminator",
                ))
            }
        }
        let d: Discriminator = serde_json::from_value(value)
            .map_err(|e| Error::parse(path, "$", format!("not a ppol discriminator: {e}")))?;
        d.forest
            .validate()
            .map_err(|(loc, msg)| Error::parse(path, loc, msg))?;
        if d.forest.n_features() != d.feature_names.len() {
            return Err(Error::parse(
                path,
                "feature_names",
                format!(
                    "{} names but the forest has {} features",
                    d.feature_names.len(),
                    d.forest.n_features()
                ),
            ));
        }
        Ok(d)
    }

    /// Save as JSON (atomically: temp file + rename).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be written.
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::io::write_atomic(path, self.to_json().as_bytes())
    }

    /// Load a discriminator saved by [`Discriminator::save`].
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read; [`Error::Parse`] naming the file for bad JSON,
    /// a wrong `format_version` or an invalid forest.
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::io::read_to_string(path)?;
        Self::from_json(&text, path)
    }

    /// Fail unless this discriminator was trained on the `expected` feature set.
    ///
    /// # Errors
    /// [`Error::FeatureSetMismatch`].
    pub fn check_feature_set(&self, expected: &str) -> Result<()> {
        if self.feature_set == expected {
            Ok(())
        } else {
            Err(Error::FeatureSetMismatch {
                what: "discriminator".into(),
                found: self.feature_set.clone(),
                expected: expected.into(),
            })
        }
    }
}

/// The grouped k-fold held-out AUC, or `None` with fewer than two usable folds.
fn grouped_auc(
    x: &[Vec<f64>],
    y: &[bool],
    groups: &[String],
    params: &ForestParams,
    folds: usize,
) -> Result<Option<HeldOutAuc>> {
    let n_groups = groups
        .iter()
        .map(String::as_str)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let k = folds.min(n_groups);
    let mut aucs = Vec::new();
    for (fold, (train, test)) in group_kfold(groups, k, params.seed).into_iter().enumerate() {
        let pick = |idx: &[usize]| -> (Vec<Vec<f64>>, Vec<bool>) {
            (
                idx.iter().map(|&i| x[i].clone()).collect(),
                idx.iter().map(|&i| y[i]).collect(),
            )
        };
        let (xtr, ytr) = pick(&train);
        let (xte, yte) = pick(&test);
        let both = |l: &[bool]| l.iter().any(|&b| b) && l.iter().any(|&b| !b);
        if !both(&ytr) || !both(&yte) {
            tracing::debug!(fold, "skipping fold: one class missing on a side");
            continue;
        }
        let forest = RandomForest::fit(&xtr, &ytr, params)?;
        if let Some(auc) = roc_auc(&forest.predict_proba(&xte), &yte) {
            aucs.push(auc);
        }
    }
    if aucs.len() < 2 {
        return Ok(None);
    }
    Ok(Some(HeldOutAuc {
        mean: aucs.iter().sum::<f64>() / aucs.len() as f64,
        folds: aucs,
        k,
        n_groups,
    }))
}

/// The current time as RFC 3339 UTC with second precision, e.g. `2026-11-23T07:21:20Z`.
/// A `serde_json` formatter that keeps saved discriminators both readable and compact.
mod json_layout {
    use serde_json::ser::{CompactFormatter, Formatter};
    use std::io::{self, Write};

    #[derive(Clone, Copy, PartialEq)]
    enum Ctx {
        /// An object printed one key per line.
        Pretty,
        /// An array not inside another array: scalars inline, objects one per line.
        Array { has_object: bool },
        /// Anything nested inside an array element: fully compact.
        Compact,
    }

    /// Objects outside arrays are indented one key per line; arrays are written inline,
    /// except that objects directly inside a top-level array go one per line (one tree per
    /// line). Everything inside an array element is compact.
    pub(super) struct Layout {
        stack: Vec<Ctx>,
    }

    impl Layout {
        pub(super) fn new() -> Self {
            Layout { stack: Vec::new() }
        }

        fn compact(&self) -> bool {
            self.stack.contains(&Ctx::Compact)
        }

        fn indent<W: ?Sized + Write>(&self, w: &mut W) -> io::Result<()> {
            w.write_all(b"\n")?;
            let depth = self.stack.len();
            for _ in 0..depth {
                w.write_all(b"  ")?;
            }
            Ok(())
        }
    }

    impl Formatter for Layout {
        fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
            let inside_array =
                self.compact() || matches!(self.stack.last(), Some(Ctx::Array { .. }));
            self.stack.push(if inside_array {
                Ctx::Compact
            } else {
                Ctx::Array { has_object: false }
            });
            w.write_all(b"[")
        }

        fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
            let ctx = self.stack.pop();
            if ctx == Some(Ctx::Array { has_object: true }) {
                self.indent(w)?;
            }
            w.write_all(b"]")
        }

        fn begin_array_value<W: ?Sized + Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> io::Result<()> {
            if !first {
                w.write_all(b",")?;
            }
            Ok(())
        }

        fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
            Ok(())
        }

        fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
            if let Some(Ctx::Array { has_object }) = self.stack.last_mut() {
                *has_object = true;
                self.indent(w)?;
                self.stack.push(Ctx::Compact);
            } else if self.compact() {
                self.stack.push(Ctx::Compact);
            } else {
                self.stack.push(Ctx::Pretty);
            }
            w.write_all(b"{")
        }

        fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
            let ctx = self.stack.pop();
            if ctx == Some(Ctx::Pretty) {
                self.indent(w)?;
            }
            w.write_all(b"}")
        }

        fn begin_object_key<W: ?Sized + Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> io::Result<()> {
            if !first {
                w.write_all(b",")?;
            }
            if self.stack.last() == Some(&Ctx::Pretty) {
                self.indent(w)?;
            }
            Ok(())
        }

        fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
            if self.stack.last() == Some(&Ctx::Pretty) {
                w.write_all(b": ")
            } else {
                CompactFormatter.begin_object_value(w)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_features_parses_and_round_trips() {
        assert_eq!("sqrt".parse::<MaxFeatures>().unwrap(), MaxFeatures::Sqrt);
        assert_eq!(" ALL ".parse::<MaxFeatures>().unwrap(), MaxFeatures::All);
        assert_eq!("4".parse::<MaxFeatures>().unwrap(), MaxFeatures::Count(4));
        assert_eq!(
            "0.5".parse::<MaxFeatures>().unwrap(),
            MaxFeatures::Fraction(0.5)
        );
        for bad in ["0", "1.5", "-1", "log2", "", "nan"] {
            assert!(bad.parse::<MaxFeatures>().is_err(), "{bad}");
        }
        let e: Error = "x".parse::<MaxFeatures>().unwrap_err().into();
        assert!(matches!(e, Error::Config { .. }));
        for m in [
            MaxFeatures::Sqrt,
            MaxFeatures::All,
            MaxFeatures::Count(3),
            MaxFeatures::Fraction(1.0),
            MaxFeatures::Fraction(0.25),
        ] {
            let j = serde_json::to_string(&m).unwrap();
            assert_eq!(serde_json::from_str::<MaxFeatures>(&j).unwrap(), m, "{j}");
            assert_eq!(m.to_string().parse::<MaxFeatures>().unwrap(), m);
        }
        assert_eq!(
            serde_json::from_str::<MaxFeatures>("\"7\"").unwrap(),
            MaxFeatures::Count(7)
        );
        assert!(serde_json::from_str::<MaxFeatures>("0").is_err());
        assert!(serde_json::from_str::<MaxFeatures>("2.5").is_err());
    }

    #[test]
    fn max_features_resolves_like_sklearn() {
        assert_eq!(MaxFeatures::Sqrt.resolve(19).unwrap(), 4);
        assert_eq!(MaxFeatures::Sqrt.resolve(16).unwrap(), 4);
        assert_eq!(MaxFeatures::Sqrt.resolve(1).unwrap(), 1);
        assert_eq!(MaxFeatures::All.resolve(19).unwrap(), 19);
        assert_eq!(MaxFeatures::Fraction(0.5).resolve(19).unwrap(), 9);
        assert_eq!(MaxFeatures::Fraction(0.01).resolve(19).unwrap(), 1);
        assert!(MaxFeatures::Count(20).resolve(19).is_err());
    }

    #[test]
    fn forest_params_default_and_partial_deserialisation() {
        let d = ForestParams::default();
        assert_eq!(
            (d.n_trees, d.max_depth, d.max_features, d.seed),
            (200, Some(12), MaxFeatures::Sqrt, 42)
        );
        assert!(d.balanced && d.bootstrap);
        let p: ForestParams =
            serde_json::from_str(r#"{"n_trees": 10, "max_features": "all"}"#).unwrap();
        assert_eq!(p.n_trees, 10);
        assert_eq!(p.max_features, MaxFeatures::All);
        assert_eq!(p.max_depth, Some(12));
    }

    #[test]
    fn floats_survive_json_bit_exactly() {
        // Needs serde_json's `float_roundtrip` feature: the default parser can be one ULP off
        // (this value came back as 0.3995203187686055), which moves split thresholds.
        for v in [0.39952031876860555_f64, 0.1 + 0.2, 1e-300, 123456.789e-7] {
            let back: f64 = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{v}");
            let back: serde_json::Value = serde_json::from_str(&v.to_string()).unwrap();
            assert_eq!(back.as_f64().unwrap().to_bits(), v.to_bits(), "{v}");
        }
    }

    #[test]
    fn roc_auc_hand_computed() {
        assert_eq!(
            roc_auc(&[0.1, 0.4, 0.35, 0.8], &[false, false, true, true]),
            Some(0.75)
        );
        assert_eq!(roc_auc(&[0.0, 1.0], &[false, true]), Some(1.0));
        assert_eq!(roc_auc(&[0.0, 1.0], &[true, false]), Some(0.0));
        // All tied: 0.5.
        assert_eq!(roc_auc(&[0.3; 4], &[true, false, true, false]), Some(0.5));
        // One tie between a positive and a negative counts 1/2:
        // pairs (p, n): (0.5, 0.2) 1, (0.5, 0.5) ½, (0.9, 0.2) 1, (0.9, 0.5) 1 → 3.5 / 4.
        assert_eq!(
            roc_auc(&[0.2, 0.5, 0.5, 0.9], &[false, false, true, true]),
            Some(0.875)
        );
        assert_eq!(roc_auc(&[0.2, 0.5], &[true, true]), None);
        assert_eq!(roc_auc(&[], &[]), None);
    }

    #[test]
    fn group_kfold_balances_and_never_leaks() {
        let sizes = [5usize, 4, 3, 3, 2, 2, 1, 1, 1];
        let groups: Vec<String> = sizes
            .iter()
            .enumerate()
            .flat_map(|(g, &n)| std::iter::repeat_n(format!("g{g}"), n))
            .collect();
        for seed in 0..5 {
            let folds = group_kfold(&groups, 3, seed);
            assert_eq!(folds.len(), 3);
            let mut seen = vec![0; groups.len()];
            for (train, test) in &folds {
                assert!(!test.is_empty());
                assert_eq!(train.len() + test.len(), groups.len());
                for &i in test {
                    seen[i] += 1;
                    assert!(train.iter().all(|&j| groups[j] != groups[i]));
                }
            }
            assert!(seen.iter().all(|&s| s == 1));
            // 22 samples: greedy largest-first gives sizes within one group of each other.
            let mut lens: Vec<usize> = folds.iter().map(|f| f.1.len()).collect();
            lens.sort();
            assert_eq!(lens, vec![7, 7, 8], "seed {seed}");
        }
        // k capped at the number of groups; fewer than two groups gives no split.
        assert_eq!(group_kfold(&groups[..9], 10, 0).len(), 2);
        assert!(group_kfold(&groups[..5], 5, 0).is_empty());
        assert!(group_kfold(&groups, 1, 0).is_empty());
    }
}
