//! Fuzzes the capture state machine with streams built from the input: each byte picks the
//! next message (transaction bounds, Relation messages that agree or disagree with the
//! schema, changes with arbitrary column bytes, identity schema rows well-formed or not,
//! logical messages claiming to be schemas, raw garbage). Capture may refuse a stream, but
//! never panics, every identity it emits is one the strict decoder accepts, of the domain the
//! event names, a logical message never changes a schema, and every event renders as one
//! line of JSON, its images included, whatever bytes its tuples held.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rowid_cdc::capture::{Capture, Output};
use rowid_cdc::identity_rows;
use rowid_cdc::{Lsn, Op, RelationSchema, ReplicaIdentity, SchemaMessage};
use rowid_codec::structure::Shape;
use rowid_codec::{Domain, TypeTag};
use rowid_pgoutput::{
    Column, CommitInfo, FlagBits, Message, OldTuple, Relation, RelationColumn, encode,
};
use rowid_registry::schema_message::{
    IdentityDef, IdentityField, MESSAGE_PREFIX, Rewrite, SchemaColumn,
};

/// The identity schema table's OID.
const SCHEMAS: u32 = 9;

const TYPES: [(u32, TypeTag); 4] = [
    (20, TypeTag::Int8),
    (25, TypeTag::Text),
    (1700, TypeTag::Numeric),
    (2950, TypeTag::Uuid),
];

fn schema(key: u8, ri: ReplicaIdentity) -> RelationSchema {
    let cols: Vec<(String, u32, TypeTag)> = (0..3)
        .map(|i| {
            let (oid, tag) = TYPES[usize::from(key.wrapping_add(i)) % TYPES.len()];
            (format!("c{i}"), oid, tag)
        })
        .collect();
    let field = |c: &(String, u32, TypeTag)| IdentityField {
        column: c.0.clone(),
        type_oid: c.1,
        shape: Shape::Scalar(c.2),
    };
    let keyless = key & 0x80 != 0;
    let key_cols = if keyless { 3 } else { usize::from(key % 3) + 1 };
    RelationSchema {
        relid: 1,
        namespace: "public".into(),
        relname: "t".into(),
        replica_identity: ri,
        columns: cols
            .iter()
            .enumerate()
            .map(|(i, c)| SchemaColumn {
                attnum: i as i16 + 1,
                name: c.0.clone(),
                type_oid: c.1,
                type_name: None,
                not_null: true,
                shape: Some(Shape::Scalar(c.2)),
                missing: None,
                missing_without_send_form: false,
            })
            .collect(),
        primary_key: cols[..key_cols].iter().map(|c| c.0.clone()).collect(),
        identity: Ok(IdentityDef {
            domain: if keyless {
                Domain::KeylessRow
            } else {
                Domain::ScanKey
            },
            index: (!keyless).then(|| "t_pkey".to_string()),
            primary: !keyless,
            fields: cols[..key_cols].iter().map(field).collect(),
            // The bound does not change what capture emits.
            max_len: None,
            // No enum among the fuzzed key types.
            enums: vec![],
        }),
        rewritten: Rewrite::Unknown,
        stored: None,
    }
}

fn relation(s: &RelationSchema, flags: u8) -> Message {
    let key: Vec<&str> = match &s.identity {
        Ok(d) => d.fields.iter().map(|f| f.column.as_str()).collect(),
        Err(_) => vec![],
    };
    Message::Relation {
        xid: None,
        relation: Relation {
            relid: 1,
            namespace: "public".into(),
            name: "t".into(),
            replica_identity: s.replica_identity.byte(),
            columns: s
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| RelationColumn {
                    // Usually the schema's key; some bits flip it.
                    flags: u8::from(key.contains(&c.name.as_str())) ^ ((flags >> i) & 1),
                    name: c.name.clone(),
                    type_oid: c.type_oid,
                    typmod: -1,
                })
                .collect(),
        },
    }
}

/// Column values from the input: well-formed sends mostly, arbitrary bytes sometimes.
fn tuple(data: &mut &[u8]) -> Vec<Column> {
    (0..3)
        .map(|i| {
            let Some((&sel, rest)) = data.split_first() else {
                return Column::Null;
            };
            *data = rest;
            match sel % 8 {
                0 => Column::Null,
                1 => Column::UnchangedToast,
                2 => Column::Text(Bytes::from_static(b"1")),
                _ => {
                    let n = usize::from(sel >> 3).min(data.len());
                    let (v, rest) = data.split_at(n);
                    *data = rest;
                    let _ = i;
                    Column::Binary(Bytes::copy_from_slice(v))
                }
            }
        })
        .collect()
}

fuzz_target!(|input: &[u8]| {
    let Some((&first, mut data)) = input.split_first() else {
        return;
    };
    let ri = [
        ReplicaIdentity::Default,
        ReplicaIdentity::Full,
        ReplicaIdentity::Index,
        ReplicaIdentity::Nothing,
    ][usize::from(first % 4)];
    let mut current = schema(first, ri);
    let mut capture = Capture::new(
        [current.clone()],
        Lsn(u64::from(first >> 4)),
        FlagBits::default(),
    )
    .with_identity_table(SCHEMAS)
    .strict(first & 0x40 != 0);
    let mut out = Vec::new();
    let _ = capture.apply(Lsn(1), identity_rows::relation(SCHEMAS), &mut out);
    // What schemas were written through the identity table, as they stand.
    let mut authentic = vec![current.clone()];
    let mut lsn = 100u64;
    let mut commit = 1000u64;
    while let Some((&op, rest)) = data.split_first() {
        data = rest;
        let msg = match op % 12 {
            0 => {
                commit += 1000;
                Message::Begin {
                    final_lsn: commit,
                    commit_ts: 0,
                    xid: u32::from(op),
                }
            }
            1 => Message::Commit(CommitInfo {
                flags: 0,
                commit_lsn: if op & 0x80 != 0 { commit + 1 } else { commit },
                end_lsn: commit + 8,
                commit_ts: 0,
            }),
            2 | 3 => relation(&current, op >> 4),
            4 | 5 => Message::Insert {
                xid: None,
                relid: 1,
                new: tuple(&mut data),
            },
            6 => {
                let old = match op >> 6 {
                    0 => None,
                    1 => Some(OldTuple::Key(tuple(&mut data))),
                    _ => Some(OldTuple::Full(tuple(&mut data))),
                };
                Message::Update {
                    xid: None,
                    relid: 1,
                    old,
                    new: tuple(&mut data),
                }
            }
            7 => Message::Delete {
                xid: None,
                relid: 1,
                old: if op & 0x80 != 0 {
                    OldTuple::Full(tuple(&mut data))
                } else {
                    OldTuple::Key(tuple(&mut data))
                },
            },
            8 => Message::Truncate {
                xid: None,
                flags: 0,
                relids: vec![1, u32::from(op >> 4)],
            },
            9 if op & 0x80 == 0 => {
                current = schema(op, ri);
                authentic.push(current.clone());
                identity_rows::upsert(SCHEMAS, &current)
            }
            9 => identity_rows::raw(
                SCHEMAS,
                1,
                &data[..data.len().min(usize::from(op >> 4))],
            ),
            10 => Message::Message {
                xid: None,
                transactional: op & 0x80 == 0,
                lsn,
                prefix: MESSAGE_PREFIX.into(),
                content: if op & 0x40 == 0 {
                    Bytes::from(
                        SchemaMessage::Schema(schema(op.wrapping_add(1), ri))
                            .to_json()
                            .to_string(),
                    )
                } else {
                    Bytes::copy_from_slice(&data[..data.len().min(usize::from(op >> 4))])
                },
            },
            _ => {
                // Raw bytes straight into the decoder.
                let n = data.len().min(usize::from(op >> 4));
                let (raw, rest) = data.split_at(n);
                data = rest;
                lsn += 1;
                if capture
                    .apply_bytes(Lsn(lsn), Bytes::copy_from_slice(raw), &mut out)
                    .is_err()
                {
                    return;
                }
                continue;
            }
        };
        lsn += 1;
        if capture
            .apply_bytes(Lsn(lsn), encode(&msg), &mut out)
            .is_err()
        {
            // A refused stream ends here, as the pipeline would.
            break;
        }
    }
    for o in &out {
        if let Output::Change(e) = o {
            for id in [&e.old_id, &e.new_id].into_iter().flatten() {
                let decoded = rowid_codec::decode(id).expect("capture emitted an invalid identity");
                assert_eq!(Some(decoded.domain), e.domain);
            }
            assert_eq!(e.op == Op::Unidentified, e.unidentified.is_some());
            // Whatever the tuples held, the event is one line of JSON (images included).
            let mut line = String::new();
            rowid_cdc::json_line::write(e, &mut line);
            assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'), "{line}");
            if let Err(err) = serde_json::from_str::<serde_json::Value>(&line) {
                panic!("not JSON ({err}): {line}");
            }
        }
    }
    // Only rows of the identity table ever became a schema.
    for s in capture.schemas() {
        assert!(authentic.contains(s), "a schema nobody wrote through the table: {s:?}");
    }
});
