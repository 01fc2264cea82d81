//! Random seeds (not the seed programs of `seeds/`): every random choice in ppol derives from
//! one root seed, each part through its own stream ([`derive_seed`]), each item through
//! [`mix`]. Same seed, same run.

/// Derive a sub-seed (SplitMix64 of the pair).
pub fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed
        ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(0x632B_E59B_D9B4_E019);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A per-name seed derived from the root seed (each part of a run gets its own stream).
pub fn derive_seed(root: u64, part: &str) -> u64 {
    part.bytes().fold(mix(root, 0), |acc, b| mix(acc, b as u64))
}
