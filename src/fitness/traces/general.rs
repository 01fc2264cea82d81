//! The general reader: the whole text as one `serde_json::Value`. It reads what the typed pass
//! declines (a repeated key: the last value wins) and locates every error.

use std::path::Path;

use serde_json::Value;

use super::build::{dialogue_from_object, kind, tau_usi_dialogue};
use super::stem;
use crate::dialogue::Dialogue;
use crate::{Error, Result};

pub(super) fn parse_json_array(v: Value, path: &Path) -> Result<Vec<Dialogue>> {
    let Value::Array(items) = v else {
        unreachable!("checked by detect")
    };
    let stem = stem(path);
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            dialogue_from_value(item, path, &format!("$[{i}]"), &format!("{stem}[{i}]"))
        })
        .collect()
}

/// Build a dialogue from one JSON value (JSONL line, array item, single object).
pub(super) fn dialogue_from_value(
    v: Value,
    path: &Path,
    loc: &str,
    default_id: &str,
) -> Result<Dialogue> {
    let Value::Object(obj) = v else {
        return Err(Error::parse(
            path,
            loc,
            format!("expected a dialogue object, found {}", kind(&v)),
        ));
    };
    dialogue_from_object(obj, None, path, loc, default_id)
}

pub(super) fn parse_tau_usi(v: Value, path: &Path) -> Result<Vec<Dialogue>> {
    let Value::Object(map) = v else {
        unreachable!("checked by detect")
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, entry) in map {
        let Value::Object(obj) = entry else {
            return Err(Error::parse(
                path,
                format!("$[\"{key}\"]"),
                "expected an object",
            ));
        };
        out.push(tau_usi_dialogue(key, obj, None, path)?);
    }
    Ok(out)
}
