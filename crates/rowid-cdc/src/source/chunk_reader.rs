//! Reading a keyed table's snapshot in chunks while the stream runs ([`crate::chunks`] has
//! the rules that make it exact): the next rows after the table's cursor in key order, in one
//! `REPEATABLE READ` transaction whose snapshot is recorded with them, then a high watermark
//! carrying a random nonce (a non-transactional logical message: it reaches the stream after
//! every transaction the snapshot saw). Values are read in binary, so each arrives in its send
//! form: the bytes pgoutput's binary tuples and the initial COPY carry.
//!
//! The read locks its table (`ACCESS SHARE`) before the snapshot is taken and reads the
//! table's identity schema under it: the rows are in the shape that schema describes, and a
//! read whose shape is not the stream's is abandoned before any row is read, and before any
//! statement naming its columns is prepared (asked again once
//! the stream or the snapshot caught up; [`crate::chunks`] delivers a chunk before a later
//! DDL of its table).
//!
//! Which tables can be chunked ([`chunkable`]): a key from a unique index on NOT NULL columns
//! whose types encode order-preservingly (the cursor compares identities as bytes, and the
//! read orders by the key: the two orders must be one), so integers, `boolean`, `uuid`,
//! `date`, `time`, `timestamp[tz]`, `bytea`, and text types under the `C` or `POSIX`
//! collation. Other tables are copied under the slot's exported snapshot at creation.

use std::collections::HashMap;

use rowid_codec::Domain;
use rowid_pgoutput::Column;
use rowid_registry::schema_message::RelationSchema;
use rowid_registry::sql::{QualifiedName, quote_ident};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use super::checks;
use crate::chunks::{ChunkRead, ChunkRequest, TxnSnapshot, WATERMARK_PREFIX};
use crate::config::Options;
use crate::connect::net;
use crate::connect::raw::{RawCell, SendForm};
use crate::error::{CdcError, setup};

/// What a read took under its snapshot: the snapshot, its time, the rows after the cursor and
/// the rows of the pending keys.
type Read = (
    TxnSnapshot,
    i64,
    Vec<tokio_postgres::Row>,
    Vec<tokio_postgres::Row>,
);

/// Rows per chunk unless `--snapshot-chunk` says otherwise.
pub const DEFAULT_CHUNK_ROWS: i64 = 4096;

/// Key types whose identity bytes sort as PostgreSQL's default B-tree sorts the values
/// (spec/wire-format.md §10), as `format_type(oid, NULL)` names them.
const ORDERED: [&str; 11] = [
    "smallint",
    "integer",
    "bigint",
    "boolean",
    "uuid",
    "date",
    "time without time zone",
    "timestamp without time zone",
    "timestamp with time zone",
    "bytea",
    "oid",
];

/// Text types: ordered as their identity bytes only under a byte-order collation.
const TEXT: [&str; 3] = ["text", "character varying", "character"];

/// Whether `schema`'s table can be snapshotted in chunks: `Err` says why not.
pub async fn chunkable(
    client: &Client,
    schema: &RelationSchema,
    publication: &str,
) -> Result<(), String> {
    let filtered = client
        .query_opt(
            "SELECT p.rowfilter IS NOT NULL, p.attnames::pg_catalog.text[] \
             FROM pg_catalog.pg_publication_tables p \
             WHERE p.pubname OPERATOR(pg_catalog.=) $1 \
               AND p.schemaname OPERATOR(pg_catalog.=) $2 \
               AND p.tablename OPERATOR(pg_catalog.=) $3",
            &[&publication, &schema.namespace, &schema.relname],
        )
        .await
        .map_err(|e| format!("cannot read the publication: {e}"))?;
    if let Some(row) = filtered {
        let (filter, published): (bool, Vec<String>) = (row.get(0), row.get(1));
        let columns: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
        if filter || published != columns {
            return Err(format!(
                "publication {publication} publishes it with a row filter or a column list, \
                 which a chunk's read would not apply"
            ));
        }
    }
    let def = schema
        .identity
        .as_ref()
        .map_err(|r| format!("no usable identity ({})", r.message))?;
    if def.domain != Domain::ScanKey || def.index.is_none() {
        return Err("keyless: no key to read it in order by".into());
    }
    for f in &def.fields {
        let nullable = schema
            .columns
            .iter()
            .find(|c| c.name == f.column)
            .is_none_or(|c| !c.not_null);
        if nullable {
            return Err(format!("key column {} may be NULL", f.column));
        }
        let row = client
            .query_one(
                "SELECT pg_catalog.format_type(a.atttypid, NULL), \
                        COALESCE(co.collname::pg_catalog.text, '') \
                 FROM pg_catalog.pg_attribute a \
                 LEFT JOIN pg_catalog.pg_collation co ON co.oid OPERATOR(pg_catalog.=) a.attcollation \
                 WHERE a.attrelid OPERATOR(pg_catalog.=) $1 \
                   AND a.attname OPERATOR(pg_catalog.=) $2::pg_catalog.text::pg_catalog.name",
                &[&schema.relid, &f.column],
            )
            .await
            .map_err(|e| format!("cannot read key column {}: {e}", f.column))?;
        let (ty, collation): (String, String) = (row.get(0), row.get(1));
        let ordered = ORDERED.contains(&ty.as_str())
            || (TEXT.contains(&ty.as_str()) && matches!(collation.as_str(), "C" | "POSIX"));
        if !ordered {
            return Err(format!(
                "key column {} ({ty}{}) does not encode in its sort order",
                f.column,
                if collation.is_empty() {
                    String::new()
                } else {
                    format!(" COLLATE {collation}")
                }
            ));
        }
    }
    Ok(())
}

/// The statements that write a chunk's high watermark, with `{prefix}` and `{nonce}` to fill
/// in, for a server of `version` (`server_version_num`). The watermark must reach the stream
/// promptly: a walsender sends only WAL that is flushed, and a non-transactional message is
/// not flushed by itself before PostgreSQL 17 (it waits for the WAL writer, up to
/// `wal_writer_delay` per chunk). PostgreSQL 17 flushes it when asked; before, the message is
/// followed in its transaction by an xid and a commit flushed locally (`synchronous_commit =
/// local`: the walsender needs the local flush only, and a synchronous standby that is down
/// must not hold the stream), whose flush covers it (the transaction has no change, so
/// pgoutput sends nothing of it).
fn watermark_sql(version: i32) -> &'static str {
    if version >= 170000 {
        "SELECT pg_catalog.pg_logical_emit_message(false, '{prefix}', \
         '{nonce}'::pg_catalog.text, true)"
    } else {
        "BEGIN; SET LOCAL synchronous_commit = local; \
         SELECT pg_catalog.pg_logical_emit_message(false, '{prefix}', '{nonce}'::pg_catalog.text); \
         SELECT pg_catalog.txid_current(); COMMIT"
    }
}

/// `ONLY ` for a table of relkind `kind`, nothing for a partitioned root (it stands for its
/// leaves: publish_via_partition_root).
fn only(kind: &str) -> &'static str {
    if kind == "p" { "" } else { "ONLY " }
}

/// Reads chunks over a SQL connection of its own.
pub struct ChunkReader {
    client: Client,
    /// Rows per chunk.
    rows: i64,
    /// Takes a read's snapshot: the snapshot, the time, the table's identity schema under it.
    snapshot: Statement,
    /// The statements that write a chunk's high watermark and flush it (see
    /// [`watermark_sql`]).
    watermark: &'static str,
    /// Per table: its statements for the shape they were prepared for.
    statements: HashMap<u32, Prepared>,
}

/// One table's statements.
#[derive(Clone)]
struct Prepared {
    /// The identity schema they were prepared for.
    schema: RelationSchema,
    /// Its rows as `pg_class.reltuples` estimates them (`None`: no estimate).
    estimate: Option<u64>,
    /// The first chunk.
    first: Statement,
    /// The chunks after a cursor.
    next: Statement,
    /// One row by its key (a pending key).
    point: Statement,
}

impl ChunkReader {
    /// Connects to the source; `identity_table` is the OID of the identity schema table the
    /// start checks authenticated.
    pub async fn connect(opts: &Options, identity_table: u32) -> Result<ChunkReader, CdcError> {
        let connected = net::connect(&opts.dsn)
            .await
            .map_err(|e| setup(format!("snapshot chunks: {}", e.message)))?;
        let connection = connected.connection;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        connected
            .client
            .batch_execute("SET search_path = pg_catalog, pg_temp; SET lock_timeout = '5s'")
            .await?;
        let version: i32 = connected
            .client
            .query_one(
                "SELECT pg_catalog.current_setting('server_version_num')::pg_catalog.int4",
                &[],
            )
            .await?
            .get(0);
        // The identity schema table read below is the one the start checks authenticated.
        let identity_schemas =
            checks::trusted_identity_table(&connected.client, identity_table, "snapshot chunks")
                .await?;
        let snapshot = connected
            .client
            .prepare(&format!(
                "SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text, \
                        ((pg_catalog.date_part('epoch', pg_catalog.now()) - 946684800) \
                         * 1000000)::pg_catalog.int8, \
                        (SELECT s.schema FROM {} s \
                         WHERE s.relid OPERATOR(pg_catalog.=) $1)",
                identity_schemas.quoted()
            ))
            .await?;
        Ok(ChunkReader {
            client: connected.client,
            rows: opts.snapshot_chunk,
            snapshot,
            watermark: watermark_sql(version),
            statements: HashMap::new(),
        })
    }

    /// `LOCK TABLE` of the table `request` names, in access share mode (a partitioned root
    /// with its leaves); `None` when the table is gone. Read from `pg_class` by OID alone:
    /// nothing here depends on the table's columns.
    async fn lock_statement(&self, request: &ChunkRequest) -> Result<Option<String>, CdcError> {
        let kind: Option<String> = self
            .client
            .query_opt(
                "SELECT relkind::pg_catalog.text FROM pg_catalog.pg_class \
                 WHERE oid OPERATOR(pg_catalog.=) $1",
                &[&request.relid],
            )
            .await?
            .map(|row| row.get(0));
        Ok(kind.map(|kind| {
            format!(
                "LOCK TABLE {}{} IN ACCESS SHARE MODE",
                only(&kind),
                QualifiedName::new(&request.namespace, &request.relname).quoted()
            )
        }))
    }

    /// The table's statements for the shape `request` stands at (prepared again when the
    /// shape changed). Called inside a read's transaction, the table locked and its shape
    /// under the read's snapshot checked to be the request's: the columns it names exist.
    /// (Prepared before that check, a statement for a shape the stream had just reached
    /// could name a column a later DDL, not yet streamed, had dropped or renamed: "column
    /// does not exist" stopped the run.)
    async fn statements(&mut self, request: &ChunkRequest) -> Result<Prepared, CdcError> {
        if let Some(found) = self.statements.get(&request.relid)
            && found.schema == request.schema
        {
            return Ok(found.clone());
        }
        let class = self
            .client
            .query_one(
                "SELECT relkind::pg_catalog.text, reltuples::pg_catalog.float8 \
                 FROM pg_catalog.pg_class WHERE oid OPERATOR(pg_catalog.=) $1",
                &[&request.relid],
            )
            .await?;
        let (kind, estimate): (String, f64) = (class.get(0), class.get(1));
        let only = only(&kind);
        let table = QualifiedName::new(&request.namespace, &request.relname).quoted();
        let columns: Vec<String> = request.columns.iter().map(|c| quote_ident(c)).collect();
        let key: Vec<String> = request.key.iter().map(|c| quote_ident(c)).collect();
        let params: Vec<String> = (2..key.len() + 2).map(|i| format!("${i}")).collect();
        let select = format!("SELECT {} FROM {only}{table}", columns.join(", "));
        let order = format!("ORDER BY {} LIMIT $1", key.join(", "));
        let first = self.client.prepare(&format!("{select} {order}")).await?;
        let next = self
            .client
            .prepare(&format!(
                "{select} WHERE ({}) OPERATOR(pg_catalog.>) ({}) {order}",
                key.join(", "),
                params.join(", ")
            ))
            .await?;
        let point_params: Vec<String> = (1..=key.len()).map(|i| format!("${i}")).collect();
        let point = self
            .client
            .prepare(&format!(
                "{select} WHERE ({}) OPERATOR(pg_catalog.=) ({})",
                key.join(", "),
                point_params.join(", ")
            ))
            .await?;
        let prepared = Prepared {
            schema: request.schema.clone(),
            // -1: never vacuumed or analyzed.
            estimate: (estimate >= 0.0).then_some(estimate as u64),
            first,
            next,
            point,
        };
        self.statements.insert(request.relid, prepared.clone());
        Ok(prepared)
    }

    /// The estimated rows of a table read before (`pg_class.reltuples` then).
    pub fn estimate(&self, relid: u32) -> Option<u64> {
        self.statements.get(&relid).and_then(|p| p.estimate)
    }

    /// Reads the chunk `request` asks for and writes its high watermark; `None` when the
    /// table's shape under the read's snapshot is not the one the stream stands at (a DDL on
    /// one side of the snapshot and not yet on the other): nothing was read, ask again once
    /// the stream moved.
    pub async fn read(&mut self, request: &ChunkRequest) -> Result<Option<ChunkRead>, CdcError> {
        let Some(lock) = self.lock_statement(request).await? else {
            // Dropped since the stream's schema (the stream will say so): asked again later.
            return Ok(None);
        };
        let mut nonce = [0u8; 16];
        getrandom::getrandom(&mut nonce)
            .map_err(|e| setup(format!("snapshot chunks: no random nonce: {e}")))?;
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        // The table is locked before the snapshot is taken (LOCK takes none): no DDL of it
        // commits during the read, every one before it is seen, so the catalog the read
        // uses is the shape its snapshot sees. That shape must be the request's.
        let begin = format!("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; {lock}");
        if let Err(e) = self.client.batch_execute(&begin).await {
            // Renamed or dropped since the stream's schema (the stream will say so), or a DDL
            // holds it longer than the lock timeout: asked again later.
            if matches!(
                e.code(),
                Some(&SqlState::UNDEFINED_TABLE) | Some(&SqlState::LOCK_NOT_AVAILABLE)
            ) {
                self.rollback().await?;
                return Ok(None);
            }
            let _ = self.rollback().await;
            return Err(e.into());
        }
        let read = match self.read_locked(request).await {
            Ok(Some(read)) => read,
            Ok(None) => {
                self.rollback().await?;
                return Ok(None);
            }
            // The error is the one to report; the connection is likely gone with it.
            Err(e) => {
                let _ = self.rollback().await;
                return Err(e);
            }
        };
        let (snapshot, ts, rows, pending) = read;
        // The nonce is hex digits, the prefix a constant: both are literals safely.
        let commit_and_mark = format!(
            "COMMIT; {}",
            self.watermark
                .replace("{prefix}", WATERMARK_PREFIX)
                .replace("{nonce}", &nonce)
        );
        self.client.batch_execute(&commit_and_mark).await?;
        let tuples = |rows: &[tokio_postgres::Row]| {
            rows.iter()
                .map(|row| {
                    (0..request.columns.len())
                        .map(|i| match row.try_get::<_, RawCell>(i) {
                            Ok(RawCell(Some(b))) => Ok(Column::Binary(b)),
                            Ok(RawCell(None)) => Ok(Column::Null),
                            Err(e) => Err(CdcError::from(e)),
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let (rows, pending_rows) = (tuples(&rows)?, tuples(&pending)?);
        let last_chunk = (rows.len() as i64) < self.rows;
        Ok(Some(ChunkRead {
            relid: request.relid,
            last_chunk,
            nonce,
            snapshot,
            ts,
            rows,
            pending_rows,
        }))
    }

    /// Inside the read's transaction, the table locked: its snapshot (taken by this first
    /// query, with the table's identity schema under it), then the rows after the cursor and
    /// those of the pending keys, or `None` when the schema is not the request's. The
    /// statements are prepared (when the shape is new) only once the shape is known to be the
    /// request's.
    async fn read_locked(&mut self, request: &ChunkRequest) -> Result<Option<Read>, CdcError> {
        let taken = self
            .client
            .query_one(&self.snapshot, &[&request.relid])
            .await?;
        let (snapshot, ts, shape): (String, i64, Option<String>) =
            (taken.get(0), taken.get(1), taken.get(2));
        if !checks::is_schema(shape.as_deref(), &request.schema) {
            return Ok(None);
        }
        let snapshot = TxnSnapshot::parse(&snapshot).ok_or_else(|| {
            setup(format!(
                "snapshot chunks: cannot read the snapshot {snapshot:?}"
            ))
        })?;
        let prepared = self.statements(request).await?;
        let rows = match &request.after {
            None => self.client.query(&prepared.first, &[&self.rows]).await?,
            Some(after) => {
                let forms: Vec<SendForm<'_>> =
                    after.iter().map(|k| SendForm(k.as_deref())).collect();
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![&self.rows];
                params.extend(forms.iter().map(|f| f as &(dyn ToSql + Sync)));
                self.client.query(&prepared.next, &params).await?
            }
        };
        let mut pending = Vec::with_capacity(request.pending.len());
        for key in &request.pending {
            let forms: Vec<SendForm<'_>> = key.key.iter().map(|k| SendForm(k.as_deref())).collect();
            let params: Vec<&(dyn ToSql + Sync)> =
                forms.iter().map(|f| f as &(dyn ToSql + Sync)).collect();
            pending.extend(self.client.query(&prepared.point, &params).await?);
        }
        Ok(Some((snapshot, ts, rows, pending)))
    }

    /// Ends a read's transaction without effect (a no-op outside one).
    async fn rollback(&self) -> Result<(), CdcError> {
        self.client.batch_execute("ROLLBACK").await?;
        Ok(())
    }
}
