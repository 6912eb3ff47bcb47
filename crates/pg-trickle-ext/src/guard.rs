//! Running SQL that a caller cannot steer.
//!
//! Every statement the extension runs goes through [`crate::spi`], which runs it with
//! `search_path` locked to `pg_catalog, pg_temp` for its duration: a GUC nest level opened
//! with `NewGUCNestLevel` and closed with `AtEOXact_GUC`, the way PostgreSQL's own
//! maintenance commands (VACUUM, CREATE INDEX, REFRESH MATERIALIZED VIEW) restrict the path
//! while they evaluate user expressions. An error inside unwinds to the transaction's (or
//! subtransaction's) abort, which pops the nest level and restores the user id.
//!
//! [`as_owner`] adds what the capture trigger needs to work as a table's owner: the user id
//! switched with `SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION` (no temporary
//! objects, no `SET ROLE`), as RI triggers and maintenance commands do. With the path
//! locked, no function, operator, type or table the caller created can be resolved by a
//! name the extension's SQL uses: `pg_catalog` comes first, `pg_temp` last, and PostgreSQL
//! never resolves functions or operators in `pg_temp`. The SQL itself also qualifies every
//! name (`pg_catalog.pg_class`, `OPERATOR(pg_catalog.=)`) and builds statements from OIDs.
//!
//! The lock is taken per statement, not around the whole owner-switched region: between its
//! statements the trigger resolves no name at all (it opens the buffer by OID, reads enum
//! labels and composite descriptors by OID, and appends to the heap), and the one place that
//! runs SQL is [`crate::spi`], where every statement locks the path (a unit test there fails
//! when another module calls SPI). Locking it once per row as well cost about 1 µs per
//! captured row, a third of the trigger's cost (benches/RESULTS.md, issue 20).

use std::ffi::{CStr, CString};
use std::panic::AssertUnwindSafe;

use pgrx::PgTryBuilder;
use pgrx::pg_sys;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::CaughtError;

/// The search path every statement of the extension runs with.
pub const LOCKED_SEARCH_PATH: &CStr = c"pg_catalog, pg_temp";

/// Runs `f` with `search_path` set to [`LOCKED_SEARCH_PATH`], restored afterwards (and, on an
/// error, by the abort of the transaction or subtransaction it happens in).
pub fn with_locked_search_path<R>(f: impl FnOnce() -> R) -> R {
    with_settings(&[(c"search_path", LOCKED_SEARCH_PATH)], f)
}

/// Runs `f` with each `(name, value)` of `settings` set, restored afterwards (and, on an
/// error, by the abort of the transaction or subtransaction it happens in).
pub fn with_settings<R>(settings: &[(&CStr, &CStr)], f: impl FnOnce() -> R) -> R {
    // SAFETY: called inside a backend; the nest level opened here is closed below, or by the
    // (sub)transaction abort when `f` raises an error; names and values are NUL-terminated.
    let level = unsafe {
        let level = pg_sys::NewGUCNestLevel();
        for (name, value) in settings {
            pg_sys::set_config_option(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
        }
        level
    };
    let out = f();
    // SAFETY: the nest level opened above, closed once; `false`: the values set inside it are
    // not kept.
    unsafe { pg_sys::AtEOXact_GUC(false, level) };
    out
}

/// Runs `f` as `owner`, in a security-restricted operation: what the capture trigger does as
/// the source table's owner, and every refresh and IMMEDIATE maintenance as the stream
/// table's. Row-level security applies as to `owner`'s own statements, `FORCE ROW LEVEL
/// SECURITY` included (no `SECURITY_NOFORCE_RLS`: a refresh reads what the owner's query
/// reads, as `REFRESH MATERIALIZED VIEW` does). `f` runs SQL only through [`crate::spi`], which
/// locks the search path for each statement.
pub fn as_owner<R>(owner: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let (mut user, mut sec) = (pg_sys::InvalidOid, 0);
    // SAFETY: reads and sets this backend's user id and security context; restored below,
    // or by the (sub)transaction abort when `f` raises an error.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut sec);
        pg_sys::SetUserIdAndSecContext(
            owner,
            sec | (pg_sys::SECURITY_LOCAL_USERID_CHANGE | pg_sys::SECURITY_RESTRICTED_OPERATION)
                as i32,
        );
    }
    let out = f();
    // SAFETY: restores what was read above.
    unsafe { pg_sys::SetUserIdAndSecContext(user, sec) };
    out
}

/// The settings a stream table's refresh runs under besides `search_path`: how constants in
/// its stored statement print and read back. `TimeZone` is recorded per stream table when
/// it is created (it decides what the query computes: a cast of `timestamptz` to `date`).
pub const PINNED_SETTINGS: [(&CStr, &CStr); 3] = [
    (c"DateStyle", c"ISO, YMD"),
    (c"IntervalStyle", c"postgres"),
    (c"extra_float_digits", c"3"),
];

/// The settings a refresh's statements run under for their cost, not their result: no JIT.
/// A refresh statement is one large statement over a small change (dozens of `WITH` parts),
/// estimated over buffers the server never analyzed: JIT compiled it for 1.5 s where it ran
/// in 0.4 s (a window refresh of 10^4 changed rows, benches/RESULTS.md section 13).
pub const REFRESH_COST_SETTINGS: [(&CStr, &CStr); 1] = [(c"jit", c"off")];

/// Runs `f` with [`PINNED_SETTINGS`], [`REFRESH_COST_SETTINGS`] and `TimeZone` = `time_zone`
/// set, restored afterwards (and, on an error, by the abort of the transaction or
/// subtransaction it happens in).
pub fn with_pinned_settings<R>(time_zone: &str, f: impl FnOnce() -> R) -> R {
    let zone = CString::new(time_zone).unwrap_or_else(|_| c"UTC".to_owned());
    let mut settings = PINNED_SETTINGS.to_vec();
    settings.extend(REFRESH_COST_SETTINGS);
    settings.push((c"TimeZone", zone.as_c_str()));
    with_settings(&settings, f)
}

/// What [`subtransaction`] does with the work of `f` when it succeeds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// Released into the enclosing transaction.
    Keep,
    /// Rolled back: a trial whose only result is whether it raised.
    Discard,
}

/// Runs `f` in a subtransaction, as PL/pgSQL runs a block with an `EXCEPTION` clause: its
/// work kept or discarded on success as `outcome` says, always rolled back when it raises,
/// and the error it raised returned as its message (and detail) instead of aborting the
/// caller's transaction. A query cancel or termination is raised again after the rollback:
/// it is never a result.
pub fn subtransaction<R>(outcome: Outcome, f: impl FnOnce() -> R) -> Result<R, String> {
    // SAFETY: in a transaction (every caller is a SQL function); the subtransaction begun
    // here is ended below on every path, and the memory context and resource owner restored
    // as PL/pgSQL's exec_stmt_block restores them.
    let (context, owner) = unsafe {
        let saved = (pg_sys::CurrentMemoryContext, pg_sys::CurrentResourceOwner);
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(saved.0);
        saved
    };
    let result: Result<R, Box<CaughtError>> = PgTryBuilder::new(AssertUnwindSafe(|| Ok(f())))
        .catch_others(|caught| Err(Box::new(caught)))
        .execute();
    // SAFETY: ends the subtransaction begun above (pgrx flushed the error state of a caught
    // error); back in the caller's memory context and resource owner.
    unsafe {
        if result.is_ok() && outcome == Outcome::Keep {
            pg_sys::ReleaseCurrentSubTransaction();
        } else {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
    }
    result.map_err(|caught| {
        let report = match caught.as_ref() {
            CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) => r,
            CaughtError::RustPanic { ereport, .. } => ereport,
        };
        if matches!(
            report.sql_error_code(),
            PgSqlErrorCode::ERRCODE_QUERY_CANCELED | PgSqlErrorCode::ERRCODE_ADMIN_SHUTDOWN
        ) {
            (*caught).rethrow();
        }
        match report.detail() {
            Some(detail) => format!("{} ({detail})", report.message()),
            None => report.message().to_string(),
        }
    })
}
