//! Index classification at the B-tree boundary, and static bounds against real encodings.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use rowid_codec::probe::PROBE_V1_PREFIX_LEN;
use rowid_codec::{BitString, Digits, Domain, Numeric, TypeTag, Value, encode_identity};
use rowid_registry::catalog::oid;
use rowid_registry::size::max_indexable_datum;
use rowid_registry::{
    Collation, FieldSpec, IndexClass, MaintenanceMode, Property, ServerContext, TypeRef,
    Uniqueness, plan_index, resolve_schema,
};

fn varchar_schema(n: i32, max_char_bytes: u32) -> rowid_registry::IdentitySchema {
    let ctx = ServerContext {
        max_char_bytes,
        ..ServerContext::default_pg18()
    };
    let f = FieldSpec::new("k", TypeRef::builtin(oid::VARCHAR, "varchar"), n + 4)
        .collate(Collation::c());
    resolve_schema(Domain::ScanKey, &[f], &ctx).unwrap()
}

#[test]
fn direct_index_exactly_at_the_limit_probe_one_byte_over() {
    // One varchar(n) field in a single-byte encoding: identity <= 7 + 2 + n + 2 bytes.
    let limit = max_indexable_datum(8192);
    assert_eq!(limit, 2692);
    let at = varchar_schema((limit - 11) as i32, 1);
    assert_eq!(at.max_encoded_len(), Some(limit));
    let plan = plan_index(
        &at,
        Uniqueness::Unique,
        MaintenanceMode::Immediate,
        8192,
        PROBE_V1_PREFIX_LEN,
    )
    .unwrap();
    assert_eq!(plan.class, IndexClass::DirectUnique);
    assert_eq!(plan.max_index_datum, limit);

    let over = varchar_schema((limit - 10) as i32, 1);
    assert_eq!(over.max_encoded_len(), Some(limit + 1));
    let plan = plan_index(
        &over,
        Uniqueness::Unique,
        MaintenanceMode::Refresh,
        8192,
        PROBE_V1_PREFIX_LEN,
    )
    .unwrap();
    assert_eq!(
        plan.class,
        IndexClass::ProbeExpression,
        "never a UNIQUE index on a probe"
    );
    assert_eq!(plan.max_index_datum, PROBE_V1_PREFIX_LEN + 16);
    let err = plan_index(
        &over,
        Uniqueness::Unique,
        MaintenanceMode::Immediate,
        8192,
        PROBE_V1_PREFIX_LEN,
    )
    .unwrap_err();
    assert_eq!(err.property, Property::UniqueUnboundedImmediate);
    assert!(err.to_string().contains("2693"), "{err}");
    let plan = plan_index(
        &over,
        Uniqueness::Multiset,
        MaintenanceMode::Immediate,
        8192,
        PROBE_V1_PREFIX_LEN,
    )
    .unwrap();
    assert_eq!(plan.class, IndexClass::ProbeExpression);
}

#[test]
fn classification_for_common_schemas() {
    let ctx = ServerContext::default_pg18();
    let f = |o, n: &str, t| {
        let s = FieldSpec::new(n, TypeRef::builtin(o, n), t);
        if o == oid::TEXT || o == oid::VARCHAR {
            s.collate(Collation::c())
        } else {
            s
        }
    };
    let cases: &[(&str, Vec<FieldSpec>, Option<usize>, IndexClass)] = &[
        (
            "int4",
            vec![f(oid::INT4, "int4", -1)],
            Some(13),
            IndexClass::DirectUnique,
        ),
        (
            "int8",
            vec![f(oid::INT8, "int8", -1)],
            Some(17),
            IndexClass::DirectUnique,
        ),
        (
            "uuid",
            vec![f(oid::UUID, "uuid", -1)],
            Some(25),
            IndexClass::DirectUnique,
        ),
        (
            "(int8, int8)",
            vec![f(oid::INT8, "int8", -1), f(oid::INT8, "int8", -1)],
            Some(27),
            IndexClass::DirectUnique,
        ),
        (
            "varchar(64)",
            vec![f(oid::VARCHAR, "varchar", 68)],
            Some(267),
            IndexClass::DirectUnique,
        ),
        (
            "text",
            vec![f(oid::TEXT, "text", -1)],
            None,
            IndexClass::ProbeExpression,
        ),
    ];
    for (name, fields, bound, class) in cases {
        let schema = resolve_schema(Domain::ScanKey, fields, &ctx).unwrap();
        assert_eq!(schema.max_encoded_len(), *bound, "{name}");
        let plan = plan_index(
            &schema,
            Uniqueness::Unique,
            MaintenanceMode::Refresh,
            8192,
            PROBE_V1_PREFIX_LEN,
        )
        .unwrap();
        assert_eq!(plan.class, *class, "{name}");
    }
    // Keyless rows of bounded types use a non-unique direct index.
    let keyless = resolve_schema(Domain::KeylessRow, &[f(oid::INT4, "int4", -1)], &ctx).unwrap();
    let plan = multiset(&keyless, 8192, 128).unwrap();
    assert_eq!(plan.class, IndexClass::DirectNonUnique);
}

/// The plan of a multiset (non-unique) identity maintained by refresh.
fn multiset(
    schema: &rowid_registry::IdentitySchema,
    block_size: u32,
    p: usize,
) -> Result<rowid_registry::IndexPlan, rowid_registry::Rejection> {
    plan_index(
        schema,
        Uniqueness::Multiset,
        MaintenanceMode::Refresh,
        block_size,
        p,
    )
}

#[test]
fn block_size_and_probe_checks() {
    let text = resolve_schema(
        Domain::ScanKey,
        &[FieldSpec::new("t", TypeRef::builtin(oid::TEXT, "text"), -1).collate(Collation::c())],
        &ServerContext::default_pg18(),
    )
    .unwrap();
    let err = multiset(&text, 8000, 128).unwrap_err();
    assert_eq!(
        (err.property, err.sqlstate()),
        (Property::InvalidBlockSize, "22023")
    );
    // 1 kB pages hold datums of at most 312 - 12 = 300 bytes: P = 256 fits (272), P = 512 does not.
    assert!(multiset(&text, 1024, 256).is_ok());
    let err = multiset(&text, 1024, 512).unwrap_err();
    assert_eq!(err.property, Property::ProbeDoesNotFit);
    let msg = err.to_string();
    assert!(
        msg.contains("1024") && msg.contains("300") && msg.contains("528"),
        "{msg}"
    );
    // A bounded schema too wide for a small page falls back to the probe.
    let wide = varchar_schema(400, 1);
    let plan = multiset(&wide, 1024, 128).unwrap();
    assert_eq!(plan.class, IndexClass::ProbeExpression);
    let plan = multiset(&wide, 8192, 128).unwrap();
    assert_eq!(plan.class, IndexClass::DirectNonUnique);
}

// ---------------------------------------------------------------------------------------
// Static bound >= real encoded size, for values that fit each typmod.
// ---------------------------------------------------------------------------------------

/// A bounded type with a typmod, and a value strategy that respects it.
#[derive(Clone, Debug)]
enum Bounded {
    Varchar(u32, Vec<char>),
    Bpchar(u32, Vec<char>),
    Numeric(u32, bool, Vec<u8>, i32),
    Bit(u32, Vec<u8>),
    Enum(Vec<u8>),
}

fn chars(max: u32) -> impl Strategy<Value = Vec<char>> {
    // Characters of 1 to 4 UTF-8 bytes; never NUL.
    prop::collection::vec(
        prop_oneof![
            Just('a'),
            Just('é'),
            Just('€'),
            Just('😀'),
            Just('\u{1}'),
            Just(' ')
        ],
        0..=max as usize,
    )
}

fn bounded() -> impl Strategy<Value = Bounded> {
    prop_oneof![
        (1u32..40).prop_flat_map(|n| chars(n).prop_map(move |c| Bounded::Varchar(n, c))),
        (1u32..40).prop_flat_map(|n| chars(n).prop_map(move |c| Bounded::Bpchar(n, c))),
        (1u32..30).prop_flat_map(|p| {
            (
                Just(p),
                any::<bool>(),
                prop::collection::vec(prop_oneof![Just(0u8), 0u8..=9], p as usize),
                -8i32..8,
            )
                .prop_map(|(p, neg, d, shift)| Bounded::Numeric(p, neg, d, shift))
        }),
        (1u32..40).prop_flat_map(|n| {
            prop::collection::vec(prop_oneof![Just(0u8), any::<u8>()], n.div_ceil(8) as usize)
                .prop_map(move |mut b| {
                    if n % 8 != 0 {
                        let last = b.len() - 1;
                        b[last] &= 0xFF << (8 - n % 8);
                    }
                    Bounded::Bit(n, b)
                })
        }),
        prop::collection::vec(1u8..=255, 0..=63).prop_map(Bounded::Enum),
    ]
}

/// Base-10000 groups of the decimal digits `d` with the decimal point `shift` places from
/// the right end (negative: zeros appended).
fn numeric_groups(d: &[u8], shift: i32) -> (i16, Vec<u16>) {
    let mut digits: Vec<u8> = d.to_vec();
    let mut frac = shift;
    if frac < 0 {
        digits.extend(std::iter::repeat_n(0, (-frac) as usize));
        frac = 0;
    }
    let frac = frac as usize;
    let int_len = digits.len().saturating_sub(frac);
    let mut int_part: Vec<u8> = digits[..int_len].to_vec();
    let mut frac_part: Vec<u8> = if frac > digits.len() {
        let mut v = vec![0; frac - digits.len()];
        v.extend(&digits);
        v
    } else {
        digits[int_len..].to_vec()
    };
    while !int_part.len().is_multiple_of(4) {
        int_part.insert(0, 0);
    }
    while !frac_part.len().is_multiple_of(4) {
        frac_part.push(0);
    }
    let all: Vec<u8> = int_part.iter().chain(&frac_part).copied().collect();
    let groups = all
        .chunks(4)
        .map(|c| c.iter().fold(0u16, |acc, &x| acc * 10 + u16::from(x)))
        .collect();
    ((int_part.len() / 4) as i16 - 1, groups)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    #[test]
    fn static_bound_covers_real_encodings(b in bounded()) {
        let ctx = ServerContext::default_pg18();
        let text_field = |o, name: &str, n: u32| {
            FieldSpec::new("f", TypeRef::builtin(o, name), n as i32 + 4).collate(Collation::c())
        };
        let (spec, tag) = match &b {
            Bounded::Varchar(n, _) => (text_field(oid::VARCHAR, "varchar", *n), TypeTag::Varchar),
            Bounded::Bpchar(n, _) => (text_field(oid::BPCHAR, "bpchar", *n), TypeTag::Bpchar),
            Bounded::Numeric(p, ..) => (
                FieldSpec::new("f", TypeRef::builtin(oid::NUMERIC, "numeric"), ((*p as i32) << 16) + 4),
                TypeTag::Numeric,
            ),
            Bounded::Bit(n, _) => (FieldSpec::new("f", TypeRef::builtin(oid::VARBIT, "varbit"), *n as i32), TypeTag::Varbit),
            Bounded::Enum(_) => (FieldSpec::new("f", TypeRef::Enum { oid: 16_384, name: "e".into() }, -1), TypeTag::Enum),
        };
        let schema = resolve_schema(Domain::ScanKey, &[spec], &ctx).unwrap();
        let bound = schema.max_encoded_len().unwrap();
        let text: String;
        let groups: (i16, Vec<u16>);
        let value = match &b {
            Bounded::Varchar(_, c) => { text = c.iter().collect(); Value::Varchar(text.as_bytes()) }
            Bounded::Bpchar(n, c) => {
                let mut s: String = c.iter().collect();
                s.extend(std::iter::repeat_n(' ', *n as usize - c.len()));
                text = s;
                Value::Bpchar(text.as_bytes())
            }
            Bounded::Numeric(_, neg, d, shift) => {
                groups = numeric_groups(d, *shift);
                Value::Numeric(Numeric::finite(*neg, groups.0, Digits::native(&groups.1)))
            }
            Bounded::Bit(n, bytes) => Value::Varbit(BitString { bit_len: *n, bytes }),
            Bounded::Enum(label) => Value::Enum(label),
        };
        let mut id = Vec::new();
        encode_identity(&mut id, Domain::ScanKey, &[(tag, Some(value))]).unwrap();
        prop_assert!(id.len() <= bound, "{:?}: encoded {} > bound {}", b, id.len(), bound);
    }
}
