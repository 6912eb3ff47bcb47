//! `range.json`: wire-format §6.4 (ranges) and §6.5 (multiranges).

use rowid_codec::value::{MultirangeValue, RangeBound};
use rowid_codec::{OwnedValue, TypeTag};

use super::build::{bad, bounds, case, int4, null, numeric, one, range};
use crate::Family;

pub(super) fn ranges() -> Family {
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
