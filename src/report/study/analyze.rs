//! Un-blinding a study: answer files (the page's download or Label Studio's export) read with
//! the key, and the analysis of what annotators judged ([`StudyAnalysis`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::*;
use crate::{Error, Result};

/// One annotator's answers.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerSheet {
    /// Annotator id.
    pub annotator: String,
    /// The file it came from.
    pub source: PathBuf,
    /// Study id it names (None for Label Studio exports without one).
    pub study_id: Option<String>,
    /// item → judgement.
    pub answers: BTreeMap<String, Judgement>,
}

/// Read an answer file: the page's download (`{"study_id", "annotator", "answers": [{"item",
/// "judgement"}]}`) or a Label Studio JSON export (a list of tasks with `annotations`; one
/// sheet per annotator, cancelled annotations skipped).
pub fn load_answers(path: &Path) -> Result<Vec<AnswerSheet>> {
    let text = crate::io::read_to_string(path)?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| Error::parse(path, format!("line {}", e.line()), format!("not JSON: {e}")))?;
    let bad = |loc: String, msg: &str| Error::parse(path, loc, msg.to_string());
    match v {
        Value::Object(o) => {
            let annotator = o
                .get("annotator")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| bad("annotator".into(), "missing or empty annotator id"))?;
            let list = o
                .get("answers")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("answers".into(), "expected a list of {item, judgement}"))?;
            let mut answers = BTreeMap::new();
            for (i, a) in list.iter().enumerate() {
                let item = a
                    .get("item")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("answers[{i}].item"), "expected a string"))?;
                let j = a
                    .get("judgement")
                    .and_then(Value::as_str)
                    .and_then(Judgement::parse)
                    .ok_or_else(|| {
                        bad(
                            format!("answers[{i}].judgement"),
                            "expected human, bot or unsure",
                        )
                    })?;
                if answers.insert(item.to_string(), j).is_some() {
                    return Err(bad(
                        format!("answers[{i}]"),
                        &format!("item '{item}' is answered twice"),
                    ));
                }
            }
            Ok(vec![AnswerSheet {
                annotator: annotator.to_string(),
                source: path.to_path_buf(),
                study_id: o
                    .get("study_id")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                answers,
            }])
        }
        Value::Array(tasks) => {
            let mut sheets: BTreeMap<String, AnswerSheet> = BTreeMap::new();
            for (i, t) in tasks.iter().enumerate() {
                let data = t.get("data");
                let item = data
                    .and_then(|d| d.get("item"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        bad(
                            format!("[{i}].data.item"),
                            "not a Label Studio export of `ppol study make` tasks",
                        )
                    })?;
                let study_id = data
                    .and_then(|d| d.get("study_id"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let anns = t
                    .get("annotations")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (k, a) in anns.iter().enumerate() {
                    if a.get("was_cancelled").and_then(Value::as_bool) == Some(true) {
                        continue;
                    }
                    let who = match a.get("completed_by") {
                        Some(Value::Object(u)) => u
                            .get("email")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                            .or_else(|| u.get("id").map(|v| v.to_string())),
                        Some(Value::Null) | None => None,
                        Some(v) => Some(match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        }),
                    }
                    .ok_or_else(|| {
                        bad(
                            format!("[{i}].annotations[{k}].completed_by"),
                            "missing annotator",
                        )
                    })?;
                    let choice = a
                        .get("result")
                        .and_then(Value::as_array)
                        .and_then(|r| {
                            r.iter()
                                .find_map(|x| x.pointer("/value/choices/0").and_then(Value::as_str))
                        })
                        .and_then(Judgement::parse);
                    let Some(j) = choice else { continue };
                    let sheet = sheets.entry(who.clone()).or_insert_with(|| AnswerSheet {
                        annotator: format!("label-studio:{who}"),
                        source: path.to_path_buf(),
                        study_id: study_id.clone(),
                        answers: BTreeMap::new(),
                    });
                    sheet.answers.insert(item.to_string(), j);
                }
            }
            Ok(sheets.into_values().collect())
        }
        _ => Err(bad(
            "document".into(),
            "expected the page's answer object or a Label Studio JSON export",
        )),
    }
}

/// Options of [`analyze`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AnalyzeOptions {
    /// Keep annotators who failed an attention check (default: exclude them).
    pub keep_failed_attention: bool,
}

/// An annotator left out of the analysis, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Excluded {
    /// Annotator id.
    pub annotator: String,
    /// What they did wrong.
    pub reason: String,
}

/// Judgements of one condition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConditionResult {
    /// Condition name.
    pub condition: String,
    /// Judgements (every answer, Not sure included).
    pub n: usize,
    /// "Human" answers.
    pub n_human: usize,
    /// "Bot" answers.
    pub n_bot: usize,
    /// "Not sure" answers.
    pub n_unsure: usize,
    /// Share judged human = n_human / n ("Not sure" counts as not judged human), with its 95%
    /// Wilson interval; None without judgements.
    pub judged_human: Option<stats::Wilson>,
}

/// Welch's t of two conditions' judged-human rates (per judgement, 1 = Human, 0 = otherwise).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// First condition.
    pub a: String,
    /// Second condition.
    pub b: String,
    /// Share(a) − share(b).
    pub difference: f64,
    /// The test (None when a side has < 2 judgements or both are constant).
    pub welch: Option<stats::TTest>,
}

/// Inter-annotator agreement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    /// Which coefficient.
    pub method: &'static str,
    /// Its value (None when not computable: fewer than two annotators on any item, or no
    /// variation at all).
    pub value: Option<f64>,
    /// Items judged by at least two included annotators.
    pub n_items: usize,
}

/// The point-biserial correlation of "judged human" with the discriminator's P(human).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointBiserial {
    /// r.
    pub r: f64,
    /// Judgements used.
    pub n: usize,
    /// Test of r = 0.
    pub test: stats::TTest,
}

/// The un-blinded study.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyAnalysis {
    /// Study id.
    pub study_id: String,
    /// Annotators whose answers were read.
    pub n_annotators: usize,
    /// Annotators analysed.
    pub included: Vec<String>,
    /// Annotators left out (failed attention checks), or kept despite a failure when
    /// `keep_failed_attention` (then listed in `attention_failures` only).
    pub excluded: Vec<Excluded>,
    /// Every attention-check failure, whether excluded or kept.
    pub attention_failures: Vec<Excluded>,
    /// Per condition, in the key's order.
    pub conditions: Vec<ConditionResult>,
    /// Every pair of conditions.
    pub comparisons: Vec<Comparison>,
    /// Krippendorff's α over the three answers.
    pub agreement: Agreement,
    /// None when the key has no P(human) (no discriminator given to `make`) or too few pairs.
    pub point_biserial: Option<PointBiserial>,
}

/// Un-blind `sheets` with `key` (the paper's §5.4 analysis). Attention-check items are left out
/// of every statistic; an annotator who answered one wrongly or not at all is excluded unless
/// `keep_failed_attention`.
///
/// # Errors
/// An answer sheet of another study (its `study_id` differs), an item the key does not know,
/// one annotator id in two sheets, or no annotator left.
pub fn analyze(
    key: &StudyKey,
    sheets: &[AnswerSheet],
    opts: AnalyzeOptions,
) -> Result<StudyAnalysis> {
    let items: HashMap<&str, &KeyItem> = key.items.iter().map(|k| (k.item.as_str(), k)).collect();
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    for s in sheets {
        if let Some(id) = &s.study_id {
            if id != &key.study_id {
                return Err(Error::parse(
                    &s.source,
                    "study_id",
                    format!(
                        "answers of study {id}, but the key is of study {}",
                        key.study_id
                    ),
                ));
            }
        }
        if let Some(unknown) = s.answers.keys().find(|i| !items.contains_key(i.as_str())) {
            return Err(Error::parse(
                &s.source,
                format!("item '{unknown}'"),
                "the key has no such item",
            ));
        }
        if let Some(first) = seen.insert(&s.annotator, &s.source) {
            return Err(Error::parse(
                &s.source,
                "annotator",
                format!(
                    "annotator '{}' also answered in '{}'; merge or rename one",
                    s.annotator,
                    first.display()
                ),
            ));
        }
    }
    let mut included = Vec::new();
    let mut excluded = Vec::new();
    let mut failures = Vec::new();
    for s in sheets {
        let mut why = Vec::new();
        for k in key.items.iter().filter(|k| k.condition == ATTENTION) {
            let expected = k.expected.expect("attention items carry their answer");
            match s.answers.get(&k.item) {
                Some(a) if *a == expected => {}
                Some(a) => why.push(format!(
                    "answered {} on attention check {} (right: {})",
                    a.name(),
                    k.item,
                    expected.name()
                )),
                None => why.push(format!("did not answer attention check {}", k.item)),
            }
        }
        if why.is_empty() {
            included.push(s);
        } else {
            let e = Excluded {
                annotator: s.annotator.clone(),
                reason: why.join("; "),
            };
            failures.push(e.clone());
            if opts.keep_failed_attention {
                included.push(s);
            } else {
                excluded.push(e);
            }
        }
    }
    if included.is_empty() {
        return Err(Error::Insufficient(format!(
            "no annotator left to analyse ({} read, {} failed an attention check; \
             --keep-failed-attention keeps them)",
            sheets.len(),
            failures.len()
        )));
    }
    // Every judgement of an included annotator on a study item.
    let mut by_condition: BTreeMap<&str, Vec<Judgement>> = BTreeMap::new();
    let mut by_item: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut pb_x = Vec::new();
    let mut pb_y = Vec::new();
    for s in &included {
        for (item, j) in &s.answers {
            let k = items[item.as_str()];
            if k.condition == ATTENTION {
                continue;
            }
            by_condition.entry(&k.condition).or_default().push(*j);
            by_item.entry(&k.item).or_default().push(j.index());
            if let Some(p) = k.p_human {
                pb_x.push(if *j == Judgement::Human { 1.0 } else { 0.0 });
                pb_y.push(p);
            }
        }
    }
    let conditions: Vec<ConditionResult> = key
        .conditions
        .iter()
        .map(|c| {
            let js = by_condition
                .get(c.name.as_str())
                .cloned()
                .unwrap_or_default();
            let count = |w: Judgement| js.iter().filter(|j| **j == w).count();
            ConditionResult {
                condition: c.name.clone(),
                n: js.len(),
                n_human: count(Judgement::Human),
                n_bot: count(Judgement::Bot),
                n_unsure: count(Judgement::Unsure),
                judged_human: stats::wilson(count(Judgement::Human), js.len(), stats::Z95),
            }
        })
        .collect();
    let binary = |name: &str| -> Vec<f64> {
        by_condition
            .get(name)
            .map(|js| {
                js.iter()
                    .map(|j| if *j == Judgement::Human { 1.0 } else { 0.0 })
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut comparisons = Vec::new();
    for (i, a) in key.conditions.iter().enumerate() {
        for b in &key.conditions[i + 1..] {
            let (xa, xb) = (binary(&a.name), binary(&b.name));
            let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len().max(1) as f64;
            comparisons.push(Comparison {
                a: a.name.clone(),
                b: b.name.clone(),
                difference: mean(&xa) - mean(&xb),
                welch: stats::welch(&xa, &xb),
            });
        }
    }
    let units: Vec<Vec<usize>> = by_item.into_values().collect();
    let agreement = Agreement {
        method: "Krippendorff's alpha (nominal: human / bot / not sure)",
        value: stats::krippendorff_alpha_nominal(&units, 3),
        n_items: units.iter().filter(|u| u.len() >= 2).count(),
    };
    let point_biserial = stats::pearson(&pb_x, &pb_y).map(|(r, test)| PointBiserial {
        r,
        n: pb_x.len(),
        test,
    });
    let mut included_ids: Vec<String> = included.iter().map(|s| s.annotator.clone()).collect();
    included_ids.sort();
    Ok(StudyAnalysis {
        study_id: key.study_id.clone(),
        n_annotators: sheets.len(),
        included: included_ids,
        excluded,
        attention_failures: failures,
        conditions,
        comparisons,
        agreement,
        point_biserial,
    })
}

/// The analysis as a plain-text table (what `ppol study analyze` prints).
pub fn render_text(a: &StudyAnalysis) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "study {}: {} annotators read, {} analysed, {} excluded",
        a.study_id,
        a.n_annotators,
        a.included.len(),
        a.excluded.len()
    );
    for e in &a.attention_failures {
        let kept = !a.excluded.iter().any(|x| x.annotator == e.annotator);
        let _ = writeln!(
            s,
            "  attention check failed: {} — {}{}",
            e.annotator,
            e.reason,
            if kept { " (kept)" } else { " (excluded)" }
        );
    }
    let _ = writeln!(
        s,
        "\n{:<20} {:>6} {:>6} {:>6} {:>7}  {:>8}  95% CI (Wilson)",
        "condition", "n", "human", "bot", "unsure", "% human"
    );
    for c in &a.conditions {
        match &c.judged_human {
            Some(w) => {
                let _ = writeln!(
                    s,
                    "{:<20} {:>6} {:>6} {:>6} {:>7}  {:>7.1}%  [{:.1}%, {:.1}%]",
                    c.condition,
                    c.n,
                    c.n_human,
                    c.n_bot,
                    c.n_unsure,
                    100.0 * w.share,
                    100.0 * w.low,
                    100.0 * w.high
                );
            }
            None => {
                let _ = writeln!(s, "{:<20} {:>6}  (no judgements)", c.condition, 0);
            }
        }
    }
    let _ = writeln!(s, "\nWelch's t (judged human, per judgement):");
    for c in &a.comparisons {
        match &c.welch {
            Some(t) => {
                let _ = writeln!(
                    s,
                    "  {} vs {}: diff {:+.3}, t = {:.3}, df = {:.1}, p = {:.4}",
                    c.a, c.b, c.difference, t.t, t.df, t.p
                );
            }
            None => {
                let _ = writeln!(s, "  {} vs {}: not computable", c.a, c.b);
            }
        }
    }
    let _ = writeln!(
        s,
        "\nagreement: {} = {} over {} items with ≥ 2 annotators",
        a.agreement.method,
        a.agreement
            .value
            .map_or("n/a".to_string(), |v| format!("{v:.3}")),
        a.agreement.n_items
    );
    match &a.point_biserial {
        Some(pb) => {
            let _ = writeln!(
                s,
                "point-biserial r(judged human, P(human)) = {:.3} (n = {}, t = {:.3}, df = {}, p = {:.4})",
                pb.r, pb.n, pb.test.t, pb.test.df, pb.test.p
            );
        }
        None => {
            let _ = writeln!(
                s,
                "point-biserial r: n/a (make the study with --discriminator to record P(human))"
            );
        }
    }
    s
}
