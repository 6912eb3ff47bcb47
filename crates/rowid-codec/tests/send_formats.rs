//! Send-format parsers: bytes laid out as PostgreSQL's `typsend` functions write them parse to
//! values that encode exactly like the values themselves, and malformed bytes are rejected.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use rowid_codec::send::{bits_from_send, inet_from_send, numeric_from_send, value_from_send};
use rowid_codec::{
    Domain, Error, Interval, NumericSign, OwnedValue, TypeTag, Value, encode_identity,
};
use rowid_testkit::model::{input, interval_fields, scalar_tags};

/// The bytes PostgreSQL's send function writes for `v` (layouts from the `*_send` functions
/// of PostgreSQL's `src/backend/utils/adt/*.c`). Intervals are sent from their fields, which
/// the value no longer has: see [`sample`].
fn send_bytes(v: &OwnedValue, dscale: i16) -> Vec<u8> {
    use OwnedValue as V;
    match v {
        V::Bool(b) => vec![u8::from(*b)],
        V::Int2(x) => x.to_be_bytes().to_vec(),
        V::Int4(x) | V::Date(x) => x.to_be_bytes().to_vec(),
        V::Int8(x) | V::Time(x) | V::Timestamp(x) | V::Timestamptz(x) => x.to_be_bytes().to_vec(),
        V::Oid(x) => x.to_be_bytes().to_vec(),
        V::Float4(x) => x.to_bits().to_be_bytes().to_vec(),
        V::Float8(x) => x.to_bits().to_be_bytes().to_vec(),
        V::Numeric(n) => {
            let (sign, weight, digits) = (n.sign, n.weight, &n.digits);
            let word: u16 = match sign {
                NumericSign::Positive => 0x0000,
                NumericSign::Negative => 0x4000,
                NumericSign::NaN => 0xC000,
                NumericSign::PositiveInfinity => 0xD000,
                NumericSign::NegativeInfinity => 0xF000,
            };
            let finite = matches!(sign, NumericSign::Positive | NumericSign::Negative);
            let groups: &[u16] = if finite { digits } else { &[] };
            let mut out = Vec::new();
            out.extend((groups.len() as i16).to_be_bytes());
            out.extend(weight.to_be_bytes());
            out.extend(word.to_be_bytes());
            out.extend(dscale.to_be_bytes());
            for g in groups {
                out.extend(g.to_be_bytes());
            }
            out
        }
        V::Text(s) | V::Varchar(s) | V::Bpchar(s) | V::Bytea(s) | V::Enum(s) => s.clone(),
        V::Uuid(u) => u.to_vec(),
        V::Timetz(t) => [t.time.to_be_bytes().as_slice(), &t.zone.to_be_bytes()].concat(),
        V::Inet(n) | V::Cidr(n) => {
            let is_cidr = u8::from(matches!(v, V::Cidr(_)));
            let len = n.family.addr_len();
            let mut out = vec![n.family as u8, n.bits, is_cidr, len as u8];
            out.extend_from_slice(&n.addr[..len]);
            out
        }
        V::Macaddr(m) => m.to_vec(),
        V::Macaddr8(m) => m.to_vec(),
        V::Bit(b) | V::Varbit(b) => {
            [(b.bit_len as i32).to_be_bytes().as_slice(), &b.bytes].concat()
        }
        other => panic!("no send bytes for {other:?}"),
    }
}

/// `interval_send`: time, day, month.
fn interval_send((m, d, us): (i32, i32, i64)) -> Vec<u8> {
    [
        us.to_be_bytes().as_slice(),
        &d.to_be_bytes(),
        &m.to_be_bytes(),
    ]
    .concat()
}

/// A scalar value and its send bytes (numerics with any display scale).
fn sample() -> impl Strategy<Value = (OwnedValue, Vec<u8>)> {
    let interval = interval_fields().prop_map(|f| {
        (
            OwnedValue::Interval(Interval::from_fields(f.0, f.1, f.2)),
            interval_send(f),
        )
    });
    let other = (prop::sample::select(scalar_tags()), 0i16..20)
        .prop_filter("intervals are generated from their fields", |(t, _)| {
            *t != TypeTag::Interval
        })
        .prop_flat_map(|(tag, dscale)| {
            input(tag).prop_map(move |v| {
                let bytes = send_bytes(&v, dscale);
                (v, bytes)
            })
        });
    prop_oneof![1 => interval, 25 => other]
}

fn encode_one(tag: TypeTag, v: Value<'_>) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_identity(&mut buf, Domain::ScanKey, &[(tag, Some(v))]).unwrap();
    buf
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    /// send bytes -> parser -> encoder gives the same identity as encoding the value.
    #[test]
    fn send_format_round_trip((v, bytes) in sample()) {
        let tag = v.tag();
        let parsed = value_from_send(tag, &bytes)
            .unwrap_or_else(|e| panic!("{v:?}: {e}"));
        prop_assert_eq!(encode_one(tag, parsed), encode_one(tag, v.as_value()), "{:?}", v);
    }

    /// Any trailing byte is rejected, and so is any truncation (except for the raw-byte
    /// types, whose send format is the bytes themselves).
    #[test]
    fn send_format_rejects_wrong_lengths((v, bytes) in sample(), extra in any::<u8>()) {
        let tag = v.tag();
        let raw = matches!(tag, TypeTag::Text | TypeTag::Varchar | TypeTag::Bpchar | TypeTag::Bytea | TypeTag::Enum);
        if !raw {
            let mut longer = bytes.clone();
            longer.push(extra);
            prop_assert!(value_from_send(tag, &longer).is_err(), "{:?} + trailing byte accepted", v);
            prop_assert!(value_from_send(tag, &bytes[..bytes.len() - 1]).is_err(), "{:?} truncated accepted", v);
        }
    }
}

#[test]
fn numeric_send_rejections() {
    let header = |ndigits: i16, sign: u16, dscale: i16| {
        [
            ndigits.to_be_bytes(),
            0i16.to_be_bytes(),
            sign.to_be_bytes(),
            dscale.to_be_bytes(),
        ]
        .concat()
    };
    assert!(
        numeric_from_send(&header(0, 0x1234, 0)).is_err(),
        "unknown sign word"
    );
    assert!(
        numeric_from_send(&header(-1, 0, 0)).is_err(),
        "negative ndigits"
    );
    assert!(
        numeric_from_send(&header(0, 0, -1)).is_err(),
        "negative dscale"
    );
    assert!(
        numeric_from_send(&[header(1, 0xC000, 0), vec![0, 1]].concat()).is_err(),
        "NaN with digits"
    );
    assert!(
        numeric_from_send(&[header(1, 0, 0), vec![0x27, 0x10]].concat()).is_err(),
        "group 10000"
    );
    assert!(
        numeric_from_send(&header(1, 0, 0)).is_err(),
        "missing digits"
    );
    let bytes = [header(2, 0x4000, 2), vec![0, 1, 0x13, 0x88]].concat();
    let n = numeric_from_send(&bytes).unwrap();
    assert_eq!(
        (n.sign, n.digits.len(), n.digits.get(1)),
        (NumericSign::Negative, 2, Some(5000))
    );
}

#[test]
fn inet_and_bit_send_rejections() {
    let v4 = |family, bits, is_cidr, nb| vec![family, bits, is_cidr, nb, 10, 0, 0, 0];
    assert!(inet_from_send(TypeTag::Inet, &v4(2, 8, 0, 4)).is_ok());
    assert!(inet_from_send(TypeTag::Cidr, &v4(2, 8, 1, 4)).is_ok());
    assert!(
        inet_from_send(TypeTag::Inet, &v4(2, 8, 1, 4)).is_err(),
        "is_cidr on inet"
    );
    assert!(
        inet_from_send(TypeTag::Cidr, &v4(2, 8, 0, 4)).is_err(),
        "inet flag on cidr"
    );
    assert!(
        inet_from_send(TypeTag::Inet, &v4(4, 8, 0, 4)).is_err(),
        "family 4"
    );
    assert!(
        inet_from_send(TypeTag::Inet, &v4(2, 33, 0, 4)).is_err(),
        "33 bits"
    );
    assert!(
        inet_from_send(TypeTag::Inet, &v4(2, 8, 0, 16)).is_err(),
        "length 16 for IPv4"
    );
    assert!(
        bits_from_send(TypeTag::Bit, &(-1i32).to_be_bytes()).is_err(),
        "negative length"
    );
    assert!(
        bits_from_send(TypeTag::Bit, &[0, 0, 0, 9, 0xFF]).is_err(),
        "9 bits in 1 byte"
    );
    assert!(matches!(
        value_from_send(TypeTag::Text, b"a\0b"),
        Err(Error::InvalidSendFormat { offset: 1, .. })
    ));
}
