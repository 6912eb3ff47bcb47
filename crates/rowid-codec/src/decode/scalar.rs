//! Strict readers of the scalar payloads (spec/wire-format.md §5, §8): each accepts exactly
//! the one canonical encoding of its value and names what is wrong otherwise.

use alloc::vec::Vec;

use super::source::{FieldCtx, Reader};
use crate::error::{Error, Limit, Result};
use crate::limits::{MAX_BIT_LEN, MAX_ENUM_LABEL_LEN, MAX_NUMERIC_GROUPS};
use crate::primitives::{unflip_i16, unflip_i32, unflip_i64, unflip_i128};
use crate::scalar::{
    FLOAT4_CANONICAL_NAN, FLOAT8_CANONICAL_NAN, Inet, Interval, IpFamily, NumericSign, OwnedBits,
    OwnedNumeric, Timetz, USECS_PER_DAY, netmask_byte, numeric_class,
};
use crate::tag::TypeTag;
use crate::value::OwnedValue;

/// The payload width of a fixed-width family every one of whose payloads of that width is
/// canonical (integers, `oid`, `uuid`, `date`, timestamps, MAC addresses): checking such a
/// payload is skipping it. `None` for families with a check or a variable width.
#[inline]
pub(super) const fn any_bytes_width(tag: TypeTag) -> Option<usize> {
    match tag {
        TypeTag::Int2 => Some(2),
        TypeTag::Int4 | TypeTag::Oid | TypeTag::Date => Some(4),
        TypeTag::Macaddr => Some(6),
        TypeTag::Int8 | TypeTag::Timestamp | TypeTag::Timestamptz | TypeTag::Macaddr8 => Some(8),
        TypeTag::Uuid => Some(16),
        _ => None,
    }
}

/// The value of a family every payload of whose width is canonical ([`any_bytes_width`]),
/// from exactly that many bytes; `None` for any other family or length.
#[inline]
pub(super) fn any_bytes_value(tag: TypeTag, bytes: &[u8]) -> Option<OwnedValue> {
    Some(match tag {
        TypeTag::Int2 => OwnedValue::Int2(unflip_i16(bytes.try_into().ok()?)),
        TypeTag::Int4 => OwnedValue::Int4(unflip_i32(bytes.try_into().ok()?)),
        TypeTag::Int8 => OwnedValue::Int8(unflip_i64(bytes.try_into().ok()?)),
        TypeTag::Oid => OwnedValue::Oid(u32::from_be_bytes(bytes.try_into().ok()?)),
        TypeTag::Uuid => OwnedValue::Uuid(bytes.try_into().ok()?),
        TypeTag::Date => OwnedValue::Date(unflip_i32(bytes.try_into().ok()?)),
        TypeTag::Timestamp => OwnedValue::Timestamp(unflip_i64(bytes.try_into().ok()?)),
        TypeTag::Timestamptz => OwnedValue::Timestamptz(unflip_i64(bytes.try_into().ok()?)),
        TypeTag::Macaddr => OwnedValue::Macaddr(bytes.try_into().ok()?),
        TypeTag::Macaddr8 => OwnedValue::Macaddr8(bytes.try_into().ok()?),
        _ => return None,
    })
}

/// Reads the payload of scalar family `ctx.tag` (not the child identity, which is framed
/// like a structure). Returns the value when `ctx.keep`.
pub(super) fn read_scalar(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<Option<OwnedValue>> {
    // Each arm builds its variant only when kept, so a checked value is dropped as the
    // plain value it is (no generic drop of an `OwnedValue`).
    macro_rules! kept {
        ($variant:ident, $read:expr) => {{
            let v = $read;
            ctx.keep.then(|| OwnedValue::$variant(v))
        }};
    }
    if let Some(width) = any_bytes_width(ctx.tag) {
        let start = r.offset();
        r.skip(width)?;
        return Ok(if ctx.keep {
            any_bytes_value(ctx.tag, r.since(start))
        } else {
            None
        });
    }
    Ok(match ctx.tag {
        TypeTag::Bool => kept!(Bool, read_bool(r, ctx)?),
        TypeTag::Float4 => kept!(Float4, read_float4(r, ctx)?),
        TypeTag::Float8 => kept!(Float8, read_float8(r, ctx)?),
        TypeTag::Numeric => kept!(Numeric, read_numeric(r, ctx)?),
        TypeTag::Text => kept!(Text, owned_text(r, ctx)?),
        TypeTag::Varchar => kept!(Varchar, owned_text(r, ctx)?),
        TypeTag::Bpchar => kept!(Bpchar, owned_text(r, ctx)?),
        TypeTag::Enum => kept!(Enum, owned_text(r, ctx)?),
        TypeTag::Bytea => kept!(Bytea, read_bytes(r, ctx)?),
        TypeTag::Time => kept!(Time, read_time(r, ctx)?),
        TypeTag::Timetz => kept!(Timetz, read_timetz(r, ctx)?),
        TypeTag::Interval => kept!(Interval, read_interval(r, ctx)?),
        TypeTag::Inet => kept!(Inet, read_inet(r, ctx)?),
        TypeTag::Cidr => kept!(Cidr, read_inet(r, ctx)?),
        TypeTag::Bit => kept!(Bit, read_bits(r, ctx)?),
        TypeTag::Varbit => kept!(Varbit, read_bits(r, ctx)?),
        // Read above.
        TypeTag::Int2
        | TypeTag::Int4
        | TypeTag::Int8
        | TypeTag::Oid
        | TypeTag::Uuid
        | TypeTag::Date
        | TypeTag::Timestamp
        | TypeTag::Timestamptz
        | TypeTag::Macaddr
        | TypeTag::Macaddr8 => return Err(ctx.non_canonical("fixed-width family read twice")),
        TypeTag::ChildIdentity
        | TypeTag::Array
        | TypeTag::Range
        | TypeTag::Multirange
        | TypeTag::Jsonb
        | TypeTag::Record => return Err(ctx.non_canonical("not a scalar family")),
    })
}

fn read_bool(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<bool> {
    match r.byte()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(ctx.non_canonical("bool byte is neither 0x00 nor 0x01")),
    }
}

/// Inverse of the sortable transform (spec §5.4); `-0` and any NaN but the canonical one
/// are not canonical.
fn read_float4(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<f32> {
    let key = u32::from_be_bytes(r.array()?);
    let bits = if key & 0x8000_0000 != 0 {
        key ^ 0x8000_0000
    } else {
        !key
    };
    let x = f32::from_bits(bits);
    if bits == 0x8000_0000 {
        return Err(ctx.non_canonical("negative zero"));
    }
    if x.is_nan() && bits != FLOAT4_CANONICAL_NAN {
        return Err(ctx.non_canonical("NaN other than 0x7FC00000"));
    }
    Ok(x)
}

fn read_float8(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<f64> {
    let key = u64::from_be_bytes(r.array()?);
    let sign = 0x8000_0000_0000_0000u64;
    let bits = if key & sign != 0 { key ^ sign } else { !key };
    let x = f64::from_bits(bits);
    if bits == sign {
        return Err(ctx.non_canonical("negative zero"));
    }
    if x.is_nan() && bits != FLOAT8_CANONICAL_NAN {
        return Err(ctx.non_canonical("NaN other than 0x7FF8000000000000"));
    }
    Ok(x)
}

/// Reads character data (spec §5.6, §5.7, §5.18): no NUL, no trailing space in a `bpchar`,
/// an enum label within its limit. Character data has nothing to unescape, so the bytes are
/// borrowed from the input.
pub(super) fn read_text<'a>(r: &mut Reader<'a>, ctx: &FieldCtx) -> Result<&'a [u8]> {
    let run = r.escaped(ctx.field, 0)?;
    let Some(text) = run.plain() else {
        return Err(ctx.non_canonical("character data contains a NUL byte"));
    };
    if ctx.tag == TypeTag::Bpchar && text.last() == Some(&b' ') {
        return Err(ctx.non_canonical("bpchar payload keeps trailing spaces"));
    }
    if ctx.tag == TypeTag::Enum && text.len() > MAX_ENUM_LABEL_LEN {
        return Err(Error::LimitExceeded {
            limit: Limit::EnumLabelLength,
            value: text.len(),
        });
    }
    Ok(text)
}

/// Character data kept as an owned value, or checked only.
fn owned_text(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<Vec<u8>> {
    let text = read_text(r, ctx)?;
    Ok(if ctx.keep { text.to_vec() } else { Vec::new() })
}

/// `bytea` (spec §5.8): any bytes, copied in runs between escapes when kept.
fn read_bytes(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<Vec<u8>> {
    let run = r.escaped(ctx.field, 0)?;
    Ok(if ctx.keep {
        run.bytes().into_owned()
    } else {
        Vec::new()
    })
}

fn read_time(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<i64> {
    let t = u64::from_be_bytes(r.array()?);
    if t > USECS_PER_DAY as u64 {
        return Err(ctx.non_canonical("time of day beyond 24:00"));
    }
    Ok(t as i64)
}

fn read_timetz(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<Timetz> {
    let gmt = unflip_i64(r.array()?);
    let zone = unflip_i32(r.array()?);
    let probe = Timetz { time: 0, zone };
    if !probe.zone_in_range() {
        return Err(ctx.non_canonical("zone offset outside ±15:59:59"));
    }
    let time = gmt
        .checked_sub(i64::from(zone) * 1_000_000)
        .filter(|t| (0..=USECS_PER_DAY).contains(t))
        .ok_or_else(|| ctx.non_canonical("local time of day outside 00:00..24:00"))?;
    Ok(Timetz { time, zone })
}

fn read_interval(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<Interval> {
    let cmp = unflip_i128(r.array()?);
    Interval::from_cmp_value(cmp)
        .ok_or_else(|| ctx.non_canonical("comparison value outside interval range"))
}

/// Reads a numeric payload (spec §5.5): class, then for finite non-zero values the weight and
/// the normalised digit groups (no leading or trailing zero group).
pub(super) fn read_numeric(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<OwnedNumeric> {
    let (sign, xor) = match r.byte()? {
        numeric_class::NEG_INF => return Ok(OwnedNumeric::special(NumericSign::NegativeInfinity)),
        numeric_class::POS_INF => return Ok(OwnedNumeric::special(NumericSign::PositiveInfinity)),
        numeric_class::NAN => return Ok(OwnedNumeric::special(NumericSign::NaN)),
        numeric_class::ZERO => return Ok(OwnedNumeric::special(NumericSign::Positive)),
        numeric_class::NEG => (NumericSign::Negative, 0xFF),
        numeric_class::POS => (NumericSign::Positive, 0x00),
        _ => return Err(ctx.non_canonical("unknown numeric class byte")),
    };
    let w = r.array::<2>()?;
    let weight = unflip_i16([w[0] ^ xor, w[1] ^ xor]);
    let run = r.escaped(ctx.field, xor)?;
    if run.len() % 2 != 0 {
        return Err(ctx.non_canonical("odd number of digit bytes"));
    }
    let count = run.len() / 2;
    if count == 0 {
        return Err(ctx.non_canonical("non-zero class without digit groups"));
    }
    if count > MAX_NUMERIC_GROUPS {
        return Err(Error::LimitExceeded {
            limit: Limit::NumericDigits,
            value: count,
        });
    }
    let mut digits = Vec::with_capacity(if ctx.keep { count } else { 0 });
    let mut bytes = run.iter();
    let mut last = 0u16;
    for i in 0..count {
        let (Some(high), Some(low)) = (bytes.next(), bytes.next()) else {
            break;
        };
        let g = u16::from_be_bytes([high, low]);
        if g > 9999 {
            return Err(ctx.non_canonical("digit group exceeds 9999"));
        }
        if i == 0 && g == 0 {
            return Err(ctx.non_canonical("leading zero digit group"));
        }
        last = g;
        if ctx.keep {
            digits.push(g);
        }
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

/// `inet` / `cidr` (spec §5.15): the network part must be the masked address, and a `cidr`
/// has no host bits.
fn read_inet(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<Inet> {
    let family = IpFamily::from_byte(r.byte()?)
        .ok_or_else(|| ctx.non_canonical("unknown address family"))?;
    let len = family.addr_len();
    let mut masked = [0u8; 16];
    for b in &mut masked[..len] {
        *b = r.byte()?;
    }
    let bits = r.byte()?;
    if bits > family.max_bits() {
        return Err(ctx.non_canonical("prefix length exceeds the address width"));
    }
    let mut addr = [0u8; 16];
    for b in &mut addr[..len] {
        *b = r.byte()?;
    }
    for i in 0..len {
        let m = netmask_byte(bits, i);
        if masked[i] != addr[i] & m {
            return Err(ctx.non_canonical("network part does not match the address"));
        }
        if ctx.tag == TypeTag::Cidr && addr[i] & !m != 0 {
            return Err(ctx.non_canonical("cidr value has bits set to the right of the mask"));
        }
    }
    Ok(Inet { family, bits, addr })
}

/// `bit` / `varbit` (spec §5.17): the byte count must match the bit length and pad bits are
/// zero.
fn read_bits(r: &mut Reader<'_>, ctx: &FieldCtx) -> Result<OwnedBits> {
    let run = r.escaped(ctx.field, 0)?;
    let (n, last) = (run.len(), run.last().unwrap_or(0));
    let bytes = if ctx.keep {
        run.bytes().into_owned()
    } else {
        Vec::new()
    };
    let bit_len = u32::from_be_bytes(r.array()?);
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
