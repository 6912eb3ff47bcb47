//! `numeric.json`: wire-format §5.5.

use rowid_codec::{NumericSign, OwnedNumeric, OwnedValue, TypeTag};
use rowid_testkit::numeric::parse_numeric;

use super::build::{field, one};
use crate::Family;

pub(super) fn numerics() -> Family {
    let n = |text: &str, comment: &str, flags: &[&'static str]| {
        let value = parse_numeric(text).unwrap_or(OwnedNumeric {
            sign: NumericSign::NaN,
            weight: 0,
            digits: Vec::new(),
        });
        one(
            comment,
            field(
                TypeTag::Numeric,
                OwnedValue::Numeric(value),
                text,
                &format!("'{text}'::numeric"),
            ),
            flags,
        )
    };
    Family {
        file: "numeric.json",
        spec: "wire-format.md §5.5",
        valid: vec![
            n("-Infinity", "lowest class", &["edge"]),
            n("-12345.678", "negative: body inverted", &[]),
            n("-1.5", "negative", &[]),
            n("-0.0001", "negative with negative weight", &[]),
            n("0", "zero", &[]),
            n("0.000", "zero with scale is zero", &["normalisation"]),
            n("-0.00", "negative zero is zero", &["normalisation"]),
            n(
                "0.0001",
                "leading zero group dropped, weight -1",
                &["normalisation"],
            ),
            n("1", "one", &[]),
            n("1.0", "1.0 = 1", &["normalisation"]),
            n("1.00", "1.00 = 1", &["normalisation"]),
            n("1.1", "1.1 < 1.99 (no length prefix)", &["order"]),
            n("1.99", "1.99 > 1.1", &["order"]),
            n(
                "10000",
                "weight 1, trailing zero group dropped",
                &["normalisation"],
            ),
            n("12345.678", "three groups", &[]),
            n("0.00000001", "digit group 1 after a zero group", &[]),
            n(
                "256",
                "group 256 has a zero low byte (escaped)",
                &["escape"],
            ),
            n("99999999999999999999999999999999999999", "38 nines", &[]),
            n("Infinity", "above every finite value", &["edge"]),
            n("NaN", "NaN sorts last", &["edge"]),
        ],
        ..Family::default()
    }
}
