//! The PostgreSQL sink: change rows into a change buffer whose shape is
//! `rowid_registry::buffer` (spec/change-buffer.md), the one every capture path writes.
//!
//! Each transaction's changes are streamed with binary `COPY` inside one database
//! transaction, together with the sink's position (the transaction's commit LSN, in
//! `rowid_cdc_position` beside the buffer); `COMMIT` is what makes them durable, and the
//! session runs with `synchronous_commit = on` whatever the server's or the role's default,
//! so a commit the server answered is on disk. The position and the rows commit atomically,
//! so the sink can be ahead of the state file, never behind it: a restart replays the
//! transactions between the two without writing them again
//! ([`crate::capture::Capture::with_delivered`]).
//!
//! Before anything is written, the buffer is created from the registry's DDL when it does
//! not exist, and otherwise checked: its columns must be the buffer's, no row may carry
//! another `row_identity_version` or `row_probe_version`, and nobody but the sink's own role
//! may write it or make writing it run code (`rowid_registry::buffer::check_writers`: owner,
//! grants, triggers, rules, row security; the same for the position table, and the schema
//! must belong to the sink's role or a superuser). A mismatch refuses the buffer.
//!
//! The connection runs on a thread of its own (tokio-postgres on a one-thread runtime,
//! connected by [`crate::connect::net`]: TLS, no clear-text password), fed through a channel bounded
//! in bytes ([`MAX_IN_FLIGHT_BYTES`]), not rows: memory stays flat in transaction size and in
//! identity size, and the replication stream's runtime never waits on the sink except at a
//! commit or when that budget is spent.

use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rowid_registry::buffer::{self, BufferOp, CatalogColumn, Writers};
use rowid_registry::sql::{QualifiedName, quote_ident};
use tokio_postgres::Client;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{PgLsn, ToSql, Type};

use crate::connect::conninfo::Conninfo;
use crate::connect::net;
use crate::event::{ChangeEvent, Op};
use crate::lsn::Lsn;
use crate::sink::{Durable, Sink};

/// The table, beside the buffer, where the sink records its position per slot.
pub const POSITION_TABLE: &str = "rowid_cdc_position";

/// Bytes of change rows in flight between the stream and the sink's connection at most (a
/// single larger row is sent alone).
pub const MAX_IN_FLIGHT_BYTES: usize = 8 << 20;

/// What a row costs in the budget beyond its identities and reason.
const ROW_OVERHEAD: usize = 64;

/// The buffer a sink writes when none is named.
pub fn default_buffer() -> QualifiedName {
    QualifiedName::new(buffer::DEFAULT_SCHEMA, "rowid_cdc")
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
}

impl Row {
    fn cost(&self) -> usize {
        ROW_OVERHEAD
            + self.new_id.as_ref().map_or(0, Vec::len)
            + self.old_id.as_ref().map_or(0, Vec::len)
            + self.unidentified.as_ref().map_or(0, String::len)
    }
}

#[derive(Debug)]
enum Cmd {
    Row(Row),
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
        let worker = std::thread::Builder::new()
            .name("rowid-cdc-sink".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Failure::from(format!("sink runtime: {e}")))?;
                let out = runtime.block_on(async {
                    let mut client = match open_connection(&target).await {
                        Ok((client, position, opened)) => {
                            let _ = ready_tx.send(Ok((position, opened)));
                            client
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return Ok(());
                        }
                    };
                    serve(&mut client, &target, &rx, &ack_tx, &worker_budget).await
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

    fn send(&mut self, cmd: Cmd) -> io::Result<()> {
        let alive = self.worker.as_ref().is_some_and(|w| !w.is_finished());
        if let (Cmd::Row(row), true) = (&cmd, alive) {
            self.budget.take(row.cost());
        }
        let sent = match &self.tx {
            Some(tx) => tx.send(cmd).is_ok(),
            None => false,
        };
        if sent { Ok(()) } else { Err(self.failed()) }
    }
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
        };
        self.send(Cmd::Row(row))
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

/// [`buffer::WRITERS_QUERY`] for `table`.
async fn writers(client: &Client, table: &str) -> Result<Writers, Failure> {
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

/// Creates or checks the buffer and the position table; returns the recorded position and
/// both tables' OIDs.
async fn prepare(client: &mut Client, target: &Target) -> Result<(Option<Lsn>, Vec<u32>), Failure> {
    let b = &target.buffer;
    let name = b.quoted();
    let pos = position_table(b);
    let me: String = client
        .query_one("SELECT CURRENT_USER::pg_catalog.text", &[])
        .await
        .map_err(|e| db_error("cannot read the sink's role", &e))?
        .get(0);
    let me_quoted: String = client
        .query_one(
            "SELECT CURRENT_USER::pg_catalog.regrole::pg_catalog.text",
            &[],
        )
        .await
        .map_err(|e| db_error("cannot read the sink's role", &e))?
        .get(0);
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
    let exists: bool = client
        .query_one("SELECT pg_catalog.to_regclass($1) IS NOT NULL", &[&name])
        .await
        .map_err(|e| db_error(&format!("cannot look up {name}"), &e))?
        .get(0);
    if !exists {
        let ddl = format!("{}; {}", buffer::create_table(b), buffer::revoke_public(b));
        client
            .batch_execute(&ddl)
            .await
            .map_err(|e| db_error(&format!("cannot create the change buffer {name}"), &e))?;
    }
    buffer::check_writers(&name, &writers(client, &name).await?, &me_quoted)
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
        })
        .collect();
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
    for t in [&name, &pos.quoted()] {
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

const TYPES: [Type; 11] = [
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
];

/// The connection's loop: one database transaction per captured transaction.
async fn serve(
    client: &mut Client,
    target: &Target,
    rx: &Receiver<Cmd>,
    acks: &SyncSender<()>,
    budget: &Budget,
) -> Result<(), Failure> {
    let name = target.buffer.quoted();
    // The versions are written, not left to the buffer's defaults: a buffer created by
    // another release (its CHECK constraints naming its versions) refuses the first row.
    let copy = format!(
        "COPY {name} (\"xid\", \"seq\", \"source_relid\", \"op\", {}, {}, \"commit_lsn\", \
         \"change_lsn\", \"row_identity_version\", \"row_probe_version\", {}) \
         FROM STDIN (FORMAT binary)",
        quote_ident(rowid_registry::sql::ROW_ID),
        quote_ident(buffer::OLD_ROW_ID),
        quote_ident(buffer::UNIDENTIFIED)
    );
    let upsert = format!(
        "INSERT INTO {} (\"buffer\", \"slot\", \"commit_lsn\") VALUES ($1, $2, $3) \
         ON CONFLICT (\"buffer\", \"slot\") DO UPDATE SET \"commit_lsn\" = EXCLUDED.\"commit_lsn\"",
        position_table(&target.buffer).quoted()
    );
    let write = |what: &str, e: tokio_postgres::Error| db_error(&format!("{what} {name}"), &e);
    loop {
        // The connection task runs while this one awaits; between transactions it waits for
        // the stream (a blocking receive on this thread of its own).
        let first = match rx.recv() {
            Ok(Cmd::Row(row)) => row,
            Ok(Cmd::Commit(_)) => {
                return Err("a commit with no open transaction".to_string().into());
            }
            Err(_) => return Ok(()),
        };
        let txn = client
            .transaction()
            .await
            .map_err(|e| write("cannot begin a transaction on", e))?;
        let commit_lsn = {
            let sink = txn
                .copy_in(&copy)
                .await
                .map_err(|e| write("cannot COPY into", e))?;
            let mut w = pin!(BinaryCopyInWriter::new(sink, &TYPES));
            let mut row = first;
            let commit_lsn = loop {
                let new_id = row.new_id.as_deref();
                let old_id = row.old_id.as_deref();
                let values: [&(dyn ToSql + Sync); 11] = [
                    &row.xid,
                    &row.seq,
                    &row.relid,
                    &row.op,
                    &new_id,
                    &old_id,
                    &PgLsn::from(row.commit_lsn),
                    &PgLsn::from(row.change_lsn),
                    &buffer::ROW_IDENTITY_VERSION,
                    &buffer::ROW_PROBE_VERSION,
                    &row.unidentified,
                ];
                let written = w.as_mut().write(&values).await;
                budget.give(row.cost());
                written.map_err(|e| write("cannot write a change into", e))?;
                match rx.recv() {
                    Ok(Cmd::Row(next)) => row = next,
                    Ok(Cmd::Commit(lsn)) => break lsn,
                    // The stream stopped mid-transaction: nothing of it is committed.
                    Err(_) => return Ok(()),
                }
            };
            w.finish()
                .await
                .map_err(|e| write("cannot finish the COPY into", e))?;
            commit_lsn
        };
        txn.execute(&upsert, &[&name, &target.slot, &PgLsn::from(commit_lsn)])
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
