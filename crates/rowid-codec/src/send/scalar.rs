//! Send formats of the scalar families (spec/wire-format.md §9), read in place: each parser
//! takes exactly one value's bytes, borrows them, and rejects short or trailing input.

use crate::error::{Error, Result};
use crate::scalar::{
    BitString, ChildIdentity, Digits, Inet, Interval, IpFamily, Numeric, NumericSign, Timetz,
};
use crate::tag::TypeTag;
use crate::value::Value;

/// [`Error::InvalidSendFormat`] for type `tag` at `offset`.
pub(super) fn bad(tag: TypeTag, offset: usize, reason: &'static str) -> Error {
    Error::InvalidSendFormat {
        tag,
        offset,
        reason,
    }
}

fn fixed<const N: usize>(tag: TypeTag, b: &[u8]) -> Result<[u8; N]> {
    if b.len() < N {
        return Err(bad(tag, b.len(), "value is shorter than its fixed width"));
    }
    if b.len() > N {
        return Err(Error::TrailingBytes { offset: N });
    }
    let mut out = [0u8; N];
    out.copy_from_slice(b);
    Ok(out)
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

/// `boolsend`: one byte, 0 or 1.
pub fn bool_from_send(b: &[u8]) -> Result<bool> {
    match fixed::<1>(TypeTag::Bool, b)? {
        [0] => Ok(false),
        [1] => Ok(true),
        _ => Err(bad(TypeTag::Bool, 0, "bool byte is neither 0 nor 1")),
    }
}

/// `int2send`.
pub fn int2_from_send(b: &[u8]) -> Result<i16> {
    Ok(i16::from_be_bytes(fixed(TypeTag::Int2, b)?))
}

/// `int4send`.
pub fn int4_from_send(b: &[u8]) -> Result<i32> {
    Ok(i32::from_be_bytes(fixed(TypeTag::Int4, b)?))
}

/// `int8send`.
pub fn int8_from_send(b: &[u8]) -> Result<i64> {
    Ok(i64::from_be_bytes(fixed(TypeTag::Int8, b)?))
}

/// `oidsend`.
pub fn oid_from_send(b: &[u8]) -> Result<u32> {
    Ok(u32::from_be_bytes(fixed(TypeTag::Oid, b)?))
}

/// `float4send`: IEEE bits, big-endian.
pub fn float4_from_send(b: &[u8]) -> Result<f32> {
    Ok(f32::from_bits(u32::from_be_bytes(fixed(
        TypeTag::Float4,
        b,
    )?)))
}

/// `float8send`: IEEE bits, big-endian.
pub fn float8_from_send(b: &[u8]) -> Result<f64> {
    Ok(f64::from_bits(u64::from_be_bytes(fixed(
        TypeTag::Float8,
        b,
    )?)))
}

/// `numeric_send`: int16 ndigits, int16 weight, uint16 sign, int16 dscale, digit groups.
/// The digits are borrowed, not copied; normalisation is the encoder's job.
pub fn numeric_from_send(b: &[u8]) -> Result<Numeric<'_>> {
    let t = TypeTag::Numeric;
    if b.len() < 8 {
        return Err(bad(t, b.len(), "numeric header is shorter than 8 bytes"));
    }
    let ndigits = be_i16(b, 0);
    let weight = be_i16(b, 2);
    let sign = u16::from_be_bytes([b[4], b[5]]);
    let dscale = be_i16(b, 6);
    if ndigits < 0 {
        return Err(bad(t, 0, "negative digit count"));
    }
    if dscale < 0 {
        return Err(bad(t, 6, "negative display scale"));
    }
    let want = 8 + 2 * ndigits as usize;
    if b.len() < want {
        return Err(bad(t, b.len(), "fewer digit groups than ndigits says"));
    }
    if b.len() > want {
        return Err(Error::TrailingBytes { offset: want });
    }
    let sign = match sign {
        0x0000 => NumericSign::Positive,
        0x4000 => NumericSign::Negative,
        0xC000 => NumericSign::NaN,
        0xD000 => NumericSign::PositiveInfinity,
        0xF000 => NumericSign::NegativeInfinity,
        _ => return Err(bad(t, 4, "unknown numeric sign word")),
    };
    if !matches!(sign, NumericSign::Positive | NumericSign::Negative) && ndigits != 0 {
        return Err(bad(t, 0, "NaN or infinity with digit groups"));
    }
    let digits = Digits::big_endian(&b[8..]).ok_or(bad(t, 8, "odd digit byte count"))?;
    if let Some(i) = (0..digits.len()).find(|&i| digits.get(i).is_some_and(|g| g > 9999)) {
        return Err(bad(t, 8 + 2 * i, "digit group exceeds 9999"));
    }
    Ok(Numeric {
        sign,
        weight,
        digits,
    })
}

/// `textsend`, `varcharsend`, `bpcharsend`, `enum_send`: the raw bytes. A NUL byte is not a
/// character and is rejected.
pub fn text_from_send(tag: TypeTag, b: &[u8]) -> Result<&[u8]> {
    match b.iter().position(|&c| c == 0) {
        Some(i) => Err(bad(tag, i, "character data contains a NUL byte")),
        None => Ok(b),
    }
}

/// `uuid_send`.
pub fn uuid_from_send(b: &[u8]) -> Result<[u8; 16]> {
    fixed(TypeTag::Uuid, b)
}

/// `date_send`: int32 days since 2000-01-01.
pub fn date_from_send(b: &[u8]) -> Result<i32> {
    Ok(i32::from_be_bytes(fixed(TypeTag::Date, b)?))
}

/// `time_send`: int64 microseconds.
pub fn time_from_send(b: &[u8]) -> Result<i64> {
    Ok(i64::from_be_bytes(fixed(TypeTag::Time, b)?))
}

/// `timestamp_send` / `timestamptz_send`: int64 microseconds since 2000-01-01.
pub fn timestamp_from_send(b: &[u8]) -> Result<i64> {
    Ok(i64::from_be_bytes(fixed(TypeTag::Timestamp, b)?))
}

/// `timetz_send`: int64 time, int32 zone (seconds west of UTC).
pub fn timetz_from_send(b: &[u8]) -> Result<Timetz> {
    let a: [u8; 12] = fixed(TypeTag::Timetz, b)?;
    Ok(Timetz {
        time: i64::from_be_bytes([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]),
        zone: i32::from_be_bytes([a[8], a[9], a[10], a[11]]),
    })
}

/// `interval_send`: int64 time, int32 day, int32 month (day before month).
pub fn interval_from_send(b: &[u8]) -> Result<Interval> {
    let a: [u8; 16] = fixed(TypeTag::Interval, b)?;
    let time = i64::from_be_bytes([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]);
    let day = i32::from_be_bytes([a[8], a[9], a[10], a[11]]);
    let month = i32::from_be_bytes([a[12], a[13], a[14], a[15]]);
    Ok(Interval::from_fields(month, day, time))
}

/// `inet_send` / `cidr_send`: u8 family, u8 bits, u8 is_cidr, u8 address length, address.
/// `tag` says which of the two is expected; the `is_cidr` byte must agree.
pub fn inet_from_send(tag: TypeTag, b: &[u8]) -> Result<Inet> {
    if b.len() < 4 {
        return Err(bad(tag, b.len(), "inet header is shorter than 4 bytes"));
    }
    let family = IpFamily::from_byte(b[0]).ok_or(bad(tag, 0, "unknown address family"))?;
    let bits = b[1];
    if bits > family.max_bits() {
        return Err(bad(tag, 1, "prefix length exceeds the address width"));
    }
    let want_cidr = u8::from(tag == TypeTag::Cidr);
    if b[2] != want_cidr {
        return Err(bad(tag, 2, "is_cidr flag does not match the type"));
    }
    let n = family.addr_len();
    if usize::from(b[3]) != n {
        return Err(bad(tag, 3, "address length does not match the family"));
    }
    if b.len() < 4 + n {
        return Err(bad(tag, b.len(), "address is truncated"));
    }
    if b.len() > 4 + n {
        return Err(Error::TrailingBytes { offset: 4 + n });
    }
    let mut addr = [0u8; 16];
    addr[..n].copy_from_slice(&b[4..]);
    Ok(Inet { family, bits, addr })
}

/// `macaddr_send`.
pub fn macaddr_from_send(b: &[u8]) -> Result<[u8; 6]> {
    fixed(TypeTag::Macaddr, b)
}

/// `macaddr8_send`.
pub fn macaddr8_from_send(b: &[u8]) -> Result<[u8; 8]> {
    fixed(TypeTag::Macaddr8, b)
}

/// `bit_send` / `varbit_send`: int32 bit length, packed bytes.
pub fn bits_from_send(tag: TypeTag, b: &[u8]) -> Result<BitString<'_>> {
    if b.len() < 4 {
        return Err(bad(tag, b.len(), "bit length is truncated"));
    }
    let len = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let bit_len = u32::try_from(len).map_err(|_| bad(tag, 0, "negative bit length"))?;
    let want = 4 + (bit_len as usize).div_ceil(8);
    if b.len() < want {
        return Err(bad(tag, b.len(), "fewer bytes than the bit length needs"));
    }
    if b.len() > want {
        return Err(Error::TrailingBytes { offset: want });
    }
    Ok(BitString {
        bit_len,
        bytes: &b[4..],
    })
}

/// Parses the send format of scalar type `tag` into an encoder input, borrowing `b`. A child
/// identity travels as `bytea` and must be a valid identity. Structural tags need the field's
/// shape: use [`super::owned_from_send`].
pub fn value_from_send(tag: TypeTag, b: &[u8]) -> Result<Value<'_>> {
    Ok(match tag {
        TypeTag::Bool => Value::Bool(bool_from_send(b)?),
        TypeTag::Int2 => Value::Int2(int2_from_send(b)?),
        TypeTag::Int4 => Value::Int4(int4_from_send(b)?),
        TypeTag::Int8 => Value::Int8(int8_from_send(b)?),
        TypeTag::Oid => Value::Oid(oid_from_send(b)?),
        TypeTag::Float4 => Value::Float4(float4_from_send(b)?),
        TypeTag::Float8 => Value::Float8(float8_from_send(b)?),
        TypeTag::Numeric => Value::Numeric(numeric_from_send(b)?),
        TypeTag::Text => Value::Text(text_from_send(tag, b)?),
        TypeTag::Varchar => Value::Varchar(text_from_send(tag, b)?),
        TypeTag::Bpchar => Value::Bpchar(text_from_send(tag, b)?),
        TypeTag::Enum => Value::Enum(text_from_send(tag, b)?),
        TypeTag::Bytea => Value::Bytea(b),
        TypeTag::ChildIdentity => Value::Identity(ChildIdentity::new(b)?),
        TypeTag::Uuid => Value::Uuid(uuid_from_send(b)?),
        TypeTag::Date => Value::Date(date_from_send(b)?),
        TypeTag::Time => Value::Time(time_from_send(b)?),
        TypeTag::Timestamp => Value::Timestamp(timestamp_from_send(b)?),
        TypeTag::Timestamptz => Value::Timestamptz(timestamp_from_send(b)?),
        TypeTag::Timetz => Value::Timetz(timetz_from_send(b)?),
        TypeTag::Interval => Value::Interval(interval_from_send(b)?),
        TypeTag::Inet => Value::Inet(inet_from_send(tag, b)?),
        TypeTag::Cidr => Value::Cidr(inet_from_send(tag, b)?),
        TypeTag::Macaddr => Value::Macaddr(macaddr_from_send(b)?),
        TypeTag::Macaddr8 => Value::Macaddr8(macaddr8_from_send(b)?),
        TypeTag::Bit => Value::Bit(bits_from_send(tag, b)?),
        TypeTag::Varbit => Value::Varbit(bits_from_send(tag, b)?),
        TypeTag::Array
        | TypeTag::Range
        | TypeTag::Multirange
        | TypeTag::Jsonb
        | TypeTag::Record => {
            return Err(bad(
                tag,
                0,
                "a structural value needs its shape (owned_from_send)",
            ));
        }
    })
}
