//! Identity schema messages (spec/identity-messages.md, format 3): a table's identity schema
//! as the JSON a WAL consumer reads, and what the event triggers write: a row per published
//! table in `pgtrickle.identity_schemas`, a table only the extension's owner may write, whose
//! changes the WAL carries at the DDL's position. The format and the key choice are the
//! registry's (`rowid_registry::schema_message`, `choose_scan_key`); this module reads the
//! catalog and writes that table.

use pgrx::pg_sys;
use rowid_codec::Domain;
use rowid_registry::schema_message::{
    IDENTITY_TABLE, IdentityDef, Refusal, RelationSchema, ReplicaIdentity, SchemaColumn,
    SchemaMessage,
};
use rowid_registry::sql::QualifiedName;
use rowid_registry::{Property, Rejection, choose_scan_key, image_shape, resolve_schema};

use crate::catalog::{
    all_columns, index_candidates, index_oid, leaves_with_other_replica_identity,
    published_columns, relation_facts, server_context,
};
use crate::errors;
use crate::spi;

const SCHEMA_FN: &str = "pgtrickle.identity_schema";

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
        .map(|c| SchemaColumn {
            attnum: c.attnum,
            shape: image_shape(&c.ty),
            name: c.name,
            type_oid: c.type_oid,
            type_name: Some(c.type_name),
            not_null: c.not_null,
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
    RelationSchema {
        relid: u32::from(rel),
        namespace: facts.namespace,
        relname: facts.relname,
        replica_identity,
        columns,
        primary_key,
        identity,
    }
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
/// `pgtrickle.identity_schemas`, where it differs from the row there (an INSERT or UPDATE the
/// WAL carries at this position); returns how many rows were written. Runs as the caller,
/// which must be allowed to write that table: only the extension's owner is (the event
/// triggers' functions are SECURITY DEFINER SET search_path = pg_catalog, pg_temp).
pub fn write_schemas(relids: &[pg_sys::Oid]) -> i32 {
    let (schema, table) = IDENTITY_TABLE;
    let upsert = format!(
        "INSERT INTO {t} AS s (relid, key_index, schema) VALUES ($1, $2, $3) \
         ON CONFLICT (relid) DO UPDATE SET key_index = EXCLUDED.key_index, \
           schema = EXCLUDED.schema \
         WHERE s.schema OPERATOR(pg_catalog.<>) EXCLUDED.schema \
            OR COALESCE(s.key_index, 0) \
               OPERATOR(pg_catalog.<>) COALESCE(EXCLUDED.key_index, 0) \
         RETURNING 1",
        t = QualifiedName::new(schema, table).quoted()
    );
    let mut written = 0;
    let mut seen = Vec::with_capacity(relids.len());
    for &rel in relids {
        if seen.contains(&rel) || relation_facts(rel).is_none() {
            continue;
        }
        seen.push(rel);
        let s = relation_schema(rel);
        let index = key_index(rel, &s);
        let json = SchemaMessage::Schema(s).to_json().to_string();
        let wrote = spi::rows_mut(&upsert, &[rel.into(), index.into(), json.as_str().into()]);
        written += wrote as i32;
    }
    written
}
