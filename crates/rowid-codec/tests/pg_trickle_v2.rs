//! The claims of spec/wire-format.md Appendix A about pg_trickle's shipped V2 (its contract
//! `docs/ROW_IDENTITY_V2.md`, v0.87.15 and later), checked against a restatement of that
//! document's byte rules written here:
//!
//! - where the appendix says the bytes agree, they agree for generated values;
//! - where it says they differ, its counterexamples hold: pg_trickle's bytes sort against
//!   PostgreSQL's comparator, ours with it;
//! - pg_trickle's published check vectors: the three that agree decode here, the fourth (text
//!   holding a NUL byte) is rejected.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cmp::Ordering;

use proptest::prelude::*;
use rowid_codec::primitives::put_escaped;
use rowid_codec::scalar::{float4_canonical_bits, float8_canonical_bits};
use rowid_codec::{
    Domain, Error, Inet, NumericSign, OwnedBits, OwnedNumeric, OwnedValue, TypeTag, decode,
    encode_identity,
};
use rowid_testkit::hex::from_hex;
use rowid_testkit::model::{input, model_cmp};
use rowid_testkit::numeric::parse_numeric;

/// Our one-field SCAN_KEY identity.
fn ours(v: &OwnedValue) -> Vec<u8> {
    let mut id = Vec::new();
    encode_identity(&mut id, Domain::ScanKey, &[(v.tag(), Some(v.as_value()))]).unwrap();
    id
}

/// pg_trickle's one-field SCAN_KEY identity: the same header, tag, state and `FF` end as
/// ours around its payload.
fn theirs(v: &OwnedValue) -> Vec<u8> {
    let mut id = vec![0x02, 0x01, 0, 0, 0, 1, v.tag() as u8, 0x01];
    id.extend(their_payload(v));
    id.push(0xFF);
    id
}

fn flip32(v: i32) -> [u8; 4] {
    ((v as u32) ^ 0x8000_0000).to_be_bytes()
}

/// pg_trickle's payloads as its document states them.
fn their_payload(v: &OwnedValue) -> Vec<u8> {
    use OwnedValue as V;
    let escaped = |b: &[u8]| {
        let mut out = Vec::new();
        put_escaped(&mut out, b);
        out
    };
    match v {
        V::Bool(b) => vec![u8::from(*b)],
        V::Int2(x) => ((*x as u16) ^ 0x8000).to_be_bytes().to_vec(),
        V::Int4(x) | V::Date(x) => flip32(*x).to_vec(),
        V::Int8(x) | V::Timestamp(x) | V::Timestamptz(x) => {
            ((*x as u64) ^ (1 << 63)).to_be_bytes().to_vec()
        }
        V::Oid(x) => x.to_be_bytes().to_vec(),
        V::Time(t) => (*t as u64).to_be_bytes().to_vec(),
        // "if sign bit is set: bitwise_not(bits), else: bits XOR sign_bit", after mapping
        // both zeros to +0 and every NaN to the quiet NaN.
        V::Float4(x) => {
            let b = float4_canonical_bits(*x);
            (if b >> 31 == 1 { !b } else { b ^ (1 << 31) })
                .to_be_bytes()
                .to_vec()
        }
        V::Float8(x) => {
            let b = float8_canonical_bits(*x);
            (if b >> 63 == 1 { !b } else { b ^ (1 << 63) })
                .to_be_bytes()
                .to_vec()
        }
        V::Numeric(n) => their_numeric(n),
        V::Text(s) | V::Varchar(s) | V::Bytea(s) | V::Enum(s) => escaped(s),
        V::Bpchar(s) => {
            let end = s.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
            escaped(&s[..end])
        }
        V::Uuid(u) => u.to_vec(),
        V::Macaddr(m) => m.to_vec(),
        V::Macaddr8(m) => m.to_vec(),
        V::Timetz(t) => {
            let gmt = t.time + i64::from(t.zone) * 1_000_000;
            let mut out = ((gmt as u64) ^ (1 << 63)).to_be_bytes().to_vec();
            out.extend(flip32(t.zone));
            out
        }
        V::Interval(i) => ((i.cmp_value() as u128) ^ (1 << 127))
            .to_be_bytes()
            .to_vec(),
        // "address family, prefix length, and address bytes; cidr clears host bits".
        V::Inet(n) | V::Cidr(n) => {
            let mut out = vec![n.family as u8, n.bits];
            out.extend_from_slice(n.address());
            out
        }
        // "bit length and escaped packed bits".
        V::Bit(b) | V::Varbit(b) => {
            let mut out = b.bit_len.to_be_bytes().to_vec();
            out.extend(escaped(&b.bytes));
            out
        }
        other => panic!("pg_trickle's V2 has no payload for {other:?}"),
    }
}

/// pg_trickle's numeric: class; for finite non-zero values the value as `digits × 10^exponent`
/// with the shortest digit string, written as the sign-flipped int32 exponent, a uint32 digit
/// count and ASCII digits, all complemented for negative values.
fn their_numeric(n: &OwnedNumeric) -> Vec<u8> {
    let class = match n.sign {
        NumericSign::NegativeInfinity => return vec![0x00],
        NumericSign::PositiveInfinity => return vec![0x04],
        NumericSign::NaN => return vec![0x05],
        NumericSign::Negative => 0x01,
        NumericSign::Positive => 0x03,
    };
    // Decimal digits of the groups, and the power of ten of the last one.
    let mut digits: String = n.digits.iter().map(|g| format!("{g:04}")).collect();
    let mut exponent = 4 * (i32::from(n.weight) - n.digits.len() as i32 + 1);
    let trailing = digits.len() - digits.trim_end_matches('0').len();
    digits.truncate(digits.len() - trailing);
    exponent += trailing as i32;
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return vec![0x02];
    }
    let mut body = flip32(exponent).to_vec();
    body.extend((digits.len() as u32).to_be_bytes());
    body.extend(digits.bytes());
    if class == 0x01 {
        body.iter_mut().for_each(|b| *b = !*b);
    }
    let mut out = vec![class];
    out.extend(body);
    out
}

/// Families whose bytes agree (Appendix A.2).
const AGREEING: [TypeTag; 21] = [
    TypeTag::Bool,
    TypeTag::Int2,
    TypeTag::Int4,
    TypeTag::Int8,
    TypeTag::Oid,
    TypeTag::Float4,
    TypeTag::Float8,
    TypeTag::Text,
    TypeTag::Varchar,
    TypeTag::Bpchar,
    TypeTag::Bytea,
    TypeTag::Uuid,
    TypeTag::Date,
    TypeTag::Time,
    TypeTag::Timestamp,
    TypeTag::Timestamptz,
    TypeTag::Timetz,
    TypeTag::Interval,
    TypeTag::Macaddr,
    TypeTag::Macaddr8,
    TypeTag::Enum,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Every value of the agreeing families has the same bytes in both.
    #[test]
    fn agreeing_families_have_the_same_bytes(
        v in prop::sample::select(AGREEING.to_vec()).prop_flat_map(input),
    ) {
        prop_assert_eq!(theirs(&v), ours(&v), "{:?}", v);
    }
}

fn numeric(text: &str) -> OwnedValue {
    OwnedValue::Numeric(parse_numeric(text).unwrap())
}

/// `a` sorts before `b` in PostgreSQL and in our bytes, and after it in pg_trickle's.
fn misordered_by_pg_trickle(a: &OwnedValue, b: &OwnedValue) {
    assert_eq!(model_cmp(a, b), Ordering::Less, "PostgreSQL: {a:?} < {b:?}");
    assert!(ours(a) < ours(b), "ours keeps {a:?} < {b:?}");
    assert!(
        theirs(a) > theirs(b),
        "pg_trickle's bytes sort {a:?} after {b:?}"
    );
}

#[test]
fn numeric_zero_and_specials_agree_finite_values_do_not() {
    for text in ["0", "-0.000", "NaN", "Infinity", "-Infinity"] {
        assert_eq!(theirs(&numeric(text)), ours(&numeric(text)), "{text}");
    }
    // Equal values agree on equality in both formats (both normalise)...
    assert_eq!(theirs(&numeric("1.0")), theirs(&numeric("1.00")));
    // ...but pg_trickle writes the exponent of the last digit first.
    misordered_by_pg_trickle(&numeric("3"), &numeric("12.5"));
    misordered_by_pg_trickle(&numeric("1.1"), &numeric("1.99"));
    misordered_by_pg_trickle(&numeric("-12.5"), &numeric("-3"));
}

#[test]
fn inet_orders_by_prefix_length_in_pg_trickle() {
    // network_cmp compares the common network bits first: 9/16 < 10/8.
    let a = OwnedValue::Inet(Inet::v4([9, 0, 0, 0], 16));
    let b = OwnedValue::Inet(Inet::v4([10, 0, 0, 0], 8));
    misordered_by_pg_trickle(&a, &b);
    let c = OwnedValue::Cidr(Inet::v4([9, 0, 0, 0], 16));
    let d = OwnedValue::Cidr(Inet::v4([10, 0, 0, 0], 8));
    misordered_by_pg_trickle(&c, &d);
}

#[test]
fn bit_strings_order_by_length_in_pg_trickle() {
    // bit_cmp compares the bits first: B'01' < B'1'.
    let bits = |bit_len, byte| {
        OwnedValue::Varbit(OwnedBits {
            bit_len,
            bytes: vec![byte],
        })
    };
    misordered_by_pg_trickle(&bits(2, 0x40), &bits(1, 0x80));
}

/// pg_trickle's published check vectors (its docs/ROW_IDENTITY_V2.md, "Independent check
/// vectors"): the first three are ours too; the fourth holds text with a NUL byte, which
/// PostgreSQL's text cannot hold, and is refused here.
#[test]
fn published_check_vectors() {
    let hex = |s| from_hex(s).unwrap();
    for (bytes, text) in [
        ("02 01 00 00 00 01 03 01 80 00 00 01 FF", "SCAN_KEY(int4 1)"),
        ("02 01 00 00 00 01 03 00 FF", "SCAN_KEY(int4 NULL)"),
        (
            "02 01 00 00 00 01 09 01 61 00 00 FF",
            "SCAN_KEY(text \"a\")",
        ),
    ] {
        assert_eq!(decode(&hex(bytes)).unwrap().to_string(), text);
    }
    assert!(matches!(
        decode(&hex("02 01 00 00 00 01 09 01 61 00 FF 62 00 00 FF")),
        Err(Error::NonCanonical { .. })
    ));
}
