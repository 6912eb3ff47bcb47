//! Workloads and baselines for the Row Identity V2 benchmarks (`benches/codec.rs`).
//!
//! Every workload is one identity's worth of fields, held in owned form so each scheme reads
//! the same values:
//!
//! - **V2**: `rowid_codec::encode_identity` into a reused buffer (the extension's path:
//!   typed values in a slice), and the typed pushes ([`typed::encode`]: what a Rust caller
//!   that knows its key's types writes);
//! - **V1** (baseline a): pg_trickle's first scheme, each field formatted as PostgreSQL text,
//!   then XXH3-64 over a framing of version, count and per-field length + bytes
//!   ([`v1::hash`]);
//! - **memcomparable** (baseline b): the `memcomparable` serde format of equivalent Rust
//!   values, each field as an `Option` (so NULL framing costs the same), into a reused
//!   buffer ([`memcmp::encode`]);
//! - **copy** (baseline c, the floor): the fields' raw bytes appended to a reused buffer.

// Benchmark fixtures: a malformed constant workload is a programming error, reported loudly.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

pub mod memcmp;
pub mod typed;
pub mod v1;
pub mod workload;

pub use workload::{Field, Workload, workloads};
