//! Payload writers of the scalar families whose bytes are more than a copy
//! (spec/wire-format.md §5): floats, numeric, character data, `timetz`, `inet`/`cidr` and
//! bit strings. Each checks the value first and writes nothing when it is refused.

use alloc::vec::Vec;

use crate::error::{Error, Limit, Result};
use crate::limits::{MAX_BIT_LEN, MAX_ENUM_LABEL_LEN, MAX_NUMERIC_GROUPS};
use crate::primitives::{
    ESCAPE, ESCAPED_ZERO, TERMINATOR, flip_i16, flip_i32, flip_i64, put_escaped,
};
use crate::scalar::{
    BitString, DigitRepr, Digits, Inet, Numeric, NumericSign, Timetz, USECS_PER_DAY, bpchar_strip,
    float4_canonical_bits, float8_canonical_bits, netmask_byte, numeric_class,
};
use crate::tag::TypeTag;

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

/// Escapes and terminates character data (spec §5.6); a NUL byte is not a character.
#[inline]
pub(crate) fn put_text(buf: &mut Vec<u8>, field: u32, tag: TypeTag, s: &[u8]) -> Result<()> {
    if has_nul(s) {
        return Err(Error::invalid_value(
            field,
            tag,
            "character data contains a NUL byte",
        ));
    }
    buf.reserve(s.len() + 2);
    buf.extend_from_slice(s);
    buf.extend_from_slice(&[ESCAPE, TERMINATOR]);
    Ok(())
}

/// `bpchar` (spec §5.7): the value without its pad spaces.
#[inline]
pub(crate) fn put_bpchar(buf: &mut Vec<u8>, field: u32, s: &[u8]) -> Result<()> {
    put_text(buf, field, TypeTag::Bpchar, bpchar_strip(s))
}

/// An enum label (spec §5.18), at most `MAX_ENUM_LABEL_LEN` bytes.
pub(crate) fn put_enum(buf: &mut Vec<u8>, field: u32, label: &[u8]) -> Result<()> {
    if label.len() > MAX_ENUM_LABEL_LEN {
        return Err(Error::LimitExceeded {
            limit: Limit::EnumLabelLength,
            value: label.len(),
        });
    }
    put_text(buf, field, TypeTag::Enum, label)
}

/// `time` (spec §5.11): unsigned microseconds, at most 24:00.
#[inline]
pub(crate) fn put_time(buf: &mut Vec<u8>, field: u32, t: i64) -> Result<()> {
    if !(0..=USECS_PER_DAY).contains(&t) {
        return Err(Error::invalid_value(
            field,
            TypeTag::Time,
            "time of day outside 00:00..24:00",
        ));
    }
    buf.extend_from_slice(&(t as u64).to_be_bytes());
    Ok(())
}

/// `timetz` (spec §5.13): GMT-equivalent microseconds, then the zone.
pub(crate) fn put_timetz(buf: &mut Vec<u8>, field: u32, t: Timetz) -> Result<()> {
    if !(0..=USECS_PER_DAY).contains(&t.time) {
        return Err(Error::invalid_value(
            field,
            TypeTag::Timetz,
            "time of day outside 00:00..24:00",
        ));
    }
    if !t.zone_in_range() {
        return Err(Error::invalid_value(
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

/// `inet` / `cidr` (spec §5.15): family, network part, prefix length, address.
pub(crate) fn put_inet(buf: &mut Vec<u8>, field: u32, tag: TypeTag, n: &Inet) -> Result<()> {
    let len = n.family.addr_len();
    if n.bits > n.family.max_bits() {
        return Err(Error::invalid_value(
            field,
            tag,
            "prefix length exceeds the address width",
        ));
    }
    if n.addr[len..].iter().any(|&b| b != 0) {
        return Err(Error::invalid_value(
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
            .any(|(i, &b)| b & !netmask_byte(n.bits, i) != 0)
    {
        return Err(Error::invalid_value(
            field,
            tag,
            "cidr value has bits set to the right of the mask",
        ));
    }
    buf.push(n.family as u8);
    buf.extend(
        addr.iter()
            .enumerate()
            .map(|(i, &b)| b & netmask_byte(n.bits, i)),
    );
    buf.push(n.bits);
    buf.extend_from_slice(addr);
    Ok(())
}

/// `bit` / `varbit` (spec §5.17): escaped packed bytes, then the bit length.
pub(crate) fn put_bits(
    buf: &mut Vec<u8>,
    field: u32,
    tag: TypeTag,
    b: &BitString<'_>,
) -> Result<()> {
    if b.bit_len > MAX_BIT_LEN {
        return Err(Error::LimitExceeded {
            limit: Limit::BitLength,
            value: b.bit_len as usize,
        });
    }
    if b.bytes.len() != (b.bit_len as usize).div_ceil(8) {
        return Err(Error::invalid_value(
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
        return Err(Error::invalid_value(
            field,
            tag,
            "pad bits of the last byte are not zero",
        ));
    }
    put_escaped(buf, b.bytes);
    buf.extend_from_slice(&b.bit_len.to_be_bytes());
    Ok(())
}

/// Runs `$body` with `$g` bound to each digit group of `$digits` in order, in a loop
/// compiled once per representation (no per-group dispatch, locals stay in registers).
macro_rules! each_group {
    ($digits:expr, |$g:ident| $body:block) => {
        match $digits.repr() {
            DigitRepr::Native(d) => {
                for &$g in d {
                    $body
                }
            }
            DigitRepr::NativeBytes(b) => {
                for p in b.chunks_exact(2) {
                    let $g = u16::from_ne_bytes([p[0], p[1]]);
                    $body
                }
            }
            DigitRepr::BigEndian(b) => {
                for p in b.chunks_exact(2) {
                    let $g = u16::from_be_bytes([p[0], p[1]]);
                    $body
                }
            }
        }
    };
}

/// `numeric` (spec §5.5): class, then for finite non-zero values the normalised weight and
/// digit groups, complemented for negative values.
#[inline]
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
    let (mut i, mut first, mut end, mut max) = (0usize, usize::MAX, 0usize, 0u16);
    each_group!(d, |g| {
        max = max.max(g);
        if g != 0 {
            first = first.min(i);
            end = i + 1;
        }
        i += 1;
    });
    if max > 9999 {
        return Err(Error::invalid_value(
            field,
            TypeTag::Numeric,
            "digit group exceeds 9999",
        ));
    }
    if end == 0 {
        buf.push(numeric_class::ZERO);
        return Ok(());
    }
    let groups = d.slice(first, end);
    if groups.len() > MAX_NUMERIC_GROUPS {
        return Err(Error::LimitExceeded {
            limit: Limit::NumericDigits,
            value: groups.len(),
        });
    }
    let weight = i16::try_from(i32::from(n.weight) - first as i32).map_err(|_| {
        Error::invalid_value(field, TypeTag::Numeric, "normalised weight outside int16")
    })?;
    let m: u8 = if negative { 0xFF } else { 0x00 };
    let class = if negative {
        numeric_class::NEG
    } else {
        numeric_class::POS
    };
    let w = flip_i16(weight);
    buf.reserve(3 + 3 * groups.len() + 2);
    buf.extend_from_slice(&[class, w[0] ^ m, w[1] ^ m]);
    put_numeric_groups(buf, &groups, m);
    buf.extend_from_slice(&[ESCAPE ^ m, TERMINATOR ^ m]);
    Ok(())
}

/// Writes digit groups as big-endian bytes, zeros escaped (spec §2.1), complemented with
/// `m`, staged in a stack chunk that is appended whenever it could not take another group.
#[inline]
fn put_numeric_groups(buf: &mut Vec<u8>, groups: &Digits<'_>, m: u8) {
    /// A group takes at most 4 bytes, plus the one spare byte each write may touch.
    const CHUNK: usize = 64;
    const _: () = assert!(ESCAPE == 0, "a zero byte is written as itself");
    let mut chunk = [0u8; CHUNK];
    let mut n = 0usize;
    each_group!(groups, |g| {
        if n > CHUNK - 5 {
            buf.extend_from_slice(&chunk[..n]);
            n = 0;
        }
        for byte in g.to_be_bytes() {
            // The escape byte equals the zero it escapes, so a byte is written as itself and
            // its escape's second byte always follows; only a zero keeps that second byte.
            chunk[n] = byte ^ m;
            chunk[n + 1] = ESCAPED_ZERO ^ m;
            n += 1 + usize::from(byte == 0);
        }
    });
    buf.extend_from_slice(&chunk[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// The NUL scan finds a NUL wherever it is: in the short path, the long path, or nowhere.
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

    /// The staged group writer writes what spec §5.5 says, byte by byte, for every length
    /// around the chunk's flush points, zero bytes in every position, both signs and all
    /// three digit representations.
    #[test]
    fn numeric_groups_match_the_spec_byte_by_byte() {
        let pattern = [1u16, 0x0100, 9999, 0x00FF, 100, 4096, 7, 2560];
        for len in 1..=70usize {
            // Non-zero first and last groups, so nothing is normalised away.
            let groups: Vec<u16> = (0..len)
                .map(|i| {
                    if i == 0 || i + 1 == len {
                        1234
                    } else {
                        pattern[i % pattern.len()]
                    }
                })
                .collect();
            let ne: Vec<u8> = groups.iter().flat_map(|g| g.to_ne_bytes()).collect();
            let be: Vec<u8> = groups.iter().flat_map(|g| g.to_be_bytes()).collect();
            for negative in [false, true] {
                let m = if negative { 0xFF } else { 0x00 };
                let mut want = vec![if negative {
                    numeric_class::NEG
                } else {
                    numeric_class::POS
                }];
                want.extend(flip_i16(3).iter().map(|b| b ^ m));
                for byte in groups.iter().flat_map(|g| g.to_be_bytes()) {
                    if byte == 0 {
                        // 00 FF, complemented
                        want.extend([m, 0xFF ^ m]);
                    } else {
                        want.push(byte ^ m);
                    }
                }
                // terminator 00 00, complemented
                want.extend([m, m]);
                let reprs = [
                    Digits::native(&groups),
                    Digits::native_bytes(&ne).unwrap_or_else(|| unreachable!()),
                    Digits::big_endian(&be).unwrap_or_else(|| unreachable!()),
                ];
                for digits in reprs {
                    let mut got = Vec::new();
                    put_numeric(&mut got, 0, &Numeric::finite(negative, 3, digits))
                        .unwrap_or_else(|e| panic!("{len}: {e}"));
                    assert_eq!(got, want, "{len} groups, negative {negative}");
                }
            }
        }
    }
}
