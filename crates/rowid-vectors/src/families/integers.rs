//! `integers.json`: wire-format §5.2 (signed integers) and §5.3 (`oid`).

use rowid_codec::{OwnedValue, TypeTag};

use super::build::{field, null, one};
use crate::Family;

pub(super) fn integers() -> Family {
    let mut valid = Vec::new();
    for v in [i16::MIN, -1, 0, 1, i16::MAX] {
        let s = v.to_string();
        valid.push(one(
            "int2",
            field(
                TypeTag::Int2,
                OwnedValue::Int2(v),
                &s,
                &format!("({s})::int2"),
            ),
            &[],
        ));
    }
    for v in [i32::MIN, -1, 0, 42, i32::MAX] {
        let s = v.to_string();
        valid.push(one(
            "int4",
            field(
                TypeTag::Int4,
                OwnedValue::Int4(v),
                &s,
                &format!("({s})::int4"),
            ),
            &[],
        ));
    }
    for v in [i64::MIN, -2, 0, 1, i64::MAX] {
        let s = v.to_string();
        valid.push(one(
            "int8",
            field(
                TypeTag::Int8,
                OwnedValue::Int8(v),
                &s,
                &format!("({s})::int8"),
            ),
            &[],
        ));
    }
    for v in [0u32, 1259, 0x8000_0000, u32::MAX] {
        let s = v.to_string();
        valid.push(one(
            "oid (unsigned order)",
            field(TypeTag::Oid, OwnedValue::Oid(v), &s, &format!("'{s}'::oid")),
            &[],
        ));
    }
    valid.push(one("NULL int8", null(TypeTag::Int8, "int8"), &["null"]));
    Family {
        file: "integers.json",
        spec: "wire-format.md §5.2, §5.3",
        valid,
        ..Family::default()
    }
}
