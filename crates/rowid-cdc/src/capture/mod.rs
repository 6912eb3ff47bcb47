//! The capture state machine: pgoutput messages (protocol 1, committed transactions only)
//! in, change events with identities out. No I/O: the transport feeds it, a sink takes what
//! it emits.
//!
//! - **The identity schema travels in-band** (spec/identity-messages.md, format 2): a change
//!   of a row of `pgtrickle.identity_schemas` (the one table whose OID the caller
//!   authenticated, [`Capture::with_identity_table`]) replaces a relation's schema at its
//!   position; changes before it use the old one. Schemas written inside a transaction become
//!   the committed authority at its Commit. A logical message with the format-1 prefix is
//!   reported ([`Output::Notice`]) and ignored: any role can write one.
//! - **One relation never stops the others**: a change whose identity cannot be derived (no
//!   schema at its position, no old row to name what an UPDATE or DELETE removed, a Relation
//!   message the schema does not describe) is emitted as an [`Op::Unidentified`] event naming
//!   the change and why, unless the capture is strict ([`Capture::strict`]), where it is an
//!   error naming the table and the fix.
//! - **Bindings belong to their Relation message**: a binding is rebuilt whenever a new
//!   Relation message or a schema message for the relation arrives, and checked against the
//!   schema (key columns, replica identity) before the first change uses it.
//! - **Nothing is buffered**, with one exception: changes are emitted as they arrive,
//!   between a `Begin` and a `Commit` output; a sink makes them durable at `Commit`, so memory
//!   stays flat in transaction size. The exception: from a transaction's first change of a
//!   relation that has no identity schema, its messages are held, in order (`hold`: in
//!   memory up to a bound, then in an unlinked temporary file), until that relation's first
//!   schema arrives in the same transaction, and then applied with it (`CREATE TABLE ... AS`
//!   and `SELECT INTO` write the new table's rows before the event trigger writes its schema,
//!   at the command's end); or until the commit, where they are applied as they would have
//!   been (unidentified). A transaction whose commit is at or below the resume position was
//!   already delivered: its changes are skipped (its Relation messages still update the
//!   relation cache).
//! - **A sink can be ahead of the state file** (a PostgreSQL sink commits the changes and its
//!   position in one transaction; the process can die before the state file records it).
//!   Transactions after the resume position and at or below the sink's delivered position
//!   are replayed silently: their schema messages are applied, their changes are not emitted,
//!   and their Commit is emitted marked `delivered` so the state catches up.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use rowid_codec::Domain;
use rowid_pgoutput::{
    BoundIdentity, Column, Decoder, FlagBits, Message, OldTuple, Options, Relation,
    RelationIdentity, RowValues, Tuple, complete,
};

pub mod error;
mod hold;
mod images;

use crate::event::{ChangeEvent, ColumnMeta, Op, RowImage, SendRow, Unidentified};
use crate::lsn::Lsn;
pub use error::CaptureError;
use rowid_registry::schema_message::{
    IDENTITY_TABLE, MESSAGE_PREFIX, RelationSchema, ReplicaIdentity, SchemaMessage,
};

/// What [`Capture::apply`] emits, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A transaction to deliver begins.
    Begin {
        /// Transaction id.
        xid: u32,
        /// LSN of its commit record.
        commit_lsn: Lsn,
    },
    /// One change of it.
    Change(Box<ChangeEvent>),
    /// It committed: the sink makes everything up to here durable, then the position may be
    /// acknowledged.
    Commit {
        /// Transaction id.
        xid: u32,
        /// LSN of the commit record.
        commit_lsn: Lsn,
        /// End of the transaction's WAL: the position to acknowledge once durable.
        end_lsn: Lsn,
        /// Changes emitted for it.
        changes: u64,
        /// Identity schemas it changed (relation OIDs).
        schema_changes: Vec<u32>,
        /// The sink already holds this transaction (see [`Capture::with_delivered`]): record
        /// it in the state, do not commit the sink again.
        delivered: bool,
    },
    /// A non-transactional logical message with prefix [`crate::chunks::WATERMARK_PREFIX`]:
    /// maybe the high watermark of a chunk this process read (the pipeline compares its
    /// content with the nonce it wrote; anything else is ignored).
    Watermark {
        /// Its LSN.
        lsn: Lsn,
        /// Its content.
        content: Bytes,
    },
    /// Something the operator must hear of that did not stop capture: a logical message
    /// claiming to be an identity schema, a malformed identity schema row. Never carries a
    /// message's payload.
    Notice {
        /// LSN of the message it concerns.
        lsn: Lsn,
        /// What happened.
        message: String,
    },
}

/// The transaction being read.
#[derive(Debug)]
struct Txn {
    xid: u32,
    commit_lsn: Lsn,
    commit_ts: i64,
    /// Already delivered before a restart, and its schemas are in the state.
    skip: bool,
    /// Already in the sink, not yet in the state: schemas applied, changes not emitted.
    replay: bool,
    changes: u64,
    /// Schemas written by this transaction so far (`None`: dropped).
    schemas: BTreeMap<u32, Option<RelationSchema>>,
}

/// A relation's identity bound to the Relation message it was checked against.
#[derive(Debug)]
struct Binding {
    bound: BoundIdentity,
    key: Arc<[String]>,
}

/// Reads one replication stream.
#[derive(Debug)]
pub struct Capture {
    decoder: Decoder,
    flags: FlagBits,
    /// The committed identity schemas: the authority outside a transaction.
    schemas: BTreeMap<u32, RelationSchema>,
    relations: HashMap<u32, Relation>,
    bindings: HashMap<u32, Binding>,
    /// Each relation's columns as its row images describe them (rebuilt with its binding).
    image_columns: HashMap<u32, RelationView>,
    /// Bindings of snapshot rows: to the relation as its identity schema lists it (the
    /// stream's Relation messages come later).
    snapshot_bindings: BTreeMap<u32, SnapshotBinding>,
    /// The event [`Capture::snapshot_row`] rewrites for each row.
    snapshot_scratch: Option<ChangeEvent>,
    txn: Option<Txn>,
    /// Transactions whose commit is at or below this were already delivered.
    resume_after: Lsn,
    /// Transactions whose commit is at or below this are in the sink already.
    delivered_through: Lsn,
    /// `pgtrickle.identity_schemas`: the only relation whose rows are identity schemas.
    identity_table: Option<u32>,
    /// Stop on a change whose identity cannot be derived instead of emitting it unidentified.
    strict: bool,
    /// Stop on an UPDATE whose new image lacks an unchanged TOASTed column.
    require_complete: bool,
    /// Relations whose changes are not captured (a sink's own tables in the source database).
    ignored: BTreeSet<u32>,
    /// The messages held since the open transaction's first change of a relation without an
    /// identity schema ([`hold`]).
    held: Option<Held>,
    /// Held messages given back, applied before the stream's next message: the last pushed
    /// first.
    redo: Vec<hold::Queue>,
    /// What the open transaction held is being given back at its commit: nothing more is held
    /// before that commit.
    no_hold: bool,
}

/// Why the held messages could not be kept or read back.
fn hold_error(lsn: Lsn, e: &std::io::Error) -> CaptureError {
    CaptureError::Hold {
        lsn,
        detail: e.to_string(),
    }
}

/// Messages held back (see [`hold`]) and the relations without a schema whose changes are
/// among them.
#[derive(Debug)]
struct Held {
    relids: BTreeSet<u32>,
    queue: hold::Queue,
    /// The identity schema table's Relation message, when one is among the held messages:
    /// what says which column of its rows names the relation.
    identity_relation: Option<Relation>,
}

impl Capture {
    /// Capture starting from `schemas` (taken at the slot's consistent point, or from the
    /// state file), skipping transactions that commit at or below `resume_after`.
    pub fn new(
        schemas: impl IntoIterator<Item = RelationSchema>,
        resume_after: Lsn,
        flags: FlagBits,
    ) -> Capture {
        Capture {
            decoder: Decoder::new(Options {
                proto_version: 1,
                parallel_streaming: false,
            }),
            flags,
            schemas: schemas.into_iter().map(|s| (s.relid, s)).collect(),
            relations: HashMap::new(),
            bindings: HashMap::new(),
            image_columns: HashMap::new(),
            snapshot_bindings: BTreeMap::new(),
            snapshot_scratch: None,
            txn: None,
            resume_after,
            delivered_through: resume_after,
            identity_table: None,
            strict: false,
            require_complete: false,
            ignored: BTreeSet::new(),
            held: None,
            redo: Vec::new(),
            no_hold: false,
        }
    }

    /// Reads identity schemas from the rows of the relation with OID `relid`: the
    /// `pgtrickle.identity_schemas` the caller found, owned by the extension and writable by
    /// nobody else (spec/identity-messages.md §5).
    pub fn with_identity_table(mut self, relid: u32) -> Capture {
        self.identity_table = Some(relid);
        self
    }

    /// A change whose identity cannot be derived stops capture with an error naming the
    /// table and the fix, instead of becoming an [`Op::Unidentified`] event.
    pub fn strict(mut self, strict: bool) -> Capture {
        self.strict = strict;
        self
    }

    /// Stops, naming the table and the columns, at an UPDATE whose new image lacks an
    /// unchanged TOASTed value the stream did not send and the old row does not carry
    /// (REPLICA IDENTITY DEFAULT or USING INDEX), instead of emitting it with
    /// `unchanged_toast`: for consumers that must never see a partial after-image.
    pub fn require_complete(mut self, require: bool) -> Capture {
        self.require_complete = require;
        self
    }

    /// One row of the initial snapshot of relation `relid`, its columns in the order the
    /// relation's identity schema lists them (binary send forms or NULL, in one buffer: a
    /// binary COPY row), read at `lsn` (the slot's consistent point) at `ts` (PostgreSQL
    /// microseconds): an [`Op::Snapshot`] event with its identity and new image, or
    /// [`Op::Unidentified`] naming why the row has none (a strict capture stops instead). The
    /// image takes the row (`row` is handed back empty, with an allocation to read the next
    /// row into).
    ///
    /// The event is valid until the next call: the copy's rows are one event rewritten, its
    /// identity vector and image reused and its shared names kept while the relation is the
    /// same, and the image holds the row's buffer, not a handle per value (an event built
    /// and dropped per row, and a handle per value, were half of the copy's time).
    pub fn snapshot_row(
        &mut self,
        lsn: Lsn,
        ts: i64,
        relid: u32,
        row: &mut SendRow,
    ) -> Result<&ChangeEvent, CaptureError> {
        self.bind_snapshot(lsn, relid)?;
        let b = snapshot_binding(&self.snapshot_bindings, lsn, relid)?;
        let event = self
            .snapshot_scratch
            .get_or_insert_with(|| snapshot_shell(b, lsn, ts, relid));
        let mut id = event.new_id.take().unwrap_or_default();
        let identity = snapshot_identity(b, &*row, &mut id);
        // Identity first: the image then takes the row.
        match &mut event.new {
            Some(image) => image.replace_send_row(&b.columns, row),
            None => {
                event.new = Some(RowImage::from_send_row(
                    b.columns.clone(),
                    std::mem::take(row),
                ));
            }
        }
        fill_snapshot_event(b, self.strict, lsn, ts, relid, identity, id, event)?;
        Ok(event)
    }

    /// Lets go of the event [`Capture::snapshot_row`] rewrites (and the received bytes its
    /// last row's values hold on to) once a copy is over.
    pub fn snapshot_rows_done(&mut self) {
        self.snapshot_scratch = None;
    }

    /// [`Capture::snapshot_row`] for every row of `rows` (a chunk of one relation, each row
    /// a tuple), each its own event: the relation's binding is looked up once, not per row.
    pub fn snapshot_events(
        &mut self,
        lsn: Lsn,
        ts: i64,
        relid: u32,
        rows: Vec<Tuple>,
    ) -> Result<Vec<ChangeEvent>, CaptureError> {
        self.bind_snapshot(lsn, relid)?;
        let b = snapshot_binding(&self.snapshot_bindings, lsn, relid)?;
        rows.into_iter()
            .map(|row| {
                let mut event = snapshot_shell(b, lsn, ts, relid);
                let mut id = Vec::new();
                let identity = snapshot_identity(b, &row, &mut id);
                event.new = Some(images::tuple_image(&b.columns, row));
                fill_snapshot_event(b, self.strict, lsn, ts, relid, identity, id, &mut event)?;
                Ok(event)
            })
            .collect()
    }

    /// The event that opens a table's snapshot in chunks from its first row: a truncate of
    /// the table, with no transaction (xid 0) like the snapshot rows after it, so that a
    /// consumer holding rows of the table (a replica being repaired, a table read again)
    /// holds exactly the snapshot's once the chunks are delivered.
    pub fn snapshot_reset(
        &mut self,
        lsn: Lsn,
        ts: i64,
        relid: u32,
    ) -> Result<ChangeEvent, CaptureError> {
        self.bind_snapshot(lsn, relid)?;
        let b = snapshot_binding(&self.snapshot_bindings, lsn, relid)?;
        let mut event = snapshot_shell(b, lsn, ts, relid);
        event.op = Op::Truncate;
        event.key = Arc::from([]);
        Ok(event)
    }

    /// Binds the relation's identity schema to snapshot rows, unless that was done already.
    fn bind_snapshot(&mut self, lsn: Lsn, relid: u32) -> Result<(), CaptureError> {
        if !self.snapshot_bindings.contains_key(&relid) {
            let schema = self.schema(relid).ok_or_else(|| CaptureError::Protocol {
                lsn,
                detail: format!(
                    "snapshot row of relation OID {relid}, which has no identity schema"
                ),
            })?;
            let rel = schema_relation(schema);
            let binding = SnapshotBinding {
                name: Arc::from(schema.qualified_name()),
                columns: images::columns(&rel, Some(schema)),
                schema: Arc::new(schema.clone()),
                identity: match &schema.identity {
                    Ok(def) => RelationIdentity::from_identity_def(def)
                        .bind_new_rows(&rel, &self.flags)
                        .map(|bound| {
                            let key = def.fields.iter().map(|f| f.column.clone()).collect();
                            (bound, key)
                        })
                        .map_err(|e| e.to_string()),
                    Err(refusal) => Err(format!(
                        "no usable identity ({}): {}",
                        refusal.sqlstate, refusal.message
                    )),
                },
            };
            self.snapshot_bindings.insert(relid, binding);
        }
        Ok(())
    }

    /// Changes of these relations are skipped (a sink's own buffer in the source database:
    /// capturing its writes would feed them back forever).
    pub fn ignoring(mut self, relids: impl IntoIterator<Item = u32>) -> Capture {
        self.ignored.extend(relids);
        self
    }

    /// Tells the capture that the sink itself recorded every transaction committing at or
    /// below `delivered` (a position the state file may not have caught up with). Those
    /// above the resume position are replayed without emitting their changes.
    pub fn with_delivered(mut self, delivered: Lsn) -> Capture {
        self.delivered_through = self.delivered_through.max(delivered);
        self
    }

    /// The committed identity schema of relation `relid` (shared: the events of its next
    /// changes carry the same), if it has one.
    pub fn committed_schema(&mut self, relid: u32) -> Option<Arc<RelationSchema>> {
        let schema = self.schemas.get(&relid)?;
        match self
            .image_columns
            .get(&relid)
            .and_then(|v| v.schema.clone())
        {
            Some(shared) if *shared == *schema => Some(shared),
            _ => Some(Arc::new(schema.clone())),
        }
    }

    /// The committed identity schemas (what the state file keeps).
    pub fn schemas(&self) -> impl Iterator<Item = &RelationSchema> {
        self.schemas.values()
    }

    /// True between a Begin and its Commit.
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
    }

    /// Decodes one pgoutput message that starts at `lsn` and applies it.
    pub fn apply_bytes(
        &mut self,
        lsn: Lsn,
        bytes: Bytes,
        out: &mut Vec<Output>,
    ) -> Result<(), CaptureError> {
        let msg = self
            .decoder
            .decode(bytes)
            .map_err(|error| CaptureError::Decode { lsn, error })?;
        self.apply(lsn, msg, out)
    }

    /// Applies one decoded message that starts at `lsn`, appending what it emits to `out`,
    /// and any held messages it gives back (module `hold`).
    pub fn apply(
        &mut self,
        lsn: Lsn,
        msg: Message,
        out: &mut Vec<Output>,
    ) -> Result<(), CaptureError> {
        self.step(lsn, msg, out)?;
        loop {
            let Some(queue) = self.redo.last_mut() else {
                return Ok(());
            };
            let next = queue.pop().map_err(|e| hold_error(lsn, &e))?;
            let Some((at, bytes)) = next else {
                self.redo.pop();
                continue;
            };
            let msg = self
                .decoder
                .decode(bytes)
                .map_err(|error| CaptureError::Decode { lsn: at, error })?;
            self.step(at, msg, out)?;
        }
    }

    /// One message: held while a hold is open ([`Capture::step_held`]), or the one that opens
    /// one, or applied.
    fn step(&mut self, lsn: Lsn, msg: Message, out: &mut Vec<Output>) -> Result<(), CaptureError> {
        if self.held.is_some() {
            return self.step_held(lsn, msg, out);
        }
        if !self.no_hold
            && let Some(relid) = self.unschemaed_change(&msg)
        {
            let mut queue = hold::Queue::default();
            queue
                .push(lsn, rowid_pgoutput::encode(&msg))
                .map_err(|e| hold_error(lsn, &e))?;
            self.held = Some(Held {
                relids: BTreeSet::from([relid]),
                queue,
                identity_relation: None,
            });
            return Ok(());
        }
        if matches!(msg, Message::Commit(_)) {
            self.no_hold = false;
        }
        self.apply_now(lsn, msg, out)
    }

    /// One message while a hold is open: the commit gives the held messages back before it,
    /// to be applied as they would have been (no more hold until the commit); the held
    /// relation's first schema is applied, then gives back what came before it (which had
    /// none) to be applied with it; anything else is held too.
    fn step_held(
        &mut self,
        lsn: Lsn,
        msg: Message,
        out: &mut Vec<Output>,
    ) -> Result<(), CaptureError> {
        let schema_of = self.schema_row_relid(&msg);
        let unschemaed = self.unschemaed_change(&msg);
        let Some(mut held) = self.held.take() else {
            return self.apply_now(lsn, msg, out);
        };
        if matches!(msg, Message::Commit(_)) {
            let mut commit = hold::Queue::default();
            commit
                .push(lsn, rowid_pgoutput::encode(&msg))
                .map_err(|e| hold_error(lsn, &e))?;
            self.redo.push(commit);
            self.redo.push(held.queue);
            self.no_hold = true;
            return Ok(());
        }
        if schema_of.is_some_and(|relid| held.relids.contains(&relid)) {
            // The schema table's own Relation message may be among the held ones: it is the
            // same all through a transaction (no DDL of the extension's table), so it is
            // applied here too, before the row it describes.
            if let Some(relation) = held.identity_relation.take() {
                self.apply_now(
                    lsn,
                    Message::Relation {
                        xid: None,
                        relation,
                    },
                    out,
                )?;
            }
            self.apply_now(lsn, msg, out)?;
            self.redo.push(held.queue);
            return Ok(());
        }
        held.relids.extend(unschemaed);
        if let Message::Relation { relation, .. } = &msg
            && Some(relation.relid) == self.identity_table
        {
            held.identity_relation = Some(relation.clone());
        }
        held.queue
            .push(lsn, rowid_pgoutput::encode(&msg))
            .map_err(|e| hold_error(lsn, &e))?;
        self.held = Some(held);
        Ok(())
    }

    /// The relation a change is of, when it is emitted (a live transaction, not an ignored
    /// relation, not the identity schema table) and the relation has no identity schema at
    /// this position: such a change opens a hold.
    fn unschemaed_change(&self, msg: &Message) -> Option<u32> {
        let relids: &[u32] = match msg {
            Message::Insert { relid, .. }
            | Message::Update { relid, .. }
            | Message::Delete { relid, .. } => std::slice::from_ref(relid),
            Message::Truncate { relids, .. } => relids,
            _ => return None,
        };
        let txn = self.txn.as_ref()?;
        if txn.skip || txn.replay {
            return None;
        }
        relids.iter().copied().find(|relid| {
            Some(*relid) != self.identity_table
                && !self.ignored.contains(relid)
                && self.schema(*relid).is_none()
        })
    }

    /// The relation an identity schema row written by `msg` describes (an INSERT or UPDATE of
    /// the identity schema table), if it is one; its Relation message is the latest held one,
    /// else the one in force.
    fn schema_row_relid(&self, msg: &Message) -> Option<u32> {
        let new = match msg {
            Message::Insert { relid, new, .. } | Message::Update { relid, new, .. }
                if Some(*relid) == self.identity_table =>
            {
                new
            }
            _ => return None,
        };
        let relation = match self
            .held
            .as_ref()
            .and_then(|h| h.identity_relation.as_ref())
        {
            Some(held) => held,
            None => self.relations.get(&self.identity_table?)?,
        };
        let at = relation.columns.iter().position(|c| c.name == "relid")?;
        oid_column(new.get(at))
    }

    /// Applies one decoded message that starts at `lsn` now.
    fn apply_now(
        &mut self,
        lsn: Lsn,
        msg: Message,
        out: &mut Vec<Output>,
    ) -> Result<(), CaptureError> {
        let protocol = |detail: &str| CaptureError::Protocol {
            lsn,
            detail: detail.to_string(),
        };
        match msg {
            Message::Begin {
                final_lsn,
                commit_ts,
                xid,
            } => {
                if self.txn.is_some() {
                    return Err(protocol("Begin inside a transaction"));
                }
                let commit_lsn = Lsn(final_lsn);
                let skip = commit_lsn <= self.resume_after;
                let replay = !skip && commit_lsn <= self.delivered_through;
                if !skip && !replay {
                    out.push(Output::Begin { xid, commit_lsn });
                }
                self.txn = Some(Txn {
                    xid,
                    commit_lsn,
                    commit_ts,
                    skip,
                    replay,
                    changes: 0,
                    schemas: BTreeMap::new(),
                });
            }
            Message::Commit(info) => {
                let txn = self
                    .txn
                    .take()
                    .ok_or_else(|| protocol("Commit outside a transaction"))?;
                if Lsn(info.commit_lsn) != txn.commit_lsn {
                    return Err(protocol(&format!(
                        "Commit at {} for a transaction that began with final LSN {}",
                        Lsn(info.commit_lsn),
                        txn.commit_lsn
                    )));
                }
                if txn.skip {
                    return Ok(());
                }
                let schema_changes: Vec<u32> = txn.schemas.keys().copied().collect();
                for (relid, schema) in txn.schemas {
                    // A snapshot row after this commit is read in the new shape.
                    self.snapshot_bindings.remove(&relid);
                    match schema {
                        Some(s) => self.schemas.insert(relid, s),
                        None => self.schemas.remove(&relid),
                    };
                }
                self.resume_after = txn.commit_lsn;
                out.push(Output::Commit {
                    xid: txn.xid,
                    commit_lsn: txn.commit_lsn,
                    end_lsn: Lsn(info.end_lsn),
                    changes: txn.changes,
                    schema_changes,
                    delivered: txn.replay,
                });
            }
            Message::Origin { .. } | Message::Type { .. } => {}
            Message::Relation { relation, .. } => {
                self.forget_binding(relation.relid);
                self.relations.insert(relation.relid, relation);
            }
            Message::Message {
                transactional,
                prefix,
                content,
                ..
            } if prefix == MESSAGE_PREFIX => {
                // Any role can write a logical message: it is never a schema. Reported once
                // (not again when a delivered transaction is resent).
                if !self.txn.as_ref().is_some_and(|t| t.skip) {
                    let claims = SchemaMessage::parse(&content)
                        .map(|m| format!(", claiming relation OID {}", m.relid()))
                        .unwrap_or_default();
                    out.push(Output::Notice {
                        lsn,
                        message: format!(
                            "ignored a{} logical message with prefix {MESSAGE_PREFIX} ({} bytes{claims}): \
                             identity schemas are read only from {}.{}, which only the \
                             extension writes (spec/identity-messages.md format 2)",
                            if transactional { " transactional" } else { " non-transactional" },
                            content.len(),
                            IDENTITY_TABLE.0,
                            IDENTITY_TABLE.1
                        ),
                    });
                }
            }
            Message::Message {
                transactional: false,
                prefix,
                content,
                ..
            } if prefix == crate::chunks::WATERMARK_PREFIX => {
                out.push(Output::Watermark { lsn, content });
            }
            Message::Message { .. } => {}
            Message::Insert { relid, new, .. } if Some(relid) == self.identity_table => {
                self.schema_row(lsn, Some(&new), None, out)?;
            }
            Message::Update {
                relid, old, new, ..
            } if Some(relid) == self.identity_table => {
                self.schema_row(lsn, Some(&new), old.as_ref(), out)?;
            }
            Message::Delete { relid, old, .. } if Some(relid) == self.identity_table => {
                self.schema_row(lsn, None, Some(&old), out)?;
            }
            Message::Insert { relid, new, .. } => {
                if let Some(e) = self.change(lsn, relid, Op::Insert, None, Some(&new))? {
                    out.push(Output::Change(Box::new(e)));
                }
            }
            Message::Update {
                relid, old, new, ..
            } => {
                if let Some(e) = self.change(lsn, relid, Op::Update, old.as_ref(), Some(&new))? {
                    out.push(Output::Change(Box::new(e)));
                }
            }
            Message::Delete { relid, old, .. } => {
                if let Some(e) = self.change(lsn, relid, Op::Delete, Some(&old), None)? {
                    out.push(Output::Change(Box::new(e)));
                }
            }
            Message::Truncate { relids, .. } => {
                for relid in relids {
                    if Some(relid) == self.identity_table {
                        self.forget_all_schemas(lsn, out)?;
                        continue;
                    }
                    if let Some(e) = self.change(lsn, relid, Op::Truncate, None, None)? {
                        out.push(Output::Change(Box::new(e)));
                    }
                }
            }
            Message::StreamStart { .. } => return Err(unsupported(lsn, "Stream Start")),
            Message::StreamStop => return Err(unsupported(lsn, "Stream Stop")),
            Message::StreamCommit { .. } => return Err(unsupported(lsn, "Stream Commit")),
            // No streaming is asked for, so a Stream Abort names a transaction none of whose
            // changes were sent: nothing to undo. PostgreSQL 18 sends one for a transaction
            // it found aborted while over logical_decoding_work_mem (rowid_pgoutput's
            // decoder, `stream`); inside a transaction it is a protocol error.
            Message::StreamAbort { xid, subxid, .. } if self.txn.is_none() => {
                out.push(Output::Notice {
                    lsn,
                    message: format!(
                        "ignored a Stream Abort of transaction {xid} (subtransaction {subxid}), \
                         which the server never streamed (PostgreSQL 18 sends one for a \
                         transaction it found aborted while over logical_decoding_work_mem)"
                    ),
                });
            }
            Message::StreamAbort { .. } => return Err(unsupported(lsn, "Stream Abort")),
            Message::StreamPrepare(_) => return Err(unsupported(lsn, "Stream Prepare")),
            Message::BeginPrepare { .. } => return Err(unsupported(lsn, "Begin Prepare")),
            Message::Prepare(_) => return Err(unsupported(lsn, "Prepare")),
            Message::CommitPrepared { .. } => return Err(unsupported(lsn, "Commit Prepared")),
            Message::RollbackPrepared { .. } => {
                return Err(unsupported(lsn, "Rollback Prepared"));
            }
        }
        Ok(())
    }

    /// The schema in force for `relid` at this point of the stream.
    /// Forgets what was derived from a relation's Relation message and schema.
    fn forget_binding(&mut self, relid: u32) {
        self.bindings.remove(&relid);
        self.image_columns.remove(&relid);
    }

    /// The relation as its events describe it, for its current Relation message and schema
    /// (shared by its events).
    fn image_columns(&mut self, lsn: Lsn, relid: u32) -> Result<RelationView, CaptureError> {
        if let Some(c) = self.image_columns.get(&relid) {
            return Ok(c.clone());
        }
        let relation = self.relation(lsn, relid)?;
        let schema = self.schema(relid);
        let c = RelationView {
            name: Arc::from(format!("{}.{}", relation.namespace, relation.name)),
            columns: images::columns(relation, schema),
            schema: schema.cloned().map(Arc::new),
        };
        self.image_columns.insert(relid, c.clone());
        Ok(c)
    }

    fn schema(&self, relid: u32) -> Option<&RelationSchema> {
        match self.txn.as_ref().and_then(|t| t.schemas.get(&relid)) {
            Some(in_txn) => in_txn.as_ref(),
            None => self.schemas.get(&relid),
        }
    }

    fn relation(&self, lsn: Lsn, relid: u32) -> Result<&Relation, CaptureError> {
        self.relations
            .get(&relid)
            .ok_or_else(|| CaptureError::Protocol {
                lsn,
                detail: format!("change for relation OID {relid} before its Relation message"),
            })
    }

    /// The transaction a change belongs to; `None` when it is skipped or replayed.
    fn live_txn(&self, lsn: Lsn) -> Result<Option<&Txn>, CaptureError> {
        let txn = self.txn.as_ref().ok_or_else(|| CaptureError::Protocol {
            lsn,
            detail: "change outside a transaction".into(),
        })?;
        Ok((!txn.skip && !txn.replay).then_some(txn))
    }

    /// Binds the schema in force to the current Relation message, unless already bound. A
    /// relation whose old rows cannot give the identity (REPLICA IDENTITY NOTHING, keyless
    /// without FULL) is bound for its new rows; its UPDATEs and DELETEs are unidentified.
    fn bind(&mut self, lsn: Lsn, relid: u32) -> Result<&Binding, CaptureError> {
        if !self.bindings.contains_key(&relid) {
            let relation = self.relation(lsn, relid)?;
            let name = format!("{}.{}", relation.namespace, relation.name);
            let schema = self.schema(relid).ok_or_else(|| CaptureError::NoSchema {
                lsn,
                relation: name.clone(),
                relid,
            })?;
            let stream_ri = ReplicaIdentity::from_byte(relation.replica_identity);
            if stream_ri != Some(schema.replica_identity) {
                return Err(CaptureError::ReplicaIdentityDiffers {
                    lsn,
                    relation: name,
                    schema: schema.replica_identity.name(),
                    stream: stream_ri.map_or("unknown", ReplicaIdentity::name),
                });
            }
            let identity = match &schema.identity {
                Ok(def) => RelationIdentity::from_identity_def(def),
                Err(refusal) => {
                    return Err(CaptureError::NoIdentity {
                        lsn,
                        relation: name,
                        refusal: refusal.clone(),
                    });
                }
            };
            let bound = identity
                .bind_new_rows(relation, &self.flags)
                .map_err(|mismatch| CaptureError::Schema {
                    lsn,
                    relation: name,
                    mismatch,
                })?;
            let key: Arc<[String]> = bound.column_names().map(str::to_string).collect();
            self.bindings.insert(relid, Binding { bound, key });
        }
        self.bindings
            .get(&relid)
            .ok_or_else(|| CaptureError::Protocol {
                lsn,
                detail: format!("no binding for relation OID {relid}"),
            })
    }

    fn change(
        &mut self,
        lsn: Lsn,
        relid: u32,
        op: Op,
        old: Option<&OldTuple>,
        new: Option<&Tuple>,
    ) -> Result<Option<ChangeEvent>, CaptureError> {
        let Some(txn) = self.live_txn(lsn)? else {
            return Ok(None);
        };
        if self.ignored.contains(&relid) {
            return Ok(None);
        }
        let (xid, commit_lsn, commit_ts) = (txn.xid, txn.commit_lsn, txn.commit_ts);
        let RelationView {
            name,
            columns,
            schema,
        } = self.image_columns(lsn, relid)?;
        let images = if op == Op::Truncate {
            images::Images::default()
        } else {
            images::images(&columns, self.relation(lsn, relid)?, &self.flags, old, new)
        };
        if self.require_complete && !images.unchanged_toast.is_empty() {
            return Err(CaptureError::Incomplete {
                lsn,
                error: rowid_pgoutput::IncompleteAfterImage {
                    relation: name.to_string(),
                    columns: images.unchanged_toast,
                },
            });
        }
        let base = ChangeEvent {
            commit_lsn,
            lsn,
            xid,
            commit_ts,
            relid,
            relation: name,
            op,
            columns: columns.clone(),
            schema,
            domain: None,
            key: Arc::from([]),
            old_id: None,
            new_id: None,
            old: images.old,
            old_kind: images.old_kind,
            new: images.new,
            backfilled: images.backfilled,
            unchanged_toast: images.unchanged_toast,
            unidentified: None,
        };
        // A truncate names no row: it has no identity to derive.
        let identified = (op != Op::Truncate).then(|| self.identify(lsn, relid, op, old, new));
        let event = match identified {
            None => base,
            Some(Ok(found)) => ChangeEvent {
                domain: Some(found.domain),
                key: found.key,
                old_id: found.old_id,
                new_id: found.new_id,
                ..base
            },
            Some(Err(e)) if self.strict || !e.is_about_one_change() => return Err(e),
            Some(Err(e)) => ChangeEvent {
                op: Op::Unidentified,
                unidentified: Some(Unidentified {
                    change: op,
                    reason: e.reason(),
                }),
                ..base
            },
        };
        if let Some(t) = self.txn.as_mut() {
            t.changes += 1;
        }
        Ok(Some(event))
    }

    /// The identities of one change, or why it has none.
    fn identify(
        &mut self,
        lsn: Lsn,
        relid: u32,
        op: Op,
        old: Option<&OldTuple>,
        new: Option<&Tuple>,
    ) -> Result<Identified, CaptureError> {
        self.bind(lsn, relid)?;
        let relation = self.relation(lsn, relid)?;
        let binding = self
            .bindings
            .get(&relid)
            .ok_or_else(|| CaptureError::Protocol {
                lsn,
                detail: format!("no binding for relation OID {relid}"),
            })?;
        // Built only for an error: every change would otherwise pay for it.
        let name = || format!("{}.{}", relation.namespace, relation.name);
        let identity_error = |error| CaptureError::Identity {
            lsn,
            relation: name(),
            error,
        };
        let new_id = match new {
            None => None,
            Some(row) => {
                let positions: Vec<usize> = binding.bound.column_positions().collect();
                let toasted = positions
                    .iter()
                    .any(|&i| row.get(i) == Some(&Column::UnchangedToast));
                let mut id = Vec::new();
                if toasted {
                    let image = complete(relation, &self.flags, old, row);
                    let full = image
                        .require(relation, &positions)
                        .map_err(|error| CaptureError::Incomplete { lsn, error })?;
                    binding
                        .bound
                        .encode(full, &mut id)
                        .map_err(identity_error)?;
                } else {
                    binding.bound.encode(row, &mut id).map_err(identity_error)?;
                }
                Some(id)
            }
        };
        let no_old_row = |why: String| CaptureError::OldRowUnavailable {
            lsn,
            relation: name(),
            op,
            why,
        };
        let old_id = match (op, old) {
            (_, Some(old)) => {
                let mut id = Vec::new();
                binding
                    .bound
                    .encode_old(old, &mut id)
                    .map_err(identity_error)?;
                Some(id)
            }
            // An UPDATE without an old tuple did not change the replica identity columns:
            // the key, checked equal to them at binding, is unchanged. Unless there is no
            // replica identity to speak of (NOTHING, or a keyless identity without FULL).
            (Op::Update, None) => match binding.bound.old_rows_unavailable() {
                Some(why) => return Err(no_old_row(why.to_string())),
                None if relation.replica_identity == b'f' => {
                    return Err(no_old_row(
                        "REPLICA IDENTITY FULL, yet the UPDATE carried no old row".into(),
                    ));
                }
                None => new_id.clone(),
            },
            (Op::Delete, None) => {
                return Err(no_old_row("the DELETE carried no old row".into()));
            }
            _ => None,
        };
        Ok(Identified {
            domain: binding.bound.domain(),
            key: binding.key.clone(),
            old_id,
            new_id,
        })
    }

    /// A change of a row of the identity schema table: `new` for an INSERT or UPDATE (the
    /// relation's schema from here on), `old` alone for a DELETE (the relation was dropped).
    /// A row that does not hold a valid schema is reported and leaves its relation without
    /// one (its changes are unidentified until its next schema), it never stops capture.
    fn schema_row(
        &mut self,
        lsn: Lsn,
        new: Option<&Tuple>,
        old: Option<&OldTuple>,
        out: &mut Vec<Output>,
    ) -> Result<(), CaptureError> {
        let table = self.identity_table.unwrap_or_default();
        let relation = self.relation(lsn, table)?;
        let position = |column: &str| {
            relation
                .columns
                .iter()
                .position(|c| c.name == column)
                .ok_or_else(|| CaptureError::Protocol {
                    lsn,
                    detail: format!(
                        "{}.{} (OID {table}) has no column {column}: it is not the extension's \
                         identity schema table",
                        relation.namespace, relation.name
                    ),
                })
        };
        let (relid_at, schema_at) = (position("relid")?, position("schema")?);
        let txn = self.txn.as_ref().ok_or_else(|| CaptureError::Protocol {
            lsn,
            detail: "identity schema row outside a transaction".into(),
        })?;
        if txn.skip {
            return Ok(());
        }
        let row = match (new, old) {
            (Some(row), _) => row,
            (None, Some(OldTuple::Key(row) | OldTuple::Full(row))) => row,
            (None, None) => return Ok(()),
        };
        let Some(relid) = oid_column(row.get(relid_at)) else {
            out.push(Output::Notice {
                lsn,
                message: "ignored an identity schema row without a relation OID".into(),
            });
            return Ok(());
        };
        let schema = match new {
            None => None,
            Some(row) => match row.get(schema_at) {
                // An UPDATE that left the content alone: the schema in force stays.
                Some(Column::UnchangedToast) => return Ok(()),
                Some(Column::Binary(b) | Column::Text(b)) => match SchemaMessage::parse(b) {
                    Ok(SchemaMessage::Schema(s)) if s.relid == relid => Some(s),
                    Ok(SchemaMessage::Dropped { .. }) => None,
                    Ok(SchemaMessage::Schema(s)) => {
                        return self.malformed_row(
                            lsn,
                            relid,
                            &format!("its content describes relation OID {}", s.relid),
                            out,
                        );
                    }
                    Err(e) => return self.malformed_row(lsn, relid, &e.to_string(), out),
                },
                _ => return self.malformed_row(lsn, relid, "its content is NULL", out),
            },
        };
        if let Some(t) = self.txn.as_mut() {
            t.schemas.insert(relid, schema);
        }
        self.forget_binding(relid);
        Ok(())
    }

    /// An identity schema row that is not a valid schema: reported, and its relation is left
    /// without a schema from here on (never a stale one).
    fn malformed_row(
        &mut self,
        lsn: Lsn,
        relid: u32,
        why: &str,
        out: &mut Vec<Output>,
    ) -> Result<(), CaptureError> {
        out.push(Output::Notice {
            lsn,
            message: format!(
                "the identity schema row of relation OID {relid} is not a valid schema ({why}): \
                 its changes are unidentified until its next schema"
            ),
        });
        if let Some(t) = self.txn.as_mut() {
            t.schemas.insert(relid, None);
        }
        self.forget_binding(relid);
        Ok(())
    }

    /// The identity schema table was truncated (only its owner can): no schema is known from
    /// here on.
    fn forget_all_schemas(&mut self, lsn: Lsn, out: &mut Vec<Output>) -> Result<(), CaptureError> {
        let Some(txn) = self.txn.as_mut() else {
            return Err(CaptureError::Protocol {
                lsn,
                detail: "TRUNCATE outside a transaction".into(),
            });
        };
        if txn.skip {
            return Ok(());
        }
        let known: Vec<u32> = self.schemas.keys().copied().collect();
        for relid in known {
            txn.schemas.insert(relid, None);
        }
        self.bindings.clear();
        self.image_columns.clear();
        out.push(Output::Notice {
            lsn,
            message: "the identity schema table was truncated: every relation's changes are \
                      unidentified until its next schema"
                .into(),
        });
        Ok(())
    }
}

/// A relation's identity bound to its columns as the identity schema lists them, for the
/// rows of the initial snapshot (read with those columns in that order).
#[derive(Debug)]
struct SnapshotBinding {
    /// `schema.name`, shared by the events.
    name: Arc<str>,
    columns: Arc<[ColumnMeta]>,
    /// The identity schema the rows are read under, shared by the events.
    schema: Arc<RelationSchema>,
    /// The identity bound to those columns and its key, or why there is none.
    identity: Result<(BoundIdentity, Arc<[String]>), String>,
}

/// A relation as its events describe it: name, columns, identity schema (shared by them).
#[derive(Clone, Debug)]
struct RelationView {
    name: Arc<str>,
    columns: Arc<[ColumnMeta]>,
    schema: Option<Arc<RelationSchema>>,
}

/// The Relation message a stream would send for `schema` under no replica identity: the
/// published columns in order, nothing flagged. Snapshot rows are new rows: their identity
/// needs the key's positions and types, never an old tuple.
fn schema_relation(schema: &RelationSchema) -> Relation {
    Relation {
        relid: schema.relid,
        namespace: schema.namespace.clone(),
        name: schema.relname.clone(),
        replica_identity: b'n',
        columns: schema
            .columns
            .iter()
            .map(|c| rowid_pgoutput::RelationColumn {
                flags: 0,
                name: c.name.clone(),
                type_oid: c.type_oid,
                typmod: -1,
            })
            .collect(),
    }
}

/// The identities of one change.
struct Identified {
    domain: rowid_codec::Domain,
    key: Arc<[String]>,
    old_id: Option<Vec<u8>>,
    new_id: Option<Vec<u8>>,
}

/// An `oid` column's value (binary: 4 bytes big-endian; text: decimal).
fn oid_column(c: Option<&Column>) -> Option<u32> {
    match c? {
        Column::Binary(b) => <[u8; 4]>::try_from(b.as_ref()).ok().map(u32::from_be_bytes),
        Column::Text(t) => std::str::from_utf8(t).ok()?.parse().ok(),
        _ => None,
    }
}

fn unsupported(lsn: Lsn, message: &'static str) -> CaptureError {
    CaptureError::Unsupported { lsn, message }
}

/// The relation's snapshot binding ([`Capture::bind_snapshot`] made it).
fn snapshot_binding(
    bindings: &BTreeMap<u32, SnapshotBinding>,
    lsn: Lsn,
    relid: u32,
) -> Result<&SnapshotBinding, CaptureError> {
    bindings.get(&relid).ok_or_else(|| CaptureError::Protocol {
        lsn,
        detail: format!("no snapshot binding for relation OID {relid}"),
    })
}

/// An event of a snapshot row of relation `relid` under binding `b`, before its row is
/// written into it ([`fill_snapshot_event`]): its shared names, nothing allocated.
fn snapshot_shell(b: &SnapshotBinding, lsn: Lsn, ts: i64, relid: u32) -> ChangeEvent {
    ChangeEvent {
        commit_lsn: lsn,
        lsn,
        xid: 0,
        commit_ts: ts,
        relid,
        relation: b.name.clone(),
        op: Op::Snapshot,
        columns: b.columns.clone(),
        schema: Some(b.schema.clone()),
        domain: None,
        key: match &b.identity {
            Ok((_, key)) => key.clone(),
            Err(_) => Arc::from([]),
        },
        old_id: None,
        new_id: None,
        old: None,
        old_kind: None,
        new: None,
        backfilled: Vec::new(),
        unchanged_toast: Vec::new(),
        unidentified: None,
    }
}

/// Points `slot` at `value`, unless it already does (no reference count changes hands).
fn share<T: ?Sized>(slot: &mut Arc<T>, value: &Arc<T>) {
    if !Arc::ptr_eq(slot, value) {
        *slot = value.clone();
    }
}

/// A snapshot row's identity under binding `b`, written into `id` (emptied first): the
/// identity's domain and key, or why the row has none.
fn snapshot_identity<'b, R: RowValues + ?Sized>(
    b: &'b SnapshotBinding,
    row: &R,
    id: &mut Vec<u8>,
) -> Result<(Domain, &'b Arc<[String]>), String> {
    id.clear();
    // Large enough for most keys at once (an int8 key takes 11 bytes).
    id.reserve(32);
    match &b.identity {
        Ok((bound, key)) => match bound.encode(row, id) {
            Ok(_) => Ok((bound.domain(), key)),
            Err(e) => Err(e.to_string()),
        },
        Err(reason) => Err(reason.clone()),
    }
}

/// Writes everything of a snapshot row's event of relation `relid` under binding `b` but
/// its image (already in place), whatever the event held before (see
/// [`Capture::snapshot_row`]): its identity `id` as [`snapshot_identity`] found it.
#[allow(clippy::too_many_arguments)]
fn fill_snapshot_event(
    b: &SnapshotBinding,
    strict: bool,
    lsn: Lsn,
    ts: i64,
    relid: u32,
    identity: Result<(Domain, &Arc<[String]>), String>,
    id: Vec<u8>,
    event: &mut ChangeEvent,
) -> Result<(), CaptureError> {
    event.commit_lsn = lsn;
    event.lsn = lsn;
    event.xid = 0;
    event.commit_ts = ts;
    event.relid = relid;
    share(&mut event.relation, &b.name);
    share(&mut event.columns, &b.columns);
    match &mut event.schema {
        Some(schema) => share(schema, &b.schema),
        None => event.schema = Some(b.schema.clone()),
    }
    event.old_id = None;
    event.old = None;
    event.old_kind = None;
    event.backfilled.clear();
    event.unchanged_toast.clear();
    match identity {
        Ok((domain, key)) => {
            event.op = Op::Snapshot;
            event.domain = Some(domain);
            share(&mut event.key, key);
            event.new_id = Some(id);
            event.unidentified = None;
        }
        Err(reason) if strict => {
            return Err(CaptureError::Protocol {
                lsn,
                detail: format!(
                    "--strict: a snapshot row of {} has no identity: {reason}",
                    b.name
                ),
            });
        }
        Err(reason) => {
            event.op = Op::Unidentified;
            event.domain = None;
            if !event.key.is_empty() {
                event.key = Arc::from([]);
            }
            event.new_id = None;
            event.unidentified = Some(Unidentified {
                change: Op::Snapshot,
                reason,
            });
        }
    }
    Ok(())
}
