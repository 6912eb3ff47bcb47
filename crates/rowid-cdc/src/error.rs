//! Why capture stopped. Every error names the relation, the key and the LSN it concerns;
//! none carries identity bytes (design proposal §11.1).

use std::fmt;

use rowid_pgoutput::{DecodeError, IdentityError, IncompleteAfterImage, SchemaMismatch};

use crate::lsn::Lsn;
use rowid_registry::schema_message::{Refusal, SchemaMessageError};

/// What stopped capture. Nothing of the transaction it happened in has been committed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaptureError {
    /// A pgoutput message could not be decoded.
    Decode {
        /// LSN of the message.
        lsn: Lsn,
        /// The decoder's error.
        error: DecodeError,
    },
    /// The stream broke the protocol's order (a change outside a transaction, a second
    /// Begin, a change for a relation never described, ...).
    Protocol {
        /// LSN of the message.
        lsn: Lsn,
        /// What was out of order.
        detail: String,
    },
    /// A message this consumer does not handle (streamed or two-phase transactions under
    /// protocol 1 cannot occur; they mean the replication options are not the ones asked).
    Unsupported {
        /// LSN of the message.
        lsn: Lsn,
        /// Which message.
        message: &'static str,
    },
    /// An identity schema message is malformed.
    SchemaMessage {
        /// LSN of the message.
        lsn: Lsn,
        /// What is wrong with it.
        error: SchemaMessageError,
    },
    /// A change arrived for a relation without an identity schema.
    NoSchema {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name` from the Relation message.
        relation: String,
        /// `pg_class.oid`.
        relid: u32,
    },
    /// The relation's identity schema says it has no usable identity.
    NoIdentity {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name`.
        relation: String,
        /// The registry's rejection.
        refusal: Refusal,
    },
    /// The stream's description of the relation disagrees with its identity schema.
    Schema {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name`.
        relation: String,
        /// What disagrees.
        mismatch: SchemaMismatch,
    },
    /// The stream's replica identity setting differs from the identity schema's.
    ReplicaIdentityDiffers {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name`.
        relation: String,
        /// The schema's setting.
        schema: &'static str,
        /// The Relation message's setting.
        stream: &'static str,
    },
    /// A row gave no identity.
    Identity {
        /// LSN of the change.
        lsn: Lsn,
        /// `schema.name`.
        relation: String,
        /// Why.
        error: IdentityError,
    },
    /// An UPDATE's after-image lacks identity columns that the stream did not carry.
    Incomplete {
        /// LSN of the change.
        lsn: Lsn,
        /// Which columns.
        error: IncompleteAfterImage,
    },
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Decode { lsn, error } => {
                write!(f, "at {lsn}: malformed pgoutput message: {error}")
            }
            CaptureError::Protocol { lsn, detail } => {
                write!(f, "at {lsn}: replication stream out of order: {detail}")
            }
            CaptureError::Unsupported { lsn, message } => write!(
                f,
                "at {lsn}: {message} message: streamed and two-phase transactions are not \
                 consumed (replication runs with proto_version 1)"
            ),
            CaptureError::SchemaMessage { lsn, error } => write!(f, "at {lsn}: {error}"),
            CaptureError::NoSchema {
                lsn,
                relation,
                relid,
            } => write!(
                f,
                "at {lsn}: no identity schema for {relation} (OID {relid}): it was not in the \
                 snapshot or state, and no identity message described it; run \
                 SELECT pgtrickle.enable_identity_messages() before publishing new tables"
            ),
            CaptureError::NoIdentity {
                lsn,
                relation,
                refusal,
            } => write!(
                f,
                "at {lsn}: {relation} has no usable identity ({}): {}",
                refusal.sqlstate, refusal.message
            ),
            CaptureError::Schema {
                lsn,
                relation,
                mismatch,
            } => write!(f, "at {lsn}: {relation}: {mismatch}"),
            CaptureError::ReplicaIdentityDiffers {
                lsn,
                relation,
                schema,
                stream,
            } => write!(
                f,
                "at {lsn}: {relation}: the identity schema says REPLICA IDENTITY {schema}, the \
                 stream says {stream}"
            ),
            CaptureError::Identity {
                lsn,
                relation,
                error,
            } => write!(f, "at {lsn}: {relation}: {error}"),
            CaptureError::Incomplete { lsn, error } => write!(f, "at {lsn}: {error}"),
        }
    }
}

impl std::error::Error for CaptureError {}
