//! The pipeline: capture into a sink, and the state that makes a restart exact. For every
//! committed transaction, in this order: its events reach the sink, the sink makes them
//! durable, the state file records the transaction (and the schemas as of it), and only then
//! is its end position returned to be acknowledged to the server. A crash between any two of
//! these steps loses nothing and repeats nothing: the server resends from the last
//! acknowledgement, the capture skips what the state says was delivered, and a file sink
//! cuts off what the state does not account for.
//!
//! Between transactions, a position the server reports (a keepalive's, a heartbeat
//! message's) is recorded and acknowledged too ([`Pipeline::idle_at`]): every transaction
//! that committed before it was delivered already, so the slot need not keep the WAL before
//! it, even when nothing published changes while other tables write gigabytes.
//!
//! With [`Pipeline::group_commits`], a sink whose commit is a round trip and a flush (a
//! database) may hold several transactions in one commit: they are recorded and acknowledged
//! together once it made them durable ([`Pipeline::flush`], called when the stream has
//! nothing more to hand over), the order of the steps above unchanged for the group.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::PathBuf;

use bytes::Bytes;
use rowid_pgoutput::{FlagBits, Message};
use rowid_registry::schema_message::RelationSchema;

use crate::capture::CaptureError;
use crate::capture::{Capture, Output};
use crate::chunks::{
    self, After, ChunkRead, ChunkRequest, ChunkState, Chunking, OpenChunk, Route, Unseen,
};
use crate::counters::{PendingChanges, SharedCounters};
use crate::event::{ChangeEvent, SendRow};
use crate::fault::{self, Point};
use crate::lsn::Lsn;
use crate::sink::{Durable, Sink};
use crate::state::{SnapshotState, State, StateError};

/// Why the pipeline stopped.
#[derive(Debug)]
pub enum PipelineError {
    /// The stream could not be captured.
    Capture(CaptureError),
    /// The sink failed.
    Sink(io::Error),
    /// The state file could not be written.
    State(StateError),
    /// A chunked snapshot cannot go on exactly (the message names the table and the fix).
    Snapshot(String),
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PipelineError::Capture(e) => write!(f, "{e}"),
            PipelineError::Sink(e) => write!(f, "sink: {e}"),
            PipelineError::State(e) => write!(f, "{e}"),
            PipelineError::Snapshot(e) => write!(f, "snapshot: {e}"),
        }
    }
}

impl std::error::Error for PipelineError {}

/// The send forms of `row`'s columns at `positions` (a key's, in key order): a cursor's
/// bound.
fn key_forms(row: &rowid_pgoutput::Tuple, positions: &[usize]) -> Vec<Option<Bytes>> {
    positions
        .iter()
        .map(|&i| match row.get(i) {
            Some(rowid_pgoutput::Column::Binary(b)) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

/// The key columns' send forms of the row `event` wrote (its identity's columns, in key
/// order): how a pending key is read again.
fn pending_key(event: &ChangeEvent) -> Result<Vec<Option<Bytes>>, PipelineError> {
    let missing = |column: &str| {
        PipelineError::Snapshot(format!(
            "{}: a key moved into the rows delivered so far lacks its key column {column} in \
             its new row, so it cannot be read again by key",
            event.relation
        ))
    };
    let image = event.new.as_ref().ok_or_else(|| missing("(no new row)"))?;
    event
        .key
        .iter()
        .map(|column| {
            let i = image
                .columns
                .iter()
                .position(|c| c.name == *column)
                .ok_or_else(|| missing(column))?;
            Ok(Some(image.binary(i).ok_or_else(|| missing(column))?))
        })
        .collect()
}

/// Counters for progress reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Changes delivered to the sink.
    pub changes: u64,
    /// Of those, changes whose identity could not be derived ([`crate::Op::Unidentified`]).
    pub unidentified: u64,
    /// Notices (unauthenticated identity messages, malformed identity schema rows).
    pub notices: u64,
    /// Transactions made durable.
    pub transactions: u64,
    /// End LSN of the last durable transaction.
    pub durable: Lsn,
}

/// What delivery tells the operator: the counters, and a notice at each relation's first
/// unidentified change.
#[derive(Debug, Default)]
struct Tally {
    progress: Progress,
    /// Notices since they were last taken.
    notices: Vec<String>,
    /// Relations that had an unidentified change (each is named once in the notices).
    unidentified: BTreeSet<u32>,
    /// The counters a reporter reads ([`Pipeline::report_to`]), and the changes delivered
    /// since the sink last made a transaction durable.
    shared: Option<SharedCounters>,
    pending: PendingChanges,
    /// Tables of the initial snapshot copied once (not resumable): done, and in all.
    copied_once: (u64, u64),
}

impl Tally {
    /// Counts `event`, delivered to the sink.
    fn delivered(&mut self, event: &ChangeEvent) {
        self.progress.changes += 1;
        if self.shared.is_some() {
            self.pending.add(event.relid, &event.relation, event.op);
        }
        if let Some(u) = &event.unidentified {
            self.progress.unidentified += 1;
            if self.unidentified.insert(event.relid) {
                self.notices.push(format!(
                    "at {}: {}: a change without identity ({}: {}); its changes like it are \
                     unidentified events, counted in the progress line",
                    event.lsn,
                    event.relation,
                    u.change.name(),
                    u.reason
                ));
            }
        }
    }
}

/// What stops capture instead of being emitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Strictness {
    /// A change whose identity cannot be derived ([`Capture::strict`]).
    pub strict: bool,
    /// An UPDATE whose new image lacks an unchanged TOASTed value
    /// ([`Capture::require_complete`]).
    pub require_complete: bool,
}

/// Capture, sink and state together.
#[derive(Debug)]
pub struct Pipeline<S: Sink> {
    capture: Capture,
    sink: S,
    state: State,
    state_path: Option<PathBuf>,
    outputs: Vec<Output>,
    tally: Tally,
    /// The chunked snapshots (their cursors are in the state).
    chunking: Chunking,
    /// The identity schema a table's chunks were asked for with (its cursor is an identity
    /// of that schema's key).
    chunk_keys: HashMap<u32, RelationSchema>,
    /// Whether the sink may group transactions ([`Pipeline::group_commits`]).
    grouping: bool,
    /// Transactions the sink holds but has not made durable yet: the last one's positions
    /// and whether any of them changed an identity schema. The state keeps the last durable
    /// transaction until [`Pipeline::flush`].
    staged: Option<Staged>,
    /// A chunk was delivered in the open transaction.
    chunk_in_txn: bool,
}

/// The transactions of an open group ([`Pipeline::staged`]).
#[derive(Clone, Copy, Debug)]
struct Staged {
    commit_lsn: Lsn,
    end_lsn: Lsn,
    schemas_changed: bool,
    /// Transactions of the group delivered by this run (not already in the sink).
    delivered_here: u64,
}

impl<S: Sink> Pipeline<S> {
    /// A pipeline resuming from `state`, written back to `state_path` (when given) at every
    /// commit, and once here, before anything reaches the sink: from the first change on,
    /// the state file accounts for everything the sink holds. The capture must have been
    /// created from the same state.
    ///
    /// A sink that records its own position must hold at least what the state file says it
    /// made durable: one behind it lost transactions (a stream deleted and created again, or
    /// purged; a database restored from an older backup; a server that lost acknowledged
    /// writes), which are gone from the slot too, so it is refused. A sink ahead of the state
    /// file (a kill between the sink's commit and the state's) also gives the chunked
    /// snapshots' record it committed with its rows, which is then the one resumed from.
    pub fn new(
        capture: Capture,
        sink: S,
        mut state: State,
        state_path: Option<PathBuf>,
    ) -> Result<Self, PipelineError> {
        if let Some(recorded) = Durable::position(state.sink.as_ref()) {
            let holds = sink.delivered();
            if holds < Some(recorded) {
                return Err(PipelineError::Sink(io::Error::other(format!(
                    "{} holds changes through commit {}, but the state file says it had made \
                     durable those through commit {recorded}: what it held since was lost \
                     (deleted and created again, purged, restored from an older backup, or a \
                     server that lost acknowledged writes), and the slot no longer has those \
                     changes. Nothing was written. Rebuild it from a new slot (a new state \
                     file, --create-slot --snapshot), or give the state file that goes with \
                     what it holds",
                    sink.describe(),
                    holds.map_or_else(|| "none (it is empty)".to_string(), |l| l.to_string())
                ))));
            }
            if holds > Some(recorded)
                && let Some(chunks) = sink.recorded_chunks()
            {
                state.chunks = ChunkState::from_json(&chunks).map_err(|e| {
                    PipelineError::Snapshot(format!(
                        "{} is ahead of the state file, and its record of the chunked \
                         snapshots cannot be read: {e}",
                        sink.describe()
                    ))
                })?;
            }
        }
        state.sink = sink.durable().record;
        if let Some(path) = &state_path {
            state.save(path).map_err(PipelineError::State)?;
        }
        let durable = state.end_lsn;
        let chunking = Chunking::new(state.chunks.clone());
        Ok(Pipeline {
            chunking,
            chunk_keys: HashMap::new(),
            grouping: false,
            staged: None,
            chunk_in_txn: false,
            capture,
            sink,
            state,
            state_path,
            outputs: Vec::new(),
            tally: Tally {
                progress: Progress {
                    durable,
                    ..Progress::default()
                },
                ..Tally::default()
            },
        })
    }

    /// The pipeline resuming from `state` into `sink` (a capture made from the state, which
    /// skips what the sink already holds beyond it, with the [`Strictness`] asked for, and
    /// leaves the relations in `ignored` out), as [`Pipeline::new`].
    pub fn resume(
        state: State,
        sink: S,
        state_path: Option<PathBuf>,
        strictness: Strictness,
        ignored: &BTreeSet<u32>,
    ) -> Result<Self, PipelineError> {
        let capture = Capture::new(state.schemas.clone(), state.commit_lsn, FlagBits::default())
            .with_delivered(sink.delivered().unwrap_or(Lsn::ZERO))
            .with_identity_table(state.identity_table)
            .strict(strictness.strict)
            .require_complete(strictness.require_complete)
            .ignoring(ignored.iter().copied());
        Pipeline::new(capture, sink, state, state_path)
    }

    /// Applies one pgoutput message starting at `lsn`. Returns the position to acknowledge
    /// when the message committed a transaction that is now durable.
    pub fn message(&mut self, lsn: Lsn, bytes: Bytes) -> Result<Option<Lsn>, PipelineError> {
        self.outputs.clear();
        if let Err(e) = self.capture.apply_bytes(lsn, bytes, &mut self.outputs) {
            self.refused(&e);
            return Err(PipelineError::Capture(e));
        }
        self.deliver()
    }

    /// Applies one message a transport already decoded (Begin, Commit and logical messages
    /// arrive that way from some clients); otherwise as [`Pipeline::message`].
    pub fn apply(&mut self, lsn: Lsn, msg: Message) -> Result<Option<Lsn>, PipelineError> {
        self.outputs.clear();
        if let Err(e) = self.capture.apply(lsn, msg, &mut self.outputs) {
            self.refused(&e);
            return Err(PipelineError::Capture(e));
        }
        self.deliver()
    }

    /// Lets the sink group transactions (group commit, [`Sink::end_transaction`]): a
    /// transaction's commit then returns no position to acknowledge until the sink made the
    /// group durable, and the caller must call [`Pipeline::flush`] when the stream has
    /// nothing more to hand over (and before it stops), or the group waits. Never while
    /// tables are snapshotted in chunks (whose cursors are recorded transaction by
    /// transaction).
    pub fn group_commits(&mut self, on: bool) {
        self.grouping = on;
    }

    /// Whether transactions wait in the sink for a [`Pipeline::flush`].
    pub fn has_staged(&self) -> bool {
        self.staged.is_some()
    }

    /// Makes the transactions the sink holds durable, then records them in the state file.
    /// Returns the position to acknowledge, when there were any.
    pub fn flush(&mut self) -> Result<Option<Lsn>, PipelineError> {
        if self.staged.is_none() {
            return Ok(None);
        }
        let durable = self.sink_commit()?;
        self.settle(durable)
    }

    /// Gives the sink the chunked snapshots' record as of now (when any table was chunked),
    /// to commit with what it holds ([`Sink::record_chunks`]).
    fn record_chunks(&mut self) {
        let state = self.chunking.state();
        if !state.is_empty() {
            self.sink.record_chunks(&state.to_json());
        }
    }

    /// The sink's commit, with the chunked snapshots' record.
    fn sink_commit(&mut self) -> Result<Durable, PipelineError> {
        self.record_chunks();
        self.sink.commit().map_err(PipelineError::Sink)
    }

    /// Publishes the counters into `shared` from now on: the changes, transactions and
    /// positions the sink makes durable, the snapshot's tables, notices and refused changes
    /// ([`crate::counters`]).
    pub fn report_to(&mut self, shared: SharedCounters) {
        self.tally.pending.clear();
        self.tally.shared = Some(shared);
        self.publish(0);
    }

    /// Into the shared counters, after the sink made `transactions` more of the stream's
    /// transactions durable, or snapshot rows (and the state file recorded them): the changes
    /// delivered since, and where the run stands.
    fn publish(&mut self, transactions: u64) {
        let Some(shared) = &self.tally.shared else {
            return;
        };
        let cursors = self.chunking.cursors();
        let chunked_done = cursors.iter().filter(|c| c.done).count() as u64;
        let mut c = shared.lock();
        self.tally.pending.settle(&mut c);
        c.transactions += transactions;
        if transactions > 0 {
            c.last_commit = Some(std::time::SystemTime::now());
        }
        c.durable = self.tally.progress.durable;
        c.notices = self.tally.progress.notices;
        c.snapshot_tables = (
            self.tally.copied_once.0 + chunked_done,
            self.tally.copied_once.1 + cursors.len() as u64,
        );
    }

    /// The server reported WAL up to `end` (a keepalive, an acknowledgement): for the lag in
    /// the counters.
    pub fn server_reported(&self, end: Lsn) {
        if let Some(shared) = &self.tally.shared {
            shared.server_at(end);
        }
    }

    /// Counts a change that stopped the run instead of being delivered, when `e` is one.
    fn refused(&self, e: &CaptureError) {
        if let Some(shared) = &self.tally.shared
            && e.is_about_one_change()
        {
            shared.lock().refused += 1;
        }
    }

    /// Records the staged transactions, which the sink made durable (`durable`: where they
    /// left it), in the state file. Returns the position to acknowledge.
    fn settle(&mut self, durable: Durable) -> Result<Option<Lsn>, PipelineError> {
        let Some(staged) = self.staged.take() else {
            return Ok(None);
        };
        fault::at(Point::AfterSinkCommit);
        self.state.commit_lsn = staged.commit_lsn;
        self.state.end_lsn = staged.end_lsn;
        self.state.sink = durable.record;
        self.state.chunks = self.chunking.state();
        if staged.schemas_changed {
            self.state.schemas = self.capture.schemas().cloned().collect();
        }
        self.save()?;
        self.tally.progress.durable = staged.end_lsn;
        self.publish(staged.delivered_here);
        Ok(Some(staged.end_lsn))
    }

    /// True between a Begin and its Commit.
    pub fn in_transaction(&self) -> bool {
        self.capture.in_transaction()
    }

    fn deliver(&mut self) -> Result<Option<Lsn>, PipelineError> {
        let mut ack = None;
        // Taken out for the loop (the sink's calls borrow the pipeline), put back after it.
        let mut outputs = std::mem::take(&mut self.outputs);
        // A chunk delivered at a change of this message (for a test's crash point).
        let mut chunk_delivered = false;
        for output in outputs.drain(..) {
            match output {
                Output::Begin { .. } => {}
                Output::Change(event) => {
                    // A change its snapshot did not see: the waiting chunk comes first.
                    if self.chunking.chunk_due(&event) {
                        for row in self.chunking.deliver() {
                            self.deliver_event(&chunks::at(row, event.commit_lsn))?;
                        }
                        self.chunk_in_txn = true;
                    }
                    self.chunking.note(&event);
                    match self.chunking.route(&event) {
                        Route::Pass => self.deliver_event(&event)?,
                        Route::Drop => {}
                        Route::AsDelete => self.deliver_event(&chunks::as_delete(&event))?,
                        Route::AsInsert => self.deliver_event(&chunks::as_insert(&event))?,
                        Route::Pend => {
                            let key = pending_key(&event)?;
                            self.chunking.pend(&event, key);
                        }
                    }
                }
                Output::Watermark { lsn, content } => {
                    let nonce = std::str::from_utf8(&content).unwrap_or_default();
                    if !self.in_transaction() && self.chunking.is_watermark(nonce) {
                        ack = self.watermark(lsn)?;
                    }
                }
                Output::Notice { lsn, message } => {
                    self.tally.progress.notices += 1;
                    self.tally.notices.push(format!("at {lsn}: {message}"));
                }
                Output::Commit {
                    xid,
                    commit_lsn,
                    end_lsn,
                    schema_changes,
                    delivered,
                    ..
                } => {
                    // A shape change its snapshot did not see: the waiting chunk, read in the
                    // shape before, comes first.
                    if self.chunking.schema_due(xid, &schema_changes) {
                        for row in self.chunking.deliver() {
                            self.deliver_event(&chunks::at(row, commit_lsn))?;
                        }
                        self.chunk_in_txn = true;
                    }
                    chunk_delivered = std::mem::take(&mut self.chunk_in_txn);
                    self.check_chunk_keys(&schema_changes)?;
                    // Chunk cursors are recorded with each transaction: no group then.
                    let group = self.grouping && !self.chunking.active();
                    let durable = if delivered {
                        // Already in the sink: durable as soon as the group before it is.
                        if self.staged.is_some() {
                            None
                        } else {
                            Some(self.sink.durable())
                        }
                    } else {
                        // The sink follows each DDL of the transaction before it commits, also
                        // for a relation none of whose rows changed.
                        for relid in &schema_changes {
                            if let Some(schema) = self.capture.committed_schema(*relid) {
                                self.sink
                                    .schema_changed(xid, commit_lsn, &schema)
                                    .map_err(PipelineError::Sink)?;
                            }
                        }
                        self.record_chunks();
                        if group {
                            self.sink.end_transaction().map_err(PipelineError::Sink)?
                        } else {
                            Some(self.sink.commit().map_err(PipelineError::Sink)?)
                        }
                    };
                    let schemas_changed = !schema_changes.is_empty()
                        || self.staged.is_some_and(|s| s.schemas_changed);
                    let delivered_here =
                        self.staged.map_or(0, |s| s.delivered_here) + u64::from(!delivered);
                    self.staged = Some(Staged {
                        commit_lsn,
                        end_lsn,
                        schemas_changed,
                        delivered_here,
                    });
                    self.tally.progress.transactions += 1;
                    if let Some(durable) = durable {
                        ack = self.settle(durable)?;
                    }
                }
            }
        }
        self.outputs = outputs;
        if chunk_delivered && ack.is_some() {
            fault::at(Point::AfterChunkDelivered);
        }
        Ok(ack)
    }

    /// The high watermark of the open chunk, at `lsn` (outside any transaction): the chunk
    /// is delivered if no change its snapshot missed came first, made durable, and its
    /// table's cursor recorded with the position (every transaction committed before the
    /// watermark was delivered). Returns the position to acknowledge.
    fn watermark(&mut self, lsn: Lsn) -> Result<Option<Lsn>, PipelineError> {
        self.flush()?;
        let rows = self.chunking.close();
        if !rows.is_empty() {
            for row in rows {
                self.deliver_event(&chunks::at(row, lsn))?;
            }
            let durable = self.sink_commit()?;
            fault::at(Point::AfterSinkCommit);
            self.state.sink = durable.record;
            self.tally.progress.transactions += 1;
        }
        self.state.chunks = self.chunking.state();
        self.state.end_lsn = self.state.end_lsn.max(lsn);
        self.save()?;
        self.tally.progress.durable = self.state.end_lsn;
        self.publish(0);
        Ok(Some(self.state.end_lsn))
    }

    /// Refuses a committed key change of a table whose chunked snapshot has delivered rows
    /// and is not done: its cursor is an identity of the old key, which the new key's
    /// identities do not sort against, so the rest of its chunks could not be routed exactly.
    fn check_chunk_keys(&self, changed: &[u32]) -> Result<(), PipelineError> {
        for relid in changed {
            let Some(old) = self.chunk_keys.get(relid) else {
                continue;
            };
            let started = self
                .chunking
                .cursors()
                .iter()
                .any(|c| c.relid == *relid && !c.done && c.view.after.is_some());
            if !started {
                continue;
            }
            let schema = self.capture.schemas().find(|s| s.relid == *relid);
            let new = schema.and_then(RelationSchema::identity_signature);
            if new.is_none() || new != old.identity_signature() {
                let name =
                    schema.map_or_else(|| format!("relation OID {relid}"), |s| s.qualified_name());
                let columns =
                    |s: Option<&RelationSchema>| match s.and_then(|s| s.identity.as_ref().ok()) {
                        Some(d) => format!(
                            "({})",
                            d.fields
                                .iter()
                                .map(|f| f.column.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        None => "no usable key".to_string(),
                    };
                return Err(PipelineError::Snapshot(format!(
                    "{name}: its key changed during its chunked snapshot (was {}, now {}); \
                     the rows delivered so far carry identities of the old key and the rest \
                     cannot be read after them in order. Read the table again from its first \
                     row: run with --snapshot-table {name}",
                    columns(Some(old)),
                    columns(schema)
                )));
            }
        }
        Ok(())
    }

    /// What to read next for a chunked snapshot, between transactions and when no chunk is
    /// waiting for its watermark; `None` when there is nothing to read. A table whose identity
    /// schema is gone (dropped, unpublished) is finished without rows.
    pub fn chunk_request(&mut self) -> Option<ChunkRequest> {
        if self.in_transaction() {
            return None;
        }
        loop {
            let cursor = self.chunking.next()?.clone();
            let found = self
                .capture
                .schemas()
                .find(|s| s.relid == cursor.relid)
                .and_then(|s| {
                    let def = s.identity.as_ref().ok()?;
                    Some(ChunkRequest {
                        relid: s.relid,
                        namespace: s.namespace.clone(),
                        relname: s.relname.clone(),
                        columns: s.columns.iter().map(|c| c.name.clone()).collect(),
                        key: def.fields.iter().map(|f| f.column.clone()).collect(),
                        after: cursor.view.after.as_ref().map(|a| a.key.clone()),
                        pending: cursor.view.pending.clone(),
                        schema: s.clone(),
                    })
                });
            match found {
                Some(request) => {
                    self.chunk_keys
                        .insert(request.relid, request.schema.clone());
                    return Some(request);
                }
                None => {
                    self.chunking.finish(cursor.relid);
                    self.state.chunks = self.chunking.state();
                }
            }
        }
    }

    /// A chunk the source side read for `request`: its rows become snapshot events (the
    /// stream's identity and image code) waiting for their place in the stream. `Ok(Some)`
    /// when its snapshot does not see a transaction the stream already delivered with a
    /// change of the table: nothing was opened, and the chunk must be read again later
    /// ([`Chunking::open`]).
    pub fn open_chunk(
        &mut self,
        request: &ChunkRequest,
        read: ChunkRead,
    ) -> Result<Option<Unseen>, PipelineError> {
        let positions: Vec<usize> = request
            .key
            .iter()
            .filter_map(|k| request.columns.iter().position(|c| c == k))
            .collect();
        // The last row's key (the next chunk's lower bound), before the events take the rows.
        let last_key = read.rows.last().map(|row| key_forms(row, &positions));
        let mut events = Vec::with_capacity(read.rows.len() + read.pending_rows.len() + 1);
        if request.after.is_none() {
            // The table's first chunk: what the consumer holds of it is replaced.
            events.push(
                self.capture
                    .snapshot_reset(self.state.end_lsn, read.ts, read.relid)
                    .map_err(PipelineError::Capture)?,
            );
        }
        events.extend(
            self.capture
                .snapshot_events(self.state.end_lsn, read.ts, read.relid, read.rows)
                .map_err(PipelineError::Capture)?,
        );
        // (A first chunk without rows holds the truncate only: no key, no cursor.)
        let last = match (events.last(), last_key) {
            (Some(event), Some(key)) => match &event.new_id {
                Some(identity) => Some(After {
                    identity: identity.clone(),
                    key,
                }),
                // The start checks chunk only tables whose rows all have an identity.
                None => {
                    return Err(PipelineError::Capture(CaptureError::Protocol {
                        lsn: self.state.end_lsn,
                        detail: format!(
                            "a chunk of {} holds a row without identity",
                            event.relation
                        ),
                    }));
                }
            },
            _ => None,
        };
        // The pending keys' rows (those that still exist) after the range's.
        events.extend(
            self.capture
                .snapshot_events(self.state.end_lsn, read.ts, read.relid, read.pending_rows)
                .map_err(PipelineError::Capture)?,
        );
        let opened = self.chunking.open(OpenChunk {
            relid: read.relid,
            nonce: read.nonce,
            snapshot: read.snapshot,
            events,
            last,
            pending_read: request.pending.iter().map(|p| p.identity.clone()).collect(),
            last_chunk: read.last_chunk,
        });
        // What the check forgot is recorded with the next transaction or watermark.
        Ok(opened.err())
    }

    /// How many of the tables snapshotted in chunks are done, of how many.
    pub fn chunk_tables(&self) -> (usize, usize) {
        let cursors = self.chunking.cursors();
        (cursors.iter().filter(|c| c.done).count(), cursors.len())
    }

    /// The notices since the last call, oldest first.
    pub fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.tally.notices)
    }

    /// Starts the initial snapshot: the state file records it as pending before any of its
    /// rows reach the sink, so a crash during the copy is refused at restart instead of
    /// leaving the rows before the slot half delivered.
    /// `copied_once`: how many of its tables are copied once, not resumable (the others are
    /// the state's chunk cursors), for the counters.
    pub fn snapshot_begin(&mut self, copied_once: usize) -> Result<(), PipelineError> {
        self.flush()?;
        self.state.snapshot = Some(SnapshotState::Pending);
        self.tally.copied_once = (0, copied_once as u64);
        self.save()?;
        self.publish(0);
        Ok(())
    }

    /// One row of the initial snapshot into the sink (see [`Capture::snapshot_row`]); its
    /// event, valid until the next row.
    pub fn snapshot_row(
        &mut self,
        lsn: Lsn,
        ts: i64,
        relid: u32,
        row: &mut SendRow,
    ) -> Result<&ChangeEvent, PipelineError> {
        let event = self
            .capture
            .snapshot_row(lsn, ts, relid, row)
            .map_err(PipelineError::Capture)?;
        self.sink.change(event).map_err(PipelineError::Sink)?;
        self.tally.delivered(event);
        Ok(event)
    }

    /// [`Pipeline::snapshot_row`] for a row of a table copied in key order, returning the
    /// cursor it leaves (its identity and the send forms of its columns at `key`, the key's
    /// positions): a checkpoint ([`Pipeline::snapshot_checkpoint`]) after it resumes there.
    pub fn snapshot_row_cursor(
        &mut self,
        lsn: Lsn,
        ts: i64,
        relid: u32,
        row: &mut SendRow,
        key: &[usize],
    ) -> Result<After, PipelineError> {
        let key_forms = key.iter().map(|&i| row.bytes(i)).collect();
        let event = self.snapshot_row(lsn, ts, relid, row)?;
        match &event.new_id {
            Some(identity) => Ok(After {
                identity: identity.clone(),
                key: key_forms,
            }),
            // Only tables whose rows all have an identity are copied in key order.
            None => Err(PipelineError::Capture(CaptureError::Protocol {
                lsn,
                detail: format!(
                    "a row of {} copied in key order has no identity",
                    event.relation
                ),
            })),
        }
    }

    /// Makes the rows copied so far durable and records how far the copy of table `relid` in
    /// key order got (`after`: its last row; `done`: all of it), after the initial snapshot's
    /// other tables ([`Pipeline::snapshot_end`]): a run killed later goes on from there in
    /// chunks while streaming from the slot's consistent point (no stream change precedes the
    /// copy's snapshot, so the rows delivered stand exactly as a delivered chunk's).
    pub fn snapshot_checkpoint(
        &mut self,
        relid: u32,
        after: Option<After>,
        done: bool,
    ) -> Result<(), PipelineError> {
        self.flush()?;
        if done {
            self.capture.snapshot_rows_done();
        }
        self.chunking.advance(relid, after, done);
        let durable = self.sink_commit()?;
        fault::at(Point::AfterSinkCommit);
        self.state.sink = durable.record;
        self.state.chunks = self.chunking.state();
        self.save()?;
        self.publish(0);
        Ok(())
    }

    /// One event into the sink, counted; the first unidentified one of a relation is named
    /// in the notices.
    fn deliver_event(&mut self, event: &ChangeEvent) -> Result<(), PipelineError> {
        self.sink.change(event).map_err(PipelineError::Sink)?;
        self.tally.delivered(event);
        Ok(())
    }

    /// Ends the initial snapshot: the sink makes its rows durable, then the state records it
    /// done; only then may streaming start.
    pub fn snapshot_end(&mut self) -> Result<(), PipelineError> {
        self.flush()?;
        self.capture.snapshot_rows_done();
        let durable = self.sink_commit()?;
        self.state.sink = durable.record;
        self.state.snapshot = Some(SnapshotState::Done);
        self.save()?;
        self.tally.copied_once.0 = self.tally.copied_once.1;
        self.publish(0);
        Ok(())
    }

    fn save(&self) -> Result<(), PipelineError> {
        match &self.state_path {
            Some(path) => self.state.save(path).map_err(PipelineError::State),
            None => Ok(()),
        }
    }

    /// Records `lsn`, a position the server reported while no transaction is open, as the
    /// position to resume from, when it is past the recorded one: every transaction that
    /// committed before it was delivered already (the stream sends transactions in commit
    /// order). Returns the position to acknowledge, once the state file holds it.
    pub fn idle_at(&mut self, lsn: Lsn) -> Result<Option<Lsn>, PipelineError> {
        if self.in_transaction() {
            return Ok(None);
        }
        let flushed = self.flush()?;
        if lsn <= self.state.end_lsn {
            return Ok(flushed);
        }
        self.state.end_lsn = lsn;
        if let Some(path) = &self.state_path {
            self.state.save(path).map_err(PipelineError::State)?;
        }
        self.tally.progress.durable = lsn;
        self.publish(0);
        Ok(Some(lsn))
    }

    /// [`Pipeline::idle_at`] for the position of a coverage message
    /// (`rowid_registry::buffer::COVERAGE_PREFIX`, which a WAL-fed stream table's refresh
    /// writes and waits for): the open group committed, then the sink told that every
    /// transaction committed before `lsn` is durable ([`Sink::covered`]), then the position
    /// recorded. Only such messages give the sink its coverage: a keepalive's would make a
    /// sink writing into the captured database write on every one, and each write is WAL the
    /// next keepalive reports. Nothing while a transaction is open.
    pub fn covered_at(&mut self, lsn: Lsn) -> Result<Option<Lsn>, PipelineError> {
        if self.in_transaction() {
            return Ok(None);
        }
        let flushed = self.flush()?;
        self.sink.covered(lsn).map_err(PipelineError::Sink)?;
        Ok(self.idle_at(lsn)?.or(flushed))
    }

    /// The counters so far.
    pub fn progress(&self) -> Progress {
        self.tally.progress
    }

    /// The state as of the last durable transaction.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }
}
