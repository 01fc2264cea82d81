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

mod analyze;
pub mod stats;

pub use analyze::*;

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
