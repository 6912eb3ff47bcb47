//! Snapshots of keyed tables in chunks while the stream runs (`--snapshot`, `--snapshot-table`),
//! exact by identity and by transaction visibility: the DBLog idea (a chunk read between
//! stream positions, reconciled with the changes around it) without its window guess.
//!
//! Data flow: the source side reads a chunk (the next rows in key order after the table's
//! cursor, and the rows of its pending keys, in one `REPEATABLE READ` transaction whose
//! snapshot it records), then writes a high watermark (a non-transactional logical message
//! carrying a random nonce) and hands the chunk to the pipeline, which routes every change of
//! the table through the table's view here:
//!
//! - **The view** is what the consumer holds of the table: the rows at or below the cursor
//!   (the identity of the last row a chunk delivered), but the *pending* keys. A change is
//!   delivered only as its effect on the view ([`Chunking::route`]): an update within the view
//!   passes, one that moves a row out of it arrives as the delete of the old row, one that
//!   moves a row into it as the insert of the new row, one entirely outside it is dropped (the
//!   row's chunk, read later, holds its effect). A row moved into the view whose after-image
//!   the stream could not complete (an unchanged TOASTed value under REPLICA IDENTITY DEFAULT
//!   or USING INDEX, which the consumer never had) is not delivered as an insert without that
//!   value: its key becomes *pending*, outside the view, and the next chunk reads it by key.
//!   Identity order is the key's order: only tables whose key types encode
//!   order-preservingly are chunked (the start checks decide).
//! - **A chunk is emitted exactly where its snapshot falls in the stream**: a transaction the
//!   chunk's snapshot sees committed before it (its effect is in the chunk), one it does not
//!   see commits after it. The chunk's rows are delivered before the first change of the
//!   table from a transaction the snapshot does not see, or at the high watermark, whichever
//!   comes first. Until the high watermark, every change from a transaction the snapshot saw
//!   is routed with the view from before the chunk (its effect in what the chunk read is
//!   dropped: the chunk holds it), also one that arrives after the chunk was delivered (a
//!   commit record can precede another transaction's in the WAL and still become visible
//!   later; every transaction the snapshot saw committed before the watermark was written).
//! - **A chunk's snapshot sees every transaction the stream delivered before it.** A commit
//!   record is decoded (and its changes delivered, those outside the view dropped as "a later
//!   chunk holds them") before the committing session leaves the server's list of running
//!   transactions: a commit waiting for a synchronous standby stays invisible to new snapshots
//!   for as long as it waits. So the stream records, per table, the transactions it delivered
//!   with a change of the table ([`ChunkCursor::unconfirmed`]); a chunk whose snapshot does
//!   not see one of them is not opened, and read again later ([`Chunking::open`]). A snapshot
//!   that sees a transaction proves every later snapshot sees it: seen ones are forgotten.
//! - Everything above is recorded ([`ChunkState`], in the state file with each transaction
//!   and, for a sink that can be ahead of the state file, in the sink's own commit): the
//!   cursors, pending keys and unconfirmed transactions, and a chunk delivered whose watermark
//!   has not arrived yet (its snapshot and the view before it), so a kill at any point
//!   resumes routing exactly as the run would have gone on. A chunk read but not delivered is
//!   read again; a watermark with a nonce this run did not write, or record, is ignored.
//!
//! Invariant: for every key, the consumer receives nothing until a chunk holding it (a
//! snapshot row reflecting exactly the transactions its snapshot saw), then exactly the
//! changes after those. Replayed by identity, the union is the table at every later position:
//! no row missing, none twice, no value the source's row does not hold.

pub mod record;

use std::collections::HashSet;
use std::fmt;

use bytes::Bytes;
use rowid_pgoutput::Tuple;
use rowid_registry::schema_message::RelationSchema;

pub use self::record::ChunkState;
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
        let in_range = xip.iter().all(|x| (xmin..xmax).contains(x));
        (xmin <= xmax && in_range).then_some(TxnSnapshot { xmin, xmax, xip })
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

/// As `pg_current_snapshot()` prints it (running transactions in ascending order).
impl fmt::Display for TxnSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut xip: Vec<u64> = self.xip.iter().copied().collect();
        xip.sort_unstable();
        let xip: Vec<String> = xip.iter().map(u64::to_string).collect();
        write!(f, "{}:{}:{}", self.xmin, self.xmax, xip.join(","))
    }
}

/// A row the consumer was given (the cursor) or is owed (a pending key): its identity, and its
/// key columns' binary send forms in key order (what a read finds it by).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct After {
    /// Its identity.
    pub identity: Vec<u8>,
    /// Its key columns' binary send forms, in key order.
    pub key: Vec<Option<Bytes>>,
}

/// What the consumer holds of a table being snapshotted: the rows whose identity is at or
/// below `after`, but the `pending` ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// The last row a chunk delivered; `None`: none yet (the view is empty).
    pub after: Option<After>,
    /// Keys at or below `after` that the consumer does not hold (a change moved their row
    /// into the view with an after-image the stream could not complete): the next chunk reads
    /// them by key.
    pub pending: Vec<After>,
}

impl View {
    /// Whether a row with identity `id` is in the view.
    pub fn holds(&self, id: &[u8]) -> bool {
        self.after
            .as_ref()
            .is_some_and(|after| id <= after.identity.as_slice())
            && !self.pending.iter().any(|p| p.identity == id)
    }
}

/// Where one table's chunked snapshot stands (recorded in the state file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkCursor {
    /// `pg_class.oid` of the table.
    pub relid: u32,
    /// What the consumer holds of it.
    pub view: View,
    /// Transactions (pgoutput's 32-bit ids, in delivery order) the stream delivered with a
    /// change of the table that no chunk's snapshot has been seen to see yet.
    pub unconfirmed: Vec<u32>,
    /// Every row was delivered: the table's changes pass unrouted.
    pub done: bool,
}

impl ChunkCursor {
    /// A cursor before the first row of table `relid`: its chunks start from the beginning.
    pub fn from_start(relid: u32) -> Self {
        ChunkCursor {
            relid,
            view: View::default(),
            unconfirmed: Vec::new(),
            done: false,
        }
    }
}

/// A chunk delivered whose high watermark has not arrived yet: what routing needs of it until
/// then (recorded, so a restart in between routes as the run would have).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveredChunk {
    /// The table.
    pub relid: u32,
    /// The high watermark's nonce.
    pub nonce: String,
    /// The snapshot the rows were read under.
    pub snapshot: TxnSnapshot,
    /// The view before it: a change its snapshot saw is routed with this.
    pub before: View,
}

/// A chunk read and waiting for its place in the stream.
#[derive(Debug)]
pub struct OpenChunk {
    /// The table.
    pub relid: u32,
    /// The high watermark's nonce.
    pub nonce: String,
    /// The snapshot the rows were read under.
    pub snapshot: TxnSnapshot,
    /// The rows as snapshot events: for the table's first chunk after the truncate that opens
    /// its snapshot, then the rows after the cursor in key order, then the pending keys' rows
    /// the read found.
    pub events: Vec<ChangeEvent>,
    /// The last row after the cursor (the cursor once delivered); `None`: there was none.
    pub last: Option<After>,
    /// The pending keys the read looked up (found or not): in the view once delivered.
    pub pending_read: Vec<Vec<u8>>,
    /// Fewer rows than asked for after the cursor: the table's key range ends with this chunk.
    pub last_chunk: bool,
}

/// An open chunk as [`Chunking`] keeps it.
#[derive(Debug)]
struct Waiting {
    chunk: OpenChunk,
    /// Delivered: the view before it (changes its snapshot saw are routed with that).
    before: Option<View>,
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
    /// The pending keys: their rows are read by key in the same snapshot.
    pub pending: Vec<After>,
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
    /// The rows after the cursor, in key order, one value per column of the request.
    pub rows: Vec<Tuple>,
    /// The rows of the request's pending keys that exist under the snapshot.
    pub pending_rows: Vec<Tuple>,
    /// Fewer rows than the chunk size after the cursor: the table's key range ends here.
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
    /// Nothing: its effect is outside the view (a later chunk holds it).
    Drop,
    /// As the delete of its old row: it moved that row out of the view.
    AsDelete,
    /// As the insert of its new row: it moved a row from outside the view into it.
    AsInsert,
    /// Nothing now: it moved a row into the view with an incomplete after-image, so the new
    /// row's key becomes pending ([`Chunking::pend`]) and the next chunk reads it.
    Pend,
}

/// A chunk's snapshot does not see a transaction the stream already delivered with a change
/// of its table (a commit still waiting, for a synchronous standby say, to become visible).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unseen {
    /// The table.
    pub relid: u32,
    /// The transaction (pgoutput's 32-bit id).
    pub xid: u32,
}

/// The chunked snapshots of one run.
#[derive(Debug, Default)]
pub struct Chunking {
    cursors: Vec<ChunkCursor>,
    open: Option<Waiting>,
}

impl Chunking {
    /// Resumes from a recorded [`ChunkState`]: its cursors, and the chunk it had delivered
    /// before its watermark, if any.
    pub fn new(state: ChunkState) -> Chunking {
        let open = state.delivered.map(|d| Waiting {
            chunk: OpenChunk {
                relid: d.relid,
                nonce: d.nonce,
                snapshot: d.snapshot,
                events: Vec::new(),
                last: None,
                pending_read: Vec::new(),
                last_chunk: false,
            },
            before: Some(d.before),
        });
        Chunking {
            cursors: state.cursors,
            open,
        }
    }

    /// The cursors.
    pub fn cursors(&self) -> &[ChunkCursor] {
        &self.cursors
    }

    /// Everything a restart needs to route as this run would: the cursors and the chunk
    /// delivered whose watermark has not arrived.
    pub fn state(&self) -> ChunkState {
        let delivered = self.open.as_ref().and_then(|w| {
            w.before.as_ref().map(|before| DeliveredChunk {
                relid: w.chunk.relid,
                nonce: w.chunk.nonce.clone(),
                snapshot: w.chunk.snapshot.clone(),
                before: before.clone(),
            })
        });
        ChunkState {
            cursors: self.cursors.clone(),
            delivered,
        }
    }

    /// Whether any table's snapshot is still being read (or its last chunk's watermark is
    /// still to come).
    pub fn active(&self) -> bool {
        self.open.is_some() || self.cursors.iter().any(|c| !c.done)
    }

    /// Marks a table's snapshot finished without rows (its identity schema is gone: dropped
    /// or no longer published).
    pub fn finish(&mut self, relid: u32) {
        if let Some(c) = self.cursors.iter_mut().find(|c| c.relid == relid) {
            c.done = true;
            c.view.pending.clear();
            c.unconfirmed.clear();
        }
    }

    /// Moves a table's cursor past rows delivered outside the stream (the initial copy at the
    /// slot's consistent point, which no stream change precedes): to `after` when given, and
    /// `done` when the table was copied whole.
    pub fn advance(&mut self, relid: u32, after: Option<After>, done: bool) {
        if let Some(c) = self.cursors.iter_mut().find(|c| c.relid == relid) {
            if after.is_some() {
                c.view.after = after;
            }
            c.done = done && c.view.pending.is_empty();
        }
    }

    /// The next table to read a chunk of, with its cursor, when no chunk is waiting.
    pub fn next(&self) -> Option<&ChunkCursor> {
        if self.open.is_some() {
            return None;
        }
        self.cursors.iter().find(|c| !c.done)
    }

    /// Records that the stream delivered `event`'s transaction (a change of a table whose
    /// snapshot is being read): a chunk of the table must see it ([`Chunking::open`]).
    pub fn note(&mut self, event: &ChangeEvent) {
        if let Some(c) = self
            .cursors
            .iter_mut()
            .find(|c| c.relid == event.relid && !c.done)
            && c.unconfirmed.last() != Some(&event.xid)
            && !c.unconfirmed.contains(&event.xid)
        {
            c.unconfirmed.push(event.xid);
        }
    }

    /// Opens a chunk read under `chunk.snapshot`, to wait for its place in the stream, unless
    /// that snapshot does not see a transaction the stream already delivered with a change of
    /// its table: then nothing is opened and the chunk must be read again later. Either way,
    /// every transaction the snapshot sees is forgotten from every table's unconfirmed ones
    /// (any later snapshot sees it too).
    pub fn open(&mut self, chunk: OpenChunk) -> Result<(), Unseen> {
        let snapshot = &chunk.snapshot;
        for c in &mut self.cursors {
            c.unconfirmed.retain(|xid| !snapshot.sees(*xid));
        }
        if let Some(xid) = self
            .cursors
            .iter()
            .find(|c| c.relid == chunk.relid)
            .and_then(|c| c.unconfirmed.first())
        {
            return Err(Unseen {
                relid: chunk.relid,
                xid: *xid,
            });
        }
        self.open = Some(Waiting {
            chunk,
            before: None,
        });
        Ok(())
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

    /// Delivers the open chunk (once): its rows, with its table's view moved past them (the
    /// cursor to its last row, the pending keys it read into the view). Empty when there is
    /// none or it was delivered.
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
        w.before = Some(cursor.view.clone());
        if let Some(last) = &w.chunk.last {
            cursor.view.after = Some(last.clone());
        }
        // A key that became pending after the read is not in the chunk: it stays pending.
        let read = &w.chunk.pending_read;
        cursor.view.pending.retain(|p| !read.contains(&p.identity));
        cursor.done = w.chunk.last_chunk && cursor.view.pending.is_empty();
        std::mem::take(&mut w.chunk.events)
    }

    /// The open chunk's high watermark arrived: every transaction its snapshot saw has been
    /// routed. Delivers it if that has not happened yet (returned), and closes it.
    pub fn close(&mut self) -> Vec<ChangeEvent> {
        let rows = self.deliver();
        self.open = None;
        rows
    }

    /// How a change is delivered given the view of its table (see the module's rules).
    pub fn route(&self, event: &ChangeEvent) -> Route {
        let Some(cursor) = self.cursors.iter().find(|c| c.relid == event.relid) else {
            return Route::Pass;
        };
        // A change the delivered chunk's snapshot saw is in the chunk: routed with the view
        // from before it.
        let view = match &self.open {
            Some(Waiting {
                chunk,
                before: Some(before),
            }) if chunk.relid == event.relid && chunk.snapshot.sees(event.xid) => before,
            _ if cursor.done => return Route::Pass,
            _ => &cursor.view,
        };
        let held = |id: &Option<Vec<u8>>| id.as_deref().is_some_and(|id| view.holds(id));
        match event.op {
            // A truncate empties the view; an unidentified change tells the consumer to
            // rebuild what it keeps of the table anyway.
            Op::Truncate | Op::Unidentified => Route::Pass,
            Op::Insert | Op::Snapshot if held(&event.new_id) => Route::Pass,
            Op::Delete if held(&event.old_id) => Route::Pass,
            Op::Update => match (held(&event.old_id), held(&event.new_id)) {
                (true, true) => Route::Pass,
                (true, false) => Route::AsDelete,
                // The consumer never had the old row: an unchanged TOASTed value the stream
                // did not send cannot be given to it.
                (false, true) if event.unchanged_toast.is_empty() => Route::AsInsert,
                (false, true) => Route::Pend,
                (false, false) => Route::Drop,
            },
            Op::Insert | Op::Snapshot | Op::Delete => Route::Drop,
        }
    }

    /// Makes the row `event` (routed [`Route::Pend`]) wrote pending: out of its table's view
    /// until a chunk reads it by `key` (its key columns' send forms).
    pub fn pend(&mut self, event: &ChangeEvent, key: Vec<Option<Bytes>>) {
        let Some(identity) = event.new_id.clone() else {
            return;
        };
        if let Some(c) = self.cursors.iter_mut().find(|c| c.relid == event.relid)
            && !c.view.pending.iter().any(|p| p.identity == identity)
        {
            c.view.pending.push(After { identity, key });
            c.done = false;
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

/// `event` as the insert of its new row (its after-image complete: [`Chunking::route`]).
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

    fn after(b: u8) -> After {
        After {
            identity: vec![1, b],
            key: vec![],
        }
    }

    fn chunking(after_id: Option<u8>) -> Chunking {
        Chunking::new(ChunkState {
            cursors: vec![ChunkCursor {
                view: View {
                    after: after_id.map(after),
                    pending: vec![],
                },
                ..ChunkCursor::from_start(7)
            }],
            delivered: None,
        })
    }

    fn chunk(nonce: &str, snapshot: &str, last: Option<u8>, pending_read: &[u8]) -> OpenChunk {
        OpenChunk {
            relid: 7,
            nonce: nonce.into(),
            snapshot: TxnSnapshot::parse(snapshot).unwrap(),
            events: vec![],
            last: last.map(after),
            pending_read: pending_read.iter().map(|b| vec![1, *b]).collect(),
            last_chunk: false,
        }
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

    /// A row moved into the view without a value the consumer never had is not an insert:
    /// its key is pending (outside the view) until a chunk reads it by key.
    #[test]
    fn a_row_moved_into_the_view_with_an_incomplete_image_is_pending() {
        let mut c = chunking(Some(50));
        let mut moved = event(Op::Update, 1, Some(60), Some(3));
        moved.unchanged_toast = vec!["doc".into()];
        assert_eq!(c.route(&moved), Route::Pend);
        c.pend(&moved, vec![Some(Bytes::from_static(&[3]))]);
        // Outside the view now: every change of it is dropped, a move out of it too.
        assert_eq!(
            c.route(&event(Op::Update, 2, Some(3), Some(3))),
            Route::Drop
        );
        assert_eq!(c.route(&event(Op::Delete, 2, Some(3), None)), Route::Drop);
        assert_eq!(
            c.route(&event(Op::Update, 2, Some(4), Some(3))),
            Route::AsDelete
        );
        assert_eq!(
            c.next().unwrap().view.pending,
            vec![After {
                identity: vec![1, 3],
                key: vec![Some(Bytes::from_static(&[3]))],
            }]
        );
        // The next chunk reads it: once delivered, it is in the view.
        c.open(chunk("n", "10:10:", Some(55), &[3])).unwrap();
        c.deliver();
        assert!(c.cursors()[0].view.pending.is_empty());
        assert_eq!(
            c.route(&event(Op::Update, 20, Some(3), Some(3))),
            Route::Pass
        );
    }

    /// A table whose key range ended still waits for its pending keys.
    #[test]
    fn the_last_chunk_ends_a_table_only_without_pending_keys() {
        let mut c = chunking(Some(50));
        let mut moved = event(Op::Update, 1, Some(60), Some(3));
        moved.unchanged_toast = vec!["doc".into()];
        c.pend(&moved, vec![]);
        let mut last = chunk("n", "10:10:", Some(70), &[]);
        last.last_chunk = true;
        c.open(last).unwrap();
        c.close();
        assert!(!c.cursors()[0].done, "the pending key is still owed");
        let mut again = chunk("m", "10:10:", None, &[3]);
        again.last_chunk = true;
        c.open(again).unwrap();
        c.close();
        assert!(c.cursors()[0].done);
    }

    /// A transaction the stream delivered (its change of the table dropped: "a later chunk
    /// holds it") that a chunk's snapshot does not see yet keeps the chunk from opening.
    #[test]
    fn a_chunk_must_see_every_transaction_the_stream_delivered() {
        let mut c = chunking(Some(50));
        c.note(&event(Op::Insert, 104, None, Some(80)));
        c.note(&event(Op::Insert, 104, None, Some(81)));
        c.note(&event(Op::Insert, 99, None, Some(82)));
        assert_eq!(c.cursors()[0].unconfirmed, vec![104, 99]);
        // 104 still running under this snapshot (a commit waiting for a standby).
        assert_eq!(
            c.open(chunk("a", "100:105:104", Some(60), &[])),
            Err(Unseen { relid: 7, xid: 104 })
        );
        assert!(c.next().is_some(), "nothing was opened");
        assert_eq!(
            c.cursors()[0].unconfirmed,
            vec![104],
            "99 was seen: forgotten"
        );
        c.open(chunk("b", "106:106:", Some(60), &[])).unwrap();
        assert!(c.cursors()[0].unconfirmed.is_empty());
    }

    #[test]
    fn a_chunk_is_due_at_the_first_change_its_snapshot_does_not_see() {
        let mut c = chunking(None);
        c.open(chunk("n", "100:105:101,103", Some(40), &[]))
            .unwrap();
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
        assert_eq!(
            c.cursors()[0].view.after.as_ref().unwrap().identity,
            vec![1, 40]
        );
        assert!(!c.cursors()[0].done);
        assert!(
            !c.chunk_due(&event(Op::Insert, 200, None, Some(1))),
            "delivered once"
        );
        // Until the watermark, a change the snapshot saw is routed with the old view (its
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

    /// A chunk delivered before its watermark is part of the recorded state: resumed from it,
    /// a change its snapshot saw is still routed with the view before it.
    #[test]
    fn a_delivered_chunk_survives_a_restart_until_its_watermark() {
        let mut c = chunking(Some(10));
        c.open(chunk("n", "100:105:101", Some(40), &[])).unwrap();
        c.deliver();
        let recorded = c.state();
        assert!(recorded.delivered.is_some());
        let resumed = Chunking::new(recorded);
        assert_eq!(
            resumed.route(&event(Op::Insert, 102, None, Some(30))),
            Route::Drop,
            "seen by the chunk: it holds it"
        );
        let mut resumed = resumed;
        assert!(resumed.is_watermark("n"));
        assert!(resumed.close().is_empty(), "delivered before the restart");
        assert!(resumed.state().delivered.is_none());
        assert_eq!(
            resumed.route(&event(Op::Insert, 102, None, Some(30))),
            Route::Pass
        );
    }

    #[test]
    fn snapshots_parse_and_widen_across_an_epoch() {
        assert_eq!(TxnSnapshot::parse("5:4:"), None);
        assert_eq!(TxnSnapshot::parse("x:4:"), None);
        assert_eq!(TxnSnapshot::parse("4:8:9"), None, "running past xmax");
        let s = TxnSnapshot::parse("4294967290:4294967300:4294967295").unwrap();
        // 32-bit 4294967294 is epoch 0 (below xmin): seen; 4294967295 in progress; 3 is
        // epoch 1's 4294967299 (below xmax, not in progress): seen; 5 is above xmax.
        assert!(s.sees(4_294_967_294));
        assert!(!s.sees(4_294_967_295));
        assert!(s.sees(3));
        assert!(!s.sees(5));
        let text = "100:110:101,107,103";
        assert_eq!(
            TxnSnapshot::parse(text).unwrap().to_string(),
            "100:110:101,103,107"
        );
    }
}
