//! What capture emits: one [`ChangeEvent`] per committed change (its JSON line is
//! [`crate::json_line`]'s).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use rowid_codec::Domain;
use rowid_codec::structure::Shape;

use crate::lsn::Lsn;
use rowid_registry::schema_message::RelationSchema;

/// The kind of change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    /// The relation's identity schema in force at the change's position (spec/identity-
    /// messages.md; shared by the relation's events), when one is known: what a consumer
    /// storing identities plans its storage by.
    pub schema: Option<Arc<RelationSchema>>,
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

/// One column's value in a row image, borrowed from the image ([`RowImage::cell`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellRef<'a> {
    /// Not in this image (see [`Cell::Absent`]).
    Absent,
    /// SQL NULL.
    Null,
    /// The value's binary send form (`typsend`).
    Binary(&'a [u8]),
    /// The value's text output (a type without a binary send function).
    Text(&'a [u8]),
}

impl<'a> From<&'a Cell> for CellRef<'a> {
    fn from(cell: &'a Cell) -> CellRef<'a> {
        match cell {
            Cell::Absent => CellRef::Absent,
            Cell::Null => CellRef::Null,
            Cell::Binary(b) => CellRef::Binary(b),
            Cell::Text(t) => CellRef::Text(t),
        }
    }
}

/// A copy of the value.
impl From<CellRef<'_>> for Cell {
    fn from(cell: CellRef<'_>) -> Cell {
        match cell {
            CellRef::Absent => Cell::Absent,
            CellRef::Null => Cell::Null,
            CellRef::Binary(b) => Cell::Binary(Bytes::copy_from_slice(b)),
            CellRef::Text(t) => Cell::Text(Bytes::copy_from_slice(t)),
        }
    }
}

/// A row of binary send forms held in one buffer, each value a range of it: a binary COPY
/// row as it arrived. An image made of one ([`RowImage::from_send_row`]) holds one handle on
/// the buffer, not one per value.
#[derive(Clone, Debug, Default)]
pub struct SendRow {
    data: Bytes,
    /// Per column: the value's byte range in `data`; `None`: SQL NULL.
    fields: Vec<Option<(u32, u32)>>,
}

impl SendRow {
    /// An empty row (to read rows into).
    pub fn new() -> SendRow {
        SendRow::default()
    }

    /// A row of `data` with these value ranges (`None`: SQL NULL); `None` when a range is
    /// not inside `data`.
    pub fn from_ranges(
        data: Bytes,
        fields: impl IntoIterator<Item = Option<Range<usize>>>,
    ) -> Option<SendRow> {
        let mut row = SendRow::default();
        for field in fields {
            if !row.push_field(field) {
                return None;
            }
        }
        row.finish(data).then_some(row)
    }

    /// Starts reading a row into this one: its values are dropped, their allocation kept.
    /// Then [`SendRow::push_field`] for each value as it is found, and
    /// [`SendRow::finish`] with the buffer they are ranges of.
    pub fn begin(&mut self) {
        self.data = Bytes::new();
        self.fields.clear();
    }

    /// Appends a value's range (`None`: SQL NULL), checked against the buffer at
    /// [`SendRow::finish`]; `false` (nothing appended) past 4 GiB.
    pub fn push_field(&mut self, range: Option<Range<usize>>) -> bool {
        let field = match range {
            None => None,
            Some(r) => match (u32::try_from(r.start), u32::try_from(r.end)) {
                (Ok(start), Ok(end)) if start <= end => Some((start, end)),
                _ => return false,
            },
        };
        self.fields.push(field);
        true
    }

    /// The values are ranges of `data`: `true` when every one is inside it; otherwise the
    /// row is emptied and `false`.
    pub fn finish(&mut self, data: Bytes) -> bool {
        let inside = self
            .fields
            .iter()
            .all(|f| f.is_none_or(|(_, end)| end as usize <= data.len()));
        if inside {
            self.data = data;
        } else {
            self.begin();
        }
        inside
    }

    /// How many values it has.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The value at `i`: `Some(None)` for SQL NULL, `None` past the end.
    pub fn get(&self, i: usize) -> Option<Option<&[u8]>> {
        match *self.fields.get(i)? {
            None => Some(None),
            // Inside the buffer (`finish` checked it); a row still being read has none.
            Some((start, end)) => self.data.get(start as usize..end as usize).map(Some),
        }
    }

    /// The value at `i` as its own handle on the buffer (`None`: NULL or past the end).
    pub fn bytes(&self, i: usize) -> Option<Bytes> {
        let value = self.get(i)??;
        Some(self.data.slice_ref(value))
    }
}

impl rowid_pgoutput::RowValues for SendRow {
    fn value(&self, position: usize) -> Option<rowid_pgoutput::ValueRef<'_>> {
        Some(match self.get(position)? {
            None => rowid_pgoutput::ValueRef::Null,
            Some(b) => rowid_pgoutput::ValueRef::Binary(b),
        })
    }
}

/// A row image: one value per column of the relation, in the Relation message's order.
#[derive(Clone, Debug)]
pub struct RowImage {
    /// The relation's columns (shared by the images of the relation).
    pub columns: Arc<[ColumnMeta]>,
    values: Values,
}

/// How an image holds its values.
#[derive(Clone, Debug)]
enum Values {
    /// A cell per column (a stream change's tuples).
    Cells(Vec<Cell>),
    /// A row of send forms in one buffer (a snapshot row).
    Send(SendRow),
}

impl RowImage {
    /// An image of these cells, one per column.
    pub fn new(columns: Arc<[ColumnMeta]>, cells: Vec<Cell>) -> RowImage {
        RowImage {
            columns,
            values: Values::Cells(cells),
        }
    }

    /// An image of a row of send forms, one per column (every value present).
    pub fn from_send_row(columns: Arc<[ColumnMeta]>, row: SendRow) -> RowImage {
        RowImage {
            columns,
            values: Values::Send(row),
        }
    }

    /// How many values it has.
    pub fn len(&self) -> usize {
        match &self.values {
            Values::Cells(cells) => cells.len(),
            Values::Send(row) => row.len(),
        }
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of column `i` ([`CellRef::Absent`] past the end).
    pub fn cell(&self, i: usize) -> CellRef<'_> {
        match &self.values {
            Values::Cells(cells) => cells.get(i).map_or(CellRef::Absent, CellRef::from),
            Values::Send(row) => match row.get(i) {
                None => CellRef::Absent,
                Some(None) => CellRef::Null,
                Some(Some(b)) => CellRef::Binary(b),
            },
        }
    }

    /// The value of column `i` as its own handle on the bytes (`None`: absent, NULL or
    /// text).
    pub fn binary(&self, i: usize) -> Option<Bytes> {
        match &self.values {
            Values::Cells(cells) => match cells.get(i)? {
                Cell::Binary(b) => Some(b.clone()),
                _ => None,
            },
            Values::Send(row) => row.bytes(i),
        }
    }

    /// Every value, in column order.
    pub fn cells(&self) -> impl Iterator<Item = CellRef<'_>> {
        (0..self.len()).map(|i| self.cell(i))
    }

    /// The columns present in the image, with their values.
    pub fn present(&self) -> impl Iterator<Item = (&ColumnMeta, CellRef<'_>)> {
        self.columns
            .iter()
            .zip(self.cells())
            .filter(|(_, c)| *c != CellRef::Absent)
    }

    /// Makes this image the image of send row `row` under `columns`, handing back the row it
    /// held (or an empty one) for the next row to be read into: no allocation once both
    /// exist.
    pub fn replace_send_row(&mut self, columns: &Arc<[ColumnMeta]>, row: &mut SendRow) {
        if !Arc::ptr_eq(&self.columns, columns) {
            self.columns = columns.clone();
        }
        match &mut self.values {
            Values::Send(held) => std::mem::swap(held, row),
            cells => *cells = Values::Send(std::mem::take(row)),
        }
        row.begin();
    }
}

/// Images are equal when their columns and values are, however they hold them.
impl PartialEq for RowImage {
    fn eq(&self, other: &RowImage) -> bool {
        self.columns == other.columns && self.len() == other.len() && self.cells().eq(other.cells())
    }
}

impl Eq for RowImage {}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(n: usize) -> Arc<[ColumnMeta]> {
        (0..n)
            .map(|i| ColumnMeta {
                name: format!("c{i}"),
                attnum: Some(i as i16 + 1),
                type_oid: 17,
                type_name: Some("bytea".into()),
                shape: None,
            })
            .collect()
    }

    #[test]
    fn a_send_row_refuses_ranges_outside_its_buffer() {
        let data = Bytes::from_static(b"abcdef");
        assert!(SendRow::from_ranges(data.clone(), [Some(0..6), None]).is_some());
        assert!(SendRow::from_ranges(data.clone(), [Some(2..7)]).is_none());
        let backwards = std::iter::once(Some(Range { start: 4, end: 2 }));
        assert!(SendRow::from_ranges(data.clone(), backwards).is_none());
        assert!(SendRow::from_ranges(data, [Some(0..(1usize << 33))]).is_none());
        // A refused finish leaves the row empty, not half read.
        let mut row = SendRow::new();
        row.begin();
        assert!(row.push_field(Some(0..9)));
        assert!(!row.finish(Bytes::from_static(b"abc")));
        assert!(row.is_empty());
    }

    #[test]
    fn a_send_row_reads_its_values_by_position() {
        let row = SendRow::from_ranges(Bytes::from_static(b"xxab"), [Some(2..4), None, Some(0..0)])
            .unwrap_or_default();
        assert_eq!(row.len(), 3);
        assert_eq!(row.get(0), Some(Some(&b"ab"[..])));
        assert_eq!(row.get(1), Some(None));
        assert_eq!(row.get(2), Some(Some(&b""[..])));
        assert_eq!(row.get(3), None);
        assert_eq!(row.bytes(0).as_deref(), Some(&b"ab"[..]));
        assert_eq!(row.bytes(1), None);
    }

    #[test]
    fn images_are_equal_by_value_whatever_holds_them() {
        let row = SendRow::from_ranges(Bytes::from_static(b"-ab-"), [Some(1..3), None])
            .unwrap_or_default();
        let from_row = RowImage::from_send_row(columns(2), row);
        let cells = RowImage::new(
            columns(2),
            vec![Cell::Binary(Bytes::from_static(b"ab")), Cell::Null],
        );
        assert_eq!(from_row, cells);
        assert_eq!(from_row.binary(0).as_deref(), Some(&b"ab"[..]));
        let other = RowImage::new(
            columns(2),
            vec![Cell::Binary(Bytes::from_static(b"ab")), Cell::Absent],
        );
        assert_ne!(from_row, other, "NULL is not absent");
        assert_eq!(other.present().count(), 1);
    }

    #[test]
    fn an_image_takes_the_next_row_and_hands_back_the_last() {
        let a = SendRow::from_ranges(Bytes::from_static(b"a"), [Some(0..1)]).unwrap_or_default();
        let mut image = RowImage::new(columns(1), vec![Cell::Null]);
        let mut next = a;
        image.replace_send_row(&columns(1), &mut next);
        assert!(next.is_empty(), "handed back empty");
        assert_eq!(image.cell(0), CellRef::Binary(b"a"));
        let mut next =
            SendRow::from_ranges(Bytes::from_static(b"bc"), [Some(0..2), None]).unwrap_or_default();
        let wider = columns(2);
        image.replace_send_row(&wider, &mut next);
        assert!(Arc::ptr_eq(&image.columns, &wider));
        assert_eq!(
            image.cells().collect::<Vec<_>>(),
            [CellRef::Binary(b"bc"), CellRef::Null]
        );
    }
}
