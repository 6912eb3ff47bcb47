//! Identities from WAL values equal the codec's identities of the same typed values, and
//! every schema disagreement or unusable value is refused.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use rowid_codec::structure::Shape;
use rowid_codec::{Digits, Domain, Numeric, TypeTag, Value, encode_identity};
use rowid_pgoutput::{
    Column, FlagBits, IdentityColumn, IdentityError, OldTuple, Relation, RelationColumn,
    RelationIdentity, SchemaMismatch,
};

fn rel(ri: u8, cols: &[(&str, u32, u8)]) -> Relation {
    Relation {
        relid: 1,
        namespace: "public".into(),
        name: "t".into(),
        replica_identity: ri,
        columns: cols
            .iter()
            .map(|&(name, type_oid, flags)| RelationColumn {
                flags,
                name: name.into(),
                type_oid,
                typmod: -1,
            })
            .collect(),
    }
}

fn key(cols: &[(&str, u32, TypeTag)]) -> RelationIdentity {
    RelationIdentity {
        domain: Domain::ScanKey,
        columns: cols
            .iter()
            .map(|&(name, type_oid, tag)| IdentityColumn::scalar(name, type_oid, tag))
            .collect(),
        key_is_primary: true,
    }
}

fn b(bytes: &[u8]) -> Column {
    Column::Binary(Bytes::copy_from_slice(bytes))
}

fn codec(domain: Domain, fields: &[(TypeTag, Option<Value<'_>>)]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_identity(&mut out, domain, fields).unwrap();
    out
}

/// numeric_send of a finite value: ndigits, weight, sign, dscale, groups.
fn numeric_send(weight: i16, dscale: i16, groups: &[u16]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend((groups.len() as i16).to_be_bytes());
    v.extend(weight.to_be_bytes());
    v.extend(0u16.to_be_bytes());
    v.extend(dscale.to_be_bytes());
    for g in groups {
        v.extend(g.to_be_bytes());
    }
    v
}

#[test]
fn identities_from_binary_values_match_the_codec() {
    let relation = rel(b'd', &[("region", 25, 1), ("id", 23, 1), ("note", 25, 0)]);
    let schema = key(&[("region", 25, TypeTag::Text), ("id", 23, TypeTag::Int4)]);
    let bound = schema.bind(&relation, &FlagBits::default()).unwrap();
    let row = vec![b(b"eu"), b(&42i32.to_be_bytes()), Column::UnchangedToast];
    let mut id = Vec::new();
    bound.encode(&row, &mut id).unwrap();
    let want = codec(
        Domain::ScanKey,
        &[
            (TypeTag::Text, Some(Value::Text(b"eu"))),
            (TypeTag::Int4, Some(Value::Int4(42))),
        ],
    );
    assert_eq!(id, want, "the unchanged non-key column does not matter");

    // numeric 1.0 and 1.00 arrive with different dscale (and 1.00 may carry a zero group).
    let relation = rel(b'd', &[("amount", 1700, 1)]);
    let bound = key(&[("amount", 1700, TypeTag::Numeric)])
        .bind(&relation, &FlagBits::default())
        .unwrap();
    let (mut a, mut c) = (Vec::new(), Vec::new());
    bound
        .encode(&vec![b(&numeric_send(0, 1, &[1]))], &mut a)
        .unwrap();
    bound
        .encode(&vec![b(&numeric_send(0, 2, &[1, 0]))], &mut c)
        .unwrap();
    assert_eq!(a, c);
    let one = Numeric::finite(false, 0, Digits::native(&[1]));
    assert_eq!(
        a,
        codec(
            Domain::ScanKey,
            &[(TypeTag::Numeric, Some(Value::Numeric(one)))]
        )
    );
}

#[test]
fn old_and_new_identities_show_key_changes() {
    let relation = rel(b'd', &[("id", 20, 1), ("v", 25, 0)]);
    let bound = key(&[("id", 20, TypeTag::Int8)])
        .bind(&relation, &FlagBits::default())
        .unwrap();
    let old_key = vec![b(&1i64.to_be_bytes()), Column::Null];
    let new = vec![b(&2i64.to_be_bytes()), b(b"x")];
    let (mut old_id, mut new_id) = (Vec::new(), Vec::new());
    bound.encode(&old_key, &mut old_id).unwrap();
    bound.encode(&new, &mut new_id).unwrap();
    assert_ne!(
        old_id, new_id,
        "a key update is a delete of the old identity and an insert"
    );
    assert_eq!(
        old_id,
        codec(Domain::ScanKey, &[(TypeTag::Int8, Some(Value::Int8(1)))])
    );
}

#[test]
fn unusable_values_are_refused() {
    let relation = rel(b'd', &[("id", 20, 1)]);
    let bound = key(&[("id", 20, TypeTag::Int8)])
        .bind(&relation, &FlagBits::default())
        .unwrap();
    let mut out = b"keep".to_vec();
    let err = bound
        .encode(&vec![Column::Text(Bytes::from_static(b"7"))], &mut out)
        .unwrap_err();
    assert_eq!(
        err,
        IdentityError::TextValue {
            column: "id".into()
        }
    );
    assert!(err.to_string().contains("binary 'true'"));
    assert!(matches!(
        bound.encode(&vec![Column::UnchangedToast], &mut out),
        Err(IdentityError::Missing { .. })
    ));
    assert!(matches!(
        bound.encode(&vec![b(&[1, 2, 3])], &mut out),
        Err(IdentityError::Codec { .. })
    ));
    assert!(matches!(
        bound.encode(&vec![], &mut out),
        Err(IdentityError::ShortTuple)
    ));
    assert_eq!(
        out, b"keep",
        "a refused identity leaves the buffer as it was"
    );
}

#[test]
fn schema_disagreements_are_refused() {
    let schema = key(&[("id", 20, TypeTag::Int8)]);
    let flags = FlagBits::default();
    assert_eq!(
        schema.bind(&rel(b'd', &[("id", 23, 1)]), &flags),
        Err(SchemaMismatch::TypeChanged {
            column: "id".into(),
            expected: 20,
            found: 23
        })
    );
    assert_eq!(
        schema.bind(&rel(b'd', &[("key", 20, 1)]), &flags),
        Err(SchemaMismatch::MissingColumn {
            column: "id".into()
        })
    );
    assert_eq!(
        schema.bind(&rel(b'i', &[("id", 20, 0), ("other", 20, 1)]), &flags),
        Err(SchemaMismatch::KeyDiffers {
            schema: vec!["id".into()],
            stream: vec!["other".into()],
        })
    );
    // A key that grew since the schema was taken: snapshot key (id), stream key (id, v).
    let grown = schema
        .bind(&rel(b'd', &[("id", 20, 1), ("v", 25, 1)]), &flags)
        .unwrap_err();
    assert_eq!(
        grown,
        SchemaMismatch::KeyDiffers {
            schema: vec!["id".into()],
            stream: vec!["id".into(), "v".into()],
        }
    );
    assert!(grown.to_string().contains("(id)") && grown.to_string().contains("(id, v)"));
    // ... and one that shrank: schema key (id, v), stream key (id).
    let pair = key(&[("id", 20, TypeTag::Int8), ("v", 25, TypeTag::Text)]);
    assert_eq!(
        pair.bind(&rel(b'd', &[("id", 20, 1), ("v", 25, 0)]), &flags),
        Err(SchemaMismatch::KeyDiffers {
            schema: vec!["id".into(), "v".into()],
            stream: vec!["id".into()],
        })
    );
    // A table without a primary key under REPLICA IDENTITY DEFAULT flags nothing.
    assert!(matches!(
        schema.bind(&rel(b'd', &[("id", 20, 0)]), &flags),
        Err(SchemaMismatch::KeyDiffers { .. })
    ));
    assert_eq!(
        schema.bind(&rel(b'n', &[("id", 20, 0)]), &flags),
        Err(SchemaMismatch::NoReplicaIdentity)
    );
    // With the proposed primary-key bit (say 0x02), a key "from the future" is caught even
    // under REPLICA IDENTITY FULL, where every column has the replica-identity bit.
    let pk = FlagBits {
        primary_key: Some(0x02),
        ..FlagBits::default()
    };
    assert!(
        schema
            .bind(&rel(b'f', &[("id", 20, 0x03), ("v", 25, 0x01)]), &pk)
            .is_ok()
    );
    assert_eq!(
        schema.bind(&rel(b'f', &[("id", 20, 0x03), ("v", 25, 0x03)]), &pk),
        Err(SchemaMismatch::PrimaryKeyDiffers { column: "v".into() })
    );
    assert_eq!(
        schema.bind(&rel(b'f', &[("id", 20, 0x01), ("v", 25, 0x03)]), &pk),
        Err(SchemaMismatch::PrimaryKeyDiffers {
            column: "id".into()
        })
    );
}

#[test]
fn a_binding_belongs_to_its_relation_message() {
    let schema = key(&[("id", 20, TypeTag::Int8)]);
    let before = rel(b'd', &[("id", 20, 1), ("v", 25, 0)]);
    let bound = schema.bind(&before, &FlagBits::default()).unwrap();
    assert!(bound.is_bound_to(&before));
    assert_eq!(bound.relation(), &before);
    // ALTER TABLE ... ADD COLUMN before the key: the positions moved.
    let after = rel(b'd', &[("w", 25, 0), ("id", 20, 1), ("v", 25, 0)]);
    assert!(!bound.is_bound_to(&after));
    let rebound = schema.bind(&after, &FlagBits::default()).unwrap();
    assert_eq!(rebound.column_positions().collect::<Vec<_>>(), vec![1]);
    assert_eq!(rebound.column_names().collect::<Vec<_>>(), vec!["id"]);
}

#[test]
fn keyless_identities_need_replica_identity_full() {
    let schema = RelationIdentity {
        domain: Domain::KeylessRow,
        columns: vec![
            IdentityColumn::scalar("a", 20, TypeTag::Int8),
            IdentityColumn::scalar("b", 25, TypeTag::Text),
        ],
        key_is_primary: false,
    };
    for ri in [b'd', b'i'] {
        let err = schema
            .bind(
                &rel(ri, &[("a", 20, 1), ("b", 25, 0)]),
                &FlagBits::default(),
            )
            .unwrap_err();
        assert_eq!(
            err,
            SchemaMismatch::KeylessNeedsFull {
                replica_identity: char::from(ri)
            }
        );
        assert!(err.to_string().contains("REPLICA IDENTITY FULL"));
    }
    let full = rel(b'f', &[("a", 20, 1), ("b", 25, 1)]);
    let bound = schema.bind(&full, &FlagBits::default()).unwrap();
    let row = vec![b(&1i64.to_be_bytes()), b(b"x")];
    let (mut from_full, mut from_row) = (Vec::new(), Vec::new());
    bound
        .encode_old(&OldTuple::Full(row.clone()), &mut from_full)
        .unwrap();
    bound.encode(&row, &mut from_row).unwrap();
    assert_eq!(from_full, from_row);
    // A 'K' tuple reads the non-key columns as NULL placeholders: never a keyless identity.
    let mut out = Vec::new();
    assert_eq!(
        bound.encode_old(
            &OldTuple::Key(vec![b(&1i64.to_be_bytes()), Column::Null]),
            &mut out
        ),
        Err(IdentityError::KeylessNeedsFullOldRow)
    );
    assert!(out.is_empty());
}

#[test]
fn keyless_rows_use_every_column_in_order() {
    let schema = RelationIdentity {
        domain: Domain::KeylessRow,
        columns: vec![
            IdentityColumn {
                name: "at".into(),
                type_oid: 1184,
                shape: Shape::Scalar(TypeTag::Timestamptz),
            },
            IdentityColumn {
                name: "msg".into(),
                type_oid: 25,
                shape: Shape::Scalar(TypeTag::Text),
            },
        ],
        key_is_primary: false,
    };
    let relation = rel(b'f', &[("at", 1184, 1), ("msg", 25, 1)]);
    let bound = schema.bind(&relation, &FlagBits::default()).unwrap();
    let mut id = Vec::new();
    bound
        .encode(&vec![b(&5i64.to_be_bytes()), Column::Null], &mut id)
        .unwrap();
    assert_eq!(
        id,
        codec(
            Domain::KeylessRow,
            &[
                (TypeTag::Timestamptz, Some(Value::Timestamptz(5))),
                (TypeTag::Text, None)
            ]
        )
    );
    assert_eq!(
        schema.bind(
            &rel(b'f', &[("at", 1184, 1), ("msg", 25, 1), ("extra", 23, 1)]),
            &FlagBits::default()
        ),
        Err(SchemaMismatch::ColumnsDiffer)
    );
}

/// The registry's resolved key converts to what the WAL path binds: the key columns by name
/// with their type OIDs (a domain keeps its own OID) and shapes, primary or not; a keyless
/// schema keeps every column in order. A changed column type in the stream is then refused.
#[test]
fn registry_schemas_convert_to_relation_identities() {
    use rowid_registry::catalog::oid;
    use rowid_registry::{Collation, FieldSpec, ScanKey, ServerContext, TypeRef, resolve_schema};
    let ctx = ServerContext::default_pg18();
    let positive = TypeRef::Domain {
        oid: 16_500,
        name: "positive".into(),
        base: Box::new(TypeRef::builtin(oid::INT4, "int4")),
    };
    let key_fields = [
        FieldSpec::new("region", TypeRef::builtin(oid::TEXT, "text"), -1).collate(Collation::c()),
        FieldSpec::new("id", positive, -1),
    ];
    let scan_key = ScanKey {
        index: "t_pkey".into(),
        primary: true,
        columns: vec!["region".into(), "id".into()],
        schema: resolve_schema(Domain::ScanKey, &key_fields, &ctx).unwrap(),
        passed_over: Vec::new(),
    };
    let identity = RelationIdentity::from_scan_key(&scan_key);
    assert_eq!(
        identity,
        key(&[("region", 25, TypeTag::Text), ("id", 16_500, TypeTag::Int4)])
    );
    let relation = rel(
        b'd',
        &[("id", 16_500, 1), ("region", 25, 1), ("note", 25, 0)],
    );
    let bound = identity.bind(&relation, &FlagBits::default()).unwrap();
    let mut id = Vec::new();
    bound
        .encode(
            &vec![b(&7i32.to_be_bytes()), b(b"eu"), Column::Null],
            &mut id,
        )
        .unwrap();
    let want = codec(
        Domain::ScanKey,
        &[
            (TypeTag::Text, Some(Value::Text(b"eu"))),
            (TypeTag::Int4, Some(Value::Int4(7))),
        ],
    );
    assert_eq!(id, want);
    let changed = rel(b'd', &[("id", 23, 1), ("region", 25, 1), ("note", 25, 0)]);
    assert!(matches!(
        identity.bind(&changed, &FlagBits::default()),
        Err(SchemaMismatch::TypeChanged {
            expected: 16_500,
            found: 23,
            ..
        })
    ));

    let all = [
        FieldSpec::new("id", TypeRef::builtin(oid::INT8, "int8"), -1),
        FieldSpec::new("note", TypeRef::builtin(oid::TEXT, "text"), -1).collate(Collation::c()),
    ];
    let schema = resolve_schema(Domain::KeylessRow, &all, &ctx).unwrap();
    let keyless = RelationIdentity::from_schema(&schema, false);
    assert_eq!(keyless.domain, Domain::KeylessRow);
    let names: Vec<_> = keyless.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["id", "note"]);
    assert_eq!(keyless.columns[1].shape, Shape::Scalar(TypeTag::Text));
}

/// `bind_new_rows`: a relation whose old rows cannot give its identity (REPLICA IDENTITY
/// NOTHING, a keyless identity without FULL) is bound for its new rows, and says why its old
/// rows cannot be encoded; every other disagreement is refused as by `bind`.
#[test]
fn relations_without_usable_old_rows_bind_for_new_rows() {
    let keyless = RelationIdentity {
        domain: Domain::KeylessRow,
        columns: vec![
            IdentityColumn::scalar("a", 20, TypeTag::Int8),
            IdentityColumn::scalar("b", 25, TypeTag::Text),
        ],
        key_is_primary: false,
    };
    let row = vec![b(&1i64.to_be_bytes()), b(b"x")];
    let bound = keyless
        .bind_new_rows(
            &rel(b'd', &[("a", 20, 0), ("b", 25, 0)]),
            &FlagBits::default(),
        )
        .unwrap();
    assert_eq!(
        bound.old_rows_unavailable(),
        Some(&SchemaMismatch::KeylessNeedsFull {
            replica_identity: 'd'
        })
    );
    let mut new = Vec::new();
    bound.encode(&row, &mut new).unwrap();
    assert_eq!(
        new,
        codec(
            Domain::KeylessRow,
            &[
                (TypeTag::Int8, Some(Value::Int8(1))),
                (TypeTag::Text, Some(Value::Text(b"x")))
            ]
        )
    );
    let mut old = Vec::new();
    assert_eq!(
        bound.encode_old(&OldTuple::Full(row.clone()), &mut old),
        Err(IdentityError::KeylessNeedsFullOldRow)
    );

    // A key under NOTHING: new rows by name, no old rows.
    let schema = key(&[("id", 20, TypeTag::Int8)]);
    let bound = schema
        .bind_new_rows(&rel(b'n', &[("id", 20, 0)]), &FlagBits::default())
        .unwrap();
    assert_eq!(
        bound.old_rows_unavailable(),
        Some(&SchemaMismatch::NoReplicaIdentity)
    );
    // Under FULL everything is available: no reason given.
    let bound = keyless
        .bind_new_rows(
            &rel(b'f', &[("a", 20, 1), ("b", 25, 1)]),
            &FlagBits::default(),
        )
        .unwrap();
    assert_eq!(bound.old_rows_unavailable(), None);
    // A changed type is still refused.
    assert!(matches!(
        schema.bind_new_rows(&rel(b'n', &[("id", 23, 0)]), &FlagBits::default()),
        Err(SchemaMismatch::TypeChanged { .. })
    ));
}
