//! Identity schema messages (spec/identity-messages.md): a table's identity schema as the
//! JSON a WAL consumer reads, and the event trigger that writes it into the WAL with a
//! transactional logical message at the end of every DDL that can change it. The format and
//! the key choice are the registry's (`rowid_registry::schema_message`, `choose_scan_key`);
//! this module only reads the catalog.

use pgrx::pg_sys;
use rowid_codec::Domain;
use rowid_registry::schema_message::{
    IdentityDef, Refusal, RelationSchema, ReplicaIdentity, SchemaColumn, SchemaMessage,
};
use rowid_registry::{Property, Rejection, choose_scan_key, resolve_schema};

use crate::catalog::{
    all_columns, index_candidates, published_columns, relation_facts, server_context,
};
use crate::errors;

const SCHEMA_FN: &str = "pgtrickle.identity_schema";

/// The identity schema of table `rel` as of the current snapshot: the key the registry
/// chooses (the same rule as `validate_source_identity`), else the keyless identity over
/// every column, else the rejection.
pub fn relation_schema(rel: pg_sys::Oid) -> RelationSchema {
    let Some((namespace, relname, ri)) = relation_facts(rel) else {
        errors::invalid_argument(SCHEMA_FN, format!("OID {} is not a table", u32::from(rel)));
    };
    let replica_identity = ReplicaIdentity::from_byte(ri).unwrap_or(ReplicaIdentity::Default);
    let columns = published_columns(rel)
        .into_iter()
        .map(|(attnum, name, type_oid, not_null)| SchemaColumn {
            attnum,
            name,
            type_oid,
            not_null,
        })
        .collect();
    let ctx = server_context();
    let candidates = index_candidates(rel);
    let primary_key = candidates
        .iter()
        .find(|c| c.primary)
        .map(|c| c.columns.iter().map(|k| k.name.clone()).collect())
        .unwrap_or_default();
    let identity = match choose_scan_key(&candidates, &ctx) {
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
    };
    RelationSchema {
        relid: u32::from(rel),
        namespace,
        relname,
        replica_identity,
        columns,
        primary_key,
        identity,
    }
}

/// The message for `rel`, as JSON text.
pub fn schema_json(rel: pg_sys::Oid) -> String {
    SchemaMessage::Schema(relation_schema(rel))
        .to_json()
        .to_string()
}

/// The message saying a table was dropped, as JSON text.
pub fn dropped_json(relid: pg_sys::Oid, namespace: &str, relname: &str) -> String {
    SchemaMessage::Dropped {
        relid: u32::from(relid),
        namespace: namespace.to_string(),
        relname: relname.to_string(),
    }
    .to_json()
    .to_string()
}
