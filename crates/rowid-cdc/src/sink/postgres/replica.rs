//! The replica writer (spec/replica.md): every published table kept, in a target database,
//! as a storage table equal to its source, matched by exact identity. Every statement comes
//! from `rowid_registry::replica`; this module decides when to run which.
//!
//! Per relation, at its first change (or when its columns or identity schema change): the
//! storage table is created from the identity schema in force (its columns and types, the
//! index its identity's bound plans) and recorded in the replica's tables, or the recorded
//! one is checked (its versions, its shape) and follows the source's columns. Per captured
//! transaction, one target transaction: each relation's changes are cut into segments
//! (`rowid_registry::replica::Segmenter`), each segment copied into the relation's temporary
//! delta and applied inside a savepoint, every statement touching exactly the rows it must;
//! then the slot's position is recorded. A change the storage cannot take stops the sink,
//! naming the table, the operation and the identity's fingerprint, never its bytes.
//!
//! A change of a table's identity (its key, or its bound crossing into another index class)
//! rebuilds every stored identity from its own row and the index, in the DDL's transaction
//! (the extension's encoder in the replica's database). A column added without a rewrite
//! gives the stored rows its missing value (identity schema messages format 5). Not followed
//! (refused by name, never applied inexactly) when the storage holds rows: a column retyped,
//! or added or rewritten by a table rewrite (the values its rows have there now are in no
//! WAL record).

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex};

use rowid_codec::Domain;
use rowid_codec::probe::{Fingerprint, PROBE_V1_PREFIX_LEN};
use rowid_registry::buffer::{self, BufferOp, ImageColumn};
use rowid_registry::replica::{
    self, Apply, Expect, SegmentChange, Segmenter, Storage, alter_statements, check_shape,
    check_source_columns, check_versions, class_from_name, class_name, create_statements,
    metadata_statements,
};
use rowid_registry::schema_message::{RelationSchema, Rewrite, SchemaMessage};
use rowid_registry::sql::{QualifiedName, quote_ident};
use rowid_registry::{MaintenanceMode, Uniqueness, plan_for_bound};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{PgLsn, ToSql, Type};
use tokio_postgres::{Client, GenericClient, Statement, Transaction};

use super::{
    Endpoint, Failure, PostgresSink, Recorded, Row, ShapeChange, Writer, create_schema_if_missing,
    db_error, sink_role,
};
use crate::connect::conninfo::Conninfo;
use crate::connect::raw::SendForm;
use crate::lsn::Lsn;

/// Where a replica is kept and for which slot.
#[derive(Clone, Debug)]
pub struct ReplicaTarget {
    /// The target database (its password is never printed).
    pub config: Conninfo,
    /// The slot whose position is recorded.
    pub slot: String,
    /// No state file exists yet: a recorded position for this slot would be changes no state
    /// accounts for, and is refused.
    pub fresh: bool,
    /// The captured database (`system_identifier/database OID`, when readable).
    pub source_database: Option<String>,
    /// The target is the captured database by definition (`replica:` without a DSN).
    pub in_source: bool,
    /// The schema every storage table is created in (`--replica-schema`); `None`: each in its
    /// source table's own schema. The replica's own tables are in this schema, or in
    /// `pgtrickle_replica` when `None`.
    pub schema: Option<String>,
    /// How long to wait at open for another session writing this replica's position for the
    /// slot to end (a killed consumer's, finishing its last COMMIT): `--slot-wait`.
    pub wait: std::time::Duration,
}

impl ReplicaTarget {
    /// The schema of the replica's own tables.
    fn meta(&self) -> &str {
        self.schema.as_deref().unwrap_or(replica::DEFAULT_SCHEMA)
    }

    /// The storage table of a source relation.
    fn storage_of(&self, schema: &RelationSchema) -> QualifiedName {
        QualifiedName::new(
            self.schema.as_deref().unwrap_or(&schema.namespace),
            &schema.relname,
        )
    }
}

impl PostgresSink {
    /// Connects to the replica's database, creates or checks the replica's own tables, reads
    /// the slot's applied position. Storage tables are created or checked when their first
    /// change arrives. Errors name the table and what is wrong.
    pub fn open_replica(target: ReplicaTarget) -> io::Result<PostgresSink> {
        let own = Arc::new(Mutex::new(HashSet::new()));
        let endpoint = Endpoint {
            config: target.config.clone(),
            source_database: target.source_database.clone(),
            in_source: target.in_source,
            wait: target.wait,
        };
        let table = format!("the replica in {}", quote_ident(target.meta()));
        let writer = ReplicaWriter {
            target,
            own: own.clone(),
            same_database: false,
            block_size: 8192,
            tables: HashMap::new(),
            open: HashMap::new(),
            prepared: HashMap::new(),
            storage_types: HashMap::new(),
        };
        PostgresSink::spawn(endpoint, writer, table, own)
    }
}

/// A storage table this connection checked (or created) and shaped.
#[derive(Debug)]
struct Table {
    storage: Storage,
    /// `schema.name` of the source relation.
    relation: String,
    /// The identity schema (JSON) the storage was built for.
    schema_json: String,
    /// Its delta exists in this session, with the storage's columns.
    delta: bool,
    /// The delta's type of each storage column (a domain's base type), once the delta was
    /// created in this session.
    delta_types: Vec<String>,
    /// A segment of it was applied in the open transaction (the delta needs emptying).
    used: bool,
    /// Its statements, prepared once per connection (by text: a set list of its own is its
    /// own statement).
    prepared: HashMap<String, Statement>,
    /// A stream table's storage: where its rows carry their own identity (`None`: the
    /// identities are the ones capture derived from the row).
    carried: Option<Carried>,
}

/// A stream table's own identity column among a source's image columns (identity schema
/// messages format 8, `stored`): its bytes are the storage's identities, and the column is the
/// storage's identity column rather than one of its value columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Carried {
    /// The column's place among the image columns.
    position: usize,
    /// The domain every identity in it is of.
    domain: Domain,
    /// The identities' worst-case length (`None`: unbounded).
    max_len: Option<usize>,
}

/// `row` with the identities its own column carries ([`Carried`]) in place of the derived
/// ones, and that column taken out of its images (the storage keeps it as its identity
/// column). Each identity comes off the WAL, so the strict decoder must accept it as a
/// complete identity of the stream table's domain within its bound; the error says which
/// part of the change is wrong, never the bytes.
fn carry(mut row: Row, carried: Carried) -> Result<Row, String> {
    let take = |image: &mut Option<Vec<Option<bytes::Bytes>>>| -> Option<Vec<u8>> {
        let cells = image.as_mut()?;
        if carried.position < cells.len() {
            cells.remove(carried.position).map(|b| b.to_vec())
        } else {
            None
        }
    };
    let new = take(&mut row.new);
    let old = take(&mut row.old);
    let op = BufferOp::from_code(row.op as u8);
    let (old_id, new_id) = match op {
        Some(BufferOp::Insert) => (None, Some(new.ok_or("an insert without its identity")?)),
        Some(BufferOp::Update) => {
            let new = new.ok_or("an update without its new identity")?;
            // No old row: the replica identity (the unique index on the identity) did not
            // change, so neither did the identity.
            (Some(old.unwrap_or_else(|| new.clone())), Some(new))
        }
        Some(BufferOp::Delete) => (Some(old.ok_or("a delete without its identity")?), None),
        _ => (row.old_id.take(), row.new_id.take()),
    };
    for (what, id) in [("removed", &old_id), ("written", &new_id)] {
        let Some(id) = id else { continue };
        let summary = rowid_codec::decode::validate(id).map_err(|e| {
            format!(
                "the identity of the row the change {what} is no valid identity ({e}; {} bytes, \
                 fingerprint {})",
                id.len(),
                Fingerprint::of(id)
            )
        })?;
        if summary.domain != carried.domain {
            return Err(format!(
                "the identity of the row the change {what} is of domain {}, not the stream \
                 table's {} (fingerprint {})",
                summary.domain.name(),
                carried.domain.name(),
                Fingerprint::of(id)
            ));
        }
        if carried.max_len.is_some_and(|max| id.len() > max) {
            return Err(format!(
                "the identity of the row the change {what} is {} bytes, more than the stream \
                 table's bound of {} (fingerprint {})",
                id.len(),
                carried.max_len.unwrap_or_default(),
                Fingerprint::of(id)
            ));
        }
    }
    row.old_id = old_id;
    row.new_id = new_id;
    Ok(row)
}

/// Whether a relation's storage holds one row per identity or a multiset: a stream table's
/// as its stored identity says, any other's by its identity's domain (keyless rows repeat).
fn uniqueness_of(schema: &RelationSchema) -> Uniqueness {
    match (schema.stored.as_deref(), &schema.identity) {
        (Some(stored), _) if !stored.unique => Uniqueness::Multiset,
        (Some(_), _) => Uniqueness::Unique,
        (None, Ok(def)) if def.domain == Domain::KeylessRow => Uniqueness::Multiset,
        _ => Uniqueness::Unique,
    }
}

/// `sql`, prepared on this connection the first time `cache` (a table's) is asked for it.
async fn cached(
    cache: &mut HashMap<String, Statement>,
    txn: &Transaction<'_>,
    sql: &str,
) -> Result<Statement, tokio_postgres::Error> {
    if let Some(s) = cache.get(sql) {
        return Ok(s.clone());
    }
    let statement = txn.prepare(sql).await?;
    cache.insert(sql.to_string(), statement.clone());
    Ok(statement)
}

/// A relation's changes of the open transaction not applied yet.
#[derive(Debug)]
struct Pending {
    segment: Segmenter,
    rows: Vec<Row>,
}

/// Applies change rows to storage tables ([`super::Writer`]).
pub(super) struct ReplicaWriter {
    target: ReplicaTarget,
    own: Arc<Mutex<HashSet<u32>>>,
    same_database: bool,
    /// The target's `block_size` (the index plan depends on it).
    block_size: u32,
    /// Storage tables by source relid; a relation whose rows cannot be applied maps to why.
    tables: HashMap<u32, Result<Table, String>>,
    /// The open transaction's segments, by source relid.
    open: HashMap<u32, Pending>,
    /// The writer's own statements, prepared once per connection.
    prepared: HashMap<String, Statement>,
    /// A source type's storage type in the replica's database (a domain's base type), as
    /// [`buffer::STORAGE_TYPE_QUERY`] found it.
    storage_types: HashMap<String, String>,
}

/// `meta.table`, quoted.
fn meta_table(meta: &str, table: &str) -> String {
    format!("{}.{}", quote_ident(meta), quote_ident(table))
}

impl ReplicaWriter {
    fn mark_own(&self, oid: u32) {
        if self.same_database
            && let Ok(mut own) = self.own.lock()
        {
            own.insert(oid);
        }
    }

    /// The storage a relation's identity schema plans: its table, index class, semantics and
    /// columns (`images`, the source's columns with the source's types), and for a stream
    /// table where its rows carry their identity (that column is the storage's identity
    /// column, not one of its columns).
    fn plan(
        &self,
        schema: &RelationSchema,
        mut images: Vec<ImageColumn>,
    ) -> Result<(Storage, Option<Carried>), String> {
        check_source_columns(&images, schema.stored.as_deref())?;
        let uniqueness = uniqueness_of(schema);
        let (max_len, carried) = match schema.stored.as_deref() {
            Some(stored) => {
                let position = images
                    .iter()
                    .position(|c| c.name == stored.column)
                    .ok_or_else(|| format!("it does not publish {}", stored.column))?;
                images.remove(position);
                let carried = Carried {
                    position,
                    domain: stored.domain,
                    max_len: stored.max_len,
                };
                (stored.max_len, Some(carried))
            }
            None => {
                let def = schema.identity.as_ref().map_err(|refusal| {
                    format!(
                        "it has no usable identity ({}: {})",
                        refusal.sqlstate, refusal.message
                    )
                })?;
                (def.max_len, None)
            }
        };
        let plan = plan_for_bound(
            max_len,
            uniqueness,
            MaintenanceMode::Refresh,
            self.block_size,
            PROBE_V1_PREFIX_LEN,
        )
        .map_err(|e| e.to_string())?;
        Ok((
            Storage {
                table: self.target.storage_of(schema),
                source_relid: schema.relid,
                class: plan.class,
                uniqueness,
                columns: images,
            },
            carried,
        ))
    }

    /// Makes the storage of the relation `shape` describes exist, pass its checks and hold
    /// its columns, inside `txn`; or records why its rows cannot be applied.
    async fn ensure(&mut self, txn: &Transaction<'_>, shape: ShapeChange) -> Result<(), Failure> {
        let relid = shape.relid;
        let (images, schema) = match (shape.images, shape.schema) {
            (Some(images), Some(schema)) => (images, schema),
            _ => {
                self.tables.insert(
                    relid,
                    Err(format!(
                        "{}: no identity schema describes its columns at this position",
                        shape.relation
                    )),
                );
                return Ok(());
            }
        };
        let (want, carried) = match self.plan(&schema, images) {
            Ok(planned) => planned,
            Err(why) => {
                self.tables
                    .insert(relid, Err(format!("{}: {why}", shape.relation)));
                return Ok(());
            }
        };
        let schema_json = SchemaMessage::Schema((*schema).clone())
            .to_json()
            .to_string();
        let known = match self.tables.remove(&relid) {
            Some(Ok(table)) => Some(table),
            _ => self.recorded(txn, relid, &shape.relation).await?,
        };
        let mut table = match known {
            None => self.create(txn, want, shape.relation, schema_json).await?,
            Some(have) => self.follow(txn, have, want, &schema, schema_json).await?,
        };
        table.carried = carried;
        self.tables.insert(relid, Ok(table));
        Ok(())
    }

    /// The storage [`replica::TABLES`] records for `relid`, checked: versions, the table, its
    /// shape, who may write it.
    async fn recorded(
        &self,
        txn: &Transaction<'_>,
        relid: u32,
        relation: &str,
    ) -> Result<Option<Table>, Failure> {
        let meta = self.target.meta();
        let row = txn
            .query_opt(
                &format!(
                    "{} WHERE \"source_relid\" OPERATOR(pg_catalog.=) $1",
                    replica::recorded_storage(meta)
                ),
                &[&relid],
            )
            .await
            .map_err(|e| {
                db_error(
                    &format!("cannot read {}", meta_table(meta, replica::TABLES)),
                    &e,
                )
            })?;
        let Some(row) = row else {
            return Ok(None);
        };
        let (storage, schema_json, class, slot): (String, String, String, Option<String>) =
            (row.get(1), row.get(2), row.get(3), row.get(6));
        // A storage table is kept by one slot; a new slot (no state file) starts from empty
        // storage tables, which its snapshot fills: rows another slot, or an earlier run of
        // this one, put there would be there twice.
        let kept_by = match &slot {
            Some(s) if *s != self.target.slot => Some(format!("slot {s:?}")),
            _ if self.target.fresh => Some(match &slot {
                Some(s) => format!("an earlier run of slot {s:?} whose state file is gone"),
                None => "an earlier run (format 1 recorded no slot)".to_string(),
            }),
            _ => None,
        };
        if let Some(kept_by) = kept_by {
            return Err(Failure::from(format!(
                "{relation}'s replica {storage} is kept by {kept_by}: this run of slot {:?} \
                 would add its rows to what is there. Drop {storage} and its row in {}, or \
                 keep this replica in another --replica-schema",
                self.target.slot,
                meta_table(meta, replica::TABLES)
            )));
        }
        check_versions(&storage, row.get(4), row.get(5))
            .map_err(|e| Failure::from(e.to_string()))?;
        let refused =
            |detail: String| Failure::from(format!("{relation}'s replica {storage}: {detail}"));
        let class = class_from_name(&class)
            .ok_or_else(|| refused(format!("its recorded index class {class:?} is unknown")))?;
        let recorded = match SchemaMessage::parse(schema_json.as_bytes()) {
            Ok(SchemaMessage::Schema(s)) => s,
            _ => {
                return Err(refused(
                    "its recorded identity schema does not parse".into(),
                ));
            }
        };
        let oid = oid_of(txn, &storage)
            .await?
            .ok_or_else(|| refused("the table is gone".into()))?;
        let here = self.target.storage_of(&recorded).quoted();
        if here != storage {
            return Err(refused(format!(
                "it was created there, but this run would keep it as {here}: run with the \
                 --replica-schema it was created with"
            )));
        }
        self.check_writers(txn, &storage).await?;
        let rows: Vec<(String, String, Option<String>)> = txn
            .query(replica::SHAPE_QUERY, &[&oid])
            .await
            .map_err(|e| db_error(&format!("cannot read the columns of {storage}"), &e))?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let columns = check_shape(&storage, &rows).map_err(|e| Failure::from(e.to_string()))?;
        self.mark_own(oid);
        let uniqueness = uniqueness_of(&recorded);
        Ok(Some(Table {
            storage: Storage {
                table: self.target.storage_of(&recorded),
                source_relid: relid,
                class,
                uniqueness,
                columns,
            },
            relation: relation.to_string(),
            schema_json,
            delta: false,
            delta_types: Vec::new(),
            used: false,
            prepared: HashMap::new(),
            carried: None,
        }))
    }

    /// Refuses a table that another role owns or may write, or whose writes run code.
    async fn check_writers(&self, client: &impl GenericClient, table: &str) -> Result<(), Failure> {
        let me = sink_role(client).await?;
        buffer::check_writers(table, &super::writers(client, table).await?, &me)
            .map_err(|e| Failure::from(e.to_string()))
    }

    /// Creates the storage `want` of `relation` and records it.
    async fn create(
        &self,
        txn: &Transaction<'_>,
        want: Storage,
        relation: String,
        schema_json: String,
    ) -> Result<Table, Failure> {
        let name = want.table.quoted();
        if oid_of(txn, &name).await?.is_some() {
            return Err(Failure::from(format!(
                "{relation}'s replica would be {name}, which exists and is not one the replica \
                 recorded (another table of that name, or another source's storage under \
                 --replica-schema): drop or rename it, or choose another --replica-schema"
            )));
        }
        check_types(txn, &relation, &want.columns).await?;
        if let Some(schema) = &want.table.schema {
            creation_lock(txn, schema).await?;
            create_schema_if_missing(txn, schema, &name).await?;
        }
        for sql in create_statements(&want) {
            txn.batch_execute(&sql).await.map_err(|e| {
                db_error(
                    &format!(
                        "cannot create {name} for {relation} (every type of its columns must \
                         exist in the replica's database)"
                    ),
                    &e,
                )
            })?;
        }
        self.record(txn, &want, &schema_json).await?;
        let oid = oid_of(txn, &name)
            .await?
            .ok_or_else(|| Failure::from(format!("{name} is gone after its creation")))?;
        self.mark_own(oid);
        Ok(Table {
            storage: want,
            relation,
            schema_json,
            delta: false,
            delta_types: Vec::new(),
            used: false,
            prepared: HashMap::new(),
            carried: None,
        })
    }

    /// Records `storage` in [`replica::TABLES`].
    async fn record(
        &self,
        txn: &Transaction<'_>,
        storage: &Storage,
        schema_json: &str,
    ) -> Result<(), Failure> {
        let meta = self.target.meta();
        txn.execute(
            &replica::record_storage(meta),
            &[
                &storage.source_relid,
                &storage.table.quoted(),
                &schema_json,
                &class_name(storage.class),
                &self.target.slot,
            ],
        )
        .await
        .map_err(|e| db_error(&format!("cannot record {}", storage.table.quoted()), &e))?;
        Ok(())
    }

    /// Turns the storage `have` into `want` (the source's columns and identity now).
    async fn follow(
        &self,
        txn: &Transaction<'_>,
        mut have: Table,
        want: Storage,
        schema: &RelationSchema,
        schema_json: String,
    ) -> Result<Table, Failure> {
        let relation = have.relation.clone();
        if have.storage.table != want.table {
            // The source was renamed or moved to another schema: so is its storage.
            self.move_storage(txn, &have.storage.table, &want.table, &relation)
                .await?;
            have.storage.table = want.table.clone();
        }
        let name = have.storage.table.quoted();
        let rebuild = (have.storage.class, have.storage.uniqueness)
            != (want.class, want.uniqueness)
            || !same_identity(&have.schema_json, &schema_json);
        let changes = buffer::ColumnChanges::between(&have.storage.columns, &want.columns);
        // Values the source's existing rows got from a DDL are in no WAL record: a retyped
        // column's (its USING conversion), and anything a rewrite computed (a volatile
        // default). Only an empty storage follows those. A column added without a rewrite is
        // followed exactly: every existing row holds the column's missing value (format 5),
        // or NULL when it has none.
        let unknowable = match (changes.retyped.first(), changes.added.first()) {
            (Some(column), _) => Some(format!(
                "retyped column {:?}; the values a USING conversion gave",
                column.name
            )),
            (None, Some(column)) if schema.rewritten != Rewrite::Kept => Some(format!(
                "gained column {:?}, {}; the values the default gave",
                column.name,
                rewrite_cause(schema.rewritten)
            )),
            // A rewrite that kept the shape (`ALTER COLUMN v TYPE int4 USING v + 1` of an
            // int4): a message of its own (each rewrite names its transaction), which the
            // storage does not follow yet.
            (None, None)
                if matches!(schema.rewritten, Rewrite::By(_))
                    && have.schema_json != schema_json =>
            {
                Some(
                    "had its rows rewritten by a DDL (ALTER COLUMN ... TYPE ... USING); the \
                     values that gave"
                        .to_string(),
                )
            }
            _ => None,
        };
        if let Some(what) = unknowable
            && holds_rows(txn, &name).await?
        {
            return Err(Failure::from(format!(
                "{relation} {what} its existing rows are in no WAL record, so {name} cannot \
                 follow it exactly: drop {name} and its row in {}, then snapshot the table again",
                meta_table(self.target.meta(), replica::TABLES)
            )));
        }
        if !changes.is_empty() {
            let retyped: Vec<&ImageColumn> = changes.retyped.to_vec();
            check_types(txn, &relation, changes.added.iter().chain(retyped)).await?;
            for sql in alter_statements(&have.storage.table, &have.storage.columns, &want.columns) {
                txn.batch_execute(&sql).await.map_err(|e| {
                    db_error(
                        &format!("cannot follow the columns of {relation} in {name}"),
                        &e,
                    )
                })?;
            }
            // Rows stored before the column hold its missing value: one UPDATE per column
            // that has one, the value as the source's send form (as COPY writes every value).
            for column in &changes.added {
                let described = schema.columns.iter().find(|c| c.attnum == column.attnum);
                if described.is_some_and(|c| c.missing_without_send_form)
                    && holds_rows(txn, &name).await?
                {
                    return Err(Failure::from(format!(
                        "{relation}'s rows stored before its new column {:?} hold a value of \
                         type {}, which has no binary send form, so its identity schema \
                         cannot carry it and {name} cannot follow it exactly: drop {name} and \
                         its row in {}, then snapshot the table again",
                        column.name,
                        column.sql_type,
                        meta_table(self.target.meta(), replica::TABLES)
                    )));
                }
                if let Some(value) = described.and_then(|c| c.missing.as_deref()) {
                    let sql = replica::fill_added_column(&have.storage.table, &column.name);
                    txn.execute(&sql, &[&SendForm(Some(value))])
                        .await
                        .map_err(|e| {
                            db_error(
                                &format!(
                                    "cannot give the rows of {name} the value {relation}'s rows \
                                     hold in its new column {:?}",
                                    column.name
                                ),
                                &e,
                            )
                        })?;
                }
            }
            // The delta has the old columns.
            txn.batch_execute(&Apply::new(&have.storage).drop_delta())
                .await
                .map_err(|e| db_error(&format!("cannot drop the delta of {name}"), &e))?;
            have.delta = false;
        }
        if rebuild && (schema.stored.is_some() || stored_in(&have.schema_json)) {
            // A stream table's identities are its own: no row holds what they are made of.
            return Err(Failure::from(format!(
                "{relation}'s identity changed, and it is (or was) a stream table, whose \
                 identities cannot be computed again from its rows: drop {name} and its row in \
                 {}, then snapshot the table again",
                meta_table(self.target.meta(), replica::TABLES)
            )));
        }
        if rebuild {
            // Every stored identity changes meaning: computed again from its own row.
            let def = schema.identity.as_ref().map_err(|r| {
                Failure::from(format!("{relation} has no usable identity: {}", r.message))
            })?;
            let has_encoder: bool = txn
                .query_one(replica::HAS_ENCODER_QUERY, &[])
                .await
                .map_err(|e| db_error("cannot look for the extension's encoder", &e))?
                .get(0);
            if !has_encoder {
                return Err(Failure::from(format!(
                    "{relation}'s identity changed (its key, or its bound and so its index), so \
                     every identity in {name} must be computed again from its row, by the \
                     extension's encoder, which the replica's database lacks: CREATE EXTENSION \
                     pg_trickle_ext there, then start again"
                )));
            }
            check_enum_labels(txn, &relation, &def.enums).await?;
            let fields: Vec<&str> = def.fields.iter().map(|f| f.column.as_str()).collect();
            for sql in replica::rebuild_statements(&have.storage, &want, def.domain, &fields) {
                txn.batch_execute(&sql).await.map_err(|e| {
                    db_error(
                        &format!(
                            "cannot rebuild the identities of {name} after {relation}'s key changed"
                        ),
                        &e,
                    )
                })?;
            }
            have.storage.class = want.class;
            have.storage.uniqueness = want.uniqueness;
            // The delta's segments follow the new semantics from now on.
            txn.batch_execute(&Apply::new(&have.storage).drop_delta())
                .await
                .map_err(|e| db_error(&format!("cannot drop the delta of {name}"), &e))?;
            have.delta = false;
        }
        have.storage.columns = want.columns;
        have.schema_json = schema_json;
        // The statements name the columns they had.
        have.prepared.clear();
        self.record(txn, &have.storage, &have.schema_json).await?;
        Ok(have)
    }

    /// Renames (and moves to `to`'s schema) the storage table `from`, after its source was
    /// renamed or moved; refused by name when `to` exists.
    async fn move_storage(
        &self,
        txn: &Transaction<'_>,
        from: &QualifiedName,
        to: &QualifiedName,
        relation: &str,
    ) -> Result<(), Failure> {
        let target = to.quoted();
        if oid_of(txn, &target).await?.is_some() {
            return Err(Failure::from(format!(
                "{relation} was renamed, and its replica {} would follow it as {target}, which \
                 exists and is not one the replica recorded: drop or rename it, then start again",
                from.quoted()
            )));
        }
        let failed = |e: tokio_postgres::Error| {
            db_error(
                &format!(
                    "cannot rename {} to {target} after {relation}",
                    from.quoted()
                ),
                &e,
            )
        };
        let mut at = from.clone();
        if to.schema != from.schema {
            let schema = to.schema.as_deref().unwrap_or("public");
            creation_lock(txn, schema).await?;
            create_schema_if_missing(txn, schema, &target).await?;
            txn.batch_execute(&format!(
                "ALTER TABLE {} SET SCHEMA {}",
                at.quoted(),
                quote_ident(schema)
            ))
            .await
            .map_err(failed)?;
            at.schema = to.schema.clone();
        }
        if to.name != from.name {
            txn.batch_execute(&format!(
                "ALTER TABLE {} RENAME TO {}",
                at.quoted(),
                quote_ident(&to.name)
            ))
            .await
            .map_err(failed)?;
        }
        Ok(())
    }

    /// Applies the pending segment of `relid`, if any.
    async fn apply_pending(&mut self, txn: &Transaction<'_>, relid: u32) -> Result<(), Failure> {
        let Some(pending) = self.open.remove(&relid) else {
            return Ok(());
        };
        if pending.rows.is_empty() {
            return Ok(());
        }
        let Some(Ok(table)) = self.tables.get_mut(&relid) else {
            return Err(Failure::from(format!(
                "rows of relation OID {relid} before its storage"
            )));
        };
        apply_segment(txn, table, &mut self.storage_types, &pending).await
    }

    /// Applies every pending segment.
    async fn apply_all(&mut self, txn: &Transaction<'_>) -> Result<(), Failure> {
        let relids: Vec<u32> = self.open.keys().copied().collect();
        for relid in relids {
            self.apply_pending(txn, relid).await?;
        }
        Ok(())
    }
}

/// Refuses, by relation, column and type, a column whose type the replica's database does not
/// have (an enum, a composite, a domain: created there by whoever runs it).
async fn check_types<'a>(
    client: &impl GenericClient,
    relation: &str,
    columns: impl IntoIterator<Item = &'a ImageColumn>,
) -> Result<(), Failure> {
    for c in columns {
        let known: bool = client
            .query_one(replica::HAS_TYPE_QUERY, &[&c.sql_type])
            .await
            .map_err(|e| db_error(&format!("cannot look up the type {}", c.sql_type), &e))?
            .get(0);
        if !known {
            return Err(Failure::from(format!(
                "{relation}: column {:?} has type {}, which the replica's database does not \
                 have: create it there (as at the source), then start again",
                c.name, c.sql_type
            )));
        }
    }
    Ok(())
}

/// Refuses to compute identities again in the replica's database while an enum they depend on
/// has other labels there than the source's (`enums`, the identity schema's): its stored rows'
/// values read as the target's labels, and the identities must be the source's. An enum
/// renamed at the source (`ALTER TYPE ... RENAME VALUE`) is renamed in the replica's database
/// by whoever keeps its types; the sink stops, naming both, until that is done.
async fn check_enum_labels(
    txn: &Transaction<'_>,
    relation: &str,
    enums: &[rowid_registry::schema_message::EnumLabels],
) -> Result<(), Failure> {
    for e in enums {
        let here: Option<Vec<String>> = txn
            .query_one(
                "SELECT (SELECT pg_catalog.array_agg(l.enumlabel::pg_catalog.text \
                          ORDER BY l.enumsortorder) \
                        FROM pg_catalog.pg_enum l \
                        WHERE l.enumtypid OPERATOR(pg_catalog.=) pg_catalog.to_regtype($1))",
                &[&e.type_name],
            )
            .await
            .map_err(|err| db_error(&format!("cannot read the labels of {}", e.type_name), &err))?
            .get(0);
        if here.as_deref() != Some(e.labels.as_slice()) {
            return Err(Failure::from(format!(
                "{relation}'s identities depend on the labels of enum {}, which are {:?} at the \
                 source and {} in the replica's database: its stored identities cannot be \
                 computed again until they agree. Rename them there as at the source (ALTER \
                 TYPE {} RENAME VALUE ...), then start again",
                e.type_name,
                e.labels,
                here.map_or_else(|| "missing".to_string(), |l| format!("{l:?}")),
                e.type_name
            )));
        }
    }
    Ok(())
}

/// Whether the storage table `name` (quoted, qualified) holds any row.
async fn holds_rows(txn: &Transaction<'_>, name: &str) -> Result<bool, Failure> {
    Ok(txn
        .query_one(&format!("SELECT EXISTS (SELECT FROM {name})"), &[])
        .await
        .map_err(|e| db_error(&format!("cannot read {name}"), &e))?
        .get(0))
}

/// Why an added column's values in existing rows are not known, from the identity schema
/// message's `rewritten`.
fn rewrite_cause(rewritten: Rewrite) -> &'static str {
    match rewritten {
        Rewrite::By(_) => "which rewrote the table (a volatile default)",
        Rewrite::Kept | Rewrite::Unknown => {
            "and its identity schema message does not say whether that rewrote the table (a \
             message before format 5, a partitioned table published via its root, or the \
             extension's pgtrickle_identity_rewrite event trigger not enabled)"
        }
    }
}

/// The OID of the table `name` (quoted, qualified), `None` when there is none.
async fn oid_of(client: &impl GenericClient, name: &str) -> Result<Option<u32>, Failure> {
    Ok(client
        .query_one(
            "SELECT pg_catalog.to_regclass($1)::pg_catalog.oid",
            &[&name],
        )
        .await
        .map_err(|e| db_error(&format!("cannot look up {name}"), &e))?
        .get(0))
}

/// Waits for (and takes, until `txn` ends) the lock under which replicas create their own
/// tables and their storage tables' schemas in `schema` ([`replica::creation_lock`]).
async fn creation_lock(txn: &Transaction<'_>, schema: &str) -> Result<(), Failure> {
    txn.execute(
        "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))",
        &[&replica::creation_lock(schema)],
    )
    .await
    .map_err(|e| {
        db_error(
            &format!("cannot lock the creation of tables in {schema}"),
            &e,
        )
    })?;
    Ok(())
}

/// Whether the identity schema a storage table was built for (`have`, JSON) and the one in
/// force now (`want`) describe the same identity bytes. A schema recorded before format 6
/// names no enum labels: it is taken to have the labels `want` names (an extension upgrade
/// alone is no change; a label renamed since is, from the first format-6 schema on).
fn same_identity(have: &str, want: &str) -> bool {
    let (Some(mut have), Some(want)) = (parsed_schema(have), parsed_schema(want)) else {
        return false;
    };
    // A stream table's storage keeps the identities its rows carry: the same as long as
    // what they are stays the same.
    if have.stored.is_some() || want.stored.is_some() {
        return have.stored == want.stored;
    }
    if let (Ok(h), Ok(w)) = (have.identity.as_mut(), want.identity.as_ref())
        && h.enums.is_empty()
    {
        h.enums.clone_from(&w.enums);
    }
    let have = have.identity_signature();
    have.is_some() && have == want.identity_signature()
}

/// A recorded identity schema (JSON), parsed.
fn parsed_schema(json: &str) -> Option<RelationSchema> {
    match SchemaMessage::parse(json.as_bytes()) {
        Ok(SchemaMessage::Schema(s)) => Some(s),
        _ => None,
    }
}

/// Whether a recorded identity schema (JSON) is a stream table's, whose rows carry their
/// identity ([`Carried`]).
fn stored_in(json: &str) -> bool {
    parsed_schema(json).is_some_and(|s| s.stored.is_some())
}

/// The delta's fixed columns' types (seq, op, old identity, identity); the storage's columns
/// follow as their binary send forms.
const DELTA_TYPES: [Type; 4] = [Type::INT4, Type::CHAR, Type::BYTEA, Type::BYTEA];

/// The storage type, in the replica's database, of each of `columns`' types (a domain's base
/// type: the delta holds the NULL cells of removed rows and of unchanged TOASTed values,
/// which a NOT NULL domain refuses), looked up once per type and connection.
async fn storage_types(
    txn: &Transaction<'_>,
    cache: &mut HashMap<String, String>,
    relation: &str,
    columns: &[ImageColumn],
) -> Result<Vec<String>, Failure> {
    let mut out = Vec::with_capacity(columns.len());
    for c in columns {
        if let Some(found) = cache.get(&c.sql_type) {
            out.push(found.clone());
            continue;
        }
        let found: String = txn
            .query_one(buffer::STORAGE_TYPE_QUERY, &[&c.sql_type])
            .await
            .map_err(|e| {
                db_error(
                    &format!(
                        "{relation}: the type {} of column {:?} is not one the replica's \
                         database knows",
                        c.sql_type, c.name
                    ),
                    &e,
                )
            })?
            .get(0);
        cache.insert(c.sql_type.clone(), found.clone());
        out.push(found);
    }
    Ok(out)
}

/// Copies `pending` into the delta of `table` and applies it inside a savepoint; a change the
/// storage cannot take rolls the segment back and stops, naming it.
async fn apply_segment(
    txn: &Transaction<'_>,
    table: &mut Table,
    types: &mut HashMap<String, String>,
    pending: &Pending,
) -> Result<(), Failure> {
    let name = table.storage.table.quoted();
    let failed = |what: &str, e: tokio_postgres::Error| db_error(&format!("{what} {name}"), &e);
    if !table.delta {
        table.delta_types =
            storage_types(txn, types, &table.relation, &table.storage.columns).await?;
        let apply = Apply::with_delta_types(&table.storage, &table.delta_types);
        txn.batch_execute(&format!("{}; {}", apply.drop_delta(), apply.delta_table()))
            .await
            .map_err(|e| failed("cannot create the delta of", e))?;
        table.delta = true;
    }
    let apply = Apply::with_delta_types(&table.storage, &table.delta_types);
    if table.used {
        txn.batch_execute(&apply.clear_delta())
            .await
            .map_err(|e| failed("cannot empty the delta of", e))?;
    }
    table.used = true;
    let copy = cached(&mut table.prepared, txn, &apply.copy_in())
        .await
        .map_err(|e| failed("cannot prepare the COPY into the delta of", e))?;
    let sink = txn
        .copy_in(&copy)
        .await
        .map_err(|e| failed("cannot COPY into the delta of", e))?;
    let width = table.storage.columns.len();
    let old_image = apply.copies_old_image();
    let mut copy_types = DELTA_TYPES.to_vec();
    copy_types.resize(
        DELTA_TYPES.len() + width * if old_image { 2 } else { 1 },
        Type::BYTEA,
    );
    let writer = BinaryCopyInWriter::new(sink, &copy_types);
    let mut writer = std::pin::pin!(writer);
    // The delta orders a segment's changes by their place in it: a segment can span
    // captured transactions (group commit), whose own sequence numbers start again at 1.
    for (place, row) in (1..).zip(&pending.rows) {
        let place: i32 = place;
        let op = row.op;
        let new_id = row.new_id.as_deref();
        let old_id = row.old_id.as_deref();
        fn cell(image: &Option<Vec<Option<bytes::Bytes>>>, i: usize) -> SendForm<'_> {
            SendForm(
                image
                    .as_ref()
                    .and_then(|cells| cells.get(i))
                    .and_then(|c| c.as_deref()),
            )
        }
        // The written row, then (a multiset) the removed one: found by its values'
        // representation, not only by an identity equal rows share.
        let mut forms: Vec<SendForm<'_>> = (0..width).map(|i| cell(&row.new, i)).collect();
        if old_image {
            forms.extend((0..width).map(|i| cell(&row.old, i)));
        }
        let mut values: Vec<&(dyn ToSql + Sync)> = vec![&place, &op, &old_id, &new_id];
        values.extend(forms.iter().map(|f| f as &(dyn ToSql + Sync)));
        writer
            .as_mut()
            .write(&values)
            .await
            .map_err(|e| failed("cannot write a change into the delta of", e))?;
    }
    writer
        .as_mut()
        .finish()
        .await
        .map_err(|e| failed("cannot finish the COPY into the delta of", e))?;
    txn.batch_execute("SAVEPOINT pgt_segment")
        .await
        .map_err(|e| failed("cannot set a savepoint for", e))?;
    let set: Option<Vec<&str>> = pending.segment.absent().map(|absent| {
        table
            .storage
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .filter(|c| !absent.iter().any(|a| a == c))
            .collect()
    });
    let mut refused = None;
    for step in apply.steps(set.as_deref()) {
        let done = match step.expect {
            Expect::Changes(ops) => {
                let want = pending
                    .rows
                    .iter()
                    .filter(|r| ops.contains(&(r.op as u8 as char)))
                    .count();
                match cached(&mut table.prepared, txn, &step.sql).await {
                    Ok(statement) => txn
                        .execute(&statement, &[])
                        .await
                        .map(|n| n as usize == want),
                    Err(e) => Err(e),
                }
            }
            Expect::Counted => match cached(&mut table.prepared, txn, &step.sql).await {
                Ok(statement) => txn.query_one(&statement, &[]).await.map(|r| {
                    let n: Vec<i64> = (0..6).map(|i| r.get(i)).collect();
                    n[0] == n[1] && n[2] == n[3] && n[4] == n[5]
                }),
                Err(e) => Err(e),
            },
        };
        match done {
            Ok(true) => {}
            Ok(false) => {
                refused = Some(step.what);
                break;
            }
            // A lock wait, a deadlock, a cancelled statement: nothing about the data, and
            // the whole transaction is tried again from the last durable position.
            Err(e)
                if e.code()
                    .is_some_and(|c| crate::connect::net::transient(c.code())) =>
            {
                return Err(failed("cannot apply changes to", e));
            }
            Err(e) if e.as_db_error().is_some() => {
                refused = Some(step.what);
                break;
            }
            Err(e) => return Err(failed("cannot apply changes to", e)),
        }
    }
    let Some(what) = refused else {
        txn.batch_execute("RELEASE SAVEPOINT pgt_segment")
            .await
            .map_err(|e| failed("cannot release the savepoint of", e))?;
        return Ok(());
    };
    txn.batch_execute("ROLLBACK TO SAVEPOINT pgt_segment")
        .await
        .map_err(|e| failed("cannot roll back", e))?;
    let at = txn
        .query_opt(&apply.first_unapplicable(), &[])
        .await
        .map_err(|e| failed("cannot find the change at fault in", e))?;
    let commit_of = |row: Option<&Row>| row.map(|r| Lsn(r.commit_lsn).to_string());
    Err(Failure::from(match at {
        Some(r) => {
            let (place, op, id): (i32, i8, Vec<u8>) = (r.get(0), r.get(1), r.get(2));
            let at = usize::try_from(place - 1)
                .ok()
                .and_then(|i| pending.rows.get(i));
            let seq = at.map_or(0, |r| r.seq);
            let commit = commit_of(at).unwrap_or_default();
            let what = match (op as u8, table.storage.uniqueness) {
                (b'U', _) | (b'D', Uniqueness::Multiset) => "names a row",
                _ => "names an identity",
            };
            let fault = match BufferOp::from_code(op as u8) {
                Some(BufferOp::Insert) => "which the storage table already holds",
                Some(BufferOp::Update) if table.storage.uniqueness == Uniqueness::Unique => {
                    "which the storage table does not hold, or moves it onto one it already holds"
                }
                _ => "which the storage table does not hold (as many times)",
            };
            format!(
                "{}: change {seq} ({}) of the transaction committed at {commit} {what} {fault}: \
                 identity {}; nothing of that transaction was applied, and {name} no longer \
                 equals its source: run once with --repair {} (it empties {name} and reads the \
                 table into it again while streaming)",
                table.relation,
                BufferOp::from_code(op as u8).map_or("?", op_name),
                Fingerprint::of(&id),
                table.relation
            )
        }
        None => format!(
            "{}: {what} of the transaction committed at {} could not be applied to {name} \
             exactly; nothing of that transaction was applied",
            table.relation,
            commit_of(pending.rows.first()).unwrap_or_default()
        ),
    }))
}

fn op_name(op: BufferOp) -> &'static str {
    match op {
        BufferOp::Insert => "an insert",
        BufferOp::Update => "an update",
        BufferOp::Delete => "a delete",
        BufferOp::Truncate => "a truncate",
        BufferOp::Unidentified => "an unidentified change",
        BufferOp::Redefined => "a redefinition of the identity",
    }
}

impl Writer for ReplicaWriter {
    async fn open(
        &mut self,
        client: &mut Client,
        same_database: bool,
    ) -> Result<Recorded, Failure> {
        self.same_database = same_database;
        let meta = self.target.meta().to_string();
        let me = sink_role(client).await?;
        self.block_size = client
            .query_one(
                "SELECT pg_catalog.current_setting('block_size')::pg_catalog.int4",
                &[],
            )
            .await
            .map_err(|e| db_error("cannot read the replica database's block_size", &e))?
            .get::<_, i32>(0)
            .try_into()
            .unwrap_or(8192);
        // Another sink starting into the same schema waits here: its CREATE SCHEMA IF NOT
        // EXISTS would otherwise race this one's on the catalog's unique index, and its REVOKE
        // this one's on the same pg_class row ("tuple concurrently updated": PostgreSQL takes
        // no lock for a GRANT or REVOKE, the second writer of the row fails).
        let creating = client
            .transaction()
            .await
            .map_err(|e| db_error("cannot begin creating the replica's tables", &e))?;
        creation_lock(&creating, &meta).await?;
        create_schema_if_missing(&creating, &meta, "the replica's tables").await?;
        for sql in metadata_statements(&meta).iter().skip(1) {
            creating.batch_execute(sql).await.map_err(|e| {
                db_error(&format!("cannot create the replica's tables in {meta}"), &e)
            })?;
        }
        for t in [replica::TABLES, replica::POSITION] {
            let name = meta_table(&meta, t);
            creating
                .batch_execute(&format!("REVOKE ALL ON TABLE {name} FROM PUBLIC"))
                .await
                .map_err(|e| db_error(&format!("cannot revoke PUBLIC's rights on {name}"), &e))?;
        }
        creating
            .commit()
            .await
            .map_err(|e| db_error(&format!("cannot create the replica's tables in {meta}"), &e))?;
        let mut oids = Vec::new();
        for t in [replica::TABLES, replica::POSITION] {
            let name = meta_table(&meta, t);
            buffer::check_writers(&name, &super::writers(client, &name).await?, &me)
                .map_err(|e| Failure::from(e.to_string()))?;
            let oid = oid_of(client, &name)
                .await?
                .ok_or_else(|| Failure::from(format!("{name} is gone after its creation")))?;
            oids.push(oid);
            self.mark_own(oid);
        }
        // In the captured database, every recorded storage table is the replica's own.
        for row in client
            .query(&replica::recorded_storage(&meta), &[])
            .await
            .map_err(|e| db_error("cannot read the replica's tables", &e))?
        {
            let storage: String = row.get(1);
            if let Some(oid) = oid_of(client, &storage).await? {
                self.mark_own(oid);
                oids.push(oid);
            }
        }
        let row = client
            .query_opt(&replica::applied_position(&meta), &[&self.target.slot])
            .await
            .map_err(|e| db_error("cannot read the replica's position", &e))?;
        let (recorded, chunks) = match row {
            Some(r) => {
                let (lsn, chunks): (PgLsn, Option<String>) = (r.get(0), r.get(1));
                (Some(Lsn(u64::from(lsn))), chunks)
            }
            None => (None, None),
        };
        if self.target.fresh
            && let Some(lsn) = recorded
        {
            return Err(Failure::from(format!(
                "the replica in {} already holds changes of a slot named {:?}, through commit \
                 {lsn}, that no state file accounts for: give the state file that applied them \
                 (--state), or another --replica-schema",
                quote_ident(&meta),
                self.target.slot
            )));
        }
        Ok(Recorded {
            position: recorded,
            chunks,
            tables: oids,
        })
    }

    async fn shape(&mut self, txn: &Transaction<'_>, shape: ShapeChange) -> Result<(), Failure> {
        // What came before the change applies under the old shape.
        self.apply_pending(txn, shape.relid).await?;
        self.ensure(txn, shape).await
    }

    async fn rows(&mut self, txn: &Transaction<'_>, rows: Vec<Row>) -> Result<(), Failure> {
        for row in rows {
            let table = match self.tables.get(&row.relid) {
                Some(Ok(table)) => table,
                Some(Err(why)) => {
                    return Err(Failure::from(format!(
                        "{why}: its changes cannot be applied to a replica"
                    )));
                }
                None => {
                    return Err(Failure::from(format!(
                        "a change of relation OID {} before its shape",
                        row.relid
                    )));
                }
            };
            match BufferOp::from_code(row.op as u8) {
                Some(BufferOp::Unidentified) => {
                    return Err(Failure::from(format!(
                        "{}: a change without identity ({}) cannot be applied to {}",
                        table.relation,
                        row.unidentified.as_deref().unwrap_or("no reason given"),
                        table.storage.table.quoted()
                    )));
                }
                Some(BufferOp::Truncate) => {
                    let truncate = Apply::new(&table.storage).truncate();
                    let name = table.storage.table.quoted();
                    self.apply_pending(txn, row.relid).await?;
                    txn.batch_execute(&truncate)
                        .await
                        .map_err(|e| db_error(&format!("cannot truncate {name}"), &e))?;
                    continue;
                }
                _ => {}
            }
            let row = match table.carried {
                Some(carried) => carry(row, carried)
                    .map_err(|why| Failure::from(format!("{}: {why}", table.relation)))?,
                None => row,
            };
            let uniqueness = table.storage.uniqueness;
            let absent: Vec<String> = row.unchanged_toast.clone().unwrap_or_default();
            if uniqueness == Uniqueness::Multiset && !absent.is_empty() {
                return Err(Failure::from(format!(
                    "{}: an update of a keyless row lacks the unchanged TOASTed column(s) {}; a \
                     keyless table needs REPLICA IDENTITY FULL",
                    table.relation,
                    absent.join(", ")
                )));
            }
            let op = row.op as u8 as char;
            let change = SegmentChange {
                op,
                old_id: row.old_id.as_deref(),
                new_id: row.new_id.as_deref(),
                absent: &absent,
                bytes: row.cost(),
            };
            let pending = self.open.entry(row.relid).or_insert_with(|| Pending {
                segment: Segmenter::new(uniqueness),
                rows: Vec::new(),
            });
            if !pending.segment.admit(&change) {
                self.apply_pending(txn, row.relid).await?;
                let pending = self.open.entry(row.relid).or_insert_with(|| Pending {
                    segment: Segmenter::new(uniqueness),
                    rows: Vec::new(),
                });
                // An empty segment takes any change.
                pending.segment.admit(&change);
                pending.rows.push(row);
            } else {
                pending.rows.push(row);
            }
        }
        Ok(())
    }

    async fn finish(
        &mut self,
        txn: &Transaction<'_>,
        commit_lsn: u64,
        chunks: Option<&str>,
    ) -> Result<(), Failure> {
        self.apply_all(txn).await?;
        for table in self.tables.values_mut().flatten() {
            table.used = false;
        }
        let meta = self.target.meta().to_string();
        let record = cached(&mut self.prepared, txn, &replica::record_position(&meta))
            .await
            .map_err(|e| db_error("cannot prepare the position's record", &e))?;
        txn.execute(
            &record,
            &[&self.target.slot, &PgLsn::from(commit_lsn), &chunks],
        )
        .await
        .map_err(|e| {
            db_error(
                &format!("cannot record the position in {}", quote_ident(&meta)),
                &e,
            )
        })?;
        Ok(())
    }

    fn target(&self) -> String {
        format!("the replica in {}", quote_ident(self.target.meta()))
    }

    fn position_key(&self) -> String {
        format!(
            "rowid-cdc replica position {} slot {}",
            meta_table(self.target.meta(), replica::POSITION),
            self.target.slot
        )
    }
}
