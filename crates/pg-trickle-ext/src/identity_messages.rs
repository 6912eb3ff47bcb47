//! Identity schema messages (spec/identity-messages.md, format 8): a table's identity schema
//! as the JSON a WAL consumer reads, and what the event triggers write: a row per published
//! table in `pgtrickle.identity_schemas`, a table only the extension's owner may write, whose
//! changes the WAL carries at the DDL's position. The format and the key choice are the
//! registry's (`rowid_registry::schema_message`, `choose_scan_key`); this module reads the
//! catalog and writes that table.

use std::sync::Mutex;

use pgrx::pg_sys;
use rowid_codec::Domain;
use rowid_registry::schema_message::{
    EnumLabels, IDENTITY_TABLE, IdentityDef, Refusal, RelationSchema, ReplicaIdentity, Rewrite,
    SchemaColumn, SchemaMessage, StoredIdentity, missing_from_array_send,
};
use rowid_registry::sql::{QualifiedName, ROW_ID};
use rowid_registry::{Property, Rejection, choose_scan_key, image_shape, resolve_schema};

use crate::catalog::{
    all_columns, collation, index_candidates, index_oid, leaves_with_other_replica_identity,
    published_columns, relation_facts, server_context, type_ref,
};
use crate::errors;
use crate::spi;

const SCHEMA_FN: &str = "pgtrickle.identity_schema";

/// `pg_event_trigger_table_rewrite_reason()` bits that give existing rows new values:
/// `AT_REWRITE_DEFAULT_VAL` (a volatile default) and `AT_REWRITE_COLUMN_REWRITE` (`ALTER
/// COLUMN ... TYPE`, with or without `USING`). Persistence (1) and access method (8)
/// rewrites copy every value as it is.
const VALUE_REWRITES: i32 = 2 | 4;

/// The tables a DDL of this backend's current transaction rewrote with new values: the
/// transaction's full top-level id and their OIDs. Only [`note_rewrite`] adds to it (called by
/// the extension's event trigger function, which runs as the extension's owner with its
/// search path pinned; EXECUTE revoked from PUBLIC); nothing
/// removes a note before the transaction ends, so a function running during the rewrite
/// (a volatile default) cannot take one back.
static REWRITES: Mutex<(u64, Vec<u32>)> = Mutex::new((0, Vec::new()));

/// Whether one of the event triggers named `$1` (a `text[]`) exists for the event `$2` and
/// fires in this session: enabled for the current `session_replication_role` (PostgreSQL's
/// rule for event triggers: `A` always, `O` unless the role is `replica`, `R` only then).
const EVENT_TRIGGER_FIRES: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger \
     WHERE evtname OPERATOR(pg_catalog.=) ANY ($1) \
       AND evtevent OPERATOR(pg_catalog.=) $2 \
       AND (evtenabled OPERATOR(pg_catalog.=) 'A' \
            OR (evtenabled OPERATOR(pg_catalog.=) 'O' \
                AND pg_catalog.current_setting('session_replication_role') \
                    OPERATOR(pg_catalog.<>) 'replica') \
            OR (evtenabled OPERATOR(pg_catalog.=) 'R' \
                AND pg_catalog.current_setting('session_replication_role') \
                    OPERATOR(pg_catalog.=) 'replica')))";

/// Whether one of the extension's event triggers `names` fires on `event` in this session.
fn event_trigger_fires(names: &[&str], event: &str) -> bool {
    let names: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
    spi::one::<bool>(EVENT_TRIGGER_FIRES, &[names.into(), event.into()]).unwrap_or(false)
}

/// Whether the extension's DDL event trigger writes identity schemas in this session.
pub fn messages_enabled() -> bool {
    event_trigger_fires(&["pgtrickle_identity_ddl"], "ddl_command_end")
}

/// The current transaction's full top-level id (assigned if it had none: a DDL has one).
fn top_xid() -> u64 {
    // SAFETY: called inside a transaction (an event trigger or a SQL function); assigns a
    // transaction id if none was assigned, as any write would.
    unsafe { pg_sys::GetTopFullTransactionId() }.value
}

/// Notes that `rel` is rewritten in the current transaction for `reason`.
pub fn note_rewrite(rel: pg_sys::Oid, reason: i32) {
    if reason & VALUE_REWRITES == 0 {
        return;
    }
    let xid = top_xid();
    let mut notes = REWRITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if notes.0 != xid {
        *notes = (xid, Vec::new());
    }
    let rel = u32::from(rel);
    if !notes.1.contains(&rel) {
        notes.1.push(rel);
    }
}

/// `rewritten` of `rel`'s message: the current transaction when one of its DDL rewrote the
/// table with new values; unknown for a partitioned table (its leaves are rewritten, not it)
/// or when the `table_rewrite` event trigger does not fire in this session (no note could
/// have been taken).
fn rewritten(rel: pg_sys::Oid, kind: u8) -> Rewrite {
    if kind == b'p'
        || !event_trigger_fires(
            &["pgtrickle_identity_rewrite", "pgtrickle_capture_rewrite"],
            "table_rewrite",
        )
    {
        return Rewrite::Unknown;
    }
    let notes = REWRITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: reads the current transaction's full top-level id, if any; assigns nothing. A
    // transaction without one has written nothing, so rewritten nothing.
    let xid = unsafe { pg_sys::GetTopFullTransactionIdIfAny() }.value;
    if xid != 0 && notes.0 == xid && notes.1.contains(&u32::from(rel)) {
        Rewrite::By(xid)
    } else {
        Rewrite::Kept
    }
}

/// The identity schema of table `rel` as of the current snapshot: the key the registry
/// chooses (the same rule as `validate_source_identity`), else the keyless identity over
/// every column, else the rejection.
pub fn relation_schema(rel: pg_sys::Oid) -> RelationSchema {
    let Some(facts) = relation_facts(rel) else {
        errors::invalid_argument(SCHEMA_FN, format!("OID {} is not a table", u32::from(rel)));
    };
    let replica_identity =
        ReplicaIdentity::from_byte(facts.replica_identity).unwrap_or(ReplicaIdentity::Default);
    let columns = published_columns(rel)
        .into_iter()
        .map(|c| {
            let missing = c.missing.map(|array| {
                missing_from_array_send(&array).unwrap_or_else(|why| {
                    errors::invalid_argument(
                        SCHEMA_FN,
                        format!(
                            "column {} of {}.{}: {why}",
                            c.name, facts.namespace, facts.relname
                        ),
                    )
                })
            });
            SchemaColumn {
                attnum: c.attnum,
                shape: image_shape(&c.ty),
                name: c.name,
                type_oid: c.type_oid,
                type_name: Some(c.type_name),
                not_null: c.not_null,
                missing,
                missing_without_send_form: c.missing_without_send_form,
            }
        })
        .collect();
    let ctx = server_context();
    let candidates = index_candidates(rel);
    let primary_key = candidates
        .iter()
        .find(|c| c.primary)
        .map(|c| c.columns.iter().map(|k| k.name.clone()).collect())
        .unwrap_or_default();
    // A partitioned table's changes are published under its own OID only with
    // publish_via_partition_root, carrying old rows as each leaf logged them: a leaf whose
    // replica identity setting differs from the root's would send old rows the root's
    // setting does not describe.
    let other_leaves = if facts.kind == b'p' {
        leaves_with_other_replica_identity(rel, facts.replica_identity)
    } else {
        Vec::new()
    };
    let identity = if !other_leaves.is_empty() {
        Err(Refusal {
            sqlstate: "0A000".into(),
            message: format!(
                "partitions {} have another REPLICA IDENTITY than the partitioned table \
                 ({}): changes published via the partition root would carry old rows the \
                 root's setting does not describe; give every partition the root's setting",
                other_leaves.join(", "),
                replica_identity.name()
            ),
        })
    } else {
        match choose_scan_key(&candidates, &ctx) {
            Ok(key) => Ok(IdentityDef::scan_key(&key)),
            Err(_) => match resolve_schema(Domain::KeylessRow, &all_columns(rel), &ctx) {
                Ok(schema) => Ok(IdentityDef::keyless(&schema)),
                Err(rejections) => Err(rejections.0.first().map_or_else(
                    || {
                        Refusal::from(&Rejection::general(
                            Property::NoEligibleSourceKey,
                            "no fields",
                        ))
                    },
                    Refusal::from,
                )),
            },
        }
    };
    let identity = identity.map(|mut def| {
        def.enums = identity_enums(&def);
        def
    });
    RelationSchema {
        relid: u32::from(rel),
        namespace: facts.namespace,
        relname: facts.relname,
        replica_identity,
        columns,
        primary_key,
        identity,
        rewritten: rewritten(rel, facts.kind),
        stored: stored_identity(rel),
    }
}

/// Format 8's `stored`: the identity a stream table's rows carry in `__pgt_row_id`, as the
/// extension's catalog records it (`None` for a relation that is no stream table's storage,
/// whatever its columns are called).
fn stored_identity(rel: pg_sys::Oid) -> Option<Box<StoredIdentity>> {
    crate::catalog::as_extension(|| {
        spi::rows(
            "SELECT identity_domain, identity_unique, max_identity_bytes \
             FROM pgtrickle.pgt_stream_tables WHERE pgt_relid OPERATOR(pg_catalog.=) $1",
            &[rel.into()],
            |row| {
                Ok((
                    row.get::<String>(1)?.unwrap_or_default(),
                    row.get::<bool>(2)?.unwrap_or(false),
                    row.get::<i32>(3)?,
                ))
            },
        )
    })
    .into_iter()
    .next()
    .map(|(domain, unique, max_len)| {
        let domain = Domain::from_name(&domain).unwrap_or_else(|| {
            errors::invalid_argument(
                SCHEMA_FN,
                format!(
                    "stream table OID {}: its catalog row names no domain ({domain:?})",
                    u32::from(rel)
                ),
            )
        });
        Box::new(StoredIdentity {
            column: ROW_ID.to_string(),
            domain,
            unique,
            max_len: max_len.and_then(|n| usize::try_from(n).ok()),
        })
    })
}

/// Every enum type `def`'s fields contain at any depth, with its labels in `enumsortorder`
/// order, sorted by type name (format 6's `identity.enums`): an enum field's identity bytes
/// are its label, so a label renamed changes what the identities are made of.
fn identity_enums(def: &IdentityDef) -> Vec<EnumLabels> {
    let mut found: Vec<(u32, String)> = Vec::new();
    for field in &def.fields {
        for e in type_ref(field.type_oid.into(), &collation).enums() {
            if !found.contains(&e) {
                found.push(e);
            }
        }
    }
    // The type named as the columns' `type` is: format_type under the locked search path.
    let mut enums: Vec<EnumLabels> = found
        .into_iter()
        .flat_map(|(oid, _)| {
            spi::rows(
                "SELECT pg_catalog.format_type($1, NULL), \
                   COALESCE((SELECT pg_catalog.array_agg(e.enumlabel::pg_catalog.text \
                              ORDER BY e.enumsortorder) \
                            FROM pg_catalog.pg_enum e \
                            WHERE e.enumtypid OPERATOR(pg_catalog.=) $1), '{}')",
                &[pg_sys::Oid::from(oid).into()],
                |row| {
                    Ok(EnumLabels {
                        type_name: row.get::<String>(1)?.unwrap_or_default(),
                        labels: row.get::<Vec<String>>(2)?.unwrap_or_default(),
                    })
                },
            )
        })
        .collect();
    enums.sort();
    enums
}

/// The index a relation's identity comes from (`None`: keyless, or no identity).
pub fn key_index(rel: pg_sys::Oid, schema: &RelationSchema) -> Option<pg_sys::Oid> {
    match &schema.identity {
        Ok(def) => def.index.as_deref().and_then(|name| index_oid(rel, name)),
        Err(_) => None,
    }
}

/// The message for `rel`, as JSON text.
pub fn schema_json(rel: pg_sys::Oid) -> String {
    SchemaMessage::Schema(relation_schema(rel))
        .to_json()
        .to_string()
}

/// Writes the identity schema of every table of `relids` that exists into
/// `pgtrickle.identity_schemas`, where it differs from the row there or the transaction
/// rewrote the table's values (an INSERT or UPDATE the WAL carries at this position: a
/// rewrite that keeps the shape, `ALTER COLUMN v TYPE int4 USING v + 1` of an `int4`, still
/// reaches every consumer); returns how many rows were written. Runs as the caller,
/// which must be allowed to write that table: only the extension's owner is (the event
/// triggers' functions are SECURITY DEFINER SET search_path = pg_catalog, pg_temp).
pub fn write_schemas(relids: &[pg_sys::Oid]) -> i32 {
    write_schemas_locking(relids, &[])
}

/// [`write_schemas`], each table locked `SHARE UPDATE EXCLUSIVE` (which no writer waits
/// for, and every DDL that can change an identity does) before the schema that is written
/// is read, under a snapshot taken then (issue 36 item 12). A DDL that did not lock the table
/// itself (`ALTER PUBLICATION ... ADD TABLES IN SCHEMA`, `FOR ALL TABLES`, a changed type)
/// could otherwise write the schema of before a concurrent key change that commits after its
/// read, while the key change's own event trigger saw the table unpublished or was
/// overwritten. A table whose row already says its schema takes no lock (nothing is written;
/// a concurrent change of a published table writes its own row), except those of
/// `publishing`, the tables the DDL may publish now: a row there may be left from an earlier
/// publication, unseen by the concurrent change.
fn write_schemas_locking(relids: &[pg_sys::Oid], publishing: &[pg_sys::Oid]) -> i32 {
    let (schema, table) = IDENTITY_TABLE;
    let t = QualifiedName::new(schema, table).quoted();
    let upsert = format!(
        "INSERT INTO {t} AS s (relid, key_index, schema) VALUES ($1, $2, $3) \
         ON CONFLICT (relid) DO UPDATE SET key_index = EXCLUDED.key_index, \
           schema = EXCLUDED.schema \
         WHERE s.schema OPERATOR(pg_catalog.<>) EXCLUDED.schema \
            OR COALESCE(s.key_index, 0) \
               OPERATOR(pg_catalog.<>) COALESCE(EXCLUDED.key_index, 0) \
            OR $4 \
         RETURNING 1"
    );
    let row_is = format!(
        "SELECT EXISTS (SELECT 1 FROM {t} s WHERE s.relid OPERATOR(pg_catalog.=) $1 \
           AND s.schema OPERATOR(pg_catalog.=) $2 \
           AND COALESCE(s.key_index, 0) OPERATOR(pg_catalog.=) COALESCE($3, 0))"
    );
    let lock = |rel: pg_sys::Oid| {
        // SAFETY: a lock on a relation OID (one that no longer exists locks nothing that
        // matters), held until the transaction ends.
        unsafe {
            pg_sys::LockRelationOid(rel, pg_sys::ShareUpdateExclusiveLock as pg_sys::LOCKMODE);
        }
    };
    let mut written = 0;
    let mut seen = Vec::with_capacity(relids.len());
    for &rel in relids {
        if seen.contains(&rel) {
            continue;
        }
        seen.push(rel);
        let mut locked = publishing.contains(&rel);
        if locked {
            lock(rel);
        }
        // Read, and when the row must change and the table was not locked, lock it and read
        // again: at most two turns.
        let read = || {
            spi::with_latest_snapshot(|| {
                relation_facts(rel).map(|_| {
                    let s = relation_schema(rel);
                    let index = key_index(rel, &s);
                    let rewritten = matches!(s.rewritten, Rewrite::By(_));
                    let json = SchemaMessage::Schema(s).to_json().to_string();
                    let same = spi::one::<bool>(
                        &row_is,
                        &[rel.into(), json.as_str().into(), index.into()],
                    )
                    .unwrap_or(false);
                    (json, index, rewritten, same)
                })
            })
        };
        while let Some((json, index, rewritten, same)) = read() {
            if same && !rewritten {
                break;
            }
            if !locked {
                lock(rel);
                locked = true;
                continue;
            }
            let wrote = spi::rows_mut(
                &upsert,
                &[
                    rel.into(),
                    index.into(),
                    json.as_str().into(),
                    rewritten.into(),
                ],
            );
            written += wrote as i32;
            break;
        }
    }
    written
}

/// The tables of `candidates` that a publication carries, and every published table without
/// a row in `pgtrickle.identity_schemas` yet (created under `FOR ALL TABLES` or `IN SCHEMA`,
/// a partition detached under `publish_via_partition_root`, ...), read under a snapshot
/// taken now: a publication that committed while the DDL waited for its table's lock counts
/// (a REPEATABLE READ transaction's own snapshot may predate it). Then [`write_schemas`] of
/// them, locking those of `publishing` (the tables the DDL may publish now) before their
/// schema is read; returns how many rows were written.
pub fn write_published_schemas(candidates: &[pg_sys::Oid], publishing: &[pg_sys::Oid]) -> i32 {
    let (schema, table) = IDENTITY_TABLE;
    let query = format!(
        "WITH published(relid) AS ( \
           SELECT DISTINCT r.relid FROM pg_catalog.pg_publication p \
           CROSS JOIN LATERAL pgtrickle.publication_relids(p.oid) r(relid)) \
         SELECT p.relid FROM published p \
         WHERE p.relid OPERATOR(pg_catalog.=) ANY ($1) \
         UNION \
         SELECT p.relid FROM published p \
         WHERE NOT EXISTS (SELECT 1 FROM {t} s WHERE s.relid OPERATOR(pg_catalog.=) p.relid) \
         ORDER BY 1",
        t = QualifiedName::new(schema, table).quoted()
    );
    let relids = spi::with_latest_snapshot(|| {
        spi::rows(&query, &[candidates.to_vec().into()], |row| {
            Ok(row.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid))
        })
    });
    write_schemas_locking(&relids, publishing)
}
