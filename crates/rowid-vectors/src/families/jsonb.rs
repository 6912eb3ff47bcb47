//! `jsonb.json`: wire-format §6.6.

use rowid_codec::send::jsonb_from_text;
use rowid_codec::{OwnedValue, TypeTag};

use super::build::{bad, null, one};
use crate::Family;

pub(super) fn jsonb() -> Family {
    let j = TypeTag::Jsonb;
    let mut valid = Vec::new();
    for (comment, text) in [
        (
            "object: keys sorted, 1.0 as a numeric",
            r#"{"b": [1.0, true], "a": null}"#,
        ),
        (
            "duplicate keys: the last wins",
            r#"{"a": 1, "a": null, "b": [1.00, true]}"#,
        ),
        ("shorter key first", r#"{"aa": 1, "b": 2}"#),
        ("top-level scalar 1", "1"),
        ("one-element array [1]", "[1]"),
        ("1e2 equals 100", "1e2"),
        ("-0.0 is zero", "-0.0"),
        ("string", r#""x""#),
        ("escaped string", r#""\u00e9\n""#),
        ("null", "null"),
        ("false", "false"),
        ("true", "true"),
        ("empty object", "{}"),
        ("empty array", "[]"),
        ("nested", r#"{"a": {"b": [1, 2, {"c": "d"}]}}"#),
        ("empty key", r#"{"": 0}"#),
    ] {
        let value = jsonb_from_text(text.as_bytes()).map(OwnedValue::Jsonb);
        let sql = format!("'{}'::jsonb", text.replace('\'', "''"));
        valid.push(one(
            comment,
            crate::Field {
                tag: j,
                value: value.ok(),
                display: text.to_string(),
                sql: Some(sql),
            },
            &[],
        ));
    }
    valid.push(one("NULL jsonb", null(j, "jsonb"), &["null"]));
    let invalid = vec![
        bad(
            "jsonb: item tag 08",
            "02 01 00000001 44 01 08 ff",
            "NonCanonical",
        ),
        bad(
            "jsonb: keys out of order (b before a)",
            "02 01 00000001 44 01 07 01 62 0000 01 01 61 0000 01 00 ff",
            "NonCanonical",
        ),
        bad(
            "jsonb: duplicate key",
            "02 01 00000001 44 01 07 01 61 0000 01 01 61 0000 01 00 ff",
            "NonCanonical",
        ),
        bad(
            "jsonb: NaN number",
            "02 01 00000001 44 01 03 05 ff",
            "NonCanonical",
        ),
        bad(
            "jsonb: string with NUL",
            "02 01 00000001 44 01 02 00ff 0000 ff",
            "NonCanonical",
        ),
        bad(
            "jsonb: pair byte 02",
            "02 01 00000001 44 01 07 02 ff",
            "InvalidNullState",
        ),
    ];
    Family {
        file: "jsonb.json",
        spec: "wire-format.md §6.6",
        valid,
        invalid,
        ..Family::default()
    }
}
