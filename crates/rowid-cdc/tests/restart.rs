//! Nothing lost, nothing twice: a pipeline killed at every message of a stream (mid
//! transaction, and between the sink's commit and the state file's rename) and restarted from
//! its state file, with the server resending from the last acknowledgement, leaves exactly
//! what an uninterrupted run leaves: the same lines in a JSON-lines file, the same rows in a
//! PostgreSQL change buffer (those tests need a server: `cargo xtask test` runs them).

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod pipeline_kit;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use rowid_cdc::capture::Capture;
use rowid_cdc::identity_rows;
use rowid_cdc::pipeline::Pipeline;
use rowid_cdc::sink::postgres::{PostgresSink, Target};
use rowid_cdc::sink::{JsonlFile, Sink};
use rowid_cdc::state::State;
use rowid_cdc::{Lsn, RelationSchema, ReplicaIdentity};
use rowid_codec::structure::Shape;
use rowid_codec::{Domain, TypeTag};
use rowid_pgoutput::{Column, CommitInfo, FlagBits, Message, OldTuple, encode};
use rowid_registry::schema_message::{IdentityDef, IdentityField, Rewrite, SchemaColumn};
use rowid_registry::sql::QualifiedName;
use rowid_testkit::psql::Psql;

use pipeline_kit::{T, relation};
/// The identity schema table's OID.
const SCHEMAS: u32 = 16300;

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
                type_name: None,
                not_null: true,
                shape: None,
                missing: None,
                missing_without_send_form: false,
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
            max_len: None,
            enums: vec![],
        }),
        rewritten: Rewrite::Unknown,
        stored: None,
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
                push(identity_rows::relation(SCHEMAS), &mut msgs);
                push(identity_rows::upsert(SCHEMAS, &schema(key)), &mut msgs);
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
        identity_table: SCHEMAS,
        sink: None,
        schemas: vec![schema(&["id"])],
        snapshot: None,
        chunks: Default::default(),
    }
}

/// A sink under test: how a restart opens it, and what it holds.
trait Fixture {
    /// Distinguishes the runs' directories (tests run in parallel).
    fn tag(&self) -> &str;
    /// Opens the sink of run `dir` given the state file's record (`None`: none yet).
    fn open(&self, dir: &Path, state: Option<&State>) -> Box<dyn Sink>;
    /// Everything the sink of run `dir` holds, as text.
    fn contents(&self, dir: &Path) -> String;
    /// The lines of the contents that are not changes: a change buffer marks the stream's
    /// key change with an `R` row (spec/change-buffer.md §1d).
    fn markers(&self) -> usize {
        0
    }
}

/// JSON lines in `out.jsonl` beside the state file.
struct FileSink;

impl Fixture for FileSink {
    fn tag(&self) -> &str {
        "file"
    }

    fn open(&self, dir: &Path, state: Option<&State>) -> Box<dyn Sink> {
        let sink = JsonlFile::open(&dir.join("out.jsonl"), state.and_then(|s| s.sink.as_ref()));
        Box::new(sink.unwrap())
    }

    fn contents(&self, dir: &Path) -> String {
        std::fs::read_to_string(dir.join("out.jsonl")).unwrap()
    }
}

/// A change buffer per run, named after its directory, in a database of the test server.
struct BufferSink {
    db: String,
    psql: Psql,
}

impl BufferSink {
    /// A database of its own (tests run in parallel).
    fn new(db: &str) -> BufferSink {
        BufferSink {
            db: db.into(),
            psql: Psql::fresh_database(db).unwrap(),
        }
    }

    fn buffer(dir: &Path) -> QualifiedName {
        let name = dir.file_name().unwrap().to_string_lossy().replace('-', "_");
        let name = name
            .rsplit_once("__")
            .map_or(name.as_str(), |(_, n)| n)
            .to_string();
        QualifiedName::new("restart", &name)
    }
}

impl Fixture for BufferSink {
    fn tag(&self) -> &str {
        &self.db
    }

    fn markers(&self) -> usize {
        1
    }

    fn open(&self, dir: &Path, state: Option<&State>) -> Box<dyn Sink> {
        let sink = PostgresSink::open(Target {
            config: self.psql.dsn().parse().unwrap(),
            buffer: Self::buffer(dir),
            slot: "s".into(),
            fresh: state.is_none(),
            source_database: None,
            in_source: false,
            wait: std::time::Duration::from_secs(10),
        });
        Box::new(sink.unwrap())
    }

    fn contents(&self, dir: &Path) -> String {
        // Every per-table buffer under the prefix, as one list.
        let prefix = Self::buffer(dir);
        let tables = self
            .psql
            .run(&format!(
                "SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = 'restart' AND c.relname ~ '^{}_[0-9]+$' ORDER BY 1;",
                prefix.name
            ))
            .unwrap();
        let selects: Vec<String> = tables
            .lines()
            .map(|t| {
                format!(
                    "SELECT xid, seq, source_relid, op, encode(__pgt_row_id, 'hex') AS n, \
                     encode(__pgt_old_row_id, 'hex') AS o, commit_lsn, change_lsn, \
                     row_identity_version, row_probe_version FROM {t}"
                )
            })
            .collect();
        if selects.is_empty() {
            return String::new();
        }
        self.psql
            .run(&format!(
                "{} ORDER BY commit_lsn, seq;",
                selects.join(" UNION ALL ")
            ))
            .unwrap()
    }
}

/// What a restart does: the state file (or the initial state), the sink opened at it (a
/// file cut to it, a buffer reporting what it holds beyond it), capture resuming after its
/// commit and replaying silently what the sink already holds.
fn open(fx: &dyn Fixture, dir: &Path) -> Pipeline<Box<dyn Sink>> {
    let state_path = dir.join("cdc.state");
    let saved = State::load(&state_path).unwrap();
    let sink = fx.open(dir, saved.as_ref());
    let state = saved.unwrap_or_else(initial_state);
    let capture = Capture::new(state.schemas.clone(), state.commit_lsn, FlagBits::default())
        .with_delivered(sink.delivered().unwrap_or(Lsn::ZERO))
        .with_identity_table(state.identity_table);
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

fn run_to_end(fx: &dyn Fixture, dir: &Path, stream: &[(Lsn, Bytes)]) -> u64 {
    let mut p = open(fx, dir);
    // Reopened, a file holds exactly what the state accounts for: a reader never sees
    // lines of a transaction that did not commit.
    if let Some(len) = p.state().sink.as_ref().and_then(|r| r["file_len"].as_u64()) {
        assert_eq!(std::fs::metadata(dir.join("out.jsonl")).unwrap().len(), len);
    }
    let from = resend_from(stream, p.state().end_lsn);
    for (lsn, bytes) in &stream[from..] {
        p.message(*lsn, bytes.clone()).unwrap();
    }
    p.progress().changes
}

fn a_restart_after_any_message_loses_and_repeats_nothing(fx: &dyn Fixture) {
    let stream = stream();
    let reference = Dir::new(&format!("{}__reference", fx.tag()));
    assert_eq!(run_to_end(fx, &reference.0, &stream), 12 * 6);
    let want = fx.contents(&reference.0);
    assert_eq!(want.lines().count(), 72 + fx.markers());

    for crash_at in 1..stream.len() {
        let dir = Dir::new(&format!("{}__crash{crash_at}", fx.tag()));
        {
            // Killed after `crash_at` messages (the buffered tail is what a kill can leave:
            // lines of a transaction that never committed).
            let mut p = open(fx, &dir.0);
            for (lsn, bytes) in &stream[..crash_at] {
                p.message(*lsn, bytes.clone()).unwrap();
            }
        }
        run_to_end(fx, &dir.0, &stream);
        assert_eq!(fx.contents(&dir.0), want, "killed after message {crash_at}");
    }
}

/// Indexes of the stream's Commit messages.
fn commits(stream: &[(Lsn, Bytes)]) -> Vec<usize> {
    stream
        .iter()
        .enumerate()
        .filter(|(_, (_, b))| b.first() == Some(&b'C'))
        .map(|(i, _)| i)
        .collect()
}

fn a_crash_between_the_sink_commit_and_the_state_rename_repeats_nothing(fx: &dyn Fixture) {
    let stream = stream();
    let reference = Dir::new(&format!("{}__reference2", fx.tag()));
    run_to_end(fx, &reference.0, &stream);
    let want = fx.contents(&reference.0);

    let commits = commits(&stream);
    for &c in &commits {
        let dir = Dir::new(&format!("{}__rename{c}", fx.tag()));
        let state_path = dir.0.join("cdc.state");
        {
            let mut p = open(fx, &dir.0);
            for (lsn, bytes) in &stream[..c] {
                p.message(*lsn, bytes.clone()).unwrap();
            }
            let before = std::fs::read(&state_path).unwrap();
            // The commit: the sink commits, the state is renamed ... and the rename is lost.
            p.message(stream[c].0, stream[c].1.clone()).unwrap();
            std::fs::write(&state_path, before).unwrap();
        }
        run_to_end(fx, &dir.0, &stream);
        assert_eq!(
            fx.contents(&dir.0),
            want,
            "state rename lost at commit message {c}"
        );
    }
}

fn the_server_may_resend_acknowledged_transactions(fx: &dyn Fixture) {
    // The acknowledgement may not have reached the server: it resends from the beginning.
    let stream = stream();
    let dir = Dir::new(&format!("{}__resend", fx.tag()));
    run_to_end(fx, &dir.0, &stream);
    let once = fx.contents(&dir.0);
    let mut p = open(fx, &dir.0);
    for (lsn, bytes) in &stream {
        p.message(*lsn, bytes.clone()).unwrap();
    }
    assert_eq!(p.progress().changes, 0);
    drop(p);
    assert_eq!(fx.contents(&dir.0), once);
}

#[test]
fn file_restart_after_any_message_loses_and_repeats_nothing() {
    a_restart_after_any_message_loses_and_repeats_nothing(&FileSink);
    let dir = Dir::new("file__keys");
    run_to_end(&FileSink, &dir.0, &stream());
    assert!(
        FileSink.contents(&dir.0).contains(r#""key":["id","v"]"#),
        "the key changed mid-stream"
    );
}

#[test]
fn file_crash_between_fsync_and_state_rename_repeats_nothing() {
    a_crash_between_the_sink_commit_and_the_state_rename_repeats_nothing(&FileSink);
}

#[test]
fn file_resent_transactions_are_skipped() {
    the_server_may_resend_acknowledged_transactions(&FileSink);
}

#[test]
#[ignore = "needs a PostgreSQL server: run through `cargo xtask test`"]
fn buffer_restart_after_any_message_loses_and_repeats_nothing() {
    a_restart_after_any_message_loses_and_repeats_nothing(&BufferSink::new("rowid_cdc_restart_a"));
}

#[test]
#[ignore = "needs a PostgreSQL server: run through `cargo xtask test`"]
fn buffer_crash_between_commit_and_state_rename_repeats_nothing() {
    let fx = BufferSink::new("rowid_cdc_restart_b");
    a_crash_between_the_sink_commit_and_the_state_rename_repeats_nothing(&fx);
    // Without the replay of what the buffer holds beyond the state, that crash repeats a
    // transaction: the sink's own position is what prevents it.
    let stream = stream();
    let dir = Dir::new("rowid_cdc_restart_b__no_replay");
    let state_path = dir.0.join("cdc.state");
    let commits = commits(&stream);
    {
        // The first transaction is recorded; the second commits in the buffer, and the
        // state's rename is lost.
        let mut p = open(&fx, &dir.0);
        for (lsn, bytes) in &stream[..=commits[0]] {
            p.message(*lsn, bytes.clone()).unwrap();
        }
        let before = std::fs::read(&state_path).unwrap();
        for (lsn, bytes) in &stream[commits[0] + 1..=commits[1]] {
            p.message(*lsn, bytes.clone()).unwrap();
        }
        std::fs::write(&state_path, before).unwrap();
    }
    let state = State::load(&state_path).unwrap().unwrap();
    let sink = fx.open(&dir.0, Some(&state));
    assert!(
        sink.delivered() > Some(state.commit_lsn),
        "the buffer is ahead"
    );
    let capture = Capture::new(state.schemas.clone(), state.commit_lsn, FlagBits::default())
        .with_identity_table(state.identity_table);
    let mut p = Pipeline::new(capture, sink, state, Some(state_path)).unwrap();
    for (lsn, bytes) in &stream {
        p.message(*lsn, bytes.clone()).unwrap();
    }
    drop(p);
    let rows = fx.contents(&dir.0);
    assert_eq!(
        rows.lines().count(),
        72 + fx.markers() + 6,
        "one transaction twice without the replay"
    );
}

#[test]
#[ignore = "needs a PostgreSQL server: run through `cargo xtask test`"]
fn buffer_resent_transactions_are_skipped() {
    the_server_may_resend_acknowledged_transactions(&BufferSink::new("rowid_cdc_restart_c"));
}
