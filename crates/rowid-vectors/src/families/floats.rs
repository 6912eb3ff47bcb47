//! `floats.json`: wire-format §5.4.

use rowid_codec::{Domain, OwnedValue, TypeTag};

use super::build::{field, one};
use crate::{Family, Field, ValidCase};

pub(super) fn floats() -> Family {
    let f8 = |x: f64, display: &str, sql: &str, comment: &str, flags: &[&'static str]| {
        one(
            comment,
            field(TypeTag::Float8, OwnedValue::Float8(x), display, sql),
            flags,
        )
    };
    let f4 = |x: f32, display: &str, sql: &str, comment: &str, flags: &[&'static str]| {
        one(
            comment,
            field(TypeTag::Float4, OwnedValue::Float4(x), display, sql),
            flags,
        )
    };
    let payload_nan = |comment: &str, x: f64| ValidCase {
        comment: comment.to_string(),
        domain: Domain::ScanKey,
        fields: vec![Field {
            tag: TypeTag::Float8,
            value: Some(OwnedValue::Float8(x)),
            display: format!("NaN with bits {:016X}", x.to_bits()),
            sql: None,
        }],
        flags: vec!["normalisation", "sql-unrepresentable"],
    };
    Family {
        file: "floats.json",
        spec: "wire-format.md §5.4",
        valid: vec![
            f8(
                f64::NEG_INFINITY,
                "-Infinity",
                "'-Infinity'::float8",
                "lowest",
                &["edge"],
            ),
            f8(-1.0, "-1", "'-1'::float8", "negative", &[]),
            f8(
                -0.0,
                "-0",
                "'-0'::float8",
                "-0 encodes as +0",
                &["normalisation"],
            ),
            f8(0.0, "0", "'0'::float8", "zero", &[]),
            f8(1.0, "1", "'1'::float8", "one", &[]),
            f8(
                f64::MIN_POSITIVE,
                "2.2250738585072014e-308",
                "'2.2250738585072014e-308'::float8",
                "smallest normal",
                &["edge"],
            ),
            f8(
                f64::INFINITY,
                "Infinity",
                "'Infinity'::float8",
                "highest finite class",
                &["edge"],
            ),
            f8(
                f64::NAN,
                "NaN",
                "'NaN'::float8",
                "NaN sorts after +Infinity",
                &["edge"],
            ),
            payload_nan(
                "negative NaN with a payload encodes as the canonical NaN",
                f64::from_bits(0xFFF0_0000_0000_0001),
            ),
            f4(1.5, "1.5", "'1.5'::float4", "float4", &[]),
            f4(
                -0.0,
                "-0",
                "'-0'::float4",
                "float4 -0 encodes as +0",
                &["normalisation"],
            ),
            f4(f32::NAN, "NaN", "'NaN'::float4", "float4 NaN", &["edge"]),
            f4(
                f32::NEG_INFINITY,
                "-Infinity",
                "'-Infinity'::float4",
                "float4 -Infinity",
                &["edge"],
            ),
        ],
        ..Family::default()
    }
}
