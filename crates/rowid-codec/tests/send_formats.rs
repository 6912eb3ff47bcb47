//! Send-format parsers: bytes laid out as PostgreSQL's `typsend` functions write them parse to
//! values that encode exactly like the values themselves, and malformed bytes are rejected.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use proptest::prelude::*;
use rowid_codec::send::{bits_from_send, inet_from_send, numeric_from_send, value_from_send};
use rowid_codec::{Domain, Error, NumericSign, TypeTag, Value, encode_identity};
use support::{Input, input, scalar_tags};

/// The bytes PostgreSQL's send function writes for `v` (layouts from the adt/*.c `*_send`
/// functions, restated in shared/reference/postgres-semantics.md).
fn send_bytes(v: &Input, dscale: i16) -> Vec<u8> {
    match v {
        Input::Bool(b) => vec![u8::from(*b)],
        Input::Int2(x) => x.to_be_bytes().to_vec(),
        Input::Int4(x) | Input::Date(x) => x.to_be_bytes().to_vec(),
        Input::Int8(x) | Input::Time(x) | Input::Timestamp(x) | Input::Timestamptz(x) => {
            x.to_be_bytes().to_vec()
        }
        Input::Oid(x) => x.to_be_bytes().to_vec(),
        Input::Float4(x) => x.to_bits().to_be_bytes().to_vec(),
        Input::Float8(x) => x.to_bits().to_be_bytes().to_vec(),
        Input::Numeric(sign, weight, digits) => {
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
        Input::Text(s)
        | Input::Varchar(s)
        | Input::Bpchar(s)
        | Input::Bytea(s)
        | Input::Enum(s) => s.clone(),
        Input::Uuid(u) => u.to_vec(),
        Input::Timetz(t, z) => [t.to_be_bytes().as_slice(), &z.to_be_bytes()].concat(),
        Input::Interval(m, d, us) => [
            us.to_be_bytes().as_slice(),
            &d.to_be_bytes(),
            &m.to_be_bytes(),
        ]
        .concat(),
        Input::Inet(n) | Input::Cidr(n) => {
            let is_cidr = u8::from(matches!(v, Input::Cidr(_)));
            let len = n.family.addr_len();
            let mut out = vec![n.family as u8, n.bits, is_cidr, len as u8];
            out.extend_from_slice(&n.addr[..len]);
            out
        }
        Input::Macaddr(m) => m.to_vec(),
        Input::Macaddr8(m) => m.to_vec(),
        Input::Bit(len, bytes) | Input::Varbit(len, bytes) => {
            [(*len as i32).to_be_bytes().as_slice(), bytes].concat()
        }
        Input::Identity(b) => b.clone(),
        Input::IntervalCmp(_) => unreachable!("generated inputs use interval fields"),
    }
}

fn encode_one(tag: TypeTag, v: Value<'_>) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_identity(&mut buf, Domain::ScanKey, &[(tag, Some(v))]).unwrap();
    buf
}

fn any_input() -> impl Strategy<Value = Input> {
    prop::sample::select(scalar_tags()).prop_flat_map(input)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    /// send bytes -> parser -> encoder gives the same identity as encoding the value.
    #[test]
    fn send_format_round_trip(v in any_input(), dscale in 0i16..20) {
        let tag = v.tag();
        let bytes = send_bytes(&v, dscale);
        let parsed = value_from_send(tag, &bytes)
            .unwrap_or_else(|e| panic!("{v:?}: {e}"));
        prop_assert_eq!(encode_one(tag, parsed), encode_one(tag, v.value()), "{:?}", v);
    }

    /// Any trailing byte is rejected, and so is any truncation (except for the raw-byte
    /// types, whose send format is the bytes themselves).
    #[test]
    fn send_format_rejects_wrong_lengths(v in any_input(), extra in any::<u8>()) {
        let tag = v.tag();
        let raw = matches!(tag, TypeTag::Text | TypeTag::Varchar | TypeTag::Bpchar | TypeTag::Bytea | TypeTag::Enum);
        let bytes = send_bytes(&v, 0);
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
