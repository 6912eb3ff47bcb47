//! Fuzzes the strict decoder and the send-format parsers.
//!
//! Invariants checked on every input:
//! - `decode`, `validate` and the borrowing `fields` iterator agree (same verdict, same
//!   error, same fields), and an accepted identity re-encodes to the same bytes;
//! - the probe is defined and bounded for any bytes;
//! - every send-format parser either rejects the bytes or yields a value that, once encoded,
//!   decodes and re-encodes to the same identity;
//! - the row image writer either rejects the bytes (appending nothing) or writes one JSON
//!   value without a line break, for bytes the identity parsers accept as well.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rowid_codec::probe::{PROBE_PREFIX_CANDIDATES, max_probe_len, probe_with_prefix};
use rowid_codec::send::{jsonb_from_text, owned_from_send, value_from_send, write_image_json};
use rowid_codec::structure::Shape;
use rowid_codec::value::JsonbValue;
use rowid_codec::{Domain, OwnedValue, TypeTag, Value, decode, encode_identity, validate};

fn reencode(id: &rowid_codec::DecodedIdentity) -> Vec<u8> {
    let mut out = Vec::new();
    id.encode(&mut out).expect("decoded identity re-encodes");
    out
}

/// Structural shapes whose send formats are fuzzed.
fn shapes() -> Vec<Shape> {
    let s = |t| Box::new(Shape::Scalar(t));
    vec![
        Shape::Array(s(TypeTag::Int4)),
        Shape::Array(s(TypeTag::Text)),
        Shape::Array(Box::new(Shape::Range(s(TypeTag::Numeric)))),
        Shape::Range(s(TypeTag::Int4)),
        Shape::Range(s(TypeTag::Timestamptz)),
        Shape::Multirange(s(TypeTag::Int8)),
        Shape::Jsonb,
        Shape::Record(vec![
            Shape::Scalar(TypeTag::Int4),
            Shape::Scalar(TypeTag::Text),
            Shape::Array(s(TypeTag::Int2)),
        ]),
    ]
}

fn check_owned(value: &OwnedValue) {
    let mut id = Vec::new();
    if encode_identity(&mut id, Domain::ScanKey, &[(value.tag(), Some(value.as_value()))]).is_ok()
    {
        let back = decode(&id).expect("encoder output decodes");
        assert_eq!(reencode(&back), id);
    }
}

/// The row image of `data` as a value of `shape`, when the writer accepts it: one JSON value
/// on one line, and only for bytes the identity parser accepts too.
fn check_image(shape: &Shape, data: &[u8]) {
    let mut out = String::from("x");
    match write_image_json(shape, data, &mut out) {
        Err(_) => assert_eq!(out, "x", "a refused value appended something"),
        Ok(()) => {
            let text = &out[1..];
            assert!(!text.contains('\n') && !text.contains('\r'), "{text}");
            if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
                panic!("not JSON ({e}): {text}");
            }
            assert!(
                owned_from_send(shape, data).is_ok(),
                "the image accepted what the identity parser refuses: {text}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let decoded = decode(data);
    assert_eq!(decoded.is_ok(), validate(data).is_ok());
    if let Err(e) = rowid_testkit::decoders::check_agree(data) {
        panic!("decoders disagree: {e}");
    }
    if let Ok(id) = &decoded {
        assert_eq!(reencode(id), data, "accepted a non-canonical identity");
    }
    for p in PROBE_PREFIX_CANDIDATES {
        let mut probe = Vec::new();
        probe_with_prefix(data, p, &mut probe);
        assert!(probe.len() <= max_probe_len(p));
    }
    for tag in TypeTag::ALL {
        if let Ok(value) = value_from_send(tag, data) {
            let mut id = Vec::new();
            if encode_identity(&mut id, Domain::ScanKey, &[(tag, Some(value))]).is_ok() {
                let back = decode(&id).expect("encoder output decodes");
                assert_eq!(reencode(&back), id);
            }
        }
    }
    for shape in shapes() {
        if let Ok(value) = owned_from_send(&shape, data) {
            check_owned(&value);
        }
        check_image(&shape, data);
    }
    for tag in TypeTag::ALL {
        if tag.is_scalar() {
            check_image(&Shape::Scalar(tag), data);
        }
    }
    if let Ok(j) = jsonb_from_text(data) {
        let j: JsonbValue = j;
        let mut id = Vec::new();
        encode_identity(&mut id, Domain::ScanKey, &[(TypeTag::Jsonb, Some(Value::Jsonb(&j)))])
            .expect("parsed JSON encodes");
        assert_eq!(reencode(&decode(&id).expect("decodes")), id);
    }
});
