//! Decimal text to PostgreSQL's base-10000 representation, as `numeric_in` lays it out
//! (leading and trailing zero groups kept, so vectors exercise the encoder's normalisation).

use rowid_codec::{NumericSign, OwnedNumeric};

/// Parses `NaN`, `Infinity`, `-Infinity` or a plain decimal (`-12.50`, `.5`, `0.000`).
pub fn parse_numeric(text: &str) -> Option<OwnedNumeric> {
    let special = |sign| OwnedNumeric {
        sign,
        weight: 0,
        digits: Vec::new(),
    };
    match text {
        "NaN" => return Some(special(NumericSign::NaN)),
        "Infinity" => return Some(special(NumericSign::PositiveInfinity)),
        "-Infinity" => return Some(special(NumericSign::NegativeInfinity)),
        _ => {}
    }
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if !(int.bytes().all(|b| b.is_ascii_digit()) && frac.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    // Pad the integer part on the left and the fraction on the right to whole groups.
    let int_pad = (4 - int.len() % 4) % 4;
    let frac_pad = (4 - frac.len() % 4) % 4;
    let all: String = "0".repeat(int_pad) + int + frac + &"0".repeat(frac_pad);
    let digits: Vec<u16> = all
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).ok()?.parse().ok())
        .collect::<Option<_>>()?;
    let int_groups = (int.len() + int_pad) / 4;
    let weight = i16::try_from(int_groups).ok()? - 1;
    Some(OwnedNumeric {
        sign: if negative {
            NumericSign::Negative
        } else {
            NumericSign::Positive
        },
        weight,
        digits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_weights() {
        let n = parse_numeric("12345.678").unwrap();
        assert_eq!((n.weight, n.digits), (1, vec![1, 2345, 6780]));
        let n = parse_numeric("0.0001").unwrap();
        assert_eq!((n.weight, n.digits), (0, vec![0, 1]));
        let n = parse_numeric("-1.00").unwrap();
        assert_eq!(
            (n.sign, n.weight, n.digits),
            (NumericSign::Negative, 0, vec![1, 0])
        );
        assert!(parse_numeric("1e5").is_none());
    }
}
