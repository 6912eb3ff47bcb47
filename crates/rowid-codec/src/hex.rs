//! Bytes as lowercase hexadecimal text and back: the one implementation the row images,
//! the JSON lines, the identity schema messages and the state file share.

use alloc::string::String;
use alloc::vec::Vec;

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends `bytes` to `out` as lowercase hex, two digits a byte.
pub fn push(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
}

/// `bytes` as lowercase hex.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    push(&mut out, bytes);
    out
}

/// Hex text (either case, an even number of digits, nothing else) as bytes; `None` for
/// anything else.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(encode(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(
            decode("000fA5ff"),
            Some(alloc::vec![0x00, 0x0f, 0xa5, 0xff])
        );
        assert_eq!(decode(""), Some(Vec::new()));
        for bad in ["0", "0g", "+1", "0x00", " 00", "é0"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)), Some(all));
    }
}
