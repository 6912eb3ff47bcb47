//! The capture state machine on synthetic pgoutput streams: identities equal the codec's,
//! identity schema rows take effect at their position and only at commit, bindings follow
//! Relation messages, every hazard of issue 12 is named (an unidentified event, or under
//! strict capture an error), logical messages that claim to be schemas change nothing and
//! stop nothing (issue 20), and a resumed stream delivers nothing twice.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use rowid_cdc::capture::{Capture, Output};
use rowid_cdc::event::{Cell, OldKind, RowImage};
use rowid_cdc::identity_rows;
use rowid_cdc::{
    CaptureError, ChangeEvent, Lsn, Op, RelationSchema, ReplicaIdentity, SchemaMessage,
};
use rowid_codec::structure::Shape;
use rowid_codec::{Domain, TypeTag, Value, encode_identity};
use rowid_pgoutput::{
    Column, CommitInfo, FlagBits, IdentityError, Message, OldTuple, Relation, RelationColumn,
    SchemaMismatch,
};
use rowid_registry::schema_message::{
    IdentityDef, IdentityField, MESSAGE_PREFIX, Refusal, Rewrite, SchemaColumn,
};

const T: u32 = 16385;
/// The identity schema table's OID.
const SCHEMAS: u32 = 16300;

fn int8(v: i64) -> Column {
    Column::Binary(Bytes::copy_from_slice(&v.to_be_bytes()))
}

fn text(s: &str) -> Column {
    Column::Binary(Bytes::copy_from_slice(s.as_bytes()))
}

/// A Relation message for table `t`: (name, type OID, replica-identity flag).
fn relation(ri: u8, cols: &[(&str, u32, bool)]) -> Message {
    Message::Relation {
        xid: None,
        relation: Relation {
            relid: T,
            namespace: "public".into(),
            name: "t".into(),
            replica_identity: ri,
            columns: cols
                .iter()
                .map(|&(name, type_oid, ri)| RelationColumn {
                    flags: u8::from(ri),
                    name: name.into(),
                    type_oid,
                    typmod: -1,
                })
                .collect(),
        },
    }
}

/// The identity schema of `t` with columns `cols` and identity `key` (SCAN_KEY on the
/// primary key; empty: KEYLESS_ROW over every column).
fn schema(ri: ReplicaIdentity, cols: &[(&str, u32, TypeTag)], key: &[&str]) -> RelationSchema {
    let field = |&(name, oid, tag): &(&str, u32, TypeTag)| IdentityField {
        column: name.into(),
        type_oid: oid,
        shape: Shape::Scalar(tag),
    };
    let identity = if key.is_empty() {
        IdentityDef {
            domain: Domain::KeylessRow,
            index: None,
            primary: false,
            fields: cols.iter().map(field).collect(),
            max_len: None,
            enums: vec![],
        }
    } else {
        IdentityDef {
            domain: Domain::ScanKey,
            index: Some("t_pkey".into()),
            primary: true,
            fields: key
                .iter()
                .map(|k| field(cols.iter().find(|c| c.0 == *k).unwrap()))
                .collect(),
            max_len: None,
            enums: vec![],
        }
    };
    RelationSchema {
        relid: T,
        namespace: "public".into(),
        relname: "t".into(),
        replica_identity: ri,
        columns: cols
            .iter()
            .enumerate()
            .map(|(i, c)| SchemaColumn {
                attnum: i as i16 + 1,
                name: c.0.into(),
                type_oid: c.1,
                type_name: None,
                not_null: key.contains(&c.0),
                shape: Some(Shape::Scalar(c.2)),
                missing: None,
                missing_without_send_form: false,
            })
            .collect(),
        primary_key: key.iter().map(|k| k.to_string()).collect(),
        identity: Ok(identity),
        rewritten: Rewrite::Unknown,
        stored: None,
    }
}

/// The row the event trigger writes for `s` (the identity table's Relation message is fed
/// first by [`run`]).
fn schema_message(s: &RelationSchema) -> Message {
    identity_rows::upsert(SCHEMAS, s)
}

/// A logical message with the format-1 prefix: anybody's.
fn forged(transactional: bool, content: &str) -> Message {
    Message::Message {
        xid: None,
        transactional,
        lsn: 0,
        prefix: MESSAGE_PREFIX.into(),
        content: Bytes::from(content.to_string()),
    }
}

fn begin(commit: u64, xid: u32) -> Message {
    Message::Begin {
        final_lsn: commit,
        commit_ts: 1_000_000,
        xid,
    }
}

fn commit(commit: u64) -> Message {
    Message::Commit(CommitInfo {
        flags: 0,
        commit_lsn: commit,
        end_lsn: commit + 8,
        commit_ts: 1_000_000,
    })
}

fn insert(row: Vec<Column>) -> Message {
    Message::Insert {
        xid: None,
        relid: T,
        new: row,
    }
}

fn update(old: Option<OldTuple>, new: Vec<Column>) -> Message {
    Message::Update {
        xid: None,
        relid: T,
        old,
        new,
    }
}

fn delete(old: OldTuple) -> Message {
    Message::Delete {
        xid: None,
        relid: T,
        old,
    }
}

fn id(domain: Domain, fields: &[(TypeTag, Option<Value<'_>>)]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_identity(&mut out, domain, fields).unwrap();
    out
}

/// A KEYLESS_ROW identity of `fields`.
fn id_of(fields: &[(TypeTag, Option<Value<'_>>)]) -> Vec<u8> {
    id(Domain::KeylessRow, fields)
}

fn key1(v: i64) -> Vec<u8> {
    id(Domain::ScanKey, &[(TypeTag::Int8, Some(Value::Int8(v)))])
}

/// Feeds the identity table's Relation message, then `msgs` at LSNs 100, 200, ...; returns
/// every output, or the first error.
fn run(cap: &mut Capture, msgs: Vec<Message>) -> Result<Vec<Output>, CaptureError> {
    let mut out = Vec::new();
    cap.apply(Lsn(50), identity_rows::relation(SCHEMAS), &mut out)?;
    for (i, m) in msgs.into_iter().enumerate() {
        cap.apply(Lsn(100 * (i as u64 + 1)), m, &mut out)?;
    }
    Ok(out)
}

fn changes(out: &[Output]) -> Vec<&ChangeEvent> {
    out.iter()
        .filter_map(|o| match o {
            Output::Change(e) => Some(&**e),
            _ => None,
        })
        .collect()
}

fn notices(out: &[Output]) -> Vec<&str> {
    out.iter()
        .filter_map(|o| match o {
            Output::Notice { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect()
}

/// A capture reading schemas from the identity table `SCHEMAS`.
fn capture(schemas: impl IntoIterator<Item = RelationSchema>, resume: Lsn) -> Capture {
    Capture::new(schemas, resume, FlagBits::default()).with_identity_table(SCHEMAS)
}

fn keyed() -> Capture {
    capture(
        [schema(
            ReplicaIdentity::Default,
            &[("id", 20, TypeTag::Int8), ("v", 25, TypeTag::Text)],
            &["id"],
        )],
        Lsn::ZERO,
    )
}

/// The one change of `out`, which must be unidentified: (the change, the reason).
fn unidentified(out: &[Output]) -> (Op, String) {
    let c = changes(out);
    assert_eq!(c.len(), 1, "{out:?}");
    let e = c[0];
    assert_eq!(
        (e.op, e.domain, e.old_id.as_ref(), e.new_id.as_ref()),
        (Op::Unidentified, None, None, None)
    );
    let u = e.unidentified.clone().expect("a reason");
    (u.change, u.reason)
}

#[test]
fn identities_equal_the_codec_and_follow_key_changes() {
    let mut cap = keyed();
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            insert(vec![int8(1), text("a")]),
            update(None, vec![int8(1), text("b")]),
            update(
                Some(OldTuple::Key(vec![int8(1), Column::Null])),
                vec![int8(2), text("b")],
            ),
            delete(OldTuple::Key(vec![int8(2), Column::Null])),
            commit(1000),
        ],
    )
    .unwrap();
    assert_eq!(
        out.first(),
        Some(&Output::Begin {
            xid: 7,
            commit_lsn: Lsn(1000)
        })
    );
    let c = changes(&out);
    let ops: Vec<_> = c
        .iter()
        .map(|e| (e.op, e.old_id.clone(), e.new_id.clone()))
        .collect();
    assert_eq!(
        ops,
        vec![
            (Op::Insert, None, Some(key1(1))),
            (Op::Update, Some(key1(1)), Some(key1(1))),
            (Op::Update, Some(key1(1)), Some(key1(2))),
            (Op::Delete, Some(key1(2)), None),
        ]
    );
    assert!(
        c.iter()
            .all(|e| *e.key == ["id"] && e.domain == Some(Domain::ScanKey))
    );
    assert_eq!(c[0].lsn, Lsn(300), "each change carries its own LSN");
    assert_eq!(c[0].commit_lsn, Lsn(1000));
    assert_eq!(&*c[0].relation, "public.t");
    assert_eq!(
        out.last(),
        Some(&Output::Commit {
            xid: 7,
            commit_lsn: Lsn(1000),
            end_lsn: Lsn(1008),
            changes: 4,
            schema_changes: vec![],
            delivered: false,
        })
    );
}

#[test]
fn a_schema_message_takes_effect_at_its_position() {
    let mut cap = keyed();
    let cols = [("id", 20, TypeTag::Int8), ("v", 25, TypeTag::Text)];
    let widened = schema(ReplicaIdentity::Default, &cols, &["id", "v"]);
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            insert(vec![int8(1), text("a")]),
            // ALTER TABLE t DROP CONSTRAINT t_pkey, ADD PRIMARY KEY (id, v) in the same
            // transaction: the message, then pgoutput re-sends the relation.
            schema_message(&widened),
            relation(b'd', &[("id", 20, true), ("v", 25, true)]),
            insert(vec![int8(2), text("b")]),
            commit(1000),
        ],
    )
    .unwrap();
    let c = changes(&out);
    assert_eq!(c[0].new_id, Some(key1(1)), "before the DDL: the old key");
    assert_eq!(
        c[1].new_id,
        Some(id(
            Domain::ScanKey,
            &[
                (TypeTag::Int8, Some(Value::Int8(2))),
                (TypeTag::Text, Some(Value::Text(b"b")))
            ]
        )),
        "after it: the new key"
    );
    assert_eq!(*c[1].key, ["id", "v"]);
    assert!(
        matches!(out.last(), Some(Output::Commit { schema_changes, .. }) if schema_changes == &[T])
    );
    assert_eq!(
        cap.schemas().next(),
        Some(&widened),
        "committed: the new authority"
    );
}

#[test]
fn schemas_of_an_unfinished_transaction_never_become_the_authority() {
    let mut cap = keyed();
    let before: Vec<RelationSchema> = cap.schemas().cloned().collect();
    let widened = schema(
        ReplicaIdentity::Default,
        &[("id", 20, TypeTag::Int8), ("v", 25, TypeTag::Text)],
        &["id", "v"],
    );
    run(&mut cap, vec![begin(1000, 7), schema_message(&widened)]).unwrap();
    assert!(cap.in_transaction());
    let now: Vec<RelationSchema> = cap.schemas().cloned().collect();
    assert_eq!(now, before, "the connection may drop before Commit");
}

#[test]
fn a_key_that_changed_in_the_stream_is_refused_naming_both() {
    // Snapshot key (id); the stream's replica identity is (id, v): a key "from the future".
    let stream = || {
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("v", 25, true)]),
            insert(vec![int8(1), text("a")]),
            commit(1000),
        ]
    };
    let out = run(&mut keyed(), stream()).unwrap();
    let (change, reason) = unidentified(&out);
    assert_eq!(change, Op::Insert);
    assert!(
        reason.contains("(id)") && reason.contains("(id, v)"),
        "{reason}"
    );

    let err = run(&mut keyed().strict(true), stream()).unwrap_err();
    assert_eq!(
        err,
        CaptureError::Schema {
            lsn: Lsn(300),
            relation: "public.t".into(),
            mismatch: SchemaMismatch::KeyDiffers {
                schema: vec!["id".into()],
                stream: vec!["id".into(), "v".into()],
            },
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("public.t") && text.contains("(id)") && text.contains("(id, v)"),
        "{text}"
    );
}

#[test]
fn keyless_identities_need_full_old_rows() {
    let cols = [("a", 20, TypeTag::Int8), ("b", 25, TypeTag::Text)];
    let row = vec![int8(1), text("x")];
    let want = id(
        Domain::KeylessRow,
        &[
            (TypeTag::Int8, Some(Value::Int8(1))),
            (TypeTag::Text, Some(Value::Text(b"x"))),
        ],
    );
    // DEFAULT while keyless (CREATE TABLE scratch (x int) under FOR ALL TABLES): an INSERT
    // needs no old row and gets its keyless identity; an UPDATE names no old row.
    let mut cap = capture([schema(ReplicaIdentity::Default, &cols, &[])], Lsn::ZERO);
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("a", 20, false), ("b", 25, false)]),
            insert(row.clone()),
            commit(1000),
        ],
    )
    .unwrap();
    assert_eq!(
        changes(&out)
            .iter()
            .map(|e| (e.op, e.new_id.clone()))
            .collect::<Vec<_>>(),
        vec![(Op::Insert, Some(want.clone()))]
    );
    let out = run(
        &mut cap,
        vec![begin(2000, 8), update(None, row.clone()), commit(2000)],
    )
    .unwrap();
    let (change, reason) = unidentified(&out);
    assert_eq!(change, Op::Update);
    assert!(reason.contains("REPLICA IDENTITY FULL"), "{reason}");

    // FULL: the old row is complete; the identity is every column's.
    let mut cap = capture([schema(ReplicaIdentity::Full, &cols, &[])], Lsn::ZERO);
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'f', &[("a", 20, true), ("b", 25, true)]),
            delete(OldTuple::Full(row.clone())),
            commit(1000),
        ],
    )
    .unwrap();
    assert_eq!(changes(&out)[0].old_id, Some(want));

    // A 'K' old tuple under a keyless identity reads non-key columns as NULL: unidentified,
    // and under strict capture an error.
    let stream = || {
        vec![
            begin(1000, 7),
            relation(b'f', &[("a", 20, true), ("b", 25, true)]),
            delete(OldTuple::Key(vec![int8(1), Column::Null])),
            commit(1000),
        ]
    };
    let mut cap = capture([schema(ReplicaIdentity::Full, &cols, &[])], Lsn::ZERO);
    let (change, _) = unidentified(&run(&mut cap, stream()).unwrap());
    assert_eq!(change, Op::Delete);
    let mut cap = capture([schema(ReplicaIdentity::Full, &cols, &[])], Lsn::ZERO).strict(true);
    let err = run(&mut cap, stream()).unwrap_err();
    assert!(matches!(
        err,
        CaptureError::Identity {
            error: IdentityError::KeylessNeedsFullOldRow,
            ..
        }
    ));
}

#[test]
fn a_new_relation_message_rebinds() {
    let mut cap = keyed();
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            insert(vec![int8(1), text("a")]),
            // The stream now sends the columns in another order (a column dropped and added
            // again gets a new attnum at the end): bindings are by name, positions follow.
            relation(b'd', &[("v", 25, false), ("id", 20, true)]),
            insert(vec![text("b"), int8(2)]),
            commit(1000),
        ],
    )
    .unwrap();
    let c = changes(&out);
    assert_eq!(c[0].new_id, Some(key1(1)));
    assert_eq!(
        c[1].new_id,
        Some(key1(2)),
        "read from the column's new position"
    );
}

#[test]
fn a_column_type_change_is_refused() {
    let stream = || {
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 23, true), ("v", 25, false)]),
            insert(vec![int8(1), text("a")]),
            commit(1000),
        ]
    };
    let (_, reason) = unidentified(&run(&mut keyed(), stream()).unwrap());
    assert!(reason.contains("type OID 23"), "{reason}");
    let err = run(&mut keyed().strict(true), stream()).unwrap_err();
    assert!(matches!(
        err,
        CaptureError::Schema {
            mismatch: SchemaMismatch::TypeChanged {
                expected: 20,
                found: 23,
                ..
            },
            ..
        }
    ));
}

#[test]
fn toasted_key_values_are_backfilled_from_the_old_key() {
    let mut cap = capture(
        [schema(
            ReplicaIdentity::Default,
            &[("k", 25, TypeTag::Text), ("v", 20, TypeTag::Int8)],
            &["k"],
        )],
        Lsn::ZERO,
    );
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("k", 25, true), ("v", 20, false)]),
            update(
                Some(OldTuple::Key(vec![text("long"), Column::Null])),
                vec![Column::UnchangedToast, int8(5)],
            ),
            commit(1000),
        ],
    )
    .unwrap();
    let e = changes(&out)[0];
    let want = id(
        Domain::ScanKey,
        &[(TypeTag::Text, Some(Value::Text(b"long")))],
    );
    assert_eq!(
        (e.old_id.clone(), e.new_id.clone(), e.backfilled.clone()),
        (Some(want.clone()), Some(want), vec!["k".to_string()])
    );
    assert!(e.unchanged_toast.is_empty());

    // Without an old key the value is unknown: named, never NULL.
    let unknown = || {
        vec![
            begin(2000, 8),
            update(None, vec![Column::UnchangedToast, int8(6)]),
            commit(2000),
        ]
    };
    let (change, reason) = unidentified(&run(&mut cap, unknown()).unwrap());
    assert_eq!(change, Op::Update);
    assert!(reason.contains(" k"), "{reason}");
    let mut strict = capture(cap.schemas().cloned().collect::<Vec<_>>(), Lsn(1000)).strict(true);
    let mut msgs = vec![relation(b'd', &[("k", 25, true), ("v", 20, false)])];
    msgs.extend(unknown());
    let err = run(&mut strict, msgs).unwrap_err();
    let CaptureError::Incomplete { error, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(error.columns, ["k"]);
}

#[test]
fn truncate_is_one_event_per_relation() {
    let mut cap = keyed();
    let other = Message::Relation {
        xid: None,
        relation: Relation {
            relid: T + 1,
            namespace: "public".into(),
            name: "u".into(),
            replica_identity: b'd',
            columns: vec![],
        },
    };
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            other,
            Message::Truncate {
                xid: None,
                flags: 0,
                relids: vec![T, T + 1],
            },
            commit(1000),
        ],
    )
    .unwrap();
    let c = changes(&out);
    assert_eq!(
        c.iter()
            .map(|e| (e.op, &*e.relation, e.old_id.is_none() && e.new_id.is_none()))
            .collect::<Vec<_>>(),
        vec![
            (Op::Truncate, "public.t", true),
            (Op::Truncate, "public.u", true)
        ]
    );
}

#[test]
fn resumed_streams_skip_what_was_delivered() {
    let mut cap = capture(keyed().schemas().cloned().collect::<Vec<_>>(), Lsn(1000));
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            insert(vec![int8(1), text("a")]),
            commit(1000),
            begin(2000, 8),
            insert(vec![int8(2), text("b")]),
            commit(2000),
        ],
    )
    .unwrap();
    assert_eq!(
        changes(&out).len(),
        1,
        "the transaction at 0/3E8 was acknowledged before"
    );
    assert_eq!(
        changes(&out)[0].new_id,
        Some(key1(2)),
        "its Relation message still counts"
    );
    assert!(matches!(out.first(), Some(Output::Begin { xid: 8, .. })));
}

#[test]
fn transactions_the_sink_holds_are_replayed_without_their_changes() {
    // The state file says 0/3E8; the sink (a PostgreSQL buffer) already holds 0/7D0, whose
    // transaction also moved the key: its schema must still become the authority.
    let mut cap = capture(keyed().schemas().cloned().collect::<Vec<_>>(), Lsn(1000))
        .with_delivered(Lsn(2000));
    let cols = [("id", 20, TypeTag::Int8), ("v", 25, TypeTag::Text)];
    let widened = schema(ReplicaIdentity::Default, &cols, &["id", "v"]);
    let out = run(
        &mut cap,
        vec![
            begin(2000, 8),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            insert(vec![int8(2), text("b")]),
            schema_message(&widened),
            commit(2000),
            begin(3000, 9),
            relation(b'd', &[("id", 20, true), ("v", 25, true)]),
            insert(vec![int8(3), text("c")]),
            commit(3000),
        ],
    )
    .unwrap();
    assert!(
        matches!(
            out.first(),
            Some(Output::Commit { xid: 8, delivered: true, changes: 0, schema_changes, .. })
                if schema_changes == &[T]
        ),
        "the held transaction: only its commit, marked delivered: {out:?}"
    );
    let c = changes(&out);
    assert_eq!(c.len(), 1, "nothing of 0/7D0 twice");
    assert_eq!(
        c[0].new_id,
        Some(id(
            Domain::ScanKey,
            &[
                (TypeTag::Int8, Some(Value::Int8(3))),
                (TypeTag::Text, Some(Value::Text(b"c")))
            ]
        )),
        "the next transaction uses the key the replayed one set"
    );
    assert!(matches!(
        out.last(),
        Some(Output::Commit {
            xid: 9,
            delivered: false,
            ..
        })
    ));
}

#[test]
fn missing_or_refused_identities_are_named() {
    let stream = || {
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true)]),
            insert(vec![int8(1)]),
            commit(1000),
        ]
    };
    // No schema (a table published before identity messages were enabled, rows of CREATE
    // TABLE AS before its schema): unidentified; strict: an error naming the fix.
    let (change, reason) = unidentified(&run(&mut capture([], Lsn::ZERO), stream()).unwrap());
    assert_eq!(change, Op::Insert);
    assert!(reason.contains("no identity schema"), "{reason}");
    let err = run(&mut capture([], Lsn::ZERO).strict(true), stream()).unwrap_err();
    assert!(matches!(err, CaptureError::NoSchema { relid: T, .. }));
    assert!(err.to_string().contains("enable_identity_messages"));

    let mut refused = schema(
        ReplicaIdentity::Default,
        &[("id", 20, TypeTag::Int8)],
        &["id"],
    );
    refused.identity = Err(Refusal {
        sqlstate: "42P16".into(),
        message: "no eligible source key".into(),
    });
    let (_, reason) =
        unidentified(&run(&mut capture([refused.clone()], Lsn::ZERO), stream()).unwrap());
    assert!(reason.contains("42P16"), "{reason}");
    let err = run(&mut capture([refused], Lsn::ZERO).strict(true), stream()).unwrap_err();
    assert!(
        err.to_string().contains("42P16") && err.to_string().contains("public.t"),
        "{err}"
    );

    // The replica identity was changed without a schema row.
    let stream = || {
        vec![
            begin(1000, 7),
            relation(b'f', &[("id", 20, true), ("v", 25, true)]),
            insert(vec![int8(1), text("a")]),
            commit(1000),
        ]
    };
    let (_, reason) = unidentified(&run(&mut keyed(), stream()).unwrap());
    assert!(reason.contains("REPLICA IDENTITY default"), "{reason}");
    let err = run(&mut keyed().strict(true), stream()).unwrap_err();
    assert!(matches!(
        err,
        CaptureError::ReplicaIdentityDiffers {
            schema: "default",
            stream: "full",
            ..
        }
    ));
}

/// Issue 33 item 14: `CREATE TABLE ... AS` writes the new table's rows before its identity
/// schema (the event trigger runs at the command's end). The changes of a relation without a
/// schema are held from the first one, in order with everything after it, until that
/// relation's schema arrives in the same transaction, and are then identified with it; a
/// change of another table held in between keeps its place and its own schema. Without a
/// schema by the commit they are unidentified, as before.
#[test]
fn rows_before_their_tables_first_schema_in_one_transaction_are_identified_with_it() {
    let t = schema(
        ReplicaIdentity::Default,
        &[("id", 20, TypeTag::Int8), ("v", 25, TypeTag::Text)],
        &["id"],
    );
    let mut keyless = t.clone();
    keyless.primary_key.clear();
    if let Ok(def) = &mut keyless.identity {
        def.domain = Domain::KeylessRow;
        def.index = None;
        def.primary = false;
        def.fields.push(IdentityField {
            column: "v".into(),
            type_oid: 25,
            shape: Shape::Scalar(TypeTag::Text),
        });
    }
    let other = Message::Relation {
        xid: None,
        relation: Relation {
            relid: T + 1,
            namespace: "public".into(),
            name: "u".into(),
            replica_identity: b'd',
            columns: vec![RelationColumn {
                flags: 1,
                name: "id".into(),
                type_oid: 20,
                typmod: -1,
            }],
        },
    };
    let mut u = schema(
        ReplicaIdentity::Default,
        &[("id", 20, TypeTag::Int8)],
        &["id"],
    );
    u.relid = T + 1;
    u.relname = "u".into();
    let u_insert = Message::Insert {
        xid: None,
        relid: T + 1,
        new: vec![int8(9)],
    };
    let stream = |with_schema: bool| {
        let mut m = vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, false), ("v", 25, false)]),
            insert(vec![int8(1), text("a")]),
            insert(vec![int8(1), text("a")]),
            other.clone(),
            u_insert.clone(),
            insert(vec![int8(2), text("b")]),
        ];
        if with_schema {
            m.push(schema_message(&keyless));
        }
        m.push(insert(vec![int8(3), text("c")]));
        m.push(commit(1000));
        m
    };
    let mut cap = capture([u.clone()], Lsn::ZERO);
    let out = run(&mut cap, stream(true)).unwrap();
    let row = |id: i64, v: &str| {
        id_of(&[
            (TypeTag::Int8, Some(Value::Int8(id))),
            (TypeTag::Text, Some(Value::Text(v.as_bytes()))),
        ])
    };
    let got: Vec<(u32, Op, Option<Vec<u8>>)> = changes(&out)
        .iter()
        .map(|e| (e.relid, e.op, e.new_id.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (T, Op::Insert, Some(row(1, "a"))),
            (T, Op::Insert, Some(row(1, "a"))),
            (T + 1, Op::Insert, Some(key1(9))),
            (T, Op::Insert, Some(row(2, "b"))),
            (T, Op::Insert, Some(row(3, "c"))),
        ],
        "in stream order, each identified"
    );
    assert!(matches!(out.last(), Some(Output::Commit { .. })));
    // Every change keeps its own position.
    let lsns: Vec<Lsn> = changes(&out).iter().map(|e| e.lsn).collect();
    assert_eq!(lsns, [Lsn(300), Lsn(400), Lsn(600), Lsn(700), Lsn(900)]);

    // The schema table's own Relation message first arrives inside the held part (the
    // session's first schema row): the schema row is still recognised and applied.
    let mut cap = capture([u.clone()], Lsn::ZERO);
    let mut late = stream(true);
    let at = late.len() - 3;
    late.insert(at, identity_rows::relation(SCHEMAS));
    let mut out = Vec::new();
    for (i, m) in late.into_iter().enumerate() {
        cap.apply(Lsn(100 * (i as u64 + 1)), m, &mut out).unwrap();
    }
    assert!(
        changes(&out).iter().all(|e| e.op == Op::Insert),
        "{:?}",
        changes(&out)
    );

    // No schema by the commit: unidentified as before, in order, before the commit.
    let out = run(&mut capture([u], Lsn::ZERO), stream(false)).unwrap();
    let got: Vec<(u32, Op)> = changes(&out).iter().map(|e| (e.relid, e.op)).collect();
    assert_eq!(
        got,
        vec![
            (T, Op::Unidentified),
            (T, Op::Unidentified),
            (T + 1, Op::Insert),
            (T, Op::Unidentified),
            (T, Op::Unidentified),
        ]
    );
    assert!(matches!(out.last(), Some(Output::Commit { .. })));
}

/// Issue 20, items 2 and 3: any role can write a logical message with the format-1 prefix.
/// One that retypes the key changes nothing; one that is garbage stops nothing; both are
/// reported without their payload.
#[test]
fn logical_messages_claiming_to_be_schemas_change_and_stop_nothing() {
    let cols = [("id", 20, TypeTag::Int8), ("v", 25, TypeTag::Text)];
    let mut retyped = schema(
        ReplicaIdentity::Default,
        &[("id", 17, TypeTag::Bytea)],
        &["id"],
    );
    retyped.columns.push(SchemaColumn {
        attnum: 2,
        name: "v".into(),
        type_oid: 25,
        type_name: Some("text".into()),
        not_null: false,
        shape: Some(Shape::Scalar(TypeTag::Text)),
        missing: None,
        missing_without_send_form: false,
    });
    let forgery = SchemaMessage::Schema(retyped).to_json().to_string();
    for transactional in [true, false] {
        let mut cap = keyed();
        let out = run(
            &mut cap,
            vec![
                begin(1000, 7),
                relation(b'd', &[("id", 20, true), ("v", 25, false)]),
                forged(transactional, &forgery),
                forged(transactional, "x"),
                insert(vec![int8(1), text("a")]),
                commit(1000),
                begin(2000, 8),
                insert(vec![int8(2), text("b")]),
                commit(2000),
            ],
        )
        .unwrap();
        let ids: Vec<_> = changes(&out).iter().map(|e| e.new_id.clone()).collect();
        assert_eq!(
            ids,
            vec![Some(key1(1)), Some(key1(2))],
            "the key is still int8"
        );
        assert_eq!(
            cap.schemas().next(),
            Some(&schema(ReplicaIdentity::Default, &cols, &["id"])),
            "the committed schema is unchanged"
        );
        let n = notices(&out);
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(n[0].contains("claiming relation OID 16385"), "{}", n[0]);
        assert!(
            n.iter()
                .all(|m| !m.contains("bytea") && !m.contains("\"format\"")),
            "never the payload: {n:?}"
        );
    }
}

/// A row of the identity table that is not a valid schema (only the extension's owner can
/// write one): reported, and the relation has no schema until its next row, never a stale one.
#[test]
fn a_malformed_schema_row_leaves_its_relation_without_a_schema() {
    let mut cap = keyed();
    let cols = [("id", 20, TypeTag::Int8), ("v", 25, TypeTag::Text)];
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            identity_rows::raw(SCHEMAS, T, b"{not json"),
            insert(vec![int8(1), text("a")]),
            commit(1000),
            begin(2000, 8),
            schema_message(&schema(ReplicaIdentity::Default, &cols, &["id"])),
            insert(vec![int8(2), text("b")]),
            commit(2000),
        ],
    )
    .unwrap();
    assert!(notices(&out)[0].contains("relation OID 16385 is not a valid schema"));
    let c = changes(&out);
    assert_eq!(c[0].op, Op::Unidentified);
    assert_eq!(
        c[1].new_id,
        Some(key1(2)),
        "its next schema row restores it"
    );
}

/// A dropped table's row is deleted: its schema goes with it.
#[test]
fn a_deleted_schema_row_drops_the_schema() {
    let mut cap = keyed();
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            identity_rows::dropped(SCHEMAS, T),
            commit(1000),
        ],
    )
    .unwrap();
    assert!(
        matches!(out.last(), Some(Output::Commit { schema_changes, .. }) if schema_changes == &[T])
    );
    assert_eq!(cap.schemas().count(), 0);
}

/// The sink's own tables in the captured database: their changes are not captured.
#[test]
fn ignored_relations_emit_nothing() {
    let mut cap = keyed().ignoring([T]);
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            insert(vec![int8(1), text("a")]),
            Message::Truncate {
                xid: None,
                flags: 0,
                relids: vec![T],
            },
            commit(1000),
        ],
    )
    .unwrap();
    assert!(changes(&out).is_empty(), "{out:?}");
}

#[test]
fn out_of_order_and_unsupported_messages_are_errors() {
    let mut cap = keyed();
    assert!(matches!(
        run(&mut cap, vec![insert(vec![int8(1), text("a")])]),
        Err(CaptureError::Protocol { .. })
    ));
    assert!(matches!(
        run(&mut keyed(), vec![commit(5)]),
        Err(CaptureError::Protocol { .. })
    ));
    assert!(matches!(
        run(&mut keyed(), vec![begin(5, 1), begin(6, 2)]),
        Err(CaptureError::Protocol { .. })
    ));
    assert!(matches!(
        run(&mut keyed(), vec![begin(5, 1), commit(6)]),
        Err(CaptureError::Protocol { .. })
    ));
    assert!(matches!(
        run(
            &mut keyed(),
            vec![Message::StreamStart {
                xid: 1,
                first_segment: true
            }]
        ),
        Err(CaptureError::Unsupported {
            message: "Stream Start",
            ..
        })
    ));
    // A Stream Abort between transactions names a transaction never streamed (PostgreSQL
    // 18 sends one on a session that does not stream): reported, and the stream goes on;
    // inside a transaction it is an error.
    let abort = Message::StreamAbort {
        xid: 0x5253,
        subxid: 0x5254,
        abort: None,
    };
    let out = run(
        &mut keyed(),
        vec![
            abort.clone(),
            begin(5, 1),
            relation(b'd', &[("id", 20, true), ("v", 25, false)]),
            insert(vec![int8(1), text("a")]),
            commit(5),
        ],
    )
    .unwrap();
    let said = notices(&out);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("Stream Abort of transaction 21075"),
        "{said:?}"
    );
    assert_eq!(changes(&out).len(), 1);
    assert!(matches!(
        run(&mut keyed(), vec![begin(5, 1), abort, commit(5)]),
        Err(CaptureError::Unsupported {
            message: "Stream Abort",
            ..
        })
    ));
    // A loose identity message outside any transaction is reported, not an error.
    let out = run(&mut keyed(), vec![forged(false, "{}")]).unwrap();
    assert_eq!(notices(&out).len(), 1);
    // Other prefixes are someone else's messages.
    let foreign = Message::Message {
        xid: None,
        transactional: true,
        lsn: 0,
        prefix: "other".into(),
        content: Bytes::from_static(b"x"),
    };
    assert!(run(&mut keyed(), vec![begin(5, 1), foreign, commit(5)]).is_ok());
}

/// The images of the one change of `msgs` (after a Begin at 1000), with `t(id int8 key, doc
/// text)` under replica identity `ri`.
fn images_of(ri: u8, old: Option<OldTuple>, new: Option<Vec<Column>>) -> ChangeEvent {
    let setting = ReplicaIdentity::from_byte(ri).unwrap();
    let mut cap = capture(
        [schema(
            setting,
            &[("id", 20, TypeTag::Int8), ("doc", 25, TypeTag::Text)],
            &["id"],
        )],
        Lsn::ZERO,
    );
    let change = match (old, new) {
        (old, Some(new)) => update(old, new),
        (Some(old), None) => delete(old),
        (None, None) => unreachable!(),
    };
    let out = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(ri, &[("id", 20, true), ("doc", 25, false)]),
            change,
            commit(1000),
        ],
    )
    .unwrap();
    changes(&out)[0].clone()
}

/// The present cells of an image: column name and what the stream carried.
fn cells(image: Option<&RowImage>) -> Vec<(String, Cell)> {
    image
        .map(|i| {
            i.present()
                .map(|(c, v)| (c.name.clone(), Cell::from(v)))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn unchanged_toasted_values_are_filled_where_exact_and_named_where_not() {
    let bin = |b: &[u8]| Cell::Binary(Bytes::copy_from_slice(b));
    let id7 = bin(&7i64.to_be_bytes());
    // FULL: the old row is whole, so the omitted value is the old one: backfilled.
    let e = images_of(
        b'f',
        Some(OldTuple::Full(vec![int8(7), text("long")])),
        Some(vec![int8(7), Column::UnchangedToast]),
    );
    assert_eq!(e.old_kind, Some(OldKind::Full));
    assert_eq!(
        cells(e.new.as_ref()),
        [("id".into(), id7.clone()), ("doc".into(), bin(b"long"))]
    );
    assert_eq!(
        (e.backfilled.clone(), e.unchanged_toast.clone()),
        (vec!["doc".to_string()], vec![])
    );

    // DEFAULT, key unchanged: no old row; the value is unknown, named, absent (not NULL).
    let e = images_of(b'd', None, Some(vec![int8(7), Column::UnchangedToast]));
    assert_eq!((e.old.clone(), e.old_kind), (None, None));
    assert_eq!(cells(e.new.as_ref()), [("id".into(), id7.clone())]);
    assert_eq!(
        (e.backfilled.clone(), e.unchanged_toast.clone()),
        (vec![], vec!["doc".to_string()])
    );

    // DEFAULT, key changed: the old row is the key only; doc is still unknown.
    let e = images_of(
        b'd',
        Some(OldTuple::Key(vec![int8(6), Column::Null])),
        Some(vec![int8(7), Column::UnchangedToast]),
    );
    assert_eq!(e.old_kind, Some(OldKind::Key));
    assert_eq!(
        cells(e.old.as_ref()),
        [("id".into(), bin(&6i64.to_be_bytes()))]
    );
    assert_eq!(e.unchanged_toast, ["doc"]);

    // A DELETE under FULL: the whole old row, no new one; NULL is a value, not an absence.
    let e = images_of(
        b'f',
        Some(OldTuple::Full(vec![int8(7), Column::Null])),
        None,
    );
    assert_eq!(
        cells(e.old.as_ref()),
        [("id".into(), id7), ("doc".into(), Cell::Null)]
    );
    assert!(e.new.is_none());
}

#[test]
fn require_complete_stops_at_a_partial_after_image() {
    let mut cap = capture(
        [schema(
            ReplicaIdentity::Default,
            &[("id", 20, TypeTag::Int8), ("doc", 25, TypeTag::Text)],
            &["id"],
        )],
        Lsn::ZERO,
    )
    .require_complete(true);
    let err = run(
        &mut cap,
        vec![
            begin(1000, 7),
            relation(b'd', &[("id", 20, true), ("doc", 25, false)]),
            update(None, vec![int8(7), Column::UnchangedToast]),
            commit(1000),
        ],
    )
    .unwrap_err();
    let CaptureError::Incomplete { error, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (error.relation.as_str(), error.columns.clone()),
        ("public.t", vec!["doc".to_string()])
    );
    assert!(err.to_string().contains("REPLICA IDENTITY FULL"), "{err}");
}
