//! TEMPORARY local stand-in (not committed); replaced by the forest branch's k-means.
#![allow(missing_docs)]
pub fn kmeans(_p: &[Vec<f64>], _k: usize, _n: usize, _s: u64) -> crate::Result<Vec<Vec<f64>>> {
    Err(crate::Error::Insufficient("kmeans not merged yet".into()))
}
