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

/// An interval's bounds as printed to two places, rounded outward (the low bound down, the high
/// bound up) so that the printed interval holds what it bounds: `0.994 [0.96, 1.00]`, never
/// `[0.96, 0.99]` because 0.9945 rounds down.
pub fn outward(low: f64, high: f64) -> (f64, f64) {
    // a hair of slack: 0.95 stored as 0.9500000000000001 is not pushed to 0.96
    let down = ((low * 100.0) + 1e-9).floor() / 100.0;
    let up = ((high * 100.0) - 1e-9).ceil() / 100.0;
    (down.max(0.0), up.min(1.0))
}

#[cfg(test)]
mod outward_tests {
    use super::outward;

    #[test]
    fn printed_bounds_hold_the_estimate() {
        assert_eq!(outward(0.9612, 0.9945), (0.96, 1.0));
        assert_eq!(outward(0.95, 0.97), (0.95, 0.97));
        assert_eq!(outward(0.0, 1.0), (0.0, 1.0));
        for (point, low, high) in [(0.994, 0.961, 0.9945), (0.501, 0.4999, 0.5012)] {
            let (l, h) = outward(low, high);
            let shown: f64 = format!("{point:.3}").parse().unwrap();
            assert!(l <= shown && shown <= h, "{point} [{l}, {h}]");
        }
    }
}
