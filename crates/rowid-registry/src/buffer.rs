//! The change buffer, format 4 (spec/change-buffer.md): one buffer per source table, one
//! table shape for every capture path (the WAL consumer's PostgreSQL sink and the extension's
//! capture trigger alike), and the checks a writer or reader runs before it touches a buffer.
//!
//! A change is one row: its transaction and order in it, the source relation, the operation,
//! the new identity (`__pgt_row_id`, insert and update) and the old one (`__pgt_old_row_id`,
//! update and delete), the non-null version columns of design proposal §10, for a change
//! whose identity could not be derived (`X`) why, and its row images: per source column a
//! `new_<name>` and an `old_<name>` column of the column's type ([`ImageColumn`]), with what
//! the old image holds and which new values the capture filled or could not read. A source's
//! DDL is followed by [`alter_statements`], matched by `attnum`. Which identities an operation has
//! is a table constraint, so a row can never hold an identity its operation does not have,
//! or lack one it has.
//!
//! Who may write a buffer is part of the contract: [`WRITERS_QUERY`] and [`check_writers`]
//! refuse a buffer owned by another role than the one expected, one that grants any right
//! but `SELECT` to another role, or one with triggers or rules (code that would run as its
//! writer).
//!
//! The versions are enforced in code as well as in DDL: a new library can meet a buffer
//! created by an older one. [`check_shape`] compares the catalog's view of a table with the
//! shape, and [`foreign_versions_query`] finds a row written under other versions; a writer
//! or reader refuses the buffer before writing or consuming anything when either disagrees.
//!
//! ```
//! use rowid_registry::buffer;
//! use rowid_registry::sql::QualifiedName;
//!
//! let id = buffer::ImageColumn { attnum: 1, name: "id".into(), sql_type: "bigint".into() };
//! let ddl = buffer::create_table(&QualifiedName::new("pgtrickle_changes", "orders"), &[id]);
//! assert!(ddl[0].starts_with("CREATE TABLE \"pgtrickle_changes\".\"orders\" ("));
//! assert!(ddl[0].contains("\"row_identity_version\" smallint NOT NULL DEFAULT 2"));
//! assert!(ddl[0].ends_with("\"new_id\" bigint, \"old_id\" bigint) USING heap"));
//! assert_eq!(ddl[1], "COMMENT ON COLUMN \"pgtrickle_changes\".\"orders\".\"new_id\" \
//!                     IS 'new image of source column 1'");
//! ```

use std::fmt;

use crate::sql::{QualifiedName, ROW_ID, quote_ident};

/// The Row Identity version a buffer's identities are written in.
pub const ROW_IDENTITY_VERSION: i16 = 2;
/// The probe version readers derive from them.
pub const ROW_PROBE_VERSION: i16 = 1;
/// The old identity column.
pub const OLD_ROW_ID: &str = "__pgt_old_row_id";
/// The schema buffers are created in unless the caller names another. The extension owns it
/// (its install script creates it), so no other role can create a buffer there first.
pub const DEFAULT_SCHEMA: &str = "pgtrickle_changes";
/// The table, beside a WAL consumer's buffers, where it records its position and coverage
/// per buffer prefix and slot (spec/change-buffer.md §5).
pub const POSITION_TABLE: &str = "rowid_cdc_position";
/// The prefix of the buffers a WAL consumer writes unless told another: `rowid_cdc_<source
/// oid>` in [`DEFAULT_SCHEMA`].
pub const DEFAULT_WAL_PREFIX: &str = "rowid_cdc";
/// The prefix of the non-transactional logical message that asks a WAL consumer to record,
/// as soon as its stream reaches it with nothing in flight, that every transaction committed
/// before it is in its buffers (`covered_lsn`, spec/change-buffer.md §5).
pub const COVERAGE_PREFIX: &str = "pgtrickle.coverage";
/// The column saying why a row has no identity (`X` and `R` rows only).
pub const UNIDENTIFIED: &str = "unidentified";
/// The format of spec/change-buffer.md this module implements.
pub const FORMAT: u32 = 4;
/// The column saying what the old image holds: `F` the whole row, `K` the key only.
pub const OLD_IMAGE: &str = "old_image";
/// The column naming the new image's columns filled from the old image.
pub const BACKFILLED: &str = "backfilled";
/// The column naming the new image's columns the change left unchanged and the capture could
/// not read (their `new_` column is NULL and does not mean NULL).
pub const UNCHANGED_TOAST: &str = "unchanged_toast";
/// The prefix of a source column's new-image column.
pub const NEW_PREFIX: &str = "new_";
/// The prefix of a source column's old-image column.
pub const OLD_PREFIX: &str = "old_";
/// The longest source column name (bytes) a buffer holds: `new_`/`old_` and the name must fit
/// PostgreSQL's 63-byte identifiers, which it would otherwise truncate into each other.
pub const MAX_SOURCE_COLUMN_NAME: usize = 63 - 4;

/// What a change did, as the `op` column stores it (`"char"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferOp {
    /// `I`: a new identity only.
    Insert,
    /// `U`: old and new identity (different when the key changed).
    Update,
    /// `D`: an old identity only.
    Delete,
    /// `T`: the relation was truncated; no identity.
    Truncate,
    /// `X`: a change whose identity could not be derived (WAL capture: no identity schema,
    /// no old row, ...); no identity, and the `unidentified` column says which operation and
    /// why. A reader that meets one must rebuild what it keeps of that relation.
    Unidentified,
    /// `R`: the source's identities were redefined (its key, an enum label in it) or its
    /// stored values rewritten (`ALTER COLUMN ... TYPE ... USING`, a volatile `ADD COLUMN
    /// ... DEFAULT`) by a DDL of this transaction; no identity, and the `unidentified`
    /// column says what changed. Identities before the row and after it are not comparable:
    /// a reader must rebuild what it keeps of the source from the source itself.
    Redefined,
}

impl BufferOp {
    /// The byte stored in `op`.
    pub fn code(self) -> u8 {
        match self {
            BufferOp::Insert => b'I',
            BufferOp::Update => b'U',
            BufferOp::Delete => b'D',
            BufferOp::Truncate => b'T',
            BufferOp::Unidentified => b'X',
            BufferOp::Redefined => b'R',
        }
    }

    /// The operation a stored byte names.
    pub fn from_code(code: u8) -> Option<BufferOp> {
        match code {
            b'I' => Some(BufferOp::Insert),
            b'U' => Some(BufferOp::Update),
            b'D' => Some(BufferOp::Delete),
            b'T' => Some(BufferOp::Truncate),
            b'X' => Some(BufferOp::Unidentified),
            b'R' => Some(BufferOp::Redefined),
            _ => None,
        }
    }

    /// Whether a row of this operation has a new identity.
    pub fn has_new(self) -> bool {
        matches!(self, BufferOp::Insert | BufferOp::Update)
    }

    /// Whether a row of this operation has an old identity.
    pub fn has_old(self) -> bool {
        matches!(self, BufferOp::Update | BufferOp::Delete)
    }
}

/// One column of the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferColumn {
    /// Its name.
    pub name: &'static str,
    /// Its type as `format_type()` prints it.
    pub sql_type: &'static str,
    /// Catalog-marked NOT NULL.
    pub not_null: bool,
    /// Its `DEFAULT`, if any.
    pub default: Option<&'static str>,
    /// What it holds.
    pub doc: &'static str,
}

const fn col(
    name: &'static str,
    sql_type: &'static str,
    not_null: bool,
    default: Option<&'static str>,
    doc: &'static str,
) -> BufferColumn {
    BufferColumn {
        name,
        sql_type,
        not_null,
        default,
        doc,
    }
}

/// The buffer's fixed columns, in table order; the image columns of the source's columns
/// follow them ([`ImageColumn`]). The version defaults are [`ROW_IDENTITY_VERSION`] and
/// [`ROW_PROBE_VERSION`] (a test keeps them equal).
pub const COLUMNS: [BufferColumn; 14] = [
    col(
        "xid",
        "bigint",
        true,
        None,
        "top-level transaction id (32 bits, as pgoutput's Begin and pg_stat_activity.backend_xid show it)",
    ),
    col(
        "seq",
        "integer",
        true,
        None,
        "the change's order in its transaction, from 1",
    ),
    col(
        "source_relid",
        "oid",
        true,
        None,
        "pg_class.oid of the captured relation",
    ),
    col(
        "op",
        "\"char\"",
        true,
        None,
        "I insert, U update, D delete, T truncate, X unidentified",
    ),
    col(
        ROW_ID,
        "bytea",
        false,
        None,
        "new identity: present exactly for I and U",
    ),
    col(
        OLD_ROW_ID,
        "bytea",
        false,
        None,
        "old identity: present exactly for U and D",
    ),
    col(
        "commit_lsn",
        "pg_lsn",
        false,
        None,
        "the transaction's commit record (WAL capture; NULL from a trigger, which runs before the commit)",
    ),
    col(
        "change_lsn",
        "pg_lsn",
        false,
        None,
        "the change's WAL record (WAL capture) or the WAL insert position when the trigger ran",
    ),
    col(
        "row_identity_version",
        "smallint",
        true,
        Some("2"),
        "Row Identity version of both identities",
    ),
    col(
        "row_probe_version",
        "smallint",
        true,
        Some("1"),
        "probe version readers derive from them",
    ),
    col(
        UNIDENTIFIED,
        "text",
        false,
        None,
        "X only: the operation and why no identity was derived",
    ),
    col(
        OLD_IMAGE,
        "\"char\"",
        false,
        None,
        "what the old_ columns hold: F the whole old row, K its key columns only; NULL: no old image",
    ),
    col(
        BACKFILLED,
        "text[]",
        false,
        None,
        "new-image columns the stream sent as unchanged and the old image filled (NULL: none)",
    ),
    col(
        UNCHANGED_TOAST,
        "text[]",
        false,
        None,
        "new-image columns left unchanged that the capture could not read: their new_ value is unknown, not NULL (NULL: none)",
    ),
];

/// Which image of a change a column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The row the change wrote (`new_<column>`).
    New,
    /// The row the change removed (`old_<column>`).
    Old,
}

impl Side {
    fn prefix(self) -> &'static str {
        match self {
            Side::New => NEW_PREFIX,
            Side::Old => OLD_PREFIX,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Side::New => "new",
            Side::Old => "old",
        }
    }
}

/// A source column as a buffer holds it: two columns, `new_<name>` and `old_<name>`, of its
/// storage type, each commented with the source's `attnum` (so a rename is followed as a
/// rename, not as a column dropped and another added).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageColumn {
    /// The source column's `attnum`.
    pub attnum: i16,
    /// Its name.
    pub name: String,
    /// The storage type, as `format_type` prints it under the locked search path: the
    /// column's type, or the base type of a domain ([`STORAGE_TYPE_QUERY`]).
    pub sql_type: String,
}

impl ImageColumn {
    /// The buffer column of `side`.
    pub fn column(&self, side: Side) -> String {
        format!("{}{}", side.prefix(), self.name)
    }
}

/// The comment that ties a buffer column to its source column.
pub fn image_comment(side: Side, attnum: i16) -> String {
    format!("{} image of source column {attnum}", side.word())
}

/// The side and source `attnum` an image column's comment names.
pub fn parse_image_comment(comment: &str) -> Option<(Side, i16)> {
    let (word, digits) = comment.split_once(" image of source column ")?;
    let side = match word {
        "new" => Side::New,
        "old" => Side::Old,
        _ => return None,
    };
    Some((side, canonical_attnum(digits)?))
}

/// A column number as a comment spells it: positive, canonical ("3", not "+3" or "03").
pub(crate) fn canonical_attnum(digits: &str) -> Option<i16> {
    let attnum: i16 = digits.parse().ok()?;
    (attnum > 0 && attnum.to_string() == digits).then_some(attnum)
}

/// A query returning a type's storage type in a buffer: the type as given, or for a domain
/// its base type with the domain's typmod (a buffer holds the values, not the domain's
/// constraints: a delete's `new_` columns are NULL whatever the domain says, and no domain
/// check runs as the buffer's writer). One parameter: the type as `format_type` prints it.
pub const STORAGE_TYPE_QUERY: &str = "WITH RECURSIVE d(oid, typtype, typbasetype, typtypmod, carried) AS ( \
     SELECT t.oid, t.typtype, t.typbasetype, t.typtypmod, NULL::pg_catalog.int4 \
     FROM pg_catalog.pg_type t \
     WHERE t.oid OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.regtype \
     UNION ALL \
     SELECT b.oid, b.typtype, b.typbasetype, b.typtypmod, d.typtypmod \
     FROM d JOIN pg_catalog.pg_type b ON b.oid OPERATOR(pg_catalog.=) d.typbasetype \
     WHERE d.typtype OPERATOR(pg_catalog.=) 'd') \
     SELECT CASE WHEN d.carried IS NULL THEN $1::pg_catalog.text \
     ELSE pg_catalog.format_type(d.oid, d.carried) END \
     FROM d WHERE d.typtype OPERATOR(pg_catalog.<>) 'd'";

/// PostgreSQL's limit on a table's columns (`MaxHeapAttributeNumber`), dropped ones included.
pub const MAX_TABLE_COLUMNS: usize = 1600;

/// Refuses source columns a buffer cannot hold: one longer than [`MAX_SOURCE_COLUMN_NAME`]
/// bytes (its image columns' names would be cut), and more than a buffer has room for (the
/// fixed columns and two per source column within [`MAX_TABLE_COLUMNS`]).
pub fn check_image_names(table: &str, images: &[ImageColumn]) -> Result<(), BufferMismatch> {
    let needed = COLUMNS.len() + 2 * images.len();
    if needed > MAX_TABLE_COLUMNS {
        return Err(BufferMismatch::Columns {
            table: table.to_string(),
            detail: format!(
                "its {} columns need {needed} buffer columns ({} fixed, a new_ and an old_ per \
                 column), over PostgreSQL's limit of {MAX_TABLE_COLUMNS} columns per table: a \
                 table of more than {} columns cannot be captured",
                images.len(),
                COLUMNS.len(),
                (MAX_TABLE_COLUMNS - COLUMNS.len()) / 2
            ),
        });
    }
    match images
        .iter()
        .find(|c| c.name.len() > MAX_SOURCE_COLUMN_NAME)
    {
        Some(c) => Err(BufferMismatch::Columns {
            table: table.to_string(),
            detail: format!(
                "the source column {:?} is longer than {MAX_SOURCE_COLUMN_NAME} bytes, so its \
                 new_ and old_ columns would exceed PostgreSQL's 63-byte names; rename it",
                c.name
            ),
        }),
        None => Ok(()),
    }
}

/// `CREATE TABLE` for a buffer named `table` holding the images of `images` (the source's
/// columns in `attnum` order), then the comments tying each image column to its source
/// column ([`image_comment`]): statements to run in one transaction. Without privileges for
/// PUBLIC ([`revoke_public`]): identities and images hold the source's values (design
/// proposal §11.1), so reading them is granted explicitly.
pub fn create_table(table: &QualifiedName, images: &[ImageColumn]) -> Vec<String> {
    let mut sql = format!("CREATE TABLE {} (", table.quoted());
    for (i, c) in COLUMNS.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&quote_ident(c.name));
        sql.push(' ');
        sql.push_str(c.sql_type);
        if c.not_null {
            sql.push_str(" NOT NULL");
        }
        if let Some(d) = c.default {
            sql.push_str(" DEFAULT ");
            sql.push_str(d);
        }
    }
    let (new, old, why) = (
        quote_ident(ROW_ID),
        quote_ident(OLD_ROW_ID),
        quote_ident(UNIDENTIFIED),
    );
    sql.push_str(&format!(
        ", CHECK (\"op\" IN ('I', 'U', 'D', 'T', 'X', 'R')), \
         CHECK ((\"op\" IN ('I', 'U')) = ({new} IS NOT NULL)), \
         CHECK ((\"op\" IN ('U', 'D')) = ({old} IS NOT NULL)), \
         CHECK ((\"op\" IN ('X', 'R')) = ({why} IS NOT NULL)), \
         CHECK (\"row_identity_version\" = {ROW_IDENTITY_VERSION}), \
         CHECK (\"row_probe_version\" = {ROW_PROBE_VERSION}), \
         CHECK (\"old_image\" IN ('F', 'K')), \
         CHECK (\"old_image\" IS NULL OR \"op\" IN ('U', 'D', 'X')))"
    ));
    let mut statements = Vec::with_capacity(1 + 2 * images.len());
    // The heap, whatever `default_table_access_method` says: the capture trigger writes rows
    // into it directly, and a buffer of another method is refused ([`check_writers`]).
    if images.is_empty() {
        sql.push_str(" USING heap");
        statements.push(sql);
        return statements;
    }
    sql.truncate(sql.len() - 1);
    for c in images {
        for side in [Side::New, Side::Old] {
            sql.push_str(&format!(
                ", {} {}",
                quote_ident(&c.column(side)),
                c.sql_type
            ));
        }
    }
    sql.push_str(") USING heap");
    statements.push(sql);
    statements.extend(comments(table, images));
    statements
}

fn comments<'a>(
    table: &'a QualifiedName,
    images: &'a [ImageColumn],
) -> impl Iterator<Item = String> + 'a {
    images.iter().flat_map(move |c| {
        [Side::New, Side::Old].map(|side| {
            format!(
                "COMMENT ON COLUMN {}.{} IS '{}'",
                table.quoted(),
                quote_ident(&c.column(side)),
                image_comment(side, c.attnum)
            )
        })
    })
}

/// The statements that turn a buffer holding the images `have` (from [`check_shape`]) into
/// one holding `want` (the source's columns now), matched by source `attnum`: a column gone
/// is dropped, a renamed one renamed, a retyped one converted, a new one added at the end.
/// A retyped column of a buffer that `holds_rows` is converted with the cast the source's
/// `ALTER COLUMN ... TYPE` uses when it has no `USING` (`new_x::type`; without such a cast
/// the statement fails, and with it the source's DDL: buffered changes are never dropped);
/// an empty buffer's column is retyped without converting anything (`USING NULL::type`),
/// whatever the source's `USING` was. Empty when the buffer already holds `want`. Run in
/// the transaction of the source's DDL, before any change under the new shape.
pub fn alter_statements(
    table: &QualifiedName,
    have: &[ImageColumn],
    want: &[ImageColumn],
    holds_rows: bool,
) -> Vec<String> {
    let name = table.quoted();
    let changes = ColumnChanges::between(have, want);
    let mut out = Vec::new();
    let pair = |c: &ImageColumn, f: &dyn Fn(&str) -> String| {
        format!(
            "ALTER TABLE {name} {}, {}",
            f(&c.column(Side::New)),
            f(&c.column(Side::Old))
        )
    };
    for h in &changes.dropped {
        out.push(pair(h, &|col| format!("DROP COLUMN {}", quote_ident(col))));
    }
    // Renames go through names no source column can have, so names swapped between columns
    // never collide.
    let parked = |c: &ImageColumn, side: Side| format!("__pgt_{}_{}", side.word(), c.attnum);
    for (h, _) in &changes.renamed {
        for side in [Side::New, Side::Old] {
            out.push(format!(
                "ALTER TABLE {name} RENAME COLUMN {} TO {}",
                quote_ident(&h.column(side)),
                quote_ident(&parked(h, side))
            ));
        }
    }
    for (h, w) in &changes.renamed {
        for side in [Side::New, Side::Old] {
            out.push(format!(
                "ALTER TABLE {name} RENAME COLUMN {} TO {}",
                quote_ident(&parked(h, side)),
                quote_ident(&w.column(side))
            ));
        }
    }
    for w in &changes.retyped {
        out.push(pair(w, &|col| {
            let c = quote_ident(col);
            let t = &w.sql_type;
            let from = if holds_rows { c.clone() } else { "NULL".into() };
            format!("ALTER COLUMN {c} TYPE {t} USING {from}::{t}")
        }));
    }
    for w in &changes.added {
        out.push(pair(w, &|col| {
            format!("ADD COLUMN {} {}", quote_ident(col), w.sql_type)
        }));
    }
    out.extend(comments(table, &changes.added));
    out
}

/// How a table holding the source columns `have` must change to hold `want`, matched by
/// source `attnum` (a rename is a rename, not a drop and an add): what a buffer and a replica
/// storage table both follow a source's DDL by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnChanges<'a> {
    /// Held, no longer at the source.
    pub dropped: Vec<&'a ImageColumn>,
    /// Held under another name: (as held, as the source has it now).
    pub renamed: Vec<(&'a ImageColumn, &'a ImageColumn)>,
    /// Held with another type: the column as the source has it now.
    pub retyped: Vec<&'a ImageColumn>,
    /// At the source, not held yet, in `attnum` order.
    pub added: Vec<ImageColumn>,
}

impl<'a> ColumnChanges<'a> {
    /// The changes from `have` to `want`.
    pub fn between(have: &'a [ImageColumn], want: &'a [ImageColumn]) -> ColumnChanges<'a> {
        let find = |list: &'a [ImageColumn], attnum: i16| list.iter().find(|c| c.attnum == attnum);
        let kept: Vec<(&ImageColumn, &ImageColumn)> = have
            .iter()
            .filter_map(|h| find(want, h.attnum).map(|w| (h, w)))
            .collect();
        ColumnChanges {
            dropped: have
                .iter()
                .filter(|h| find(want, h.attnum).is_none())
                .collect(),
            renamed: kept
                .iter()
                .copied()
                .filter(|(h, w)| h.name != w.name)
                .collect(),
            retyped: kept
                .iter()
                .filter(|(h, w)| h.sql_type != w.sql_type)
                .map(|(_, w)| *w)
                .collect(),
            added: want
                .iter()
                .filter(|w| find(have, w.attnum).is_none())
                .cloned()
                .collect(),
        }
    }

    /// Whether the tables hold the same columns.
    pub fn is_empty(&self) -> bool {
        self.dropped.is_empty()
            && self.renamed.is_empty()
            && self.retyped.is_empty()
            && self.added.is_empty()
    }
}

/// `REVOKE ALL ... FROM PUBLIC` for a buffer (PostgreSQL grants nothing to PUBLIC on a new
/// table; this states it, and undoes a default privilege that would).
pub fn revoke_public(table: &QualifiedName) -> String {
    format!("REVOKE ALL ON TABLE {} FROM PUBLIC", table.quoted())
}

/// The column list of an `INSERT` or `COPY` writing every column, in table order.
pub fn column_list() -> String {
    COLUMNS
        .iter()
        .map(|c| quote_ident(c.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A query over a table's catalog entry returning, per live column in order,
/// `attname`, `format_type(atttypid, atttypmod)`, `attnotnull` and the column's comment;
/// one parameter, the table's name as text (`$1::text::regclass`).
pub const SHAPE_QUERY: &str = "SELECT a.attname::pg_catalog.text, \
     pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, \
     pg_catalog.col_description(a.attrelid, a.attnum::pg_catalog.int4) \
     FROM pg_catalog.pg_attribute a \
     WHERE a.attrelid OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.regclass \
     AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped ORDER BY a.attnum";

/// A query returning one row written under versions other than this library's, if any (no
/// parameter). `table` is the buffer as SQL names it (quoted, as
/// [`QualifiedName::quoted`] or `regclass::text` give it).
pub fn foreign_versions_query(table: &str) -> String {
    format!(
        "SELECT \"row_identity_version\", \"row_probe_version\" FROM {table} \
         WHERE \"row_identity_version\" OPERATOR(pg_catalog.<>) {ROW_IDENTITY_VERSION} \
         OR \"row_probe_version\" OPERATOR(pg_catalog.<>) {ROW_PROBE_VERSION} LIMIT 1"
    )
}

/// The version constraints as `pg_get_constraintdef` prints them: a writer that bypasses the
/// executor (and with it the CHECK constraints) compares a buffer's with these instead.
pub fn version_constraints() -> [String; 2] {
    [
        format!("CHECK ((row_identity_version = {ROW_IDENTITY_VERSION}))"),
        format!("CHECK ((row_probe_version = {ROW_PROBE_VERSION}))"),
    ]
}

/// The constraints on `op` that format 4 added `R` to, as `pg_get_constraintdef` prints
/// them (PostgreSQL 15 to 18): a buffer without them was made by an earlier format, whose
/// readers know no `R` row, and a writer that appends to the heap directly would put one
/// there past its constraints.
pub fn op_constraints() -> [&'static str; 2] {
    [
        "CHECK ((op = ANY (ARRAY['I'::\"char\", 'U'::\"char\", 'D'::\"char\", 'T'::\"char\", \
         'X'::\"char\", 'R'::\"char\"])))",
        "CHECK (((op = ANY (ARRAY['X'::\"char\", 'R'::\"char\"])) = (unidentified IS NOT NULL)))",
    ]
}

/// A query over a buffer's CHECK constraints (`pg_get_constraintdef`), one parameter: the
/// buffer's name as text.
pub const CONSTRAINTS_QUERY: &str = "SELECT pg_catalog.pg_get_constraintdef(oid) \
     FROM pg_catalog.pg_constraint \
     WHERE conrelid OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.regclass \
     AND contype OPERATOR(pg_catalog.=) 'c' ORDER BY conname";

/// Checks that a buffer's CHECK constraints (rows of [`CONSTRAINTS_QUERY`]) pin the versions
/// this library writes: both of [`version_constraints`] present, and no other constraint
/// naming a version column; and that they are this format's ([`op_constraints`]).
pub fn check_version_constraints(table: &str, defs: &[String]) -> Result<(), BufferMismatch> {
    let ours = version_constraints();
    let mismatch = |detail: String| BufferMismatch::Columns {
        table: table.to_string(),
        detail,
    };
    for def in defs {
        let names_version =
            def.contains("row_identity_version") || def.contains("row_probe_version");
        if names_version && !ours.contains(def) {
            return Err(mismatch(format!(
                "its constraint {def} pins versions other than row_identity_version \
                 {ROW_IDENTITY_VERSION} and row_probe_version {ROW_PROBE_VERSION}"
            )));
        }
    }
    for want in &ours {
        if !defs.contains(want) {
            return Err(mismatch(format!("the constraint {want} is missing")));
        }
    }
    for want in op_constraints() {
        if !defs.iter().any(|d| d == want) {
            return Err(mismatch(format!(
                "the constraint {want} is missing (a buffer of format 3 or before: consume \
                 its changes, drop it and capture the table again)"
            )));
        }
    }
    Ok(())
}

/// A query over a table's catalog entry saying who can write it or run code when it is
/// written; one parameter, the table's name as text. One row:
///
/// 1. the owner (`regrole` text);
/// 2. `relkind`; 3. `relpersistence`;
/// 4. who else may write it (NULL when nobody): every grant of anything but `SELECT` on the
///    table or on one of its columns to another role than the owner (`role:PRIVILEGE`, with
///    ` (column)` for a column grant, `PUBLIC` for PUBLIC), and every other role PostgreSQL
///    itself says may write it (`has_table_privilege`, `has_any_column_privilege`: a member
///    of a grantee, of `pg_write_all_data`) without a grant of its own (`role:INSERT ... via
///    membership`). Superusers and members of the owner are the owner's equals, not listed;
/// 5. its triggers' names (NULL when none); 6. whether it has rules; 7. row-level security;
/// 8. its constraints and indexes that run code someone created (NULL when none): each that
///    depends on a function, operator or type with an OID past the built-in ones and not of
///    the extension `pg_trickle_ext` (whose `row_probe_v1` a replica's probe index calls)
///    (`object uses object`, as `pg_describe_object` names them);
/// 9. its table access method (`pg_am.amname`; NULL for relations without one).
pub const WRITERS_QUERY: &str = "SELECT c.relowner::pg_catalog.regrole::pg_catalog.text, \
     c.relkind::pg_catalog.text, c.relpersistence::pg_catalog.text, \
     (WITH granted AS ( \
        SELECT a.grantee, a.privilege_type, t.attname \
        FROM (SELECT NULL::pg_catalog.name AS attname, c.relacl AS acl \
              UNION ALL \
              SELECT t.attname, t.attacl FROM pg_catalog.pg_attribute t \
              WHERE t.attrelid OPERATOR(pg_catalog.=) c.oid AND t.attnum OPERATOR(pg_catalog.>) 0 \
                AND NOT t.attisdropped AND t.attacl IS NOT NULL) t, \
             pg_catalog.aclexplode(t.acl) a \
        WHERE a.grantee OPERATOR(pg_catalog.<>) c.relowner \
          AND a.privilege_type OPERATOR(pg_catalog.<>) 'SELECT') \
      SELECT pg_catalog.string_agg(w.what, ', ' ORDER BY w.what) FROM ( \
        SELECT DISTINCT CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' \
               ELSE g.grantee::pg_catalog.regrole::pg_catalog.text END \
               OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) g.privilege_type \
               OPERATOR(pg_catalog.||) CASE WHEN g.attname IS NULL THEN '' \
               ELSE ' (' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(g.attname) \
                    OPERATOR(pg_catalog.||) ')' END AS what \
        FROM granted g \
        UNION ALL \
        SELECT r.oid::pg_catalog.regrole::pg_catalog.text \
               OPERATOR(pg_catalog.||) ':INSERT, UPDATE or DELETE via membership' \
        FROM pg_catalog.pg_roles r \
        WHERE r.oid OPERATOR(pg_catalog.>=) 16384::pg_catalog.oid AND NOT r.rolsuper \
          AND NOT pg_catalog.pg_has_role(r.oid, c.relowner, 'MEMBER') \
          AND NOT EXISTS (SELECT FROM granted g WHERE g.grantee OPERATOR(pg_catalog.=) r.oid \
                          OR g.grantee OPERATOR(pg_catalog.=) 0) \
          AND (pg_catalog.has_table_privilege(r.oid, c.oid, \
                 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') \
               OR pg_catalog.has_any_column_privilege(r.oid, c.oid, \
                 'INSERT, UPDATE, REFERENCES'))) w), \
     (SELECT pg_catalog.string_agg(t.tgname::pg_catalog.text, ', ' ORDER BY t.tgname) \
      FROM pg_catalog.pg_trigger t WHERE t.tgrelid OPERATOR(pg_catalog.=) c.oid), \
     c.relhasrules, c.relrowsecurity, \
     (SELECT pg_catalog.string_agg(DISTINCT pg_catalog.pg_describe_object(d.classid, d.objid, 0) \
             OPERATOR(pg_catalog.||) ' uses ' \
             OPERATOR(pg_catalog.||) pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0), \
             '; ') \
      FROM (SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass::pg_catalog.oid, k.oid \
            FROM pg_catalog.pg_constraint k WHERE k.conrelid OPERATOR(pg_catalog.=) c.oid \
            UNION ALL \
            SELECT 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid, i.indexrelid \
            FROM pg_catalog.pg_index i WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid) \
           o(classid, objid) \
      CROSS JOIN LATERAL ( \
        SELECT d.classid, d.objid, d.refclassid, d.refobjid FROM pg_catalog.pg_depend d \
        WHERE d.classid OPERATOR(pg_catalog.=) o.classid \
          AND d.objid OPERATOR(pg_catalog.=) o.objid \
          AND d.refobjid OPERATOR(pg_catalog.>=) 16384::pg_catalog.oid \
          AND d.refclassid OPERATOR(pg_catalog.=) ANY (ARRAY[ \
                'pg_catalog.pg_proc'::pg_catalog.regclass, \
                'pg_catalog.pg_operator'::pg_catalog.regclass, \
                'pg_catalog.pg_type'::pg_catalog.regclass]::pg_catalog.oid[]) \
        OFFSET 0) d \
      WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_depend e \
                        JOIN pg_catalog.pg_extension x ON x.oid OPERATOR(pg_catalog.=) e.refobjid \
                        WHERE e.classid OPERATOR(pg_catalog.=) d.refclassid \
                          AND e.objid OPERATOR(pg_catalog.=) d.refobjid \
                          AND e.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
                          AND e.deptype OPERATOR(pg_catalog.=) 'e' \
                          AND x.extname OPERATOR(pg_catalog.=) 'pg_trickle_ext')), \
     (SELECT m.amname::pg_catalog.text FROM pg_catalog.pg_am m \
      WHERE m.oid OPERATOR(pg_catalog.=) c.relam) \
     FROM pg_catalog.pg_class c \
     WHERE c.oid OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.regclass";

/// A row of [`WRITERS_QUERY`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Writers {
    /// The owner, as `regrole` prints it.
    pub owner: String,
    /// `relkind`.
    pub kind: String,
    /// `relpersistence`.
    pub persistence: String,
    /// Who else may write it: grants of anything but `SELECT` to other roles on the table or
    /// its columns, and roles that may write through a membership (`role:PRIVILEGE, ...`).
    pub grants: Option<String>,
    /// Trigger names.
    pub triggers: Option<String>,
    /// It has rules.
    pub rules: bool,
    /// Row-level security is enabled.
    pub row_security: bool,
    /// Constraints and indexes that run code someone created (`object uses object; ...`).
    pub code: Option<String>,
    /// The table access method's name.
    pub access_method: Option<String>,
}

/// Checks that only `owner` can write `table` (a buffer, or a writer's own bookkeeping
/// table) and that writing it runs no code but PostgreSQL's own: an ordinary, permanent heap
/// table owned by `owner`, that no other role may write (by a grant on it or on a column, or
/// through a membership PostgreSQL honours, `pg_write_all_data` among them; superusers and
/// members of `owner` are `owner`'s equals), without triggers, rules or row-level security,
/// whose constraints and indexes call only built-in functions, operators and types (and the
/// extension `pg_trickle_ext`'s). A table
/// someone else created first (squatted) or prepared (code that would run as its writer) is
/// refused, naming what is wrong.
pub fn check_writers(table: &str, w: &Writers, owner: &str) -> Result<(), BufferMismatch> {
    let refuse = |detail: String| {
        Err(BufferMismatch::Unsafe {
            table: table.to_string(),
            detail,
        })
    };
    if w.kind != "r" {
        return refuse(format!("it is not an ordinary table (relkind {})", w.kind));
    }
    if w.persistence != "p" {
        return refuse("it is unlogged or temporary".into());
    }
    if w.access_method.as_deref() != Some("heap") {
        return refuse(format!(
            "it uses the table access method {}, not heap (its rows are written into the \
             heap directly)",
            w.access_method.as_deref().unwrap_or("(none)")
        ));
    }
    if w.owner != owner {
        return refuse(format!("it is owned by {}, not {owner}", w.owner));
    }
    if let Some(g) = &w.grants {
        return refuse(format!("other roles may write it: {g}"));
    }
    if let Some(t) = &w.triggers {
        return refuse(format!("it has triggers ({t})"));
    }
    if w.rules {
        return refuse("it has rules".into());
    }
    if w.row_security {
        return refuse("it has row-level security enabled".into());
    }
    if let Some(code) = &w.code {
        return refuse(format!(
            "its constraints or indexes run code that is not built in ({code})"
        ));
    }
    Ok(())
}

/// One live column as the catalog describes it (a row of [`SHAPE_QUERY`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogColumn {
    /// `attname`.
    pub name: String,
    /// `format_type(atttypid, atttypmod)`.
    pub sql_type: String,
    /// `attnotnull`.
    pub not_null: bool,
    /// The column's comment (image columns name their source column in it).
    pub comment: Option<String>,
}

/// Why a table is not a buffer this library may write or read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferMismatch {
    /// The table has other columns, or its columns in another order.
    Columns {
        /// The table.
        table: String,
        /// What differs first.
        detail: String,
    },
    /// Another role than the expected one could write it, or writing it would run code.
    Unsafe {
        /// The table.
        table: String,
        /// What is wrong.
        detail: String,
    },
    /// A row was written under other versions.
    Versions {
        /// The table.
        table: String,
        /// The row's `row_identity_version`.
        row_identity_version: i16,
        /// The row's `row_probe_version`.
        row_probe_version: i16,
    },
}

impl fmt::Display for BufferMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BufferMismatch::Columns { table, detail } => write!(
                f,
                "{table} is not a Row Identity V2 change buffer: {detail}"
            ),
            BufferMismatch::Unsafe { table, detail } => write!(
                f,
                "{table} is refused: {detail}; only its expected owner may write it, and \
                 writing it may run no code"
            ),
            BufferMismatch::Versions {
                table,
                row_identity_version,
                row_probe_version,
            } => write!(
                f,
                "{table} holds changes written with row_identity_version \
                 {row_identity_version} and row_probe_version {row_probe_version}; this \
                 library writes and reads {ROW_IDENTITY_VERSION} and {ROW_PROBE_VERSION}: \
                 consume or drop that buffer with the release that wrote it, then recreate it"
            ),
        }
    }
}

impl std::error::Error for BufferMismatch {}

/// Compares a table's live columns (rows of [`SHAPE_QUERY`]) with the buffer shape: the
/// fixed columns ([`COLUMNS`]) with the same names, types and NOT NULL marks, in the same
/// order, then image columns only, in pairs `new_<name>`, `old_<name>` of one type, nullable,
/// commented with their source column's `attnum` ([`image_comment`]), in `attnum` order.
/// Returns the source columns the buffer holds. `table` names it in the refusal.
pub fn check_shape(
    table: &str,
    columns: &[CatalogColumn],
) -> Result<Vec<ImageColumn>, BufferMismatch> {
    let mismatch = |detail: String| BufferMismatch::Columns {
        table: table.to_string(),
        detail,
    };
    for (i, want) in COLUMNS.iter().enumerate() {
        let Some(got) = columns.get(i) else {
            return Err(mismatch(format!(
                "column {} ({} {}) is missing",
                i + 1,
                want.name,
                want.sql_type
            )));
        };
        if got.name != want.name {
            return Err(mismatch(format!(
                "column {} is {:?} where the buffer has {:?}",
                i + 1,
                got.name,
                want.name
            )));
        }
        if got.sql_type != want.sql_type {
            return Err(mismatch(format!(
                "column {} has type {} where the buffer has {}",
                want.name, got.sql_type, want.sql_type
            )));
        }
        if got.not_null != want.not_null {
            return Err(mismatch(format!(
                "column {} is {} where the buffer has it {}",
                want.name,
                null_word(got.not_null),
                null_word(want.not_null)
            )));
        }
    }
    let mut images: Vec<ImageColumn> = Vec::new();
    let mut rest = columns[COLUMNS.len()..].iter();
    while let Some(new) = rest.next() {
        let image = |c: &CatalogColumn, side: Side| {
            let (got_side, attnum) = c
                .comment
                .as_deref()
                .and_then(parse_image_comment)
                .filter(|(s, _)| *s == side)
                .ok_or_else(|| {
                    mismatch(format!(
                        "it has a column {:?} that is not the {} image of a source column \
                         (comment {:?})",
                        c.name,
                        side.word(),
                        c.comment.as_deref().unwrap_or("")
                    ))
                })?;
            let name = c.name.strip_prefix(got_side.prefix()).ok_or_else(|| {
                mismatch(format!(
                    "column {:?} holds the {} image but is not named {}...",
                    c.name,
                    side.word(),
                    side.prefix()
                ))
            })?;
            if c.not_null {
                return Err(mismatch(format!("image column {:?} is NOT NULL", c.name)));
            }
            Ok((attnum, name.to_string()))
        };
        let (attnum, name) = image(new, Side::New)?;
        let Some(old) = rest.next() else {
            return Err(mismatch(format!(
                "image column {:?} has no old_ column after it",
                new.name
            )));
        };
        let (old_attnum, old_name) = image(old, Side::Old)?;
        if old_attnum != attnum || old_name != name || old.sql_type != new.sql_type {
            return Err(mismatch(format!(
                "image columns {:?} and {:?} are not one source column's pair",
                new.name, old.name
            )));
        }
        if images.last().is_some_and(|last| last.attnum >= attnum) {
            return Err(mismatch(format!(
                "image column {:?} is out of source column order",
                new.name
            )));
        }
        images.push(ImageColumn {
            attnum,
            name,
            sql_type: new.sql_type.clone(),
        });
    }
    Ok(images)
}

fn null_word(not_null: bool) -> &'static str {
    if not_null { "NOT NULL" } else { "nullable" }
}

/// The refusal for a row [`foreign_versions_query`] found.
pub fn foreign_versions(
    table: &str,
    row_identity_version: i16,
    row_probe_version: i16,
) -> BufferMismatch {
    BufferMismatch::Versions {
        table: table.to_string(),
        row_identity_version,
        row_probe_version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Vec<CatalogColumn> {
        COLUMNS
            .iter()
            .map(|c| CatalogColumn {
                name: c.name.into(),
                sql_type: c.sql_type.into(),
                not_null: c.not_null,
                comment: None,
            })
            .collect()
    }

    fn image(attnum: i16, name: &str, sql_type: &str) -> ImageColumn {
        ImageColumn {
            attnum,
            name: name.into(),
            sql_type: sql_type.into(),
        }
    }

    /// The catalog of a buffer holding `images`, as SHAPE_QUERY reads it.
    fn catalog_with(images: &[ImageColumn]) -> Vec<CatalogColumn> {
        let mut c = catalog();
        for i in images {
            for side in [Side::New, Side::Old] {
                c.push(CatalogColumn {
                    name: i.column(side),
                    sql_type: i.sql_type.clone(),
                    not_null: false,
                    comment: Some(image_comment(side, i.attnum)),
                });
            }
        }
        c
    }

    #[test]
    fn image_columns_come_in_commented_pairs_in_attnum_order() {
        let images = [image(1, "id", "bigint"), image(3, "note", "text")];
        assert_eq!(
            check_shape(t(), &catalog_with(&images)),
            Ok(images.to_vec())
        );
        assert_eq!(check_shape(t(), &catalog()), Ok(vec![]));

        let refused = |c: Vec<CatalogColumn>, want: &str| {
            let e = check_shape(t(), &c).expect_err(want).to_string();
            assert!(e.contains(want), "{want} not in {e}");
        };
        let mut c = catalog_with(&images);
        c[14].comment = None;
        refused(c, "not the new image of a source column");
        let mut c = catalog_with(&images);
        c[15].comment = Some(image_comment(Side::Old, 2));
        refused(c, "not one source column's pair");
        let mut c = catalog_with(&images);
        c[15].sql_type = "integer".into();
        refused(c, "not one source column's pair");
        let mut c = catalog_with(&images);
        c[14].not_null = true;
        refused(c, "is NOT NULL");
        let mut c = catalog_with(&images);
        c.pop();
        refused(c, "has no old_ column");
        refused(
            catalog_with(&[image(3, "note", "text"), image(1, "id", "bigint")]),
            "out of source column order",
        );
        let mut c = catalog_with(&images);
        c[14].name = "fresh_id".into();
        refused(c, "is not named new_");
    }

    #[test]
    fn image_comments_parse_only_their_own_spelling() {
        assert_eq!(
            parse_image_comment("new image of source column 3"),
            Some((Side::New, 3))
        );
        assert_eq!(
            parse_image_comment("old image of source column 12"),
            Some((Side::Old, 12))
        );
        for bad in [
            "new image of source column +3",
            "new image of source column 03",
            "new image of source column 0",
            "new image of source column -1",
            "mid image of source column 3",
            "new image of source column 3 ",
            "",
        ] {
            assert_eq!(parse_image_comment(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ddl_is_followed_by_attnum() {
        let b = QualifiedName::new("s", "b");
        let have = [
            image(1, "id", "bigint"),
            image(2, "a", "text"),
            image(3, "b", "text"),
        ];
        assert!(alter_statements(&b, &have, &have, true).is_empty());
        // a and b swap names, id becomes numeric, column 4 is added.
        let want = [
            image(1, "id", "numeric"),
            image(2, "b", "text"),
            image(3, "a", "text"),
            image(4, "c", "integer"),
        ];
        let got = alter_statements(&b, &have, &want, true);
        assert_eq!(
            got,
            [
                r#"ALTER TABLE "s"."b" RENAME COLUMN "new_a" TO "__pgt_new_2""#,
                r#"ALTER TABLE "s"."b" RENAME COLUMN "old_a" TO "__pgt_old_2""#,
                r#"ALTER TABLE "s"."b" RENAME COLUMN "new_b" TO "__pgt_new_3""#,
                r#"ALTER TABLE "s"."b" RENAME COLUMN "old_b" TO "__pgt_old_3""#,
                r#"ALTER TABLE "s"."b" RENAME COLUMN "__pgt_new_2" TO "new_b""#,
                r#"ALTER TABLE "s"."b" RENAME COLUMN "__pgt_old_2" TO "old_b""#,
                r#"ALTER TABLE "s"."b" RENAME COLUMN "__pgt_new_3" TO "new_a""#,
                r#"ALTER TABLE "s"."b" RENAME COLUMN "__pgt_old_3" TO "old_a""#,
                r#"ALTER TABLE "s"."b" ALTER COLUMN "new_id" TYPE numeric USING "new_id"::numeric, ALTER COLUMN "old_id" TYPE numeric USING "old_id"::numeric"#,
                r#"ALTER TABLE "s"."b" ADD COLUMN "new_c" integer, ADD COLUMN "old_c" integer"#,
                r#"COMMENT ON COLUMN "s"."b"."new_c" IS 'new image of source column 4'"#,
                r#"COMMENT ON COLUMN "s"."b"."old_c" IS 'old image of source column 4'"#,
            ]
        );
        // Dropped, then a new column under the old name: not a rename.
        let got = alter_statements(
            &b,
            &have[..2],
            &[image(1, "id", "bigint"), image(4, "a", "text")],
            true,
        );
        assert_eq!(
            got[0],
            r#"ALTER TABLE "s"."b" DROP COLUMN "new_a", DROP COLUMN "old_a""#
        );
        assert_eq!(
            got[1],
            r#"ALTER TABLE "s"."b" ADD COLUMN "new_a" text, ADD COLUMN "old_a" text"#
        );
        assert_eq!(got.len(), 4);
        // An empty buffer converts nothing: no cast from the old type is needed.
        let got = alter_statements(&b, &have[..1], &[image(1, "id", "point")], false);
        assert_eq!(
            got,
            [
                r#"ALTER TABLE "s"."b" ALTER COLUMN "new_id" TYPE point USING NULL::point, ALTER COLUMN "old_id" TYPE point USING NULL::point"#
            ]
        );
    }

    #[test]
    fn long_source_names_and_too_many_columns_are_refused_by_name() {
        let ok = image(1, &"x".repeat(MAX_SOURCE_COLUMN_NAME), "text");
        assert_eq!(check_image_names(t(), &[ok]), Ok(()));
        // 793 columns fit (14 + 1586), 794 do not.
        let many = |n: usize| -> Vec<ImageColumn> {
            (1..=n)
                .map(|i| ImageColumn {
                    attnum: i16::try_from(i).unwrap_or(i16::MAX),
                    name: format!("c{i}"),
                    sql_type: "integer".into(),
                })
                .collect()
        };
        assert_eq!(check_image_names(t(), &many(793)), Ok(()));
        let e = check_image_names(t(), &many(794)).expect_err("too many");
        assert!(
            e.to_string()
                .contains("its 794 columns need 1602 buffer columns")
                && e.to_string().contains("more than 793 columns"),
            "{e}"
        );
        let long = image(1, &"y".repeat(MAX_SOURCE_COLUMN_NAME + 1), "text");
        let e = check_image_names(t(), &[long])
            .expect_err("long")
            .to_string();
        assert!(e.contains("yyyy") && e.contains("63-byte"), "{e}");
    }

    fn t() -> &'static str {
        "pgtrickle_changes.t"
    }

    #[test]
    fn version_defaults_are_the_constants() {
        let default = |name: &str| {
            COLUMNS
                .iter()
                .find(|c| c.name == name)
                .and_then(|c| c.default)
        };
        assert_eq!(
            default("row_identity_version"),
            Some(ROW_IDENTITY_VERSION.to_string().as_str())
        );
        assert_eq!(
            default("row_probe_version"),
            Some(ROW_PROBE_VERSION.to_string().as_str())
        );
    }

    #[test]
    fn the_shape_accepts_itself_and_names_every_difference() {
        assert_eq!(check_shape(t(), &catalog()), Ok(vec![]));

        let mut c = catalog();
        c.pop();
        let e = check_shape(t(), &c).expect_err("missing");
        assert!(e.to_string().contains("unchanged_toast"), "{e}");

        let mut c = catalog();
        c[4].sql_type = "bigint".into();
        let e = check_shape(t(), &c).expect_err("type");
        assert!(
            e.to_string().contains("__pgt_row_id has type bigint"),
            "{e}"
        );

        let mut c = catalog();
        c[8].not_null = false;
        let e = check_shape(t(), &c).expect_err("nullable version");
        assert!(
            e.to_string().contains("row_identity_version is nullable"),
            "{e}"
        );

        let mut c = catalog();
        c.swap(4, 5);
        assert!(check_shape(t(), &c).is_err(), "order");

        let mut c = catalog();
        c.push(CatalogColumn {
            name: "extra".into(),
            sql_type: "text".into(),
            not_null: false,
            comment: None,
        });
        let e = check_shape(t(), &c).expect_err("extra");
        assert!(e.to_string().contains("\"extra\""), "{e}");
    }

    #[test]
    fn version_constraints_are_checked() {
        let mut ours: Vec<String> = version_constraints().to_vec();
        ours.extend(op_constraints().map(String::from));
        assert_eq!(check_version_constraints(t(), &ours), Ok(()));
        // Format 3's: no R.
        let mut format_3 = ours.clone();
        format_3[2] = "CHECK ((op = ANY (ARRAY['I'::\"char\", 'U'::\"char\", 'D'::\"char\", \
                       'T'::\"char\", 'X'::\"char\"])))"
            .into();
        let e = check_version_constraints(t(), &format_3).expect_err("format 3");
        assert!(e.to_string().contains("format 3"), "{e}");
        let mut other = ours.clone();
        other[0] = "CHECK ((row_identity_version = 3))".into();
        let e = check_version_constraints(t(), &other).expect_err("version 3");
        assert!(e.to_string().contains("row_identity_version = 3"), "{e}");
        let e = check_version_constraints(t(), &ours[1..]).expect_err("missing");
        assert!(e.to_string().contains("is missing"), "{e}");
        let mut extra = ours.clone();
        extra.push("CHECK ((op = 'I'::\"char\"))".into());
        assert_eq!(
            check_version_constraints(t(), &extra),
            Ok(()),
            "others are not ours to judge"
        );
    }

    #[test]
    fn op_codes_round_trip_and_say_which_identities_exist() {
        for op in [
            BufferOp::Insert,
            BufferOp::Update,
            BufferOp::Delete,
            BufferOp::Truncate,
            BufferOp::Unidentified,
            BufferOp::Redefined,
        ] {
            assert_eq!(BufferOp::from_code(op.code()), Some(op));
        }
        assert_eq!(BufferOp::from_code(b'Z'), None);
        assert!(BufferOp::Insert.has_new() && !BufferOp::Insert.has_old());
        assert!(BufferOp::Update.has_new() && BufferOp::Update.has_old());
        assert!(!BufferOp::Delete.has_new() && BufferOp::Delete.has_old());
        assert!(!BufferOp::Truncate.has_new() && !BufferOp::Truncate.has_old());
        assert!(!BufferOp::Unidentified.has_new() && !BufferOp::Unidentified.has_old());
        assert!(!BufferOp::Redefined.has_new() && !BufferOp::Redefined.has_old());
    }

    #[test]
    fn the_version_refusal_names_both_versions() {
        let e = foreign_versions(t(), 3, 1).to_string();
        assert!(e.contains("row_identity_version 3"), "{e}");
        assert!(e.contains("writes and reads 2 and 1"), "{e}");
    }

    #[test]
    fn only_the_owner_writes_and_writing_runs_no_code() {
        let ok = Writers {
            owner: "app".into(),
            kind: "r".into(),
            persistence: "p".into(),
            access_method: Some("heap".into()),
            ..Writers::default()
        };
        assert_eq!(check_writers(t(), &ok, "app"), Ok(()));
        let refused = |w: Writers, owner: &str, want: &str| {
            let e = check_writers(t(), &w, owner).expect_err(want).to_string();
            assert!(e.contains(want) && e.contains(t()), "{e}");
        };
        refused(ok.clone(), "cdc", "owned by app, not cdc");
        refused(
            Writers {
                grants: Some("mallory:INSERT".into()),
                ..ok.clone()
            },
            "app",
            "other roles may write it: mallory:INSERT",
        );
        refused(
            Writers {
                code: Some("constraint c on table t uses function f(bigint)".into()),
                ..ok.clone()
            },
            "app",
            "not built in (constraint c on table t uses function f(bigint))",
        );
        refused(
            Writers {
                access_method: Some("columnar".into()),
                ..ok.clone()
            },
            "app",
            "access method columnar, not heap",
        );
        refused(
            Writers {
                triggers: Some("t".into()),
                ..ok.clone()
            },
            "app",
            "has triggers (t)",
        );
        refused(
            Writers {
                rules: true,
                ..ok.clone()
            },
            "app",
            "has rules",
        );
        refused(
            Writers {
                row_security: true,
                ..ok.clone()
            },
            "app",
            "row-level security",
        );
        refused(
            Writers {
                persistence: "t".into(),
                ..ok.clone()
            },
            "app",
            "unlogged or temporary",
        );
        refused(
            Writers {
                kind: "v".into(),
                ..ok
            },
            "app",
            "not an ordinary table",
        );
    }
}
