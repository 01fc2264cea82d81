//! The Wilson score interval of a share: the LLM judge's accuracy here, and the human study's
//! shares judged human (`report::study`).

/// z for a two-sided 95% interval (Φ⁻¹(0.975)).
pub const Z95: f64 = 1.959_963_984_540_054;

/// A share with its Wilson score interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Wilson {
    /// Successes / trials.
    pub share: f64,
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

/// The Wilson score interval of `k` successes in `n` trials at `z` (None when `n` is 0).
pub fn wilson(k: usize, n: usize, z: f64) -> Option<Wilson> {
    if n == 0 {
        return None;
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = z / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    // At k = 0 (k = n) the bound is exactly 0 (1); say so rather than leave rounding dust.
    Some(Wilson {
        share: p,
        low: if k == 0.0 {
            0.0
        } else {
            (centre - half).max(0.0)
        },
        high: if k == n {
            1.0
        } else {
            (centre + half).min(1.0)
        },
    })
}
