//! Identity schema messages, format 4: the spec's example parses, every shape round-trips,
//! formats 2 and 3 are still read, and the reader is strict about everything else.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_codec::Domain;
use rowid_codec::TypeTag;
use rowid_codec::structure::Shape;
use rowid_registry::schema_message::{
    ReplicaIdentity, SchemaMessage, SchemaMessage as Msg, shape_from_json, shape_to_json,
};
use serde_json::{Value, json};

/// The example of spec/identity-messages.md §3, read from the spec itself.
fn spec_example() -> String {
    let spec = include_str!("../../../spec/identity-messages.md");
    let start = spec.find("```json\n").unwrap() + "```json\n".len();
    let end = start + spec[start..].find("```").unwrap();
    spec[start..end].to_string()
}

#[test]
fn the_spec_example_parses() {
    let msg = SchemaMessage::parse(spec_example().as_bytes()).unwrap();
    let Msg::Schema(s) = &msg else {
        panic!("{msg:?}")
    };
    assert_eq!(
        (s.relid, s.qualified_name().as_str()),
        (16385, "public.orders")
    );
    assert_eq!(s.replica_identity, ReplicaIdentity::Default);
    assert_eq!(s.primary_key, ["id"]);
    let def = s.identity.as_ref().unwrap();
    assert_eq!(
        (def.domain, def.index.as_deref(), def.primary),
        (Domain::ScanKey, Some("public.orders_pkey"), true)
    );
    assert_eq!(def.fields[0].shape, Shape::Scalar(TypeTag::Int8));
    // An int8 key: version, domain, count, tag, state, 8 bytes, terminator.
    assert_eq!(def.max_len, Some(17));
    // Every column says its type and the shape its image values are read with; a type the
    // codec cannot read has none.
    let columns: Vec<(&str, Option<&str>, Option<&Shape>)> = s
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.type_name.as_deref(), c.shape.as_ref()))
        .collect();
    assert_eq!(
        columns,
        [
            ("id", Some("bigint"), Some(&Shape::Scalar(TypeTag::Int8))),
            ("note", Some("text"), Some(&Shape::Scalar(TypeTag::Text))),
            ("price", Some("money"), None),
        ]
    );
    // Written back, it reads the same.
    assert_eq!(
        SchemaMessage::parse(msg.to_json().to_string().as_bytes()).unwrap(),
        msg
    );
}

#[test]
fn every_shape_round_trips() {
    let shapes = [
        Shape::Scalar(TypeTag::Enum),
        Shape::Scalar(TypeTag::ChildIdentity),
        Shape::Jsonb,
        Shape::Array(Box::new(Shape::Scalar(TypeTag::Int4))),
        Shape::Range(Box::new(Shape::Scalar(TypeTag::Timestamptz))),
        Shape::Multirange(Box::new(Shape::Scalar(TypeTag::Numeric))),
        Shape::Record(vec![
            Shape::Scalar(TypeTag::Text),
            Shape::Array(Box::new(Shape::Record(vec![Shape::Jsonb]))),
        ]),
    ];
    for s in shapes {
        let v = shape_to_json(&s);
        assert_eq!(shape_from_json("shape", &v).unwrap(), s, "{v}");
    }
    assert_eq!(
        shape_to_json(&Shape::Array(Box::new(Shape::Scalar(TypeTag::Int8)))),
        json!({"array": "int8"})
    );
}

fn mutated(f: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(&spec_example()).unwrap();
    f(&mut v);
    v.to_string()
}

#[test]
fn the_reader_is_strict_and_says_where() {
    let cases: Vec<(String, &str)> = vec![
        (mutated(|v| v["format"] = json!(1)), "format"),
        (mutated(|v| v["format"] = json!(5)), "format"),
        (
            mutated(|v| v["identity"]["max_len"] = json!(0)),
            "identity.max_len",
        ),
        (
            mutated(|v| v["identity"]["max_len"] = json!("17")),
            "identity.max_len",
        ),
        (
            mutated(|v| {
                v["identity"].as_object_mut().unwrap().remove("max_len");
            }),
            "identity.max_len",
        ),
        // Format 3 had no bound.
        (mutated(|v| v["format"] = json!(3)), "identity.max_len"),
        (
            mutated(|v| v["columns"][0]["shape"] = json!("int9")),
            "columns[0].shape",
        ),
        (
            mutated(|v| v["columns"][0]["type"] = json!(20)),
            "columns[0].type",
        ),
        (
            mutated(|v| {
                v["columns"][0].as_object_mut().unwrap().remove("shape");
            }),
            "columns[0].shape",
        ),
        // Format 2 had no such members.
        (
            mutated(|v| {
                v["format"] = json!(2);
                v["identity"].as_object_mut().unwrap().remove("max_len");
            }),
            "columns[0].type",
        ),
        (mutated(|v| v["surprise"] = json!(1)), "surprise"),
        (
            mutated(|v| v["identity"]["fields"][0]["shape"] = json!("no_such_type")),
            "identity.fields[0].shape",
        ),
        (
            mutated(|v| v["identity"]["fields"][0]["shape"] = json!("array")),
            "identity.fields[0].shape",
        ),
        (
            mutated(|v| v["identity"]["domain"] = json!("GROUP_KEY")),
            "identity.domain",
        ),
        (
            mutated(|v| v["identity"]["fields"] = json!([])),
            "identity.fields",
        ),
        (
            mutated(|v| v["columns"][1]["attnum"] = json!(1_000_000)),
            "columns[1].attnum",
        ),
        (
            mutated(|v| v["columns"][0]["not_null"] = json!("yes")),
            "columns[0].not_null",
        ),
        (
            mutated(|v| v["replica_identity"] = json!("d")),
            "replica_identity",
        ),
        (mutated(|v| v["event"] = json!("renamed")), "event"),
        (mutated(|v| v["relid"] = json!(-1)), "relid"),
        (
            mutated(|v| {
                v.as_object_mut().unwrap().remove("primary_key");
            }),
            "primary_key",
        ),
        (
            mutated(|v| v["refusal"] = json!({"sqlstate": "x", "message": "y"})),
            "refusal",
        ),
        ("[1, 2]".into(), "expected an object"),
        ("{".into(), "not JSON"),
    ];
    for (text, at) in cases {
        let err = SchemaMessage::parse(text.as_bytes()).unwrap_err();
        assert!(err.to_string().contains(at), "{at}: {err}");
    }
}

#[test]
fn format_3_messages_are_read_with_an_unknown_bound() {
    let v3 = mutated(|v| {
        v["format"] = json!(3);
        v["identity"].as_object_mut().unwrap().remove("max_len");
    });
    let msg = SchemaMessage::parse(v3.as_bytes()).unwrap();
    let Msg::Schema(s) = &msg else { panic!() };
    assert_eq!(s.identity.as_ref().unwrap().max_len, None);
    // Written as format 4 (an unknown bound is null), it reads the same.
    let v4 = msg.to_json();
    assert_eq!(
        (v4["format"].clone(), v4["identity"]["max_len"].clone()),
        (json!(4), Value::Null)
    );
    assert_eq!(
        SchemaMessage::parse(v4.to_string().as_bytes()).unwrap(),
        msg
    );
}

#[test]
fn format_2_messages_are_read_without_types_or_shapes() {
    let v2 = mutated(|v| {
        v["format"] = json!(2);
        v["identity"].as_object_mut().unwrap().remove("max_len");
        for c in v["columns"].as_array_mut().unwrap() {
            let c = c.as_object_mut().unwrap();
            c.remove("type");
            c.remove("shape");
        }
    });
    let msg = SchemaMessage::parse(v2.as_bytes()).unwrap();
    let Msg::Schema(s) = &msg else { panic!() };
    assert!(
        s.columns
            .iter()
            .all(|c| c.type_name.is_none() && c.shape.is_none())
    );
    assert_eq!(s.identity.as_ref().unwrap().fields[0].column, "id");
    // Written as format 4 (with null types), it reads the same: a state file keeps it.
    let v4 = msg.to_json();
    assert_eq!(v4["format"], 4);
    assert_eq!(v4["columns"][0]["type"], Value::Null);
    assert_eq!(
        SchemaMessage::parse(v4.to_string().as_bytes()).unwrap(),
        msg
    );
}

#[test]
fn refusals_and_drops_round_trip() {
    let refused = mutated(|v| {
        v["identity"] = Value::Null;
        v["refusal"] = json!({"sqlstate": "42P16", "message": "no eligible source key"});
    });
    let msg = SchemaMessage::parse(refused.as_bytes()).unwrap();
    let Msg::Schema(s) = &msg else { panic!() };
    assert_eq!(s.identity.as_ref().unwrap_err().sqlstate, "42P16");
    assert_eq!(
        SchemaMessage::parse(msg.to_json().to_string().as_bytes()).unwrap(),
        msg
    );

    let dropped =
        json!({"format": 4, "event": "dropped", "relid": 5, "namespace": "s", "relname": "t"});
    let msg = SchemaMessage::parse(dropped.to_string().as_bytes()).unwrap();
    assert_eq!(msg.relid(), 5);
    assert_eq!(msg.to_json(), dropped);
    // A drop carries nothing else.
    let extra = json!({"format": 4, "event": "dropped", "relid": 5, "namespace": "s", "relname": "t", "columns": []});
    assert!(SchemaMessage::parse(extra.to_string().as_bytes()).is_err());
}

#[test]
fn identities_come_from_the_registry_rules() {
    use rowid_registry::catalog::oid;
    use rowid_registry::schema_message::{IdentityDef, Refusal};
    use rowid_registry::{
        FieldSpec, IndexCandidate, KeyColumn, ServerContext, TypeRef, choose_scan_key,
        resolve_schema,
    };
    let ctx = ServerContext::default_pg18();
    let int8 = |name: &str| FieldSpec::new(name, TypeRef::builtin(oid::INT8, "int8"), -1);
    let pk = IndexCandidate {
        name: "orders_pkey".into(),
        primary: true,
        unique: true,
        valid: true,
        partial: false,
        expressions: false,
        deferrable: false,
        nulls_not_distinct: false,
        columns: vec![KeyColumn {
            name: "id".into(),
            not_null: true,
            field: int8("id"),
        }],
    };
    let def = IdentityDef::scan_key(&choose_scan_key(std::slice::from_ref(&pk), &ctx).unwrap());
    assert_eq!(
        (def.domain, def.index.as_deref(), def.primary),
        (Domain::ScanKey, Some("orders_pkey"), true)
    );
    assert_eq!(
        (def.fields[0].column.as_str(), def.fields[0].type_oid),
        ("id", oid::INT8)
    );
    assert_eq!(def.fields[0].shape, Shape::Scalar(TypeTag::Int8));
    // The bound is the encoded length of any int8 key: integers-013's 17 bytes.
    assert_eq!(def.max_len, Some(17));

    let keyless = resolve_schema(Domain::KeylessRow, &[int8("a"), int8("b")], &ctx).unwrap();
    let def = IdentityDef::keyless(&keyless);
    assert_eq!(
        (def.domain, def.index.clone(), def.fields.len()),
        (Domain::KeylessRow, None, 2)
    );
    // Two int8 fields: 6 header bytes, 10 per field, the terminator.
    assert_eq!(def.max_len, Some(27));
    // A text field has no bound.
    let text = FieldSpec::new("t", TypeRef::builtin(oid::TEXT, "text"), -1)
        .collate(rowid_registry::Collation::c());
    let unbounded = resolve_schema(Domain::KeylessRow, &[int8("a"), text], &ctx).unwrap();
    assert_eq!(IdentityDef::keyless(&unbounded).max_len, None);

    // No eligible key: the refusal carries the registry's SQLSTATE and names the index.
    let partial = IndexCandidate {
        partial: true,
        ..pk
    };
    let none = choose_scan_key(&[partial], &ctx).unwrap_err();
    let refusal = Refusal::from(&none.rejection);
    assert_eq!(refusal.sqlstate, none.rejection.sqlstate());
    assert!(
        refusal.message.contains("orders_pkey"),
        "{}",
        refusal.message
    );
}
