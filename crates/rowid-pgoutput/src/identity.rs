//! Row Identity V2 from WAL: the same bytes `pgtrickle.encode_row_id_v2` computes in SQL.
//!
//! The caller supplies a relation's identity as resolved by `rowid-registry` from a catalog
//! snapshot ([`RelationIdentity::from_scan_key`], [`RelationIdentity::from_schema`]): the
//! identity columns by name, the type each must have in the stream, and their shapes. Every
//! Relation message is checked against it before any change is turned into an identity, so
//! a schema change in the stream (a key "from the future", a column type change) is refused
//! instead of silently used. Values must be in binary (`'b'`, typsend): text output depends
//! on the walsender's settings.

use std::fmt;

use rowid_codec::send::{owned_from_send, value_from_send};
use rowid_codec::structure::Shape;
use rowid_codec::{Domain, IdentityEncoder, TypeTag};
use rowid_registry::schema_message::IdentityDef;
use rowid_registry::{IdentitySchema, ScanKey};

use crate::message::{Column, OldTuple, Relation, RelationColumn, Tuple};
use crate::relation::FlagBits;

/// One identity column as the catalog snapshot describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityColumn {
    /// Column name.
    pub name: String,
    /// `pg_type` OID (for a domain: the domain's OID, as the Relation message sends it).
    pub type_oid: u32,
    /// The registry's shape of the column's (base) type: a scalar tag, or the nested types
    /// of an array, range, multirange, jsonb or composite column (`ResolvedField::shape`).
    pub shape: Shape,
}

impl IdentityColumn {
    /// A column of a scalar family.
    pub fn scalar(name: &str, type_oid: u32, tag: TypeTag) -> IdentityColumn {
        IdentityColumn {
            name: name.to_string(),
            type_oid,
            shape: Shape::Scalar(tag),
        }
    }
}

/// The identity of one relation as the WAL path binds it: the registry's resolved schema
/// reduced to what a Relation message can be checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationIdentity {
    /// SCAN_KEY for a key, KEYLESS_ROW for every column.
    pub domain: Domain,
    /// Identity columns in identity order.
    pub columns: Vec<IdentityColumn>,
    /// The key is the primary key (checked against primary-key bits when the stream has them).
    pub key_is_primary: bool,
}

/// The stream's description of a relation disagrees with the relation identity.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaMismatch {
    /// An identity column is not published.
    MissingColumn {
        /// Column name.
        column: String,
    },
    /// An identity column has another type in the stream.
    TypeChanged {
        /// Column name.
        column: String,
        /// OID in the schema.
        expected: u32,
        /// OID in the Relation message.
        found: u32,
    },
    /// The stream's replica identity columns are not the identity's key: the key grew,
    /// shrank or changed since the identity schema was taken, or the replica identity uses
    /// another index. Old tuples would carry other columns than the key.
    KeyDiffers {
        /// The identity schema's key columns.
        schema: Vec<String>,
        /// The columns the Relation message flags as replica identity.
        stream: Vec<String>,
    },
    /// REPLICA IDENTITY NOTHING: updates and deletes carry no old key.
    NoReplicaIdentity,
    /// A KEYLESS_ROW identity needs REPLICA IDENTITY FULL: only a full old row says which
    /// row an update or delete removed.
    KeylessNeedsFull {
        /// The Relation message's replica identity setting (`d`, `n`, `i`).
        replica_identity: char,
    },
    /// The stream's primary-key bits disagree with the schema's key.
    PrimaryKeyDiffers {
        /// Column name.
        column: String,
    },
    /// KEYLESS_ROW needs exactly the schema's columns, in order.
    ColumnsDiffer,
}

impl fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaMismatch::MissingColumn { column } => {
                write!(f, "identity column {column} is not in the Relation message")
            }
            SchemaMismatch::TypeChanged {
                column,
                expected,
                found,
            } => write!(
                f,
                "identity column {column} has type OID {found} in the stream, {expected} in the schema"
            ),
            SchemaMismatch::KeyDiffers { schema, stream } => write!(
                f,
                "the identity schema's key is ({}) but the stream's replica identity is ({}): \
                 the key changed since the schema was taken, or the replica identity uses \
                 another index",
                schema.join(", "),
                stream.join(", ")
            ),
            SchemaMismatch::NoReplicaIdentity => write!(
                f,
                "REPLICA IDENTITY NOTHING: updates and deletes carry no old key; set REPLICA \
                 IDENTITY DEFAULT, USING INDEX or FULL"
            ),
            SchemaMismatch::KeylessNeedsFull { replica_identity } => write!(
                f,
                "a keyless identity needs REPLICA IDENTITY FULL (the stream says '{replica_identity}'): \
                 only a full old row names the row an update or delete removed"
            ),
            SchemaMismatch::PrimaryKeyDiffers { column } => write!(
                f,
                "primary-key bits disagree with the schema at column {column}: the stream's key \
                 is not the snapshot's key"
            ),
            SchemaMismatch::ColumnsDiffer => {
                write!(
                    f,
                    "published columns differ from the keyless identity schema"
                )
            }
        }
    }
}

impl std::error::Error for SchemaMismatch {}

/// Why a row gave no identity.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdentityError {
    /// An identity column arrived as text.
    TextValue {
        /// Column name.
        column: String,
    },
    /// An identity column is an unchanged TOASTed value that could not be backfilled.
    Missing {
        /// Column name.
        column: String,
    },
    /// The tuple has fewer columns than the relation.
    ShortTuple,
    /// A keyless identity was asked of a `'K'` old tuple, which lacks the non-key columns.
    KeylessNeedsFullOldRow,
    /// The codec refused the value (malformed send format or limit).
    Codec {
        /// Column name.
        column: String,
        /// The codec's error.
        error: rowid_codec::Error,
    },
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityError::TextValue { column } => write!(
                f,
                "identity column {column} arrived as text; start replication with binary 'true' \
                 (text output depends on the walsender's DateStyle, TimeZone, ...)"
            ),
            IdentityError::Missing { column } => write!(
                f,
                "identity column {column} is an unchanged TOASTed value the stream did not carry"
            ),
            IdentityError::ShortTuple => write!(f, "tuple has fewer columns than the relation"),
            IdentityError::KeylessNeedsFullOldRow => write!(
                f,
                "a keyless identity needs the full old row, and the stream sent only the key \
                 (REPLICA IDENTITY is not FULL)"
            ),
            IdentityError::Codec { column, error } => {
                write!(f, "identity column {column}: {error}")
            }
        }
    }
}

impl std::error::Error for IdentityError {}

/// A relation identity checked against one Relation message: where each column sits. It
/// keeps that message: a binding is valid only for the relation description it was bound
/// against ([`BoundIdentity::is_bound_to`]); after a new Relation message, bind again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundIdentity {
    domain: Domain,
    positions: Vec<(usize, Shape, String)>,
    relation: Relation,
    /// Why the stream's old tuples cannot give this identity (`None`: they can).
    old_rows: Option<SchemaMismatch>,
}

impl RelationIdentity {
    /// The identity of a relation keyed by the SCAN_KEY the registry chose (its columns, in
    /// key order, and whether it is the primary key).
    pub fn from_scan_key(key: &ScanKey) -> RelationIdentity {
        RelationIdentity::from_schema(&key.schema, key.primary)
    }

    /// The identity of a relation from a resolved schema whose field expressions are the
    /// relation's column names (a SCAN_KEY's key columns, or every column for KEYLESS_ROW).
    /// `key_is_primary` says whether a SCAN_KEY is the primary key.
    pub fn from_schema(schema: &IdentitySchema, key_is_primary: bool) -> RelationIdentity {
        RelationIdentity {
            domain: schema.domain,
            columns: schema
                .fields
                .iter()
                .map(|f| IdentityColumn {
                    name: f.expr.clone(),
                    type_oid: f.type_oid,
                    shape: f.shape.clone(),
                })
                .collect(),
            key_is_primary,
        }
    }

    /// The identity an identity schema message carries (spec/identity-messages.md).
    pub fn from_identity_def(def: &IdentityDef) -> RelationIdentity {
        RelationIdentity {
            domain: def.domain,
            columns: def
                .fields
                .iter()
                .map(|f| IdentityColumn {
                    name: f.column.clone(),
                    type_oid: f.type_oid,
                    shape: f.shape.clone(),
                })
                .collect(),
            key_is_primary: def.primary,
        }
    }

    /// Checks the identity against a Relation message and binds column positions.
    ///
    /// A SCAN_KEY needs a replica identity whose old tuples carry exactly its key: under
    /// `default` and `index` the columns the stream flags as replica identity must be the
    /// key's columns (a key that grew, shrank or changed is refused, naming both); under
    /// `full` every column is flagged and the primary-key bits, when the stream has them,
    /// must agree. A KEYLESS_ROW needs `full` and exactly the relation's columns.
    pub fn bind(
        &self,
        relation: &Relation,
        flags: &FlagBits,
    ) -> Result<BoundIdentity, SchemaMismatch> {
        let bound = self.bind_new_rows(relation, flags)?;
        match bound.old_rows {
            Some(why) => Err(why),
            None => Ok(bound),
        }
    }

    /// As [`RelationIdentity::bind`], for a relation whose replica identity cannot give the
    /// identity of an old row (REPLICA IDENTITY NOTHING, or a KEYLESS_ROW without FULL):
    /// the binding encodes new rows (an INSERT needs no old row), and
    /// [`BoundIdentity::old_rows_unavailable`] says why old rows cannot be encoded. Every
    /// other disagreement is refused as by `bind`.
    pub fn bind_new_rows(
        &self,
        relation: &Relation,
        flags: &FlagBits,
    ) -> Result<BoundIdentity, SchemaMismatch> {
        let old_rows = match (self.domain, relation.replica_identity) {
            (_, b'n') => Some(SchemaMismatch::NoReplicaIdentity),
            (Domain::KeylessRow, ri) if ri != b'f' => Some(SchemaMismatch::KeylessNeedsFull {
                replica_identity: char::from(ri),
            }),
            _ => None,
        };
        if self.domain == Domain::KeylessRow && relation.columns.len() != self.columns.len() {
            return Err(SchemaMismatch::ColumnsDiffer);
        }
        let mut positions = Vec::with_capacity(self.columns.len());
        for col in &self.columns {
            let Some((pos, rc)) = relation
                .columns
                .iter()
                .enumerate()
                .find(|(_, c)| c.name == col.name)
            else {
                return Err(SchemaMismatch::MissingColumn {
                    column: col.name.clone(),
                });
            };
            if rc.type_oid != col.type_oid {
                return Err(SchemaMismatch::TypeChanged {
                    column: col.name.clone(),
                    expected: col.type_oid,
                    found: rc.type_oid,
                });
            }
            if self.domain == Domain::ScanKey
                && flags
                    .in_primary_key(rc)
                    .is_some_and(|pk| pk != self.key_is_primary)
            {
                return Err(SchemaMismatch::PrimaryKeyDiffers {
                    column: col.name.clone(),
                });
            }
            positions.push((pos, col.shape.clone(), col.name.clone()));
        }
        // Under NOTHING no column is flagged: there is no stream key to compare.
        if self.domain == Domain::ScanKey && old_rows.is_none() {
            self.check_key(relation, flags)?;
        }
        Ok(BoundIdentity {
            domain: self.domain,
            positions,
            relation: relation.clone(),
            old_rows,
        })
    }

    /// The stream's key (replica identity columns, or primary-key bits under FULL) is the
    /// identity's key.
    fn check_key(&self, relation: &Relation, flags: &FlagBits) -> Result<(), SchemaMismatch> {
        let in_key = |name: &str| self.columns.iter().any(|k| k.name == name);
        if relation.replica_identity != b'f' {
            let stream: Vec<&RelationColumn> = relation
                .columns
                .iter()
                .filter(|c| flags.in_replica_identity(c))
                .collect();
            if stream.len() != self.columns.len() || !stream.iter().all(|c| in_key(&c.name)) {
                return Err(SchemaMismatch::KeyDiffers {
                    schema: self.columns.iter().map(|k| k.name.clone()).collect(),
                    stream: stream.iter().map(|c| c.name.clone()).collect(),
                });
            }
        }
        if self.key_is_primary {
            // With primary-key bits, no other column may claim to be in the key either.
            let extra = relation
                .columns
                .iter()
                .find(|c| flags.in_primary_key(c) == Some(true) && !in_key(&c.name));
            if let Some(c) = extra {
                return Err(SchemaMismatch::PrimaryKeyDiffers {
                    column: c.name.clone(),
                });
            }
        }
        Ok(())
    }
}

impl BoundIdentity {
    /// The identity's domain.
    pub fn domain(&self) -> Domain {
        self.domain
    }

    /// Why the stream's old tuples cannot give this identity (`None`: they can): set only by
    /// [`RelationIdentity::bind_new_rows`].
    pub fn old_rows_unavailable(&self) -> Option<&SchemaMismatch> {
        self.old_rows.as_ref()
    }

    /// The Relation message this binding was checked against.
    pub fn relation(&self) -> &Relation {
        &self.relation
    }

    /// True when `relation` is the description this binding was checked against.
    pub fn is_bound_to(&self, relation: &Relation) -> bool {
        self.relation == *relation
    }

    /// The identity columns' names, in identity order.
    pub fn column_names(&self) -> impl Iterator<Item = &str> {
        self.positions.iter().map(|(_, _, name)| name.as_str())
    }

    /// The identity columns' positions in the relation's tuples, in identity order.
    pub fn column_positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.positions.iter().map(|(pos, _, _)| *pos)
    }

    /// Appends the identity of the row an UPDATE or DELETE removed. A KEYLESS_ROW identity
    /// needs the full old row (`'O'`): a `'K'` tuple holds NULL placeholders for the columns
    /// outside the key, which would yield an identity that matches no row.
    pub fn encode_old(&self, old: &OldTuple, out: &mut Vec<u8>) -> Result<usize, IdentityError> {
        if self.old_rows.is_some() && self.domain == Domain::KeylessRow {
            return Err(IdentityError::KeylessNeedsFullOldRow);
        }
        match old {
            OldTuple::Full(row) => self.encode(row, out),
            OldTuple::Key(_) if self.domain == Domain::KeylessRow => {
                Err(IdentityError::KeylessNeedsFullOldRow)
            }
            OldTuple::Key(row) => self.encode(row, out),
        }
    }

    /// Appends the identity of `row` (a complete new tuple, or an old `'K'`/`'O'` tuple; or
    /// any other [`RowValues`], such as a binary COPY row held in one buffer).
    pub fn encode<R: RowValues + ?Sized>(
        &self,
        row: &R,
        out: &mut Vec<u8>,
    ) -> Result<usize, IdentityError> {
        let start = out.len();
        let result = self.encode_inner(row, out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn encode_inner<R: RowValues + ?Sized>(
        &self,
        row: &R,
        out: &mut Vec<u8>,
    ) -> Result<usize, IdentityError> {
        let codec = |column: &str, error| IdentityError::Codec {
            column: column.to_string(),
            error,
        };
        let count = u32::try_from(self.positions.len()).unwrap_or(u32::MAX);
        let mut enc = IdentityEncoder::begin(out, self.domain, count).map_err(|e| codec("", e))?;
        for (pos, shape, name) in &self.positions {
            match row.value(*pos).ok_or(IdentityError::ShortTuple)? {
                ValueRef::Null => enc.null(shape.tag()).map_err(|e| codec(name, e))?,
                ValueRef::Binary(bytes) => match shape {
                    // Scalars are read in place; structures are materialised once.
                    Shape::Scalar(tag) => {
                        let value = value_from_send(*tag, bytes).map_err(|e| codec(name, e))?;
                        enc.value(&value).map_err(|e| codec(name, e))?;
                    }
                    nested => {
                        let value = owned_from_send(nested, bytes).map_err(|e| codec(name, e))?;
                        enc.value(&value.as_value()).map_err(|e| codec(name, e))?;
                    }
                },
                ValueRef::Text(_) => {
                    return Err(IdentityError::TextValue {
                        column: name.clone(),
                    });
                }
                ValueRef::UnchangedToast => {
                    return Err(IdentityError::Missing {
                        column: name.clone(),
                    });
                }
            }
        }
        enc.finish().map_err(|e| codec("", e))
    }
}

/// One value of a row, borrowed: what an identity is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueRef<'a> {
    /// SQL NULL.
    Null,
    /// An unchanged TOASTed value whose bytes were not sent.
    UnchangedToast,
    /// Text output.
    Text(&'a [u8]),
    /// The binary send form.
    Binary(&'a [u8]),
}

/// The values of a row by column position, wherever they are held: a decoded [`Tuple`], or
/// a row whose values are ranges of one buffer (a binary COPY row), which then needs no
/// handle per value.
pub trait RowValues {
    /// The value at `position`; `None` past the row's end.
    fn value(&self, position: usize) -> Option<ValueRef<'_>>;
}

impl RowValues for [Column] {
    fn value(&self, position: usize) -> Option<ValueRef<'_>> {
        Some(match self.get(position)? {
            Column::Null => ValueRef::Null,
            Column::UnchangedToast => ValueRef::UnchangedToast,
            Column::Text(t) => ValueRef::Text(t),
            Column::Binary(b) => ValueRef::Binary(b),
        })
    }
}

impl RowValues for Tuple {
    fn value(&self, position: usize) -> Option<ValueRef<'_>> {
        self.as_slice().value(position)
    }
}
