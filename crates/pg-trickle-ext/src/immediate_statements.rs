//! Which writing statements an IMMEDIATE stream table may apply by its delta rules
//! (spec/stream-tables.md §5.3, "statements of several events").
//!
//! A statement that writes a source with more than one event (a data-modifying `WITH` that
//! deletes and inserts, `MERGE`, `INSERT ... ON CONFLICT DO UPDATE`, and every apply
//! statement of an upstream stream table) fires one AFTER STATEMENT trigger per event, each
//! after the whole statement: the sources each trigger reads "as they are now" already hold
//! the other events' rows, which their own triggers then apply again. The delta rules hold
//! for one event per statement only.
//!
//! So the BEFORE STATEMENT trigger of the stream table (`_b`, once per event of a statement,
//! as PostgreSQL fires it) opens an event, and each AFTER trigger closes one. An AFTER
//! trigger that finds another event of its stream table and source still open, or finds
//! that such a statement already recomputed, recomputes the stream table instead of applying
//! its delta: a recomputation reads the sources after the whole statement and is exact
//! however many times it runs. Counting errs only towards recomputing: a statement nested in
//! another's execution counts as another event. Events opened in a subtransaction that
//! aborts are forgotten with it, and everything when the transaction ends.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use pgrx::pg_sys;

/// The open events of one stream table and source.
#[derive(Default)]
struct Open {
    /// The subtransaction each open event's BEFORE trigger fired in.
    events: Vec<pg_sys::SubTransactionId>,
    /// A statement of several events recomputed the stream table, and events are still open.
    recomputed: bool,
}

thread_local! {
    static OPEN: RefCell<HashMap<(u32, u32), Open>> = RefCell::new(HashMap::new());
    static CALLBACKS: Cell<bool> = const { Cell::new(false) };
}

/// The BEFORE STATEMENT trigger of stream table `relid` on `source` fired: one event opens.
pub fn open(relid: pg_sys::Oid, source: pg_sys::Oid) {
    if !CALLBACKS.with(Cell::get) {
        // SAFETY: plain function pointers registered once per backend; the callbacks only
        // touch this module's thread-local state.
        unsafe {
            pg_sys::RegisterXactCallback(Some(transaction_ended), std::ptr::null_mut());
            pg_sys::RegisterSubXactCallback(Some(subtransaction_event), std::ptr::null_mut());
        }
        CALLBACKS.with(|c| c.set(true));
    }
    // SAFETY: reads the backend's current subtransaction id.
    let subxact = unsafe { pg_sys::GetCurrentSubTransactionId() };
    OPEN.with(|o| {
        o.borrow_mut()
            .entry(key(relid, source))
            .or_default()
            .events
            .push(subxact);
    });
}

/// An AFTER trigger of stream table `relid` on `source` fires: closes one event (opened in
/// the current subtransaction, the last such) and says whether the trigger must recompute
/// instead of applying its statement's delta.
pub fn close(relid: pg_sys::Oid, source: pg_sys::Oid) -> bool {
    // SAFETY: reads the backend's current subtransaction id.
    let subxact = unsafe { pg_sys::GetCurrentSubTransactionId() };
    OPEN.with(|o| {
        let mut o = o.borrow_mut();
        let k = key(relid, source);
        let Some(open) = o.get_mut(&k) else {
            // No BEFORE trigger counted (a stream table made before it existed): one event.
            return false;
        };
        let recompute = open.events.len() > 1 || open.recomputed;
        match open.events.iter().rposition(|&s| s == subxact) {
            Some(i) => {
                open.events.remove(i);
            }
            None => {
                open.events.pop();
            }
        }
        if open.events.is_empty() {
            o.remove(&k);
        } else if recompute {
            open.recomputed = true;
        }
        recompute
    })
}

fn key(relid: pg_sys::Oid, source: pg_sys::Oid) -> (u32, u32) {
    (u32::from(relid), u32::from(source))
}

/// Forgets every open event when the transaction ends (committed, every statement ended;
/// aborted, none will close).
unsafe extern "C-unwind" fn transaction_ended(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    if matches!(
        event,
        pg_sys::XactEvent::XACT_EVENT_COMMIT
            | pg_sys::XactEvent::XACT_EVENT_ABORT
            | pg_sys::XactEvent::XACT_EVENT_PARALLEL_COMMIT
            | pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT
            | pg_sys::XactEvent::XACT_EVENT_PREPARE
    ) {
        OPEN.with(|o| o.borrow_mut().clear());
    }
}

/// A subtransaction that aborts takes the events it opened (their statements never close
/// them); one that commits hands them to its parent.
unsafe extern "C-unwind" fn subtransaction_event(
    event: pg_sys::SubXactEvent::Type,
    my_subid: pg_sys::SubTransactionId,
    parent_subid: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    OPEN.with(|o| {
        let mut o = o.borrow_mut();
        match event {
            pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB => {
                for open in o.values_mut() {
                    open.events.retain(|&s| s != my_subid);
                }
                o.retain(|_, open| !open.events.is_empty());
            }
            pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB => {
                for open in o.values_mut() {
                    for s in open.events.iter_mut().filter(|s| **s == my_subid) {
                        *s = parent_subid;
                    }
                }
            }
            _ => {}
        }
    });
}
