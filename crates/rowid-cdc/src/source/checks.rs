//! What is checked on the SQL connection before anything is created or streamed: the server
//! (logical decoding, a database encoding whose text the WAL carries as the SQL encoder
//! reads it, the publication), the identity schema source (the event triggers, and the one
//! table whose rows are trusted as schemas: the extension's, owned by its owner, writable by
//! nobody else, the only table of its publication), the published tables' identity schemas
//! and which of them cannot give every change an identity, and, on a restart, that the slot
//! has not moved past the state.

use std::collections::BTreeSet;

use rowid_codec::Domain;
use rowid_registry::buffer::{self, Writers};
use rowid_registry::schema_message::{
    IDENTITY_PUBLICATION, IDENTITY_TABLE, RelationSchema, ReplicaIdentity, SchemaMessage,
};
use tokio_postgres::{Client, GenericClient};

use crate::connect::conninfo::Conninfo;
use crate::connect::net::{self, Session};
use crate::error::{CdcError, setup};
use crate::lsn::Lsn;
use rowid_registry::sql::QualifiedName;

/// The SQL connection of the checks, with a locked search path.
pub async fn connect(dsn: &Conninfo) -> Result<(Client, Session), CdcError> {
    let connected = net::connect(dsn).await.map_err(|e| setup(e.message))?;
    tokio::spawn(async move {
        let _ = connected.connection.await;
    });
    connected
        .client
        .batch_execute("SET search_path = pg_catalog, pg_temp")
        .await?;
    Ok((connected.client, connected.session))
}

/// Checks that `client`'s `pgtrickle.identity_schemas` is the table the start checks
/// authenticated (`identity_table`, its OID): a reader of its rows outside the stream trusts
/// no other. `reader` names that reader in the refusal.
pub async fn trusted_identity_table(
    client: &Client,
    identity_table: u32,
    reader: &str,
) -> Result<QualifiedName, CdcError> {
    let (schema, table) = IDENTITY_TABLE;
    let name = QualifiedName::new(schema, table);
    let found: u32 = client
        .query_one(
            &format!(
                "SELECT '{}'::pg_catalog.regclass::pg_catalog.oid",
                name.quoted()
            ),
            &[],
        )
        .await?
        .get(0);
    if found != identity_table {
        return Err(setup(format!(
            "{reader}: {schema}.{table} is OID {found}, not the authenticated {identity_table}"
        )));
    }
    Ok(name)
}

/// Whether `row`, a `pgtrickle.identity_schemas.schema` value (`None`: no row), is `schema`
/// (in whatever format the row was written: [`RelationSchema::matches_written`]).
pub fn is_schema(row: Option<&str>, schema: &RelationSchema) -> bool {
    matches!(
        row.map(|t| SchemaMessage::parse(t.as_bytes())),
        Some(Ok(SchemaMessage::Schema(s))) if schema.matches_written(&s)
    )
}

/// Names the published tables some of whose changes will have no identity (but those in
/// `ignored`, the sink's own): a refusal under `--strict`, a warning otherwise.
pub fn report(
    schemas: &[RelationSchema],
    ignored: &BTreeSet<u32>,
    strict: bool,
) -> Result<(), CdcError> {
    let captured: Vec<RelationSchema> = schemas
        .iter()
        .filter(|s| !ignored.contains(&s.relid))
        .cloned()
        .collect();
    let problems = unidentified(&captured);
    if problems.is_empty() {
        return Ok(());
    }
    let list = problems.join("\n  ");
    if strict {
        return Err(setup(format!(
            "--strict: published tables whose changes would have no identity:\n  {list}"
        )));
    }
    eprintln!(
        "rowid-cdc: warning: published tables some of whose changes will be unidentified \
         events (\"op\":\"unidentified\"; --strict refuses to start):\n  {list}"
    );
    Ok(())
}

/// The server-side facts checked before anything is created or streamed; returns the OID of
/// the identity schema table.
pub async fn server(client: &impl GenericClient, publication: &str) -> Result<u32, CdcError> {
    let wal_level: String = client.query_one("SHOW wal_level", &[]).await?.get(0);
    if wal_level != "logical" {
        return Err(setup(format!(
            "wal_level is {wal_level}: logical decoding needs wal_level = logical \
             (ALTER SYSTEM SET wal_level = logical, then restart the server)"
        )));
    }
    let encoding: String = client.query_one("SHOW server_encoding", &[]).await?.get(0);
    if encoding != "UTF8" && encoding != "SQL_ASCII" {
        return Err(setup(format!(
            "the database encoding is {encoding}: text arrives from the WAL converted to UTF8, \
             while pgtrickle.encode_row_id_v2 encodes the database's own bytes, so text \
             identities would differ; rowid-cdc needs a UTF8 (or SQL_ASCII) database"
        )));
    }
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname OPERATOR(pg_catalog.=) $1",
            &[&publication],
        )
        .await?;
    if exists.is_none() {
        return Err(setup(format!(
            "publication {publication:?} does not exist in this database (CREATE PUBLICATION \
             {publication} FOR ...)"
        )));
    }
    let triggers: i64 = client
        .query_one(
            "SELECT pg_catalog.count(*) FROM pg_catalog.pg_event_trigger \
             WHERE evtname OPERATOR(pg_catalog.=) ANY (ARRAY['pgtrickle_identity_ddl', \
                   'pgtrickle_identity_drop']) \
               AND evtenabled OPERATOR(pg_catalog.<>) 'D'",
            &[],
        )
        .await?
        .get(0);
    if triggers != 2 {
        return Err(setup(
            "identity messages are not enabled: without them a key changed while changes are \
             in flight would be applied to the wrong changes. As a superuser: CREATE EXTENSION \
             IF NOT EXISTS pg_trickle_ext; SELECT pgtrickle.enable_identity_messages();",
        ));
    }
    identity_table(client).await
}

/// The identity schema table, authenticated: a member of the extension pg_trickle_ext, owned
/// by the extension's owner, nobody else may write it or make writing it run code, and it is
/// the only table of the publication that carries it.
async fn identity_table(client: &impl GenericClient) -> Result<u32, CdcError> {
    let (schema, table) = IDENTITY_TABLE;
    let name = format!("{schema}.{table}");
    let row = client
        .query_opt(
            "SELECT c.oid, e.extowner::pg_catalog.regrole::pg_catalog.text \
             FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
             JOIN pg_catalog.pg_depend d \
               ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
              AND d.objid OPERATOR(pg_catalog.=) c.oid AND d.deptype OPERATOR(pg_catalog.=) 'e' \
             JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid \
             WHERE n.nspname OPERATOR(pg_catalog.=) $1 AND c.relname OPERATOR(pg_catalog.=) $2 \
               AND e.extname OPERATOR(pg_catalog.=) 'pg_trickle_ext'",
            &[&schema, &table],
        )
        .await?;
    let Some(row) = row else {
        return Err(setup(format!(
            "{name} does not exist or does not belong to the extension pg_trickle_ext: install \
             this release of the extension (ALTER EXTENSION pg_trickle_ext UPDATE, or drop and \
             create it)"
        )));
    };
    let oid: u32 = row.get(0);
    let owner: String = row.get(1);
    let w = client.query_one(buffer::WRITERS_QUERY, &[&name]).await?;
    let writers = Writers {
        owner: w.get(0),
        kind: w.get(1),
        persistence: w.get(2),
        grants: w.get(3),
        triggers: w.get(4),
        rules: w.get(5),
        row_security: w.get(6),
        code: w.get(7),
        access_method: w.get(8),
    };
    buffer::check_writers(&name, &writers, &owner).map_err(|e| {
        setup(format!(
            "the identity schema table cannot be trusted: {e} (only the extension's event \
             triggers may write it)"
        ))
    })?;
    let published: Vec<String> = client
        .query(
            "SELECT schemaname::pg_catalog.text OPERATOR(pg_catalog.||) '.' \
                    OPERATOR(pg_catalog.||) tablename::pg_catalog.text \
             FROM pg_catalog.pg_publication_tables WHERE pubname OPERATOR(pg_catalog.=) $1",
            &[&IDENTITY_PUBLICATION],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if published != [name.clone()] {
        return Err(setup(format!(
            "publication {IDENTITY_PUBLICATION} must carry {name} and nothing else; it carries \
             [{}]",
            published.join(", ")
        )));
    }
    Ok(oid)
}

/// What of its tables' changes a publication does not carry: each a sentence naming it, with
/// the fix. Empty when it publishes every insert, update, delete and truncate of every column
/// of every row of its tables (a column list naming every column, as `publish_stream_table`
/// gives a keyed stream table, publishes every column: it is no gap while the table has no
/// other column). A replica cannot be kept equal to its sources through such a
/// publication; other consumers are told what they will not see.
pub async fn publication_gaps(
    client: &impl GenericClient,
    publication: &str,
) -> Result<Vec<String>, CdcError> {
    let row = client
        .query_one(
            "WITH r AS (SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) AS name, \
                 r.prqual IS NOT NULL AS filtered, \
                 r.prattrs IS NOT NULL AND ARRAY(SELECT pg_catalog.unnest(r.prattrs) ORDER BY 1) \
                   OPERATOR(pg_catalog.<>) ARRAY(SELECT a.attnum FROM pg_catalog.pg_attribute a \
                     WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid \
                       AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
                       AND a.attgenerated OPERATOR(pg_catalog.=) '' ORDER BY 1) AS columns \
               FROM pg_catalog.pg_publication p \
               JOIN pg_catalog.pg_publication_rel r ON r.prpubid OPERATOR(pg_catalog.=) p.oid \
               JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.prrelid \
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
               WHERE p.pubname OPERATOR(pg_catalog.=) $1) \
             SELECT p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, p.pubviaroot, \
               ARRAY(SELECT name FROM r WHERE filtered ORDER BY 1), \
               ARRAY(SELECT name FROM r WHERE columns ORDER BY 1), \
               ARRAY(SELECT pg_catalog.format('%I.%I', t.schemaname, t.tablename) \
                 FROM pg_catalog.pg_publication_tables t \
                 JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) t.schemaname \
                 JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid \
                   AND c.relname OPERATOR(pg_catalog.=) t.tablename \
                 WHERE t.pubname OPERATOR(pg_catalog.=) p.pubname \
                   AND c.relkind OPERATOR(pg_catalog.=) 'p' ORDER BY 1) \
             FROM pg_catalog.pg_publication p WHERE p.pubname OPERATOR(pg_catalog.=) $1",
            &[&publication],
        )
        .await?;
    let (insert, update, delete, truncate, via_root): (bool, bool, bool, bool, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    let (filtered, column_lists, partitioned): (Vec<String>, Vec<String>, Vec<String>) =
        (row.get(5), row.get(6), row.get(7));
    let mut gaps = Vec::new();
    let missing: Vec<&str> = [
        (insert, "insert"),
        (update, "update"),
        (delete, "delete"),
        (truncate, "truncate"),
    ]
    .iter()
    .filter(|(on, _)| !on)
    .map(|(_, op)| *op)
    .collect();
    if !missing.is_empty() {
        gaps.push(format!(
            "it does not publish {} (ALTER PUBLICATION {publication} SET (publish = 'insert, \
             update, delete, truncate'))",
            missing.join(", ")
        ));
    }
    if !filtered.is_empty() {
        gaps.push(format!(
            "it publishes {} with a row filter (WHERE ...): a row that leaves the filter is \
             never deleted, one that enters it never inserted whole (ALTER PUBLICATION \
             {publication} SET TABLE ... without the filter)",
            filtered.join(", ")
        ));
    }
    if !column_lists.is_empty() {
        gaps.push(format!(
            "it publishes only some columns of {} (a column list: ALTER PUBLICATION \
             {publication} SET TABLE ... without it)",
            column_lists.join(", ")
        ));
    }
    if via_root && !partitioned.is_empty() {
        gaps.push(format!(
            "it publishes the partitions of {} as their roots (publish_via_partition_root), \
             under which a TRUNCATE of one partition is not published at all (ALTER \
             PUBLICATION {publication} SET (publish_via_partition_root = false))",
            partitioned.join(", ")
        ));
    }
    Ok(gaps)
}

/// The published tables' identity schemas, as the connection's snapshot sees them (the
/// identity schema table itself is not a captured table).
pub async fn schemas(
    client: &impl GenericClient,
    publication: &str,
) -> Result<Vec<RelationSchema>, CdcError> {
    let rows = client
        .query(
            "SELECT pgtrickle.identity_schema(pg_catalog.format('%I.%I', schemaname, tablename)\
             ::pg_catalog.regclass) FROM pg_catalog.pg_publication_tables \
             WHERE pubname OPERATOR(pg_catalog.=) $1 \
               AND NOT (schemaname OPERATOR(pg_catalog.=) $2 \
                        AND tablename OPERATOR(pg_catalog.=) $3) \
             ORDER BY schemaname, tablename",
            &[&publication, &IDENTITY_TABLE.0, &IDENTITY_TABLE.1],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let json: String = r.get(0);
            match SchemaMessage::parse(json.as_bytes()) {
                Ok(SchemaMessage::Schema(s)) => Ok(s),
                Ok(other) => Err(setup(format!("unexpected identity message {other:?}"))),
                Err(e) => Err(setup(format!("pgtrickle.identity_schema: {e}"))),
            }
        })
        .collect()
}

/// The published tables some of whose changes will have no identity, each with which
/// changes and why, and the fix.
pub fn unidentified(schemas: &[RelationSchema]) -> Vec<String> {
    let mut out = Vec::new();
    for s in schemas {
        let name = s.qualified_name();
        match &s.identity {
            Err(r) => out.push(format!(
                "{name}: every change: no usable identity ({}): {}",
                r.sqlstate, r.message
            )),
            Ok(def) => {
                if let Some(f) = def
                    .fields
                    .iter()
                    .find(|f| !s.columns.iter().any(|c| c.name == f.column))
                {
                    out.push(format!(
                        "{name}: every change: key column {} is generated, and pgoutput does \
                         not publish generated columns",
                        f.column
                    ));
                } else if s.replica_identity == ReplicaIdentity::Nothing {
                    out.push(format!(
                        "{name}: updates and deletes: REPLICA IDENTITY NOTHING carries no old \
                         row (ALTER TABLE {name} REPLICA IDENTITY DEFAULT)"
                    ));
                } else if def.domain == Domain::KeylessRow
                    && s.replica_identity != ReplicaIdentity::Full
                {
                    out.push(format!(
                        "{name}: updates and deletes: no eligible key, and a keyless identity \
                         needs the full old row (ALTER TABLE {name} REPLICA IDENTITY FULL)"
                    ));
                }
            }
        }
    }
    out
}

/// The slot's confirmed position must not be past the state's: the server acknowledged
/// changes this consumer never made durable (someone advanced the slot, or dropped it and
/// created another under the same name).
pub fn slot_position(slot: &str, confirmed: Option<Lsn>, state_end: Lsn) -> Result<(), CdcError> {
    match confirmed {
        Some(c) if c > state_end => Err(setup(format!(
            "slot {slot:?} has confirmed position {c}, past the state's {state_end}: the \
             changes in between were acknowledged without this consumer delivering them (the \
             slot was advanced, or dropped and created again); they are gone. Start over with \
             a new state file and --create-slot, and resynchronise what consumes the output"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A schema as the extension computed it in format 5 (an identity without enums).
    fn fresh() -> RelationSchema {
        let v = json!({
            "format": 5, "event": "schema", "relid": 16385, "namespace": "public",
            "relname": "t", "replica_identity": "default",
            "columns": [
                {"attnum": 1, "name": "id", "type_oid": 20, "type": "bigint",
                 "not_null": true, "shape": "int8", "missing": null},
                {"attnum": 2, "name": "v", "type_oid": 23, "type": "integer",
                 "not_null": false, "shape": "int4", "missing": "00000005"}
            ],
            "primary_key": ["id"],
            "rewritten": null,
            "identity": {"domain": "SCAN_KEY", "index": "public.t_pkey", "primary": true,
                         "fields": [{"column": "id", "type_oid": 20, "shape": "int8"}],
                         "max_len": 17}
        });
        match SchemaMessage::from_json(&v) {
            Ok(SchemaMessage::Schema(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    /// The same table's row as an older extension wrote it, in `format`.
    fn older(format: u64, edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v = SchemaMessage::Schema(fresh()).to_json();
        v["format"] = json!(format);
        if let Some(o) = v.as_object_mut() {
            o.remove("stored");
        }
        for c in v["columns"].as_array_mut().into_iter().flatten() {
            if let Some(c) = c.as_object_mut()
                && format < 7
            {
                c.remove("missing_without_send_form");
            }
        }
        if format < 5 {
            if let Some(o) = v.as_object_mut() {
                o.remove("rewritten");
            }
            for c in v["columns"].as_array_mut().into_iter().flatten() {
                if let Some(c) = c.as_object_mut() {
                    c.remove("missing");
                }
            }
        }
        if let Some(id) = v["identity"].as_object_mut() {
            if format < 6 {
                id.remove("enums");
            }
            if format < 4 {
                id.remove("max_len");
            }
        }
        if format == 2 {
            for c in v["columns"].as_array_mut().into_iter().flatten() {
                if let Some(c) = c.as_object_mut() {
                    c.remove("type");
                    c.remove("shape");
                }
            }
        }
        edit(&mut v);
        v.to_string()
    }

    #[test]
    fn a_row_of_an_older_format_is_the_same_schema_when_no_ddl_changed_it() {
        let s = fresh();
        assert!(is_schema(
            Some(&SchemaMessage::Schema(s.clone()).to_json().to_string()),
            &s
        ));
        // The row written at the DDL says it rewrote nothing and what rows from before the
        // column hold; computed now, neither is known: still the same schema.
        let mut written = SchemaMessage::Schema(s.clone()).to_json();
        written["rewritten"] = json!(false);
        written["columns"][1]["missing"] = serde_json::Value::Null;
        assert!(is_schema(Some(&written.to_string()), &s));
        assert!(
            is_schema(Some(&older(7, |_| {})), &s),
            "format 7: no stored identity (a plain table has none)"
        );
        assert!(
            is_schema(Some(&older(6, |_| {})), &s),
            "format 6: no missing_without_send_form"
        );
        // A stream table's storage described by a row from before format 8 is not: its
        // row never said where its identities are.
        let mut stream = s.clone();
        stream.stored = Some(Box::new(rowid_registry::schema_message::StoredIdentity {
            column: "__pgt_row_id".into(),
            domain: rowid_codec::Domain::ScanKey,
            unique: true,
            max_len: Some(17),
        }));
        assert!(!is_schema(Some(&older(7, |_| {})), &stream));
        assert!(
            is_schema(Some(&older(5, |_| {})), &s),
            "format 5: no enum labels"
        );
        assert!(
            is_schema(Some(&older(4, |_| {})), &s),
            "format 4: no missing values"
        );
        assert!(is_schema(Some(&older(3, |_| {})), &s), "format 3: no bound");
        assert!(
            is_schema(Some(&older(2, |_| {})), &s),
            "format 2: no types either"
        );
        // What a DDL changes is in every format.
        assert!(!is_schema(
            Some(&older(3, |v| v["columns"][1]["name"] = json!("w"))),
            &s
        ));
        assert!(!is_schema(
            Some(&older(2, |v| v["columns"][1]["type_oid"] = json!(20))),
            &s
        ));
        assert!(!is_schema(
            Some(&older(3, |v| v["identity"]["fields"][0]["column"] = json!("v"))),
            &s
        ));
        assert!(!is_schema(None, &s));
    }
}
