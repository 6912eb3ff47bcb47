//! What a client sees of an error: its message, SQLSTATE, detail and hint, never a Rust
//! backtrace (spec/stream-tables.md §10, issue 47 requirement 8).
//!
//! Every error the extension raises travels as a Rust panic to the `#[pg_guard]` boundary,
//! where pgrx turns it into `ereport`. pgrx's panic hook (set in `Pg_magic_func`) captures a
//! backtrace with each one, and with `RUST_BACKTRACE` in the server's environment pgrx
//! appends it to the error's `DETAIL`: 50 frames with the build's source paths, sent to the
//! client. [`install`] replaces that hook from `_PG_init` with one that captures nothing for
//! an error report (the errors of [`crate::errors`] and those PostgreSQL raised through pgrx),
//! so no backtrace is attached to what reaches the client, and that writes a genuine panic (a
//! defect) with its location and, when `RUST_BACKTRACE` asks for it, its backtrace to the
//! backend's stderr: the server log.

use std::backtrace::{Backtrace, BacktraceStatus};

use pgrx::pg_sys::panic::{CaughtError, ErrorReport, ErrorReportWithLevel};

/// Whether a panic payload is an error report on its way to `ereport` (not a defect).
fn is_error_report(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<ErrorReportWithLevel>()
        || payload.is::<ErrorReport>()
        || payload.is::<CaughtError>()
}

/// Replaces pgrx's panic hook (see the module's doc). Called once per process, from
/// `_PG_init`.
pub fn install() {
    std::panic::set_hook(Box::new(|info| {
        if is_error_report(info.payload()) {
            return;
        }
        let backtrace = Backtrace::capture();
        let location = info
            .location()
            .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if backtrace.status() == BacktraceStatus::Captured {
            eprintln!("pg_trickle_ext: panic{location}: {message}\n{backtrace}");
        } else {
            eprintln!("pg_trickle_ext: panic{location}: {message}");
        }
    }));
}
