//! The change buffer, format 2 (spec/change-buffer.md): one table shape for every capture
//! path, the WAL consumer's PostgreSQL sink and the extension's capture trigger alike, and
//! the checks a writer or reader runs before it touches a buffer.
//!
//! A change is one row: its transaction and order in it, the source relation, the operation,
//! the new identity (`__pgt_row_id`, insert and update) and the old one (`__pgt_old_row_id`,
//! update and delete), the non-null version columns of design proposal §10, and for a
//! change whose identity could not be derived (`X`), why. Which identities an operation has
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
//! let ddl = buffer::create_table(&QualifiedName::new("pgtrickle_changes", "orders"));
//! assert!(ddl.starts_with("CREATE TABLE \"pgtrickle_changes\".\"orders\" ("));
//! assert!(ddl.contains("\"row_identity_version\" smallint NOT NULL DEFAULT 2"));
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
/// The column saying why a change has no identity (`X` rows only).
pub const UNIDENTIFIED: &str = "unidentified";
/// The format of spec/change-buffer.md this module implements.
pub const FORMAT: u32 = 2;

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

/// The buffer's columns, in table order. The version defaults are [`ROW_IDENTITY_VERSION`]
/// and [`ROW_PROBE_VERSION`] (a test keeps them equal).
pub const COLUMNS: [BufferColumn; 11] = [
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
];

/// `CREATE TABLE` for a buffer named `table`. Without privileges for PUBLIC: identities can
/// hold every key value of the source (design proposal §11.1), so reading them is granted
/// explicitly.
pub fn create_table(table: &QualifiedName) -> String {
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
        ", CHECK (\"op\" IN ('I', 'U', 'D', 'T', 'X')), \
         CHECK ((\"op\" IN ('I', 'U')) = ({new} IS NOT NULL)), \
         CHECK ((\"op\" IN ('U', 'D')) = ({old} IS NOT NULL)), \
         CHECK ((\"op\" = 'X') = ({why} IS NOT NULL)), \
         CHECK (\"row_identity_version\" = {ROW_IDENTITY_VERSION}), \
         CHECK (\"row_probe_version\" = {ROW_PROBE_VERSION}))"
    ));
    sql
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
/// `attname`, `format_type(atttypid, atttypmod)` and `attnotnull`; one parameter, the
/// table's name as text (`$1::text::regclass`).
pub const SHAPE_QUERY: &str = "SELECT a.attname::pg_catalog.text, \
     pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull \
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

/// A query over a buffer's CHECK constraints (`pg_get_constraintdef`), one parameter: the
/// buffer's name as text.
pub const CONSTRAINTS_QUERY: &str = "SELECT pg_catalog.pg_get_constraintdef(oid) \
     FROM pg_catalog.pg_constraint \
     WHERE conrelid OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.regclass \
     AND contype OPERATOR(pg_catalog.=) 'c' ORDER BY conname";

/// Checks that a buffer's CHECK constraints (rows of [`CONSTRAINTS_QUERY`]) pin the versions
/// this library writes: both of [`version_constraints`] present, and no other constraint
/// naming a version column.
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
    Ok(())
}

/// A query over a table's catalog entry saying who can write it or run code when it is
/// written; one parameter, the table's name as text. One row: the owner (`regrole` text),
/// `relkind`, `relpersistence`, the grants of anything but `SELECT` to another role than the
/// owner (`role:PRIVILEGE, ...`, `PUBLIC` for PUBLIC; NULL when none), its triggers' names
/// (NULL when none), and whether it has rules or row-level security.
pub const WRITERS_QUERY: &str = "SELECT c.relowner::pg_catalog.regrole::pg_catalog.text, \
     c.relkind::pg_catalog.text, c.relpersistence::pg_catalog.text, \
     (SELECT pg_catalog.string_agg(DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 \
             THEN 'PUBLIC' ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END \
             OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) a.privilege_type, ', ') \
      FROM pg_catalog.aclexplode(c.relacl) a \
      WHERE a.grantee OPERATOR(pg_catalog.<>) c.relowner \
        AND a.privilege_type OPERATOR(pg_catalog.<>) 'SELECT'), \
     (SELECT pg_catalog.string_agg(t.tgname::pg_catalog.text, ', ' ORDER BY t.tgname) \
      FROM pg_catalog.pg_trigger t WHERE t.tgrelid OPERATOR(pg_catalog.=) c.oid), \
     c.relhasrules, c.relrowsecurity \
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
    /// Grants of anything but `SELECT` to other roles (`role:PRIVILEGE, ...`).
    pub grants: Option<String>,
    /// Trigger names.
    pub triggers: Option<String>,
    /// It has rules.
    pub rules: bool,
    /// Row-level security is enabled.
    pub row_security: bool,
}

/// Checks that only `owner` can write `table` (a buffer, or a writer's own bookkeeping
/// table) and that writing it runs no code: an ordinary, permanent table owned by `owner`,
/// granting nothing but `SELECT` to anyone else, without triggers, rules or row-level
/// security. A table someone else created first (squatted) or prepared (a trigger would run
/// as its writer) is refused, naming what is wrong.
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
    if w.owner != owner {
        return refuse(format!("it is owned by {}, not {owner}", w.owner));
    }
    if let Some(g) = &w.grants {
        return refuse(format!("it grants {g}"));
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

/// Compares a table's live columns (rows of [`SHAPE_QUERY`]) with the buffer shape: same
/// names, types and NOT NULL marks, in the same order, nothing more. `table` names it in
/// the refusal.
pub fn check_shape(table: &str, columns: &[CatalogColumn]) -> Result<(), BufferMismatch> {
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
    if let Some(extra) = columns.get(COLUMNS.len()) {
        return Err(mismatch(format!(
            "it has a column {:?} the buffer does not",
            extra.name
        )));
    }
    Ok(())
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
            })
            .collect()
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
        assert_eq!(check_shape(t(), &catalog()), Ok(()));

        let mut c = catalog();
        c.pop();
        let e = check_shape(t(), &c).expect_err("missing");
        assert!(e.to_string().contains("unidentified"), "{e}");

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
        });
        let e = check_shape(t(), &c).expect_err("extra");
        assert!(e.to_string().contains("\"extra\""), "{e}");
    }

    #[test]
    fn version_constraints_are_checked() {
        let ours: Vec<String> = version_constraints().to_vec();
        assert_eq!(check_version_constraints(t(), &ours), Ok(()));
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
        ] {
            assert_eq!(BufferOp::from_code(op.code()), Some(op));
        }
        assert_eq!(BufferOp::from_code(b'Z'), None);
        assert!(BufferOp::Insert.has_new() && !BufferOp::Insert.has_old());
        assert!(BufferOp::Update.has_new() && BufferOp::Update.has_old());
        assert!(!BufferOp::Delete.has_new() && BufferOp::Delete.has_old());
        assert!(!BufferOp::Truncate.has_new() && !BufferOp::Truncate.has_old());
        assert!(!BufferOp::Unidentified.has_new() && !BufferOp::Unidentified.has_old());
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
            "grants mallory:INSERT",
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
