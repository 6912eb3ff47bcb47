//! V2 through the typed pushes (`IdentityEncoder::int8` and its siblings): what a Rust caller
//! that knows its key's types writes. The dispatch on [`Field`] here mirrors the one
//! [`crate::memcmp::encode`] does before calling memcomparable's typed serialiser, so the two
//! typed contenders read the same input the same way.

use rowid_codec::{Digits, Domain, IdentityEncoder, Interval, Numeric, Result};

use crate::workload::{Field, Workload};

/// Appends `w`'s identity to `buf` (cleared first) and returns its length.
pub fn encode(w: &Workload, buf: &mut Vec<u8>) -> Result<usize> {
    buf.clear();
    let mut enc = IdentityEncoder::begin(buf, Domain::ScanKey, w.fields.len() as u32)?;
    for f in &w.fields {
        match f {
            Field::Int4(v) => enc.int4(*v)?,
            Field::Int8(v) => enc.int8(*v)?,
            Field::Uuid(u) => enc.uuid(*u)?,
            Field::Text(s) => enc.text(s.as_bytes())?,
            Field::Numeric { parsed, .. } => enc.numeric(Numeric {
                sign: parsed.sign,
                weight: parsed.weight,
                digits: Digits::native(&parsed.digits),
            })?,
            Field::Interval(m, d, t) => enc.interval(Interval::from_fields(*m, *d, *t))?,
            Field::Bool(b) => enc.bool(*b)?,
            Field::Timestamptz(t) => enc.timestamptz(*t)?,
            Field::Float8(x) => enc.float8(*x)?,
            Field::Date(d) => enc.date(*d)?,
            Field::Null(tag) => enc.null(*tag)?,
        }
    }
    enc.finish()
}
