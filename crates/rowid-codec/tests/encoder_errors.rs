//! Every encoder input the format cannot represent is refused with a precise error, and a
//! refused field or identity leaves the caller's buffer as it was.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_codec::limits::{MAX_DEPTH, MAX_ENUM_LABEL_LEN, MAX_FIELDS};
use rowid_codec::scalar::USECS_PER_DAY;
use rowid_codec::{
    BitString, ChildIdentity, Digits, Domain, Error, IdentityEncoder, Inet, Limit, Numeric, Timetz,
    TypeTag, Value, encode_identity, validate,
};

fn encode_err(v: Value<'_>) -> Error {
    let mut buf = vec![0xAB];
    let err = encode_identity(&mut buf, Domain::ScanKey, &[(v.tag(), Some(v))]).unwrap_err();
    assert_eq!(buf, [0xAB], "buffer changed by a refused identity");
    err
}

fn assert_invalid(v: Value<'_>, reason_part: &str) {
    match encode_err(v) {
        Error::InvalidValue {
            field: 0, reason, ..
        } => {
            assert!(reason.contains(reason_part), "{reason}")
        }
        other => panic!("expected InvalidValue ({reason_part}), got {other:?}"),
    }
}

#[test]
fn unrepresentable_values() {
    assert_invalid(Value::Text(b"a\0b"), "NUL");
    assert_invalid(Value::Varchar(b"\0"), "NUL");
    assert_invalid(Value::Bpchar(b"a\0  "), "NUL");
    assert_invalid(Value::Enum(b"\0"), "NUL");
    assert_invalid(Value::Time(USECS_PER_DAY + 1), "time of day");
    assert_invalid(Value::Time(-1), "time of day");
    assert_invalid(
        Value::Timetz(Timetz {
            time: 0,
            zone: 57_600,
        }),
        "zone",
    );
    assert_invalid(Value::Timetz(Timetz { time: -1, zone: 0 }), "time of day");
    assert_invalid(Value::Inet(Inet::v4([1, 2, 3, 4], 33)), "prefix length");
    let mut junk = Inet::v4([1, 2, 3, 4], 8);
    junk.addr[4] = 1;
    assert_invalid(Value::Inet(junk), "IPv4");
    assert_invalid(Value::Cidr(Inet::v4([10, 0, 0, 1], 8)), "right of the mask");
    assert_invalid(
        Value::Bit(BitString {
            bit_len: 3,
            bytes: &[0xA1],
        }),
        "pad bits",
    );
    assert_invalid(
        Value::Varbit(BitString {
            bit_len: 9,
            bytes: &[0xFF],
        }),
        "byte count",
    );
    assert_invalid(
        Value::Numeric(Numeric::finite(false, 0, Digits::native(&[10_000]))),
        "9999",
    );
    assert_invalid(
        Value::Numeric(Numeric::finite(false, i16::MIN, Digits::native(&[0, 1]))),
        "weight",
    );
}

#[test]
fn limits() {
    let label = [b'a'; MAX_ENUM_LABEL_LEN + 1];
    assert!(matches!(
        encode_err(Value::Enum(&label)),
        Error::LimitExceeded {
            limit: Limit::EnumLabelLength,
            value: 64
        }
    ));
    let mut buf = Vec::new();
    assert!(matches!(
        IdentityEncoder::begin(&mut buf, Domain::KeylessRow, MAX_FIELDS + 1),
        Err(Error::LimitExceeded {
            limit: Limit::FieldCount,
            ..
        })
    ));
    assert!(buf.is_empty());
    // Nest to exactly MAX_DEPTH, then one more.
    let mut id = Vec::new();
    encode_identity(&mut id, Domain::ScanKey, &[]).unwrap();
    for _ in 1..MAX_DEPTH {
        let mut outer = Vec::new();
        encode_identity(
            &mut outer,
            Domain::JoinKey,
            &[(
                TypeTag::ChildIdentity,
                Some(Value::Identity(ChildIdentity::new(&id).unwrap())),
            )],
        )
        .unwrap();
        id = outer;
    }
    assert_eq!(validate(&id).unwrap().depth, MAX_DEPTH);
    assert!(matches!(
        encode_err(Value::Identity(ChildIdentity::new(&id).unwrap())),
        Error::LimitExceeded {
            limit: Limit::Depth,
            ..
        }
    ));
}

/// A child identity is only accepted when the strict decoder accepts it.
#[test]
fn child_identity_must_be_valid() {
    assert!(matches!(
        ChildIdentity::new(&[]),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        ChildIdentity::new(&[0x02, 0x01, 0, 0, 0, 0, 0xFF, 0x00]),
        Err(Error::TrailingBytes { .. })
    ));
    let valid = [0x02, 0x01, 0, 0, 0, 0, 0xFF];
    assert_eq!(ChildIdentity::new(&valid).unwrap().depth(), 1);
}

#[test]
fn field_count_and_type_mismatches() {
    let mut buf = b"keep".to_vec();
    let mut enc = IdentityEncoder::begin(&mut buf, Domain::ScanKey, 1).unwrap();
    enc.value(&Value::Int4(1)).unwrap();
    assert!(matches!(
        enc.value(&Value::Int4(2)),
        Err(Error::FieldCountMismatch {
            declared: 1,
            actual: 2
        })
    ));
    enc.finish().unwrap();
    assert!(buf.starts_with(b"keep") && validate(&buf[4..]).is_ok());

    let mut buf = b"keep".to_vec();
    let enc = IdentityEncoder::begin(&mut buf, Domain::ScanKey, 2).unwrap();
    assert!(matches!(
        enc.finish(),
        Err(Error::FieldCountMismatch {
            declared: 2,
            actual: 0
        })
    ));
    assert_eq!(buf, b"keep", "finish restores the buffer on error");

    let mut buf = Vec::new();
    let mut enc = IdentityEncoder::begin(&mut buf, Domain::ScanKey, 1).unwrap();
    assert!(matches!(
        enc.field(TypeTag::Int8, Some(&Value::Int4(1))),
        Err(Error::InvalidValue {
            tag: TypeTag::Int8,
            ..
        })
    ));
    // A refused field is removed and not counted: the caller may supply it again.
    assert!(enc.value(&Value::Text(b"\0")).is_err());
    enc.field(TypeTag::Int8, Some(&Value::Int8(1))).unwrap();
    enc.finish().unwrap();
    assert!(validate(&buf).is_ok());
}

#[test]
fn errors_display_their_context() {
    let e = encode_err(Value::Text(b"\0"));
    assert_eq!(
        e.to_string(),
        "field 0 (text): cannot encode value: character data contains a NUL byte"
    );
    let e = rowid_codec::decode(&[0x02, 0x01, 0, 0, 0, 1, 0x1B, 0x00, 0xFF]).unwrap_err();
    assert_eq!(e.to_string(), "field 0: unknown type tag 0x1B at byte 6");
}

#[test]
fn digit_representations_encode_alike() {
    let groups = [0u16, 12, 3400, 0];
    let native_bytes: Vec<u8> = groups.iter().flat_map(|g| g.to_ne_bytes()).collect();
    let be_bytes: Vec<u8> = groups.iter().flat_map(|g| g.to_be_bytes()).collect();
    let enc = |d| {
        let mut buf = Vec::new();
        let v = Value::Numeric(Numeric::finite(true, 3, d));
        encode_identity(&mut buf, Domain::ScanKey, &[(v.tag(), Some(v))]).unwrap();
        buf
    };
    let a = enc(Digits::native(&groups));
    assert_eq!(a, enc(Digits::native_bytes(&native_bytes).unwrap()));
    assert_eq!(a, enc(Digits::big_endian(&be_bytes).unwrap()));
    assert!(Digits::native_bytes(&[1]).is_none());
}
