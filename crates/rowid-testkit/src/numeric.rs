//! Decimal text to a codec numeric, as `numeric_in` reads it (normalised: no leading or
//! trailing zero groups, as PostgreSQL stores it).

use rowid_codec::send::decimal_to_numeric;
use rowid_codec::{NumericSign, OwnedNumeric};

/// Parses `NaN`, `Infinity`, `-Infinity` or a plain decimal (`-12.50`, `.5`, `0.000`).
/// `None` for anything else (exponents are not read here).
pub fn parse_numeric(text: &str) -> Option<OwnedNumeric> {
    match text {
        "NaN" => return Some(OwnedNumeric::special(NumericSign::NaN)),
        "Infinity" => return Some(OwnedNumeric::special(NumericSign::PositiveInfinity)),
        "-Infinity" => return Some(OwnedNumeric::special(NumericSign::NegativeInfinity)),
        _ => {}
    }
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let digits: Vec<u8> = int
        .bytes()
        .chain(frac.bytes())
        .map(|b| b.is_ascii_digit().then(|| b - b'0'))
        .collect::<Option<_>>()?;
    let mut n = decimal_to_numeric(negative, &digits, -i64::try_from(frac.len()).ok()?)?;
    if n.digits.is_empty() {
        // Zero has one class, whatever the sign said.
        n.sign = NumericSign::Positive;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_weights() {
        let n = parse_numeric("12345.678").unwrap();
        assert_eq!((n.weight, n.digits), (1, vec![1, 2345, 6780]));
        let n = parse_numeric("0.0001").unwrap();
        assert_eq!((n.weight, n.digits), (-1, vec![1]));
        let n = parse_numeric("-1.00").unwrap();
        assert_eq!(
            (n.sign, n.weight, n.digits),
            (NumericSign::Negative, 0, vec![1])
        );
        assert_eq!(parse_numeric("-0.000").unwrap().sign, NumericSign::Positive);
        assert!(parse_numeric("1e5").is_none());
        assert!(parse_numeric("-").is_none());
    }
}
