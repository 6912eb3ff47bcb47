//! Row image JSON (spec/row-images.md): send-format bytes laid out by hand as PostgreSQL's
//! `*_send` functions write them, and the JSON the spec's table gives for each, written out
//! by hand here (never produced by the code under test). The server-side proof that the
//! JSON reads back to the same values is `rowid-cdc`'s `tests/images.rs`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_codec::TypeTag;
use rowid_codec::send::{timestamp_text, write_image_json};
use rowid_codec::structure::Shape;

fn scalar(t: TypeTag) -> Shape {
    Shape::Scalar(t)
}

fn json(shape: &Shape, b: &[u8]) -> String {
    let mut out = String::from("<");
    write_image_json(shape, b, &mut out).unwrap_or_else(|e| panic!("{shape:?} {b:02x?}: {e}"));
    out.split_off(1)
}

fn refused(shape: &Shape, b: &[u8]) {
    let mut out = String::from("kept");
    assert!(
        write_image_json(shape, b, &mut out).is_err(),
        "{shape:?} {b:02x?} accepted: {out}"
    );
    assert_eq!(out, "kept", "nothing appended on an error");
}

/// `numeric_send`: ndigits, weight, sign word, dscale, base-10000 groups.
fn numeric(weight: i16, sign: u16, dscale: i16, groups: &[u16]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend((groups.len() as i16).to_be_bytes());
    b.extend(weight.to_be_bytes());
    b.extend(sign.to_be_bytes());
    b.extend(dscale.to_be_bytes());
    for g in groups {
        b.extend(g.to_be_bytes());
    }
    b
}

/// `array_send` of non-null int4 elements (`None`: NULL).
fn int4_array(dims: &[(i32, i32)], elements: &[Option<i32>]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend((dims.len() as i32).to_be_bytes());
    b.extend(i32::from(elements.iter().any(Option::is_none)).to_be_bytes());
    b.extend(23u32.to_be_bytes());
    for (len, lower) in dims {
        b.extend(len.to_be_bytes());
        b.extend(lower.to_be_bytes());
    }
    for e in elements {
        match e {
            None => b.extend((-1i32).to_be_bytes()),
            Some(v) => {
                b.extend(4i32.to_be_bytes());
                b.extend(v.to_be_bytes());
            }
        }
    }
    b
}

fn item(b: &mut Vec<u8>, v: &[u8]) {
    b.extend((v.len() as i32).to_be_bytes());
    b.extend(v);
}

#[test]
fn numbers_keep_what_json_numbers_would_lose() {
    assert_eq!(json(&scalar(TypeTag::Int2), &(-7i16).to_be_bytes()), "-7");
    assert_eq!(
        json(&scalar(TypeTag::Int4), &2_000_000_000i32.to_be_bytes()),
        "2000000000"
    );
    assert_eq!(
        json(&scalar(TypeTag::Oid), &4_000_000_000u32.to_be_bytes()),
        "4000000000"
    );
    // int8 as a string: 2^63 - 1 is not a double.
    assert_eq!(
        json(&scalar(TypeTag::Int8), &i64::MAX.to_be_bytes()),
        "\"9223372036854775807\""
    );
    let f8 = |f: f64| json(&scalar(TypeTag::Float8), &f.to_bits().to_be_bytes());
    assert_eq!(f8(1.5), "1.5");
    assert_eq!(f8(0.1), "0.1");
    assert_eq!(f8(-0.0), "-0.0");
    assert_eq!(f8(1e300), "1e300");
    assert_eq!(f8(f64::NAN), "\"NaN\"");
    assert_eq!(f8(f64::INFINITY), "\"Infinity\"");
    assert_eq!(f8(f64::NEG_INFINITY), "\"-Infinity\"");
    // float4: the shortest text of the single-precision value, not of its double widening.
    assert_eq!(
        json(&scalar(TypeTag::Float4), &1.1f32.to_bits().to_be_bytes()),
        "1.1"
    );
    let n = |w, s, d, g: &[u16]| json(&scalar(TypeTag::Numeric), &numeric(w, s, d, g));
    assert_eq!(
        n(0, 0, 2, &[1, 5000]),
        "\"1.50\"",
        "the display scale is kept"
    );
    assert_eq!(n(-1, 0, 7, &[1, 2340]), "\"0.0001234\"");
    assert_eq!(n(1, 0, 1, &[1234, 5678, 9000]), "\"12345678.9\"");
    // -5 * 10000^2.
    assert_eq!(n(2, 0x4000, 0, &[5]), "\"-500000000\"");
    assert_eq!(n(0, 0, 3, &[]), "\"0.000\"");
    assert_eq!(n(0, 0xC000, 0, &[]), "\"NaN\"");
    assert_eq!(n(0, 0xD000, 0, &[]), "\"Infinity\"");
    assert_eq!(n(0, 0xF000, 0, &[]), "\"-Infinity\"");
    refused(&scalar(TypeTag::Numeric), &numeric(0, 0, -1, &[1]));
    refused(&scalar(TypeTag::Numeric), &numeric(0, 0, 0, &[10_000]));
}

#[test]
fn strings_bytes_and_labels() {
    assert_eq!(
        json(&scalar(TypeTag::Text), "a\"b\\c\nd\u{1}é".as_bytes()),
        r#""a\"b\\c\nd\u0001é""#
    );
    assert_eq!(json(&scalar(TypeTag::Bpchar), b"ab   "), "\"ab   \"");
    assert_eq!(json(&scalar(TypeTag::Enum), b"happy"), "\"happy\"");
    assert_eq!(
        json(&scalar(TypeTag::Bytea), &[0x00, 0xff, 0x10]),
        "\"00ff10\""
    );
    refused(&scalar(TypeTag::Text), &[0x66, 0xff]);
    refused(&scalar(TypeTag::Text), b"a\0b");
    let uuid: Vec<u8> = (0u8..16).collect();
    assert_eq!(
        json(&scalar(TypeTag::Uuid), &uuid),
        "\"00010203-0405-0607-0809-0a0b0c0d0e0f\""
    );
    assert_eq!(json(&scalar(TypeTag::Bool), &[1]), "true");
    // bit(3) '101': bit count, then the bits from the most significant one.
    assert_eq!(
        json(&scalar(TypeTag::Varbit), &[0, 0, 0, 3, 0b1010_0000]),
        "\"101\""
    );
}

#[test]
fn dates_and_times_in_iso_form() {
    let date = |d: i32| json(&scalar(TypeTag::Date), &d.to_be_bytes());
    assert_eq!(date(0), "\"2000-01-01\"");
    assert_eq!(date(-730_119), "\"0001-01-01\"");
    // Astronomical years: 1 BC is year 0, a leap year.
    assert_eq!(date(-730_120), "\"0000-12-31\"");
    assert_eq!(date(-730_486), "\"-0001-12-31\"");
    assert_eq!(date(i32::MAX), "\"infinity\"");
    assert_eq!(date(i32::MIN), "\"-infinity\"");
    let day = 86_400_000_000i64;
    let ts = |t: i64, tag| json(&scalar(tag), &t.to_be_bytes());
    assert_eq!(
        ts(day + 3_723_000_004, TypeTag::Timestamp),
        "\"2000-01-02T01:02:03.000004\""
    );
    assert_eq!(
        ts(-1, TypeTag::Timestamptz),
        "\"1999-12-31T23:59:59.999999Z\""
    );
    assert_eq!(ts(i64::MAX, TypeTag::Timestamptz), "\"infinity\"");
    assert_eq!(timestamp_text(0, true), "2000-01-01T00:00:00.000000Z");
    assert_eq!(ts(day, TypeTag::Time), "\"24:00:00.000000\"");
    // timetz 12:00 at one hour east of UTC (PostgreSQL stores -3600, seconds west).
    let mut b = (12 * 3_600_000_000i64).to_be_bytes().to_vec();
    b.extend((-3600i32).to_be_bytes());
    assert_eq!(
        json(&scalar(TypeTag::Timetz), &b),
        "\"12:00:00.000000+01:00:00\""
    );
    // interval_send: microseconds, days, months; kept apart (1 mon is not 30 days).
    let mut b = 3i64.to_be_bytes().to_vec();
    b.extend(2i32.to_be_bytes());
    b.extend(1i32.to_be_bytes());
    assert_eq!(
        json(&scalar(TypeTag::Interval), &b),
        r#"{"months":1,"days":2,"microseconds":"3"}"#
    );
}

#[test]
fn network_addresses_with_their_prefix() {
    // inet_send: family (2 = AF_INET, 3 = AF_INET6), bits, is_cidr, address length, bytes.
    assert_eq!(
        json(&scalar(TypeTag::Inet), &[2, 32, 0, 4, 10, 0, 0, 1]),
        "\"10.0.0.1/32\""
    );
    let mut v6 = vec![3, 128, 0, 16, 0x20, 0x01, 0x0d, 0xb8];
    v6.extend([0; 11]);
    v6.push(1);
    assert_eq!(json(&scalar(TypeTag::Inet), &v6), "\"2001:db8::1/128\"");
    let mut zero = vec![3, 0, 1, 16];
    zero.extend([0; 16]);
    assert_eq!(json(&scalar(TypeTag::Cidr), &zero), "\"::/0\"");
    assert_eq!(
        json(&scalar(TypeTag::Macaddr), &[8, 0, 0x2b, 1, 2, 3]),
        "\"08:00:2b:01:02:03\""
    );
}

#[test]
fn jsonb_is_written_as_stored_in_a_string() {
    assert_eq!(
        json(&Shape::Jsonb, b"\x01{\"a\": 1.50, \"b\": [true, null]}"),
        r#""{\"a\": 1.50, \"b\": [true, null]}""#
    );
    // A number past any double is still JSON (found by the fuzzer: the checker, not the
    // writer, needed arbitrary precision).
    assert_eq!(json(&Shape::Jsonb, b"\x01[8.18e8808]"), r#""[8.18e8808]""#);
    // jsonb's null is a string, not SQL NULL's null; in an array too, where the elements are
    // strings and the array nests plainly.
    assert_eq!(json(&Shape::Jsonb, b"\x01null"), r#""null""#);
    let jsonbs = Shape::Array(Box::new(Shape::Jsonb));
    let mut b = 1i32.to_be_bytes().to_vec();
    b.extend(1i32.to_be_bytes());
    b.extend(3802u32.to_be_bytes());
    b.extend(2i32.to_be_bytes());
    b.extend(1i32.to_be_bytes());
    item(&mut b, b"\x01null");
    b.extend((-1i32).to_be_bytes());
    assert_eq!(json(&jsonbs, &b), r#"["null",null]"#);
    // A control byte between tokens would end the JSON line early.
    refused(&Shape::Jsonb, b"\x01{\"a\":\n1}");
    refused(&Shape::Jsonb, b"\x02{}");
    refused(&Shape::Jsonb, b"\x01{\"a\": }");
}

#[test]
fn structures_nest() {
    let int4 = Shape::Array(Box::new(scalar(TypeTag::Int4)));
    assert_eq!(
        json(&int4, &int4_array(&[(2, 1)], &[Some(1), Some(2)])),
        "[1,2]"
    );
    assert_eq!(
        json(
            &int4,
            &int4_array(&[(2, 1), (2, 1)], &[Some(1), Some(2), Some(3), None])
        ),
        "[[1,2],[3,null]]"
    );
    assert_eq!(
        json(&int4, &int4_array(&[(2, 0)], &[Some(1), Some(2)])),
        r#"{"lower_bounds":[0],"values":[1,2]}"#
    );
    assert_eq!(json(&int4, &int4_array(&[], &[])), "[]");
    refused(&int4, &int4_array(&[(3, 1)], &[Some(1), Some(2)]));
    // Composite elements are JSON arrays themselves: the bounds say which levels are
    // dimensions.
    let pairs = Shape::Array(Box::new(Shape::Record(vec![scalar(TypeTag::Int4)])));
    let mut b = 1i32.to_be_bytes().to_vec();
    b.extend(0i32.to_be_bytes());
    b.extend(16_400u32.to_be_bytes());
    b.extend(1i32.to_be_bytes());
    b.extend(1i32.to_be_bytes());
    let mut rec = 1i32.to_be_bytes().to_vec();
    rec.extend(23u32.to_be_bytes());
    item(&mut rec, &9i32.to_be_bytes());
    item(&mut b, &rec);
    assert_eq!(json(&pairs, &b), r#"{"lower_bounds":[1],"values":[[9]]}"#);

    // range_send: flags (0x02 lower inclusive, 0x08 lower infinite, 0x01 empty), bounds.
    let range = Shape::Range(Box::new(scalar(TypeTag::Int4)));
    let mut b = vec![0x02];
    item(&mut b, &1i32.to_be_bytes());
    item(&mut b, &5i32.to_be_bytes());
    assert_eq!(
        json(&range, &b),
        r#"{"lower":1,"upper":5,"lower_inc":true,"upper_inc":false}"#
    );
    let mut b = vec![0x08 | 0x04];
    item(&mut b, &5i32.to_be_bytes());
    assert_eq!(
        json(&range, &b),
        r#"{"lower":null,"upper":5,"lower_inc":false,"upper_inc":true}"#
    );
    assert_eq!(json(&range, &[0x01]), r#"{"empty":true}"#);
    let multi = Shape::Multirange(Box::new(scalar(TypeTag::Int4)));
    let mut one = vec![0x02];
    item(&mut one, &1i32.to_be_bytes());
    item(&mut one, &5i32.to_be_bytes());
    let mut b = 1i32.to_be_bytes().to_vec();
    item(&mut b, &one);
    assert_eq!(
        json(&multi, &b),
        r#"[{"lower":1,"upper":5,"lower_inc":true,"upper_inc":false}]"#
    );

    // record_send: attribute count, then per attribute its type OID and the item.
    let rec = Shape::Record(vec![scalar(TypeTag::Int8), scalar(TypeTag::Text)]);
    let mut b = 2i32.to_be_bytes().to_vec();
    b.extend(20u32.to_be_bytes());
    item(&mut b, &7i64.to_be_bytes());
    b.extend(25u32.to_be_bytes());
    b.extend((-1i32).to_be_bytes());
    assert_eq!(json(&rec, &b), r#"["7",null]"#);
    refused(&rec, &b[..b.len() - 1]);
}

#[test]
fn nesting_is_bounded() {
    // 40 nested one-element arrays: past the codec's depth limit, refused, not recursed.
    let mut shape = scalar(TypeTag::Int4);
    let mut bytes = 1i32.to_be_bytes().to_vec();
    for _ in 0..40 {
        shape = Shape::Array(Box::new(shape));
        let mut b = Vec::new();
        b.extend(1i32.to_be_bytes());
        b.extend(0i32.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.extend(1i32.to_be_bytes());
        b.extend(1i32.to_be_bytes());
        item(&mut b, &bytes);
        bytes = b;
    }
    refused(&shape, &bytes);
}
