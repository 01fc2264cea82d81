//! K-means clustering (k-means++ initialisation, Lloyd iterations), used by the coverage
//! metric to replace a large human cloud by its mode centroids. Follows scikit-learn's
//! `KMeans(n_clusters=k, n_init, random_state)`: greedy k-means++ with `2 + ln k` local
//! trials, at most 300 iterations, tolerance `1e-4 ×` the mean per-feature variance on the
//! total squared centre shift, empty clusters moved to the points farthest from their centre,
//! and the best of `n_init` runs by inertia. Deterministic given the seed (ChaCha8).

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Error, Result};

/// Maximum Lloyd iterations per run (sklearn's `max_iter`).
pub const MAX_ITER: usize = 300;
/// Relative tolerance (sklearn's `tol`), scaled by the mean per-feature variance.
pub const TOL: f64 = 1e-4;

/// Cluster `points` into `k` centroids; returns the centroids of the best of `n_init` runs
/// (lowest inertia, the first on ties).
///
/// If `k >= points.len()`, every point is its own cluster: the points are returned as they
/// are, in order (so fewer than `k` centroids when `k > n`).
///
/// # Errors
/// [`Error::Config`] if `k == 0` or `n_init == 0`; [`Error::Insufficient`] if `points` is
/// empty; [`Error::Parse`] (path `<k-means points>`) naming the row for ragged rows,
/// zero-length rows or non-finite values.
pub fn kmeans(points: &[Vec<f64>], k: usize, n_init: usize, seed: u64) -> Result<Vec<Vec<f64>>> {
    if k == 0 {
        return Err(Error::config(
            "k",
            "the number of clusters must be at least 1",
        ));
    }
    if n_init == 0 {
        return Err(Error::config("n_init", "must be at least 1"));
    }
    if points.is_empty() {
        return Err(Error::Insufficient("k-means of zero points".into()));
    }
    let dim = points[0].len();
    let origin = "<k-means points>";
    for (i, p) in points.iter().enumerate() {
        if p.len() != dim || dim == 0 {
            return Err(Error::parse(
                origin,
                format!("row {i}"),
                format!(
                    "expected {} values (as row 0, at least 1), found {}",
                    dim,
                    p.len()
                ),
            ));
        }
        if let Some(j) = p.iter().position(|v| !v.is_finite()) {
            return Err(Error::parse(
                origin,
                format!("row {i}, column {j}"),
                format!("non-finite value {}", p[j]),
            ));
        }
    }
    if k >= points.len() {
        return Ok(points.to_vec());
    }

    let tol = TOL * mean_variance(points);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut best: Option<(f64, Vec<Vec<f64>>)> = None;
    for _ in 0..n_init {
        let init = kmeans_plus_plus(points, k, &mut rng);
        let (centres, inertia) = lloyd(points, init, tol);
        if best.as_ref().is_none_or(|(b, _)| inertia < *b) {
            best = Some((inertia, centres));
        }
    }
    Ok(best.map(|(_, c)| c).unwrap_or_default())
}

/// Sum of squared distances from each point to its nearest centre.
pub fn inertia(points: &[Vec<f64>], centres: &[Vec<f64>]) -> f64 {
    points.iter().map(|p| nearest(p, centres).1).sum()
}

fn sq_dist(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Index of the nearest centre (the first on ties) and the squared distance to it.
fn nearest(p: &[f64], centres: &[Vec<f64>]) -> (usize, f64) {
    let mut best = (0, f64::INFINITY);
    for (j, c) in centres.iter().enumerate() {
        let d = sq_dist(p, c);
        if d < best.1 {
            best = (j, d);
        }
    }
    best
}

fn mean_variance(points: &[Vec<f64>]) -> f64 {
    let n = points.len() as f64;
    let dim = points[0].len();
    let mut total = 0.0;
    for j in 0..dim {
        let mean = points.iter().map(|p| p[j]).sum::<f64>() / n;
        total += points.iter().map(|p| (p[j] - mean).powi(2)).sum::<f64>() / n;
    }
    total / dim as f64
}

/// Greedy k-means++ (sklearn's `_kmeans_plusplus`): the first centre uniformly at random,
/// then each next one the best (lowest resulting potential) of `2 + ln k` candidates drawn
/// with probability proportional to the squared distance to the nearest chosen centre.
fn kmeans_plus_plus(points: &[Vec<f64>], k: usize, rng: &mut ChaCha8Rng) -> Vec<Vec<f64>> {
    let n = points.len();
    let trials = 2 + (k as f64).ln() as usize;
    let first = rng.random_range(0..n);
    let mut centres = vec![points[first].clone()];
    let mut closest: Vec<f64> = points.iter().map(|p| sq_dist(p, &points[first])).collect();
    let mut potential: f64 = closest.iter().sum();
    while centres.len() < k {
        let mut cumsum = Vec::with_capacity(n);
        let mut acc = 0.0;
        for d in &closest {
            acc += d;
            cumsum.push(acc);
        }
        let mut best: Option<(f64, usize, Vec<f64>)> = None;
        for _ in 0..trials {
            let r = rng.random::<f64>() * potential;
            // First index whose cumulative sum reaches r (numpy searchsorted, side="left").
            let idx = cumsum.partition_point(|&c| c < r).min(n - 1);
            let cand: Vec<f64> = points
                .iter()
                .zip(&closest)
                .map(|(p, &d)| d.min(sq_dist(p, &points[idx])))
                .collect();
            let pot: f64 = cand.iter().sum();
            if best.as_ref().is_none_or(|(b, _, _)| pot < *b) {
                best = Some((pot, idx, cand));
            }
        }
        let (pot, idx, cand) = best.expect("at least two local trials");
        centres.push(points[idx].clone());
        closest = cand;
        potential = pot;
    }
    centres
}

/// Lloyd iterations from `centres`; returns the final centres and their inertia.
fn lloyd(points: &[Vec<f64>], mut centres: Vec<Vec<f64>>, tol: f64) -> (Vec<Vec<f64>>, f64) {
    let k = centres.len();
    let dim = points[0].len();
    let mut labels: Vec<usize> = vec![usize::MAX; points.len()];
    for _ in 0..MAX_ITER {
        let mut changed = false;
        let mut dists = Vec::with_capacity(points.len());
        for (i, p) in points.iter().enumerate() {
            let (j, d) = nearest(p, &centres);
            changed |= labels[i] != j;
            labels[i] = j;
            dists.push(d);
        }
        let mut sums = vec![vec![0.0; dim]; k];
        let mut counts = vec![0usize; k];
        for (p, &j) in points.iter().zip(&labels) {
            counts[j] += 1;
            for (s, v) in sums[j].iter_mut().zip(p) {
                *s += v;
            }
        }
        // Empty clusters take the points farthest from their centres (sklearn's relocation).
        let empty: Vec<usize> = (0..k).filter(|&j| counts[j] == 0).collect();
        if !empty.is_empty() {
            let mut far: Vec<usize> = (0..points.len()).collect();
            far.sort_by(|&a, &b| dists[b].total_cmp(&dists[a]).then(a.cmp(&b)));
            for (&j, &i) in empty.iter().zip(&far) {
                let old = labels[i];
                if counts[old] > 1 {
                    counts[old] -= 1;
                    for (s, v) in sums[old].iter_mut().zip(&points[i]) {
                        *s -= v;
                    }
                }
                sums[j] = points[i].clone();
                counts[j] = 1;
            }
        }
        let mut shift = 0.0;
        for j in 0..k {
            let new: Vec<f64> = sums[j].iter().map(|s| s / counts[j] as f64).collect();
            shift += sq_dist(&new, &centres[j]);
            centres[j] = new;
        }
        if !changed || shift <= tol {
            break;
        }
    }
    let inertia = inertia(points, &centres);
    (centres, inertia)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    fn blobs(seed: u64) -> (Vec<Vec<f64>>, Vec<[f64; 3]>) {
        let centres = vec![
            [0.0, 0.0, 0.0],
            [10.0, 0.0, 5.0],
            [0.0, 10.0, -5.0],
            [10.0, 10.0, 10.0],
        ];
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut pts = Vec::new();
        for c in &centres {
            for _ in 0..50 {
                pts.push(c.iter().map(|v| v + rng.random::<f64>() - 0.5).collect());
            }
        }
        (pts, centres)
    }

    #[test]
    fn recovers_well_separated_clusters() {
        let (pts, truth) = blobs(1);
        let found = kmeans(&pts, 4, 10, 0).unwrap();
        assert_eq!(found.len(), 4);
        for t in &truth {
            let d = found
                .iter()
                .map(|c| sq_dist(c, t))
                .fold(f64::INFINITY, f64::min);
            assert!(d < 0.1, "no centroid near {t:?}: {found:?}");
        }
        // Each true centre has its own centroid: inertia is that of the noise only.
        assert!(inertia(&pts, &found) < 200.0 * 3.0 / 12.0 * 1.5);
    }

    #[test]
    fn deterministic_given_seed() {
        let (pts, _) = blobs(2);
        let a = kmeans(&pts, 6, 3, 7).unwrap();
        let b = kmeans(&pts, 6, 3, 7).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 6);
    }

    #[test]
    fn more_inits_never_worse() {
        let (pts, _) = blobs(3);
        let one = inertia(&pts, &kmeans(&pts, 7, 1, 5).unwrap());
        let ten = inertia(&pts, &kmeans(&pts, 7, 10, 5).unwrap());
        assert!(ten <= one + 1e-9);
    }

    #[test]
    fn duplicates_and_edge_cases() {
        // Fewer distinct points than k: empty clusters are relocated, no NaN.
        let pts = vec![vec![1.0, 1.0]; 5]
            .into_iter()
            .chain(vec![vec![2.0, 2.0]; 5])
            .collect::<Vec<_>>();
        let c = kmeans(&pts, 3, 2, 0).unwrap();
        assert_eq!(c.len(), 3);
        assert!(c.iter().flatten().all(|v| v.is_finite()));
        assert_eq!(inertia(&pts, &c), 0.0);
        // k >= n: identity.
        let small = vec![vec![0.0], vec![3.0]];
        assert_eq!(kmeans(&small, 2, 1, 0).unwrap(), small);
        assert_eq!(kmeans(&small, 5, 1, 0).unwrap(), small);
        // k = 1: the mean.
        let m = kmeans(&[vec![0.0], vec![1.0], vec![5.0]], 1, 1, 0).unwrap();
        assert_eq!(m, vec![vec![2.0]]);
        assert!(matches!(kmeans(&small, 0, 1, 0), Err(Error::Config { .. })));
        assert!(matches!(kmeans(&small, 1, 0, 0), Err(Error::Config { .. })));
        assert!(matches!(kmeans(&[], 1, 1, 0), Err(Error::Insufficient(_))));
        let e = kmeans(&[vec![0.0], vec![f64::NAN], vec![1.0]], 2, 1, 0).unwrap_err();
        assert!(e.to_string().contains("row 1"), "{e}");
        let e = kmeans(&[vec![0.0], vec![1.0, 2.0], vec![1.0]], 2, 1, 0).unwrap_err();
        assert!(e.to_string().contains("row 1"), "{e}");
    }
}
