//! Stream-table maintenance sealed off from the session it runs in (spec/stream-tables.md
//! §10.3, issue 47 requirement 3).
//!
//! IMMEDIATE maintenance runs the owner's query inside every writer's statement, and a
//! refresh runs it in whatever session calls it (the owner's, a member's, the scheduler's).
//! The statements the extension stores qualify every name, but the functions the query calls
//! look names up as they run, in the session they run in: PostgreSQL searches that session's
//! temporary schema first for relations and types whenever `search_path` does not place
//! `pg_temp` explicitly (a function's own `SET search_path = public` does not), and last when
//! it does (the locked path). A writer's temporary view `rates` would be read, and the
//! writer's function it calls run, as the owner.
//!
//! [`sealed`] runs maintenance with two rules, restored however it ends:
//!
//! - **No temporary schema.** The session's temporary schema is taken out of every search
//!   (`SetTempNamespaceState` with no schema, as a parallel worker starts, the session's
//!   schema put back after): nothing the writer created is found by name, and its own objects
//!   are untouched.
//! - **No utility statement.** Code the query calls may not run a utility command (`CREATE`,
//!   `DROP`, `DO`, `COPY`, ...; `SET` and `SHOW` are allowed): nothing of the session or the
//!   database changes under the writer's statement, and nothing can be created in `pg_temp`,
//!   which with the schema taken out would set up the session's temporary schema again and
//!   empty it. A utility statement is refused by name ([`install`]'s hook).
//!
//! Data flow: `_PG_init` installs the `ProcessUtility` hook once per backend; a maintenance
//! call enters [`sealed`] around the execution of its stored statement only (the extension's
//! own DDL runs outside it); nested maintenance (an IMMEDIATE stream table over another)
//! nests.

use std::cell::RefCell;

use pgrx::pg_sys;
use pgrx::prelude::*;

thread_local! {
    /// The stream tables whose maintenance runs sealed, innermost last.
    static SEALED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// The `ProcessUtility` hook that was there before [`install`].
static mut PREVIOUS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// Installs the `ProcessUtility` hook (once per backend, from `_PG_init`).
pub fn install() {
    // SAFETY: hooks are installed from `_PG_init`, on the backend's one thread, before any
    // statement of this library runs; the previous hook is kept and called.
    unsafe {
        PREVIOUS_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(utility_hook);
    }
}

/// Runs `f`, the maintenance of the stream table `name`, sealed off from the session (see
/// the module's doc).
pub fn sealed<R>(name: &str, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            SEALED.with(|s| s.borrow_mut().pop());
        }
    }
    without_temporary_schema(|| {
        SEALED.with(|s| s.borrow_mut().push(name.to_string()));
        let _pop = Pop;
        f()
    })
}

/// Runs `f` with the session's temporary schema out of every search (the first rule of the
/// module's doc): for the extension's own work as a stream table's owner in a caller's
/// session (a rebuild reading the query again), which creates nothing temporary.
pub fn without_temporary_schema<R>(f: impl FnOnce() -> R) -> R {
    struct Restore {
        temp: pg_sys::Oid,
        toast: pg_sys::Oid,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: puts back the session's temporary schema read below (plain assignments
            // in namespace.c; nothing here can raise an error, also while unwinding).
            unsafe { pg_sys::SetTempNamespaceState(self.temp, self.toast) };
        }
    }
    let (mut temp, mut toast) = (pg_sys::InvalidOid, pg_sys::InvalidOid);
    // SAFETY: reads and clears this backend's temporary schema state; restored by `Restore`
    // on every path out of this function (an error unwinds through it).
    unsafe {
        pg_sys::GetTempNamespaceState(&mut temp, &mut toast);
        pg_sys::SetTempNamespaceState(pg_sys::InvalidOid, pg_sys::InvalidOid);
    }
    let _restore = Restore { temp, toast };
    f()
}

/// The stream table whose sealed maintenance is running, if any.
fn sealed_for() -> Option<String> {
    SEALED.with(|s| s.borrow().last().cloned())
}

/// Refuses a utility statement inside sealed maintenance (but `SET` and `SHOW`), else passes
/// it on.
// The arguments are PostgreSQL's ProcessUtility_hook_type.
#[allow(clippy::too_many_arguments)]
#[pg_guard]
unsafe extern "C-unwind" fn utility_hook(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    if let Some(name) = sealed_for() {
        // SAFETY: ProcessUtility's arguments: a planned utility statement.
        let (allowed, tag) = unsafe {
            let node = (*pstmt).utilityStmt;
            let allowed = !node.is_null()
                && matches!(
                    (*node).type_,
                    pg_sys::NodeTag::T_VariableSetStmt | pg_sys::NodeTag::T_VariableShowStmt
                );
            let tag =
                std::ffi::CStr::from_ptr(pg_sys::GetCommandTagName(pg_sys::CreateCommandTag(node)))
                    .to_string_lossy()
                    .into_owned();
            (allowed, tag)
        };
        if !allowed {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!(
                    "the maintenance of stream table {name} ran {tag}: code a stream table's \
                     query calls runs no utility statement while the stream table is \
                     maintained (it runs inside other sessions' statements)"
                )
            );
        }
    }
    // SAFETY: the arguments PostgreSQL gave this hook, passed on unchanged.
    unsafe {
        match PREVIOUS_UTILITY {
            Some(previous) => previous(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        }
    }
}
