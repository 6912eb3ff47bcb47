//! The strict decoder (spec/wire-format.md §8): identity bytes back to canonical typed fields.
//!
//! Every accepted input is the one canonical encoding of its fields: re-encoding a decoded
//! identity reproduces the input byte for byte. [`validate`] runs the same checks without
//! allocating, which lets the encoder vet child identities on the hot path.

mod nested;

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::encode::{TZDISP_LIMIT, mask_byte, numeric_class};
use crate::error::{Error, Limit, Result};
use crate::limits::{
    MAX_BIT_LEN, MAX_DEPTH, MAX_ENUM_LABEL_LEN, MAX_FIELDS, MAX_IDENTITY_LEN, MAX_NUMERIC_GROUPS,
};
use crate::primitives::unflip_i128;
use crate::primitives::{ESCAPE, ESCAPED_ZERO, TERMINATOR, unflip_i16, unflip_i32, unflip_i64};
use crate::structure::{ArrayValue, JsonbValue, MultirangeValue, RangeValue, RecordValue};
use crate::tag::{Domain, NULL_STATE, TUPLE_END, TypeTag, VALUE_STATE, VERSION_V2};
use crate::value::{
    BitString, Digits, Inet, Interval, IpFamily, Numeric, NumericSign, Timetz, USECS_PER_DAY, Value,
};

/// A decoded identity.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedIdentity {
    /// The identity's domain.
    pub domain: Domain,
    /// Its fields, in order.
    pub fields: Vec<DecodedField>,
}

/// One decoded field.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedField {
    /// The field's type tag.
    pub tag: TypeTag,
    /// The canonical value, or `None` for SQL NULL.
    pub value: Option<OwnedValue>,
}

/// A decoded, canonical field value that owns its bytes; [`OwnedValue::as_value`] borrows it
/// back as an encoder input.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)] // variants mirror `Value`
pub enum OwnedValue {
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Oid(u32),
    Float4(f32),
    Float8(f64),
    Numeric(OwnedNumeric),
    Text(Vec<u8>),
    Varchar(Vec<u8>),
    Bpchar(Vec<u8>),
    Bytea(Vec<u8>),
    Uuid([u8; 16]),
    Date(i32),
    Time(i64),
    Timestamp(i64),
    Timestamptz(i64),
    Timetz(Timetz),
    Interval(Interval),
    Inet(Inet),
    Cidr(Inet),
    Macaddr([u8; 6]),
    Macaddr8([u8; 8]),
    Bit(OwnedBits),
    Varbit(OwnedBits),
    Enum(Vec<u8>),
    Identity(ChildIdentity),
    Array(ArrayValue),
    Range(Box<RangeValue>),
    Multirange(MultirangeValue),
    Jsonb(JsonbValue),
    Record(RecordValue),
}

/// A numeric that owns its digit groups. A decoded one is normalised (no leading or trailing
/// zero groups; zero has no groups); one converted from an encoder input keeps its groups as
/// given, and encodes identically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedNumeric {
    /// Class.
    pub sign: NumericSign,
    /// Base-10000 exponent of the first group.
    pub weight: i16,
    /// Digit groups.
    pub digits: Vec<u16>,
}

/// A decoded bit string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedBits {
    /// Length in bits.
    pub bit_len: u32,
    /// Packed bytes.
    pub bytes: Vec<u8>,
}

/// A decoded child identity: its complete bytes and their decoding.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildIdentity {
    /// The child identity's bytes (unescaped).
    pub bytes: Vec<u8>,
    /// The child decoded.
    pub identity: DecodedIdentity,
}

impl DecodedIdentity {
    /// Appends this identity's encoding to `buf`. For a decoded identity this reproduces the
    /// decoded bytes exactly (spec §8: every accepted identity is canonical).
    pub fn encode(&self, buf: &mut Vec<u8>) -> Result<usize> {
        let count = u32::try_from(self.fields.len()).unwrap_or(u32::MAX);
        let mut enc = crate::IdentityEncoder::begin(buf, self.domain, count)?;
        for f in &self.fields {
            enc.field(f.tag, f.value.as_ref().map(OwnedValue::as_value).as_ref())?;
        }
        enc.finish()
    }
}

impl OwnedValue {
    /// Borrows the value as an encoder input.
    pub fn as_value(&self) -> Value<'_> {
        match self {
            OwnedValue::Bool(v) => Value::Bool(*v),
            OwnedValue::Int2(v) => Value::Int2(*v),
            OwnedValue::Int4(v) => Value::Int4(*v),
            OwnedValue::Int8(v) => Value::Int8(*v),
            OwnedValue::Oid(v) => Value::Oid(*v),
            OwnedValue::Float4(v) => Value::Float4(*v),
            OwnedValue::Float8(v) => Value::Float8(*v),
            OwnedValue::Numeric(n) => Value::Numeric(n.as_numeric()),
            OwnedValue::Text(v) => Value::Text(v),
            OwnedValue::Varchar(v) => Value::Varchar(v),
            OwnedValue::Bpchar(v) => Value::Bpchar(v),
            OwnedValue::Bytea(v) => Value::Bytea(v),
            OwnedValue::Uuid(v) => Value::Uuid(*v),
            OwnedValue::Date(v) => Value::Date(*v),
            OwnedValue::Time(v) => Value::Time(*v),
            OwnedValue::Timestamp(v) => Value::Timestamp(*v),
            OwnedValue::Timestamptz(v) => Value::Timestamptz(*v),
            OwnedValue::Timetz(v) => Value::Timetz(*v),
            OwnedValue::Interval(v) => Value::Interval(*v),
            OwnedValue::Inet(v) => Value::Inet(*v),
            OwnedValue::Cidr(v) => Value::Cidr(*v),
            OwnedValue::Macaddr(v) => Value::Macaddr(*v),
            OwnedValue::Macaddr8(v) => Value::Macaddr8(*v),
            OwnedValue::Bit(b) => Value::Bit(BitString {
                bit_len: b.bit_len,
                bytes: &b.bytes,
            }),
            OwnedValue::Varbit(b) => Value::Varbit(BitString {
                bit_len: b.bit_len,
                bytes: &b.bytes,
            }),
            OwnedValue::Enum(v) => Value::Enum(v),
            OwnedValue::Identity(c) => Value::Identity(&c.bytes),
            OwnedValue::Array(a) => Value::Array(a),
            OwnedValue::Range(r) => Value::Range(r),
            OwnedValue::Multirange(m) => Value::Multirange(m),
            OwnedValue::Jsonb(j) => Value::Jsonb(j),
            OwnedValue::Record(r) => Value::Record(r),
        }
    }

    /// The type tag this value is written with.
    pub fn tag(&self) -> TypeTag {
        self.as_value().tag()
    }
}

impl TryFrom<Value<'_>> for OwnedValue {
    type Error = Error;

    /// Copies an encoder input into an owned value (structural values are cloned; a child
    /// identity is decoded, so an invalid one is an error).
    fn try_from(v: Value<'_>) -> Result<OwnedValue> {
        Ok(match v {
            Value::Bool(x) => OwnedValue::Bool(x),
            Value::Int2(x) => OwnedValue::Int2(x),
            Value::Int4(x) => OwnedValue::Int4(x),
            Value::Int8(x) => OwnedValue::Int8(x),
            Value::Oid(x) => OwnedValue::Oid(x),
            Value::Float4(x) => OwnedValue::Float4(x),
            Value::Float8(x) => OwnedValue::Float8(x),
            Value::Numeric(n) => OwnedValue::Numeric(OwnedNumeric {
                sign: n.sign,
                weight: n.weight,
                digits: n.digits.iter().collect(),
            }),
            Value::Text(x) => OwnedValue::Text(x.to_vec()),
            Value::Varchar(x) => OwnedValue::Varchar(x.to_vec()),
            Value::Bpchar(x) => OwnedValue::Bpchar(x.to_vec()),
            Value::Bytea(x) => OwnedValue::Bytea(x.to_vec()),
            Value::Uuid(x) => OwnedValue::Uuid(x),
            Value::Date(x) => OwnedValue::Date(x),
            Value::Time(x) => OwnedValue::Time(x),
            Value::Timestamp(x) => OwnedValue::Timestamp(x),
            Value::Timestamptz(x) => OwnedValue::Timestamptz(x),
            Value::Timetz(x) => OwnedValue::Timetz(x),
            Value::Interval(x) => OwnedValue::Interval(x),
            Value::Inet(x) => OwnedValue::Inet(x),
            Value::Cidr(x) => OwnedValue::Cidr(x),
            Value::Macaddr(x) => OwnedValue::Macaddr(x),
            Value::Macaddr8(x) => OwnedValue::Macaddr8(x),
            Value::Bit(b) => OwnedValue::Bit(OwnedBits {
                bit_len: b.bit_len,
                bytes: b.bytes.to_vec(),
            }),
            Value::Varbit(b) => OwnedValue::Varbit(OwnedBits {
                bit_len: b.bit_len,
                bytes: b.bytes.to_vec(),
            }),
            Value::Enum(x) => OwnedValue::Enum(x.to_vec()),
            Value::Identity(x) => OwnedValue::Identity(ChildIdentity {
                bytes: x.to_vec(),
                identity: decode(x)?,
            }),
            Value::Array(a) => OwnedValue::Array(a.clone()),
            Value::Range(r) => OwnedValue::Range(Box::new(r.clone())),
            Value::Multirange(m) => OwnedValue::Multirange(m.clone()),
            Value::Jsonb(j) => OwnedValue::Jsonb(j.clone()),
            Value::Record(r) => OwnedValue::Record(r.clone()),
        })
    }
}

impl OwnedNumeric {
    /// Borrows the numeric as an encoder input.
    pub fn as_numeric(&self) -> Numeric<'_> {
        Numeric {
            sign: self.sign,
            weight: self.weight,
            digits: Digits::native(&self.digits),
        }
    }
}

/// What [`validate`] learns about a valid identity without decoding its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The identity's domain.
    pub domain: Domain,
    /// Number of fields.
    pub field_count: u32,
    /// Nesting depth: 1, plus the deepest child identity's depth.
    pub depth: u32,
}

/// Decodes one complete identity, rejecting every non-canonical or malformed input
/// (spec §8). Never panics.
pub fn decode(bytes: &[u8]) -> Result<DecodedIdentity> {
    check_len(bytes)?;
    let mut src = SliceSource { bytes, pos: 0 };
    let mut fields = Vec::new();
    let summary = parse_identity(&mut src, 1, Some(&mut fields))?;
    Ok(DecodedIdentity {
        domain: summary.domain,
        fields,
    })
}

/// Checks that `bytes` is one complete, canonical identity without building the decoded
/// values (spec §8). It allocates nothing for scalar fields; a jsonb object keeps its
/// previous key to check key order.
pub fn validate(bytes: &[u8]) -> Result<Summary> {
    check_len(bytes)?;
    let mut src = SliceSource { bytes, pos: 0 };
    parse_identity(&mut src, 1, None)
}

fn check_len(bytes: &[u8]) -> Result<()> {
    if bytes.len() > MAX_IDENTITY_LEN {
        return Err(Error::LimitExceeded {
            limit: Limit::IdentityLength,
            value: bytes.len(),
        });
    }
    Ok(())
}

/// A stream of an identity's bytes: the input slice for a top-level identity, an unescaping
/// view of the parent's payload for a child identity.
trait Source {
    /// The next byte, or `None` at the end of this identity's bytes.
    fn next(&mut self) -> Result<Option<u8>>;
    /// Bytes produced so far (offsets in errors are relative to this identity).
    fn offset(&self) -> usize;
}

struct SliceSource<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Source for SliceSource<'_> {
    #[inline]
    fn next(&mut self) -> Result<Option<u8>> {
        let b = self.bytes.get(self.pos).copied();
        if b.is_some() {
            self.pos += 1;
        }
        Ok(b)
    }

    fn offset(&self) -> usize {
        self.pos
    }
}

/// Unescapes a child identity out of its parent's field payload; ends at the terminator.
struct UnescapeSource<'p> {
    parent: &'p mut dyn Source,
    field: u32,
    produced: usize,
    done: bool,
    keep: Option<Vec<u8>>,
}

impl Source for UnescapeSource<'_> {
    fn next(&mut self) -> Result<Option<u8>> {
        if self.done {
            return Ok(None);
        }
        let at = self.parent.offset();
        let b = need(self.parent)?;
        let b = if b != ESCAPE {
            b
        } else {
            match need(self.parent)? {
                ESCAPED_ZERO => 0,
                TERMINATOR => {
                    self.done = true;
                    return Ok(None);
                }
                _ => {
                    return Err(Error::InvalidEscape {
                        field: self.field,
                        offset: at,
                    });
                }
            }
        };
        self.produced += 1;
        if let Some(k) = self.keep.as_mut() {
            k.push(b);
        }
        Ok(Some(b))
    }

    fn offset(&self) -> usize {
        self.produced
    }
}

#[inline]
fn need(src: &mut dyn Source) -> Result<u8> {
    let offset = src.offset();
    src.next()?.ok_or(Error::Truncated { offset })
}

#[inline]
fn need_array<const N: usize>(src: &mut dyn Source) -> Result<[u8; N]> {
    let mut out = [0u8; N];
    for b in &mut out {
        *b = need(src)?;
    }
    Ok(out)
}

fn parse_identity(
    src: &mut dyn Source,
    depth: u32,
    mut out: Option<&mut Vec<DecodedField>>,
) -> Result<Summary> {
    let version = need(src)?;
    if version != VERSION_V2 {
        return Err(Error::UnknownVersion { found: version });
    }
    let d = need(src)?;
    let domain = Domain::from_byte(d).ok_or(Error::UnknownDomain { found: d })?;
    let declared = u32::from_be_bytes(need_array(src)?);
    if declared > MAX_FIELDS {
        return Err(Error::LimitExceeded {
            limit: Limit::FieldCount,
            value: declared as usize,
        });
    }
    let mut max_child = 0u32;
    for field in 0..declared {
        let offset = src.offset();
        let t = need(src)?;
        if t == TUPLE_END {
            return Err(Error::FieldCountMismatch {
                declared,
                actual: field,
            });
        }
        let tag = TypeTag::from_byte(t).ok_or(Error::UnknownTypeTag {
            field,
            offset,
            found: t,
        })?;
        let state_offset = src.offset();
        let value = match need(src)? {
            NULL_STATE => None,
            VALUE_STATE => {
                let mut ctx = FieldCtx {
                    field,
                    tag,
                    offset: src.offset(),
                    keep: out.is_some(),
                    child_depth: 0,
                };
                let v = parse_payload(src, &mut ctx, depth)?;
                max_child = max_child.max(ctx.child_depth);
                v
            }
            found => {
                return Err(Error::InvalidNullState {
                    field,
                    offset: state_offset,
                    found,
                });
            }
        };
        if let Some(fields) = out.as_deref_mut() {
            fields.push(DecodedField { tag, value });
        }
    }
    let end_offset = src.offset();
    if need(src)? != TUPLE_END {
        return Err(Error::MissingTupleEnd { offset: end_offset });
    }
    let trailing = src.offset();
    if src.next()?.is_some() {
        return Err(Error::TrailingBytes { offset: trailing });
    }
    Ok(Summary {
        domain,
        field_count: declared,
        depth: 1 + max_child,
    })
}

struct FieldCtx {
    field: u32,
    tag: TypeTag,
    offset: usize,
    keep: bool,
    child_depth: u32,
}

impl FieldCtx {
    fn non_canonical(&self, reason: &'static str) -> Error {
        Error::NonCanonical {
            field: self.field,
            offset: self.offset,
            tag: self.tag,
            reason,
        }
    }
}

/// Reads an escaped, terminated run; `xor` is applied to raw bytes first (negative numerics).
/// Calls `each` with every unescaped byte.
fn read_escaped(
    src: &mut dyn Source,
    ctx: &FieldCtx,
    xor: u8,
    mut each: impl FnMut(u8) -> Result<()>,
) -> Result<()> {
    loop {
        let at = src.offset();
        let b = need(src)? ^ xor;
        if b != ESCAPE {
            each(b)?;
            continue;
        }
        match need(src)? ^ xor {
            TERMINATOR => return Ok(()),
            ESCAPED_ZERO => each(0)?,
            _ => {
                return Err(Error::InvalidEscape {
                    field: ctx.field,
                    offset: at,
                });
            }
        }
    }
}

/// Reads a character string: no NUL, optional length limit, optional bpchar rule.
fn read_text(src: &mut dyn Source, ctx: &FieldCtx) -> Result<Option<Vec<u8>>> {
    let mut keep = ctx.keep.then(Vec::new);
    let mut len = 0usize;
    let mut last = 0u8;
    read_escaped(src, ctx, 0, |b| {
        if b == 0 {
            return Err(ctx.non_canonical("character data contains a NUL byte"));
        }
        len += 1;
        last = b;
        if let Some(k) = keep.as_mut() {
            k.push(b);
        }
        Ok(())
    })?;
    if ctx.tag == TypeTag::Bpchar && last == b' ' {
        return Err(ctx.non_canonical("bpchar payload keeps trailing spaces"));
    }
    if ctx.tag == TypeTag::Enum && len > MAX_ENUM_LABEL_LEN {
        return Err(Error::LimitExceeded {
            limit: Limit::EnumLabelLength,
            value: len,
        });
    }
    Ok(keep)
}

fn parse_payload(
    src: &mut dyn Source,
    ctx: &mut FieldCtx,
    depth: u32,
) -> Result<Option<OwnedValue>> {
    let keep = ctx.keep;
    let v = match ctx.tag {
        TypeTag::Bool => match need(src)? {
            0 => OwnedValue::Bool(false),
            1 => OwnedValue::Bool(true),
            _ => return Err(ctx.non_canonical("bool byte is neither 0x00 nor 0x01")),
        },
        TypeTag::Int2 => OwnedValue::Int2(unflip_i16(need_array(src)?)),
        TypeTag::Int4 => OwnedValue::Int4(unflip_i32(need_array(src)?)),
        TypeTag::Int8 => OwnedValue::Int8(unflip_i64(need_array(src)?)),
        TypeTag::Oid => OwnedValue::Oid(u32::from_be_bytes(need_array(src)?)),
        TypeTag::Float4 => {
            let key = u32::from_be_bytes(need_array(src)?);
            let bits = if key & 0x8000_0000 != 0 {
                key ^ 0x8000_0000
            } else {
                !key
            };
            let x = f32::from_bits(bits);
            if bits == 0x8000_0000 {
                return Err(ctx.non_canonical("negative zero"));
            }
            if x.is_nan() && bits != 0x7FC0_0000 {
                return Err(ctx.non_canonical("NaN other than 0x7FC00000"));
            }
            OwnedValue::Float4(x)
        }
        TypeTag::Float8 => {
            let key = u64::from_be_bytes(need_array(src)?);
            let sign = 0x8000_0000_0000_0000u64;
            let bits = if key & sign != 0 { key ^ sign } else { !key };
            let x = f64::from_bits(bits);
            if bits == sign {
                return Err(ctx.non_canonical("negative zero"));
            }
            if x.is_nan() && bits != 0x7FF8_0000_0000_0000 {
                return Err(ctx.non_canonical("NaN other than 0x7FF8000000000000"));
            }
            OwnedValue::Float8(x)
        }
        TypeTag::Numeric => OwnedValue::Numeric(read_numeric(src, ctx)?),
        TypeTag::Text | TypeTag::Varchar | TypeTag::Bpchar | TypeTag::Enum => {
            let s = read_text(src, ctx)?.unwrap_or_default();
            match ctx.tag {
                TypeTag::Text => OwnedValue::Text(s),
                TypeTag::Varchar => OwnedValue::Varchar(s),
                TypeTag::Bpchar => OwnedValue::Bpchar(s),
                _ => OwnedValue::Enum(s),
            }
        }
        TypeTag::Bytea => {
            let mut out = Vec::new();
            read_escaped(src, ctx, 0, |b| {
                if keep {
                    out.push(b);
                }
                Ok(())
            })?;
            OwnedValue::Bytea(out)
        }
        TypeTag::Uuid => OwnedValue::Uuid(need_array(src)?),
        TypeTag::Date => OwnedValue::Date(unflip_i32(need_array(src)?)),
        TypeTag::Time => {
            let t = u64::from_be_bytes(need_array(src)?);
            if t > USECS_PER_DAY as u64 {
                return Err(ctx.non_canonical("time of day beyond 24:00"));
            }
            OwnedValue::Time(t as i64)
        }
        TypeTag::Timestamp => OwnedValue::Timestamp(unflip_i64(need_array(src)?)),
        TypeTag::Timestamptz => OwnedValue::Timestamptz(unflip_i64(need_array(src)?)),
        TypeTag::Timetz => {
            let gmt = unflip_i64(need_array(src)?);
            let zone = unflip_i32(need_array(src)?);
            if zone <= -TZDISP_LIMIT || zone >= TZDISP_LIMIT {
                return Err(ctx.non_canonical("zone offset outside ±15:59:59"));
            }
            let time = gmt
                .checked_sub(i64::from(zone) * 1_000_000)
                .filter(|t| (0..=USECS_PER_DAY).contains(t))
                .ok_or_else(|| ctx.non_canonical("local time of day outside 00:00..24:00"))?;
            OwnedValue::Timetz(Timetz { time, zone })
        }
        TypeTag::Interval => {
            let cmp = unflip_i128(need_array(src)?);
            let i = Interval::from_cmp_value(cmp)
                .ok_or_else(|| ctx.non_canonical("comparison value outside interval range"))?;
            OwnedValue::Interval(i)
        }
        TypeTag::Inet | TypeTag::Cidr => {
            let n = read_inet(src, ctx)?;
            if ctx.tag == TypeTag::Inet {
                OwnedValue::Inet(n)
            } else {
                OwnedValue::Cidr(n)
            }
        }
        TypeTag::Macaddr => OwnedValue::Macaddr(need_array(src)?),
        TypeTag::Macaddr8 => OwnedValue::Macaddr8(need_array(src)?),
        TypeTag::Bit | TypeTag::Varbit => {
            let b = read_bits(src, ctx)?;
            if ctx.tag == TypeTag::Bit {
                OwnedValue::Bit(b)
            } else {
                OwnedValue::Varbit(b)
            }
        }
        TypeTag::ChildIdentity => {
            if depth >= MAX_DEPTH {
                return Err(Error::LimitExceeded {
                    limit: Limit::Depth,
                    value: depth as usize + 1,
                });
            }
            let mut child = UnescapeSource {
                parent: src,
                field: ctx.field,
                produced: 0,
                done: false,
                keep: keep.then(Vec::new),
            };
            let mut fields = Vec::new();
            // parse_identity ends by asking for one more byte, which consumes the
            // terminator; any byte before it is reported as trailing.
            let summary = parse_identity(&mut child, depth + 1, keep.then_some(&mut fields))?;
            ctx.child_depth = summary.depth;
            OwnedValue::Identity(ChildIdentity {
                bytes: child.keep.unwrap_or_default(),
                identity: DecodedIdentity {
                    domain: summary.domain,
                    fields,
                },
            })
        }
        TypeTag::Array => return nested::parse_array(src, ctx, depth + 1),
        TypeTag::Range => return nested::parse_range(src, ctx, depth + 1),
        TypeTag::Multirange => return nested::parse_multirange(src, ctx, depth + 1),
        TypeTag::Jsonb => return nested::parse_jsonb(src, ctx, depth + 1),
        TypeTag::Record => return nested::parse_record(src, ctx, depth + 1),
    };
    Ok(keep.then_some(v))
}

fn read_numeric(src: &mut dyn Source, ctx: &FieldCtx) -> Result<OwnedNumeric> {
    let special = |sign| OwnedNumeric {
        sign,
        weight: 0,
        digits: Vec::new(),
    };
    let (sign, xor) = match need(src)? {
        numeric_class::NEG_INF => return Ok(special(NumericSign::NegativeInfinity)),
        numeric_class::POS_INF => return Ok(special(NumericSign::PositiveInfinity)),
        numeric_class::NAN => return Ok(special(NumericSign::NaN)),
        numeric_class::ZERO => return Ok(special(NumericSign::Positive)),
        numeric_class::NEG => (NumericSign::Negative, 0xFF),
        numeric_class::POS => (NumericSign::Positive, 0x00),
        _ => return Err(ctx.non_canonical("unknown numeric class byte")),
    };
    let w = need_array::<2>(src)?;
    let weight = unflip_i16([w[0] ^ xor, w[1] ^ xor]);
    let mut digits = Vec::new();
    let (mut count, mut high, mut pending, mut last) = (0usize, 0u8, false, 0u16);
    read_escaped(src, ctx, xor, |b| {
        if !pending {
            high = b;
            pending = true;
            return Ok(());
        }
        pending = false;
        let g = u16::from_be_bytes([high, b]);
        if g > 9999 {
            return Err(ctx.non_canonical("digit group exceeds 9999"));
        }
        if count == 0 && g == 0 {
            return Err(ctx.non_canonical("leading zero digit group"));
        }
        count += 1;
        if count > MAX_NUMERIC_GROUPS {
            return Err(Error::LimitExceeded {
                limit: Limit::NumericDigits,
                value: count,
            });
        }
        last = g;
        if ctx.keep {
            digits.push(g);
        }
        Ok(())
    })?;
    if pending {
        return Err(ctx.non_canonical("odd number of digit bytes"));
    }
    if count == 0 {
        return Err(ctx.non_canonical("non-zero class without digit groups"));
    }
    if last == 0 {
        return Err(ctx.non_canonical("trailing zero digit group"));
    }
    Ok(OwnedNumeric {
        sign,
        weight,
        digits,
    })
}

fn read_inet(src: &mut dyn Source, ctx: &FieldCtx) -> Result<Inet> {
    let family = IpFamily::from_byte(need(src)?)
        .ok_or_else(|| ctx.non_canonical("unknown address family"))?;
    let len = family.addr_len();
    let mut masked = [0u8; 16];
    for b in &mut masked[..len] {
        *b = need(src)?;
    }
    let bits = need(src)?;
    if bits > family.max_bits() {
        return Err(ctx.non_canonical("prefix length exceeds the address width"));
    }
    let mut addr = [0u8; 16];
    for b in &mut addr[..len] {
        *b = need(src)?;
    }
    for i in 0..len {
        let m = mask_byte(bits, i);
        if masked[i] != addr[i] & m {
            return Err(ctx.non_canonical("network part does not match the address"));
        }
        if ctx.tag == TypeTag::Cidr && addr[i] & !m != 0 {
            return Err(ctx.non_canonical("cidr value has bits set to the right of the mask"));
        }
    }
    Ok(Inet { family, bits, addr })
}

fn read_bits(src: &mut dyn Source, ctx: &FieldCtx) -> Result<OwnedBits> {
    let mut bytes = Vec::new();
    let (mut n, mut last) = (0usize, 0u8);
    read_escaped(src, ctx, 0, |b| {
        n += 1;
        last = b;
        if ctx.keep {
            bytes.push(b);
        }
        Ok(())
    })?;
    let bit_len = u32::from_be_bytes(need_array(src)?);
    if bit_len > MAX_BIT_LEN {
        return Err(Error::LimitExceeded {
            limit: Limit::BitLength,
            value: bit_len as usize,
        });
    }
    if n != (bit_len as usize).div_ceil(8) {
        return Err(ctx.non_canonical("byte count does not match the bit length"));
    }
    let rem = bit_len % 8;
    if rem != 0 && last & (0xFF >> rem) != 0 {
        return Err(ctx.non_canonical("pad bits of the last byte are not zero"));
    }
    Ok(OwnedBits { bit_len, bytes })
}
