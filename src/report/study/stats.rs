//! The statistics of a human-judgement study (the PPol paper's §5.4): Wilson score intervals for
//! a share, Welch's unequal-variance t-test, Krippendorff's α for nominal answers, and the
//! point-biserial correlation — with the Student t distribution they need, computed here from
//! the regularised incomplete beta function (continued fraction, Lentz's method) so that
//! p-values agree with scipy to ~1e-12.

pub use crate::fitness::audit::stats::{wilson, Wilson, Z95};

/// Mean and unbiased variance (n − 1).
pub fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let v = if x.len() > 1 {
        x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - 1.0)
    } else {
        f64::NAN
    };
    (m, v)
}

/// A t statistic with its degrees of freedom and two-sided p-value.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TTest {
    /// t.
    pub t: f64,
    /// Degrees of freedom (Welch–Satterthwaite for Welch's test).
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// Welch's t-test of mean(a) − mean(b). None when a side has fewer than two values or both
/// variances are zero (t undefined).
pub fn welch(a: &[f64], b: &[f64]) -> Option<TTest> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (ma, va) = mean_var(a);
    let (mb, vb) = mean_var(b);
    let (sa, sb) = (va / a.len() as f64, vb / b.len() as f64);
    let se2 = sa + sb;
    if se2 <= 0.0 {
        return None;
    }
    let t = (ma - mb) / se2.sqrt();
    let df = se2 * se2 / (sa * sa / (a.len() as f64 - 1.0) + sb * sb / (b.len() as f64 - 1.0));
    Some(TTest {
        t,
        df,
        p: t_two_sided_p(t, df),
    })
}

/// Pearson's r of `x` with `y` (the point-biserial r when one is 0/1), with the t-test of
/// r = 0 (df = n − 2). None with fewer than three pairs or a constant variable.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<(f64, TTest)> {
    let n = x.len();
    if n < 3 || n != y.len() {
        return None;
    }
    let mx = x.iter().sum::<f64>() / n as f64;
    let my = y.iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx <= 0.0 || syy <= 0.0 {
        return None;
    }
    let r = (sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0);
    let df = n as f64 - 2.0;
    let t = if r.abs() >= 1.0 {
        f64::INFINITY.copysign(r)
    } else {
        r * (df / (1.0 - r * r)).sqrt()
    };
    Some((
        r,
        TTest {
            t,
            df,
            p: t_two_sided_p(t, df),
        },
    ))
}

/// Krippendorff's α for nominal data. `units` holds, per unit (item), the category of each
/// judgement it got; units with fewer than two judgements are not pairable and are skipped.
/// None when fewer than two pairable judgements exist or every judgement is the same category
/// (expected disagreement 0).
pub fn krippendorff_alpha_nominal(units: &[Vec<usize>], n_categories: usize) -> Option<f64> {
    let k = n_categories;
    let mut o = vec![0.0f64; k * k];
    for u in units {
        let m = u.len();
        if m < 2 {
            continue;
        }
        let mut counts = vec![0.0f64; k];
        for &c in u {
            counts[c] += 1.0;
        }
        for c in 0..k {
            for d in 0..k {
                let pairs = if c == d {
                    counts[c] * (counts[c] - 1.0)
                } else {
                    counts[c] * counts[d]
                };
                o[c * k + d] += pairs / (m as f64 - 1.0);
            }
        }
    }
    let n_c: Vec<f64> = (0..k).map(|c| (0..k).map(|d| o[c * k + d]).sum()).collect();
    let n: f64 = n_c.iter().sum();
    if n < 2.0 {
        return None;
    }
    let mut d_o = 0.0;
    let mut d_e = 0.0;
    for c in 0..k {
        for d in 0..k {
            if c != d {
                d_o += o[c * k + d];
                d_e += n_c[c] * n_c[d];
            }
        }
    }
    if d_e <= 0.0 {
        return None;
    }
    Some(1.0 - (n - 1.0) * d_o / d_e)
}

/// Two-sided p-value of Student's t with `df` degrees of freedom:
/// P(|T| ≥ |t|) = I_{df/(df+t²)}(df/2, 1/2).
pub fn t_two_sided_p(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return 0.0;
    }
    let x = df / (df + t * t);
    reg_inc_beta(df / 2.0, 0.5, x).clamp(0.0, 1.0)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; relative error ~1e-15).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // reflection: Γ(x)Γ(1−x) = π / sin(πx)
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularised incomplete beta function I_x(a, b).
pub fn reg_inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    // The continued fraction converges fast for x < (a+1)/(a+b+2); use the symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// The continued fraction of I_x(a, b) (modified Lentz).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-16;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=10_000 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * (1.0 + b.abs())
    }

    #[test]
    fn t_distribution_matches_known_values() {
        // 2 * scipy.stats.t.sf(2.0, 10) = 0.07338803477074037
        assert!(close(
            t_two_sided_p(2.0, 10.0),
            0.073_388_034_770_740_37,
            1e-12
        ));
        // 2 * t.sf(1.0, 1) = 0.5 (Cauchy)
        assert!(close(t_two_sided_p(1.0, 1.0), 0.5, 1e-12));
        // 2 * t.sf(3.5, 7.3) = 0.009446... checked against the normal limit below instead
        // large df: → normal, 2*(1-Φ(1.96)) = 0.04999579...
        assert!(close(t_two_sided_p(Z95, 1e9), 0.05, 1e-6));
        assert_eq!(t_two_sided_p(0.0, 5.0), 1.0);
        assert!(close(ln_gamma(5.0), 24f64.ln(), 1e-14));
        assert!(close(
            ln_gamma(0.5),
            std::f64::consts::PI.sqrt().ln(),
            1e-14
        ));
    }

    #[test]
    fn wilson_of_the_edges_stays_in_the_unit_interval() {
        let w = wilson(0, 10, Z95).unwrap();
        assert_eq!((w.share, w.low), (0.0, 0.0));
        assert!(w.high > 0.2 && w.high < 0.35);
        let w = wilson(10, 10, Z95).unwrap();
        assert_eq!((w.share, w.high), (1.0, 1.0));
        assert!(wilson(0, 0, Z95).is_none());
    }

    #[test]
    fn alpha_is_one_for_perfect_agreement_and_none_without_variation() {
        assert_eq!(
            krippendorff_alpha_nominal(&[vec![0, 0], vec![1, 1, 1], vec![0, 0]], 3),
            Some(1.0)
        );
        assert_eq!(
            krippendorff_alpha_nominal(&[vec![0, 0], vec![0, 0]], 2),
            None
        );
    }
}
