//! Criterion benchmarks of the codec (RESULTS.md §1): for every workload, V2 encode (the
//! general `encode_identity` and the typed pushes), V2 decode (owned, and the borrowing
//! field iterator) and probe, against the V1 text+XXH3 scheme, `memcomparable` and a plain
//! copy, all in one run. `cargo xtask bench` reads the medians and reports ns/identity and
//! ratios.
//!
//! Every contender gets its input prepared before its timed loop and passed through
//! `black_box`, and returns its result through `black_box`; `harness` times an empty closure
//! the same way, which is what the loop itself costs.

// Bench code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rowid_benches::{memcmp, typed, v1, workloads};
use rowid_codec::decode::fields;
use rowid_codec::probe::probe_v1;
use rowid_codec::{Domain, decode, encode_identity};

fn codec(c: &mut Criterion) {
    for w in workloads() {
        let mut g = c.benchmark_group(w.name);
        let values = w.values();
        g.bench_function("harness", |b| b.iter(|| black_box(())));
        // Inputs are prepared here, not by a timed loop, so that any filter works.
        let mut id = Vec::new();
        encode_identity(&mut id, Domain::ScanKey, &values).unwrap();
        let mut tbuf = Vec::with_capacity(8192);
        typed::encode(&w, &mut tbuf).unwrap();
        assert_eq!(tbuf, id, "{}: typed pushes write other bytes", w.name);
        let mut buf = Vec::with_capacity(8192);
        g.bench_function("v2_encode", |b| {
            b.iter(|| {
                buf.clear();
                black_box(encode_identity(&mut buf, Domain::ScanKey, black_box(&values)).unwrap())
            })
        });
        g.bench_function("v2_typed", |b| {
            b.iter(|| black_box(typed::encode(black_box(&w), &mut tbuf).unwrap()))
        });
        g.bench_function("v2_decode", |b| {
            b.iter(|| black_box(decode(black_box(&id)).unwrap()))
        });
        g.bench_function("v2_decode_borrowed", |b| {
            b.iter(|| {
                let mut payload_bytes = 0usize;
                for f in fields(black_box(&id)).unwrap() {
                    payload_bytes += f.unwrap().payload.map_or(0, <[u8]>::len);
                }
                black_box(payload_bytes)
            })
        });
        let mut probe = Vec::with_capacity(256);
        g.bench_function("v2_probe", |b| {
            b.iter(|| {
                probe.clear();
                probe_v1(black_box(&id), &mut probe);
                black_box(probe.len())
            })
        });
        let mut scratch = v1::Scratch::default();
        g.bench_function("v1_text_xxh3", |b| {
            b.iter(|| black_box(v1::hash(black_box(&w), &mut scratch)))
        });
        let mut mc = Vec::with_capacity(8192);
        g.bench_function("memcomparable", |b| {
            b.iter(|| black_box(memcmp::encode(black_box(&w), &mut mc)))
        });
        let mut copy = Vec::with_capacity(8192);
        g.bench_function("copy", |b| {
            b.iter(|| {
                copy.clear();
                for r in black_box(&w.raw) {
                    copy.extend_from_slice(r);
                }
                black_box(copy.len())
            })
        });
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = codec
}
criterion_main!(benches);
