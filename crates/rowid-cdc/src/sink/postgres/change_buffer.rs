//! The change-buffer writer: change rows with their row images into one change buffer per
//! source table, `<schema>.<prefix>_<source oid>`, whose shape is `rowid_registry::buffer`
//! (spec/change-buffer.md format 4), the one every capture path writes.
//!
//! Each transaction's changes are streamed with binary `COPY` (one `COPY` per run of changes
//! of one table; the image values are pgoutput's binary send forms, passed through untouched:
//! binary `COPY` reads exactly that form), together with the sink's position (the
//! transaction's commit LSN, in `rowid_cdc_position` beside the buffer).
//!
//! **A source's DDL is followed in the target transaction of the first change after it**: the
//! relation's columns travel with every change (from the Relation message and the identity
//! schema in force at its position); when they differ from what the buffer holds, the buffer
//! is altered first (`rowid_registry::buffer::alter_statements`, matched by `attnum`).
//!
//! Before anything is written to a buffer, it is created from the registry's DDL when it does
//! not exist, and otherwise checked: its columns must be the buffer's, no row may carry
//! another `row_identity_version` or `row_probe_version`, and nobody but the sink's own role
//! may write it or make writing it run code (`rowid_registry::buffer::check_writers`: owner,
//! grants, triggers, rules, row security; the same for the position table, and the schema
//! must belong to the sink's role or a superuser). A mismatch refuses the buffer.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rowid_registry::buffer::{self, BufferOp, CatalogColumn, ImageColumn, Side};
use rowid_registry::redefinition::{IdentityRecord, redefinition};
use rowid_registry::schema_message::RelationSchema;
use rowid_registry::sql::{QualifiedName, quote_ident};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{PgLsn, ToSql, Type};
use tokio_postgres::{Client, GenericClient, Transaction};

use super::{
    Endpoint, Failure, PostgresSink, Recorded, Row, RowAt, ShapeChange, Writer,
    create_schema_if_missing, db_error, sink_role, writers,
};
use crate::connect::conninfo::Conninfo;
use crate::connect::raw::SendForm;
use crate::lsn::Lsn;

/// The table, beside the buffer, where the sink records its position per slot.
pub const POSITION_TABLE: &str = buffer::POSITION_TABLE;

/// The buffer prefix a sink writes when none is named: buffers
/// `pgtrickle_changes.rowid_cdc_<source oid>`.
pub fn default_buffer() -> QualifiedName {
    QualifiedName::new(buffer::DEFAULT_SCHEMA, "rowid_cdc")
}

/// The buffer of source relation `relid` under `prefix` (`schema.prefix_<relid>`).
pub fn buffer_of(prefix: &QualifiedName, relid: u32) -> QualifiedName {
    QualifiedName {
        schema: prefix.schema.clone(),
        name: format!("{}_{relid}", prefix.name),
    }
}

impl PostgresSink {
    /// Connects, creates or checks the buffers' schema and position table, reads the sink's
    /// position. Buffers are created or checked when their first change arrives. Errors name
    /// the buffer and what is wrong; nothing is written to a buffer that fails a check.
    pub fn open(target: Target) -> io::Result<PostgresSink> {
        let own = Arc::new(Mutex::new(HashSet::new()));
        let endpoint = Endpoint {
            config: target.config.clone(),
            source_database: target.source_database.clone(),
            in_source: target.in_source,
            wait: target.wait,
        };
        let table = target.buffer.quoted();
        let writer = BufferWriter {
            upsert: format!(
                "INSERT INTO {} (\"buffer\", \"slot\", \"commit_lsn\") VALUES ($1, $2, $3) \
                 ON CONFLICT (\"buffer\", \"slot\") DO UPDATE SET \"commit_lsn\" = \
                 EXCLUDED.\"commit_lsn\"",
                position_table(&target.buffer).quoted()
            ),
            cover: format!(
                "UPDATE {} SET \"covered_lsn\" = $3 WHERE \"buffer\" OPERATOR(pg_catalog.=) $1 \
                 AND \"slot\" OPERATOR(pg_catalog.=) $2 \
                 AND (\"covered_lsn\" IS NULL OR \"covered_lsn\" OPERATOR(pg_catalog.<) $3)",
                position_table(&target.buffer).quoted()
            ),
            buffers: Buffers::new(&target, own.clone()),
            copy: None,
            numbering: (0, 0),
            target,
        };
        PostgresSink::spawn(endpoint, writer, table, own)
    }
}

/// Writes change rows into the buffers ([`super::Writer`]).
pub(super) struct BufferWriter {
    target: Target,
    buffers: Buffers,
    /// The COPY the open transaction writes into.
    copy: OpenCopy,
    /// Records the position.
    upsert: String,
    /// Records the coverage (every transaction committed before it is in the buffers).
    cover: String,
    /// The captured transaction being written (its commit LSN) and the last `seq` given in
    /// it. The writer numbers the rows it writes, `R` rows included, from 1 per captured
    /// transaction: whether an `R` row is due is known only here, and a number reserved
    /// upstream for one that is not would leave a gap that depends on when the process last
    /// started (a restarted run's buffer must equal an uninterrupted one's).
    numbering: (u64, i32),
}

impl BufferWriter {
    /// The next `seq` of the captured transaction committing at `commit_lsn`.
    fn next_seq(&mut self, commit_lsn: u64) -> i32 {
        if self.numbering.0 != commit_lsn {
            self.numbering = (commit_lsn, 0);
        }
        self.numbering.1 += 1;
        self.numbering.1
    }

    fn failed(&self, what: &str, e: &tokio_postgres::Error) -> Failure {
        db_error(&format!("{what} {}", self.target()), e)
    }

    /// Finishes the open COPY, if any.
    async fn finish_copy(&mut self) -> Result<(), Failure> {
        if let Some((_, _, mut w)) = self.copy.take() {
            w.as_mut()
                .finish()
                .await
                .map_err(|e| self.failed("cannot finish the COPY into", &e))?;
        }
        Ok(())
    }
}

impl Writer for BufferWriter {
    async fn open(
        &mut self,
        client: &mut Client,
        same_database: bool,
    ) -> Result<Recorded, Failure> {
        let (position, tables) = prepare(client, &self.target).await?;
        self.buffers.same_database = same_database;
        self.buffers.load_own(client).await?;
        Ok(Recorded {
            position,
            chunks: None,
            tables,
        })
    }

    async fn shape(&mut self, txn: &Transaction<'_>, shape: ShapeChange) -> Result<(), Failure> {
        self.finish_copy().await?;
        let ShapeChange {
            relid,
            relation,
            images,
            schema,
            at,
        } = shape;
        self.buffers.ensure(txn, relid, &relation, images).await?;
        let (Some(schema), Some(at)) = (schema, at) else {
            return Ok(());
        };
        if let Some(row) = self
            .buffers
            .mark(txn, relid, &relation, &schema, at)
            .await?
        {
            self.rows(txn, vec![row]).await?;
        }
        Ok(())
    }

    async fn rows(&mut self, txn: &Transaction<'_>, mut rows: Vec<Row>) -> Result<(), Failure> {
        for row in &mut rows {
            row.seq = self.next_seq(row.commit_lsn);
        }
        match write_rows(txn, &mut self.buffers, &mut self.copy, &rows).await {
            Ok(()) => Ok(()),
            Err(RowsError::Db(what, e)) => Err(self.failed(what, &e)),
            Err(RowsError::Failure(f)) => Err(f),
        }
    }

    /// Change buffers take no snapshot rows (the start checks refuse `--snapshot` into them),
    /// so no chunk record is kept.
    async fn finish(
        &mut self,
        txn: &Transaction<'_>,
        commit_lsn: u64,
        _chunks: Option<&str>,
    ) -> Result<(), Failure> {
        self.finish_copy().await?;
        let prefix = self.target.buffer.quoted();
        txn.execute(
            &self.upsert,
            &[&prefix, &self.target.slot, &PgLsn::from(commit_lsn)],
        )
        .await
        .map_err(|e| self.failed("cannot record the position of", &e))?;
        Ok(())
    }

    async fn covered(&mut self, client: &Client, lsn: u64) -> Result<(), Failure> {
        let prefix = self.target.buffer.quoted();
        client
            .execute(
                &self.cover,
                &[&prefix, &self.target.slot, &PgLsn::from(lsn)],
            )
            .await
            .map_err(|e| self.failed("cannot record the coverage of", &e))?;
        Ok(())
    }

    fn target(&self) -> String {
        format!("{}_*", self.target.buffer.quoted())
    }

    fn position_key(&self) -> String {
        format!(
            "rowid-cdc change buffer position {} buffer {} slot {}",
            position_table(&self.target.buffer).quoted(),
            self.target.buffer.quoted(),
            self.target.slot
        )
    }
}

/// Where to write and for which slot.
#[derive(Clone, Debug)]
pub struct Target {
    /// The connection (its password is never printed).
    pub config: Conninfo,
    /// The buffer.
    pub buffer: QualifiedName,
    /// The slot whose position is recorded.
    pub slot: String,
    /// No state file exists yet: a recorded position for this slot would be changes no
    /// state accounts for, and is refused.
    pub fresh: bool,
    /// The captured database (`system_identifier/database OID`, when readable), and whether
    /// the sink writes into it by definition (`postgres:` without a DSN): the sink's own
    /// buffers there are published too, and their changes are skipped.
    pub source_database: Option<String>,
    /// The sink writes into the captured database.
    pub in_source: bool,
    /// How long to wait at open for another session writing this buffer's position for the
    /// slot to end (a killed consumer's, finishing its last COMMIT): `--slot-wait`.
    pub wait: std::time::Duration,
}

/// The text of the transaction-level advisory lock under which sinks create the schema and
/// the position table `pos` (`pg_advisory_xact_lock(hashtextextended(text, 0))`,
/// spec/change-buffer.md §5).
fn creation_lock(pos: &QualifiedName) -> String {
    format!("rowid-cdc change buffer position table {}", pos.quoted())
}

fn position_table(buffer: &QualifiedName) -> QualifiedName {
    QualifiedName {
        schema: buffer.schema.clone(),
        name: POSITION_TABLE.into(),
    }
}

/// Checks the buffers' schema, creates or checks the position table; returns the recorded
/// position and the position table's OID. Buffers are created or checked when their first
/// change arrives ([`Buffers::ensure`]).
async fn prepare(client: &mut Client, target: &Target) -> Result<(Option<Lsn>, Vec<u32>), Failure> {
    let b = &target.buffer;
    let name = b.quoted();
    let pos = position_table(b);
    let me: String = client
        .query_one("SELECT CURRENT_USER::pg_catalog.text", &[])
        .await
        .map_err(|e| db_error("cannot read the sink's role", &e))?
        .get(0);
    let me_quoted = sink_role(client).await?;
    // Another sink opening a buffer of this position table waits here: its CREATE SCHEMA or
    // CREATE TABLE IF NOT EXISTS would otherwise race this one's on the catalog's unique
    // indexes, and its REVOKE this one's on the same pg_class row ("tuple concurrently
    // updated").
    let creating = client
        .transaction()
        .await
        .map_err(|e| db_error(&format!("cannot begin creating {}", pos.quoted()), &e))?;
    creating
        .execute(
            "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))",
            &[&creation_lock(&pos)],
        )
        .await
        .map_err(|e| db_error(&format!("cannot lock the creation of {}", pos.quoted()), &e))?;
    if let Some(schema) = &b.schema {
        create_schema_if_missing(&creating, schema, &name).await?;
        // Whoever owns the schema can drop or rename what is in it.
        let owner: Option<(String, bool)> = creating
            .query_opt(
                "SELECT n.nspowner::pg_catalog.regrole::pg_catalog.text, r.rolsuper \
                 FROM pg_catalog.pg_namespace n \
                 JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner \
                 WHERE n.nspname OPERATOR(pg_catalog.=) $1",
                &[schema],
            )
            .await
            .map_err(|e| db_error(&format!("cannot read the schema of {name}"), &e))?
            .map(|r| (r.get(0), r.get(1)));
        if let Some((owner, superuser)) = owner
            && owner != me_quoted
            && !superuser
        {
            return Err(Failure::from(format!(
                "{name} is refused: its schema {} belongs to {owner}, who could replace the \
                 buffer; use a schema of {me} (--buffer SCHEMA.TABLE)",
                quote_ident(schema)
            )));
        }
    }
    creating
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {p} (\"buffer\" pg_catalog.text NOT NULL, \
             \"slot\" pg_catalog.text NOT NULL, \"commit_lsn\" pg_catalog.pg_lsn NOT NULL, \
             \"covered_lsn\" pg_catalog.pg_lsn, \
             PRIMARY KEY (\"buffer\", \"slot\")) USING heap; \
             ALTER TABLE {p} ADD COLUMN IF NOT EXISTS \"covered_lsn\" pg_catalog.pg_lsn; \
             REVOKE ALL ON TABLE {p} FROM PUBLIC",
            p = pos.quoted()
        ))
        .await
        .map_err(|e| db_error(&format!("cannot create {}", pos.quoted()), &e))?;
    creating
        .commit()
        .await
        .map_err(|e| db_error(&format!("cannot create {}", pos.quoted()), &e))?;
    buffer::check_writers(
        &pos.quoted(),
        &writers(client, &pos.quoted()).await?,
        &me_quoted,
    )
    .map_err(|e| Failure::from(e.to_string()))?;
    let recorded: Option<PgLsn> = client
        .query_opt(
            &format!(
                "SELECT \"commit_lsn\" FROM {} WHERE \"buffer\" OPERATOR(pg_catalog.=) $1 \
                 AND \"slot\" OPERATOR(pg_catalog.=) $2",
                pos.quoted()
            ),
            &[&name, &target.slot],
        )
        .await
        .map_err(|e| db_error(&format!("cannot read {}", pos.quoted()), &e))?
        .map(|r| r.get(0));
    let recorded = recorded.map(|l| Lsn(u64::from(l)));
    if target.fresh
        && let Some(lsn) = recorded
    {
        return Err(Failure::from(format!(
            "{name} already holds changes of a slot named {:?}, through commit {lsn}, that no \
             state file accounts for: give the state file that wrote them (--state), or another \
             buffer, or delete that slot's rows from {name} and {}",
            target.slot,
            pos.quoted()
        )));
    }
    let mut tables = Vec::new();
    for t in [&pos.quoted()] {
        let oid: u32 = client
            .query_one(
                "SELECT $1::pg_catalog.text::pg_catalog.regclass::pg_catalog.oid",
                &[t],
            )
            .await
            .map_err(|e| db_error(&format!("cannot look up {t}"), &e))?
            .get(0);
        tables.push(oid);
    }
    Ok((recorded, tables))
}

/// The fixed columns' types, in [`buffer::COLUMNS`] order.
const TYPES: [Type; 14] = [
    Type::INT8,
    Type::INT4,
    Type::OID,
    Type::CHAR,
    Type::BYTEA,
    Type::BYTEA,
    Type::PG_LSN,
    Type::PG_LSN,
    Type::INT2,
    Type::INT2,
    Type::TEXT,
    Type::CHAR,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
];

/// A buffer the sink has checked (or created) and shaped in this connection.
#[derive(Debug)]
struct Known {
    quoted: String,
    /// Its image columns, in the order rows carry their values.
    columns: Vec<ImageColumn>,
    /// The identity its rows are written under (spec/change-buffer.md §1d).
    record: Record,
}

/// What a buffer records of the identity its rows are written under.
#[derive(Debug)]
enum Record {
    /// The sink created it and no identity schema has been known since: the first one is
    /// its record, with no `R` row (no change in it to compare with).
    Created,
    /// Its table comment's record (`None`: it holds none).
    Read(Option<IdentityRecord>),
}

/// The per-table buffers of one sink connection.
#[derive(Debug)]
struct Buffers {
    prefix: QualifiedName,
    known: HashMap<u32, Known>,
    /// Storage types by source type name (a domain's base type).
    storage: HashMap<String, String>,
    own: Arc<Mutex<HashSet<u32>>>,
    same_database: bool,
    me: String,
}

impl Buffers {
    fn new(target: &Target, own: Arc<Mutex<HashSet<u32>>>) -> Buffers {
        Buffers {
            prefix: target.buffer.clone(),
            known: HashMap::new(),
            storage: HashMap::new(),
            own,
            same_database: false,
            me: String::new(),
        }
    }

    fn mark_own(&self, oid: u32) {
        if self.same_database
            && let Ok(mut own) = self.own.lock()
        {
            own.insert(oid);
        }
    }

    /// Reads the sink's role, and in the captured database the buffers already there (their
    /// changes come back through the slot and are skipped).
    async fn load_own(&mut self, client: &Client) -> Result<(), Failure> {
        self.me = sink_role(client).await?;
        if !self.same_database {
            return Ok(());
        }
        let schema = self
            .prefix
            .schema
            .clone()
            .unwrap_or_else(|| "public".into());
        let start = format!("{}_", self.prefix.name);
        let rows = client
            .query(
                "SELECT c.oid, c.relname::pg_catalog.text FROM pg_catalog.pg_class c \
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
                 WHERE n.nspname OPERATOR(pg_catalog.=) $1 \
                   AND pg_catalog.starts_with(c.relname::pg_catalog.text, $2)",
                &[&schema, &start],
            )
            .await
            .map_err(|e| db_error("cannot list the sink's buffers", &e))?;
        for row in rows {
            let name: String = row.get(1);
            let digits = &name[start.len().min(name.len())..];
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                self.mark_own(row.get(0));
            }
        }
        Ok(())
    }

    /// A source type's storage type in the sink's database (a domain's base type).
    async fn storage_type(
        &mut self,
        client: &impl GenericClient,
        relation: &str,
        column: &ImageColumn,
    ) -> Result<String, Failure> {
        if let Some(found) = self.storage.get(&column.sql_type) {
            return Ok(found.clone());
        }
        let found: String = client
            .query_one(buffer::STORAGE_TYPE_QUERY, &[&column.sql_type])
            .await
            .map_err(|e| {
                db_error(
                    &format!(
                        "the type {} of {relation}.{} is not one the sink's database knows",
                        column.sql_type, column.name
                    ),
                    &e,
                )
            })?
            .get(0);
        self.storage.insert(column.sql_type.clone(), found.clone());
        Ok(found)
    }

    /// Makes the buffer of `relid` exist, pass the checks, and hold `images` (the source's
    /// columns at the next change; `None`: unknown there, the buffer is left as it is), inside
    /// the open transaction.
    async fn ensure(
        &mut self,
        client: &impl GenericClient,
        relid: u32,
        relation: &str,
        images: Option<Vec<ImageColumn>>,
    ) -> Result<(), Failure> {
        let table = buffer_of(&self.prefix, relid);
        let name = table.quoted();
        let want = match images {
            Some(images) => {
                let mut want = Vec::with_capacity(images.len());
                for c in images {
                    let sql_type = self.storage_type(client, relation, &c).await?;
                    want.push(ImageColumn { sql_type, ..c });
                }
                buffer::check_image_names(relation, &want)
                    .map_err(|e| Failure::from(e.to_string()))?;
                Some(want)
            }
            None => None,
        };
        let (have, record) = match self.known.remove(&relid) {
            Some(known) => (known.columns, known.record),
            None => self.open_buffer(client, &table, want.as_deref()).await?,
        };
        let columns = match want {
            Some(want) => {
                // A retyped column of an empty buffer converts nothing (any source USING);
                // the sink is the buffer's only writer.
                let retyped = have.iter().any(|h| {
                    want.iter()
                        .any(|w| w.attnum == h.attnum && w.sql_type != h.sql_type)
                });
                let holds_rows = !retyped
                    || client
                        .query_one(&format!("SELECT EXISTS (SELECT FROM {name})"), &[])
                        .await
                        .map_err(|e| db_error(&format!("cannot read {name}"), &e))?
                        .get::<_, bool>(0);
                for sql in buffer::alter_statements(&table, &have, &want, holds_rows) {
                    client.batch_execute(&sql).await.map_err(|e| {
                        db_error(
                            &format!("cannot follow the columns of {relation} in {name}"),
                            &e,
                        )
                    })?;
                }
                want
            }
            None => have,
        };
        self.known.insert(
            relid,
            Known {
                quoted: name,
                columns,
                record,
            },
        );
        Ok(())
    }

    /// When `schema` (the source's identity schema from the next change of transaction `at`
    /// on) redefines the identities `relid`'s buffer holds, or says a DDL of the transaction
    /// rewrote the source's values and no `R` row says so yet: records the identity from then
    /// on in the buffer's comment and returns the `R` row to write at `at`, as the capture
    /// trigger does (`rowid_registry::redefinition`, spec/change-buffer.md §1d).
    async fn mark(
        &mut self,
        client: &impl GenericClient,
        relid: u32,
        relation: &str,
        schema: &RelationSchema,
        at: RowAt,
    ) -> Result<Option<Row>, Failure> {
        let known = self.known.get_mut(&relid).ok_or_else(|| {
            Failure::from(format!(
                "a schema of relation OID {relid} before its buffer"
            ))
        })?;
        let (reason, keep) = match &known.record {
            Record::Created => (None, IdentityRecord::baseline(schema)),
            Record::Read(recorded) => {
                match redefinition(relation, recorded.as_ref(), schema, schema.rewritten) {
                    None => return Ok(None),
                    Some((reason, keep)) => (Some(reason), keep),
                }
            }
        };
        let literal: String = client
            .query_one("SELECT pg_catalog.quote_literal($1)", &[&keep.to_comment()])
            .await
            .map_err(|e| db_error("cannot quote a buffer's identity record", &e))?
            .get(0);
        client
            .batch_execute(&format!("COMMENT ON TABLE {} IS {literal}", known.quoted))
            .await
            .map_err(|e| {
                db_error(
                    &format!(
                        "cannot record the identity of {relation} in {}",
                        known.quoted
                    ),
                    &e,
                )
            })?;
        known.record = Record::Read(Some(keep));
        Ok(reason.map(|reason| Row {
            xid: at.xid,
            // Numbered by the writer with the transaction's other rows.
            seq: 0,
            relid,
            op: BufferOp::Redefined.code() as i8,
            new_id: None,
            old_id: None,
            commit_lsn: at.commit_lsn,
            change_lsn: at.change_lsn,
            unidentified: Some(reason),
            old_image: None,
            backfilled: None,
            unchanged_toast: None,
            new: None,
            old: None,
        }))
    }

    /// Creates the buffer `table` holding `images` (none when unknown) or checks the one
    /// there (owner, grants, code, shape, versions); returns the image columns it holds and
    /// what it records of its identity.
    async fn open_buffer(
        &mut self,
        client: &impl GenericClient,
        table: &QualifiedName,
        images: Option<&[ImageColumn]>,
    ) -> Result<(Vec<ImageColumn>, Record), Failure> {
        let name = table.quoted();
        let exists: bool = client
            .query_one("SELECT pg_catalog.to_regclass($1) IS NOT NULL", &[&name])
            .await
            .map_err(|e| db_error(&format!("cannot look up {name}"), &e))?
            .get(0);
        if !exists {
            let mut ddl = buffer::create_table(table, images.unwrap_or_default());
            ddl.push(buffer::revoke_public(table));
            client
                .batch_execute(&ddl.join("; "))
                .await
                .map_err(|e| db_error(&format!("cannot create the change buffer {name}"), &e))?;
        }
        buffer::check_writers(&name, &writers(client, &name).await?, &self.me)
            .map_err(|e| Failure::from(e.to_string()))?;
        let columns: Vec<CatalogColumn> = client
            .query(buffer::SHAPE_QUERY, &[&name])
            .await
            .map_err(|e| db_error(&format!("cannot read the columns of {name}"), &e))?
            .iter()
            .map(|r| CatalogColumn {
                name: r.get(0),
                sql_type: r.get(1),
                not_null: r.get(2),
                comment: r.get(3),
            })
            .collect();
        let have =
            buffer::check_shape(&name, &columns).map_err(|e| Failure::from(e.to_string()))?;
        if let Some(row) = client
            .query_opt(&buffer::foreign_versions_query(&name), &[])
            .await
            .map_err(|e| db_error(&format!("cannot read the versions in {name}"), &e))?
        {
            return Err(buffer::foreign_versions(&name, row.get(0), row.get(1))
                .to_string()
                .into());
        }
        // The format's constraints (versions, and op with R): a buffer of an earlier format
        // is refused by name.
        let defs: Vec<String> = client
            .query(buffer::CONSTRAINTS_QUERY, &[&name])
            .await
            .map_err(|e| db_error(&format!("cannot read the constraints of {name}"), &e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        buffer::check_version_constraints(&name, &defs)
            .map_err(|e| Failure::from(e.to_string()))?;
        let oid: u32 = client
            .query_one(
                "SELECT $1::pg_catalog.text::pg_catalog.regclass::pg_catalog.oid",
                &[&name],
            )
            .await
            .map_err(|e| db_error(&format!("cannot look up {name}"), &e))?
            .get(0);
        self.mark_own(oid);
        let record = if exists {
            let comment: Option<String> = client
                .query_one("SELECT pg_catalog.obj_description($1, 'pg_class')", &[&oid])
                .await
                .map_err(|e| db_error(&format!("cannot read the comment of {name}"), &e))?
                .get(0);
            Record::Read(comment.as_deref().and_then(IdentityRecord::from_comment))
        } else {
            Record::Created
        };
        Ok((have, record))
    }

    /// The `COPY` writing rows of `relid`'s buffer, and its column count.
    fn copy_statement(&self, relid: u32) -> Result<(String, usize), Failure> {
        let known = self.known.get(&relid).ok_or_else(|| {
            Failure::from(format!(
                "a change of relation OID {relid} before its buffer"
            ))
        })?;
        // The versions are written, not left to the buffer's defaults: a buffer created by
        // another release (its CHECK constraints naming its versions) refuses the first row.
        let mut columns = buffer::column_list();
        for c in &known.columns {
            for side in [Side::New, Side::Old] {
                columns.push_str(", ");
                columns.push_str(&quote_ident(&c.column(side)));
            }
        }
        Ok((
            format!(
                "COPY {} ({columns}) FROM STDIN (FORMAT binary)",
                known.quoted
            ),
            TYPES.len() + 2 * known.columns.len(),
        ))
    }
}

/// The COPY a transaction has open: the relation, the number of image fields, the writer.
type OpenCopy = Option<(u32, usize, std::pin::Pin<Box<BinaryCopyInWriter>>)>;

/// Why [`write_rows`] stopped.
enum RowsError {
    /// What failed (`"cannot COPY into"` ...) and the server's error.
    Db(&'static str, tokio_postgres::Error),
    /// The sink's own refusal.
    Failure(Failure),
}

/// Writes `rows` into their buffers, each run of one relation's rows through one `COPY`
/// (the open one goes on when the first row is of its relation).
async fn write_rows(
    txn: &Transaction<'_>,
    buffers: &mut Buffers,
    copy: &mut OpenCopy,
    rows: &[Row],
) -> Result<(), RowsError> {
    for row in rows {
        if copy.as_ref().map(|(relid, _, _)| *relid) != Some(row.relid) {
            if let Some((_, _, mut w)) = copy.take() {
                w.as_mut()
                    .finish()
                    .await
                    .map_err(|e| RowsError::Db("cannot finish the COPY into", e))?;
            }
            let (statement, fields) = buffers
                .copy_statement(row.relid)
                .map_err(RowsError::Failure)?;
            let sink = txn
                .copy_in(&statement)
                .await
                .map_err(|e| RowsError::Db("cannot COPY into", e))?;
            let mut types = TYPES.to_vec();
            types.resize(fields, Type::BYTEA);
            *copy = Some((
                row.relid,
                fields - TYPES.len(),
                Box::pin(BinaryCopyInWriter::new(sink, &types)),
            ));
        }
        match copy.as_mut() {
            Some((_, images, w)) => write_row(w.as_mut(), row, *images / 2)
                .await
                .map_err(|e| RowsError::Db("cannot write a change into", e))?,
            None => return Err(RowsError::Failure("no COPY for a row".to_string().into())),
        }
    }
    Ok(())
}

/// One row's COPY fields.
async fn write_row(
    w: std::pin::Pin<&mut BinaryCopyInWriter>,
    row: &Row,
    image_columns: usize,
) -> Result<(), tokio_postgres::Error> {
    let new_id = row.new_id.as_deref();
    let old_id = row.old_id.as_deref();
    let commit_lsn = PgLsn::from(row.commit_lsn);
    let change_lsn = PgLsn::from(row.change_lsn);
    let mut values: Vec<&(dyn ToSql + Sync)> = vec![
        &row.xid,
        &row.seq,
        &row.relid,
        &row.op,
        &new_id,
        &old_id,
        &commit_lsn,
        &change_lsn,
        &buffer::ROW_IDENTITY_VERSION,
        &buffer::ROW_PROBE_VERSION,
        &row.unidentified,
        &row.old_image,
        &row.backfilled,
        &row.unchanged_toast,
    ];
    fn value(image: &Option<Vec<Option<Bytes>>>, i: usize) -> SendForm<'_> {
        SendForm(
            image
                .as_ref()
                .and_then(|cells| cells.get(i))
                .and_then(|c| c.as_deref()),
        )
    }
    let forms: Vec<SendForm<'_>> = (0..image_columns)
        .flat_map(|i| [value(&row.new, i), value(&row.old, i)])
        .collect();
    values.extend(forms.iter().map(|f| f as &(dyn ToSql + Sync)));
    w.write(&values).await
}
