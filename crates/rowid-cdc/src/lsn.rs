//! Log sequence numbers, written the way PostgreSQL writes them (`16/B374D848`).

use std::fmt;
use std::str::FromStr;

/// A WAL position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The position before any WAL (`0/0`).
    pub const ZERO: Lsn = Lsn(0);
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// The text is not an LSN (`hex/hex`, each half at most 32 bits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLsn(pub String);

impl fmt::Display for BadLsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not an LSN (expected hex/hex, as in 16/B374D848)",
            self.0
        )
    }
}

impl std::error::Error for BadLsn {}

impl FromStr for Lsn {
    type Err = BadLsn;

    fn from_str(s: &str) -> Result<Lsn, BadLsn> {
        let bad = || BadLsn(s.to_string());
        let (hi, lo) = s.split_once('/').ok_or_else(bad)?;
        let half = |h: &str| {
            if h.is_empty() || h.len() > 8 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u64::from_str_radix(h, 16).map_err(|_| bad())
        };
        Ok(Lsn(half(hi)? << 32 | half(lo)?))
    }
}

#[cfg(test)]
mod tests {
    use super::Lsn;

    #[test]
    fn text_round_trips_as_postgres_writes_it() {
        for (text, value) in [
            ("0/0", 0u64),
            ("0/16B3748", 0x16B_3748),
            ("16/B374D848", 0x16_B374_D848),
            ("FFFFFFFF/FFFFFFFF", u64::MAX),
        ] {
            assert_eq!(text.parse::<Lsn>(), Ok(Lsn(value)), "{text}");
            assert_eq!(Lsn(value).to_string(), text);
        }
        for bad in [
            "",
            "0",
            "/0",
            "0/",
            "1/2/3",
            "g/0",
            "100000000/0",
            "+1/0",
            " 0/0",
        ] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad:?}");
        }
        assert_eq!("0/a".parse::<Lsn>(), Ok(Lsn(10)), "lower case is accepted");
    }
}
