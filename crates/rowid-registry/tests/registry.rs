//! Table-driven tests of every registry entry and every rejection.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_codec::{Domain, TypeTag};
use rowid_registry::catalog::oid;
use rowid_registry::entry::{BUILTINS, ENUM};
use rowid_registry::{
    Collation, CollationProvider, FieldSpec, Invalidation, OpClass, OrderClaim, Property,
    ServerContext, TypeRef, Volatility, resolve_field, resolve_schema,
};

const CTX: ServerContext = ServerContext::default_pg18();

fn icu(deterministic: bool) -> Collation {
    Collation {
        name: if deterministic { "und-x-icu" } else { "und-ci" }.into(),
        provider: CollationProvider::Icu,
        deterministic,
        locale: "und".into(),
    }
}

fn en_us() -> Collation {
    Collation::libc("en_US", "en_US.UTF-8")
}

fn field(oid: u32, name: &str, typmod: i32) -> FieldSpec {
    let f = FieldSpec::new("col", TypeRef::builtin(oid, name), typmod);
    if matches!(oid, oid::TEXT | oid::VARCHAR | oid::BPCHAR) {
        f.collate(Collation::c())
    } else {
        f
    }
}

/// (oid, name, typmod, tag, order-preserving under C, field bound incl. tag/state)
type Expected = (u32, &'static str, i32, TypeTag, bool, Option<usize>);

const EXPECTED: &[Expected] = &[
    (oid::BOOL, "bool", -1, TypeTag::Bool, true, Some(3)),
    (oid::INT2, "int2", -1, TypeTag::Int2, true, Some(4)),
    (oid::INT4, "int4", -1, TypeTag::Int4, true, Some(6)),
    (oid::INT8, "int8", -1, TypeTag::Int8, true, Some(10)),
    (oid::OID, "oid", -1, TypeTag::Oid, true, Some(6)),
    (oid::FLOAT4, "float4", -1, TypeTag::Float4, true, Some(6)),
    (oid::FLOAT8, "float8", -1, TypeTag::Float8, true, Some(10)),
    (oid::NUMERIC, "numeric", -1, TypeTag::Numeric, true, None),
    // numeric(10,2): (10 + 6) / 4 = 4 groups: 2 + 1 + 2 + 16 + 2
    (
        oid::NUMERIC,
        "numeric",
        (10 << 16 | 2) + 4,
        TypeTag::Numeric,
        true,
        Some(23),
    ),
    (oid::TEXT, "text", -1, TypeTag::Text, true, None),
    // varchar(64) in UTF8: 2 + 64 * 4 + 2
    (
        oid::VARCHAR,
        "varchar",
        64 + 4,
        TypeTag::Varchar,
        true,
        Some(260),
    ),
    (oid::VARCHAR, "varchar", -1, TypeTag::Varchar, true, None),
    (
        oid::BPCHAR,
        "bpchar",
        10 + 4,
        TypeTag::Bpchar,
        true,
        Some(44),
    ),
    (oid::BYTEA, "bytea", -1, TypeTag::Bytea, true, None),
    (oid::UUID, "uuid", -1, TypeTag::Uuid, true, Some(18)),
    (oid::DATE, "date", -1, TypeTag::Date, true, Some(6)),
    (oid::TIME, "time", -1, TypeTag::Time, true, Some(10)),
    (
        oid::TIMESTAMP,
        "timestamp",
        -1,
        TypeTag::Timestamp,
        true,
        Some(10),
    ),
    (
        oid::TIMESTAMPTZ,
        "timestamptz",
        -1,
        TypeTag::Timestamptz,
        true,
        Some(10),
    ),
    (oid::TIMETZ, "timetz", -1, TypeTag::Timetz, true, Some(14)),
    (
        oid::INTERVAL,
        "interval",
        -1,
        TypeTag::Interval,
        true,
        Some(18),
    ),
    (oid::INET, "inet", -1, TypeTag::Inet, true, Some(36)),
    (oid::CIDR, "cidr", -1, TypeTag::Cidr, true, Some(36)),
    (oid::MACADDR, "macaddr", -1, TypeTag::Macaddr, true, Some(8)),
    (
        oid::MACADDR8,
        "macaddr8",
        -1,
        TypeTag::Macaddr8,
        true,
        Some(10),
    ),
    // bit(12): 2 + 2 * 2 + 2 + 4
    (oid::BIT, "bit", 12, TypeTag::Bit, true, Some(12)),
    (oid::VARBIT, "varbit", -1, TypeTag::Varbit, true, None),
];

#[test]
fn every_builtin_entry_resolves_as_declared() {
    for &(o, name, typmod, tag, ordered, bound) in EXPECTED {
        let r =
            resolve_field(&field(o, name, typmod), &CTX).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.tag, tag, "{name}");
        assert_eq!(r.order_preserving, ordered, "{name}");
        assert_eq!(r.volatility, Volatility::Immutable, "{name}");
        assert_eq!(r.max_encoded_len, bound, "{name} typmod {typmod}");
        assert!(
            r.invalidations.contains(&Invalidation::TypeChange),
            "{name}"
        );
    }
    // Every builtin entry is covered by the table above.
    for e in BUILTINS {
        assert!(EXPECTED.iter().any(|x| x.0 == e.oid), "{} untested", e.name);
    }
}

#[test]
fn text_order_depends_on_collation() {
    for oid_value in [oid::TEXT, oid::VARCHAR, oid::BPCHAR] {
        let base = FieldSpec::new("t", TypeRef::builtin(oid_value, "text"), -1);
        let c = resolve_field(&base.clone().collate(Collation::c()), &CTX).unwrap();
        assert!(c.order_preserving);
        assert_eq!(
            c.invalidations,
            [Invalidation::CollationChange, Invalidation::TypeChange]
        );
        let mut posix = Collation::c();
        posix.locale = "POSIX".into();
        assert!(
            resolve_field(&base.clone().collate(posix), &CTX)
                .unwrap()
                .order_preserving
        );
        let en = resolve_field(&base.clone().collate(en_us()), &CTX).unwrap();
        assert!(!en.order_preserving, "deterministic non-C: equality only");
        let icu_det = resolve_field(&base.clone().collate(icu(true)), &CTX).unwrap();
        assert!(!icu_det.order_preserving);
        let err = resolve_field(&base.clone().collate(icu(false)), &CTX).unwrap_err();
        assert_eq!(err.property, Property::NonDeterministicCollation);
        let err = resolve_field(&base, &CTX).unwrap_err();
        assert_eq!(err.property, Property::UnknownCollation);
    }
}

#[test]
fn enums_domains_and_nesting() {
    let mood = FieldSpec::new(
        "mood",
        TypeRef::Enum {
            oid: 16_384,
            name: "mood".into(),
        },
        -1,
    );
    let r = resolve_field(&mood, &CTX).unwrap();
    assert_eq!(
        (r.tag, r.volatility, r.order_preserving),
        (TypeTag::Enum, Volatility::Stable, false)
    );
    assert_eq!(r.max_encoded_len, Some(2 + 63 + 2));
    assert!(r.invalidations.contains(&Invalidation::EnumLabelOrOrder));
    assert_eq!(ENUM.order, OrderClaim::NotPreserving);

    let email = TypeRef::Domain {
        oid: 16_384,
        name: "email".into(),
        base: Box::new(TypeRef::builtin(oid::TEXT, "text")),
    };
    let r = resolve_field(
        &FieldSpec::new("e", email, -1).collate(Collation::c()),
        &CTX,
    )
    .unwrap();
    assert_eq!(r.tag, TypeTag::Text);
    assert_eq!(r.type_name, "email (text)");
    assert!(r.invalidations.contains(&Invalidation::DomainOrBaseType));
    assert!(r.invalidations.contains(&Invalidation::CollationChange));

    let mood_dom = TypeRef::Domain {
        oid: 16_384,
        name: "happy_mood".into(),
        base: Box::new(TypeRef::Enum {
            oid: 16_384,
            name: "mood".into(),
        }),
    };
    let schema = resolve_schema(
        Domain::GroupKey,
        &[
            FieldSpec::new("m", mood_dom, -1),
            field(oid::INT8, "int8", -1),
        ],
        &CTX,
    )
    .unwrap();
    assert_eq!(
        schema.volatility(),
        Volatility::Stable,
        "stable if any part is stable"
    );
    assert!(!schema.order_preserving());
    assert_eq!(
        schema.invalidations(),
        [
            Invalidation::EnumLabelOrOrder,
            Invalidation::DomainOrBaseType,
            Invalidation::TypeChange
        ]
    );
    assert_eq!(schema.max_encoded_len(), Some(7 + 67 + 10));
    let unbounded = resolve_schema(
        Domain::ScanKey,
        &[field(oid::INT8, "int8", -1), field(oid::TEXT, "text", -1)],
        &CTX,
    )
    .unwrap();
    assert_eq!(
        unbounded.max_encoded_len(),
        None,
        "unbounded if any part is unbounded"
    );
}

/// A built-in type without a registry entry, and the word its rejection must contain.
fn unregistered(o: u32, name: &str, says: &'static str) -> (FieldSpec, Property, &'static str) {
    (field(o, name, -1), Property::UnregisteredType, says)
}

#[test]
fn rejections_name_expression_type_and_property() {
    let cases: Vec<(FieldSpec, Property, &str)> = vec![
        unregistered(oid::MONEY, "money", "lc_monetary"),
        unregistered(oid::JSON, "json", "jsonb"),
        unregistered(oid::XML, "xml", "equality"),
        unregistered(oid::POINT, "point", "geometric"),
        unregistered(oid::NAME, "name", "text"),
        (
            FieldSpec::new(
                "x",
                TypeRef::Other {
                    oid: 99_999,
                    name: "hstore".into(),
                },
                -1,
            ),
            Property::UnregisteredType,
            "registry",
        ),
        (
            FieldSpec::new(
                "docs",
                TypeRef::Array {
                    oid: 16_384,
                    name: "xml[]".into(),
                    element: Box::new(TypeRef::builtin(oid::XML, "xml")),
                },
                -1,
            ),
            Property::UnregisteredType,
            "element type xml of xml[]",
        ),
        (
            FieldSpec::new(
                "r",
                TypeRef::Composite {
                    oid: 16_384,
                    name: "outer_t".into(),
                    fields: vec![rowid_registry::CompositeField {
                        name: "nested".into(),
                        ty: TypeRef::AnonymousRecord,
                        typmod: -1,
                        collation: None,
                    }],
                },
                -1,
            ),
            Property::StructuralType,
            "attribute nested of outer_t",
        ),
        (
            FieldSpec::new(
                "d",
                TypeRef::Domain {
                    oid: 16_384,
                    name: "cash".into(),
                    base: Box::new(TypeRef::builtin(oid::MONEY, "money")),
                },
                -1,
            ),
            Property::UnregisteredType,
            "money",
        ),
        (
            FieldSpec {
                opclass: OpClass::NonDefault("text_pattern_ops".into()),
                ..field(oid::TEXT, "text", -1)
            },
            Property::NonDefaultOperatorClass,
            "text_pattern_ops",
        ),
    ];
    for (spec, property, mention) in cases {
        let err = resolve_field(&spec, &CTX).unwrap_err();
        assert_eq!(err.property, property, "{spec:?}");
        assert_eq!(err.sqlstate(), "0A000");
        let text = err.to_string();
        assert!(
            text.contains(&format!("identity field {:?}", spec.expr)),
            "{text}"
        );
        assert!(text.contains(spec.ty.name()), "{text}");
        assert!(text.contains(mention), "{text} should mention {mention}");
    }
}

#[test]
fn unverified_majors_are_rejected() {
    for major in [14, 19] {
        let ctx = ServerContext {
            pg_major: major,
            ..CTX
        };
        let err = resolve_field(&field(oid::INT4, "int4", -1), &ctx).unwrap_err();
        assert_eq!(err.property, Property::UnsupportedMajor);
        assert!(err.to_string().contains(&major.to_string()));
    }
    for major in [15, 16, 17, 18] {
        let ctx = ServerContext {
            pg_major: major,
            ..CTX
        };
        assert!(resolve_field(&field(oid::INT4, "int4", -1), &ctx).is_ok());
    }
}

#[test]
fn schema_reports_every_bad_field() {
    let err = resolve_schema(
        Domain::KeylessRow,
        &[
            field(oid::MONEY, "money", -1),
            field(oid::INT4, "int4", -1),
            field(oid::XML, "xml", -1),
        ],
        &CTX,
    )
    .unwrap_err();
    assert_eq!(err.0.len(), 2);
    let text = err.to_string();
    assert!(text.contains("money") && text.contains("xml"), "{text}");
    let too_many = vec![field(oid::INT4, "int4", -1); 1665];
    let err = resolve_schema(Domain::KeylessRow, &too_many, &CTX).unwrap_err();
    assert_eq!(err.0[0].property, Property::TooManyFields);
}
