//! The pgoutput messages that carry identity schemas (spec/identity-messages.md format 2):
//! the Relation message of `pgtrickle.identity_schemas` and the changes of its rows, as a
//! walsender sends them with `binary 'true'`. The inverse of what [`crate::capture`] reads:
//! tests and the fuzz target build streams with it.

use bytes::Bytes;
use rowid_pgoutput::{Column, Message, OldTuple, Relation, RelationColumn};
use rowid_registry::schema_message::{
    IDENTITY_COLUMNS, IDENTITY_TABLE, RelationSchema, SchemaMessage,
};

/// `pg_type` OIDs of the table's columns: `oid`, `oid`, `text`.
const TYPES: [u32; 3] = [26, 26, 25];

/// The Relation message of the identity schema table whose OID is `table`.
pub fn relation(table: u32) -> Message {
    Message::Relation {
        xid: None,
        relation: Relation {
            relid: table,
            namespace: IDENTITY_TABLE.0.into(),
            name: IDENTITY_TABLE.1.into(),
            replica_identity: b'd',
            columns: IDENTITY_COLUMNS
                .iter()
                .zip(TYPES)
                .enumerate()
                .map(|(i, (name, type_oid))| RelationColumn {
                    // relid is the primary key, the replica identity.
                    flags: u8::from(i == 0),
                    name: (*name).into(),
                    type_oid,
                    typmod: -1,
                })
                .collect(),
        },
    }
}

fn oid(v: u32) -> Column {
    Column::Binary(Bytes::copy_from_slice(&v.to_be_bytes()))
}

/// The row the event trigger writes for `schema` (an INSERT; its UPDATE carries the same new
/// tuple).
pub fn upsert(table: u32, schema: &RelationSchema) -> Message {
    Message::Insert {
        xid: None,
        relid: table,
        new: vec![
            oid(schema.relid),
            Column::Null,
            Column::Binary(Bytes::from(
                SchemaMessage::Schema(schema.clone()).to_json().to_string(),
            )),
        ],
    }
}

/// A row whose content is `content` as it stands (for malformed rows).
pub fn raw(table: u32, relid: u32, content: &[u8]) -> Message {
    Message::Insert {
        xid: None,
        relid: table,
        new: vec![
            oid(relid),
            Column::Null,
            Column::Binary(Bytes::copy_from_slice(content)),
        ],
    }
}

/// The DELETE of relation `relid`'s row: it was dropped.
pub fn dropped(table: u32, relid: u32) -> Message {
    Message::Delete {
        xid: None,
        relid: table,
        old: OldTuple::Key(vec![oid(relid), Column::Null, Column::Null]),
    }
}
