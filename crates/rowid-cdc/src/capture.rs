//! The capture state machine: pgoutput messages (protocol 1, committed transactions only)
//! in, change events with identities out. No I/O: the transport feeds it, a sink takes what
//! it emits.
//!
//! - **The identity schema travels in-band** (spec/identity-messages.md): a schema message
//!   replaces a relation's schema at its position; changes before it use the old one. Schemas
//!   written inside a transaction become the committed authority at its Commit.
//! - **Bindings belong to their Relation message**: a binding is rebuilt whenever a new
//!   Relation message or a schema message for the relation arrives, and checked against the
//!   schema (key columns, replica identity) before the first change uses it.
//! - **Nothing is buffered**: changes are emitted as they arrive, between a `Begin` and a
//!   `Commit` output; a sink makes them durable at `Commit`, so memory stays flat in
//!   transaction size. A transaction whose commit is at or below the resume position was
//!   already delivered: its changes are skipped (its Relation messages still update the
//!   relation cache).
//! - **A sink can be ahead of the state file** (a PostgreSQL sink commits the changes and its
//!   position in one transaction; the process can die before the state file records it).
//!   Transactions after the resume position and at or below the sink's delivered position
//!   are replayed silently: their schema messages are applied, their changes are not emitted,
//!   and their Commit is emitted marked `delivered` so the state catches up.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use rowid_pgoutput::{
    BoundIdentity, Column, Decoder, FlagBits, Message, OldTuple, Options, Relation,
    RelationIdentity, Tuple, complete,
};

use crate::error::CaptureError;
use crate::event::{ChangeEvent, Op};
use crate::lsn::Lsn;
use rowid_registry::schema_message::{
    MESSAGE_PREFIX, RelationSchema, ReplicaIdentity, SchemaMessage,
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
    Change(ChangeEvent),
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
    key: Vec<String>,
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
    txn: Option<Txn>,
    /// Transactions whose commit is at or below this were already delivered.
    resume_after: Lsn,
    /// Transactions whose commit is at or below this are in the sink already.
    delivered_through: Lsn,
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
            txn: None,
            resume_after,
            delivered_through: resume_after,
        }
    }

    /// Tells the capture that the sink itself recorded every transaction committing at or
    /// below `delivered` (a position the state file may not have caught up with). Those
    /// above the resume position are replayed without emitting their changes.
    pub fn with_delivered(mut self, delivered: Lsn) -> Capture {
        self.delivered_through = self.delivered_through.max(delivered);
        self
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

    /// Applies one decoded message that starts at `lsn`, appending what it emits to `out`.
    pub fn apply(
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
                self.bindings.remove(&relation.relid);
                self.relations.insert(relation.relid, relation);
            }
            Message::Message {
                transactional,
                prefix,
                content,
                ..
            } if prefix == MESSAGE_PREFIX => {
                if !transactional {
                    return Err(protocol(
                        "a non-transactional identity schema message (they must be written \
                         with pg_logical_emit_message(true, ...))",
                    ));
                }
                let txn = self
                    .txn
                    .as_mut()
                    .ok_or_else(|| protocol("identity schema message outside a transaction"))?;
                let message = SchemaMessage::parse(&content)
                    .map_err(|error| CaptureError::SchemaMessage { lsn, error })?;
                if !txn.skip {
                    let relid = message.relid();
                    let schema = match message {
                        SchemaMessage::Schema(s) => Some(s),
                        SchemaMessage::Dropped { .. } => None,
                    };
                    txn.schemas.insert(relid, schema);
                    self.bindings.remove(&relid);
                }
            }
            Message::Message { .. } => {}
            Message::Insert { relid, new, .. } => {
                if let Some(e) = self.change(lsn, relid, Op::Insert, None, Some(&new))? {
                    out.push(Output::Change(e));
                }
            }
            Message::Update {
                relid, old, new, ..
            } => {
                if let Some(e) = self.change(lsn, relid, Op::Update, old.as_ref(), Some(&new))? {
                    out.push(Output::Change(e));
                }
            }
            Message::Delete { relid, old, .. } => {
                if let Some(e) = self.change(lsn, relid, Op::Delete, Some(&old), None)? {
                    out.push(Output::Change(e));
                }
            }
            Message::Truncate { relids, .. } => {
                for relid in relids {
                    if let Some(e) = self.truncate(lsn, relid)? {
                        out.push(Output::Change(e));
                    }
                }
            }
            Message::StreamStart { .. } => return Err(unsupported(lsn, "Stream Start")),
            Message::StreamStop => return Err(unsupported(lsn, "Stream Stop")),
            Message::StreamCommit { .. } => return Err(unsupported(lsn, "Stream Commit")),
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

    /// Binds the schema in force to the current Relation message, unless already bound.
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
            let bound =
                identity
                    .bind(relation, &self.flags)
                    .map_err(|mismatch| CaptureError::Schema {
                        lsn,
                        relation: name,
                        mismatch,
                    })?;
            let key = bound.column_names().map(str::to_string).collect();
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
        let (xid, commit_lsn, commit_ts) = (txn.xid, txn.commit_lsn, txn.commit_ts);
        self.bind(lsn, relid)?;
        let relation = self.relation(lsn, relid)?;
        let binding = self
            .bindings
            .get(&relid)
            .ok_or_else(|| CaptureError::Protocol {
                lsn,
                detail: format!("no binding for relation OID {relid}"),
            })?;
        let name = format!("{}.{}", relation.namespace, relation.name);
        let identity_error = |error| CaptureError::Identity {
            lsn,
            relation: name.clone(),
            error,
        };
        let mut backfilled = false;
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
                    backfilled = true;
                } else {
                    binding.bound.encode(row, &mut id).map_err(identity_error)?;
                }
                Some(id)
            }
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
            // the key, checked equal to them at binding, is unchanged.
            (Op::Update, None) if relation.replica_identity != b'f' => new_id.clone(),
            (Op::Update, None) => {
                return Err(CaptureError::Protocol {
                    lsn,
                    detail: format!("UPDATE of {name} (REPLICA IDENTITY FULL) without its old row"),
                });
            }
            _ => None,
        };
        let event = ChangeEvent {
            commit_lsn,
            lsn,
            xid,
            commit_ts,
            relid,
            relation: name,
            op,
            domain: Some(binding.bound.domain()),
            key: binding.key.clone(),
            old_id,
            new_id,
            backfilled,
        };
        if let Some(t) = self.txn.as_mut() {
            t.changes += 1;
        }
        Ok(Some(event))
    }

    fn truncate(&mut self, lsn: Lsn, relid: u32) -> Result<Option<ChangeEvent>, CaptureError> {
        let Some(txn) = self.live_txn(lsn)? else {
            return Ok(None);
        };
        let (xid, commit_lsn, commit_ts) = (txn.xid, txn.commit_lsn, txn.commit_ts);
        let relation = self.relation(lsn, relid)?;
        let event = ChangeEvent {
            commit_lsn,
            lsn,
            xid,
            commit_ts,
            relid,
            relation: format!("{}.{}", relation.namespace, relation.name),
            op: Op::Truncate,
            domain: None,
            key: Vec::new(),
            old_id: None,
            new_id: None,
            backfilled: false,
        };
        if let Some(t) = self.txn.as_mut() {
            t.changes += 1;
        }
        Ok(Some(event))
    }
}

fn unsupported(lsn: Lsn, message: &'static str) -> CaptureError {
    CaptureError::Unsupported { lsn, message }
}
