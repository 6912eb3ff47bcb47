//! Builders shared by the families: fields, one-field cases, must-fail cases, and the values
//! the structural families nest.

use rowid_codec::structure::ArrayDim;
use rowid_codec::value::{ArrayValue, RangeBound, RangeBounds, RangeValue, RecordValue};
use rowid_codec::{
    Domain, NumericSign, OwnedField, OwnedNumeric, OwnedValue, TypeTag, encode_identity,
};
use rowid_testkit::hex::from_hex;

use crate::{Field, InvalidCase, ValidCase};

pub(super) fn field(tag: TypeTag, value: OwnedValue, display: &str, sql: &str) -> Field {
    Field {
        tag,
        value: Some(value),
        display: display.to_string(),
        sql: Some(sql.to_string()),
    }
}

pub(super) fn null(tag: TypeTag, sql_type: &str) -> Field {
    Field {
        tag,
        value: None,
        display: "NULL".to_string(),
        sql: Some(format!("NULL::{sql_type}")),
    }
}

pub(super) fn one(comment: &str, f: Field, flags: &[&'static str]) -> ValidCase {
    ValidCase {
        comment: comment.to_string(),
        domain: Domain::ScanKey,
        fields: vec![f],
        flags: flags.to_vec(),
    }
}

pub(super) fn bad(comment: &str, hex: &str, error: &'static str) -> InvalidCase {
    InvalidCase {
        comment: comment.to_string(),
        bytes: from_hex(hex).unwrap_or_default(),
        error,
        flags: Vec::new(),
    }
}

/// Encodes an identity a case is built from. The cases are constant data, so a failure is a
/// mistake in this crate and stops generation with the encoder's message.
#[allow(clippy::panic)]
pub(super) fn encode_owned(domain: Domain, fields: &[(TypeTag, Option<OwnedValue>)]) -> Vec<u8> {
    let values: Vec<_> = fields
        .iter()
        .map(|(t, v)| (*t, v.as_ref().map(OwnedValue::as_value)))
        .collect();
    let mut buf = Vec::new();
    if let Err(e) = encode_identity(&mut buf, domain, &values) {
        panic!("vector case does not encode: {e}");
    }
    buf
}

pub(super) fn int4(v: i32) -> OwnedValue {
    OwnedValue::Int4(v)
}

pub(super) fn numeric(negative: bool, weight: i16, digits: &[u16]) -> OwnedValue {
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

pub(super) fn text(s: &str) -> OwnedValue {
    OwnedValue::Text(s.as_bytes().to_vec())
}

pub(super) fn array(
    element: TypeTag,
    dims: &[(i32, i32)],
    elements: Vec<Option<OwnedValue>>,
) -> OwnedValue {
    OwnedValue::Array(ArrayValue {
        element,
        dims: dims
            .iter()
            .map(|&(len, lower)| ArrayDim { len, lower })
            .collect(),
        elements,
    })
}

pub(super) fn case(comment: &str, tag: TypeTag, value: OwnedValue, sql: &str) -> ValidCase {
    one(comment, field(tag, value, comment, sql), &[])
}

pub(super) fn bounds(lower: RangeBound, upper: RangeBound) -> RangeBounds {
    RangeBounds { lower, upper }
}

pub(super) fn range(subtype: TypeTag, b: Option<RangeBounds>) -> OwnedValue {
    OwnedValue::Range(Box::new(RangeValue { subtype, bounds: b }))
}

pub(super) fn pair(n: Option<i32>, s: Option<&str>) -> OwnedValue {
    OwnedValue::Record(RecordValue {
        fields: vec![
            OwnedField {
                tag: TypeTag::Int4,
                value: n.map(int4),
            },
            OwnedField {
                tag: TypeTag::Text,
                value: s.map(text),
            },
        ],
    })
}

/// `CREATE TYPE` statements the composite cases' SQL literals need.
/// Idempotent, because two families use it and the server checks run every setup in one
/// transaction.
pub(super) const PAIR_TYPE: &str = "DO $$ BEGIN CREATE TYPE vec_pair AS (n int4, s text); \
    EXCEPTION WHEN duplicate_object THEN NULL; END $$";
pub(super) const NEST_TYPE: &str =
    "CREATE TYPE vec_nest AS (a int4[], r int4range, j jsonb, p vec_pair)";
