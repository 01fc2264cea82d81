//! Coverage of the human fingerprint cloud by a set of simulated dialogues (two-sided Chamfer,
//! ppol-spec §5.2) and Dice D1–D4 alignment of mean fingerprints (§3).

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::fitness::features::{Fingerprint, DIMENSIONS, N_FEATURES};
use crate::fitness::geometry::{euclid, mean_pairwise_distance, standardize, standardizer};
use crate::fitness::reference::HumanReference;
use crate::Result;

/// Humans per parallel chunk of a Chamfer computation.
const CHUNK: usize = 4096;

/// How the human cloud is prepared.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CoverageOptions {
    /// Standardise by the cloud's column mean and population std (σ < 1e-9 → 1). Default true.
    pub standardize: bool,
    /// Replace the cloud by K k-means centroids when 0 < K < |H| (0 = off).
    pub n_clusters: usize,
    /// Seed for k-means.
    pub seed: u64,
}

impl Default for CoverageOptions {
    fn default() -> Self {
        CoverageOptions {
            standardize: true,
            n_clusters: 0,
            seed: 0,
        }
    }
}

/// The prepared human cloud H (transformed), its transform and reference distance.
#[derive(Debug, Clone)]
pub struct HumanCloud {
    points: Vec<[f64; N_FEATURES]>,
    mu: [f64; N_FEATURES],
    sigma: [f64; N_FEATURES],
    /// Mean pairwise distance within H (1.0 when |H| < 2 or the mean is ≤ 1e-9).
    pub d_ref: f64,
    /// Number of human dialogues before clustering.
    pub n_humans: usize,
    /// The options used.
    pub options: CoverageOptions,
}

/// One set's Chamfer result.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Chamfer {
    /// max(0, 1 − min(1, err / (2·d_ref))).
    pub coverage: f64,
    /// mean over humans of the distance to the nearest simulated point.
    pub cover_humans: f64,
    /// mean over simulated points of the distance to the nearest human.
    pub stay_on_manifold: f64,
    /// Number of simulated points.
    pub n: usize,
}

impl HumanCloud {
    /// Prepare the cloud from a reference's rows with at least two messages. An unclustered
    /// cloud takes its reference distance from the reference (computed once when it was
    /// built) instead of the O(n²) computation.
    pub fn new(reference: &HumanReference, options: CoverageOptions) -> Result<Self> {
        let rows: Vec<[f64; N_FEATURES]> = reference.cloud().iter().map(|f| f.0).collect();
        let stored = reference.d_ref.map(|d| {
            if options.standardize {
                d.standardized
            } else {
                d.raw
            }
        });
        Self::prepare(rows, options, stored)
    }

    /// Prepare the cloud from raw human points.
    pub fn from_points(rows: Vec<[f64; N_FEATURES]>, options: CoverageOptions) -> Result<Self> {
        Self::prepare(rows, options, None)
    }

    fn prepare(
        rows: Vec<[f64; N_FEATURES]>,
        options: CoverageOptions,
        stored_d_ref: Option<f64>,
    ) -> Result<Self> {
        let n_humans = rows.len();
        let mut mu = [0.0; N_FEATURES];
        let mut sigma = [1.0; N_FEATURES];
        let mut points = rows;
        if options.standardize && !points.is_empty() {
            (mu, sigma) = standardizer(&points);
            standardize(&mut points, &mu, &sigma);
        }
        let clustered = options.n_clusters > 0 && options.n_clusters < points.len();
        if clustered {
            let vecs: Vec<Vec<f64>> = points.iter().map(|p| p.to_vec()).collect();
            let centroids =
                crate::fitness::kmeans::kmeans(&vecs, options.n_clusters, 10, options.seed)?;
            points = centroids
                .into_iter()
                .map(|c| {
                    let mut a = [0.0; N_FEATURES];
                    a.copy_from_slice(&c);
                    a
                })
                .collect();
        }
        let d_ref = match stored_d_ref {
            Some(d) if !clustered => d,
            _ => mean_pairwise_distance(&points),
        };
        Ok(HumanCloud {
            points,
            mu,
            sigma,
            d_ref,
            n_humans,
            options,
        })
    }

    /// Number of points in H (centroids when clustered).
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether H is empty.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    fn transform(&self, f: &Fingerprint) -> [f64; N_FEATURES] {
        let mut p = f.0;
        if self.options.standardize {
            for ((x, mu), sigma) in p.iter_mut().zip(&self.mu).zip(&self.sigma) {
                *x = (*x - mu) / sigma;
            }
        }
        p
    }

    /// Two-sided Chamfer coverage of H by one set of simulated fingerprints.
    pub fn chamfer(&self, set: &[Fingerprint]) -> Chamfer {
        let n = set.len();
        if n == 0 || self.points.is_empty() || self.d_ref <= 0.0 {
            return Chamfer {
                coverage: 0.0,
                cover_humans: f64::NAN,
                stay_on_manifold: f64::NAN,
                n,
            };
        }
        let ps: Vec<[f64; N_FEATURES]> = set.iter().map(|f| self.transform(f)).collect();
        // Humans in fixed chunks (in parallel for large clouds), combined in chunk order: the
        // result does not depend on the number of threads, and a cloud of up to one chunk is
        // summed exactly as a plain loop would.
        let chunks: Vec<(f64, Vec<f64>)> = self
            .points
            .par_chunks(CHUNK)
            .map(|humans| {
                let mut min_per_p = vec![f64::INFINITY; n];
                let mut sum_h = 0.0;
                for h in humans {
                    let mut best = f64::INFINITY;
                    for (k, p) in ps.iter().enumerate() {
                        let d = euclid(h, p);
                        best = best.min(d);
                        if d < min_per_p[k] {
                            min_per_p[k] = d;
                        }
                    }
                    sum_h += best;
                }
                (sum_h, min_per_p)
            })
            .collect();
        let mut min_per_p = vec![f64::INFINITY; n];
        let mut sum_h = 0.0;
        for (s, m) in chunks {
            sum_h += s;
            for (a, b) in min_per_p.iter_mut().zip(m) {
                *a = a.min(b);
            }
        }
        let cover_humans = sum_h / self.points.len() as f64;
        let stay_on_manifold = min_per_p.iter().sum::<f64>() / n as f64;
        let err = cover_humans + stay_on_manifold;
        let coverage = (1.0 - (err / (2.0 * self.d_ref)).min(1.0)).max(0.0);
        Chamfer {
            coverage,
            cover_humans,
            stay_on_manifold,
            n,
        }
    }

    /// Chamfer per group (task), groups in order of first appearance, and their unweighted mean.
    pub fn chamfer_by_group(&self, points: &[(String, Fingerprint)]) -> GroupedCoverage {
        let mut order: Vec<&str> = Vec::new();
        let mut sets: std::collections::HashMap<&str, Vec<Fingerprint>> = Default::default();
        for (g, f) in points {
            sets.entry(g.as_str())
                .or_insert_with(|| {
                    order.push(g.as_str());
                    Vec::new()
                })
                .push(*f);
        }
        let groups: Vec<(String, Chamfer)> = order
            .iter()
            .map(|g| (g.to_string(), self.chamfer(&sets[g])))
            .collect();
        let mean = if groups.is_empty() {
            0.0
        } else {
            groups.iter().map(|(_, c)| c.coverage).sum::<f64>() / groups.len() as f64
        };
        GroupedCoverage { mean, groups }
    }
}

/// Coverage per group and the mean over groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupedCoverage {
    /// Unweighted mean of the groups' coverage (the reference's `intra_set_diversity`).
    pub mean: f64,
    /// Each group's result, in order of first appearance.
    pub groups: Vec<(String, Chamfer)>,
}

/// Dice alignment per dimension and overall, on [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[allow(non_snake_case)]
pub struct Dice {
    /// Communication style.
    pub D1: f64,
    /// Information disclosure.
    pub D2: f64,
    /// Clarification.
    pub D3: f64,
    /// Error reaction.
    pub D4: f64,
    /// Unweighted mean of the four.
    pub overall: f64,
}

/// `2·min(|m|,|h|) / (|m|+|h|)`, 1 when both are ~0.
pub fn dice_coefficient(m: f64, h: f64) -> f64 {
    let (m, h) = (m.abs(), h.abs());
    if m + h < 1e-12 {
        1.0
    } else {
        2.0 * m.min(h) / (m + h)
    }
}

/// Aggregate-first Dice: average the simulated fingerprints, then compare with the human mean.
/// An empty set gives all zeros.
pub fn dice(human_mean: &Fingerprint, simulated: &[Fingerprint]) -> Dice {
    if simulated.is_empty() {
        return Dice::default();
    }
    let n = simulated.len() as f64;
    let mut agg = [0.0; N_FEATURES];
    for f in simulated {
        for (a, x) in agg.iter_mut().zip(f.0.iter()) {
            *a += x;
        }
    }
    agg.iter_mut().for_each(|v| *v /= n);
    let dim = |r: &std::ops::Range<usize>| {
        r.clone()
            .map(|j| dice_coefficient(agg[j], human_mean.0[j]))
            .sum::<f64>()
            / r.len() as f64
    };
    let d: Vec<f64> = DIMENSIONS.iter().map(|(_, r)| dim(r)).collect();
    Dice {
        D1: d[0],
        D2: d[1],
        D3: d[2],
        D4: d[3],
        overall: d.iter().sum::<f64>() / 4.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(x: f64, y: f64) -> [f64; N_FEATURES] {
        let mut a = [0.0; N_FEATURES];
        a[0] = x;
        a[1] = y;
        a
    }

    #[test]
    fn identical_sets_cover_fully_and_far_sets_saturate() {
        let opts = CoverageOptions {
            standardize: false,
            ..Default::default()
        };
        let cloud = HumanCloud::from_points(vec![pt(0.0, 0.0), pt(3.0, 4.0)], opts).unwrap();
        assert_eq!(cloud.d_ref, 5.0);
        let same = [Fingerprint(pt(0.0, 0.0)), Fingerprint(pt(3.0, 4.0))];
        assert_eq!(cloud.chamfer(&same).coverage, 1.0);
        // one point at the first human: cover = (0 + 5)/2, stay = 0 → err 2.5 → 1 - 2.5/10
        let c = cloud.chamfer(&[Fingerprint(pt(0.0, 0.0))]);
        assert_eq!(
            (c.cover_humans, c.stay_on_manifold, c.coverage),
            (2.5, 0.0, 0.75)
        );
        assert_eq!(cloud.chamfer(&[Fingerprint(pt(100.0, 0.0))]).coverage, 0.0);
        assert_eq!(cloud.chamfer(&[]).coverage, 0.0);
    }

    #[test]
    fn dice_edge_cases() {
        assert_eq!(dice_coefficient(0.0, 0.0), 1.0);
        assert_eq!(dice_coefficient(0.0, 0.01), 0.0);
        assert_eq!(dice_coefficient(1.0, 3.0), 0.5);
        assert_eq!(dice(&Fingerprint::default(), &[]), Dice::default());
        let d = dice(&Fingerprint::default(), &[Fingerprint::default()]);
        assert_eq!(d.overall, 1.0);
    }
}
