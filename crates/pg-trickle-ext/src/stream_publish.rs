//! `pgtrickle.publish_stream_table` (proposal §11, spec/stream-tables.md §9): a stream table
//! added to a publication with every column of its storage, `__pgt_row_id` among them (a
//! column list for a keyed storage, none for one whose replica identity is FULL), its
//! replica identity what the proposal requires (set at create; set again here when someone
//! changed it). A subscriber stores `__pgt_row_id` in a plain `bytea` column; the probe is an
//! index expression, never a column, so no publication carries it.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use rowid_registry::IndexClass;
use rowid_registry::sql::{QualifiedName, replica_identity_ddl};

use crate::guard::as_owner;
use crate::{spi, stream_table};

const PUBLISH: &str = "pgtrickle.publish_stream_table";

/// Adds the stream table `name` to `publication` (created `FOR TABLE` it when there is no
/// such publication), with the column list of its storage, as the caller (who must own the
/// stream table, and the publication when it exists: PostgreSQL's checks).
pub fn publish(name: &str, publication: &str) {
    let relid = stream_table::stream_table(PUBLISH, name);
    let owner = stream_table::owner_checked(PUBLISH, relid);
    let table = crate::catalog::relation_name(relid);
    if let Some(statement) = replica_identity_repair(relid) {
        as_owner(owner, || spi::run(&statement, &[]));
    }
    // A keyed storage's column list names every column. A storage whose replica identity
    // is FULL is added without one, which publishes every column too: PostgreSQL 15 and 16
    // refuse the UPDATE and DELETE of a FULL table whose publication has any column list.
    let columns = crate::catalog::as_extension(|| {
        spi::one::<String>(
            "SELECT CASE WHEN t.index_class OPERATOR(pg_catalog.=) 'direct_unique' THEN \
           ' (' OPERATOR(pg_catalog.||) ( \
             SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' \
                      ORDER BY a.attnum) \
             FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) $1 \
               AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
               AND a.attgenerated OPERATOR(pg_catalog.=) '') OPERATOR(pg_catalog.||) ')' \
           ELSE '' END \
         FROM pgtrickle.pgt_stream_tables t WHERE t.pgt_relid OPERATOR(pg_catalog.=) $1",
            &[DatumWithOid::from(relid)],
        )
    })
    .unwrap_or_default();
    let quoted = spi::one::<String>(
        "SELECT pg_catalog.quote_ident($1)",
        &[DatumWithOid::from(publication)],
    )
    .unwrap_or_default();
    let existing = spi::rows(
        // (FOR ALL TABLES, a member publishing fewer columns or rows than it should, a
        // member)
        "SELECT p.puballtables, EXISTS (SELECT FROM pg_catalog.pg_publication_rel r \
           WHERE r.prpubid OPERATOR(pg_catalog.=) p.oid \
             AND r.prrelid OPERATOR(pg_catalog.=) $2 \
             AND (r.prqual IS NOT NULL OR (r.prattrs IS NOT NULL AND ( \
               $3 OPERATOR(pg_catalog.=) '' OR \
               pg_catalog.array_length(r.prattrs::pg_catalog.int2[], 1) \
                 OPERATOR(pg_catalog.<>) (SELECT pg_catalog.count(*) \
                   FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) $2 \
                     AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped))))), \
           EXISTS (SELECT FROM pg_catalog.pg_publication_rel r \
           WHERE r.prpubid OPERATOR(pg_catalog.=) p.oid \
             AND r.prrelid OPERATOR(pg_catalog.=) $2) \
         FROM pg_catalog.pg_publication p WHERE p.pubname OPERATOR(pg_catalog.=) $1",
        &[
            DatumWithOid::from(publication),
            DatumWithOid::from(relid),
            DatumWithOid::from(columns.as_str()),
        ],
        |r| {
            Ok((
                r.get::<bool>(1)?.unwrap_or(false),
                r.get::<bool>(2)?.unwrap_or(false),
                r.get::<bool>(3)?.unwrap_or(false),
            ))
        },
    )
    .pop();
    match existing {
        None => spi::run(
            &format!("CREATE PUBLICATION {quoted} FOR TABLE {table}{columns}"),
            &[],
        ),
        // Every table, every column: nothing to add.
        Some((true, _, _)) => pgrx::notice!(
            "{PUBLISH}: publication {quoted} is FOR ALL TABLES: it publishes {table} already, \
             with every column"
        ),
        // A member with every column and row already.
        Some((false, false, true)) => {}
        // A member publishing fewer: its column list and row filter replaced.
        Some((false, true, _)) => spi::run(
            &format!(
                "ALTER PUBLICATION {quoted} DROP TABLE {table}; \
                 ALTER PUBLICATION {quoted} ADD TABLE {table}{columns}"
            ),
            &[],
        ),
        Some((false, false, false)) => spi::run(
            &format!("ALTER PUBLICATION {quoted} ADD TABLE {table}{columns}"),
            &[],
        ),
    }
}

/// The statement that gives storage `relid` the replica identity its index class requires
/// ([`replica_identity_ddl`], what `create_stream_table` ran), when it has another.
fn replica_identity_repair(relid: pg_sys::Oid) -> Option<String> {
    // (its class, its replica identity, the name of its unique index on __pgt_row_id)
    let (class, replident, index) = crate::catalog::as_extension(|| {
        spi::rows(
            "SELECT t.index_class, c.relreplident::pg_catalog.text, ( \
           SELECT ic.relname::pg_catalog.text FROM pg_catalog.pg_index i \
           JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) i.indexrelid \
           JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid \
            AND a.attname OPERATOR(pg_catalog.=) '__pgt_row_id' \
           WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisunique \
             AND i.indnatts OPERATOR(pg_catalog.=) 1 AND i.indpred IS NULL \
             AND i.indexprs IS NULL AND i.indkey[0] OPERATOR(pg_catalog.=) a.attnum \
           ORDER BY ic.relname LIMIT 1) \
         FROM pgtrickle.pgt_stream_tables t \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.pgt_relid \
         WHERE t.pgt_relid OPERATOR(pg_catalog.=) $1",
            &[DatumWithOid::from(relid)],
            |r| {
                Ok((
                    r.get::<String>(1)?.unwrap_or_default(),
                    r.get::<String>(2)?.unwrap_or_default(),
                    r.get::<String>(3)?.unwrap_or_default(),
                ))
            },
        )
    })
    .pop()?;
    // The catalog's spelling (stream_table.rs).
    let class = match class.as_str() {
        "direct_unique" => IndexClass::DirectUnique,
        "direct_non_unique" => IndexClass::DirectNonUnique,
        _ => IndexClass::ProbeExpression,
    };
    let wanted = if class == IndexClass::DirectUnique {
        "i"
    } else {
        "f"
    };
    if replident == wanted {
        return None;
    }
    let facts = crate::catalog::relation_facts(relid)?;
    Some(replica_identity_ddl(
        class,
        &index,
        &QualifiedName::new(&facts.namespace, &facts.relname),
    ))
}
