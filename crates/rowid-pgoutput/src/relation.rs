//! The relation cache and the meaning of the per-column flags byte.

use std::collections::HashMap;

use crate::message::{Relation, RelationColumn};

/// Bit 0x01 of a Relation column's flags: part of the replica identity (every released
/// PostgreSQL). Under REPLICA IDENTITY FULL every column carries it.
pub const FLAG_REPLICA_IDENTITY: u8 = 0x01;

/// Which flag bits mean what. Only the replica-identity bit exists in released PostgreSQL;
/// a proposal to PostgreSQL adds opt-in primary-key and NOT NULL bits whose values are
/// not assigned yet, so they are configuration. Unknown bits are tolerated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlagBits {
    /// Replica identity membership (0x01).
    pub replica_identity: u8,
    /// Primary-key membership, when the server is asked for it.
    pub primary_key: Option<u8>,
    /// NOT NULL, when the server is asked for it.
    pub not_null: Option<u8>,
}

impl Default for FlagBits {
    fn default() -> Self {
        FlagBits {
            replica_identity: FLAG_REPLICA_IDENTITY,
            primary_key: None,
            not_null: None,
        }
    }
}

impl FlagBits {
    /// Whether `column` is part of the replica identity.
    pub fn in_replica_identity(&self, column: &RelationColumn) -> bool {
        column.flags & self.replica_identity != 0
    }

    /// Primary-key membership: `None` when the stream does not carry that bit.
    pub fn in_primary_key(&self, column: &RelationColumn) -> Option<bool> {
        self.primary_key.map(|bit| column.flags & bit != 0)
    }

    /// NOT NULL: `None` when the stream does not carry that bit.
    pub fn not_null(&self, column: &RelationColumn) -> Option<bool> {
        self.not_null.map(|bit| column.flags & bit != 0)
    }
}

/// Relations by OID; a new Relation message replaces the previous description.
#[derive(Clone, Debug, Default)]
pub struct RelationCache {
    relations: HashMap<u32, Relation>,
}

impl RelationCache {
    /// Records (or replaces) a relation's description.
    pub fn apply(&mut self, relation: Relation) {
        self.relations.insert(relation.relid, relation);
    }

    /// The current description of `relid`.
    pub fn get(&self, relid: u32) -> Option<&Relation> {
        self.relations.get(&relid)
    }
}
