//! pgoutput messages (PostgreSQL's `logicalproto.h` / `proto.c`), decoded.

use bytes::Bytes;

/// One column of a TupleData. The four kinds stay distinct: an unchanged TOASTed value is
/// never NULL, and a value's format is never guessed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Column {
    /// `'n'`: SQL NULL (in a `'K'` tuple: "not part of the key").
    Null,
    /// `'u'`: an out-of-line TOASTed value the UPDATE did not change; its bytes are not sent.
    UnchangedToast,
    /// `'t'`: typoutput text (depends on the walsender's settings).
    Text(Bytes),
    /// `'b'`: typsend binary.
    Binary(Bytes),
}

/// A TupleData.
pub type Tuple = Vec<Column>;

/// The old row of an UPDATE or DELETE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OldTuple {
    /// `'K'`: replica identity key columns only; other slots are `Column::Null` placeholders.
    Key(Tuple),
    /// `'O'`: the whole old row (REPLICA IDENTITY FULL), de-TOASTed.
    Full(Tuple),
}

/// A column of a Relation message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationColumn {
    /// The flags byte (bit 0x01: part of the replica identity).
    pub flags: u8,
    /// Column name.
    pub name: String,
    /// `pg_type` OID.
    pub type_oid: u32,
    /// `atttypmod`.
    pub typmod: i32,
}

/// `'R'`: a relation's description, sent before its first change in a session and after DDL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relation {
    /// Relation OID.
    pub relid: u32,
    /// Schema (`""` means `pg_catalog`).
    pub namespace: String,
    /// Relation name.
    pub name: String,
    /// `'d'` default, `'n'` nothing, `'f'` full, `'i'` index.
    pub replica_identity: u8,
    /// Published columns, in stream order (not attnums).
    pub columns: Vec<RelationColumn>,
}

/// The end of a transaction: shared by Commit, Stream Commit and Commit Prepared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    /// Flags (currently unused, 0).
    pub flags: u8,
    /// LSN of the commit record.
    pub commit_lsn: u64,
    /// End LSN of the transaction.
    pub end_lsn: u64,
    /// Commit timestamp (microseconds since 2000-01-01).
    pub commit_ts: i64,
}

/// A prepared transaction: shared by Prepare and Stream Prepare (protocol 3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareInfo {
    /// Flags (currently unused, 0).
    pub flags: u8,
    /// LSN of the prepare.
    pub prepare_lsn: u64,
    /// End LSN of the prepared transaction.
    pub end_lsn: u64,
    /// Prepare timestamp.
    pub prepare_ts: i64,
    /// Transaction id.
    pub xid: u32,
    /// Global transaction identifier.
    pub gid: String,
}

/// A decoded message. `xid` fields are present only inside a streamed transaction
/// (protocol 2 and later).
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // field names follow proto.c
pub enum Message {
    Begin {
        final_lsn: u64,
        commit_ts: i64,
        xid: u32,
    },
    Commit(CommitInfo),
    Origin {
        lsn: u64,
        name: String,
    },
    Relation {
        xid: Option<u32>,
        relation: Relation,
    },
    Type {
        xid: Option<u32>,
        oid: u32,
        namespace: String,
        name: String,
    },
    Insert {
        xid: Option<u32>,
        relid: u32,
        new: Tuple,
    },
    Update {
        xid: Option<u32>,
        relid: u32,
        old: Option<OldTuple>,
        new: Tuple,
    },
    Delete {
        xid: Option<u32>,
        relid: u32,
        old: OldTuple,
    },
    Truncate {
        xid: Option<u32>,
        flags: u8,
        relids: Vec<u32>,
    },
    Message {
        xid: Option<u32>,
        transactional: bool,
        lsn: u64,
        prefix: String,
        content: Bytes,
    },
    StreamStart {
        xid: u32,
        first_segment: bool,
    },
    StreamStop,
    StreamCommit {
        xid: u32,
        commit: CommitInfo,
    },
    StreamAbort {
        xid: u32,
        subxid: u32,
        abort: Option<(u64, i64)>,
    },
    BeginPrepare {
        prepare_lsn: u64,
        end_lsn: u64,
        prepare_ts: i64,
        xid: u32,
        gid: String,
    },
    Prepare(PrepareInfo),
    CommitPrepared {
        commit: CommitInfo,
        xid: u32,
        gid: String,
    },
    RollbackPrepared {
        flags: u8,
        prepare_end_lsn: u64,
        rollback_end_lsn: u64,
        prepare_ts: i64,
        rollback_ts: i64,
        xid: u32,
        gid: String,
    },
    StreamPrepare(PrepareInfo),
}
