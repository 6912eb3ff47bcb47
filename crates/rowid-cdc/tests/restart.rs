//! Nothing lost, nothing twice: a pipeline killed at every message of a stream (mid
//! transaction, and between the sink's fsync and the state file's rename) and restarted from
//! its state file, with the server resending from the last acknowledgement, leaves exactly
//! the lines of an uninterrupted run.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use bytes::Bytes;
use rowid_cdc::capture::Capture;
use rowid_cdc::pipeline::Pipeline;
use rowid_cdc::sink::JsonlFile;
use rowid_cdc::state::State;
use rowid_cdc::{Lsn, RelationSchema, ReplicaIdentity, SchemaMessage};
use rowid_codec::structure::Shape;
use rowid_codec::{Domain, TypeTag};
use rowid_pgoutput::{
    Column, CommitInfo, FlagBits, Message, OldTuple, Relation, RelationColumn, encode,
};
use rowid_registry::schema_message::{IdentityDef, IdentityField, MESSAGE_PREFIX, SchemaColumn};

const T: u32 = 16385;

fn schema(key: &[&str]) -> RelationSchema {
    let cols = [("id", 20u32), ("v", 20u32)];
    RelationSchema {
        relid: T,
        namespace: "public".into(),
        relname: "t".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: cols
            .iter()
            .enumerate()
            .map(|(i, (n, o))| SchemaColumn {
                attnum: i as i16 + 1,
                name: (*n).into(),
                type_oid: *o,
                not_null: true,
            })
            .collect(),
        primary_key: key.iter().map(|k| k.to_string()).collect(),
        identity: Ok(IdentityDef {
            domain: Domain::ScanKey,
            index: Some("t_pkey".into()),
            primary: true,
            fields: key
                .iter()
                .map(|k| IdentityField {
                    column: (*k).into(),
                    type_oid: 20,
                    shape: Shape::Scalar(TypeTag::Int8),
                })
                .collect(),
        }),
    }
}

fn relation(key: &[&str]) -> Message {
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

fn int8(v: i64) -> Column {
    Column::Binary(Bytes::copy_from_slice(&v.to_be_bytes()))
}

/// A stream of 12 transactions on `t`: inserts, updates that keep or change the key,
/// deletes, and in transaction 6 the primary key moves from (id) to (id, v) mid-transaction
/// (the schema message, then the relation described again).
/// Each message with the LSN it starts at.
fn stream() -> Vec<(Lsn, Bytes)> {
    let mut msgs = Vec::new();
    let mut lsn = 0x1000u64;
    let mut push = |m: Message, msgs: &mut Vec<(Lsn, Bytes)>| {
        msgs.push((Lsn(lsn), encode(&m)));
        lsn += 0x40;
    };
    let mut key: &[&str] = &["id"];
    for t in 0..12i64 {
        let commit_lsn = 0x1_0000 * (t as u64 + 1);
        push(
            Message::Begin {
                final_lsn: commit_lsn,
                commit_ts: t * 1_000_000,
                xid: 700 + t as u32,
            },
            &mut msgs,
        );
        // A new walsender session describes each relation again before its first change;
        // sending it in every transaction makes every resend point faithful.
        push(relation(key), &mut msgs);
        for i in 0..4i64 {
            let id = t * 10 + i;
            push(
                Message::Insert {
                    xid: None,
                    relid: T,
                    new: vec![int8(id), int8(i)],
                },
                &mut msgs,
            );
            if t == 6 && i == 1 {
                key = &["id", "v"];
                let content = SchemaMessage::Schema(schema(key)).to_json().to_string();
                push(
                    Message::Message {
                        xid: None,
                        transactional: true,
                        lsn: 0,
                        prefix: MESSAGE_PREFIX.into(),
                        content: Bytes::from(content),
                    },
                    &mut msgs,
                );
                push(relation(key), &mut msgs);
            }
        }
        let old_key = |id: i64, v: i64| {
            if key.len() == 1 {
                OldTuple::Key(vec![int8(id), Column::Null])
            } else {
                OldTuple::Key(vec![int8(id), int8(v)])
            }
        };
        push(
            Message::Update {
                xid: None,
                relid: T,
                old: Some(old_key(t * 10, 0)),
                new: vec![int8(t * 10 + 5), int8(0)],
            },
            &mut msgs,
        );
        push(
            Message::Delete {
                xid: None,
                relid: T,
                old: old_key(t * 10 + 1, 1),
            },
            &mut msgs,
        );
        push(
            Message::Commit(CommitInfo {
                flags: 0,
                commit_lsn,
                end_lsn: commit_lsn + 0x30,
                commit_ts: t * 1_000_000,
            }),
            &mut msgs,
        );
    }
    msgs
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d =
            std::env::temp_dir().join(format!("rowid-cdc-restart-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn initial_state() -> State {
    State {
        slot: "s".into(),
        publication: "p".into(),
        commit_lsn: Lsn::ZERO,
        end_lsn: Lsn::ZERO,
        sink_len: None,
        schemas: vec![schema(&["id"])],
    }
}

/// What a restart does: the state file (or the initial state), the sink cut to it, capture
/// resuming after its commit.
fn open(dir: &Path) -> Pipeline<JsonlFile> {
    let state_path = dir.join("cdc.state");
    let state = State::load(&state_path)
        .unwrap()
        .unwrap_or_else(initial_state);
    let sink = JsonlFile::open(&dir.join("out.jsonl"), state.sink_len).unwrap();
    let capture = Capture::new(state.schemas.clone(), state.commit_lsn, FlagBits::default());
    Pipeline::new(capture, sink, state, Some(state_path)).unwrap()
}

/// The server resends every transaction whose commit ends after the acknowledged position.
fn resend_from(stream: &[(Lsn, Bytes)], acked: Lsn) -> usize {
    let mut start = 0;
    let mut begin = 0;
    for (i, (_, bytes)) in stream.iter().enumerate() {
        match bytes.first() {
            Some(b'B') => begin = i,
            Some(b'C') => {
                let end = u64::from_be_bytes(bytes[10..18].try_into().unwrap());
                if Lsn(end) <= acked {
                    start = i + 1;
                }
            }
            _ => {}
        }
    }
    let _ = begin;
    start
}

fn run_to_end(dir: &Path, stream: &[(Lsn, Bytes)]) -> u64 {
    let mut p = open(dir);
    // Reopened, the file holds exactly what the state accounts for: a reader never sees
    // lines of a transaction that did not commit.
    let on_disk = std::fs::metadata(dir.join("out.jsonl")).unwrap().len();
    assert_eq!(Some(on_disk), p.state().sink_len);
    let from = resend_from(stream, p.state().end_lsn);
    for (lsn, bytes) in &stream[from..] {
        p.message(*lsn, bytes.clone()).unwrap();
    }
    p.progress().changes
}

#[test]
fn a_restart_after_any_message_loses_and_repeats_nothing() {
    let stream = stream();
    let reference = Dir::new("reference");
    assert_eq!(run_to_end(&reference.0, &stream), 12 * 6);
    let want = std::fs::read_to_string(reference.0.join("out.jsonl")).unwrap();
    assert_eq!(want.lines().count(), 72);
    assert!(
        want.contains(r#""key":["id","v"]"#),
        "the key changed mid-stream"
    );

    for crash_at in 1..stream.len() {
        let dir = Dir::new(&format!("crash{crash_at}"));
        {
            // Killed after `crash_at` messages (the buffered tail is what a kill can leave:
            // lines of a transaction that never committed).
            let mut p = open(&dir.0);
            for (lsn, bytes) in &stream[..crash_at] {
                p.message(*lsn, bytes.clone()).unwrap();
            }
        }
        run_to_end(&dir.0, &stream);
        let got = std::fs::read_to_string(dir.0.join("out.jsonl")).unwrap();
        assert_eq!(got, want, "killed after message {crash_at}");
    }
}

#[test]
fn a_crash_between_the_sink_fsync_and_the_state_rename_repeats_nothing() {
    let stream = stream();
    let reference = Dir::new("reference2");
    run_to_end(&reference.0, &stream);
    let want = std::fs::read_to_string(reference.0.join("out.jsonl")).unwrap();

    let commits: Vec<usize> = stream
        .iter()
        .enumerate()
        .filter(|(_, (_, b))| b.first() == Some(&b'C'))
        .map(|(i, _)| i)
        .collect();
    for &c in &commits {
        let dir = Dir::new(&format!("rename{c}"));
        let state_path = dir.0.join("cdc.state");
        {
            let mut p = open(&dir.0);
            for (lsn, bytes) in &stream[..c] {
                p.message(*lsn, bytes.clone()).unwrap();
            }
            let before = std::fs::read(&state_path).unwrap();
            // The commit: the sink fsyncs, the state is renamed ... and the rename is lost.
            p.message(stream[c].0, stream[c].1.clone()).unwrap();
            std::fs::write(&state_path, before).unwrap();
        }
        run_to_end(&dir.0, &stream);
        let got = std::fs::read_to_string(dir.0.join("out.jsonl")).unwrap();
        assert_eq!(got, want, "state rename lost at commit message {c}");
    }
}

#[test]
fn the_server_may_resend_acknowledged_transactions() {
    // The acknowledgement may not have reached the server: it resends from the beginning.
    let stream = stream();
    let dir = Dir::new("resend");
    run_to_end(&dir.0, &stream);
    let once = std::fs::read_to_string(dir.0.join("out.jsonl")).unwrap();
    let mut p = open(&dir.0);
    for (lsn, bytes) in &stream {
        p.message(*lsn, bytes.clone()).unwrap();
    }
    assert_eq!(p.progress().changes, 0);
    drop(p);
    assert_eq!(
        std::fs::read_to_string(dir.0.join("out.jsonl")).unwrap(),
        once
    );
}
