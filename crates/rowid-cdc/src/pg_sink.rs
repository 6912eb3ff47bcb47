//! The PostgreSQL sink: change rows into a change buffer whose shape is
//! `rowid_registry::buffer` (spec/change-buffer.md), the one every capture path writes.
//!
//! Each transaction's changes are streamed with binary `COPY` inside one database
//! transaction, together with the sink's position (the transaction's commit LSN, in
//! `rowid_cdc_position` beside the buffer); `COMMIT` is what makes them durable. The position
//! and the rows commit atomically, so the sink can be ahead of the state file, never behind
//! it: a restart replays the transactions between the two without writing them again
//! ([`crate::capture::Capture::with_delivered`]).
//!
//! Before anything is written, the buffer is created from the registry's DDL when it does
//! not exist, and otherwise checked: its columns must be the buffer's, and no row may carry
//! another `row_identity_version` or `row_probe_version`. A mismatch refuses the buffer.
//!
//! The connection runs on a thread of its own (the synchronous `postgres` client), fed
//! through a bounded channel: memory stays flat in transaction size, and the replication
//! stream's runtime never waits on the sink except at a commit.

use std::io;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{PgLsn, ToSql, Type};
use postgres::{Client, NoTls};
use rowid_registry::buffer::{self, BufferOp, CatalogColumn};
use rowid_registry::sql::{QualifiedName, quote_ident};

use crate::event::{ChangeEvent, Op};
use crate::lsn::Lsn;
use crate::sink::{Durable, Sink};

/// The table, beside the buffer, where the sink records its position per slot.
pub const POSITION_TABLE: &str = "rowid_cdc_position";

/// The buffer a sink writes when none is named.
pub fn default_buffer() -> QualifiedName {
    QualifiedName::new(buffer::DEFAULT_SCHEMA, "rowid_cdc")
}

/// Rows in flight between the stream and the sink's connection.
const CHANNEL_ROWS: usize = 4096;

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
}

#[derive(Debug)]
enum Cmd {
    Row(Row),
    /// Finish the transaction committing at this LSN.
    Commit(u64),
}

/// Change rows into a PostgreSQL change buffer.
#[derive(Debug)]
pub struct PostgresSink {
    table: String,
    tx: Option<SyncSender<Cmd>>,
    acks: Receiver<()>,
    worker: Option<JoinHandle<Result<(), Failure>>>,
    delivered: Option<Lsn>,
    /// Commit LSN of the open transaction, when a row of it was sent.
    open: Option<Lsn>,
    seq: i32,
}

/// Where to write and for which slot.
#[derive(Clone, Debug)]
pub struct Target {
    /// The connection (its password is never printed).
    pub config: tokio_postgres::Config,
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
        let (tx, rx) = sync_channel::<Cmd>(CHANNEL_ROWS);
        let (ack_tx, acks) = sync_channel::<()>(1);
        let (ready_tx, ready) = sync_channel::<Result<Option<Lsn>, Failure>>(1);
        let table = target.buffer.quoted();
        let worker = std::thread::Builder::new()
            .name("rowid-cdc-sink".into())
            .spawn(move || {
                let mut client = match connect(&target).and_then(|mut c| {
                    let position = prepare(&mut c, &target)?;
                    Ok((c, position))
                }) {
                    Ok((c, position)) => {
                        let _ = ready_tx.send(Ok(position));
                        c
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return Ok(());
                    }
                };
                serve(&mut client, &target, &rx, &ack_tx)
            })?;
        let delivered = match ready.recv() {
            Ok(Ok(position)) => position,
            Ok(Err(e)) => return Err(e.into_io()),
            Err(_) => return Err(join_error(Some(worker))),
        };
        Ok(PostgresSink {
            table,
            tx: Some(tx),
            acks,
            worker: Some(worker),
            delivered,
            open: None,
            seq: 0,
        })
    }

    /// The buffer, quoted.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The connection's thread ended: its error.
    fn failed(&mut self) -> io::Error {
        self.tx = None;
        join_error(self.worker.take())
    }

    fn send(&mut self, cmd: Cmd) -> io::Result<()> {
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
            Op::Insert => BufferOp::Insert,
            Op::Update => BufferOp::Update,
            Op::Delete => BufferOp::Delete,
            Op::Truncate => BufferOp::Truncate,
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
        Ok(Durable { len: None })
    }

    fn durable(&self) -> Durable {
        Durable { len: None }
    }

    fn delivered(&self) -> Option<Lsn> {
        self.delivered
    }
}

impl Drop for PostgresSink {
    fn drop(&mut self) {
        // Closing the channel ends the thread; an open COPY is abandoned and its transaction
        // rolls back with the connection.
        self.tx = None;
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

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::from(message.to_string())
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
fn db_error(what: &str, e: &postgres::Error) -> Failure {
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            Failure {
                message: format!("{what}: {} ({code})", db.message()),
                transient: code.starts_with("08") || code.starts_with("57"),
            }
        }
        None => {
            let mut s = format!("{what}: {e}");
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                s.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            // No server error: transient when it is the connection itself (refused, reset,
            // closed), not when a value could not be converted.
            let io = std::error::Error::source(e).is_some_and(|c| c.is::<io::Error>());
            Failure {
                message: s,
                transient: e.is_closed() || io,
            }
        }
    }
}

fn connect(target: &Target) -> Result<Client, Failure> {
    let config = postgres::Config::from(target.config.clone());
    config
        .connect(NoTls)
        .map_err(|e| db_error("cannot connect to the sink's database", &e))
}

fn position_table(buffer: &QualifiedName) -> QualifiedName {
    QualifiedName {
        schema: buffer.schema.clone(),
        name: POSITION_TABLE.into(),
    }
}

/// Creates or checks the buffer and the position table; returns the recorded position.
fn prepare(client: &mut Client, target: &Target) -> Result<Option<Lsn>, Failure> {
    let b = &target.buffer;
    let name = b.quoted();
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .map_err(|e| db_error(&format!("cannot look up {name}"), &e))?
        .get(0);
    if !exists {
        let mut ddl = String::new();
        if let Some(schema) = &b.schema {
            ddl.push_str(&format!(
                "CREATE SCHEMA IF NOT EXISTS {};",
                quote_ident(schema)
            ));
        }
        ddl.push_str(&buffer::create_table(b));
        ddl.push(';');
        ddl.push_str(&buffer::revoke_public(b));
        client
            .batch_execute(&ddl)
            .map_err(|e| db_error(&format!("cannot create the change buffer {name}"), &e))?;
    }
    let columns: Vec<CatalogColumn> = client
        .query(buffer::SHAPE_QUERY, &[&name])
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
        .map_err(|e| db_error(&format!("cannot read the versions in {name}"), &e))?
    {
        return Err(buffer::foreign_versions(&name, row.get(0), row.get(1))
            .to_string()
            .into());
    }
    let pos = position_table(b);
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {p} (\"buffer\" text NOT NULL, \"slot\" text NOT NULL, \
             \"commit_lsn\" pg_lsn NOT NULL, PRIMARY KEY (\"buffer\", \"slot\")); \
             REVOKE ALL ON TABLE {p} FROM PUBLIC",
            p = pos.quoted()
        ))
        .map_err(|e| db_error(&format!("cannot create {}", pos.quoted()), &e))?;
    let recorded: Option<PgLsn> = client
        .query_opt(
            &format!(
                "SELECT \"commit_lsn\" FROM {} WHERE \"buffer\" = $1 AND \"slot\" = $2",
                pos.quoted()
            ),
            &[&name, &target.slot],
        )
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
    Ok(recorded)
}

const TYPES: [Type; 10] = [
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
];

/// The connection's loop: one database transaction per captured transaction.
fn serve(
    client: &mut Client,
    target: &Target,
    rx: &Receiver<Cmd>,
    acks: &SyncSender<()>,
) -> Result<(), Failure> {
    let name = target.buffer.quoted();
    // The versions are written, not left to the buffer's defaults: a buffer created by
    // another release (its CHECK constraints naming its versions) refuses the first row.
    let copy = format!(
        "COPY {name} (\"xid\", \"seq\", \"source_relid\", \"op\", {}, {}, \"commit_lsn\", \
         \"change_lsn\", \"row_identity_version\", \"row_probe_version\") FROM STDIN (FORMAT binary)",
        quote_ident(rowid_registry::sql::ROW_ID),
        quote_ident(buffer::OLD_ROW_ID)
    );
    let upsert = format!(
        "INSERT INTO {} (\"buffer\", \"slot\", \"commit_lsn\") VALUES ($1, $2, $3) \
         ON CONFLICT (\"buffer\", \"slot\") DO UPDATE SET \"commit_lsn\" = EXCLUDED.\"commit_lsn\"",
        position_table(&target.buffer).quoted()
    );
    let write = |what: &str, e: postgres::Error| db_error(&format!("{what} {name}"), &e);
    loop {
        let first = match rx.recv() {
            Ok(Cmd::Row(row)) => row,
            Ok(Cmd::Commit(_)) => return Err("a commit with no open transaction".into()),
            Err(_) => return Ok(()),
        };
        let mut txn = client
            .transaction()
            .map_err(|e| write("cannot begin a transaction on", e))?;
        let commit_lsn = {
            let sink = txn
                .copy_in(&copy)
                .map_err(|e| write("cannot COPY into", e))?;
            let mut w = BinaryCopyInWriter::new(sink, &TYPES);
            let mut row = first;
            let commit_lsn = loop {
                let new_id = row.new_id.as_deref();
                let old_id = row.old_id.as_deref();
                let values: [&(dyn ToSql + Sync); 10] = [
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
                ];
                w.write(&values)
                    .map_err(|e| write("cannot write a change into", e))?;
                match rx.recv() {
                    Ok(Cmd::Row(next)) => row = next,
                    Ok(Cmd::Commit(lsn)) => break lsn,
                    // The stream stopped mid-transaction: nothing of it is committed.
                    Err(_) => return Ok(()),
                }
            };
            w.finish()
                .map_err(|e| write("cannot finish the COPY into", e))?;
            commit_lsn
        };
        txn.execute(&upsert, &[&name, &target.slot, &PgLsn::from(commit_lsn)])
            .map_err(|e| write("cannot record the position of", e))?;
        txn.commit()
            .map_err(|e| write("cannot commit the changes into", e))?;
        if acks.send(()).is_err() {
            return Ok(());
        }
    }
}
