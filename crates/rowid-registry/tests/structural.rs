//! Resolution of the structural families: nested contracts, combined properties and the
//! rejections of their components (spec/registry.md §2.8).

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_codec::TypeTag;
use rowid_codec::structure::Shape;
use rowid_registry::catalog::oid;
use rowid_registry::{
    Collation, CollationProvider, CompositeField, FieldSpec, Invalidation, Property, ServerContext,
    TypeRef, Volatility, resolve_field,
};

const CTX: ServerContext = ServerContext::default_pg18();

fn b(oid: u32, name: &str) -> TypeRef {
    TypeRef::builtin(oid, name)
}

fn array(element: TypeRef) -> TypeRef {
    TypeRef::Array {
        oid: 16_384,
        name: format!("{}[]", element.name()),
        element: Box::new(element),
    }
}

fn range(name: &str, subtype: TypeRef, collation: Option<Collation>) -> TypeRef {
    TypeRef::Range {
        oid: 16_384,
        name: name.into(),
        subtype: Box::new(subtype),
        collation,
    }
}

fn attr(name: &str, ty: TypeRef, collation: Option<Collation>) -> CompositeField {
    CompositeField {
        name: name.into(),
        ty,
        typmod: -1,
        collation,
    }
}

fn en_us() -> Collation {
    Collation::libc("en_US", "en_US.UTF-8")
}

fn nondeterministic() -> Collation {
    Collation {
        name: "und-ci".into(),
        provider: CollationProvider::Icu,
        deterministic: false,
        locale: "und".into(),
    }
}

fn scalar(t: TypeTag) -> Box<Shape> {
    Box::new(Shape::Scalar(t))
}

#[test]
fn arrays_take_the_element_contract() {
    let ints = resolve_field(&FieldSpec::new("a", array(b(oid::INT4, "int4")), -1), &CTX).unwrap();
    assert_eq!(ints.tag, TypeTag::Array);
    assert_eq!(ints.shape, Shape::Array(scalar(TypeTag::Int4)));
    assert!(ints.order_preserving);
    assert_eq!(ints.max_encoded_len, None, "no element count bound");
    assert_eq!(ints.volatility, Volatility::Immutable);

    let texts = |c: Collation| FieldSpec::new("t", array(b(oid::TEXT, "text")), -1).collate(c);
    assert!(
        resolve_field(&texts(Collation::c()), &CTX)
            .unwrap()
            .order_preserving
    );
    let en = resolve_field(&texts(en_us()), &CTX).unwrap();
    assert!(!en.order_preserving, "locale order is not byte order");
    assert!(en.invalidations.contains(&Invalidation::CollationChange));
    let err = resolve_field(&texts(nondeterministic()), &CTX).unwrap_err();
    assert_eq!(err.property, Property::NonDeterministicCollation);
    assert!(
        err.to_string().contains("element type text of text[]"),
        "{err}"
    );

    let missing = FieldSpec::new("t", array(b(oid::TEXT, "text")), -1);
    assert_eq!(
        resolve_field(&missing, &CTX).unwrap_err().property,
        Property::UnknownCollation
    );

    let enums = resolve_field(
        &FieldSpec::new(
            "e",
            array(TypeRef::Enum {
                oid: 16_384,
                name: "mood".into(),
            }),
            -1,
        ),
        &CTX,
    )
    .unwrap();
    assert!(!enums.order_preserving);
    assert_eq!(enums.volatility, Volatility::Stable);
    assert!(
        enums
            .invalidations
            .contains(&Invalidation::EnumLabelOrOrder)
    );
}

#[test]
fn ranges_use_the_range_collation_and_are_bounded_by_their_subtype() {
    let r = resolve_field(
        &FieldSpec::new("r", range("int4range", b(oid::INT4, "int4"), None), -1),
        &CTX,
    )
    .unwrap();
    assert_eq!(r.shape, Shape::Range(scalar(TypeTag::Int4)));
    assert!(r.order_preserving);
    // tag + state + subtype tag + state + 2 x (marker + 4 + inclusivity)
    assert_eq!(r.max_encoded_len, Some(2 + 2 + 2 * (1 + 4 + 1)));
    let num = resolve_field(
        &FieldSpec::new("n", range("numrange", b(oid::NUMERIC, "numeric"), None), -1),
        &CTX,
    )
    .unwrap();
    assert_eq!(num.max_encoded_len, None);
    // The range's own collation decides, not the field's.
    let text_range = |c: Option<Collation>| {
        FieldSpec::new("t", range("textrange", b(oid::TEXT, "text"), c), -1).collate(Collation::c())
    };
    assert!(
        !resolve_field(&text_range(Some(en_us())), &CTX)
            .unwrap()
            .order_preserving
    );
    assert!(
        resolve_field(&text_range(Some(Collation::c())), &CTX)
            .unwrap()
            .order_preserving
    );
    let err = resolve_field(&text_range(Some(nondeterministic())), &CTX).unwrap_err();
    assert_eq!(err.property, Property::NonDeterministicCollation);
    assert!(
        err.to_string().contains("subtype text of textrange"),
        "{err}"
    );

    let multi = resolve_field(
        &FieldSpec::new(
            "m",
            TypeRef::Multirange {
                oid: 16_384,
                name: "int4multirange".into(),
                range: Box::new(range("int4range", b(oid::INT4, "int4"), None)),
            },
            -1,
        ),
        &CTX,
    )
    .unwrap();
    assert_eq!(multi.shape, Shape::Multirange(scalar(TypeTag::Int4)));
    assert!(multi.order_preserving);
    assert_eq!(multi.max_encoded_len, None);
}

#[test]
fn composites_combine_their_attributes() {
    let pair = TypeRef::Composite {
        oid: 16_384,
        name: "pair".into(),
        fields: vec![
            attr("n", b(oid::INT4, "int4"), None),
            attr("m", b(oid::INT8, "int8"), None),
        ],
    };
    let r = resolve_field(&FieldSpec::new("p", pair, -1), &CTX).unwrap();
    assert_eq!(
        r.shape,
        Shape::Record(vec![
            Shape::Scalar(TypeTag::Int4),
            Shape::Scalar(TypeTag::Int8)
        ])
    );
    assert!(r.order_preserving);
    // tag + state + count 2 + (tag + state + 4) + (tag + state + 8)
    assert_eq!(r.max_encoded_len, Some(2 + 2 + 6 + 10));
    assert!(r.invalidations.contains(&Invalidation::CompositeAlteration));

    let labelled = TypeRef::Composite {
        oid: 16_384,
        name: "labelled".into(),
        fields: vec![
            attr("s", b(oid::TEXT, "text"), Some(en_us())),
            attr(
                "e",
                TypeRef::Enum {
                    oid: 16_384,
                    name: "mood".into(),
                },
                None,
            ),
            attr("j", b(oid::JSONB, "jsonb"), None),
        ],
    };
    let r = resolve_field(&FieldSpec::new("l", labelled, -1), &CTX).unwrap();
    assert!(!r.order_preserving);
    assert_eq!(r.volatility, Volatility::Stable, "stable if any part is");
    assert_eq!(r.max_encoded_len, None, "unbounded if any part is");
    for i in [
        Invalidation::CollationChange,
        Invalidation::EnumLabelOrOrder,
        Invalidation::CompositeAlteration,
        Invalidation::TypeChange,
    ] {
        assert!(r.invalidations.contains(&i), "{i:?}");
    }

    let bad = TypeRef::Composite {
        oid: 16_384,
        name: "bad".into(),
        fields: vec![attr("x", b(oid::XML, "xml"), None)],
    };
    let err = resolve_field(&FieldSpec::new("b", bad, -1), &CTX).unwrap_err();
    assert_eq!(err.property, Property::UnregisteredType);
    assert!(err.to_string().contains("attribute x of bad"), "{err}");
}

#[test]
fn jsonb_is_equality_only() {
    let j = resolve_field(&FieldSpec::new("j", b(oid::JSONB, "jsonb"), -1), &CTX).unwrap();
    assert_eq!(j.tag, TypeTag::Jsonb);
    assert_eq!(j.shape, Shape::Jsonb);
    assert!(!j.order_preserving);
    assert_eq!(j.max_encoded_len, None);
    let arr = resolve_field(
        &FieldSpec::new("j", array(b(oid::JSONB, "jsonb")), -1),
        &CTX,
    )
    .unwrap();
    assert_eq!(arr.shape, Shape::Array(Box::new(Shape::Jsonb)));
    assert!(!arr.order_preserving);
}

#[test]
fn domains_inside_structures_erase_to_their_base() {
    let d = TypeRef::Domain {
        oid: 16_384,
        name: "pos".into(),
        base: Box::new(b(oid::INT4, "int4")),
    };
    let r = resolve_field(&FieldSpec::new("d", array(d), -1), &CTX).unwrap();
    assert_eq!(r.shape, Shape::Array(scalar(TypeTag::Int4)));
    assert!(r.invalidations.contains(&Invalidation::DomainOrBaseType));
}
