//! A stream table's identities are private by default (spec/stream-tables.md §10.4, proposal
//! §11.1, issue 47 requirement 4).
//!
//! `__pgt_row_id` holds the source key's values in reversible form (an SSN the reader may
//! not read in the source), so the ways to give a role a stream table's rows must not give
//! it the identities. PostgreSQL has no column a table grant leaves out, so a table-level
//! `SELECT` on a stream table's storage granted to any role but its owner is turned into
//! `SELECT` on every other column, by the same grantor, with the same grant option:
//!
//! - at create, for what default privileges (`ALTER DEFAULT PRIVILEGES ... GRANT SELECT ON
//!   TABLES`) gave the new storage;
//! - after every `GRANT` (`GRANT SELECT ON st`, `GRANT ... ON ALL TABLES IN SCHEMA`), by the
//!   extension's `ddl_command_end` event trigger on `GRANT`.
//!
//! Reading the identities takes an explicit column grant (`GRANT SELECT (__pgt_row_id) ON st
//! TO r`), membership in the owner's role, or a role that reads everything
//! (`pg_read_all_data`, a superuser). A role given the rows names the columns it reads
//! (`SELECT *` names `__pgt_row_id` too, which it may not read).

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rowid_ivm::sql::ROW_ID;
use rowid_registry::sql::quote_ident;

use crate::guard::as_owner;
use crate::spi;

/// A table-level `SELECT` on a storage given to a role that is not its owner.
struct TableSelect {
    grantor: pg_sys::Oid,
    /// `None`: PUBLIC.
    grantee: Option<pg_sys::Oid>,
    grantable: bool,
}

/// The first table-level `SELECT` of `relid` given to another role than its owner, those its
/// owner granted first (a grant option another grantor holds comes from one of them).
fn first_table_select(relid: pg_sys::Oid) -> Option<TableSelect> {
    spi::rows(
        "SELECT a.grantor, NULLIF(a.grantee, 0::pg_catalog.oid), a.is_grantable \
         FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a \
         WHERE c.oid OPERATOR(pg_catalog.=) $1 \
           AND a.privilege_type OPERATOR(pg_catalog.=) 'SELECT' \
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner \
         ORDER BY a.grantor OPERATOR(pg_catalog.<>) c.relowner, a.grantor, a.grantee \
         LIMIT 1",
        &[DatumWithOid::from(relid)],
        |r| {
            Ok(TableSelect {
                grantor: r.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid),
                grantee: r.get::<pg_sys::Oid>(2)?,
                grantable: r.get::<bool>(3)?.unwrap_or(false),
            })
        },
    )
    .pop()
}

/// Turns every table-level `SELECT` on the storage `relid` given to another role than its
/// owner into `SELECT` on its columns but `__pgt_row_id` (see the module's doc).
pub fn keep_private(relid: pg_sys::Oid) {
    let table = crate::catalog::relation_name(relid);
    let columns: String = spi::one(
        "SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' \
                                      ORDER BY a.attnum) \
         FROM pg_catalog.pg_attribute a \
         WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.>) 0 \
           AND NOT a.attisdropped AND a.attname OPERATOR(pg_catalog.<>) $2",
        &[DatumWithOid::from(relid), DatumWithOid::from(ROW_ID)],
    )
    .unwrap_or_default();
    // Each pass removes one grant (a REVOKE ... CASCADE may remove those given from it,
    // which its new column grant then lets its grantor give again): at most one pass per
    // grant there was.
    for _ in 0..10_000 {
        let Some(grant) = first_table_select(relid) else {
            return;
        };
        let grantee = match grant.grantee {
            Some(role) => quote_ident(&crate::catalog::role_name(role)),
            None => "PUBLIC".to_string(),
        };
        let option = if grant.grantable {
            " WITH GRANT OPTION"
        } else {
            ""
        };
        // The REVOKE takes the grantee's column grants from this grantor with it: an
        // explicit grant of the identities it had is given again.
        let had_identities: bool = spi::one(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute a, \
                              pg_catalog.aclexplode(a.attacl) x \
               WHERE a.attrelid OPERATOR(pg_catalog.=) $1 \
                 AND a.attname OPERATOR(pg_catalog.=) $2 \
                 AND x.privilege_type OPERATOR(pg_catalog.=) 'SELECT' \
                 AND x.grantor OPERATOR(pg_catalog.=) $3 \
                 AND x.grantee OPERATOR(pg_catalog.=) COALESCE($4, 0::pg_catalog.oid))",
            &[
                DatumWithOid::from(relid),
                DatumWithOid::from(ROW_ID),
                DatumWithOid::from(grant.grantor),
                DatumWithOid::from(grant.grantee),
            ],
        )
        .unwrap_or(false);
        let columns = if had_identities {
            format!("{}, {columns}", quote_ident(ROW_ID))
        } else {
            columns.clone()
        };
        as_owner(grant.grantor, || {
            spi::run(
                &format!("REVOKE SELECT ON TABLE {table} FROM {grantee} CASCADE"),
                &[],
            );
            if !columns.is_empty() {
                spi::run(
                    &format!("GRANT SELECT ({columns}) ON TABLE {table} TO {grantee}{option}"),
                    &[],
                );
            }
        });
    }
}

/// After a `GRANT`: [`keep_private`] for every storage that has a table-level `SELECT` given
/// to another role than its owner.
pub fn keep_all_private() {
    let storages: Vec<pg_sys::Oid> = crate::catalog::as_extension(|| {
        spi::rows(
            "SELECT t.pgt_relid FROM pgtrickle.pgt_stream_tables t \
             JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.pgt_relid \
             WHERE EXISTS (SELECT FROM pg_catalog.aclexplode(c.relacl) a \
               WHERE a.privilege_type OPERATOR(pg_catalog.=) 'SELECT' \
                 AND a.grantee OPERATOR(pg_catalog.<>) c.relowner) \
             ORDER BY 1",
            &[],
            |r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid)),
        )
    });
    for relid in storages {
        keep_private(relid);
    }
}

crate::pg_function_info_v1!(pg_finfo_keep_identities_private);

/// The event trigger function `pgtrickle.keep_identities_private()` (`ddl_command_end`, on
/// `GRANT`): [`keep_all_private`].
///
/// # Safety
/// Called by PostgreSQL's event trigger manager.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn keep_identities_private(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: an event trigger call's context is an EventTriggerData.
    let is_event = unsafe {
        let context = (*fcinfo).context;
        !context.is_null() && (*context).type_ == pg_sys::NodeTag::T_EventTriggerData
    };
    if !is_event {
        crate::errors::invalid_argument(
            "pgtrickle.keep_identities_private",
            "is an event trigger function".into(),
        );
    }
    keep_all_private();
    pg_sys::Datum::from(0)
}
