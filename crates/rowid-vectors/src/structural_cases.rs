//! Vector cases of the structural families (spec/wire-format.md §6.3–§6.7). Values are
//! built as codec trees; each case's `sql` literal must encode to the same bytes inside
//! PostgreSQL (`tests/vectors_on_server.rs`), which is the independent check of these trees.

use rowid_codec::send::jsonb_from_text;
use rowid_codec::structure::{
    ArrayDim, ArrayValue, MultirangeValue, RangeBound, RangeBounds, RangeValue, RecordValue,
};
use rowid_codec::{DecodedField, NumericSign, OwnedNumeric, OwnedValue, TypeTag};

use crate::cases::{bad, field, null, one};
use crate::{Family, ValidCase};

fn int4(v: i32) -> OwnedValue {
    OwnedValue::Int4(v)
}

fn numeric(negative: bool, weight: i16, digits: &[u16]) -> OwnedValue {
    OwnedValue::Numeric(OwnedNumeric {
        sign: if negative {
            NumericSign::Negative
        } else {
            NumericSign::Positive
        },
        weight,
        digits: digits.to_vec(),
    })
}

fn text(s: &str) -> OwnedValue {
    OwnedValue::Text(s.as_bytes().to_vec())
}

fn array(element: TypeTag, dims: &[(i32, i32)], elements: Vec<Option<OwnedValue>>) -> OwnedValue {
    OwnedValue::Array(ArrayValue {
        element,
        dims: dims
            .iter()
            .map(|&(len, lower)| ArrayDim { len, lower })
            .collect(),
        elements,
    })
}

fn case(comment: &str, tag: TypeTag, value: OwnedValue, sql: &str) -> ValidCase {
    one(comment, field(tag, value, comment, sql), &[])
}

fn bounds(lower: RangeBound, upper: RangeBound) -> RangeBounds {
    RangeBounds { lower, upper }
}

fn range(subtype: TypeTag, b: Option<RangeBounds>) -> OwnedValue {
    OwnedValue::Range(Box::new(RangeValue { subtype, bounds: b }))
}

fn pair(n: Option<i32>, s: Option<&str>) -> OwnedValue {
    OwnedValue::Record(RecordValue {
        fields: vec![
            DecodedField {
                tag: TypeTag::Int4,
                value: n.map(int4),
            },
            DecodedField {
                tag: TypeTag::Text,
                value: s.map(text),
            },
        ],
    })
}

/// `CREATE TYPE` statements the composite cases' SQL literals need.
/// Idempotent, because two families use it and the server checks run every setup in one
/// transaction.
const PAIR_TYPE: &str = "DO $$ BEGIN CREATE TYPE vec_pair AS (n int4, s text); \
    EXCEPTION WHEN duplicate_object THEN NULL; END $$";
const NEST_TYPE: &str = "CREATE TYPE vec_nest AS (a int4[], r int4range, j jsonb, p vec_pair)";

pub fn arrays() -> Family {
    use RangeBound::{Exclusive, Inclusive};
    let (i, t) = (TypeTag::Int4, TypeTag::Text);
    let a = TypeTag::Array;
    let valid = vec![
        case(
            "{1,NULL,3}",
            a,
            array(i, &[(3, 1)], vec![Some(int4(1)), None, Some(int4(3))]),
            "'{1,NULL,3}'::int4[]",
        ),
        case("{} (int4)", a, array(i, &[], vec![]), "'{}'::int4[]"),
        case(
            "[0:1]={1,2} differs from {1,2}",
            a,
            array(i, &[(2, 0)], vec![Some(int4(1)), Some(int4(2))]),
            "'[0:1]={1,2}'::int4[]",
        ),
        case(
            "{1,2}",
            a,
            array(i, &[(2, 1)], vec![Some(int4(1)), Some(int4(2))]),
            "'{1,2}'::int4[]",
        ),
        case(
            "{{1,2},{3,4}}",
            a,
            array(
                i,
                &[(2, 1), (2, 1)],
                (1..=4).map(|v| Some(int4(v))).collect(),
            ),
            "'{{1,2},{3,4}}'::int4[]",
        ),
        case(
            "{1,2,3,4} differs from {{1,2},{3,4}}",
            a,
            array(i, &[(4, 1)], (1..=4).map(|v| Some(int4(v))).collect()),
            "'{1,2,3,4}'::int4[]",
        ),
        case(
            "{NULL}",
            a,
            array(i, &[(1, 1)], vec![None]),
            "'{NULL}'::int4[]",
        ),
        case(
            "[-2:-1]={7,8} (int8)",
            a,
            array(
                TypeTag::Int8,
                &[(2, -2)],
                vec![Some(OwnedValue::Int8(7)), Some(OwnedValue::Int8(8))],
            ),
            "'[-2:-1]={7,8}'::int8[]",
        ),
        case(
            "{a,\"\",NULL} (text)",
            a,
            array(t, &[(3, 1)], vec![Some(text("a")), Some(text("")), None]),
            "'{a,\"\",NULL}'::text[]",
        ),
        case(
            "{1.0,1.00,-2} (numeric: 1.0 and 1.00 encode alike)",
            a,
            array(
                TypeTag::Numeric,
                &[(3, 1)],
                vec![
                    Some(numeric(false, 0, &[1])),
                    Some(numeric(false, 0, &[1, 0])),
                    Some(numeric(true, 0, &[2])),
                ],
            ),
            "'{1.0,1.00,-2}'::numeric[]",
        ),
        one("NULL int4[]", null(a, "int4[]"), &["null"]),
        case(
            "{[1,3)} (int4range[])",
            a,
            array(
                TypeTag::Range,
                &[(1, 1)],
                vec![Some(range(
                    i,
                    Some(bounds(Inclusive(int4(1)), Exclusive(int4(3)))),
                ))],
            ),
            "ARRAY[int4range(1,3)]",
        ),
        case(
            "{(1,a),NULL} (vec_pair[])",
            a,
            array(
                TypeTag::Record,
                &[(2, 1)],
                vec![Some(pair(Some(1), Some("a"))), None],
            ),
            "ARRAY[ROW(1,'a')::vec_pair, NULL]",
        ),
    ];
    let invalid = vec![
        bad(
            "array: 7 dimensions",
            "02 01 00000001 41 01 03 00 07 ff",
            "NonCanonical",
        ),
        bad(
            "array: element framing byte 03",
            "02 01 00000001 41 01 03 03 ff",
            "InvalidNullState",
        ),
        bad(
            "array: one element but dimension length 2",
            "02 01 00000001 41 01 03 01 80000001 00 01 80000002 80000001 ff",
            "NonCanonical",
        ),
        bad(
            "array: no elements but one dimension",
            "02 01 00000001 41 01 03 00 01 80000001 80000001 ff",
            "NonCanonical",
        ),
        bad(
            "array: unassigned element tag 3f",
            "02 01 00000001 41 01 3f 00 00 ff",
            "UnknownTypeTag",
        ),
        bad(
            "array: element payload truncated",
            "02 01 00000001 41 01 03 01 8000",
            "Truncated",
        ),
    ];
    Family {
        file: "array.json",
        spec: "wire-format.md §6.3",
        setup: vec![PAIR_TYPE],
        valid,
        invalid,
        ..Family::default()
    }
}

pub fn ranges() -> Family {
    use RangeBound::{Exclusive, Inclusive, Infinite};
    let (i, r, m) = (TypeTag::Int4, TypeTag::Range, TypeTag::Multirange);
    let n = TypeTag::Numeric;
    let multi = |subtype, ranges| OwnedValue::Multirange(MultirangeValue { subtype, ranges });
    let valid = vec![
        case(
            "[1,3)",
            r,
            range(i, Some(bounds(Inclusive(int4(1)), Exclusive(int4(3))))),
            "int4range(1,3)",
        ),
        case(
            "[1,3] is stored as [1,4)",
            r,
            range(i, Some(bounds(Inclusive(int4(1)), Exclusive(int4(4))))),
            "'[1,3]'::int4range",
        ),
        case("empty", r, range(i, None), "'empty'::int4range"),
        case(
            "(,5] is stored as (,6)",
            r,
            range(i, Some(bounds(Infinite, Exclusive(int4(6))))),
            "'(,5]'::int4range",
        ),
        case(
            "[1,) (int8range)",
            r,
            range(
                TypeTag::Int8,
                Some(bounds(Inclusive(OwnedValue::Int8(1)), Infinite)),
            ),
            "'[1,)'::int8range",
        ),
        case(
            "[1,2] (numrange; equals [1,2.0])",
            r,
            range(
                n,
                Some(bounds(
                    Inclusive(numeric(false, 0, &[1])),
                    Inclusive(numeric(false, 0, &[2])),
                )),
            ),
            "'[1,2.0]'::numrange",
        ),
        case(
            "[1,3) (numrange; not canonicalised, differs from [1,2])",
            r,
            range(
                n,
                Some(bounds(
                    Inclusive(numeric(false, 0, &[1])),
                    Exclusive(numeric(false, 0, &[3])),
                )),
            ),
            "'[1,3)'::numrange",
        ),
        case(
            "(1.5,2.5]",
            r,
            range(
                n,
                Some(bounds(
                    Exclusive(numeric(false, 0, &[1, 5000])),
                    Inclusive(numeric(false, 0, &[2, 5000])),
                )),
            ),
            "'(1.5,2.5]'::numrange",
        ),
        case(
            "(,) (numrange)",
            r,
            range(n, Some(bounds(Infinite, Infinite))),
            "'(,)'::numrange",
        ),
        case(
            "[2000-01-01,2000-01-10) (daterange)",
            r,
            range(
                TypeTag::Date,
                Some(bounds(
                    Inclusive(OwnedValue::Date(0)),
                    Exclusive(OwnedValue::Date(9)),
                )),
            ),
            "daterange('2000-01-01','2000-01-10')",
        ),
        one("NULL int4range", null(r, "int4range"), &["null"]),
        case(
            "{[1,3),[5,7)}",
            m,
            multi(
                i,
                vec![
                    bounds(Inclusive(int4(1)), Exclusive(int4(3))),
                    bounds(Inclusive(int4(5)), Exclusive(int4(7))),
                ],
            ),
            "'{[1,3),[5,7)}'::int4multirange",
        ),
        case(
            "{} (int4multirange)",
            m,
            multi(i, vec![]),
            "'{}'::int4multirange",
        ),
        case(
            "{[1,3),[2,6)} is stored as {[1,6)}",
            m,
            multi(i, vec![bounds(Inclusive(int4(1)), Exclusive(int4(6)))]),
            "'{[1,3),[2,6)}'::int4multirange",
        ),
        case(
            "{(,1],[2,3)} (nummultirange)",
            m,
            multi(
                n,
                vec![
                    bounds(Infinite, Inclusive(numeric(false, 0, &[1]))),
                    bounds(
                        Inclusive(numeric(false, 0, &[2])),
                        Exclusive(numeric(false, 0, &[3])),
                    ),
                ],
            ),
            "'{(,1],[2,3)}'::nummultirange",
        ),
    ];
    let invalid = vec![
        bad(
            "range: state byte 02",
            "02 01 00000001 42 01 03 02 ff",
            "NonCanonical",
        ),
        bad(
            "range: lower bound byte 02",
            "02 01 00000001 42 01 03 01 02 02 ff",
            "NonCanonical",
        ),
        bad(
            "range: upper bound byte 00",
            "02 01 00000001 42 01 03 01 00 00 ff",
            "NonCanonical",
        ),
        bad(
            "range: inclusivity byte 02",
            "02 01 00000001 42 01 03 01 01 80000001 02 02 ff",
            "NonCanonical",
        ),
        bad(
            "multirange: item byte 02",
            "02 01 00000001 43 01 03 02 ff",
            "NonCanonical",
        ),
    ];
    Family {
        file: "range.json",
        spec: "wire-format.md §6.4-§6.5",
        valid,
        invalid,
        ..Family::default()
    }
}

pub fn jsonb() -> Family {
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

pub fn composites() -> Family {
    use RangeBound::{Exclusive, Inclusive};
    let rec = TypeTag::Record;
    let nest = OwnedValue::Record(RecordValue {
        fields: vec![
            DecodedField {
                tag: TypeTag::Array,
                value: Some(array(TypeTag::Int4, &[(2, 1)], vec![Some(int4(1)), None])),
            },
            DecodedField {
                tag: TypeTag::Range,
                value: Some(range(
                    TypeTag::Int4,
                    Some(bounds(Inclusive(int4(1)), Exclusive(int4(2)))),
                )),
            },
            DecodedField {
                tag: TypeTag::Jsonb,
                value: jsonb_from_text(br#"{"k": [1]}"#)
                    .ok()
                    .map(OwnedValue::Jsonb),
            },
            DecodedField {
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
