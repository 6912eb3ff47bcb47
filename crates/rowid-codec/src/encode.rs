//! The encoder: typed values in, identity bytes appended to a caller-owned buffer
//! (spec/wire-format.md §3–§6).
//!
//! This file holds the identity framing and the recursive core (the payload dispatch and the
//! structural writers, whose elements are payloads again); the leaf writers of the scalar
//! families are in `encode/scalar.rs`. The encoder reads only the shared vocabulary (tags,
//! primitives, scalar facts, structure, values), never the decoder.

mod scalar;

use alloc::vec::Vec;

pub use scalar::{float4_key, float8_key};

use crate::error::{Error, Limit, Result};
use crate::limits::{MAX_DEPTH, MAX_FIELDS, MAX_IDENTITY_LEN};
use crate::primitives::{flip_i16, flip_i32, flip_i64, flip_i128, put_escaped};
use crate::scalar::{ChildIdentity, Interval, Numeric, NumericSign};
use crate::structure::{
    ITEM_NULL, ITEM_VALUE, LIST_END, array_shape_error, bound, check_count, check_depth, jsonb_tag,
    key_order, range_state,
};
use crate::tag::{Domain, NULL_STATE, TUPLE_END, TypeTag, VALUE_STATE, VERSION_V2};
use crate::value::{
    ArrayValue, DecodedIdentity, JsonbValue, MultirangeValue, OwnedValue, RangeBound, RangeBounds,
    RangeValue, RecordValue, Value,
};

/// Bytes reserved per declared field when an identity begins: the widest fixed-width field
/// (tag, state and a 16-byte payload), so a key of fixed-width fields is written without
/// growing the buffer. Wider fields grow it as they are written.
const RESERVE_PER_FIELD: usize = 18;

/// Fields covered by the reservation; a wide row reserves no more than this many.
const RESERVE_FIELDS: usize = 16;

/// Writes identities into a caller-owned buffer, one field at a time (spec §3).
///
/// The buffer is appended to, never cleared, so one scratch buffer serves every row of a
/// call site. If a field fails to encode, its partial bytes are removed and the field is not
/// counted; [`IdentityEncoder::finish`] then fails with a count mismatch unless the caller
/// supplies the field again. On any error from `finish` the buffer is restored to its length
/// before [`IdentityEncoder::begin`].
///
/// ```
/// use rowid_codec::{Domain, IdentityEncoder, Value};
/// let mut buf = Vec::new();
/// let mut enc = IdentityEncoder::begin(&mut buf, Domain::ScanKey, 1).unwrap();
/// enc.value(&Value::Int4(42)).unwrap();
/// enc.finish().unwrap();
/// assert_eq!(buf, [0x02, 0x01, 0, 0, 0, 1, 0x03, 0x01, 0x80, 0, 0, 0x2A, 0xFF]);
/// ```
#[derive(Debug)]
pub struct IdentityEncoder<'b> {
    buf: &'b mut Vec<u8>,
    start: usize,
    declared: u32,
    written: u32,
}

/// Typed pushes: one method per common family, each the field writer applied to a value
/// whose family is known where it is called, so the dispatch on the family folds away.
macro_rules! typed_pushes {
    ($( $(#[$doc:meta])* $method:ident($ty:ty) => $variant:ident; )*) => {
        $(
            $(#[$doc])*
            #[inline]
            pub fn $method(&mut self, v: $ty) -> Result<()> {
                self.value(&Value::$variant(v))
            }
        )*
    };
}

impl<'b> IdentityEncoder<'b> {
    /// Writes the header `VERSION | DOMAIN | FIELD_COUNT` (spec §3).
    #[inline]
    pub fn begin(buf: &'b mut Vec<u8>, domain: Domain, field_count: u32) -> Result<Self> {
        if field_count > MAX_FIELDS {
            return Err(Error::LimitExceeded {
                limit: Limit::FieldCount,
                value: field_count as usize,
            });
        }
        let start = buf.len();
        let fields = (field_count as usize).min(RESERVE_FIELDS);
        buf.reserve(6 + fields * RESERVE_PER_FIELD + 1);
        let c = field_count.to_be_bytes();
        buf.extend_from_slice(&[VERSION_V2, domain as u8, c[0], c[1], c[2], c[3]]);
        Ok(IdentityEncoder {
            buf,
            start,
            declared: field_count,
            written: 0,
        })
    }

    #[inline]
    fn next_index(&self) -> Result<u32> {
        if self.written >= self.declared {
            return Err(Error::FieldCountMismatch {
                declared: self.declared,
                actual: self.written + 1,
            });
        }
        Ok(self.written)
    }

    /// Writes a NULL field of type `tag` (spec §4).
    #[inline]
    pub fn null(&mut self, tag: TypeTag) -> Result<()> {
        self.next_index()?;
        self.buf.extend_from_slice(&[tag as u8, NULL_STATE]);
        self.written += 1;
        Ok(())
    }

    /// Writes a non-NULL field (spec §4, §5, §6).
    ///
    /// A fixed-width value is written in one step (tag, state and payload as one array);
    /// the other families go through the general payload writer. Always inlined: where the
    /// family is known (the typed pushes) the dispatch folds away.
    #[inline(always)]
    pub fn value(&mut self, value: &Value<'_>) -> Result<()> {
        let field = self.next_index()?;
        let buf = &mut *self.buf;
        fixed_width!(*value, |tag, payload| put_fixed(buf, tag, payload), other => {
            let mark = buf.len();
            buf.extend_from_slice(&[other.tag() as u8, VALUE_STATE]);
            if let Err(e) = put_variable(buf, field, &other, 1) {
                buf.truncate(mark);
                return Err(e);
            }
        });
        self.written += 1;
        Ok(())
    }

    typed_pushes! {
        /// Writes a non-NULL `bool` field.
        bool(bool) => Bool;
        /// Writes a non-NULL `int2` field.
        int2(i16) => Int2;
        /// Writes a non-NULL `int4` field.
        int4(i32) => Int4;
        /// Writes a non-NULL `int8` field.
        int8(i64) => Int8;
        /// Writes a non-NULL `oid` field.
        oid(u32) => Oid;
        /// Writes a non-NULL `float4` field (`-0` and every NaN canonicalised).
        float4(f32) => Float4;
        /// Writes a non-NULL `float8` field (`-0` and every NaN canonicalised).
        float8(f64) => Float8;
        /// Writes a non-NULL `uuid` field (16 bytes in network order).
        uuid([u8; 16]) => Uuid;
        /// Writes a non-NULL `date` field (days since 2000-01-01).
        date(i32) => Date;
        /// Writes a non-NULL `timestamp` field (microseconds since 2000-01-01).
        timestamp(i64) => Timestamp;
        /// Writes a non-NULL `timestamptz` field (microseconds since 2000-01-01 UTC).
        timestamptz(i64) => Timestamptz;
        /// Writes a non-NULL `interval` field.
        interval(Interval) => Interval;
        /// Writes a non-NULL `macaddr` field.
        macaddr([u8; 6]) => Macaddr;
        /// Writes a non-NULL `macaddr8` field.
        macaddr8([u8; 8]) => Macaddr8;
        /// Writes a non-NULL `numeric` field.
        numeric(Numeric<'_>) => Numeric;
        /// Writes a non-NULL `text` field (database-encoding bytes without NUL).
        text(&[u8]) => Text;
        /// Writes a non-NULL `bytea` field.
        bytea(&[u8]) => Bytea;
    }

    /// Writes `value`, or a NULL of type `tag` when `value` is `None`.
    #[inline]
    pub fn field(&mut self, tag: TypeTag, value: Option<&Value<'_>>) -> Result<()> {
        match value {
            None => self.null(tag),
            Some(v) if v.tag() == tag => self.value(v),
            Some(_) => Err(Error::invalid_value(
                self.written,
                tag,
                "value does not match the field's declared type",
            )),
        }
    }

    /// Checks the field count, writes `TUPLE_END` and returns the identity's length.
    #[inline]
    pub fn finish(self) -> Result<usize> {
        if self.written != self.declared {
            let e = Error::FieldCountMismatch {
                declared: self.declared,
                actual: self.written,
            };
            self.buf.truncate(self.start);
            return Err(e);
        }
        self.buf.push(TUPLE_END);
        let len = self.buf.len() - self.start;
        if len > MAX_IDENTITY_LEN {
            self.buf.truncate(self.start);
            return Err(Error::LimitExceeded {
                limit: Limit::IdentityLength,
                value: len,
            });
        }
        Ok(len)
    }

    /// Drops the identity begun here: the buffer returns to its length before `begin`.
    #[inline]
    pub fn abandon(self) {
        self.buf.truncate(self.start);
    }
}

/// Appends one complete identity built from `fields` (each a type tag and an optional value)
/// to `buf` and returns its length. On error `buf` is left as it was.
#[inline]
pub fn encode_identity(
    buf: &mut Vec<u8>,
    domain: Domain,
    fields: &[(TypeTag, Option<Value<'_>>)],
) -> Result<usize> {
    let count = u32::try_from(fields.len()).unwrap_or(u32::MAX);
    let mut enc = IdentityEncoder::begin(buf, domain, count)?;
    for (tag, value) in fields {
        if let Err(e) = enc.field(*tag, value.as_ref()) {
            enc.abandon();
            return Err(e);
        }
    }
    enc.finish()
}

impl DecodedIdentity {
    /// Appends this identity's encoding to `buf`. For a decoded identity this reproduces the
    /// decoded bytes exactly (spec §8: every accepted identity is canonical).
    pub fn encode(&self, buf: &mut Vec<u8>) -> Result<usize> {
        let count = u32::try_from(self.fields.len()).unwrap_or(u32::MAX);
        let mut enc = IdentityEncoder::begin(buf, self.domain, count)?;
        for f in &self.fields {
            let value = f.value.as_ref().map(OwnedValue::as_value);
            if let Err(e) = enc.field(f.tag, value.as_ref()) {
                enc.abandon();
                return Err(e);
            }
        }
        enc.finish()
    }
}

/// Expands to a `match` on a [`Value`] that evaluates `$write` with `$tag` (the value's
/// [`TypeTag`]) and `$payload` (its payload as a byte array of the family's width) for every
/// fixed-width family (spec §5), and `$else` with the value bound to `$other` for the rest.
/// The one place that maps a fixed-width value to its payload bytes: the field writer, the
/// payload writer and the typed pushes all expand it.
macro_rules! fixed_width {
    ($value:expr, |$tag:ident, $payload:ident| $write:expr, $other:ident => $else:expr) => {
        match $value {
            Value::Bool(b) => fixed_width!(@ $tag, $payload, $write, Bool, [b as u8]),
            Value::Int2(v) => fixed_width!(@ $tag, $payload, $write, Int2, flip_i16(v)),
            Value::Int4(v) => fixed_width!(@ $tag, $payload, $write, Int4, flip_i32(v)),
            Value::Date(v) => fixed_width!(@ $tag, $payload, $write, Date, flip_i32(v)),
            Value::Int8(v) => fixed_width!(@ $tag, $payload, $write, Int8, flip_i64(v)),
            Value::Timestamp(v) => {
                fixed_width!(@ $tag, $payload, $write, Timestamp, flip_i64(v))
            }
            Value::Timestamptz(v) => {
                fixed_width!(@ $tag, $payload, $write, Timestamptz, flip_i64(v))
            }
            Value::Oid(v) => fixed_width!(@ $tag, $payload, $write, Oid, v.to_be_bytes()),
            Value::Float4(v) => fixed_width!(@ $tag, $payload, $write, Float4, float4_key(v)),
            Value::Float8(v) => fixed_width!(@ $tag, $payload, $write, Float8, float8_key(v)),
            Value::Uuid(u) => fixed_width!(@ $tag, $payload, $write, Uuid, u),
            Value::Interval(i) => {
                fixed_width!(@ $tag, $payload, $write, Interval, flip_i128(i.cmp_value()))
            }
            Value::Macaddr(m) => fixed_width!(@ $tag, $payload, $write, Macaddr, m),
            Value::Macaddr8(m) => fixed_width!(@ $tag, $payload, $write, Macaddr8, m),
            $other => $else,
        }
    };
    (@ $tag:ident, $payload:ident, $write:expr, $family:ident, $bytes:expr) => {{
        let $tag = TypeTag::$family;
        let $payload = $bytes;
        $write
    }};
}
use fixed_width;

/// Widest fixed-width payload (`uuid`, `interval`).
const MAX_FIXED_PAYLOAD: usize = 16;

/// Appends the field `TAG 01 payload` of a fixed-width value as one write: one capacity
/// check, and a copy whose length is a constant.
#[inline(always)]
fn put_fixed<const N: usize>(buf: &mut Vec<u8>, tag: TypeTag, payload: [u8; N]) {
    const { assert!(N <= MAX_FIXED_PAYLOAD) };
    let mut field = [0u8; 2 + MAX_FIXED_PAYLOAD];
    field[0] = tag as u8;
    field[1] = VALUE_STATE;
    field[2..2 + N].copy_from_slice(&payload);
    buf.extend_from_slice(&field[..2 + N]);
}

/// Writes `value`'s payload; `depth` is the nesting level of the identity or structure that
/// holds it (1 for a top-level field).
#[inline]
fn put_payload(buf: &mut Vec<u8>, field: u32, value: &Value<'_>, depth: u32) -> Result<()> {
    fixed_width!(*value, |_tag, payload| {
        buf.extend_from_slice(&payload);
        Ok(())
    }, other => put_variable(buf, field, &other, depth))
}

/// Writes the payload of a value that is not fixed-width (kept out of line, so the
/// fixed-width path stays small).
#[inline(never)]
fn put_variable(buf: &mut Vec<u8>, field: u32, value: &Value<'_>, depth: u32) -> Result<()> {
    match *value {
        Value::Numeric(ref n) => scalar::put_numeric(buf, field, n)?,
        Value::Text(s) | Value::Varchar(s) => scalar::put_text(buf, field, value.tag(), s)?,
        Value::Bpchar(s) => scalar::put_bpchar(buf, field, s)?,
        Value::Bytea(b) => put_escaped(buf, b),
        Value::Time(t) => scalar::put_time(buf, field, t)?,
        Value::Timetz(t) => scalar::put_timetz(buf, field, t)?,
        Value::Inet(ref n) => scalar::put_inet(buf, field, TypeTag::Inet, n)?,
        Value::Cidr(ref n) => scalar::put_inet(buf, field, TypeTag::Cidr, n)?,
        Value::Bit(ref b) => scalar::put_bits(buf, field, TypeTag::Bit, b)?,
        Value::Varbit(ref b) => scalar::put_bits(buf, field, TypeTag::Varbit, b)?,
        Value::Enum(label) => scalar::put_enum(buf, field, label)?,
        Value::Identity(child) => put_child(buf, child, depth)?,
        Value::Array(a) => put_array(buf, field, a, depth + 1)?,
        Value::Range(r) => put_range(buf, field, r, depth + 1)?,
        Value::Multirange(m) => put_multirange(buf, field, m, depth + 1)?,
        Value::Jsonb(j) => put_jsonb(buf, field, j, depth + 1)?,
        Value::Record(r) => put_record(buf, field, r, depth + 1)?,
        // Fixed-width values are written by `put_payload`; reaching here with one writes the
        // same bytes through it.
        _ => put_payload(buf, field, value, depth)?,
    }
    Ok(())
}

/// A child identity (spec §6.1): escaped and terminated; its depth counts toward the
/// holder's.
fn put_child(buf: &mut Vec<u8>, child: ChildIdentity<'_>, depth: u32) -> Result<()> {
    let total = depth + child.depth();
    if total > MAX_DEPTH {
        return Err(Error::LimitExceeded {
            limit: Limit::Depth,
            value: total as usize,
        });
    }
    put_escaped(buf, child.bytes());
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Structural payloads (spec §6.2–§6.7). Every writer takes `level`, the nesting level of the
// structure being written (a top-level field's structure has level 2), and checks it against
// `MAX_DEPTH` before writing anything. Elements are written by `put_payload`, so an element
// of any family, structural or not, is framed the same way.
// ---------------------------------------------------------------------------------------

/// Writes one element or bound value of declared type `tag`.
fn put_item(buf: &mut Vec<u8>, field: u32, tag: TypeTag, v: &OwnedValue, level: u32) -> Result<()> {
    let value = v.as_value();
    if value.tag() != tag {
        return Err(Error::invalid_value(
            field,
            tag,
            "a nested value does not match its declared type",
        ));
    }
    put_payload(buf, field, &value, level)
}

/// Array (spec §6.3): `ELEMENT_TAG (01 payload | 02)* 00 NDIMS len* lower*`.
fn put_array(buf: &mut Vec<u8>, field: u32, a: &ArrayValue, level: u32) -> Result<()> {
    check_depth(level)?;
    check_count(a.elements.len())?;
    if let Some(reason) = array_shape_error(&a.dims, a.elements.len()) {
        return Err(Error::invalid_value(field, TypeTag::Array, reason));
    }
    buf.push(a.element as u8);
    for e in &a.elements {
        match e {
            None => buf.push(ITEM_NULL),
            Some(v) => {
                buf.push(ITEM_VALUE);
                put_item(buf, field, a.element, v, level)?;
            }
        }
    }
    buf.push(LIST_END);
    buf.push(a.dims.len() as u8);
    for d in &a.dims {
        buf.extend_from_slice(&flip_i32(d.len));
    }
    for d in &a.dims {
        buf.extend_from_slice(&flip_i32(d.lower));
    }
    Ok(())
}

/// One bound: `00` (-infinity) or `02` (+infinity), or `01`, the value, and the inclusivity
/// byte, which sorts `[v` before `(v` and `v)` before `v]` (spec §6.4).
fn put_bound(
    buf: &mut Vec<u8>,
    field: u32,
    subtype: TypeTag,
    b: &RangeBound,
    lower: bool,
    level: u32,
) -> Result<()> {
    match b {
        RangeBound::Infinite => buf.push(if lower {
            bound::LOWER_INFINITE
        } else {
            bound::UPPER_INFINITE
        }),
        RangeBound::Inclusive(v) | RangeBound::Exclusive(v) => {
            buf.push(bound::FINITE);
            put_item(buf, field, subtype, v, level)?;
            let inclusive = matches!(b, RangeBound::Inclusive(_));
            buf.push(if inclusive == lower {
                bound::LOWER_INCLUSIVE_OR_UPPER_EXCLUSIVE
            } else {
                bound::LOWER_EXCLUSIVE_OR_UPPER_INCLUSIVE
            });
        }
    }
    Ok(())
}

/// `01 LOWER UPPER`: a non-empty range's bounds.
fn put_bounds(
    buf: &mut Vec<u8>,
    field: u32,
    subtype: TypeTag,
    b: &RangeBounds,
    level: u32,
) -> Result<()> {
    buf.push(range_state::BOUNDED);
    put_bound(buf, field, subtype, &b.lower, true, level)?;
    put_bound(buf, field, subtype, &b.upper, false, level)
}

/// Range (spec §6.4): `SUBTYPE_TAG (00 | 01 LOWER UPPER)`.
fn put_range(buf: &mut Vec<u8>, field: u32, r: &RangeValue, level: u32) -> Result<()> {
    check_depth(level)?;
    buf.push(r.subtype as u8);
    match &r.bounds {
        None => buf.push(range_state::EMPTY),
        Some(b) => put_bounds(buf, field, r.subtype, b, level)?,
    }
    Ok(())
}

/// Multirange (spec §6.5): `SUBTYPE_TAG (01 LOWER UPPER)* 00`.
fn put_multirange(buf: &mut Vec<u8>, field: u32, m: &MultirangeValue, level: u32) -> Result<()> {
    check_depth(level)?;
    check_count(m.ranges.len())?;
    buf.push(m.subtype as u8);
    for b in &m.ranges {
        put_bounds(buf, field, m.subtype, b, level)?;
    }
    buf.push(LIST_END);
    Ok(())
}

/// Composite (spec §6.7): `COUNT (uint16 BE) (TAG 01 payload | TAG 02)*`.
fn put_record(buf: &mut Vec<u8>, field: u32, r: &RecordValue, level: u32) -> Result<()> {
    check_depth(level)?;
    let n = r.fields.len();
    if n > MAX_FIELDS as usize {
        return Err(Error::LimitExceeded {
            limit: Limit::FieldCount,
            value: n,
        });
    }
    buf.extend_from_slice(&(n as u16).to_be_bytes());
    for f in &r.fields {
        buf.push(f.tag as u8);
        match &f.value {
            None => buf.push(ITEM_NULL),
            Some(v) => {
                buf.push(ITEM_VALUE);
                put_item(buf, field, f.tag, v, level)?;
            }
        }
    }
    Ok(())
}

/// jsonb (spec §6.6): one item, containers nested.
fn put_jsonb(buf: &mut Vec<u8>, field: u32, j: &JsonbValue, level: u32) -> Result<()> {
    check_depth(level)?;
    put_json_item(buf, field, j, level)
}

fn put_json_item(buf: &mut Vec<u8>, field: u32, j: &JsonbValue, level: u32) -> Result<()> {
    let bad = |reason| Error::invalid_value(field, TypeTag::Jsonb, reason);
    match j {
        JsonbValue::Null => buf.push(jsonb_tag::NULL),
        JsonbValue::Bool(false) => buf.push(jsonb_tag::FALSE),
        JsonbValue::Bool(true) => buf.push(jsonb_tag::TRUE),
        JsonbValue::String(s) => {
            buf.push(jsonb_tag::STRING);
            scalar::put_text(buf, field, TypeTag::Jsonb, s)?;
        }
        JsonbValue::Number(n) => {
            if !matches!(n.sign, NumericSign::Positive | NumericSign::Negative) {
                return Err(bad("a jsonb number is NaN or infinite"));
            }
            buf.push(jsonb_tag::NUMBER);
            scalar::put_numeric(buf, field, &n.as_numeric())?;
        }
        JsonbValue::Array(items) => {
            check_depth(level + 1)?;
            check_count(items.len())?;
            buf.push(jsonb_tag::ARRAY);
            for item in items {
                put_json_item(buf, field, item, level + 1)?;
            }
            buf.push(LIST_END);
        }
        JsonbValue::Object(pairs) => {
            check_depth(level + 1)?;
            check_count(pairs.len())?;
            if pairs
                .windows(2)
                .any(|w| key_order(&w[0].0, &w[1].0).is_ge())
            {
                return Err(bad(
                    "object keys are not unique and in jsonb order (length, then bytes)",
                ));
            }
            buf.push(jsonb_tag::OBJECT);
            for (k, v) in pairs {
                buf.push(ITEM_VALUE);
                scalar::put_text(buf, field, TypeTag::Jsonb, k)?;
                put_json_item(buf, field, v, level + 1)?;
            }
            buf.push(LIST_END);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::scalar::Interval;
    use alloc::vec;

    /// `encode_identity` appends to what the buffer holds, writes what the field-by-field
    /// encoder writes, and leaves the buffer untouched when it refuses an identity.
    #[test]
    fn encode_identity_appends_or_leaves_the_buffer_as_it_was() {
        let cases: [&[(TypeTag, Option<Value<'_>>)]; 4] = [
            &[(TypeTag::Int8, Some(Value::Int8(i64::MIN)))],
            &[
                (TypeTag::Float8, Some(Value::Float8(-0.0))),
                (TypeTag::Float4, Some(Value::Float4(f32::NAN))),
                (TypeTag::Bool, Some(Value::Bool(true))),
                (
                    TypeTag::Interval,
                    Some(Value::Interval(Interval::from_fields(1, -30, 5))),
                ),
            ],
            &[(TypeTag::Int8, None), (TypeTag::Int8, Some(Value::Int8(1)))],
            &[
                (TypeTag::Int8, Some(Value::Int8(1))),
                (TypeTag::Text, Some(Value::Text(b"x"))),
            ],
        ];
        for fields in cases {
            let mut one_by_one = Vec::new();
            let mut enc =
                IdentityEncoder::begin(&mut one_by_one, Domain::GroupKey, fields.len() as u32)
                    .unwrap();
            for (tag, value) in fields {
                enc.field(*tag, value.as_ref()).unwrap();
            }
            enc.finish().unwrap();
            let mut appended = vec![0xAA];
            encode_identity(&mut appended, Domain::GroupKey, fields).unwrap();
            assert_eq!(&appended[1..], &one_by_one[..], "{fields:?}");
        }
        let mut buf = vec![7];
        let mismatch = [(TypeTag::Int4, Some(Value::Int8(1)))];
        assert!(encode_identity(&mut buf, Domain::ScanKey, &mismatch).is_err());
        let late = [
            (TypeTag::Int4, Some(Value::Int4(1))),
            (TypeTag::Time, Some(Value::Time(-1))),
        ];
        assert!(encode_identity(&mut buf, Domain::ScanKey, &late).is_err());
        assert_eq!(buf, [7], "a refused identity leaves the buffer as it was");
    }

    /// Every typed push writes what the field writer writes for the same value, and counts
    /// against the declared fields like it.
    #[test]
    fn typed_pushes_equal_the_field_writer() {
        let n = [1234u16, 5678];
        let numeric = Numeric::finite(true, 1, crate::scalar::Digits::native(&n));
        let interval = Interval::from_fields(14, -3, 99);
        let values = [
            Value::Bool(true),
            Value::Int2(-7),
            Value::Int4(i32::MIN),
            Value::Int8(1 << 40),
            Value::Oid(u32::MAX),
            Value::Float4(-0.0),
            Value::Float8(f64::NAN),
            Value::Uuid([0xA5; 16]),
            Value::Date(-1),
            Value::Timestamp(i64::MAX),
            Value::Timestamptz(-5),
            Value::Interval(interval),
            Value::Macaddr([1, 0, 2, 0, 3, 0]),
            Value::Macaddr8([0; 8]),
            Value::Numeric(numeric),
            Value::Text(b"key"),
            Value::Bytea(&[0, 1, 0]),
        ];
        let mut general = Vec::new();
        let mut enc = IdentityEncoder::begin(&mut general, Domain::ScanKey, 17).unwrap();
        for v in &values {
            enc.value(v).unwrap();
        }
        enc.finish().unwrap();
        let mut typed = Vec::new();
        let mut enc = IdentityEncoder::begin(&mut typed, Domain::ScanKey, 17).unwrap();
        enc.bool(true).unwrap();
        enc.int2(-7).unwrap();
        enc.int4(i32::MIN).unwrap();
        enc.int8(1 << 40).unwrap();
        enc.oid(u32::MAX).unwrap();
        enc.float4(-0.0).unwrap();
        enc.float8(f64::NAN).unwrap();
        enc.uuid([0xA5; 16]).unwrap();
        enc.date(-1).unwrap();
        enc.timestamp(i64::MAX).unwrap();
        enc.timestamptz(-5).unwrap();
        enc.interval(interval).unwrap();
        enc.macaddr([1, 0, 2, 0, 3, 0]).unwrap();
        enc.macaddr8([0; 8]).unwrap();
        enc.numeric(numeric).unwrap();
        enc.text(b"key").unwrap();
        enc.bytea(&[0, 1, 0]).unwrap();
        assert!(enc.int8(1).is_err(), "an 18th field of 17 is refused");
        enc.finish().unwrap();
        assert_eq!(typed, general);
    }
}
