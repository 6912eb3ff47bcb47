//! Strict readers of the scalar payloads (spec/wire-format.md §5, §8): each accepts exactly
//! the one canonical encoding of its value and names what is wrong otherwise.

use alloc::vec::Vec;

use super::source::{FieldCtx, Source, need, need_array, read_escaped};
use crate::error::{Error, Limit, Result};
use crate::limits::{MAX_BIT_LEN, MAX_ENUM_LABEL_LEN, MAX_NUMERIC_GROUPS};
use crate::primitives::{unflip_i16, unflip_i32, unflip_i64, unflip_i128};
use crate::scalar::{
    FLOAT4_CANONICAL_NAN, FLOAT8_CANONICAL_NAN, Inet, Interval, IpFamily, NumericSign, OwnedBits,
    OwnedNumeric, Timetz, USECS_PER_DAY, netmask_byte, numeric_class,
};
use crate::tag::TypeTag;
use crate::value::OwnedValue;

/// Reads the payload of scalar family `ctx.tag` (not the child identity, which is framed
/// like a structure). Returns the value when `ctx.keep`.
pub(super) fn read_scalar(src: &mut dyn Source, ctx: &FieldCtx) -> Result<Option<OwnedValue>> {
    let v = match ctx.tag {
        TypeTag::Bool => OwnedValue::Bool(read_bool(src, ctx)?),
        TypeTag::Int2 => OwnedValue::Int2(unflip_i16(need_array(src)?)),
        TypeTag::Int4 => OwnedValue::Int4(unflip_i32(need_array(src)?)),
        TypeTag::Int8 => OwnedValue::Int8(unflip_i64(need_array(src)?)),
        TypeTag::Oid => OwnedValue::Oid(u32::from_be_bytes(need_array(src)?)),
        TypeTag::Float4 => OwnedValue::Float4(read_float4(src, ctx)?),
        TypeTag::Float8 => OwnedValue::Float8(read_float8(src, ctx)?),
        TypeTag::Numeric => OwnedValue::Numeric(read_numeric(src, ctx)?),
        TypeTag::Text => OwnedValue::Text(read_text(src, ctx)?),
        TypeTag::Varchar => OwnedValue::Varchar(read_text(src, ctx)?),
        TypeTag::Bpchar => OwnedValue::Bpchar(read_text(src, ctx)?),
        TypeTag::Enum => OwnedValue::Enum(read_text(src, ctx)?),
        TypeTag::Bytea => OwnedValue::Bytea(read_bytes(src, ctx)?),
        TypeTag::Uuid => OwnedValue::Uuid(need_array(src)?),
        TypeTag::Date => OwnedValue::Date(unflip_i32(need_array(src)?)),
        TypeTag::Time => OwnedValue::Time(read_time(src, ctx)?),
        TypeTag::Timestamp => OwnedValue::Timestamp(unflip_i64(need_array(src)?)),
        TypeTag::Timestamptz => OwnedValue::Timestamptz(unflip_i64(need_array(src)?)),
        TypeTag::Timetz => OwnedValue::Timetz(read_timetz(src, ctx)?),
        TypeTag::Interval => OwnedValue::Interval(read_interval(src, ctx)?),
        TypeTag::Inet => OwnedValue::Inet(read_inet(src, ctx)?),
        TypeTag::Cidr => OwnedValue::Cidr(read_inet(src, ctx)?),
        TypeTag::Macaddr => OwnedValue::Macaddr(need_array(src)?),
        TypeTag::Macaddr8 => OwnedValue::Macaddr8(need_array(src)?),
        TypeTag::Bit => OwnedValue::Bit(read_bits(src, ctx)?),
        TypeTag::Varbit => OwnedValue::Varbit(read_bits(src, ctx)?),
        TypeTag::ChildIdentity
        | TypeTag::Array
        | TypeTag::Range
        | TypeTag::Multirange
        | TypeTag::Jsonb
        | TypeTag::Record => return Err(ctx.non_canonical("not a scalar family")),
    };
    Ok(ctx.keep.then_some(v))
}

fn read_bool(src: &mut dyn Source, ctx: &FieldCtx) -> Result<bool> {
    match need(src)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(ctx.non_canonical("bool byte is neither 0x00 nor 0x01")),
    }
}

/// Inverse of the sortable transform (spec §5.4); `-0` and any NaN but the canonical one
/// are not canonical.
fn read_float4(src: &mut dyn Source, ctx: &FieldCtx) -> Result<f32> {
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
    if x.is_nan() && bits != FLOAT4_CANONICAL_NAN {
        return Err(ctx.non_canonical("NaN other than 0x7FC00000"));
    }
    Ok(x)
}

fn read_float8(src: &mut dyn Source, ctx: &FieldCtx) -> Result<f64> {
    let key = u64::from_be_bytes(need_array(src)?);
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
/// an enum label within its limit. The bytes are collected only when `ctx.keep`.
pub(super) fn read_text(src: &mut dyn Source, ctx: &FieldCtx) -> Result<Vec<u8>> {
    let mut keep = Vec::new();
    let mut len = 0usize;
    let mut last = 0u8;
    read_escaped(src, ctx, 0, |b| {
        if b == 0 {
            return Err(ctx.non_canonical("character data contains a NUL byte"));
        }
        len += 1;
        last = b;
        if ctx.keep {
            keep.push(b);
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

/// `bytea` (spec §5.8): any bytes.
fn read_bytes(src: &mut dyn Source, ctx: &FieldCtx) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    read_escaped(src, ctx, 0, |b| {
        if ctx.keep {
            out.push(b);
        }
        Ok(())
    })?;
    Ok(out)
}

fn read_time(src: &mut dyn Source, ctx: &FieldCtx) -> Result<i64> {
    let t = u64::from_be_bytes(need_array(src)?);
    if t > USECS_PER_DAY as u64 {
        return Err(ctx.non_canonical("time of day beyond 24:00"));
    }
    Ok(t as i64)
}

fn read_timetz(src: &mut dyn Source, ctx: &FieldCtx) -> Result<Timetz> {
    let gmt = unflip_i64(need_array(src)?);
    let zone = unflip_i32(need_array(src)?);
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

fn read_interval(src: &mut dyn Source, ctx: &FieldCtx) -> Result<Interval> {
    let cmp = unflip_i128(need_array(src)?);
    Interval::from_cmp_value(cmp)
        .ok_or_else(|| ctx.non_canonical("comparison value outside interval range"))
}

/// Reads a numeric payload (spec §5.5): class, then for finite non-zero values the weight and
/// the normalised digit groups (no leading or trailing zero group).
pub(super) fn read_numeric(src: &mut dyn Source, ctx: &FieldCtx) -> Result<OwnedNumeric> {
    let (sign, xor) = match need(src)? {
        numeric_class::NEG_INF => return Ok(OwnedNumeric::special(NumericSign::NegativeInfinity)),
        numeric_class::POS_INF => return Ok(OwnedNumeric::special(NumericSign::PositiveInfinity)),
        numeric_class::NAN => return Ok(OwnedNumeric::special(NumericSign::NaN)),
        numeric_class::ZERO => return Ok(OwnedNumeric::special(NumericSign::Positive)),
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

/// `inet` / `cidr` (spec §5.15): the network part must be the masked address, and a `cidr`
/// has no host bits.
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
