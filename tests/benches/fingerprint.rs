//! Criterion benchmarks of fingerprinting and of loading traces, on the shipped demo human
//! traces (and on the τ-USI sample in ../shared when present). Run: `cargo bench --bench fingerprint`.
//! The side-by-side ratios against the reference package (kernel and end to end) are
//! `ppol bench fingerprint`.

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ppol::fitness::features::{fingerprint, fingerprint_many, FeatureSet};
use ppol::fitness::traces::{load, parse, parse_user_turns, LoadOptions};

fn bench(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut inputs = vec![("demo_human", root.join("fitness/demo/human.jsonl"))];
    let shared = root.join("../shared/human/tau_usi_airline_sample.jsonl");
    if shared.exists() {
        inputs.push(("tau_usi_sample", shared));
    }
    let opts = LoadOptions::default();
    for (name, path) in inputs {
        let ds = load(&path, &opts).expect("load traces");
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

        // Loading: the file repeated to at least 3,000 dialogues, parsed from memory.
        let text = std::fs::read_to_string(&path).expect("read traces");
        let text = text.repeat(3000usize.div_ceil(ds.len()));
        let mut g = c.benchmark_group(format!("load/{name}_3000"));
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.sample_size(20);
        g.bench_function("everything", |b| {
            b.iter(|| parse(&text, &path, &opts).expect("parse"))
        });
        g.bench_function("user_turns", |b| {
            b.iter(|| parse_user_turns(&text, &path, &opts).expect("parse"))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
