//! What a stream table's maintenance may read: what its owner's own query may (spec
//! stream-tables.md §10.6, issue 47 requirement 6).
//!
//! A FULL refresh runs the query as the owner, so PostgreSQL checks SELECT on every column it
//! reads and applies the sources' row-level security policies (`FORCE ROW LEVEL SECURITY`
//! included: the refresh runs without the `SECURITY_NOFORCE_RLS` exemption). DIFFERENTIAL
//! reads change buffers and IMMEDIATE reads transition tables: neither is checked, and
//! neither applies a policy. So every mode is held to what FULL requires:
//!
//! - **At create** ([`check_readable`]): the query's own permission check, run as the creator
//!   before anything exists (also with `initialize => false`); and for DIFFERENTIAL and
//!   IMMEDIATE a source whose row-level security applies to the owner is refused by name
//!   ([`refuse_row_security`]): their delta rules cannot apply the policies.
//! - **At every maintenance**: IMMEDIATE checks, per statement, that the owner may still read
//!   the columns it reads of the source written ([`check_columns`], syscache lookups); a
//!   source whose row-level security came to apply to the owner after create
//!   ([`row_security_applies`]) is recomputed by the fill statement, which applies the
//!   policies, in both modes.

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::{errors, spi};

/// Runs the permission check PostgreSQL makes for the statement `sql` (a stream table's
/// query as its storage statement computes it) as the current user, without reading a row:
/// an error names the table or column the user may not read.
pub fn check_readable(sql: &str) {
    spi::rows(
        &format!("SELECT FROM ({sql}) AS pgt_privilege_check LIMIT 0"),
        &[],
        |_| Ok(()),
    );
}

/// Whether row-level security applies to `role` reading `source` (its policies would filter
/// what `role` reads: enabled and `role` not its owner, or forced, and `role` without
/// BYPASSRLS).
pub fn row_security_applies(source: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    // SAFETY: a catalog check of a relation and a role by OID; `true`: no error is raised.
    let result = unsafe { pg_sys::check_enable_rls(source, role, true) };
    result == pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32
}

/// Refuses a DIFFERENTIAL or IMMEDIATE stream table (`mode`) over a source whose row-level
/// security applies to `owner`, naming it.
pub fn refuse_row_security(
    function: &str,
    mode: &str,
    sources: &[pg_sys::Oid],
    owner: pg_sys::Oid,
) {
    if let Some(source) = sources.iter().find(|s| row_security_applies(**s, owner)) {
        errors::refused(
            function,
            "0A000",
            &format!(
                "{} has row-level security that applies to {}: {mode} maintenance reads its \
                 changed rows without the policies; use refresh_mode => 'FULL', which applies \
                 them",
                crate::catalog::relation_name(*source),
                crate::catalog::role_name(owner)
            ),
        );
    }
}

/// Refuses IMMEDIATE maintenance of `stream_table` when `owner` may no longer read one of the
/// columns `columns` (attribute numbers; 0: every column) of `source`.
pub fn check_columns(stream_table: &str, source: pg_sys::Oid, owner: pg_sys::Oid, columns: &[i16]) {
    let select = pg_sys::ACL_SELECT as pg_sys::AclMode;
    // SAFETY: ACL checks of a relation and its columns for a role by OID (syscache lookups).
    let allowed = unsafe {
        pg_sys::pg_class_aclcheck(source, owner, select) == pg_sys::AclResult::ACLCHECK_OK
            || columns.iter().all(|&attnum| {
                if attnum == 0 {
                    pg_sys::pg_attribute_aclcheck_all(
                        source,
                        owner,
                        select,
                        pg_sys::AclMaskHow::ACLMASK_ALL,
                    ) == pg_sys::AclResult::ACLCHECK_OK
                } else {
                    pg_sys::pg_attribute_aclcheck(source, attnum, owner, select)
                        == pg_sys::AclResult::ACLCHECK_OK
                }
            })
    };
    if !allowed {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "IMMEDIATE maintenance of {stream_table} reads {} as {}, who may no longer read \
                 it (what its query reads of it needs SELECT)",
                crate::catalog::relation_name(source),
                crate::catalog::role_name(owner)
            )
        );
    }
}
