//! The benchmark workloads: named identities of owned field values.

use rowid_codec::{Digits, Interval, Numeric, OwnedNumeric, TypeTag, Value};
use rowid_testkit::numeric::parse_numeric;

/// One field value, owned, in the form each scheme needs.
#[derive(Clone, Debug)]
pub enum Field {
    /// `int4`.
    Int4(i32),
    /// `int8`.
    Int8(i64),
    /// `uuid`.
    Uuid([u8; 16]),
    /// `text`.
    Text(String),
    /// `numeric`: its text, the parsed base-10000 form, and a `rust_decimal` equivalent for
    /// memcomparable (which holds at most 28 digits: a longer value is given its first 28).
    Numeric {
        /// PostgreSQL text form.
        text: String,
        /// Base-10000 groups.
        parsed: OwnedNumeric,
        /// The memcomparable input.
        decimal: rust_decimal::Decimal,
    },
    /// `interval` (months, days, microseconds).
    Interval(i32, i32, i64),
    /// `bool`.
    Bool(bool),
    /// `timestamptz`: microseconds since 2000-01-01 UTC.
    Timestamptz(i64),
    /// `float8`.
    Float8(f64),
    /// `date`: days since 2000-01-01.
    Date(i32),
    /// SQL NULL of a type.
    Null(TypeTag),
}

impl Field {
    /// A numeric from decimal text (`"-12.5"`).
    pub fn numeric(text: &str) -> Field {
        let negative = text.starts_with('-');
        let parsed = parse_numeric(text).unwrap_or_else(|| panic!("{text} is not a numeric"));
        let short: String = text.chars().take(if negative { 29 } else { 28 }).collect();
        Field::Numeric {
            text: text.to_string(),
            parsed,
            decimal: short
                .parse()
                .unwrap_or_else(|e| panic!("{short} as rust_decimal: {e}")),
        }
    }

    /// The field's type tag.
    pub fn tag(&self) -> TypeTag {
        match self {
            Field::Int4(_) => TypeTag::Int4,
            Field::Int8(_) => TypeTag::Int8,
            Field::Uuid(_) => TypeTag::Uuid,
            Field::Text(_) => TypeTag::Text,
            Field::Numeric { .. } => TypeTag::Numeric,
            Field::Interval(..) => TypeTag::Interval,
            Field::Bool(_) => TypeTag::Bool,
            Field::Timestamptz(_) => TypeTag::Timestamptz,
            Field::Float8(_) => TypeTag::Float8,
            Field::Date(_) => TypeTag::Date,
            Field::Null(t) => *t,
        }
    }

    /// The V2 encoder input (borrowed, as the extension reads a Datum).
    pub fn value(&self) -> Option<Value<'_>> {
        Some(match self {
            Field::Int4(v) => Value::Int4(*v),
            Field::Int8(v) => Value::Int8(*v),
            Field::Uuid(u) => Value::Uuid(*u),
            Field::Text(s) => Value::Text(s.as_bytes()),
            Field::Numeric { parsed, .. } => Value::Numeric(Numeric {
                sign: parsed.sign,
                weight: parsed.weight,
                digits: Digits::native(&parsed.digits),
            }),
            Field::Interval(m, d, t) => Value::Interval(Interval::from_fields(*m, *d, *t)),
            Field::Bool(b) => Value::Bool(*b),
            Field::Timestamptz(t) => Value::Timestamptz(*t),
            Field::Float8(f) => Value::Float8(*f),
            Field::Date(d) => Value::Date(*d),
            Field::Null(_) => return None,
        })
    }

    /// The value's in-memory bytes (what a plain copy moves): the floor.
    pub fn raw(&self) -> Vec<u8> {
        match self {
            Field::Int4(v) | Field::Date(v) => v.to_ne_bytes().to_vec(),
            Field::Int8(v) | Field::Timestamptz(v) => v.to_ne_bytes().to_vec(),
            Field::Uuid(u) => u.to_vec(),
            Field::Text(s) => s.as_bytes().to_vec(),
            Field::Numeric { parsed, .. } => {
                parsed.digits.iter().flat_map(|d| d.to_ne_bytes()).collect()
            }
            Field::Interval(m, d, t) => {
                [&t.to_ne_bytes()[..], &d.to_ne_bytes(), &m.to_ne_bytes()].concat()
            }
            Field::Bool(b) => vec![u8::from(*b)],
            Field::Float8(f) => f.to_ne_bytes().to_vec(),
            Field::Null(_) => Vec::new(),
        }
    }
}

/// A named identity's fields.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Name in reports (`int8`, `text_4k`, ...).
    pub name: &'static str,
    /// The fields.
    pub fields: Vec<Field>,
    /// The fields' raw bytes, for the copy baseline.
    pub raw: Vec<Vec<u8>>,
}

impl Workload {
    fn new(name: &'static str, fields: Vec<Field>) -> Workload {
        let raw = fields.iter().map(Field::raw).collect();
        Workload { name, fields, raw }
    }

    /// The V2 encoder's input.
    pub fn values(&self) -> Vec<(TypeTag, Option<Value<'_>>)> {
        self.fields.iter().map(|f| (f.tag(), f.value())).collect()
    }
}

fn text_of(len: usize) -> String {
    (0..len)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect()
}

const UUID: [u8; 16] = [
    0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11,
];

/// Every workload of the codec benchmark, in report order.
pub fn workloads() -> Vec<Workload> {
    let wide = vec![
        Field::Int4(17),
        Field::Int8(9_876_543_210),
        Field::Text(text_of(20)),
        Field::numeric("1234.56"),
        Field::Bool(true),
        Field::Timestamptz(757_382_400_123_456),
        Field::Uuid(UUID),
        Field::Float8(3.25),
        Field::Date(8_766),
        Field::Text(text_of(8)),
        Field::Int4(-5),
        Field::Null(TypeTag::Text),
        Field::Int8(42),
        Field::numeric("-0.5"),
        Field::Interval(1, 2, 3_600_000_000),
        Field::Text(text_of(40)),
        Field::Bool(false),
        Field::Float8(-1.0e10),
        Field::Timestamptz(0),
        Field::Int4(2_000_000_000),
    ];
    vec![
        Workload::new("int4", vec![Field::Int4(123_456)]),
        Workload::new("int8", vec![Field::Int8(1_234_567_890_123)]),
        Workload::new("uuid", vec![Field::Uuid(UUID)]),
        Workload::new("int8_int8", vec![Field::Int8(1_234_567), Field::Int8(-42)]),
        Workload::new("text_16", vec![Field::Int8(7), Field::Text(text_of(16))]),
        Workload::new("text_256", vec![Field::Int8(7), Field::Text(text_of(256))]),
        Workload::new("text_4k", vec![Field::Int8(7), Field::Text(text_of(4096))]),
        Workload::new("numeric_small", vec![Field::numeric("12.5")]),
        Workload::new(
            "numeric_30",
            vec![Field::numeric("123456789012345678901234567890")],
        ),
        Workload::new("numeric_negative", vec![Field::numeric("-98765.4321")]),
        Workload::new("interval", vec![Field::Interval(14, 3, 14_706_789_000)]),
        Workload::new("wide_20", wide),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Every workload encodes and decodes, and the typed pushes write the same bytes as
    /// `encode_identity`, so the two V2 contenders do the same work.
    #[test]
    fn every_workload_encodes() {
        for w in workloads() {
            let mut buf = Vec::new();
            rowid_codec::encode_identity(&mut buf, rowid_codec::Domain::ScanKey, &w.values())
                .unwrap();
            assert!(rowid_codec::decode(&buf).is_ok(), "{}", w.name);
            let mut typed = Vec::new();
            crate::typed::encode(&w, &mut typed).unwrap();
            assert_eq!(typed, buf, "{}", w.name);
        }
    }

    #[test]
    fn numeric_parsing_matches_the_codec() {
        let Field::Numeric { parsed, .. } = Field::numeric("-98765.4321") else {
            unreachable!()
        };
        assert_eq!(parsed.weight, 1);
        assert_eq!(parsed.digits, vec![9, 8765, 4321]);
    }
}
