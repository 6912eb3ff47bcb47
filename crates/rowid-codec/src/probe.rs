//! Probe V1: the bounded B-tree key derived from a complete identity (spec/probe.md).
//!
//! The probe is an index accelerator, never an identity: inline probes equal the identity,
//! overflow probes are `id[0..P] || xxh3_128(id)`, and every match is rechecked against the
//! complete identity.

use alloc::vec::Vec;

use xxhash_rust::xxh3::xxh3_128_with_seed;

/// XXH3-128 seed of probe V1 (spec/probe.md §2).
pub const PROBE_V1_SEED: u64 = 0x9E37_79B1_85EB_CA87;

/// Digest bytes appended to an overflow probe.
pub const PROBE_DIGEST_LEN: usize = 16;

/// The prefix length P of probe V1: **64**, frozen by spec/probe.md §4 after the benchmark
/// matrix compared 32, 64, 128 and 256 bytes (`cargo xtask bench`, benches/RESULTS.md §4).
/// Vectors cover all four candidates.
pub const PROBE_V1_PREFIX_LEN: usize = 64;

/// Prefix lengths the vectors and tests cover.
pub const PROBE_PREFIX_CANDIDATES: [usize; 4] = [32, 64, 128, 256];

/// Longest probe for prefix length `p`: `p + 16`.
pub const fn max_probe_len(p: usize) -> usize {
    p + PROBE_DIGEST_LEN
}

/// The 16-byte digest: XXH3-128 with [`PROBE_V1_SEED`], low 64 bits big-endian then high 64
/// bits big-endian (spec/probe.md §2).
pub fn probe_digest(id: &[u8]) -> [u8; PROBE_DIGEST_LEN] {
    let h = xxh3_128_with_seed(id, PROBE_V1_SEED);
    let mut out = [0u8; PROBE_DIGEST_LEN];
    out[..8].copy_from_slice(&(h as u64).to_be_bytes());
    out[8..].copy_from_slice(&((h >> 64) as u64).to_be_bytes());
    out
}

/// Appends the probe of `id` for prefix length `p` to `out` (spec/probe.md §3). Defined for
/// every byte string, valid identity or not, so it can serve as an IMMUTABLE index
/// expression that never fails.
pub fn probe_with_prefix(id: &[u8], p: usize, out: &mut Vec<u8>) {
    if id.len() <= p {
        out.extend_from_slice(id);
    } else {
        out.reserve(p + PROBE_DIGEST_LEN);
        out.extend_from_slice(&id[..p]);
        out.extend_from_slice(&probe_digest(id));
    }
}

/// Appends the probe V1 of `id` with [`PROBE_V1_PREFIX_LEN`] to `out`.
pub fn probe_v1(id: &[u8], out: &mut Vec<u8>) {
    probe_with_prefix(id, PROBE_V1_PREFIX_LEN, out)
}

/// How logs and errors name an identity (design proposal §11.1): its length and the first
/// four bytes of its probe digest, `len=17 fp=1a2b3c4d`; never its bytes, which hold the
/// source's values. `pgtrickle.row_id_fingerprint` prints the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    len: usize,
    digest: [u8; 4],
}

impl Fingerprint {
    /// The fingerprint of `id`.
    pub fn of(id: &[u8]) -> Fingerprint {
        let d = probe_digest(id);
        Fingerprint {
            len: id.len(),
            digest: [d[0], d[1], d[2], d[3]],
        }
    }
}

impl core::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let [a, b, c, d] = self.digest;
        write!(f, "len={} fp={a:02x}{b:02x}{c:02x}{d:02x}", self.len)
    }
}

/// Test support: the probe `id` would have if its digest were `digest`. Lets tests force
/// equal probes for distinct identities and prove that matching still rechecks the complete
/// identity. Not part of the format.
#[cfg(any(test, feature = "testing"))]
pub fn probe_with_forced_digest(id: &[u8], p: usize, digest: [u8; 16], out: &mut Vec<u8>) {
    if id.len() <= p {
        out.extend_from_slice(id);
    } else {
        out.extend_from_slice(&id[..p]);
        out.extend_from_slice(&digest);
    }
}
