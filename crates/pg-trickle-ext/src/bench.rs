//! Benchmark baselines, compiled only with the `bench` feature (never in the default build):
//! `cargo xtask bench` installs such a build into its own throwaway cluster.
//!
//! - `pgtrickle.bench_v1_hash(text[])`: pg_trickle's V1 row identity (the
//!   `pg_trickle_hash_multi` scheme): XXH3-64 with seed `0x517cc1b727220a95` over
//!   `version u16 | count u64 | (len u64 | text bytes)*`, a NULL element being the length
//!   `u64::MAX` (little-endian), called on `ARRAY[a::text, b::text, ...]`.
//! - `pgtrickle.bench_row_probe(bytea, int)`: the probe with prefix length P (the candidates
//!   compared before P is frozen, spec/probe.md).
//! - `pgtrickle.bench_capture_floor()`: the capture trigger writing one fixed identity for
//!   every row (the same rows without computing any identity: the floor of trigger capture).

#[pgrx::pg_schema]
mod pgtrickle {
    use pgrx::prelude::*;

    /// The V1 hash of the text forms of a row's fields.
    #[pg_extern(immutable, parallel_safe, strict)]
    fn bench_v1_hash(fields: Array<'_, &str>) -> i64 {
        let mut framed = Vec::with_capacity(64);
        framed.extend_from_slice(&1u16.to_le_bytes());
        framed.extend_from_slice(&(fields.len() as u64).to_le_bytes());
        for f in fields.iter() {
            match f {
                Some(text) => {
                    framed.extend_from_slice(&(text.len() as u64).to_le_bytes());
                    framed.extend_from_slice(text.as_bytes());
                }
                None => framed.extend_from_slice(&u64::MAX.to_le_bytes()),
            }
        }
        xxhash_rust::xxh3::xxh3_64_with_seed(&framed, 0x517c_c1b7_2722_0a95) as i64
    }

    /// The probe of `id` with prefix length `p` (one of 32, 64, 128, 256).
    #[pg_extern(immutable, parallel_safe, strict)]
    fn bench_row_probe(id: &[u8], p: i32) -> Vec<u8> {
        let Some(p) = usize::try_from(p)
            .ok()
            .filter(|p| rowid_codec::probe::PROBE_PREFIX_CANDIDATES.contains(p))
        else {
            crate::errors::invalid_argument(
                "pgtrickle.bench_row_probe",
                "P must be 32, 64, 128 or 256".into(),
            );
        };
        let mut out = Vec::with_capacity(id.len().min(p + 16));
        rowid_codec::probe::probe_with_prefix(id, p, &mut out);
        out
    }
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION pgtrickle.bench_capture_floor() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'bench_capture_floor';
"#,
    name = "bench_capture_floor",
    requires = ["capture_changes"]
);
