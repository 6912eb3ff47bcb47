//! Scalar component types, shaped like PostgreSQL's own in-memory representations, and the
//! per-type facts that both directions of the codec rely on (numeric classes, the `timetz`
//! zone limit, netmasks, canonical floats, `bpchar` padding).
//!
//! Types here borrow their variable-width parts, so the encoder never copies an input before
//! writing it. They check only what their constructors document; everything a value must
//! satisfy to be encodable is checked by the encoder ([`crate::Error::InvalidValue`]) and
//! everything a payload must satisfy to be canonical by the decoder.

use alloc::vec::Vec;

/// Microseconds in one day (`USECS_PER_DAY`): the upper end of `time` and `timetz`.
pub const USECS_PER_DAY: i64 = 86_400_000_000;

/// Canonical float4 NaN (spec §5.4): every NaN encodes as this quiet NaN.
pub const FLOAT4_CANONICAL_NAN: u32 = 0x7FC0_0000;
/// Canonical float8 NaN (spec §5.4).
pub const FLOAT8_CANONICAL_NAN: u64 = 0x7FF8_0000_0000_0000;

/// Canonical float4 bits: `-0` becomes `+0`, every NaN becomes [`FLOAT4_CANONICAL_NAN`]
/// (PostgreSQL's `float4eq` treats all NaNs as equal and `-0 = 0`).
#[inline]
pub fn float4_canonical_bits(x: f32) -> u32 {
    if x.is_nan() {
        FLOAT4_CANONICAL_NAN
    } else if x == 0.0 {
        0
    } else {
        x.to_bits()
    }
}

/// Canonical float8 bits: `-0` becomes `+0`, every NaN becomes [`FLOAT8_CANONICAL_NAN`].
#[inline]
pub fn float8_canonical_bits(x: f64) -> u64 {
    if x.is_nan() {
        FLOAT8_CANONICAL_NAN
    } else if x == 0.0 {
        0
    } else {
        x.to_bits()
    }
}

/// A `bpchar` value with its trailing spaces removed: what `bpchareq` compares (spec §5.7).
/// Only spaces are pad characters; a trailing tab or newline is data.
#[inline]
pub fn bpchar_strip(s: &[u8]) -> &[u8] {
    let end = s.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    &s[..end]
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

/// Numeric class bytes (spec §5.5), in PostgreSQL's order: `-Infinity` < negative < zero <
/// positive < `Infinity` < `NaN`.
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

/// Base-10000 digit groups of a numeric, most significant first.
///
/// A native `u16` slice, native-endian byte pairs (the backend's `NumericDigit` array, which
/// is unaligned in a value with a 1-byte varlena header), or big-endian byte pairs (the
/// `numeric_send` format), so no source is copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digits<'a>(DigitRepr<'a>);

/// How a [`Digits`] holds its groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DigitRepr<'a> {
    /// Native `u16` groups.
    Native(&'a [u16]),
    /// Groups as native-endian byte pairs (a Datum's digits, unaligned).
    NativeBytes(&'a [u8]),
    /// Groups as big-endian byte pairs (the binary send format).
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

    /// The representation, for loops compiled once per representation.
    #[inline]
    pub(crate) const fn repr(&self) -> DigitRepr<'a> {
        self.0
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

/// A numeric that owns its digit groups. A decoded one is normalised (no leading or trailing
/// zero groups; zero has no groups); one built from other input keeps its groups as given,
/// and encodes identically to its normalised form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedNumeric {
    /// Class.
    pub sign: NumericSign,
    /// Base-10000 exponent of the first group.
    pub weight: i16,
    /// Digit groups.
    pub digits: Vec<u16>,
}

impl OwnedNumeric {
    /// A special value (NaN or an infinity), or zero with [`NumericSign::Positive`].
    pub const fn special(sign: NumericSign) -> Self {
        OwnedNumeric {
            sign,
            weight: 0,
            digits: Vec::new(),
        }
    }

    /// Borrows the numeric as an encoder input.
    pub fn as_numeric(&self) -> Numeric<'_> {
        Numeric {
            sign: self.sign,
            weight: self.weight,
            digits: Digits::native(&self.digits),
        }
    }
}

impl From<Numeric<'_>> for OwnedNumeric {
    fn from(n: Numeric<'_>) -> Self {
        OwnedNumeric {
            sign: n.sign,
            weight: n.weight,
            digits: n.digits.iter().collect(),
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

/// Largest absolute `timetz` zone offset in seconds, exclusive (PostgreSQL's `TZDISP_LIMIT`,
/// 15:59:59 plus one second).
pub const TZDISP_LIMIT: i32 = 57_600;

impl Timetz {
    /// True when the zone offset is one PostgreSQL can store (`|zone| < TZDISP_LIMIT`).
    pub const fn zone_in_range(&self) -> bool {
        self.zone > -TZDISP_LIMIT && self.zone < TZDISP_LIMIT
    }
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

/// Byte `i` of the netmask of a `bits`-bit prefix (`0xFF` for whole bytes inside the prefix,
/// `0x00` beyond it).
#[inline]
pub const fn netmask_byte(bits: u8, i: usize) -> u8 {
    let start = 8 * i;
    let bits = bits as usize;
    if bits <= start {
        0
    } else if bits >= start + 8 {
        0xFF
    } else {
        0xFF << (8 - (bits - start))
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

/// A bit string that owns its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedBits {
    /// Length in bits.
    pub bit_len: u32,
    /// Packed bytes.
    pub bytes: Vec<u8>,
}

impl OwnedBits {
    /// Borrows the bit string as an encoder input.
    pub fn as_bits(&self) -> BitString<'_> {
        BitString {
            bit_len: self.bit_len,
            bytes: &self.bytes,
        }
    }
}

impl From<BitString<'_>> for OwnedBits {
    fn from(b: BitString<'_>) -> Self {
        OwnedBits {
            bit_len: b.bit_len,
            bytes: b.bytes.to_vec(),
        }
    }
}

/// A complete child identity (JOIN_KEY / SET_KEY / WINDOW_KEY components, spec §6.1) that
/// the strict decoder has accepted: its bytes and its nesting depth. The only constructor is
/// [`ChildIdentity::new`], which validates, so the encoder can trust both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildIdentity<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) depth: u32,
}

impl<'a> ChildIdentity<'a> {
    /// The child identity's bytes (unescaped).
    pub const fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Its nesting depth: 1, plus the deepest structure or child identity inside it.
    pub const fn depth(&self) -> u32 {
        self.depth
    }
}

/// A [`ChildIdentity`] that owns its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedChildIdentity {
    bytes: Vec<u8>,
    depth: u32,
}

impl OwnedChildIdentity {
    /// Borrows the child identity.
    pub fn as_child(&self) -> ChildIdentity<'_> {
        ChildIdentity {
            bytes: &self.bytes,
            depth: self.depth,
        }
    }

    /// The child identity's bytes (unescaped).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl From<ChildIdentity<'_>> for OwnedChildIdentity {
    fn from(c: ChildIdentity<'_>) -> Self {
        OwnedChildIdentity {
            bytes: c.bytes.to_vec(),
            depth: c.depth,
        }
    }
}
