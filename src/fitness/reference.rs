//! The human reference: every human dialogue's fingerprint plus per-feature mean and population
//! std, saved as JSON with the feature-set version.
//!
//! As in the reference package, two filters coexist: the mean/std use every dialogue with at
//! least one message, while the point cloud used by the discriminator and by Chamfer coverage
//! keeps only dialogues with at least two messages (of any role). Both counts are stored.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::dialogue::Dialogue;
use crate::fitness::features::{
    fingerprint_many, FeatureSet, Fingerprint, FEATURE_NAMES, N_FEATURES,
};
use crate::{Error, Result};

/// Current file format version.
pub const FORMAT_VERSION: u32 = 1;

/// One human dialogue's fingerprint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReferenceRow {
    /// Dialogue id.
    pub id: String,
    /// Task id, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Domain, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Number of messages of any role.
    pub n_messages: usize,
    /// Feature values in `feature_names` order.
    pub features: Vec<f64>,
}

/// Human fingerprints and their distribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HumanReference {
    /// File format version.
    pub format_version: u32,
    /// Feature set the fingerprints were computed with.
    pub feature_set: FeatureSet,
    /// Column names.
    pub feature_names: Vec<String>,
    /// Per-feature mean over dialogues with at least one message.
    pub mean: Vec<f64>,
    /// Per-feature population std (ddof 0) over the same dialogues.
    pub std: Vec<f64>,
    /// Number of dialogues in the mean/std.
    pub n_dialogues: usize,
    /// Where the traces came from.
    #[serde(default)]
    pub source: Vec<String>,
    /// Every individual fingerprint (including those outside the cloud).
    pub fingerprints: Vec<ReferenceRow>,
    /// The cloud's reference distances, computed once when the reference is built (O(n²) in
    /// the cloud size) and saved with it, so scoring against a large cloud does not repeat
    /// them. Absent in files from older versions (then computed when needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_ref: Option<CloudDistances>,
}

/// Mean pairwise distance of the (unclustered) cloud, raw and standardised.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CloudDistances {
    /// In the raw feature space.
    pub raw: f64,
    /// After standardising by the cloud's own mean and std.
    pub standardized: f64,
}

impl CloudDistances {
    /// Compute both for a cloud of points.
    pub fn of(cloud: &[[f64; N_FEATURES]]) -> Self {
        use crate::fitness::geometry::{mean_pairwise_distance, standardize, standardizer};
        let raw = mean_pairwise_distance(cloud);
        let (mu, sigma) = standardizer(cloud);
        let mut std_points = cloud.to_vec();
        standardize(&mut std_points, &mu, &sigma);
        CloudDistances {
            raw,
            standardized: mean_pairwise_distance(&std_points),
        }
    }
}

impl HumanReference {
    /// Fingerprint human dialogues and summarise them.
    pub fn build(dialogues: &[Dialogue], set: FeatureSet, source: Vec<String>) -> Result<Self> {
        let fps = fingerprint_many(dialogues, set);
        let rows: Vec<ReferenceRow> = dialogues
            .iter()
            .zip(&fps)
            .map(|(d, f)| ReferenceRow {
                id: d.id.clone(),
                task_id: d.task_id.clone(),
                domain: d.domain.clone(),
                n_messages: d.turns.len(),
                features: f.0.to_vec(),
            })
            .collect();
        let in_mean: Vec<&[f64]> = rows
            .iter()
            .filter(|r| r.n_messages >= 1)
            .map(|r| r.features.as_slice())
            .collect();
        if in_mean.is_empty() {
            return Err(Error::Insufficient(
                "no human dialogue has any message: cannot build a reference".into(),
            ));
        }
        let (mean, std) = mean_std(&in_mean);
        let mut r = HumanReference {
            format_version: FORMAT_VERSION,
            feature_set: set,
            feature_names: FEATURE_NAMES.iter().map(|s| s.to_string()).collect(),
            mean,
            std,
            n_dialogues: in_mean.len(),
            source,
            fingerprints: rows,
            d_ref: None,
        };
        let cloud: Vec<[f64; N_FEATURES]> = r.cloud().iter().map(|f| f.0).collect();
        r.d_ref = Some(CloudDistances::of(&cloud));
        Ok(r)
    }

    /// The cloud H: fingerprints of dialogues with at least two messages.
    pub fn cloud(&self) -> Vec<Fingerprint> {
        self.cloud_rows().map(|r| to_fp(&r.features)).collect()
    }

    /// The rows in the cloud.
    pub fn cloud_rows(&self) -> impl Iterator<Item = &ReferenceRow> {
        self.fingerprints.iter().filter(|r| r.n_messages >= 2)
    }

    /// The mean as a fingerprint.
    pub fn mean_fingerprint(&self) -> Fingerprint {
        to_fp(&self.mean)
    }

    /// Save as pretty JSON (atomic write).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).expect("serialisable");
        crate::io::write_atomic(path, text.as_bytes())
    }

    /// Load and validate a saved reference.
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::io::read_to_string(path)?;
        Self::from_json(&text, path)
    }

    /// Parse a saved reference; `path` names the source in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Self> {
        let r: HumanReference = serde_json::from_str(text).map_err(|e| {
            Error::parse(
                path,
                format!("line {} column {}", e.line(), e.column()),
                format!("not a ppol human reference: {e}"),
            )
        })?;
        if r.format_version != FORMAT_VERSION {
            return Err(Error::parse(
                path,
                "format_version",
                format!(
                    "unsupported version {} (expected {FORMAT_VERSION})",
                    r.format_version
                ),
            ));
        }
        if r.feature_names.len() != N_FEATURES
            || r.feature_names
                .iter()
                .zip(FEATURE_NAMES)
                .any(|(a, b)| a != b)
        {
            return Err(Error::parse(
                path,
                "feature_names",
                "columns differ from ppol's 19 features",
            ));
        }
        for (i, row) in r.fingerprints.iter().enumerate() {
            if row.features.len() != N_FEATURES {
                return Err(Error::parse(
                    path,
                    format!("fingerprints[{i}].features"),
                    format!("expected {N_FEATURES} values, found {}", row.features.len()),
                ));
            }
        }
        Ok(r)
    }

    /// Whether a file looks like a saved reference (rather than traces).
    pub fn sniff(text: &str) -> bool {
        let head: String = text.chars().take(4096).collect();
        head.trim_start().starts_with('{')
            && head.contains("\"format_version\"")
            && head.contains("\"feature_set\"")
            && head.contains("\"fingerprints\"")
    }
}

fn to_fp(v: &[f64]) -> Fingerprint {
    let mut a = [0.0; N_FEATURES];
    a.copy_from_slice(&v[..N_FEATURES]);
    Fingerprint(a)
}

pub use crate::fitness::geometry::mean_std;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialogue::{Role, Turn};

    #[test]
    fn mean_uses_all_dialogues_cloud_needs_two_messages() {
        let a = Dialogue::new("a", vec![Turn::new(Role::User, "one two")]);
        let b = Dialogue::new(
            "b",
            vec![
                Turn::new(Role::User, "one two three four"),
                Turn::new(Role::Assistant, "ok"),
            ],
        );
        let empty = Dialogue::new("c", vec![]);
        let r = HumanReference::build(&[a, b, empty], FeatureSet::Ppol011, vec![]).unwrap();
        assert_eq!(r.n_dialogues, 2);
        assert_eq!(r.mean[0], 3.0);
        assert_eq!(r.std[0], 1.0);
        assert_eq!(r.cloud().len(), 1);
        let text = serde_json::to_string(&r).unwrap();
        assert!(HumanReference::sniff(&text));
        let back = HumanReference::from_json(&text, Path::new("r.json")).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn load_errors_name_the_file() {
        let e = HumanReference::from_json("{\"x\":1}", Path::new("ref.json")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("ref.json: line 1 column 7: not a ppol human reference"),
            "{e}"
        );
    }
}
