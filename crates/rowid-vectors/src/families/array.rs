//! `array.json`: wire-format §6.3.

use rowid_codec::value::RangeBound;
use rowid_codec::{OwnedValue, TypeTag};

use super::build::{
    PAIR_TYPE, array, bad, bounds, case, int4, null, numeric, one, pair, range, text,
};
use crate::Family;

pub(super) fn arrays() -> Family {
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
