//! Stream tables (spec/stream-tables.md): `create_stream_table`, `alter_stream_table`,
//! `refresh_stream_table`, `drop_stream_table` and their catalog `pgtrickle.pgt_stream_tables`.
//!
//! The query is read by [`crate::stream_query`] into `rowid-ivm`'s operator tree; the
//! identity, its checks and the statement that computes the rows come from `rowid-ivm` and
//! `rowid-registry`. This module creates the storage, keeps the catalog and runs the refresh:
//! as the stream table's owner in a security-restricted operation, with `search_path` locked
//! and the settings that decide how values print and compute pinned to those recorded at
//! create (every name in the stored statement is qualified).
//!
//! FULL refresh only, today: DIFFERENTIAL and IMMEDIATE are refused by name until their
//! frontier and delta rules land (issue 34).

use std::time::Instant;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rowid_codec::probe::PROBE_V1_PREFIX_LEN;
use rowid_ivm::identity::{self, Field, Identity};
use rowid_ivm::sql::full_query;
use rowid_registry::sql::{QualifiedName, index_ddl, quote_ident};
use rowid_registry::{
    IndexClass, IndexPlan, MaintenanceMode, Uniqueness, plan_for_bound, resolve_field,
};

use crate::catalog::server_context;
use crate::guard::{as_owner, with_pinned_settings as with_pinned};
use crate::stream_query::{ReadQuery, read};
use crate::{errors, spi};

const CREATE: &str = "pgtrickle.create_stream_table";
const ALTER: &str = "pgtrickle.alter_stream_table";
const REFRESH: &str = "pgtrickle.refresh_stream_table";
const DROP: &str = "pgtrickle.drop_stream_table";

/// The first key of the advisory lock that serialises the refreshes of one stream table
/// (the second is its OID): "pgt" in ASCII.
const REFRESH_LOCK_CLASS: i32 = 0x0070_6774;

/// The refresh modes, as the catalog spells them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Full,
}

fn mode(function: &str, text: &str) -> Mode {
    match text.to_ascii_uppercase().as_str() {
        "FULL" => Mode::Full,
        "DIFFERENTIAL" | "IMMEDIATE" | "AUTO" => errors::refused(
            function,
            "0A000",
            &format!(
                "refresh_mode {} is not available yet: this version refreshes stream tables \
                 FULL only (refresh_mode => 'FULL')",
                text.to_ascii_uppercase()
            ),
        ),
        _ => errors::invalid_argument(
            function,
            format!("refresh_mode must be FULL, DIFFERENTIAL or IMMEDIATE, not {text:?}"),
        ),
    }
}

/// What creating needs, every check passed, before any state exists.
struct Definition {
    read: ReadQuery,
    identity: Identity,
    plan: IndexPlan,
    sql: String,
}

/// Reads `query` and checks everything a stream table of it needs: the operators, every
/// value its identity holds (the registry's contract: errors name the expression, its type
/// and the property), the output names, and the index plan.
fn define(function: &'static str, query: &str, time_zone: &str) -> Definition {
    let read = read(function, query, time_zone);
    let outputs = read.plan.outputs();
    for (i, o) in outputs.iter().enumerate() {
        if outputs[..i].iter().any(|p| p.name == o.name) {
            errors::invalid_argument(
                function,
                format!(
                    "two output columns are named {}: give each its own name",
                    quote_ident(&o.name)
                ),
            );
        }
    }
    let identity = identity::identity(&read.plan);
    let ctx = server_context();
    let value_len = |e: &rowid_ivm::plan::Expr| -> Option<usize> {
        let spec = read.fields.get(&(e.sql.clone(), e.sql_type.clone()))?;
        match resolve_field(spec, &ctx) {
            Ok(r) => r.max_encoded_len,
            Err(r) => errors::rejected(function, &r),
        }
    };
    check_values(function, &identity, &read);
    let bound = identity::max_len(&identity, &value_len);
    let uniqueness = if identity.unique {
        Uniqueness::Unique
    } else {
        Uniqueness::Multiset
    };
    let plan = plan_for_bound(
        bound,
        uniqueness,
        MaintenanceMode::Refresh,
        ctx.block_size,
        PROBE_V1_PREFIX_LEN,
    )
    .unwrap_or_else(|r| errors::rejected(function, &r));
    let sql = full_query(&read.plan)
        .unwrap_or_else(|e| errors::invalid_argument(function, e.to_string()));
    Definition {
        read,
        identity,
        plan,
        sql,
    }
}

/// Every value field of `identity` (children included) passes the registry's contract.
fn check_values(function: &str, identity: &Identity, read: &ReadQuery) {
    let ctx = server_context();
    for f in &identity.fields {
        match f {
            Field::Value(e) => {
                let Some(spec) = read.fields.get(&(e.sql.clone(), e.sql_type.clone())) else {
                    errors::invalid_argument(
                        function,
                        format!("the identity field {} has no type facts", e.sql),
                    );
                };
                if let Err(r) = resolve_field(spec, &ctx) {
                    errors::rejected(function, &r);
                }
            }
            Field::Child(c) => check_values(function, c, read),
            Field::Branch(_) | Field::Discriminator(_) => {}
        }
    }
}

fn class_name(class: IndexClass) -> &'static str {
    match class {
        IndexClass::DirectUnique => "direct_unique",
        IndexClass::DirectNonUnique => "direct_non_unique",
        IndexClass::ProbeExpression => "probe_expression",
    }
}

/// `name` as schema and relation: qualified as given, else in the current schema.
fn target_name(function: &str, name: &str) -> QualifiedName {
    let parts: Option<Vec<String>> = spi::one(
        "SELECT pg_catalog.parse_ident($1)",
        &[DatumWithOid::from(name)],
    );
    match parts.as_deref() {
        Some([rel]) => {
            // The schema an unqualified CREATE TABLE of the caller would use (its
            // search_path, not the locked one the extension's own statements run with).
            let Ok(relname) = std::ffi::CString::new(rel.as_str()) else {
                errors::invalid_argument(function, format!("{name:?} contains a NUL byte"));
            };
            // SAFETY: a RangeVar of a NUL-terminated name in the current memory context;
            // PostgreSQL raises its own error when no schema can be created in.
            let schema = unsafe {
                let rv =
                    pg_sys::makeRangeVar(std::ptr::null_mut(), relname.as_ptr().cast_mut(), -1);
                let ns = pg_sys::RangeVarGetCreationNamespace(rv);
                std::ffi::CStr::from_ptr(pg_sys::get_namespace_name(ns))
                    .to_string_lossy()
                    .into_owned()
            };
            QualifiedName::new(&schema, rel)
        }
        Some([schema, rel]) => QualifiedName::new(schema, rel),
        _ => errors::invalid_argument(
            function,
            format!("{name:?} is not a table name (name or schema.name)"),
        ),
    }
}

fn current_time_zone() -> String {
    spi::one::<String>("SELECT pg_catalog.current_setting('TimeZone')", &[])
        .unwrap_or_else(|| "UTC".into())
}

/// `pgtrickle.create_stream_table`: checks everything, then creates the storage (owned by
/// the caller), its identity index and the catalog row, and fills it unless `initialize` is
/// false.
pub fn create(
    name: &str,
    query: &str,
    schedule: Option<&str>,
    refresh_mode: &str,
    initialize: bool,
) {
    let mode = mode(CREATE, refresh_mode);
    let time_zone = current_time_zone();
    let def = define(CREATE, query, &time_zone);
    let target = target_name(CREATE, name);
    create_storage(&target, &def, &time_zone);
    let relid = storage_oid(CREATE, &target.quoted());
    let sources: Vec<pg_sys::Oid> = def.read.sources.clone();
    let domain = def.identity.domain.name();
    as_owner(crate::catalog::extension_owner(), || {
        spi::run(
            "INSERT INTO pgtrickle.pgt_stream_tables (pgt_relid, pgt_name, defining_query, \
               schedule, refresh_mode, status, identity_domain, identity_unique, index_class, \
               max_identity_bytes, row_identity_version, row_probe_version, sources, \
               refresh_sql, time_zone) \
             VALUES ($1, $2, $3, $4, $5, 'INITIALIZING', $6, $7, $8, $9, 2, 1, $10, $11, $12)",
            &[
                DatumWithOid::from(relid),
                DatumWithOid::from(target.quoted().as_str()),
                DatumWithOid::from(query),
                DatumWithOid::from(schedule),
                DatumWithOid::from(match mode {
                    Mode::Full => "FULL",
                }),
                DatumWithOid::from(domain),
                DatumWithOid::from(def.identity.unique),
                DatumWithOid::from(class_name(def.plan.class)),
                DatumWithOid::from(def.plan.max_identity_len.map(|b| b as i32)),
                DatumWithOid::from(sources),
                DatumWithOid::from(def.sql.as_str()),
                DatumWithOid::from(time_zone.as_str()),
            ],
        );
    });
    if initialize {
        refresh_relid(REFRESH, relid);
    }
}

/// The storage: `__pgt_row_id bytea NOT NULL`, then the query's columns with the types,
/// typmods and collations the server gives them, and the identity index of the plan.
fn create_storage(target: &QualifiedName, def: &Definition, time_zone: &str) {
    with_pinned(time_zone, || {
        spi::run(
            &format!(
                "CREATE TABLE {} AS SELECT * FROM ({}) AS q WITH NO DATA",
                target.quoted(),
                def.sql
            ),
            &[],
        );
        spi::run(
            &format!(
                "ALTER TABLE {} ALTER COLUMN {} SET NOT NULL",
                target.quoted(),
                quote_ident(rowid_ivm::sql::ROW_ID)
            ),
            &[],
        );
        spi::run(
            &index_ddl(def.plan.class, &format!("{}_row_id", target.name), target),
            &[],
        );
    });
}

fn storage_oid(function: &str, quoted: &str) -> pg_sys::Oid {
    spi::one::<pg_sys::Oid>(
        "SELECT pg_catalog.to_regclass($1)::pg_catalog.oid",
        &[DatumWithOid::from(quoted)],
    )
    .unwrap_or_else(|| errors::invalid_argument(function, format!("no table {quoted}")))
}

/// The stream table named `name`: its storage OID, refused unless it is one.
fn stream_table(function: &str, name: &str) -> pg_sys::Oid {
    // Resolved as the caller's own statement would resolve it: with its search_path.
    let text = name.into_datum();
    // SAFETY: a text datum of this call; the name list and RangeVar live in the current
    // memory context; a missing relation gives InvalidOid.
    let relid = unsafe {
        let Some(text) = text else {
            errors::null_argument(function, "name is NULL");
        };
        let names = pg_sys::textToQualifiedNameList(text.cast_mut_ptr());
        let rv = pg_sys::makeRangeVarFromNameList(names);
        pg_sys::RangeVarGetRelidExtended(
            rv,
            pg_sys::NoLock as pg_sys::LOCKMODE,
            pg_sys::RVROption::RVR_MISSING_OK,
            None,
            std::ptr::null_mut(),
        )
    };
    if relid == pg_sys::InvalidOid {
        errors::invalid_argument(function, format!("no table {name:?}"));
    }
    let known: Option<bool> = spi::one(
        "SELECT true FROM pgtrickle.pgt_stream_tables WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
        &[DatumWithOid::from(relid)],
    );
    if known.is_none() {
        errors::invalid_argument(function, format!("{name:?} is not a stream table"));
    }
    relid
}

/// Refuses unless the caller may act as the stream table's owner (as for `REFRESH
/// MATERIALIZED VIEW` and `DROP TABLE`); returns the owner.
fn owner_checked(function: &str, relid: pg_sys::Oid) -> pg_sys::Oid {
    let owner = crate::catalog::relation_owner(relid);
    let may: Option<bool> = spi::one(
        "SELECT pg_catalog.pg_has_role($1, 'USAGE')",
        &[DatumWithOid::from(owner)],
    );
    if may != Some(true) {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "{function}: only the owner of {} (or a member of its role) may do this",
                crate::catalog::relation_name(relid)
            )
        );
    }
    owner
}

/// `pgtrickle.refresh_stream_table`.
pub fn refresh(name: &str) {
    let relid = stream_table(REFRESH, name);
    refresh_relid(REFRESH, relid);
}

/// Refreshes the stream table `relid` (FULL): serialised with every other refresh of it,
/// its recorded versions checked before anything changes, its rows replaced by the query's
/// as its owner.
fn refresh_relid(function: &str, relid: pg_sys::Oid) {
    let owner = owner_checked(function, relid);
    spi::run(
        "SELECT pg_catalog.pg_advisory_xact_lock($1, $2)",
        &[
            DatumWithOid::from(REFRESH_LOCK_CLASS),
            DatumWithOid::from(u32::from(relid) as i32),
        ],
    );
    let row: Option<(String, String, i16, i16)> = spi::rows(
        "SELECT refresh_sql, time_zone, row_identity_version, row_probe_version \
         FROM pgtrickle.pgt_stream_tables WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
        &[DatumWithOid::from(relid)],
        |r| {
            Ok((
                r.get::<String>(1)?.unwrap_or_default(),
                r.get::<String>(2)?.unwrap_or_default(),
                r.get::<i16>(3)?.unwrap_or(0),
                r.get::<i16>(4)?.unwrap_or(0),
            ))
        },
    )
    .pop();
    let Some((sql, time_zone, identity_version, probe_version)) = row else {
        errors::invalid_argument(function, "the stream table is gone".into());
    };
    if identity_version != 2 || probe_version != 1 {
        errors::invalid_buffer(
            function,
            &format!(
                "{} records row identity version {identity_version} and probe version \
                 {probe_version}; this library writes 2 and 1: rebuild it \
                 (drop_stream_table, create_stream_table)",
                crate::catalog::relation_name(relid)
            ),
        );
    }
    let table = crate::catalog::relation_name(relid);
    let started = Instant::now();
    let changed = as_owner(owner, || {
        with_pinned(&time_zone, || {
            let deleted = spi::rows_mut(&format!("DELETE FROM {table}"), &[]);
            let inserted = spi::rows_mut(
                &format!("INSERT INTO {table} SELECT * FROM ({sql}) AS q"),
                &[],
            );
            deleted + inserted
        })
    });
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    as_owner(crate::catalog::extension_owner(), || {
        spi::run(
            "UPDATE pgtrickle.pgt_stream_tables SET status = 'ACTIVE', \
               last_refresh_at = pg_catalog.now(), last_refresh_ms = $2, rows_changed = $3 \
             WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[
                DatumWithOid::from(relid),
                DatumWithOid::from(ms),
                DatumWithOid::from(changed as i64),
            ],
        );
    });
}

/// `pgtrickle.drop_stream_table`: the storage and the catalog row.
pub fn drop(name: &str) {
    let relid = stream_table(DROP, name);
    owner_checked(DROP, relid);
    let table = crate::catalog::relation_name(relid);
    spi::run(&format!("DROP TABLE {table}"), &[]);
    as_owner(crate::catalog::extension_owner(), || {
        spi::run(
            "DELETE FROM pgtrickle.pgt_stream_tables WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[DatumWithOid::from(relid)],
        );
    });
}

/// `pgtrickle.alter_stream_table`: a new query and/or mode, checked completely before the
/// old storage is replaced (in the caller's transaction: readers wait for its commit).
pub fn alter(name: &str, query: Option<&str>, refresh_mode: Option<&str>) {
    let relid = stream_table(ALTER, name);
    owner_checked(ALTER, relid);
    let current: Option<(String, String, Option<String>)> = spi::rows(
        "SELECT defining_query, refresh_mode, schedule FROM pgtrickle.pgt_stream_tables \
         WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
        &[DatumWithOid::from(relid)],
        |r| {
            Ok((
                r.get::<String>(1)?.unwrap_or_default(),
                r.get::<String>(2)?.unwrap_or_default(),
                r.get::<String>(3)?,
            ))
        },
    )
    .pop();
    let Some((old_query, old_mode, schedule)) = current else {
        errors::invalid_argument(ALTER, format!("{name:?} is not a stream table"));
    };
    let query = query.unwrap_or(&old_query).to_string();
    let refresh_mode = refresh_mode.unwrap_or(&old_mode).to_string();
    mode(ALTER, &refresh_mode);
    let time_zone = current_time_zone();
    // Everything checked before anything is dropped.
    define(ALTER, &query, &time_zone);
    let table = crate::catalog::relation_name(relid);
    drop(&table);
    create(&table, &query, schedule.as_deref(), &refresh_mode, true);
}
