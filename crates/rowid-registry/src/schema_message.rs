//! Identity schema messages, format 8 (spec/identity-messages.md): a relation's identity
//! schema as of one WAL position. The extension's event trigger writes them as rows of
//! [`IDENTITY_TABLE`], a table only the extension's owner may write, published by
//! [`IDENTITY_PUBLICATION`]; a WAL consumer reads those rows from the stream (and keeps the
//! schemas in its state); both use this one implementation. A logical message, which any
//! role can write, is never a schema. Parsing is strict: an unknown format, a missing or
//! unknown member, or a value of the wrong type is an error naming the member.

use std::fmt;

use rowid_codec::structure::Shape;
use rowid_codec::{Domain, TypeTag};
use serde_json::{Map, Value, json};

use crate::error::Rejection;
use crate::resolve::IdentitySchema;
use crate::source_key::ScanKey;

/// The `pg_logical_emit_message` prefix format 1 used. Format 2 ignores (and reports) every
/// logical message with it: `pg_logical_emit_message` is executable by PUBLIC, so such a
/// message says nothing about who wrote it.
pub const MESSAGE_PREFIX: &str = "pgtrickle.identity";

/// The format this crate writes (it reads this one and formats 2 to 7).
pub const FORMAT: u64 = 8;

/// Schema and name of the table whose rows carry the messages: `relid oid PRIMARY KEY`,
/// `key_index oid`, `schema text NOT NULL` (the content, JSON). An INSERT or UPDATE of a row
/// is the relation's schema from that position on; a DELETE says it was dropped.
pub const IDENTITY_TABLE: (&str, &str) = ("pgtrickle", "identity_schemas");

/// The publication (created with the extension) that carries [`IDENTITY_TABLE`]'s rows; a
/// consumer streams it beside its own.
pub const IDENTITY_PUBLICATION: &str = "pgtrickle_identity";

/// The columns of [`IDENTITY_TABLE`], in order: the relation, the index its key comes from
/// (NULL: keyless or none), the content.
pub const IDENTITY_COLUMNS: [&str; 3] = ["relid", "key_index", "schema"];

/// `pg_class.relreplident`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaIdentity {
    /// `d`: the primary key, if any.
    Default,
    /// `n`: nothing.
    Nothing,
    /// `f`: every column.
    Full,
    /// `i`: a chosen unique index.
    Index,
}

impl ReplicaIdentity {
    /// The setting pgoutput's Relation message sends as one byte.
    pub fn from_byte(b: u8) -> Option<ReplicaIdentity> {
        Some(match b {
            b'd' => ReplicaIdentity::Default,
            b'n' => ReplicaIdentity::Nothing,
            b'f' => ReplicaIdentity::Full,
            b'i' => ReplicaIdentity::Index,
            _ => return None,
        })
    }

    /// The byte of pgoutput's Relation message.
    pub fn byte(self) -> u8 {
        match self {
            ReplicaIdentity::Default => b'd',
            ReplicaIdentity::Nothing => b'n',
            ReplicaIdentity::Full => b'f',
            ReplicaIdentity::Index => b'i',
        }
    }

    /// The name in messages: `default`, `nothing`, `full`, `index`.
    pub fn name(self) -> &'static str {
        match self {
            ReplicaIdentity::Default => "default",
            ReplicaIdentity::Nothing => "nothing",
            ReplicaIdentity::Full => "full",
            ReplicaIdentity::Index => "index",
        }
    }

    fn from_name(name: &str) -> Option<ReplicaIdentity> {
        [
            ReplicaIdentity::Default,
            ReplicaIdentity::Nothing,
            ReplicaIdentity::Full,
            ReplicaIdentity::Index,
        ]
        .into_iter()
        .find(|r| r.name() == name)
    }
}

/// One column of the relation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaColumn {
    /// `pg_attribute.attnum`.
    pub attnum: i16,
    /// Column name.
    pub name: String,
    /// `atttypid` (a domain's own OID).
    pub type_oid: u32,
    /// The type as `format_type(atttypid, atttypmod)` prints it under the search path
    /// `pg_catalog, pg_temp` (`character varying(20)`, `public.mood`); `None` in a format-2
    /// message, which did not carry it.
    pub type_name: Option<String>,
    /// `attnotnull`.
    pub not_null: bool,
    /// The shape a row image reads the column's send form with ([`crate::image_shape`]);
    /// `None` when the codec has no parser for the type (the value travels as its send form)
    /// or in a format-2 message.
    pub shape: Option<Shape>,
    /// The value a row stored before the column was added holds (`pg_attribute.attmissingval`,
    /// set by an `ADD COLUMN ... DEFAULT` that did not rewrite the table), as the type's binary
    /// send form; `None` when there is none (such rows hold NULL) or the message (format 2 to
    /// 4) did not carry it. No WAL record carries it: a copy of the table's rows made before
    /// the column existed needs it to stay equal.
    pub missing: Option<Vec<u8>>,
    /// Whether rows stored before the column was added hold a value that `missing` cannot
    /// carry: the type (or a type it is made of, such as `aclitem`) has no binary send
    /// function, so `missing` is `None` although such rows are not NULL there. A reader that
    /// needs the value refuses. `false` in a message before format 7 (whose writer failed
    /// the DDL instead).
    pub missing_without_send_form: bool,
}

/// One field of an identity: the column it reads and the column's resolved type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityField {
    /// Column name.
    pub column: String,
    /// `atttypid` (a domain's own OID: what pgoutput's Relation message sends).
    pub type_oid: u32,
    /// The registry's shape of the column's type ([`crate::ResolvedField::shape`]).
    pub shape: Shape,
}

/// The identity the registry resolved for a relation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityDef {
    /// `SCAN_KEY` or `KEYLESS_ROW`.
    pub domain: Domain,
    /// SCAN_KEY: the index the key comes from.
    pub index: Option<String>,
    /// SCAN_KEY: the key is the primary key.
    pub primary: bool,
    /// Identity fields in identity order.
    pub fields: Vec<IdentityField>,
    /// The identity's static worst-case length in bytes under the database's encoding
    /// ([`IdentitySchema::max_encoded_len`], registry.md §3.1); `None` when it has no bound,
    /// or the message (format 2 or 3) did not say: a reader then plans for an unbounded one.
    pub max_len: Option<usize>,
    /// Every enum type the identity's fields contain, at any depth (a field of the type, an
    /// array of it, a composite attribute or a domain over it), with its labels in sort
    /// order, sorted by type name: an enum field's identity bytes are its label, so renaming
    /// a label (`ALTER TYPE ... RENAME VALUE`) changes what the identities are made of.
    /// Empty for an identity without enums, and in a message before format 6 (unknown).
    pub enums: Vec<EnumLabels>,
}

/// An enum type's labels, as an identity depends on them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EnumLabels {
    /// The type, `format_type` under the search path `pg_catalog, pg_temp` (schema-qualified).
    pub type_name: String,
    /// Its labels in `enumsortorder` order.
    pub labels: Vec<String>,
}

fn fields_of(schema: &IdentitySchema) -> Vec<IdentityField> {
    schema
        .fields
        .iter()
        .map(|f| IdentityField {
            column: f.expr.clone(),
            type_oid: f.type_oid,
            shape: f.shape.clone(),
        })
        .collect()
}

impl IdentityDef {
    /// The SCAN_KEY [`crate::choose_scan_key`] chose.
    pub fn scan_key(key: &ScanKey) -> IdentityDef {
        IdentityDef {
            domain: Domain::ScanKey,
            index: Some(key.index.clone()),
            primary: key.primary,
            fields: fields_of(&key.schema),
            max_len: key.schema.max_encoded_len(),
            enums: Vec::new(),
        }
    }

    /// A KEYLESS_ROW identity over a relation's columns, resolved by
    /// [`crate::resolve_schema`] with field expressions that are the column names.
    pub fn keyless(schema: &IdentitySchema) -> IdentityDef {
        IdentityDef {
            domain: Domain::KeylessRow,
            index: None,
            primary: false,
            fields: fields_of(schema),
            max_len: schema.max_encoded_len(),
            enums: Vec::new(),
        }
    }
}

/// The identity a stream table's rows carry in a column of their own (format 8): the
/// extension writes it from its catalog (`pgtrickle.pgt_stream_tables`) for a stream table's
/// storage and for nothing else, so a table that merely has a column of that name never gets
/// one. A consumer keeping a copy keeps these bytes as the copy's identities (the
/// pass-through of spec/stream-tables.md §7) instead of deriving others from the row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredIdentity {
    /// The column holding each row's identity (`__pgt_row_id`, `bytea NOT NULL`).
    pub column: String,
    /// The domain every identity of the column is of (spec/stream-tables.md §2).
    pub domain: Domain,
    /// One row per identity (`true`), or a multiset whose equal identities are equal rows.
    pub unique: bool,
    /// The identities' static worst-case length in bytes; `None`: unbounded.
    pub max_len: Option<usize>,
}

/// Why a relation has no identity: the registry's named rejection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The rejection's SQLSTATE.
    pub sqlstate: String,
    /// The rejection's message.
    pub message: String,
}

impl From<&Rejection> for Refusal {
    fn from(r: &Rejection) -> Refusal {
        Refusal {
            sqlstate: r.sqlstate().to_string(),
            message: r.to_string(),
        }
    }
}

/// A relation's identity schema as of one WAL position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationSchema {
    /// `pg_class.oid`.
    pub relid: u32,
    /// Schema name.
    pub namespace: String,
    /// Relation name.
    pub relname: String,
    /// The replica identity setting.
    pub replica_identity: ReplicaIdentity,
    /// Non-dropped, non-generated columns in attnum order.
    pub columns: Vec<SchemaColumn>,
    /// Primary-key columns in key order (empty: none).
    pub primary_key: Vec<String>,
    /// The identity, or why there is none.
    pub identity: Result<IdentityDef, Refusal>,
    /// Whether the DDL that wrote this message, or one before it in the same transaction,
    /// gave the table's existing rows values no WAL record carries.
    pub rewritten: Rewrite,
    /// A stream table's own identity column ([`StoredIdentity`]); `None` for every other
    /// relation, and in a message before format 8. Boxed: few relations have one, and a
    /// message is moved whole.
    pub stored: Option<Box<StoredIdentity>>,
}

/// Whether a transaction's DDL rewrote a table's values: a table rewrite for a volatile `ADD
/// COLUMN ... DEFAULT` or an `ALTER COLUMN ... TYPE` (the `table_rewrite` event's reasons 2
/// and 4; a rewrite for persistence or access method copies every value as it is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rewrite {
    /// Not known: a message of format 2 to 4, a partitioned table (its leaves are
    /// rewritten, not it), or the extension's `table_rewrite` event trigger not enabled. A
    /// reader must treat it as possibly rewritten.
    Unknown,
    /// No DDL of the transaction that wrote the message rewrote the table's values.
    Kept,
    /// The transaction with this full (64-bit) id rewrote them. Two rewrites are two
    /// different messages, even when nothing else of the schema changed.
    By(u64),
}

/// What a relation's identities are made of, as far as their bytes and order go
/// ([`RelationSchema::identity_signature`]): the domain, and per field its column's `attnum`
/// (a rename changes nothing), its type OID and its shape.
pub type IdentitySignature = (Domain, Vec<(Option<i16>, u32, Shape)>, Vec<EnumLabels>);

impl RelationSchema {
    /// What the relation's identities are made of: two schemas with the same signature give
    /// every row the same identity bytes. `None`: no usable identity.
    pub fn identity_signature(&self) -> Option<IdentitySignature> {
        let def = self.identity.as_ref().ok()?;
        let fields = def
            .fields
            .iter()
            .map(|f| {
                let attnum = self
                    .columns
                    .iter()
                    .find(|c| c.name == f.column)
                    .map(|c| c.attnum);
                (attnum, f.type_oid, f.shape.clone())
            })
            .collect();
        Some((def.domain, fields, def.enums.clone()))
    }

    /// Whether `written`, a schema as some format wrote it (a row of the identity schema
    /// table, written at the table's last DDL), describes this schema: equal, except that a
    /// member its format did not carry counts as this schema's (a format-3 row has no
    /// `identity.max_len`, a format-2 row no column `type` or `shape`), and neither a column's
    /// `missing` value nor `rewritten` counts (facts of a DDL's moment, not of the shape).
    /// What a DDL changes is a member of every format, so an extension upgrade alone is no
    /// difference, and every DDL is.
    pub fn matches_written(&self, written: &RelationSchema) -> bool {
        let mut filled = written.clone();
        for column in &mut filled.columns {
            if let Some(mine) = self.columns.iter().find(|c| c.attnum == column.attnum) {
                if column.type_name.is_none() {
                    column.type_name.clone_from(&mine.type_name);
                }
                if column.shape.is_none() {
                    column.shape.clone_from(&mine.shape);
                }
                // What rows stored before the column hold, and whether the last DDL rewrote
                // them, are facts of the DDL's moment, not of the shape: a VACUUM FULL may
                // clear `attmissingval` with no DDL, and a schema computed now knows of no
                // rewrite.
                column.missing.clone_from(&mine.missing);
                column.missing_without_send_form = mine.missing_without_send_form;
            }
        }
        filled.rewritten = self.rewritten;
        if let (Ok(def), Ok(mine)) = (filled.identity.as_mut(), self.identity.as_ref()) {
            if def.max_len.is_none() {
                def.max_len = mine.max_len;
            }
            // Before format 6 a row named no enum labels.
            if def.enums.is_empty() {
                def.enums.clone_from(&mine.enums);
            }
        }
        filled == *self
    }

    /// `namespace.relname`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.namespace, self.relname)
    }
}

/// One identity schema message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaMessage {
    /// The relation's identity schema from this position on.
    Schema(RelationSchema),
    /// The relation was dropped.
    Dropped {
        /// `pg_class.oid`.
        relid: u32,
        /// Schema name.
        namespace: String,
        /// Relation name.
        relname: String,
    },
}

impl SchemaMessage {
    /// The relation the message is about.
    pub fn relid(&self) -> u32 {
        match self {
            SchemaMessage::Schema(s) => s.relid,
            SchemaMessage::Dropped { relid, .. } => *relid,
        }
    }
}

/// A message's content is not a valid identity schema message of this format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaMessageError {
    /// Where: a JSON path such as `identity.fields[0].shape`.
    pub at: String,
    /// What is wrong there.
    pub problem: String,
}

impl fmt::Display for SchemaMessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.at.is_empty() {
            write!(f, "identity schema message: {}", self.problem)
        } else {
            write!(
                f,
                "identity schema message, at {}: {}",
                self.at, self.problem
            )
        }
    }
}

impl std::error::Error for SchemaMessageError {}

type Parsed<T> = Result<T, SchemaMessageError>;

fn err<T>(at: &str, problem: impl Into<String>) -> Parsed<T> {
    Err(SchemaMessageError {
        at: at.to_string(),
        problem: problem.into(),
    })
}

/// A JSON object whose members are taken one by one; whatever is left is an error.
struct Obj<'a> {
    at: String,
    map: &'a Map<String, Value>,
    taken: Vec<&'static str>,
}

impl<'a> Obj<'a> {
    fn new(at: &str, v: &'a Value) -> Parsed<Obj<'a>> {
        match v {
            Value::Object(map) => Ok(Obj {
                at: at.to_string(),
                map,
                taken: Vec::new(),
            }),
            _ => err(at, "expected an object"),
        }
    }

    fn path(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.at)
        }
    }

    fn get(&mut self, key: &'static str) -> Parsed<&'a Value> {
        self.taken.push(key);
        self.map
            .get(key)
            .map_or_else(|| err(&self.path(key), "missing"), Ok)
    }

    fn opt(&mut self, key: &'static str) -> Option<&'a Value> {
        self.taken.push(key);
        self.map.get(key)
    }

    fn str(&mut self, key: &'static str) -> Parsed<String> {
        match self.get(key)? {
            Value::String(s) => Ok(s.clone()),
            _ => err(&self.path(key), "expected a string"),
        }
    }

    fn bool(&mut self, key: &'static str) -> Parsed<bool> {
        match self.get(key)? {
            Value::Bool(b) => Ok(*b),
            _ => err(&self.path(key), "expected true or false"),
        }
    }

    fn int<T: TryFrom<i64>>(&mut self, key: &'static str) -> Parsed<T> {
        let path = self.path(key);
        self.get(key)?
            .as_i64()
            .and_then(|i| T::try_from(i).ok())
            .map_or_else(|| err(&path, "expected an integer in range"), Ok)
    }

    fn array(&mut self, key: &'static str) -> Parsed<&'a Vec<Value>> {
        match self.get(key)? {
            Value::Array(a) => Ok(a),
            _ => err(&self.path(key), "expected an array"),
        }
    }

    /// Fails on any member not taken.
    fn done(self) -> Parsed<()> {
        match self.map.keys().find(|k| !self.taken.contains(&k.as_str())) {
            Some(k) => err(
                &self.path(k),
                "unknown member (this format defines no such member)",
            ),
            None => Ok(()),
        }
    }
}

impl SchemaMessage {
    /// Parses a message's content (UTF-8 JSON).
    pub fn parse(content: &[u8]) -> Parsed<SchemaMessage> {
        let value: Value = match serde_json::from_slice(content) {
            Ok(v) => v,
            Err(e) => return err("", format!("not JSON: {e}")),
        };
        SchemaMessage::from_json(&value)
    }

    /// Reads a message from its JSON value.
    pub fn from_json(value: &Value) -> Parsed<SchemaMessage> {
        let mut o = Obj::new("", value)?;
        let format: u64 = o.int("format")?;
        if !(2..=FORMAT).contains(&format) {
            return err(
                "format",
                format!("format {format} is not supported (this reader knows 2 to {FORMAT})"),
            );
        }
        let event = o.str("event")?;
        let relid = o.int("relid")?;
        let namespace = o.str("namespace")?;
        let relname = o.str("relname")?;
        let message = match event.as_str() {
            "dropped" => SchemaMessage::Dropped {
                relid,
                namespace,
                relname,
            },
            "schema" => {
                let ri = o.str("replica_identity")?;
                let replica_identity = ReplicaIdentity::from_name(&ri).map_or_else(
                    || {
                        err(
                            "replica_identity",
                            format!("{ri:?} is not default, nothing, full or index"),
                        )
                    },
                    Ok,
                )?;
                let columns = o
                    .array("columns")?
                    .iter()
                    .enumerate()
                    .map(|(i, c)| column(&format!("columns[{i}]"), c, format))
                    .collect::<Parsed<Vec<_>>>()?;
                let primary_key = o
                    .array("primary_key")?
                    .iter()
                    .enumerate()
                    .map(|(i, c)| match c {
                        Value::String(s) => Ok(s.clone()),
                        _ => err(&format!("primary_key[{i}]"), "expected a string"),
                    })
                    .collect::<Parsed<Vec<_>>>()?;
                let identity = match o.get("identity")? {
                    Value::Null => {
                        let r = o.get("refusal")?;
                        let mut r = Obj::new("refusal", r)?;
                        let refusal = Refusal {
                            sqlstate: r.str("sqlstate")?,
                            message: r.str("message")?,
                        };
                        r.done()?;
                        Err(refusal)
                    }
                    v => {
                        if o.opt("refusal").is_some() {
                            return err("refusal", "present although identity is not null");
                        }
                        Ok(identity(v, format)?)
                    }
                };
                let rewritten = if format >= 5 {
                    match o.get("rewritten")? {
                        Value::Null => Rewrite::Unknown,
                        Value::Bool(false) => Rewrite::Kept,
                        n => match n.as_u64() {
                            Some(xid) if xid > 0 => Rewrite::By(xid),
                            _ => {
                                return err(
                                    "rewritten",
                                    "expected false, null or a transaction id",
                                );
                            }
                        },
                    }
                } else {
                    Rewrite::Unknown
                };
                let stored = if format >= 8 {
                    match o.get("stored")? {
                        Value::Null => None,
                        v => Some(Box::new(stored_identity(v)?)),
                    }
                } else {
                    None
                };
                SchemaMessage::Schema(RelationSchema {
                    relid,
                    namespace,
                    relname,
                    replica_identity,
                    columns,
                    primary_key,
                    identity,
                    rewritten,
                    stored,
                })
            }
            other => {
                return err(
                    "event",
                    format!("{other:?} is not \"schema\" or \"dropped\""),
                );
            }
        };
        o.done()?;
        Ok(message)
    }

    /// The message as JSON (the form [`SchemaMessage::parse`] reads).
    pub fn to_json(&self) -> Value {
        match self {
            SchemaMessage::Dropped {
                relid,
                namespace,
                relname,
            } => json!({
                "format": FORMAT,
                "event": "dropped",
                "relid": relid,
                "namespace": namespace,
                "relname": relname,
            }),
            SchemaMessage::Schema(s) => {
                let mut v = json!({
                    "format": FORMAT,
                    "event": "schema",
                    "relid": s.relid,
                    "namespace": s.namespace,
                    "relname": s.relname,
                    "replica_identity": s.replica_identity.name(),
                    "columns": s.columns.iter().map(|c| json!({
                        "attnum": c.attnum,
                        "name": c.name,
                        "type_oid": c.type_oid,
                        "type": c.type_name,
                        "not_null": c.not_null,
                        "shape": c.shape.as_ref().map(shape_to_json),
                        "missing": c.missing.as_deref().map(rowid_codec::hex::encode),
                        "missing_without_send_form": c.missing_without_send_form,
                    })).collect::<Vec<_>>(),
                    "primary_key": s.primary_key,
                    "rewritten": match s.rewritten {
                        Rewrite::Unknown => Value::Null,
                        Rewrite::Kept => Value::Bool(false),
                        Rewrite::By(xid) => xid.into(),
                    },
                    "stored": s.stored.as_ref().map(|st| json!({
                        "column": st.column,
                        "domain": st.domain.name(),
                        "unique": st.unique,
                        "max_len": st.max_len,
                    })),
                });
                match &s.identity {
                    Ok(def) => {
                        let mut id = Map::new();
                        id.insert("domain".into(), def.domain.name().into());
                        if def.domain == Domain::ScanKey {
                            id.insert("index".into(), def.index.clone().into());
                            id.insert("primary".into(), def.primary.into());
                        }
                        id.insert(
                            "fields".into(),
                            def.fields
                                .iter()
                                .map(|f| {
                                    json!({
                                        "column": f.column,
                                        "type_oid": f.type_oid,
                                        "shape": shape_to_json(&f.shape),
                                    })
                                })
                                .collect::<Vec<_>>()
                                .into(),
                        );
                        id.insert("max_len".into(), def.max_len.into());
                        id.insert(
                            "enums".into(),
                            def.enums
                                .iter()
                                .map(|e| json!({"type": e.type_name, "labels": e.labels}))
                                .collect::<Vec<_>>()
                                .into(),
                        );
                        v["identity"] = Value::Object(id);
                    }
                    Err(r) => {
                        v["identity"] = Value::Null;
                        v["refusal"] = json!({"sqlstate": r.sqlstate, "message": r.message});
                    }
                }
                v
            }
        }
    }
}

/// `stored` (format 8): a stream table's identity column.
fn stored_identity(v: &Value) -> Parsed<StoredIdentity> {
    let mut o = Obj::new("stored", v)?;
    let column = o.str("column")?;
    let name = o.str("domain")?;
    let domain = Domain::from_name(&name).map_or_else(
        || err("stored.domain", format!("{name:?} is not a domain")),
        Ok,
    )?;
    let unique = o.bool("unique")?;
    let max_len = match o.get("max_len")? {
        Value::Null => None,
        n => match n.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) => Some(n),
            None => return err("stored.max_len", "expected an integer in range or null"),
        },
    };
    o.done()?;
    Ok(StoredIdentity {
        column,
        domain,
        unique,
        max_len,
    })
}

/// A column; `type` and `shape` are members from format 3 on, `missing` from format 5,
/// `missing_without_send_form` from format 7.
fn column(at: &str, v: &Value, format: u64) -> Parsed<SchemaColumn> {
    let mut o = Obj::new(at, v)?;
    let attnum = o.int("attnum")?;
    let name = o.str("name")?;
    let type_oid = o.int("type_oid")?;
    let not_null = o.bool("not_null")?;
    let (type_name, shape) = if format >= 3 {
        let type_name = match o.get("type")? {
            Value::Null => None,
            Value::String(t) => Some(t.clone()),
            _ => return err(&format!("{at}.type"), "expected a string or null"),
        };
        let shape = match o.get("shape")? {
            Value::Null => None,
            s => Some(shape_from_json(&format!("{at}.shape"), s)?),
        };
        (type_name, shape)
    } else {
        (None, None)
    };
    let missing = if format >= 5 {
        match o.get("missing")? {
            Value::Null => None,
            Value::String(h) => match rowid_codec::hex::decode(h) {
                Some(bytes) => Some(bytes),
                None => return err(&format!("{at}.missing"), "expected hex digits, two a byte"),
            },
            _ => return err(&format!("{at}.missing"), "expected a hex string or null"),
        }
    } else {
        None
    };
    let missing_without_send_form = format >= 7 && o.bool("missing_without_send_form")?;
    if missing_without_send_form && missing.is_some() {
        return err(
            &format!("{at}.missing_without_send_form"),
            "true, but the column's missing value is given",
        );
    }
    let c = SchemaColumn {
        attnum,
        name,
        type_oid,
        type_name,
        not_null,
        shape,
        missing,
        missing_without_send_form,
    };
    o.done()?;
    Ok(c)
}

/// The identity; `max_len` is a member from format 4 on.
fn identity(v: &Value, format: u64) -> Parsed<IdentityDef> {
    let mut o = Obj::new("identity", v)?;
    let d = o.str("domain")?;
    let domain = match Domain::from_name(&d) {
        Some(dom @ (Domain::ScanKey | Domain::KeylessRow)) => dom,
        _ => {
            return err(
                "identity.domain",
                format!("{d:?} is not SCAN_KEY or KEYLESS_ROW"),
            );
        }
    };
    let (index, primary) = if domain == Domain::ScanKey {
        (Some(o.str("index")?), o.bool("primary")?)
    } else {
        (None, false)
    };
    let fields = o
        .array("fields")?
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let at = format!("identity.fields[{i}]");
            let mut fo = Obj::new(&at, f)?;
            let column = fo.str("column")?;
            let type_oid = fo.int("type_oid")?;
            let shape = shape_from_json(&format!("{at}.shape"), fo.get("shape")?)?;
            fo.done()?;
            Ok(IdentityField {
                column,
                type_oid,
                shape,
            })
        })
        .collect::<Parsed<Vec<_>>>()?;
    if fields.is_empty() {
        return err("identity.fields", "an identity has at least one field");
    }
    let max_len = if format >= 4 {
        match o.get("max_len")? {
            Value::Null => None,
            n => match n.as_u64().map(usize::try_from) {
                Some(Ok(len)) if len > 0 => Some(len),
                _ => return err("identity.max_len", "expected a positive integer or null"),
            },
        }
    } else {
        None
    };
    let enums = if format >= 6 {
        o.array("enums")?
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let at = format!("identity.enums[{i}]");
                let mut eo = Obj::new(&at, e)?;
                let type_name = eo.str("type")?;
                let labels = eo
                    .array("labels")?
                    .iter()
                    .map(|l| match l.as_str() {
                        Some(label) => Ok(label.to_string()),
                        None => err(&format!("{at}.labels"), "expected strings"),
                    })
                    .collect::<Parsed<Vec<_>>>()?;
                eo.done()?;
                Ok(EnumLabels { type_name, labels })
            })
            .collect::<Parsed<Vec<_>>>()?
    } else {
        Vec::new()
    };
    o.done()?;
    Ok(IdentityDef {
        domain,
        index,
        primary,
        fields,
        max_len,
        enums,
    })
}

/// The value of a column's `attmissingval` from `array_send` of it: PostgreSQL keeps a
/// missing value as a one-element array of the column's type, so its send form is a
/// one-dimensional array header without NULLs (a NULL default stores no missing value)
/// and the element's send form, which is returned. Anything else is an error naming what
/// is wrong.
pub fn missing_from_array_send(array: &[u8]) -> Result<Vec<u8>, String> {
    let int = |at: usize| -> Result<i32, String> {
        array
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(i32::from_be_bytes)
            .ok_or_else(|| format!("a missing value's array ends at byte {}", array.len()))
    };
    // ndim, has-nulls flag, element type, then (length, lower bound) per dimension, then
    // (length, bytes) per element.
    let (ndim, has_nulls, len) = (int(0)?, int(4)?, int(12)?);
    if ndim != 1 || len != 1 {
        return Err(format!(
            "a missing value is a one-element array, not {ndim} dimensions of {len}"
        ));
    }
    if has_nulls != 0 {
        return Err("a missing value is never NULL".into());
    }
    let value_len =
        usize::try_from(int(20)?).map_err(|_| "a missing value is never NULL".to_string())?;
    let value = array.get(24..).unwrap_or_default();
    if value.len() != value_len {
        return Err(format!(
            "a missing value of {value_len} bytes has {} bytes after it in its array",
            value.len()
        ));
    }
    Ok(value.to_vec())
}

/// A shape as JSON: a tag name for a scalar, `{"array": s}`, `{"range": s}`,
/// `{"multirange": s}`, `"jsonb"`, `{"record": [s, ...]}`.
pub fn shape_to_json(shape: &Shape) -> Value {
    match shape {
        Shape::Scalar(t) => t.name().into(),
        Shape::Jsonb => "jsonb".into(),
        Shape::Array(s) => json!({ "array": shape_to_json(s) }),
        Shape::Range(s) => json!({ "range": shape_to_json(s) }),
        Shape::Multirange(s) => json!({ "multirange": shape_to_json(s) }),
        Shape::Record(fields) => {
            json!({ "record": fields.iter().map(shape_to_json).collect::<Vec<_>>() })
        }
    }
}

/// Reads a shape written by [`shape_to_json`].
pub fn shape_from_json(at: &str, v: &Value) -> Parsed<Shape> {
    match v {
        Value::String(name) => match TypeTag::from_name(name) {
            Some(TypeTag::Jsonb) => Ok(Shape::Jsonb),
            Some(t) if t.is_scalar() || t == TypeTag::ChildIdentity => Ok(Shape::Scalar(t)),
            Some(_) => err(
                at,
                format!("{name:?} is a structure: write it as an object"),
            ),
            None => err(at, format!("{name:?} is not a type tag name")),
        },
        Value::Object(map) if map.len() == 1 => {
            let (kind, inner) = map.iter().next().map_or_else(|| err(at, "empty"), Ok)?;
            let sub = |v: &Value| shape_from_json(&format!("{at}.{kind}"), v).map(Box::new);
            match kind.as_str() {
                "array" => Ok(Shape::Array(sub(inner)?)),
                "range" => Ok(Shape::Range(sub(inner)?)),
                "multirange" => Ok(Shape::Multirange(sub(inner)?)),
                "record" => match inner {
                    Value::Array(items) => Ok(Shape::Record(
                        items
                            .iter()
                            .enumerate()
                            .map(|(i, s)| shape_from_json(&format!("{at}.record[{i}]"), s))
                            .collect::<Parsed<Vec<_>>>()?,
                    )),
                    _ => err(&format!("{at}.record"), "expected an array of shapes"),
                },
                other => err(
                    at,
                    format!("{other:?} is not array, range, multirange or record"),
                ),
            }
        }
        _ => err(at, "expected a type tag name or a one-member object"),
    }
}
