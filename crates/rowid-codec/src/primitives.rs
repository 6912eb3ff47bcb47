//! The two shared primitives of spec §2: escape-and-terminate and the sign flip.

use alloc::vec::Vec;

/// Escape byte: `0x00` in a payload is written as `0x00 0xFF`.
pub const ESCAPE: u8 = 0x00;
/// Second byte of an escaped `0x00`.
pub const ESCAPED_ZERO: u8 = 0xFF;
/// Second byte of the terminator `0x00 0x00`.
pub const TERMINATOR: u8 = 0x00;

/// Appends `bytes` escaped (`00 -> 00 FF`) and terminated (`00 00`) (spec §2.1).
#[inline]
pub fn put_escaped(buf: &mut Vec<u8>, bytes: &[u8]) {
    let mut rest = bytes;
    while let Some(pos) = rest.iter().position(|&b| b == 0) {
        buf.reserve(pos + 2);
        buf.extend_from_slice(&rest[..pos]);
        buf.extend_from_slice(&[ESCAPE, ESCAPED_ZERO]);
        rest = &rest[pos + 1..];
    }
    buf.extend_from_slice(rest);
    buf.extend_from_slice(&[ESCAPE, TERMINATOR]);
}

/// Order-preserving big-endian form of a signed 16-bit integer (spec §2.2).
#[inline]
pub const fn flip_i16(v: i16) -> [u8; 2] {
    ((v as u16) ^ 0x8000).to_be_bytes()
}

/// Order-preserving big-endian form of a signed 32-bit integer (spec §2.2).
#[inline]
pub const fn flip_i32(v: i32) -> [u8; 4] {
    ((v as u32) ^ 0x8000_0000).to_be_bytes()
}

/// Order-preserving big-endian form of a signed 64-bit integer (spec §2.2).
#[inline]
pub const fn flip_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ 0x8000_0000_0000_0000).to_be_bytes()
}

/// Order-preserving big-endian form of a signed 128-bit integer (spec §2.2).
#[inline]
pub const fn flip_i128(v: i128) -> [u8; 16] {
    ((v as u128) ^ (1u128 << 127)).to_be_bytes()
}

/// Inverse of [`flip_i16`].
#[inline]
pub const fn unflip_i16(b: [u8; 2]) -> i16 {
    (u16::from_be_bytes(b) ^ 0x8000) as i16
}

/// Inverse of [`flip_i32`].
#[inline]
pub const fn unflip_i32(b: [u8; 4]) -> i32 {
    (u32::from_be_bytes(b) ^ 0x8000_0000) as i32
}

/// Inverse of [`flip_i64`].
#[inline]
pub const fn unflip_i64(b: [u8; 8]) -> i64 {
    (u64::from_be_bytes(b) ^ 0x8000_0000_0000_0000) as i64
}

/// Inverse of [`flip_i128`].
#[inline]
pub const fn unflip_i128(b: [u8; 16]) -> i128 {
    (u128::from_be_bytes(b) ^ (1u128 << 127)) as i128
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn escape_examples_from_spec() {
        let mut buf = Vec::new();
        put_escaped(&mut buf, &[0x61, 0x00, 0x62]);
        assert_eq!(buf, vec![0x61, 0x00, 0xFF, 0x62, 0x00, 0x00]);
        buf.clear();
        put_escaped(&mut buf, &[]);
        assert_eq!(buf, vec![0x00, 0x00]);
    }

    #[test]
    fn flips_order_extremes() {
        assert_eq!(flip_i32(i32::MIN), [0, 0, 0, 0]);
        assert_eq!(flip_i32(-1), [0x7F, 0xFF, 0xFF, 0xFF]);
        assert_eq!(flip_i32(0), [0x80, 0, 0, 0]);
        assert_eq!(flip_i64(i64::MAX), [0xFF; 8]);
        assert_eq!(unflip_i128(flip_i128(i128::MIN + 7)), i128::MIN + 7);
        assert_eq!(unflip_i16(flip_i16(-300)), -300);
    }
}
