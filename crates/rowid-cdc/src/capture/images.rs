//! The row images of a change (spec/row-images.md §2): the old row as the stream carried it
//! (whole under REPLICA IDENTITY FULL, the key otherwise) and the new row with its unchanged
//! TOASTed values filled from the old row where that is exact, every other omission named.
//!
//! The values stay in their send form (the stream's bytes, not copied); a sink renders them
//! (the JSON line's mapping) or passes them on.

use std::sync::Arc;

use rowid_pgoutput::{Column, FlagBits, OldTuple, Relation, Tuple};
use rowid_registry::schema_message::RelationSchema;

use crate::event::{Cell, ColumnMeta, OldKind, RowImage};

/// The columns of `relation` as images describe them: names and type OIDs from the Relation
/// message; type names and shapes from `schema` where it has the column with the same type
/// (otherwise the values travel as their send form).
pub(super) fn columns(relation: &Relation, schema: Option<&RelationSchema>) -> Arc<[ColumnMeta]> {
    relation
        .columns
        .iter()
        .map(|c| {
            let known = schema
                .and_then(|s| s.columns.iter().find(|k| k.name == c.name))
                .filter(|k| k.type_oid == c.type_oid);
            ColumnMeta {
                name: c.name.clone(),
                attnum: known.map(|k| k.attnum),
                type_oid: c.type_oid,
                type_name: known.and_then(|k| k.type_name.clone()),
                shape: known.and_then(|k| k.shape.clone()),
            }
        })
        .collect()
}

/// A change's images.
#[derive(Debug, Default)]
pub(super) struct Images {
    pub(super) old: Option<RowImage>,
    pub(super) old_kind: Option<OldKind>,
    pub(super) new: Option<RowImage>,
    pub(super) backfilled: Vec<String>,
    pub(super) unchanged_toast: Vec<String>,
}

fn cell(c: Option<&Column>) -> Cell {
    match c {
        Some(Column::Null) => Cell::Null,
        Some(Column::Binary(b)) => Cell::Binary(b.clone()),
        Some(Column::Text(t)) => Cell::Text(t.clone()),
        Some(Column::UnchangedToast) | None => Cell::Absent,
    }
}

/// A snapshot chunk's row as its image: the tuple's values, taken.
pub(super) fn tuple_image(columns: &Arc<[ColumnMeta]>, row: Tuple) -> RowImage {
    let cells = row
        .into_iter()
        .map(|c| match c {
            Column::Null => Cell::Null,
            Column::Binary(b) => Cell::Binary(b),
            Column::Text(t) => Cell::Text(t),
            Column::UnchangedToast => Cell::Absent,
        })
        .collect();
    RowImage::new(columns.clone(), cells)
}

/// The images of a change of `relation` with these tuples.
pub(super) fn images(
    columns: &Arc<[ColumnMeta]>,
    relation: &Relation,
    flags: &FlagBits,
    old: Option<&OldTuple>,
    new: Option<&Tuple>,
) -> Images {
    let in_key = |i: usize| {
        relation
            .columns
            .get(i)
            .is_some_and(|c| flags.in_replica_identity(c))
    };
    let (old_image, old_kind) = match old {
        None => (None, None),
        Some(OldTuple::Full(t)) => (
            Some(
                (0..columns.len())
                    .map(|i| cell(t.get(i)))
                    .collect::<Vec<_>>(),
            ),
            Some(OldKind::Full),
        ),
        // A 'K' tuple holds the key's columns; its other slots are placeholders.
        Some(OldTuple::Key(t)) => (
            Some(
                (0..columns.len())
                    .map(|i| {
                        if in_key(i) {
                            cell(t.get(i))
                        } else {
                            Cell::Absent
                        }
                    })
                    .collect(),
            ),
            Some(OldKind::Key),
        ),
    };
    let mut backfilled = Vec::new();
    let mut unchanged_toast = Vec::new();
    let new_image = new.map(|t| {
        let cells = (0..columns.len())
            .map(|i| match t.get(i) {
                // Sent only for a value the change did not touch: the old row's is exact.
                Some(Column::UnchangedToast) => {
                    let from_old = old_image
                        .as_ref()
                        .map(|o: &Vec<Cell>| o[i].clone())
                        .filter(|c| *c != Cell::Absent);
                    match from_old {
                        Some(c) => {
                            backfilled.push(columns[i].name.clone());
                            c
                        }
                        None => {
                            unchanged_toast.push(columns[i].name.clone());
                            Cell::Absent
                        }
                    }
                }
                other => cell(other),
            })
            .collect();
        RowImage::new(columns.clone(), cells)
    });
    Images {
        old: old_image.map(|cells| RowImage::new(columns.clone(), cells)),
        old_kind,
        new: new_image,
        backfilled,
        unchanged_toast,
    }
}
