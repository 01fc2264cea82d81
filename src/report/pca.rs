//! A two-component PCA for the fingerprint map, fitted on the human fingerprints only.
//!
//! Columns are standardised with the human reference's mean and std (a zero std leaves the
//! column unscaled), the covariance of the standardised human rows is formed, and its two
//! leading eigenvectors are found by power iteration with deflation. Each component's sign is
//! fixed so that its largest-magnitude coefficient is positive, so the map is deterministic.

/// A fitted projection onto the first two principal components.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    /// Column centres (the human mean).
    pub mean: Vec<f64>,
    /// Column scales (the human std, 1 where it is ~0).
    pub scale: Vec<f64>,
    /// Mean of the standardised fitting rows (≈0 when `mean` is their own mean).
    pub centre: Vec<f64>,
    /// The two unit-length components.
    pub components: [Vec<f64>; 2],
    /// Share of the total variance of the standardised rows explained by each component.
    pub explained: [f64; 2],
}

impl Projection {
    /// Fit on `rows` (the human fingerprints) standardised by `mean`/`std`. `None` when there
    /// are fewer than two rows, the dimensions disagree, or the rows have no variance.
    pub fn fit(rows: &[&[f64]], mean: &[f64], std: &[f64]) -> Option<Projection> {
        let d = mean.len();
        if rows.len() < 2 || d == 0 || std.len() != d || rows.iter().any(|r| r.len() != d) {
            return None;
        }
        let scale: Vec<f64> = std
            .iter()
            .map(|s| if s.is_finite() && *s > 1e-12 { *s } else { 1.0 })
            .collect();
        let z: Vec<Vec<f64>> = rows
            .iter()
            .map(|r| (0..d).map(|j| (r[j] - mean[j]) / scale[j]).collect())
            .collect();
        let n = z.len() as f64;
        let centre: Vec<f64> = (0..d)
            .map(|j| z.iter().map(|r| r[j]).sum::<f64>() / n)
            .collect();
        let mut cov = vec![vec![0.0; d]; d];
        for r in &z {
            let dev: Vec<f64> = r.iter().zip(&centre).map(|(x, c)| x - c).collect();
            for (row, da) in cov.iter_mut().zip(&dev) {
                for (cell, db) in row.iter_mut().zip(&dev) {
                    *cell += da * db;
                }
            }
        }
        cov.iter_mut().flatten().for_each(|c| *c /= n);
        let trace: f64 = (0..d).map(|j| cov[j][j]).sum();
        if !(trace.is_finite() && trace > 1e-12) {
            return None;
        }
        let (v1, l1) = power_iteration(&cov);
        deflate(&mut cov, &v1, l1);
        let (v2, l2) = power_iteration(&cov);
        Some(Projection {
            mean: mean.to_vec(),
            scale,
            centre,
            components: [v1, v2],
            explained: [(l1 / trace).max(0.0), (l2 / trace).max(0.0)],
        })
    }

    /// Coordinates of one row on the two components.
    pub fn project(&self, row: &[f64]) -> (f64, f64) {
        let z = |j: usize| (row[j] - self.mean[j]) / self.scale[j] - self.centre[j];
        let dot = |c: &[f64]| (0..c.len()).map(|j| c[j] * z(j)).sum::<f64>();
        (dot(&self.components[0]), dot(&self.components[1]))
    }
}

/// Leading eigenvector (unit length, deterministic sign) and eigenvalue of a symmetric PSD matrix.
fn power_iteration(m: &[Vec<f64>]) -> (Vec<f64>, f64) {
    let d = m.len();
    // a fixed, generic start vector (not orthogonal to any axis-aligned eigenvector)
    let mut v: Vec<f64> = (0..d).map(|j| 1.0 / (1.0 + j as f64).sqrt()).collect();
    normalise(&mut v);
    let mut lambda = 0.0;
    for _ in 0..5000 {
        let mut w = mat_vec(m, &v);
        let norm = normalise(&mut w);
        if norm < 1e-300 {
            // the matrix is zero on this subspace: any unit vector will do
            lambda = 0.0;
            break;
        }
        let diff: f64 = w.iter().zip(&v).map(|(a, b)| (a - b).abs()).sum();
        v = w;
        lambda = norm;
        if diff < 1e-13 {
            break;
        }
    }
    // Rayleigh quotient for the eigenvalue
    let mv = mat_vec(m, &v);
    let rq: f64 = v.iter().zip(&mv).map(|(a, b)| a * b).sum();
    if rq.is_finite() {
        lambda = rq;
    }
    fix_sign(&mut v);
    (v, lambda)
}

fn deflate(m: &mut [Vec<f64>], v: &[f64], lambda: f64) {
    for (row, va) in m.iter_mut().zip(v) {
        for (cell, vb) in row.iter_mut().zip(v) {
            *cell -= lambda * va * vb;
        }
    }
}

fn mat_vec(m: &[Vec<f64>], v: &[f64]) -> Vec<f64> {
    m.iter()
        .map(|row| row.iter().zip(v).map(|(a, b)| a * b).sum())
        .collect()
}

fn normalise(v: &mut [f64]) -> f64 {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm > 1e-300 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    norm
}

/// Make the largest-magnitude coefficient positive (first one on ties).
fn fix_sign(v: &mut [f64]) {
    let mut best = 0;
    for j in 1..v.len() {
        if v[j].abs() > v[best].abs() + 1e-12 {
            best = j;
        }
    }
    if v.get(best).is_some_and(|x| *x < 0.0) {
        v.iter_mut().for_each(|x| *x = -*x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_principal_axes_of_a_known_cloud() {
        // points along the anti-diagonal (x = -y) with a little spread along (1, 1, 1)
        let pts: Vec<[f64; 3]> = vec![
            [-2.0, 2.0, 0.0],
            [-1.0, 1.0, 0.0],
            [0.0, 0.0, 0.0],
            [1.0, -1.0, 0.0],
            [2.0, -2.0, 0.0],
            [0.1, 0.1, 0.1],
            [-0.1, -0.1, -0.1],
        ];
        let rows: Vec<&[f64]> = pts.iter().map(|p| p.as_slice()).collect();
        let p = Projection::fit(&rows, &[0.0; 3], &[1.0; 3]).unwrap();
        let c1 = &p.components[0];
        let s = std::f64::consts::FRAC_1_SQRT_2;
        // first axis is ±(1,-1,0)/√2; the largest coefficient is made positive (first on ties)
        assert!(
            (c1[0] - s).abs() < 1e-6 && (c1[1] + s).abs() < 1e-6,
            "{c1:?}"
        );
        let c2 = &p.components[1];
        let dot: f64 = c1.iter().zip(c2).map(|(a, b)| a * b).sum();
        assert!(dot.abs() < 1e-6, "components are orthogonal");
        assert!(p.explained[0] > 0.95 && p.explained[0] + p.explained[1] <= 1.0 + 1e-9);
        let (x, _) = p.project(&[2.0, -2.0, 0.0]);
        assert!((x - 2.0 * 2f64.sqrt()).abs() < 1e-6);
        // deterministic
        assert_eq!(p, Projection::fit(&rows, &[0.0; 3], &[1.0; 3]).unwrap());
    }

    #[test]
    fn degenerate_inputs_give_none() {
        let a = [1.0, 2.0];
        assert!(Projection::fit(&[&a], &[0.0; 2], &[1.0; 2]).is_none());
        assert!(Projection::fit(&[&a, &a], &[1.0, 2.0], &[0.0; 2]).is_none());
    }
}
