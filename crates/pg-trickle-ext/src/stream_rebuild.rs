//! Rebuilding stream tables, by their owners (spec/stream-tables.md §7.1, §10.1): the one
//! path of `refresh_stream_table` when a refresh finds a definition stale (a source DDL),
//! of `alter_stream_table` and of `pgtrickle.rebuild_stream_tables` (proposal §12): every
//! stream table dropped, the readers first, and created again in dependency order from its
//! recorded definition, with a fresh initial refresh by the running library. What the rebuild is for:
//! a library whose encoder writes another identity version, or stream tables that record
//! another one (every reader refuses them).
//!
//! - **Preflight.** Before anything changes, the whole rebuild is tried without filling, in a
//!   subtransaction that is always rolled back, each stream table in a subtransaction of its
//!   own. Every stream table that cannot be rebuilt is reported with its cause: one written
//!   by a newer library, one renamed since it was created, one whose query or identity the
//!   running encoder cannot read or represent, one with objects a drop would refuse or the
//!   rebuild would lose (views, policies, triggers, rules, children).
//! - **One transaction.** The drops, creates and fills run in the caller's transaction: an
//!   interrupted rebuild (an error, a cancel, a killed backend, a crash) is rolled back by
//!   PostgreSQL and leaves the graph as it was; running it again rebuilds it.
//! - **What a stream table carries.** Its owner (created as its owner), schedule, modes and
//!   its creator's `search_path` and time zone (the catalog row), its privileges on the table
//!   and its columns (checked equal afterwards), comments, indexes and constraints added to
//!   it, `NOT NULL` columns, storage parameters, replica identity, publication memberships
//!   and its refresh history.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use rowid_registry::sql::QualifiedName;

use crate::guard::{Outcome, as_owner, subtransaction, with_settings};
use crate::{errors, spi, stream_table};

const REBUILD: &str = "pgtrickle.rebuild_stream_tables";
const REFRESH: &str = "pgtrickle.refresh_stream_table";
const ALTER: &str = "pgtrickle.alter_stream_table";

/// The row identity and probe versions this library writes.
const VERSIONS: (i16, i16) = (2, 1);

/// One row of the function's result: what happened (or would) to one stream table.
pub struct Step {
    /// Its position in dependency order (1: rebuilt first).
    pub step: i32,
    /// The longest chain of stream tables below it (0: it reads none).
    pub level: i32,
    /// Its qualified name.
    pub name: String,
    /// `rebuilt`, `would rebuild` (a dry run) or `refused`.
    pub action: &'static str,
    /// The versions it recorded and the rows it holds now, or why it cannot be rebuilt.
    pub detail: String,
}

/// A stream table as the catalog records it, in dependency order.
struct Member {
    step: i32,
    level: i32,
    relid: pg_sys::Oid,
    /// The storage's owner, who creates it again.
    owner: pg_sys::Oid,
    recorded_name: String,
    query: String,
    schedule: Option<String>,
    mode: String,
    cdc: String,
    search_path: String,
    time_zone: String,
    versions: (i16, i16),
    sources: Vec<pg_sys::Oid>,
}

/// `pgtrickle.rebuild_stream_tables(dry_run)`: the preflight, then (unless `dry_run`, and
/// only when every stream table passes it) the rebuild.
pub fn rebuild_all(dry_run: bool) -> Vec<Step> {
    crate::locks::lock_rebuild();
    let members = members();
    let refusals = preflight(&members);
    if dry_run || !refusals.is_empty() {
        if !dry_run {
            let causes: Vec<String> = members
                .iter()
                .filter_map(|m| refusals.get(&m.relid).map(|c| format!("{}: {c}", name(m))))
                .collect();
            errors::refused(
                REBUILD,
                "55000",
                &format!(
                    "{} of {} stream tables cannot be rebuilt, nothing was changed: {}",
                    causes.len(),
                    members.len(),
                    causes.join("; ")
                ),
            );
        }
        return members
            .iter()
            .map(|m| match refusals.get(&m.relid) {
                Some(cause) => step(m, "refused", cause.clone()),
                None => step(m, "would rebuild", versions_detail(m)),
            })
            .collect();
    }
    // Everything each stream table carries, read before any of them is dropped.
    let carried: Vec<Vec<Carried>> = members.iter().map(|m| carried(m.relid)).collect();
    let had: Vec<Vec<String>> = members.iter().map(|m| privileges(m.relid)).collect();
    for m in members.iter().rev() {
        stream_table::drop_for_rebuild(REBUILD, m.relid);
    }
    let mut steps = Vec::with_capacity(members.len());
    for (i, m) in members.iter().enumerate() {
        let relid = create(m, true);
        carry_over(REBUILD, m, relid, &carried[i], &had[i]);
        let rows = crate::catalog::as_extension(|| {
            spi::one::<i64>(
                "SELECT rows_changed FROM pgtrickle.pgt_stream_tables \
                 WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
                &[DatumWithOid::from(relid)],
            )
        })
        .unwrap_or(0);
        steps.push(step(
            m,
            "rebuilt",
            format!("{}; {rows} rows", versions_detail(m)),
        ));
    }
    steps
}

/// Gives the new storage `relid` of `m` what the old one had (`carried`, read before the
/// drop) and checks its privileges are the old ones (`had`); its refresh history follows it.
/// A statement that cannot be carried (an index on a column a new definition no longer has)
/// fails the rebuild, naming it.
fn carry_over(function: &str, m: &Member, relid: pg_sys::Oid, carried: &[Carried], had: &[String]) {
    for c in carried {
        if let Some(index) = &c.unless_exists {
            let exists = spi::one::<bool>(
                "SELECT pg_catalog.to_regclass($1) IS NOT NULL",
                &[DatumWithOid::from(index.as_str())],
            );
            if exists == Some(true) {
                continue;
            }
        }
        let run = || spi::run(&c.sql, &[]);
        let ran = subtransaction(Outcome::Keep, || match c.role {
            Some(role) => as_owner(role, run),
            None => run(),
        });
        if let Err(cause) = ran {
            errors::refused(
                function,
                "55000",
                &format!(
                    "{}: what the stream table had cannot be carried over to its new storage: \
                     {} ({cause}); remove it first",
                    name(m),
                    c.sql
                ),
            );
        }
    }
    let now = privileges(relid);
    if now != had {
        errors::refused(
            function,
            "XX000",
            &format!(
                "the privileges of {} were not carried over: it had {:?}, it has {:?}",
                name(m),
                had,
                now
            ),
        );
    }
    as_owner(crate::catalog::extension_owner(), || {
        spi::run(
            "UPDATE pgtrickle.pgt_refresh_history SET pgt_relid = $2 \
             WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[DatumWithOid::from(m.relid), DatumWithOid::from(relid)],
        );
    });
}

/// `pgtrickle.refresh_stream_table`: the refresh, or, after a DDL of what the definition
/// depends on, the rebuild, as its owner ([`rebuild_one`]).
pub fn refresh(name: &str) {
    let relid = stream_table::stream_table(REFRESH, name);
    refresh_relid(relid);
}

/// A scheduler's refresh of `relid` (crate::scheduler): the rows it changed (0 for a
/// rebuild).
pub fn refresh_scheduled(relid: pg_sys::Oid) -> i64 {
    refresh_relid(relid)
}

fn refresh_relid(relid: pg_sys::Oid) -> i64 {
    match stream_table::refresh_or_stale(relid) {
        stream_table::Refreshed::Rows(rows) => rows,
        stream_table::Refreshed::Stale => {
            rebuild_one(REFRESH, relid, None);
            0
        }
    }
}

/// `pgtrickle.alter_stream_table`: the schedule alone changed in the catalog row; a new
/// query or mode checked completely and the stream table rebuilt with it, as its owner, in
/// the caller's transaction (readers wait for its commit).
pub fn alter(
    name: &str,
    query: Option<&str>,
    refresh_mode: Option<&str>,
    cdc_mode: Option<&str>,
    new_schedule: Option<&str>,
) {
    let relid = stream_table::stream_table(ALTER, name);
    stream_table::owner_checked(ALTER, relid);
    if let (None, None, None, Some(text)) = (query, refresh_mode, cdc_mode, new_schedule) {
        stream_table::alter_schedule(relid, text);
        return;
    }
    rebuild_one(
        ALTER,
        relid,
        Some(Redefinition {
            query: query.map(str::to_string),
            refresh_mode: refresh_mode.map(str::to_string),
            cdc_mode: cdc_mode.map(str::to_string),
            schedule: new_schedule
                .map(|text| (!text.eq_ignore_ascii_case("none")).then(|| text.to_string())),
            search_path: stream_table::caller_search_path(),
            time_zone: stream_table::current_time_zone(),
        }),
    );
}

/// What `alter_stream_table` changes of a definition (`None`: kept), and the settings its
/// caller reads a new query with.
pub struct Redefinition {
    /// A new query.
    pub query: Option<String>,
    /// A new refresh mode.
    pub refresh_mode: Option<String>,
    /// A new CDC mode.
    pub cdc_mode: Option<String>,
    /// A new schedule (`Some(None)`: none).
    pub schedule: Option<Option<String>>,
    /// The caller's `search_path`: a new query's names are read with it.
    pub search_path: String,
    /// The caller's `TimeZone`.
    pub time_zone: String,
}

/// Rebuilds the stream table `relid` for `function`: after a DDL of its sources (`new`:
/// `None`, the recorded definition read again as its creator read it) or with a new
/// definition (`alter_stream_table`). The one path every rebuild takes, the same as
/// `rebuild_stream_tables`' for each stream table: refused while other stream tables read it
/// or when it has what a rebuild cannot carry; then, as its owner whoever calls (a member of
/// its role, the scheduler's superuser), dropped and created again, its query checked as at
/// create (volatility, privileges) as the owner, filled, and given back its grants, comments,
/// indexes, constraints, replica identity and publication memberships. In the caller's
/// transaction: an error leaves the old stream table.
pub fn rebuild_one(function: &'static str, relid: pg_sys::Oid, new: Option<Redefinition>) {
    let Some(mut m) = member(relid) else {
        errors::invalid_argument(function, "the stream table is gone".into());
    };
    let table = name(&m);
    let what = match &new {
        Some(_) => "replace",
        None => "rebuild after a DDL of its sources",
    };
    crate::stream_graph::refuse_with_dependents(function, relid, &table, what);
    if let Some(new) = new {
        if let Some(query) = new.query {
            m.query = query;
            m.search_path = new.search_path;
            m.time_zone = new.time_zone;
        }
        if let Some(mode) = new.refresh_mode {
            m.mode = mode;
        }
        if let Some(cdc) = new.cdc_mode {
            m.cdc = cdc;
        }
        if let Some(schedule) = new.schedule {
            m.schedule = schedule;
        }
        // A new definition that would read a stream table reading this one: refused before
        // anything is dropped (the check of create, as the owner).
        let sources = as_creator(&m, || {
            stream_table::checked_sources(function, &m.query, &m.time_zone, &m.mode)
        });
        crate::stream_graph::refuse_cycle(function, relid, &table, &sources);
    }
    if let Some(cause) = not_carried(relid) {
        errors::refused(function, "55000", &format!("{table}: {cause}"));
    }
    let carried = carried(relid);
    let had = privileges(relid);
    stream_table::drop_for_rebuild(function, relid);
    let new_relid = create(&m, true);
    carry_over(function, &m, new_relid, &carried, &had);
}

/// The stream table `relid` as the catalog records it (its position in the graph unknown).
fn member(relid: pg_sys::Oid) -> Option<Member> {
    crate::catalog::as_extension(|| member_read(relid))
}

fn member_read(relid: pg_sys::Oid) -> Option<Member> {
    spi::rows(
        "SELECT t.pgt_name, t.defining_query, t.schedule, t.refresh_mode, t.cdc_mode, \
           t.search_path, t.time_zone, t.row_identity_version, t.row_probe_version, \
           t.sources, c.relowner \
         FROM pgtrickle.pgt_stream_tables t \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.pgt_relid \
         WHERE t.pgt_relid OPERATOR(pg_catalog.=) $1",
        &[DatumWithOid::from(relid)],
        |r| {
            Ok(Member {
                step: 0,
                level: 0,
                relid,
                recorded_name: r.get::<String>(1)?.unwrap_or_default(),
                query: r.get::<String>(2)?.unwrap_or_default(),
                schedule: r.get::<String>(3)?,
                mode: r.get::<String>(4)?.unwrap_or_default(),
                cdc: r.get::<String>(5)?.unwrap_or_default(),
                search_path: r.get::<String>(6)?.unwrap_or_default(),
                time_zone: r.get::<String>(7)?.unwrap_or_default(),
                versions: (r.get::<i16>(8)?.unwrap_or(0), r.get::<i16>(9)?.unwrap_or(0)),
                sources: r.get::<Vec<pg_sys::Oid>>(10)?.unwrap_or_default(),
                owner: r.get::<pg_sys::Oid>(11)?.unwrap_or(pg_sys::InvalidOid),
            })
        },
    )
    .pop()
}

/// The qualified name of `m`'s storage now, spelled as the catalog records names.
fn name(m: &Member) -> String {
    crate::catalog::relation_facts(m.relid)
        .map(|f| QualifiedName::new(&f.namespace, &f.relname).quoted())
        .unwrap_or_else(|| m.recorded_name.clone())
}

fn step(m: &Member, action: &'static str, detail: String) -> Step {
    Step {
        step: m.step,
        level: m.level,
        name: name(m),
        action,
        detail,
    }
}

fn versions_detail(m: &Member) -> String {
    format!(
        "row identity version {} and probe version {} -> {} and {}",
        m.versions.0, m.versions.1, VERSIONS.0, VERSIONS.1
    )
}

/// Every stream table in the order `export_stream_tables` gives (what it reads first).
fn members() -> Vec<Member> {
    crate::catalog::as_extension(members_read)
}

fn members_read() -> Vec<Member> {
    let members = spi::rows(
        "SELECT e.step, e.level, t.pgt_relid, t.pgt_name, t.defining_query, t.schedule, \
           t.refresh_mode, t.cdc_mode, t.search_path, t.time_zone, t.row_identity_version, \
           t.row_probe_version, t.sources, c.relowner \
         FROM pgtrickle.export_stream_tables() e \
         JOIN pgtrickle.pgt_stream_tables t ON t.pgt_name OPERATOR(pg_catalog.=) e.name \
           AND t.defining_query OPERATOR(pg_catalog.=) e.query \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.pgt_relid \
         ORDER BY e.step, t.pgt_relid",
        &[],
        |r| {
            Ok(Member {
                step: r.get::<i32>(1)?.unwrap_or(0),
                level: r.get::<i32>(2)?.unwrap_or(0),
                relid: r.get::<pg_sys::Oid>(3)?.unwrap_or(pg_sys::InvalidOid),
                recorded_name: r.get::<String>(4)?.unwrap_or_default(),
                query: r.get::<String>(5)?.unwrap_or_default(),
                schedule: r.get::<String>(6)?,
                mode: r.get::<String>(7)?.unwrap_or_default(),
                cdc: r.get::<String>(8)?.unwrap_or_default(),
                search_path: r.get::<String>(9)?.unwrap_or_default(),
                time_zone: r.get::<String>(10)?.unwrap_or_default(),
                versions: (
                    r.get::<i16>(11)?.unwrap_or(0),
                    r.get::<i16>(12)?.unwrap_or(0),
                ),
                sources: r.get::<Vec<pg_sys::Oid>>(13)?.unwrap_or_default(),
                owner: r.get::<pg_sys::Oid>(14)?.unwrap_or(pg_sys::InvalidOid),
            })
        },
    );
    let catalog = spi::one::<i64>(
        "SELECT pg_catalog.count(*) FROM pgtrickle.pgt_stream_tables",
        &[],
    )
    .unwrap_or(0);
    let distinct: HashSet<pg_sys::Oid> = members.iter().map(|m| m.relid).collect();
    if distinct.len() as i64 != catalog || members.len() != distinct.len() {
        errors::refused(
            REBUILD,
            "55000",
            "the catalog records two stream tables under one name with one query: rename \
             the storage of one of them back to the name it records",
        );
    }
    members
}

/// Runs `f` as `m`'s owner, under the `search_path` and time zone its query is read with,
/// with the calling session's temporary schema out of every search
/// ([`crate::sealed::sealed`]): a caller's temporary table cannot stand in for a source.
fn as_creator<R>(m: &Member, f: impl FnOnce() -> R) -> R {
    let path = CString::new(m.search_path.as_str()).unwrap_or_else(|_| c"pg_catalog".to_owned());
    let zone = CString::new(m.time_zone.as_str()).unwrap_or_else(|_| c"UTC".to_owned());
    with_settings(
        &[
            (c"search_path", path.as_c_str()),
            (c"TimeZone", zone.as_c_str()),
        ],
        || as_owner(m.owner, || crate::sealed::without_temporary_schema(f)),
    )
}

/// Creates `m` again as its owner, under the `search_path` and time zone it was created
/// with, filled when `fill`; returns the new storage's OID.
fn create(m: &Member, fill: bool) -> pg_sys::Oid {
    // Its reads see the stream tables this call created before it (the upstreams it
    // reads): a read-only statement's snapshot is the calling statement's.
    spi::with_latest_snapshot(|| {
        as_creator(m, || {
            stream_table::create(
                &m.recorded_name,
                &m.query,
                m.schedule.as_deref(),
                &m.mode,
                fill,
                &m.cdc,
            )
        })
    });
    let relid = spi::one::<pg_sys::Oid>(
        "SELECT pg_catalog.to_regclass($1)::pg_catalog.oid",
        &[DatumWithOid::from(m.recorded_name.as_str())],
    );
    relid.unwrap_or_else(|| {
        errors::invalid_argument(REBUILD, format!("{} was not created", m.recorded_name))
    })
}

/// Why each stream table that cannot be rebuilt cannot be (none: every one can): the whole
/// rebuild tried unfilled and rolled back, each stream table in a subtransaction of its
/// own, so that every cause is found, not only the first.
fn preflight(members: &[Member]) -> HashMap<pg_sys::Oid, String> {
    let mut refusals: HashMap<pg_sys::Oid, String> = HashMap::new();
    for m in members {
        if m.versions.0 > VERSIONS.0 || (m.versions.0 == VERSIONS.0 && m.versions.1 > VERSIONS.1) {
            refusals.insert(
                m.relid,
                format!(
                    "it records row identity version {} and probe version {}, written by a \
                     newer library than this one ({} and {}): rebuild it with that library",
                    m.versions.0, m.versions.1, VERSIONS.0, VERSIONS.1
                ),
            );
        } else if name(m) != m.recorded_name {
            refusals.insert(
                m.relid,
                format!(
                    "it was created as {}, and the queries that read it name that table: \
                     rename it back first",
                    m.recorded_name
                ),
            );
        } else if let Some(cause) = not_carried(m.relid) {
            refusals.insert(m.relid, cause);
        }
    }
    let tried = subtransaction(Outcome::Discard, || {
        for m in members.iter().rev() {
            if refusals.contains_key(&m.relid) {
                continue;
            }
            let dropped = subtransaction(Outcome::Keep, || {
                stream_table::drop_for_rebuild(REBUILD, m.relid)
            });
            if let Err(cause) = dropped {
                refusals.insert(m.relid, cause);
            }
        }
        for m in members {
            if refusals.contains_key(&m.relid) {
                continue;
            }
            if let Some(upstream) = members
                .iter()
                .find(|u| m.sources.contains(&u.relid) && refusals.contains_key(&u.relid))
            {
                refusals.insert(
                    m.relid,
                    format!("it reads {}, which cannot be rebuilt", name(upstream)),
                );
                continue;
            }
            if let Err(cause) = subtransaction(Outcome::Keep, || create(m, false)) {
                refusals.insert(m.relid, cause);
            }
        }
    });
    if let Err(cause) = tried {
        errors::refused(REBUILD, "XX000", &format!("the preflight failed: {cause}"));
    }
    refusals
}

/// What the rebuild would lose: row-level security, triggers and rules of users, extended
/// statistics and inheritance (none: nothing).
fn not_carried(relid: pg_sys::Oid) -> Option<String> {
    spi::one::<String>(
        "SELECT pg_catalog.concat_ws('; ', \
           CASE WHEN c.relrowsecurity OR EXISTS (SELECT FROM pg_catalog.pg_policy p \
                 WHERE p.polrelid OPERATOR(pg_catalog.=) c.oid) \
             THEN 'row-level security' END, \
           (SELECT 'trigger ' OPERATOR(pg_catalog.||) \
                   pg_catalog.string_agg(pg_catalog.quote_ident(t.tgname), ', ' ORDER BY t.tgname) \
            FROM pg_catalog.pg_trigger t WHERE t.tgrelid OPERATOR(pg_catalog.=) c.oid \
              AND NOT t.tgisinternal AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d \
                WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass \
                  AND d.objid OPERATOR(pg_catalog.=) t.tgfoid AND d.deptype OPERATOR(pg_catalog.=) 'e' \
                  AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass)), \
           (SELECT 'rule ' OPERATOR(pg_catalog.||) \
                   pg_catalog.string_agg(pg_catalog.quote_ident(r.rulename), ', ' ORDER BY r.rulename) \
            FROM pg_catalog.pg_rewrite r WHERE r.ev_class OPERATOR(pg_catalog.=) c.oid), \
           (SELECT 'statistics ' OPERATOR(pg_catalog.||) \
                   pg_catalog.string_agg(pg_catalog.quote_ident(s.stxname), ', ' ORDER BY s.stxname) \
            FROM pg_catalog.pg_statistic_ext s WHERE s.stxrelid OPERATOR(pg_catalog.=) c.oid), \
           CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_inherits i \
                 WHERE i.inhparent OPERATOR(pg_catalog.=) c.oid \
                    OR i.inhrelid OPERATOR(pg_catalog.=) c.oid) \
             THEN 'inheritance' END) \
         FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1",
        &[DatumWithOid::from(relid)],
    )
    .filter(|found| !found.is_empty())
    .map(|found| {
        format!(
            "a rebuild would not carry its {found}: drop them, rebuild, and create them again"
        )
    })
}

/// A statement that gives the new storage what the old one had, run as `role` (`None`: the
/// caller).
struct Carried {
    role: Option<pg_sys::Oid>,
    sql: String,
    /// An index's qualified name: the statement is skipped when the new storage has it
    /// (`create_stream_table` made it).
    unless_exists: Option<String>,
}

/// The statements that carry what `relid` has beyond what `create_stream_table` makes:
/// the owner's grants, then the grants of others (each after the grant that lets its
/// grantor grant), column grants, comments, `NOT NULL` columns, storage parameters, indexes
/// and constraints (those `create_stream_table` makes are not repeated), a replica identity
/// the owner chose (not the one `create_stream_table` sets for its index plan, which the new
/// storage gets for its own plan) and publication memberships. Names are the storage's: the new one has the same.
fn carried(relid: pg_sys::Oid) -> Vec<Carried> {
    // As the extension's owner: it reads the stream table's catalog row.
    crate::catalog::as_extension(|| carried_read(relid))
}

fn carried_read(relid: pg_sys::Oid) -> Vec<Carried> {
    let owner = crate::catalog::relation_owner(relid);
    let table = crate::catalog::relation_name(relid);
    let mut out = Vec::new();
    let has_acl = spi::one::<bool>(
        "SELECT relacl IS NOT NULL FROM pg_catalog.pg_class WHERE oid OPERATOR(pg_catalog.=) $1",
        &[DatumWithOid::from(relid)],
    );
    if has_acl == Some(true) {
        out.push(Carried {
            role: Some(owner),
            sql: spi::one::<String>(
                "SELECT pg_catalog.format('REVOKE ALL ON TABLE %s FROM %I', $2, \
                   pg_catalog.pg_get_userbyid($1))",
                &[
                    DatumWithOid::from(owner),
                    DatumWithOid::from(table.as_str()),
                ],
            )
            .unwrap_or_default(),
            unless_exists: None,
        });
    }
    out.extend(grants(relid, owner, &table));
    let statements = spi::rows(
        // (order, role: NULL = the owner, else the caller; statement; for an index, its
        // name: run unless create_stream_table made it)
        "SELECT 2, NULL::pg_catalog.oid, \
           pg_catalog.format('COMMENT ON TABLE %s IS %L', $2, d.description), \
           NULL::pg_catalog.text \
         FROM pg_catalog.pg_description d \
         WHERE d.objoid OPERATOR(pg_catalog.=) $1 AND d.objsubid OPERATOR(pg_catalog.=) 0 \
           AND d.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
         UNION ALL \
         SELECT 2, NULL, pg_catalog.format('COMMENT ON COLUMN %s.%I IS %L', $2, att.attname, \
             d.description), NULL \
         FROM pg_catalog.pg_description d JOIN pg_catalog.pg_attribute att \
           ON att.attrelid OPERATOR(pg_catalog.=) d.objoid \
          AND att.attnum OPERATOR(pg_catalog.=) d.objsubid \
         WHERE d.objoid OPERATOR(pg_catalog.=) $1 AND d.objsubid OPERATOR(pg_catalog.>) 0 \
           AND d.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
         UNION ALL \
         SELECT 3, NULL, pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', $2, \
             att.attname), NULL \
         FROM pg_catalog.pg_attribute att \
         WHERE att.attrelid OPERATOR(pg_catalog.=) $1 AND att.attnum OPERATOR(pg_catalog.>) 0 \
           AND NOT att.attisdropped AND att.attnotnull \
           AND att.attname OPERATOR(pg_catalog.<>) '__pgt_row_id' \
         UNION ALL \
         SELECT 4, NULL, pg_catalog.format('ALTER TABLE %s SET (%s)', $2, \
             pg_catalog.array_to_string(c.reloptions, ', ')), NULL \
         FROM pg_catalog.pg_class c \
         WHERE c.oid OPERATOR(pg_catalog.=) $1 AND c.reloptions IS NOT NULL \
         UNION ALL \
         SELECT 5, NULL, pg_catalog.pg_get_indexdef(i.indexrelid), \
           pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' \
             OPERATOR(pg_catalog.||) pg_catalog.quote_ident(ic.relname) \
         FROM pg_catalog.pg_index i \
         JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) i.indexrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) ic.relnamespace \
         WHERE i.indrelid OPERATOR(pg_catalog.=) $1 AND NOT EXISTS ( \
           SELECT FROM pg_catalog.pg_constraint k \
           WHERE k.conindid OPERATOR(pg_catalog.=) i.indexrelid \
             AND k.conrelid OPERATOR(pg_catalog.=) $1) \
         UNION ALL \
         SELECT 6, NULL, pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I %s', $2, \
             k.conname, pg_catalog.pg_get_constraintdef(k.oid)), NULL \
         FROM pg_catalog.pg_constraint k \
         WHERE k.conrelid OPERATOR(pg_catalog.=) $1 \
           AND k.contype OPERATOR(pg_catalog.=) ANY ('{p,u,x,c,f}'::pg_catalog.\"char\"[]) \
         UNION ALL \
         SELECT 7, NULL, pg_catalog.format('ALTER TABLE %s REPLICA IDENTITY %s', $2, \
             CASE c.relreplident WHEN 'n' THEN 'NOTHING' WHEN 'f' THEN 'FULL' \
               ELSE 'USING INDEX ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(( \
                 SELECT ic.relname FROM pg_catalog.pg_index i \
                 JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) i.indexrelid \
                 WHERE i.indrelid OPERATOR(pg_catalog.=) $1 AND i.indisreplident)) END), NULL \
         FROM pg_catalog.pg_class c \
         JOIN pgtrickle.pgt_stream_tables t ON t.pgt_relid OPERATOR(pg_catalog.=) c.oid \
         WHERE c.oid OPERATOR(pg_catalog.=) $1 AND c.relreplident OPERATOR(pg_catalog.<>) 'd' \
           AND NOT (CASE WHEN t.index_class OPERATOR(pg_catalog.=) 'direct_unique' \
             THEN c.relreplident OPERATOR(pg_catalog.=) 'i' AND EXISTS ( \
               SELECT FROM pg_catalog.pg_index i \
               JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid \
                AND a.attname OPERATOR(pg_catalog.=) '__pgt_row_id' \
               WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisreplident \
                 AND i.indnatts OPERATOR(pg_catalog.=) 1 \
                 AND i.indkey[0] OPERATOR(pg_catalog.=) a.attnum) \
             ELSE c.relreplident OPERATOR(pg_catalog.=) 'f' END) \
         UNION ALL \
         SELECT 8, 1::pg_catalog.oid, \
           pg_catalog.format('ALTER PUBLICATION %I ADD TABLE %s%s%s', p.pubname, $2, \
             CASE WHEN pr.prattrs IS NULL THEN '' ELSE ' (' OPERATOR(pg_catalog.||) ( \
               SELECT pg_catalog.string_agg(pg_catalog.quote_ident(att.attname), ', ' \
                        ORDER BY k.n) \
               FROM pg_catalog.unnest(pr.prattrs::pg_catalog.int2[]) WITH ORDINALITY k(num, n) \
               JOIN pg_catalog.pg_attribute att ON att.attrelid OPERATOR(pg_catalog.=) $1 \
                AND att.attnum OPERATOR(pg_catalog.=) k.num) OPERATOR(pg_catalog.||) ')' END, \
             CASE WHEN pr.prqual IS NULL THEN '' ELSE ' WHERE (' OPERATOR(pg_catalog.||) \
               pg_catalog.pg_get_expr(pr.prqual, pr.prrelid) OPERATOR(pg_catalog.||) ')' END), \
           NULL \
         FROM pg_catalog.pg_publication_rel pr \
         JOIN pg_catalog.pg_publication p ON p.oid OPERATOR(pg_catalog.=) pr.prpubid \
         WHERE pr.prrelid OPERATOR(pg_catalog.=) $1 \
         ORDER BY 1, 3",
        &[
            DatumWithOid::from(relid),
            DatumWithOid::from(table.as_str()),
        ],
        |r| {
            let role = r.get::<pg_sys::Oid>(2)?;
            Ok(Carried {
                role: match role {
                    None => Some(owner),
                    Some(_) => None,
                },
                sql: r.get::<String>(3)?.unwrap_or_default(),
                unless_exists: r.get::<String>(4)?,
            })
        },
    );
    out.extend(statements);
    out
}

/// The grants on table `relid` and on its columns, each after the grant that gave its
/// grantor the grant option (the owner holds every grant option; one on the table covers its
/// columns), each to run as its grantor.
fn grants(relid: pg_sys::Oid, owner: pg_sys::Oid, table: &str) -> Vec<Carried> {
    struct Grant {
        grantor: pg_sys::Oid,
        grantee: pg_sys::Oid,
        privilege: String,
        /// `None`: on the table.
        column: Option<String>,
        grantable: bool,
        sql: String,
    }
    let mut pending = spi::rows(
        "SELECT a.grantor, a.grantee, a.privilege_type, NULL::pg_catalog.text, a.is_grantable, \
           pg_catalog.format('GRANT %s ON TABLE %s TO %s%s', a.privilege_type, $2, \
             CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' \
                  ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END, \
             CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END) \
         FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a \
         WHERE c.oid OPERATOR(pg_catalog.=) $1 \
         UNION ALL \
         SELECT a.grantor, a.grantee, a.privilege_type, att.attname::pg_catalog.text, \
           a.is_grantable, \
           pg_catalog.format('GRANT %s (%I) ON TABLE %s TO %s%s', a.privilege_type, \
             att.attname, $2, \
             CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' \
                  ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END, \
             CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END) \
         FROM pg_catalog.pg_attribute att, pg_catalog.aclexplode(att.attacl) a \
         WHERE att.attrelid OPERATOR(pg_catalog.=) $1 AND NOT att.attisdropped \
           AND att.attacl IS NOT NULL \
         ORDER BY 1, 2, 3, 4 NULLS FIRST",
        &[DatumWithOid::from(relid), DatumWithOid::from(table)],
        |r| {
            Ok(Grant {
                grantor: r.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid),
                grantee: r.get::<pg_sys::Oid>(2)?.unwrap_or(pg_sys::InvalidOid),
                privilege: r.get::<String>(3)?.unwrap_or_default(),
                column: r.get::<String>(4)?,
                grantable: r.get::<bool>(5)?.unwrap_or(false),
                sql: r.get::<String>(6)?.unwrap_or_default(),
            })
        },
    );
    // (grantee, privilege, column: None on the table) it may grant.
    let mut may_grant: HashSet<(pg_sys::Oid, String, Option<String>)> = HashSet::new();
    let mut out = Vec::new();
    while !pending.is_empty() {
        let before = pending.len();
        let (ready, rest): (Vec<Grant>, Vec<Grant>) = pending.into_iter().partition(|g| {
            g.grantor == owner
                || may_grant.contains(&(g.grantor, g.privilege.clone(), None))
                || (g.column.is_some()
                    && may_grant.contains(&(g.grantor, g.privilege.clone(), g.column.clone())))
        });
        for g in ready {
            if g.grantable {
                may_grant.insert((g.grantee, g.privilege.clone(), g.column.clone()));
            }
            out.push(Carried {
                role: Some(g.grantor),
                sql: g.sql,
                unless_exists: None,
            });
        }
        pending = rest;
        if pending.len() == before {
            // A grant whose grantor holds no recorded grant option: granted as the owner,
            // and the check after the rebuild names the difference.
            out.extend(pending.drain(..).map(|g| Carried {
                role: Some(owner),
                sql: g.sql,
                unless_exists: None,
            }));
        }
    }
    out
}

/// The privileges on `relid` and its columns, as sorted text: what the rebuild must leave
/// unchanged.
fn privileges(relid: pg_sys::Oid) -> Vec<String> {
    spi::rows(
        "SELECT pg_catalog.format('%s: %s', att, item) FROM ( \
           SELECT '' AS att, pg_catalog.unnest(c.relacl)::pg_catalog.text AS item \
           FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1 \
           UNION ALL \
           SELECT a.attname::pg_catalog.text, pg_catalog.unnest(a.attacl)::pg_catalog.text \
           FROM pg_catalog.pg_attribute a \
           WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND NOT a.attisdropped) p \
         ORDER BY 1",
        &[DatumWithOid::from(relid)],
        |r| Ok(r.get::<String>(1)?.unwrap_or_default()),
    )
}
