//! Stream tables over stream tables (spec/stream-tables.md §7): what a stream table read as a
//! source stores as its identity, the graph the catalog's `sources` arrays form, and the
//! checks that keep it a DAG whose readers trust what they read.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;

use crate::errors;
use crate::spi;

/// What the catalog records of a stream table that another reads.
pub struct Upstream {
    /// Its qualified name.
    pub name: String,
    /// The domain of its rows' identity (`identity_domain`).
    pub domain: String,
    /// Whether no two of its rows share an identity.
    pub unique: bool,
    /// Its worst-case identity length (`None`: unbounded).
    pub max_len: Option<usize>,
    /// The row identity and probe versions it records.
    pub versions: (i16, i16),
}

/// The catalog's facts of `relid` when it is a stream table.
pub fn upstream(relid: pg_sys::Oid) -> Option<Upstream> {
    crate::catalog::as_extension(|| {
        spi::rows(
            "SELECT pgt_name, identity_domain, identity_unique, max_identity_bytes, \
           row_identity_version, row_probe_version \
         FROM pgtrickle.pgt_stream_tables WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[DatumWithOid::from(relid)],
            |r| {
                Ok(Upstream {
                    name: r.get::<String>(1)?.unwrap_or_default(),
                    domain: r.get::<String>(2)?.unwrap_or_default(),
                    unique: r.get::<bool>(3)?.unwrap_or(false),
                    max_len: r.get::<i32>(4)?.and_then(|n| usize::try_from(n).ok()),
                    versions: (r.get::<i16>(5)?.unwrap_or(0), r.get::<i16>(6)?.unwrap_or(0)),
                })
            },
        )
        .pop()
    })
}

/// Refuses an upstream whose rows were written under other identity versions than this
/// library's (spec/stream-tables.md §7: every reader refuses them, as it refuses a buffer of
/// another version).
pub fn check_versions(function: &str, upstream: &Upstream) {
    if upstream.versions != (2, 1) {
        errors::invalid_buffer(
            function,
            &format!(
                "{} records row identity version {} and probe version {}; this library reads \
                 2 and 1: rebuild it before a stream table reads it",
                upstream.name, upstream.versions.0, upstream.versions.1
            ),
        );
    }
}

/// Refuses a refresh of a stream table over `sources` while one of them that is a stream
/// table records other identity versions.
pub fn check_upstreams(function: &str, sources: &[pg_sys::Oid]) {
    for &source in sources {
        if let Some(upstream) = upstream(source) {
            check_versions(function, &upstream);
        }
    }
}

/// The stream tables that read `relid` directly, by name (as `relation_name` gives it).
pub fn dependents(relid: pg_sys::Oid) -> Vec<String> {
    let readers: Vec<pg_sys::Oid> = crate::catalog::as_extension(|| {
        spi::rows(
            "SELECT pgt_relid FROM pgtrickle.pgt_stream_tables \
             WHERE $1 OPERATOR(pg_catalog.=) ANY (sources)",
            &[DatumWithOid::from(relid)],
            |r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid)),
        )
    });
    let mut names: Vec<String> = readers
        .into_iter()
        .map(crate::catalog::relation_name)
        .collect();
    names.sort();
    names
}

/// Refuses to `what` (drop, replace) the stream table `name` while others read it, naming
/// them (`dependent_objects_still_exist`, as `DROP TABLE` without `CASCADE`).
pub fn refuse_with_dependents(function: &str, relid: pg_sys::Oid, name: &str, what: &str) {
    let names = dependents(relid);
    if names.is_empty() {
        return;
    }
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST,
        format!(
            "{function}: cannot {what} {name}: the stream table{} {} read{} it",
            if names.len() == 1 { "" } else { "s" },
            names.join(", "),
            if names.len() == 1 { "s" } else { "" },
        ),
        "drop them first (drop_stream_table(name, cascade => true) drops a stream table and \
         every stream table reading it)"
    );
}

/// The stream tables reading `relid`, directly or through others, in an order that drops
/// every reader before what it reads (the deepest first; `relid` itself not included).
pub fn dependents_deepest_first(relid: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    crate::catalog::as_extension(|| dependents_deepest_first_read(relid))
}

fn dependents_deepest_first_read(relid: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    spi::rows(
        "WITH RECURSIVE down(relid, depth) AS ( \
           SELECT t.pgt_relid, 1 FROM pgtrickle.pgt_stream_tables t \
           WHERE $1 OPERATOR(pg_catalog.=) ANY (t.sources) \
           UNION ALL \
           SELECT t.pgt_relid, d.depth OPERATOR(pg_catalog.+) 1 \
           FROM pgtrickle.pgt_stream_tables t JOIN down d \
             ON d.relid OPERATOR(pg_catalog.=) ANY (t.sources) \
           WHERE d.depth OPERATOR(pg_catalog.<) 1000) \
         SELECT relid FROM down GROUP BY relid \
         ORDER BY pg_catalog.max(depth) DESC, relid",
        &[DatumWithOid::from(relid)],
        |r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid)),
    )
}

/// How many stream tables deep the stream table `relid` is: 1 over tables only, else one more
/// than the deepest stream table it reads (`None`: not in the catalog). A reader is always
/// deeper than what it reads, and a stream table's depth never changes while it exists (what
/// it reads cannot be replaced or dropped under it, §7).
pub fn depth(relid: pg_sys::Oid) -> Option<u32> {
    crate::catalog::as_extension(|| depth_read(relid))
}

fn depth_read(relid: pg_sys::Oid) -> Option<u32> {
    spi::one::<i32>(
        &format!(
            "SELECT {}",
            depth_sql(
                "(SELECT t.sources FROM pgtrickle.pgt_stream_tables t \
                  WHERE t.pgt_relid OPERATOR(pg_catalog.=) $1)"
            )
        ),
        &[DatumWithOid::from(relid)],
    )
    .and_then(|d| u32::try_from(d).ok())
}

/// The SQL (an `int4` scalar subquery) of the [`depth`] of a stream table reading the
/// relations of the `oid[]` expression `sources`.
pub fn depth_sql(sources: &str) -> String {
    format!(
        "(WITH RECURSIVE up(relid, depth) AS ( \
           SELECT s, 1 FROM pg_catalog.unnest({sources}) AS s \
           UNION ALL \
           SELECT s, up.depth OPERATOR(pg_catalog.+) 1 \
           FROM up JOIN pgtrickle.pgt_stream_tables t \
             ON t.pgt_relid OPERATOR(pg_catalog.=) up.relid \
           CROSS JOIN LATERAL pg_catalog.unnest(t.sources) AS s \
           WHERE up.depth OPERATOR(pg_catalog.<) 1000) \
         SELECT pg_catalog.max(up.depth) FROM up)"
    )
}

/// Refuses a definition of the stream table `relid` (`name`) that reads `sources` when it
/// would read itself, directly or through the stream tables it reads: the graph stays a DAG.
pub fn refuse_cycle(function: &str, relid: pg_sys::Oid, name: &str, sources: &[pg_sys::Oid]) {
    let path: Option<String> = crate::catalog::as_extension(|| cycle_path(relid, sources));
    if let Some(path) = path {
        errors::refused(
            function,
            "42P17",
            &format!(
                "{name} would read itself ({name} reads {path}): stream tables form a graph \
                 without cycles"
            ),
        );
    }
}

/// The path by which stream table `relid` would read itself through `sources` (`None`: it
/// would not).
fn cycle_path(relid: pg_sys::Oid, sources: &[pg_sys::Oid]) -> Option<String> {
    spi::one(
        "WITH RECURSIVE up(relid, path) AS ( \
           SELECT s, ARRAY[s] FROM pg_catalog.unnest($2::pg_catalog.oid[]) AS s \
           UNION ALL \
           SELECT u, up.path OPERATOR(pg_catalog.||) u \
           FROM up JOIN pgtrickle.pgt_stream_tables t \
             ON t.pgt_relid OPERATOR(pg_catalog.=) up.relid \
           CROSS JOIN LATERAL pg_catalog.unnest(t.sources) AS u \
           WHERE up.relid OPERATOR(pg_catalog.<>) $1 \
             AND pg_catalog.array_length(up.path, 1) OPERATOR(pg_catalog.<) 1000) \
         SELECT pg_catalog.array_to_string(ARRAY( \
           SELECT pg_catalog.format('%s', p::pg_catalog.regclass) \
           FROM pg_catalog.unnest(path) WITH ORDINALITY AS x(p, n) ORDER BY n), ' reads ') \
         FROM up WHERE relid OPERATOR(pg_catalog.=) $1 LIMIT 1",
        &[
            DatumWithOid::from(relid),
            DatumWithOid::from(sources.to_vec()),
        ],
    )
}
