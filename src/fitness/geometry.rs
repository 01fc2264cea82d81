//! The geometry of the fingerprint space shared by the human reference and coverage: column
//! mean and population std, the standardising transform, Euclidean distance, and the mean
//! pairwise distance of a cloud (the Chamfer reference distance `d_ref`).

use rayon::prelude::*;

use crate::fitness::features::N_FEATURES;

/// Column mean and population std (ddof 0) of equally long rows.
pub fn mean_std(rows: &[&[f64]]) -> (Vec<f64>, Vec<f64>) {
    let d = rows.first().map_or(0, |r| r.len());
    let n = rows.len() as f64;
    let mut mean = vec![0.0; d];
    for r in rows {
        for (m, x) in mean.iter_mut().zip(r.iter()) {
            *m += x;
        }
    }
    mean.iter_mut().for_each(|m| *m /= n);
    let mut var = vec![0.0; d];
    for r in rows {
        for ((v, x), m) in var.iter_mut().zip(r.iter()).zip(&mean) {
            *v += (x - m) * (x - m);
        }
    }
    let std = var.into_iter().map(|v| (v / n).sqrt()).collect();
    (mean, std)
}

/// The standardising transform of a cloud: its column mean and population std, with
/// σ < 1e-9 replaced by 1 (ppol-spec §5.2).
pub fn standardizer(points: &[[f64; N_FEATURES]]) -> ([f64; N_FEATURES], [f64; N_FEATURES]) {
    let mut mu = [0.0; N_FEATURES];
    let mut sigma = [1.0; N_FEATURES];
    if points.is_empty() {
        return (mu, sigma);
    }
    let refs: Vec<&[f64]> = points.iter().map(|r| r.as_slice()).collect();
    let (m, s) = mean_std(&refs);
    for j in 0..N_FEATURES {
        mu[j] = m[j];
        sigma[j] = if s[j] < 1e-9 { 1.0 } else { s[j] };
    }
    (mu, sigma)
}

/// Apply `(x − μ) / σ` to every point.
pub fn standardize(
    points: &mut [[f64; N_FEATURES]],
    mu: &[f64; N_FEATURES],
    sigma: &[f64; N_FEATURES],
) {
    for p in points {
        for ((x, m), s) in p.iter_mut().zip(mu).zip(sigma) {
            *x = (*x - m) / s;
        }
    }
}

/// Euclidean distance.
pub fn euclid(a: &[f64; N_FEATURES], b: &[f64; N_FEATURES]) -> f64 {
    let mut s = 0.0;
    for j in 0..N_FEATURES {
        let d = a[j] - b[j];
        s += d * d;
    }
    s.sqrt()
}

/// Mean Euclidean distance over all unordered pairs (scipy's `pdist(...).mean()`), 1.0 when
/// there are fewer than two points or the mean is ≤ 1e-9. O(n²): rows are summed in parallel,
/// each row's sum in order, and the row sums in row order, so the result does not depend on
/// the number of threads.
pub fn mean_pairwise_distance(points: &[[f64; N_FEATURES]]) -> f64 {
    let n = points.len();
    if n < 2 {
        return 1.0;
    }
    let row_sums: Vec<f64> = (0..n)
        .into_par_iter()
        .with_min_len(64)
        .map(|i| {
            let a = &points[i];
            points[i + 1..].iter().map(|b| euclid(a, b)).sum::<f64>()
        })
        .collect();
    let sum: f64 = row_sums.iter().sum();
    let mean = sum / (n as f64 * (n as f64 - 1.0) / 2.0);
    if mean <= 1e-9 {
        1.0
    } else {
        mean
    }
}
