//! What capture emits: one [`ChangeEvent`] per committed change (its JSON line is
//! [`crate::json_line`]'s).

use rowid_codec::Domain;

use crate::lsn::Lsn;

/// The kind of change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A row was inserted: a new identity.
    Insert,
    /// A row was updated: old and new identity (different when the key changed).
    Update,
    /// A row was deleted: an old identity.
    Delete,
    /// The relation was truncated: no identity.
    Truncate,
    /// A change whose identity could not be derived (no identity schema for the relation
    /// at its position, no old row to name the row an UPDATE or DELETE removed, a Relation
    /// message the schema does not describe, ...): no identity, and
    /// [`ChangeEvent::unidentified`] says which change it was and why. A consumer keeping
    /// state of that relation must rebuild it.
    Unidentified,
}

impl Op {
    /// `insert`, `update`, `delete`, `truncate`, `unidentified`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Truncate => "truncate",
            Op::Unidentified => "unidentified",
        }
    }
}

/// What an [`Op::Unidentified`] event was, and why it has no identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unidentified {
    /// The change the stream carried (insert, update or delete).
    pub change: Op,
    /// Why no identity was derived, with the fix when there is one (never identity bytes).
    pub reason: String,
}

/// One change of a committed transaction, with its identities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeEvent {
    /// LSN of the transaction's commit record.
    pub commit_lsn: Lsn,
    /// LSN of the change's own WAL record.
    pub lsn: Lsn,
    /// Transaction id.
    pub xid: u32,
    /// Commit time, microseconds since 2000-01-01 00:00 UTC (PostgreSQL's epoch).
    pub commit_ts: i64,
    /// `pg_class.oid` of the relation.
    pub relid: u32,
    /// `schema.name` of the relation at the change's position.
    pub relation: String,
    /// What happened.
    pub op: Op,
    /// The identity's domain (`None` for a truncate).
    pub domain: Option<Domain>,
    /// The identity's columns, in identity order (empty for a truncate).
    pub key: Vec<String>,
    /// The identity of the row the change removed (update, delete).
    pub old_id: Option<Vec<u8>>,
    /// The identity of the row the change wrote (insert, update).
    pub new_id: Option<Vec<u8>>,
    /// The after-image had unchanged TOASTed identity columns that were filled from the old
    /// row (exact: the value did not change).
    pub backfilled: bool,
    /// For [`Op::Unidentified`]: the change and why it has no identity (`None` otherwise).
    pub unidentified: Option<Unidentified>,
}
