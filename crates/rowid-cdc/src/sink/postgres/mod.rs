//! The PostgreSQL sinks: a sink writing into a PostgreSQL database, one database transaction
//! per captured transaction, and the two things it writes: change rows into change buffers
//! ([`change_buffer`], spec/change-buffer.md) and rows applied to replica storage tables kept equal
//! to their sources ([`replica`], spec/replica.md).
//!
//! Data flow: [`PostgresSink`] (the [`Sink`] the pipeline calls, on the stream's thread) turns
//! each event into a `Row`, sends it with the relation's shape when that changed, in batches
//! (256 rows or 256 KiB; one channel message and at most one wake-up per batch) through a
//! channel bounded in bytes ([`MAX_IN_FLIGHT_BYTES`]), not rows, to the connection's thread
//! (tokio-postgres on a one-thread runtime, connected by [`crate::connect::net`]: TLS, no
//! clear-text password), whose loop (`serve`) opens a database transaction per captured
//! transaction and hands the rows to its `Writer`. Memory stays flat in transaction size
//! and in identity size, and the stream never waits on the sink except at a commit or when
//! that budget is spent.
//!
//! Invariants: the writer records the sink's position (the transaction's commit LSN) in the
//! same transaction as its rows, and `COMMIT` is what makes them durable; the session runs
//! with `synchronous_commit = on` whatever the server's or the role's default, so a commit
//! the server answered is on disk. The position and the rows commit atomically, so the sink
//! can be ahead of the state file, never behind it: a restart replays the transactions
//! between the two without writing them again ([`crate::capture::Capture::with_delivered`]).
//! One session at a time writes a position: the sink takes its advisory lock before reading
//! it (`writer_lock.rs`), so a killed consumer's `COMMIT` the server finishes late is never
//! written again by the next one.
//! Consecutive captured transactions may share one database transaction (group commit,
//! [`Sink::end_transaction`]): applying them in one transaction is applying them in order,
//! the position recorded is the last one's, and none of them is reported durable before
//! that transaction committed; a crash inside the group rolls all of it back, to be
//! replayed from the last durable position.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use rowid_registry::buffer::{self, BufferOp, ImageColumn, Writers};
use rowid_registry::schema_message::{
    IdentityDef, Refusal, RelationSchema, ReplicaIdentity, Rewrite, StoredIdentity,
};
use tokio_postgres::{Client, GenericClient, Transaction};

use crate::connect::conninfo::Conninfo;
use crate::connect::net;
use crate::event::{CellRef, ChangeEvent, ColumnMeta, OldKind, Op, RowImage};
use crate::lsn::Lsn;
use crate::sink::{Durable, Sink};

pub mod change_buffer;
pub mod replica;
mod writer_lock;

pub use change_buffer::{POSITION_TABLE, Target, buffer_of, default_buffer};
pub use replica::ReplicaTarget;

/// Bytes of change rows in flight between the stream and the sink's connection at most (a
/// single larger row is sent alone).
pub const MAX_IN_FLIGHT_BYTES: usize = 8 << 20;

/// What a row costs in the budget beyond its identities and reason.
const ROW_OVERHEAD: usize = 64;

/// Rows are sent to the connection's thread in batches of at most this many rows or
/// [`BATCH_BYTES`] (and at every shape change and commit): one channel message, one budget
/// exchange and at most one wake-up of the thread per batch, not per row.
const BATCH_ROWS: usize = 256;

/// Bytes of rows in one batch at most (a single larger row is a batch alone).
const BATCH_BYTES: usize = 256 << 10;

/// Captured transactions one database transaction holds at most (group commit: the
/// pipeline commits the group as soon as the stream has nothing more to hand over; these
/// bound it while the stream never pauses).
const GROUP_TRANSACTIONS: u32 = 4096;

/// How long a group may stay open at most, from its first captured transaction's end.
const GROUP_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);

/// One buffer row, as it travels to the connection's thread.
#[derive(Debug)]
struct Row {
    xid: i64,
    seq: i32,
    relid: u32,
    op: i8,
    new_id: Option<Vec<u8>>,
    old_id: Option<Vec<u8>>,
    commit_lsn: u64,
    change_lsn: u64,
    unidentified: Option<String>,
    old_image: Option<i8>,
    backfilled: Option<Vec<String>>,
    unchanged_toast: Option<Vec<String>>,
    /// Per image column of the buffer (in [`Cmd::Shape`] order): the new and the old value's
    /// send form, NULL when absent. `None`: no such image.
    new: Option<Vec<Option<Bytes>>>,
    old: Option<Vec<Option<Bytes>>>,
}

impl Row {
    fn cost(&self) -> usize {
        let image = |i: &Option<Vec<Option<Bytes>>>| {
            i.as_ref().map_or(0, |cells| {
                cells
                    .iter()
                    .map(|c| 8 + c.as_ref().map_or(0, Bytes::len))
                    .sum()
            })
        };
        ROW_OVERHEAD
            + self.new_id.as_ref().map_or(0, Vec::len)
            + self.old_id.as_ref().map_or(0, Vec::len)
            + self.unidentified.as_ref().map_or(0, String::len)
            + image(&self.new)
            + image(&self.old)
    }
}

#[derive(Debug)]
enum Cmd {
    /// A relation's columns or identity schema changed before its next row.
    Shape(ShapeChange),
    /// Rows of the open transaction, in order, and what they cost in the budget.
    Rows(Vec<Row>, usize),
    /// Finish the transaction committing at this LSN, with the chunked snapshots' record as
    /// of it (when tables are read in chunks).
    Commit(u64, Option<String>),
    /// Between transactions: every transaction committed before this LSN is durable.
    Covered(u64),
}

/// The byte budget of the channel: the sender waits while it is spent.
#[derive(Debug, Default)]
struct Budget {
    in_flight: Mutex<usize>,
    freed: Condvar,
    peak: AtomicUsize,
}

impl Budget {
    /// Waits until `cost` more bytes fit (or nothing is in flight), then takes them.
    fn take(&self, cost: usize) {
        let Ok(mut n) = self.in_flight.lock() else {
            return;
        };
        while *n > 0 && *n + cost > MAX_IN_FLIGHT_BYTES {
            n = match self.freed.wait(n) {
                Ok(n) => n,
                Err(_) => return,
            };
        }
        *n += cost;
        self.peak.fetch_max(*n, Ordering::Relaxed);
    }

    /// Gives `cost` bytes back.
    fn give(&self, cost: usize) {
        if let Ok(mut n) = self.in_flight.lock() {
            *n = n.saturating_sub(cost);
            self.freed.notify_all();
        }
    }

    /// Gives everything back (the connection's thread ended: nobody will).
    fn release_all(&self) {
        if let Ok(mut n) = self.in_flight.lock() {
            *n = 0;
            self.freed.notify_all();
        }
    }
}

/// Change rows into a PostgreSQL change buffer.
#[derive(Debug)]
pub struct PostgresSink {
    table: String,
    tx: Option<Sender<Cmd>>,
    acks: Receiver<()>,
    worker: Option<JoinHandle<Result<(), Failure>>>,
    budget: Arc<Budget>,
    delivered: Option<Lsn>,
    /// The chunked snapshots' record committed with the last transaction (read at open, then
    /// what [`Sink::record_chunks`] gave for each commit).
    chunks: Option<String>,
    /// The chunked snapshots' record for the next commit.
    next_chunks: Option<String>,
    /// Commit LSN of the last captured transaction with a row (or shape) sent into the open
    /// database transaction: what its commit will record as the position.
    open: Option<Lsn>,
    /// Since when, and how many captured transactions, the open database transaction holds
    /// (group commit, [`Sink::end_transaction`]).
    group: Option<(Instant, u32)>,
    seq: i32,
    opened: Opened,
    /// The columns last sent for each relation's buffer.
    shapes: HashMap<u32, Shape>,
    /// Rows not sent yet (see [`BATCH_ROWS`]) and their cost.
    batch: Vec<Row>,
    batch_cost: usize,
    /// The sink's own buffers, when they are in the captured database: their changes are the
    /// sink's own writes coming back, and are not written again.
    own: Arc<Mutex<HashSet<u32>>>,
}

/// What was last sent of a relation's shape: the event columns it was made from (an event
/// with the same shared columns needs no comparison), the columns as a table holds them
/// (`None`: unknown at that position), and the identity schema in force.
type Shape = (
    Arc<[ColumnMeta]>,
    Option<Vec<ImageColumn>>,
    Option<Arc<RelationSchema>>,
);

/// What of an identity schema, beside the columns, a writer follows: the identity, the
/// replica identity, a rewrite of the table's values (each rewrite names its own
/// transaction, so a second one is a change too), the table's name (a replica's storage
/// table follows a rename), and a stream table's stored identity (a replica keeps it).
type Followed<'a> = (
    &'a Result<IdentityDef, Refusal>,
    ReplicaIdentity,
    Rewrite,
    &'a str,
    &'a str,
    Option<&'a StoredIdentity>,
);

/// See [`Followed`].
fn identity_of(schema: &Option<Arc<RelationSchema>>) -> Option<Followed<'_>> {
    schema.as_deref().map(|s| {
        (
            &s.identity,
            s.replica_identity,
            s.rewritten,
            s.namespace.as_str(),
            s.relname.as_str(),
            s.stored.as_deref(),
        )
    })
}

/// What the sink found when it opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// `synchronous_commit` of the sink's session, as the server reports it after the sink
    /// set it.
    pub synchronous_commit: String,
    /// `pg_class.oid` of the buffer and of the position table.
    pub tables: Vec<u32>,
    /// The sink's database, `system_identifier/database OID` when the role may read the
    /// control data (else `None`).
    pub database: Option<String>,
}

impl PostgresSink {
    /// Starts the sink's connection on a thread of its own, writing with `writer`, and waits
    /// until it is open (its tables created or checked, its position read). `table`: what the
    /// sink writes, for messages. `own`: the set the writer marks its own tables in (shared
    /// with it before it starts).
    fn spawn<W: Writer + Send + 'static>(
        endpoint: Endpoint,
        mut writer: W,
        table: String,
        own: Arc<Mutex<HashSet<u32>>>,
    ) -> io::Result<PostgresSink> {
        let (tx, rx) = channel::<Cmd>();
        let (ack_tx, acks) = sync_channel::<()>(1);
        let (ready_tx, ready) = sync_channel::<Result<(Recorded, Opened), Failure>>(1);
        let budget = Arc::new(Budget::default());
        let worker_budget = budget.clone();
        let worker = std::thread::Builder::new()
            .name("rowid-cdc-sink".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Failure::from(format!("sink runtime: {e}")))?;
                let out = runtime.block_on(async {
                    let mut client = match open_connection(&endpoint, &mut writer).await {
                        Ok((client, recorded, opened)) => {
                            let _ = ready_tx.send(Ok((recorded, opened)));
                            client
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return Ok(());
                        }
                    };
                    serve(&mut client, &mut writer, &rx, &ack_tx, &worker_budget).await
                });
                worker_budget.release_all();
                out
            })?;
        let (recorded, opened) = match ready.recv() {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => return Err(e.into_io()),
            Err(_) => return Err(join_error(Some(worker))),
        };
        Ok(PostgresSink {
            table,
            tx: Some(tx),
            acks,
            worker: Some(worker),
            budget,
            delivered: recorded.position,
            chunks: recorded.chunks,
            next_chunks: None,
            open: None,
            group: None,
            seq: 0,
            opened,
            shapes: HashMap::new(),
            batch: Vec::new(),
            batch_cost: 0,
            own,
        })
    }

    /// What the sink writes (the buffers' or the storage tables' names), quoted.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// What the sink found when it opened.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// The most bytes of rows that were in flight at once.
    pub fn peak_in_flight_bytes(&self) -> usize {
        self.budget.peak.load(Ordering::Relaxed)
    }

    /// The connection's thread ended: its error.
    fn failed(&mut self) -> io::Error {
        self.tx = None;
        join_error(self.worker.take())
    }

    /// `refusal`, a row this side cannot write, as the run's error, unless a command sent
    /// before the row (a shape change) failed in the worker: that failure came first and is
    /// the cause. The worker is stopped mid-transaction, so nothing of it is committed.
    fn refused(&mut self, refusal: io::Error) -> io::Error {
        self.tx = None;
        match self.worker.take().map(JoinHandle::join) {
            Some(Ok(Err(earlier))) => earlier.into_io(),
            Some(Err(_)) => io::Error::other("the sink's connection thread panicked"),
            Some(Ok(Ok(()))) | None => refusal,
        }
    }

    /// Where an `R` row the writer may add before the next change goes (none when no
    /// identity schema is known: nothing to compare). The writer numbers it.
    fn mark_at(
        xid: u32,
        commit_lsn: Lsn,
        change_lsn: Lsn,
        schema: &Option<Arc<RelationSchema>>,
    ) -> Option<RowAt> {
        schema.as_ref()?;
        Some(RowAt {
            xid: i64::from(xid),
            commit_lsn: commit_lsn.0,
            change_lsn: change_lsn.0,
        })
    }

    /// Whether `relid` is one of the sink's own tables in the captured database (its changes
    /// are the sink's own writes coming back).
    fn is_own(&self, relid: u32) -> bool {
        self.own
            .lock()
            .map(|own| own.contains(&relid))
            .unwrap_or(false)
    }

    /// Sends `cmd` after the rows batched before it.
    fn send(&mut self, cmd: Cmd) -> io::Result<()> {
        self.flush_rows()?;
        self.send_now(cmd)
    }

    fn send_now(&mut self, cmd: Cmd) -> io::Result<()> {
        let alive = self.worker.as_ref().is_some_and(|w| !w.is_finished());
        if let (Cmd::Rows(_, cost), true) = (&cmd, alive) {
            self.budget.take(*cost);
        }
        let sent = match &self.tx {
            Some(tx) => tx.send(cmd).is_ok(),
            None => false,
        };
        if sent { Ok(()) } else { Err(self.failed()) }
    }

    /// Adds `row` to the batch, sending the batch once it is full.
    fn push_row(&mut self, row: Row) -> io::Result<()> {
        self.batch_cost += row.cost();
        self.batch.push(row);
        if self.batch.len() >= BATCH_ROWS || self.batch_cost >= BATCH_BYTES {
            self.flush_rows()?;
        }
        Ok(())
    }

    /// Sends the batched rows.
    fn flush_rows(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let rows = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH_ROWS));
        let cost = std::mem::take(&mut self.batch_cost);
        self.send_now(Cmd::Rows(rows, cost))
    }
}

/// The source's columns as the buffer holds them, from the columns the change carries; `None`
/// when the identity schema in force does not describe every one (no schema at this
/// position, or a format-2 schema without types): the buffer cannot be shaped from that.
fn image_columns(event: &ChangeEvent) -> Option<Vec<ImageColumn>> {
    event
        .columns
        .iter()
        .map(|c| {
            Some(ImageColumn {
                attnum: c.attnum?,
                name: c.name.clone(),
                sql_type: c.type_name.clone()?,
            })
        })
        .collect()
}

/// `None` for an empty list (the buffer's "none").
fn names(list: &[String]) -> Option<Vec<String>> {
    (!list.is_empty()).then(|| list.to_vec())
}

/// An image's values as binary COPY fields: NULL for SQL NULL and for a value the image does
/// not have (a key-only old row's other columns; an unchanged TOASTed value, which the row's
/// `unchanged_toast` names). A value the stream sent as text (a type without a binary send
/// function) cannot be written into binary COPY: refused by relation and column.
fn cells(event: &ChangeEvent, image: &RowImage) -> io::Result<Vec<Option<Bytes>>> {
    image
        .columns
        .iter()
        .zip(image.cells())
        .enumerate()
        .map(|(i, (column, cell))| match cell {
            CellRef::Absent | CellRef::Null => Ok(None),
            CellRef::Binary(_) => Ok(image.binary(i)),
            CellRef::Text(_) => Err(io::Error::other(format!(
                "{}: column {} (type OID {}) arrived as text, which a binary COPY into its \
                 buffer cannot take",
                event.relation, column.name, column.type_oid
            ))),
        })
        .collect()
}

fn join_error(worker: Option<JoinHandle<Result<(), Failure>>>) -> io::Error {
    match worker.map(JoinHandle::join) {
        Some(Ok(Err(e))) => e.into_io(),
        Some(Err(_)) => io::Error::other("the sink's connection thread panicked"),
        Some(Ok(Ok(()))) | None => io::Error::other("the sink's connection ended"),
    }
}

impl Sink for PostgresSink {
    fn change(&mut self, event: &ChangeEvent) -> io::Result<()> {
        if self.is_own(event.relid) {
            return Ok(());
        }
        if self.open != Some(event.commit_lsn) {
            self.open = Some(event.commit_lsn);
            self.seq = 0;
        }
        // Events of one Relation message and one identity schema share their columns and
        // schema: compared once (an enum label renamed changes the schema, not the columns).
        let same = self
            .shapes
            .get(&event.relid)
            .is_some_and(|(columns, _, schema)| {
                Arc::ptr_eq(columns, &event.columns)
                    && match (schema, &event.schema) {
                        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                        (None, None) => true,
                        _ => false,
                    }
            });
        if !same {
            let images = image_columns(event);
            let changed = self.shapes.get(&event.relid).is_none_or(|(_, i, s)| {
                *i != images || identity_of(s) != identity_of(&event.schema)
            });
            self.shapes.insert(
                event.relid,
                (event.columns.clone(), images.clone(), event.schema.clone()),
            );
            if changed {
                let at = Self::mark_at(event.xid, event.commit_lsn, event.lsn, &event.schema);
                self.send(Cmd::Shape(ShapeChange {
                    relid: event.relid,
                    relation: event.relation.to_string(),
                    images,
                    schema: event.schema.clone(),
                    at,
                }))?;
            }
        }
        let known = self
            .shapes
            .get(&event.relid)
            .is_some_and(|(_, images, _)| images.is_some());
        self.seq += 1;
        let op = match event.op {
            // A snapshot row is the insert of its row (the start checks refuse --snapshot into
            // change buffers, whose rows are changes; a replica applies it).
            Op::Insert | Op::Snapshot => BufferOp::Insert,
            Op::Update => BufferOp::Update,
            Op::Delete => BufferOp::Delete,
            Op::Truncate => BufferOp::Truncate,
            Op::Unidentified => BufferOp::Unidentified,
        };
        let row = Row {
            xid: i64::from(event.xid),
            seq: self.seq,
            relid: event.relid,
            op: op.code() as i8,
            new_id: event.new_id.clone(),
            old_id: event.old_id.clone(),
            commit_lsn: event.commit_lsn.0,
            change_lsn: event.lsn.0,
            unidentified: event
                .unidentified
                .as_ref()
                .map(|u| format!("{}: {}", u.change.name(), u.reason)),
            old_image: event.old.as_ref().and(event.old_kind).map(|k| match k {
                OldKind::Full => b'F' as i8,
                OldKind::Key => b'K' as i8,
            }),
            backfilled: names(&event.backfilled),
            unchanged_toast: names(&event.unchanged_toast),
            new: match (&event.new, known) {
                (Some(image), true) => Some(cells(event, image).map_err(|e| self.refused(e))?),
                _ => None,
            },
            old: match (&event.old, known) {
                (Some(image), true) => Some(cells(event, image).map_err(|e| self.refused(e))?),
                _ => None,
            },
        };
        self.push_row(row)
    }

    fn schema_changed(
        &mut self,
        xid: u32,
        commit_lsn: Lsn,
        schema: &Arc<RelationSchema>,
    ) -> io::Result<()> {
        if self.is_own(schema.relid) {
            return Ok(());
        }
        let images: Option<Vec<ImageColumn>> = schema
            .columns
            .iter()
            .map(|c| {
                Some(ImageColumn {
                    attnum: c.attnum,
                    name: c.name.clone(),
                    sql_type: c.type_name.clone()?,
                })
            })
            .collect();
        let (relid, relation) = (schema.relid, schema.qualified_name());
        let schema = Some(schema.clone());
        let changed = self
            .shapes
            .get(&relid)
            .is_none_or(|(_, i, s)| *i != images || identity_of(s) != identity_of(&schema));
        if !changed {
            return Ok(());
        }
        // No event's columns stand for it: the next change compares its images again.
        self.shapes
            .insert(relid, (Arc::from([]), images.clone(), schema.clone()));
        if self.open != Some(commit_lsn) {
            self.open = Some(commit_lsn);
            self.seq = 0;
        }
        // At the commit: after every change of the transaction.
        let at = Self::mark_at(xid, commit_lsn, commit_lsn, &schema);
        self.send(Cmd::Shape(ShapeChange {
            relid,
            relation,
            images,
            schema,
            at,
        }))
    }

    fn commit(&mut self) -> io::Result<Durable> {
        self.group = None;
        // A transaction with no change for this sink needs no round trip: the state file
        // records it.
        let chunks = self.next_chunks.take();
        if let Some(commit_lsn) = self.open.take() {
            self.send(Cmd::Commit(commit_lsn.0, chunks.clone()))?;
            if self.acks.recv().is_err() {
                return Err(self.failed());
            }
            self.delivered = Some(commit_lsn);
            self.chunks = chunks;
        }
        Ok(Durable::at(self.delivered))
    }

    fn end_transaction(&mut self) -> io::Result<Option<Durable>> {
        // Nothing of this transaction, nor of one before it, waits in the open database
        // transaction.
        if self.open.is_none() {
            return Ok(Some(Durable::at(self.delivered)));
        }
        let (since, transactions) = self.group.get_or_insert_with(|| (Instant::now(), 0));
        *transactions += 1;
        if *transactions >= GROUP_TRANSACTIONS || since.elapsed() >= GROUP_WINDOW {
            return self.commit().map(Some);
        }
        Ok(None)
    }

    fn durable(&self) -> Durable {
        Durable::at(self.delivered)
    }

    fn covered(&mut self, lsn: Lsn) -> io::Result<()> {
        // Only between database transactions: the pipeline committed the open group first.
        if self.open.is_some() {
            return Ok(());
        }
        self.send(Cmd::Covered(lsn.0))
    }

    fn delivered(&self) -> Option<Lsn> {
        self.delivered
    }

    fn record_chunks(&mut self, chunks: &serde_json::Value) {
        self.next_chunks = Some(chunks.to_string());
    }

    fn recorded_chunks(&self) -> Option<serde_json::Value> {
        serde_json::from_str(self.chunks.as_deref()?).ok()
    }

    fn describe(&self) -> String {
        self.table.clone()
    }

    fn own_tables(&self) -> Option<(Option<String>, Vec<u32>)> {
        Some((self.opened.database.clone(), self.opened.tables.clone()))
    }
}

impl Drop for PostgresSink {
    fn drop(&mut self) {
        // Closing the channel ends the thread; an open COPY is abandoned and its transaction
        // rolls back with the connection.
        self.tx = None;
        self.budget.release_all();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Why the sink's connection failed: the message, and whether reconnecting can cure it.
#[derive(Debug)]
struct Failure {
    message: String,
    transient: bool,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure {
            message,
            transient: false,
        }
    }
}

impl Failure {
    fn into_io(self) -> io::Error {
        let kind = if self.transient {
            io::ErrorKind::ConnectionAborted
        } else {
            io::ErrorKind::Other
        };
        io::Error::new(kind, self.message)
    }
}

/// The error with its SQLSTATE, or its causes; transient when the connection was lost or the
/// server is shutting down, restarting or recovering (classes 08 and 57).
fn db_error(what: &str, e: &tokio_postgres::Error) -> Failure {
    let (message, transient) = net::describe(e);
    Failure {
        message: format!("{what}: {message}"),
        transient,
    }
}

/// What a writer found recorded for its slot when it opened.
#[derive(Debug, Default)]
struct Recorded {
    /// The commit LSN of the last transaction it holds.
    position: Option<Lsn>,
    /// The chunked snapshots' record committed with it (JSON text), if any.
    chunks: Option<String>,
    /// `pg_class.oid` of the writer's own tables.
    tables: Vec<u32>,
}

/// Connects, sets up the session, takes the writer lock of the position (waiting for a
/// session that holds it to end), then lets the writer create or check its tables; returns
/// the client, what is recorded for the slot and what was found.
async fn open_connection<W: Writer>(
    endpoint: &Endpoint,
    writer: &mut W,
) -> Result<(Client, Recorded, Opened), Failure> {
    let connected = net::connect(&endpoint.config).await.map_err(|e| Failure {
        message: format!("the sink's database: {}", e.message),
        transient: e.transient,
    })?;
    let mut client = connected.client;
    tokio::spawn(async move {
        let _ = connected.connection.await;
    });
    let synchronous_commit = session_setup(&client)
        .await
        .map_err(|e| db_error("cannot set up the sink's session", &e))?;
    if synchronous_commit != "on" {
        return Err(Failure::from(format!(
            "the sink's session has synchronous_commit = {synchronous_commit} after setting it \
             on: a commit could be lost in a crash after it was acknowledged"
        )));
    }
    // One writer per position: a killed consumer's last COMMIT may still be running.
    writer_lock::take(
        &client,
        &writer.position_key(),
        endpoint.wait,
        &writer.target(),
    )
    .await?;
    let database = net::database_id(&client).await;
    let same_database =
        endpoint.in_source || (database.is_some() && database == endpoint.source_database);
    let mut recorded = writer.open(&mut client, same_database).await?;
    let tables = std::mem::take(&mut recorded.tables);
    Ok((
        client,
        recorded,
        Opened {
            synchronous_commit,
            tables,
            database,
        },
    ))
}

/// How long a statement of a sink session waits for a lock before it fails (and the failure,
/// a transient one, is retried from the last durable position): a table someone holds locked
/// shows as a retried failure on stderr instead of a silent wait.
pub const SESSION_LOCK_TIMEOUT_MS: u32 = 60_000;

/// What every sink session runs first: the search path locked (every name the sink uses is
/// qualified anyway), `synchronous_commit = on`, so that a COMMIT the server answered is
/// durable whatever the server's, database's or role's default, and its own timeouts, not
/// the role's or the database's: no statement or transaction timeout (a rebuild of a large
/// storage table takes as long as it takes), no idle-in-transaction timeout (a transaction
/// stays open while the stream hands over a large source transaction), and a lock timeout of
/// [`SESSION_LOCK_TIMEOUT_MS`]. Returns `synchronous_commit` as the server then reports it.
pub async fn session_setup(client: &Client) -> Result<String, tokio_postgres::Error> {
    client
        .batch_execute(&format!(
            "SET search_path = pg_catalog, pg_temp; SET synchronous_commit = on; \
             SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0; \
             SET lock_timeout = {SESSION_LOCK_TIMEOUT_MS}; \
             SELECT pg_catalog.set_config('transaction_timeout', '0', false) \
             WHERE pg_catalog.current_setting('server_version_num')::pg_catalog.int4 \
                   OPERATOR(pg_catalog.>=) 170000"
        ))
        .await?;
    Ok(client
        .query_one(
            "SELECT pg_catalog.current_setting('synchronous_commit')",
            &[],
        )
        .await?
        .get(0))
}

/// Creates `schema` when it is missing. `CREATE SCHEMA IF NOT EXISTS` needs CREATE on the
/// database even when the schema is there (`pgtrickle_changes`, `public`): a role without it
/// could not write into an existing schema.
async fn create_schema_if_missing(
    client: &impl GenericClient,
    schema: &str,
    of: &str,
) -> Result<(), Failure> {
    let missing = client
        .query_opt(
            "SELECT FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) $1",
            &[&schema],
        )
        .await
        .map_err(|e| db_error(&format!("cannot read the schema of {of}"), &e))?
        .is_none();
    if missing {
        client
            .batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS {}",
                rowid_registry::sql::quote_ident(schema)
            ))
            .await
            .map_err(|e| db_error(&format!("cannot create the schema of {of}"), &e))?;
    }
    Ok(())
}

/// The sink's role as `regrole` prints it (quoted where needed), as owners are compared.
async fn sink_role(client: &impl GenericClient) -> Result<String, Failure> {
    Ok(client
        .query_one(
            "SELECT CURRENT_USER::pg_catalog.regrole::pg_catalog.text",
            &[],
        )
        .await
        .map_err(|e| db_error("cannot read the sink's role", &e))?
        .get(0))
}

/// [`buffer::WRITERS_QUERY`] for `table`.
async fn writers(client: &impl GenericClient, table: &str) -> Result<Writers, Failure> {
    let row = client
        .query_one(buffer::WRITERS_QUERY, &[&table])
        .await
        .map_err(|e| db_error(&format!("cannot read who may write {table}"), &e))?;
    Ok(Writers {
        owner: row.get(0),
        kind: row.get(1),
        persistence: row.get(2),
        grants: row.get(3),
        triggers: row.get(4),
        rules: row.get(5),
        row_security: row.get(6),
        code: row.get(7),
        access_method: row.get(8),
    })
}

/// Where a sink connects, and how it knows it writes into the captured database.
#[derive(Clone, Debug)]
struct Endpoint {
    /// The connection (its password is never printed).
    config: Conninfo,
    /// The captured database (`system_identifier/database OID`, when readable).
    source_database: Option<String>,
    /// The sink writes into the captured database by definition (no DSN of its own).
    in_source: bool,
    /// How long to wait at open for another session writing the same position to end.
    wait: Duration,
}

/// A relation's columns (`images`: `None` when unknown at this position, no identity schema
/// describing them) and identity schema, from its next row on.
#[derive(Debug)]
struct ShapeChange {
    /// `pg_class.oid` of the source relation.
    relid: u32,
    /// `schema.name` of the source relation.
    relation: String,
    /// The source's columns as a table holds them (types as the source names them).
    images: Option<Vec<ImageColumn>>,
    /// The identity schema in force.
    schema: Option<Arc<RelationSchema>>,
    /// Where an `R` row goes if the writer finds the schema redefines the identities its
    /// buffer holds (spec/change-buffer.md §1d): `None` when no schema is known.
    at: Option<RowAt>,
}

/// The transaction and place in it of a row the writer may add.
#[derive(Clone, Copy, Debug)]
struct RowAt {
    /// Top-level transaction id.
    xid: i64,
    /// The transaction's commit LSN.
    commit_lsn: u64,
    /// The LSN it is written at: the next change's, or the commit's.
    change_lsn: u64,
}

/// What a sink's connection writes with: the change buffers ([`change_buffer::BufferWriter`]) or
/// replica storage tables ([`replica::ReplicaWriter`]). The connection's loop ([`serve`])
/// opens one database transaction per captured transaction and hands the writer what
/// arrives in it; the writer never commits.
trait Writer {
    /// Creates or checks the writer's own tables once connected (`same_database`: the sink
    /// writes into the captured database, whose slot brings its own writes back: it marks
    /// its tables in the shared set of own tables); returns what is recorded for the slot
    /// and the OIDs of the writer's tables.
    async fn open(&mut self, client: &mut Client, same_database: bool)
    -> Result<Recorded, Failure>;

    /// A relation's shape from its next row on, inside `txn`.
    async fn shape(&mut self, txn: &Transaction<'_>, shape: ShapeChange) -> Result<(), Failure>;

    /// Rows of the open transaction, in order.
    async fn rows(&mut self, txn: &Transaction<'_>, rows: Vec<Row>) -> Result<(), Failure>;

    /// The open transaction commits at `commit_lsn`: what is still open is finished and the
    /// position recorded (with `chunks`, the chunked snapshots' record, by a writer that
    /// takes snapshots), inside `txn`.
    async fn finish(
        &mut self,
        txn: &Transaction<'_>,
        commit_lsn: u64,
        chunks: Option<&str>,
    ) -> Result<(), Failure>;

    /// Between transactions: every transaction committed before `lsn` is durable, recorded
    /// for the writer's readers when it keeps such a record (autocommit, on `client`).
    async fn covered(&mut self, _client: &Client, _lsn: u64) -> Result<(), Failure> {
        Ok(())
    }

    /// What the writer writes, for messages (`"pgtrickle_changes"."rowid_cdc"_*`).
    fn target(&self) -> String;

    /// What names the position the writer records (its table and row), for the writer lock
    /// taken before it is read ([`writer_lock`]).
    fn position_key(&self) -> String;
}

/// The connection's loop: one database transaction per captured transaction, committed once
/// the writer finished it; the stream is acknowledged through `acks`.
async fn serve<W: Writer>(
    client: &mut Client,
    writer: &mut W,
    rx: &Receiver<Cmd>,
    acks: &SyncSender<()>,
    budget: &Budget,
) -> Result<(), Failure> {
    let target = writer.target();
    let failed = |what: &str, e: tokio_postgres::Error| db_error(&format!("{what} {target}"), &e);
    loop {
        // The connection task runs while this one awaits; between transactions it waits for
        // the stream (a blocking receive on this thread of its own).
        let mut next = match rx.recv() {
            Ok(Cmd::Commit(..)) => {
                return Err("a commit with no open transaction".to_string().into());
            }
            Ok(Cmd::Covered(lsn)) => {
                writer.covered(client, lsn).await?;
                continue;
            }
            Ok(cmd) => Some(cmd),
            Err(_) => return Ok(()),
        };
        let txn = client
            .transaction()
            .await
            .map_err(|e| failed("cannot begin a transaction on", e))?;
        let (commit_lsn, chunks) = loop {
            let cmd = match next.take() {
                Some(cmd) => cmd,
                None => match rx.recv() {
                    Ok(cmd) => cmd,
                    // The stream stopped mid-transaction: nothing of it is committed.
                    Err(_) => return Ok(()),
                },
            };
            match cmd {
                Cmd::Shape(shape) => writer.shape(&txn, shape).await?,
                Cmd::Rows(rows, cost) => {
                    let written = writer.rows(&txn, rows).await;
                    budget.give(cost);
                    written?;
                }
                Cmd::Commit(lsn, chunks) => break (lsn, chunks),
                Cmd::Covered(_) => {
                    return Err("a coverage record inside a transaction".to_string().into());
                }
            }
        };
        writer.finish(&txn, commit_lsn, chunks.as_deref()).await?;
        txn.commit()
            .await
            .map_err(|e| failed("cannot commit the changes into", e))?;
        if acks.send(()).is_err() {
            return Ok(());
        }
    }
}
