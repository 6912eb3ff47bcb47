//! The hand-derived examples of spec/wire-format.md and spec/probe.md.
//!
//! Each hex literal below was written by hand from the spec's rules and also appears verbatim
//! in the spec (checked here), so the spec, these tests and the code cannot drift apart.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_codec::probe::{probe_digest, probe_with_prefix};
use rowid_codec::{
    BitString, ChildIdentity, Digits, Domain, Inet, Interval, Numeric, NumericSign, Timetz,
    TypeTag, Value, decode, encode_identity,
};

const WIRE_SPEC: &str = include_str!("../../../spec/wire-format.md");
const PROBE_SPEC: &str = include_str!("../../../spec/probe.md");

fn hex(s: &str) -> Vec<u8> {
    rowid_testkit::hex::from_hex(s).unwrap_or_else(|| panic!("not hex: {s}"))
}

/// Collapses every run of whitespace to one space, so hex split over lines still matches.
fn normalised(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn assert_in_spec(spec: &str, hex_text: &str) {
    let needle = normalised(hex_text);
    assert!(
        normalised(spec).contains(&needle),
        "example `{needle}` is not written in the spec"
    );
}

fn identity(domain: Domain, fields: &[(TypeTag, Option<Value<'_>>)]) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_identity(&mut buf, domain, fields).unwrap();
    let back = decode(&buf).expect("example decodes");
    let mut again = Vec::new();
    back.encode(&mut again).unwrap();
    assert_eq!(again, buf, "decode + re-encode is not the identity");
    buf
}

/// Checks a whole-identity example.
fn check_identity(domain: Domain, fields: &[(TypeTag, Option<Value<'_>>)], expected: &str) {
    assert_in_spec(WIRE_SPEC, expected);
    assert_eq!(
        identity(domain, fields),
        hex(expected),
        "identity example {expected}"
    );
}

/// Checks a field example (`TYPE_TAG 01 payload`) by wrapping it in a one-field SCAN_KEY.
fn check_field(value: Value<'_>, expected: &str) {
    assert_in_spec(WIRE_SPEC, expected);
    let id = identity(Domain::ScanKey, &[(value.tag(), Some(value))]);
    assert_eq!(&id[..6], &hex("02 01 00 00 00 01")[..]);
    assert_eq!(id.last(), Some(&0xFF));
    assert_eq!(
        &id[6..id.len() - 1],
        &hex(expected)[..],
        "field example {expected}"
    );
}

fn num(negative: bool, weight: i16, digits: &'static [u16]) -> Value<'static> {
    Value::Numeric(Numeric::finite(negative, weight, Digits::native(digits)))
}

#[test]
fn escape_primitive() {
    assert_in_spec(WIRE_SPEC, "`61 00 62` → `61 00 FF 62 00 00`");
    let mut buf = Vec::new();
    rowid_codec::primitives::put_escaped(&mut buf, &hex("61 00 62"));
    assert_eq!(buf, hex("61 00 FF 62 00 00"));
}

#[test]
fn headers_null_and_framing() {
    check_identity(
        Domain::ScanKey,
        &[(TypeTag::Int4, Some(Value::Int4(42)))],
        "02 01 00 00 00 01 03 01 80 00 00 2A FF",
    );
    check_identity(
        Domain::ScanKey,
        &[(TypeTag::Int8, None)],
        "02 01 00 00 00 01 04 00 FF",
    );
    let a = [
        (TypeTag::Int4, Some(Value::Int4(1))),
        (TypeTag::Int4, Some(Value::Int4(23))),
    ];
    let b = [
        (TypeTag::Int4, Some(Value::Int4(12))),
        (TypeTag::Int4, Some(Value::Int4(3))),
    ];
    check_identity(
        Domain::ScanKey,
        &a,
        "02 01 00 00 00 02 03 01 80 00 00 01 03 01 80 00 00 17 FF",
    );
    check_identity(
        Domain::ScanKey,
        &b,
        "02 01 00 00 00 02 03 01 80 00 00 0C 03 01 80 00 00 03 FF",
    );
    let c = [
        (TypeTag::Text, Some(Value::Text(b"ab"))),
        (TypeTag::Text, Some(Value::Text(b"c"))),
    ];
    let d = [
        (TypeTag::Text, Some(Value::Text(b"a"))),
        (TypeTag::Text, Some(Value::Text(b"bc"))),
    ];
    check_identity(
        Domain::ScanKey,
        &c,
        "02 01 00 00 00 02 09 01 61 62 00 00 09 01 63 00 00 FF",
    );
    check_identity(
        Domain::ScanKey,
        &d,
        "02 01 00 00 00 02 09 01 61 00 00 09 01 62 63 00 00 FF",
    );
}

#[test]
fn synthetic_discriminator() {
    check_identity(
        Domain::Synthetic,
        &[(
            TypeTag::Text,
            Some(Value::Text(b"scalar_aggregate_singleton")),
        )],
        "02 07 00 00 00 01 09 01 73 63 61 6C 61 72 5F 61 67 67 72 65 67 61 74 65 5F 73 69 6E 67 6C
         65 74 6F 6E 00 00 FF",
    );
}

#[test]
fn bool_integers_oid() {
    check_field(Value::Bool(true), "01 01 01");
    check_field(Value::Int4(42), "03 01 80 00 00 2A");
    check_field(Value::Int2(-1), "02 01 7F FF");
    check_field(Value::Int8(-2), "04 01 7F FF FF FF FF FF FF FE");
    check_field(Value::Oid(1259), "05 01 00 00 04 EB");
}

#[test]
fn floats() {
    check_field(Value::Float8(1.0), "07 01 BF F0 00 00 00 00 00 00");
    check_field(Value::Float8(-1.0), "07 01 40 0F FF FF FF FF FF FF");
    check_field(Value::Float8(-0.0), "07 01 80 00 00 00 00 00 00 00");
    check_field(Value::Float8(f64::NAN), "07 01 FF F8 00 00 00 00 00 00");
    check_field(Value::Float4(1.5), "06 01 BF C0 00 00");
}

#[test]
fn numerics() {
    check_field(num(false, 0, &[1]), "08 01 03 80 00 00 FF 01 00 00");
    // 1.00 arrives from numeric_send with a trailing zero group (dscale 2, ndigits 1) or as
    // groups [1, 0]: the same bytes.
    check_field(num(false, 0, &[1, 0]), "08 01 03 80 00 00 FF 01 00 00");
    check_field(
        num(false, 1, &[1, 2345, 6780]),
        "08 01 03 80 01 00 FF 01 09 29 1A 7C 00 00",
    );
    check_field(num(false, 0, &[0, 1]), "08 01 03 7F FF 00 FF 01 00 00");
    check_field(
        num(true, 0, &[1, 5000]),
        "08 01 01 7F FF FF 00 FE EC 77 FF FF",
    );
    check_field(num(false, 0, &[]), "08 01 02");
    check_field(num(true, -1, &[0]), "08 01 02");
    check_field(
        Value::Numeric(Numeric::special(NumericSign::NaN)),
        "08 01 05",
    );
    check_field(
        Value::Numeric(Numeric::special(NumericSign::PositiveInfinity)),
        "08 01 04",
    );
    check_field(
        Value::Numeric(Numeric::special(NumericSign::NegativeInfinity)),
        "08 01 00",
    );
}

#[test]
fn character_types() {
    check_field(Value::Text(b"ab"), "09 01 61 62 00 00");
    check_field(Value::Varchar("é".as_bytes()), "0A 01 C3 A9 00 00");
    check_field(Value::Text(b""), "09 01 00 00");
    check_field(Value::Bpchar(b"ab  "), "0B 01 61 62 00 00");
    check_field(Value::Bpchar(b"   "), "0B 01 00 00");
    check_field(Value::Enum(b"sad"), "1A 01 73 61 64 00 00");
}

#[test]
fn bytes_uuid_macaddr() {
    check_field(
        Value::Bytea(&[0x00, 0xFF, 0x00]),
        "0C 01 00 FF FF 00 FF 00 00",
    );
    let u = hex("a0eebc999c0b4ef8bb6d6bb9bd380a11");
    check_field(
        Value::Uuid(u.try_into().unwrap()),
        "0D 01 A0 EE BC 99 9C 0B 4E F8 BB 6D 6B B9 BD 38 0A 11",
    );
    check_field(
        Value::Macaddr([8, 0, 0x2b, 1, 2, 3]),
        "16 01 08 00 2B 01 02 03",
    );
    check_field(
        Value::Macaddr8([8, 0, 0x2b, 1, 2, 3, 4, 5]),
        "17 01 08 00 2B 01 02 03 04 05",
    );
}

#[test]
fn date_time_types() {
    check_field(Value::Date(1), "0E 01 80 00 00 01");
    check_field(Value::Date(-1), "0E 01 7F FF FF FF");
    check_field(Value::Date(i32::MAX), "0E 01 FF FF FF FF");
    check_field(Value::Time(43_200_000_000), "0F 01 00 00 00 0A 0E EB B0 00");
    check_field(Value::Timestamp(1_000_000), "10 01 80 00 00 00 00 0F 42 40");
    check_field(
        Value::Timestamptz(1_000_000),
        "11 01 80 00 00 00 00 0F 42 40",
    );
    check_field(
        Value::Timetz(Timetz {
            time: 0,
            zone: -3600,
        }),
        "12 01 7F FF FF FF 29 6C 5C 00 7F FF F1 F0",
    );
    let expected = "13 01 80 00 00 00 00 00 00 00 00 00 02 5B 7F 3D 40 00";
    check_field(Value::Interval(Interval::from_fields(1, 0, 0)), expected);
    check_field(Value::Interval(Interval::from_fields(0, 30, 0)), expected);
}

#[test]
fn network_and_bits() {
    check_field(
        Value::Inet(Inet::v4([192, 168, 1, 5], 24)),
        "14 01 02 C0 A8 01 00 18 C0 A8 01 05",
    );
    check_field(
        Value::Cidr(Inet::v4([10, 0, 0, 0], 8)),
        "15 01 02 0A 00 00 00 08 0A 00 00 00",
    );
    let b = |bit_len, bytes: &'static [u8]| BitString { bit_len, bytes };
    check_field(Value::Bit(b(3, &[0xA0])), "18 01 A0 00 00 00 00 00 03");
    check_field(Value::Varbit(b(0, &[])), "19 01 00 00 00 00 00 00");
    check_field(
        Value::Varbit(b(8, &[0x00])),
        "19 01 00 FF 00 00 00 00 00 08",
    );
}

#[test]
fn child_identities() {
    let child = |v| {
        let mut c = Vec::new();
        encode_identity(
            &mut c,
            Domain::ScanKey,
            &[(TypeTag::Int4, Some(Value::Int4(v)))],
        )
        .unwrap();
        c
    };
    let (c1, c2) = (child(1), child(2));
    assert_in_spec(WIRE_SPEC, "02 01 00 00 00 01 03 01 80 00 00 01 FF");
    assert_eq!(c1, hex("02 01 00 00 00 01 03 01 80 00 00 01 FF"));
    check_identity(
        Domain::JoinKey,
        &[
            (
                TypeTag::ChildIdentity,
                Some(Value::Identity(ChildIdentity::new(&c1).unwrap())),
            ),
            (
                TypeTag::ChildIdentity,
                Some(Value::Identity(ChildIdentity::new(&c2).unwrap())),
            ),
        ],
        "02 04 00 00 00 02
         40 01 02 01 00 FF 00 FF 00 FF 01 03 01 80 00 FF 00 FF 01 FF 00 00
         40 01 02 01 00 FF 00 FF 00 FF 01 03 01 80 00 FF 00 FF 02 FF 00 00
         FF",
    );
}

#[test]
fn probe_example() {
    let id_hex = "02 01 00 00 00 01 09 01 61 62 63 64 65 66 67 68 69 6A 6B 6C 6D 6E 6F 70 71 72 73
        74 75 76 77 78 79 7A 30 31 32 33 34 35 36 37 38 39 00 00 FF";
    assert_in_spec(PROBE_SPEC, id_hex);
    let id = identity(
        Domain::ScanKey,
        &[(
            TypeTag::Text,
            Some(Value::Text(b"abcdefghijklmnopqrstuvwxyz0123456789")),
        )],
    );
    assert_eq!(id, hex(id_hex));
    let digest_hex = "41 FE D3 43 D0 E9 80 55 F0 F9 A0 06 A5 43 15 0C";
    assert_in_spec(PROBE_SPEC, digest_hex);
    assert_eq!(probe_digest(&id).to_vec(), hex(digest_hex));
    for p in [64, 128, 256] {
        let mut out = Vec::new();
        probe_with_prefix(&id, p, &mut out);
        assert_eq!(out, id, "P = {p} is inline");
    }
    let prefix_hex =
        "02 01 00 00 00 01 09 01 61 62 63 64 65 66 67 68 69 6A 6B 6C 6D 6E 6F 70 71 72 73
        74 75 76 77 78";
    assert_in_spec(PROBE_SPEC, prefix_hex);
    let mut out = Vec::new();
    probe_with_prefix(&id, 32, &mut out);
    assert_eq!(out, [hex(prefix_hex), hex(digest_hex)].concat());
    assert_eq!(out.len(), 48);
}

#[test]
fn decoded_identities_render_for_diagnostics() {
    let uuid = hex("a0eebc999c0b4ef8bb6d6bb9bd380a11");
    let id = identity(
        Domain::ScanKey,
        &[
            (TypeTag::Int4, Some(Value::Int4(42))),
            (TypeTag::Text, Some(Value::Text(b"ab"))),
            (TypeTag::Int8, None),
            (TypeTag::Uuid, Some(Value::Uuid(uuid.try_into().unwrap()))),
            (
                TypeTag::Inet,
                Some(Value::Inet(Inet::v4([192, 168, 1, 5], 24))),
            ),
            (TypeTag::Numeric, Some(num(true, 1, &[1, 2345, 6780]))),
            (
                TypeTag::Varbit,
                Some(Value::Varbit(BitString {
                    bit_len: 3,
                    bytes: &[0xA0],
                })),
            ),
        ],
    );
    assert_eq!(
        decode(&id).unwrap().to_string(),
        "SCAN_KEY(int4 42, text \"ab\", int8 NULL, uuid a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11, \
         inet 192.168.1.5/24, numeric -12345.678, varbit B'101')"
    );
}

mod structural {
    use super::{WIRE_SPEC, assert_in_spec, check_field};
    use rowid_codec::send::jsonb_from_text;
    use rowid_codec::structure::ArrayDim;
    use rowid_codec::value::{
        ArrayValue, MultirangeValue, RangeBound, RangeBounds, RangeValue, RecordValue,
    };
    use rowid_codec::{OwnedField, OwnedNumeric, OwnedValue, TypeTag, Value};

    fn int4(v: i32) -> OwnedValue {
        OwnedValue::Int4(v)
    }

    fn int4_array(elements: Vec<Option<i32>>, dims: &[(i32, i32)]) -> ArrayValue {
        ArrayValue {
            element: TypeTag::Int4,
            dims: dims
                .iter()
                .map(|&(len, lower)| ArrayDim { len, lower })
                .collect(),
            elements: elements.into_iter().map(|e| e.map(int4)).collect(),
        }
    }

    fn numeric(digits: Vec<u16>) -> OwnedValue {
        OwnedValue::Numeric(OwnedNumeric {
            sign: rowid_codec::NumericSign::Positive,
            weight: 0,
            digits,
        })
    }

    #[test]
    fn arrays() {
        let a = int4_array(vec![Some(1), None, Some(3)], &[(3, 1)]);
        check_field(
            Value::Array(&a),
            "41 01 03 01 80 00 00 01 02 01 80 00 00 03 00 01 80 00 00 03 80 00 00 01",
        );
        check_field(Value::Array(&int4_array(vec![], &[])), "41 01 03 00 00");
        check_field(
            Value::Array(&int4_array(vec![Some(1), Some(2)], &[(2, 0)])),
            "41 01 03 01 80 00 00 01 01 80 00 00 02 00 01 80 00 00 02 80 00 00 00",
        );
        check_field(
            Value::Array(&int4_array(
                vec![Some(1), Some(2), Some(3), Some(4)],
                &[(2, 1), (2, 1)],
            )),
            "41 01 03 01 80 00 00 01 01 80 00 00 02 01 80 00 00 03 01 80 00 00 04 00 02 \
             80 00 00 02 80 00 00 02 80 00 00 01 80 00 00 01",
        );
    }

    #[test]
    fn ranges_and_multiranges() {
        let r = |lower, upper| RangeBounds { lower, upper };
        let one_three = RangeValue {
            subtype: TypeTag::Int4,
            bounds: Some(r(
                RangeBound::Inclusive(int4(1)),
                RangeBound::Exclusive(int4(3)),
            )),
        };
        check_field(
            Value::Range(&one_three),
            "42 01 03 01 01 80 00 00 01 00 01 80 00 00 03 00",
        );
        let empty = RangeValue {
            subtype: TypeTag::Int4,
            bounds: None,
        };
        check_field(Value::Range(&empty), "42 01 03 00");
        let below_six = RangeValue {
            subtype: TypeTag::Int4,
            bounds: Some(r(RangeBound::Infinite, RangeBound::Exclusive(int4(6)))),
        };
        check_field(Value::Range(&below_six), "42 01 03 01 00 01 80 00 00 06 00");
        // numrange [1,2] and [1,2.0]: 2.0 has a trailing zero group before normalisation.
        for upper in [vec![2], vec![2, 0]] {
            let n = RangeValue {
                subtype: TypeTag::Numeric,
                bounds: Some(r(
                    RangeBound::Inclusive(numeric(vec![1])),
                    RangeBound::Inclusive(numeric(upper)),
                )),
            };
            check_field(
                Value::Range(&n),
                "42 01 08 01 01 03 80 00 00 FF 01 00 00 00 01 03 80 00 00 FF 02 00 00 01",
            );
        }
        let m = MultirangeValue {
            subtype: TypeTag::Int4,
            ranges: vec![
                r(
                    RangeBound::Inclusive(int4(1)),
                    RangeBound::Exclusive(int4(3)),
                ),
                r(
                    RangeBound::Inclusive(int4(5)),
                    RangeBound::Exclusive(int4(7)),
                ),
            ],
        };
        check_field(
            Value::Multirange(&m),
            "43 01 03 01 01 80 00 00 01 00 01 80 00 00 03 00 01 01 80 00 00 05 00 01 80 00 00 \
             07 00 00",
        );
        let none = MultirangeValue {
            subtype: TypeTag::Int4,
            ranges: vec![],
        };
        check_field(Value::Multirange(&none), "43 01 03 00");
    }

    #[test]
    fn jsonb() {
        let expected = "44 01 07 01 61 00 00 01 01 62 00 00 06 03 03 80 00 00 FF 01 00 00 05 00 00";
        for text in [
            r#"{"b": [1.0, true], "a": null}"#,
            r#"{"a": 1, "a": null, "b": [1.00, true]}"#,
        ] {
            assert_in_spec(WIRE_SPEC, text);
            let j = jsonb_from_text(text.as_bytes()).unwrap();
            check_field(Value::Jsonb(&j), expected);
        }
        let one = jsonb_from_text(b"1").unwrap();
        check_field(Value::Jsonb(&one), "44 01 03 03 80 00 00 FF 01 00 00");
        let one_array = jsonb_from_text(b"[1]").unwrap();
        check_field(
            Value::Jsonb(&one_array),
            "44 01 06 03 03 80 00 00 FF 01 00 00 00",
        );
    }

    #[test]
    fn composites() {
        let pair = |s: Option<&[u8]>| RecordValue {
            fields: vec![
                OwnedField {
                    tag: TypeTag::Int4,
                    value: Some(int4(1)),
                },
                OwnedField {
                    tag: TypeTag::Text,
                    value: s.map(|s| OwnedValue::Text(s.to_vec())),
                },
            ],
        };
        check_field(
            Value::Record(&pair(Some(b"a"))),
            "45 01 00 02 03 01 80 00 00 01 09 01 61 00 00",
        );
        check_field(
            Value::Record(&pair(None)),
            "45 01 00 02 03 01 80 00 00 01 09 02",
        );
    }
}

/// An identity is named in logs by its length and the first four bytes of its probe digest:
/// vector probe-010's identity (66 bytes) has the overflow probe whose digest starts 0292e654.
#[test]
fn a_fingerprint_is_the_length_and_the_digest_prefix() {
    let id = rowid_testkit::hex::from_hex(
        "0201000000010901717171717171717171717171717171717171717171717171717171717171717171717171\
         717171717171717171717171717171717171710000ff",
    )
    .unwrap();
    assert_eq!(
        rowid_codec::probe::Fingerprint::of(&id).to_string(),
        "len=66 fp=0292e654"
    );
}
