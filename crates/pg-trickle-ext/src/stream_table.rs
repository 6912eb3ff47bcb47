//! Stream tables (spec/stream-tables.md): `create_stream_table`, `drop_stream_table`, the
//! refresh itself and their catalog `pgtrickle.pgt_stream_tables`. `refresh_stream_table` and
//! `alter_stream_table` enter through [`crate::stream_rebuild`], which rebuilds a stream table
//! as its owner when a refresh here finds its definition stale ([`Refreshed::Stale`]).
//!
//! The query is read by [`crate::stream_query`] into `rowid-ivm`'s operator tree; the
//! identity, its checks and the statement that computes the rows come from `rowid-ivm` and
//! `rowid-registry`. This module creates the storage, keeps the catalog and runs the refresh:
//! as the stream table's owner in a security-restricted operation, with `search_path` locked
//! and the settings that decide how values print and compute pinned to those recorded at
//! create (every name in the stored statement is qualified).
//!
//! FULL and DIFFERENTIAL refresh (the statements of `rowid_ivm::delta`, the frontier in the
//! catalog) and IMMEDIATE maintenance (statement triggers on the sources,
//! [`crate::stream_immediate`]).

use std::time::Instant;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rowid_codec::probe::PROBE_V1_PREFIX_LEN;
use rowid_ivm::delta::{
    SourceBuffer, delta_statement, fill_statement, immediate_statement, storage_query,
};
use rowid_ivm::identity::{self, Field, Identity};
use rowid_registry::sql::{QualifiedName, index_ddl, quote_ident, replica_identity_ddl};
use rowid_registry::{
    IndexClass, IndexPlan, MaintenanceMode, Uniqueness, plan_for_bound, resolve_field,
};

use crate::catalog::server_context;
use crate::guard::{as_owner, with_pinned_settings as with_pinned};
use crate::stream_query::{ReadQuery, read};
use crate::stream_wal::Cdc;
use crate::{errors, spi};

const CREATE: &str = "pgtrickle.create_stream_table";
const REFRESH: &str = "pgtrickle.refresh_stream_table";
const DROP: &str = "pgtrickle.drop_stream_table";

/// The refresh modes, as the catalog spells them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Full,
    Differential,
    Immediate,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Full => "FULL",
            Mode::Differential => "DIFFERENTIAL",
            Mode::Immediate => "IMMEDIATE",
        }
    }
}

fn mode(function: &str, text: &str) -> Mode {
    match text.to_ascii_uppercase().as_str() {
        "FULL" => Mode::Full,
        "DIFFERENTIAL" => Mode::Differential,
        "IMMEDIATE" => Mode::Immediate,
        "AUTO" => errors::refused(
            function,
            "0A000",
            "refresh_mode AUTO is not available yet: choose FULL, DIFFERENTIAL or IMMEDIATE",
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
fn define(function: &'static str, query: &str, time_zone: &str, mode: Mode) -> Definition {
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
    let maintenance = match mode {
        Mode::Immediate => MaintenanceMode::Immediate,
        Mode::Full | Mode::Differential => MaintenanceMode::Refresh,
    };
    let plan = plan_for_bound(
        bound,
        uniqueness,
        maintenance,
        ctx.block_size,
        PROBE_V1_PREFIX_LEN,
    )
    .unwrap_or_else(|r| errors::rejected(function, &r));
    let sql = storage_query(&read.plan)
        .unwrap_or_else(|e| errors::invalid_argument(function, e.to_string()));
    Definition {
        read,
        identity,
        plan,
        sql,
    }
}

/// The sources `query` reads in `refresh_mode`, the query checked as create checks it (under
/// the caller's settings): what a redefinition must know before anything is dropped.
pub fn checked_sources(
    function: &'static str,
    query: &str,
    time_zone: &str,
    refresh_mode: &str,
) -> Vec<pg_sys::Oid> {
    define(function, query, time_zone, mode(function, refresh_mode))
        .read
        .sources
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
            Field::Child(c) | Field::NullableChild { child: c, .. } => {
                check_values(function, c, read)
            }
            // A stored identity: the upstream's values were checked at its create.
            Field::Branch(_) | Field::Discriminator(_) | Field::Stored(_) => {}
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

pub(crate) fn current_time_zone() -> String {
    spi::one::<String>("SELECT pg_catalog.current_setting('TimeZone')", &[])
        .unwrap_or_else(|| "UTC".into())
}

/// The caller's `search_path` (read directly: every statement [`spi`] runs sees the locked
/// one), recorded at create so that a rebuild reads the query as its creator did.
pub(crate) fn caller_search_path() -> String {
    // SAFETY: reads a GUC's current value by its NUL-terminated name; the result is a
    // palloc'd NUL-terminated string (or NULL).
    unsafe {
        let value =
            pg_sys::GetConfigOptionByName(c"search_path".as_ptr(), std::ptr::null_mut(), false);
        if value.is_null() {
            return String::new();
        }
        std::ffi::CStr::from_ptr(value)
            .to_string_lossy()
            .into_owned()
    }
}

/// `pgtrickle.create_stream_table`: checks everything (for DIFFERENTIAL, that every
/// operator has a delta rule), then captures the sources (DIFFERENTIAL), creates the storage
/// (owned by the caller), its identity index and the catalog row, and fills it unless
/// `initialize` is false.
pub fn create(
    name: &str,
    query: &str,
    schedule: Option<&str>,
    refresh_mode: &str,
    initialize: bool,
    cdc_mode: &str,
) {
    let mode = mode(CREATE, refresh_mode);
    let cdc = Cdc::parse(CREATE, cdc_mode);
    if cdc == Cdc::Wal && mode != Mode::Differential {
        errors::refused(
            CREATE,
            "0A000",
            &format!(
                "cdc_mode => 'wal' feeds DIFFERENTIAL refreshes only: {} {}; use cdc_mode => \
                 'trigger'",
                mode.name(),
                if mode == Mode::Immediate {
                    "maintains the stream table inside the writing statement, before any WAL \
                     consumer can see it"
                } else {
                    "reads no change buffer"
                }
            ),
        );
    }
    refuse_fixed_snapshot(name, mode);
    let time_zone = current_time_zone();
    let search_path = caller_search_path();
    let def = define(CREATE, query, &time_zone, mode);
    // Every mode needs what FULL needs of its owner (crate::access), checked before anything
    // exists: SELECT on what the query reads, and policies it can apply.
    with_pinned(&time_zone, || crate::access::check_readable(&def.sql));
    if mode != Mode::Full {
        // SAFETY: reads this backend's current user id.
        let owner = unsafe { pg_sys::GetUserId() };
        crate::access::refuse_row_security(CREATE, mode.name(), &def.read.sources, owner);
        refuse_internal_names(name, mode, &def.read.sources);
        refuse_unmaintainable(name, mode, &def);
    }
    let target = target_name(CREATE, name);
    let storage = target.quoted();
    let plan = &def.read.plan;
    // A stream table read by another is captured by trigger (spec/stream-tables.md §7).
    if cdc == Cdc::Wal
        && let Some(upstream) = def
            .read
            .sources
            .iter()
            .find_map(|&s| crate::stream_graph::upstream(s))
    {
        errors::refused(
            CREATE,
            "0A000",
            &format!(
                "{} is a stream table: a stream table read by another is captured by \
                 trigger; use cdc_mode => 'trigger'",
                upstream.name
            ),
        );
    }
    if mode == Mode::Differential {
        // The delta rule checked before any capture or storage exists.
        let unnamed = source_buffers(&def.read.sources, &|_| String::new());
        if let Err(e) = delta_statement(plan, &storage, def.plan.class, &unnamed) {
            errors::refused(CREATE, "0A000", &format!("{e}: use refresh_mode => 'FULL'"));
        }
    }
    // IMMEDIATE: one statement per source and event, rendered before anything exists.
    let mut immediate = Vec::new();
    if mode == Mode::Immediate {
        for source in unique(&def.read.sources) {
            let relation = crate::catalog::relation_facts(source)
                .map(|f| format!("{}.{}", quote_ident(&f.namespace), quote_ident(&f.relname)))
                .unwrap_or_default();
            let columns: Vec<String> = source_columns(source, true)
                .into_iter()
                .map(|(name, _)| name)
                .collect();
            for (event, new, old) in [
                ("i", Some("__pgt_new"), None),
                ("u", Some("__pgt_new"), Some("__pgt_old")),
                ("d", None, Some("__pgt_old")),
            ] {
                match immediate_statement(
                    plan,
                    &storage,
                    def.plan.class,
                    &relation,
                    &columns,
                    new,
                    old,
                ) {
                    Ok(sql) => immediate.push((source, event, sql)),
                    Err(e) => errors::refused(
                        CREATE,
                        "0A000",
                        &format!(
                            "{}: IMMEDIATE maintenance has the delta rules of DIFFERENTIAL; \
                             use refresh_mode => 'FULL'",
                            e.to_string()
                                .replace("DIFFERENTIAL refresh", "IMMEDIATE maintenance")
                        ),
                    ),
                }
            }
        }
    }
    let buffers = match mode {
        Mode::Full | Mode::Immediate => Vec::new(),
        Mode::Differential => source_buffers(&def.read.sources, &|source| match cdc {
            Cdc::Trigger => crate::capture::capture_table(source),
            Cdc::Wal => crate::stream_wal::buffer(CREATE, source),
        }),
    };
    if cdc == Cdc::Wal {
        // Once, for every buffer: after them, so that a missing buffer is what is named.
        crate::stream_wal::slot(CREATE);
    }
    let fill = fill_statement(plan, &storage, &buffers)
        .unwrap_or_else(|e| errors::invalid_argument(CREATE, e.to_string()));
    let delta = match mode {
        Mode::Full | Mode::Immediate => None,
        Mode::Differential => Some(
            delta_statement(plan, &storage, def.plan.class, &buffers)
                .unwrap_or_else(|e| errors::invalid_argument(CREATE, e.to_string())),
        ),
    };
    create_storage(&target, &def, &time_zone);
    let relid = storage_oid(CREATE, &storage);
    // What default privileges gave the new storage gives no role its identities.
    crate::privacy::keep_private(relid);
    let sources: Vec<pg_sys::Oid> = def.read.sources.clone();
    let domain = def.identity.domain.name();
    let bound_functions = crate::binding::sorted(&def.read.bound.functions);
    let bound_operators = crate::binding::sorted(&def.read.bound.operators);
    let shape = crate::catalog::source_shape(relid, &def.read.sources, &bound_functions);
    // As a view's rule: a function or operator the query calls cannot be dropped under it.
    crate::binding::record_dependencies(relid, &def.read.bound);
    as_owner(crate::catalog::extension_owner(), || {
        spi::run(
            "INSERT INTO pgtrickle.pgt_stream_tables (pgt_relid, pgt_name, defining_query, \
               schedule, refresh_mode, status, identity_domain, identity_unique, index_class, \
               max_identity_bytes, row_identity_version, row_probe_version, sources, \
               refresh_sql, time_zone, fill_sql, delta_sql, search_path, source_shape, \
               cdc_mode, bound_functions, bound_operators) \
             VALUES ($1, $2, $3, $4, $5, 'INITIALIZING', $6, $7, $8, $9, 2, 1, $10, $11, $12, \
               $13, $14, $15, $16, $17, $18, $19)",
            &[
                DatumWithOid::from(relid),
                DatumWithOid::from(storage.as_str()),
                DatumWithOid::from(query),
                DatumWithOid::from(schedule),
                DatumWithOid::from(mode.name()),
                DatumWithOid::from(domain),
                DatumWithOid::from(def.identity.unique),
                DatumWithOid::from(class_name(def.plan.class)),
                DatumWithOid::from(def.plan.max_identity_len.map(|b| b as i32)),
                DatumWithOid::from(sources),
                DatumWithOid::from(def.sql.as_str()),
                DatumWithOid::from(time_zone.as_str()),
                DatumWithOid::from(fill.as_str()),
                DatumWithOid::from(delta.as_deref()),
                DatumWithOid::from(search_path.as_str()),
                DatumWithOid::from(shape.as_str()),
                DatumWithOid::from(cdc.name()),
                DatumWithOid::from(bound_functions.clone()),
                DatumWithOid::from(bound_operators.clone()),
            ],
        );
        // A publication that carries the storage already (`FOR ALL TABLES`, `TABLES IN
        // SCHEMA`) was given its identity schema at the CREATE TABLE, before this row: the
        // schema says `stored` only from here on (spec/identity-messages.md §4).
        if crate::identity_messages::messages_enabled() {
            crate::identity_messages::write_published_schemas(&[relid], &[]);
        }
    });
    if mode == Mode::Immediate {
        as_owner(crate::catalog::extension_owner(), || {
            spi::run(
                "INSERT INTO pgtrickle.pgt_immediate_marks (pgt_relid) VALUES ($1)",
                &[DatumWithOid::from(relid)],
            );
            for (source, event, sql) in &immediate {
                let read: Vec<i16> = def
                    .read
                    .columns_read
                    .get(source)
                    .map(|c| c.iter().copied().filter(|a| *a >= 0).collect())
                    .unwrap_or_default();
                spi::run(
                    "INSERT INTO pgtrickle.pgt_immediate (pgt_relid, source, event, statement, \
                       read_columns) \
                     VALUES ($1, $2, $3, $4, $5)",
                    &[
                        DatumWithOid::from(relid),
                        DatumWithOid::from(*source),
                        DatumWithOid::from(*event),
                        DatumWithOid::from(sql.as_str()),
                        DatumWithOid::from(read),
                    ],
                );
            }
        });
        for source in unique(&def.read.sources) {
            create_immediate_triggers(relid, source);
        }
    }
    if initialize {
        // Just made from the sources as they are: never stale.
        refresh_relid(REFRESH, relid);
    }
}

/// Refuses to create (or rebuild) a DIFFERENTIAL or IMMEDIATE stream table `name` in a
/// transaction whose snapshot is fixed (REPEATABLE READ, SERIALIZABLE): that snapshot can
/// predate a write committed before the capture existed (the capture's `CREATE TRIGGER`
/// waits only for writers still running), so neither the first fill nor the capture would
/// see it, and the stream table would miss it forever (spec/stream-tables.md §5.2). Under
/// READ COMMITTED the fill's statement takes its snapshot after the capture exists, and
/// writers after it wait for this transaction. FULL captures nothing: its fill is the
/// query at the transaction's snapshot, as a refresh there is.
fn refuse_fixed_snapshot(name: &str, mode: Mode) {
    // SAFETY: reads a backend-local setting of the running transaction.
    let fixed = unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32;
    if fixed && mode != Mode::Full {
        errors::refused(
            CREATE,
            "0A000",
            &format!(
                "{name}: {} stream tables are created (and rebuilt) only in READ COMMITTED \
                 transactions: a REPEATABLE READ or SERIALIZABLE snapshot can predate a write \
                 committed before the capture existed, which neither the fill nor the capture \
                 would see",
                mode.name()
            ),
        );
    }
}

/// Refuses a DIFFERENTIAL or IMMEDIATE stream table `name` over a table (not a stream
/// table) with a column whose name begins with `__pgt_`: the delta statements read a
/// source's change as its whole rows beside columns of their own of such names (a weight
/// `__pgt_w`, an identity `__pgt_row_id`), which a source column of that name makes
/// ambiguous, so the source's writes (IMMEDIATE) or the refreshes would fail
/// (spec/stream-tables.md §6.3). A stream table's own `__pgt_` columns are read as what
/// they are.
fn refuse_internal_names(name: &str, mode: Mode, sources: &[pg_sys::Oid]) {
    for source in unique(sources) {
        if crate::stream_graph::upstream(source).is_some() {
            continue;
        }
        let column = spi::rows(
            "SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a \
             WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.>) 0 \
               AND NOT a.attisdropped \
               AND pg_catalog.left(a.attname::pg_catalog.text, 6) OPERATOR(pg_catalog.=) '__pgt_' \
             ORDER BY a.attnum LIMIT 1",
            &[DatumWithOid::from(source)],
            |r| Ok(r.get::<String>(1)?.unwrap_or_default()),
        )
        .pop();
        if let Some(column) = column {
            errors::refused(
                CREATE,
                "0A000",
                &format!(
                    "{name}: the source {} has a column named {}: names beginning with \
                     __pgt_ are the {} statements' own; rename the column or use refresh_mode \
                     => 'FULL'",
                    crate::catalog::relation_name(source),
                    quote_ident(&column),
                    mode.name()
                ),
            );
        }
    }
}

/// Refuses a DIFFERENTIAL or IMMEDIATE stream table `name` its statements could not keep
/// (spec/stream-tables.md §6.3; each was accepted once and every refresh, or with IMMEDIATE
/// every write of the source, failed): a query that reads no table (nothing captures a
/// change of a function's rows), one without output columns, one reading a system column
/// (`xmin`, `ctid`: a change's images carry none), and for DIFFERENTIAL one reading a
/// `STORED` generated column (the change buffers carry none; IMMEDIATE's transition tables
/// do).
fn refuse_unmaintainable(name: &str, mode: Mode, def: &Definition) {
    let refuse = |why: String| -> ! {
        errors::refused(
            CREATE,
            "0A000",
            &format!(
                "{name}: {why}: a {} stream table cannot keep it; use refresh_mode => 'FULL'",
                mode.name()
            ),
        )
    };
    if def.read.sources.is_empty() {
        refuse("the query reads no table (its rows change without a write to capture)".into());
    }
    if def.read.plan.outputs().is_empty() {
        refuse("the query has no output columns".into());
    }
    for source in unique(&def.read.sources) {
        let read = def
            .read
            .columns_read
            .get(&source)
            .cloned()
            .unwrap_or_default();
        let table = crate::catalog::relation_name(source);
        if read.iter().any(|a| *a < 0) {
            refuse(format!(
                "the query reads a system column of {table} (a change's rows carry none)"
            ));
        }
        if mode != Mode::Differential {
            continue;
        }
        let generated = spi::rows(
            "SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a \
             WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.>) 0 \
               AND NOT a.attisdropped AND a.attgenerated OPERATOR(pg_catalog.<>) '' \
               AND (a.attnum OPERATOR(pg_catalog.=) ANY ($2) \
                    OR 0 OPERATOR(pg_catalog.=) ANY ($2)) \
             ORDER BY a.attnum LIMIT 1",
            &[DatumWithOid::from(source), DatumWithOid::from(read)],
            |r| Ok(r.get::<String>(1)?.unwrap_or_default()),
        )
        .pop();
        if let Some(column) = generated {
            refuse(format!(
                "the query reads the generated column {} of {table} (change buffers carry no \
                 generated column; IMMEDIATE, whose transition tables do, can keep it)",
                quote_ident(&column)
            ));
        }
    }
}

/// Each OID of `oids` once, in order.
fn unique(oids: &[pg_sys::Oid]) -> Vec<pg_sys::Oid> {
    let mut out: Vec<pg_sys::Oid> = Vec::with_capacity(oids.len());
    for o in oids {
        if !out.contains(o) {
            out.push(*o);
        }
    }
    out
}

/// The statement triggers that maintain IMMEDIATE stream table `relid` from `source`
/// (created as the caller, who needs the right to create triggers on it).
fn create_immediate_triggers(relid: pg_sys::Oid, source: pg_sys::Oid) {
    let table = crate::catalog::relation_name(source);
    let Some(depth) = crate::stream_graph::depth(relid) else {
        errors::invalid_argument(CREATE, format!("{relid:?} is not in the catalog"));
    };
    let name = |e: char| quote_ident(&crate::stream_immediate::trigger_name(relid, depth, e));
    let id = u32::from(relid);
    for (e, event, referencing) in [
        ('b', "BEFORE INSERT OR UPDATE OR DELETE", ""),
        ('i', "AFTER INSERT", "REFERENCING NEW TABLE AS __pgt_new"),
        (
            'u',
            "AFTER UPDATE",
            "REFERENCING OLD TABLE AS __pgt_old NEW TABLE AS __pgt_new",
        ),
        ('d', "AFTER DELETE", "REFERENCING OLD TABLE AS __pgt_old"),
        ('t', "AFTER TRUNCATE", ""),
    ] {
        spi::run(
            &format!(
                "CREATE TRIGGER {} {event} ON {table} {referencing} FOR EACH STATEMENT \
                 EXECUTE FUNCTION pgtrickle.maintain_stream_table('{id}')",
                name(e)
            ),
            &[],
        );
    }
}

/// Drops the triggers of IMMEDIATE stream table `relid` on its sources (those still there).
fn drop_immediate_triggers(relid: pg_sys::Oid) {
    let sources: Vec<pg_sys::Oid> = spi::rows(
        "SELECT DISTINCT source FROM pgtrickle.pgt_immediate \
         WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
        &[DatumWithOid::from(relid)],
        |r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid)),
    );
    for source in sources {
        let table = crate::catalog::relation_name(source);
        if table.is_empty() {
            continue;
        }
        // By name on the source, whatever depth they were made at (and in the names of the
        // builds before the depth ranked them, `pgtrickle_immediate_<oid>_<event>`).
        let names: Vec<String> = spi::rows(
            "SELECT tgname::pg_catalog.text FROM pg_catalog.pg_trigger \
             WHERE tgrelid OPERATOR(pg_catalog.=) $1 AND NOT tgisinternal \
               AND tgname OPERATOR(pg_catalog.~) ('^pgtrickle_immediate_([0-9]{4}_)?' \
                 OPERATOR(pg_catalog.||) $2::pg_catalog.text \
                 OPERATOR(pg_catalog.||) '_[biudt]$')",
            &[
                DatumWithOid::from(source),
                DatumWithOid::from(u32::from(relid) as i64),
            ],
            |r| Ok(r.get::<String>(1)?.unwrap_or_default()),
        );
        for name in names {
            spi::run(
                &format!("DROP TRIGGER IF EXISTS {} ON {table}", quote_ident(&name)),
                &[],
            );
        }
    }
}

/// The change buffer of each source as a delta statement reads it, `buffer` naming it (and,
/// for DIFFERENTIAL, creating it with its capture triggers).
fn source_buffers(
    sources: &[pg_sys::Oid],
    buffer: &dyn Fn(pg_sys::Oid) -> String,
) -> Vec<SourceBuffer> {
    sources
        .iter()
        .map(|&source| {
            let facts = crate::catalog::relation_facts(source);
            let relation = facts
                .map(|f| format!("{}.{}", quote_ident(&f.namespace), quote_ident(&f.relname)))
                .unwrap_or_default();
            SourceBuffer {
                relation,
                buffer: buffer(source),
                columns: source_columns(source, false),
            }
        })
        .collect()
}

/// `source`'s columns in `attnum` order, name and type (as `format_type` prints it):
/// generated ones only with `generated` (a transition table has them, a change buffer's
/// images do not).
fn source_columns(source: pg_sys::Oid, generated: bool) -> Vec<(String, String)> {
    spi::rows(
        &format!(
            "SELECT attname::pg_catalog.text, pg_catalog.format_type(atttypid, atttypmod) \
             FROM pg_catalog.pg_attribute \
             WHERE attrelid OPERATOR(pg_catalog.=) {} \
               AND attnum OPERATOR(pg_catalog.>) 0 AND NOT attisdropped{} \
             ORDER BY attnum",
            u32::from(source),
            if generated {
                ""
            } else {
                " AND attgenerated OPERATOR(pg_catalog.=) ''"
            }
        ),
        &[],
        |r| {
            Ok((
                r.get::<String>(1)?.unwrap_or_default(),
                r.get::<String>(2)?.unwrap_or_default(),
            ))
        },
    )
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
        let index = format!("{}_row_id", target.name);
        spi::run(&index_ddl(def.plan.class, &index, target), &[]);
        // Proposal §11, spec/stream-tables.md §9: a published stream table keeps refreshing.
        spi::run(&replica_identity_ddl(def.plan.class, &index, target), &[]);
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
pub fn stream_table(function: &str, name: &str) -> pg_sys::Oid {
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
    let known: Option<bool> = crate::catalog::as_extension(|| {
        spi::one(
            "SELECT true FROM pgtrickle.pgt_stream_tables \
             WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[DatumWithOid::from(relid)],
        )
    });
    if known.is_none() {
        errors::invalid_argument(function, format!("{name:?} is not a stream table"));
    }
    relid
}

/// Refuses unless the caller may act as the stream table's owner (as for `REFRESH
/// MATERIALIZED VIEW` and `DROP TABLE`); returns the owner.
pub fn owner_checked(function: &str, relid: pg_sys::Oid) -> pg_sys::Oid {
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

/// What a refresh did.
pub enum Refreshed {
    /// Refreshed: the rows it changed.
    Rows(i64),
    /// Nothing: a DDL changed what the definition depends on, and the stream table must be
    /// rebuilt (by its owner, `crate::stream_rebuild`) in this transaction, which holds its
    /// refresh lock and catalog row.
    Stale,
}

/// Refreshes stream table `relid` (the refresh lock and catalog row held to the transaction's
/// end), unless it must be rebuilt first.
pub fn refresh_or_stale(relid: pg_sys::Oid) -> Refreshed {
    refresh_relid(REFRESH, relid)
}

/// What a refresh statement returns: the new frontier, whether the window needed a full
/// recomputation instead, and how many stored rows changed (rowid_ivm::delta).
struct Outcome {
    snapshot: String,
    own_xid: i64,
    own_seq: i32,
    blocked: bool,
    changed: i64,
}

fn run_refresh(sql: &str, args: &[DatumWithOid<'_>]) -> Outcome {
    // Planned once per backend: a refresh with little to do is mostly planning otherwise.
    spi::rows_mut_map_kept(sql, args, |r| {
        Ok(Outcome {
            snapshot: r.get::<String>(1)?.unwrap_or_default(),
            own_xid: r.get::<i64>(2)?.unwrap_or(0),
            own_seq: r.get::<i32>(3)?.unwrap_or(0),
            blocked: r.get::<bool>(4)?.unwrap_or(false),
            changed: r.get::<i64>(5)?.unwrap_or(0),
        })
    })
    .pop()
    .unwrap_or_else(|| errors::invalid_argument(REFRESH, "a refresh returned no row".into()))
}

/// The catalog row a refresh works from, locked until the transaction ends.
struct Recorded {
    name: String,
    shape: String,
    sources: Vec<pg_sys::Oid>,
    mode: String,
    cdc: String,
    fill: String,
    delta: Option<String>,
    frontier: Option<(String, i64, i32)>,
    time_zone: String,
    identity_version: i16,
    probe_version: i16,
    /// What create resolved ([`crate::binding`]).
    bound_functions: Vec<pg_sys::Oid>,
    bound_operators: Vec<pg_sys::Oid>,
}

impl Recorded {
    /// What the stored statements of stream table `relid` may use.
    fn allowed(&self, relid: pg_sys::Oid) -> crate::binding::Allowed {
        crate::binding::Allowed {
            functions: self.bound_functions.iter().copied().collect(),
            operators: self.bound_operators.iter().copied().collect(),
            relations: self.sources.iter().copied().chain([relid]).collect(),
        }
    }
}

/// Refreshes the stream table `relid`: serialised with every other refresh of it (its
/// refresh lock, [`crate::locks`], and its catalog row locked: a refresh in a transaction whose snapshot
/// predates another's commit fails to serialise instead of consuming a window twice), its
/// recorded versions checked before anything changes, then as its owner: FULL recomputes,
/// DIFFERENTIAL applies the window past its frontier (or recomputes when the window needs
/// it), and the catalog records the new frontier.
fn refresh_relid(function: &str, relid: pg_sys::Oid) -> Refreshed {
    let owner = owner_checked(function, relid);
    crate::locks::lock_refresh(relid);
    let recorded = as_owner(crate::catalog::extension_owner(), || {
        spi::rows_mut_map_kept(
            "SELECT pgt_name, refresh_mode, fill_sql, delta_sql, frontier, frontier_xid, \
               frontier_seq, time_zone, row_identity_version, row_probe_version, \
               defining_query, schedule, search_path, source_shape, sources, cdc_mode, \
               bound_functions, bound_operators \
             FROM pgtrickle.pgt_stream_tables WHERE pgt_relid OPERATOR(pg_catalog.=) $1 \
             FOR UPDATE",
            &[DatumWithOid::from(relid)],
            |r| {
                let frontier = match (r.get::<String>(5)?, r.get::<i64>(6)?, r.get::<i32>(7)?) {
                    (Some(s), Some(x), Some(q)) => Some((s, x, q)),
                    _ => None,
                };
                Ok(Recorded {
                    name: r.get::<String>(1)?.unwrap_or_default(),
                    shape: r.get::<String>(14)?.unwrap_or_default(),
                    sources: r.get::<Vec<pg_sys::Oid>>(15)?.unwrap_or_default(),
                    mode: r.get::<String>(2)?.unwrap_or_default(),
                    cdc: r.get::<String>(16)?.unwrap_or_default(),
                    fill: r.get::<String>(3)?.unwrap_or_default(),
                    delta: r.get::<String>(4)?,
                    frontier,
                    time_zone: r.get::<String>(8)?.unwrap_or_default(),
                    identity_version: r.get::<i16>(9)?.unwrap_or(0),
                    probe_version: r.get::<i16>(10)?.unwrap_or(0),
                    bound_functions: r.get::<Vec<pg_sys::Oid>>(17)?.unwrap_or_default(),
                    bound_operators: r.get::<Vec<pg_sys::Oid>>(18)?.unwrap_or_default(),
                })
            },
        )
        .pop()
    });
    let Some(recorded) = recorded else {
        errors::invalid_argument(function, "the stream table is gone".into());
    };
    let table = crate::catalog::relation_name(relid);
    if recorded.identity_version != 2 || recorded.probe_version != 1 {
        errors::invalid_buffer(
            function,
            &format!(
                "{table} records row identity version {} and probe version {}; this library \
                 writes 2 and 1: rebuild it (drop_stream_table, create_stream_table)",
                recorded.identity_version, recorded.probe_version
            ),
        );
    }
    let canonical = crate::catalog::relation_facts(relid)
        .map(|f| QualifiedName::new(&f.namespace, &f.relname).quoted());
    if canonical.as_deref() != Some(recorded.name.as_str()) {
        errors::invalid_buffer(
            function,
            &format!(
                "{table} was created as {}: its stored statements name that table; rename it \
                 back, or create it again under the new name",
                recorded.name
            ),
        );
    }
    if crate::catalog::source_shape(relid, &recorded.sources, &recorded.bound_functions)
        != recorded.shape
    {
        // A DDL changed what the definition depends on: rebuilt from its query, read as its
        // creator read it, by its owner, never refreshed with statements written for the old
        // definition (by the caller: crate::stream_rebuild::refresh).
        return Refreshed::Stale;
    }
    crate::stream_graph::check_upstreams(function, &recorded.sources);
    let differential = recorded.mode == Mode::Differential.name();
    let started = Instant::now();
    if differential && recorded.cdc == Cdc::Wal.name() {
        // Before the statement's snapshot: the buffers hold every transaction it will see.
        crate::stream_wal::cover(function, &table, &recorded.sources);
    }
    let outcome = as_owner(owner, || {
        // Maintenance of an IMMEDIATE stream table by its sources' writers waits, and the
        // statements below read under a snapshot taken after every earlier one committed.
        // SAFETY: a relation lock on the storage, held to the transaction's end.
        unsafe { pg_sys::LockRelationOid(relid, pg_sys::ExclusiveLock as pg_sys::LOCKMODE) };
        if recorded.mode == Mode::Immediate.name() {
            // A recomputation under a snapshot older than the last maintenance would undo it.
            crate::stream_immediate::mark_maintained(relid);
        }
        let allowed = recorded.allowed(relid);
        with_pinned(&recorded.time_zone, || {
            crate::sealed::sealed(&table, || {
                // A source whose row-level security came to apply to the owner after create:
                // recomputed, which applies the policies (crate::access).
                let policies = recorded
                    .sources
                    .iter()
                    .any(|s| crate::access::row_security_applies(*s, owner));
                if let (true, false, Some(delta), Some((snapshot, xid, seq))) =
                    (differential, policies, &recorded.delta, &recorded.frontier)
                {
                    let outcome = crate::binding::bound(&table, delta, &allowed, || {
                        run_refresh(
                            delta,
                            &[
                                DatumWithOid::from(snapshot.as_str()),
                                DatumWithOid::from(*xid),
                                DatumWithOid::from(*seq),
                            ],
                        )
                    });
                    if !outcome.blocked {
                        return outcome;
                    }
                }
                crate::binding::bound(&table, &recorded.fill, &allowed, || {
                    run_refresh(&recorded.fill, &[])
                })
            })
        })
    });
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let (frontier, xid, seq) = if differential {
        (
            Some(outcome.snapshot.as_str()),
            Some(outcome.own_xid),
            Some(outcome.own_seq),
        )
    } else {
        (None, None, None)
    };
    as_owner(crate::catalog::extension_owner(), || {
        spi::run(
            "UPDATE pgtrickle.pgt_stream_tables SET status = 'ACTIVE', \
               last_refresh_at = pg_catalog.now(), last_refresh_ms = $2, rows_changed = $3, \
               frontier = $4, frontier_xid = $5, frontier_seq = $6 \
             WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[
                DatumWithOid::from(relid),
                DatumWithOid::from(ms),
                DatumWithOid::from(outcome.changed),
                DatumWithOid::from(frontier),
                DatumWithOid::from(xid),
                DatumWithOid::from(seq),
            ],
        );
    });
    Refreshed::Rows(outcome.changed)
}

/// `pgtrickle.drop_stream_table`: the storage and the catalog row; refused while other
/// stream tables read it, unless `cascade`: then they are dropped first, the deepest first
/// (each by a caller who may drop it).
pub fn drop(name: &str, cascade: bool) {
    let relid = stream_table(DROP, name);
    owner_checked(DROP, relid);
    let table = crate::catalog::relation_name(relid);
    if cascade {
        for reader in crate::stream_graph::dependents_deepest_first(relid) {
            owner_checked(DROP, reader);
            drop_relid(reader);
        }
    } else {
        crate::stream_graph::refuse_with_dependents(DROP, relid, &table, "drop");
    }
    drop_relid(relid);
}

/// Drops the stream table `relid` for `pgtrickle.rebuild_stream_tables` (its readers are
/// dropped first by the caller), when the caller may.
pub fn drop_for_rebuild(function: &str, relid: pg_sys::Oid) {
    owner_checked(function, relid);
    drop_relid(relid);
}

/// Drops the stream table `relid` (the caller checked it may): the triggers its IMMEDIATE
/// maintenance placed on its sources, the storage and the catalog row.
fn drop_relid(relid: pg_sys::Oid) {
    let table = crate::catalog::relation_name(relid);
    // The triggers are the extension's (made by create_stream_table, calling its function):
    // dropped as its owner, also from a source of another owner.
    as_owner(crate::catalog::extension_owner(), || {
        drop_immediate_triggers(relid)
    });
    as_owner(crate::catalog::relation_owner(relid), || {
        spi::run(&format!("DROP TABLE {table}"), &[]);
    });
    as_owner(crate::catalog::extension_owner(), || {
        spi::run(
            "DELETE FROM pgtrickle.pgt_stream_tables WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[DatumWithOid::from(relid)],
        );
    });
}

/// `pgtrickle.alter_stream_table` given only a schedule: the catalog row, nothing rebuilt
/// (the schedule checked by the caller, lib.rs; `none`: by hand from now on). A new query or
/// mode is a rebuild (`crate::stream_rebuild::alter`).
pub fn alter_schedule(relid: pg_sys::Oid, text: &str) {
    let schedule = (!text.eq_ignore_ascii_case("none")).then_some(text);
    as_owner(crate::catalog::extension_owner(), || {
        spi::run(
            "UPDATE pgtrickle.pgt_stream_tables SET schedule = $2 \
             WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[DatumWithOid::from(relid), DatumWithOid::from(schedule)],
        );
    });
}
