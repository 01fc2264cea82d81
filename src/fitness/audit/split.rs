//! How the audit splits and resamples dialogues: folds stratified by class and grouped by task
//! (no task on both sides of a fold), the human halves of the control row, and the bootstrap
//! that resamples task groups of each class.

use std::collections::BTreeMap;

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One group (a task, or a dialogue without one) with its dialogues of each class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unit {
    /// Row indices of the human side.
    pub(super) human: Vec<usize>,
    /// Row indices of the other side.
    pub(super) other: Vec<usize>,
}

/// The units of rows labelled `labels` (true = human) with group keys `keys`, in key order.
pub(super) fn units(keys: &[String], labels: &[bool]) -> Vec<Unit> {
    let mut by_key: BTreeMap<&str, Unit> = BTreeMap::new();
    for (i, (k, &h)) in keys.iter().zip(labels).enumerate() {
        let u = by_key.entry(k.as_str()).or_insert_with(|| Unit {
            human: Vec::new(),
            other: Vec::new(),
        });
        if h {
            u.human.push(i)
        } else {
            u.other.push(i)
        }
    }
    by_key.into_values().collect()
}

/// The fold (`0..k`) of each unit. Units holding both classes go first, each to the fold with
/// the smallest share of both classes so far; then the human-only units, each to the fold with
/// the fewest human rows; then the other-only units by the other side's rows. Largest units
/// first; `seed` only orders equally large units. So each class spreads over as many folds as
/// it has groups, and every fold's training side keeps both classes whenever each class has
/// two groups or more.
pub(super) fn assign_folds(units: &[Unit], k: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    order.sort_by_key(|&u| std::cmp::Reverse(units[u].human.len() + units[u].other.len()));
    let total_h = units.iter().map(|u| u.human.len()).sum::<usize>().max(1) as f64;
    let total_o = units.iter().map(|u| u.other.len()).sum::<usize>().max(1) as f64;
    let mut load_h = vec![0usize; k];
    let mut load_o = vec![0usize; k];
    let mut fold = vec![0usize; units.len()];
    let lightest = |load: &dyn Fn(usize) -> f64| {
        (0..k)
            .min_by(|&a, &b| load(a).total_cmp(&load(b)).then(a.cmp(&b)))
            .unwrap_or(0)
    };
    let passes: [fn(&Unit) -> bool; 3] = [
        |u| !u.human.is_empty() && !u.other.is_empty(),
        |u| !u.human.is_empty() && u.other.is_empty(),
        |u| u.human.is_empty(),
    ];
    for (pass, belongs) in passes.iter().enumerate() {
        for &u in order.iter().filter(|&&u| belongs(&units[u])) {
            let f = match pass {
                0 => lightest(&|f| load_h[f] as f64 / total_h + load_o[f] as f64 / total_o),
                1 => lightest(&|f| load_h[f] as f64),
                _ => lightest(&|f| load_o[f] as f64),
            };
            fold[u] = f;
            load_h[f] += units[u].human.len();
            load_o[f] += units[u].other.len();
        }
    }
    fold
}

/// Split group keys into two halves of about equal dialogue counts: groups in a seeded order,
/// largest first, each to the lighter half (the first on ties). Returns whether each row is in
/// the first half.
pub(super) fn halves(keys: &[String], seed: u64) -> Vec<bool> {
    let mut sizes: BTreeMap<&str, usize> = BTreeMap::new();
    for k in keys {
        *sizes.entry(k.as_str()).or_default() += 1;
    }
    let mut order: Vec<(&str, usize)> = sizes.into_iter().collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    order.sort_by_key(|g| std::cmp::Reverse(g.1));
    let (mut a, mut b) = (0usize, 0usize);
    let mut first: BTreeMap<&str, bool> = BTreeMap::new();
    for (g, n) in order {
        let to_a = a <= b;
        if to_a {
            a += n
        } else {
            b += n
        }
        first.insert(g, to_a);
    }
    keys.iter().map(|k| first[k.as_str()]).collect()
}

/// Draws bootstrap samples of rows: as many human groups as there are, with replacement, and
/// as many groups of the other side (a two-sample cluster bootstrap: dialogues of one task
/// stay together, both classes are always present).
pub(super) struct Resampler {
    human: Vec<Vec<usize>>,
    other: Vec<Vec<usize>>,
}

impl Resampler {
    pub(super) fn new(units: &[Unit]) -> Resampler {
        let side = |f: fn(&Unit) -> &Vec<usize>| -> Vec<Vec<usize>> {
            units
                .iter()
                .map(f)
                .filter(|rows| !rows.is_empty())
                .cloned()
                .collect()
        };
        Resampler {
            human: side(|u| &u.human),
            other: side(|u| &u.other),
        }
    }

    /// One sample's rows (indices repeat for groups drawn more than once). A draw with fewer
    /// than two distinct groups of a side cannot be cross-validated and is drawn again (up to
    /// 100 times; None after that).
    pub(super) fn draw(&self, rng: &mut ChaCha8Rng) -> Option<Vec<usize>> {
        for _ in 0..100 {
            let mut rows = Vec::new();
            let mut distinct = [std::collections::BTreeSet::new(), Default::default()];
            for (side, seen) in [&self.human, &self.other].into_iter().zip(&mut distinct) {
                for _ in 0..side.len() {
                    let g = rng.random_range(0..side.len());
                    seen.insert(g);
                    rows.extend_from_slice(&side[g]);
                }
            }
            if distinct.iter().all(|d| d.len() >= 2) {
                return Some(rows);
            }
        }
        None
    }
}

/// The `q`-quantile of sorted values (linear between order statistics).
pub(super) fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(spec: &[(&str, usize, bool)]) -> (Vec<String>, Vec<bool>) {
        let mut k = Vec::new();
        let mut l = Vec::new();
        for (g, n, h) in spec {
            for _ in 0..*n {
                k.push(g.to_string());
                l.push(*h);
            }
        }
        (k, l)
    }

    #[test]
    fn folds_never_split_a_group_and_keep_both_classes_in_every_training_side() {
        // two human tasks, six simulated ones, and one task both played
        let (k, l) = keys(&[
            ("h1", 4, true),
            ("h2", 3, true),
            ("s1", 5, false),
            ("s2", 5, false),
            ("s3", 5, false),
            ("s4", 4, false),
            ("s5", 2, false),
            ("s6", 2, false),
            ("both", 2, true),
            ("both", 3, false),
        ]);
        let us = units(&k, &l);
        for seed in 0..10 {
            let f = assign_folds(&us, 5, seed);
            for fold in 0..5 {
                let train: Vec<&Unit> = us
                    .iter()
                    .zip(&f)
                    .filter(|(_, &g)| g != fold)
                    .map(|(u, _)| u)
                    .collect();
                assert!(train.iter().any(|u| !u.human.is_empty()), "seed {seed}");
                assert!(train.iter().any(|u| !u.other.is_empty()), "seed {seed}");
            }
            // the three human-bearing units sit in three different folds
            let human_folds: std::collections::BTreeSet<usize> = us
                .iter()
                .zip(&f)
                .filter(|(u, _)| !u.human.is_empty())
                .map(|(_, &g)| g)
                .collect();
            assert_eq!(human_folds.len(), 3);
        }
    }

    #[test]
    fn halves_balance_dialogues_and_keep_tasks_whole() {
        let (k, _) = keys(&[
            ("a", 5, true),
            ("b", 4, true),
            ("c", 3, true),
            ("d", 2, true),
            ("e", 1, true),
        ]);
        let h = halves(&k, 3);
        let n_a = h.iter().filter(|&&x| x).count();
        assert!((7..=8).contains(&n_a), "{n_a}");
        for (i, ki) in k.iter().enumerate() {
            for (j, kj) in k.iter().enumerate() {
                if ki == kj {
                    assert_eq!(h[i], h[j]);
                }
            }
        }
        assert_eq!(halves(&k, 3), h);
    }

    #[test]
    fn resamples_draw_whole_groups_of_each_class() {
        let (k, l) = keys(&[
            ("h1", 2, true),
            ("h2", 3, true),
            ("s1", 4, false),
            ("s2", 1, false),
        ]);
        let r = Resampler::new(&units(&k, &l));
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..50 {
            // two groups a side: only draws of both are kept
            let rows = r.draw(&mut rng).unwrap();
            assert_eq!(rows.iter().filter(|&&i| l[i]).count(), 5);
            assert_eq!(rows.iter().filter(|&&i| !l[i]).count(), 5);
        }
        let one = Resampler::new(&units(&k[..6], &l[..6]));
        assert!(one.draw(&mut rng).is_none(), "one group of the other side");
        assert_eq!(quantile_sorted(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.5), 3.0);
        assert_eq!(quantile_sorted(&[1.0, 2.0], 0.25), 1.25);
    }
}
