//! The audit's second classifier: L2-regularised logistic regression on standardised features,
//! with balanced class weights, fitted by Newton's method. A model of another family than the
//! random forest (linear, smooth), so a separation both find is not one classifier's quirk.
//!
//! Deterministic: sums run in row order, the Newton system is solved by a Cholesky
//! factorisation, and nothing is random. It minimises
//! `Σᵢ wᵢ·logloss(yᵢ, σ(b + xᵢ·β)) + ½·‖β‖² / C` with `C = 1` and the bias unpenalised — the
//! objective of scikit-learn's `LogisticRegression(C=1, class_weight="balanced")` on features
//! standardised with the training rows' mean and population standard deviation (a constant
//! feature is centred and left unscaled).

/// Inverse regularisation strength (scikit-learn's default).
pub const C: f64 = 1.0;

/// Newton steps at most; a step whose largest change is below [`TOLERANCE`] ends the fit.
const MAX_STEPS: usize = 100;
const TOLERANCE: f64 = 1e-10;

/// A fitted model: the standardisation of the training rows and the coefficients.
#[derive(Debug, Clone, PartialEq)]
pub struct Logistic {
    mean: Vec<f64>,
    scale: Vec<f64>,
    /// Bias first, then one weight per feature (in standardised units).
    coef: Vec<f64>,
}

impl Logistic {
    /// Fit on rows `x` (finite, all of one length) with labels `y` (`true` = class 1). Both
    /// classes must be present (the caller checks; with one class the model predicts it).
    pub fn fit(x: &[Vec<f64>], y: &[bool]) -> Logistic {
        let n = x.len();
        let d = x.first().map_or(0, Vec::len);
        let mut mean = vec![0.0; d];
        for row in x {
            for (m, v) in mean.iter_mut().zip(row) {
                *m += v;
            }
        }
        mean.iter_mut().for_each(|m| *m /= n.max(1) as f64);
        let mut scale = vec![0.0; d];
        for row in x {
            for j in 0..d {
                scale[j] += (row[j] - mean[j]).powi(2);
            }
        }
        for s in &mut scale {
            let sd = (*s / n.max(1) as f64).sqrt();
            *s = if sd > 1e-12 { sd } else { 1.0 };
        }
        let z: Vec<Vec<f64>> = x.iter().map(|r| standardise(r, &mean, &scale)).collect();
        let n1 = y.iter().filter(|&&b| b).count();
        let n0 = n - n1;
        let weight = |label: bool| {
            let k = if label { n1 } else { n0 };
            if k == 0 {
                0.0
            } else {
                n as f64 / (2.0 * k as f64)
            }
        };
        let w: Vec<f64> = y.iter().map(|&l| weight(l)).collect();
        let p = d + 1;
        let mut coef = vec![0.0; p];
        for _ in 0..MAX_STEPS {
            // gradient and Hessian of the objective at `coef`
            let mut grad = vec![0.0; p];
            let mut hess = vec![0.0; p * p];
            for i in 0..n {
                let eta = coef[0] + dot(&coef[1..], &z[i]);
                let prob = sigmoid(eta);
                let target = if y[i] { 1.0 } else { 0.0 };
                let g = w[i] * (prob - target);
                let h = w[i] * prob * (1.0 - prob);
                grad[0] += g;
                hess[0] += h;
                for a in 0..d {
                    let za = z[i][a];
                    grad[a + 1] += g * za;
                    hess[a + 1] += h * za;
                    hess[(a + 1) * p] += h * za;
                    for b in 0..=a {
                        hess[(a + 1) * p + b + 1] += h * za * z[i][b];
                    }
                }
            }
            for a in 1..p {
                grad[a] += coef[a] / C;
                hess[a * p + a] += 1.0 / C;
                for b in 1..a {
                    hess[b * p + a] = hess[a * p + b];
                }
            }
            let Some(step) = solve_spd(&hess, &grad, p) else {
                break; // singular: keep the last coefficients
            };
            let mut largest: f64 = 0.0;
            for (c, s) in coef.iter_mut().zip(&step) {
                *c -= s;
                largest = largest.max(s.abs());
            }
            if largest < TOLERANCE {
                break;
            }
        }
        Logistic { mean, scale, coef }
    }

    /// P(class 1) of each row.
    pub fn predict_proba(&self, x: &[Vec<f64>]) -> Vec<f64> {
        x.iter()
            .map(|r| {
                let z = standardise(r, &self.mean, &self.scale);
                sigmoid(self.coef[0] + dot(&self.coef[1..], &z))
            })
            .collect()
    }

    /// The weights of the features, in standardised units (bias left out).
    pub fn weights(&self) -> &[f64] {
        &self.coef[1..]
    }
}

fn standardise(row: &[f64], mean: &[f64], scale: &[f64]) -> Vec<f64> {
    row.iter()
        .zip(mean.iter().zip(scale))
        .map(|(v, (m, s))| (v - m) / s)
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn sigmoid(t: f64) -> f64 {
    if t >= 0.0 {
        1.0 / (1.0 + (-t).exp())
    } else {
        let e = t.exp();
        e / (1.0 + e)
    }
}

/// Solve `A·x = b` for a symmetric positive definite `A` (row-major `p × p`) by Cholesky;
/// `None` when `A` is not positive definite.
fn solve_spd(a: &[f64], b: &[f64], p: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; p * p];
    for i in 0..p {
        for j in 0..=i {
            let mut s = a[i * p + j];
            for k in 0..j {
                s -= l[i * p + k] * l[j * p + k];
            }
            if i == j {
                if s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                    return None;
                }
                l[i * p + i] = s.sqrt();
            } else {
                l[i * p + j] = s / l[j * p + j];
            }
        }
    }
    let mut y = vec![0.0; p];
    for i in 0..p {
        let mut s = b[i];
        for k in 0..i {
            s -= l[i * p + k] * y[k];
        }
        y[i] = s / l[i * p + i];
    }
    let mut x = vec![0.0; p];
    for i in (0..p).rev() {
        let mut s = y[i];
        for k in i + 1..p {
            s -= l[k * p + i] * x[k];
        }
        x[i] = s / l[i * p + i];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_separates_a_linear_boundary_and_is_deterministic() {
        let x: Vec<Vec<f64>> = (0..40)
            .map(|i| vec![i as f64, ((i * 7) % 5) as f64])
            .collect();
        let y: Vec<bool> = (0..40).map(|i| i >= 20).collect();
        let m = Logistic::fit(&x, &y);
        let p = m.predict_proba(&x);
        assert!(p[0] < 0.1 && p[39] > 0.9, "{p:?}");
        assert!(m.weights()[0] > 0.0 && m.weights()[0].abs() > m.weights()[1].abs());
        assert_eq!(Logistic::fit(&x, &y), m);
    }

    #[test]
    fn the_penalty_keeps_a_perfect_separation_finite_and_constants_are_harmless() {
        let x = vec![
            vec![0.0, 3.0],
            vec![0.1, 3.0],
            vec![1.0, 3.0],
            vec![1.1, 3.0],
        ];
        let y = vec![false, false, true, true];
        let m = Logistic::fit(&x, &y);
        assert!(m.weights().iter().all(|w| w.is_finite()));
        assert_eq!(m.weights()[1], 0.0); // a constant column carries nothing
        let p = m.predict_proba(&[vec![0.05, 3.0], vec![1.05, 3.0]]);
        assert!(p[0] < 0.5 && p[1] > 0.5);
    }

    #[test]
    fn it_matches_the_closed_form_of_one_centred_feature() {
        // Symmetric data: the bias is 0 and the weight solves Σ w·(σ(β z) − y)·z + β = 0.
        let x = vec![
            vec![-1.0],
            vec![-1.0],
            vec![1.0],
            vec![1.0],
            vec![-1.0],
            vec![1.0],
        ];
        let y = vec![false, false, true, true, true, false];
        let m = Logistic::fit(&x, &y);
        assert!(m.coef[0].abs() < 1e-9);
        let beta = m.coef[1];
        // z = ±1 (std 1); each class has weight 1 here (3 and 3 of 6)
        let g = |b: f64| {
            // rows with z=+1: labels true, true, false; rows with z=-1: false, false, true
            let up = 2.0 * (sigmoid(b) - 1.0) + sigmoid(b);
            let down = -(2.0 * sigmoid(-b) + (sigmoid(-b) - 1.0));
            up + down + b
        };
        assert!(g(beta).abs() < 1e-8, "gradient {} at {beta}", g(beta));
        assert!(beta > 0.0);
    }
}
