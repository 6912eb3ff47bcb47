//! Property tests of the wire format's invariants against the model of PostgreSQL's
//! comparators in `rowid_testkit::model`.
//!
//! Case counts: `PAIR_CASES` pairs per type for equality and order agreement, `CASES` for the
//! structural properties. `PROPTEST_CASES` in the environment overrides both.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cmp::Ordering;

use proptest::prelude::*;
use rowid_codec::probe::{
    PROBE_PREFIX_CANDIDATES, max_probe_len, probe_digest, probe_with_forced_digest,
    probe_with_prefix,
};
use rowid_codec::{
    ChildIdentity, Domain, Interval, OwnedValue, TypeTag, Value, decode, encode_identity, validate,
};
use rowid_testkit::model::{
    canonical_shape, input, interval_cmp_value, interval_fields, model_cmp, model_eq,
    order_preserving, pair, scalar_tags,
};

const PAIR_CASES: u32 = 10_000;
const CASES: u32 = 5_000;

fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig::with_cases(cases)
}

fn field_bytes(v: &OwnedValue) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_identity(&mut buf, Domain::ScanKey, &[(v.tag(), Some(v.as_value()))])
        .unwrap_or_else(|e| panic!("{v:?} does not encode: {e}"));
    buf
}

type Fields = Vec<(TypeTag, Option<OwnedValue>)>;

fn encode_fields(domain: Domain, fields: &Fields) -> Vec<u8> {
    let values: Vec<(TypeTag, Option<Value<'_>>)> = fields
        .iter()
        .map(|(t, v)| (*t, v.as_ref().map(OwnedValue::as_value)))
        .collect();
    let mut buf = Vec::new();
    encode_identity(&mut buf, domain, &values).unwrap();
    buf
}

/// Fieldwise model order of two identities of one schema: NULL first, then the type's order.
fn model_identity_cmp(a: &Fields, b: &Fields) -> Ordering {
    for ((_, x), (_, y)) in a.iter().zip(b) {
        let o = match (x, y) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(x), Some(y)) => model_cmp(x, y),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

fn schema_of(tags: Vec<TypeTag>) -> impl Strategy<Value = Vec<TypeTag>> {
    prop::collection::vec(prop::sample::select(tags), 0..=4)
}

fn schema() -> impl Strategy<Value = Vec<TypeTag>> {
    schema_of(scalar_tags())
}

fn fields_of(schema: Vec<TypeTag>) -> BoxedStrategy<Fields> {
    schema
        .into_iter()
        .map(|t| {
            prop::option::weighted(0.8, input(t))
                .prop_map(move |v| (t, v))
                .boxed()
        })
        .collect::<Vec<_>>()
        .boxed()
}

fn domain() -> impl Strategy<Value = Domain> {
    prop::sample::select(Domain::ALL.to_vec())
}

/// Any identity: random domain and schema.
fn identity() -> impl Strategy<Value = (Domain, Fields)> {
    (domain(), schema().prop_flat_map(fields_of))
}

/// Two identities of one schema of order-preserving types (so their order is meaningful).
fn same_schema_pair() -> impl Strategy<Value = (Fields, Fields)> {
    let ordered = scalar_tags()
        .into_iter()
        .filter(|t| order_preserving(*t))
        .collect();
    schema_of(ordered).prop_flat_map(|s| (fields_of(s.clone()), fields_of(s)))
}

/// Checks equality agreement, and order agreement where claimed, for one type.
fn check_pair(tag: TypeTag, a: &OwnedValue, b: &OwnedValue) -> Result<(), TestCaseError> {
    let (ea, eb) = (field_bytes(a), field_bytes(b));
    let model = model_cmp(a, b);
    prop_assert_eq!(
        ea == eb,
        model == Ordering::Equal,
        "{}: equality disagrees for {:?} vs {:?}",
        tag.name(),
        a,
        b
    );
    if order_preserving(tag) {
        prop_assert_eq!(
            ea.cmp(&eb),
            model,
            "{}: order disagrees for {:?} vs {:?}",
            tag.name(),
            a,
            b
        );
    }
    Ok(())
}

macro_rules! per_type_agreement {
    ($($name:ident => $tag:expr),* $(,)?) => {
        proptest! {
            #![proptest_config(config(PAIR_CASES))]
            $(
                #[test]
                fn $name((a, b) in pair($tag)) {
                    check_pair($tag, &a, &b)?;
                }
            )*
        }
    };
}

per_type_agreement! {
    agree_bool => TypeTag::Bool,
    agree_int2 => TypeTag::Int2,
    agree_int4 => TypeTag::Int4,
    agree_int8 => TypeTag::Int8,
    agree_oid => TypeTag::Oid,
    agree_float4 => TypeTag::Float4,
    agree_float8 => TypeTag::Float8,
    agree_numeric => TypeTag::Numeric,
    agree_text => TypeTag::Text,
    agree_varchar => TypeTag::Varchar,
    agree_bpchar => TypeTag::Bpchar,
    agree_bytea => TypeTag::Bytea,
    agree_uuid => TypeTag::Uuid,
    agree_date => TypeTag::Date,
    agree_time => TypeTag::Time,
    agree_timestamp => TypeTag::Timestamp,
    agree_timestamptz => TypeTag::Timestamptz,
    agree_timetz => TypeTag::Timetz,
    agree_interval => TypeTag::Interval,
    agree_inet => TypeTag::Inet,
    agree_cidr => TypeTag::Cidr,
    agree_macaddr => TypeTag::Macaddr,
    agree_macaddr8 => TypeTag::Macaddr8,
    agree_bit => TypeTag::Bit,
    agree_varbit => TypeTag::Varbit,
    agree_enum => TypeTag::Enum,
}

proptest! {
    #![proptest_config(config(CASES))]

    /// decode(encode(x)) is canonical(x): model-equal fieldwise, and re-encodes to the same
    /// bytes; `validate` and the borrowing iterator agree with `decode`.
    #[test]
    fn round_trip((domain, fields) in identity()) {
        let bytes = encode_fields(domain, &fields);
        let back = decode(&bytes).unwrap();
        prop_assert_eq!(back.domain, domain);
        prop_assert_eq!(back.fields.len(), fields.len());
        for ((tag, input), got) in fields.iter().zip(&back.fields) {
            prop_assert_eq!(*tag, got.tag);
            match (input, &got.value) {
                (None, None) => {}
                (Some(x), Some(y)) => {
                    prop_assert!(canonical_shape(y), "not canonical: {:?}", y);
                    prop_assert!(model_eq(x, y), "{:?} decoded as {:?}", x, y);
                    prop_assert_eq!(field_bytes(x), field_bytes_from(y.as_value()));
                }
                _ => prop_assert!(false, "NULL state changed"),
            }
        }
        let mut again = Vec::new();
        back.encode(&mut again).unwrap();
        prop_assert_eq!(&again, &bytes);
        let summary = validate(&bytes).unwrap();
        prop_assert_eq!(summary.field_count as usize, fields.len());
        prop_assert_eq!(summary.depth, 1);
        check_strict(&bytes)?;
    }

    /// Identities are equal iff domain, schema and every field agree under the model, and no
    /// identity is a proper prefix of another (framing and prefix freedom).
    #[test]
    fn injective_and_prefix_free(a in identity(), b in identity()) {
        let (ea, eb) = (encode_fields(a.0, &a.1), encode_fields(b.0, &b.1));
        let model_equal = a.0 == b.0
            && a.1.len() == b.1.len()
            && a.1.iter().zip(&b.1).all(|((ta, va), (tb, vb))| {
                ta == tb
                    && match (va, vb) {
                        (None, None) => true,
                        (Some(x), Some(y)) => model_eq(x, y),
                        _ => false,
                    }
            });
        prop_assert_eq!(ea == eb, model_equal);
        if ea != eb {
            prop_assert!(!eb.starts_with(&ea) && !ea.starts_with(&eb), "prefix: {:02X?} {:02X?}", ea, eb);
        }
    }

    /// Within one schema, identity byte order is fieldwise model order (NULL first), for
    /// schemas of order-preserving types.
    #[test]
    fn identity_order_follows_fields((a, b) in same_schema_pair()) {
        let (ea, eb) = (encode_fields(Domain::ScanKey, &a), encode_fields(Domain::ScanKey, &b));
        prop_assert_eq!(ea.cmp(&eb), model_identity_cmp(&a, &b));
    }

    /// Child identities: JOIN_KEY(A, B) equal iff children equal; order follows the children;
    /// splitting bytes differently between children never collides.
    #[test]
    fn child_identities_frame((a1, a2) in (identity(), identity()), (b1, b2) in (identity(), identity())) {
        let c = |x: &(Domain, Fields)| encode_fields(x.0, &x.1);
        let (ca1, ca2, cb1, cb2) = (c(&a1), c(&a2), c(&b1), c(&b2));
        let join = |l: &[u8], r: &[u8]| {
            let mut buf = Vec::new();
            encode_identity(&mut buf, Domain::JoinKey, &[
                (TypeTag::ChildIdentity, Some(Value::Identity(ChildIdentity::new(l).unwrap()))),
                (TypeTag::ChildIdentity, Some(Value::Identity(ChildIdentity::new(r).unwrap()))),
            ]).unwrap();
            buf
        };
        let (ja, jb) = (join(&ca1, &ca2), join(&cb1, &cb2));
        prop_assert_eq!(ja == jb, ca1 == cb1 && ca2 == cb2);
        prop_assert_eq!(ja.cmp(&jb), ca1.cmp(&cb1).then(ca2.cmp(&cb2)));
        let summary = validate(&ja).unwrap();
        prop_assert_eq!(summary.depth, 2);
        let back = decode(&ja).unwrap();
        prop_assert_eq!(back.fields.len(), 2);
    }

    /// Probe V1 for every candidate P: inline probes are the identity, overflow probes are
    /// P + 16 bytes, probes keep identity order when the first P bytes differ, and equal
    /// probes imply equal prefixes.
    #[test]
    fn probe_properties(a in identity(), b in identity(), p in prop::sample::select(PROBE_PREFIX_CANDIDATES.to_vec())) {
        let (ea, eb) = (encode_fields(a.0, &a.1), encode_fields(b.0, &b.1));
        let probe = |id: &[u8]| { let mut o = Vec::new(); probe_with_prefix(id, p, &mut o); o };
        let (pa, pb) = (probe(&ea), probe(&eb));
        prop_assert!(pa.len() <= max_probe_len(p));
        if ea.len() <= p { prop_assert_eq!(&pa, &ea); } else { prop_assert_eq!(pa.len(), p + 16); }
        let pre = |x: &[u8]| x[..x.len().min(p)].to_vec();
        if pre(&ea) != pre(&eb) {
            prop_assert_eq!(pa.cmp(&pb), ea.cmp(&eb));
        }
        if ea == eb { prop_assert_eq!(&pa, &pb); }
        if pa == pb { prop_assert_eq!(pre(&ea), pre(&eb)); }
    }

    /// The codec's interval comparison value is PostgreSQL's `interval_cmp_value` (a month
    /// is 30 days, computed in 128 bits), restated independently by the model.
    #[test]
    fn interval_comparison_value_is_postgres_formula((m, d, us) in interval_fields()) {
        prop_assert_eq!(Interval::from_fields(m, d, us).cmp_value(), interval_cmp_value(m, d, us));
    }

    /// Decoding arbitrary bytes never panics; anything accepted re-encodes to itself.
    #[test]
    fn decode_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        check_strict(&bytes)?;
    }

    /// Mutating a valid identity (flip, truncate, extend) either fails or yields another
    /// canonical identity.
    #[test]
    fn decode_mutated((domain, fields) in identity(), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let bytes = encode_fields(domain, &fields);
        let mut flipped = bytes.clone();
        let i = at.index(flipped.len());
        flipped[i] = byte;
        check_strict(&flipped)?;
        check_strict(&bytes[..cut.index(bytes.len())])?;
        let mut longer = bytes.clone();
        longer.push(byte);
        prop_assert!(decode(&longer).is_err(), "trailing byte accepted");
    }
}

fn field_bytes_from(v: Value<'_>) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_identity(&mut buf, Domain::ScanKey, &[(v.tag(), Some(v))]).unwrap();
    buf
}

/// Strictness: decode and validate agree, and an accepted input is canonical.
fn check_strict(bytes: &[u8]) -> Result<(), TestCaseError> {
    let decoded = decode(bytes);
    prop_assert_eq!(decoded.is_ok(), validate(bytes).is_ok());
    if let Ok(id) = decoded {
        let mut again = Vec::new();
        id.encode(&mut again).unwrap();
        prop_assert_eq!(&again[..], bytes, "accepted a non-canonical identity");
    }
    if let Err(e) = rowid_testkit::decoders::check_agree(bytes) {
        return Err(TestCaseError::fail(e));
    }
    Ok(())
}

/// Forced equal digests: two distinct overflow identities get the same probe, yet their
/// complete identities still differ, which is what the exact-match recheck relies on.
#[test]
fn forced_probe_collision_keeps_identities_distinct() {
    let long = |tail: &[u8]| {
        let mut text = vec![b'x'; 300];
        text.extend_from_slice(tail);
        field_bytes(&OwnedValue::Text(text))
    };
    let (a, b) = (long(b"a"), long(b"b"));
    assert_ne!(a, b);
    let digest = probe_digest(&a);
    for p in PROBE_PREFIX_CANDIDATES {
        let (mut pa, mut pb) = (Vec::new(), Vec::new());
        probe_with_forced_digest(&a, p, digest, &mut pa);
        probe_with_forced_digest(&b, p, digest, &mut pb);
        assert_eq!(pa, pb, "P = {p}: forced probes collide");
        let (mut real_a, mut real_b) = (Vec::new(), Vec::new());
        probe_with_prefix(&a, p, &mut real_a);
        probe_with_prefix(&b, p, &mut real_b);
        assert_eq!(
            real_a, pa,
            "forcing a's own digest reproduces its real probe"
        );
        assert_ne!(real_a, real_b, "P = {p}: real digests differ");
    }
}
