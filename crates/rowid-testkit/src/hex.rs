//! Hex as PostgreSQL's `encode(x, 'hex')` writes it.

/// Lower-case hex without separators.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses hex written by [`to_hex`], in either case; whitespace between digits is allowed.
/// `None` for an odd number of digits or a non-hex character.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_odd_input() {
        assert_eq!(to_hex(&[0x00, 0xAB, 0x7F]), "00ab7f");
        assert_eq!(from_hex("00 AB 7f"), Some(vec![0x00, 0xAB, 0x7F]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
    }
}
