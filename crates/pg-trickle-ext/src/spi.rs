//! Every SQL statement the extension runs: read-only queries through [`rows`] and [`one`],
//! everything else through [`run`]. Each runs with the search path locked
//! ([`crate::guard::with_locked_search_path`]), so no object the calling session put on its
//! path can stand in for a catalog, function or operator the statement names. Statements
//! are fixed text with every name qualified, built from OIDs and quoted identifiers. A
//! failure is an internal error ([`crate::errors::catalog_query`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{CString, c_char};
use std::rc::Rc;

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiError, SpiErrorCodes, SpiHeapTupleData, SpiResult};

use crate::errors;
use crate::guard::with_locked_search_path;

thread_local! {
    /// Set inside [`with_latest_snapshot`]: reads take the latest snapshot.
    static LATEST: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every read of [`rows`] and [`one`] under a snapshot taken when the read
/// starts (`GetLatestSnapshot`), whatever the transaction's isolation: what a catalog read
/// after a lock wait must see. A REPEATABLE READ transaction's own snapshot may predate a
/// DDL that committed while this one waited for its lock (issue 36 item 12). The flag is
/// reset however `f` ends.
pub fn with_latest_snapshot<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            LATEST.with(|l| l.set(self.0));
        }
    }
    let _reset = Reset(LATEST.with(|l| l.replace(true)));
    f()
}

/// Runs the read-only query `sql` with `args` and maps each row with `f`.
pub fn rows<T>(
    sql: &str,
    args: &[DatumWithOid<'_>],
    mut f: impl FnMut(&SpiHeapTupleData<'_>) -> SpiResult<T>,
) -> Vec<T> {
    if LATEST.with(Cell::get) {
        return latest_rows(sql, args, None, f);
    }
    with_locked_search_path(|| {
        Spi::connect(|c| {
            let mut out = Vec::new();
            for row in c.select(sql, None, args)? {
                out.push(f(&row)?);
            }
            Ok::<_, pgrx::spi::SpiError>(out)
        })
    })
    .unwrap_or_else(|e| errors::catalog_query(&e))
}

/// The first column of the first row of the read-only query `sql` (`None`: no row, or NULL).
pub fn one<T: FromDatum + IntoDatum>(sql: &str, args: &[DatumWithOid<'_>]) -> Option<T> {
    if LATEST.with(Cell::get) {
        return latest_rows(sql, args, Some(1), |row| row.get::<T>(1))
            .into_iter()
            .next()
            .flatten();
    }
    with_locked_search_path(|| {
        Spi::connect(|c| {
            let mut rows = c.select(sql, Some(1), args)?;
            match rows.next() {
                Some(row) => row.get::<T>(1),
                None => Ok(None),
            }
        })
    })
    .unwrap_or_else(|e| errors::catalog_query(&e))
}

/// [`rows`] under a snapshot taken now: the query prepared and run by
/// `SPI_execute_snapshot`, read-only, at most `limit` rows.
fn latest_rows<T>(
    sql: &str,
    args: &[DatumWithOid<'_>],
    limit: Option<i64>,
    mut f: impl FnMut(&SpiHeapTupleData<'_>) -> SpiResult<T>,
) -> Vec<T> {
    let text = CString::new(sql)
        .unwrap_or_else(|_| errors::catalog_query(&SpiError::SpiError(SpiErrorCodes::Argument)));
    let mut types: Vec<pg_sys::Oid> = args.iter().map(DatumWithOid::oid).collect();
    let mut values: Vec<pg_sys::Datum> = args
        .iter()
        .map(|a| {
            a.datum()
                .map_or(pg_sys::Datum::from(0), |d| d.sans_lifetime())
        })
        .collect();
    let nulls: Vec<c_char> = args
        .iter()
        .map(|a| if a.datum().is_some() { b' ' } else { b'n' } as c_char)
        .collect();
    with_locked_search_path(|| {
        Spi::connect(|_| {
            // SAFETY: SPI is connected for this scope. The plan is prepared for `types`, one
            // per value in `values` and `nulls`; it lives in the SPI procedure's memory and is
            // freed here. The snapshot is copied by SPI when pushed; the command counter is
            // advanced first so that it sees this transaction's own DDL. The tuple table and
            // its tuples are SPI's, valid until the connection ends, after `f` has read them.
            unsafe {
                let plan =
                    pg_sys::SPI_prepare(text.as_ptr(), types.len() as i32, types.as_mut_ptr());
                if plan.is_null() {
                    return Err(SpiError::SpiError(SpiErrorCodes::Argument));
                }
                pg_sys::CommandCounterIncrement();
                let status = pg_sys::SPI_execute_snapshot(
                    plan,
                    values.as_mut_ptr(),
                    nulls.as_ptr(),
                    pg_sys::GetLatestSnapshot(),
                    std::ptr::null_mut(),
                    true,
                    false,
                    limit.unwrap_or(0),
                );
                if status != pg_sys::SPI_OK_SELECT as i32 {
                    pg_sys::SPI_freeplan(plan);
                    return Err(SpiError::SpiError(
                        SpiErrorCodes::try_from(status).unwrap_or(SpiErrorCodes::OpUnknown),
                    ));
                }
                let mut out = Vec::new();
                let table = pg_sys::SPI_tuptable;
                if !table.is_null() {
                    for i in 0..pg_sys::SPI_processed as usize {
                        let tuple = *(*table).vals.add(i);
                        if let Some(row) = SpiHeapTupleData::new((*table).tupdesc, tuple)? {
                            out.push(f(&row)?);
                        }
                    }
                }
                pg_sys::SPI_freeplan(plan);
                Ok(out)
            }
        })
    })
    .unwrap_or_else(|e: SpiError| errors::catalog_query(&e))
}

/// Runs the statement `sql` (DML) with `args`; returns how many rows it processed.
pub fn rows_mut(sql: &str, args: &[DatumWithOid<'_>]) -> usize {
    with_locked_search_path(|| Spi::connect_mut(|c| c.update(sql, None, args).map(|t| t.len())))
        .unwrap_or_else(|e| errors::catalog_query(&e))
}

/// Runs the statement `sql` (which may modify data: a data-modifying `WITH`) with `args`
/// and maps each row it returns with `f`.
pub fn rows_mut_map<T>(
    sql: &str,
    args: &[DatumWithOid<'_>],
    mut f: impl FnMut(&SpiHeapTupleData<'_>) -> SpiResult<T>,
) -> Vec<T> {
    with_locked_search_path(|| {
        Spi::connect_mut(|c| {
            let mut out = Vec::new();
            for row in c.update(sql, None, args)? {
                out.push(f(&row)?);
            }
            Ok::<_, pgrx::spi::SpiError>(out)
        })
    })
    .unwrap_or_else(|e| errors::catalog_query(&e))
}

/// The most statements [`rows_mut_map_kept`] keeps plans of in one backend (all are freed
/// when one more comes).
const KEPT_STATEMENTS: usize = 256;

thread_local! {
    /// The plans [`rows_mut_map_kept`] keeps, by statement text and parameter types.
    static KEPT: RefCell<HashMap<String, Rc<OwnedPreparedStatement>>> =
        RefCell::new(HashMap::new());
}

/// [`rows_mut_map`], the statement prepared once per backend and its plan kept: for the
/// statements a backend runs again and again (a refresh's, a scheduler's), whose planning is
/// much of their cost when there is little to do. PostgreSQL's plan cache plans again after
/// a DDL of what the statement reads, and under another `search_path`. Whoever executes a
/// plan holds it, so a plan is never freed while it runs.
pub fn rows_mut_map_kept<T>(
    sql: &str,
    args: &[DatumWithOid<'_>],
    mut f: impl FnMut(&SpiHeapTupleData<'_>) -> SpiResult<T>,
) -> Vec<T> {
    let types: Vec<pg_sys::Oid> = args.iter().map(DatumWithOid::oid).collect();
    let key = format!("{types:?}{sql}");
    with_locked_search_path(|| {
        Spi::connect_mut(|c| {
            let kept = KEPT.with(|k| k.borrow().get(&key).cloned());
            let statement = match kept {
                Some(statement) => statement,
                None => {
                    let oids: Vec<PgOid> = types.iter().map(|t| PgOid::from(*t)).collect();
                    let statement = Rc::new(c.prepare_mut(sql, &oids)?.keep());
                    KEPT.with(|k| {
                        let mut k = k.borrow_mut();
                        if k.len() >= KEPT_STATEMENTS {
                            k.clear();
                        }
                        k.insert(key.clone(), statement.clone());
                    });
                    statement
                }
            };
            let mut out = Vec::new();
            for row in c.update(&*statement, None, args)? {
                out.push(f(&row)?);
            }
            Ok::<_, pgrx::spi::SpiError>(out)
        })
    })
    .unwrap_or_else(|e| errors::catalog_query(&e))
}

/// Runs the statement `sql` in a statement trigger's call, with the trigger's transition
/// tables visible to it by the names its `REFERENCING` clause gave them.
///
/// # Safety
/// `trigger_data` must be the `TriggerData` of the trigger call this runs in.
pub unsafe fn run_with_transition_tables(sql: &str, trigger_data: *mut pg_sys::TriggerData) {
    with_locked_search_path(|| {
        Spi::connect_mut(|c| {
            // SAFETY: guaranteed by the caller; SPI is connected for this scope.
            let rc = unsafe { pg_sys::SPI_register_trigger_data(trigger_data) };
            if rc < 0 {
                return Err(SpiError::SpiError(SpiErrorCodes::Argument));
            }
            c.update(sql, None, &[]).map(|_| ())
        })
    })
    .unwrap_or_else(|e| errors::catalog_query(&e));
}

/// Runs the statement `sql` (DML with `RETURNING`) with `args`; returns the first column of
/// its first row.
pub fn one_mut<T: FromDatum + IntoDatum>(sql: &str, args: &[DatumWithOid<'_>]) -> Option<T> {
    with_locked_search_path(|| {
        Spi::connect_mut(|c| {
            let mut rows = c.update(sql, None, args)?;
            match rows.next() {
                Some(row) => row.get::<T>(1),
                None => Ok(None),
            }
        })
    })
    .unwrap_or_else(|e| errors::catalog_query(&e))
}

/// Runs the statement `sql` (DDL or DML) with `args`.
pub fn run(sql: &str, args: &[DatumWithOid<'_>]) {
    with_locked_search_path(|| Spi::run_with_args(sql, args))
        .unwrap_or_else(|e| errors::catalog_query(&e));
}

/// A plan prepared with [`prepare_kept`] and kept beyond its SPI connection, freed when
/// dropped. Whoever executes it holds it (an `Rc` clone where it is shared), so a plan is
/// never freed while it runs: code the execution runs can enter the same caller again, find
/// its cache stale and drop the cache's reference (issue 36 item 1: the plan was freed under
/// the execution that was still using it).
pub struct KeptPlan(pg_sys::SPIPlanPtr);

impl KeptPlan {
    /// Executes the plan with `values` and `nulls` (`'n'` for NULL, `' '` otherwise, one per
    /// parameter); returns SPI's result code.
    ///
    /// # Safety
    /// `values` must be of the plan's parameter types, one per parameter.
    pub unsafe fn execute(&self, values: &mut [pg_sys::Datum], nulls: &[std::ffi::c_char]) -> i32 {
        with_locked_search_path(|| {
            Spi::connect_mut(|_| {
                // SAFETY: a kept plan of this backend, alive while `self` is; its parameter
                // count is `values.len()` (and `nulls.len()`); SPI is connected for this
                // scope.
                unsafe {
                    pg_sys::SPI_execute_plan(self.0, values.as_mut_ptr(), nulls.as_ptr(), false, 0)
                }
            })
        })
    }
}

impl Drop for KeptPlan {
    fn drop(&mut self) {
        // SAFETY: the kept plan this value owns, freed once, by its last owner (nothing that
        // executes it can be running: an execution holds the value).
        unsafe { pg_sys::SPI_freeplan(self.0) };
    }
}

/// Prepares `sql` with parameters of `types` as a kept plan (outliving the SPI connection);
/// `None` when it cannot be prepared or kept.
pub fn prepare_kept(sql: &std::ffi::CStr, types: &[pg_sys::Oid]) -> Option<KeptPlan> {
    let mut types = types.to_vec();
    with_locked_search_path(|| {
        Spi::connect(|_| {
            // SAFETY: SPI is connected for this scope; the plan is moved out of the SPI
            // procedure's memory by SPI_keepplan, so it outlives the connection.
            unsafe {
                let plan =
                    pg_sys::SPI_prepare(sql.as_ptr(), types.len() as i32, types.as_mut_ptr());
                (!plan.is_null() && pg_sys::SPI_keepplan(plan) == 0).then_some(KeptPlan(plan))
            }
        })
    })
}

#[cfg(test)]
mod tests {
    /// Every module's source, but this one and the tests: no statement may bypass [`super`].
    const SOURCES: [(&str, &str); 26] = [
        ("access.rs", include_str!("access.rs")),
        ("args.rs", include_str!("args.rs")),
        ("bench.rs", include_str!("bench.rs")),
        ("binding.rs", include_str!("binding.rs")),
        ("call_site.rs", include_str!("call_site.rs")),
        ("capture.rs", include_str!("capture.rs")),
        ("catalog.rs", include_str!("catalog.rs")),
        ("datum.rs", include_str!("datum.rs")),
        ("domain_arg.rs", include_str!("domain_arg.rs")),
        ("errors.rs", include_str!("errors.rs")),
        ("fields.rs", include_str!("fields.rs")),
        ("guard.rs", include_str!("guard.rs")),
        ("identity_messages.rs", include_str!("identity_messages.rs")),
        (
            "immediate_statements.rs",
            include_str!("immediate_statements.rs"),
        ),
        ("lib.rs", include_str!("lib.rs")),
        ("locks.rs", include_str!("locks.rs")),
        ("panic_hook.rs", include_str!("panic_hook.rs")),
        ("privacy.rs", include_str!("privacy.rs")),
        ("reader.rs", include_str!("reader.rs")),
        ("redefinition.rs", include_str!("redefinition.rs")),
        ("scheduler.rs", include_str!("scheduler.rs")),
        ("sealed.rs", include_str!("sealed.rs")),
        ("stream_graph.rs", include_str!("stream_graph.rs")),
        ("stream_publish.rs", include_str!("stream_publish.rs")),
        ("stream_rebuild.rs", include_str!("stream_rebuild.rs")),
        ("validate.rs", include_str!("validate.rs")),
    ];

    #[test]
    fn every_statement_runs_through_the_locked_path() {
        for (name, text) in SOURCES {
            let body = text
                .split("#[cfg(any(test, feature = \"pg_test\"))]")
                .next();
            let body = body.unwrap_or(text);
            for needle in ["Spi::", "SPI_execute", "SPI_prepare", "SPI_exec("] {
                assert!(
                    !body.contains(needle),
                    "{name} calls {needle} outside crate::spi"
                );
            }
        }
    }
}
