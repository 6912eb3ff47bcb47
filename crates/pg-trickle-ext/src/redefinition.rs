//! Marks a redefinition of a trigger buffer's identities, or a rewrite of its source's
//! values, with an `R` row (spec/change-buffer.md §1d). The decision and the record are
//! `rowid_registry::redefinition`'s; this reads the buffer's record (its table comment), the
//! source's identity schema and the transaction's rewrites, and writes the row and the new
//! record as the buffer's owner.

use pgrx::pg_sys;
use rowid_registry::redefinition::{IdentityRecord, redefinition};

use crate::catalog::{buffer_name, relation_name, relation_owner};
use crate::guard::as_owner;
use crate::identity_messages::relation_schema;
use crate::sequence::{last_mark, next_seq, note_mark};
use crate::spi;

/// Records in `buffer` (just made for `source`) the identity its rows are written under.
pub fn record(source: pg_sys::Oid, buffer: pg_sys::Oid) {
    let now = IdentityRecord::baseline(&relation_schema(source));
    write_record(buffer, &now);
}

/// Appends an `R` row to `buffer` when `source`'s identities were redefined since the
/// buffer recorded them, or a DDL of this transaction rewrote its values and no `R` row
/// says so yet; records the identity from then on. One `R` row stands for a run of DDL with
/// no change of the source between (what the WAL path sees: the schema at the next change).
/// Returns whether it wrote one. Called
/// where the source's DDL is followed (its event trigger, `capture_table`) and where the
/// capture builds its plan (a dropped key index sends no event the trigger sees, but
/// invalidates the plan).
pub fn mark(source: pg_sys::Oid, buffer: pg_sys::Oid) -> bool {
    let comment = spi::one::<String>(
        "SELECT pg_catalog.obj_description($1, 'pg_class')",
        &[buffer.into()],
    );
    let recorded = comment.as_deref().and_then(IdentityRecord::from_comment);
    let schema = relation_schema(source);
    let relation = relation_name(source);
    let Some((reason, keep)) =
        redefinition(&relation, recorded.as_ref(), &schema, schema.rewritten)
    else {
        return false;
    };
    let quoted = buffer_name(buffer).quoted();
    // SAFETY: the DDL's transaction is writing: it has (or now gets) a top-level xid.
    let xid = unsafe { pg_sys::GetTopTransactionId() }.into_inner();
    // Still there: not taken by a rolled-back savepoint (its ctid is this transaction's row).
    let marked = last_mark(xid, source).is_some_and(|ctid| {
        as_owner(relation_owner(buffer), || {
            spi::one::<bool>(
                &format!(
                    "SELECT EXISTS (SELECT FROM {quoted} WHERE ctid OPERATOR(pg_catalog.=) \
                     $1::pg_catalog.tid AND op OPERATOR(pg_catalog.=) 'R')"
                ),
                &[ctid.as_str().into()],
            )
        })
        .unwrap_or(false)
    });
    if !marked {
        let (xid, seq) = next_seq();
        // SAFETY: reads the WAL insert position, as the capture does for its rows.
        let lsn = unsafe { pg_sys::GetXLogInsertRecPtr() };
        let ctid = as_owner(relation_owner(buffer), || {
            spi::one_mut::<String>(
                &format!(
                    "INSERT INTO {quoted} (xid, seq, source_relid, op, unidentified, change_lsn) \
                     VALUES ($1, $2, $3, 'R', $4, \
                             '0/0'::pg_catalog.pg_lsn OPERATOR(pg_catalog.+) $5::pg_catalog.numeric) \
                     RETURNING ctid::pg_catalog.text"
                ),
                &[
                    i64::from(xid).into(),
                    seq.into(),
                    source.into(),
                    reason.as_str().into(),
                    i64::try_from(lsn).unwrap_or(i64::MAX).into(),
                ],
            )
        });
        if let Some(ctid) = ctid {
            note_mark(xid, source, ctid);
        }
    }
    write_record(buffer, &keep);
    !marked
}

/// Writes `record` as `buffer`'s table comment, as its owner.
fn write_record(buffer: pg_sys::Oid, record: &IdentityRecord) {
    let literal = spi::one::<String>(
        "SELECT pg_catalog.quote_literal($1)",
        &[record.to_comment().as_str().into()],
    )
    .unwrap_or_default();
    let quoted = buffer_name(buffer).quoted();
    as_owner(relation_owner(buffer), || {
        spi::run(&format!("COMMENT ON TABLE {quoted} IS {literal}"), &[]);
    });
}
