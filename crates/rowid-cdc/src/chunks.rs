//! Snapshots of keyed tables in chunks while the stream runs (`--snapshot`, `--snapshot-table`),
//! exact by identity and by transaction visibility: the DBLog idea (a chunk read between
//! stream positions, reconciled with the changes around it) without its window guess.
//!
//! Data flow: the source side reads a chunk (the next rows in key order after the table's
//! cursor, in one `REPEATABLE READ` transaction whose snapshot it records), then writes a
//! high watermark (a non-transactional logical message carrying a random nonce) and hands the
//! chunk to the pipeline, which routes every change of the table through the cursor here:
//!
//! - **The cursor** is the identity of the last row delivered as a snapshot row; rows at or
//!   below it are in the consumer's view, rows above it are not yet. A change is delivered
//!   only as its effect on that view ([`Chunking::route`]): an update within the view passes,
//!   one that moves a row out of it arrives as the delete of the old row, one that moves a row
//!   into it as the insert of the new row, one entirely above it is dropped (the row's chunk,
//!   read later, holds its effect). Identity order is the key's order: only tables whose key
//!   types encode order-preservingly are chunked (the start checks decide).
//! - **A chunk is emitted exactly where its snapshot falls in the stream**: a transaction the
//!   chunk's snapshot sees committed before it (its effect is in the chunk), one it does not
//!   see commits after it. The chunk's rows are delivered before the first change of the
//!   table from a transaction the snapshot does not see, or at the high watermark, whichever
//!   comes first. Until the high watermark, every change from a transaction the snapshot saw
//!   is routed with the cursor from before the chunk (its effect in the chunk's range is
//!   dropped: the chunk holds it), also one that arrives after the chunk was delivered (a
//!   commit record can precede another transaction's in the WAL and still become visible
//!   later; every transaction the snapshot saw committed before the watermark was written).
//! - The cursor is recorded in the state file with the transaction that delivered the chunk,
//!   so a kill resumes at the last delivered chunk; a watermark with a nonce this process did
//!   not write (an older run's, anyone else's) is ignored.
//!
//! Invariant: for every key, the consumer receives nothing until the chunk holding it (a
//! snapshot row reflecting exactly the transactions its snapshot saw), then exactly the
//! changes after those. Replayed by identity, the union is the table at every later position:
//! no row missing, none twice.

use std::collections::HashSet;

use bytes::Bytes;
use rowid_pgoutput::Tuple;
use rowid_registry::schema_message::RelationSchema;

use crate::event::{ChangeEvent, Op};
use crate::lsn::Lsn;

/// The prefix of the high-watermark messages.
pub const WATERMARK_PREFIX: &str = "rowid-cdc.watermark";

/// A transaction snapshot as `pg_current_snapshot()` prints it (`xmin:xmax:xip,...`), 64-bit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnSnapshot {
    xmin: u64,
    xmax: u64,
    xip: HashSet<u64>,
}

impl TxnSnapshot {
    /// Parses `pg_current_snapshot()::text`.
    pub fn parse(text: &str) -> Option<TxnSnapshot> {
        let mut parts = text.trim().splitn(3, ':');
        let xmin = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let xip = match parts.next()? {
            "" => HashSet::new(),
            list => list
                .split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<HashSet<u64>>>()?,
        };
        (xmin <= xmax).then_some(TxnSnapshot { xmin, xmax, xip })
    }

    /// Whether a committed top-level transaction with the 32-bit id `xid` (pgoutput's) is
    /// visible to the snapshot: committed before it was taken.
    pub fn sees(&self, xid: u32) -> bool {
        let full = self.widen(xid);
        full < self.xmin || (full < self.xmax && !self.xip.contains(&full))
    }

    /// The 64-bit id of a recent 32-bit one (within 2^31 of `xmax`).
    fn widen(&self, xid: u32) -> u64 {
        let candidate = (self.xmax & !0xFFFF_FFFF) | u64::from(xid);
        if candidate > self.xmax.saturating_add(1 << 31) && candidate >= 1 << 32 {
            candidate - (1 << 32)
        } else if candidate.saturating_add(1 << 31) < self.xmax {
            candidate + (1 << 32)
        } else {
            candidate
        }
    }
}

/// Where one table's chunked snapshot stands (recorded in the state file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkCursor {
    /// `pg_class.oid` of the table.
    pub relid: u32,
    /// The last row delivered: its identity and its key columns' send forms (the next
    /// chunk's lower bound). `None`: none yet.
    pub after: Option<After>,
    /// Every row was delivered: the table's changes pass unrouted.
    pub done: bool,
}

impl ChunkCursor {
    /// A cursor before the first row of table `relid`: its chunks start from the beginning.
    pub fn from_start(relid: u32) -> Self {
        ChunkCursor {
            relid,
            after: None,
            done: false,
        }
    }
}

/// The last row a chunk delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct After {
    /// Its identity.
    pub identity: Vec<u8>,
    /// Its key columns' binary send forms, in key order.
    pub key: Vec<Option<Bytes>>,
}

/// A chunk read and waiting for its place in the stream, or delivered and waiting for its
/// high watermark.
#[derive(Debug)]
pub struct OpenChunk {
    /// The table.
    pub relid: u32,
    /// The high watermark's nonce.
    pub nonce: String,
    /// The snapshot the rows were read under.
    pub snapshot: TxnSnapshot,
    /// The rows as snapshot events, in key order; for the table's first chunk after the
    /// truncate that opens its snapshot.
    pub events: Vec<ChangeEvent>,
    /// The last row (the cursor once delivered); `None`: the chunk is empty.
    pub last: Option<After>,
    /// Fewer rows than asked for: the table ends with this chunk.
    pub last_chunk: bool,
}

/// An open chunk as [`Chunking`] keeps it.
#[derive(Debug)]
struct Waiting {
    chunk: OpenChunk,
    /// Delivered: the cursor before it (changes its snapshot saw are routed with that).
    before: Option<Option<After>>,
}

/// What the source side needs to read a table's next chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkRequest {
    /// `pg_class.oid` of the table.
    pub relid: u32,
    /// Its schema.
    pub namespace: String,
    /// Its name.
    pub relname: String,
    /// Its columns, in the order rows carry them.
    pub columns: Vec<String>,
    /// Its key's columns, in key order.
    pub key: Vec<String>,
    /// The last row delivered: its key columns' send forms (`None`: start at the first).
    pub after: Option<Vec<Option<Bytes>>>,
    /// Its identity schema as the stream stands: a chunk is read only under a snapshot that
    /// sees the table in this shape.
    pub schema: RelationSchema,
}

/// A chunk as the source side read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkRead {
    /// The table.
    pub relid: u32,
    /// The nonce of the high watermark written after the read.
    pub nonce: String,
    /// The snapshot the rows were read under.
    pub snapshot: TxnSnapshot,
    /// When they were read, PostgreSQL microseconds.
    pub ts: i64,
    /// The rows, in key order, one value per column of the request.
    pub rows: Vec<Tuple>,
    /// Fewer rows than the chunk size: the table ends here.
    pub last_chunk: bool,
}

/// A snapshot row of a chunk as delivered at `lsn` (where its snapshot falls in the stream).
pub fn at(mut row: ChangeEvent, lsn: Lsn) -> ChangeEvent {
    row.commit_lsn = lsn;
    row.lsn = lsn;
    row
}

/// What to deliver of a change of a table being snapshotted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// As it is.
    Pass,
    /// Nothing: its effect is above the cursor (a later chunk holds it).
    Drop,
    /// As the delete of its old row: it moved that row above the cursor.
    AsDelete,
    /// As the insert of its new row: it moved a row from above the cursor into the view.
    AsInsert,
}

/// The chunked snapshots of one run.
#[derive(Debug, Default)]
pub struct Chunking {
    cursors: Vec<ChunkCursor>,
    open: Option<Waiting>,
}

impl Chunking {
    /// Resumes from the state file's cursors.
    pub fn new(cursors: Vec<ChunkCursor>) -> Chunking {
        Chunking {
            cursors,
            open: None,
        }
    }

    /// The cursors, as the state file records them.
    pub fn cursors(&self) -> &[ChunkCursor] {
        &self.cursors
    }

    /// Marks a table's snapshot finished without rows (its identity schema is gone: dropped
    /// or no longer published).
    pub fn finish(&mut self, relid: u32) {
        if let Some(c) = self.cursors.iter_mut().find(|c| c.relid == relid) {
            c.done = true;
        }
    }

    /// Moves a table's cursor past rows delivered outside the stream (the initial copy at the
    /// slot's consistent point, which no stream change precedes): to `after` when given, and
    /// `done` when the table was copied whole.
    pub fn advance(&mut self, relid: u32, after: Option<After>, done: bool) {
        if let Some(c) = self.cursors.iter_mut().find(|c| c.relid == relid) {
            if after.is_some() {
                c.after = after;
            }
            c.done = done;
        }
    }

    /// The next table to read a chunk of, with its cursor, when no chunk is waiting.
    pub fn next(&self) -> Option<&ChunkCursor> {
        if self.open.is_some() {
            return None;
        }
        self.cursors.iter().find(|c| !c.done)
    }

    /// A chunk was read: it waits for its place in the stream.
    pub fn open(&mut self, chunk: OpenChunk) {
        self.open = Some(Waiting {
            chunk,
            before: None,
        });
    }

    /// Whether `nonce` is the open chunk's high watermark.
    pub fn is_watermark(&self, nonce: &str) -> bool {
        self.open.as_ref().is_some_and(|w| w.chunk.nonce == nonce)
    }

    /// Whether `event` comes after the waiting chunk's snapshot (a change of its table from a
    /// transaction the snapshot does not see) before the chunk was delivered: the chunk must
    /// be delivered first.
    pub fn chunk_due(&self, event: &ChangeEvent) -> bool {
        self.open.as_ref().is_some_and(|w| {
            w.before.is_none() && w.chunk.relid == event.relid && !w.chunk.snapshot.sees(event.xid)
        })
    }

    /// Whether the commit of transaction `xid`, which changed the identity schemas of the
    /// tables `changed`, comes after the waiting chunk's snapshot and changes its table's
    /// shape before the chunk was delivered: the chunk (read in the shape before) must be
    /// delivered first.
    pub fn schema_due(&self, xid: u32, changed: &[u32]) -> bool {
        self.open.as_ref().is_some_and(|w| {
            w.before.is_none() && changed.contains(&w.chunk.relid) && !w.chunk.snapshot.sees(xid)
        })
    }

    /// Delivers the open chunk (once): its rows, in key order, with its table's cursor moved
    /// past them. Empty when there is none or it was delivered.
    pub fn deliver(&mut self) -> Vec<ChangeEvent> {
        let Some(w) = self.open.as_mut() else {
            return Vec::new();
        };
        if w.before.is_some() {
            return Vec::new();
        }
        let Some(cursor) = self.cursors.iter_mut().find(|c| c.relid == w.chunk.relid) else {
            return Vec::new();
        };
        w.before = Some(cursor.after.clone());
        if let Some(last) = &w.chunk.last {
            cursor.after = Some(last.clone());
        }
        cursor.done = w.chunk.last_chunk;
        std::mem::take(&mut w.chunk.events)
    }

    /// The open chunk's high watermark arrived: every transaction its snapshot saw has been
    /// routed. Delivers it if that has not happened yet (returned), and closes it.
    pub fn close(&mut self) -> Vec<ChangeEvent> {
        let rows = self.deliver();
        self.open = None;
        rows
    }

    /// How a change is delivered given the cursor of its table (see the module's rules).
    pub fn route(&self, event: &ChangeEvent) -> Route {
        let Some(cursor) = self.cursors.iter().find(|c| c.relid == event.relid) else {
            return Route::Pass;
        };
        // A change the delivered chunk's snapshot saw is in the chunk: routed with the cursor
        // from before it.
        let after = match &self.open {
            Some(Waiting {
                chunk,
                before: Some(before),
            }) if chunk.relid == event.relid && chunk.snapshot.sees(event.xid) => before,
            _ if cursor.done => return Route::Pass,
            _ => &cursor.after,
        };
        let seen = |id: &Option<Vec<u8>>| match (after, id) {
            (Some(after), Some(id)) => id.as_slice() <= after.identity.as_slice(),
            _ => false,
        };
        match event.op {
            // A truncate empties the view; an unidentified change tells the consumer to
            // rebuild what it keeps of the table anyway.
            Op::Truncate | Op::Unidentified => Route::Pass,
            Op::Insert | Op::Snapshot if seen(&event.new_id) => Route::Pass,
            Op::Delete if seen(&event.old_id) => Route::Pass,
            Op::Update => match (seen(&event.old_id), seen(&event.new_id)) {
                (true, true) => Route::Pass,
                (true, false) => Route::AsDelete,
                (false, true) => Route::AsInsert,
                (false, false) => Route::Drop,
            },
            Op::Insert | Op::Snapshot | Op::Delete => Route::Drop,
        }
    }
}

/// `event` as the delete of its old row.
pub fn as_delete(event: &ChangeEvent) -> ChangeEvent {
    ChangeEvent {
        op: Op::Delete,
        new_id: None,
        new: None,
        backfilled: Vec::new(),
        unchanged_toast: Vec::new(),
        ..event.clone()
    }
}

/// `event` as the insert of its new row.
pub fn as_insert(event: &ChangeEvent) -> ChangeEvent {
    ChangeEvent {
        op: Op::Insert,
        old_id: None,
        old: None,
        old_kind: None,
        ..event.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lsn::Lsn;

    fn event(op: Op, xid: u32, old: Option<u8>, new: Option<u8>) -> ChangeEvent {
        ChangeEvent {
            commit_lsn: Lsn(1),
            lsn: Lsn(1),
            xid,
            commit_ts: 0,
            relid: 7,
            relation: "public.t".into(),
            op,
            columns: Arc::from([]),
            domain: None,
            key: Arc::from([]),
            old_id: old.map(|b| vec![1, b]),
            new_id: new.map(|b| vec![1, b]),
            old: None,
            old_kind: None,
            new: None,
            backfilled: vec![],
            unchanged_toast: vec![],
            unidentified: None,
            schema: None,
        }
    }

    fn chunking(after: Option<u8>) -> Chunking {
        Chunking::new(vec![ChunkCursor {
            relid: 7,
            after: after.map(|b| After {
                identity: vec![1, b],
                key: vec![],
            }),
            done: false,
        }])
    }

    #[test]
    fn changes_are_delivered_as_their_effect_on_the_view() {
        let c = chunking(Some(50));
        assert_eq!(c.route(&event(Op::Insert, 1, None, Some(50))), Route::Pass);
        assert_eq!(c.route(&event(Op::Insert, 1, None, Some(51))), Route::Drop);
        assert_eq!(c.route(&event(Op::Delete, 1, Some(3), None)), Route::Pass);
        assert_eq!(c.route(&event(Op::Delete, 1, Some(90), None)), Route::Drop);
        assert_eq!(
            c.route(&event(Op::Update, 1, Some(3), Some(4))),
            Route::Pass
        );
        assert_eq!(
            c.route(&event(Op::Update, 1, Some(3), Some(60))),
            Route::AsDelete
        );
        assert_eq!(
            c.route(&event(Op::Update, 1, Some(60), Some(3))),
            Route::AsInsert
        );
        assert_eq!(
            c.route(&event(Op::Update, 1, Some(60), Some(70))),
            Route::Drop
        );
        assert_eq!(c.route(&event(Op::Truncate, 1, None, None)), Route::Pass);
        // Nothing delivered yet: everything waits for its chunk.
        let c = chunking(None);
        assert_eq!(c.route(&event(Op::Insert, 1, None, Some(0))), Route::Drop);
        // Other tables pass.
        let mut other = event(Op::Insert, 1, None, Some(99));
        other.relid = 8;
        assert_eq!(c.route(&other), Route::Pass);
        let converted = as_delete(&event(Op::Update, 1, Some(3), Some(60)));
        assert_eq!((converted.op, converted.new_id), (Op::Delete, None));
        let converted = as_insert(&event(Op::Update, 1, Some(60), Some(3)));
        assert_eq!((converted.op, converted.old_id), (Op::Insert, None));
    }

    #[test]
    fn a_chunk_is_due_at_the_first_change_its_snapshot_does_not_see() {
        let mut c = chunking(None);
        c.open(OpenChunk {
            relid: 7,
            nonce: "n".into(),
            snapshot: TxnSnapshot::parse("100:105:101,103").unwrap(),
            events: vec![],
            last: Some(After {
                identity: vec![1, 40],
                key: vec![],
            }),
            last_chunk: false,
        });
        assert!(c.next().is_none(), "one chunk at a time");
        for seen in [99, 100 - 1, 102, 104] {
            assert!(
                !c.chunk_due(&event(Op::Insert, seen, None, Some(1))),
                "{seen}"
            );
        }
        for unseen in [101, 103, 105, 200] {
            assert!(
                c.chunk_due(&event(Op::Insert, unseen, None, Some(1))),
                "{unseen}"
            );
        }
        assert!(c.deliver().is_empty(), "an empty chunk delivers no row");
        assert_eq!(c.cursors()[0].after.as_ref().unwrap().identity, vec![1, 40]);
        assert!(!c.cursors()[0].done);
        assert!(
            !c.chunk_due(&event(Op::Insert, 200, None, Some(1))),
            "delivered once"
        );
        // Until the watermark, a change the snapshot saw is routed with the old cursor (its
        // effect is in the chunk); one it did not see, with the new one.
        assert_eq!(
            c.route(&event(Op::Insert, 102, None, Some(30))),
            Route::Drop
        );
        assert_eq!(
            c.route(&event(Op::Insert, 200, None, Some(30))),
            Route::Pass
        );
        assert!(c.is_watermark("n") && !c.is_watermark("m"));
        assert!(c.next().is_none(), "the next chunk waits for the watermark");
        assert!(c.close().is_empty());
        assert_eq!(
            c.route(&event(Op::Insert, 102, None, Some(30))),
            Route::Pass
        );
        assert_eq!(c.next().map(|c| c.relid), Some(7));
    }

    #[test]
    fn snapshots_parse_and_widen_across_an_epoch() {
        assert_eq!(TxnSnapshot::parse("5:4:"), None);
        assert_eq!(TxnSnapshot::parse("x:4:"), None);
        let s = TxnSnapshot::parse("4294967290:4294967300:4294967295").unwrap();
        // 32-bit 4294967294 is epoch 0 (below xmin): seen; 4294967295 in progress; 3 is
        // epoch 1's 4294967299 (below xmax, not in progress): seen; 5 is above xmax.
        assert!(s.sees(4_294_967_294));
        assert!(!s.sees(4_294_967_295));
        assert!(s.sees(3));
        assert!(!s.sees(5));
    }
}
