//! Baseline (b): the `memcomparable` crate on equivalent inputs. Each field is serialised as
//! an `Option` of its closest Rust value (so NULL framing costs as in V2); the serialiser
//! writes into a reused buffer.
//!
//! Equivalence is as close as memcomparable allows: an interval is its (months, days,
//! microseconds) triple (memcomparable has no 128-bit comparison value), a timestamptz or
//! date its integer, a numeric a `memcomparable::Decimal` of at most 28 digits.

use memcomparable::Serializer;
use serde::Serialize;

use crate::workload::{Field, Workload};

/// Serialises `w` into `buf` (cleared first) and returns the byte count.
pub fn encode(w: &Workload, buf: &mut Vec<u8>) -> usize {
    let mut out = std::mem::take(buf);
    out.clear();
    let mut ser = Serializer::new(out);
    for f in &w.fields {
        let ok = match f {
            Field::Int4(v) | Field::Date(v) => Some(*v).serialize(&mut ser),
            Field::Int8(v) | Field::Timestamptz(v) => Some(*v).serialize(&mut ser),
            Field::Uuid(u) => Some(u128::from_be_bytes(*u)).serialize(&mut ser),
            Field::Text(s) => Some(s.as_str()).serialize(&mut ser),
            Field::Numeric { decimal, .. } => {
                // Option framing by hand: the decimal has its own serialiser entry point.
                true.serialize(&mut ser).and_then(|()| {
                    ser.serialize_decimal(memcomparable::Decimal::Normalized(*decimal))
                })
            }
            Field::Interval(m, d, t) => Some((*m, *d, *t)).serialize(&mut ser),
            Field::Bool(b) => Some(*b).serialize(&mut ser),
            Field::Float8(x) => Some(*x).serialize(&mut ser),
            Field::Null(_) => None::<u8>.serialize(&mut ser),
        };
        debug_assert!(ok.is_ok());
    }
    *buf = ser.into_inner();
    buf.len()
}
