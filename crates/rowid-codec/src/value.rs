//! Typed field values, shaped like PostgreSQL's own in-memory representations.
//!
//! A [`Value`] borrows its variable-width parts, so the encoder never copies an input before
//! writing it. Component types check only what their constructors document; everything a
//! value must satisfy to be encodable is checked by the encoder and reported as
//! [`crate::Error::InvalidValue`].

use crate::structure::{ArrayValue, JsonbValue, MultirangeValue, RangeValue, RecordValue};
use crate::tag::TypeTag;

/// Microseconds in one day (`USECS_PER_DAY`).
pub const USECS_PER_DAY: i64 = 86_400_000_000;

/// One non-NULL field value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// `bool`.
    Bool(bool),
    /// `int2`.
    Int2(i16),
    /// `int4`.
    Int4(i32),
    /// `int8`.
    Int8(i64),
    /// `oid`.
    Oid(u32),
    /// `float4`: any bit pattern; `-0` and every NaN are canonicalised.
    Float4(f32),
    /// `float8`: any bit pattern; `-0` and every NaN are canonicalised.
    Float8(f64),
    /// `numeric`.
    Numeric(Numeric<'a>),
    /// `text`: database-encoding bytes (never contain `0x00`).
    Text(&'a [u8]),
    /// `varchar`: database-encoding bytes (never contain `0x00`).
    Varchar(&'a [u8]),
    /// `bpchar`: database-encoding bytes, with or without trailing pad spaces.
    Bpchar(&'a [u8]),
    /// `bytea`: arbitrary bytes.
    Bytea(&'a [u8]),
    /// `uuid`: 16 bytes in network order.
    Uuid([u8; 16]),
    /// `date`: days since 2000-01-01; `i32::MIN`/`i32::MAX` are `-infinity`/`infinity`.
    Date(i32),
    /// `time`: microseconds since midnight, `0..=86_400_000_000`.
    Time(i64),
    /// `timestamp`: microseconds since 2000-01-01; `i64::MIN`/`i64::MAX` are infinities.
    Timestamp(i64),
    /// `timestamptz`: microseconds since 2000-01-01 00:00 UTC; infinities as `timestamp`.
    Timestamptz(i64),
    /// `timetz`.
    Timetz(Timetz),
    /// `interval`.
    Interval(Interval),
    /// `inet`.
    Inet(Inet),
    /// `cidr` (host bits must be zero).
    Cidr(Inet),
    /// `macaddr`.
    Macaddr([u8; 6]),
    /// `macaddr8`.
    Macaddr8([u8; 8]),
    /// `bit(n)`.
    Bit(BitString<'a>),
    /// `varbit(n)`.
    Varbit(BitString<'a>),
    /// Enum value: its current label's bytes.
    Enum(&'a [u8]),
    /// A complete child identity (JOIN_KEY / SET_KEY / WINDOW_KEY components).
    Identity(&'a [u8]),
    /// Any array (spec §6.3).
    Array(&'a ArrayValue),
    /// Any range (spec §6.4).
    Range(&'a RangeValue),
    /// Any multirange (spec §6.5).
    Multirange(&'a MultirangeValue),
    /// `jsonb` (spec §6.6).
    Jsonb(&'a JsonbValue),
    /// Any composite (spec §6.7).
    Record(&'a RecordValue),
}

impl Value<'_> {
    /// The type tag this value is written with.
    pub const fn tag(&self) -> TypeTag {
        match self {
            Value::Bool(_) => TypeTag::Bool,
            Value::Int2(_) => TypeTag::Int2,
            Value::Int4(_) => TypeTag::Int4,
            Value::Int8(_) => TypeTag::Int8,
            Value::Oid(_) => TypeTag::Oid,
            Value::Float4(_) => TypeTag::Float4,
            Value::Float8(_) => TypeTag::Float8,
            Value::Numeric(_) => TypeTag::Numeric,
            Value::Text(_) => TypeTag::Text,
            Value::Varchar(_) => TypeTag::Varchar,
            Value::Bpchar(_) => TypeTag::Bpchar,
            Value::Bytea(_) => TypeTag::Bytea,
            Value::Uuid(_) => TypeTag::Uuid,
            Value::Date(_) => TypeTag::Date,
            Value::Time(_) => TypeTag::Time,
            Value::Timestamp(_) => TypeTag::Timestamp,
            Value::Timestamptz(_) => TypeTag::Timestamptz,
            Value::Timetz(_) => TypeTag::Timetz,
            Value::Interval(_) => TypeTag::Interval,
            Value::Inet(_) => TypeTag::Inet,
            Value::Cidr(_) => TypeTag::Cidr,
            Value::Macaddr(_) => TypeTag::Macaddr,
            Value::Macaddr8(_) => TypeTag::Macaddr8,
            Value::Bit(_) => TypeTag::Bit,
            Value::Varbit(_) => TypeTag::Varbit,
            Value::Enum(_) => TypeTag::Enum,
            Value::Identity(_) => TypeTag::ChildIdentity,
            Value::Array(_) => TypeTag::Array,
            Value::Range(_) => TypeTag::Range,
            Value::Multirange(_) => TypeTag::Multirange,
            Value::Jsonb(_) => TypeTag::Jsonb,
            Value::Record(_) => TypeTag::Record,
        }
    }
}

/// The class of a numeric value, as PostgreSQL's `sign` word distinguishes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NumericSign {
    /// Finite, `>= 0` (`NUMERIC_POS`).
    Positive,
    /// Finite, `< 0` (`NUMERIC_NEG`).
    Negative,
    /// `NaN` (`NUMERIC_NAN`).
    NaN,
    /// `Infinity` (`NUMERIC_PINF`).
    PositiveInfinity,
    /// `-Infinity` (`NUMERIC_NINF`).
    NegativeInfinity,
}

/// Base-10000 digit groups of a numeric, most significant first.
///
/// A native `u16` slice, native-endian byte pairs (the backend's `NumericDigit` array, which
/// is unaligned in a value with a 1-byte varlena header), or big-endian byte pairs (the
/// `numeric_send` format), so no source is copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digits<'a>(DigitRepr<'a>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DigitRepr<'a> {
    Native(&'a [u16]),
    NativeBytes(&'a [u8]),
    BigEndian(&'a [u8]),
}

impl<'a> Digits<'a> {
    /// Digits from a native slice.
    pub const fn native(digits: &'a [u16]) -> Self {
        Digits(DigitRepr::Native(digits))
    }

    /// Digits from native-endian byte pairs; `None` if `bytes` has an odd length.
    pub const fn native_bytes(bytes: &'a [u8]) -> Option<Self> {
        if bytes.len().is_multiple_of(2) {
            Some(Digits(DigitRepr::NativeBytes(bytes)))
        } else {
            None
        }
    }

    /// Digits from big-endian byte pairs; `None` if `bytes` has an odd length.
    pub const fn big_endian(bytes: &'a [u8]) -> Option<Self> {
        if bytes.len().is_multiple_of(2) {
            Some(Digits(DigitRepr::BigEndian(bytes)))
        } else {
            None
        }
    }

    /// Number of digit groups.
    #[inline]
    pub const fn len(&self) -> usize {
        match self.0 {
            DigitRepr::Native(d) => d.len(),
            DigitRepr::NativeBytes(b) | DigitRepr::BigEndian(b) => b.len() / 2,
        }
    }

    /// True when there are no digit groups.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Group `i`; panics-free callers index below [`Digits::len`].
    #[inline]
    pub fn get(&self, i: usize) -> Option<u16> {
        match self.0 {
            DigitRepr::Native(d) => d.get(i).copied(),
            DigitRepr::NativeBytes(b) => {
                let pair = b.get(2 * i..2 * i + 2)?;
                Some(u16::from_ne_bytes([pair[0], pair[1]]))
            }
            DigitRepr::BigEndian(b) => {
                let pair = b.get(2 * i..2 * i + 2)?;
                Some(u16::from_be_bytes([pair[0], pair[1]]))
            }
        }
    }

    /// The groups in `start..end` as digits of the same representation.
    #[inline]
    pub(crate) fn slice(&self, start: usize, end: usize) -> Digits<'a> {
        match self.0 {
            DigitRepr::Native(d) => Digits(DigitRepr::Native(&d[start..end])),
            DigitRepr::NativeBytes(b) => Digits(DigitRepr::NativeBytes(&b[2 * start..2 * end])),
            DigitRepr::BigEndian(b) => Digits(DigitRepr::BigEndian(&b[2 * start..2 * end])),
        }
    }

    /// Iterates the groups.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

/// A `numeric` value as PostgreSQL holds it: class, base-10000 weight of the first digit
/// group, and digit groups. Leading and trailing zero groups are allowed (the encoder
/// normalises them away); the display scale is not part of the value and has no field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numeric<'a> {
    /// Class of the value.
    pub sign: NumericSign,
    /// Base-10000 exponent of `digits[0]` (value = sum of `digits[i] * 10000^(weight - i)`).
    pub weight: i16,
    /// Digit groups, each `0..=9999`. Ignored for NaN and infinities.
    pub digits: Digits<'a>,
}

impl<'a> Numeric<'a> {
    /// A finite value (`negative` selects the sign) or zero.
    pub const fn finite(negative: bool, weight: i16, digits: Digits<'a>) -> Self {
        Numeric {
            sign: if negative {
                NumericSign::Negative
            } else {
                NumericSign::Positive
            },
            weight,
            digits,
        }
    }

    /// A special value (NaN or an infinity); `sign` should not be a finite class.
    pub const fn special(sign: NumericSign) -> Self {
        Numeric {
            sign,
            weight: 0,
            digits: Digits::native(&[]),
        }
    }
}

/// A `timetz` value: local time of day and the zone in seconds **west** of UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Timetz {
    /// Microseconds since local midnight, `0..=86_400_000_000`.
    pub time: i64,
    /// Seconds west of UTC (PostgreSQL's sign convention), `|zone| < 57600`.
    pub zone: i32,
}

/// An `interval`, held as PostgreSQL's 128-bit comparison value
/// (`time + (month * 30 + day) * USECS_PER_DAY`, `interval_cmp_value`), which is exactly what
/// its equality and order depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Interval {
    cmp: i128,
}

impl Interval {
    /// Smallest comparison value of any representable interval.
    pub const MIN_CMP: i128 = Interval::from_fields(i32::MIN, i32::MIN, i64::MIN).cmp;
    /// Largest comparison value of any representable interval.
    pub const MAX_CMP: i128 = Interval::from_fields(i32::MAX, i32::MAX, i64::MAX).cmp;

    /// From PostgreSQL's `Interval` struct fields.
    pub const fn from_fields(months: i32, days: i32, micros: i64) -> Self {
        let days_total = months as i128 * 30 + days as i128;
        Interval {
            cmp: micros as i128 + days_total * USECS_PER_DAY as i128,
        }
    }

    /// From a comparison value; `None` outside [`Interval::MIN_CMP`]..=[`Interval::MAX_CMP`].
    pub const fn from_cmp_value(cmp: i128) -> Option<Self> {
        if cmp < Self::MIN_CMP || cmp > Self::MAX_CMP {
            None
        } else {
            Some(Interval { cmp })
        }
    }

    /// The 128-bit comparison value.
    pub const fn cmp_value(self) -> i128 {
        self.cmp
    }
}

/// Address family of an `inet`/`cidr` value, with PostgreSQL's wire numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum IpFamily {
    /// IPv4 (`PGSQL_AF_INET`, 2).
    V4 = 2,
    /// IPv6 (`PGSQL_AF_INET6`, 3).
    V6 = 3,
}

impl IpFamily {
    /// Address length in bytes.
    pub const fn addr_len(self) -> usize {
        match self {
            IpFamily::V4 => 4,
            IpFamily::V6 => 16,
        }
    }

    /// Maximum prefix length in bits.
    pub const fn max_bits(self) -> u8 {
        match self {
            IpFamily::V4 => 32,
            IpFamily::V6 => 128,
        }
    }

    /// The family with wire number `byte`.
    pub const fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            2 => Some(IpFamily::V4),
            3 => Some(IpFamily::V6),
            _ => None,
        }
    }
}

/// An `inet` or `cidr` value: family, prefix length and address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Inet {
    /// Address family.
    pub family: IpFamily,
    /// Prefix length in bits, `0..=family.max_bits()`.
    pub bits: u8,
    /// Address bytes; IPv4 uses the first 4, the rest must be zero.
    pub addr: [u8; 16],
}

impl Inet {
    /// An IPv4 value.
    pub const fn v4(addr: [u8; 4], bits: u8) -> Self {
        let mut a = [0u8; 16];
        a[0] = addr[0];
        a[1] = addr[1];
        a[2] = addr[2];
        a[3] = addr[3];
        Inet {
            family: IpFamily::V4,
            bits,
            addr: a,
        }
    }

    /// An IPv6 value.
    pub const fn v6(addr: [u8; 16], bits: u8) -> Self {
        Inet {
            family: IpFamily::V6,
            bits,
            addr,
        }
    }

    /// The address bytes of the family (4 or 16).
    pub fn address(&self) -> &[u8] {
        &self.addr[..self.family.addr_len()]
    }
}

/// A `bit`/`varbit` value: length in bits and the packed bytes, most significant bit first;
/// pad bits of the last byte must be zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BitString<'a> {
    /// Number of bits.
    pub bit_len: u32,
    /// `ceil(bit_len / 8)` packed bytes.
    pub bytes: &'a [u8],
}
