//! The PostgreSQL sink: change rows with their row images into one change buffer per source
//! table, `<schema>.<prefix>_<source oid>`, whose shape is `rowid_registry::buffer`
//! (spec/change-buffer.md format 3), the one every capture path writes.
//!
//! Each transaction's changes are streamed with binary `COPY` inside one database
//! transaction (one `COPY` per run of changes of one table; the image values are pgoutput's
//! binary send forms, passed through untouched: binary `COPY` reads exactly that form),
//! together with the sink's position (the transaction's commit LSN, in
//! `rowid_cdc_position` beside the buffer); `COMMIT` is what makes them durable, and the
//! session runs with `synchronous_commit = on` whatever the server's or the role's default,
//! so a commit the server answered is on disk. The position and the rows commit atomically,
//! so the sink can be ahead of the state file, never behind it: a restart replays the
//! transactions between the two without writing them again
//! ([`crate::capture::Capture::with_delivered`]).
//!
//! **A source's DDL is followed in the target transaction of the first change after it**: the
//! relation's columns travel with every change (from the Relation message and the identity
//! schema in force at its position); when they differ from what the buffer holds, the buffer
//! is altered first (`rowid_registry::buffer::alter_statements`, matched by `attnum`).
//!
//! Before anything is written to a buffer, it is created from the registry's DDL when it does
//! not exist, and otherwise checked: its columns must be the buffer's, no row may carry
//! another `row_identity_version` or `row_probe_version`, and nobody but the sink's own role
//! may write it or make writing it run code (`rowid_registry::buffer::check_writers`: owner,
//! grants, triggers, rules, row security; the same for the position table, and the schema
//! must belong to the sink's role or a superuser). A mismatch refuses the buffer.
//!
//! The connection runs on a thread of its own (tokio-postgres on a one-thread runtime,
//! connected by [`crate::connect::net`]: TLS, no clear-text password), fed rows in batches
//! (256 rows or 256 KiB; one channel message and at most one wake-up per batch) through a
//! channel bounded in bytes ([`MAX_IN_FLIGHT_BYTES`]), not rows: memory stays flat in
//! transaction size and in identity size, and the replication stream's runtime never waits
//! on the sink except at a commit or when that budget is spent.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use rowid_registry::buffer::{self, BufferOp, CatalogColumn, ImageColumn, Side, Writers};
use rowid_registry::sql::{QualifiedName, quote_ident};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{PgLsn, ToSql, Type};
use tokio_postgres::{Client, GenericClient};

use crate::connect::conninfo::Conninfo;
use crate::connect::net;
use crate::connect::raw::SendForm;
use crate::event::{CellRef, ChangeEvent, ColumnMeta, OldKind, Op, RowImage};
use crate::lsn::Lsn;
use crate::sink::{Durable, Sink};

/// The table, beside the buffer, where the sink records its position per slot.
pub const POSITION_TABLE: &str = "rowid_cdc_position";

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

/// The buffer prefix a sink writes when none is named: buffers
/// `pgtrickle_changes.rowid_cdc_<source oid>`.
pub fn default_buffer() -> QualifiedName {
    QualifiedName::new(buffer::DEFAULT_SCHEMA, "rowid_cdc")
}

/// The buffer of source relation `relid` under `prefix` (`schema.prefix_<relid>`).
pub fn buffer_of(prefix: &QualifiedName, relid: u32) -> QualifiedName {
    QualifiedName {
        schema: prefix.schema.clone(),
        name: format!("{}_{relid}", prefix.name),
    }
}

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
    /// The buffer of `relid` must hold `images` (the source's columns at the next change's
    /// position) before the next row of it; `None`: its columns are unknown at this position
    /// (no identity schema describes them), so the buffer is left as it is.
    Shape {
        relid: u32,
        relation: String,
        images: Option<Vec<ImageColumn>>,
    },
    /// Rows of the open transaction, in order, and what they cost in the budget.
    Rows(Vec<Row>, usize),
    /// Finish the transaction committing at this LSN.
    Commit(u64),
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
    /// Commit LSN of the open transaction, when a row of it was sent.
    open: Option<Lsn>,
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

/// The columns last sent for a relation's buffer (`None`: unknown at that position), and the
/// event columns they were made from: an event with the same shared columns needs no
/// comparison.
type Shape = (Arc<[ColumnMeta]>, Option<Vec<ImageColumn>>);

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

/// Where to write and for which slot.
#[derive(Clone, Debug)]
pub struct Target {
    /// The connection (its password is never printed).
    pub config: Conninfo,
    /// The buffer.
    pub buffer: QualifiedName,
    /// The slot whose position is recorded.
    pub slot: String,
    /// No state file exists yet: a recorded position for this slot would be changes no
    /// state accounts for, and is refused.
    pub fresh: bool,
    /// The captured database (`system_identifier/database OID`, when readable), and whether
    /// the sink writes into it by definition (`postgres:` without a DSN): the sink's own
    /// buffers there are published too, and their changes are skipped.
    pub source_database: Option<String>,
    /// The sink writes into the captured database.
    pub in_source: bool,
}

impl PostgresSink {
    /// Connects, creates or checks the buffer, reads the sink's position. Errors name the
    /// buffer and what is wrong; nothing is written to a buffer that fails a check.
    pub fn open(target: Target) -> io::Result<PostgresSink> {
        let (tx, rx) = channel::<Cmd>();
        let (ack_tx, acks) = sync_channel::<()>(1);
        let (ready_tx, ready) = sync_channel::<Result<(Option<Lsn>, Opened), Failure>>(1);
        let table = target.buffer.quoted();
        let budget = Arc::new(Budget::default());
        let worker_budget = budget.clone();
        let own = Arc::new(Mutex::new(HashSet::new()));
        let worker_own = own.clone();
        let worker = std::thread::Builder::new()
            .name("rowid-cdc-sink".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Failure::from(format!("sink runtime: {e}")))?;
                let out = runtime.block_on(async {
                    let opening = async {
                        let (client, position, opened) = open_connection(&target).await?;
                        let same_database = target.in_source
                            || (opened.database.is_some()
                                && opened.database == target.source_database);
                        let mut buffers = Buffers::new(&target, worker_own, same_database);
                        buffers.load_own(&client).await?;
                        Ok::<_, Failure>((client, position, opened, buffers))
                    };
                    let (mut client, mut buffers) = match opening.await {
                        Ok((client, position, opened, buffers)) => {
                            let _ = ready_tx.send(Ok((position, opened)));
                            (client, buffers)
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return Ok(());
                        }
                    };
                    serve(
                        &mut client,
                        &target,
                        &mut buffers,
                        &rx,
                        &ack_tx,
                        &worker_budget,
                    )
                    .await
                });
                worker_budget.release_all();
                out
            })?;
        let (delivered, opened) = match ready.recv() {
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
            delivered,
            open: None,
            seq: 0,
            opened,
            shapes: HashMap::new(),
            batch: Vec::new(),
            batch_cost: 0,
            own,
        })
    }

    /// The buffer, quoted.
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
        if self
            .own
            .lock()
            .map(|own| own.contains(&event.relid))
            .unwrap_or(false)
        {
            return Ok(());
        }
        // Events of one Relation message share their columns: compared once.
        let same = self
            .shapes
            .get(&event.relid)
            .is_some_and(|(columns, _)| Arc::ptr_eq(columns, &event.columns));
        if !same {
            let images = image_columns(event);
            let changed = self.shapes.get(&event.relid).map(|(_, i)| i) != Some(&images);
            self.shapes
                .insert(event.relid, (event.columns.clone(), images.clone()));
            if changed {
                self.send(Cmd::Shape {
                    relid: event.relid,
                    relation: event.relation.to_string(),
                    images,
                })?;
            }
        }
        let known = self
            .shapes
            .get(&event.relid)
            .is_some_and(|(_, images)| images.is_some());
        if self.open.is_none() {
            self.open = Some(event.commit_lsn);
            self.seq = 0;
        }
        self.seq += 1;
        let op = match event.op {
            // The start checks refuse --snapshot with this sink (a buffer's rows are changes);
            // a snapshot row would be the insert of its row.
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
                (Some(image), true) => Some(cells(event, image)?),
                _ => None,
            },
            old: match (&event.old, known) {
                (Some(image), true) => Some(cells(event, image)?),
                _ => None,
            },
        };
        self.push_row(row)
    }

    fn commit(&mut self) -> io::Result<Durable> {
        // A transaction with no change for this sink needs no round trip: the state file
        // records it.
        if let Some(commit_lsn) = self.open.take() {
            self.send(Cmd::Commit(commit_lsn.0))?;
            if self.acks.recv().is_err() {
                return Err(self.failed());
            }
            self.delivered = Some(commit_lsn);
        }
        Ok(Durable::default())
    }

    fn durable(&self) -> Durable {
        Durable::default()
    }

    fn delivered(&self) -> Option<Lsn> {
        self.delivered
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

/// Connects, sets up the session, creates or checks the tables; returns the client, the
/// recorded position and what was found.
async fn open_connection(target: &Target) -> Result<(Client, Option<Lsn>, Opened), Failure> {
    let connected = net::connect(&target.config).await.map_err(|e| Failure {
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
    let (position, tables) = prepare(&mut client, target).await?;
    let database = net::database_id(&client).await;
    Ok((
        client,
        position,
        Opened {
            synchronous_commit,
            tables,
            database,
        },
    ))
}

/// What every sink session runs first: the search path locked (every name the sink uses is
/// qualified anyway), and `synchronous_commit = on`, so that a COMMIT the server answered is
/// durable whatever the server's, database's or role's default. Returns the setting as the
/// server then reports it.
pub async fn session_setup(client: &Client) -> Result<String, tokio_postgres::Error> {
    client
        .batch_execute("SET search_path = pg_catalog, pg_temp; SET synchronous_commit = on")
        .await?;
    Ok(client
        .query_one(
            "SELECT pg_catalog.current_setting('synchronous_commit')",
            &[],
        )
        .await?
        .get(0))
}

fn position_table(buffer: &QualifiedName) -> QualifiedName {
    QualifiedName {
        schema: buffer.schema.clone(),
        name: POSITION_TABLE.into(),
    }
}

/// The sink's role as `regrole` prints it (quoted where needed), as owners are compared.
async fn sink_role(client: &Client) -> Result<String, Failure> {
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
    })
}

/// Checks the buffers' schema, creates or checks the position table; returns the recorded
/// position and the position table's OID. Buffers are created or checked when their first
/// change arrives ([`Buffers::ensure`]).
async fn prepare(client: &mut Client, target: &Target) -> Result<(Option<Lsn>, Vec<u32>), Failure> {
    let b = &target.buffer;
    let name = b.quoted();
    let pos = position_table(b);
    let me: String = client
        .query_one("SELECT CURRENT_USER::pg_catalog.text", &[])
        .await
        .map_err(|e| db_error("cannot read the sink's role", &e))?
        .get(0);
    let me_quoted = sink_role(client).await?;
    if let Some(schema) = &b.schema {
        // CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the schema is
        // there (the extension's pgtrickle_changes, say): created only when missing.
        let missing = client
            .query_opt(
                "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) $1",
                &[schema],
            )
            .await
            .map_err(|e| db_error(&format!("cannot read the schema of {name}"), &e))?
            .is_none();
        if missing {
            client
                .batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS {}",
                    quote_ident(schema)
                ))
                .await
                .map_err(|e| db_error(&format!("cannot create the schema of {name}"), &e))?;
        }
        // Whoever owns the schema can drop or rename what is in it.
        let owner: Option<(String, bool)> = client
            .query_opt(
                "SELECT n.nspowner::pg_catalog.regrole::pg_catalog.text, r.rolsuper \
                 FROM pg_catalog.pg_namespace n \
                 JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner \
                 WHERE n.nspname OPERATOR(pg_catalog.=) $1",
                &[schema],
            )
            .await
            .map_err(|e| db_error(&format!("cannot read the schema of {name}"), &e))?
            .map(|r| (r.get(0), r.get(1)));
        if let Some((owner, superuser)) = owner
            && owner != me_quoted
            && !superuser
        {
            return Err(Failure::from(format!(
                "{name} is refused: its schema {} belongs to {owner}, who could replace the \
                 buffer; use a schema of {me} (--buffer SCHEMA.TABLE)",
                quote_ident(schema)
            )));
        }
    }
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {p} (\"buffer\" pg_catalog.text NOT NULL, \
             \"slot\" pg_catalog.text NOT NULL, \"commit_lsn\" pg_catalog.pg_lsn NOT NULL, \
             PRIMARY KEY (\"buffer\", \"slot\")); \
             REVOKE ALL ON TABLE {p} FROM PUBLIC",
            p = pos.quoted()
        ))
        .await
        .map_err(|e| db_error(&format!("cannot create {}", pos.quoted()), &e))?;
    buffer::check_writers(
        &pos.quoted(),
        &writers(client, &pos.quoted()).await?,
        &me_quoted,
    )
    .map_err(|e| Failure::from(e.to_string()))?;
    let recorded: Option<PgLsn> = client
        .query_opt(
            &format!(
                "SELECT \"commit_lsn\" FROM {} WHERE \"buffer\" OPERATOR(pg_catalog.=) $1 \
                 AND \"slot\" OPERATOR(pg_catalog.=) $2",
                pos.quoted()
            ),
            &[&name, &target.slot],
        )
        .await
        .map_err(|e| db_error(&format!("cannot read {}", pos.quoted()), &e))?
        .map(|r| r.get(0));
    let recorded = recorded.map(|l| Lsn(u64::from(l)));
    if target.fresh
        && let Some(lsn) = recorded
    {
        return Err(Failure::from(format!(
            "{name} already holds changes of a slot named {:?}, through commit {lsn}, that no \
             state file accounts for: give the state file that wrote them (--state), or another \
             buffer, or delete that slot's rows from {name} and {}",
            target.slot,
            pos.quoted()
        )));
    }
    let mut tables = Vec::new();
    for t in [&pos.quoted()] {
        let oid: u32 = client
            .query_one(
                "SELECT $1::pg_catalog.text::pg_catalog.regclass::pg_catalog.oid",
                &[t],
            )
            .await
            .map_err(|e| db_error(&format!("cannot look up {t}"), &e))?
            .get(0);
        tables.push(oid);
    }
    Ok((recorded, tables))
}

/// The fixed columns' types, in [`buffer::COLUMNS`] order.
const TYPES: [Type; 14] = [
    Type::INT8,
    Type::INT4,
    Type::OID,
    Type::CHAR,
    Type::BYTEA,
    Type::BYTEA,
    Type::PG_LSN,
    Type::PG_LSN,
    Type::INT2,
    Type::INT2,
    Type::TEXT,
    Type::CHAR,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
];

/// A buffer the sink has checked (or created) and shaped in this connection.
#[derive(Debug)]
struct Known {
    quoted: String,
    /// Its image columns, in the order rows carry their values.
    columns: Vec<ImageColumn>,
}

/// The per-table buffers of one sink connection.
#[derive(Debug)]
struct Buffers {
    prefix: QualifiedName,
    known: HashMap<u32, Known>,
    /// Storage types by source type name (a domain's base type).
    storage: HashMap<String, String>,
    own: Arc<Mutex<HashSet<u32>>>,
    same_database: bool,
    me: String,
}

impl Buffers {
    fn new(target: &Target, own: Arc<Mutex<HashSet<u32>>>, same_database: bool) -> Buffers {
        Buffers {
            prefix: target.buffer.clone(),
            known: HashMap::new(),
            storage: HashMap::new(),
            own,
            same_database,
            me: String::new(),
        }
    }

    fn mark_own(&self, oid: u32) {
        if self.same_database
            && let Ok(mut own) = self.own.lock()
        {
            own.insert(oid);
        }
    }

    /// Reads the sink's role, and in the captured database the buffers already there (their
    /// changes come back through the slot and are skipped).
    async fn load_own(&mut self, client: &Client) -> Result<(), Failure> {
        self.me = sink_role(client).await?;
        if !self.same_database {
            return Ok(());
        }
        let schema = self
            .prefix
            .schema
            .clone()
            .unwrap_or_else(|| "public".into());
        let start = format!("{}_", self.prefix.name);
        let rows = client
            .query(
                "SELECT c.oid, c.relname::pg_catalog.text FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
                 WHERE n.nspname OPERATOR(pg_catalog.=) $1 \
                   AND pg_catalog.starts_with(c.relname::pg_catalog.text, $2)",
                &[&schema, &start],
            )
            .await
            .map_err(|e| db_error("cannot list the sink's buffers", &e))?;
        for row in rows {
            let name: String = row.get(1);
            let digits = &name[start.len().min(name.len())..];
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                self.mark_own(row.get(0));
            }
        }
        Ok(())
    }

    /// A source type's storage type in the sink's database (a domain's base type).
    async fn storage_type(
        &mut self,
        client: &impl GenericClient,
        relation: &str,
        column: &ImageColumn,
    ) -> Result<String, Failure> {
        if let Some(found) = self.storage.get(&column.sql_type) {
            return Ok(found.clone());
        }
        let found: String = client
            .query_one(buffer::STORAGE_TYPE_QUERY, &[&column.sql_type])
            .await
            .map_err(|e| {
                db_error(
                    &format!(
                        "the type {} of {relation}.{} is not one the sink's database knows",
                        column.sql_type, column.name
                    ),
                    &e,
                )
            })?
            .get(0);
        self.storage.insert(column.sql_type.clone(), found.clone());
        Ok(found)
    }

    /// Makes the buffer of `relid` exist, pass the checks, and hold `images` (the source's
    /// columns at the next change; `None`: unknown there, the buffer is left as it is), inside
    /// the open transaction.
    async fn ensure(
        &mut self,
        client: &impl GenericClient,
        relid: u32,
        relation: &str,
        images: Option<Vec<ImageColumn>>,
    ) -> Result<(), Failure> {
        let table = buffer_of(&self.prefix, relid);
        let name = table.quoted();
        let want = match images {
            Some(images) => {
                let mut want = Vec::with_capacity(images.len());
                for c in images {
                    let sql_type = self.storage_type(client, relation, &c).await?;
                    want.push(ImageColumn { sql_type, ..c });
                }
                buffer::check_image_names(relation, &want)
                    .map_err(|e| Failure::from(e.to_string()))?;
                Some(want)
            }
            None => None,
        };
        let have = match self.known.get(&relid) {
            Some(known) => known.columns.clone(),
            None => self.open_buffer(client, &table, want.as_deref()).await?,
        };
        let columns = match want {
            Some(want) => {
                // A retyped column of an empty buffer converts nothing (any source USING);
                // the sink is the buffer's only writer.
                let retyped = have.iter().any(|h| {
                    want.iter()
                        .any(|w| w.attnum == h.attnum && w.sql_type != h.sql_type)
                });
                let holds_rows = !retyped
                    || client
                        .query_one(&format!("SELECT EXISTS (SELECT FROM {name})"), &[])
                        .await
                        .map_err(|e| db_error(&format!("cannot read {name}"), &e))?
                        .get::<_, bool>(0);
                for sql in buffer::alter_statements(&table, &have, &want, holds_rows) {
                    client.batch_execute(&sql).await.map_err(|e| {
                        db_error(
                            &format!("cannot follow the columns of {relation} in {name}"),
                            &e,
                        )
                    })?;
                }
                want
            }
            None => have,
        };
        self.known.insert(
            relid,
            Known {
                quoted: name,
                columns,
            },
        );
        Ok(())
    }

    /// Creates the buffer `table` holding `images` (none when unknown) or checks the one
    /// there (owner, grants, code, shape, versions); returns the image columns it holds.
    async fn open_buffer(
        &mut self,
        client: &impl GenericClient,
        table: &QualifiedName,
        images: Option<&[ImageColumn]>,
    ) -> Result<Vec<ImageColumn>, Failure> {
        let name = table.quoted();
        let exists: bool = client
            .query_one("SELECT pg_catalog.to_regclass($1) IS NOT NULL", &[&name])
            .await
            .map_err(|e| db_error(&format!("cannot look up {name}"), &e))?
            .get(0);
        if !exists {
            let mut ddl = buffer::create_table(table, images.unwrap_or_default());
            ddl.push(buffer::revoke_public(table));
            client
                .batch_execute(&ddl.join("; "))
                .await
                .map_err(|e| db_error(&format!("cannot create the change buffer {name}"), &e))?;
        }
        buffer::check_writers(&name, &writers(client, &name).await?, &self.me)
            .map_err(|e| Failure::from(e.to_string()))?;
        let columns: Vec<CatalogColumn> = client
            .query(buffer::SHAPE_QUERY, &[&name])
            .await
            .map_err(|e| db_error(&format!("cannot read the columns of {name}"), &e))?
            .iter()
            .map(|r| CatalogColumn {
                name: r.get(0),
                sql_type: r.get(1),
                not_null: r.get(2),
                comment: r.get(3),
            })
            .collect();
        let have =
            buffer::check_shape(&name, &columns).map_err(|e| Failure::from(e.to_string()))?;
        if let Some(row) = client
            .query_opt(&buffer::foreign_versions_query(&name), &[])
            .await
            .map_err(|e| db_error(&format!("cannot read the versions in {name}"), &e))?
        {
            return Err(buffer::foreign_versions(&name, row.get(0), row.get(1))
                .to_string()
                .into());
        }
        let oid: u32 = client
            .query_one(
                "SELECT $1::pg_catalog.text::pg_catalog.regclass::pg_catalog.oid",
                &[&name],
            )
            .await
            .map_err(|e| db_error(&format!("cannot look up {name}"), &e))?
            .get(0);
        self.mark_own(oid);
        Ok(have)
    }

    /// The `COPY` writing rows of `relid`'s buffer, and its column count.
    fn copy_statement(&self, relid: u32) -> Result<(String, usize), Failure> {
        let known = self.known.get(&relid).ok_or_else(|| {
            Failure::from(format!(
                "a change of relation OID {relid} before its buffer"
            ))
        })?;
        // The versions are written, not left to the buffer's defaults: a buffer created by
        // another release (its CHECK constraints naming its versions) refuses the first row.
        let mut columns = buffer::column_list();
        for c in &known.columns {
            for side in [Side::New, Side::Old] {
                columns.push_str(", ");
                columns.push_str(&quote_ident(&c.column(side)));
            }
        }
        Ok((
            format!(
                "COPY {} ({columns}) FROM STDIN (FORMAT binary)",
                known.quoted
            ),
            TYPES.len() + 2 * known.columns.len(),
        ))
    }
}

/// The COPY a transaction has open: the relation, the number of image fields, the writer.
type OpenCopy = Option<(u32, usize, std::pin::Pin<Box<BinaryCopyInWriter>>)>;

/// Why [`write_rows`] stopped.
enum RowsError {
    /// What failed (`"cannot COPY into"` ...) and the server's error.
    Db(&'static str, tokio_postgres::Error),
    /// The sink's own refusal.
    Failure(Failure),
}

/// Writes `rows` into their buffers, each run of one relation's rows through one `COPY`
/// (the open one goes on when the first row is of its relation).
async fn write_rows(
    txn: &tokio_postgres::Transaction<'_>,
    buffers: &mut Buffers,
    copy: &mut OpenCopy,
    rows: &[Row],
) -> Result<(), RowsError> {
    for row in rows {
        if copy.as_ref().map(|(relid, _, _)| *relid) != Some(row.relid) {
            if let Some((_, _, mut w)) = copy.take() {
                w.as_mut()
                    .finish()
                    .await
                    .map_err(|e| RowsError::Db("cannot finish the COPY into", e))?;
            }
            let (statement, fields) = buffers
                .copy_statement(row.relid)
                .map_err(RowsError::Failure)?;
            let sink = txn
                .copy_in(&statement)
                .await
                .map_err(|e| RowsError::Db("cannot COPY into", e))?;
            let mut types = TYPES.to_vec();
            types.resize(fields, Type::BYTEA);
            *copy = Some((
                row.relid,
                fields - TYPES.len(),
                Box::pin(BinaryCopyInWriter::new(sink, &types)),
            ));
        }
        match copy.as_mut() {
            Some((_, images, w)) => write_row(w.as_mut(), row, *images / 2)
                .await
                .map_err(|e| RowsError::Db("cannot write a change into", e))?,
            None => return Err(RowsError::Failure("no COPY for a row".to_string().into())),
        }
    }
    Ok(())
}

/// One row's COPY fields.
async fn write_row(
    w: std::pin::Pin<&mut BinaryCopyInWriter>,
    row: &Row,
    image_columns: usize,
) -> Result<(), tokio_postgres::Error> {
    let new_id = row.new_id.as_deref();
    let old_id = row.old_id.as_deref();
    let commit_lsn = PgLsn::from(row.commit_lsn);
    let change_lsn = PgLsn::from(row.change_lsn);
    let mut values: Vec<&(dyn ToSql + Sync)> = vec![
        &row.xid,
        &row.seq,
        &row.relid,
        &row.op,
        &new_id,
        &old_id,
        &commit_lsn,
        &change_lsn,
        &buffer::ROW_IDENTITY_VERSION,
        &buffer::ROW_PROBE_VERSION,
        &row.unidentified,
        &row.old_image,
        &row.backfilled,
        &row.unchanged_toast,
    ];
    fn value(image: &Option<Vec<Option<Bytes>>>, i: usize) -> SendForm<'_> {
        SendForm(
            image
                .as_ref()
                .and_then(|cells| cells.get(i))
                .and_then(|c| c.as_deref()),
        )
    }
    let forms: Vec<SendForm<'_>> = (0..image_columns)
        .flat_map(|i| [value(&row.new, i), value(&row.old, i)])
        .collect();
    values.extend(forms.iter().map(|f| f as &(dyn ToSql + Sync)));
    w.write(&values).await
}

/// The connection's loop: one database transaction per captured transaction, one `COPY` per
/// run of rows of one buffer, a buffer shaped before its first row.
async fn serve(
    client: &mut Client,
    target: &Target,
    buffers: &mut Buffers,
    rx: &Receiver<Cmd>,
    acks: &SyncSender<()>,
    budget: &Budget,
) -> Result<(), Failure> {
    let prefix = target.buffer.quoted();
    let upsert = format!(
        "INSERT INTO {} (\"buffer\", \"slot\", \"commit_lsn\") VALUES ($1, $2, $3) \
         ON CONFLICT (\"buffer\", \"slot\") DO UPDATE SET \"commit_lsn\" = EXCLUDED.\"commit_lsn\"",
        position_table(&target.buffer).quoted()
    );
    let write = |what: &str, e: tokio_postgres::Error| db_error(&format!("{what} {prefix}_*"), &e);
    loop {
        // The connection task runs while this one awaits; between transactions it waits for
        // the stream (a blocking receive on this thread of its own).
        let mut next = match rx.recv() {
            Ok(Cmd::Commit(_)) => {
                return Err("a commit with no open transaction".to_string().into());
            }
            Ok(cmd) => Some(cmd),
            Err(_) => return Ok(()),
        };
        let txn = client
            .transaction()
            .await
            .map_err(|e| write("cannot begin a transaction on", e))?;
        let mut copy: OpenCopy = None;
        let commit_lsn = loop {
            let cmd = match next.take() {
                Some(cmd) => cmd,
                None => match rx.recv() {
                    Ok(cmd) => cmd,
                    // The stream stopped mid-transaction: nothing of it is committed.
                    Err(_) => return Ok(()),
                },
            };
            match cmd {
                Cmd::Shape {
                    relid,
                    relation,
                    images,
                } => {
                    if let Some((_, _, mut w)) = copy.take() {
                        w.as_mut()
                            .finish()
                            .await
                            .map_err(|e| write("cannot finish the COPY into", e))?;
                    }
                    buffers.ensure(&txn, relid, &relation, images).await?;
                }
                Cmd::Rows(rows, cost) => {
                    let written = write_rows(&txn, buffers, &mut copy, &rows).await;
                    budget.give(cost);
                    written.map_err(|e| match e {
                        RowsError::Db(what, e) => write(what, e),
                        RowsError::Failure(f) => f,
                    })?;
                }
                Cmd::Commit(lsn) => {
                    if let Some((_, _, mut w)) = copy.take() {
                        w.as_mut()
                            .finish()
                            .await
                            .map_err(|e| write("cannot finish the COPY into", e))?;
                    }
                    break lsn;
                }
            }
        };
        txn.execute(&upsert, &[&prefix, &target.slot, &PgLsn::from(commit_lsn)])
            .await
            .map_err(|e| write("cannot record the position of", e))?;
        txn.commit()
            .await
            .map_err(|e| write("cannot commit the changes into", e))?;
        if acks.send(()).is_err() {
            return Ok(());
        }
    }
}
