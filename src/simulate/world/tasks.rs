//! A world's tasks: id, the context a generator program sees, and the split (`train` or
//! `test`). The task file of `external:` and `chat` worlds is read here (one reader for every
//! verb: `generate --task-file` too).

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rng::mix;
use crate::{Error, Result};

/// One task of a world.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorldTask {
    /// Task id.
    pub task_id: String,
    /// What the generator program and the user simulator are told about the task.
    pub context: String,
    /// `train` or `test` (None: not given; [`TaskList::new`] assigns one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
}

/// Largest task file ppol reads (a task is a paragraph; a million of them is a mistake).
pub const MAX_TASK_FILE_BYTES: u64 = 256 << 20;

/// Read a task file: JSONL lines `{"task_id", "context", "split"?}` (`task_context` is a
/// synonym of `context`, the key of the protocol's episode request; a numeric `task_id` is
/// taken as its decimal text). Blank lines are skipped. A bad line, a duplicate id or a split
/// other than `train` / `test` is one error naming the file and line.
pub fn read_task_file(path: &Path) -> Result<Vec<WorldTask>> {
    // a device or a FIFO (`--task-file /dev/zero`) is read no further than a file may hold
    let text = crate::io::read_text_capped(
        path,
        MAX_TASK_FILE_BYTES,
        "a task file",
        crate::io::LongLines::Refuse,
    )?;
    parse_task_lines(&text, path)
}

/// Parse task lines (see [`read_task_file`]); `path` names the file in errors.
pub fn parse_task_lines(text: &str, path: &Path) -> Result<Vec<WorldTask>> {
    let mut out: Vec<WorldTask> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("line {}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| Error::parse(path, &at, format!("not JSON: {e}")))?;
        let task = task_from_value(&v).map_err(|m| Error::parse(path, &at, m))?;
        if let Some(first) = seen.insert(task.task_id.clone(), i + 1) {
            return Err(Error::parse(
                path,
                &at,
                format!(
                    "task_id '{}' is already on line {first}: task ids must be unique",
                    task.task_id
                ),
            ));
        }
        out.push(task);
    }
    Ok(out)
}

/// One task from a JSON object (a task-file line or a v2 simulator's `tasks` entry).
pub fn task_from_value(v: &Value) -> std::result::Result<WorldTask, String> {
    let obj = v
        .as_object()
        .ok_or("expected an object {\"task_id\", \"context\", \"split\"?}")?;
    let task_id = match obj.get("task_id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(format!(
                "task_id must be a non-empty string or a number, got {other}"
            ))
        }
        None => return Err("missing key task_id".into()),
    };
    let context = match (obj.get("context"), obj.get("task_context")) {
        (Some(_), Some(_)) => {
            return Err("give context or task_context (its synonym), not both".into())
        }
        (Some(Value::String(s)), None) | (None, Some(Value::String(s))) => s.clone(),
        (Some(other), None) | (None, Some(other)) => {
            return Err(format!("context must be a string, got {other}"))
        }
        (None, None) => return Err(format!("task {task_id}: missing key context")),
    };
    let split = match obj.get("split") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "train" || s == "test" => Some(s.clone()),
        Some(other) => {
            return Err(format!(
                "task {task_id}: split must be \"train\" or \"test\", got {other}"
            ))
        }
    };
    Ok(WorldTask {
        task_id,
        context,
        split,
    })
}

/// A world's tasks with a split each, looked up by id in constant time. Cloning is cheap (the
/// tasks are shared), so every runner of a world holds the list.
#[derive(Debug, Clone, Default)]
pub struct TaskList {
    tasks: std::sync::Arc<Vec<WorldTask>>,
    /// Position of each task id in `tasks`.
    index: std::sync::Arc<std::collections::HashMap<String, usize>>,
}

impl PartialEq for TaskList {
    fn eq(&self, other: &Self) -> bool {
        self.tasks == other.tasks
    }
}

impl TaskList {
    /// Tasks in order; those without a split get one: a seeded share `test_fraction` of them
    /// (at least one when there are two or more and the share is positive) is `test`, the
    /// rest `train`. The choice depends on the seed and the task ids only.
    pub fn new(mut tasks: Vec<WorldTask>, test_fraction: f64, seed: u64) -> Self {
        let unsplit: Vec<usize> = (0..tasks.len())
            .filter(|&i| tasks[i].split.is_none())
            .collect();
        let n = unsplit.len();
        let n_test = if n >= 2 && test_fraction > 0.0 {
            ((n as f64 * test_fraction).round() as usize).clamp(1, n - 1)
        } else {
            0
        };
        let mut order = unsplit.clone();
        order
            .sort_by_cached_key(|&i| (key_hash(seed, &tasks[i].task_id), tasks[i].task_id.clone()));
        let test: std::collections::HashSet<usize> = order[..n_test].iter().copied().collect();
        for i in unsplit {
            tasks[i].split = Some(if test.contains(&i) { "test" } else { "train" }.into());
        }
        // the first of a repeated id wins, as a scan would find it
        let mut index = std::collections::HashMap::with_capacity(tasks.len());
        for (i, t) in tasks.iter().enumerate() {
            index.entry(t.task_id.clone()).or_insert(i);
        }
        TaskList {
            tasks: std::sync::Arc::new(tasks),
            index: std::sync::Arc::new(index),
        }
    }

    /// Every task in order.
    pub fn all(&self) -> &[WorldTask] {
        &self.tasks
    }

    /// The task with this id.
    pub fn get(&self, id: &str) -> Option<&WorldTask> {
        self.index.get(id).map(|&i| &self.tasks[i])
    }

    /// Task ids of a selection: `all`, a split (`train`, `test`), or comma-separated ids.
    pub fn select(&self, spec: &str) -> Result<Vec<String>> {
        let spec = spec.trim();
        if spec == "all" {
            return Ok(self.tasks.iter().map(|t| t.task_id.clone()).collect());
        }
        if spec == "train" || spec == "test" {
            return Ok(self
                .tasks
                .iter()
                .filter(|t| t.split.as_deref() == Some(spec))
                .map(|t| t.task_id.clone())
                .collect());
        }
        let mut out = Vec::new();
        for id in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if self.get(id).is_none() {
                return Err(Error::config(
                    "tasks",
                    format!("'{id}' is neither a split (train, test, all) nor a task id"),
                ));
            }
            out.push(id.to_string());
        }
        if out.is_empty() {
            return Err(Error::config("tasks", "empty task selection"));
        }
        Ok(out)
    }
}

fn key_hash(seed: u64, id: &str) -> u64 {
    id.bytes().fold(mix(seed, 1), |acc, b| mix(acc, b as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_lines_take_synonyms_and_name_bad_lines() {
        let p = Path::new("tasks.jsonl");
        let t = parse_task_lines(
            "{\"task_id\": 7, \"task_context\": \"a\"}\n\n{\"task_id\": \"x\", \"context\": \"b\", \"split\": \"test\"}\n",
            p,
        )
        .unwrap();
        assert_eq!(t[0].task_id, "7");
        assert_eq!(t[0].context, "a");
        assert_eq!(t[1].split.as_deref(), Some("test"));
        for (bad, what) in [
            ("{\"task_id\": \"a\"}", "missing key context"),
            ("{\"context\": \"a\"}", "task_id"),
            ("[1]", "expected an object"),
            ("nope", "not JSON"),
            ("{\"task_id\": \"a\", \"context\": \"b\", \"split\": \"dev\"}", "split"),
            ("{\"task_id\": \"a\", \"context\": \"b\"}\n{\"task_id\": \"a\", \"context\": \"c\"}", "line 1"),
        ] {
            let e = parse_task_lines(bad, p).unwrap_err().to_string();
            assert!(e.contains("tasks.jsonl") && e.contains(what), "{bad}: {e}");
        }
    }

    #[test]
    fn the_seeded_split_depends_on_ids_not_order() {
        let mk = |ids: &[&str]| {
            ids.iter()
                .map(|i| WorldTask {
                    task_id: i.to_string(),
                    context: "c".into(),
                    split: None,
                })
                .collect::<Vec<_>>()
        };
        let a = TaskList::new(
            mk(&["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]),
            0.3,
            5,
        );
        let b = TaskList::new(
            mk(&["j", "i", "h", "g", "f", "e", "d", "c", "b", "a"]),
            0.3,
            5,
        );
        let mut ta = a.select("test").unwrap();
        let mut tb = b.select("test").unwrap();
        ta.sort();
        tb.sort();
        assert_eq!(ta, tb);
        assert_eq!(ta.len(), 3);
        assert_eq!(a.select("train").unwrap().len(), 7);
        assert_eq!(a.select("c,a").unwrap(), vec!["c", "a"]);
        assert!(a.select("zz").is_err());
    }

    #[test]
    fn issue34_item3_tasks_are_found_by_id_through_an_index() {
        let many: Vec<WorldTask> = (0..100_000)
            .map(|i| WorldTask {
                task_id: format!("t{i}"),
                context: "c".into(),
                split: None,
            })
            .collect();
        let list = TaskList::new(many, 0.3, 1);
        assert_eq!(list.get("t99999").unwrap().task_id, "t99999");
        assert_eq!(list.get("t0").unwrap().task_id, "t0");
        assert!(list.get("t100000").is_none());
        assert_eq!(list.index.len(), list.all().len());
        let copy = list.clone();
        assert!(
            std::sync::Arc::ptr_eq(&copy.tasks, &list.tasks),
            "a clone shares the tasks"
        );
        assert_eq!(copy, list);
    }
}
