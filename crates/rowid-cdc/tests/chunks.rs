//! Chunked snapshots through the pipeline, deterministically (no server): a chunk read under a
//! known transaction snapshot, then transactions the snapshot saw and did not see, changes
//! inside and outside the chunk's range, key changes across the cursor, a watermark with a
//! foreign nonce and the chunk's own. What reaches the sink is each change's effect on the
//! rows already delivered, with the chunk's rows exactly where its snapshot falls.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod pipeline_kit;

use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use pipeline_kit::{IDENTITY_TABLE, Stream, T, insert, int8, schema, state, update};
use rowid_cdc::chunks::{ChunkCursor, ChunkRead, TxnSnapshot, WATERMARK_PREFIX};
use rowid_cdc::sink::{Durable, Sink};
use rowid_cdc::{ChangeEvent, Lsn, Op, identity_rows};
use rowid_pgoutput::{Column, OldTuple};
use rowid_pgoutput::{CommitInfo, Message, encode};

/// The events the pipeline delivered, in order, as (op, old id, new id, new v).
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<ChangeEvent>>>);

impl Sink for Collect {
    fn change(&mut self, event: &ChangeEvent) -> io::Result<()> {
        self.0.lock().unwrap().push(event.clone());
        Ok(())
    }
    fn commit(&mut self) -> io::Result<Durable> {
        Ok(Durable::default())
    }
    fn durable(&self) -> Durable {
        Durable::default()
    }
}

/// The key (int8) of an identity: its last 8 payload bytes before the terminator, sign
/// flipped back (wire-format §3).
fn key_of(id: &Option<Vec<u8>>) -> Option<i64> {
    let id = id.as_ref()?;
    let n = id.len();
    let mut b = [0u8; 8];
    b.copy_from_slice(&id[n - 9..n - 1]);
    b[0] ^= 0x80;
    Some(i64::from_be_bytes(b))
}

impl Stream<Collect> {
    /// A pipeline into `sink` whose state has `t` to snapshot in chunks, nothing delivered.
    fn new(sink: &Collect) -> Stream<Collect> {
        Stream::start(sink.clone(), state(vec![ChunkCursor::from_start(T)]), None)
    }

    fn watermark(&mut self, nonce: &str) -> Option<Lsn> {
        self.lsn += 0x40;
        self.pipe
            .apply(
                Lsn(self.lsn),
                Message::Message {
                    xid: None,
                    transactional: false,
                    lsn: self.lsn,
                    prefix: WATERMARK_PREFIX.into(),
                    content: Bytes::copy_from_slice(nonce.as_bytes()),
                },
            )
            .unwrap()
    }
}

impl Stream<Collect> {
    /// Reads the chunk the pipeline asks for as `rows` (ids) under `snapshot`, watermark
    /// `nonce`.
    fn open(&mut self, nonce: &str, snapshot: &str, rows: &[i64], last_chunk: bool) {
        let opened = self.try_open(nonce, snapshot, rows, &[], last_chunk);
        assert_eq!(opened, None, "the chunk opens");
    }

    /// As [`Stream::open`], the pending keys' rows the read found being `pending` (ids);
    /// the transaction the snapshot does not see when the chunk is not opened.
    fn try_open(
        &mut self,
        nonce: &str,
        snapshot: &str,
        rows: &[i64],
        pending: &[i64],
        last_chunk: bool,
    ) -> Option<u32> {
        let request = self.pipe.chunk_request().expect("a chunk to read");
        let row = |&id: &i64| vec![int8(id), int8(id)];
        self.pipe
            .open_chunk(
                &request,
                ChunkRead {
                    relid: T,
                    nonce: nonce.into(),
                    snapshot: TxnSnapshot::parse(snapshot).unwrap(),
                    ts: 0,
                    rows: rows.iter().map(row).collect(),
                    pending_rows: pending.iter().map(row).collect(),
                    last_chunk,
                },
            )
            .unwrap()
            .map(|unseen| unseen.xid)
    }
}

#[test]
fn a_chunk_lands_where_its_snapshot_falls_and_changes_arrive_as_their_effect() {
    let sink = Collect::default();
    let mut s = Stream::new(&sink);

    let request = s.pipe.chunk_request().expect("a chunk to read");
    assert_eq!(
        (request.columns.clone(), request.key.clone()),
        (vec!["id".to_string(), "v".into()], vec!["id".to_string()])
    );
    assert_eq!(request.after, None);
    // Rows 1..=5 as read under a snapshot that saw every transaction below 103 but 101.
    s.pipe
        .open_chunk(
            &request,
            ChunkRead {
                relid: T,
                nonce: "n1".into(),
                snapshot: TxnSnapshot::parse("100:103:101").unwrap(),
                ts: 0,
                rows: (1..=5).map(|id| vec![int8(id), int8(id * 100)]).collect(),
                pending_rows: vec![],
                last_chunk: false,
            },
        )
        .unwrap();
    assert!(s.pipe.chunk_request().is_none(), "one chunk at a time");
    // Seen by the snapshot: in the chunk's range, its effect is in the chunk (dropped);
    // above it, a later chunk holds it (dropped).
    s.txn(99, vec![update(3, 3, 7), insert(10, 1)]);
    assert!(
        sink.0.lock().unwrap().is_empty(),
        "nothing before the chunk"
    );
    // Not seen: the chunk comes first, then the change, now within the delivered rows.
    s.txn(101, vec![update(2, 2, 9)]);
    // Seen, but arriving after the chunk (its commit record after 101's): already in it.
    s.txn(102, vec![update(4, 4, 8)]);
    // Not seen: a key moved out of the delivered rows arrives as the delete of the old row;
    // an insert within them passes; a key moved into them as the insert of the new row; a
    // change entirely above them is dropped.
    s.txn(
        104,
        vec![
            update(5, 50, 1),
            insert(0, 1),
            update(70, -1, 1),
            update(80, 90, 1),
        ],
    );
    assert_eq!(
        s.watermark("not ours"),
        None,
        "a foreign watermark is ignored"
    );
    assert!(
        s.watermark("n1").is_some(),
        "the chunk's watermark closes it"
    );
    let got: Vec<(Op, Option<i64>, Option<i64>)> = sink
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|e| (e.op, key_of(&e.old_id), key_of(&e.new_id)))
        .collect();
    assert_eq!(
        got,
        vec![
            (Op::Truncate, None, None),
            (Op::Snapshot, None, Some(1)),
            (Op::Snapshot, None, Some(2)),
            (Op::Snapshot, None, Some(3)),
            (Op::Snapshot, None, Some(4)),
            (Op::Snapshot, None, Some(5)),
            (Op::Update, Some(2), Some(2)),
            (Op::Delete, Some(5), None),
            (Op::Insert, None, Some(0)),
            (Op::Insert, None, Some(-1)),
        ]
    );
    // The table's first chunk opens with a truncate of it, outside any transaction like
    // the rows; they are delivered at the position of the change they precede.
    let events = sink.0.lock().unwrap().clone();
    assert_eq!((events[0].relid, events[0].xid), (T, 0));
    assert_eq!(events[0].commit_lsn, events[6].commit_lsn);
    assert_eq!(events[1].commit_lsn, events[6].commit_lsn);
    // The cursor moved to the chunk's last row; the next chunk starts after its key.
    let next = s.pipe.chunk_request().expect("the next chunk");
    assert_eq!(
        next.after,
        Some(vec![Some(Bytes::copy_from_slice(&5i64.to_be_bytes()))])
    );
    assert_eq!(
        s.pipe.state().chunks.cursors[0]
            .view
            .after
            .as_ref()
            .map(|a| a.identity.clone()),
        events[5].new_id
    );
}

/// Only a table's first chunk opens with a truncate (what a consumer held of the table is
/// replaced by the snapshot: a replica being repaired, a table read again); a first chunk
/// without rows is that truncate alone, made durable at its watermark.
#[test]
fn only_a_tables_first_chunk_opens_with_a_truncate() {
    let ops = |sink: &Collect| -> Vec<(Op, Option<i64>)> {
        sink.0
            .lock()
            .unwrap()
            .iter()
            .map(|e| (e.op, key_of(&e.new_id)))
            .collect()
    };
    let sink = Collect::default();
    let mut s = Stream::new(&sink);
    s.open("a", "50:50:", &[1, 2], false);
    s.watermark("a").unwrap();
    s.open("b", "50:50:", &[3], true);
    s.watermark("b").unwrap();
    assert_eq!(
        ops(&sink),
        vec![
            (Op::Truncate, None),
            (Op::Snapshot, Some(1)),
            (Op::Snapshot, Some(2)),
            (Op::Snapshot, Some(3)),
        ]
    );

    let empty = Collect::default();
    let mut s = Stream::new(&empty);
    s.open("c", "50:50:", &[], true);
    let ack = s.watermark("c").unwrap();
    assert_eq!(ops(&empty), vec![(Op::Truncate, None)]);
    assert_eq!(s.pipe.state().end_lsn, ack);
    assert!(s.pipe.state().chunks.cursors[0].done);
}

#[test]
fn a_chunk_nobody_missed_is_delivered_at_its_watermark() {
    let sink = Collect::default();
    let mut s = Stream::new(&sink);
    s.open("n2", "50:50:", &[1], true);
    s.txn(40, vec![update(1, 1, 1)]);
    assert!(sink.0.lock().unwrap().is_empty());
    let ack = s.watermark("n2").unwrap();
    assert_eq!(sink.0.lock().unwrap().len(), 2, "the truncate and the row");
    assert_eq!(s.pipe.state().end_lsn, ack);
    assert!(
        s.pipe.state().chunks.cursors[0].done,
        "the last chunk ends the table's snapshot"
    );
    assert!(s.pipe.chunk_request().is_none());
    // From now on the table's changes pass.
    s.txn(60, vec![update(1, 1, 2)]);
    assert_eq!(sink.0.lock().unwrap().len(), 3);
}

/// A key changed (its identity schema row names another key) after a chunk was delivered:
/// the cursor is an identity of the old key, so the run stops, naming the table and the fix,
/// before the transaction reaches the sink; a key change before any chunk was delivered, or
/// a shape change that keeps the key, goes on.
#[test]
fn a_key_changed_during_the_chunks_stops_naming_the_table() {
    let sink = Collect::default();
    let mut s = Stream::new(&sink);
    s.open("n3", "50:50:", &[1, 2], false);
    assert!(s.watermark("n3").is_some());
    // The same key under new column names (the key's too): goes on.
    let mut renamed = schema();
    renamed.columns[0].name = "ident".into();
    renamed.columns[1].name = "w".into();
    renamed.primary_key = vec!["ident".into()];
    if let Ok(def) = &mut renamed.identity {
        def.fields[0].column = "ident".into();
    }
    s.txn(
        60,
        vec![
            identity_rows::relation(IDENTITY_TABLE),
            identity_rows::upsert(IDENTITY_TABLE, &renamed),
        ],
    );
    let mut rekeyed = renamed.clone();
    if let Ok(def) = &mut rekeyed.identity {
        def.fields[0].column = "w".into();
    }
    let delivered = sink.0.lock().unwrap().len();
    s.lsn += 0x40;
    let commit_lsn = s.lsn + 0x1000;
    for m in [
        Message::Begin {
            final_lsn: commit_lsn,
            commit_ts: 0,
            xid: 61,
        },
        identity_rows::relation(IDENTITY_TABLE),
        identity_rows::upsert(IDENTITY_TABLE, &rekeyed),
    ] {
        s.send(m);
    }
    s.lsn += 0x40;
    let err = s
        .pipe
        .message(
            Lsn(s.lsn),
            encode(&Message::Commit(CommitInfo {
                flags: 0,
                commit_lsn,
                end_lsn: commit_lsn + 0x30,
                commit_ts: 0,
            })),
        )
        .expect_err("a key change during the chunks");
    let message = err.to_string();
    assert!(
        message
            .contains("public.t: its key changed during its chunked snapshot (was (id), now (w))")
            && message.contains("--snapshot-table public.t"),
        "{message}"
    );
    assert_eq!(
        sink.0.lock().unwrap().len(),
        delivered,
        "nothing more delivered"
    );
}

/// The events the sink got, as (op, old key, new key).
fn keys(sink: &Collect) -> Vec<(Op, Option<i64>, Option<i64>)> {
    sink.0
        .lock()
        .unwrap()
        .iter()
        .map(|e| (e.op, key_of(&e.old_id), key_of(&e.new_id)))
        .collect()
}

/// Issue 33 item 1: a transaction the stream delivered (its insert above the cursor dropped,
/// "the chunk will hold it") that the next chunk's snapshot does not see yet (its commit
/// waiting for a synchronous standby keeps it among the running transactions) must not be
/// lost: the chunk is not opened until a snapshot sees it.
#[test]
fn a_chunk_whose_snapshot_misses_a_delivered_transaction_is_read_again() {
    let sink = Collect::default();
    let mut s = Stream::new(&sink);
    s.open("a", "100:100:", &[1, 2], false);
    s.watermark("a").unwrap();
    // Committed and decoded; its row is above the cursor: dropped.
    s.txn(104, vec![insert(80, 1)]);
    assert_eq!(keys(&sink).len(), 3, "the truncate and two rows, not 80");
    // A snapshot that still counts 104 as running does not have row 80.
    assert_eq!(s.try_open("b", "104:106:104", &[], &[], true), Some(104));
    assert!(
        s.watermark("b").is_none(),
        "nothing was opened: its watermark is foreign"
    );
    // Once 104 is visible, the chunk holds row 80.
    s.open("c", "106:106:", &[80], true);
    s.watermark("c").unwrap();
    assert_eq!(
        keys(&sink).last(),
        Some(&(Op::Snapshot, None, Some(80))),
        "row 80 arrives once, with the chunk that sees it"
    );
    assert!(s.pipe.state().chunks.cursors[0].done);
}

/// Issue 33 item 2: under REPLICA IDENTITY DEFAULT an update that moves a row's key from
/// above the cursor into the rows delivered, leaving its TOASTed value alone, carries no
/// value for that column (`u`): it is not delivered as an insert without it; the key is
/// read again by the next chunk, whose row has every value.
#[test]
fn a_key_moved_into_the_view_without_its_toasted_value_is_read_again_by_key() {
    let sink = Collect::default();
    let mut s = Stream::new(&sink);
    s.open("a", "100:100:", &[10, 20], false);
    s.watermark("a").unwrap();
    let moved = Message::Update {
        xid: None,
        relid: T,
        old: Some(OldTuple::Key(vec![int8(70), Column::Null])),
        new: vec![int8(5), Column::UnchangedToast],
    };
    s.txn(110, vec![moved]);
    assert_eq!(keys(&sink).len(), 3, "nothing delivered for the moved row");
    let request = s.pipe.chunk_request().expect("the next chunk");
    assert_eq!(request.pending.len(), 1, "key 5 is read again");
    assert_eq!(
        request.pending[0].key,
        vec![Some(Bytes::copy_from_slice(&5i64.to_be_bytes()))]
    );
    // Changes of key 5 before the chunk are its effect: dropped.
    s.txn(111, vec![update(5, 5, 9)]);
    assert_eq!(keys(&sink).len(), 3);
    assert_eq!(s.try_open("b", "112:112:", &[30], &[5], true), None);
    s.watermark("b").unwrap();
    let got = keys(&sink);
    assert_eq!(
        &got[3..],
        &[
            (Op::Snapshot, None, Some(30)),
            (Op::Snapshot, None, Some(5))
        ]
    );
    let events = sink.0.lock().unwrap().clone();
    assert!(
        events.iter().all(|e| e.unchanged_toast.is_empty()),
        "no event lacks a value"
    );
    assert!(s.pipe.state().chunks.cursors[0].done);
    // In the view now: its changes pass.
    s.txn(113, vec![update(5, 5, 10)]);
    assert_eq!(keys(&sink).last(), Some(&(Op::Update, Some(5), Some(5))));
}

/// Issue 33 item 7: a run killed after a chunk was delivered (at the first change its
/// snapshot did not see) and before its watermark resumes routing as it would have gone on:
/// a transaction the snapshot saw whose commit record arrives after that change is in the
/// chunk, and is not delivered again.
#[test]
fn a_restart_between_a_chunks_delivery_and_its_watermark_keeps_its_snapshot() {
    let dir = std::env::temp_dir().join(format!("rowid-cdc-chunks-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("cdc.state");
    let sink = Collect::default();
    let state = state(vec![ChunkCursor::from_start(T)]);
    let mut s = Stream::start(sink.clone(), state, Some(path.clone()));
    s.open("n", "100:103:101", &[1, 2, 3, 4, 5], false);
    // 101 is not seen: the chunk is delivered before it, and recorded with it.
    s.txn(101, vec![update(2, 2, 9)]);
    let delivered = keys(&sink).len();
    assert_eq!(delivered, 7, "truncate, five rows, the update");
    // Killed here; the next run resumes from the state file.
    let resumed = rowid_cdc::state::State::load(&path).unwrap().unwrap();
    assert!(
        resumed.chunks.delivered.is_some(),
        "the delivered chunk is recorded"
    );
    let mut s = Stream::start(sink.clone(), resumed, Some(path.clone()));
    s.lsn += 0x2000;
    // 102 was seen by the chunk's snapshot (its row 4 is in it); its commit record comes
    // after 101's. Delivering it again would hold row 4 twice for an insert.
    s.txn(102, vec![insert(4, 4)]);
    assert_eq!(keys(&sink).len(), delivered, "102 is in the chunk");
    assert!(
        s.watermark("n").is_some(),
        "the recorded watermark closes the chunk"
    );
    s.txn(120, vec![update(3, 3, 1)]);
    assert_eq!(keys(&sink).last(), Some(&(Op::Update, Some(3), Some(3))));
    let _ = std::fs::remove_dir_all(&dir);
}
