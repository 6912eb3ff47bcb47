//! Which writing statements an IMMEDIATE stream table may apply by its delta rules
//! (spec/stream-tables.md §5.3, "statements of several events").
//!
//! The delta rules hold for one event at a time: an AFTER STATEMENT trigger applies its
//! transition tables against every other input *as it is now*, which is exact only when no
//! other write of the stream table's sources is in flight. Several are in flight when one
//! statement writes sources with more than one event (a data-modifying `WITH` over one
//! source or several, `MERGE`, `INSERT ... ON CONFLICT DO UPDATE`, an upstream stream
//! table's apply statement), and when a statement runs inside another's execution (a
//! foreign key's cascade, a user's row trigger writing another source): PostgreSQL fires
//! the AFTER trigger of each event after its whole statement, so the sources it reads
//! already hold the other events' rows, which their own triggers apply again, or lose the
//! rows of an event whose trigger already ran against the old state.
//!
//! So the BEFORE STATEMENT trigger of the stream table (`_b`, once per event of a statement,
//! as PostgreSQL fires it, on every source) opens an event of the stream table, and each
//! AFTER trigger closes one. Invariant: a delta is applied only by a trigger that closes the
//! only open event of its stream table, and only when no event of that stretch was closed
//! while another was open. A trigger that closes an event while others stay open applies
//! nothing ([`Apply::Later`]) and marks the stretch; the trigger that closes its last event
//! recomputes the stream table ([`Apply::Recompute`]: from the sources after every write of
//! the stretch, once, however many events and sources it had). Counting errs only towards
//! recomputing. Events opened in a subtransaction that aborts are forgotten with it (its
//! writes are undone too), and everything when the transaction ends.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use pgrx::pg_sys;

/// What an AFTER trigger does with its statement's change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Apply {
    /// The only event of its stretch: its delta, against the other inputs as they are now.
    Delta,
    /// The last event of a stretch of several: the stream table recomputed.
    Recompute,
    /// Other events of the stream table are open: nothing now, the last one recomputes.
    Later,
}

/// The open events of one stream table (over all its sources).
#[derive(Default)]
struct Open {
    /// The subtransaction each open event's BEFORE trigger fired in.
    events: Vec<pg_sys::SubTransactionId>,
    /// An event closed while another was open: the last close recomputes.
    several: bool,
}

thread_local! {
    static OPEN: RefCell<HashMap<u32, Open>> = RefCell::new(HashMap::new());
    static CALLBACKS: Cell<bool> = const { Cell::new(false) };
}

/// The BEFORE STATEMENT trigger of stream table `relid` (on any of its sources) fired: one
/// event opens.
pub fn open(relid: pg_sys::Oid) {
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
            .entry(u32::from(relid))
            .or_default()
            .events
            .push(subxact);
    });
}

/// An AFTER trigger of stream table `relid` fires for an event (`truncate`: a TRUNCATE,
/// which opens none): closes one (opened in the current subtransaction, the last such) and
/// says what the trigger does.
pub fn close(relid: pg_sys::Oid, truncate: bool) -> Apply {
    // SAFETY: reads the backend's current subtransaction id.
    let subxact = unsafe { pg_sys::GetCurrentSubTransactionId() };
    OPEN.with(|o| {
        let mut o = o.borrow_mut();
        let k = u32::from(relid);
        let Some(open) = o.get_mut(&k) else {
            // Nothing else in flight (or a stream table made before BEFORE triggers
            // existed): one event, or a TRUNCATE, which recomputes.
            return if truncate {
                Apply::Recompute
            } else {
                Apply::Delta
            };
        };
        if !truncate {
            match open.events.iter().rposition(|&s| s == subxact) {
                Some(i) => {
                    open.events.remove(i);
                }
                None => {
                    open.events.pop();
                }
            }
        }
        if !open.events.is_empty() {
            open.several = true;
            return Apply::Later;
        }
        let several = open.several;
        o.remove(&k);
        if several || truncate {
            Apply::Recompute
        } else {
            Apply::Delta
        }
    })
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
