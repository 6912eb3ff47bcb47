//! A pipeline fed pgoutput messages deterministically (no server): one keyed table `t`
//! (`id int8` primary key, `v int8`), its identity schema, and transactions of inserts and
//! updates, for the tests of what the pipeline hands its sink and records.

#![allow(dead_code, clippy::unwrap_used)]

use bytes::Bytes;
use rowid_cdc::chunks::{ChunkCursor, ChunkState};
use rowid_cdc::pipeline::Pipeline;
use rowid_cdc::sink::Sink;
use rowid_cdc::state::State;
use rowid_cdc::{Capture, Lsn, RelationSchema, ReplicaIdentity};
use rowid_codec::structure::Shape;
use rowid_codec::{Domain, TypeTag};
use rowid_pgoutput::{
    Column, CommitInfo, FlagBits, Message, OldTuple, Relation, RelationColumn, encode,
};
use rowid_registry::schema_message::{IdentityDef, IdentityField, Rewrite, SchemaColumn};

pub const T: u32 = 16385;

/// The OID of the identity schema table in these streams.
pub const IDENTITY_TABLE: u32 = 16001;

pub fn schema() -> RelationSchema {
    RelationSchema {
        relid: T,
        namespace: "public".into(),
        relname: "t".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: ["id", "v"]
            .iter()
            .enumerate()
            .map(|(i, n)| SchemaColumn {
                attnum: i as i16 + 1,
                name: (*n).into(),
                type_oid: 20,
                type_name: None,
                not_null: true,
                shape: None,
                missing: None,
                missing_without_send_form: false,
            })
            .collect(),
        primary_key: vec!["id".into()],
        identity: Ok(IdentityDef {
            domain: Domain::ScanKey,
            index: Some("t_pkey".into()),
            primary: true,
            fields: vec![IdentityField {
                column: "id".into(),
                type_oid: 20,
                shape: Shape::Scalar(TypeTag::Int8),
            }],
            max_len: None,
            enums: vec![],
        }),
        rewritten: Rewrite::Unknown,
        stored: None,
    }
}

pub fn int8(v: i64) -> Column {
    Column::Binary(Bytes::copy_from_slice(&v.to_be_bytes()))
}

/// `t`'s Relation message, `key` its replica identity columns.
pub fn relation(key: &[&str]) -> Message {
    Message::Relation {
        xid: None,
        relation: Relation {
            relid: T,
            namespace: "public".into(),
            name: "t".into(),
            replica_identity: b'd',
            columns: ["id", "v"]
                .iter()
                .map(|n| RelationColumn {
                    flags: u8::from(key.contains(n)),
                    name: (*n).into(),
                    type_oid: 20,
                    typmod: -1,
                })
                .collect(),
        },
    }
}

/// A state with `t`'s schema, nothing delivered, resuming at 0x100, with `chunks`.
pub fn state(chunks: Vec<ChunkCursor>) -> State {
    State {
        slot: "s".into(),
        publication: "p".into(),
        commit_lsn: Lsn::ZERO,
        end_lsn: Lsn(0x100),
        identity_table: 0,
        sink: None,
        schemas: vec![schema()],
        snapshot: None,
        chunks: ChunkState {
            cursors: chunks,
            delivered: None,
        },
    }
}

/// A pipeline and the position of its next message.
pub struct Stream<S: Sink> {
    pub pipe: Pipeline<S>,
    pub lsn: u64,
}

impl<S: Sink> Stream<S> {
    /// A pipeline from `state` into `sink`, its state file at `path` when given.
    pub fn start(sink: S, state: State, path: Option<std::path::PathBuf>) -> Stream<S> {
        let capture = Capture::new(state.schemas.clone(), Lsn::ZERO, FlagBits::default())
            .with_identity_table(IDENTITY_TABLE);
        let lsn = state.end_lsn.0;
        let pipe = Pipeline::new(capture, sink, state, path).unwrap();
        Stream { pipe, lsn }
    }

    /// One message; the position it returns to acknowledge.
    pub fn send(&mut self, m: Message) -> Option<Lsn> {
        self.lsn += 0x40;
        self.pipe.message(Lsn(self.lsn), encode(&m)).unwrap()
    }

    /// One transaction `xid` of `changes`; the position its commit returns to acknowledge.
    pub fn txn(&mut self, xid: u32, changes: Vec<Message>) -> Option<Lsn> {
        let commit_lsn = self.lsn + 0x1000;
        self.send(Message::Begin {
            final_lsn: commit_lsn,
            commit_ts: 0,
            xid,
        });
        self.send(relation(&["id"]));
        for c in changes {
            self.send(c);
        }
        let ack = self.send(Message::Commit(CommitInfo {
            flags: 0,
            commit_lsn,
            end_lsn: commit_lsn + 0x30,
            commit_ts: 0,
        }));
        self.lsn = commit_lsn + 0x30;
        ack
    }
}

/// An update of row `old` to `new` (its key changed when they differ), `v` its value.
pub fn update(old: i64, new: i64, v: i64) -> Message {
    Message::Update {
        xid: None,
        relid: T,
        old: (old != new).then(|| OldTuple::Key(vec![int8(old), Column::Null])),
        new: vec![int8(new), int8(v)],
    }
}

/// An insert of row `id` with value `v`.
pub fn insert(id: i64, v: i64) -> Message {
    Message::Insert {
        xid: None,
        relid: T,
        new: vec![int8(id), int8(v)],
    }
}
