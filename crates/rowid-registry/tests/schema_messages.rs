//! Identity schema messages, format 8: the spec's example parses, every shape round-trips,
//! a stream table's stored identity round-trips, formats 2 to 7 are still read, enum labels make an identity's signature, and the reader is
//! strict about everything else.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_codec::Domain;
use rowid_codec::TypeTag;
use rowid_codec::structure::Shape;
use rowid_registry::schema_message::{
    FORMAT, ReplicaIdentity, Rewrite, SchemaMessage, SchemaMessage as Msg, missing_from_array_send,
    shape_from_json, shape_to_json,
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
            ("qty", Some("integer"), Some(&Shape::Scalar(TypeTag::Int4))),
        ]
    );
    // Rows stored before qty was added hold 5 (int4's send form); the others have no
    // missing value; the DDL rewrote nothing.
    let missing: Vec<Option<&[u8]>> = s.columns.iter().map(|c| c.missing.as_deref()).collect();
    assert_eq!(missing, [None, None, None, Some(&[0u8, 0, 0, 5][..])]);
    assert_eq!(s.rewritten, Rewrite::Kept);
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

/// Removes the member format 8 added (`stored`).
fn strip_format_8(v: &mut Value) {
    v.as_object_mut().unwrap().remove("stored");
}

/// Removes the members formats 7 and 8 added (every column's `missing_without_send_form`,
/// and format 8's).
fn strip_format_7(v: &mut Value) {
    strip_format_8(v);
    for c in v["columns"].as_array_mut().unwrap() {
        c.as_object_mut()
            .unwrap()
            .remove("missing_without_send_form");
    }
}

/// Removes the members formats 6 and 7 added (`identity.enums`, and format 7's).
fn strip_format_6(v: &mut Value) {
    strip_format_7(v);
    v["identity"].as_object_mut().unwrap().remove("enums");
}

/// Removes the members formats 5 to 7 added (`rewritten`, every column's `missing`, and
/// the later formats').
fn strip_format_5(v: &mut Value) {
    strip_format_6(v);
    v.as_object_mut().unwrap().remove("rewritten");
    for c in v["columns"].as_array_mut().unwrap() {
        c.as_object_mut().unwrap().remove("missing");
    }
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
        (mutated(|v| v["format"] = json!(9)), "format"),
        // Format 7 had no stored identity; format 8 requires the member.
        (mutated(|v| v["format"] = json!(7)), "stored"),
        (mutated(strip_format_8), "stored"),
        (mutated(|v| v["stored"] = json!("__pgt_row_id")), "stored"),
        (
            mutated(|v| {
                v["stored"] = json!({"column": "__pgt_row_id", "domain": "NO_SUCH_KEY",
                                     "unique": true, "max_len": null});
            }),
            "stored.domain",
        ),
        (
            mutated(|v| {
                v["stored"] = json!({"column": "__pgt_row_id", "domain": "GROUP_KEY",
                                     "unique": "yes", "max_len": null});
            }),
            "stored.unique",
        ),
        (
            mutated(|v| {
                v["stored"] = json!({"column": "__pgt_row_id", "domain": "GROUP_KEY",
                                     "unique": true, "max_len": -1});
            }),
            "stored.max_len",
        ),
        (
            mutated(|v| {
                v["stored"] = json!({"column": "__pgt_row_id", "domain": "GROUP_KEY",
                                     "unique": true, "max_len": 40, "index": "x"});
            }),
            "stored.index",
        ),
        (
            mutated(|v| {
                v["stored"] = json!({"domain": "GROUP_KEY", "unique": true, "max_len": 40});
            }),
            "stored.column",
        ),
        // Format 6 had no missing_without_send_form; format 7 requires it.
        (
            mutated(|v| {
                v["format"] = json!(6);
                strip_format_8(v);
            }),
            "missing_without_send_form",
        ),
        (
            mutated(strip_format_7),
            "columns[0].missing_without_send_form",
        ),
        (
            mutated(|v| v["columns"][3]["missing_without_send_form"] = json!(1)),
            "columns[3].missing_without_send_form",
        ),
        // A value both carried and not.
        (
            mutated(|v| v["columns"][3]["missing_without_send_form"] = json!(true)),
            "columns[3].missing_without_send_form",
        ),
        // Format 5 had no enum labels; format 6 requires them.
        (
            mutated(|v| {
                v["format"] = json!(5);
                strip_format_7(v);
            }),
            "enums",
        ),
        (
            mutated(|v| {
                v["identity"].as_object_mut().unwrap().remove("enums");
            }),
            "identity.enums",
        ),
        (
            mutated(|v| v["identity"]["enums"] = json!([{"type": "public.mood", "labels": [1]}])),
            "identity.enums[0].labels",
        ),
        (
            mutated(|v| v["identity"]["enums"] = json!([{"type": "public.mood"}])),
            "identity.enums[0]",
        ),
        (
            mutated(|v| v["columns"][3]["missing"] = json!("0000005")),
            "columns[3].missing",
        ),
        (
            mutated(|v| v["columns"][3]["missing"] = json!("0x000005")),
            "columns[3].missing",
        ),
        (
            mutated(|v| v["columns"][3]["missing"] = json!(5)),
            "columns[3].missing",
        ),
        (
            mutated(|v| {
                v["columns"][3].as_object_mut().unwrap().remove("missing");
            }),
            "columns[3].missing",
        ),
        (mutated(|v| v["rewritten"] = json!("no")), "rewritten"),
        (
            mutated(|v| {
                v.as_object_mut().unwrap().remove("rewritten");
            }),
            "rewritten",
        ),
        // Format 4 had neither.
        (
            mutated(|v| {
                v["format"] = json!(4);
                strip_format_6(v);
            }),
            "missing",
        ),
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
        (
            mutated(|v| {
                v["format"] = json!(3);
                strip_format_5(v);
            }),
            "identity.max_len",
        ),
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
                strip_format_5(v);
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

/// A stream table's stored identity (format 8) is read as written, and written back the same;
/// a format-7 message of the same relation is read without one.
#[test]
fn a_stored_identity_round_trips_and_format_7_has_none() {
    let stream = mutated(|v| {
        v["stored"] = json!({"column": "__pgt_row_id", "domain": "GROUP_KEY", "unique": true,
                             "max_len": 40});
    });
    let msg = SchemaMessage::parse(stream.as_bytes()).unwrap();
    let Msg::Schema(s) = &msg else {
        panic!("{msg:?}")
    };
    let stored = s.stored.as_ref().unwrap();
    assert_eq!(
        (
            stored.column.as_str(),
            stored.domain,
            stored.unique,
            stored.max_len
        ),
        ("__pgt_row_id", Domain::GroupKey, true, Some(40))
    );
    assert_eq!(
        SchemaMessage::parse(msg.to_json().to_string().as_bytes()).unwrap(),
        msg
    );
    let multiset = mutated(|v| {
        v["stored"] = json!({"column": "__pgt_row_id", "domain": "KEYLESS_ROW",
                             "unique": false, "max_len": null});
    });
    let Msg::Schema(s) = SchemaMessage::parse(multiset.as_bytes()).unwrap() else {
        panic!()
    };
    let stored = s.stored.unwrap();
    assert_eq!(
        (stored.domain, stored.unique, stored.max_len),
        (Domain::KeylessRow, false, None)
    );
    let older = mutated(|v| {
        v["format"] = json!(7);
        strip_format_8(v);
    });
    let Msg::Schema(s) = SchemaMessage::parse(older.as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(s.stored, None);
    // What the spec's example says: not a stream table.
    let Msg::Schema(s) = SchemaMessage::parse(spec_example().as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(s.stored, None);
    assert_eq!(FORMAT, 8);
}

#[test]
fn format_3_messages_are_read_with_an_unknown_bound() {
    let v3 = mutated(|v| {
        v["format"] = json!(3);
        strip_format_5(v);
        v["identity"].as_object_mut().unwrap().remove("max_len");
    });
    let msg = SchemaMessage::parse(v3.as_bytes()).unwrap();
    let Msg::Schema(s) = &msg else { panic!() };
    assert_eq!(s.identity.as_ref().unwrap().max_len, None);
    // Written in the current format (an unknown bound is null), it reads the same.
    let v5 = msg.to_json();
    assert_eq!(
        (v5["format"].clone(), v5["identity"]["max_len"].clone()),
        (json!(FORMAT), Value::Null)
    );
    assert_eq!(
        SchemaMessage::parse(v5.to_string().as_bytes()).unwrap(),
        msg
    );
}

#[test]
fn format_4_messages_are_read_without_missing_values_or_rewrites() {
    let v4 = mutated(|v| {
        v["format"] = json!(4);
        strip_format_5(v);
    });
    let msg = SchemaMessage::parse(v4.as_bytes()).unwrap();
    let Msg::Schema(s) = &msg else { panic!() };
    assert!(s.columns.iter().all(|c| c.missing.is_none()));
    // Not known: a reader must not take it for "not rewritten".
    assert_eq!(s.rewritten, Rewrite::Unknown);
    let v5 = msg.to_json();
    assert_eq!(
        (v5["format"].clone(), v5["rewritten"].clone()),
        (json!(FORMAT), Value::Null)
    );
    assert_eq!(
        SchemaMessage::parse(v5.to_string().as_bytes()).unwrap(),
        msg
    );
}

#[test]
fn a_missing_value_or_a_rewrite_is_no_ddl_to_a_schema_computed_now() {
    let Msg::Schema(written) = SchemaMessage::parse(spec_example().as_bytes()).unwrap() else {
        panic!()
    };
    // Computed from the catalog later: VACUUM FULL may have cleared qty's missing value, and
    // no rewrite is known.
    let mut now = written.clone();
    now.columns[3].missing = None;
    now.rewritten = Rewrite::Unknown;
    assert!(now.matches_written(&written));
    assert_ne!(now, written, "both are still members of the message");
    // A rewrite by a transaction reads back as that transaction's.
    let by = mutated(|v| v["rewritten"] = json!(4_294_967_301_u64));
    let Msg::Schema(rewritten) = SchemaMessage::parse(by.as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(rewritten.rewritten, Rewrite::By(4_294_967_301));
    assert_eq!(
        SchemaMessage::Schema(rewritten.clone()).to_json()["rewritten"],
        json!(4_294_967_301_u64)
    );
    assert!(now.matches_written(&rewritten));
    // A DDL still differs.
    now.columns[3].not_null = false;
    assert!(!now.matches_written(&written));
}

#[test]
fn format_2_messages_are_read_without_types_or_shapes() {
    let v2 = mutated(|v| {
        v["format"] = json!(2);
        strip_format_5(v);
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
    // Written in the current format (with null types), it reads the same: a state file keeps
    // it.
    let v5 = msg.to_json();
    assert_eq!(v5["format"], FORMAT);
    assert_eq!(v5["columns"][0]["type"], Value::Null);
    assert_eq!(
        SchemaMessage::parse(v5.to_string().as_bytes()).unwrap(),
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
        json!({"format": FORMAT, "event": "dropped", "relid": 5, "namespace": "s", "relname": "t"});
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

#[test]
fn a_missing_value_is_the_element_of_its_one_element_array() {
    // array_send('{5}'::int4[]): one dimension, no NULLs, element type int4 (23), length 1,
    // lower bound 1, then the element: length 4, 00 00 00 05.
    let int4_array = [
        0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 23, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 5,
    ];
    assert_eq!(missing_from_array_send(&int4_array).unwrap(), [0, 0, 0, 5]);
    // array_send('{""}'::text[]): an empty value is a value.
    let empty_text = [
        0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 25, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0,
    ];
    assert_eq!(
        missing_from_array_send(&empty_text).unwrap(),
        Vec::<u8>::new()
    );
    let mut two = int4_array.to_vec();
    two[15] = 2;
    let mut null = int4_array[..24].to_vec();
    null[7] = 1;
    null[20..24].copy_from_slice(&[0xff; 4]);
    let mut long = int4_array.to_vec();
    long.push(0);
    for (bad, why) in [
        (&two[..], "not 1 dimensions of 2"),
        (&null[..], "never NULL"),
        (&long[..], "4 bytes has 5 bytes"),
        (&int4_array[..26], "4 bytes has 2 bytes"),
        (&int4_array[..10], "ends at byte 10"),
    ] {
        let e = missing_from_array_send(bad).unwrap_err();
        assert!(e.contains(why), "{why}: {e}");
    }
}

/// Item 12 of issue 33: an enum field's identity bytes are its label, so the labels of every
/// enum an identity contains are part of what it is made of: renaming one changes the
/// identity's signature (a replica then computes every stored identity again), a message of
/// format 5 names none (unknown, taken as the schema computed now), and they round-trip.
#[test]
fn enum_labels_are_part_of_an_identity() {
    let with = |labels: &[&str]| {
        mutated(|v| {
            v["identity"]["enums"] = json!([{"type": "public.mood", "labels": labels}]);
        })
    };
    let parse = |text: &str| match SchemaMessage::parse(text.as_bytes()).unwrap() {
        Msg::Schema(s) => s,
        other => panic!("{other:?}"),
    };
    let before = parse(&with(&["sad", "ok", "happy"]));
    let renamed = parse(&with(&["blue", "ok", "happy"]));
    let def = before.identity.as_ref().unwrap();
    assert_eq!(def.enums[0].type_name, "public.mood");
    assert_eq!(def.enums[0].labels, ["sad", "ok", "happy"]);
    assert_ne!(
        before.identity_signature(),
        renamed.identity_signature(),
        "a label renamed is another identity"
    );
    assert!(!renamed.matches_written(&before));
    let v5 = mutated(|v| {
        v["format"] = json!(5);
        strip_format_6(v);
    });
    assert!(
        before.matches_written(&parse(&v5)),
        "format 5 named no labels"
    );
    assert_eq!(
        SchemaMessage::parse(Msg::Schema(before.clone()).to_json().to_string().as_bytes()).unwrap(),
        Msg::Schema(before)
    );
}

/// Format 7: a column whose rows from before it hold a value of a type without a binary send
/// form says so, with no value; format 6 is read as saying nothing of it; the flag is a fact
/// of the DDL's moment like `missing`.
#[test]
fn a_missing_value_without_a_send_form_is_said_not_dropped() {
    let text = mutated(|v| {
        v["columns"][3]["missing"] = Value::Null;
        v["columns"][3]["missing_without_send_form"] = json!(true);
    });
    let msg = SchemaMessage::parse(text.as_bytes()).unwrap();
    let Msg::Schema(s) = &msg else { panic!() };
    let flags: Vec<(Option<&[u8]>, bool)> = s
        .columns
        .iter()
        .map(|c| (c.missing.as_deref(), c.missing_without_send_form))
        .collect();
    assert_eq!(
        flags,
        [(None, false), (None, false), (None, false), (None, true)]
    );
    assert_eq!(
        SchemaMessage::parse(msg.to_json().to_string().as_bytes()).unwrap(),
        msg
    );
    let v6 = mutated(|v| {
        v["format"] = json!(6);
        strip_format_7(v);
    });
    let Msg::Schema(old) = SchemaMessage::parse(v6.as_bytes()).unwrap() else {
        panic!()
    };
    assert!(old.columns.iter().all(|c| !c.missing_without_send_form));
    let Msg::Schema(spec) = SchemaMessage::parse(spec_example().as_bytes()).unwrap() else {
        panic!()
    };
    assert!(s.matches_written(&spec) && spec.matches_written(s));
}
