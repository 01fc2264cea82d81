//! The random-forest core: CART trees with weighted gini, bootstrap, per-split feature
//! sampling, flat per-tree node arrays, and batched parallel inference.
//!
//! # Why our own forest
//!
//! The reference trains scikit-learn's `RandomForestClassifier` with `class_weight="balanced"`
//! and reads P(human) as the average over trees of each leaf's *weighted* class fraction.
//! The Rust crates checked (November 2026) do not give that:
//!
//! - `smartcore` 0.7.0: `RandomForestClassifierParameters` has no class or sample weights
//!   (sample weights exist only inside `base_forest`, as a bootstrap distribution); each tree
//!   leaf stores only its majority class (`Node::output: usize`), so a tree's probability is
//!   one-hot, and the forest only offers a hard-vote `predict`, row by row, single-threaded.
//!   Serialisation needs its `serde` feature, which pulls in `typetag`.
//! - `linfa-trees` 0.8.1: decision trees only (no random forest), leaves hold a single label,
//!   weights are `f32`, and the tree serialises as nested `Box`ed nodes — 200 trees of depth
//!   12 become a deeply nested JSON document.
//!
//! The algorithm is small (about 300 lines), so we implement it with the exact semantics we
//! need: balanced class weights applied as sample weights (bootstrap count × class weight)
//! in the gini impurity and in the leaf fractions, sklearn's stopping rules, midpoint
//! thresholds, sklearn's "keep drawing features until a valid split is found" rule, a
//! JSON-stable flat layout, and rayon-parallel training (over trees) and inference (over rows).
//!
//! The bootstrap follows scikit-learn up to 1.8: rows are drawn uniformly and each tree's
//! sample weights are draw count × class weight. scikit-learn 1.9 (PR #31529) instead draws
//! rows with probability proportional to the class weights and uses the bare counts, which
//! shifts P(human) by a few hundredths; `tests/discriminator.rs` compares against 1.8.

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::ForestParams;
use crate::{Error, Result};

/// Two feature values closer than this are treated as equal when choosing split positions,
/// and a feature whose range in a node is within it is constant there (sklearn's
/// `FEATURE_THRESHOLD`).
const FEATURE_THRESHOLD: f64 = 1e-7;

/// One fitted tree in flat arrays, indexed by node id (node 0 is the root; ids are in
/// depth-first pre-order, so a left child is always `id + 1` and every child id is larger
/// than its parent's).
///
/// A node is a leaf when `left[id] == 0` (the root is nobody's child). For a split node a
/// row goes left when `x[feature[id]] <= threshold[id]`. `value[id]` is the node's weighted
/// class-1 (human) fraction; for leaves it is the tree's P(human). For leaves `feature`,
/// `threshold` and `right` are 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    feature: Vec<u32>,
    threshold: Vec<f64>,
    left: Vec<u32>,
    right: Vec<u32>,
    value: Vec<f64>,
}

impl Tree {
    /// Number of nodes (split nodes and leaves).
    pub fn n_nodes(&self) -> usize {
        self.value.len()
    }

    /// Number of leaves.
    pub fn n_leaves(&self) -> usize {
        self.left.iter().filter(|&&l| l == 0).count()
    }

    /// Depth of the deepest leaf (a single-leaf tree has depth 0).
    pub fn depth(&self) -> usize {
        let mut depth = vec![0usize; self.n_nodes()];
        let mut max = 0;
        for id in 0..self.n_nodes() {
            max = max.max(depth[id]);
            if self.left[id] != 0 {
                depth[self.left[id] as usize] = depth[id] + 1;
                depth[self.right[id] as usize] = depth[id] + 1;
            }
        }
        max
    }

    /// The leaf value (weighted class-1 fraction) reached by `row`.
    #[inline]
    pub fn predict_row(&self, row: &[f64]) -> f64 {
        let mut id = 0usize;
        loop {
            let l = self.left[id];
            if l == 0 {
                return self.value[id];
            }
            id = if row[self.feature[id] as usize] <= self.threshold[id] {
                l as usize
            } else {
                self.right[id] as usize
            };
        }
    }

    /// Check the structural invariants a hand-edited or corrupted file could break, so that
    /// prediction can neither index out of bounds nor loop.
    fn validate(&self, n_features: usize) -> std::result::Result<(), String> {
        let n = self.value.len();
        if n == 0 {
            return Err("tree has no nodes".into());
        }
        for (name, len) in [
            ("feature", self.feature.len()),
            ("threshold", self.threshold.len()),
            ("left", self.left.len()),
            ("right", self.right.len()),
        ] {
            if len != n {
                return Err(format!("'{name}' has {len} entries but 'value' has {n}"));
            }
        }
        for id in 0..n {
            let v = self.value[id];
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("node {id}: value {v} is not a probability"));
            }
            let (l, r) = (self.left[id] as usize, self.right[id] as usize);
            if l == 0 {
                continue;
            }
            if l <= id || r <= id || l >= n || r >= n {
                return Err(format!(
                    "node {id}: children ({l}, {r}) must be later nodes below {n}"
                ));
            }
            if self.feature[id] as usize >= n_features {
                return Err(format!(
                    "node {id}: feature {} is out of range (forest has {n_features})",
                    self.feature[id]
                ));
            }
            if !self.threshold[id].is_finite() {
                return Err(format!("node {id}: threshold is not finite"));
            }
        }
        Ok(())
    }
}

/// A fitted random-forest binary classifier (class 1 = `true`). Serialises to JSON as
/// `{"n_features", "importances", "trees": [{feature, threshold, left, right, value}, ...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RandomForest {
    n_features: usize,
    importances: Vec<f64>,
    trees: Vec<Tree>,
}

/// Training data in column-major order plus the per-class weights.
struct Dataset {
    cols: Vec<Vec<f64>>,
    y: Vec<bool>,
    class_weight: [f64; 2],
}

/// Parameters resolved against the data.
struct Resolved {
    max_depth: usize,
    max_features: usize,
    min_samples_split: usize,
    min_samples_leaf: usize,
    bootstrap: bool,
}

/// A node waiting to be grown: its rows `samples[start..end]`, its depth, and its parent's id
/// with whether it is the left child.
struct Pending {
    start: usize,
    end: usize,
    depth: usize,
    parent: Option<(usize, bool)>,
}

/// The best split found in a node.
struct Split {
    feature: usize,
    threshold: f64,
    proxy: f64,
    w_left: f64,
    w1_left: f64,
}

fn gini(w1: f64, w: f64) -> f64 {
    if w <= 0.0 {
        return 0.0;
    }
    let p1 = w1 / w;
    let p0 = 1.0 - p1;
    1.0 - p1 * p1 - p0 * p0
}

impl RandomForest {
    /// Fit a forest on rows `x` (all of the same length, finite) with labels `y`
    /// (`true` = class 1). Trees are built in parallel; the result depends only on the data,
    /// the parameters and `params.seed` (each tree gets its own ChaCha8 stream seeded from a
    /// master stream), not on the thread count.
    ///
    /// # Errors
    /// [`Error::Insufficient`] if `x` is empty or one class is absent; [`Error::Parse`] (path
    /// `<training data>`) for ragged rows, non-finite values or a label count that differs
    /// from the row count; [`Error::Config`] for invalid parameters.
    pub fn fit(x: &[Vec<f64>], y: &[bool], params: &ForestParams) -> Result<Self> {
        let origin = "<training data>";
        if x.len() != y.len() {
            return Err(Error::parse(
                origin,
                "labels",
                format!("{} rows but {} labels", x.len(), y.len()),
            ));
        }
        if x.is_empty() {
            return Err(Error::Insufficient(
                "cannot fit a random forest on zero rows".into(),
            ));
        }
        let n_features = x[0].len();
        if n_features == 0 {
            return Err(Error::parse(origin, "row 0", "rows have no features"));
        }
        for (i, row) in x.iter().enumerate() {
            if row.len() != n_features {
                return Err(Error::parse(
                    origin,
                    format!("row {i}"),
                    format!("expected {n_features} values, found {}", row.len()),
                ));
            }
            if let Some(j) = row.iter().position(|v| !v.is_finite()) {
                return Err(Error::parse(
                    origin,
                    format!("row {i}, column {j}"),
                    format!("non-finite value {}", row[j]),
                ));
            }
        }
        let n1 = y.iter().filter(|&&b| b).count();
        let n0 = y.len() - n1;
        if n1 == 0 || n0 == 0 {
            return Err(Error::Insufficient(format!(
                "a random forest needs both classes; got {n1} of class 1 and {n0} of class 0"
            )));
        }
        let resolved = params.resolve(n_features)?;

        let n = x.len() as f64;
        let class_weight = if params.balanced {
            [n / (2.0 * n0 as f64), n / (2.0 * n1 as f64)]
        } else {
            [1.0, 1.0]
        };
        let cols = (0..n_features)
            .map(|j| x.iter().map(|r| r[j]).collect())
            .collect();
        let data = Dataset {
            cols,
            y: y.to_vec(),
            class_weight,
        };

        let mut master = ChaCha8Rng::seed_from_u64(params.seed);
        let seeds: Vec<u64> = (0..params.n_trees).map(|_| master.next_u64()).collect();
        let built: Vec<(Tree, Vec<f64>)> = seeds
            .par_iter()
            .map(|&s| build_tree(&data, &resolved, s))
            .collect();

        // sklearn: mean of the per-tree normalised importances over trees that split at
        // least once, renormalised to sum 1 (all zeros if no tree split).
        let mut importances = vec![0.0; n_features];
        let mut used = 0usize;
        for (tree, imp) in &built {
            if tree.n_nodes() > 1 {
                used += 1;
                for (a, b) in importances.iter_mut().zip(imp) {
                    *a += b;
                }
            }
        }
        if used > 0 {
            let total: f64 = importances.iter().sum();
            if total > 0.0 {
                importances.iter_mut().for_each(|v| *v /= total);
            }
        }
        Ok(RandomForest {
            n_features,
            importances,
            trees: built.into_iter().map(|(t, _)| t).collect(),
        })
    }

    /// P(class 1) for each row: the mean over trees of the reached leaf's weighted class-1
    /// fraction. Rows are processed in parallel; the result is independent of scheduling.
    ///
    /// Non-finite values are not rejected: NaN compares false and so goes right at every split.
    ///
    /// # Panics
    /// If a row's length differs from [`RandomForest::n_features`].
    pub fn predict_proba(&self, x: &[Vec<f64>]) -> Vec<f64> {
        if let Some((i, row)) = x
            .iter()
            .enumerate()
            .find(|(_, r)| r.len() != self.n_features)
        {
            panic!(
                "predict_proba: row {i} has {} values, the forest was trained on {}",
                row.len(),
                self.n_features
            );
        }
        let n_trees = self.trees.len() as f64;
        x.par_iter()
            .with_min_len(64)
            .map(|row| {
                let mut sum = 0.0;
                for tree in &self.trees {
                    sum += tree.predict_row(row);
                }
                sum / n_trees
            })
            .collect()
    }

    /// Mean decrease in impurity per feature, normalised like sklearn: per tree divided by the
    /// root's weight and normalised to sum 1, then averaged over trees that split at least
    /// once and renormalised to sum 1. All zeros if no tree has a split.
    pub fn feature_importances(&self) -> Vec<f64> {
        self.importances.clone()
    }

    /// Number of features the forest was trained on.
    pub fn n_features(&self) -> usize {
        self.n_features
    }

    /// The fitted trees.
    pub fn trees(&self) -> &[Tree] {
        &self.trees
    }

    /// Check a deserialised forest's invariants (array lengths, child ids, feature ranges).
    /// Returns `(where, what)` for the first problem found.
    pub(crate) fn validate(&self) -> std::result::Result<(), (String, String)> {
        if self.trees.is_empty() {
            return Err(("forest.trees".into(), "forest has no trees".into()));
        }
        if self.importances.len() != self.n_features {
            return Err((
                "forest.importances".into(),
                format!(
                    "{} entries for {} features",
                    self.importances.len(),
                    self.n_features
                ),
            ));
        }
        for (i, t) in self.trees.iter().enumerate() {
            t.validate(self.n_features)
                .map_err(|m| (format!("forest.trees[{i}]"), m))?;
        }
        Ok(())
    }
}

/// Grow one tree depth-first (sklearn's `DepthFirstTreeBuilder` + `BestSplitter`). Returns the
/// tree and its normalised impurity-decrease importances.
fn build_tree(data: &Dataset, p: &Resolved, seed: u64) -> (Tree, Vec<f64>) {
    let n = data.y.len();
    let n_features = data.cols.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);

    // Bootstrap counts → sample weights (count × class weight); undrawn rows are dropped,
    // so min_samples_* count distinct drawn rows, as in sklearn.
    let mut counts = vec![0u32; n];
    if p.bootstrap {
        for _ in 0..n {
            counts[rng.random_range(0..n)] += 1;
        }
    } else {
        counts.fill(1);
    }
    let weight: Vec<f64> = (0..n)
        .map(|i| counts[i] as f64 * data.class_weight[data.y[i] as usize])
        .collect();
    let mut samples: Vec<usize> = (0..n).filter(|&i| counts[i] > 0).collect();

    let mut tree = Tree {
        feature: Vec::new(),
        threshold: Vec::new(),
        left: Vec::new(),
        right: Vec::new(),
        value: Vec::new(),
    };
    let mut importances = vec![0.0; n_features];
    let mut features: Vec<usize> = (0..n_features).collect();
    let mut buf: Vec<(f64, usize)> = Vec::with_capacity(samples.len());
    let mut root_weight = 0.0;

    let mut stack = vec![Pending {
        start: 0,
        end: samples.len(),
        depth: 0,
        parent: None,
    }];
    while let Some(Pending {
        start,
        end,
        depth,
        parent,
    }) = stack.pop()
    {
        let id = tree.value.len();
        if let Some((pid, is_left)) = parent {
            if is_left {
                tree.left[pid] = id as u32;
            } else {
                tree.right[pid] = id as u32;
            }
        }
        let node = &samples[start..end];
        let (mut w, mut w1) = (0.0, 0.0);
        for &s in node {
            w += weight[s];
            if data.y[s] {
                w1 += weight[s];
            }
        }
        if id == 0 {
            root_weight = w;
        }
        let m = end - start;
        let impurity = gini(w1, w);
        tree.value.push(if w > 0.0 { w1 / w } else { 0.0 });
        tree.feature.push(0);
        tree.threshold.push(0.0);
        tree.left.push(0);
        tree.right.push(0);

        let is_leaf = depth >= p.max_depth
            || m < p.min_samples_split
            || m < 2 * p.min_samples_leaf
            || impurity <= f64::EPSILON;
        if is_leaf {
            continue;
        }
        let Some(split) = best_split(
            data,
            p,
            &weight,
            node,
            (w, w1),
            &mut features,
            &mut buf,
            &mut rng,
        ) else {
            continue;
        };

        // Partition samples[start..end]: rows with x <= threshold first.
        let col = &data.cols[split.feature];
        let node = &mut samples[start..end];
        let mut mid = 0;
        for i in 0..node.len() {
            if col[node[i]] <= split.threshold {
                node.swap(i, mid);
                mid += 1;
            }
        }
        let (wl, wl1) = (split.w_left, split.w1_left);
        let (wr, wr1) = (w - wl, w1 - wl1);
        importances[split.feature] += w * impurity - wl * gini(wl1, wl) - wr * gini(wr1, wr);
        debug_assert!(split.proxy.is_finite());
        tree.feature[id] = split.feature as u32;
        tree.threshold[id] = split.threshold;
        // Right first so the left child is popped next and gets id + 1.
        stack.push(Pending {
            start: start + mid,
            end,
            depth: depth + 1,
            parent: Some((id, false)),
        });
        stack.push(Pending {
            start,
            end: start + mid,
            depth: depth + 1,
            parent: Some((id, true)),
        });
    }

    if tree.n_nodes() > 1 && root_weight > 0.0 {
        importances.iter_mut().for_each(|v| *v /= root_weight);
        let total: f64 = importances.iter().sum();
        if total > 0.0 {
            importances.iter_mut().for_each(|v| *v /= total);
        }
    }
    (tree, importances)
}

/// Find the best gini split of `node` over randomly drawn features. Like sklearn's
/// `BestSplitter`, features are drawn without replacement and every draw counts towards
/// `max_features`, constant ones included; but drawing goes on past `max_features` until a
/// valid split exists or every feature has been tried (with `min_samples_leaf = 1` that is
/// sklearn's "at least one non-constant feature" rule).
#[allow(clippy::too_many_arguments)]
fn best_split(
    data: &Dataset,
    p: &Resolved,
    weight: &[f64],
    node: &[usize],
    (w, w1): (f64, f64),
    features: &mut [usize],
    buf: &mut Vec<(f64, usize)>,
    rng: &mut ChaCha8Rng,
) -> Option<Split> {
    let m = node.len();
    let n_features = features.len();
    let mut best: Option<Split> = None;
    for i in 0..n_features {
        if i >= p.max_features && best.is_some() {
            break;
        }
        // Partial Fisher–Yates: draw the next feature uniformly from those not yet tried.
        let j = rng.random_range(i..n_features);
        features.swap(i, j);
        let f = features[i];
        let col = &data.cols[f];
        let (lo, hi) = node
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &s| {
                (lo.min(col[s]), hi.max(col[s]))
            });
        if hi <= lo + FEATURE_THRESHOLD {
            continue; // constant in this node
        }
        buf.clear();
        buf.extend(node.iter().map(|&s| (col[s], s)));
        buf.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let (mut wl, mut wl1) = (0.0, 0.0);
        for pos in 1..m {
            let s = buf[pos - 1].1;
            wl += weight[s];
            if data.y[s] {
                wl1 += weight[s];
            }
            if buf[pos].0 <= buf[pos - 1].0 + FEATURE_THRESHOLD {
                continue;
            }
            if pos < p.min_samples_leaf || m - pos < p.min_samples_leaf {
                continue;
            }
            let (wr, wr1) = (w - wl, w1 - wl1);
            if wl <= 0.0 || wr <= 0.0 {
                continue;
            }
            let (wl0, wr0) = (wl - wl1, wr - wr1);
            // Maximising Σ_child Σ_c w_c² / w_child  ⇔  minimising Σ_child w_child·gini_child.
            let proxy = (wl1 * wl1 + wl0 * wl0) / wl + (wr1 * wr1 + wr0 * wr0) / wr;
            if best.as_ref().is_none_or(|b| proxy > b.proxy) {
                let (a, b) = (buf[pos - 1].0, buf[pos].0);
                let mut threshold = a / 2.0 + b / 2.0;
                if threshold == b || !threshold.is_finite() {
                    threshold = a;
                }
                best = Some(Split {
                    feature: f,
                    threshold,
                    proxy,
                    w_left: wl,
                    w1_left: wl1,
                });
            }
        }
    }
    best
}

impl ForestParams {
    /// Resolve and check the parameters for data with `n_features` columns.
    fn resolve(&self, n_features: usize) -> Result<Resolved> {
        if self.n_trees == 0 {
            return Err(Error::config("n_trees", "must be at least 1"));
        }
        if self.max_depth == Some(0) {
            return Err(Error::config(
                "max_depth",
                "must be at least 1 (or unset for unlimited)",
            ));
        }
        if self.min_samples_split < 2 {
            return Err(Error::config("min_samples_split", "must be at least 2"));
        }
        if self.min_samples_leaf < 1 {
            return Err(Error::config("min_samples_leaf", "must be at least 1"));
        }
        Ok(Resolved {
            max_depth: self.max_depth.unwrap_or(usize::MAX),
            max_features: self.max_features.resolve(n_features)?,
            min_samples_split: self.min_samples_split,
            min_samples_leaf: self.min_samples_leaf,
            bootstrap: self.bootstrap,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fitness::discriminator::MaxFeatures;

    fn params(n_trees: usize) -> ForestParams {
        ForestParams {
            n_trees,
            ..ForestParams::default()
        }
    }

    #[test]
    fn single_tree_without_bootstrap_fits_training_data_exactly() {
        // XOR-like data: separable only with two levels of splits.
        let x: Vec<Vec<f64>> = vec![
            vec![0.0, 0.0],
            vec![0.0, 1.0],
            vec![1.0, 0.0],
            vec![1.0, 1.0],
        ];
        let y = vec![false, true, true, false];
        let p = ForestParams {
            n_trees: 1,
            bootstrap: false,
            max_features: MaxFeatures::All,
            max_depth: None,
            ..ForestParams::default()
        };
        let f = RandomForest::fit(&x, &y, &p).unwrap();
        assert_eq!(f.predict_proba(&x), vec![0.0, 1.0, 1.0, 0.0]);
        let t = &f.trees()[0];
        assert_eq!(t.depth(), 2);
        assert_eq!(t.n_leaves(), 4);
        // Midpoint thresholds.
        assert_eq!(t.threshold[0], 0.5);
        // Pre-order layout: left child is id + 1.
        assert_eq!(t.left[0], 1);
    }

    #[test]
    fn weighted_leaf_fraction_uses_balanced_class_weights() {
        // Identical rows, so the root cannot split: the single leaf holds the weighted
        // class-1 fraction. 1 human vs 3 simulator rows: weights 4/2=2 and 4/6, so
        // 1·2 / (1·2 + 3·(2/3)) = 0.5 with balanced weights, 0.25 without.
        let x = vec![vec![1.0]; 4];
        let y = vec![true, false, false, false];
        let mut p = ForestParams {
            n_trees: 1,
            bootstrap: false,
            ..ForestParams::default()
        };
        let f = RandomForest::fit(&x, &y, &p).unwrap();
        assert!((f.predict_proba(&[vec![1.0]])[0] - 0.5).abs() < 1e-12);
        assert_eq!(f.trees()[0].n_nodes(), 1);
        assert_eq!(f.feature_importances(), vec![0.0]);
        p.balanced = false;
        let f = RandomForest::fit(&x, &y, &p).unwrap();
        assert!((f.predict_proba(&[vec![1.0]])[0] - 0.25).abs() < 1e-12);
    }

    #[test]
    fn max_depth_is_respected_and_importance_goes_to_the_informative_feature() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let x: Vec<Vec<f64>> = (0..400)
            .map(|_| (0..5).map(|_| rng.random::<f64>()).collect())
            .collect();
        let y: Vec<bool> = x.iter().map(|r| r[2] > 0.5).collect();
        let p = ForestParams {
            max_depth: Some(3),
            ..params(20)
        };
        let f = RandomForest::fit(&x, &y, &p).unwrap();
        assert!(f.trees().iter().all(|t| t.depth() <= 3));
        let imp = f.feature_importances();
        assert!((imp.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let top = (0..5).max_by(|&a, &b| imp[a].total_cmp(&imp[b])).unwrap();
        assert_eq!(top, 2, "importances {imp:?}");
        assert!(imp[2] > 0.5);
    }

    #[test]
    fn unlimited_depth_trees_are_pure() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let x: Vec<Vec<f64>> = (0..200)
            .map(|_| (0..4).map(|_| rng.random::<f64>()).collect())
            .collect();
        let y: Vec<bool> = (0..200).map(|_| rng.random::<bool>()).collect();
        let p = ForestParams {
            max_depth: None,
            ..params(5)
        };
        let f = RandomForest::fit(&x, &y, &p).unwrap();
        for t in f.trees() {
            for id in 0..t.n_nodes() {
                if t.left[id] == 0 {
                    assert!(t.value[id] == 0.0 || t.value[id] == 1.0);
                }
            }
        }
    }

    #[test]
    fn constant_features_are_skipped_when_drawing() {
        // Only feature 7 of 9 varies; with max_features = 1 a tree must still find it.
        let x: Vec<Vec<f64>> = (0..50)
            .map(|i| {
                let mut r = vec![3.0; 9];
                r[7] = i as f64;
                r
            })
            .collect();
        let y: Vec<bool> = (0..50).map(|i| i >= 25).collect();
        let p = ForestParams {
            max_features: MaxFeatures::Count(1),
            ..params(10)
        };
        let f = RandomForest::fit(&x, &y, &p).unwrap();
        assert!(f.trees().iter().all(|t| t.n_nodes() > 1));
        assert_eq!(f.feature_importances()[7], 1.0);
    }

    #[test]
    fn rejects_bad_input() {
        let p = params(3);
        assert!(matches!(
            RandomForest::fit(&[], &[], &p),
            Err(Error::Insufficient(_))
        ));
        assert!(matches!(
            RandomForest::fit(&[vec![1.0], vec![2.0]], &[true, true], &p),
            Err(Error::Insufficient(_))
        ));
        let e = RandomForest::fit(&[vec![1.0], vec![f64::NAN]], &[true, false], &p).unwrap_err();
        assert!(e.to_string().contains("row 1"), "{e}");
        let e = RandomForest::fit(&[vec![1.0], vec![2.0, 3.0]], &[true, false], &p).unwrap_err();
        assert!(e.to_string().contains("row 1"), "{e}");
        let bad = ForestParams {
            n_trees: 0,
            ..params(1)
        };
        assert!(matches!(
            RandomForest::fit(&[vec![1.0], vec![2.0]], &[true, false], &bad),
            Err(Error::Config { .. })
        ));
    }

    #[test]
    fn trees_serialise_as_flat_arrays() {
        let x = vec![vec![0.0, 5.0], vec![1.0, 5.0], vec![2.0, 5.0]];
        let p = ForestParams {
            bootstrap: false,
            ..params(1)
        };
        let f = RandomForest::fit(&x, &[false, false, true], &p).unwrap();
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(
            v["trees"][0],
            serde_json::json!({
                "feature": [0, 0, 0],
                "threshold": [1.5, 0.0, 0.0],
                "left": [1, 0, 0],
                "right": [2, 0, 0],
                "value": [0.5, 0.0, 1.0],
            })
        );
        assert_eq!(v["n_features"], 2);
        assert_eq!(v["importances"], serde_json::json!([1.0, 0.0]));
    }

    #[test]
    fn validate_catches_cycles_and_bad_features() {
        let x = vec![vec![0.0], vec![1.0]];
        let p = ForestParams {
            bootstrap: false,
            ..params(1)
        };
        let f = RandomForest::fit(&x, &[false, true], &p).unwrap();
        assert_eq!(f.trees()[0].n_nodes(), 3);
        assert!(f.validate().is_ok());
        let mut cyc = f.clone();
        cyc.trees[0].left[0] = 0;
        cyc.trees[0].right[0] = 0;
        cyc.trees[0].left[1] = 1;
        cyc.trees[0].right[1] = 2;
        assert!(cyc.validate().is_err());
        let mut feat = f.clone();
        feat.trees[0].feature[0] = 5;
        assert!(feat.validate().is_err());
        let mut short = f.clone();
        short.trees[0].threshold.pop();
        assert!(short.validate().is_err());
        let mut prob = f;
        prob.trees[0].value[2] = 1.5;
        assert!(prob.validate().is_err());
    }
}
