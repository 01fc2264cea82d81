//! Criterion benchmarks of fingerprinting, on the shipped demo human traces (and on the τ-USI
//! sample in ../shared when present). Run: `cargo bench --bench fingerprint`.
//! The side-by-side ratio against the reference package is `ppol bench fingerprint`.

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ppol::fitness::features::{fingerprint, fingerprint_many, FeatureSet};
use ppol::fitness::traces::{load, LoadOptions};

fn bench(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut inputs = vec![("demo_human", root.join("fitness/demo/human.jsonl"))];
    let shared = root.join("../shared/human/tau_usi_airline_sample.jsonl");
    if shared.exists() {
        inputs.push(("tau_usi_sample", shared));
    }
    for (name, path) in inputs {
        let ds = load(&path, &LoadOptions::default()).expect("load traces");
        let mut g = c.benchmark_group(format!("fingerprint/{name}"));
        g.throughput(Throughput::Elements(ds.len() as u64));
        for set in FeatureSet::ALL {
            g.bench_function(format!("{set}/parallel"), |b| {
                b.iter(|| fingerprint_many(&ds, set))
            });
            g.bench_function(format!("{set}/one_core"), |b| {
                b.iter(|| ds.iter().map(|d| fingerprint(d, set)).collect::<Vec<_>>())
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
