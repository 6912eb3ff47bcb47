//! The encoder: typed values in, identity bytes appended to a caller-owned buffer
//! (spec/wire-format.md §3–§6).

pub(crate) mod nested;

use alloc::vec::Vec;

use crate::decode::validate;
use crate::error::{Error, Limit, Result};
use crate::limits::MAX_NUMERIC_GROUPS;
use crate::limits::{MAX_BIT_LEN, MAX_DEPTH, MAX_ENUM_LABEL_LEN, MAX_FIELDS, MAX_IDENTITY_LEN};
use crate::primitives::{
    ESCAPE, ESCAPED_ZERO, TERMINATOR, flip_i16, flip_i32, flip_i64, flip_i128, put_escaped,
};
use crate::tag::{Domain, NULL_STATE, TUPLE_END, TypeTag, VALUE_STATE, VERSION_V2};
use crate::value::{BitString, Inet, Numeric, NumericSign, Timetz, USECS_PER_DAY, Value};

/// Numeric class bytes (spec §5.5), in PostgreSQL's order.
pub mod numeric_class {
    /// `-Infinity`.
    pub const NEG_INF: u8 = 0x00;
    /// Finite, negative.
    pub const NEG: u8 = 0x01;
    /// Zero.
    pub const ZERO: u8 = 0x02;
    /// Finite, positive.
    pub const POS: u8 = 0x03;
    /// `Infinity`.
    pub const POS_INF: u8 = 0x04;
    /// `NaN`.
    pub const NAN: u8 = 0x05;
}

/// Largest absolute `timetz` zone, exclusive (PostgreSQL's `TZDISP_LIMIT`).
pub const TZDISP_LIMIT: i32 = 57_600;

/// Canonical float4 bits: `-0` becomes `+0`, every NaN becomes `0x7FC00000` (spec §5.4).
#[inline]
pub fn float4_canonical_bits(x: f32) -> u32 {
    if x.is_nan() {
        0x7FC0_0000
    } else if x == 0.0 {
        0
    } else {
        x.to_bits()
    }
}

/// Canonical float8 bits: `-0` becomes `+0`, every NaN becomes `0x7FF8000000000000`.
#[inline]
pub fn float8_canonical_bits(x: f64) -> u64 {
    if x.is_nan() {
        0x7FF8_0000_0000_0000
    } else if x == 0.0 {
        0
    } else {
        x.to_bits()
    }
}

/// The 4-byte payload of a float4 (spec §5.4): canonical bits, then a set sign bit inverts
/// every bit and a clear sign bit flips only the sign bit.
#[inline]
pub fn float4_key(x: f32) -> [u8; 4] {
    let bits = float4_canonical_bits(x);
    let mask = ((bits as i32) >> 31) as u32 | 0x8000_0000;
    (bits ^ mask).to_be_bytes()
}

/// The 8-byte payload of a float8 (spec §5.4).
#[inline]
pub fn float8_key(x: f64) -> [u8; 8] {
    let bits = float8_canonical_bits(x);
    let mask = ((bits as i64) >> 63) as u64 | 0x8000_0000_0000_0000;
    (bits ^ mask).to_be_bytes()
}

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

impl<'b> IdentityEncoder<'b> {
    /// Writes the header `VERSION | DOMAIN | FIELD_COUNT` (spec §3).
    pub fn begin(buf: &'b mut Vec<u8>, domain: Domain, field_count: u32) -> Result<Self> {
        if field_count > MAX_FIELDS {
            return Err(Error::LimitExceeded {
                limit: Limit::FieldCount,
                value: field_count as usize,
            });
        }
        let start = buf.len();
        let c = field_count.to_be_bytes();
        buf.extend_from_slice(&[VERSION_V2, domain as u8, c[0], c[1], c[2], c[3]]);
        Ok(IdentityEncoder {
            buf,
            start,
            declared: field_count,
            written: 0,
        })
    }

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
    pub fn null(&mut self, tag: TypeTag) -> Result<()> {
        self.next_index()?;
        self.buf.extend_from_slice(&[tag as u8, NULL_STATE]);
        self.written += 1;
        Ok(())
    }

    /// Writes a non-NULL field (spec §4, §5, §6).
    #[inline]
    pub fn value(&mut self, value: &Value<'_>) -> Result<()> {
        let field = self.next_index()?;
        let mark = self.buf.len();
        self.buf
            .extend_from_slice(&[value.tag() as u8, VALUE_STATE]);
        match put_payload(self.buf, field, value, 1) {
            Ok(()) => {
                self.written += 1;
                Ok(())
            }
            Err(e) => {
                self.buf.truncate(mark);
                Err(e)
            }
        }
    }

    /// Writes `value`, or a NULL of type `tag` when `value` is `None`.
    pub fn field(&mut self, tag: TypeTag, value: Option<&Value<'_>>) -> Result<()> {
        match value {
            None => self.null(tag),
            Some(v) if v.tag() == tag => self.value(v),
            Some(_) => Err(invalid(
                self.written,
                tag,
                "value does not match the field's declared type",
            )),
        }
    }

    /// Checks the field count, writes `TUPLE_END` and returns the identity's length.
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
}

/// Appends one complete identity built from `fields` (each a type tag and an optional value)
/// to `buf`. On error `buf` is left as it was.
#[inline]
pub fn encode_identity(
    buf: &mut Vec<u8>,
    domain: Domain,
    fields: &[(TypeTag, Option<Value<'_>>)],
) -> Result<usize> {
    if let Some(len) = encode_fixed(buf, domain, fields) {
        return Ok(len);
    }
    encode_general(buf, domain, fields)
}

/// Most fields the fixed-width fast path handles.
const FIXED_FAST_FIELDS: usize = 4;

/// The fast path of [`encode_identity`] for up to four non-NULL fields of fixed-width
/// families (integers, oid, floats, uuid, date/time types, bool, interval, macaddr): one
/// reservation, then the same payload writer as the general path, without the per-field
/// bookkeeping of [`IdentityEncoder`]. Returns `None`, with `buf` as it was, for anything
/// else. The bytes are those of the general path: the property tests and vectors encode
/// through `encode_identity`, and a unit test compares the two paths.
#[inline]
fn encode_fixed(
    buf: &mut Vec<u8>,
    domain: Domain,
    fields: &[(TypeTag, Option<Value<'_>>)],
) -> Option<usize> {
    if fields.len() > FIXED_FAST_FIELDS {
        return None;
    }
    let start = buf.len();
    buf.reserve(6 + fields.len() * 18 + 1);
    let c = (fields.len() as u32).to_be_bytes();
    buf.extend_from_slice(&[VERSION_V2, domain as u8, c[0], c[1], c[2], c[3]]);
    for (tag, value) in fields {
        let Some(v) = value.as_ref().filter(|v| v.tag() == *tag) else {
            buf.truncate(start);
            return None;
        };
        // Fixed-width payloads only; a refused value (time past 24:00, ...) falls back too,
        // so the general path reports it with its field index.
        if tag.fixed_width().is_none() {
            buf.truncate(start);
            return None;
        }
        buf.extend_from_slice(&[*tag as u8, VALUE_STATE]);
        if put_payload(buf, 0, v, 1).is_err() {
            buf.truncate(start);
            return None;
        }
    }
    buf.push(TUPLE_END);
    Some(buf.len() - start)
}

fn encode_general(
    buf: &mut Vec<u8>,
    domain: Domain,
    fields: &[(TypeTag, Option<Value<'_>>)],
) -> Result<usize> {
    let start = buf.len();
    let count = u32::try_from(fields.len()).unwrap_or(u32::MAX);
    let result = (|| {
        let mut enc = IdentityEncoder::begin(buf, domain, count)?;
        for (tag, value) in fields {
            enc.field(*tag, value.as_ref())?;
        }
        enc.finish()
    })();
    if result.is_err() {
        buf.truncate(start);
    }
    result
}

pub(crate) fn invalid(field: u32, tag: TypeTag, reason: &'static str) -> Error {
    Error::InvalidValue { field, tag, reason }
}

/// Writes `value`'s payload; `depth` is the nesting level of the identity or structure that
/// holds it (1 for a top-level field).
#[inline]
fn put_payload(buf: &mut Vec<u8>, field: u32, value: &Value<'_>, depth: u32) -> Result<()> {
    match *value {
        Value::Bool(b) => buf.push(b as u8),
        Value::Int2(v) => buf.extend_from_slice(&flip_i16(v)),
        Value::Int4(v) | Value::Date(v) => buf.extend_from_slice(&flip_i32(v)),
        Value::Int8(v) | Value::Timestamp(v) | Value::Timestamptz(v) => {
            buf.extend_from_slice(&flip_i64(v))
        }
        Value::Oid(v) => buf.extend_from_slice(&v.to_be_bytes()),
        Value::Float4(v) => buf.extend_from_slice(&float4_key(v)),
        Value::Float8(v) => buf.extend_from_slice(&float8_key(v)),
        Value::Numeric(ref n) => put_numeric(buf, field, n)?,
        Value::Text(s) | Value::Varchar(s) => put_text(buf, field, value.tag(), s)?,
        Value::Bpchar(s) => put_text(buf, field, TypeTag::Bpchar, bpchar_strip(s))?,
        Value::Bytea(b) => put_escaped(buf, b),
        Value::Uuid(u) => buf.extend_from_slice(&u),
        Value::Time(t) => {
            if !(0..=USECS_PER_DAY).contains(&t) {
                return Err(invalid(
                    field,
                    TypeTag::Time,
                    "time of day outside 00:00..24:00",
                ));
            }
            buf.extend_from_slice(&(t as u64).to_be_bytes())
        }
        Value::Timetz(t) => put_timetz(buf, field, t)?,
        Value::Interval(i) => buf.extend_from_slice(&flip_i128(i.cmp_value())),
        Value::Inet(ref n) => put_inet(buf, field, TypeTag::Inet, n)?,
        Value::Cidr(ref n) => put_inet(buf, field, TypeTag::Cidr, n)?,
        Value::Macaddr(m) => buf.extend_from_slice(&m),
        Value::Macaddr8(m) => buf.extend_from_slice(&m),
        Value::Bit(ref b) => put_bits(buf, field, TypeTag::Bit, b)?,
        Value::Varbit(ref b) => put_bits(buf, field, TypeTag::Varbit, b)?,
        Value::Enum(label) => {
            if label.len() > MAX_ENUM_LABEL_LEN {
                return Err(Error::LimitExceeded {
                    limit: Limit::EnumLabelLength,
                    value: label.len(),
                });
            }
            put_text(buf, field, TypeTag::Enum, label)?
        }
        Value::Identity(child) => {
            let summary = validate(child)?;
            if depth + summary.depth > MAX_DEPTH {
                return Err(Error::LimitExceeded {
                    limit: Limit::Depth,
                    value: (depth + summary.depth) as usize,
                });
            }
            put_escaped(buf, child)
        }
        Value::Array(a) => nested::put_array(buf, field, a, depth + 1)?,
        Value::Range(r) => nested::put_range(buf, field, r, depth + 1)?,
        Value::Multirange(m) => nested::put_multirange(buf, field, m, depth + 1)?,
        Value::Jsonb(j) => nested::put_jsonb(buf, field, j, depth + 1)?,
        Value::Record(r) => nested::put_record(buf, field, r, depth + 1)?,
    }
    Ok(())
}

/// `bpchar` value with trailing spaces removed, as `bpchareq` compares it (spec §5.7).
#[inline]
pub fn bpchar_strip(s: &[u8]) -> &[u8] {
    let end = s.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    &s[..end]
}

/// True when `s` contains a `00` byte. Short strings take a branch-free minimum, which the
/// compiler vectorises inline; long ones `memchr`, which selects AVX2 at run time with `std`.
/// (`<[u8]>::contains` checks a word at a time, which made long text cost several times a
/// plain copy.)
#[inline]
fn has_nul(s: &[u8]) -> bool {
    if s.len() < 256 {
        s.iter().fold(u8::MAX, |m, &b| m.min(b)) == 0
    } else {
        memchr::memchr(0, s).is_some()
    }
}

/// Escapes and terminates a character string; a NUL byte is not a valid character.
#[inline]
fn put_text(buf: &mut Vec<u8>, field: u32, tag: TypeTag, s: &[u8]) -> Result<()> {
    if has_nul(s) {
        return Err(invalid(field, tag, "character data contains a NUL byte"));
    }
    buf.reserve(s.len() + 2);
    buf.extend_from_slice(s);
    buf.extend_from_slice(&[ESCAPE, TERMINATOR]);
    Ok(())
}

fn put_timetz(buf: &mut Vec<u8>, field: u32, t: Timetz) -> Result<()> {
    if !(0..=USECS_PER_DAY).contains(&t.time) {
        return Err(invalid(
            field,
            TypeTag::Timetz,
            "time of day outside 00:00..24:00",
        ));
    }
    if t.zone <= -TZDISP_LIMIT || t.zone >= TZDISP_LIMIT {
        return Err(invalid(
            field,
            TypeTag::Timetz,
            "zone offset outside ±15:59:59",
        ));
    }
    let gmt = t.time + i64::from(t.zone) * 1_000_000;
    buf.extend_from_slice(&flip_i64(gmt));
    buf.extend_from_slice(&flip_i32(t.zone));
    Ok(())
}

/// Netmask byte `i` of a prefix of `bits` bits.
#[inline]
pub(crate) fn mask_byte(bits: u8, i: usize) -> u8 {
    let covered = (bits as usize).saturating_sub(8 * i).min(8);
    if covered == 0 {
        0
    } else {
        0xFFu8 << (8 - covered)
    }
}

fn put_inet(buf: &mut Vec<u8>, field: u32, tag: TypeTag, n: &Inet) -> Result<()> {
    let len = n.family.addr_len();
    if n.bits > n.family.max_bits() {
        return Err(invalid(
            field,
            tag,
            "prefix length exceeds the address width",
        ));
    }
    if n.addr[len..].iter().any(|&b| b != 0) {
        return Err(invalid(
            field,
            tag,
            "IPv4 address has bytes beyond the fourth",
        ));
    }
    let addr = n.address();
    if tag == TypeTag::Cidr
        && addr
            .iter()
            .enumerate()
            .any(|(i, &b)| b & !mask_byte(n.bits, i) != 0)
    {
        return Err(invalid(
            field,
            tag,
            "cidr value has bits set to the right of the mask",
        ));
    }
    buf.push(n.family as u8);
    buf.extend(
        addr.iter()
            .enumerate()
            .map(|(i, &b)| b & mask_byte(n.bits, i)),
    );
    buf.push(n.bits);
    buf.extend_from_slice(addr);
    Ok(())
}

fn put_bits(buf: &mut Vec<u8>, field: u32, tag: TypeTag, b: &BitString<'_>) -> Result<()> {
    if b.bit_len > MAX_BIT_LEN {
        return Err(Error::LimitExceeded {
            limit: Limit::BitLength,
            value: b.bit_len as usize,
        });
    }
    if b.bytes.len() != (b.bit_len as usize).div_ceil(8) {
        return Err(invalid(
            field,
            tag,
            "byte count does not match the bit length",
        ));
    }
    let rem = b.bit_len % 8;
    if rem != 0
        && b.bytes
            .last()
            .is_some_and(|&last| last & (0xFF >> rem) != 0)
    {
        return Err(invalid(
            field,
            tag,
            "pad bits of the last byte are not zero",
        ));
    }
    put_escaped(buf, b.bytes);
    buf.extend_from_slice(&b.bit_len.to_be_bytes());
    Ok(())
}

pub(crate) fn put_numeric(buf: &mut Vec<u8>, field: u32, n: &Numeric<'_>) -> Result<()> {
    let negative = match n.sign {
        NumericSign::NegativeInfinity => {
            buf.push(numeric_class::NEG_INF);
            return Ok(());
        }
        NumericSign::PositiveInfinity => {
            buf.push(numeric_class::POS_INF);
            return Ok(());
        }
        NumericSign::NaN => {
            buf.push(numeric_class::NAN);
            return Ok(());
        }
        NumericSign::Positive => false,
        NumericSign::Negative => true,
    };
    // One pass: range check, first and last non-zero group.
    let d = &n.digits;
    let (mut first, mut end, mut max) = (None, 0, 0);
    for (i, g) in d.iter().enumerate() {
        max = max.max(g);
        if g != 0 {
            first.get_or_insert(i);
            end = i + 1;
        }
    }
    if max > 9999 {
        return Err(invalid(field, TypeTag::Numeric, "digit group exceeds 9999"));
    }
    let Some(first) = first else {
        buf.push(numeric_class::ZERO);
        return Ok(());
    };
    let groups = d.slice(first, end);
    if groups.len() > MAX_NUMERIC_GROUPS {
        return Err(Error::LimitExceeded {
            limit: Limit::NumericDigits,
            value: groups.len(),
        });
    }
    let weight = i16::try_from(i32::from(n.weight) - first as i32)
        .map_err(|_| invalid(field, TypeTag::Numeric, "normalised weight outside int16"))?;
    let m: u8 = if negative { 0xFF } else { 0x00 };
    buf.push(if negative {
        numeric_class::NEG
    } else {
        numeric_class::POS
    });
    let w = flip_i16(weight);
    buf.reserve(2 + 3 * groups.len() + 2);
    buf.extend_from_slice(&[w[0] ^ m, w[1] ^ m]);
    for g in groups.iter() {
        for byte in g.to_be_bytes() {
            if byte == 0 {
                buf.extend_from_slice(&[ESCAPE ^ m, ESCAPED_ZERO ^ m]);
            } else {
                buf.push(byte ^ m);
            }
        }
    }
    buf.extend_from_slice(&[ESCAPE ^ m, TERMINATOR ^ m]);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::value::Interval;
    use alloc::vec;

    /// The block scan finds a NUL wherever it is: in a block, in the remainder, or nowhere.
    #[test]
    fn nul_scan_finds_every_position() {
        for len in [0usize, 1, 63, 64, 255, 256, 257, 1030] {
            let clean = vec![b'x'; len];
            assert!(!has_nul(&clean), "{len}");
            for at in 0..len {
                let mut s = clean.clone();
                s[at] = 0;
                assert!(has_nul(&s), "{len} {at}");
            }
        }
    }

    /// The fixed-width fast path writes exactly what the general path writes.
    #[test]
    fn fast_path_equals_general_path() {
        let cases: [&[(TypeTag, Option<Value<'_>>)]; 6] = [
            &[(TypeTag::Int8, Some(Value::Int8(i64::MIN)))],
            &[
                (TypeTag::Int4, Some(Value::Int4(-1))),
                (TypeTag::Uuid, Some(Value::Uuid([0; 16]))),
            ],
            &[
                (TypeTag::Float8, Some(Value::Float8(-0.0))),
                (TypeTag::Float4, Some(Value::Float4(f32::NAN))),
                (TypeTag::Bool, Some(Value::Bool(true))),
                (
                    TypeTag::Interval,
                    Some(Value::Interval(Interval::from_fields(1, -30, 5))),
                ),
            ],
            &[
                (TypeTag::Date, Some(Value::Date(i32::MAX))),
                (TypeTag::Oid, Some(Value::Oid(u32::MAX))),
                (TypeTag::Macaddr, Some(Value::Macaddr([1; 6]))),
                (TypeTag::Timestamptz, Some(Value::Timestamptz(0))),
            ],
            // Not taken by the fast path: a NULL, a variable-width field, a tag mismatch.
            &[(TypeTag::Int8, None), (TypeTag::Int8, Some(Value::Int8(1)))],
            &[
                (TypeTag::Int8, Some(Value::Int8(1))),
                (TypeTag::Text, Some(Value::Text(b"x"))),
            ],
        ];
        for fields in cases {
            let mut general = Vec::new();
            encode_general(&mut general, Domain::GroupKey, fields).unwrap();
            let mut fast = vec![0xAA];
            encode_identity(&mut fast, Domain::GroupKey, fields).unwrap();
            assert_eq!(&fast[1..], &general[..], "{fields:?}");
        }
        let mut buf = vec![7];
        let mismatch = [(TypeTag::Int4, Some(Value::Int8(1)))];
        assert!(encode_identity(&mut buf, Domain::ScanKey, &mismatch).is_err());
        assert_eq!(buf, [7], "a refused identity leaves the buffer as it was");
    }
}
