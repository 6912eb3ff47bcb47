//! `composite.json`: wire-format §6.7.

use rowid_codec::send::jsonb_from_text;
use rowid_codec::value::{RangeBound, RecordValue};
use rowid_codec::{OwnedField, OwnedValue, TypeTag};

use super::build::{NEST_TYPE, PAIR_TYPE, array, bad, bounds, case, int4, null, one, pair, range};
use crate::Family;

pub(super) fn composites() -> Family {
    use RangeBound::{Exclusive, Inclusive};
    let rec = TypeTag::Record;
    let nest = OwnedValue::Record(RecordValue {
        fields: vec![
            OwnedField {
                tag: TypeTag::Array,
                value: Some(array(TypeTag::Int4, &[(2, 1)], vec![Some(int4(1)), None])),
            },
            OwnedField {
                tag: TypeTag::Range,
                value: Some(range(
                    TypeTag::Int4,
                    Some(bounds(Inclusive(int4(1)), Exclusive(int4(2)))),
                )),
            },
            OwnedField {
                tag: TypeTag::Jsonb,
                value: jsonb_from_text(br#"{"k": [1]}"#)
                    .ok()
                    .map(OwnedValue::Jsonb),
            },
            OwnedField {
                tag: TypeTag::Record,
                value: Some(pair(Some(2), Some("b"))),
            },
        ],
    });
    let valid = vec![
        case(
            "(1,a)",
            rec,
            pair(Some(1), Some("a")),
            "ROW(1,'a')::vec_pair",
        ),
        case(
            "(1,NULL): a NULL field",
            rec,
            pair(Some(1), None),
            "ROW(1,NULL)::vec_pair",
        ),
        case(
            "(NULL,NULL)",
            rec,
            pair(None, None),
            "ROW(NULL,NULL)::vec_pair",
        ),
        one("NULL vec_pair", null(rec, "vec_pair"), &["null"]),
        case(
            "nested: array, range, jsonb and composite attributes",
            rec,
            nest,
            "ROW('{1,NULL}'::int4[], int4range(1,2), '{\"k\": [1]}'::jsonb, ROW(2,'b')::vec_pair)::vec_nest",
        ),
    ];
    let invalid = vec![
        bad(
            "composite: field state 00",
            "02 01 00000001 45 01 0001 03 00 ff",
            "InvalidNullState",
        ),
        bad(
            "composite: declares two fields, holds one",
            "02 01 00000001 45 01 0002 03 02 ff",
            "UnknownTypeTag",
        ),
        bad(
            "composite: 1665 fields",
            "02 01 00000001 45 01 0681 ff",
            "LimitExceeded",
        ),
    ];
    Family {
        file: "composite.json",
        spec: "wire-format.md §6.7",
        setup: vec![PAIR_TYPE, NEST_TYPE],
        valid,
        invalid,
        ..Family::default()
    }
}
