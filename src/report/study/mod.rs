//! A blinded human-judgement study of simulated users (the PPol paper's §5.4: annotators read
//! the user side of a transcript and judge whether the user is a human or a bot).
//!
//! [`make`] takes dialogues of several *conditions* (human traces, the base simulator, the seed,
//! the evolved personas — any trace or episode file, `hf://` paths included), samples the same
//! number from each (seeded), shuffles them with one or more attention-check items whose right
//! answer is known, and strips every label: what annotators see holds only `item-NNN` numbers and
//! the turns' text — no dialogue, task or persona id, no condition or file name, and tool
//! traffic removed. [`write`](fn@write) puts four files in a directory:
//!
//! | file | for | holds |
//! |---|---|---|
//! | `study.html` | annotators | one self-contained page (no network, no external asset): annotator id, each transcript with the user's turns in full and the agent's dimmed (or summarised, or hidden), Human / Bot / Not sure, and a button that downloads the answers as JSON; progress is kept in the browser's local storage |
//! | `label_studio_tasks.json` | Label Studio | the same items as import tasks |
//! | `label_studio_config.xml` | Label Studio | the labeling configuration for them |
//! | `key.json` | the researcher only | item → condition, source file, dialogue and persona id, P(human) when a discriminator was given, and the attention checks' right answers |
//!
//! [`analyze`] un-blinds answer files (downloaded from the page, or Label Studio's JSON export)
//! with the key: see [`StudyAnalysis`].

pub mod stats;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::dialogue::{Dialogue, Role};
use crate::fitness::discriminator::Discriminator;
use crate::fitness::features::{fingerprint_many, FeatureSet};
use crate::fitness::traces::{self, LoadOptions};
use crate::{Error, Result};

/// Version of the key and answer formats.
pub const FORMAT_VERSION: u32 = 1;

/// One condition of the study: a name (kept in the key only) and its dialogue files.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// Name (`human`, `base`, `seed`, `evolved`, ...).
    pub name: String,
    /// Trace or episode files (`hf://` paths too).
    pub files: Vec<PathBuf>,
}

impl Condition {
    /// Parse `NAME=FILE`; the same name given twice adds files to one condition (see
    /// [`Condition::merge`]).
    pub fn parse(spec: &str) -> Result<Condition> {
        let (name, file) = spec.split_once('=').ok_or_else(|| {
            Error::config(
                "--condition",
                format!("'{spec}' is not NAME=FILE (e.g. evolved=runs/x/best/episodes.jsonl)"),
            )
        })?;
        let name = name.trim();
        if name.is_empty() || file.trim().is_empty() {
            return Err(Error::config(
                "--condition",
                format!("'{spec}' has an empty name or file"),
            ));
        }
        Ok(Condition {
            name: name.to_string(),
            files: vec![PathBuf::from(file.trim())],
        })
    }

    /// Join conditions of the same name, keeping the order of first appearance.
    pub fn merge(list: Vec<Condition>) -> Vec<Condition> {
        let mut out: Vec<Condition> = Vec::new();
        for c in list {
            match out.iter_mut().find(|o| o.name == c.name) {
                Some(o) => o.files.extend(c.files),
                None => out.push(c),
            }
        }
        out
    }
}

/// How the agent's turns are shown to annotators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentTurns {
    /// In full, dimmed (the default).
    #[default]
    Dimmed,
    /// Replaced by "(agent reply, N words)".
    Summary,
    /// Left out.
    Hidden,
}

impl std::str::FromStr for AgentTurns {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "dimmed" => Ok(AgentTurns::Dimmed),
            "summary" | "summarised" | "summarized" => Ok(AgentTurns::Summary),
            "hidden" | "none" => Ok(AgentTurns::Hidden),
            _ => Err(Error::config(
                "--agent-turns",
                format!("'{s}' is not dimmed, summary or hidden"),
            )),
        }
    }
}

/// Options of [`make`].
#[derive(Debug, Clone)]
pub struct MakeOptions {
    /// Dialogues sampled from each condition (0 = all of them).
    pub per_condition: usize,
    /// Seed of the sampling and the shuffle.
    pub seed: u64,
    /// Attention-check items (their right answers alternate Bot, Human, ...).
    pub attention_checks: usize,
    /// How agent turns are shown.
    pub agent_turns: AgentTurns,
    /// A saved discriminator: P(human) of each item goes into the key.
    pub discriminator: Option<PathBuf>,
    /// Page title.
    pub title: String,
    /// Keep only dialogues of this domain (τ-USI files mix airline and retail).
    pub domain: Option<String>,
}

impl Default for MakeOptions {
    fn default() -> Self {
        MakeOptions {
            per_condition: 20,
            seed: 0,
            attention_checks: 1,
            agent_turns: AgentTurns::Dimmed,
            discriminator: None,
            title: "Who wrote this? A short study of customer-service conversations".into(),
            domain: None,
        }
    }
}

/// One answer an annotator can give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Judgement {
    /// "Human".
    Human,
    /// "Bot".
    Bot,
    /// "Not sure".
    Unsure,
}

impl Judgement {
    /// Parse the page's and Label Studio's spellings (`human`, `Bot`, `Not sure`, `unsure`).
    pub fn parse(s: &str) -> Option<Judgement> {
        match s.trim().to_ascii_lowercase().as_str() {
            "human" => Some(Judgement::Human),
            "bot" => Some(Judgement::Bot),
            "unsure" | "not sure" | "not_sure" | "notsure" => Some(Judgement::Unsure),
            _ => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Judgement::Human => "human",
            Judgement::Bot => "bot",
            Judgement::Unsure => "unsure",
        }
    }
}

/// One line of a transcript as annotators see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShownTurn {
    /// `user` or `agent`.
    pub who: String,
    /// The text (for a summarised agent turn, the summary), with bidi controls shown as
    /// `\u{202e}` escapes ([`crate::io::neutralize_bidi`]): annotators read it on the page and
    /// in Label Studio.
    pub text: String,
}

/// One item as annotators see it: a number and turns, nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShownItem {
    /// `item-007`.
    pub item: String,
    /// The transcript.
    pub turns: Vec<ShownTurn>,
}

/// What the key says about one item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyItem {
    /// `item-007`.
    pub item: String,
    /// Condition name, or `attention-check`.
    pub condition: String,
    /// Source file (None for attention checks).
    #[serde(default)]
    pub source: Option<String>,
    /// Dialogue / episode id in the source.
    #[serde(default)]
    pub dialogue_id: Option<String>,
    /// Persona id (episodes only).
    #[serde(default)]
    pub persona_id: Option<String>,
    /// P(human) of the discriminator given to `make`.
    #[serde(default)]
    pub p_human: Option<f64>,
    /// For attention checks: the right answer.
    #[serde(default)]
    pub expected: Option<Judgement>,
}

/// The key file: kept by the researcher, never shown to annotators.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyKey {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// Binds answers to this study (a hash of the items shown).
    pub study_id: String,
    /// Seed used.
    pub seed: u64,
    /// Conditions in the order given, with their files.
    pub conditions: Vec<KeyCondition>,
    /// Discriminator file and feature set, when P(human) was computed.
    #[serde(default)]
    pub discriminator: Option<String>,
    /// Every item, in the order shown.
    pub items: Vec<KeyItem>,
}

/// A condition in the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyCondition {
    /// Name.
    pub name: String,
    /// Files.
    pub files: Vec<String>,
    /// Items sampled.
    pub n_items: usize,
    /// Dialogues available (with user text).
    pub n_available: usize,
}

/// A study ready to be written.
#[derive(Debug, Clone)]
pub struct Study {
    /// The items, shuffled, as annotators see them.
    pub items: Vec<ShownItem>,
    /// The key.
    pub key: StudyKey,
    /// Page title.
    pub title: String,
    /// How agent turns are shown.
    pub agent_turns: AgentTurns,
}

/// Paths written by [`write`](fn@write).
#[derive(Debug, Clone, Serialize)]
pub struct StudyFiles {
    /// The annotators' page.
    pub page: PathBuf,
    /// Label Studio import tasks.
    pub label_studio_tasks: PathBuf,
    /// Label Studio labeling config.
    pub label_studio_config: PathBuf,
    /// The key (keep it away from annotators).
    pub key: PathBuf,
    /// Items (attention checks included).
    pub n_items: usize,
    /// The study id.
    pub study_id: String,
}

const ATTENTION: &str = "attention-check";

fn shuffle<T>(v: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.random_range(0..=i);
        v.swap(i, j);
    }
}

/// Text a user turn is shown with: τ² stop tokens removed, whitespace trimmed.
fn clean_user_text(s: &str) -> String {
    let mut t = s.to_string();
    for (tok, _) in crate::simulate::episode::STOP_TOKENS {
        t = t.replace(tok, "");
    }
    t.trim().to_string()
}

fn shown_turns(d: &Dialogue, agent: AgentTurns) -> Vec<ShownTurn> {
    let mut out = shown_turns_raw(d, agent);
    for t in &mut out {
        if let std::borrow::Cow::Owned(shown) = crate::io::neutralize_bidi(&t.text) {
            t.text = shown;
        }
    }
    out
}

fn shown_turns_raw(d: &Dialogue, agent: AgentTurns) -> Vec<ShownTurn> {
    let mut out = Vec::new();
    for t in &d.turns {
        match t.role {
            Role::User => {
                let text = clean_user_text(&t.content);
                if !text.is_empty() {
                    out.push(ShownTurn {
                        who: "user".into(),
                        text,
                    });
                }
            }
            // Tool calls and results are hidden; an agent turn that only called tools is too.
            Role::Assistant if !t.content.trim().is_empty() => {
                let text = match agent {
                    AgentTurns::Dimmed => t.content.trim().to_string(),
                    AgentTurns::Summary => {
                        let n = t.content.split_whitespace().count();
                        format!("(agent reply, {n} word{})", if n == 1 { "" } else { "s" })
                    }
                    AgentTurns::Hidden => continue,
                };
                out.push(ShownTurn {
                    who: "agent".into(),
                    text,
                });
            }
            _ => {}
        }
    }
    out
}

fn attention_item(k: usize, agent: AgentTurns) -> (Vec<ShownTurn>, Judgement) {
    let expected = if k % 2 == 0 {
        Judgement::Bot
    } else {
        Judgement::Human
    };
    let answer = if expected == Judgement::Bot {
        "Bot"
    } else {
        "Human"
    };
    let agent_turn = |text: &str| {
        let text = match agent {
            AgentTurns::Dimmed => text.to_string(),
            AgentTurns::Summary => {
                format!("(agent reply, {} words)", text.split_whitespace().count())
            }
            AgentTurns::Hidden => String::new(),
        };
        (!text.is_empty()).then(|| ShownTurn {
            who: "agent".into(),
            text,
        })
    };
    let user = |text: String| {
        Some(ShownTurn {
            who: "user".into(),
            text,
        })
    };
    let turns = [
        agent_turn("Hi! How can I help you today?"),
        user("Hello, I would like to check the status of an order I placed last week.".into()),
        agent_turn("Of course. Could you tell me the order number?"),
        user(format!(
            "This conversation is an attention check. Please answer \"{answer}\" for it, \
             whatever you think of the rest."
        )),
    ];
    (turns.into_iter().flatten().collect(), expected)
}

/// Sample, shuffle and blind the dialogues of `conditions` (see the module docs).
///
/// # Errors
/// No or duplicate-free conditions missing, a condition with fewer dialogues with user text
/// than `per_condition` (the message names it and its files), unreadable files, a
/// discriminator that does not load.
pub fn make(conditions: &[Condition], opts: &MakeOptions) -> Result<Study> {
    if conditions.len() < 2 {
        return Err(Error::config(
            "--condition",
            "give at least two conditions (e.g. human=traces.jsonl evolved=episodes.jsonl)",
        ));
    }
    if let Some(c) = conditions.iter().find(|c| c.name == ATTENTION) {
        return Err(Error::config(
            "--condition",
            format!("'{}' is reserved for the attention checks", c.name),
        ));
    }
    let disc = opts
        .discriminator
        .as_deref()
        .map(Discriminator::load)
        .transpose()?;
    let disc_set = disc
        .as_ref()
        .map(|d| FeatureSet::parse(&d.feature_set))
        .transpose()?;
    let mut rng = ChaCha8Rng::seed_from_u64(crate::rng::derive_seed(opts.seed, "study"));
    let mut pool: Vec<(ShownItem, KeyItem)> = Vec::new();
    let mut key_conditions = Vec::new();
    for c in conditions {
        let mut ds: Vec<(String, Dialogue)> = Vec::new();
        for f in &c.files {
            let loaded = traces::load(
                f,
                &LoadOptions {
                    domain: opts.domain.clone(),
                },
            )?;
            ds.extend(loaded.into_iter().map(|d| (f.display().to_string(), d)));
        }
        ds.retain(|(_, d)| d.user_texts().any(|t| !clean_user_text(t).is_empty()));
        let n_available = ds.len();
        let want = if opts.per_condition == 0 {
            n_available
        } else {
            opts.per_condition
        };
        if n_available == 0 || want > n_available {
            return Err(Error::Insufficient(format!(
                "condition '{}' ({}) has {n_available} dialogues with user text, fewer than the \
                 {want} asked for per condition (--per-condition; 0 takes all)",
                c.name,
                c.files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        shuffle(&mut ds, &mut rng);
        ds.truncate(want);
        let p_human: Vec<Option<f64>> = match (&disc, disc_set) {
            (Some(d), Some(set)) => {
                let dialogues: Vec<Dialogue> = ds.iter().map(|(_, d)| d.clone()).collect();
                let x: Vec<Vec<f64>> = fingerprint_many(&dialogues, set)
                    .iter()
                    .map(|f| f.values().to_vec())
                    .collect();
                d.p_human(&x).into_iter().map(Some).collect()
            }
            _ => vec![None; ds.len()],
        };
        for ((source, d), p) in ds.into_iter().zip(p_human) {
            let persona = d
                .meta
                .get("persona_id")
                .and_then(Value::as_str)
                .map(str::to_string);
            pool.push((
                ShownItem {
                    item: String::new(),
                    turns: shown_turns(&d, opts.agent_turns),
                },
                KeyItem {
                    item: String::new(),
                    condition: c.name.clone(),
                    source: Some(source),
                    dialogue_id: Some(d.id.clone()),
                    persona_id: persona,
                    p_human: p,
                    expected: None,
                },
            ));
        }
        key_conditions.push(KeyCondition {
            name: c.name.clone(),
            files: c.files.iter().map(|f| f.display().to_string()).collect(),
            n_items: want,
            n_available,
        });
    }
    shuffle(&mut pool, &mut rng);
    // Attention checks go anywhere but first.
    for k in 0..opts.attention_checks {
        let (turns, expected) = attention_item(k, opts.agent_turns);
        let at = rng.random_range(1..=pool.len());
        pool.insert(
            at,
            (
                ShownItem {
                    item: String::new(),
                    turns,
                },
                KeyItem {
                    item: String::new(),
                    condition: ATTENTION.into(),
                    source: None,
                    dialogue_id: None,
                    persona_id: None,
                    p_human: None,
                    expected: Some(expected),
                },
            ),
        );
    }
    let width = pool.len().to_string().len().max(3);
    for (i, (shown, key)) in pool.iter_mut().enumerate() {
        let id = format!("item-{:0width$}", i + 1);
        shown.item = id.clone();
        key.item = id;
    }
    let (items, key_items): (Vec<ShownItem>, Vec<KeyItem>) = pool.into_iter().unzip();
    let study_id = crate::io::sha256_hex(
        serde_json::to_string(&items)
            .expect("items serialise")
            .as_bytes(),
    )[..16]
        .to_string();
    Ok(Study {
        items,
        key: StudyKey {
            format_version: FORMAT_VERSION,
            study_id,
            seed: opts.seed,
            conditions: key_conditions,
            discriminator: opts.discriminator.as_ref().map(|p| p.display().to_string()),
            items: key_items,
        },
        title: opts.title.clone(),
        agent_turns: opts.agent_turns,
    })
}

/// JSON for a `<script type="application/json">` element: `<`, `>` and `&` escaped so that no
/// text can close the element or open a comment (bidi controls are escaped too, though the
/// texts shown have none: see `shown_turns`).
fn script_json(v: &Value) -> String {
    crate::io::to_json(v)
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

const PAGE: &str = include_str!("page.html");

/// The annotators' page: self-contained HTML (inline CSS and script, no network).
pub fn render_page(study: &Study) -> String {
    let data = json!({
        "format_version": FORMAT_VERSION,
        "study_id": study.key.study_id,
        "title": study.title,
        "agent_turns": study.agent_turns,
        "items": study.items,
    });
    PAGE.replace("{{TITLE}}", &super::esc(&study.title))
        .replace("{{DATA}}", &script_json(&data))
}

/// Label Studio import tasks: one task per item, `data.dialogue` a list of
/// `{"author", "text"}` for a `Paragraphs` tag.
pub fn label_studio_tasks(study: &Study) -> Value {
    Value::Array(
        study
            .items
            .iter()
            .map(|it| {
                json!({"data": {
                    "item": it.item,
                    "study_id": study.key.study_id,
                    "dialogue": it.turns.iter().map(|t| json!({
                        "author": if t.who == "user" { "User" } else { "Agent" },
                        "text": t.text,
                    })).collect::<Vec<_>>(),
                }})
            })
            .collect(),
    )
}

/// The Label Studio labeling configuration for [`label_studio_tasks`].
pub fn label_studio_config() -> &'static str {
    r#"<View>
  <Header value="Read the conversation. Was the USER (not the agent) a human or a bot?"/>
  <Paragraphs name="dialogue" value="$dialogue" layout="dialogue" nameKey="author" textKey="text"/>
  <Choices name="judgement" toName="dialogue" choice="single" showInline="true" required="true">
    <Choice value="Human"/>
    <Choice value="Bot"/>
    <Choice value="Not sure"/>
  </Choices>
</View>
"#
}

/// Write the page, the Label Studio files and the key into `dir` (atomically each).
pub fn write(study: &Study, dir: &Path) -> Result<StudyFiles> {
    let files = StudyFiles {
        page: dir.join("study.html"),
        label_studio_tasks: dir.join("label_studio_tasks.json"),
        label_studio_config: dir.join("label_studio_config.xml"),
        key: dir.join("key.json"),
        n_items: study.items.len(),
        study_id: study.key.study_id.clone(),
    };
    crate::io::write_atomic(&files.page, render_page(study).as_bytes())?;
    let tasks = crate::io::to_json_pretty(&label_studio_tasks(study));
    crate::io::write_atomic(&files.label_studio_tasks, tasks.as_bytes())?;
    crate::io::write_atomic(&files.label_studio_config, label_studio_config().as_bytes())?;
    let key = crate::io::to_json_pretty(&study.key);
    crate::io::write_atomic(&files.key, key.as_bytes())?;
    Ok(files)
}

// ---------------------------------------------------------------------------------------------
// Analysis

/// Read a key file.
pub fn load_key(path: &Path) -> Result<StudyKey> {
    let text = crate::io::read_to_string(path)?;
    let key: StudyKey = serde_json::from_str(&text).map_err(|e| {
        Error::parse(
            path,
            format!("line {}", e.line()),
            format!("not a study key written by `ppol study make`: {e}"),
        )
    })?;
    if key.format_version != FORMAT_VERSION {
        return Err(Error::parse(
            path,
            "format_version",
            format!("version {} is not {FORMAT_VERSION}", key.format_version),
        ));
    }
    Ok(key)
}

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
