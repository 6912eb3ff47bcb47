//! The numbering of a transaction's buffer rows (`seq`, spec/change-buffer.md §1: one count
//! per transaction across every buffer the backend writes), and which sources' last row in
//! the transaction is an `R` row (§1d: one `R` row stands for a run of DDL with no change
//! between). Backend-local state; a change row and an `R` row both take their `seq` here.

use std::cell::{Cell, RefCell};

use pgrx::pg_sys;

thread_local! {
    /// The transaction the last row belonged to, and its count.
    static SEQ: Cell<(u32, i32)> = const { Cell::new((0, 0)) };
    /// Sources whose last buffer row in the transaction is an `R` row: (xid, source, the
    /// row's ctid as text). Empty but for a DDL's transaction.
    static LAST_MARK: RefCell<Vec<(u32, pg_sys::Oid, String)>> = const { RefCell::new(Vec::new()) };
}

/// The next `seq` of the current transaction.
pub(crate) fn next_seq() -> (u32, i32) {
    // SAFETY: the trigger runs in a transaction that is writing, so it has (or now gets) a
    // top-level xid.
    let xid = unsafe { pg_sys::GetTopTransactionId() }.into_inner();
    SEQ.with(|s| {
        let (last, n) = s.get();
        let n = if last == xid { n + 1 } else { 1 };
        s.set((xid, n));
        (xid, n)
    })
}

/// A change of `source` follows its last `R` row: a redefinition after it is marked again.
pub(crate) fn forget_mark(source: pg_sys::Oid) {
    LAST_MARK.with(|m| {
        if !m.borrow().is_empty() {
            m.borrow_mut().retain(|(_, s, _)| *s != source);
        }
    });
}

/// The ctid of `source`'s `R` row in transaction `xid` when no change of it was captured
/// since (the caller checks the row is still there: a rolled-back savepoint takes it).
pub(crate) fn last_mark(xid: u32, source: pg_sys::Oid) -> Option<String> {
    LAST_MARK.with(|m| {
        m.borrow()
            .iter()
            .find(|(x, s, _)| *x == xid && *s == source)
            .map(|(_, _, ctid)| ctid.clone())
    })
}

/// Notes that `source`'s last row in transaction `xid` is the `R` row at `ctid`.
pub(crate) fn note_mark(xid: u32, source: pg_sys::Oid, ctid: String) {
    LAST_MARK.with(|m| {
        let mut m = m.borrow_mut();
        m.retain(|(x, s, _)| *x == xid && *s != source);
        m.push((xid, source, ctid));
    });
}
