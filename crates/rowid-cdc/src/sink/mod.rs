//! Sinks for change events: the one [`Sink`] trait and one module per sink.
//!
//! A sink receives a transaction's events, then `commit`; when `commit` returns, everything
//! up to that transaction is durable, and only then may its position be acknowledged to the
//! server. A sink whose commit costs a round trip and a flush may group transactions
//! ([`Sink::end_transaction`]): the pipeline then records and acknowledges them only once a
//! later commit made the group durable. What a sink needs to resume exactly after a crash is its own business: it returns
//! it as a [`Durable`] record, which the state file keeps without reading it and hands back
//! when the sink is reopened ([`jsonl::JsonlFile`]: its committed length); a sink that commits
//! its position with its changes ([`postgres::PostgresSink`]) reports it through
//! [`Sink::delivered`] instead.
//!
//! - [`jsonl`]: JSON lines into a file (fsynced at each commit) or to standard output;
//! - [`null`]: counted and dropped (benchmarks);
//! - [`postgres`]: change rows into a PostgreSQL change buffer (the `cli` feature);
//! - [`nats`]: JSON lines into a NATS JetStream stream, exactly once (the `cli` feature);
//! - [`factory`]: the sink the command line names (the `cli` feature).

use std::io;

use std::sync::Arc;

use rowid_registry::schema_message::RelationSchema;
use serde_json::Value;

use crate::event::ChangeEvent;
use crate::lsn::Lsn;

#[cfg(feature = "cli")]
pub mod factory;
pub mod jsonl;
#[cfg(feature = "cli")]
pub mod nats;
pub mod null;
#[cfg(feature = "cli")]
pub mod postgres;

pub use jsonl::{JsonlFile, JsonlStdout};
pub use null::Null;

/// Where a committed transaction left the sink, in the sink's own terms, recorded in the
/// state file (under `"sink"`) and given back when the sink is reopened. Opaque to the state
/// file but for `"position"`, which a sink recording its own position names ([`Sink::delivered`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Durable {
    /// `None`: the sink keeps no record of its own.
    pub record: Option<Value>,
}

impl Durable {
    /// The record of a sink whose own position (the commit LSN of the last transaction it
    /// holds) is `position`.
    pub fn at(position: Option<Lsn>) -> Durable {
        Durable {
            record: position.map(|p| serde_json::json!({ "position": p.to_string() })),
        }
    }

    /// The position a record of [`Durable::at`] names.
    pub fn position(record: Option<&Value>) -> Option<Lsn> {
        record?.get("position")?.as_str()?.parse().ok()
    }
}

/// Receives change events, transaction by transaction.
pub trait Sink {
    /// One change of the open transaction.
    fn change(&mut self, event: &ChangeEvent) -> io::Result<()>;
    /// The identity schema of a relation changed in the open transaction `xid` (a DDL): called
    /// before its [`Sink::commit`], also when none of the relation's rows changed in it. A sink
    /// keeping state by identity follows it at the DDL's position; the others ignore it.
    fn schema_changed(
        &mut self,
        _xid: u32,
        _commit_lsn: Lsn,
        _schema: &Arc<RelationSchema>,
    ) -> io::Result<()> {
        Ok(())
    }
    /// Makes every change written so far durable.
    fn commit(&mut self) -> io::Result<Durable>;
    /// The open transaction ended; the sink may leave it to become durable with the
    /// transactions after it (group commit): `Ok(None)` says it is not durable yet, and only
    /// a later [`Sink::commit`] (or an `end_transaction` returning `Some`) makes it, and every
    /// transaction before it, durable. The pipeline asks for this only when it will call
    /// `commit` once the stream has nothing more to hand over. Default: commit now.
    fn end_transaction(&mut self) -> io::Result<Option<Durable>> {
        self.commit().map(Some)
    }
    /// Where the last commit (or the opening) left the sink.
    fn durable(&self) -> Durable;
    /// The commit LSN through which the sink itself recorded delivery, when it records one
    /// (a PostgreSQL sink commits its position with the changes; it can be ahead of the
    /// state file). `None`: the state file is the only record. A sink that records one also
    /// names it in its [`Durable`] record as `{"position": "X/X"}`: a sink found behind the
    /// position the state file recorded for it lost what it had made durable, and is refused
    /// ([`crate::pipeline::Pipeline::new`]).
    fn delivered(&self) -> Option<Lsn> {
        None
    }
    /// Where the chunked snapshots stand as of the open transaction ([`crate::chunks::ChunkState`]
    /// as JSON), given before the [`Sink::commit`] (or [`Sink::end_transaction`]) of every
    /// transaction while tables are read in chunks. A sink that can be ahead of the state file
    /// commits it with its rows, so that a restart resumes the chunks from the sink when it
    /// is ahead ([`Sink::recorded_chunks`]); the others ignore it.
    fn record_chunks(&mut self, _chunks: &Value) {}
    /// What [`Sink::record_chunks`] gave with the sink's last committed transaction, when it
    /// keeps it.
    fn recorded_chunks(&self) -> Option<Value> {
        None
    }
    /// What the sink writes into, for messages (`the replica in "pgtrickle_replica"`, `NATS
    /// stream CDC`).
    fn describe(&self) -> String {
        "the sink".to_string()
    }
    /// For a sink writing into a database: that database (`system_identifier/database OID`,
    /// when its role may read it) and the OIDs of the sink's own tables there. A capture of
    /// the same database must not capture them.
    fn own_tables(&self) -> Option<(Option<String>, Vec<u32>)> {
        None
    }
    /// Every transaction that committed before `lsn` is durable in the sink (the stream
    /// reached `lsn`, a coverage message's position, with nothing in flight, and
    /// [`Sink::commit`] returned since: [`crate::pipeline::Pipeline::covered_at`]). A sink
    /// that others read while it writes (the change buffers a DIFFERENTIAL stream table reads,
    /// spec/change-buffer.md §5) records it for them; the others ignore it.
    fn covered(&mut self, _lsn: Lsn) -> io::Result<()> {
        Ok(())
    }
}

impl<S: Sink + ?Sized> Sink for Box<S> {
    fn change(&mut self, event: &ChangeEvent) -> io::Result<()> {
        (**self).change(event)
    }

    fn schema_changed(
        &mut self,
        xid: u32,
        commit_lsn: Lsn,
        schema: &Arc<RelationSchema>,
    ) -> io::Result<()> {
        (**self).schema_changed(xid, commit_lsn, schema)
    }

    fn commit(&mut self) -> io::Result<Durable> {
        (**self).commit()
    }

    fn end_transaction(&mut self) -> io::Result<Option<Durable>> {
        (**self).end_transaction()
    }

    fn durable(&self) -> Durable {
        (**self).durable()
    }

    fn delivered(&self) -> Option<Lsn> {
        (**self).delivered()
    }

    fn record_chunks(&mut self, chunks: &Value) {
        (**self).record_chunks(chunks)
    }

    fn recorded_chunks(&self) -> Option<Value> {
        (**self).recorded_chunks()
    }

    fn describe(&self) -> String {
        (**self).describe()
    }

    fn own_tables(&self) -> Option<(Option<String>, Vec<u32>)> {
        (**self).own_tables()
    }

    fn covered(&mut self, lsn: Lsn) -> io::Result<()> {
        (**self).covered(lsn)
    }
}
