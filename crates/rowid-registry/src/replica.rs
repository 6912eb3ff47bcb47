//! Replica storage (spec/replica.md): a table kept equal to its source by identity, the
//! design proposal's storage contract (§9, §11) in use. Every statement a replica runs is
//! built here, so pg_trickle-style callers and `rowid-cdc` share one implementation:
//!
//! - [`create_statements`]: the storage table, `__pgt_row_id bytea NOT NULL` then the source's
//!   columns with the source's types (each commented with its source `attnum`, so a rename is
//!   followed as a rename), and the index [`crate::plan_index`] chose for its identity schema:
//!   a direct UNIQUE index serving as `REPLICA IDENTITY` for a bounded unique identity, a
//!   direct non-unique one for a bounded multiset, the probe expression otherwise;
//! - [`metadata_statements`]: the tables recording each storage table's source, identity
//!   schema, index class and identity and probe versions ([`TABLES`]), and each slot's apply
//!   position ([`POSITION`]);
//! - [`Apply`]: the statements that apply one *segment* of a transaction's changes of one
//!   table, COPY'd into a temporary delta table ([`Apply::delta_table`]): unique identities
//!   by DELETE, UPDATE in place and INSERT, each of which must touch exactly the rows the
//!   delta names; multisets by counting.
//!
//! Every name is quoted and every operator and function schema-qualified: the statements run
//! in a database the replica does not own.

use crate::buffer::{
    ColumnChanges, ImageColumn, OLD_ROW_ID, ROW_IDENTITY_VERSION, ROW_PROBE_VERSION,
};
use crate::plan::{IndexClass, Uniqueness};
use crate::schema_message::StoredIdentity;
use crate::sql::{PROBE_FN, QualifiedName, ROW_ID, quote_ident};

/// The format of spec/replica.md this module implements.
pub const FORMAT: u32 = 2;

/// The schema the replica's own tables live in (and, in the source database, its storage
/// tables unless another is named).
pub const DEFAULT_SCHEMA: &str = "pgtrickle_replica";

/// The table recording each storage table: its source, the identity schema and index class
/// it was built for, the identity and probe versions its identities are in, and the slot
/// that keeps it.
pub const TABLES: &str = "__pgt_replica_tables";

/// The table recording each slot's apply position (the commit LSN of the last transaction
/// applied, and where the slot's chunked snapshots stood then), written in the transaction
/// that applies it.
pub const POSITION: &str = "__pgt_replica_position";

/// The delta table's change column: `I` insert, `U` update, `D` delete, `S` snapshot row.
pub const OP: &str = "__pgt_op";

/// The delta table's order column: the change's place in its segment (from 1; a segment can
/// span several source transactions applied in one target transaction).
pub const SEQ: &str = "__pgt_seq";

/// `=` as every statement here spells it.
const EQ: &str = "OPERATOR(pg_catalog.=)";

/// The comment that ties a storage column to its source column.
pub fn column_comment(attnum: i16) -> String {
    format!("source column {attnum}")
}

/// The source `attnum` a storage column's comment names.
pub fn parse_column_comment(comment: &str) -> Option<i16> {
    crate::buffer::canonical_attnum(comment.strip_prefix("source column ")?)
}

/// The name of a storage table's identity index: one per source relation, whatever the
/// table is called (`__pgt_row_id_<source relid>`).
pub fn index_name(source_relid: u32) -> String {
    format!("{ROW_ID}_{source_relid}")
}

/// A storage table and how its rows are matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Storage {
    /// The storage table.
    pub table: QualifiedName,
    /// `pg_class.oid` of the source relation.
    pub source_relid: u32,
    /// The index serving exact matching ([`crate::plan_index`]).
    pub class: IndexClass,
    /// One row per identity, or a multiset (keyless rows).
    pub uniqueness: Uniqueness,
    /// The source's columns in `attnum` order, with the source's types.
    pub columns: Vec<ImageColumn>,
}

/// Refuses a source whose columns a storage cannot hold beside its own identity column. A
/// source with a column named `__pgt_row_id` is kept only when its identity schema says it is
/// a stream table's storage (`stored`, identity schema messages format 8, written from the
/// extension's catalog): its rows carry their own identity there, and the storage keeps those
/// bytes as its identities in its own column of that name (spec/replica.md §2). Any other
/// table with such a column (one imitating a stream table, or a stream table described by a
/// message before format 8) is refused: a storage cannot hold two columns of that name, and
/// bytes no catalog vouches for are no identity.
pub fn check_source_columns(
    columns: &[ImageColumn],
    stored: Option<&StoredIdentity>,
) -> Result<(), String> {
    let column = columns.iter().find(|c| c.name == ROW_ID);
    match (stored, column) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(format!(
            "it has a column {ROW_ID}, and its identity schema does not say it is a stream \
             table's storage (only the extension writes that, from its catalog, from identity \
             schema messages format 8 on): the replica keeps a stream table's own identities, \
             not bytes no catalog vouches for"
        )),
        (Some(stored), _) if stored.column != ROW_ID => Err(format!(
            "its rows' identity is stored in the column {:?}; the replica keeps it only in \
             {ROW_ID}",
            stored.column
        )),
        (Some(_), None) => Err(format!(
            "its identity schema says its rows carry their identity in {ROW_ID}, which it \
             does not publish"
        )),
        (Some(_), Some(c)) if c.sql_type != "bytea" => Err(format!(
            "its column {ROW_ID} is of type {}, not bytea",
            c.sql_type
        )),
        (Some(_), Some(_)) => Ok(()),
    }
}

/// `CREATE TABLE` for `storage`, the comments tying its columns to the source's, no
/// privileges for PUBLIC (identities hold the source's values: design proposal §11.1), its
/// identity index, and its replica identity (the direct UNIQUE index for a bounded unique
/// identity, proposal §11; `FULL` otherwise): statements to run in one transaction.
pub fn create_statements(storage: &Storage) -> Vec<String> {
    let table = storage.table.quoted();
    let mut create = format!(
        "CREATE TABLE {table} ({} bytea NOT NULL",
        quote_ident(ROW_ID)
    );
    for c in &storage.columns {
        create.push_str(&format!(", {} {}", quote_ident(&c.name), c.sql_type));
    }
    create.push(')');
    let mut out = vec![create];
    out.extend(comments(&storage.table, &storage.columns));
    out.push(format!("REVOKE ALL ON TABLE {table} FROM PUBLIC"));
    out.push(crate::sql::index_ddl(
        storage.class,
        &index_name(storage.source_relid),
        &storage.table,
    ));
    out.push(crate::sql::replica_identity_ddl(
        storage.class,
        &index_name(storage.source_relid),
        &storage.table,
    ));
    out
}

fn comments<'a>(
    table: &'a QualifiedName,
    columns: &'a [ImageColumn],
) -> impl Iterator<Item = String> + 'a {
    columns.iter().map(move |c| {
        format!(
            "COMMENT ON COLUMN {}.{} IS '{}'",
            table.quoted(),
            quote_ident(&c.name),
            column_comment(c.attnum)
        )
    })
}

/// The statements that rebuild a storage table's identities and index when its identity
/// changed (its key, or its bound crossing into another index class): every stored identity
/// changes meaning, so each is computed again from its own row, in one transaction, by the
/// extension's encoder in the replica's database (`encode_row_id_v2_fields`, the same codec
/// as every other path), and the index is the one `want` plans. `domain` and `fields` are
/// the new identity's (its fields' storage column names, in identity order). Run after the
/// columns follow the source ([`alter_statements`]).
pub fn rebuild_statements(
    have: &Storage,
    want: &Storage,
    domain: rowid_codec::Domain,
    fields: &[&str],
) -> Vec<String> {
    let table = want.table.quoted();
    let index = QualifiedName {
        schema: have.table.schema.clone(),
        name: index_name(have.source_relid),
    }
    .quoted();
    let args: Vec<String> = fields.iter().map(|f| quote_ident(f)).collect();
    let mut out = vec![
        // The index may be the replica identity; it goes first.
        format!("ALTER TABLE {table} REPLICA IDENTITY FULL"),
        format!("DROP INDEX IF EXISTS {index}"),
        format!(
            "UPDATE {table} SET {} = pgtrickle.encode_row_id_v2_fields('{}', {})",
            quote_ident(ROW_ID),
            domain.name(),
            args.join(", ")
        ),
    ];
    let created = create_statements(want);
    // The index and the replica identity: the last two of a storage's creation.
    out.extend(created[created.len() - 2..].iter().cloned());
    out
}

/// A query saying whether the replica's database has the encoder [`rebuild_statements`]
/// needs (the extension).
pub const HAS_ENCODER_QUERY: &str = "SELECT pg_catalog.to_regprocedure(\
     'pgtrickle.encode_row_id_v2_fields(pg_catalog.text, \"any\")') IS NOT NULL";

/// A query saying whether the replica's database knows a type (`$1`, as `format_type`
/// prints it).
pub const HAS_TYPE_QUERY: &str = "SELECT pg_catalog.to_regtype($1) IS NOT NULL";

/// Gives every stored row of `table` the value `$1` in the column `column` just added: the
/// value rows stored at the source before the column was added hold (its missing value,
/// identity schema messages format 5), as a binary parameter of the column's type.
pub fn fill_added_column(table: &QualifiedName, column: &str) -> String {
    format!("UPDATE {} SET {} = $1", table.quoted(), quote_ident(column))
}

/// The statements that turn a storage table holding the columns `have` into one holding
/// `want` (the source's columns now), matched by source `attnum`: a column gone is dropped, a
/// renamed one renamed, a retyped one converted with the cast the source's `ALTER COLUMN ...
/// TYPE` uses without `USING`, a new one added at the end (NULL in every stored row: a
/// caller gives them the column's missing value, [`fill_added_column`], or must prove the
/// source's existing rows are NULL there too, or read the table again). Empty when the
/// storage already holds `want`.
pub fn alter_statements(
    table: &QualifiedName,
    have: &[ImageColumn],
    want: &[ImageColumn],
) -> Vec<String> {
    let name = table.quoted();
    let changes = ColumnChanges::between(have, want);
    let mut out = Vec::new();
    for h in &changes.dropped {
        out.push(format!(
            "ALTER TABLE {name} DROP COLUMN {}",
            quote_ident(&h.name)
        ));
    }
    // Renames go through names no source column has, so names swapped between columns never
    // collide.
    let parked = |c: &ImageColumn| quote_ident(&format!("__pgt_column_{}", c.attnum));
    for (h, _) in &changes.renamed {
        out.push(format!(
            "ALTER TABLE {name} RENAME COLUMN {} TO {}",
            quote_ident(&h.name),
            parked(h)
        ));
    }
    for (h, w) in &changes.renamed {
        out.push(format!(
            "ALTER TABLE {name} RENAME COLUMN {} TO {}",
            parked(h),
            quote_ident(&w.name)
        ));
    }
    for w in &changes.retyped {
        let (c, t) = (quote_ident(&w.name), &w.sql_type);
        out.push(format!(
            "ALTER TABLE {name} ALTER COLUMN {c} TYPE {t} USING {c}::{t}"
        ));
    }
    for w in &changes.added {
        out.push(format!(
            "ALTER TABLE {name} ADD COLUMN {} {}",
            quote_ident(&w.name),
            w.sql_type
        ));
    }
    out.extend(comments(table, &changes.added));
    out
}

/// A query over a storage table's catalog entry returning, per live column in order,
/// `attname`, `format_type(atttypid, atttypmod)` and the column's comment; one parameter,
/// the table's OID.
pub const SHAPE_QUERY: &str = "SELECT a.attname::pg_catalog.text, \
     pg_catalog.format_type(a.atttypid, a.atttypmod), \
     pg_catalog.col_description(a.attrelid, a.attnum) \
     FROM pg_catalog.pg_attribute a \
     WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.>) 0 \
     AND NOT a.attisdropped ORDER BY a.attnum";

/// What a storage table's catalog shows does not make it a storage table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotStorage {
    /// The table.
    pub table: String,
    /// What is wrong.
    pub detail: String,
}

impl std::fmt::Display for NotStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is not a replica storage table: {}",
            self.table, self.detail
        )
    }
}

impl std::error::Error for NotStorage {}

/// The source columns a storage table holds, from [`SHAPE_QUERY`]'s rows (name, type,
/// comment): its first column must be `__pgt_row_id bytea`, every other one commented with
/// the source column it holds ([`column_comment`]).
pub fn check_shape(
    table: &str,
    rows: &[(String, String, Option<String>)],
) -> Result<Vec<ImageColumn>, NotStorage> {
    let bad = |detail: String| NotStorage {
        table: table.to_string(),
        detail,
    };
    match rows.first() {
        Some((name, ty, _)) if name == ROW_ID && ty == "bytea" => {}
        _ => return Err(bad(format!("its first column is not {ROW_ID} bytea"))),
    }
    rows[1..]
        .iter()
        .map(|(name, ty, comment)| {
            let attnum = comment
                .as_deref()
                .and_then(parse_column_comment)
                .ok_or_else(|| {
                    bad(format!(
                        "column {name:?} does not say which source column it holds (its \
                         comment is {comment:?})"
                    ))
                })?;
            Ok(ImageColumn {
                attnum,
                name: name.clone(),
                sql_type: ty.clone(),
            })
        })
        .collect()
}

/// `CREATE SCHEMA IF NOT EXISTS` for `schema`, then the tables recording storage tables
/// ([`TABLES`]) and apply positions ([`POSITION`]) in it, when missing, and the columns
/// format 2 added to format 1's tables (a storage table's slot, a position's chunk record;
/// NULL in rows format 1 wrote).
pub fn metadata_statements(schema: &str) -> Vec<String> {
    let s = quote_ident(schema);
    vec![
        format!("CREATE SCHEMA IF NOT EXISTS {s}"),
        format!(
            "CREATE TABLE IF NOT EXISTS {s}.{} (\
             \"source_relid\" oid PRIMARY KEY, \
             \"storage\" text NOT NULL UNIQUE, \
             \"identity_schema\" text NOT NULL, \
             \"index_class\" text NOT NULL, \
             \"row_identity_version\" smallint NOT NULL, \
             \"row_probe_version\" smallint NOT NULL, \
             \"slot\" text) USING heap",
            quote_ident(TABLES)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {s}.{} (\
             \"slot\" text PRIMARY KEY, \
             \"commit_lsn\" pg_lsn NOT NULL, \
             \"chunks\" text) USING heap",
            quote_ident(POSITION)
        ),
        format!(
            "ALTER TABLE {s}.{} ADD COLUMN IF NOT EXISTS \"slot\" text",
            quote_ident(TABLES)
        ),
        format!(
            "ALTER TABLE {s}.{} ADD COLUMN IF NOT EXISTS \"chunks\" text",
            quote_ident(POSITION)
        ),
    ]
}

/// The session advisory-lock key text under which a replica creates (or checks) its own
/// tables in `schema` and the schemas of its storage tables: two sinks starting at once into
/// one database wait for each other instead of both creating the same schema or table
/// (`pg_advisory_xact_lock(hashtextextended(text, 0))`).
pub fn creation_lock(schema: &str) -> String {
    format!("rowid-cdc replica tables in {}", quote_ident(schema))
}

/// The name [`TABLES`] stores for an index class.
pub fn class_name(class: IndexClass) -> &'static str {
    match class {
        IndexClass::DirectUnique => "direct_unique",
        IndexClass::DirectNonUnique => "direct",
        IndexClass::ProbeExpression => "probe",
    }
}

/// The index class a name of [`class_name`] stands for.
pub fn class_from_name(name: &str) -> Option<IndexClass> {
    [
        IndexClass::DirectUnique,
        IndexClass::DirectNonUnique,
        IndexClass::ProbeExpression,
    ]
    .into_iter()
    .find(|c| class_name(*c) == name)
}

/// Records (or replaces) a storage table in [`TABLES`] of `schema`: parameters `$1` source
/// relid (oid), `$2` storage table (text, quoted), `$3` identity schema (text, the schema
/// message's JSON), `$4` index class ([`class_name`]), `$5` the slot keeping it (text); the
/// versions are this library's.
pub fn record_storage(schema: &str) -> String {
    format!(
        "INSERT INTO {}.{} (\"source_relid\", \"storage\", \"identity_schema\", \"index_class\", \
         \"row_identity_version\", \"row_probe_version\", \"slot\") \
         VALUES ($1, $2, $3, $4, {ROW_IDENTITY_VERSION}, {ROW_PROBE_VERSION}, $5) \
         ON CONFLICT (\"source_relid\") DO UPDATE SET \"storage\" = EXCLUDED.\"storage\", \
         \"identity_schema\" = EXCLUDED.\"identity_schema\", \
         \"index_class\" = EXCLUDED.\"index_class\", \
         \"row_identity_version\" = EXCLUDED.\"row_identity_version\", \
         \"row_probe_version\" = EXCLUDED.\"row_probe_version\", \
         \"slot\" = EXCLUDED.\"slot\"",
        quote_ident(schema),
        quote_ident(TABLES)
    )
}

/// Every storage table [`TABLES`] of `schema` records: source relid, storage table, identity
/// schema, index class, identity version, probe version, slot (NULL: recorded by format 1).
pub fn recorded_storage(schema: &str) -> String {
    format!(
        "SELECT \"source_relid\", \"storage\", \"identity_schema\", \"index_class\", \
         \"row_identity_version\", \"row_probe_version\", \"slot\" FROM {}.{}",
        quote_ident(schema),
        quote_ident(TABLES)
    )
}

/// Refuses a recorded storage table whose identities are in other versions than this
/// library's (proposal §10): nothing may be written to it, or matched against it.
pub fn check_versions(storage: &str, identity: i16, probe: i16) -> Result<(), NotStorage> {
    if (identity, probe) == (ROW_IDENTITY_VERSION, ROW_PROBE_VERSION) {
        return Ok(());
    }
    Err(NotStorage {
        table: storage.to_string(),
        detail: format!(
            "its identities are Row Identity V{identity} with probe V{probe}, this replica \
             writes V{ROW_IDENTITY_VERSION} with probe V{ROW_PROBE_VERSION}; rebuild it (drop \
             it and its row in {TABLES}, then snapshot the table again)"
        ),
    })
}

/// Records `$1` (slot, text) applied through `$2` (commit LSN, pg_lsn), with `$3` (text or
/// NULL: where the slot's chunked snapshots stood, as rowid-cdc records it) in [`POSITION`].
pub fn record_position(schema: &str) -> String {
    format!(
        "INSERT INTO {}.{} (\"slot\", \"commit_lsn\", \"chunks\") VALUES ($1, $2, $3) \
         ON CONFLICT (\"slot\") DO UPDATE SET \"commit_lsn\" = EXCLUDED.\"commit_lsn\", \
         \"chunks\" = EXCLUDED.\"chunks\"",
        quote_ident(schema),
        quote_ident(POSITION)
    )
}

/// The commit LSN slot `$1` was applied through and its chunk record, if any.
pub fn applied_position(schema: &str) -> String {
    format!(
        "SELECT \"commit_lsn\", \"chunks\" FROM {}.{} WHERE \"slot\" {EQ} $1",
        quote_ident(schema),
        quote_ident(POSITION)
    )
}

/// What one apply statement must have done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Touch as many rows as the segment has changes of these ops (the caller counts what it
    /// copied into the delta).
    Changes(&'static [char]),
    /// A multiset statement returning six counts in three pairs, each pair equal (copies
    /// found and needed, deleted and to delete, inserted and to insert).
    Counted,
}

/// One apply statement and what it must have done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The statement.
    pub sql: String,
    /// What it must have done.
    pub expect: Expect,
    /// What the changes it applies are, for an error: `"an UPDATE or DELETE"` ...
    pub what: &'static str,
}

/// The statements applying one segment of a table's changes: every identity a unique
/// segment names appears once in it (as a removed or a written identity), so the statements
/// commute; a multiset segment is applied by counting, so any order of its changes gives
/// the same multiset.
///
/// The delta names its image columns by position (`__pgt_new_1` ... for the written row, and
/// for a multiset `__pgt_old_1` ... for the removed one), so no source column name can
/// collide with one of its own, and types them with the storage types of the caller's
/// database ([`Apply::with_delta_types`]: a domain's base type), so that the NULL cells of a
/// removed row or of an unchanged TOASTed value fit whatever the domain forbids; a value
/// written into the storage is cast back to the column's type there, and the domain's
/// constraints apply to it.
#[derive(Clone, Debug)]
pub struct Apply<'a> {
    storage: &'a Storage,
    /// The delta's type of each storage column, in order.
    delta_types: Vec<String>,
}

/// The delta's column holding storage column `i` (from 0) of the written row.
fn new_column(i: usize) -> String {
    quote_ident(&format!("__pgt_new_{}", i + 1))
}

/// The delta's column holding storage column `i` (from 0) of the removed row (multisets).
fn old_column(i: usize) -> String {
    quote_ident(&format!("__pgt_old_{}", i + 1))
}

impl<'a> Apply<'a> {
    /// The statements for `storage`, its delta typed as the storage's columns.
    pub fn new(storage: &'a Storage) -> Apply<'a> {
        let delta_types = storage.columns.iter().map(|c| c.sql_type.clone()).collect();
        Apply {
            storage,
            delta_types,
        }
    }

    /// The statements for `storage`, its delta typed `types` (one per storage column, in
    /// order: the storage type of each column's type, a domain's base type, as
    /// [`crate::buffer::STORAGE_TYPE_QUERY`] gives it). Fewer or more types than columns
    /// fall back to the storage's own.
    pub fn with_delta_types(storage: &'a Storage, types: &[String]) -> Apply<'a> {
        if types.len() != storage.columns.len() {
            return Apply::new(storage);
        }
        Apply {
            storage,
            delta_types: types.to_vec(),
        }
    }

    /// Whether the delta carries the removed row's image (a multiset: a removed row is found
    /// by its identity and its values' representation).
    fn has_old_image(&self) -> bool {
        self.storage.uniqueness == Uniqueness::Multiset
    }

    /// The temporary delta table of the storage (`pg_temp`, one per source relation, emptied
    /// at every commit).
    pub fn delta(&self) -> String {
        format!(
            "pg_temp.{}",
            quote_ident(&format!("__pgt_delta_{}", self.storage.source_relid))
        )
    }

    /// `CREATE TEMPORARY TABLE` of the delta: the change's order and op, the removed identity,
    /// the written identity, the written row's columns and, for a multiset, the removed
    /// row's.
    pub fn delta_table(&self) -> String {
        let mut sql = format!(
            "CREATE TEMPORARY TABLE {} ({} integer NOT NULL, {} \"char\" NOT NULL, {} bytea, {} bytea",
            self.delta(),
            quote_ident(SEQ),
            quote_ident(OP),
            quote_ident(OLD_ROW_ID),
            quote_ident(ROW_ID)
        );
        for (i, t) in self.delta_types.iter().enumerate() {
            sql.push_str(&format!(", {} {t}", new_column(i)));
        }
        if self.has_old_image() {
            for (i, t) in self.delta_types.iter().enumerate() {
                sql.push_str(&format!(", {} {t}", old_column(i)));
            }
        }
        sql.push_str(") ON COMMIT DELETE ROWS");
        sql
    }

    /// `DROP TABLE` of the delta (its columns changed with the storage's).
    pub fn drop_delta(&self) -> String {
        format!("DROP TABLE IF EXISTS {}", self.delta())
    }

    /// Empties the delta for the next segment of the same transaction.
    pub fn clear_delta(&self) -> String {
        format!("TRUNCATE {}", self.delta())
    }

    /// The delta's column list in COPY order: seq, op, old identity, identity, the written
    /// row's columns, then (a multiset) the removed row's.
    pub fn copy_columns(&self) -> String {
        let n = self.storage.columns.len();
        let old = if self.has_old_image() { n } else { 0 };
        [SEQ, OP, OLD_ROW_ID, ROW_ID]
            .into_iter()
            .map(quote_ident)
            .chain((0..n).map(new_column))
            .chain((0..old).map(old_column))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether a COPY row of the delta carries the removed row's values after the written
    /// row's ([`Apply::copy_columns`]).
    pub fn copies_old_image(&self) -> bool {
        self.has_old_image()
    }

    /// `COPY` of a segment into the delta (binary).
    pub fn copy_in(&self) -> String {
        format!(
            "COPY {} ({}) FROM STDIN (FORMAT binary)",
            self.delta(),
            self.copy_columns()
        )
    }

    /// The predicate matching a storage row `t` to the identity in column `id` of row
    /// `source`: the probe finds candidates when the index is the probe expression; the
    /// complete identity decides.
    fn matches(&self, source: &str, id: &str) -> String {
        let (row, id) = (quote_ident(ROW_ID), quote_ident(id));
        let full = format!("t.{row} {EQ} {source}.{id}");
        match self.storage.class {
            IndexClass::DirectUnique | IndexClass::DirectNonUnique => full,
            IndexClass::ProbeExpression => {
                format!("{PROBE_FN}(t.{row}) {EQ} {PROBE_FN}({source}.{id}) AND {full}")
            }
        }
    }

    /// For an update moving a row to another identity: that identity is not stored yet. A
    /// UNIQUE index says so itself (the statement fails); without one, this condition makes
    /// the update's row count fall short instead of storing the identity twice.
    fn not_taken(&self) -> String {
        match self.storage.class {
            IndexClass::DirectUnique => String::new(),
            IndexClass::DirectNonUnique | IndexClass::ProbeExpression => format!(
                " AND (d.{old} {EQ} d.{row} OR NOT EXISTS (SELECT FROM {table} AS t WHERE {m}))",
                old = quote_ident(OLD_ROW_ID),
                row = quote_ident(ROW_ID),
                table = self.storage.table.quoted(),
                m = self.matches("d", ROW_ID)
            ),
        }
    }

    /// `row`'s op is one of `ops`.
    fn op_in(row: &str, ops: &[char]) -> String {
        let list = ops
            .iter()
            .map(|o| format!("'{o}'"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "{row}.{} {EQ} ANY (ARRAY[{list}]::\"char\"[])",
            quote_ident(OP)
        )
    }

    /// The statements applying the delta, in order. `set`: the storage columns an update
    /// writes (the others keep their stored values: an unchanged TOASTed value the stream
    /// did not send); every column when `None`.
    pub fn steps(&self, set: Option<&[&str]>) -> Vec<Step> {
        match self.storage.uniqueness {
            Uniqueness::Unique => self.unique_steps(set),
            Uniqueness::Multiset => vec![self.multiset_step()],
        }
    }

    /// The storage's columns, quoted, `__pgt_row_id` first.
    fn all_columns(&self) -> Vec<String> {
        std::iter::once(quote_ident(ROW_ID))
            .chain(self.storage.columns.iter().map(|c| quote_ident(&c.name)))
            .collect()
    }

    /// The written row of delta row `d`, in [`Apply::all_columns`] order.
    fn written_values(&self, d: &str) -> Vec<String> {
        std::iter::once(format!("{d}.{}", quote_ident(ROW_ID)))
            .chain((0..self.storage.columns.len()).map(|i| format!("{d}.{}", new_column(i))))
            .collect()
    }

    fn unique_steps(&self, set: Option<&[&str]>) -> Vec<Step> {
        let table = self.storage.table.quoted();
        let delta = self.delta();
        let row = quote_ident(ROW_ID);
        let mut assignments = vec![format!("{row} = d.{row}")];
        assignments.extend(
            self.storage
                .columns
                .iter()
                .enumerate()
                .filter(|(_, c)| set.is_none_or(|set| set.contains(&c.name.as_str())))
                .map(|(i, c)| format!("{} = d.{}", quote_ident(&c.name), new_column(i))),
        );
        let all = self.all_columns();
        let values = self.written_values("d");
        let insert = match self.storage.class {
            IndexClass::DirectUnique => format!(
                "INSERT INTO {table} ({}) SELECT {} FROM {delta} AS d WHERE {} \
                 ON CONFLICT ({row}) DO NOTHING",
                all.join(", "),
                values.join(", "),
                Self::op_in("d", &['I', 'S'])
            ),
            IndexClass::DirectNonUnique | IndexClass::ProbeExpression => format!(
                "INSERT INTO {table} ({}) SELECT {} FROM {delta} AS d WHERE {} \
                 AND NOT EXISTS (SELECT FROM {table} AS t WHERE {})",
                all.join(", "),
                values.join(", "),
                Self::op_in("d", &['I', 'S']),
                self.matches("d", ROW_ID)
            ),
        };
        vec![
            Step {
                sql: format!(
                    "DELETE FROM {table} AS t USING {delta} AS d WHERE {} AND {}",
                    Self::op_in("d", &['D']),
                    self.matches("d", OLD_ROW_ID)
                ),
                expect: Expect::Changes(&['D']),
                what: "a DELETE",
            },
            Step {
                sql: format!(
                    "UPDATE {table} AS t SET {} FROM {delta} AS d WHERE {} AND {}{}",
                    assignments.join(", "),
                    Self::op_in("d", &['U']),
                    self.matches("d", OLD_ROW_ID),
                    self.not_taken()
                ),
                expect: Expect::Changes(&['U']),
                what: "an UPDATE",
            },
            Step {
                sql: insert,
                expect: Expect::Changes(&['I', 'S']),
                what: "an INSERT",
            },
        ]
    }

    /// The representation of a row: `record_send` of its values, each as the delta types it
    /// (`column(i)` names value `i`), so that rows equal under every column's equality but
    /// spelt differently (numeric `2.0` and `2.00`, float `-0` and `0`, interval `1 day` and
    /// `24:00:00`, jsonb `1.0` and `1.00`) differ, and rows spelt alike do not.
    fn representation(&self, column: impl Fn(usize) -> String, cast: bool) -> String {
        let values: Vec<String> = self
            .delta_types
            .iter()
            .enumerate()
            .map(
                |(i, t)| match cast && *t != self.storage.columns[i].sql_type {
                    true => format!("{}::{t}", column(i)),
                    false => column(i),
                },
            )
            .collect();
        format!("pg_catalog.record_send(ROW({}))", values.join(", "))
    }

    /// The segment's changes as one count each per identity and representation, in change
    /// order (`sub`: an update removes its old row before it writes the new one), and each
    /// one's running count: `e(id, rep, seq, op, sub, c, run)`.
    fn multiset_events(&self) -> String {
        let (row, old, seq, op) = (
            quote_ident(ROW_ID),
            quote_ident(OLD_ROW_ID),
            quote_ident(SEQ),
            quote_ident(OP),
        );
        format!(
            "e AS (\
               SELECT id, rep, seq, op, sub, c, pg_catalog.sum(c) OVER (PARTITION BY id, rep \
                 ORDER BY seq, sub ROWS UNBOUNDED PRECEDING) AS run FROM (\
                 SELECT d.{old} AS id, {old_rep} AS rep, d.{seq} AS seq, d.{op} AS op, \
                 0 AS sub, -1 AS c FROM {delta} AS d WHERE {removed} \
                 UNION ALL \
                 SELECT d.{row}, {new_rep}, d.{seq}, d.{op}, 1, 1 FROM {delta} AS d \
                 WHERE {added}) AS x)",
            delta = self.delta(),
            old_rep = self.representation(|i| format!("d.{}", old_column(i)), false),
            new_rep = self.representation(|i| format!("d.{}", new_column(i)), false),
            removed = Self::op_in("d", &['U', 'D']),
            added = Self::op_in("d", &['I', 'U', 'S']),
        )
    }

    /// One statement. Per identity and representation: `net`, the rows written minus the
    /// rows removed, and `need`, the copies that must be stored before the segment (the
    /// deepest its running count goes below zero: an update leaving a row as it was removes
    /// it before writing it again). `need` stored copies with that identity and that
    /// representation are found through the index, `-net` of those deleted, and `net` copies
    /// of a written row with them inserted (each row written with its own values, never
    /// another row's that is merely equal). Returns six counts in three pairs that must be
    /// equal: copies found and needed, deleted and to delete, inserted and to insert.
    fn multiset_step(&self) -> Step {
        let table = self.storage.table.quoted();
        let delta = self.delta();
        let (row, seq) = (quote_ident(ROW_ID), quote_ident(SEQ));
        let all = self.all_columns();
        let written = self.written_values("w");
        let sql = format!(
            "WITH {events}, \
             n AS (\
               SELECT id, rep, pg_catalog.sum(c)::bigint AS net, \
                 GREATEST(0, OPERATOR(pg_catalog.-) pg_catalog.min(run))::bigint AS need \
               FROM e GROUP BY id, rep \
               HAVING pg_catalog.sum(c) OPERATOR(pg_catalog.<>) 0 \
                 OR pg_catalog.min(run) OPERATOR(pg_catalog.<) 0), \
             found AS (\
               SELECT n.id, n.rep, n.net, v.ctid, \
                 pg_catalog.row_number() OVER (PARTITION BY n.id, n.rep) AS k \
               FROM n, LATERAL (SELECT t.ctid FROM {table} AS t WHERE {matches} \
                 AND {stored_rep} OPERATOR(pg_catalog.=) n.rep \
                 LIMIT n.need) AS v WHERE n.need OPERATOR(pg_catalog.>) 0), \
             gone AS (\
               DELETE FROM {table} AS x WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(\
                 SELECT f.ctid FROM found AS f \
                 WHERE f.k OPERATOR(pg_catalog.<=) OPERATOR(pg_catalog.-) f.net)) \
               RETURNING 1), \
             w AS (\
               SELECT DISTINCT ON (d.{row}, d.rep) d.* FROM (\
                 SELECT d.*, {new_rep} AS rep FROM {delta} AS d WHERE {added}) AS d \
               ORDER BY d.{row}, d.rep, d.{seq} DESC), \
             made AS (\
               INSERT INTO {table} ({cols}) \
               SELECT {written} FROM w JOIN n ON n.id OPERATOR(pg_catalog.=) w.{row} \
                 AND n.rep OPERATOR(pg_catalog.=) w.rep, \
               pg_catalog.generate_series(1, n.net) \
               WHERE n.net OPERATOR(pg_catalog.>) 0 RETURNING 1) \
             SELECT (SELECT pg_catalog.count(*) FROM found), \
               (SELECT COALESCE(pg_catalog.sum(need), 0)::bigint FROM n), \
               (SELECT pg_catalog.count(*) FROM gone), \
               (SELECT COALESCE(pg_catalog.sum(OPERATOR(pg_catalog.-) net), 0)::bigint FROM n \
                WHERE net OPERATOR(pg_catalog.<) 0), \
               (SELECT pg_catalog.count(*) FROM made), \
               (SELECT COALESCE(pg_catalog.sum(net), 0)::bigint FROM n \
                WHERE net OPERATOR(pg_catalog.>) 0)",
            events = self.multiset_events(),
            matches = self.matches("n", "id"),
            stored_rep = self.stored_representation(),
            new_rep = self.representation(|i| format!("d.{}", new_column(i)), false),
            added = Self::op_in("d", &['I', 'U', 'S']),
            cols = all.join(", "),
            written = written.join(", "),
        );
        Step {
            sql,
            expect: Expect::Counted,
            what: "a change of a keyless row",
        }
    }

    /// The representation of storage row `t` ([`Apply::representation`], its columns cast to
    /// the delta's types).
    fn stored_representation(&self) -> String {
        let names: Vec<String> = self
            .storage
            .columns
            .iter()
            .map(|c| format!("t.{}", quote_ident(&c.name)))
            .collect();
        self.representation(|i| names[i].clone(), true)
    }

    /// The first change of the delta that the storage cannot take, for an error (run on the
    /// storage as it was before the segment): its seq, op and the identity it names (the
    /// removed one for an update or delete whose row is not stored; the written one for an
    /// insert whose row already is, or an update moving a row onto a stored identity).
    pub fn first_unapplicable(&self) -> String {
        let table = self.storage.table.quoted();
        let (row, old, op, seq) = (
            quote_ident(ROW_ID),
            quote_ident(OLD_ROW_ID),
            quote_ident(OP),
            quote_ident(SEQ),
        );
        match self.storage.uniqueness {
            Uniqueness::Unique => format!(
                "SELECT d.{seq}, d.{op}, CASE WHEN {removes} AND NOT EXISTS (SELECT FROM \
                 {table} AS t WHERE {m_old}) THEN d.{old} ELSE d.{row} END \
                 FROM {delta} AS d WHERE ({removes} AND NOT EXISTS (SELECT FROM {table} AS t \
                 WHERE {m_old})) OR ({adds} AND EXISTS (SELECT FROM {table} AS t WHERE {m_new})) \
                 OR ({moves} AND d.{old} OPERATOR(pg_catalog.<>) d.{row} \
                 AND EXISTS (SELECT FROM {table} AS t WHERE {m_new})) \
                 ORDER BY d.{seq} LIMIT 1",
                moves = Self::op_in("d", &['U']),
                removes = Self::op_in("d", &['U', 'D']),
                adds = Self::op_in("d", &['I', 'S']),
                delta = self.delta(),
                m_old = self.matches("d", OLD_ROW_ID),
                m_new = self.matches("d", ROW_ID),
            ),
            Uniqueness::Multiset => format!(
                "WITH {events} SELECT e.seq, e.op, e.id FROM e WHERE e.c OPERATOR(pg_catalog.<) 0 \
                 AND e.run OPERATOR(pg_catalog.<) OPERATOR(pg_catalog.-) (\
                   SELECT pg_catalog.count(*) FROM {table} AS t WHERE {m} \
                   AND {stored_rep} OPERATOR(pg_catalog.=) e.rep) \
                 ORDER BY e.seq LIMIT 1",
                events = self.multiset_events(),
                m = self.matches("e", "id"),
                stored_rep = self.stored_representation(),
            ),
        }
    }

    /// `TRUNCATE` of the storage (a source TRUNCATE, in its position among the changes).
    pub fn truncate(&self) -> String {
        format!("TRUNCATE {}", self.storage.table.quoted())
    }
}

/// A change as [`Segmenter`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct SegmentChange<'a> {
    /// `I`, `U`, `D` or `S` (as the delta stores it).
    pub op: char,
    /// The removed identity (update, delete).
    pub old_id: Option<&'a [u8]>,
    /// The written identity (insert, update, snapshot row).
    pub new_id: Option<&'a [u8]>,
    /// The storage columns an update leaves as they are (unchanged TOASTed values the stream
    /// did not send), by name, in column order.
    pub absent: &'a [String],
    /// What the change costs in memory (its identities and values).
    pub bytes: usize,
}

/// Changes in one segment at most, and their bytes at most: memory stays flat in
/// transaction size.
pub const SEGMENT_CHANGES: usize = 1 << 16;
/// See [`SEGMENT_CHANGES`].
pub const SEGMENT_BYTES: usize = 32 << 20;

/// Where a table's changes must be cut into segments [`Apply`] can take in one go. For a
/// unique identity: before a change naming an identity the segment already names (so the
/// segment's DELETE, UPDATE and INSERT commute), and before an update whose left-alone
/// columns differ from the segment's other updates' (one SET list per segment). For both: at
/// [`SEGMENT_CHANGES`] or [`SEGMENT_BYTES`]. A TRUNCATE or a change of the storage's
/// columns ends a segment too (the caller's: they are not changes of rows).
#[derive(Clone, Debug)]
pub struct Segmenter {
    uniqueness: Uniqueness,
    seen: std::collections::HashSet<Vec<u8>>,
    absent: Option<Vec<String>>,
    changes: usize,
    bytes: usize,
}

impl Segmenter {
    /// An empty segment of a storage with these semantics.
    pub fn new(uniqueness: Uniqueness) -> Segmenter {
        Segmenter {
            uniqueness,
            seen: std::collections::HashSet::new(),
            absent: None,
            changes: 0,
            bytes: 0,
        }
    }

    /// Adds `change` to the segment; `false` when it does not fit, in which case nothing was
    /// added: the caller applies the segment, [`Segmenter::clear`]s and adds it again (it
    /// always fits an empty segment).
    pub fn admit(&mut self, change: &SegmentChange<'_>) -> bool {
        let ids = [change.old_id, change.new_id];
        let fits = self.changes == 0
            || (self.changes < SEGMENT_CHANGES
                && self.bytes.saturating_add(change.bytes) <= SEGMENT_BYTES
                && match self.uniqueness {
                    Uniqueness::Multiset => true,
                    Uniqueness::Unique => {
                        ids.iter().flatten().all(|id| !self.seen.contains(*id))
                            && (change.op != 'U'
                                || self.absent.as_deref().is_none_or(|a| a == change.absent))
                    }
                });
        if !fits {
            return false;
        }
        if self.uniqueness == Uniqueness::Unique {
            // An update keeping its key names one identity, once.
            for id in ids.iter().flatten() {
                self.seen.insert(id.to_vec());
            }
            if change.op == 'U' && self.absent.is_none() {
                self.absent = Some(change.absent.to_vec());
            }
        }
        self.changes += 1;
        self.bytes = self.bytes.saturating_add(change.bytes);
        true
    }

    /// The columns the segment's updates leave alone (`None`: it has no update).
    pub fn absent(&self) -> Option<&[String]> {
        self.absent.as_deref()
    }

    /// Changes in the segment.
    pub fn len(&self) -> usize {
        self.changes
    }

    /// Whether the segment is empty.
    pub fn is_empty(&self) -> bool {
        self.changes == 0
    }

    /// Starts the next segment.
    pub fn clear(&mut self) {
        self.seen.clear();
        self.absent = None;
        self.changes = 0;
        self.bytes = 0;
    }
}
