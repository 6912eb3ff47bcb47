//! What capture emits: one [`ChangeEvent`] per committed change (its JSON line is
//! [`crate::json_line`]'s).

use std::sync::Arc;

use bytes::Bytes;
use rowid_codec::Domain;
use rowid_codec::structure::Shape;

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
    /// A row of the initial snapshot, read at the slot's consistent point: its identity and
    /// new image; the stream's changes follow it.
    Snapshot,
    /// A change whose identity could not be derived (no identity schema for the relation
    /// at its position, no old row to name the row an UPDATE or DELETE removed, a Relation
    /// message the schema does not describe, ...): no identity, and
    /// [`ChangeEvent::unidentified`] says which change it was and why. A consumer keeping
    /// state of that relation must rebuild it.
    Unidentified,
}

impl Op {
    /// `insert`, `update`, `delete`, `truncate`, `snapshot`, `unidentified`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Truncate => "truncate",
            Op::Snapshot => "snapshot",
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
    pub relation: Arc<str>,
    /// What happened.
    pub op: Op,
    /// The relation's columns at the change's position (those its images hold), also for a
    /// truncate.
    pub columns: Arc<[ColumnMeta]>,
    /// The identity's domain (`None` for a truncate).
    pub domain: Option<Domain>,
    /// The identity's columns, in identity order (empty for a truncate).
    pub key: Arc<[String]>,
    /// The identity of the row the change removed (update, delete).
    pub old_id: Option<Vec<u8>>,
    /// The identity of the row the change wrote (insert, update).
    pub new_id: Option<Vec<u8>>,
    /// The row the change removed (update, delete), as far as the stream carried it.
    pub old: Option<RowImage>,
    /// Whether [`ChangeEvent::old`] is the whole row or the replica identity key only.
    pub old_kind: Option<OldKind>,
    /// The row the change wrote (insert, update), with unchanged TOASTed values filled from
    /// the old row where it has them; the others are absent and named in
    /// [`ChangeEvent::unchanged_toast`].
    pub new: Option<RowImage>,
    /// Columns of the new image that arrived as unchanged TOASTed values and were filled
    /// from the old row (exact: PostgreSQL omits only values the change did not touch).
    pub backfilled: Vec<String>,
    /// Columns of the new image that arrived as unchanged TOASTed values the old row does
    /// not carry (REPLICA IDENTITY DEFAULT or USING INDEX, a non-key column): absent from
    /// [`ChangeEvent::new`], never NULL.
    pub unchanged_toast: Vec<String>,
    /// For [`Op::Unidentified`]: the change and why it has no identity (`None` otherwise).
    pub unidentified: Option<Unidentified>,
}

/// What an old image holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OldKind {
    /// The whole old row (REPLICA IDENTITY FULL).
    Full,
    /// The replica identity's columns only (DEFAULT or USING INDEX, when the key changed or
    /// the row was deleted).
    Key,
}

impl OldKind {
    /// `full` or `key`.
    pub fn name(self) -> &'static str {
        match self {
            OldKind::Full => "full",
            OldKind::Key => "key",
        }
    }
}

/// A column of a relation as row images describe it: its name and type from the Relation
/// message, and the type's name and image shape from the identity schema in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnMeta {
    /// Column name.
    pub name: String,
    /// `pg_attribute.attnum`, when the identity schema says it.
    pub attnum: Option<i16>,
    /// `pg_type` OID, as the Relation message sent it.
    pub type_oid: u32,
    /// The type's name (`format_type`), when the identity schema says it.
    pub type_name: Option<String>,
    /// The shape the value's send form is read with; `None`: carried as its send form.
    pub shape: Option<Shape>,
}

/// One column's value in a row image, as the stream carried it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    /// Not in this image (a key-only old row's other columns, an unchanged TOASTed value
    /// the stream did not send).
    Absent,
    /// SQL NULL.
    Null,
    /// The value's binary send form (`typsend`).
    Binary(Bytes),
    /// The value's text output (a type without a binary send function).
    Text(Bytes),
}

/// A row image: one cell per column of the relation, in the Relation message's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowImage {
    /// The relation's columns (shared by the images of the relation).
    pub columns: Arc<[ColumnMeta]>,
    /// One per column.
    pub cells: Vec<Cell>,
}

impl RowImage {
    /// The columns present in the image, with their cells.
    pub fn present(&self) -> impl Iterator<Item = (&ColumnMeta, &Cell)> {
        self.columns
            .iter()
            .zip(&self.cells)
            .filter(|(_, c)| **c != Cell::Absent)
    }
}
