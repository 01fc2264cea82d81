//! Repair of a structured mutator answer cut off by the completion cap (issue #34 item 4):
//! `edits::parse_answer` on answers of 1, 3 and 7 MB, salvaged (many whole edits, then a cut)
//! and rejected (one edit, cut, holding `}` in its text), against the previous implementation,
//! which parsed the prefix at every `}` (quadratic), on 256 KB. Run: `cargo bench --bench
//! cut_answer`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ppol::evolve::mutation::edits::parse_answer;
use serde_json::Value;

/// Many whole edits, then one cut in the middle: salvaged.
fn salvageable(bytes: usize) -> String {
    let edit = r#"{"op": "set", "target": "style.greeting", "text": "Say hi } and { go ] on."}, "#;
    let mut s = String::from(r#"{"idea": "terser users", "edits": ["#);
    while s.len() < bytes {
        s.push_str(edit);
    }
    s.push_str(r#"{"op": "set", "target": "x", "text": "cut her"#);
    s
}

/// One edit whose text (full of `}`) is cut: no whole edit, rejected.
fn hopeless(bytes: usize) -> String {
    let mut s = String::from(r#"{"idea": "x", "edits": [{"op": "set", "target": "a", "text": ""#);
    while s.len() < bytes {
        s.push_str("} ");
    }
    s
}

/// The repair before issue #34: the prefix up to every `}` after the list opened, closed and
/// parsed, from the end (for comparison only).
fn previous(t: &str) -> Option<Value> {
    let start = t.find('{')?;
    let body = &t[start..];
    let list = body.find("\"edits\"")?;
    for (i, _) in body.rmatch_indices('}') {
        if i < list {
            break;
        }
        let closed = format!("{}]}}", &body[..=i]);
        if let Ok(v) = serde_json::from_str::<Value>(&closed) {
            if v["edits"].as_array().is_some_and(|e| !e.is_empty()) {
                return Some(v);
            }
        }
    }
    None
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("cut_answer");
    g.sample_size(10);
    for mb in [1usize, 3, 7] {
        let ok = salvageable(mb << 20);
        assert!(parse_answer(&ok).is_ok_and(|v| v["cut_off"] == true));
        g.throughput(Throughput::Bytes(ok.len() as u64));
        g.bench_function(format!("salvaged/{mb}MB"), |b| b.iter(|| parse_answer(&ok)));
        let bad = hopeless(mb << 20);
        assert!(parse_answer(&bad).is_err());
        g.throughput(Throughput::Bytes(bad.len() as u64));
        g.bench_function(format!("rejected/{mb}MB"), |b| {
            b.iter(|| parse_answer(&bad))
        });
    }
    let small = hopeless(256 << 10);
    g.throughput(Throughput::Bytes(small.len() as u64));
    g.bench_function("rejected/256KB/now", |b| b.iter(|| parse_answer(&small)));
    g.bench_function("rejected/256KB/previous", |b| b.iter(|| previous(&small)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
